//! Where each agent serves its cached blocks to the others of its zone (the
//! per-zone cache ring, see `floe-cache`).
//!
//! Soft state, as group heartbeats are: the leader keeps it in memory only,
//! never in the log. Agents announce themselves every few seconds and are
//! forgotten [`PEER_TTL_MS`] after their last announcement, so a new leader
//! knows every live agent again within one announcement interval; until
//! then agents read around the peers it has not heard of yet (a cache miss
//! more, never a wrong answer).

use std::collections::BTreeMap;
use std::sync::Mutex;

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

/// The leader's memory of announcements: each peer, by address, and when
/// (on the leader's clock) it was last heard. Keyed by address, not node
/// id: agents behind a load balancer may all be broker 0.
#[derive(Debug, Default)]
pub struct PeerBook {
    heard: Mutex<BTreeMap<String, (CachePeer, i64)>>,
}

impl PeerBook {
    /// Remembers `announce` (when it is well-formed and there is room) and
    /// lists the peers heard within [`PEER_TTL_MS`] of `now_ms`.
    pub fn announce(&self, announce: Option<CachePeer>, now_ms: i64) -> Vec<CachePeer> {
        let mut heard = self.heard.lock().expect("peer book poisoned");
        heard.retain(|_, (_, at)| now_ms - *at < PEER_TTL_MS);
        if let Some(peer) = announce {
            // A host and port, nothing a URL could read otherwise (agents
            // check the form again before they dial).
            let plain = |s: &str| {
                s.bytes().all(|b| {
                    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']')
                })
            };
            let well_formed = peer.address.len() <= MAX_PEER_FIELD
                && plain(&peer.address)
                && peer.zone.as_ref().is_none_or(|z| z.len() <= MAX_PEER_FIELD);
            let room = heard.len() < MAX_PEERS || heard.contains_key(&peer.address);
            if well_formed && room {
                heard.insert(peer.address.clone(), (peer, now_ms));
            } else {
                tracing::warn!(
                    node = peer.node_id,
                    "cache peer not remembered: too long a name or too many peers"
                );
            }
        }
        heard.values().map(|(peer, _)| peer.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(node_id: i32) -> CachePeer {
        CachePeer {
            node_id,
            zone: Some("a".into()),
            address: format!("10.0.0.{node_id}:9644"),
        }
    }

    #[test]
    fn peers_are_listed_until_they_go_quiet() {
        let book = PeerBook::default();
        assert_eq!(book.announce(Some(peer(1)), 0), vec![peer(1)]);
        assert_eq!(book.announce(Some(peer(2)), 10_000), vec![peer(1), peer(2)]);
        assert_eq!(book.announce(None, PEER_TTL_MS + 1), vec![peer(2)]);
        let long = CachePeer {
            address: "x".repeat(MAX_PEER_FIELD + 1),
            ..peer(3)
        };
        assert_eq!(book.announce(Some(long), PEER_TTL_MS + 2), vec![peer(2)]);
        let url = CachePeer {
            address: "10.0.0.9/latest?x=:80".into(),
            ..peer(4)
        };
        assert_eq!(book.announce(Some(url), PEER_TTL_MS + 3), vec![peer(2)]);
    }
}
