//! The agent among the others: the cluster it belongs to (identity), being
//! found (discovery) and the zone's cache ring.

pub mod cache_ring;
pub mod discovery;
pub mod identity;
