//! `floe bench`: a workload in the shape of the OpenMessaging Benchmark,
//! run against any Kafka-compatible broker over the protocol.
//!
//! Producers send at a fixed rate (or as fast as the broker takes it) with
//! the send time in each record's first eight bytes; consumers tail every
//! partition once per subscription and measure end-to-end latency from that
//! time to their receipt. After a warm-up, it measures for a duration and
//! reports produce and end-to-end latency percentiles (HdrHistogram),
//! throughput, consumer lag, and, when told where to look, the broker
//! process's CPU seconds and peak memory and the object-store requests an
//! agent's metrics count. The report is JSON; the plot is SVG.

pub mod args;
mod client;
pub mod compare;
mod consumer;
pub mod plot;
pub mod probe;
mod producer;
pub mod report;
mod run;
mod stats;

pub use args::BenchArgs;
pub use report::Report;
pub use run::run;

/// Runs the benchmark as `floe bench` does: prints progress and the
/// summary, and writes the JSON report and the plot when asked.
pub async fn main(args: BenchArgs) -> anyhow::Result<()> {
    if let Some(files) = &args.compare {
        let a = Report::read(&files[0])?;
        let b = Report::read(&files[1])?;
        print!("{}", compare::table(&a, &b));
        return Ok(());
    }
    let report = run(&args).await?;
    print!("{}", report.summary());
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
        println!("report: {}", path.display());
    }
    if let Some(path) = &args.plot {
        plot::write(&report, path)?;
        println!("plot: {}", path.display());
    }
    if report.produce.errors > 0 {
        anyhow::bail!(
            "{} produce requests were answered with errors: the figures are not comparable",
            report.produce.errors
        );
    }
    Ok(())
}
