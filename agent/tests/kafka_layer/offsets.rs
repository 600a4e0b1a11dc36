//! Offsets as a client asks for them: ListOffsets (earliest, latest, the
//! largest timestamp, a timestamp) and a group's committed offsets
//! (OffsetCommit, pipelined as librdkafka does, and OffsetFetch through
//! another agent).

use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::*;

use crate::support::*;

/// The partition's answer: error, offset, timestamp.
async fn listed(
    conn: &mut floe_protocol::client::Connection,
    topic: &str,
    timestamp: i64,
) -> (i16, i64, i64) {
    let response: ListOffsetsResponse = conn
        .call(ApiKey::ListOffsets, 7, &list_offsets(topic, 0, timestamp))
        .await
        .unwrap();
    let p = &response.topics[0].partitions[0];
    (p.error_code, p.offset, p.timestamp)
}

/// Earliest (-2), latest (-1), the record of the largest timestamp (-3,
/// KIP-734) and the first record at or after a timestamp, as Kafka
/// answers them, before and after a DeleteRecords.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_answers_every_kind_of_query() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "listed", 1).await;
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;
    assert_eq!(listed(&mut conn, "listed", -2).await, (0, 0, -1));
    assert_eq!(listed(&mut conn, "listed", -1).await, (0, 0, -1));
    // Two batches of three records, timestamps 1000..=1002 each.
    for _ in 0..2 {
        let sent: ProduceResponse = conn
            .call(
                ApiKey::Produce,
                9,
                &produce("listed", 0, batch(&["a", "b", "c"])),
            )
            .await
            .unwrap();
        assert_eq!(produced(&sent).error_code, 0);
    }
    assert_eq!(listed(&mut conn, "listed", -2).await.1, 0);
    assert_eq!(listed(&mut conn, "listed", -1).await.1, 6);
    // The largest timestamp, 1002, is first held by offset 2.
    let (error, offset, timestamp) = listed(&mut conn, "listed", -3).await;
    assert_eq!((error, offset, timestamp), (0, 2, 1002));
    // The first record at or after 1001 is offset 1; none is after 5000.
    assert_eq!(listed(&mut conn, "listed", 1001).await, (0, 1, 1001));
    assert_eq!(listed(&mut conn, "listed", 5000).await, (0, -1, -1));
    let deleted: DeleteRecordsResponse = conn
        .call(ApiKey::DeleteRecords, 2, &delete_records("listed", 0, 4))
        .await
        .unwrap();
    assert_eq!(deleted.topics[0].partitions[0].error_code, 0);
    assert_eq!(listed(&mut conn, "listed", -2).await.1, 4);
    // A timestamp lookup never answers below the log start.
    assert_eq!(listed(&mut conn, "listed", 1000).await.1, 4);
}

/// A partition that does not exist is an error of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_of_an_unknown_partition_is_refused() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "one", 1).await;
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;
    let response: ListOffsetsResponse = conn
        .call(ApiKey::ListOffsets, 7, &list_offsets("one", 5, -1))
        .await
        .unwrap();
    assert_eq!(
        response.topics[0].partitions[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
}

/// An OffsetCommit of a simple consumer (no member, generation -1).
fn commit(group: &str, topic: &str, offsets: &[(i32, i64)]) -> OffsetCommitRequest {
    use offset_commit_request::*;
    OffsetCommitRequest::default()
        .with_group_id(GroupId(str_bytes(group)))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(str_bytes(topic)))
                .with_partitions(
                    offsets
                        .iter()
                        .map(|&(partition, offset)| {
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(partition)
                                .with_committed_offset(offset)
                                .with_committed_metadata(Some(str_bytes("m")))
                        })
                        .collect(),
                ),
        ])
}

/// The group's committed offsets of `partitions` (OffsetFetch v7).
async fn committed(
    conn: &mut floe_protocol::client::Connection,
    group: &str,
    topic: &str,
    partitions: &[i32],
) -> Vec<(i32, i64, i16)> {
    use offset_fetch_request::*;
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(str_bytes(group)))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(str_bytes(topic)))
                .with_partition_indexes(partitions.to_vec()),
        ]));
    let response: OffsetFetchResponse = conn.call(ApiKey::OffsetFetch, 7, &request).await.unwrap();
    assert_eq!(response.error_code, 0);
    response.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.committed_offset, p.error_code))
        .collect()
}

/// A consumer committing after every record pipelines its commits: every
/// one is answered, in order, the group keeps the last offset of each
/// partition, and another agent reads it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_commits_keep_the_last_offset_and_any_agent_reads_it() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "consumed", 2).await;
    let first = agent(&meta, &store).await;
    let second = agent(&meta, &store).await;
    let mut conn = first.connect().await;
    let mut ids = Vec::new();
    for n in 1..=50i64 {
        let offsets = [(0, n), (1, 100 + n / 2)];
        let id = conn
            .send(ApiKey::OffsetCommit, 8, &commit("g", "consumed", &offsets))
            .await
            .unwrap();
        ids.push(id);
    }
    for id in ids {
        let answer: OffsetCommitResponse = conn.receive(ApiKey::OffsetCommit, 8, id).await.unwrap();
        for p in &answer.topics[0].partitions {
            assert_eq!(p.error_code, 0, "partition {}", p.partition_index);
        }
    }
    let mut other = second.connect().await;
    assert_eq!(
        committed(&mut other, "g", "consumed", &[0, 1]).await,
        vec![(0, 50, 0), (1, 125, 0)]
    );
    // A partition never committed reads as -1, not as an error.
    create_topic(&meta, "fresh", 1).await;
    assert_eq!(
        committed(&mut other, "g", "fresh", &[0]).await,
        vec![(0, -1, 0)]
    );
}

/// A commit naming a partition that does not exist is refused for that
/// partition only; the others in the request are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_of_an_unknown_partition_refuses_it_alone() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "two", 2).await;
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;
    let answer: OffsetCommitResponse = conn
        .call(
            ApiKey::OffsetCommit,
            8,
            &commit("h", "two", &[(0, 7), (9, 3), (1, 8)]),
        )
        .await
        .unwrap();
    let codes: Vec<(i32, i16)> = answer.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.error_code))
        .collect();
    assert_eq!(
        codes,
        vec![
            (0, 0),
            (9, ResponseError::UnknownTopicOrPartition.code()),
            (1, 0)
        ]
    );
    assert_eq!(
        committed(&mut conn, "h", "two", &[0, 1]).await,
        vec![(0, 7, 0), (1, 8, 0)]
    );
}
