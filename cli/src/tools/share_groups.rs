//! `floe groups` for share groups (KIP-932), as kafka-share-groups.sh
//! shows them: members and their assignments, each partition's start
//! offset (the share-partition start offset) and lag, and the start
//! offsets reset or deleted while the group has no members.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, bail};
use floe_protocol::kafka_protocol::messages::*;

use super::{Broker, Output, Table, check, print, str_bytes};

/// A share group as ShareGroupDescribe answers it (`None`: not a share
/// group, or none at all).
pub async fn described(
    broker: &mut Broker,
    group: &str,
) -> anyhow::Result<Option<share_group_describe_response::DescribedGroup>> {
    let request =
        ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(str_bytes(group))]);
    let response: ShareGroupDescribeResponse =
        broker.call(ApiKey::ShareGroupDescribe, 1, &request).await?;
    let g = response
        .groups
        .into_iter()
        .next()
        .context("no answer for the group")?;
    if g.error_code == floe_protocol::ResponseError::GroupIdNotFound.code() {
        return Ok(None);
    }
    check(
        g.error_code,
        &format!("group {group}"),
        g.error_message.as_ref(),
    )?;
    Ok(Some(g))
}

/// Each partition's start offset, by (topic, partition).
pub async fn start_offsets(
    broker: &mut Broker,
    group: &str,
) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
    let request = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(GroupId(str_bytes(group)))
            .with_topics(None),
    ]);
    let response: DescribeShareGroupOffsetsResponse = broker
        .call(ApiKey::DescribeShareGroupOffsets, 0, &request)
        .await?;
    let mut starts = BTreeMap::new();
    for g in response.groups {
        check(
            g.error_code,
            &format!("offsets of {group}"),
            g.error_message.as_ref(),
        )?;
        for t in g.topics {
            for p in t.partitions {
                check(
                    p.error_code,
                    &format!("offset of {}-{}", t.topic_name.0, p.partition_index),
                    None,
                )?;
                if p.start_offset >= 0 {
                    starts.insert(
                        (t.topic_name.0.to_string(), p.partition_index),
                        p.start_offset,
                    );
                }
            }
        }
    }
    Ok(starts)
}

pub async fn describe(
    broker: &mut Broker,
    output: Output,
    group: &str,
    g: share_group_describe_response::DescribedGroup,
) -> anyhow::Result<()> {
    let starts = start_offsets(broker, group).await?;
    let partitions: BTreeSet<(String, i32)> = starts.keys().cloned().collect();
    let ends = super::groups::log_ends(broker, &partitions, -1).await?;
    let mut summary = Table::new(&["GROUP", "TYPE", "STATE", "EPOCH", "MEMBERS"]);
    summary.push(vec![
        group.into(),
        "share".into(),
        g.group_state.as_str().into(),
        g.group_epoch.into(),
        g.members.len().into(),
    ]);
    let mut offsets = Table::new(&[
        "GROUP",
        "TOPIC",
        "PARTITION",
        "START-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
    ]);
    for (tp, start) in &starts {
        let end = ends.get(tp).copied();
        offsets.push(vec![
            group.into(),
            tp.0.as_str().into(),
            tp.1.into(),
            (*start).into(),
            end.into(),
            end.map(|e| (e - start).max(0)).into(),
        ]);
    }
    let mut members = Table::new(&["GROUP", "MEMBER-ID", "HOST", "CLIENT-ID", "ASSIGNMENT"]);
    for m in &g.members {
        let assignment: Vec<String> = m
            .assignment
            .topic_partitions
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| format!("{}:{p}", t.topic_name.0))
            })
            .collect();
        members.push(vec![
            group.into(),
            m.member_id.as_str().into(),
            m.client_host.as_str().into(),
            m.client_id.as_str().into(),
            assignment.join(",").into(),
        ]);
    }
    print(
        output,
        &[
            ("group", &summary),
            ("offsets", &offsets),
            ("members", &members),
        ],
    );
    Ok(())
}

/// Sets the start offsets of `moves` (AlterShareGroupOffsets).
pub async fn alter(
    broker: &mut Broker,
    group: &str,
    moves: Vec<((String, i32), i64)>,
) -> anyhow::Result<()> {
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    let starts: BTreeMap<(String, i32), i64> = moves.into_iter().collect();
    for (t, p) in starts.keys() {
        by_topic.entry(t.clone()).or_default().push(*p);
    }
    use alter_share_group_offsets_request::*;
    let request = AlterShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(str_bytes(group)))
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    let partitions = ps
                        .iter()
                        .map(|&p| {
                            AlterShareGroupOffsetsRequestPartition::default()
                                .with_partition_index(p)
                                .with_start_offset(starts[&(t.clone(), p)])
                        })
                        .collect();
                    AlterShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(TopicName(str_bytes(&t)))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    let response: AlterShareGroupOffsetsResponse = broker
        .call(ApiKey::AlterShareGroupOffsets, 0, &request)
        .await?;
    check(
        response.error_code,
        &format!("resetting {group}"),
        response.error_message.as_ref(),
    )?;
    for t in response.responses {
        for p in t.partitions {
            check(
                p.error_code,
                &format!("resetting {}-{}", t.topic_name.0, p.partition_index),
                p.error_message.as_ref(),
            )?;
        }
    }
    Ok(())
}

/// Forgets what the group read of `topics` (DeleteShareGroupOffsets).
pub async fn delete_offsets(
    broker: &mut Broker,
    group: &str,
    topics: &[String],
) -> anyhow::Result<()> {
    use delete_share_group_offsets_request::*;
    let request = DeleteShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(str_bytes(group)))
        .with_topics(
            topics
                .iter()
                .map(|t| {
                    DeleteShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(TopicName(str_bytes(t)))
                })
                .collect(),
        );
    let response: DeleteShareGroupOffsetsResponse = broker
        .call(ApiKey::DeleteShareGroupOffsets, 0, &request)
        .await?;
    check(
        response.error_code,
        &format!("deleting offsets of {group}"),
        response.error_message.as_ref(),
    )?;
    let mut failed = Vec::new();
    for t in response.responses {
        match check(
            t.error_code,
            &format!("{}", t.topic_name.0),
            t.error_message.as_ref(),
        ) {
            Ok(()) => eprintln!(
                "deleted the offsets of {} for share group {group}",
                t.topic_name.0
            ),
            Err(e) => failed.push(e.to_string()),
        }
    }
    if !failed.is_empty() {
        bail!("{}", failed.join("; "));
    }
    Ok(())
}
