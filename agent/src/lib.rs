//! The floe agent: a stateless Kafka-compatible broker.

pub mod admin;
pub mod agent;
pub mod broker;
pub mod cluster;
pub mod config;
pub mod handlers;
pub mod jobs;
pub mod limits;
pub mod metrics;
pub mod net;
pub mod read;
pub mod refresher;
pub mod security;
pub mod server;
pub mod tasks;
pub mod telemetry;
#[cfg(test)]
mod testing;
pub mod world;
pub mod write;
