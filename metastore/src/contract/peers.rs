//! Where each agent serves its cached blocks to the others of its zone (the
//! per-zone cache ring, see `floe-cache`).
//!
//! Soft state, as group heartbeats are: the leader keeps it in memory only,
//! never in the log. Agents announce themselves every few seconds and are
//! forgotten [`PEER_TTL_MS`] after their last announcement, so a new leader
//! knows every live agent again within one announcement interval; until
//! then agents read around the peers it has not heard of yet (a cache miss
//! more, never a wrong answer).

use serde::{Deserialize, Serialize};

/// An agent's address for blocks, and its zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachePeer {
    pub node_id: i32,
    pub zone: Option<String>,
    /// `host:port` of its admin HTTP port.
    pub address: String,
}

/// Announces one agent (if any) and lists the agents heard from lately.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachePeers {
    pub announce: Option<CachePeer>,
}

/// Agents not heard from for this long are left out of the ring.
pub const PEER_TTL_MS: i64 = 15_000;
/// Most agents remembered; bounds the leader's memory.
pub const MAX_PEERS: usize = 10_000;
/// Longest address or zone name remembered.
pub const MAX_PEER_FIELD: usize = 256;
