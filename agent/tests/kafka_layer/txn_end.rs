//! An EndTxn acts once, on the transaction it was processed against, and
//! only on one its agent knew before the request came.

use std::sync::Arc;

use floe_metastore::{LocalMetastore, Metastore};

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

/// eos-0 from its start, read_committed.
async fn read_committed(client: &mut floe_protocol::client::Connection) -> FetchResponse {
    let request = fetch("eos", 0, 0).with_isolation_level(1);
    client
        .call(ApiKey::Fetch, FETCH_VERSION, &request)
        .await
        .unwrap()
}

/// AddPartitionsToTxn of eos-0, which must be taken.
async fn add_eos(client: &mut floe_protocol::client::Connection, id: &str, producer: (i64, i16)) {
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
}

/// Adds the partition to the transaction and produces `value` in it; its offset.
async fn txn_write(
    client: &mut floe_protocol::client::Connection,
    id: &str,
    producer: (i64, i16),
    sequence: i32,
    value: &str,
) -> i64 {
    add_eos(client, id, producer).await;
    let request = produce("eos", 0, txn_batch(producer, sequence, &[value]))
        .with_transactional_id(Some(TransactionalId(str_bytes(id))));
    let sent: ProduceResponse = client.call(ApiKey::Produce, 9, &request).await.unwrap();
    assert_eq!(produced(&sent).error_code, 0);
    produced(&sent).base_offset
}

/// A metastore with topic "eos", and a view of it whose `op` operations
/// wait at the gate returned (held).
async fn metastore_holding(
    op: &'static str,
) -> (Arc<dyn Metastore>, Arc<dyn Metastore>, Arc<Gate>) {
    let local = Arc::new(LocalMetastore::in_memory().await.expect("a metastore"));
    let meta: Arc<dyn Metastore> = local.clone();
    create_topic(&meta, "eos", 1).await;
    let gate = Gate::held();
    let held: Arc<dyn Metastore> = HeldOps::over(&local, op, &gate);
    (meta, held, gate)
}

/// The race both tests below stage: transaction 1's EndTxn goes to
/// `slow`, which knows the transaction (it served an AddPartitionsToTxn of
/// it) but is held at `gate`; the client gives up on it and retries
/// through `fast`, which commits transaction 1; transaction 2 begins; then
/// the gate opens. Holds transaction 2 untouched (ongoing, unread by
/// read_committed, and its producer may still abort it); the stale end's
/// error code.
async fn stale_end_race(slow: &TestAgent, fast: &TestAgent, gate: &Gate, id: &str) -> i16 {
    let mut client = fast.connect().await;
    let init: InitProducerIdResponse = client
        .call(ApiKey::InitProducerId, 4, &init(id))
        .await
        .unwrap();
    assert_eq!(init.error_code, 0);
    let producer = (init.producer_id.0, init.producer_epoch);
    txn_write(&mut client, id, producer, 0, "one").await;
    // Again: the partition is in already, but now the slow agent knows
    // transaction 1, so its end acts.
    let mut gone = slow.connect().await;
    add_eos(&mut gone, id, producer).await;
    let stale = gone
        .send(ApiKey::EndTxn, 3, &end(id, producer, true))
        .await
        .unwrap();
    eventually("the slow agent is held at the gate", || gate.waiting() > 0).await;
    let ended: EndTxnResponse = client
        .call(ApiKey::EndTxn, 3, &end(id, producer, true))
        .await
        .unwrap();
    assert_eq!(ended.error_code, 0);
    let second = txn_write(&mut client, id, producer, 1, "two").await;

    gate.open();
    let answer: EndTxnResponse = gone.receive(ApiKey::EndTxn, 3, stale).await.unwrap();
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
        "Ongoing",
        "the stale end ended transaction 2"
    );
    let read = read_committed(&mut client).await;
    let data = fetched(&read);
    assert!(
        data.last_stable_offset <= second,
        "LSO {} passed transaction 2",
        data.last_stable_offset
    );
    assert_eq!(values(data), vec![(0, "one".to_string())]);
    let aborted: EndTxnResponse = client
        .call(ApiKey::EndTxn, 3, &end(id, producer, false))
        .await
        .unwrap();
    assert_eq!(
        aborted.error_code, 0,
        "the producer's own abort was refused"
    );
    answer.error_code
}

/// The slow agent's store holds its markers' upload: when it lands, the
/// end must not touch transaction 2 (it used to look again, find 2 ongoing
/// under the same producer and epoch, and commit it: exactly-once broken).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_end_never_ends_the_producer_s_next_transaction() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "eos", 1).await;
    let gate = Gate::held();
    let slow = agent(&meta, &gate.over(&store)).await;
    let fast = agent(&meta, &store).await;
    let code = stale_end_race(&slow, &fast, &gate, "stale-end").await;
    assert_ne!(code, 0, "the stale end claimed to end something");
}

/// The metastore holds the slow agent's describe instead: it then finds
/// transaction 2, under the same producer id and epoch, with nothing (no
/// version, no partition) telling it from transaction 1 but its identity.
/// (The simulation found this one: `floe-sim --kafka --start 5317 --seeds 1
/// --minutes 5` before the fix.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_end_held_by_the_metastore_never_ends_the_next_transaction() {
    let (meta, held, gate) = metastore_holding("::DescribeTxns").await;
    let store = memory_store();
    let slow = agent(&held, &store).await;
    let fast = agent(&meta, &store).await;
    let code = stale_end_race(&slow, &fast, &gate, "held-end").await;
    assert_eq!(
        code,
        floe_protocol::ResponseError::ConcurrentTransactions.code(),
        "the stale end was not refused as one its client would retry"
    );
}

/// An EndTxn through an agent that never saw its transaction (and whose
/// reading of the metastore's time is older than the transaction) cannot
/// tell it from a later one: it is answered CONCURRENT_TRANSACTIONS, which
/// clients retry, and the retry, come after the agent saw it, ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_through_an_agent_new_to_its_transaction_acts_on_the_retry() {
    // The other agent reads no time from the metastore until the gate opens.
    let (meta, no_clock, gate) = metastore_holding("::Tick").await;
    let store = memory_store();
    let coordinator = agent(&meta, &store).await;
    let other = agent(&no_clock, &store).await;
    let mut client = coordinator.connect().await;
    let id = "moved";
    let init: InitProducerIdResponse = client
        .call(ApiKey::InitProducerId, 4, &init(id))
        .await
        .unwrap();
    let producer = (init.producer_id.0, init.producer_epoch);
    txn_write(&mut client, id, producer, 0, "one").await;

    let mut moved = other.connect().await;
    let first: EndTxnResponse = moved
        .call(ApiKey::EndTxn, 3, &end(id, producer, true))
        .await
        .unwrap();
    assert_eq!(
        first.error_code,
        floe_protocol::ResponseError::ConcurrentTransactions.code()
    );
    gate.open();
    let retried: EndTxnResponse = moved
        .call(ApiKey::EndTxn, 3, &end(id, producer, true))
        .await
        .unwrap();
    assert_eq!(retried.error_code, 0);
    let read = read_committed(&mut client).await;
    assert_eq!(values(fetched(&read)), vec![(0, "one".to_string())]);
}
