//! This agent's place in its zone's cache ring (see `floe-cache`): it
//! announces where it serves blocks and learns where the others do, through
//! the metastore's leader, every [`ANNOUNCE_EVERY`].

use std::sync::Arc;
use std::time::Duration;

use floe_cache::{Member, Ring};
use floe_metastore::CachePeer;

use crate::broker::Broker;
use crate::config::Config;
use crate::discovery::Discovery;

/// How often the agent announces itself and refreshes the ring. The
/// metastore forgets an agent three announcements after its last.
pub const ANNOUNCE_EVERY: Duration = Duration::from_secs(2);

/// Where the other agents reach this one's blocks: `cache_advertise`, or
/// the host clients are given (the listen address behind a load balancer,
/// whose address is the one clients are given) with the admin port. `None`
/// (with a warning) when that host is a wildcard no peer can dial.
pub fn address(config: &Config, advertised_host: &str, admin_port: u16) -> Option<String> {
    if let Some(address) = &config.cache_advertise {
        return Some(address.clone());
    }
    let host = match config.discovery {
        Discovery::SelfAdvertise => advertised_host.to_string(),
        Discovery::LoadBalancer => config.listen.ip().to_string(),
    };
    let wildcard = host
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified());
    if wildcard {
        tracing::warn!(
            "the cache ring is off: set cache_advertise to the host:port other agents reach this one's admin port at"
        );
        return None;
    }
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host
    };
    Some(format!("{host}:{admin_port}"))
}

/// The ring of `me`'s zone among `peers` (`me` always in it).
pub fn ring_of(me: &CachePeer, peers: &[CachePeer]) -> Ring {
    let mut members: Vec<Member> = peers
        .iter()
        .filter(|p| p.zone == me.zone && p.address != me.address)
        .map(|p| Member {
            address: p.address.clone(),
            local: false,
        })
        .collect();
    members.push(Member {
        address: me.address.clone(),
        local: true,
    });
    Ring::new(members)
}

/// Announces `me` and keeps the cache's ring up to date, for ever. When the
/// metastore does not answer, the last ring stays (an owner that is gone is
/// read around, see `floe_cache::peer`).
pub async fn run(broker: Arc<Broker>, me: CachePeer) {
    let mut tick = tokio::time::interval(ANNOUNCE_EVERY);
    let mut members = 0;
    loop {
        tick.tick().await;
        match broker.meta.cache_peers(Some(me.clone())).await {
            Ok(peers) => {
                let ring = ring_of(&me, &peers);
                if ring.members().len() != members {
                    members = ring.members().len();
                    tracing::info!(members, zone = ?me.zone, "cache ring changed");
                }
                broker.cache.set_ring(ring);
            }
            Err(e) => tracing::debug!(error = %e, "cache ring: announcing failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(n: i32, zone: &str) -> CachePeer {
        CachePeer {
            node_id: n,
            zone: Some(zone.into()),
            address: format!("10.0.0.{n}:9644"),
        }
    }

    #[test]
    fn the_ring_holds_this_zone_and_this_agent() {
        let me = peer(1, "a");
        let ring = ring_of(&me, &[peer(2, "a"), peer(3, "b"), peer(4, "a")]);
        let members: Vec<(&str, bool)> = ring
            .members()
            .iter()
            .map(|m| (m.address.as_str(), m.local))
            .collect();
        assert_eq!(
            members,
            [
                ("10.0.0.1:9644", true),
                ("10.0.0.2:9644", false),
                ("10.0.0.4:9644", false)
            ]
        );
        assert_eq!(ring_of(&me, &[]).members().len(), 1);
        assert_eq!(ring_of(&me, std::slice::from_ref(&me)).members().len(), 1);
    }
}
