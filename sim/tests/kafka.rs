//! Whole agents through the Kafka protocol: the seeds CI runs, and the
//! promise that a seed replays exactly. Longer runs:
//! `cargo run --release -p floe-sim -- --kafka --seeds 200`.

use floe_sim::whole::Summary;
use floe_sim::whole::kafka::{self, KafkaSettings};
use tokio::time::Duration;

#[global_allocator]
static HEAP: floe_sim::memory::Counting = floe_sim::memory::Counting;

fn check(seed: u64, settings: KafkaSettings) -> (Summary, Vec<String>) {
    kafka::run(seed, settings).unwrap_or_else(|f| {
        let tail: Vec<_> = f.trace.iter().rev().take(60).rev().cloned().collect();
        panic!("seed {} failed: {}\n{}", f.seed, f.why, tail.join("\n"))
    })
}

#[test]
fn a_fixed_set_of_seeds_finds_no_anomaly() {
    let settings = KafkaSettings {
        duration: Duration::from_secs(180),
        ..KafkaSettings::default()
    };
    let mut total = Summary::default();
    for seed in 0..4 {
        total += check(seed, settings).0;
    }
    // The run did something: produces landed, agents crashed, the audit
    // read the records back through every agent, transactions ended both
    // ways, connections pipelined, records were transformed exactly once.
    assert!(total.acked_batches > 2_000, "{total:?}");
    assert!(total.crashes > 0, "{total:?}");
    assert!(total.polled_records > 5_000, "{total:?}");
    assert!(
        total.committed_txns > 100 && total.aborted_txns > 20,
        "{total:?}"
    );
    assert!(total.txn_records_audited > 1_000, "{total:?}");
    assert!(total.pipelined_connections > 10, "{total:?}");
    assert!(total.eos_records > 100, "{total:?}");
    // Share-group members took records, some of them again.
    assert!(total.share_deliveries > 1_000, "{total:?}");
    assert!(total.share_redeliveries > 10, "{total:?}");
}

/// The metastore as a Raft group, and a consumer group on it (not
/// replayable: openraft draws from outside the seed).
#[test]
fn a_consumer_group_on_a_raft_metastore_finds_no_anomaly() {
    let settings = KafkaSettings {
        duration: Duration::from_secs(180),
        raft: true,
        ..KafkaSettings::default()
    };
    let mut total = Summary::default();
    for seed in 0..2 {
        total += check(seed, settings).0;
    }
    assert!(total.group_rebalances > 5, "{total:?}");
    assert!(total.acked_batches > 500, "{total:?}");
}

/// The metastore on a shared log (the PostgreSQL design) under its
/// weather, with every kind of client on it.
#[test]
fn clients_on_a_shared_log_metastore_find_no_anomaly() {
    let settings = KafkaSettings {
        duration: Duration::from_secs(180),
        raft: true,
        shared_log: true,
        ..KafkaSettings::default()
    };
    let total = check(5, settings).0;
    assert!(total.acked_batches > 500, "{total:?}");
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    let short = KafkaSettings {
        duration: Duration::from_secs(60),
        ..KafkaSettings::default()
    };
    for seed in [3, 11] {
        let (a, trace_a) = check(seed, short);
        let (b, trace_b) = check(seed, short);
        assert_eq!(a, b, "seed {seed}");
        assert_eq!(trace_a, trace_b, "seed {seed}");
    }
}
