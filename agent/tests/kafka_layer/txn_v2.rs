//! Transactions v2 (KIP-890 part 2), as a Kafka 4 Java producer drives
//! them: no AddPartitionsToTxn (Produce v12 adds its partition), no
//! AddOffsetsToTxn (TxnOffsetCommit v5 adds its group), and an EndTxn v5
//! that bumps the epoch and answers the producer's identity from then on.

use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::*;

use crate::support::*;

const ID: &str = "v2";

fn init() -> InitProducerIdRequest {
    InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(str_bytes(ID))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
}

fn end(producer: (i64, i16), commit: bool) -> EndTxnRequest {
    EndTxnRequest::default()
        .with_transactional_id(TransactionalId(str_bytes(ID)))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_committed(commit)
}

async fn write(
    conn: &mut floe_protocol::client::Connection,
    producer: (i64, i16),
    sequence: i32,
    value: &str,
) -> (i16, i64) {
    let request = produce("v2-topic", 0, txn_batch(producer, sequence, &[value]))
        .with_transactional_id(Some(TransactionalId(str_bytes(ID))));
    let sent: ProduceResponse = conn.call(ApiKey::Produce, 12, &request).await.unwrap();
    (produced(&sent).error_code, produced(&sent).base_offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_v2_as_a_kafka_4_producer_drives_them() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "v2-topic", 1).await;
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;

    // The feature a Kafka 4 client looks for before it uses v2.
    let versions: ApiVersionsResponse = conn
        .call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await
        .unwrap();
    let feature = &versions.finalized_features[0];
    assert_eq!(
        (feature.name.as_str(), feature.max_version_level),
        ("transaction.version", 2)
    );
    assert!(versions.finalized_features_epoch >= 0);

    let init: InitProducerIdResponse = conn.call(ApiKey::InitProducerId, 5, &init()).await.unwrap();
    let first = (init.producer_id.0, init.producer_epoch);
    assert_eq!((write(&mut conn, first, 0, "one").await), (0, 0));
    let offsets = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(str_bytes(ID)))
        .with_group_id(GroupId(str_bytes("g")))
        .with_producer_id(ProducerId(first.0))
        .with_producer_epoch(first.1)
        .with_generation_id(-1)
        .with_topics(vec![
            txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(str_bytes("v2-topic")))
                .with_partitions(vec![
                    txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(1),
                ]),
        ]);
    let committed: TxnOffsetCommitResponse = conn
        .call(ApiKey::TxnOffsetCommit, 5, &offsets)
        .await
        .unwrap();
    assert_eq!(committed.topics[0].partitions[0].error_code, 0);

    let ended: EndTxnResponse = conn
        .call(ApiKey::EndTxn, 5, &end(first, true))
        .await
        .unwrap();
    assert_eq!(ended.error_code, 0);
    let second = (ended.producer_id.0, ended.producer_epoch);
    assert_eq!(second, (first.0, first.1 + 1), "the epoch bumped");
    // A retry of that end, at the old epoch: answered as it was.
    let retried: EndTxnResponse = conn
        .call(ApiKey::EndTxn, 5, &end(first, true))
        .await
        .unwrap();
    assert_eq!(
        (
            retried.error_code,
            retried.producer_id.0,
            retried.producer_epoch
        ),
        (0, second.0, second.1)
    );
    // The group's offset is committed with the transaction.
    let fetched_offsets: OffsetFetchResponse = conn
        .call(
            ApiKey::OffsetFetch,
            7,
            &OffsetFetchRequest::default()
                .with_group_id(GroupId(str_bytes("g")))
                .with_topics(Some(vec![
                    offset_fetch_request::OffsetFetchRequestTopic::default()
                        .with_name(TopicName(str_bytes("v2-topic")))
                        .with_partition_indexes(vec![0]),
                ])),
        )
        .await
        .unwrap();
    assert_eq!(fetched_offsets.topics[0].partitions[0].committed_offset, 1);

    // Transaction 2, at the bumped epoch; a late end of transaction 1 is
    // fenced from it, where under v1 it would have ended it.
    let (error, offset) = write(&mut conn, second, 0, "two").await;
    assert_eq!(error, 0);
    let stale: EndTxnResponse = conn
        .call(ApiKey::EndTxn, 4, &end(first, true))
        .await
        .unwrap();
    assert_eq!(stale.error_code, ResponseError::ProducerFenced.code());
    let read: FetchResponse = conn
        .call(
            ApiKey::Fetch,
            FETCH_VERSION,
            &fetch("v2-topic", 0, 0).with_isolation_level(1),
        )
        .await
        .unwrap();
    let data = fetched(&read);
    assert!(data.last_stable_offset <= offset);
    assert_eq!(values(data), vec![(0, "one".to_string())]);
    // The old epoch cannot write any more.
    let (fenced, _) = write(&mut conn, first, 1, "zombie").await;
    assert_ne!(fenced, 0);
    let aborted: EndTxnResponse = conn
        .call(ApiKey::EndTxn, 5, &end(second, false))
        .await
        .unwrap();
    assert_eq!(
        (aborted.error_code, aborted.producer_epoch),
        (0, second.1 + 1)
    );
}
