//! A share group's members and their assignments (Kafka 4.2's
//! `ShareGroupHeartbeat`): members join with epoch 0 and their topics,
//! heartbeat with their epoch (or the one before, whose answer may have been
//! lost), leave with -1, and are fenced when their session ends on the
//! metastore's clock. Any change of members, subscriptions or partition
//! counts bumps the group's epoch and recomputes every assignment at once:
//! share groups revoke nothing (a record is one member's only while its lock
//! lasts), so a member takes its new partitions with its next heartbeat.
//!
//! The assignment is Kafka's `SimpleAssignor` in its balance, not its
//! stickiness: each topic's partitions are spread over the members
//! subscribed to it, one member each while there are at least as many
//! partitions as members, otherwise each partition to about members /
//! partitions of them (every member gets one).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::contract::shares::{JOIN_EPOCH, LEAVE_EPOCH, ShareAnswer, ShareHeartbeat};
use crate::groups::{GroupError, TopicLookup};
use crate::types::TopicId;

/// A share group's members, keyed by member id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Members {
    /// The group's epoch: that of its current assignment.
    pub epoch: i32,
    members: BTreeMap<String, Member>,
    /// The partition counts the assignment was computed with.
    topics: BTreeMap<String, (TopicId, i32)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub epoch: i32,
    pub previous_epoch: i32,
    pub rack: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: BTreeSet<String>,
    /// What the member was last told it is assigned.
    pub assignment: BTreeMap<TopicId, BTreeSet<i32>>,
    /// Its assignment at the group's epoch, told at its next heartbeat.
    pub target: BTreeMap<TopicId, BTreeSet<i32>>,
    pub last_seen_ms: i64,
    pub session_timeout_ms: i32,
}

impl Members {
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Member)> {
        self.members.iter()
    }

    pub fn get(&self, member_id: &str) -> Option<&Member> {
        self.members.get(member_id)
    }

    /// Whether a member subscribes to the topic `id`.
    pub fn subscribes_to(&self, id: TopicId) -> bool {
        self.topics.values().any(|(t, _)| *t == id)
    }

    /// Members whose session ended by `now_ms`: removed, the assignment
    /// recomputed. Returns their ids (their records are to be released).
    pub fn expire(&mut self, now_ms: i64, topics: &dyn TopicLookup) -> Vec<String> {
        let gone: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.last_seen_ms + i64::from(m.session_timeout_ms) <= now_ms)
            .map(|(id, _)| id.clone())
            .collect();
        if !gone.is_empty() {
            self.members.retain(|id, _| !gone.contains(id));
            self.reassign(topics);
        }
        gone
    }

    /// A heartbeat. Returns the answer, and whether the member left (its
    /// records are to be released).
    pub fn heartbeat(
        &mut self,
        hb: ShareHeartbeat,
        topics: &dyn TopicLookup,
    ) -> Result<(ShareAnswer, bool), GroupError> {
        let id = hb.member_id.clone();
        if hb.member_epoch == LEAVE_EPOCH {
            if self.members.remove(&id).is_none() {
                return Err(GroupError::UnknownMemberId);
            }
            self.reassign(topics);
            return Ok((
                ShareAnswer {
                    member_id: id,
                    member_epoch: LEAVE_EPOCH,
                    heartbeat_interval_ms: hb.heartbeat_interval_ms,
                    assignment: None,
                },
                true,
            ));
        }
        let known = self.members.contains_key(&id);
        match self.members.get(&id) {
            None if hb.member_epoch != JOIN_EPOCH => return Err(GroupError::UnknownMemberId),
            None if self.members.len() >= hb.max_size => {
                return Err(GroupError::GroupMaxSizeReached);
            }
            Some(m)
                if hb.member_epoch != JOIN_EPOCH
                    && hb.member_epoch != m.epoch
                    && hb.member_epoch != m.previous_epoch =>
            {
                return Err(GroupError::FencedMemberEpoch);
            }
            _ => {}
        }
        let full = hb.subscribed.is_some();
        let member = self.members.entry(id.clone()).or_insert_with(|| Member {
            epoch: JOIN_EPOCH,
            previous_epoch: JOIN_EPOCH,
            rack: None,
            client_id: String::new(),
            client_host: String::new(),
            subscribed: BTreeSet::new(),
            assignment: BTreeMap::new(),
            target: BTreeMap::new(),
            last_seen_ms: hb.now_ms,
            session_timeout_ms: hb.session_timeout_ms,
        });
        member.last_seen_ms = hb.now_ms;
        member.session_timeout_ms = hb.session_timeout_ms;
        member.client_id = hb.client_id;
        member.client_host = hb.client_host;
        if hb.rack.is_some() {
            member.rack = hb.rack;
        }
        let mut changed = !known;
        if let Some(subscribed) = hb.subscribed {
            let subscribed: BTreeSet<String> = subscribed.into_iter().collect();
            changed |= member.subscribed != subscribed;
            member.subscribed = subscribed;
        }
        changed |= self.topics_changed(topics);
        if changed {
            self.reassign(topics);
        }
        // The member moves to the group's epoch and its assignment there.
        let member = self.members.get_mut(&id).expect("inserted above");
        let moved = member.assignment != member.target;
        if member.epoch != self.epoch {
            member.previous_epoch = member.epoch;
            member.epoch = self.epoch;
            member.assignment = member.target.clone();
        }
        let send = hb.member_epoch == JOIN_EPOCH || full || moved;
        let assignment = send.then(|| {
            member
                .assignment
                .iter()
                .map(|(t, ps)| (*t, ps.iter().copied().collect()))
                .collect()
        });
        Ok((
            ShareAnswer {
                member_id: id,
                member_epoch: member.epoch,
                heartbeat_interval_ms: hb.heartbeat_interval_ms,
                assignment,
            },
            false,
        ))
    }

    /// Whether a subscribed topic appeared, went, or changed its partitions.
    fn topics_changed(&self, topics: &dyn TopicLookup) -> bool {
        self.subscribed_topics(topics) != self.topics
    }

    fn subscribed_topics(&self, topics: &dyn TopicLookup) -> BTreeMap<String, (TopicId, i32)> {
        let names: BTreeSet<&String> = self.members.values().flat_map(|m| &m.subscribed).collect();
        names
            .into_iter()
            .filter_map(|name| topics.find(name).map(|found| (name.clone(), found)))
            .collect()
    }

    /// A new epoch, and every member's assignment under it.
    fn reassign(&mut self, topics: &dyn TopicLookup) {
        self.epoch += 1;
        self.topics = self.subscribed_topics(topics);
        for m in self.members.values_mut() {
            m.target.clear();
        }
        // Each topic's first partition goes to the member after the one
        // that took the last of the topic before, so that the extra
        // partitions of uneven topics fall on different members.
        let mut next = 0;
        for (name, (topic_id, partitions)) in &self.topics {
            let ids: Vec<String> = self
                .members
                .iter()
                .filter(|(_, m)| m.subscribed.contains(name))
                .map(|(id, _)| id.clone())
                .collect();
            for (member, partition) in spread(ids.len(), *partitions) {
                let id = &ids[(member + next) % ids.len()];
                self.members
                    .get_mut(id)
                    .expect("a subscriber")
                    .target
                    .entry(*topic_id)
                    .or_default()
                    .insert(partition);
            }
            next += (*partitions).max(0) as usize;
        }
    }
}

/// Which of `members` (by index) gets which of `partitions`: each partition
/// to one member while there are enough partitions, otherwise every member
/// one partition, each partition to `ceil(members / partitions)` at most.
fn spread(members: usize, partitions: i32) -> Vec<(usize, i32)> {
    let partitions = partitions.max(0) as usize;
    if members == 0 || partitions == 0 {
        return Vec::new();
    }
    let pairs = members.max(partitions);
    (0..pairs)
        .map(|i| (i % members, (i % partitions) as i32))
        .collect()
}

#[cfg(test)]
mod tests;
