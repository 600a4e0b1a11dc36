//! How clients find agents.
//!
//! - `self` (default): every agent registers its listeners' addresses and
//!   its zone in the metastore and heartbeats. Metadata lists the live
//!   agents, at their addresses on the listener the client came in on (see
//!   [`crate::net::listeners`]) — only those in
//!   the client's zone when its `client.id` contains `floe_az=<zone>` — and
//!   names one of them, picked by hashing the client id and host, leader of every
//!   partition, so a client's Produce carries all its partitions in one request.
//! - `load-balancer`: every agent advertises the one address of a load
//!   balancer in front of them all, as a single broker.

use std::sync::Arc;
use std::time::Duration;

use floe_metastore::agents::ListenerEndpoint;
use floe_metastore::{AgentInfo, Metastore};

use crate::config::Config;
use crate::net::listeners::Listener;
use crate::world::World;

pub use crate::config::Discovery;

/// The zone a client names with `floe_az=<zone>` anywhere in its client id.
pub fn client_zone(client_id: &str) -> Option<&str> {
    let start = client_id.find("floe_az=")? + "floe_az=".len();
    let rest = &client_id[start..];
    let end = rest.find([',', ';', ' ', '&']).unwrap_or(rest.len());
    Some(&rest[..end]).filter(|z| !z.is_empty())
}

/// What names a client when agents pick one to lead its partitions: its
/// client id and its host. Clients with a default id (`rdkafka`,
/// `producer-1`) on different hosts spread over the agents; one client's
/// connections all get the same answer (its address's port would move its
/// partitions to another agent at each metadata refresh).
pub fn client_key(client_id: &str, peer: std::net::IpAddr) -> String {
    format!("{client_id}@{peer}")
}

/// A stable choice of one of `n` for `key`: every agent picks the same.
pub fn pick(key: &str, n: usize) -> usize {
    // A specified hash (CRC32C), so agents built by different toolchains
    // agree during a rolling upgrade; std's DefaultHasher may change.
    (crc32c::crc32c(key.as_bytes()) as u64 % n.max(1) as u64) as usize
}

/// Whether this agent (`me`) is the coordinator FindCoordinator names for
/// `key` among the agents a client sees. ListGroups and ListTransactions
/// answer only such keys: clients ask every broker and concatenate the
/// answers (Java's, librdkafka's, kafka-python's and kafkajs's admin
/// clients all do), so each key is listed once, by its coordinator, as in
/// Kafka. While agents disagree on who is live a key may be listed twice or
/// not at all, as during a coordinator move in Kafka.
pub fn coordinates(agents: &[Endpoint], me: i32, key: &str) -> bool {
    agents.is_empty() || agents[pick(key, agents.len())].node_id == me
}

/// A broker as Metadata and FindCoordinator describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// This agent as a broker, to clients of `listener`.
fn me(config: &Config, listener: &Listener) -> Endpoint {
    Endpoint {
        node_id: config.node_id,
        host: listener.advertised_host.clone(),
        port: listener.advertised_port,
    }
}

/// The agents a client of `listener` should see, ordered by node id (never
/// empty): only this one when the metastore cannot list them.
pub async fn visible(
    meta: &dyn Metastore,
    config: &Config,
    listener: &Listener,
    client_id: &str,
) -> Vec<Endpoint> {
    match known_visible(meta, config, listener, client_id).await {
        Ok(agents) => agents,
        Err(e) => {
            tracing::warn!(error = %e, "listing agents failed; advertising only this one");
            vec![me(config, listener)]
        }
    }
}

/// As [`visible`], or the metastore's error when it cannot list the agents
/// (what ListGroups answers then, rather than listing every group here as
/// if this agent were the only one).
pub async fn known_visible(
    meta: &dyn Metastore,
    config: &Config,
    listener: &Listener,
    client_id: &str,
) -> Result<Vec<Endpoint>, floe_metastore::MetaError> {
    let me = me(config, listener);
    if config.discovery == Discovery::LoadBalancer {
        return Ok(vec![me]);
    }
    let agents = meta
        .agents_on(&listener.name, listener.protocol.name())
        .await?;
    // Ages come from the metastore's clock: this agent's own clock may differ.
    let ttl = config.agent_ttl.as_millis() as i64;
    let live: Vec<&AgentInfo> = agents
        .iter()
        .filter(|a| a.node_id == me.node_id || a.age_ms <= ttl)
        .collect();
    let in_zone: Vec<&AgentInfo> = match client_zone(client_id) {
        Some(zone) => live
            .iter()
            .copied()
            .filter(|a| a.zone.as_deref() == Some(zone))
            .collect(),
        None => Vec::new(),
    };
    let chosen = if in_zone.is_empty() { live } else { in_zone };
    let mut endpoints: Vec<Endpoint> = chosen
        .into_iter()
        .map(|a| Endpoint {
            node_id: a.node_id,
            host: a.host.clone(),
            port: a.port,
        })
        .collect();
    if endpoints.is_empty() {
        endpoints.push(me);
    }
    Ok(endpoints)
}

/// Registers this agent (self mode) with its listeners, the first its own
/// address, and returns its node id.
pub async fn register(
    meta: &dyn Metastore,
    world: &World,
    listeners: Vec<ListenerEndpoint>,
    zone: Option<String>,
) -> Result<i32, floe_metastore::MetaError> {
    let (host, port) = (listeners[0].host.clone(), listeners[0].port);
    meta.register_agent_listeners(host, port, zone, listeners, world.now_ms())
        .await
}

/// Heartbeats every `ttl / 4`, re-registering if the metastore forgot us.
pub async fn heartbeat(
    meta: Arc<dyn Metastore>,
    world: World,
    node_id: i32,
    listeners: Vec<ListenerEndpoint>,
    zone: Option<String>,
    ttl: Duration,
) {
    let mut tick = tokio::time::interval((ttl / 4).max(Duration::from_millis(100)));
    loop {
        tick.tick().await;
        match meta.agent_heartbeat(node_id, world.now_ms()).await {
            Ok(true) => {}
            Ok(false) => {
                if let Err(e) = register(&*meta, &world, listeners.clone(), zone.clone()).await {
                    tracing::warn!(error = %e, "re-registering failed");
                }
            }
            Err(e) => tracing::warn!(error = %e, "agent heartbeat failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_named_clients_on_different_hosts_spread_over_agents() {
        let picked: std::collections::HashSet<usize> = (1..=50u8)
            .map(|host| {
                let ip = std::net::IpAddr::from([10, 0, 0, host]);
                pick(&client_key("rdkafka", ip), 4)
            })
            .collect();
        assert_eq!(picked.len(), 4, "50 hosts named rdkafka reach every agent");
        let ip = std::net::IpAddr::from([10, 0, 0, 1]);
        assert_eq!(
            pick(&client_key("rdkafka", ip), 4),
            pick(&client_key("rdkafka", ip), 4),
            "one client, one answer"
        );
    }

    #[test]
    fn zones_are_read_from_client_ids() {
        assert_eq!(client_zone("app,floe_az=us-east-1a"), Some("us-east-1a"));
        assert_eq!(client_zone("floe_az=b;other"), Some("b"));
        assert_eq!(client_zone("floe_az="), None);
        assert_eq!(client_zone("rdkafka"), None);
    }

    #[test]
    fn picks_are_stable_and_spread() {
        assert_eq!(pick("client-1", 3), pick("client-1", 3));
        let spread: std::collections::HashSet<usize> =
            (0..100).map(|i| pick(&format!("c{i}"), 3)).collect();
        assert_eq!(spread.len(), 3);
        assert_eq!(pick("x", 0), 0);
        // Pinned: a different answer means agents of two builds would send
        // one group to two coordinators.
        assert_eq!((pick("group-a", 7), pick("group-a", 3)), (6, 0));
    }
}
