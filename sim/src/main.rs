//! `cargo run --release -p floe-sim -- --seeds 10000`: runs seeds of the
//! state-machine model until one fails, and prints it with its trace (replay
//! it with `--start SEED --seeds 1`). `--whole` runs the whole write path
//! (real batchers and background loops, faulty store and metastore) instead;
//! `--kafka` whole agents through the Kafka protocol (`--kafka --raft`: on a
//! Raft metastore whose nodes are also replaced under load, with consumer
//! groups). `sim/mutants/run.sh` checks that each checker catches the rule
//! its patch breaks (one patch's line is a range of 400 seeds: the
//! stale-read EndTxn needs a rare interleaving).
//!
//! Longer runs than CI's, as reported in the issues' notes:
//! `--whole --seeds 300`, `--whole --raft --seeds 60`, `--seeds 2000`,
//! `--kafka --seeds 200 --minutes 5`, `--kafka --raft --seeds 100 --minutes 5`,
//! `--whole --shared-log --seeds 40`, `--kafka --shared-log --seeds 40 --minutes 5`.

use clap::Parser;

/// Counted, for the Kafka stage's memory checker (see `floe_sim::memory`).
#[global_allocator]
static HEAP: floe_sim::memory::Counting = floe_sim::memory::Counting;

#[derive(Parser)]
#[command(about = "Deterministic simulation of floe's sequencer and GC, with an auditor")]
struct Args {
    /// How many seeds to run.
    #[arg(long, default_value_t = 1_000)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Steps per seed (the model).
    #[arg(long, default_value_t = 3_000)]
    steps: usize,
    /// Run the whole write path instead of the model.
    #[arg(long)]
    whole: bool,
    /// Simulated minutes of producing per seed (the whole write path).
    #[arg(long, default_value_t = 10)]
    minutes: u64,
    /// With `--whole`: the metastore as a three-node Raft group over a faulty network.
    #[arg(long)]
    raft: bool,
    /// With `--whole` or `--kafka`: the metastore as three nodes on a shared
    /// log in a simulated database (the PostgreSQL design) with its faults.
    #[arg(long)]
    shared_log: bool,
    /// With `--whole`: print every seed's trace, passing or not.
    #[arg(long)]
    trace: bool,
    /// Whole agents (`floe agent`'s listeners, handlers, read path and
    /// jobs) driven through the Kafka protocol by simulated clients.
    #[arg(long)]
    kafka: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.kafka {
        return kafka(&args);
    }
    if args.whole {
        return whole(&args);
    }
    let mut total = floe_sim::Summary::default();
    for seed in args.start..args.start + args.seeds {
        match floe_sim::run(seed, args.steps) {
            Ok((s, trace)) => {
                if args.trace {
                    for line in &trace {
                        println!("{line}");
                    }
                }
                total.acked_batches += s.acked_batches;
                total.commits += s.commits;
                total.refused_retries += s.refused_retries;
                total.compactions += s.compactions;
                total.collected += s.collected;
                total.simulated_ms += s.simulated_ms - 1_700_000_000_000;
            }
            Err(f) => {
                for line in &f.trace {
                    println!("{line}");
                }
                println!("seed {} failed at step {}: {}", f.seed, f.step, f.why);
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    println!(
        "{} seeds x {} steps passed: {} batches acknowledged, {} commits, {} retries refused, \
         {} compactions, {} objects collected, {:.1} simulated hours",
        args.seeds,
        args.steps,
        total.acked_batches,
        total.commits,
        total.refused_retries,
        total.compactions,
        total.collected,
        total.simulated_ms as f64 / 3_600_000.0
    );
    std::process::ExitCode::SUCCESS
}

fn whole(args: &Args) -> std::process::ExitCode {
    use floe_sim::whole;
    let settings = whole::Settings {
        duration: std::time::Duration::from_secs(args.minutes * 60),
        raft: args.raft || args.shared_log,
        shared_log: args.shared_log,
        ..whole::Settings::default()
    };
    let mut total = whole::Summary::default();
    for seed in args.start..args.start + args.seeds {
        match whole::run(seed, settings) {
            Ok((s, trace)) => {
                if args.trace {
                    for line in &trace {
                        println!("{line}");
                    }
                }
                total += s;
            }
            Err(f) => {
                for line in &f.trace {
                    println!("{line}");
                }
                println!("seed {} failed: {}", f.seed, f.why);
                let ids: Vec<&str> = f
                    .why
                    .split(|c: char| !c.is_ascii_alphanumeric())
                    .filter(|w| {
                        w.starts_with('b')
                            && w.len() > 1
                            && w[1..].chars().all(|c| c.is_ascii_hexdigit())
                    })
                    .collect();
                for line in f
                    .trace
                    .iter()
                    .filter(|l| ids.iter().any(|id| l.contains(&format!("{id} "))))
                {
                    println!("  {line}");
                }
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    println!(
        "{} seeds of the whole write path passed: {} batches acknowledged, {} produces given up, \
         {} agent crashes, {} metastore writes retried, {} metastore partitions, {} metastore node kills, {} node replacements, {} client redirects, \
         {} store faults, {} stalls after a PUT, {} live segments at the end ({} with an offset index, all checked and read through from 3 offsets), {} records polled, \
         {} transactions committed, {} aborted, {} unsure, {} zombies, {} transactional records audited, \
         {:.1} simulated hours",
        args.seeds,
        total.acked_batches,
        total.failed_produces,
        total.crashes,
        total.retried_writes,
        total.partitions,
        total.node_kills,
        total.replacements,
        total.redirects,
        total.store_faults,
        total.stalls,
        total.segments_live,
        total.segments_indexed,
        total.polled_records,
        total.committed_txns,
        total.aborted_txns,
        total.unknown_txns,
        total.zombies,
        total.txn_records_audited,
        total.simulated_ms as f64 / 3_600_000.0
    );
    std::process::ExitCode::SUCCESS
}

fn kafka(args: &Args) -> std::process::ExitCode {
    use floe_sim::whole::{Summary, kafka};
    let settings = kafka::KafkaSettings {
        duration: std::time::Duration::from_secs(args.minutes * 60),
        raft: args.raft || args.shared_log,
        shared_log: args.shared_log,
        ..kafka::KafkaSettings::default()
    };
    let mut total = Summary::default();
    for seed in args.start..args.start + args.seeds {
        match kafka::run(seed, settings) {
            Ok((s, trace)) => {
                if args.trace {
                    for line in &trace {
                        println!("{line}");
                    }
                }
                total += s;
            }
            Err(f) => {
                for line in &f.trace {
                    println!("{line}");
                }
                println!("seed {} failed: {}", f.seed, f.why);
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    println!(
        "{} seeds of whole agents through Kafka passed: {} batches acknowledged, {} given up, \
         {} produce attempts retried, {} agent crashes, {} store faults, {} records read and checked, \
         transactions {} committed / {} aborted / {} unknown ({} records audited), \
         {} pipelining connections, {} group assignments, {} metastore node replacements, \
         {} consume-transform-produce transactions ({} records exactly once), \
         {} produces refused for want of an ACL, {} share deliveries ({} again), \
         {} read-lease subscriptions ({} notices, {} streams cut), \
         {:.1} simulated hours",
        args.seeds,
        total.acked_batches,
        total.failed_produces,
        total.retried_writes,
        total.crashes,
        total.store_faults,
        total.polled_records,
        total.committed_txns,
        total.aborted_txns,
        total.unknown_txns,
        total.txn_records_audited,
        total.pipelined_connections,
        total.group_rebalances,
        total.replacements,
        total.eos_transactions,
        total.eos_records,
        total.refused_for_rights,
        total.share_deliveries,
        total.share_redeliveries,
        total.subscriptions,
        total.notices,
        total.cut_streams,
        total.simulated_ms as f64 / 3_600_000.0
    );
    std::process::ExitCode::SUCCESS
}
