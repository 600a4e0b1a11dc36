//! The agents the metastore knows: each one's node id, address, zone and
//! listeners, and when it was last heard from (a part of the state).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::contract::agents::*;

/// Agents not heard from for this long are forgotten on the next registration.
const FORGET_AFTER_MS: i64 = 3_600_000;

/// Every registered agent, by node id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agents {
    by_node: BTreeMap<i32, AgentInfo>,
    next_node_id: i32,
    /// Each agent's listeners, first the one its `host:port` is. An agent
    /// missing here registered before agents had several (format 10): it
    /// has one listener, of a name it never said.
    #[serde(default)]
    listeners: BTreeMap<i32, Vec<ListenerEndpoint>>,
}

impl Agents {
    /// Registers (or re-registers) the agent at `host:port`; the same address
    /// keeps its node id across restarts. Returns the node id.
    /// `listeners`, when given, are its advertised listeners (the first at
    /// `host:port`); an agent registering without them has one listener
    /// whose name it does not say.
    pub fn register(
        &mut self,
        host: String,
        port: i32,
        zone: Option<String>,
        listeners: Option<Vec<ListenerEndpoint>>,
        now_ms: i64,
    ) -> i32 {
        self.by_node.retain(|_, a| {
            now_ms - a.last_seen_ms < FORGET_AFTER_MS || (a.host == host && a.port == port)
        });
        let by_node = &self.by_node;
        self.listeners.retain(|node, _| by_node.contains_key(node));
        let node_id = match self
            .by_node
            .values()
            .find(|a| a.host == host && a.port == port)
        {
            Some(a) => a.node_id,
            None => {
                let id = self.next_node_id;
                self.next_node_id += 1;
                id
            }
        };
        self.by_node.insert(
            node_id,
            AgentInfo {
                node_id,
                host,
                port,
                zone,
                last_seen_ms: now_ms,
                age_ms: 0,
            },
        );
        match listeners {
            Some(listeners) => self.listeners.insert(node_id, listeners),
            None => self.listeners.remove(&node_id),
        };
        node_id
    }

    /// Records that `node_id` is alive; false if it is not registered.
    pub fn heartbeat(&mut self, node_id: i32, now_ms: i64) -> bool {
        match self.by_node.get_mut(&node_id) {
            Some(a) => {
                a.last_seen_ms = a.last_seen_ms.max(now_ms);
                true
            }
            None => false,
        }
    }

    /// Every agent, with its age as of `now_ms` (the metastore's time).
    pub fn list(&self, now_ms: i64) -> Vec<AgentInfo> {
        self.by_node
            .values()
            .map(|a| AgentInfo {
                age_ms: now_ms.saturating_sub(a.last_seen_ms).max(0),
                ..a.clone()
            })
            .collect()
    }

    /// The agents a client of the listener `name` (speaking `protocol`) is
    /// told about, each at its address on that listener, as Kafka's brokers
    /// answer by the listener a request came in on. An agent without such
    /// a listener, or whose listener of that name speaks another protocol,
    /// is left out (a Kafka broker missing a listener is not in that
    /// listener's metadata). One that registered before listeners were
    /// recorded had one listener, named by its protocol: it is listed at
    /// its one address on a listener named by the same protocol, so a
    /// rolling upgrade keeps agents of the default configuration visible
    /// to each other, and never shows it to clients of a named listener.
    pub fn list_on(&self, name: &str, protocol: &str, now_ms: i64) -> Vec<AgentInfo> {
        let unnamed = name == protocol && SECURITY_PROTOCOLS.contains(&name);
        self.list(now_ms)
            .into_iter()
            .filter_map(|mut a| match self.listeners.get(&a.node_id) {
                None => unnamed.then_some(a),
                Some(listeners) => {
                    let l = listeners
                        .iter()
                        .find(|l| l.name == name && l.protocol == protocol)?;
                    a.host.clone_from(&l.host);
                    a.port = l.port;
                    Some(a)
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_keeps_its_node_id() {
        let mut agents = Agents::default();
        let a = agents.register("h".into(), 1, Some("z1".into()), None, 0);
        let b = agents.register("h".into(), 2, None, None, 0);
        assert_ne!(a, b);
        assert_eq!(
            agents.register("h".into(), 1, Some("z2".into()), None, 10),
            a
        );
        assert_eq!(agents.list(0).len(), 2);
        assert_eq!(agents.list(0)[0].zone.as_deref(), Some("z2"));
        assert!(agents.heartbeat(b, 20));
        assert!(!agents.heartbeat(99, 20));
        // Long-silent agents are forgotten when another registers.
        agents.register("h".into(), 3, None, None, FORGET_AFTER_MS + 100);
        assert_eq!(
            agents.list(0).iter().map(|a| a.port).collect::<Vec<_>>(),
            vec![3]
        );
    }

    fn listener(name: &str, host: &str, port: i32) -> ListenerEndpoint {
        let protocol = match name {
            "EXTERNAL" => "SASL_SSL",
            _ => "PLAINTEXT",
        };
        ListenerEndpoint {
            name: name.into(),
            host: host.into(),
            port,
            protocol: protocol.into(),
        }
    }

    #[test]
    fn clients_see_the_agents_of_their_listener_only() {
        let mut agents = Agents::default();
        let both = vec![
            listener("INTERNAL", "10.0.0.1", 9092),
            listener("EXTERNAL", "kafka-1.example.com", 9094),
        ];
        let a = agents.register("10.0.0.1".into(), 9092, None, Some(both), 0);
        let internal_only = vec![listener("INTERNAL", "10.0.0.2", 9092)];
        let b = agents.register("10.0.0.2".into(), 9092, None, Some(internal_only), 0);
        // Registered before listeners were recorded: one listener, named
        // by its protocol.
        let c = agents.register("10.0.0.3".into(), 9092, None, None, 0);
        let plain = vec![listener("PLAINTEXT", "10.0.0.4", 9092)];
        let d = agents.register("10.0.0.4".into(), 9092, None, Some(plain), 0);
        let on = |agents: &Agents, name: &str, protocol: &str| -> Vec<(i32, String, i32)> {
            let listed = agents.list_on(name, protocol, 0).into_iter();
            listed.map(|a| (a.node_id, a.host, a.port)).collect()
        };
        assert_eq!(
            on(&agents, "EXTERNAL", "SASL_SSL"),
            vec![(a, "kafka-1.example.com".into(), 9094)]
        );
        assert_eq!(on(&agents, "EXTERNAL", "SSL"), vec![], "another protocol");
        assert_eq!(
            on(&agents, "INTERNAL", "PLAINTEXT"),
            vec![(a, "10.0.0.1".into(), 9092), (b, "10.0.0.2".into(), 9092)]
        );
        assert_eq!(
            on(&agents, "PLAINTEXT", "PLAINTEXT"),
            vec![(c, "10.0.0.3".into(), 9092), (d, "10.0.0.4".into(), 9092)]
        );
        // Re-registering without listeners (an older agent binary) forgets them.
        agents.register("10.0.0.1".into(), 9092, None, None, 1);
        assert_eq!(on(&agents, "EXTERNAL", "SASL_SSL").len(), 0);
        assert_eq!(on(&agents, "PLAINTEXT", "PLAINTEXT").len(), 3);
        // A forgotten agent's listeners go with it.
        agents.register("10.0.0.9".into(), 9092, None, None, FORGET_AFTER_MS + 100);
        assert_eq!(agents.listeners.len(), 0);
    }

    #[test]
    fn listeners_are_bounded() {
        assert!(check_listeners(&[listener("A", "h", 1)]).is_ok());
        assert!(check_listeners(&[listener("a", "h", 1)]).is_err());
        let mut unknown = listener("A", "h", 1);
        unknown.protocol = "TLS".into();
        assert!(check_listeners(&[unknown]).is_err());
        assert!(check_listeners(&[]).is_err());
        assert!(check_listeners(&[listener("A", "h", 1), listener("A", "g", 2)]).is_err());
        assert!(check_listeners(&[listener("", "h", 1)]).is_err());
        assert!(check_listeners(&[listener("A", "h", 0)]).is_err());
        assert!(check_listeners(&[listener("A", &"h".repeat(256), 1)]).is_err());
        let many: Vec<_> = (0..17)
            .map(|i| listener(&format!("L{i}"), "h", 1))
            .collect();
        assert!(check_listeners(&many).is_err());
    }
}
