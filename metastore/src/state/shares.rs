//! Share groups (KIP-932) as the state applies them: heartbeats,
//! acquisitions and acknowledgements on the metastore's clock, against the
//! partitions' logs as the state has them.

use super::groups::TopicsByName;
use super::log::Log;
use super::*;
use crate::groups::share::{LogBounds, PartitionLog, ShareGroup};

/// The partitions' logs, as acquisitions see them.
struct Logs<'a>(&'a Log);

impl Logs<'_> {
    fn partition(&self, topic: TopicId, partition: i32) -> Option<&Partition> {
        let name = self.0.names_by_id.get(&topic)?;
        let index = usize::try_from(partition).ok()?;
        self.0.topics.get(name)?.partitions.get(index)
    }
}

impl PartitionLog for Logs<'_> {
    fn bounds(&self, topic: TopicId, partition: i32, read_committed: bool) -> Option<LogBounds> {
        let p = self.partition(topic, partition)?;
        Some(LogBounds {
            log_start: p.log_start_offset,
            log_end: p.high_watermark,
            readable_end: if read_committed {
                p.last_stable()
            } else {
                p.high_watermark
            },
        })
    }

    /// The first extent holding a record at least that new: a group
    /// starting `by_duration` may get a few older records of that extent.
    fn offset_at(&self, topic: TopicId, partition: i32, timestamp_ms: i64) -> Option<i64> {
        let p = self.partition(topic, partition)?;
        p.extents
            .iter()
            .find(|(_, e)| e.max_timestamp >= timestamp_ms)
            .map(|(base, _)| (*base).max(p.log_start_offset))
    }
}

impl Apply for ShareHeartbeat {
    as_in_contract!();
    fn apply(mut self, state: &mut State) -> Result<Self::Output, Refusal> {
        state.configs.share_member_rules(&mut self);
        let joining = self.member_epoch == crate::groups::share::JOIN_EPOCH;
        let group = self.group.clone();
        Ok(change_share_group(
            state,
            &group,
            joining,
            |g, _, topics| g.heartbeat(self, topics),
        ))
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for AcquireShare {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        let rules = state.configs.share_rules(&self.group, self.rules);
        let State { groups, log, .. } = state;
        Ok(groups.share_group_mut(&self.group, false).map(|g| {
            let who = crate::groups::share::Who {
                member: &self.member,
                session: self.session,
            };
            let partitions = g.acquire(
                who,
                &self.partitions,
                self.max_records,
                &Logs(log),
                rules,
                self.now_ms,
            );
            ShareAcquisition {
                partitions,
                lock_ms: rules.lock_ms,
                read_committed: rules.read_committed,
            }
        }))
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for AcknowledgeShare {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        let limit = state.configs.share_delivery_limit(self.delivery_limit);
        Ok(state
            .groups
            .share_group_mut(&self.group, false)
            .map(|g| g.acknowledge(&self.member, &self.acks, limit, self.now_ms)))
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for ReleaseShare {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        let limit = state.configs.share_delivery_limit(self.delivery_limit);
        Ok(state.groups.share_group_mut(&self.group, false).map(|g| {
            let who = crate::groups::share::Who {
                member: &self.member,
                session: self.session,
            };
            g.release(who, &self.partitions, limit)
        }))
    }
}

/// Runs `change` on the share group `name` (created if `create`), with the
/// state's topics and clock.
fn change_share_group<T>(
    state: &mut State,
    name: &str,
    create: bool,
    change: impl FnOnce(&mut ShareGroup, i64, &TopicsByName) -> Result<T, GroupError>,
) -> Result<T, GroupError> {
    let now_ms = state.clock_ms;
    let State {
        groups,
        log,
        security,
        ..
    } = state;
    let topics = TopicsByName(&log.topics, &security.acls);
    change(groups.share_group_mut(name, create)?, now_ms, &topics)
}

impl Apply for AlterShareOffsets {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(change_share_group(
            state,
            &self.group,
            true,
            |group, now_ms, topics| {
                self.starts
                    .iter()
                    .try_for_each(|&(topic, partition, start)| {
                        group.set_start(topic, partition, start, now_ms, topics)
                    })
            },
        ))
    }
}

impl Apply for DeleteShareOffsets {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(change_share_group(
            state,
            &self.group,
            false,
            |group, now_ms, topics| {
                self.topics
                    .iter()
                    .map(|&topic| group.forget_topic(topic, now_ms, topics))
                    .collect()
            },
        ))
    }
}

impl Query for DescribeShareGroup {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.groups.share_group(&self.name).map(|g| g.view()))
    }
}
