//! Agents, their listeners and heartbeats; job leases; the clock's tick.

use super::*;

impl State {
    /// Every agent with its age as of `now_ms`, which must be the
    /// metastore's time (a leader's clock, at least [`State::clock_ms`]).
    pub fn agents(&self, now_ms: i64) -> Vec<AgentInfo> {
        self.agents.list(now_ms.max(self.clock_ms))
    }

    /// As [`State::agents`], at their addresses on `listener`.
    pub fn agents_on(&self, listener: &str, protocol: &str, now_ms: i64) -> Vec<AgentInfo> {
        self.agents
            .list_on(listener, protocol, now_ms.max(self.clock_ms))
    }
}

impl Apply for RegisterAgent {
    type Output = i32;
    fn apply(self, state: &mut State) -> Result<i32, Refusal> {
        Ok(state
            .agents
            .register(self.host, self.port, self.zone, None, self.now_ms))
    }
    /// The same address registers as the same node.
    fn retry_is_safe(&self) -> bool {
        true
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for RegisterAgentListeners {
    type Output = i32;
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
        Ok(state.agents.register(
            self.host,
            self.port,
            self.zone,
            Some(self.listeners),
            self.now_ms,
        ))
    }
    /// The same address registers as the same node.
    fn retry_is_safe(&self) -> bool {
        true
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for AgentHeartbeat {
    type Output = bool;
    fn apply(self, state: &mut State) -> Result<bool, Refusal> {
        Ok(state.agents.heartbeat(self.node_id, self.now_ms))
    }
    fn retry_is_safe(&self) -> bool {
        true
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for AcquireLease {
    /// Whether `holder` holds the lease now.
    type Output = bool;
    fn apply(self, state: &mut State) -> Result<bool, Refusal> {
        Ok(state
            .leases
            .acquire(self.job, self.holder, self.now_ms, self.ttl_ms))
    }
    /// A holder re-acquiring its own lease renews it.
    fn retry_is_safe(&self) -> bool {
        true
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for ReleaseLease {
    type Output = ();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        state.leases.release(&self.job, &self.holder);
        Ok(())
    }
    /// Releasing twice is releasing once.
    fn retry_is_safe(&self) -> bool {
        true
    }
}

impl Apply for Tick {
    /// The metastore's time once this entry applied.
    type Output = i64;
    fn apply(self, state: &mut State) -> Result<i64, Refusal> {
        Ok(state.clock_ms)
    }
    fn retry_is_safe(&self) -> bool {
        true
    }
}

impl Query for ListAgents {
    type Output = Vec<AgentInfo>;
    fn query(self, state: &State, now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.agents(now_ms))
    }
}

impl Query for ListAgentsOn {
    type Output = Vec<AgentInfo>;
    fn query(self, state: &State, now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.agents_on(&self.listener, &self.protocol, now_ms))
    }
}
