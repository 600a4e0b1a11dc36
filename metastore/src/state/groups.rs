//! Consumer groups (classic and KIP-848) as the state applies them, with
//! its topics and ACLs for regex subscriptions.

use super::*;

impl State {
    pub fn groups(&self) -> &Groups {
        &self.groups
    }
}

impl Apply for JoinGroupV8 {
    type Output = Result<Joined, GroupError>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        let State {
            groups,
            log,
            security,
            ..
        } = state;
        Ok(groups.join(
            self.into(),
            &TopicsByName(&log.topics, &security.acls),
            Rules::Format8,
        ))
    }
    fn retry_is_safe(&self) -> bool {
        false
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for JoinGroupV10 {
    type Output = Result<Joined, GroupError>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        JoinGroup::from(self).apply(state)
    }
    fn retry_is_safe(&self) -> bool {
        false
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for SyncGroupV8 {
    type Output = Result<Synced, GroupError>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        SyncGroup::from(self).apply(state)
    }
    fn retry_is_safe(&self) -> bool {
        true
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for JoinGroup {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        let rules = Rules::Migrating(state.configs.migration_policy());
        let State {
            groups,
            log,
            security,
            ..
        } = state;
        Ok(groups.join(self, &TopicsByName(&log.topics, &security.acls), rules))
    }
    /// A retry of a new member's join would add a second member.
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for SyncGroup {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.groups.sync(self))
    }
    /// Applied twice, the second finds the group stable and only marks the
    /// member synced again.
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for LeaveGroup {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        let policy = state.configs.migration_policy();
        let State {
            groups,
            log,
            security,
            ..
        } = state;
        Ok(groups.leave(self, &TopicsByName(&log.topics, &security.acls), policy))
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for TickGroup {
    type Output = ();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        let policy = state.configs.migration_policy();
        let State {
            groups,
            log,
            security,
            ..
        } = state;
        groups.tick(self, &TopicsByName(&log.topics, &security.acls), policy);
        Ok(())
    }
    fn retry_is_safe(&self) -> bool {
        true
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for ExpireMembers {
    type Output = ();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        let policy = state.configs.migration_policy();
        let State {
            groups,
            log,
            security,
            ..
        } = state;
        groups.expire_members(self, &TopicsByName(&log.topics, &security.acls), policy);
        Ok(())
    }
    /// A member expired once is gone; a second time finds nothing.
    fn retry_is_safe(&self) -> bool {
        true
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for CommitOffsets {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.groups.commit_offsets(self))
    }
    /// A blind retry landing after a later commit of the same group would
    /// move its offset backwards.
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

/// The state's topics, as consumer groups look them up, and its ACLs.
pub(super) struct TopicsByName<'a>(
    pub(super) &'a BTreeMap<String, Topic>,
    pub(super) &'a crate::acls::Acls,
);

impl TopicLookup for TopicsByName<'_> {
    fn find(&self, name: &str) -> Option<(TopicId, i32)> {
        self.0.get(name).map(|t| (t.info.id, t.info.partitions))
    }
    fn names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
    fn may_describe<'a>(&'a self, who: &'a Describer) -> Box<dyn Fn(&str) -> bool + 'a> {
        use crate::acls::{CoveringIndex, Requester, authorize, operation, resource};
        // Indexed once, so each name costs only the bindings covering it.
        let index = CoveringIndex::new(self.1.bindings(), resource::TOPIC);
        Box::new(move |name| {
            let requester = Requester {
                principal: &who.principal,
                host: &who.host,
            };
            authorize(
                index.covering(name),
                &requester,
                operation::DESCRIBE,
                resource::TOPIC,
                name,
                who.allow_if_no_acl,
            )
        })
    }
}

impl State {
    /// A consumer-protocol heartbeat that would change nothing: its answer.
    pub fn consumer_unchanged(
        &self,
        hb: &ConsumerHeartbeat,
    ) -> Option<Result<ConsumerAnswer, GroupError>> {
        let hb = self.with_group_timeouts(std::borrow::Cow::Borrowed(hb));
        self.groups
            .consumer_unchanged(&hb, &TopicsByName(&self.log.topics, &self.security.acls))
    }

    /// The heartbeat with its group's session timeout and heartbeat
    /// interval where the group's configs set them (KIP-848 group configs
    /// win over the agents'), so a change reaches each member at its next
    /// heartbeat.
    fn with_group_timeouts<'a>(
        &self,
        mut hb: std::borrow::Cow<'a, ConsumerHeartbeat>,
    ) -> std::borrow::Cow<'a, ConsumerHeartbeat> {
        let (session, interval) = self.configs.consumer_timeouts(
            &hb.group,
            hb.session_timeout_ms,
            hb.heartbeat_interval_ms,
        );
        if (session, interval) != (hb.session_timeout_ms, hb.heartbeat_interval_ms) {
            let hb = hb.to_mut();
            hb.session_timeout_ms = session;
            hb.heartbeat_interval_ms = interval;
        }
        hb
    }
}

impl State {
    fn apply_consumer_heartbeat(
        &mut self,
        hb: ConsumerHeartbeat,
        rules: Option<Rules>,
    ) -> Result<ConsumerAnswer, GroupError> {
        let hb = self
            .with_group_timeouts(std::borrow::Cow::Owned(hb))
            .into_owned();
        let rules = rules.unwrap_or(Rules::Migrating(self.configs.migration_policy()));
        let State {
            groups,
            log,
            security,
            ..
        } = self;
        groups.consumer_heartbeat(hb, &TopicsByName(&log.topics, &security.acls), rules)
    }
}

impl Apply for ConsumerHeartbeatV8 {
    type Output = Result<ConsumerAnswer, GroupError>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.apply_consumer_heartbeat(self.0.into(), Some(Rules::Format8)))
    }
    fn retry_is_safe(&self) -> bool {
        false
    }
    fn restamp(&mut self, now_ms: i64) {
        self.0.now_ms = now_ms;
    }
}

impl Apply for ConsumerHeartbeatV10 {
    type Output = Result<ConsumerAnswer, GroupError>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.apply_consumer_heartbeat(self.into(), None))
    }
    fn retry_is_safe(&self) -> bool {
        false
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for ConsumerHeartbeat {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.apply_consumer_heartbeat(self, None))
    }
    /// A join again would be a second join; a leave again is refused.
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for DeleteGroups {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        let names = self.groups.clone();
        let results = state.groups.delete(self);
        for (name, result) in names.iter().zip(&results) {
            if result.is_ok() {
                state.txns.forget_group_offsets(name, None);
            }
        }
        Ok(results)
    }
}

impl Apply for DeleteOffsets {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        let (group, partitions) = (self.group.clone(), self.partitions.clone());
        let result = state.groups.delete_offsets(self);
        if let Ok(results) = &result {
            let deleted: BTreeSet<(String, i32)> = partitions
                .into_iter()
                .zip(results)
                .filter(|(_, r)| r.is_ok())
                .map(|(at, _)| at)
                .collect();
            state.txns.forget_group_offsets(&group, Some(&deleted));
        }
        Ok(result)
    }
}

impl Query for DescribeGroup {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.groups.describe(&self.name))
    }
}

impl Query for DescribeConsumerGroup {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        let name_of = |id: TopicId| state.log.names_by_id.get(&id).cloned();
        Ok(state.groups.describe_consumer(&self.name, &name_of))
    }
}

impl Query for ListGroups {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.groups.list())
    }
}

impl Query for GroupOffsets {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.groups.offsets(&self.group, self.partitions))
    }
}
