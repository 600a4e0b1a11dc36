//! `floe-bench-metastore`: commits per second and commit latency of the
//! metastore, in-process (with its durable log) or over the network.
//!
//!     cargo run --release -p floe-bench --bin floe-bench-metastore
//!     cargo run --release -p floe-bench --bin floe-bench-metastore -- --remote 127.0.0.1:9093
//!
//! Each commit is what an agent sends after one ingest-file upload: one object
//! key and N batches spread over the topic's partitions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use floe_metastore::{Commit, CommitBatch, LocalMetastore, Metastore, NewTopic, RemoteMetastore};

#[derive(Parser)]
struct Args {
    /// Benchmark a running `floe metastore` at this address instead of an
    /// in-process one (whose log goes to a temporary folder).
    #[arg(long)]
    remote: Option<String>,
    /// Commits per run.
    #[arg(long, default_value_t = 500)]
    commits: usize,
    /// Batches per commit, one run for each.
    #[arg(long, value_delimiter = ',', default_value = "1,100,1000")]
    batches: Vec<usize>,
    /// Commits in flight at once (agents commit one file at a time each, so
    /// this is the number of agents).
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    #[arg(long, default_value_t = 64)]
    partitions: i32,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted
        .get(((sorted.len().max(1) - 1) as f64 * p).round() as usize)
        .copied()
        .unwrap_or_default()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = tempfile_dir()?;
    let (meta, kind): (Arc<dyn Metastore>, String) = match &args.remote {
        Some(address) => (
            Arc::new(RemoteMetastore::new(address.clone())),
            format!("remote {address}"),
        ),
        None => (
            Arc::new(
                LocalMetastore::open(&dir.join("metastore.redb"))
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
            ),
            "in-process, durable".to_string(),
        ),
    };
    let topic = meta
        .create_topic(NewTopic {
            name: format!("bench-{}", std::process::id()),
            partitions: args.partitions,
            configs: Default::default(),
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for &batches in &args.batches {
        let started = Instant::now();
        let mut tasks = Vec::new();
        for worker in 0..args.concurrency {
            let meta = meta.clone();
            let count = args.commits / args.concurrency;
            let partitions = args.partitions;
            let topic_id = topic.id;
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(count);
                for n in 0..count {
                    let commit = Commit {
                        object_key: format!("bench/{batches}/{worker}/{n}"),
                        object_size: batches as u64 * 1024,
                        batches: (0..batches)
                            .map(|b| CommitBatch {
                                topic_id,
                                partition: b as i32 % partitions,
                                position: b as u64 * 1024,
                                length: 1024,
                                record_count: 10,
                                max_timestamp: 0,
                                producer_id: -1,
                                producer_epoch: -1,
                                base_sequence: -1,
                            })
                            .collect(),
                        appended_ms: 0,
                    };
                    let t = Instant::now();
                    meta.commit(commit)
                        .await
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                    latencies.push(t.elapsed());
                }
                anyhow::Ok(latencies)
            }));
        }
        let mut latencies = Vec::new();
        for task in tasks {
            latencies.extend(task.await??);
        }
        let elapsed = started.elapsed();
        latencies.sort();
        println!(
            "metastore ({kind}): {:>4} batches/commit: {:>7.0} commits/s ({:>9.0} batches/s), latency p50 {:.2} ms, p99 {:.2} ms, concurrency {}",
            batches,
            latencies.len() as f64 / elapsed.as_secs_f64(),
            (latencies.len() * batches) as f64 / elapsed.as_secs_f64(),
            percentile(&latencies, 0.5).as_secs_f64() * 1e3,
            percentile(&latencies, 0.99).as_secs_f64() * 1e3,
            args.concurrency,
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("floe-bench-metastore-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
