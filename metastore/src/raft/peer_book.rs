//! The leader's memory of the agents' cache addresses (see
//! `crate::contract::peers`): soft state, never in the log.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::contract::peers::*;

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
