//! A fetch with nothing to return waits (Kafka's `fetch.max.wait.ms` and
//! `fetch.min.bytes`): it is answered empty at its deadline, and at once
//! when records arrive, through this agent or another.

use std::time::Duration;

use tokio::time::Instant;

use floe_protocol::kafka_protocol::messages::*;

use crate::support::*;

/// A fetch of one partition from `offset` that waits up to `max_wait_ms`
/// for `min_bytes`.
fn waiting_fetch(topic: &str, offset: i64, max_wait_ms: i32, min_bytes: i32) -> FetchRequest {
    fetch(topic, 0, offset)
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
}

/// Nothing to read: the answer comes at the deadline, empty, with the high
/// watermark as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_fetch_waits_until_its_deadline() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "quiet", 1).await;
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;
    let began = Instant::now();
    let response: FetchResponse = conn
        .call(
            ApiKey::Fetch,
            FETCH_VERSION,
            &waiting_fetch("quiet", 0, 400, 1),
        )
        .await
        .unwrap();
    let waited = began.elapsed();
    let data = fetched(&response);
    assert_eq!((data.error_code, data.high_watermark), (0, 0));
    assert!(values(data).is_empty());
    assert!(
        waited >= Duration::from_millis(300),
        "answered after {waited:?}, before its deadline"
    );
}

/// A fetch waiting at the end of the log is answered with the records a
/// producer on another agent writes meanwhile, long before its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_fetch_wakes_for_records_from_another_agent() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "wake", 1).await;
    let writer = agent(&meta, &store).await;
    let reader = agent(&meta, &store).await;
    let mut produce_conn = writer.connect().await;
    let mut fetch_conn = reader.connect().await;
    let waiting = tokio::spawn(async move {
        let response: FetchResponse = fetch_conn
            .call(
                ApiKey::Fetch,
                FETCH_VERSION,
                &waiting_fetch("wake", 0, 30_000, 1),
            )
            .await
            .unwrap();
        response
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "answered with nothing to read");
    let began = Instant::now();
    produce_values(&mut produce_conn, "wake", &["late"]).await;
    let response = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("woken well before the fetch's 30 s deadline")
        .unwrap();
    let data = fetched(&response);
    assert_eq!(data.high_watermark, 1);
    assert_eq!(values(data), vec![(0, "late".to_string())]);
    assert!(began.elapsed() < Duration::from_secs(10));
}

/// A fetch asking for more bytes than one small batch holds is not
/// answered by the first one; it takes what there is at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_waits_for_its_minimum_bytes() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "min-bytes", 1).await;
    let agent = agent(&meta, &store).await;
    let mut produce_conn = agent.connect().await;
    let mut fetch_conn = agent.connect().await;
    let waiting = tokio::spawn(async move {
        let began = Instant::now();
        let response: FetchResponse = fetch_conn
            .call(
                ApiKey::Fetch,
                FETCH_VERSION,
                &waiting_fetch("min-bytes", 0, 1_000, 1 << 20),
            )
            .await
            .unwrap();
        (response, began.elapsed())
    });
    produce_values(&mut produce_conn, "min-bytes", &["small"]).await;
    let (response, waited) = waiting.await.unwrap();
    let data = fetched(&response);
    assert_eq!(values(data), vec![(0, "small".to_string())]);
    assert!(
        waited >= Duration::from_millis(800),
        "answered after {waited:?} with far fewer bytes than asked"
    );
}
