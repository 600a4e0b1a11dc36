//! The floe agent: a stateless Kafka-compatible broker.

pub mod admin;
pub mod authorizer;
pub mod batcher;
pub mod broker;
pub mod budget;
pub mod cache_ring;
pub mod compaction;
pub mod config;
pub mod discovery;
pub mod extent_cache;
pub mod frames;
pub mod handlers;
pub mod metrics;
pub mod quotas;
pub mod read;
pub mod sasl;
pub mod scram;
pub mod server;
pub mod ssl_principal;
pub mod telemetry;
pub mod tls;
pub mod tools;
pub mod topic_cache;
pub mod txn_coordinator;
pub mod txn_timeouts;
pub mod watermarks;
