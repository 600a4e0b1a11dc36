//! `/readyz` answers at once from what the agent already holds, and keeps
//! an agent that can still serve in its load balancer's pool while the
//! metastore elects a leader.

use std::sync::Arc;
use std::time::Duration;

use floe_metastore::{LocalMetastore, Metastore};

use crate::support::*;

/// The readiness probe's answer, within a load balancer's half-second
/// check timeout (an unanswered probe fails the test).
async fn probe(agent: &TestAgent) -> (u16, String) {
    let url = format!("http://{}/readyz", agent.agent.admin_address());
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .expect("an http client");
    let answer = client
        .get(url)
        .send()
        .await
        .expect("answered within 500 ms");
    let status = answer.status().as_u16();
    (status, answer.text().await.expect("a body"))
}

/// The agent's metastore readings are held (no answer at all, as during
/// an election or a partition): the probe answers at once, not ready until
/// the metastore was first heard from, then ready, and still ready
/// (within the grace) once the readings hang again. It used to ask the
/// metastore on every probe: 1.6 s during an election, every agent out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_answers_at_once_and_rides_out_an_election() {
    let local = Arc::new(LocalMetastore::in_memory().await.expect("a metastore"));
    let gate = Gate::held();
    let held: Arc<dyn Metastore> = HeldOps::over(&local, "::Tick", &gate);
    let agent = agent(&held, &memory_store()).await;
    let (status, why) = probe(&agent).await;
    assert_eq!(status, 503, "{why}");
    assert!(
        why.contains("not heard from since the agent started"),
        "{why}"
    );

    gate.open();
    for _ in 0..100 {
        if probe(&agent).await.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        probe(&agent).await.0,
        200,
        "ready once the metastore answers"
    );

    // An election: the next readings hang. The agent stays in the pool.
    gate.hold();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (status, why) = probe(&agent).await;
    assert_eq!(status, 200, "{why}");
}
