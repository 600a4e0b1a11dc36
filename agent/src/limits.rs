//! What bounds the agent's work: memory for responses in flight, and client quotas.

pub mod budget;
pub mod quotas;
