//! Retention: moving each partition's log start past data older than
//! `retention.ms` or beyond `retention.bytes`, as Kafka does, a whole extent
//! at a time. The dropped extents' objects become garbage for [`crate::Gc`].

use std::sync::Arc;

use floe_metastore::{ExtentRef, MetaError, Metastore, Refusal, TopicInfo};

use crate::{CompactError, Counters};

/// A topic's retention limits; -1 means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub ms: i64,
    pub bytes: i64,
}

impl Retention {
    /// The topic's `retention.ms` and `retention.bytes`.
    pub fn of(topic: &TopicInfo) -> Retention {
        let config = topic.config();
        Retention {
            ms: config.retention_ms,
            bytes: config.retention_bytes,
        }
    }

    /// The offset the log should start at, given its extents (oldest first)
    /// and high watermark: past every extent whose records are all older than
    /// `ms` and that was also appended longer than `ms` ago, and past the
    /// oldest extents whose removal leaves at least `bytes` (Kafka's rule in
    /// `UnifiedLog.deleteRetentionSizeBreachedSegments`: a segment goes only
    /// while what is left stays at or above `retention.bytes`, so a large
    /// segment of recent records is never dropped for being large).
    pub fn cut(&self, extents: &[ExtentRef], high_watermark: i64, now_ms: i64) -> Option<i64> {
        let mut cut = None;
        if self.ms >= 0 {
            let horizon = now_ms.saturating_sub(self.ms);
            let kept = extents
                .iter()
                .find(|e| e.max_timestamp >= horizon || e.appended_ms >= horizon);
            cut = Some(kept.map_or(high_watermark, |e| e.base_offset));
        }
        if self.bytes >= 0 {
            let mut left: u64 = extents.iter().map(|e| e.length).sum();
            let mut by_size = None;
            for e in extents {
                left = match left.checked_sub(e.length) {
                    Some(rest) if rest >= self.bytes as u64 => rest,
                    _ => break,
                };
                by_size = Some(e.last_offset + 1);
            }
            // Invariant: cutting by size leaves at least `bytes`.
            debug_assert!(by_size.is_none() || left >= self.bytes as u64);
            if let Some(by_size) = by_size {
                cut = Some(cut.map_or(by_size, |c: i64| c.max(by_size)));
            }
        }
        cut
    }
}

/// One retention pass over every partition; returns how many partitions moved.
/// A partition that fails is logged and counted, and the pass goes on.
pub async fn enforce(
    meta: &Arc<dyn Metastore>,
    now_ms: i64,
    counters: &Counters,
) -> Result<usize, CompactError> {
    let mut moved = 0;
    for topic in meta.topics().await? {
        let retention = Retention::of(&topic);
        // `cleanup.policy=compact` alone: nothing expires, keys are compacted.
        if (retention.ms < 0 && retention.bytes < 0) || !topic.config().delete {
            continue;
        }
        for partition in 0..topic.partitions {
            match enforce_partition(meta, &topic, partition, retention, now_ms).await {
                Ok(true) => moved += 1,
                Ok(false) | Err(MetaError::Refused(Refusal::UnknownTopicOrPartition)) => {}
                Err(e) => {
                    counters.retention_failures.inc();
                    tracing::warn!(topic = %topic.name, partition, error = %e,
                        "retention failed for a partition; going on with the others");
                }
            }
        }
    }
    Ok(moved)
}

async fn enforce_partition(
    meta: &Arc<dyn Metastore>,
    topic: &TopicInfo,
    partition: i32,
    retention: Retention,
    now_ms: i64,
) -> Result<bool, MetaError> {
    let plan = crate::whole_partition(meta, topic.id, partition).await?;
    let Some(cut) = retention.cut(&plan.extents, plan.high_watermark, now_ms) else {
        return Ok(false);
    };
    if cut <= plan.log_start_offset {
        return Ok(false);
    }
    meta.trim(topic.id, partition, cut).await?;
    tracing::info!(topic = %topic.name, partition, log_start_offset = cut, "retention moved the log start");
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(base: i64, last: i64, ts: i64, length: u64) -> ExtentRef {
        ExtentRef {
            appended_ms: 0,
            base_offset: base,
            last_offset: last,
            max_timestamp: ts,
            object_key: "k".into(),
            object_size: 100,
            position: 0,
            length,
        }
    }

    #[test]
    fn cuts_by_time_and_by_size() {
        let extents = vec![
            extent(0, 9, 100, 50),
            extent(10, 19, 200, 50),
            extent(20, 29, 300, 50),
        ];
        let by_time = Retention { ms: 150, bytes: -1 };
        assert_eq!(by_time.cut(&extents, 30, 400), Some(20));
        assert_eq!(by_time.cut(&extents, 30, 1_000), Some(30), "all expired");
        assert_eq!(by_time.cut(&extents, 30, 300), Some(10));
        assert_eq!(by_time.cut(&extents, 30, 250), Some(0), "nothing expired");
        // What is left stays at least `bytes`, as in Kafka: 100 bytes keep
        // two extents, 120 all three (dropping one would leave 100).
        let by_size = Retention { ms: -1, bytes: 100 };
        assert_eq!(by_size.cut(&extents, 30, 0), Some(10));
        assert_eq!(Retention { ms: -1, bytes: 120 }.cut(&extents, 30, 0), None);
        assert_eq!(
            Retention { ms: -1, bytes: 50 }.cut(&extents, 30, 0),
            Some(20)
        );
        assert_eq!(
            Retention { ms: -1, bytes: 0 }.cut(&extents, 30, 0),
            Some(30)
        );
        // A large extent (a segment) of recent records is not dropped for
        // being large.
        let segment = vec![extent(0, 99, 100, 1_000), extent(100, 109, 200, 10)];
        assert_eq!(Retention { ms: -1, bytes: 100 }.cut(&segment, 110, 0), None);
        let both = Retention {
            ms: 150,
            bytes: 100,
        };
        assert_eq!(
            both.cut(&extents, 30, 400),
            Some(20),
            "the later of the two cuts"
        );
        assert_eq!(Retention { ms: -1, bytes: -1 }.cut(&extents, 30, 400), None);
        // Old timestamps appended recently are kept, as in Kafka's active segment.
        let mut replayed = extents.clone();
        replayed[1].appended_ms = 390;
        assert_eq!(by_time.cut(&replayed, 30, 400), Some(10));
    }

    #[test]
    fn configs_override_kafkas_defaults() {
        let mut topic = TopicInfo {
            id: Default::default(),
            name: "t".into(),
            partitions: 1,
            configs: Default::default(),
            inherited: Default::default(),
        };
        assert_eq!(
            Retention::of(&topic),
            Retention {
                ms: floe_metastore::topic_config::DEFAULT_RETENTION_MS,
                bytes: -1
            }
        );
        topic.configs.insert("retention.ms".into(), "-1".into());
        topic
            .configs
            .insert("retention.bytes".into(), "1024".into());
        assert_eq!(
            Retention::of(&topic),
            Retention {
                ms: -1,
                bytes: 1024
            }
        );
    }

    /// A metastore that fails every read plan of one partition.
    struct PlanFailsFor {
        inner: floe_metastore::LocalMetastore,
        partition: i32,
    }

    impl floe_metastore::Transport for PlanFailsFor {
        async fn call<O: floe_metastore::Op>(&self, op: O) -> Result<O::Output, MetaError> {
            let plan = (&op as &dyn std::any::Any).downcast_ref::<floe_metastore::ops::PlanRead>();
            if plan.is_some_and(|p| p.partition.partition == self.partition) {
                return Err(MetaError::unavailable("injected: this partition fails"));
            }
            self.inner.call(op).await
        }
    }

    /// One partition whose plan cannot be read used to end the whole pass,
    /// so retention stopped for every partition after it.
    #[tokio::test]
    async fn a_failing_partition_does_not_stop_the_pass() {
        let meta: Arc<dyn Metastore> = Arc::new(PlanFailsFor {
            inner: floe_metastore::LocalMetastore::in_memory().await.unwrap(),
            partition: 0,
        });
        let t = meta
            .create_topic(floe_metastore::NewTopic {
                name: "t".into(),
                partitions: 3,
                configs: [("retention.ms".to_string(), "1000".to_string())].into(),
            })
            .await
            .unwrap();
        let batches = (0..3)
            .map(|partition| floe_metastore::CommitBatch {
                topic_id: t.id,
                partition,
                position: 0,
                length: 10,
                record_count: 1,
                max_timestamp: 0,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            })
            .collect();
        let now_ms = meta.clock().await.unwrap();
        meta.commit(floe_metastore::Commit {
            object_key: "ingest/a".into(),
            object_size: 30,
            batches,
            not_before_ms: now_ms,
        })
        .await
        .unwrap();
        let counters = Counters::default();
        let later = now_ms + 3_600_000;
        assert_eq!(enforce(&meta, later, &counters).await.unwrap(), 2);
        assert_eq!(counters.retention_failures.get(), 1);
        for partition in 1..3 {
            assert_eq!(
                meta.offsets(t.id, partition)
                    .await
                    .unwrap()
                    .log_start_offset,
                1
            );
        }
    }
}
