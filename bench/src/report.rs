//! A run's results: what `--json` writes, `--compare` and `floe cost
//! --from-bench` read, and the summary printed at the end.

use std::fmt::Write;
use std::path::Path;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::args::BenchArgs;

pub const MIB: f64 = 1024.0 * 1024.0;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub label: String,
    pub workload: BenchArgs,
    pub machine: Machine,
    /// Seconds measured (the warm-up is not counted).
    pub measured_seconds: f64,
    pub produce: Throughput,
    pub consume: Throughput,
    pub produce_latency_ms: Percentiles,
    pub end_to_end_latency_ms: Percentiles,
    pub lag: Lag,
    /// The broker process, when `--broker-pid` named it.
    pub broker: Option<Process>,
    /// This benchmark's own process over the measured span.
    pub client: Process,
    /// A floe agent's own counts, when `--metrics-url` named it.
    pub agent: Option<AgentCounts>,
    /// One point a second, warm-up included.
    pub series: Vec<Point>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    pub cores: usize,
    pub os: String,
}

impl Machine {
    pub fn this() -> Machine {
        Machine {
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            os: std::env::consts::OS.to_string(),
        }
    }
}

/// Records and bytes (as on the wire: record batches) over the measured span.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Throughput {
    pub records: u64,
    pub bytes: u64,
    pub records_per_s: f64,
    pub mib_per_s: f64,
    /// Produce requests answered with an error (their records not counted).
    pub errors: u64,
}

impl Throughput {
    pub fn new(records: u64, bytes: u64, errors: u64, seconds: f64) -> Throughput {
        Throughput {
            records,
            bytes,
            records_per_s: records as f64 / seconds,
            mib_per_s: bytes as f64 / MIB / seconds,
            errors,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50: f64,
    pub p75: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Percentiles {
    /// From a histogram of microseconds.
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        let ms = |micros: u64| micros as f64 / 1000.0;
        Percentiles {
            count: h.len(),
            p50: ms(h.value_at_quantile(0.5)),
            p75: ms(h.value_at_quantile(0.75)),
            p95: ms(h.value_at_quantile(0.95)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        }
    }
}

/// Records acknowledged that the slowest subscription had not received.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Lag {
    pub max_records: u64,
    /// When producers stopped, before consumers caught up.
    pub at_end_records: u64,
    /// Seconds consumers took to catch up after producers stopped (at
    /// most a minute).
    pub drain_seconds: f64,
    /// Records consumers had still not received a minute after producers
    /// stopped: a broker that cannot serve the read rate.
    #[serde(default)]
    pub left_behind_records: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Process {
    pub cpu_seconds: f64,
    /// CPU seconds per GiB produced (what a core buys).
    pub cpu_seconds_per_gib_written: f64,
    /// Cores kept busy on average.
    pub cores_busy: f64,
    pub peak_rss_mib: f64,
}

impl Process {
    pub fn new(cpu_seconds: f64, peak_rss_bytes: u64, written: u64, seconds: f64) -> Process {
        Process {
            cpu_seconds,
            cpu_seconds_per_gib_written: cpu_seconds / (written as f64 / MIB / 1024.0).max(1e-9),
            cores_busy: cpu_seconds / seconds,
            peak_rss_mib: peak_rss_bytes as f64 / MIB,
        }
    }
}

/// What a floe agent counted over the measured span (its `/metrics`):
/// object-store and metastore requests, and its CPU time.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AgentCounts {
    /// PUTs, multipart uploads counted once.
    pub puts: f64,
    pub gets: f64,
    pub deletes: f64,
    pub lists: f64,
    pub put_bytes: f64,
    pub get_bytes: f64,
    pub puts_per_mib_written: f64,
    pub gets_per_mib_read: f64,
    pub get_bytes_per_byte_read: f64,
    /// Metastore requests per MiB written (commits, plans, offsets...).
    pub metastore_requests_per_mib_written: f64,
    /// The agent's CPU seconds (`floe_process_cpu_seconds_total`).
    pub cpu_seconds: f64,
}

/// One second of the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Point {
    /// Seconds since measuring started (negative during the warm-up).
    pub t: f64,
    pub produce_mib_s: f64,
    pub consume_mib_s: f64,
    pub produce_p50_ms: f64,
    pub produce_p99_ms: f64,
    pub e2e_p50_ms: f64,
    pub e2e_p99_ms: f64,
    pub lag_records: u64,
}

impl Report {
    pub fn read(path: &Path) -> anyhow::Result<Report> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        Ok(serde_json::from_str(&text)?)
    }

    /// What the terminal shows at the end of a run.
    pub fn summary(&self) -> String {
        let mut out = String::new();
        let w = &self.workload;
        let _ = writeln!(
            out,
            "{}: {} topic(s) x {} partitions, {} B records, {} producer(s) at {}, {} subscription(s) x {} consumer(s), {} measured after {} warm-up, {} cores",
            self.label,
            w.topics,
            w.partitions_per_topic,
            w.record_size,
            w.producers,
            if w.rate == 0 {
                "full speed".to_string()
            } else {
                format!("{} records/s", w.rate)
            },
            w.subscriptions,
            w.consumers_per_subscription,
            humantime::format_duration(w.duration),
            humantime::format_duration(w.warmup),
            self.machine.cores,
        );
        let t = |name: &str, t: &Throughput| {
            format!(
                "{name:<9} {:>10.1} MiB/s {:>12.0} records/s ({} records, {} errors)",
                t.mib_per_s, t.records_per_s, t.records, t.errors
            )
        };
        let _ = writeln!(out, "{}", t("produce", &self.produce));
        let _ = writeln!(out, "{}", t("consume", &self.consume));
        let l = |name: &str, p: &Percentiles| {
            format!(
                "{name:<21} p50 {:>8.2} ms  p95 {:>8.2} ms  p99 {:>8.2} ms  p99.9 {:>8.2} ms  max {:>8.2} ms",
                p.p50, p.p95, p.p99, p.p999, p.max
            )
        };
        let _ = writeln!(out, "{}", l("produce latency", &self.produce_latency_ms));
        let _ = writeln!(
            out,
            "{}",
            l("end-to-end latency", &self.end_to_end_latency_ms)
        );
        let _ = writeln!(
            out,
            "consumer lag: at most {} records; {} when producers stopped, caught up in {:.1} s",
            self.lag.max_records, self.lag.at_end_records, self.lag.drain_seconds
        );
        if self.lag.left_behind_records > 0 {
            let _ = writeln!(
                out,
                "WARNING: consumers never caught up: {} records still unread {:.0} s after producers stopped",
                self.lag.left_behind_records, self.lag.drain_seconds
            );
        }
        if let Some(b) = &self.broker {
            let _ = writeln!(
                out,
                "broker process: {:.1} CPU s ({:.2} cores busy, {:.1} CPU s per GiB written), peak RSS {:.0} MiB",
                b.cpu_seconds, b.cores_busy, b.cpu_seconds_per_gib_written, b.peak_rss_mib
            );
        }
        let c = &self.client;
        let _ = writeln!(
            out,
            "bench process: {:.1} CPU s ({:.2} cores busy)",
            c.cpu_seconds, c.cores_busy
        );
        if let Some(o) = &self.agent {
            let _ = writeln!(
                out,
                "agent: {:.1} CPU s; object store: {:.0} PUTs ({:.2} per MiB written, {:.1} MiB), {:.0} GETs ({:.3} per MiB read, {:.2} bytes read from the store per byte consumed), {:.0} DELETEs, {:.0} LISTs; {:.1} metastore requests per MiB written",
                o.cpu_seconds,
                o.puts,
                o.puts_per_mib_written,
                o.put_bytes / MIB,
                o.gets,
                o.gets_per_mib_read,
                o.get_bytes_per_byte_read,
                o.deletes,
                o.lists,
                o.metastore_requests_per_mib_written
            );
        }
        out
    }
}
