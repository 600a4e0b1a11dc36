//! DescribeShareGroupOffsets, AlterShareGroupOffsets and
//! DeleteShareGroupOffsets: where a share group reads each partition from
//! (its share-partition start offset), as Kafka 4.2 answers them. Alter and
//! delete need a group without members; alter creates the group if it does
//! not exist.

use std::collections::BTreeMap;

use floe_metastore::groups::share::{AlterShareOffsets, DeleteShareOffsets};
use floe_metastore::{GroupError, TopicId, TopicInfo};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
};
use floe_protocol::kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic;
use floe_protocol::kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
};
use floe_protocol::kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse, DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse, TopicName,
};
use floe_protocol::str_bytes;

use crate::broker::Broker;

/// The topic named `name`, if it exists (the metastore's word when the
/// cache does not know it).
async fn topic(broker: &Broker, name: &str) -> Option<TopicInfo> {
    broker.fetch_topic(name, None, 0).await
}

/// A group-level failure as Kafka answers it.
fn group_failure(e: GroupError) -> ResponseError {
    match e {
        GroupError::NonEmptyGroup => ResponseError::NonEmptyGroup,
        other => super::share_error(other),
    }
}

pub async fn describe(
    broker: &Broker,
    req: DescribeShareGroupOffsetsRequest,
) -> DescribeShareGroupOffsetsResponse {
    let mut groups = Vec::with_capacity(req.groups.len());
    for g in req.groups {
        let response =
            DescribeShareGroupOffsetsResponseGroup::default().with_group_id(g.group_id.clone());
        let view = match broker.meta.describe_share_group(&g.group_id.0).await {
            Ok(view) => view,
            Err(e) => {
                groups.push(response.with_error_code(super::meta_error(e).code()));
                continue;
            }
        };
        let starts: BTreeMap<(TopicId, i32), i64> = view
            .iter()
            .flat_map(|v| &v.partitions)
            .map(|p| ((p.topic, p.partition), p.start_offset))
            .collect();
        let partition = |index: i32, start: Option<i64>| {
            DescribeShareGroupOffsetsResponsePartition::default()
                .with_partition_index(index)
                .with_start_offset(start.unwrap_or(-1))
                .with_leader_epoch(0)
        };
        let mut topics = Vec::new();
        match g.topics {
            // Every partition the group has read.
            None => {
                let mut by_topic: BTreeMap<TopicId, Vec<(i32, i64)>> = BTreeMap::new();
                for (&(t, p), &start) in &starts {
                    by_topic.entry(t).or_default().push((p, start));
                }
                for (id, partitions) in by_topic {
                    let name = super::heartbeat::topic_name(broker, id).await;
                    if name.is_empty() {
                        continue;
                    }
                    topics.push(
                        DescribeShareGroupOffsetsResponseTopic::default()
                            .with_topic_name(TopicName(str_bytes(&name)))
                            .with_topic_id(id)
                            .with_partitions(
                                partitions
                                    .into_iter()
                                    .map(|(p, start)| partition(p, Some(start)))
                                    .collect(),
                            ),
                    );
                }
            }
            Some(asked) => {
                for t in asked {
                    let id = topic(broker, &t.topic_name.0).await.map(|info| info.id);
                    let partitions = t
                        .partitions
                        .iter()
                        .map(|&p| partition(p, id.and_then(|id| starts.get(&(id, p)).copied())))
                        .collect();
                    topics.push(
                        DescribeShareGroupOffsetsResponseTopic::default()
                            .with_topic_name(t.topic_name)
                            .with_topic_id(id.unwrap_or_default())
                            .with_partitions(partitions),
                    );
                }
            }
        }
        groups.push(response.with_topics(topics));
    }
    DescribeShareGroupOffsetsResponse::default().with_groups(groups)
}

pub async fn alter(
    broker: &Broker,
    req: AlterShareGroupOffsetsRequest,
) -> AlterShareGroupOffsetsResponse {
    let failed =
        |e: ResponseError| AlterShareGroupOffsetsResponse::default().with_error_code(e.code());
    if req.group_id.0.trim().is_empty() {
        return failed(ResponseError::InvalidGroupId);
    }
    let mut starts = Vec::new();
    let mut responses = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let info = topic(broker, &t.topic_name.0).await;
        let partitions = t
            .partitions
            .iter()
            .map(|p| {
                let error = match &info {
                    None => Some(ResponseError::UnknownTopicOrPartition),
                    Some(info) if p.partition_index < 0 || p.partition_index >= info.partitions => {
                        Some(ResponseError::UnknownTopicOrPartition)
                    }
                    Some(_) if p.start_offset < 0 => Some(ResponseError::InvalidRequest),
                    Some(info) => {
                        starts.push((info.id, p.partition_index, p.start_offset));
                        None
                    }
                };
                AlterShareGroupOffsetsResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(error.map_or(0, |e| e.code()))
            })
            .collect();
        responses.push(
            AlterShareGroupOffsetsResponseTopic::default()
                .with_topic_name(t.topic_name)
                .with_topic_id(info.map(|i| i.id).unwrap_or_default())
                .with_partitions(partitions),
        );
    }
    if !starts.is_empty() {
        let altered = broker
            .meta
            .alter_share_offsets(AlterShareOffsets {
                group: req.group_id.0.to_string(),
                starts,
            })
            .await;
        match altered {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return failed(group_failure(e)),
            Err(e) => return failed(super::meta_error(e)),
        }
    }
    AlterShareGroupOffsetsResponse::default().with_responses(responses)
}

pub async fn delete(
    broker: &Broker,
    req: DeleteShareGroupOffsetsRequest,
) -> DeleteShareGroupOffsetsResponse {
    let failed =
        |e: ResponseError| DeleteShareGroupOffsetsResponse::default().with_error_code(e.code());
    if req.group_id.0.trim().is_empty() {
        return failed(ResponseError::InvalidGroupId);
    }
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let id = topic(broker, &t.topic_name.0).await.map(|info| info.id);
        topics.push((t.topic_name, id));
    }
    let ids: Vec<TopicId> = topics.iter().filter_map(|(_, id)| *id).collect();
    let mut forgotten = Vec::new();
    if !ids.is_empty() {
        let deleted = broker
            .meta
            .delete_share_offsets(DeleteShareOffsets {
                group: req.group_id.0.to_string(),
                topics: ids,
            })
            .await;
        forgotten = match deleted {
            Ok(Ok(forgotten)) => forgotten,
            Ok(Err(e)) => return failed(group_failure(e)),
            Err(e) => return failed(super::meta_error(e)),
        };
    }
    let mut forgotten = forgotten.into_iter();
    let responses = topics
        .into_iter()
        .map(|(name, id)| {
            let had = id.is_some() && forgotten.next().unwrap_or(false);
            let response = DeleteShareGroupOffsetsResponseTopic::default()
                .with_topic_name(name)
                .with_topic_id(id.unwrap_or_default());
            match had {
                true => response,
                false => response
                    .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                    .with_error_message(Some(str_bytes(
                        "There is no offset information to delete.",
                    ))),
            }
        })
        .collect();
    DeleteShareGroupOffsetsResponse::default().with_responses(responses)
}
