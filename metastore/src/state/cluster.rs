//! Agents, their listeners and heartbeats; job leases; the clock's tick.

use super::*;

mod agents;
pub use agents::Agents;

/// The cluster part of the state: its id, registered agents and job leases.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Cluster {
    pub(super) agents: Agents,
    pub(super) leases: crate::leases::Leases,
    /// Set once, by the first [`ClaimClusterId`]; never changed.
    pub(super) id: Option<String>,
    /// Whether an agent saw the object store hold [`Cluster::id`].
    pub(super) store_marked: bool,
}

/// The longest cluster id claimed (Kafka's are 22 characters).
pub const MAX_CLUSTER_ID_BYTES: usize = 64;

impl State {
    /// The cluster's id, once claimed.
    pub fn cluster_id(&self) -> Option<&str> {
        self.cluster.id.as_deref()
    }

    /// Every agent with its age as of `now_ms`, which must be the
    /// metastore's time (a leader's clock, at least [`State::clock_ms`]).
    pub fn agents(&self, now_ms: i64) -> Vec<AgentInfo> {
        self.cluster.agents.list(now_ms.max(self.clock_ms))
    }

    /// As [`State::agents`], at their addresses on `listener`.
    pub fn agents_on(&self, listener: &str, protocol: &str, now_ms: i64) -> Vec<AgentInfo> {
        self.cluster
            .agents
            .list_on(listener, protocol, now_ms.max(self.clock_ms))
    }
}

impl Apply for RegisterAgent {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<i32, Refusal> {
        Ok(state
            .cluster
            .agents
            .register(self.host, self.port, self.zone, None, self.now_ms))
    }
    /// The same address registers as the same node.
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for RegisterAgentListeners {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<i32, Refusal> {
        crate::agents::check_listeners(&self.listeners).map_err(Refusal::InvalidConfig)?;
        if self
            .zone
            .as_ref()
            .is_some_and(|z| z.len() > crate::agents::MAX_ZONE_BYTES)
        {
            return Err(Refusal::InvalidConfig(format!(
                "zones have at most {} bytes",
                crate::agents::MAX_ZONE_BYTES
            )));
        }
        let first = &self.listeners[0];
        if (first.host.as_str(), first.port) != (self.host.as_str(), self.port) {
            return Err(Refusal::InvalidConfig(
                "an agent's first listener is its own address".into(),
            ));
        }
        Ok(state.cluster.agents.register(
            self.host,
            self.port,
            self.zone,
            Some(self.listeners),
            self.now_ms,
        ))
    }
    /// The same address registers as the same node.
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for AgentHeartbeat {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<bool, Refusal> {
        Ok(state.cluster.agents.heartbeat(self.node_id, self.now_ms))
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for AcquireLease {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<bool, Refusal> {
        Ok(state
            .cluster
            .leases
            .acquire(self.job, self.holder, self.now_ms, self.ttl_ms))
    }
    /// A holder re-acquiring its own lease renews it.
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for ReleaseLease {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        state.cluster.leases.release(&self.job, &self.holder);
        Ok(())
    }
}

impl Apply for ClaimClusterId {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<ClusterIdentity, Refusal> {
        let cluster = &mut state.cluster;
        let id = match &cluster.id {
            Some(id) => id,
            None => {
                check_cluster_id(&self.proposed)?;
                cluster.id.insert(self.proposed.clone())
            }
        };
        if self.store_marked && *id == self.proposed {
            cluster.store_marked = true;
        }
        let identity = ClusterIdentity {
            id: id.clone(),
            store_marked: cluster.store_marked,
            known_object: None,
        };
        Ok(ClusterIdentity {
            known_object: state
                .log
                .objects
                .values()
                .next_back()
                .map(|o| o.key.clone()),
            ..identity
        })
    }
}

fn check_cluster_id(id: &str) -> Result<(), Refusal> {
    let fits = (1..=MAX_CLUSTER_ID_BYTES).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    match fits {
        true => Ok(()),
        false => Err(Refusal::InvalidConfig(format!(
            "a cluster id is 1 to {MAX_CLUSTER_ID_BYTES} letters, digits, '-' or '_'"
        ))),
    }
}

impl Apply for Tick {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<i64, Refusal> {
        Ok(state.clock_ms)
    }
}

impl Query for ListAgents {
    fn query(self, state: &State, now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.agents(now_ms))
    }
}

impl Query for ListAgentsOn {
    fn query(self, state: &State, now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.agents_on(&self.listener, &self.protocol, now_ms))
    }
}
