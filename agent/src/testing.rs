//! What the agent's unit tests share.

use floe_metastore::{
    Commit, CommitBatch, LocalMetastore, Metastore, NewTopic, Refusal, TopicInfo,
};

/// A topic `name` with one partition per entry of `records`, each given
/// that many records in one commit of the object `key` (one byte a batch):
/// the topic, and the commit's answer for each batch.
pub async fn topic_with_records(
    meta: &LocalMetastore,
    name: &str,
    key: &str,
    records: &[i32],
) -> (TopicInfo, Vec<Result<i64, Refusal>>) {
    let topic = meta
        .create_topic(NewTopic {
            name: name.into(),
            partitions: records.len() as i32,
            configs: Default::default(),
        })
        .await
        .unwrap();
    let batches: Vec<CommitBatch> = (0..)
        .zip(records)
        .map(|(partition, &record_count)| CommitBatch {
            topic_id: topic.id,
            partition,
            position: 0,
            length: 1,
            record_count,
            max_timestamp: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        })
        .collect();
    let committed = meta
        .commit(Commit {
            object_key: key.into(),
            object_size: batches.len() as u64,
            batches,
            not_before_ms: meta.clock().await.unwrap(),
        })
        .await
        .unwrap();
    (topic, committed)
}
