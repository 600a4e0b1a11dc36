//! One consumer group under Kafka's classic protocol: its members,
//! generations, assignments and deadlines. The rules, and the order of
//! their checks, are those of Kafka's `GroupMetadataManager` for classic
//! groups; each method names the Kafka behaviour it keeps.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::*;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocols: Vec<(String, Vec<u8>)>,
    pub subscribed_topics: Option<Vec<String>>,
    /// When a command last showed it alive (metastore time); the leader's
    /// memory of heartbeats adds to this (see the module above).
    pub last_seen_ms: i64,
    /// Has (re)joined the rebalance in progress.
    pub joined: bool,
    /// In the formed generation, and has not sent its SyncGroup yet.
    pub awaiting_sync: bool,
    /// What it said it owned at its last JoinGroup (a cooperative member
    /// keeps consuming it until its next sync tells it what to give up):
    /// what an upgrade takes it to be giving up still.
    #[serde(default)]
    pub owned: Option<TopicPartitions>,
}

/// One group, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub generation: i32,
    pub phase: Phase,
    pub protocol_type: Option<String>,
    /// The assignor chosen when the generation formed.
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// Ids handed out with MEMBER_ID_REQUIRED (KIP-394), until when they may
    /// come back to join.
    pub pending: BTreeMap<String, i64>,
    /// Static members: instance id to member id.
    pub instances: BTreeMap<String, String>,
    /// The leader's assignments, of generation `assignments_generation`.
    pub assignments: BTreeMap<String, Vec<u8>>,
    pub assignments_generation: i32,
    /// Members still awaiting sync at this time leave, and a rebalance
    /// follows (Kafka's pending-sync timeout).
    pub sync_deadline_ms: Option<i64>,
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
    /// When (metastore time) the group last had no members; offsets expire
    /// `offsets.retention.minutes` after this or their commit, whichever is later.
    pub empty_since_ms: i64,
    /// Bumped by every change waiters care about (see [`AwaitGroup`]).
    pub version: u64,
    /// The leader's assignments of the last generation that synced, as the
    /// agent read them (ConsumerProtocol), by member: what each member is
    /// taken to own if the group is upgraded to the consumer protocol (kept
    /// through a rebalance, in which a cooperative member still consumes
    /// them). Entries of members gone are never read.
    #[serde(default)]
    pub decoded: BTreeMap<String, TopicPartitions>,
    /// The generation whose leader's sync filled `decoded` (none if the
    /// last sync was logged before format 9, or there was none).
    #[serde(default)]
    pub decoded_generation: Option<i32>,
    /// Members of that sync whose assignment (not empty) did not read as
    /// the consumer protocol's: the group cannot be upgraded (Kafka's rule).
    #[serde(default)]
    pub undecoded: BTreeSet<String>,
    /// The first rebalance of an empty group, while it waits for more
    /// members (format 11).
    #[serde(default)]
    pub initial_join: Option<InitialJoin>,
}

/// Kafka's `InitialDelayedJoin`: the first rebalance of an empty group
/// forms no generation before `group.initial.rebalance.delay.ms`, and waits
/// that long again (within the rebalance timeout) while new members come,
/// so consumers started together share one generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitialJoin {
    /// The delay configured (of the join that began the rebalance).
    pub delay_ms: i64,
    /// The wait in progress (it ends at the phase's deadline).
    pub waiting_ms: i64,
    /// What is left of the rebalance timeout after it.
    pub remaining_ms: i64,
    /// A member was added during the wait in progress.
    pub new_member_added: bool,
}

impl Default for Group {
    fn default() -> Self {
        Group {
            generation: 0,
            phase: Phase::Empty,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            pending: BTreeMap::new(),
            instances: BTreeMap::new(),
            assignments: BTreeMap::new(),
            assignments_generation: -1,
            sync_deadline_ms: None,
            offsets: BTreeMap::new(),
            empty_since_ms: 0,
            version: 0,
            decoded: BTreeMap::new(),
            decoded_generation: None,
            undecoded: BTreeSet::new(),
            initial_join: None,
        }
    }
}

impl Group {
    /// Kafka's name for the group's state.
    pub fn state_name(&self) -> &'static str {
        match self.phase {
            Phase::Empty => "Empty",
            Phase::Joining { .. } => "PreparingRebalance",
            Phase::Syncing => "CompletingRebalance",
            Phase::Stable => "Stable",
        }
    }

    /// The earliest time at which a [`TickGroup`] would change something.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        let rebalance = match self.phase {
            Phase::Joining { deadline_ms } => Some(deadline_ms),
            _ => None,
        };
        rebalance
            .into_iter()
            .chain(self.sync_deadline_ms)
            .chain(self.pending.values().copied())
            .min()
    }

    /// Whether `member` is waiting in a JoinGroup or a SyncGroup, and so
    /// alive whatever its heartbeats (Kafka's `hasSatisfiedHeartbeat`).
    pub fn keeps_alive(&self, member: &Member) -> bool {
        match self.phase {
            Phase::Joining { .. } => member.joined,
            Phase::Syncing => !member.awaiting_sync,
            Phase::Empty | Phase::Stable => false,
        }
    }

    /// The topics the members subscribe to, if the group is a consumer
    /// group and each member's are known (Kafka's `computeSubscribedTopics`).
    pub fn subscribed_topics(&self) -> Option<BTreeSet<String>> {
        if self.protocol_type.as_deref() != Some("consumer") {
            return None;
        }
        let mut topics = BTreeSet::new();
        for m in self.members.values() {
            topics.extend(m.subscribed_topics.as_ref()?.iter().cloned());
        }
        Some(topics)
    }

    fn metadata_of(&self, member: &Member) -> Vec<u8> {
        let Some(protocol) = &self.protocol else {
            return Vec::new();
        };
        member
            .protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, meta)| meta.clone())
            .unwrap_or_default()
    }

    pub fn view(&self, member_id: &str, instance_id: Option<&str>) -> MemberView {
        let member = self.members.get(member_id);
        // Its instance id now names another member: it was replaced.
        let fenced = member.is_none()
            && instance_id
                .and_then(|i| self.instances.get(i))
                .is_some_and(|holder| holder != member_id);
        let is_leader = self.leader.as_deref() == Some(member_id);
        let formed = matches!(self.phase, Phase::Syncing | Phase::Stable);
        let members = if is_leader && formed {
            self.members
                .iter()
                .map(|(id, m)| (id.clone(), m.instance_id.clone(), self.metadata_of(m)))
                .collect()
        } else {
            Vec::new()
        };
        MemberView {
            version: self.version,
            generation: self.generation,
            phase: self.phase,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            member: member.map(|m| m.joined),
            fenced,
            members,
            assignment: self
                .assignments
                .get(member_id)
                .map(|a| (self.assignments_generation, a.clone())),
            converted: false,
        }
    }

    pub fn describe(&self) -> GroupDescription {
        let stable = self.phase == Phase::Stable;
        GroupDescription {
            state: self.state_name().to_string(),
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: if stable {
                self.protocol.clone().unwrap_or_default()
            } else {
                String::new()
            },
            members: self
                .members
                .iter()
                .map(|(id, m)| MemberDescription {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable {
                        self.metadata_of(m)
                    } else {
                        Vec::new()
                    },
                    assignment: if stable {
                        self.assignments.get(id).cloned().unwrap_or_default()
                    } else {
                        Vec::new()
                    },
                })
                .collect(),
        }
    }

    /// Kafka's `validateMember`: an instance id must name this member.
    fn check_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), GroupError> {
        if let Some(instance) = instance_id {
            match self.instances.get(instance) {
                None => return Err(GroupError::UnknownMemberId),
                Some(current) if current != member_id => {
                    return Err(GroupError::FencedInstanceId);
                }
                Some(_) => {}
            }
        }
        if self.members.contains_key(member_id) {
            Ok(())
        } else {
            Err(GroupError::UnknownMemberId)
        }
    }

    /// Whether `protocols` can join: of the group's type, and sharing a
    /// protocol with every member (Kafka's `supportsProtocols`).
    fn supports(&self, protocol_type: &str, protocols: &[(String, Vec<u8>)]) -> bool {
        if protocols.is_empty() || protocol_type.is_empty() {
            return false;
        }
        if self.members.is_empty() {
            return true;
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(name, _)| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
    }

    fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms as i64)
            .max()
            .unwrap_or(0)
    }

    pub(super) fn join(&mut self, join: JoinGroup) -> Result<Joined, GroupError> {
        let now_ms = join.now_ms;
        let delay_ms = join.rules.initial_rebalance_delay_ms;
        if join.member_id.is_empty() {
            self.join_new(join)
        } else {
            if !self.supports(&join.protocol_type, &join.protocols) {
                return Err(GroupError::InconsistentGroupProtocol);
            }
            if join.instance_id.is_none() && self.pending.remove(&join.member_id).is_some() {
                let id = join.member_id.clone();
                self.add_new_member(id.clone(), join);
                self.after_join(&id, now_ms, delay_ms);
                return Ok(Joined::Member(id));
            }
            self.check_member(&join.member_id, join.instance_id.as_deref())?;
            self.join_existing(join)
        }
    }

    /// Kafka's `classicGroupJoinNewMember` (and, for a known instance id,
    /// `updateStaticMemberThenRebalanceOrCompleteJoin`).
    fn join_new(&mut self, join: JoinGroup) -> Result<Joined, GroupError> {
        let now_ms = join.now_ms;
        let delay_ms = join.rules.initial_rebalance_delay_ms;
        if !self.supports(&join.protocol_type, &join.protocols) {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        let known_instance = join
            .instance_id
            .as_ref()
            .and_then(|i| self.instances.get(i))
            .cloned();
        if let Some(old_id) = known_instance {
            return Ok(self.replace_static(old_id, join));
        }
        if self.members.len() + self.pending.len() >= MAX_GROUP_SIZE {
            return Err(GroupError::GroupMaxSizeReached);
        }
        let prefix = join.instance_id.as_deref().unwrap_or(&join.client_id);
        let member_id = format!("{prefix}-{}", join.fresh_id);
        if join.instance_id.is_none() && join.require_known_member_id {
            self.pending
                .insert(member_id.clone(), now_ms + join.session_timeout_ms as i64);
            return Ok(Joined::MemberIdRequired(member_id));
        }
        self.add_new_member(member_id.clone(), join);
        self.after_join(&member_id, now_ms, delay_ms);
        Ok(Joined::Member(member_id))
    }

    /// Kafka's `addMemberAndRebalance`: a member new to the group, which
    /// extends a first rebalance's wait (a static member taking its
    /// instance's place does not).
    fn add_new_member(&mut self, member_id: String, join: JoinGroup) {
        if let Some(initial) = &mut self.initial_join {
            initial.new_member_added = true;
        }
        self.add_member(member_id, join);
    }

    fn add_member(&mut self, member_id: String, join: JoinGroup) {
        if let Some(instance) = &join.instance_id {
            self.instances.insert(instance.clone(), member_id.clone());
        }
        self.protocol_type = Some(join.protocol_type);
        self.members.insert(
            member_id,
            Member {
                instance_id: join.instance_id,
                client_id: join.client_id,
                client_host: join.client_host,
                session_timeout_ms: join.session_timeout_ms,
                rebalance_timeout_ms: join.rebalance_timeout_ms,
                protocols: join.protocols,
                subscribed_topics: join.subscribed_topics,
                last_seen_ms: join.now_ms,
                joined: true,
                awaiting_sync: false,
                owned: join.owned,
            },
        );
    }

    /// A member was added or rejoined: a rebalance starts unless one is in
    /// progress, which completes if it was the last one awaited. The first
    /// of an empty group waits `initial_delay_ms` for more (Kafka's
    /// `prepareRebalance`).
    pub(super) fn after_join(&mut self, member_id: &str, now_ms: i64, initial_delay_ms: i32) {
        if !matches!(self.phase, Phase::Joining { .. }) {
            let initial = self.phase == Phase::Empty && initial_delay_ms > 0;
            self.start_rebalance(now_ms);
            if initial {
                let delay_ms = initial_delay_ms as i64;
                self.initial_join = Some(InitialJoin {
                    delay_ms,
                    waiting_ms: delay_ms,
                    remaining_ms: (self.rebalance_timeout_ms() - delay_ms).max(0),
                    new_member_added: false,
                });
                self.phase = Phase::Joining {
                    deadline_ms: now_ms + delay_ms,
                };
            }
        }
        if let Some(m) = self.members.get_mut(member_id) {
            m.joined = true;
        }
        self.try_complete(now_ms);
    }

    /// A static member restarted (same instance id, no member id): it takes
    /// the old member's place, which is fenced from now on.
    fn replace_static(&mut self, old_id: String, join: JoinGroup) -> Joined {
        let now_ms = join.now_ms;
        let old = self
            .members
            .remove(&old_id)
            .expect("instances name members");
        let new_id = format!(
            "{}-{}",
            join.instance_id.as_deref().unwrap_or_default(),
            join.fresh_id
        );
        let leader_before = self.leader.clone().unwrap_or_default();
        if self.leader.as_deref() == Some(old_id.as_str()) {
            self.leader = Some(new_id.clone());
        }
        if let Some(assignment) = self.assignments.remove(&old_id) {
            self.assignments.insert(new_id.clone(), assignment);
        }
        if let Some(decoded) = self.decoded.remove(&old_id) {
            self.decoded.insert(new_id.clone(), decoded);
        }
        self.add_member(new_id.clone(), join);
        // Kafka keeps the old member's place in the generation formed.
        self.members
            .get_mut(&new_id)
            .expect("just added")
            .awaiting_sync = old.awaiting_sync;
        // In a stable group, the same chosen protocol means no rebalance.
        if self.phase == Phase::Stable && self.select_protocol() == self.protocol {
            return Joined::Replaced {
                member_id: new_id,
                leader: leader_before,
            };
        }
        self.after_join(&new_id, now_ms, 0);
        Joined::Member(new_id)
    }

    /// Kafka's `classicGroupJoinExistingMember`.
    fn join_existing(&mut self, join: JoinGroup) -> Result<Joined, GroupError> {
        let now_ms = join.now_ms;
        let delay_ms = join.rules.initial_rebalance_delay_ms;
        let member_id = join.member_id.clone();
        let member = &self.members[&member_id];
        let unchanged = member.protocols == join.protocols;
        let is_leader = self.leader.as_deref() == Some(member_id.as_str());
        match self.phase {
            Phase::Empty => return Err(GroupError::UnknownMemberId),
            // Same metadata while the generation forms: it gets the
            // generation as it is.
            Phase::Syncing if unchanged => {
                self.members
                    .get_mut(&member_id)
                    .expect("checked")
                    .last_seen_ms = now_ms;
                return Ok(Joined::Member(member_id));
            }
            // A follower with unchanged metadata keeps its generation; a
            // leader's join always starts a rebalance (it means to reassign).
            Phase::Stable if unchanged && !is_leader => {
                self.members
                    .get_mut(&member_id)
                    .expect("checked")
                    .last_seen_ms = now_ms;
                return Ok(Joined::Member(member_id));
            }
            _ => {}
        }
        self.update_member(&member_id, join);
        self.after_join(&member_id, now_ms, delay_ms);
        Ok(Joined::Member(member_id))
    }

    fn update_member(&mut self, member_id: &str, join: JoinGroup) {
        let m = self.members.get_mut(member_id).expect("checked");
        m.client_id = join.client_id;
        m.client_host = join.client_host;
        m.session_timeout_ms = join.session_timeout_ms;
        m.rebalance_timeout_ms = join.rebalance_timeout_ms;
        m.protocols = join.protocols;
        m.subscribed_topics = join.subscribed_topics;
        m.owned = join.owned;
        m.last_seen_ms = join.now_ms;
        m.joined = true;
    }

    /// Kafka's `prepareRebalance`: everyone must rejoin by the deadline.
    /// Assignments of a stable generation stay readable (a SyncGroup parked
    /// when it formed is answered with them); those being formed do not.
    pub(super) fn start_rebalance(&mut self, now_ms: i64) {
        if self.phase == Phase::Syncing {
            self.assignments.clear();
        }
        for m in self.members.values_mut() {
            m.joined = false;
            m.awaiting_sync = false;
        }
        self.sync_deadline_ms = None;
        self.initial_join = None;
        self.phase = Phase::Joining {
            deadline_ms: now_ms + self.rebalance_timeout_ms(),
        };
    }

    /// Forms the next generation once every member rejoined (and no id
    /// handed out is still to come back) or the deadline passed (Kafka's
    /// `completeClassicGroupJoin`).
    fn try_complete(&mut self, now_ms: i64) {
        let Phase::Joining { deadline_ms } = self.phase else {
            return;
        };
        if self.initial_join.is_some() && !self.initial_wait_over(now_ms, deadline_ms) {
            return;
        }
        let all_joined = self.members.values().all(|m| m.joined) && self.pending.is_empty();
        if !all_joined && now_ms < deadline_ms {
            return;
        }
        // Dynamic members that did not rejoin leave; static ones stay, as
        // they were (they may be restarting).
        let gone: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| !m.joined && m.instance_id.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.remove_member(&id);
        }
        if !self.members.is_empty() && !self.members.values().any(|m| m.joined) {
            // Only static members that did not come back: wait for them
            // again (at least a session's minimum, so a zero timeout does
            // not tick the log every pass).
            self.phase = Phase::Joining {
                deadline_ms: now_ms
                    + self
                        .rebalance_timeout_ms()
                        .max(MIN_SESSION_TIMEOUT_MS as i64),
            };
            return;
        }
        self.generation += 1;
        self.assignments.clear();
        if self.members.is_empty() {
            self.become_empty(now_ms);
            return;
        }
        // The leader stays if it rejoined; else the first member that did.
        if !self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.get(l).is_some_and(|m| m.joined))
        {
            self.leader = self
                .members
                .iter()
                .find(|(_, m)| m.joined)
                .map(|(id, _)| id.clone());
        }
        self.protocol = self.select_protocol();
        self.phase = Phase::Syncing;
        self.sync_deadline_ms = Some(now_ms + self.rebalance_timeout_ms());
        for m in self.members.values_mut() {
            m.last_seen_ms = now_ms;
            m.awaiting_sync = true;
        }
    }

    /// Kafka's `selectProtocol`: each member votes for the first of its
    /// protocols that every member supports; the most votes win (a tie goes
    /// to the leader's preference).
    pub(super) fn select_protocol(&self) -> Option<String> {
        let shared: Vec<&String> = self
            .members
            .values()
            .next()?
            .protocols
            .iter()
            .map(|(n, _)| n)
            .filter(|n| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(p, _)| p == *n))
            })
            .collect();
        let mut votes: BTreeMap<&String, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some((name, _)) = m.protocols.iter().find(|(p, _)| shared.contains(&p)) {
                *votes.entry(name).or_default() += 1;
            }
        }
        let preference = self
            .leader
            .as_ref()
            .and_then(|l| self.members.get(l))
            .or_else(|| self.members.values().next())?;
        let most = votes.values().copied().max()?;
        preference
            .protocols
            .iter()
            .map(|(n, _)| n)
            .find(|n| votes.get(n) == Some(&most))
            .cloned()
    }

    fn remove_member(&mut self, member_id: &str) {
        if let Some(m) = self.members.remove(member_id) {
            if let Some(instance) = m.instance_id {
                self.instances.remove(&instance);
            }
            self.assignments.remove(member_id);
            if self.leader.as_deref() == Some(member_id) {
                self.leader = self.members.keys().next().cloned();
            }
        }
    }

    /// After members left: a rebalance starts (or the one in progress may
    /// now complete); no member left makes the group empty.
    fn after_leaving(&mut self, now_ms: i64) {
        if matches!(self.phase, Phase::Stable | Phase::Syncing) {
            if self.members.is_empty() {
                self.generation += 1;
                self.become_empty(now_ms);
                return;
            }
            self.start_rebalance(now_ms);
        }
        self.try_complete(now_ms);
    }

    /// The first rebalance waits its whole delay, all members joined or
    /// not, then again while new members came and time remains (Kafka's
    /// `tryCompleteInitialRebalanceElseSchedule`).
    fn initial_wait_over(&mut self, now_ms: i64, deadline_ms: i64) -> bool {
        let Some(initial) = &mut self.initial_join else {
            return true;
        };
        if now_ms < deadline_ms {
            return false;
        }
        if initial.new_member_added && initial.remaining_ms != 0 {
            let waiting_ms = initial.delay_ms.min(initial.remaining_ms);
            initial.remaining_ms = (initial.remaining_ms - initial.waiting_ms).max(0);
            initial.waiting_ms = waiting_ms;
            initial.new_member_added = false;
            self.phase = Phase::Joining {
                deadline_ms: now_ms + waiting_ms,
            };
            return false;
        }
        self.initial_join = None;
        true
    }

    fn become_empty(&mut self, now_ms: i64) {
        self.empty_since_ms = now_ms;
        self.initial_join = None;
        self.phase = Phase::Empty;
        self.leader = None;
        self.protocol = None;
        self.assignments.clear();
        self.sync_deadline_ms = None;
    }

    /// A member sent its SyncGroup: the sync deadline ends with the last.
    fn synced(&mut self, member_id: &str) {
        if let Some(m) = self.members.get_mut(member_id) {
            m.awaiting_sync = false;
        }
        if self.members.values().all(|m| !m.awaiting_sync) {
            self.sync_deadline_ms = None;
        }
    }

    pub(super) fn sync(&mut self, sync: SyncGroup) -> Result<(), GroupError> {
        self.check_member(&sync.member_id, sync.instance_id.as_deref())?;
        if sync.generation != self.generation {
            return Err(GroupError::IllegalGeneration);
        }
        let inconsistent = |asked: &Option<String>, ours: &Option<String>| {
            asked.as_ref().is_some_and(|a| Some(a) != ours.as_ref())
        };
        if inconsistent(&sync.protocol_type, &self.protocol_type)
            || inconsistent(&sync.protocol, &self.protocol)
        {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        match self.phase {
            Phase::Empty => Err(GroupError::UnknownMemberId),
            Phase::Joining { .. } => Err(GroupError::RebalanceInProgress),
            Phase::Stable => {
                self.synced(&sync.member_id);
                Ok(())
            }
            Phase::Syncing => {
                self.synced(&sync.member_id);
                if self.leader.as_deref() == Some(sync.member_id.as_str()) {
                    // Members the leader left out get an empty assignment.
                    let mut given: BTreeMap<String, Vec<u8>> = sync
                        .assignments
                        .into_iter()
                        .filter(|(m, _)| self.members.contains_key(m))
                        .collect();
                    for id in self.members.keys() {
                        given.entry(id.clone()).or_default();
                    }
                    self.assignments = given;
                    self.decoded = sync
                        .decoded
                        .into_iter()
                        .filter(|(m, _)| self.assignments.contains_key(m))
                        .collect();
                    // (A sync logged before format 9 read nothing: what its
                    // members hold stays unknown, as a snapshot of then has it.)
                    self.undecoded = match sync.decodes {
                        true => self
                            .assignments
                            .iter()
                            .filter(|(m, a)| !a.is_empty() && !self.decoded.contains_key(*m))
                            .map(|(m, _)| m.clone())
                            .collect(),
                        false => BTreeSet::new(),
                    };
                    self.decoded_generation = sync.decodes.then_some(self.generation);
                    self.assignments_generation = self.generation;
                    self.phase = Phase::Stable;
                    for m in self.members.values_mut() {
                        m.last_seen_ms = sync.now_ms;
                    }
                }
                Ok(())
            }
        }
    }

    pub(super) fn check_heartbeat(&self, beat: &GroupHeartbeat) -> (Result<(), GroupError>, bool) {
        if let Err(e) = self.check_member(&beat.member_id, beat.instance_id.as_deref()) {
            return (Err(e), false);
        }
        if beat.generation != self.generation {
            return (Err(GroupError::IllegalGeneration), false);
        }
        match self.phase {
            Phase::Empty => (Err(GroupError::UnknownMemberId), false),
            Phase::Joining { .. } => (Err(GroupError::RebalanceInProgress), true),
            Phase::Syncing | Phase::Stable => (Ok(()), true),
        }
    }

    pub(super) fn leave(
        &mut self,
        leaving: Vec<Leaving>,
        now_ms: i64,
    ) -> Vec<Result<(), GroupError>> {
        let (mut removed, mut pending_left) = (false, false);
        let answers = leaving
            .into_iter()
            .map(
                |Leaving {
                     member_id,
                     instance_id,
                 }| {
                    let id = if member_id.is_empty() {
                        // By instance id alone (an administrator removing a static member).
                        instance_id
                            .as_ref()
                            .and_then(|i| self.instances.get(i))
                            .cloned()
                            .ok_or(GroupError::UnknownMemberId)?
                    } else if self.pending.remove(&member_id).is_some() {
                        pending_left = true;
                        return Ok(());
                    } else {
                        self.check_member(&member_id, instance_id.as_deref())?;
                        member_id
                    };
                    self.remove_member(&id);
                    removed = true;
                    Ok(())
                },
            )
            .collect();
        if removed {
            self.after_leaving(now_ms);
        } else if pending_left {
            // An id handed out and never used: no rebalance, but a join
            // that waited for it may now complete.
            self.try_complete(now_ms);
        }
        answers
    }

    /// Deadlines: a rebalance past its deadline completes without the
    /// members that did not rejoin; members that did not sync in time leave;
    /// ids handed out and never used are forgotten.
    pub(super) fn tick(&mut self, now_ms: i64) {
        self.pending.retain(|_, until| *until > now_ms);
        self.try_complete(now_ms);
        if self.sync_deadline_ms.is_some_and(|d| d <= now_ms) {
            self.sync_deadline_ms = None;
            let late: Vec<String> = self
                .members
                .iter()
                .filter(|(_, m)| m.awaiting_sync)
                .map(|(id, _)| id.clone())
                .collect();
            if !late.is_empty() {
                for id in &late {
                    self.remove_member(id);
                }
                self.after_leaving(now_ms);
            }
        }
    }

    /// Removes the members whose session ran out: each given with the last
    /// time the leader heard from it, and only if nothing since (a command
    /// that showed it alive, or waiting in a JoinGroup or SyncGroup) keeps it.
    pub(super) fn expire_members(&mut self, members: &[(String, i64)], now_ms: i64) {
        let expired: Vec<String> = members
            .iter()
            .filter(|(id, heard_ms)| {
                self.members.get(id).is_some_and(|m| {
                    // Never heard later than now.
                    let last = m.last_seen_ms.max((*heard_ms).min(now_ms));
                    !self.keeps_alive(m)
                        && last.saturating_add(m.session_timeout_ms as i64) <= now_ms
                })
            })
            .map(|(id, _)| id.clone())
            .collect();
        if expired.is_empty() {
            return;
        }
        for id in &expired {
            self.remove_member(id);
        }
        self.after_leaving(now_ms);
    }

    /// Kafka's `validateOffsetCommit` for classic groups.
    pub(super) fn check_commit(&self, commit: &CommitOffsets) -> Result<(), GroupError> {
        if commit.generation < 0 && self.phase == Phase::Empty {
            return Ok(());
        }
        if commit.generation >= 0 || !commit.member_id.is_empty() || commit.instance_id.is_some() {
            self.check_member(&commit.member_id, commit.instance_id.as_deref())?;
            if commit.generation != self.generation {
                return Err(GroupError::IllegalGeneration);
            }
        } else {
            // Anonymous, to a group with members.
            return Err(GroupError::UnknownMemberId);
        }
        // A commit while the generation forms could be of partitions about
        // to move; one while members rejoin is the last of the old
        // generation (a consumer's commit in its revoke callback): kept.
        if self.phase == Phase::Syncing {
            return Err(GroupError::RebalanceInProgress);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
