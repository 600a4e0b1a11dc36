//! Compaction in a whole agent: the ingest files an agent uploaded are read
//! back from its own block cache, not from the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floe_protocol::kafka_protocol::messages::*;
use floe_storage::ObjectStore;
use floe_storage::hooked::{HookedStore, Hooks, Op};

use crate::support::*;

/// Counts the GETs that reach the store.
#[derive(Default, Clone)]
struct CountGets(Arc<AtomicU64>);

impl Hooks for CountGets {
    fn after(&self, op: Op, _bytes: u64, _ok: bool) -> object_store::Result<()> {
        if op == Op::Get {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_job_reads_the_files_its_agent_uploaded_from_its_cache() {
    let meta = metastore().await;
    let gets = CountGets::default();
    let store: Arc<dyn ObjectStore> = Arc::new(HookedStore::new(memory_store(), gets.clone()));
    let topic = create_topic(&meta, "merged", 1).await;
    let agent = agent_with(&meta, &store, |c| {
        c.compaction_interval = Duration::from_millis(50);
        c.compaction_min_extents = 4;
    })
    .await;
    let mut conn = agent.connect().await;
    gets.0.store(0, Ordering::Relaxed);
    // Each acknowledged alone: eight ingest files.
    let sent: Vec<String> = (0..8).map(|n| format!("v{n}")).collect();
    for value in &sent {
        produce_values(&mut conn, "merged", &[value]).await;
    }

    // Until merge jobs have moved every record out of the ingest files.
    let ingest = floe_storage::keys::INGEST_PREFIX;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let plan = meta.read_plan(topic.id, 0, 0, u64::MAX).await.unwrap();
        let moved = plan.high_watermark == 8
            && plan
                .extents
                .iter()
                .all(|e| !e.object_key.starts_with(ingest));
        if moved {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never compacted: {plan:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        gets.0.load(Ordering::Relaxed),
        0,
        "every ingest file was read from the cache"
    );

    // And every record reads back from where compaction put it.
    let response: FetchResponse = conn
        .call(ApiKey::Fetch, FETCH_VERSION, &fetch("merged", 0, 0))
        .await
        .unwrap();
    let read: Vec<String> = values(fetched(&response))
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(read, sent);
}
