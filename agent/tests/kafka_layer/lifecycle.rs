//! An agent's life: what a stop finishes, and that it leaves nothing
//! running behind it.

use std::time::Duration;

use floe_protocol::kafka_protocol::messages::*;

use crate::support::*;

/// A produce accepted before the stop is answered and stored; the stopped
/// agent's connections close and its port refuses new ones; a new agent
/// over the same metastore and store reads what it stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_answers_accepted_produces_then_closes_everything() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "stopping", 1).await;
    let first = agent_with(&meta, &store, |c| {
        c.flush_interval = Duration::from_millis(300)
    })
    .await;
    let mut conn = first.connect().await;
    let id = conn
        .send(
            ApiKey::Produce,
            9,
            &produce("stopping", 0, batch(&["a", "b"])),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let TestAgent {
        address,
        agent: running,
        ..
    } = first;
    let stopping = tokio::spawn(running.stop());
    let answer: ProduceResponse = conn.receive(ApiKey::Produce, 9, id).await.unwrap();
    assert_eq!(produced(&answer).error_code, 0);
    assert_eq!(produced(&answer).base_offset, 0);
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("stopped in time")
        .unwrap();
    let closed = conn
        .call::<_, ApiVersionsResponse>(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await;
    assert!(
        closed.is_err(),
        "a stopped agent's connection still answers"
    );
    assert!(
        tokio::net::TcpStream::connect(&address).await.is_err(),
        "a stopped agent still accepts connections"
    );

    let again = agent(&meta, &store).await;
    let mut conn = again.connect().await;
    let response: FetchResponse = conn
        .call(ApiKey::Fetch, FETCH_VERSION, &fetch("stopping", 0, 0))
        .await
        .unwrap();
    assert_eq!(
        values(fetched(&response)),
        [(0, "a".to_string()), (1, "b".to_string())]
    );
}

/// An abort is a crash: a produce waiting for its file is answered with a
/// retriable error or not at all (its client retries), and nothing of it
/// is committed after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_commits_nothing_a_producer_waits_for() {
    let meta = metastore().await;
    let gate = Gate::held();
    let store = gate.over(&memory_store());
    create_topic(&meta, "crash", 1).await;
    let crashing = agent(&meta, &store).await;
    let mut conn = crashing.connect().await;
    let id = conn
        .send(ApiKey::Produce, 9, &produce("crash", 0, batch(&["lost"])))
        .await
        .unwrap();
    eventually("the file's PUT waits at the gate", || gate.waiting() == 1).await;
    tokio::time::timeout(Duration::from_secs(10), crashing.agent.abort())
        .await
        .expect("aborted in time");
    let answer = conn
        .receive::<ProduceResponse>(ApiKey::Produce, 9, id)
        .await;
    if let Ok(answer) = &answer {
        assert_eq!(produced(answer).error_code, 56, "KAFKA_STORAGE_ERROR");
    }
    gate.open();
    let again = agent_with(&meta, &store, |_| {}).await;
    let mut conn = again.connect().await;
    let response: FetchResponse = conn
        .call(ApiKey::Fetch, FETCH_VERSION, &fetch("crash", 0, 0))
        .await
        .unwrap();
    assert_eq!(
        fetched(&response).high_watermark,
        0,
        "an unanswered batch was committed"
    );
}
