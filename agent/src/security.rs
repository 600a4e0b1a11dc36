//! Who a client is and what it may do: SASL (PLAIN, SCRAM, OAUTHBEARER), certificates' principals, and the ACLs' decisions.

pub mod authorizer;
pub mod oauthbearer;
pub mod sasl;
pub mod scram;
pub mod ssl_principal;
