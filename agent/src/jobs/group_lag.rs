//! Every consumer group's lag, by partition, into the agent's metrics
//! (`floe_group_lag`): what Kafka users read from an exporter (Burrow,
//! kafka-exporter) that asks the brokers. Agents with the jobs role read
//! it every `group_lag_interval`; each reports the same figures, so
//! dashboards take the largest (`max by (group, topic, partition)`). A
//! pass reads the group list, each group's committed offsets and the
//! log end offsets of their partitions: a few metastore reads, bounded by
//! [`MOST_GROUPS`] and [`MOST_SERIES`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use floe_metastore::{MetaError, Metastore, TopicPartition};

use crate::metrics::{LagLabel, Metrics};

/// The most groups read in a pass, and the most series reported: a
/// cluster with more shows the first ones (by name).
pub const MOST_GROUPS: usize = 1_000;
pub const MOST_SERIES: usize = 20_000;

pub async fn run(meta: Arc<dyn Metastore>, metrics: Arc<Metrics>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match lags(meta.as_ref()).await {
            Ok(lags) => metrics.set_group_lags(lags),
            Err(e) => tracing::warn!(error = %e, "reading consumer groups' lag failed"),
        }
    }
}

/// Each group's lag on each partition it committed an offset for.
pub async fn lags(meta: &dyn Metastore) -> Result<Vec<(LagLabel, i64)>, MetaError> {
    let mut groups: Vec<String> = meta.groups().await?.into_iter().map(|g| g.name).collect();
    groups.sort();
    groups.truncate(MOST_GROUPS);
    let topics: HashMap<String, floe_metastore::TopicId> = meta
        .topics()
        .await?
        .into_iter()
        .map(|t| (t.name, t.id))
        .collect();
    let mut committed = Vec::new();
    for group in groups {
        // One group that cannot be read leaves the others' figures fresh.
        let offsets = match meta.group_offsets(&group, None).await {
            Ok(offsets) => offsets,
            Err(e) => {
                tracing::warn!(%group, error = %e, "reading a consumer group's offsets for its lag failed");
                continue;
            }
        };
        for ((topic, partition), offset) in offsets {
            let (Some(offset), Some(id)) = (offset, topics.get(&topic)) else {
                continue;
            };
            committed.push((group.clone(), topic, partition, offset.offset, *id));
            if committed.len() >= MOST_SERIES {
                break;
            }
        }
    }
    let partitions: Vec<TopicPartition> = committed
        .iter()
        .map(|(_, _, partition, _, id)| TopicPartition::new(*id, *partition))
        .collect();
    let ends = meta.high_watermarks(partitions).await?;
    Ok(committed
        .into_iter()
        .zip(ends)
        .filter_map(|((group, topic, partition, offset, _), end)| {
            let label = LagLabel {
                group,
                topic,
                partition,
            };
            end.map(|end| (label, (end - offset).max(0)))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use floe_metastore::LocalMetastore;

    use super::*;

    #[tokio::test]
    async fn a_groups_lag_is_the_log_end_less_its_commit() {
        let meta = LocalMetastore::in_memory().await.unwrap();
        crate::testing::topic_with_records(&meta, "t", "ingest/00/a", &[10, 4]).await;
        // From outside the group protocol (generation -1), as admin tools commit.
        let commit = floe_metastore::CommitOffsets {
            group: "readers".into(),
            generation: -1,
            member_id: String::new(),
            instance_id: None,
            offsets: vec![floe_metastore::OffsetToCommit {
                topic: "t".into(),
                partition: 0,
                offset: 7,
                leader_epoch: -1,
                metadata: None,
            }],
            now_ms: 0,
        };
        meta.commit_offsets(commit).await.unwrap().unwrap();
        let lags = lags(&meta).await.unwrap();
        let label = LagLabel {
            group: "readers".into(),
            topic: "t".into(),
            partition: 0,
        };
        assert_eq!(lags, vec![(label, 3)]);
    }
}
