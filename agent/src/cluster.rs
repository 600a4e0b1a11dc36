//! The agent among the others: being found (discovery) and the zone's cache ring.

pub mod cache_ring;
pub mod discovery;
