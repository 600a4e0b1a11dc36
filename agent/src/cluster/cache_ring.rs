//! This agent's place in its zone's cache ring (see `floe-cache`): it
//! announces where it serves blocks and learns where the others do, through
//! the metastore's leader, every [`ANNOUNCE_EVERY`].

use std::sync::Arc;
use std::time::Duration;

use floe_cache::{BlockCache, Member, Ring};
use floe_metastore::{CachePeer, Metastore};

use crate::config::Config;
use crate::config::Discovery;

/// How often the agent announces itself and refreshes the ring. The
/// metastore forgets an agent `PEER_TTL_MS` (15 s) after its last.
pub const ANNOUNCE_EVERY: Duration = Duration::from_secs(2);

/// Where the other agents reach this one's blocks: `cache_advertise`, or
/// the admin port's own address when it listens on one interface, or (when
/// it listens on all) the host clients reach this agent at: the advertised
/// host, or the listen address behind a load balancer (whose address is the
/// one clients are given). `None`, with a warning, when no peer could dial
/// the result: a wildcard, or an admin port on loopback while clients are
/// sent elsewhere.
/// (`listen_ip` is the agent's first Kafka listener's bind address.)
pub fn address(
    config: &Config,
    advertised_host: &str,
    listen_ip: std::net::IpAddr,
    admin_port: u16,
) -> Option<String> {
    let off = |why: &str| {
        tracing::warn!(
            "the cache ring is off: {why}; set cache_advertise to the host:port other agents reach this one's admin port at"
        );
        None
    };
    if let Some(address) = &config.cache_advertise {
        return match floe_cache::peer::valid_address(address) {
            true => Some(address.clone()),
            false => off("cache_advertise is not host:port"),
        };
    }
    let admin = config.admin_listen.ip();
    let host = if !admin.is_unspecified() {
        let others_elsewhere = advertised_host
            .parse::<std::net::IpAddr>()
            .map_or(true, |ip| !ip.is_loopback());
        if admin.is_loopback() && others_elsewhere {
            return off("the admin port listens on loopback only");
        }
        admin.to_string()
    } else {
        match config.discovery {
            Discovery::SelfAdvertise => advertised_host.to_string(),
            Discovery::LoadBalancer => listen_ip.to_string(),
        }
    };
    if host
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified())
    {
        return off("no address other agents can dial");
    }
    let host = match host.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V6(v6)) => format!("[{v6}]"),
        _ => host,
    };
    let address = format!("{host}:{admin_port}");
    match floe_cache::peer::valid_address(&address) {
        true => Some(address),
        false => off("the admin address is not host:port"),
    }
}

/// The ring of `me`'s zone among `peers` (`me` always in it).
pub fn ring_of(me: &CachePeer, peers: &[CachePeer]) -> Ring {
    let mut members: Vec<Member> = peers
        .iter()
        .filter(|p| p.zone == me.zone && p.address != me.address)
        // Whatever the metastore was told, only a host and port is dialled.
        .filter(|p| floe_cache::peer::valid_address(&p.address))
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
pub async fn run(meta: Arc<dyn Metastore>, cache: Arc<BlockCache>, me: CachePeer) {
    let mut tick = tokio::time::interval(ANNOUNCE_EVERY);
    let mut members = 0;
    let mut warned = false;
    loop {
        tick.tick().await;
        match meta.cache_peers(Some(me.clone())).await {
            Ok(peers) => {
                warned = false;
                let ring = ring_of(&me, &peers);
                if ring.members().len() != members {
                    members = ring.members().len();
                    tracing::info!(members, zone = ?me.zone, "cache ring changed");
                }
                cache.set_ring(ring);
            }
            // Said once (a metastore too old to know the request says it
            // every time), then at debug level.
            Err(e) if !warned => {
                warned = true;
                tracing::warn!(error = %e, "cache ring: announcing failed; the last ring stays");
            }
            Err(e) => tracing::debug!(error = %e, "cache ring: announcing failed"),
        }
    }
}

/// Block requests between agents signed with the metastore's cluster
/// secret: an owner serves only agents of its cluster. The signature covers
/// the query (object, block, deadline); a recorded request replays only the
/// same block, which its recorder has already seen.
pub struct SignedBlocks(pub floe_metastore::peer_auth::ClusterSecret);

const BLOCK_CONTEXT: &[u8] = b"floe-block-request ";

impl floe_cache::peer::PeerAuth for SignedBlocks {
    fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.0.sign(BLOCK_CONTEXT, message)
    }

    fn verify(&self, message: &[u8], tag: &[u8]) -> bool {
        self.0.verify_signed(BLOCK_CONTEXT, message, tag)
    }
}

/// The block cache's sizes, as configured, and its peers' proof: the
/// metastore's cluster secret, when there is one.
pub fn options(config: &Config) -> anyhow::Result<floe_cache::CacheOptions> {
    let secret = match &config.metastore_secret_file {
        Some(path) => {
            Some(floe_metastore::peer_auth::ClusterSecret::load(path).map_err(anyhow::Error::msg)?)
        }
        None => None,
    };
    Ok(floe_cache::CacheOptions {
        memory_bytes: config.cache_bytes.as_u64() as usize,
        disk: config
            .cache_disk_dir
            .clone()
            .map(|dir| (dir, config.cache_disk_bytes.as_u64())),
        catch_up_bytes: config.cache_catch_up_bytes.as_u64() as usize,
        block_bytes: config.cache_block_bytes.as_u64(),
        peer_timeout: config.cache_peer_timeout,
        peer_auth: secret.map(|s| Arc::new(SignedBlocks(s)) as Arc<dyn floe_cache::peer::PeerAuth>),
    })
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
    fn the_address_is_one_peers_can_dial() {
        let mut c = Config::default();
        // Default: admin on loopback, clients told 127.0.0.1 (one host).
        assert_eq!(
            address(&c, "127.0.0.1", c.listen.ip(), 9644).as_deref(),
            Some("127.0.0.1:9644")
        );
        // Admin on loopback, clients sent to another host: peers cannot dial it.
        assert_eq!(address(&c, "10.0.0.5", c.listen.ip(), 9644), None);
        c.admin_listen = "0.0.0.0:9644".parse().unwrap();
        assert_eq!(
            address(&c, "10.0.0.5", c.listen.ip(), 9644).as_deref(),
            Some("10.0.0.5:9644")
        );
        assert_eq!(address(&c, "0.0.0.0", c.listen.ip(), 9644), None);
        c.admin_listen = "10.0.0.7:9644".parse().unwrap();
        assert_eq!(
            address(&c, "10.0.0.5", c.listen.ip(), 9644).as_deref(),
            Some("10.0.0.7:9644")
        );
        c.admin_listen = "[::]:9644".parse().unwrap();
        assert_eq!(
            address(&c, "fd00::5", c.listen.ip(), 1).as_deref(),
            Some("[fd00::5]:1")
        );
        c.cache_advertise = Some("cache.internal:9700".into());
        assert_eq!(
            address(&c, "x", c.listen.ip(), 1).as_deref(),
            Some("cache.internal:9700")
        );
        c.cache_advertise = Some("http://evil/?".into());
        assert_eq!(address(&c, "x", c.listen.ip(), 1), None);
    }

    #[test]
    fn the_ring_holds_this_zone_and_this_agent() {
        let me = peer(1, "a");
        let bad = CachePeer {
            address: "169.254.169.254/latest?:80".into(),
            ..peer(5, "a")
        };
        let ring = ring_of(&me, &[peer(2, "a"), peer(3, "b"), peer(4, "a"), bad]);
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
