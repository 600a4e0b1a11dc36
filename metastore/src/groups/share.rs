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
pub use partition::{Limits, LogBounds, SharePartition};

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

fn limits(rules: &AcquireRules) -> Limits {
    Limits {
        delivery_limit: rules.delivery_limit,
        max_in_flight: rules.max_in_flight,
        lock_ms: rules.lock_ms,
    }
}

impl ShareGroup {
    /// A heartbeat; members whose session ended, and one that leaves, give
    /// up the records they hold.
    pub fn heartbeat(
        &mut self,
        hb: ShareHeartbeat,
        topics: &dyn TopicLookup,
        delivery_limit: u16,
    ) -> Result<ShareAnswer, GroupError> {
        self.expire(hb.now_ms, topics, delivery_limit);
        let member = hb.member_id.clone();
        let (answer, left) = self.members.heartbeat(hb, topics)?;
        if left {
            self.release(&member, delivery_limit);
        }
        Ok(answer)
    }

    /// Ends the members whose session ended by `now_ms`.
    pub fn expire(&mut self, now_ms: i64, topics: &dyn TopicLookup, delivery_limit: u16) {
        for gone in self.members.expire(now_ms, topics) {
            self.release(&gone, delivery_limit);
        }
    }

    /// Hands `member` up to `max_records` records of `partitions`, in
    /// order, one budget for all (as Kafka's ShareFetch `MaxRecords`). A
    /// partition read for the first time starts where the rules say.
    pub fn acquire(
        &mut self,
        member: &str,
        partitions: &[(TopicId, i32)],
        max_records: i64,
        log: &dyn PartitionLog,
        rules: AcquireRules,
        now_ms: i64,
    ) -> Vec<PartitionAcquired> {
        let mut left = max_records.max(0);
        let mut answers = Vec::with_capacity(partitions.len());
        for &(topic, partition) in partitions {
            let Some(bounds) = log.bounds(topic, partition, rules.read_committed) else {
                answers.push(PartitionAcquired {
                    topic,
                    partition,
                    acquired: None,
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
            let got = share.acquire(member, left, bounds, limits(&rules), now_ms);
            left -= got.iter().map(|a| a.last - a.first + 1).sum::<i64>();
            answers.push(PartitionAcquired {
                topic,
                partition,
                acquired: Some(got),
            });
        }
        answers
    }

    /// Applies `member`'s acknowledgements partition by partition, each all
    /// or nothing; a partition the group never read refuses them.
    pub fn acknowledge(
        &mut self,
        member: &str,
        acks: &[((TopicId, i32), Vec<AckBatch>)],
        delivery_limit: u16,
        now_ms: i64,
    ) -> Vec<Result<(), AckRefused>> {
        let limits = Limits {
            delivery_limit,
            max_in_flight: i64::MAX,
            lock_ms: 0,
        };
        acks.iter()
            .map(|(key, batches)| match self.partitions.get_mut(key) {
                Some(p) => p.acknowledge(member, batches, limits, now_ms),
                None => Err(AckRefused::InvalidRecordState(
                    "the share group has acquired nothing of this partition".into(),
                )),
            })
            .collect()
    }

    /// Every record `member` holds becomes available again.
    pub fn release(&mut self, member: &str, delivery_limit: u16) {
        let limits = Limits {
            delivery_limit,
            max_in_flight: i64::MAX,
            lock_ms: 0,
        };
        for p in self.partitions.values_mut() {
            p.release(member, limits);
        }
    }

    /// The share-partitions the group has read, by topic and partition.
    pub fn partitions(&self) -> impl Iterator<Item = (&(TopicId, i32), &SharePartition)> {
        self.partitions.iter()
    }

    /// Sets where the group reads `partition` from (AlterShareGroupOffsets:
    /// the group must have no members).
    pub fn set_start(
        &mut self,
        topic: TopicId,
        partition: i32,
        start: i64,
    ) -> Result<(), GroupError> {
        if !self.members.is_empty() {
            return Err(GroupError::NonEmptyGroup);
        }
        self.partitions
            .insert((topic, partition), SharePartition::starting_at(start));
        Ok(())
    }

    /// Forgets what the group read of `topic` (DeleteShareGroupOffsets: the
    /// group must have no members). Whether it had read any of it.
    pub fn forget_topic(&mut self, topic: TopicId) -> Result<bool, GroupError> {
        if !self.members.is_empty() {
            return Err(GroupError::NonEmptyGroup);
        }
        let before = self.partitions.len();
        self.partitions.retain(|(t, _), _| *t != topic);
        Ok(self.partitions.len() != before)
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
