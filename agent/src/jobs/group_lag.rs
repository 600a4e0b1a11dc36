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

use crate::metrics::{LagLabel, Metrics, ShareFigures};

/// The most groups read in a pass, and the most series reported: a
/// cluster with more shows the first ones (by name).
pub const MOST_GROUPS: usize = 1_000;
pub const MOST_SERIES: usize = 20_000;

pub async fn run(meta: Arc<dyn Metastore>, metrics: Arc<Metrics>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match figures(meta.as_ref()).await {
            Ok((lags, shares)) => {
                metrics.set_group_lags(lags);
                metrics.set_share_groups(shares);
            }
            Err(e) => tracing::warn!(error = %e, "reading consumer groups' lag failed"),
        }
    }
}

/// Each group's lag on each partition it committed an offset for (a
/// share group's: records past its start offset not yet done, Kafka's
/// formula), and each share group's figures.
pub async fn figures(
    meta: &dyn Metastore,
) -> Result<(Vec<(LagLabel, i64)>, Vec<ShareFigures>), MetaError> {
    let mut listed = meta.groups().await?;
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    listed.truncate(MOST_GROUPS);
    let topics: HashMap<String, floe_metastore::TopicId> = meta
        .topics()
        .await?
        .into_iter()
        .map(|t| (t.name, t.id))
        .collect();
    let names: HashMap<floe_metastore::TopicId, String> = topics
        .iter()
        .map(|(name, id)| (*id, name.clone()))
        .collect();
    let mut committed = Vec::new();
    let mut shares = Vec::new();
    for listing in listed {
        let group = listing.name;
        if listing.group_type == "share" {
            let Ok(Some(view)) = meta.describe_share_group(&group).await else {
                continue;
            };
            shares.push(ShareFigures {
                group: group.clone(),
                members: view.members.len() as i64,
                in_flight: view
                    .partitions
                    .iter()
                    .map(|p| p.end_offset - p.start_offset - p.done)
                    .sum(),
                archived: view
                    .partitions
                    .iter()
                    .map(|p| p.archived.min(i64::MAX as u64) as i64)
                    .sum(),
            });
            for p in view.partitions {
                let Some(topic) = names.get(&p.topic) else {
                    continue;
                };
                // Lag counts from the start offset, less what is done past it.
                let from = p.start_offset + p.done;
                committed.push((group.clone(), topic.clone(), p.partition, from, p.topic));
            }
            continue;
        }
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
    let lags = committed
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
        .collect();
    Ok((lags, shares))
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
        let (lags, shares) = figures(&meta).await.unwrap();
        assert!(shares.is_empty());
        let label = LagLabel {
            group: "readers".into(),
            topic: "t".into(),
            partition: 0,
        };
        assert_eq!(lags, vec![(label, 3)]);
    }
}
