//! The agents that advertise themselves: who they are, where, in which zone,
//! and when they last said they were alive. Times are the metastore's (leader
//! stamps); readers are told each agent's age on that clock, so liveness is
//! never judged by comparing two machines' clocks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// An agent as clients are told about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentInfo {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub zone: Option<String>,
    /// The metastore's time of its latest registration or heartbeat.
    pub last_seen_ms: i64,
    /// How long ago that was on the metastore's clock, as of the read that
    /// returned it (0 inside the state).
    pub age_ms: i64,
}

/// Agents not heard from for this long are forgotten on the next registration.
const FORGET_AFTER_MS: i64 = 3_600_000;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agents {
    by_node: BTreeMap<i32, AgentInfo>,
    next_node_id: i32,
}

impl Agents {
    /// Registers (or re-registers) the agent at `host:port`; the same address
    /// keeps its node id across restarts. Returns the node id.
    pub fn register(&mut self, host: String, port: i32, zone: Option<String>, now_ms: i64) -> i32 {
        self.by_node.retain(|_, a| {
            now_ms - a.last_seen_ms < FORGET_AFTER_MS || (a.host == host && a.port == port)
        });
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_keeps_its_node_id() {
        let mut agents = Agents::default();
        let a = agents.register("h".into(), 1, Some("z1".into()), 0);
        let b = agents.register("h".into(), 2, None, 0);
        assert_ne!(a, b);
        assert_eq!(agents.register("h".into(), 1, Some("z2".into()), 10), a);
        assert_eq!(agents.list(0).len(), 2);
        assert_eq!(agents.list(0)[0].zone.as_deref(), Some("z2"));
        assert!(agents.heartbeat(b, 20));
        assert!(!agents.heartbeat(99, 20));
        // Long-silent agents are forgotten when another registers.
        agents.register("h".into(), 3, None, FORGET_AFTER_MS + 100);
        assert_eq!(
            agents.list(0).iter().map(|a| a.port).collect::<Vec<_>>(),
            vec![3]
        );
    }
}
