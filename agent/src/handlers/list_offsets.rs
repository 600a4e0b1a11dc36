//! ListOffsets: earliest (-2), latest (-1), max timestamp (-3, KIP-734) and by
//! timestamp.
//!
//! For a timestamp the metastore names the first extent whose max timestamp
//! reaches it; the exact record is found by decoding that extent's batches.
//! This is the one place floe decompresses, because Kafka's answer is exact.

use floe_metastore::{ExtentRef, OffsetAnswer, OffsetQuery};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use floe_protocol::kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use floe_protocol::kafka_protocol::records::RecordBatchDecoder;

use crate::broker::{Broker, kafka_error};
use crate::read::read_extents;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;

pub async fn handle(broker: &Broker, req: ListOffsetsRequest, version: i16) -> ListOffsetsResponse {
    let mut topics = Vec::with_capacity(req.topics.len());
    for topic in req.topics {
        let info = broker.meta.topic(&topic.name.0).await.ok().flatten();
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in topic.partitions {
            let response =
                ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
            let answer = match &info {
                None => Err(ResponseError::UnknownTopicOrPartition),
                Some(info) => lookup(broker, info.id, p.partition_index, p.timestamp).await,
            };
            partitions.push(match answer {
                Ok((timestamp, offset)) => response
                    .with_timestamp(timestamp)
                    .with_offset(offset)
                    // The field exists from v4; the encoder refuses it earlier.
                    .with_leader_epoch(if version >= 4 { 0 } else { -1 }),
                Err(error) => response
                    .with_error_code(error.code())
                    .with_timestamp(-1)
                    .with_offset(-1),
            });
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}

/// `(timestamp, offset)` for one partition, as Kafka answers it.
async fn lookup(
    broker: &Broker,
    topic: uuid::Uuid,
    partition: i32,
    timestamp: i64,
) -> Result<(i64, i64), ResponseError> {
    let query = match timestamp {
        LATEST => OffsetQuery::Latest,
        EARLIEST | EARLIEST_LOCAL => OffsetQuery::Earliest,
        MAX_TIMESTAMP => OffsetQuery::MaxTimestamp,
        t if t >= 0 => OffsetQuery::Timestamp(t),
        // -5 (latest tiered) means nothing here: floe has no tiers.
        _ => return Err(ResponseError::UnsupportedVersion),
    };
    let answer = broker
        .meta
        .list_offsets(topic, partition, query)
        .await
        .map_err(|e| kafka_error(&e))?;
    match answer {
        OffsetAnswer::Offset(offset) => Ok((-1, offset)),
        OffsetAnswer::NotFound => Ok((-1, -1)),
        // The first record reaching the extent's largest timestamp is the
        // first one with it.
        OffsetAnswer::InExtent(extent) if timestamp == MAX_TIMESTAMP => {
            first_record_at(broker, &extent, extent.max_timestamp).await
        }
        OffsetAnswer::InExtent(extent) => first_record_at(broker, &extent, timestamp).await,
    }
}

async fn first_record_at(
    broker: &Broker,
    extent: &ExtentRef,
    timestamp: i64,
) -> Result<(i64, i64), ResponseError> {
    let mut bytes = read_extents(broker, std::slice::from_ref(extent), extent.base_offset)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "list offsets: reading objects failed");
            ResponseError::KafkaStorageError
        })?;
    let sets = RecordBatchDecoder::decode_all(&mut bytes).map_err(|e| {
        tracing::error!(object = %extent.object_key, error = %e, "stored batches do not decode");
        ResponseError::CorruptMessage
    })?;
    sets.iter()
        .flat_map(|set| set.records.iter())
        .find(|r| r.timestamp >= timestamp)
        .map(|r| (r.timestamp, r.offset))
        // The extent's max timestamp reached the target, so a record must.
        .ok_or(ResponseError::UnknownServerError)
}
