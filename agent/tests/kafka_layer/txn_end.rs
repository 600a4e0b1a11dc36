//! An EndTxn acts once, on the transaction it was processed against.

use floe_protocol::kafka_protocol::messages::*;

use crate::support::*;

fn init(id: &str) -> InitProducerIdRequest {
    InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(str_bytes(id))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
}

fn add_partition(
    id: &str,
    producer: (i64, i16),
    topic: &str,
    partition: i32,
) -> AddPartitionsToTxnRequest {
    use add_partitions_to_txn_request::*;
    AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(str_bytes(id)))
        .with_v3_and_below_producer_id(ProducerId(producer.0))
        .with_v3_and_below_producer_epoch(producer.1)
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default()
                .with_name(TopicName(str_bytes(topic)))
                .with_partitions(vec![partition]),
        ])
}

fn end(id: &str, producer: (i64, i16), commit: bool) -> EndTxnRequest {
    EndTxnRequest::default()
        .with_transactional_id(TransactionalId(str_bytes(id)))
        .with_producer_id(ProducerId(producer.0))
        .with_producer_epoch(producer.1)
        .with_committed(commit)
}

/// Adds the partition to the transaction and produces `value` in it; its offset.
async fn txn_write(
    client: &mut floe_protocol::client::Connection,
    id: &str,
    producer: (i64, i16),
    sequence: i32,
    value: &str,
) -> i64 {
    let added: AddPartitionsToTxnResponse = client
        .call(
            ApiKey::AddPartitionsToTxn,
            3,
            &add_partition(id, producer, "eos", 0),
        )
        .await
        .unwrap();
    let result = &added.results_by_topic_v3_and_below[0].results_by_partition[0];
    assert_eq!(result.partition_error_code, 0);
    let request = produce("eos", 0, txn_batch(producer, sequence, &[value]))
        .with_transactional_id(Some(TransactionalId(str_bytes(id))));
    let sent: ProduceResponse = client.call(ApiKey::Produce, 9, &request).await.unwrap();
    assert_eq!(produced(&sent).error_code, 0);
    produced(&sent).base_offset
}

/// Transaction 1's EndTxn(commit) goes to an agent whose store is slow; the
/// client gives up on it and retries through another agent, which commits
/// transaction 1; the producer begins transaction 2. When the slow agent's
/// upload finally lands, its end must not touch transaction 2 (it used to
/// look again, find 2 ongoing under the same producer and epoch, and commit
/// it: exactly-once broken).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_end_never_ends_the_producer_s_next_transaction() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "eos", 1).await;
    let gate = Gate::held();
    let slow = agent(&meta, &gate.over(&store)).await;
    let fast = agent(&meta, &store).await;
    let mut client = fast.connect().await;
    let id = "stale-end";

    let init: InitProducerIdResponse = client
        .call(ApiKey::InitProducerId, 4, &init(id))
        .await
        .unwrap();
    assert_eq!(init.error_code, 0);
    let producer = (init.producer_id.0, init.producer_epoch);
    txn_write(&mut client, id, producer, 0, "one").await;

    // The end through the slow agent: its markers wait at the gate.
    let mut gone = slow.connect().await;
    let stale = gone
        .send(ApiKey::EndTxn, 3, &end(id, producer, true))
        .await
        .unwrap();
    eventually("the slow agent uploads its markers", || gate.waiting() > 0).await;

    // The client's retry through the other agent commits transaction 1;
    // transaction 2 begins.
    let ended: EndTxnResponse = client
        .call(ApiKey::EndTxn, 3, &end(id, producer, true))
        .await
        .unwrap();
    assert_eq!(ended.error_code, 0);
    let second = txn_write(&mut client, id, producer, 1, "two").await;

    gate.open();
    let answer: EndTxnResponse = gone.receive(ApiKey::EndTxn, 3, stale).await.unwrap();
    assert_ne!(
        answer.error_code, 0,
        "the stale end claimed to end something"
    );

    // Transaction 2 is still ongoing and unread by read_committed...
    let described: DescribeTransactionsResponse = client
        .call(
            ApiKey::DescribeTransactions,
            0,
            &DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![TransactionalId(str_bytes(id))]),
        )
        .await
        .unwrap();
    assert_eq!(
        described.transaction_states[0].transaction_state.as_str(),
        "Ongoing"
    );
    let read: FetchResponse = client
        .call(
            ApiKey::Fetch,
            FETCH_VERSION,
            &fetch("eos", 0, 0).with_isolation_level(1),
        )
        .await
        .unwrap();
    let data = fetched(&read);
    assert!(
        data.last_stable_offset <= second,
        "LSO {} passed transaction 2",
        data.last_stable_offset
    );
    assert_eq!(values(data), vec![(0, "one".to_string())]);

    // ...and its producer may still abort it.
    let aborted: EndTxnResponse = client
        .call(ApiKey::EndTxn, 3, &end(id, producer, false))
        .await
        .unwrap();
    assert_eq!(
        aborted.error_code, 0,
        "the producer's own abort was refused"
    );
}
