//! `cargo run --release -p floe-sim -- --seeds 10000`: runs seeds until one
//! fails, and prints it with its trace (replay it with `--start SEED --seeds 1`).

use clap::Parser;

#[derive(Parser)]
#[command(about = "Deterministic simulation of floe's sequencer and GC, with an auditor")]
struct Args {
    /// How many seeds to run.
    #[arg(long, default_value_t = 1_000)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Steps per seed.
    #[arg(long, default_value_t = 3_000)]
    steps: usize,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let mut total = floe_sim::Summary::default();
    for seed in args.start..args.start + args.seeds {
        match floe_sim::run(seed, args.steps) {
            Ok((s, _)) => {
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
