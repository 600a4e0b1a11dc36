//! DeleteRecords: move partitions' log start offsets forward (offset -1 means
//! the high watermark), as Kafka's admin `deleteRecords` does.

use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use floe_protocol::kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use crate::broker::{Broker, kafka_error};

pub async fn handle(broker: &Broker, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let mut topics = Vec::with_capacity(req.topics.len());
    for topic in req.topics {
        let info = broker.meta.topic(&topic.name.0).await.ok().flatten();
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in topic.partitions {
            let result = match &info {
                None => Err(ResponseError::UnknownTopicOrPartition),
                Some(info) => trim(broker, info.id, p.partition_index, p.offset).await,
            };
            let response =
                DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
            partitions.push(match result {
                Ok(low_watermark) => response.with_low_watermark(low_watermark),
                Err(e) => response.with_low_watermark(-1).with_error_code(e.code()),
            });
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(topic.name)
                .with_partitions(partitions),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}

async fn trim(
    broker: &Broker,
    topic: uuid::Uuid,
    partition: i32,
    offset: i64,
) -> Result<i64, ResponseError> {
    let offset = if offset == -1 {
        broker
            .meta
            .offsets(topic, partition)
            .await
            .map_err(|e| kafka_error(&e))?
            .high_watermark
    } else {
        offset
    };
    let trimmed = broker
        .meta
        .trim(topic, partition, offset)
        .await
        .map_err(|e| kafka_error(&e));
    // Fetches through this agent see the new log start at once (through
    // others, once their views expire).
    broker
        .extents
        .forget([floe_metastore::TopicPartition::new(topic, partition)]);
    trimmed
}
