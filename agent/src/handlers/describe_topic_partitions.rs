//! DescribeTopicPartitions (KIP-966): topics' partitions a page at a time,
//! which Kafka 3.7+ admin clients use to describe topics. As Kafka's
//! `DescribeTopicPartitionsRequestHandler`: topics in name order, from the
//! cursor's topic and partition on, at most `response_partition_limit`
//! partitions (and never more than Kafka's default
//! `max.request.partition.size.limit`), with a cursor to the next page.
//! Leaders are as Metadata reports them: one agent for every partition.

use std::collections::BTreeMap;

use floe_metastore::TopicInfo;
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use floe_protocol::kafka_protocol::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName,
};

use super::metadata::{TOPIC_OPERATIONS, operations};
use crate::broker::{Broker, kafka_error};
use floe_protocol::str_bytes;

/// Kafka's `max.request.partition.size.limit` default.
const MAX_PARTITIONS: i32 = 2000;

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
    let invalid = |why: String| (ResponseError::InvalidRequest, why);
    let refused = |e: floe_metastore::MetaError| (kafka_error(&e), e.to_string());
    let cursor = req
        .cursor
        .as_ref()
        .map(|c| (c.topic_name.0.to_string(), c.partition_index));
    if let Some((topic, partition)) = &cursor
        && *partition < 0
    {
        return Err(invalid(format!(
            "the cursor's partition {partition} of {topic} is negative"
        )));
    }
    let cursor_topic = cursor.as_ref().map_or("", |(t, _)| t.as_str());
    // Every topic when none is named (known already), else those named
    // (looked up as the page needs them).
    let all = req.topics.is_empty();
    let mut known: BTreeMap<String, TopicInfo> = BTreeMap::new();
    let mut names: Vec<String> = if all {
        for t in broker.meta.topics().await.map_err(refused)? {
            known.insert(t.name.clone(), t);
        }
        known.keys().cloned().collect()
    } else {
        req.topics.iter().map(|t| t.name.0.to_string()).collect()
    };
    names.retain(|n| n.as_str() >= cursor_topic);
    names.sort();
    names.dedup();
    // Named topics must include the cursor's; listing all, Kafka goes on
    // from the first name after it (the topic may have been deleted).
    if !all && cursor.is_some() && !names.iter().any(|n| n == cursor_topic) {
        return Err(invalid(format!(
            "the cursor's topic {cursor_topic} is not among the topics described"
        )));
    }

    // Kafka answers at least one partition a page, so a client paging on
    // never asks the same page twice.
    let mut remaining = req.response_partition_limit.clamp(1, MAX_PARTITIONS);
    let mut topics = Vec::new();
    let mut next_cursor = None;
    for name in names {
        if remaining == 0 {
            // The page is full: the next starts at this topic (whether it
            // exists is for the next page to say).
            next_cursor = Some(
                Cursor::default()
                    .with_topic_name(TopicName(str_bytes(&name)))
                    .with_partition_index(0),
            );
            break;
        }
        let info = match known.remove(&name) {
            Some(info) => info,
            None if all => continue,
            None => match broker.meta.topic(&name).await.map_err(refused)? {
                Some(info) => info,
                None => {
                    let error = if floe_metastore::state::validate_topic_name(&name).is_err() {
                        ResponseError::InvalidTopicException
                    } else {
                        ResponseError::UnknownTopicOrPartition
                    };
                    topics.push(
                        DescribeTopicPartitionsResponseTopic::default()
                            .with_error_code(error.code())
                            .with_name(Some(TopicName(str_bytes(&name))))
                            .with_topic_authorized_operations(i32::MIN),
                    );
                    continue;
                }
            },
        };
        let start = match &cursor {
            Some((topic, partition)) if *topic == info.name => *partition,
            _ => 0,
        };
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
