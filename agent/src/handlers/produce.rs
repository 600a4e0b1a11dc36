//! Produce: validate each partition's batch without decompressing it, hand it
//! to the batcher, and answer once the ingest file holding it is committed.

use floe_protocol::ResponseError;
use floe_protocol::batch::RecordBatch;
use floe_protocol::kafka_protocol::messages::produce_request::{
    PartitionProduceData, TopicProduceData,
};
use floe_protocol::kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, TopicProduceResponse,
};
use floe_protocol::kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use futures::future::join_all;

use super::str_bytes;
use crate::batcher::AppendError;
use crate::broker::{Broker, kafka_error};

/// Handles a Produce request; `None` for `acks=0`, which gets no response.
pub async fn handle(
    broker: &Broker,
    req: ProduceRequest,
    _version: i16,
) -> Option<ProduceResponse> {
    let acks = req.acks;
    if !matches!(acks, -1..=1) {
        let responses = req
            .topic_data
            .into_iter()
            .map(|t| {
                refuse_topic(
                    t,
                    ResponseError::InvalidRequiredAcks,
                    "acks must be -1, 0 or 1",
                )
            })
            .collect();
        return Some(ProduceResponse::default().with_responses(responses));
    }
    if req.transactional_id.is_some() {
        let responses = req
            .topic_data
            .into_iter()
            .map(|t| {
                refuse_topic(
                    t,
                    ResponseError::TransactionalIdAuthorizationFailed,
                    "transactions are not supported yet",
                )
            })
            .collect();
        return Some(ProduceResponse::default().with_responses(responses));
    }
    let topics = join_all(req.topic_data.into_iter().map(|t| produce_topic(broker, t))).await;
    // acks=0 and acks=1 are answered, like acks=all, only after the commit:
    // the object store's replication is what makes a record durable.
    (acks != 0).then(|| ProduceResponse::default().with_responses(topics))
}

fn refuse_topic(topic: TopicProduceData, error: ResponseError, why: &str) -> TopicProduceResponse {
    let partitions = topic
        .partition_data
        .iter()
        .map(|p| refuse(p.index, error, why))
        .collect();
    TopicProduceResponse::default()
        .with_name(topic.name)
        .with_partition_responses(partitions)
}

fn refuse(partition: i32, error: ResponseError, why: &str) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(partition)
        .with_error_code(error.code())
        .with_base_offset(-1)
        .with_error_message(Some(str_bytes(why)))
}

async fn produce_topic(broker: &Broker, topic: TopicProduceData) -> TopicProduceResponse {
    let name = topic.name.clone();
    let info = match broker.topic_or_create(&name.0, true).await {
        Ok(info) => info,
        Err(e) => return refuse_topic(topic, kafka_error(&e), &e.to_string()),
    };
    let partitions = join_all(topic.partition_data.into_iter().map(|p| {
        let info = &info;
        async move {
            let index = p.index;
            match produce_partition(broker, info, p).await {
                Ok(base_offset) => PartitionProduceResponse::default()
                    .with_index(index)
                    .with_base_offset(base_offset),
                Err((error, why)) => {
                    tracing::debug!(topic = %info.name, partition = index, ?error, %why, "produce refused");
                    refuse(index, error, &why)
                }
            }
        }
    }))
    .await;
    TopicProduceResponse::default()
        .with_name(name)
        .with_partition_responses(partitions)
}

async fn produce_partition(
    broker: &Broker,
    topic: &floe_metastore::TopicInfo,
    data: PartitionProduceData,
) -> Result<i64, (ResponseError, String)> {
    if data.index < 0 || data.index >= topic.partitions {
        return Err((
            ResponseError::UnknownTopicOrPartition,
            format!("no partition {}", data.index),
        ));
    }
    let records = data.records.unwrap_or_default();
    let mut batches =
        RecordBatch::parse_all(&records).map_err(|e| (e.kafka_error(), e.to_string()))?;
    // Like Kafka: magic v2 produce requests carry exactly one batch per partition.
    if batches.len() != 1 {
        return Err((
            ResponseError::InvalidRecord,
            format!("expected exactly one record batch, got {}", batches.len()),
        ));
    }
    let batch = batches.remove(0);
    if batch.is_control() {
        return Err((
            ResponseError::InvalidRecord,
            "clients may not produce control batches".into(),
        ));
    }
    if batch.is_transactional() {
        return Err((
            ResponseError::InvalidTxnState,
            "transactions are not supported yet".into(),
        ));
    }
    if batch.producer_id() >= 0 {
        return Err((
            ResponseError::UnknownProducerId,
            "idempotent producers are not supported yet".into(),
        ));
    }
    broker
        .batcher
        .append(topic.id, data.index, batch)
        .await
        .map_err(|e| match e {
            AppendError::Storage(why) => (ResponseError::KafkaStorageError, why),
            AppendError::Refused(meta) => (kafka_error(&meta), meta.to_string()),
        })
}
