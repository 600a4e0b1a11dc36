//! Whole agents through the Kafka protocol: the seeds CI runs, and the
//! promise that a seed replays exactly. Longer runs:
//! `cargo run --release -p floe-sim -- --kafka --seeds 200`.

use floe_sim::whole::Summary;
use floe_sim::whole::kafka::{self, KafkaSettings};
use tokio::time::Duration;

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
    let (mut acked, mut crashes, mut read) = (0, 0, 0);
    for seed in 0..4 {
        let (summary, _) = check(seed, settings);
        acked += summary.acked_batches;
        crashes += summary.crashes;
        read += summary.polled_records;
    }
    // The run did something: produces landed, agents crashed, and the
    // audit read the records back through every agent.
    assert!(acked > 2_000, "{acked} batches acknowledged");
    assert!(crashes > 0);
    assert!(read > 5_000, "{read} records read and checked");
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
