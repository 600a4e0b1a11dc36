//! Consumer groups (Kafka's classic group protocol), as part of the
//! deterministic state machine: membership, generations, assignments and
//! committed offsets all live in the metastore, so any agent can coordinate
//! any group and an agent's death loses nothing.
//!
//! What is *not* in the log is liveness: a Heartbeat is answered by the
//! metastore leader from its state and noted only in the leader's memory
//! (`raft::liveness`), so a consumer's heartbeat costs no quorum write. The
//! leader's timers propose [`ExpireMembers`] for members it has not heard
//! from within their session, carrying what it last heard, and [`TickGroup`]
//! when a rebalance or sync deadline passes. A new leader knows no
//! heartbeats: it counts every member as heard from when it began to lead
//! (as Kafka's coordinator does when it loads a group), so a failover costs
//! at most one extra session timeout before a dead member goes.
//!
//! Time comes in with every command (`now_ms`, the leader's stamp): the
//! state machine never reads a clock. The rules are Kafka's (its
//! `GroupMetadataManager` and `ClassicGroup`): [`classic`] holds one group's.

pub mod assign;
pub mod classic;
pub mod consumer;
pub mod convert;
pub mod share;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The groups' messages and limits, as the contract has them.
pub use crate::contract::groups::*;
pub use classic::{Group, Member};
pub use consumer::{ConsumerGroup, TopicLookup};
pub use convert::{ClassicMeta, Rules};

/// A group operation as the log holds it (defined with the log's commands).
pub use crate::state::GroupCommand;

/// Every group: a name is either a classic group or a consumer group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Groups {
    groups: BTreeMap<String, Group>,
    consumer: BTreeMap<String, ConsumerGroup>,
    /// Share groups (format 15).
    #[serde(default)]
    share: BTreeMap<String, share::ShareGroup>,
}

impl Groups {
    pub fn get(&self, group: &str) -> Option<&Group> {
        self.groups.get(group)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Group)> {
        self.groups.iter()
    }

    /// Groups of every kind.
    pub fn count(&self) -> usize {
        self.groups.len() + self.consumer.len() + self.share.len()
    }

    pub fn share_groups(&self) -> impl Iterator<Item = (&String, &share::ShareGroup)> {
        self.share.iter()
    }

    pub fn share_group(&self, group: &str) -> Option<&share::ShareGroup> {
        self.share.get(group)
    }

    /// The share group `group`, created if `create` and no group of
    /// another kind has the name (Kafka: "Group ... is not a share group").
    pub fn share_group_mut(
        &mut self,
        group: &str,
        create: bool,
    ) -> Result<&mut share::ShareGroup, GroupError> {
        if self.groups.contains_key(group) || self.consumer.contains_key(group) {
            return Err(GroupError::GroupIdNotFound);
        }
        match self.share.contains_key(group) {
            true => Ok(self.share.get_mut(group).expect("checked")),
            false if create => Ok(self.share.entry(group.to_string()).or_default()),
            false => Err(GroupError::GroupIdNotFound),
        }
    }

    pub fn consumer_groups(&self) -> impl Iterator<Item = (&String, &ConsumerGroup)> {
        self.consumer.iter()
    }

    pub fn consumer_group(&self, group: &str) -> Option<&ConsumerGroup> {
        self.consumer.get(group)
    }

    pub fn list(&self) -> Vec<GroupListing> {
        let classic = self.groups.iter().map(|(name, g)| GroupListing {
            name: name.clone(),
            state: g.state_name().to_string(),
            protocol_type: g.protocol_type.clone().unwrap_or_default(),
            group_type: "classic".into(),
        });
        let consumer = self.consumer.iter().map(|(name, g)| GroupListing {
            name: name.clone(),
            state: g.state_name().to_string(),
            protocol_type: "consumer".into(),
            group_type: "consumer".into(),
        });
        let share = self.share.iter().map(|(name, g)| GroupListing {
            name: name.clone(),
            state: if g.members.is_empty() {
                "Empty"
            } else {
                "Stable"
            }
            .to_string(),
            protocol_type: "share".into(),
            group_type: "share".into(),
        });
        let mut all: Vec<GroupListing> = classic.chain(consumer).chain(share).collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// The committed offsets of a group of either kind.
    fn offsets_of(&self, group: &str) -> Option<&BTreeMap<(String, i32), CommittedOffset>> {
        self.groups
            .get(group)
            .map(|g| &g.offsets)
            .or_else(|| self.consumer.get(group).map(|g| &g.offsets))
    }

    /// A heartbeat of the consumer protocol that changes nothing, answered
    /// without a write (see [`ConsumerGroup::unchanged`]).
    pub fn consumer_unchanged(
        &self,
        hb: &ConsumerHeartbeat,
        topics: &dyn TopicLookup,
    ) -> Option<Result<ConsumerAnswer, GroupError>> {
        match self.consumer.get(&hb.group) {
            Some(g) => g.unchanged(hb, topics),
            None if hb.member_epoch != JOIN_EPOCH => Some(Err(GroupError::GroupIdNotFound)),
            None => None,
        }
    }

    /// A heartbeat of the consumer protocol. A join (epoch 0) creates the
    /// group, takes over an empty classic group's name and offsets, or
    /// upgrades a classic group with members as the migration policy allows
    /// (see [`convert`]); a member leaving may leave classic members alone,
    /// and the group is then downgraded.
    pub fn consumer_heartbeat(
        &mut self,
        hb: ConsumerHeartbeat,
        topics: &dyn TopicLookup,
        rules: Rules,
    ) -> Result<ConsumerAnswer, GroupError> {
        // Kafka: "Group ... is not a consumer group".
        if self.share.contains_key(&hb.group) {
            return Err(GroupError::GroupIdNotFound);
        }
        let classic_in_use = |g: &Group| match rules {
            Rules::Format8 => !g.members.is_empty() || !g.pending.is_empty(),
            // Ids handed out (KIP-394) hold nothing: the group is empty.
            Rules::Migrating(_) => !g.members.is_empty(),
        };
        if !self.consumer.contains_key(&hb.group)
            && hb.member_epoch == JOIN_EPOCH
            && self.groups.get(&hb.group).is_some_and(classic_in_use)
        {
            return match rules {
                Rules::Format8 => Err(GroupError::GroupIdNotFound),
                Rules::Migrating(policy) => self.upgrade_and_join(hb, topics, policy),
            };
        }
        if !self.consumer.contains_key(&hb.group) {
            if hb.member_epoch != JOIN_EPOCH {
                return Err(GroupError::GroupIdNotFound);
            }
            if !self.groups.contains_key(&hb.group) && self.count() >= MAX_GROUPS {
                return Err(GroupError::GroupMaxSizeReached);
            }
            // Refused before anything is created or converted.
            ConsumerGroup::default().check(&hb)?;
            let mut created = ConsumerGroup {
                empty_since_ms: hb.now_ms,
                ..ConsumerGroup::default()
            };
            if self.groups.contains_key(&hb.group) {
                let classic = self.groups.remove(&hb.group).expect("just seen");
                created.offsets = classic.offsets;
                created.empty_since_ms = classic.empty_since_ms;
            }
            self.consumer.insert(hb.group.clone(), created);
        }
        let (group, now_ms) = (hb.group.clone(), hb.now_ms);
        let g = self.consumer.get_mut(&group).expect("present");
        let answer = g.heartbeat(hb, topics);
        if let Rules::Migrating(policy) = rules {
            self.maybe_downgrade(&group, topics, now_ms, policy);
        }
        answer
    }

    pub fn describe_consumer(
        &self,
        group: &str,
        topics: &dyn Fn(crate::types::TopicId) -> Option<String>,
    ) -> Option<ConsumerGroupDescription> {
        self.consumer.get(group).map(|g| g.describe(topics))
    }

    pub fn describe(&self, group: &str) -> Option<GroupDescription> {
        self.groups.get(group).map(Group::describe)
    }

    pub fn view(
        &self,
        group: &str,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Option<MemberView> {
        if let Some(g) = self.consumer.get(group) {
            // Upgraded while the member waited in a classic JoinGroup or
            // SyncGroup: it is told to rejoin, as Kafka completes them.
            return Some(MemberView {
                version: u64::MAX,
                generation: g.epoch,
                phase: Phase::Joining { deadline_ms: 0 },
                protocol_type: Some("consumer".into()),
                protocol: None,
                leader: None,
                member: g.members.contains_key(member_id).then_some(false),
                fenced: false,
                members: Vec::new(),
                assignment: None,
                converted: true,
            });
        }
        self.groups
            .get(group)
            .map(|g| g.view(member_id, instance_id))
    }

    pub fn offsets(
        &self,
        group: &str,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Vec<((String, i32), Option<CommittedOffset>)> {
        let Some(offsets) = self.offsets_of(group) else {
            return partitions
                .unwrap_or_default()
                .into_iter()
                .map(|p| (p, None))
                .collect();
        };
        match partitions {
            None => offsets
                .iter()
                .map(|(p, o)| (p.clone(), Some(o.clone())))
                .collect(),
            Some(wanted) => wanted
                .into_iter()
                .map(|p| {
                    let found = offsets.get(&p).cloned();
                    (p, found)
                })
                .collect(),
        }
    }

    /// Forgets offsets past retention (Kafka's rules: an empty group's
    /// from when it became empty or their commit, whichever is later; a
    /// stable consumer group's of topics it no longer subscribes to, from
    /// their commit), and then groups left with neither members nor offsets.
    pub fn expire_offsets(&mut self, now_ms: i64, retention_ms: i64) {
        let horizon = now_ms.saturating_sub(retention_ms);
        self.groups.retain(|_, g| {
            if g.members.is_empty() {
                let empty_since = g.empty_since_ms;
                g.offsets
                    .retain(|_, o| o.commit_ms.max(empty_since) > horizon);
                return !g.offsets.is_empty() || !g.pending.is_empty();
            }
            if g.phase == Phase::Stable
                && let Some(subscribed) = g.subscribed_topics()
            {
                g.offsets
                    .retain(|(topic, _), o| subscribed.contains(topic) || o.commit_ms > horizon);
            }
            true
        });
        self.consumer.retain(|_, g| {
            if g.members.is_empty() {
                let empty_since = g.empty_since_ms;
                g.offsets
                    .retain(|_, o| o.commit_ms.max(empty_since) > horizon);
                return !g.offsets.is_empty();
            }
            let subscribed = g.subscribed_topics();
            g.offsets
                .retain(|(topic, _), o| subscribed.contains(topic) || o.commit_ms > horizon);
            true
        });
    }

    /// Drops every group's committed offsets of a deleted topic (so a topic
    /// re-created under its name starts with none, as in Kafka).
    pub fn forget_topic(&mut self, topic: &str) {
        for g in self.groups.values_mut() {
            g.offsets.retain(|(t, _), _| t != topic);
        }
        for g in self.consumer.values_mut() {
            g.offsets.retain(|(t, _), _| t != topic);
        }
    }

    pub fn join(
        &mut self,
        join: JoinGroup,
        topics: &dyn TopicLookup,
        rules: Rules,
    ) -> Result<Joined, GroupError> {
        let JoinRules {
            min_session_timeout_ms: min,
            max_session_timeout_ms: max,
            ..
        } = join.rules;
        if !(min..=max).contains(&join.session_timeout_ms) {
            return Err(GroupError::InvalidSessionTimeout);
        }
        // A share group's name is not a classic group's (Kafka answers
        // INCONSISTENT_GROUP_PROTOCOL to a classic join of another kind).
        if self.share.contains_key(&join.group) {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        // A consumer group with members serves a classic member (see
        // `convert`); an empty one's name is taken over (with its offsets)
        // by a new member.
        if let Some(consumer) = self.consumer.get_mut(&join.group) {
            if !consumer.members.is_empty() {
                let Rules::Migrating(policy) = rules else {
                    return Err(GroupError::InconsistentGroupProtocol);
                };
                let (group, now_ms) = (join.group.clone(), join.now_ms);
                let joined = consumer.classic_join(join, topics);
                // Its members may now agree on an epoch (see `convert`):
                // then this member joins the classic group's rebalance and
                // waits for it as any classic member (its protocol is now
                // the group's vote, not its own first choice).
                self.maybe_downgrade(&group, topics, now_ms, policy);
                if let Ok(Joined::InConsumerGroup { member_id, .. }) = &joined
                    && let Some(classic) = self.groups.get_mut(&group)
                {
                    classic.after_join(member_id, now_ms, 0);
                    classic.version += 1;
                    return Ok(Joined::Member(member_id.clone()));
                }
                return joined;
            }
            if !join.member_id.is_empty() {
                return Err(GroupError::UnknownMemberId);
            }
            let consumer = self.consumer.remove(&join.group).expect("just seen");
            self.groups.insert(
                join.group.clone(),
                Group {
                    offsets: consumer.offsets,
                    empty_since_ms: consumer.empty_since_ms,
                    ..Group::default()
                },
            );
        }
        // Only a new member creates a group: a member id names one that exists.
        if !join.member_id.is_empty() && !self.groups.contains_key(&join.group) {
            return Err(GroupError::UnknownMemberId);
        }
        if !self.groups.contains_key(&join.group) && self.count() >= MAX_GROUPS {
            return Err(GroupError::GroupMaxSizeReached);
        }
        let g = self.groups.entry(join.group.clone()).or_default();
        let joined = g.join(join);
        g.version += 1;
        joined
    }

    pub fn sync(&mut self, sync: SyncGroup) -> Result<Synced, GroupError> {
        if let Some(g) = self.consumer.get_mut(&sync.group) {
            return g.classic_sync(&sync).map(Some);
        }
        // Only JoinGroup and standalone offset commits create groups: any
        // name in a Sync, Heartbeat or Leave would otherwise leave one behind.
        let g = self
            .groups
            .get_mut(&sync.group)
            .ok_or(GroupError::UnknownMemberId)?;
        let synced = g.sync(sync);
        g.version += 1;
        synced.map(|()| None)
    }

    /// Checks a heartbeat against the state: its answer, and whether the
    /// member's session is to be extended (Kafka extends it in every case
    /// but a refusal of the member or its generation).
    pub fn check_heartbeat(&self, beat: &GroupHeartbeat) -> (Result<(), GroupError>, bool) {
        if let Some(g) = self.consumer.get(&beat.group) {
            return g.classic_heartbeat(beat);
        }
        match self.groups.get(&beat.group) {
            None => (Err(GroupError::UnknownMemberId), false),
            Some(g) => g.check_heartbeat(beat),
        }
    }

    /// Answers per member, in order.
    pub fn leave(
        &mut self,
        leave: LeaveGroup,
        topics: &dyn TopicLookup,
        policy: MigrationPolicy,
    ) -> Vec<Result<(), GroupError>> {
        if let Some(g) = self.consumer.get_mut(&leave.group) {
            let left = g.classic_leave(leave.members, leave.now_ms);
            self.maybe_downgrade(&leave.group, topics, leave.now_ms, policy);
            return left;
        }
        let Some(g) = self.groups.get_mut(&leave.group) else {
            return leave
                .members
                .iter()
                .map(|_| Err(GroupError::UnknownMemberId))
                .collect();
        };
        let left = g.leave(leave.members, leave.now_ms);
        g.version += 1;
        left
    }

    pub fn tick(&mut self, tick: TickGroup, topics: &dyn TopicLookup, policy: MigrationPolicy) {
        if let Some(g) = self.groups.get_mut(&tick.group) {
            g.tick(tick.now_ms);
            g.version += 1;
        } else if let Some(g) = self.consumer.get_mut(&tick.group) {
            g.tick(tick.now_ms);
            self.maybe_downgrade(&tick.group, topics, tick.now_ms, policy);
        }
    }

    pub fn expire_members(
        &mut self,
        expire: ExpireMembers,
        topics: &dyn TopicLookup,
        policy: MigrationPolicy,
    ) {
        if let Some(g) = self.groups.get_mut(&expire.group) {
            g.expire_members(&expire.members, expire.now_ms);
            g.version += 1;
        } else if let Some(g) = self.consumer.get_mut(&expire.group) {
            g.expire_members(&expire.members, expire.now_ms);
            self.maybe_downgrade(&expire.group, topics, expire.now_ms, policy);
        }
    }

    pub fn commit_offsets(&mut self, commit: CommitOffsets) -> Result<(), GroupError> {
        let simple = commit.generation < 0;
        if let Some(g) = self.consumer.get_mut(&commit.group) {
            g.check_commit(&commit)?;
            let now_ms = commit.now_ms;
            if let Some(member) = g.members.get_mut(&commit.member_id) {
                member.last_seen_ms = now_ms;
            }
            store_offsets(&mut g.offsets, commit.offsets, now_ms);
            return Ok(());
        }
        // As Kafka: a commit with no generation creates the group to hold
        // its offsets; any other names a generation that cannot exist.
        let full = self.count() >= MAX_GROUPS;
        let g = match self.groups.get_mut(&commit.group) {
            Some(g) => g,
            None if simple && full => {
                return Err(GroupError::GroupMaxSizeReached);
            }
            None if simple => self
                .groups
                .entry(commit.group.clone())
                .or_insert_with(|| Group {
                    empty_since_ms: commit.now_ms,
                    ..Group::default()
                }),
            // (OffsetCommit before v9 calls it ILLEGAL_GENERATION.)
            None => return Err(GroupError::GroupIdNotFound),
        };
        g.check_commit(&commit)?;
        let now_ms = commit.now_ms;
        if let Some(member) = g.members.get_mut(&commit.member_id) {
            member.last_seen_ms = now_ms;
        }
        store_offsets(&mut g.offsets, commit.offsets, now_ms);
        Ok(())
    }

    /// Whether a transaction may commit these offsets for the group at its
    /// end (`validateTransactionalOffsetCommit`): a member's commit is
    /// checked as OffsetCommit's; one without generation or member (clients
    /// before TxnOffsetCommit v3) is not checked.
    pub fn check_txn_commit(&self, commit: &CommitOffsets) -> Result<(), GroupError> {
        let anonymous =
            commit.generation < 0 && commit.member_id.is_empty() && commit.instance_id.is_none();
        if let Some(g) = self.consumer.get(&commit.group) {
            return if anonymous {
                Ok(())
            } else {
                g.check_commit(commit)
            };
        }
        match self.groups.get(&commit.group) {
            Some(_) if anonymous => Ok(()),
            // A transactional commit is not refused while the generation
            // forms (`validateOffsetCommit` skips that check for it): the
            // Syncing check is the last, so every other one passed.
            Some(g) => match g.check_commit(commit) {
                Err(GroupError::RebalanceInProgress) => Ok(()),
                other => other,
            },
            None if commit.generation >= 0 => Err(GroupError::GroupIdNotFound),
            // Created at the commit: the groups must have room for it.
            None if self.count() >= MAX_GROUPS => Err(GroupError::GroupMaxSizeReached),
            None => Ok(()),
        }
    }

    /// Stores offsets a transaction committed (checked when they were sent,
    /// each with when it was sent), creating the group to hold them if it
    /// is gone or never was, as a simple commit would; a partition the group
    /// committed since an offset was sent keeps its newer commit (Kafka
    /// keeps the most recent).
    pub fn store_txn_offsets(
        &mut self,
        group: &str,
        offsets: Vec<(OffsetToCommit, i64)>,
        now_ms: i64,
    ) {
        let newest = |stored: &BTreeMap<(String, i32), CommittedOffset>| {
            offsets
                .iter()
                .filter(|(o, sent_ms)| {
                    stored
                        .get(&(o.topic.clone(), o.partition))
                        .is_none_or(|c| c.commit_ms <= *sent_ms)
                })
                .map(|(o, _)| o.clone())
                .collect::<Vec<_>>()
        };
        if let Some(g) = self.consumer.get_mut(group) {
            let offsets = newest(&g.offsets);
            store_offsets(&mut g.offsets, offsets, now_ms);
            return;
        }
        // Past the bound only by what ongoing transactions checked in (at
        // most 64 groups each).
        let g = self
            .groups
            .entry(group.to_string())
            .or_insert_with(|| Group {
                empty_since_ms: now_ms,
                ..Group::default()
            });
        let offsets = newest(&g.offsets);
        store_offsets(&mut g.offsets, offsets, now_ms);
    }

    /// Per group, in order.
    pub fn delete(&mut self, delete: DeleteGroups) -> Vec<Result<(), GroupError>> {
        delete
            .groups
            .into_iter()
            .map(|name| {
                // A share group goes with its share state (Kafka deletes
                // the state first, then the group).
                if let Some(g) = self.share.get(&name) {
                    if !g.members.is_empty() {
                        return Err(GroupError::NonEmptyGroup);
                    }
                    self.share.remove(&name);
                    return Ok(());
                }
                if let Some(g) = self.consumer.get(&name) {
                    if !g.members.is_empty() {
                        return Err(GroupError::NonEmptyGroup);
                    }
                    self.consumer.remove(&name);
                    return Ok(());
                }
                match self.groups.get(&name) {
                    None => Err(GroupError::GroupIdNotFound),
                    Some(g) if g.phase != Phase::Empty => Err(GroupError::NonEmptyGroup),
                    Some(_) => {
                        self.groups.remove(&name);
                        Ok(())
                    }
                }
            })
            .collect()
    }

    /// Per partition, in order; the outer error is the group's.
    pub fn delete_offsets(
        &mut self,
        delete: DeleteOffsets,
    ) -> Result<Vec<Result<(), GroupError>>, GroupError> {
        if let Some(g) = self.consumer.get_mut(&delete.group) {
            let subscribed = g.subscribed_topics();
            return Ok(delete
                .partitions
                .into_iter()
                .map(|(topic, partition)| {
                    if !g.members.is_empty() && subscribed.contains(&topic) {
                        return Err(GroupError::GroupSubscribedToTopic);
                    }
                    g.offsets.remove(&(topic, partition));
                    Ok(())
                })
                .collect());
        }
        let g = self
            .groups
            .get_mut(&delete.group)
            .ok_or(GroupError::GroupIdNotFound)?;
        if !g.members.is_empty() && g.protocol_type.as_deref() != Some("consumer") {
            return Err(GroupError::NonEmptyGroup);
        }
        // A consumer group whose subscriptions are unknown counts as
        // subscribed to everything (as Kafka).
        let subscribed: Option<BTreeSet<String>> = if g.members.is_empty() {
            Some(BTreeSet::new())
        } else {
            g.subscribed_topics()
        };
        Ok(delete
            .partitions
            .into_iter()
            .map(|(topic, partition)| {
                if subscribed.as_ref().is_none_or(|s| s.contains(&topic)) {
                    return Err(GroupError::GroupSubscribedToTopic);
                }
                g.offsets.remove(&(topic, partition));
                Ok(())
            })
            .collect())
    }
}

/// Stores committed offsets at `now_ms`; metadata over Kafka's limit is
/// never stored (the agent answers those OFFSET_METADATA_TOO_LARGE).
fn store_offsets(
    stored: &mut BTreeMap<(String, i32), CommittedOffset>,
    offsets: Vec<OffsetToCommit>,
    now_ms: i64,
) {
    for OffsetToCommit {
        topic,
        partition,
        offset,
        leader_epoch,
        metadata,
    } in offsets
    {
        if metadata
            .as_ref()
            .is_some_and(|m| m.len() > OFFSET_METADATA_MAX_BYTES)
        {
            continue;
        }
        stored.insert(
            (topic, partition),
            CommittedOffset {
                offset,
                leader_epoch,
                metadata,
                commit_ms: now_ms,
            },
        );
    }
}

/// No topics at all (tests of classic groups, which look none up).
#[cfg(test)]
pub(crate) struct NoTopics;

#[cfg(test)]
impl TopicLookup for NoTopics {
    fn find(&self, _: &str) -> Option<(crate::types::TopicId, i32)> {
        None
    }
    fn names(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Today's rules with Kafka's default policy (tests).
#[cfg(test)]
pub(crate) const TEST_RULES: Rules = Rules::Migrating(MigrationPolicy::Bidirectional);
