//! Idempotent producers' ids come from blocks (KIP-730), and a produce
//! answer carries its partition's log start, as Kafka's.

use std::sync::Arc;

use floe_metastore::Metastore;
use floe_protocol::kafka_protocol::messages::*;

use crate::support::*;

/// Every InitProducerId without a transactional id used to be a metastore
/// write and a day of state (one anonymous client made 8,692 a second).
/// Now a thousand of them cost one block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_producer_ids_cost_one_metastore_write() {
    let counting = Counting::new().await;
    let meta: Arc<dyn Metastore> = counting.clone();
    let store = memory_store();
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;
    let request = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let mut ids = std::collections::BTreeSet::new();
    for _ in 0..1_000 {
        let init: InitProducerIdResponse = conn
            .call(ApiKey::InitProducerId, 4, &request)
            .await
            .unwrap();
        assert_eq!((init.error_code, init.producer_epoch), (0, 0));
        assert!(ids.insert(init.producer_id.0), "an id given twice");
    }
    assert_eq!(counting.count("::InitProducer"), 0);
    let blocks = counting.count("::AllocateProducerIds");
    assert!((1..=2).contains(&blocks), "{blocks} blocks for 1,000 ids");
    // A producer asking again (KIP-360) gets a fresh id, as from Kafka.
    let again: InitProducerIdResponse = conn
        .call(
            ApiKey::InitProducerId,
            4,
            &request
                .with_producer_id(ProducerId(*ids.first().unwrap()))
                .with_producer_epoch(0),
        )
        .await
        .unwrap();
    assert!(!ids.contains(&again.producer_id.0));
}

/// A produce answer carries the partition's log start offset (it was -1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_produce_answer_carries_the_log_start() {
    let meta = metastore().await;
    let store = memory_store();
    let topic = create_topic(&meta, "started", 1).await;
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;
    let sent: ProduceResponse = conn
        .call(
            ApiKey::Produce,
            9,
            &produce("started", 0, batch(&["a", "b", "c"])),
        )
        .await
        .unwrap();
    assert_eq!(produced(&sent).log_start_offset, 0);
    meta.trim(topic.id, 0, 2).await.unwrap();
    let sent: ProduceResponse = conn
        .call(ApiKey::Produce, 9, &produce("started", 0, batch(&["d"])))
        .await
        .unwrap();
    assert_eq!(
        (
            produced(&sent).base_offset,
            produced(&sent).log_start_offset
        ),
        (3, 2)
    );
}
