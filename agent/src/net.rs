//! The Kafka wire beneath the requests: frames read under a budget, the order a connection's requests take effect in, listeners and their TLS.

pub mod frames;
pub mod listeners;
pub mod order;
pub mod tls;
