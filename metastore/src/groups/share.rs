//! Share groups (KIP-932): consumers that take records of the same
//! partitions cooperatively, each record delivered to one member at a time
//! under a lock, acknowledged record by record.

pub mod members;
pub mod partition;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::groups::{GroupError, TopicLookup};
use crate::types::TopicId;

pub use crate::contract::shares::*;
pub use members::Members;
pub use partition::{Limits, LogBounds, SharePartition, Who};

/// One share group: its members and the share-partitions it has read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareGroup {
    pub members: Members,
    partitions: BTreeMap<(TopicId, i32), SharePartition>,
}

/// A partition's log as an acquisition needs it, or `None` for a
/// partition that does not exist.
pub trait PartitionLog {
    fn bounds(&self, topic: TopicId, partition: i32, read_committed: bool) -> Option<LogBounds>;
    /// The first offset whose timestamp is at least `timestamp_ms`, as
    /// ListOffsets by timestamp finds it.
    fn offset_at(&self, topic: TopicId, partition: i32, timestamp_ms: i64) -> Option<i64>;
}

/// The highest `group.share.delivery.count.limit` Kafka accepts: no record
/// is ever delivered more often.
pub const MAX_DELIVERY_COUNT_LIMIT: u16 = 10;

/// The rules within Kafka's bounds for them (`group.share.delivery.count.limit`
/// 2 to 10, `group.share.partition.max.record.locks` 100 to 10,000, a lock
/// of 1 s to an hour), whatever an agent sent.
fn limits(rules: &AcquireRules) -> Limits {
    Limits {
        delivery_limit: bounded_delivery_limit(rules.delivery_limit),
        max_in_flight: rules.max_in_flight.clamp(100, 10_000),
        lock_ms: rules.lock_ms.clamp(1_000, 3_600_000),
    }
}

fn bounded_delivery_limit(asked: u16) -> u16 {
    asked.clamp(2, MAX_DELIVERY_COUNT_LIMIT)
}

impl ShareGroup {
    /// A heartbeat, after the members whose session ended are gone. As in
    /// Kafka, neither an ended session nor a leave releases records: a
    /// member's locks run their course (its acknowledgements still count)
    /// unless its share session closes ([`ShareGroup::release`]).
    pub fn heartbeat(
        &mut self,
        hb: ShareHeartbeat,
        topics: &dyn TopicLookup,
    ) -> Result<ShareAnswer, GroupError> {
        self.members.expire(hb.now_ms, topics);
        let (answer, _left) = self.members.heartbeat(hb, topics)?;
        Ok(answer)
    }

    /// Hands `member` up to `max_records` records of `partitions`, in
    /// order, one budget for all (as Kafka's ShareFetch `MaxRecords`). A
    /// partition read for the first time starts where the rules say.
    pub fn acquire<'a>(
        &mut self,
        who: impl Into<Who<'a>>,
        partitions: &[(TopicId, i32)],
        max_records: i64,
        log: &dyn PartitionLog,
        rules: AcquireRules,
        now_ms: i64,
    ) -> Vec<PartitionAcquired> {
        let who = who.into();
        let mut left = max_records.max(0);
        let mut answers = Vec::with_capacity(partitions.len());
        for &(topic, partition) in partitions {
            // Only the group's topics gain share state (a fetch naming any
            // partition must not grow the replicated state), and only when
            // something is to be taken (an acknowledging fetch asks none).
            let known = self.partitions.contains_key(&(topic, partition));
            if !known && (left == 0 || !self.members.subscribes_to(topic)) {
                let bounds = log.bounds(topic, partition, false);
                answers.push(PartitionAcquired {
                    topic,
                    partition,
                    acquired: bounds.map(|_| Vec::new()),
                    log_end: bounds.map_or(-1, |b| b.log_end),
                });
                continue;
            }
            let Some(bounds) = log.bounds(topic, partition, rules.read_committed) else {
                answers.push(PartitionAcquired {
                    topic,
                    partition,
                    acquired: None,
                    log_end: -1,
                });
                continue;
            };
            let share = self
                .partitions
                .entry((topic, partition))
                .or_insert_with(|| {
                    SharePartition::starting_at(match rules.start_from {
                        StartFrom::Earliest => bounds.log_start,
                        StartFrom::Latest => bounds.readable_end,
                        StartFrom::Ago(ms) => log
                            .offset_at(topic, partition, now_ms.saturating_sub(ms))
                            .unwrap_or(bounds.readable_end),
                    })
                });
            let got = share.acquire(who, left, bounds, limits(&rules), now_ms);
            left -= got.iter().map(|a| a.last - a.first + 1).sum::<i64>();
            answers.push(PartitionAcquired {
                topic,
                partition,
                acquired: Some(got),
                log_end: bounds.log_end,
            });
        }
        answers
    }

    /// Applies `member`'s acknowledgements partition by partition, each all
    /// or nothing; a partition the group never read refuses them.
    pub fn acknowledge(
        &mut self,
        member: &str,
        acks: &[PartitionAcks],
        delivery_limit: u16,
        now_ms: i64,
    ) -> Vec<Result<(), AckRefused>> {
        let limits = Limits {
            delivery_limit: bounded_delivery_limit(delivery_limit),
            max_in_flight: i64::MAX,
            lock_ms: 0,
        };
        acks.iter()
            .map(|a| match self.partitions.get_mut(&(a.topic, a.partition)) {
                Some(p) => p.acknowledge(member, &a.batches, limits, now_ms),
                None => Err(AckRefused::InvalidRecordState(
                    "the share group has acquired nothing of this partition".into(),
                )),
            })
            .collect()
    }

    /// Every record `who`'s session holds of `partitions` (none named: of
    /// every partition) becomes available again.
    pub fn release<'a>(
        &mut self,
        who: impl Into<Who<'a>>,
        partitions: &[(TopicId, i32)],
        delivery_limit: u16,
    ) {
        let who = who.into();
        let limits = Limits {
            delivery_limit: bounded_delivery_limit(delivery_limit),
            max_in_flight: i64::MAX,
            lock_ms: 0,
        };
        if partitions.is_empty() {
            self.partitions
                .values_mut()
                .for_each(|p| p.release(who, limits));
        }
        for key in partitions {
            if let Some(p) = self.partitions.get_mut(key) {
                p.release(who, limits);
            }
        }
    }

    /// The share-partitions the group has read, by topic and partition.
    pub fn partitions(&self) -> impl Iterator<Item = (&(TopicId, i32), &SharePartition)> {
        self.partitions.iter()
    }

    /// Sets where the group reads `partition` from (AlterShareGroupOffsets:
    /// the group must have no members once those whose session ended by
    /// `now_ms` are gone).
    pub fn set_start(
        &mut self,
        topic: TopicId,
        partition: i32,
        start: i64,
        now_ms: i64,
        topics: &dyn TopicLookup,
    ) -> Result<(), GroupError> {
        self.members.expire(now_ms, topics);
        if !self.members.is_empty() {
            return Err(GroupError::NonEmptyGroup);
        }
        self.partitions
            .insert((topic, partition), SharePartition::starting_at(start));
        Ok(())
    }

    /// Forgets what the group read of `topic` (DeleteShareGroupOffsets: the
    /// group must have no members, as for [`ShareGroup::set_start`]).
    /// Whether it had read any of it.
    pub fn forget_topic(
        &mut self,
        topic: TopicId,
        now_ms: i64,
        topics: &dyn TopicLookup,
    ) -> Result<bool, GroupError> {
        self.members.expire(now_ms, topics);
        if !self.members.is_empty() {
            return Err(GroupError::NonEmptyGroup);
        }
        let before = self.partitions.len();
        self.partitions.retain(|(t, _), _| *t != topic);
        Ok(self.partitions.len() != before)
    }

    /// What ShareGroupDescribe and DescribeShareGroupOffsets show.
    pub fn view(&self) -> ShareGroupView {
        let members = self
            .members
            .iter()
            .map(|(id, m)| ShareMemberView {
                member_id: id.clone(),
                member_epoch: m.epoch,
                rack: m.rack.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed: m.subscribed.iter().cloned().collect(),
                assignment: m
                    .assignment
                    .iter()
                    .map(|(t, ps)| (*t, ps.iter().copied().collect()))
                    .collect(),
            })
            .collect();
        let partitions = self
            .partitions
            .iter()
            .map(|((topic, partition), p)| ShareOffsetView {
                topic: *topic,
                partition: *partition,
                start_offset: p.start_offset(),
                end_offset: p.end_offset(),
                done: p.done_in_flight(),
                archived: p.archived(),
            })
            .collect();
        ShareGroupView {
            epoch: self.members.epoch,
            members,
            partitions,
        }
    }

    /// The invariants of every share-partition.
    pub fn check(&self, delivery_limit: u16) -> Result<(), String> {
        for ((topic, partition), p) in &self.partitions {
            p.check(delivery_limit)
                .map_err(|e| format!("share-partition {topic}/{partition}: {e}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
