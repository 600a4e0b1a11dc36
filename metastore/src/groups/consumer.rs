//! One consumer group under the consumer group protocol of Kafka 4
//! (KIP-848): the broker assigns partitions, and each member reconciles
//! toward its target through its heartbeats. The rules are those of Kafka's
//! `GroupMetadataManager.consumerGroupHeartbeat` and
//! `CurrentAssignmentBuilder`:
//!
//! - a member's subscription (topic names, or a regular expression resolved
//!   against the topics) changing, a member joining or leaving, or the
//!   subscribed topics changing (created, deleted, grown) bumps the group
//!   epoch; the target assignment is then computed by the assignor at that
//!   epoch;
//! - a member moves to the target epoch only once it no longer owns what it
//!   must give up (UNREVOKED_PARTITIONS until then, within its rebalance
//!   timeout or it is fenced), and receives a partition only once its
//!   previous owner released it (UNRELEASED_PARTITIONS until then);
//! - a heartbeat that changes nothing is answered by the leader from its
//!   state and never written (see [`ConsumerGroup::unchanged`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::assign::{self, Partitions, Subscriber};
use super::*;
use crate::types::TopicId;

const REGEX_SIZE_LIMIT: usize = 1 << 20;

impl ConsumerHeartbeat {
    /// A full request (after a rejoin or an error) is answered with the
    /// whole assignment (Kafka's rule).
    fn is_full(&self) -> bool {
        self.rebalance_timeout_ms != -1
            && (self.subscribed_topics.is_some() || self.subscribed_regex.is_some())
            && self.owned.is_some()
    }

    fn owned(&self) -> Option<Partitions> {
        self.owned.as_ref().map(|owned| {
            owned
                .iter()
                .filter(|(_, ps)| !ps.is_empty())
                .map(|(t, ps)| (*t, ps.iter().copied().collect()))
                .collect()
        })
    }
}

/// Where a member is in reaching its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reconciliation {
    Stable,
    /// It must first give up partitions it still owns.
    UnrevokedPartitions,
    /// Part of its target is still held by another member.
    UnreleasedPartitions,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerMember {
    pub epoch: i32,
    pub previous_epoch: i32,
    pub state: Reconciliation,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topics: Vec<String>,
    pub subscribed_regex: Option<String>,
    pub assignor: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    /// What it may consume now.
    pub assigned: Partitions,
    /// What it must give up before it moves on.
    pub revoking: Partitions,
    /// What the assignor gave it at the group's assignment epoch.
    pub target: Partitions,
    /// When a command last showed it alive (the leader's memory adds to it).
    pub last_seen_ms: i64,
    /// It is fenced if it still owns what it must give up at this time
    /// (a classic member: if it has not rejoined since the group's epoch
    /// moved past its own, Kafka's join timeout).
    pub revoke_deadline_ms: Option<i64>,
    /// A member speaking the classic protocol (JoinGroup, SyncGroup,
    /// Heartbeat) in a group of the consumer protocol (see `convert`).
    #[serde(default)]
    pub classic: Option<ClassicMeta>,
}

impl ConsumerMember {
    /// A member joining (epoch 0), owning and subscribing to nothing yet.
    fn joining(instance_id: Option<String>, now_ms: i64) -> ConsumerMember {
        ConsumerMember {
            epoch: JOIN_EPOCH,
            previous_epoch: -1,
            state: Reconciliation::Stable,
            instance_id,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            subscribed_topics: Vec::new(),
            subscribed_regex: None,
            assignor: None,
            rebalance_timeout_ms: 0,
            session_timeout_ms: 0,
            heartbeat_interval_ms: 0,
            assigned: Partitions::new(),
            revoking: Partitions::new(),
            target: Partitions::new(),
            last_seen_ms: now_ms,
            revoke_deadline_ms: None,
            classic: None,
        }
    }

    /// How long it may hold what it must give up. A consumer-protocol
    /// member: its rebalance timeout (Kafka's revocation timeout). A classic
    /// member learns of a new epoch only from its next heartbeat (which the
    /// state does not see) and must then rejoin, sync, revoke and rejoin: its
    /// session timeout more (Kafka times each step from the heartbeat that
    /// told it, on the coordinator's memory).
    pub(super) fn grace_ms(&self) -> i64 {
        let rebalance = self.rebalance_timeout_ms as i64;
        match self.classic {
            Some(_) => rebalance + self.session_timeout_ms as i64,
            None => rebalance,
        }
    }
}

/// What the group needs to know of the topics (the state's, at apply).
pub trait TopicLookup {
    /// A topic's id and partition count.
    fn find(&self, name: &str) -> Option<(TopicId, i32)>;
    /// Every topic's name.
    fn names(&self) -> Vec<String>;
    /// Which topics `who` may DESCRIBE (the state's ACLs), as a check to
    /// run on each name: built once for many names.
    fn may_describe<'a>(&'a self, _who: &'a Describer) -> Box<dyn Fn(&str) -> bool + 'a> {
        Box::new(|_| true)
    }
}

/// Tests' topics: each name with its id and partition count.
#[cfg(test)]
impl TopicLookup for BTreeMap<String, (TopicId, i32)> {
    fn find(&self, name: &str) -> Option<(TopicId, i32)> {
        self.get(name).copied()
    }
    fn names(&self) -> Vec<String> {
        self.keys().cloned().collect()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerGroup {
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ConsumerMember>,
    /// Static members: instance id to member id.
    pub instances: BTreeMap<String, String>,
    /// The topics members subscribe to that exist, with id and partition
    /// count: a change bumps the epoch.
    pub subscribed: BTreeMap<String, (TopicId, i32)>,
    /// Every name members subscribe to (resolved regexes included), whether
    /// the topic exists or not: what a heartbeat checks has not changed.
    pub wanted: BTreeSet<String>,
    /// Each regular expression in use and the topics it matched when last
    /// resolved (at `regexes_resolved_ms`).
    pub regexes: BTreeMap<String, BTreeSet<String>>,
    pub regexes_resolved_ms: i64,
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
    pub empty_since_ms: i64,
    /// Whose DESCRIBE the regular expressions' matches are filtered by
    /// (see [`Describer`]; format 11).
    #[serde(default)]
    pub regex_describer: Option<Describer>,
}

/// Compiles a member's regular expression (RE2 syntax, whole-name match).
pub fn compile(regex: &str) -> Result<regex::Regex, GroupError> {
    if regex.len() > MAX_REGEX_LEN {
        return Err(GroupError::InvalidRegularExpression);
    }
    regex::RegexBuilder::new(&format!("^(?:{regex})$"))
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|_| GroupError::InvalidRegularExpression)
}

fn flatten(p: &Partitions) -> Vec<(TopicId, Vec<i32>)> {
    p.iter()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(t, ps)| (*t, ps.iter().copied().collect()))
        .collect()
}

fn intersect(a: &Partitions, b: &Partitions) -> Partitions {
    a.iter()
        .filter_map(|(t, ps)| {
            let both: BTreeSet<i32> = ps.intersection(b.get(t)?).copied().collect();
            (!both.is_empty()).then_some((*t, both))
        })
        .collect()
}

pub(super) fn minus(a: &Partitions, b: &Partitions) -> Partitions {
    a.iter()
        .filter_map(|(t, ps)| {
            let left: BTreeSet<i32> = match b.get(t) {
                Some(drop) => ps.difference(drop).copied().collect(),
                None => ps.clone(),
            };
            (!left.is_empty()).then_some((*t, left))
        })
        .collect()
}

fn is_empty(p: &Partitions) -> bool {
    p.values().all(BTreeSet::is_empty)
}

fn same(a: &Partitions, b: &Partitions) -> bool {
    minus(a, b).is_empty() && minus(b, a).is_empty()
}

impl ConsumerGroup {
    /// Kafka's state names for a consumer group.
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.epoch > self.assignment_epoch {
            "Assigning"
        } else if self.members.values().any(|m| !self.reconciled(m)) {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    fn reconciled(&self, m: &ConsumerMember) -> bool {
        m.state == Reconciliation::Stable && m.epoch == self.assignment_epoch
    }

    /// The earliest revocation deadline, when a member that has not given
    /// up its partitions is fenced.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        self.members
            .values()
            .filter_map(|m| m.revoke_deadline_ms)
            .min()
    }

    /// Every topic the members subscribe to (for OffsetDelete and expiry).
    pub fn subscribed_topics(&self) -> BTreeSet<String> {
        self.subscribed.keys().cloned().collect()
    }

    /// The topic names a member subscribes to, its regex's matches included.
    fn topics_of(&self, m: &ConsumerMember) -> BTreeSet<String> {
        let mut topics: BTreeSet<String> = m.subscribed_topics.iter().cloned().collect();
        if let Some(matched) = m
            .subscribed_regex
            .as_ref()
            .and_then(|r| self.regexes.get(r))
        {
            topics.extend(matched.iter().cloned());
        }
        topics
    }

    fn resolve_subscribed(&self, topics: &dyn TopicLookup) -> BTreeMap<String, (TopicId, i32)> {
        self.wanted
            .iter()
            .filter_map(|name| topics.find(name).map(|found| (name.clone(), found)))
            .collect()
    }

    fn regexes_due(&self, now_ms: i64) -> bool {
        let wanted: BTreeSet<&String> = self
            .members
            .values()
            .filter_map(|m| m.subscribed_regex.as_ref())
            .collect();
        if wanted.is_empty() {
            return !self.regexes.is_empty();
        }
        now_ms >= self.regexes_resolved_ms + REGEX_REFRESH_MS
            || wanted.iter().any(|r| !self.regexes.contains_key(*r))
    }

    /// Matches every regex in use against the topics (compiled when a
    /// member brought it, so they compile).
    fn resolve_regexes(&mut self, topics: &dyn TopicLookup, now_ms: i64) {
        let wanted: BTreeSet<String> = self
            .members
            .values()
            .filter_map(|m| m.subscribed_regex.clone())
            .collect();
        let names = if wanted.is_empty() {
            Vec::new()
        } else {
            topics.names()
        };
        let describable = self
            .regex_describer
            .as_ref()
            .map(|d| topics.may_describe(d));
        self.regexes = wanted
            .into_iter()
            .map(|r| {
                let matched = match compile(&r) {
                    Ok(re) => names
                        .iter()
                        .filter(|n| re.is_match(n))
                        .filter(|n| describable.as_ref().is_none_or(|may| may(n)))
                        .cloned()
                        .collect(),
                    Err(_) => BTreeSet::new(),
                };
                (r, matched)
            })
            .collect();
        self.regexes_resolved_ms = now_ms;
    }

    /// The answer to a heartbeat that would change nothing, if it is one:
    /// a refusal (an unknown or fenced member costs the log nothing), or a
    /// member reconciled at the group's epoch whose subscription and owned
    /// partitions are as stored, with no resolution due. The leader answers
    /// it from its state, without a write; joins and leaves are written.
    pub fn unchanged(
        &self,
        hb: &ConsumerHeartbeat,
        topics: &dyn TopicLookup,
    ) -> Option<Result<ConsumerAnswer, GroupError>> {
        if hb.member_epoch == JOIN_EPOCH {
            return None;
        }
        if let Err(refused) = self.check(hb) {
            return Some(Err(refused));
        }
        if hb.member_epoch < JOIN_EPOCH {
            return None;
        }
        let m = self.members.get(&hb.member_id)?;
        let instance_ok = match &hb.instance_id {
            Some(i) => self.instances.get(i) == Some(&hb.member_id),
            None => true,
        };
        let differs = |asked: &Option<String>, stored: &Option<String>| {
            asked.as_ref().is_some_and(|a| Some(a) != stored.as_ref())
        };
        let topics_differ = hb.subscribed_topics.as_ref().is_some_and(|t| {
            let asked: BTreeSet<&String> = t.iter().collect();
            asked != m.subscribed_topics.iter().collect()
        });
        let owned_differs = hb.owned().is_some_and(|o| !same(&o, &m.assigned));
        let unchanged = instance_ok
            && hb.member_epoch == m.epoch
            && self.epoch == self.assignment_epoch
            && self.reconciled(m)
            && !differs(&hb.rack_id, &m.rack_id)
            && (hb.rebalance_timeout_ms == -1 || hb.rebalance_timeout_ms == m.rebalance_timeout_ms)
            && !topics_differ
            && !differs(&hb.subscribed_regex, &m.subscribed_regex)
            && !differs(&hb.assignor, &m.assignor)
            && hb.session_timeout_ms == m.session_timeout_ms
            && hb.heartbeat_interval_ms == m.heartbeat_interval_ms
            && hb.client_id == m.client_id
            && !owned_differs
            && !self.regexes_due(hb.now_ms)
            && self.topics_unchanged(topics);
        unchanged.then(|| {
            Ok(ConsumerAnswer {
                member_id: hb.member_id.clone(),
                member_epoch: m.epoch,
                heartbeat_interval_ms: m.heartbeat_interval_ms,
                assignment: hb.is_full().then(|| flatten(&m.assigned)),
            })
        })
    }

    /// Whether every topic the members subscribe to is as when last
    /// resolved (exists or not, same id and partitions): one lookup per
    /// name, not per member.
    fn topics_unchanged(&self, topics: &dyn TopicLookup) -> bool {
        self.wanted
            .iter()
            .all(|name| topics.find(name) == self.subscribed.get(name).copied())
    }

    /// Kafka's checks of who sends a heartbeat, before anything changes.
    pub(super) fn check(&self, hb: &ConsumerHeartbeat) -> Result<(), GroupError> {
        if let Some(regex) = &hb.subscribed_regex
            && !regex.is_empty()
            && !self.regexes.contains_key(regex)
        {
            compile(regex)?;
            let known: BTreeSet<&String> = self
                .members
                .values()
                .filter_map(|m| m.subscribed_regex.as_ref())
                .collect();
            if known.len() >= MAX_REGEXES && !known.contains(regex) {
                return Err(GroupError::InvalidRegularExpression);
            }
        }
        if hb.assignor.as_deref().is_some_and(|a| !assign::is_known(a)) {
            return Err(GroupError::UnsupportedAssignor);
        }
        // A classic member's id is not the consumer protocol's to use.
        if self
            .members
            .get(&hb.member_id)
            .is_some_and(|m| m.classic.is_some())
        {
            return Err(GroupError::UnknownMemberId);
        }
        if hb.member_epoch == JOIN_EPOCH {
            let holder = hb.instance_id.as_ref().and_then(|i| self.instances.get(i));
            // A static member switching protocol (restarted with the
            // consumer protocol) takes its classic self's place, as Kafka.
            if let Some(holder) = holder
                && *holder != hb.member_id
                && self
                    .members
                    .get(holder)
                    .is_some_and(|m| m.epoch != STATIC_LEAVE_EPOCH && m.classic.is_none())
            {
                return Err(GroupError::UnreleasedInstanceId);
            }
            // A static member taking its place does not grow the group.
            if !self.members.contains_key(&hb.member_id)
                && holder.is_none()
                && self.members.len() >= MAX_GROUP_SIZE
            {
                return Err(GroupError::GroupMaxSizeReached);
            }
            return Ok(());
        }
        self.check_instance(&hb.member_id, hb.instance_id.as_deref())?;
        let m = self
            .members
            .get(&hb.member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if hb.member_epoch == LEAVE_EPOCH || hb.member_epoch == STATIC_LEAVE_EPOCH {
            return Ok(());
        }
        // An older epoch is accepted only as the one before (its answer may
        // have been lost), owning nothing it was not given.
        let stale_ok = hb.member_epoch == m.previous_epoch
            && hb
                .owned()
                .is_some_and(|o| minus(&o, &m.assigned).is_empty());
        if hb.member_epoch > m.epoch || (hb.member_epoch < m.epoch && !stale_ok) {
            return Err(GroupError::FencedMemberEpoch);
        }
        Ok(())
    }

    pub(super) fn heartbeat(
        &mut self,
        hb: ConsumerHeartbeat,
        topics: &dyn TopicLookup,
    ) -> Result<ConsumerAnswer, GroupError> {
        self.check(&hb)?;
        let now_ms = hb.now_ms;
        let id = hb.member_id.clone();
        match hb.member_epoch {
            LEAVE_EPOCH => {
                self.fence(&id, now_ms);
                return Ok(ConsumerAnswer {
                    member_id: id,
                    member_epoch: LEAVE_EPOCH,
                    heartbeat_interval_ms: hb.heartbeat_interval_ms,
                    assignment: None,
                });
            }
            // A static member away for a while keeps its place and its
            // partitions until it comes back or its session ends.
            STATIC_LEAVE_EPOCH => {
                let m = self.members.get_mut(&id).expect("checked");
                m.epoch = STATIC_LEAVE_EPOCH;
                m.last_seen_ms = now_ms;
                return Ok(ConsumerAnswer {
                    member_id: id,
                    member_epoch: STATIC_LEAVE_EPOCH,
                    heartbeat_interval_ms: hb.heartbeat_interval_ms,
                    assignment: None,
                });
            }
            _ => {}
        }
        let mut bump = false;
        if hb.member_epoch == JOIN_EPOCH && !self.members.contains_key(&id) {
            let mut member = ConsumerMember::joining(hb.instance_id.clone(), now_ms);
            member.rebalance_timeout_ms = hb.rebalance_timeout_ms.max(0);
            // A static member back from a temporary leave takes its place:
            // what it had and what it was to get.
            if let Some(instance) = &hb.instance_id
                && let Some(old_id) = self.instances.get(instance).cloned()
                && let Some(old) = self.members.remove(&old_id)
            {
                member.assigned = old.assigned;
                member.target = old.target;
            }
            if let Some(instance) = &hb.instance_id {
                self.instances.insert(instance.clone(), id.clone());
            }
            self.members.insert(id.clone(), member);
            bump = true;
        }
        let m = self.members.get_mut(&id).expect("present");
        m.last_seen_ms = now_ms;
        m.client_id = hb.client_id.clone();
        m.client_host = hb.client_host.clone();
        m.session_timeout_ms = hb.session_timeout_ms;
        m.heartbeat_interval_ms = hb.heartbeat_interval_ms;
        if let Some(rack) = &hb.rack_id {
            m.rack_id = Some(rack.clone());
        }
        if hb.rebalance_timeout_ms != -1 {
            m.rebalance_timeout_ms = hb.rebalance_timeout_ms;
        }
        if let Some(assignor) = &hb.assignor {
            m.assignor = Some(assignor.clone());
        }
        if let Some(names) = &hb.subscribed_topics {
            let mut names = names.clone();
            names.sort();
            names.dedup();
            if names != m.subscribed_topics {
                m.subscribed_topics = names;
                bump = true;
            }
        }
        if let Some(regex) = &hb.subscribed_regex {
            let regex = (!regex.is_empty()).then(|| regex.clone());
            if regex != m.subscribed_regex {
                m.subscribed_regex = regex;
                bump = true;
            }
        }
        // Kafka resolves the group's regular expressions with the context of
        // the heartbeat that finds them due (a new one, or the refresh):
        // this member's principal filters their matches.
        if self.regexes_due(now_ms) {
            self.regex_describer = hb.describer.clone();
        }
        self.rebalance_if(bump, topics, now_ms);
        let before = self.members[&id].assigned.clone();
        let owned = hb.owned();
        self.reconcile(&id, owned.clone(), now_ms);
        let m = &self.members[&id];
        // A member that owns what it may not hold is told again what it may.
        let mut may_hold = m.assigned.clone();
        for (t, ps) in &m.revoking {
            may_hold.entry(*t).or_default().extend(ps);
        }
        let overreaching = owned.is_some_and(|o| !minus(&o, &may_hold).is_empty());
        // A member behind its epoch missed an answer: one that changed its
        // assignment may be it (a heartbeat it gave up on, applied after
        // its next one), so it is told the assignment again.
        let behind = hb.member_epoch != JOIN_EPOCH && hb.member_epoch != m.epoch;
        let changed = !same(&before, &m.assigned) || overreaching || behind;
        Ok(ConsumerAnswer {
            member_id: id,
            member_epoch: m.epoch,
            heartbeat_interval_ms: m.heartbeat_interval_ms,
            assignment: (hb.member_epoch == JOIN_EPOCH || hb.is_full() || changed)
                .then(|| flatten(&m.assigned)),
        })
    }

    /// What the members subscribe to, resolved again (regexes when due);
    /// whether it changed.
    pub(super) fn refresh_subscriptions(&mut self, topics: &dyn TopicLookup, now_ms: i64) -> bool {
        let mut changed = false;
        if self.regexes_due(now_ms) {
            let before = self.regexes.clone();
            self.resolve_regexes(topics, now_ms);
            changed |= before != self.regexes;
        }
        self.wanted = self
            .members
            .values()
            .flat_map(|m| self.topics_of(m))
            .collect();
        let subscribed = self.resolve_subscribed(topics);
        if subscribed != self.subscribed {
            self.subscribed = subscribed;
            changed = true;
        }
        changed
    }

    /// After a member changed (`bump`: joined, or its subscription did):
    /// the epoch moves if anything members subscribe to changed, and the
    /// targets are computed at the new epoch.
    fn rebalance_if(&mut self, bump: bool, topics: &dyn TopicLookup, now_ms: i64) {
        if self.refresh_subscriptions(topics, now_ms) || bump {
            self.epoch += 1;
        }
        if self.epoch > self.assignment_epoch {
            self.assign_targets(now_ms);
        }
    }

    /// The assignor most members prefer (ties to the first by name), else
    /// Kafka's default, `uniform`.
    pub fn assignor(&self) -> &str {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for a in self.members.values().filter_map(|m| m.assignor.as_deref()) {
            *votes.entry(a).or_default() += 1;
        }
        let most = votes.values().copied().max().unwrap_or(0);
        votes
            .into_iter()
            .find(|(_, n)| *n == most)
            .map_or(assign::UNIFORM, |(a, _)| a)
    }

    /// Every member's target at the group's epoch.
    fn assign_targets(&mut self, now_ms: i64) {
        let counts: BTreeMap<TopicId, i32> = self.subscribed.values().copied().collect();
        let subscribers: Vec<Subscriber<'_>> = self
            .members
            .iter()
            .map(|(id, m)| Subscriber {
                id,
                instance_id: m.instance_id.as_deref(),
                topics: self
                    .topics_of(m)
                    .iter()
                    .filter_map(|name| self.subscribed.get(name).map(|(id, _)| *id))
                    .collect(),
                previous: &m.target,
            })
            .collect();
        let mut targets = assign::assign(self.assignor(), &subscribers, &counts);
        for (id, m) in &mut self.members {
            m.target = targets.remove(id).unwrap_or_default();
            // A classic member learns of the new epoch from its heartbeat
            // and must rejoin within its rebalance timeout (Kafka's join
            // timeout), or it is fenced and what it holds moves.
            if m.classic.is_some() && m.epoch < self.epoch {
                let grace = m.grace_ms();
                m.revoke_deadline_ms.get_or_insert(now_ms + grace);
            }
        }
        self.assignment_epoch = self.epoch;
    }

    /// Kafka's `CurrentAssignmentBuilder`: moves the member toward its
    /// target as far as it may now.
    fn reconcile(&mut self, id: &str, owned: Option<Partitions>, now_ms: i64) {
        let target_epoch = self.assignment_epoch;
        let m = &self.members[id];
        // `None`: the member did not say; it counts as still owning.
        let still_owns =
            |p: &Partitions| owned.as_ref().is_none_or(|o| !is_empty(&intersect(o, p)));
        let ready = match m.state {
            Reconciliation::Stable => m.epoch != target_epoch,
            Reconciliation::UnrevokedPartitions => !still_owns(&m.revoking),
            Reconciliation::UnreleasedPartitions => true,
        };
        if !ready {
            return;
        }
        let held = self.held(Some(id));
        let keep = intersect(&m.assigned, &m.target);
        let revoke = minus(&m.assigned, &keep);
        let wanted = minus(&m.target, &keep);
        let free = minus(&wanted, &held);
        let grace_ms = m.grace_ms();
        let m = self.members.get_mut(id).expect("present");
        if !is_empty(&revoke) && still_owns(&revoke) {
            m.state = Reconciliation::UnrevokedPartitions;
            m.assigned = keep;
            m.revoking = revoke;
            m.revoke_deadline_ms.get_or_insert(now_ms + grace_ms);
            return;
        }
        if m.epoch != target_epoch {
            m.previous_epoch = m.epoch;
            m.epoch = target_epoch;
        }
        m.state = if same(&free, &wanted) {
            Reconciliation::Stable
        } else {
            Reconciliation::UnreleasedPartitions
        };
        let mut assigned = keep;
        for (t, ps) in free {
            assigned.entry(t).or_default().extend(ps);
        }
        m.assigned = assigned;
        m.revoking = Partitions::new();
        m.revoke_deadline_ms = None;
    }

    /// Removes a member (it left, its session ended, or it did not give up
    /// its partitions in time): the others are reassigned.
    fn fence(&mut self, id: &str, now_ms: i64) {
        if let Some(m) = self.members.remove(id) {
            if let Some(instance) = &m.instance_id
                && self.instances.get(instance).map(String::as_str) == Some(id)
            {
                self.instances.remove(instance);
            }
            self.epoch += 1;
            if self.members.is_empty() {
                self.empty_since_ms = now_ms;
                self.subscribed.clear();
                self.wanted.clear();
                self.regexes.clear();
            }
        }
    }

    /// Members whose session ran out (each with when the leader last heard it).
    pub(super) fn expire_members(&mut self, members: &[(String, i64)], now_ms: i64) {
        for (id, heard_ms) in members {
            let expired = self.members.get(id).is_some_and(|m| {
                let last = m.last_seen_ms.max((*heard_ms).min(now_ms));
                last.saturating_add(m.session_timeout_ms as i64) <= now_ms
            });
            if expired {
                self.fence(id, now_ms);
            }
        }
    }

    /// Members that did not give up their partitions within their
    /// rebalance timeout are fenced.
    pub(super) fn tick(&mut self, now_ms: i64) {
        let late: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.revoke_deadline_ms.is_some_and(|d| d <= now_ms))
            .map(|(id, _)| id.clone())
            .collect();
        for id in late {
            self.fence(&id, now_ms);
        }
    }

    /// OffsetCommit from a member of this group: its epoch must be current.
    pub(super) fn check_commit(&self, commit: &CommitOffsets) -> Result<(), GroupError> {
        if commit.generation < 0 && self.members.is_empty() {
            return Ok(());
        }
        let m = self
            .members
            .get(&commit.member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if commit.generation != m.epoch {
            // A classic member's client knows its generation's error.
            return Err(match m.classic {
                Some(_) => GroupError::IllegalGeneration,
                None => GroupError::StaleMemberEpoch,
            });
        }
        Ok(())
    }

    /// Whether `protocols` may join as a classic member: of type `consumer`,
    /// sharing a protocol with every classic member (Kafka's
    /// `throwIfClassicProtocolIsNotSupported`).
    fn supports_classic(&self, protocol_type: &str, protocols: &[(String, Vec<u8>)]) -> bool {
        protocol_type == "consumer"
            && !protocols.is_empty()
            && protocols.iter().any(|(name, _)| {
                self.members
                    .values()
                    .filter_map(|m| m.classic.as_ref())
                    .all(|c| c.protocols.iter().any(|(n, _)| n == name))
            })
    }

    /// A classic member's JoinGroup (Kafka's `classicGroupJoinToConsumerGroup`):
    /// the member is created or updated from its subscription and reconciled
    /// as a heartbeat would be, what it owns taken from the subscription's
    /// owned partitions (an eager member, owning none, gives up at once; a
    /// cooperative one keeps them until it rejoins without them). Answered
    /// at once, at the member's epoch.
    pub(super) fn classic_join(
        &mut self,
        join: JoinGroup,
        topics: &dyn TopicLookup,
    ) -> Result<Joined, GroupError> {
        let now_ms = join.now_ms;
        let holder = join
            .instance_id
            .as_ref()
            .and_then(|i| self.instances.get(i))
            .cloned();
        let new = join.member_id.is_empty();
        if holder.is_none()
            && !self.members.contains_key(&join.member_id)
            && self.members.len() >= MAX_GROUP_SIZE
        {
            return Err(GroupError::GroupMaxSizeReached);
        }
        if !self.supports_classic(&join.protocol_type, &join.protocols) {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        let prefix = join.instance_id.as_deref().unwrap_or(&join.client_id);
        let id = match new {
            true => format!("{prefix}-{}", join.fresh_id),
            false => join.member_id.clone(),
        };
        // KIP-394: a new dynamic member is given an id to come back with;
        // nothing is kept (any id comes back as a new member, as in Kafka).
        if new && join.instance_id.is_none() && join.require_known_member_id {
            return Ok(Joined::MemberIdRequired(id));
        }
        match (&holder, new) {
            (Some(h), false) if *h != id => return Err(GroupError::FencedInstanceId),
            (None, false) if join.instance_id.is_some() => {
                return Err(GroupError::UnknownMemberId);
            }
            _ => {}
        }
        if self.members.get(&id).is_some_and(|m| m.classic.is_none()) {
            return Err(GroupError::UnknownMemberId);
        }
        let Some(mut subscribed) = join.subscribed_topics.clone() else {
            return Err(GroupError::InconsistentGroupProtocol);
        };
        subscribed.sort();
        subscribed.dedup();
        let mut bump = false;
        if !self.members.contains_key(&id) {
            let mut member = ConsumerMember::joining(join.instance_id.clone(), now_ms);
            // A static member restarted: it takes its instance's place.
            if let Some(old_id) = &holder
                && let Some(old) = self.members.remove(old_id)
            {
                member.epoch = old.epoch;
                member.previous_epoch = old.previous_epoch;
                member.state = old.state;
                member.assigned = old.assigned;
                member.revoking = old.revoking;
                member.target = old.target;
                member.subscribed_topics = old.subscribed_topics;
            } else {
                bump = true;
            }
            if let Some(instance) = &join.instance_id {
                self.instances.insert(instance.clone(), id.clone());
            }
            self.members.insert(id.clone(), member);
        }
        let m = self.members.get_mut(&id).expect("present");
        m.last_seen_ms = now_ms;
        m.client_id = join.client_id;
        m.client_host = join.client_host;
        m.session_timeout_ms = join.session_timeout_ms;
        if join.rebalance_timeout_ms >= 0 {
            m.rebalance_timeout_ms = join.rebalance_timeout_ms;
        }
        if subscribed != m.subscribed_topics {
            m.subscribed_topics = subscribed;
            bump = true;
        }
        m.classic = Some(ClassicMeta {
            protocols: join.protocols,
        });
        self.rebalance_if(bump, topics, now_ms);
        let owned = convert::by_id(&join.owned.unwrap_or_default(), topics);
        let before = {
            let m = &self.members[&id];
            (m.epoch, m.revoking.clone())
        };
        self.hold_back_unknown_owned(&id, &owned, now_ms);
        self.reconcile(&id, Some(owned), now_ms);
        // Its join timeout: none once reconciled; restarted when it made
        // progress (moved on, or gave something up), so a JoinGroup loop
        // that gives nothing up cannot hold partitions forever.
        let target_epoch = self.assignment_epoch;
        let m = self.members.get_mut(&id).expect("present");
        let behind = m.state == Reconciliation::UnrevokedPartitions || m.epoch < target_epoch;
        if !behind {
            m.revoke_deadline_ms = None;
        } else if (m.epoch, &m.revoking) != (before.0, &before.1) {
            m.revoke_deadline_ms = Some(now_ms + m.grace_ms());
        } else {
            let grace = m.grace_ms();
            m.revoke_deadline_ms.get_or_insert(now_ms + grace);
        }
        let m = &self.members[&id];
        Ok(Joined::InConsumerGroup {
            member_id: id.clone(),
            generation: m.epoch,
            protocol: m.classic.as_ref().expect("just set").protocol().to_string(),
        })
    }

    /// Partitions a classic member says it owns that nobody is assigned (a
    /// group upgraded while its assignment was unknown, or a client ahead of
    /// what the group recorded): it must give them up before it moves on, so
    /// no other member is given them meanwhile.
    fn hold_back_unknown_owned(&mut self, id: &str, owned: &Partitions, now_ms: i64) {
        let unknown = minus(owned, &self.held(None));
        if is_empty(&unknown) {
            return;
        }
        let m = self.members.get_mut(id).expect("present");
        for (t, ps) in unknown {
            m.revoking.entry(t).or_default().extend(ps);
        }
        m.state = Reconciliation::UnrevokedPartitions;
        m.revoke_deadline_ms.get_or_insert(now_ms + m.grace_ms());
    }

    /// Partitions assigned to members, or not yet given up by them (all
    /// but `except`).
    fn held(&self, except: Option<&str>) -> Partitions {
        let mut held = Partitions::new();
        for (id, m) in &self.members {
            if except != Some(id.as_str()) {
                for (t, ps) in m.assigned.iter().chain(&m.revoking) {
                    held.entry(*t).or_default().extend(ps);
                }
            }
        }
        held
    }

    /// A `group.instance.id` sent with a request must name its member:
    /// unknown, UNKNOWN_MEMBER_ID; another member's, FENCED_INSTANCE_ID.
    fn check_instance(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), GroupError> {
        match instance_id.map(|i| self.instances.get(i)) {
            Some(None) => Err(GroupError::UnknownMemberId),
            Some(Some(holder)) if holder != member_id => Err(GroupError::FencedInstanceId),
            _ => Ok(()),
        }
    }

    /// Kafka's checks of a classic member's SyncGroup or Heartbeat: who it
    /// is, its generation, and (SyncGroup) its protocol.
    fn check_classic(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<&ConsumerMember, GroupError> {
        self.check_instance(member_id, instance_id)?;
        let m = self
            .members
            .get(member_id)
            .filter(|m| m.classic.is_some())
            .ok_or(GroupError::UnknownMemberId)?;
        if generation != m.epoch {
            return Err(GroupError::IllegalGeneration);
        }
        Ok(m)
    }

    /// A classic member's SyncGroup (Kafka's `classicGroupSyncToConsumerGroup`):
    /// what the group assigned it, whatever the client sent.
    pub(super) fn classic_sync(
        &mut self,
        sync: &SyncGroup,
    ) -> Result<ClassicAssignment, GroupError> {
        let m = self.check_classic(
            &sync.member_id,
            sync.instance_id.as_deref(),
            sync.generation,
        )?;
        let meta = m.classic.as_ref().expect("checked");
        let inconsistent =
            |asked: &Option<String>, ours: &str| asked.as_deref().is_some_and(|a| a != ours);
        if inconsistent(&sync.protocol_type, "consumer")
            || inconsistent(&sync.protocol, meta.protocol())
        {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        if self.epoch > m.epoch && m.state != Reconciliation::UnrevokedPartitions {
            return Err(GroupError::RebalanceInProgress);
        }
        let names: BTreeMap<TopicId, &String> = self
            .subscribed
            .iter()
            .map(|(name, (id, _))| (*id, name))
            .collect();
        let answer = ClassicAssignment {
            protocol: meta.protocol().to_string(),
            subscription: meta.subscription().to_vec(),
            partitions: m
                .assigned
                .iter()
                .filter_map(|(t, ps)| {
                    Some(((*names.get(t)?).clone(), ps.iter().copied().collect()))
                })
                .collect(),
        };
        self.members
            .get_mut(&sync.member_id)
            .expect("checked")
            .last_seen_ms = sync.now_ms;
        Ok(answer)
    }

    /// A classic member's Heartbeat (Kafka's
    /// `classicGroupHeartbeatToConsumerGroup`): REBALANCE_IN_PROGRESS tells
    /// it to rejoin, when the group moved past its epoch, it must give
    /// partitions up, or partitions it waits for are now free. The session
    /// is extended unless the member or its generation is refused.
    pub(super) fn classic_heartbeat(
        &self,
        beat: &GroupHeartbeat,
    ) -> (Result<(), GroupError>, bool) {
        let m = match self.check_classic(
            &beat.member_id,
            beat.instance_id.as_deref(),
            beat.generation,
        ) {
            Ok(m) => m,
            Err(e) => return (Err(e), false),
        };
        let freed = m.state == Reconciliation::UnreleasedPartitions && {
            let held = self.held(Some(&beat.member_id));
            !is_empty(&minus(&minus(&m.target, &m.assigned), &held))
        };
        let rejoin =
            m.epoch < self.epoch || m.state == Reconciliation::UnrevokedPartitions || freed;
        match rejoin {
            true => (Err(GroupError::RebalanceInProgress), true),
            false => (Ok(()), true),
        }
    }

    /// LeaveGroup in a consumer group: each member, by member id or (an
    /// administrator's) by instance id, is removed.
    pub(super) fn classic_leave(
        &mut self,
        leaving: Vec<Leaving>,
        now_ms: i64,
    ) -> Vec<Result<(), GroupError>> {
        leaving
            .into_iter()
            .map(
                |Leaving {
                     member_id,
                     instance_id,
                 }| {
                    let id = match member_id.is_empty() {
                        true => instance_id
                            .as_ref()
                            .and_then(|i| self.instances.get(i))
                            .cloned()
                            .ok_or(GroupError::UnknownMemberId)?,
                        false => {
                            self.check_instance(&member_id, instance_id.as_deref())?;
                            member_id
                        }
                    };
                    // Kafka lets an administrator remove a consumer-protocol
                    // static member by instance id; floe's LeaveGroup removes
                    // classic members only (format 8 refused LeaveGroup in a
                    // consumer group, and its logged ones replay the same).
                    if self.members.get(&id).is_none_or(|m| m.classic.is_none()) {
                        return Err(GroupError::UnknownMemberId);
                    }
                    self.fence(&id, now_ms);
                    Ok(())
                },
            )
            .collect()
    }

    pub fn describe(&self, topics: &dyn Fn(TopicId) -> Option<String>) -> ConsumerGroupDescription {
        let named = |p: &Partitions| {
            p.iter()
                .filter(|(_, ps)| !ps.is_empty())
                .map(|(t, ps)| {
                    (
                        *t,
                        topics(*t).unwrap_or_default(),
                        ps.iter().copied().collect(),
                    )
                })
                .collect()
        };
        ConsumerGroupDescription {
            state: self.state_name().to_string(),
            epoch: self.epoch,
            assignment_epoch: self.assignment_epoch,
            assignor: self.assignor().to_string(),
            members: self
                .members
                .iter()
                .map(|(id, m)| ConsumerMemberDescription {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    member_epoch: m.epoch,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed_topics: m.subscribed_topics.clone(),
                    subscribed_regex: m.subscribed_regex.clone(),
                    assignment: named(&m.assigned),
                    target: named(&m.target),
                    classic: m.classic.is_some(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod interleavings;
