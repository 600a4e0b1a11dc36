//! `floe-bench-metastore`: commits per second and commit latency of the
//! metastore: in-process (a single-voter Raft group with its durable log), a
//! Raft group of N nodes started here on loopback, or a running group.
//!
//!     cargo run --release -p floe-bench --bin floe-bench-metastore
//!     cargo run --release -p floe-bench --bin floe-bench-metastore -- --nodes 1 --served
//!     cargo run --release -p floe-bench --bin floe-bench-metastore -- --nodes 3
//!     cargo run --release -p floe-bench --bin floe-bench-metastore -- --remote 127.0.0.1:9093
//!     cargo run --release -p floe-bench --bin floe-bench-metastore -- --postgres postgres://floe@127.0.0.1:5432/bench
//!
//! Each commit is what an agent sends after one ingest-file upload: one object
//! key and N batches spread over the topic's partitions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use floe_metastore::raft::node::Bootstrap;
use floe_metastore::{
    Commit, CommitBatch, LocalMetastore, MetaError, Metastore, NewTopic, NodeOptions,
    RaftMetastore, RemoteMetastore,
};

#[derive(Parser)]
struct Args {
    /// Benchmark a running `floe metastore` group (any of its nodes'
    /// host:port, comma-separated) instead of starting one here.
    #[arg(long)]
    remote: Option<String>,
    /// A node in this process whose log is kept in the PostgreSQL database
    /// at this URL (`postgres://USER@HOST:PORT/DB`).
    #[arg(long, conflicts_with = "remote")]
    postgres: Option<String>,
    /// Voters of the group started here, each with its own log in a
    /// temporary folder. More than one are served on loopback TCP.
    #[arg(long, default_value_t = 1)]
    nodes: u64,
    /// Serve even a single node over loopback TCP (as `floe metastore` does).
    #[arg(long)]
    served: bool,
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
    /// Then this many read-plan lookups (what a fetch asks per partition),
    /// `--concurrency` at a time; 0 skips them.
    #[arg(long, default_value_t = 2000)]
    reads: usize,
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
            Arc::new(RemoteMetastore::new(address)),
            format!("remote {address}"),
        ),
        None if args.postgres.is_some() => {
            let url = args.postgres.as_deref().unwrap_or_default();
            let log = floe_metastore::shared_log::postgres::PostgresLog::connect(url)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let node = floe_metastore::LogNode::start(
                Arc::new(log),
                floe_metastore::LogNodeOptions::new(1, "in-process"),
            )
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
            node.wait_until_leader(Duration::from_secs(30))
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let kind = format!("1 node, in-process, log in {}", node.backend());
            (Arc::new(node), kind)
        }
        None if args.nodes <= 1 && !args.served => (
            Arc::new(
                LocalMetastore::open(&dir.join("metastore.redb"))
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
            ),
            "1 node, in-process, durable".to_string(),
        ),
        None => {
            let addresses = serve_group(&dir, args.nodes.max(1)).await?;
            (
                Arc::new(RemoteMetastore::new(&addresses)),
                format!("{} node(s) over loopback TCP, durable", args.nodes.max(1)),
            )
        }
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
        // Read before the commits, as an agent does before its uploads (a
        // run of each size lasts far less than the commit window).
        let not_before_ms = meta.clock().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        let (partitions, topic_id) = (args.partitions, topic.id);
        let meta = meta.clone();
        let run = timed(args.concurrency, args.commits, move |worker, n| {
            let meta = meta.clone();
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
                not_before_ms,
            };
            async move { meta.commit(commit).await.map(|_| ()) }
        })
        .await?;
        println!(
            "metastore ({kind}): {:>4} batches/commit: {:>7.0} commits/s ({:>9.0} batches/s), {}",
            batches,
            run.per_second(),
            run.per_second() * batches as f64,
            run.latency(args.concurrency),
        );
    }
    if args.reads > 0 {
        let (partitions, topic_id) = (args.partitions, topic.id);
        let meta = meta.clone();
        let run = timed(args.concurrency, args.reads, move |worker, n| {
            let meta = meta.clone();
            let partition = (n + worker) as i32 % partitions;
            async move {
                meta.read_plan(topic_id, partition, 0, 1 << 20)
                    .await
                    .map(|_| ())
            }
        })
        .await?;
        println!(
            "metastore ({kind}): read plans: {:>7.0} reads/s, {}",
            run.per_second(),
            run.latency(args.concurrency),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Latencies of one timed run, sorted, and how long it took.
struct Run {
    latencies: Vec<Duration>,
    elapsed: Duration,
}

impl Run {
    fn per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }

    fn latency(&self, concurrency: usize) -> String {
        format!(
            "latency p50 {:.2} ms, p99 {:.2} ms, concurrency {concurrency}",
            percentile(&self.latencies, 0.5).as_secs_f64() * 1e3,
            percentile(&self.latencies, 0.99).as_secs_f64() * 1e3,
        )
    }
}

/// Runs `op(worker, n)` `total` times, spread over `concurrency` workers that
/// each wait for one before starting the next.
async fn timed<F, Fut>(concurrency: usize, total: usize, op: F) -> anyhow::Result<Run>
where
    F: Fn(usize, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), MetaError>> + Send,
{
    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..concurrency {
        let op = op.clone();
        let count = total / concurrency;
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(count);
            for n in 0..count {
                let t = Instant::now();
                op(worker, n).await.map_err(|e| anyhow::anyhow!("{e}"))?;
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
    Ok(Run { latencies, elapsed })
}

/// Starts a Raft group of `nodes` voters on loopback; returns their addresses.
async fn serve_group(dir: &std::path::Path, nodes: u64) -> anyhow::Result<String> {
    let mut listeners = Vec::new();
    let mut peers = std::collections::BTreeMap::new();
    for id in 1..=nodes {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        peers.insert(id, listener.local_addr()?.to_string());
        listeners.push((id, listener));
    }
    for (id, listener) in listeners {
        let mut options = NodeOptions::new(id, peers[&id].clone());
        options.path = Some(dir.join(format!("node{id}.redb")));
        options.bootstrap = Bootstrap::Cluster(peers.clone());
        let node = Arc::new(
            RaftMetastore::start(options)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        );
        tokio::spawn(floe_metastore::rpc::serve(listener, node));
    }
    Ok(peers.into_values().collect::<Vec<_>>().join(","))
}

fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("floe-bench-metastore-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
