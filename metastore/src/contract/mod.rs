//! The metastore's contract: what an agent, a compactor or a tool may ask
//! of any metastore, and what each answer is. The operations and their
//! table ([`api`]), their request and answer types ([`ops`], [`types`] and
//! the domains' messages), the remote client ([`client`]) and the frames it
//! shares with the server ([`wire`]).
//!
//! Nothing here names the state machine, its log or Raft (the module-graph
//! check in `scripts/rooms.py` holds it to that): a node answers the
//! contract (`crate::sequencer`), a client sends it.

pub mod acls;
pub mod agents;
pub mod api;
pub mod backup;
pub mod client;
pub mod dynamic_config;
pub mod groups;
pub mod merge_policy;
pub mod ops;
pub mod peer_auth;
pub mod peers;
pub mod push;
pub mod quorum;
pub mod quotas;
pub mod scram;
pub mod share_config;
pub mod shares;
pub mod topic_config;
pub mod txn;
pub mod types;
pub mod wire;
