//! DescribeTopicPartitions (KIP-966): topics' partitions a page at a time,
//! which Kafka 3.7+ admin clients use to describe topics. As Kafka's
//! `DescribeTopicPartitionsRequestHandler`: topics in name order, from the
//! cursor's topic and partition on, at most `response_partition_limit`
//! partitions (and never more than Kafka's default
//! `max.request.partition.size.limit`), with a cursor to the next page.
//! Leaders are as Metadata reports them: one agent for every partition.

use floe_metastore::TopicInfo;
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use floe_protocol::kafka_protocol::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName,
};

use super::metadata::{TOPIC_OPERATIONS, operations};
use super::str_bytes;
use crate::broker::{Broker, kafka_error};

/// Kafka's `max.request.partition.size.limit` default.
const MAX_PARTITIONS: i32 = 2000;

/// What a request names, once the cursor has cut off the topics before it.
enum Wanted {
    Topic(TopicInfo),
    Missing(String, ResponseError),
}

pub async fn handle(
    broker: &Broker,
    req: DescribeTopicPartitionsRequest,
    leader: BrokerId,
) -> DescribeTopicPartitionsResponse {
    let asked = req.topics.clone();
    match describe(broker, req, leader).await {
        Ok(response) => response,
        // As Kafka answers a request it cannot serve: each topic asked for
        // with the error.
        Err((error, message)) => {
            tracing::debug!(%message, "DescribeTopicPartitions refused");
            DescribeTopicPartitionsResponse::default().with_topics(
                asked
                    .into_iter()
                    .map(|t| {
                        DescribeTopicPartitionsResponseTopic::default()
                            .with_name(Some(t.name))
                            .with_error_code(error.code())
                            .with_topic_authorized_operations(i32::MIN)
                    })
                    .collect(),
            )
        }
    }
}

async fn describe(
    broker: &Broker,
    req: DescribeTopicPartitionsRequest,
    leader: BrokerId,
) -> Result<DescribeTopicPartitionsResponse, (ResponseError, String)> {
    let cursor_topic = req
        .cursor
        .as_ref()
        .map_or(String::new(), |c| c.topic_name.0.to_string());
    let all = req.topics.is_empty();
    let mut names: Vec<String> = if all {
        let topics = broker
            .meta
            .topics()
            .await
            .map_err(|e| (kafka_error(&e), e.to_string()))?;
        topics.into_iter().map(|t| t.name).collect()
    } else {
        req.topics.iter().map(|t| t.name.0.to_string()).collect()
    };
    names.retain(|n| *n >= cursor_topic);
    names.sort();
    names.dedup();
    if !all && req.cursor.is_some() && !names.contains(&cursor_topic) {
        return Err((
            ResponseError::InvalidRequest,
            format!("the topic list should contain the cursor's topic {cursor_topic}"),
        ));
    }
    let mut wanted = Vec::with_capacity(names.len());
    for name in names {
        wanted.push(match broker.meta.topic(&name).await {
            Ok(Some(info)) => Wanted::Topic(info),
            Ok(None) if floe_metastore::state::validate_topic_name(&name).is_err() => {
                Wanted::Missing(name, ResponseError::InvalidTopicException)
            }
            Ok(None) => Wanted::Missing(name, ResponseError::UnknownTopicOrPartition),
            Err(e) => Wanted::Missing(name, kafka_error(&e)),
        });
    }

    let first_partition = req.cursor.as_ref().map_or(0, |c| c.partition_index.max(0));
    let mut remaining = req.response_partition_limit.clamp(0, MAX_PARTITIONS);
    let mut topics = Vec::new();
    let mut next_cursor = None;
    for (i, w) in wanted.into_iter().enumerate() {
        let info = match w {
            // Listing all topics skips one deleted meanwhile, as Kafka does.
            Wanted::Missing(_, _) if all => continue,
            Wanted::Missing(name, error) => {
                topics.push(
                    DescribeTopicPartitionsResponseTopic::default()
                        .with_error_code(error.code())
                        .with_name(Some(TopicName(str_bytes(&name))))
                        .with_topic_authorized_operations(i32::MIN),
                );
                continue;
            }
            Wanted::Topic(info) => info,
        };
        if remaining == 0 {
            // The page is full: the next starts at this topic.
            next_cursor = Some(
                Cursor::default()
                    .with_topic_name(TopicName(str_bytes(&info.name)))
                    .with_partition_index(0),
            );
            break;
        }
        let start = if i == 0 { first_partition } else { 0 };
        let end = info.partitions.min(start.saturating_add(remaining));
        let partitions: Vec<_> = (start..end).map(|p| partition(p, leader)).collect();
        remaining -= partitions.len() as i32;
        topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(TopicName(str_bytes(&info.name))))
                .with_topic_id(info.id)
                .with_partitions(partitions)
                .with_topic_authorized_operations(operations(TOPIC_OPERATIONS)),
        );
        if end < info.partitions {
            next_cursor = Some(
                Cursor::default()
                    .with_topic_name(TopicName(str_bytes(&info.name)))
                    .with_partition_index(end),
            );
            break;
        }
    }
    Ok(DescribeTopicPartitionsResponse::default()
        .with_topics(topics)
        .with_next_cursor(next_cursor))
}

fn partition(index: i32, leader: BrokerId) -> DescribeTopicPartitionsResponsePartition {
    DescribeTopicPartitionsResponsePartition::default()
        .with_partition_index(index)
        .with_leader_id(leader)
        .with_leader_epoch(super::cluster::LEADER_EPOCH)
        .with_replica_nodes(vec![leader])
        .with_isr_nodes(vec![leader])
        // No replicas to elect from (KIP-966): the log is the metastore's.
        .with_eligible_leader_replicas(Some(Vec::new()))
        .with_last_known_elr(Some(Vec::new()))
}
