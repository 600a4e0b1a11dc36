//! A request whose client has gone changes nothing it did not see.

use std::time::Duration;

use floe_protocol::kafka_protocol::messages::*;

use crate::support::*;

async fn high_watermark(agent: &TestAgent, topic: &str) -> i64 {
    let mut conn = agent.connect().await;
    let response: FetchResponse = conn
        .call(ApiKey::Fetch, FETCH_VERSION, &fetch(topic, 0, 0))
        .await
        .unwrap();
    fetched(&response).high_watermark
}

/// A producer (no idempotence) that closes its connection before its batch
/// is in a sealed ingest file never hears of it, and retries, maybe through
/// another agent: the batch must not be stored too, or the log reads X Y X.
/// With acks=0 there is no answer to wait for: the batch is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_producer_left_before_its_file_sealed_is_not_stored() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "left", 1).await;
    let agent = agent_with(&meta, &store, |c| {
        c.flush_interval = Duration::from_millis(400)
    })
    .await;
    let mut conn = agent.connect().await;
    conn.send(ApiKey::Produce, 9, &produce("left", 0, batch(&["x"])))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(conn);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        high_watermark(&agent, "left").await,
        0,
        "stored after its producer left"
    );

    let mut conn = agent.connect().await;
    conn.send(
        ApiKey::Produce,
        9,
        &produce("left", 0, batch(&["y"])).with_acks(0),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(conn);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(high_watermark(&agent, "left").await, 1, "acks=0 is stored");
}
