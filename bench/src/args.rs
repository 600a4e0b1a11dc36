//! The workload, as OpenMessaging Benchmark describes one, and where the
//! results go.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};

#[derive(Args, Clone, Debug, Serialize, Deserialize)]
pub struct BenchArgs {
    /// The broker (or load balancer) to drive, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// A name for the broker in the report (`floe`, `tansu-memory`, ...).
    #[arg(long, default_value = "broker")]
    pub label: String,
    /// Topics' names start with this; a run's topics are new unless
    /// `--reuse-topics` is given.
    #[arg(long, default_value = "bench")]
    pub topic_prefix: String,
    #[arg(long, default_value_t = 1)]
    pub topics: u32,
    #[arg(long, default_value_t = 8)]
    pub partitions_per_topic: u32,
    /// Bytes of each record's value (at least 8: the send time).
    #[arg(long, default_value_t = 1024)]
    pub record_size: usize,
    /// Records a second over all producers; 0 sends as fast as the broker
    /// acknowledges, `--in-flight` requests per producer.
    #[arg(long, default_value_t = 10_000)]
    pub rate: u64,
    #[arg(long, default_value_t = 1)]
    pub producers: u32,
    /// Consumer groups, each reading every partition (the read fan-out).
    #[arg(long, default_value_t = 1)]
    pub subscriptions: u32,
    /// Consumers in each subscription, sharing its partitions.
    #[arg(long, default_value_t = 1)]
    pub consumers_per_subscription: u32,
    /// How long to measure, after the warm-up.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
    /// How long to run before measuring (results discarded).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    #[serde(with = "humantime_serde")]
    pub warmup: Duration,
    /// A producer waits this long to fill a request (librdkafka's linger.ms).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5ms")]
    #[serde(with = "humantime_serde")]
    pub linger: Duration,
    /// Records at most in one partition's batch.
    #[arg(long, default_value_t = 1000)]
    pub batch_records: usize,
    /// Fetch's max_wait_ms: how long a broker may hold a fetch with nothing
    /// new (librdkafka's fetch.wait.max.ms, 500 ms by default).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "500ms")]
    #[serde(with = "humantime_serde", default = "default_fetch_max_wait")]
    pub fetch_max_wait: Duration,
    /// Produce requests outstanding per producer.
    #[arg(long, default_value_t = 5)]
    pub in_flight: usize,
    /// none, gzip, snappy, lz4 or zstd
    #[arg(long, default_value = "none")]
    pub compression: String,
    /// The broker's process id: its CPU seconds and peak resident memory
    /// over the run are read from /proc.
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// A floe agent's metrics (http://HOST:PORT/metrics): its object-store
    /// requests and bytes over the run, per MiB written and read.
    #[arg(long)]
    pub metrics_url: Option<String>,
    /// Write the report as JSON here.
    #[arg(long)]
    #[serde(skip)]
    pub json: Option<PathBuf>,
    /// Draw throughput and latency over time as SVG here.
    #[arg(long)]
    #[serde(skip)]
    pub plot: Option<PathBuf>,
    /// Progress on stderr every so often; 0s for none.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    #[serde(skip)]
    pub progress: Duration,
    /// Use existing topics of these names rather than new ones.
    #[arg(long)]
    pub reuse_topics: bool,
    /// Instead of running: compare two reports (BASE.json OTHER.json) and
    /// print the ratios of throughput, latency, CPU and memory.
    #[arg(long, num_args = 2, value_names = ["BASE", "OTHER"])]
    #[serde(skip)]
    pub compare: Option<Vec<PathBuf>>,
}

fn default_fetch_max_wait() -> Duration {
    Duration::from_millis(500)
}

impl BenchArgs {
    pub fn partitions(&self) -> u32 {
        self.topics * self.partitions_per_topic
    }
}
