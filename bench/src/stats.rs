//! What producers and consumers count while a run goes on: a sample per
//! second for the time series, and the run's total once measuring starts.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hdrhistogram::Histogram;
use tokio::time::Instant;

/// Latencies are kept in microseconds, from 1 µs to an hour, to three
/// significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

/// Counts and latencies over some span of the run.
#[derive(Clone)]
pub struct Sample {
    pub produced_records: u64,
    pub produced_bytes: u64,
    pub produce_errors: u64,
    pub consumed_records: u64,
    pub consumed_bytes: u64,
    pub produce_latency: Histogram<u64>,
    pub end_to_end_latency: Histogram<u64>,
}

impl Default for Sample {
    fn default() -> Self {
        Sample {
            produced_records: 0,
            produced_bytes: 0,
            produce_errors: 0,
            consumed_records: 0,
            consumed_bytes: 0,
            produce_latency: histogram(),
            end_to_end_latency: histogram(),
        }
    }
}

impl Sample {
    /// Empties it for reuse without reallocating its histograms.
    pub fn clear(&mut self) {
        self.produced_records = 0;
        self.produced_bytes = 0;
        self.produce_errors = 0;
        self.consumed_records = 0;
        self.consumed_bytes = 0;
        self.produce_latency.reset();
        self.end_to_end_latency.reset();
    }

    fn add(&mut self, other: &Sample) {
        self.produced_records += other.produced_records;
        self.produced_bytes += other.produced_bytes;
        self.produce_errors += other.produce_errors;
        self.consumed_records += other.consumed_records;
        self.consumed_bytes += other.consumed_bytes;
        // Same bounds on both sides: adding cannot fail.
        let _ = self.produce_latency.add(&other.produce_latency);
        let _ = self.end_to_end_latency.add(&other.end_to_end_latency);
    }
}

struct Samples {
    /// Since the last tick of the time series.
    window: Sample,
    /// Since measuring started.
    total: Sample,
}

/// How often a task hands what it counted to the shared [`Stats`]: adding
/// a histogram walks all its buckets, too dear to do per request.
pub const HAND_IN_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Shared by every producer and consumer task of a run. Each counts in a
/// [`Sample`] of its own and hands it in every [`HAND_IN_EVERY`].
pub struct Stats {
    /// Microseconds in records' send times count from here.
    pub epoch: Instant,
    samples: Mutex<Samples>,
    measuring: AtomicBool,
    /// Records acknowledged since the run began (for lag).
    acked: AtomicU64,
    /// Records each subscription has received since the run began.
    received: Vec<AtomicU64>,
}

impl Stats {
    pub fn new(subscriptions: usize) -> Stats {
        Stats {
            epoch: Instant::now(),
            samples: Mutex::new(Samples {
                window: Sample::default(),
                total: Sample::default(),
            }),
            measuring: AtomicBool::new(false),
            acked: AtomicU64::new(0),
            received: (0..subscriptions).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Microseconds since the run's epoch: what a record carries as its send time.
    pub fn now_micros(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Adds `sample` to the window (and the total, once measuring) and
    /// clears it.
    pub fn hand_in(&self, sample: &mut Sample) {
        self.add(sample);
        sample.clear();
    }

    fn add(&self, sample: &Sample) {
        let mut s = self.samples.lock().expect("stats lock");
        s.window.add(sample);
        if self.measuring.load(Ordering::Relaxed) {
            s.total.add(sample);
        }
    }

    pub fn acked(&self, records: u64) {
        self.acked.fetch_add(records, Ordering::Relaxed);
    }

    pub fn received(&self, subscription: usize, records: u64) {
        self.received[subscription].fetch_add(records, Ordering::Relaxed);
    }

    /// Records acknowledged that the slowest subscription has not received.
    pub fn lag(&self) -> u64 {
        let acked = self.acked.load(Ordering::Relaxed);
        let slowest = self
            .received
            .iter()
            .map(|r| r.load(Ordering::Relaxed))
            .min()
            .unwrap_or(acked);
        acked.saturating_sub(slowest)
    }

    /// Starts the measured span: what is counted from now is the total.
    pub fn start_measuring(&self) {
        self.samples.lock().expect("stats lock").total = Sample::default();
        self.measuring.store(true, Ordering::Relaxed);
    }

    pub fn stop_measuring(&self) -> Sample {
        self.measuring.store(false, Ordering::Relaxed);
        self.samples.lock().expect("stats lock").total.clone()
    }

    /// The window since the last call, and a new one begun.
    pub fn take_window(&self) -> Sample {
        std::mem::take(&mut self.samples.lock().expect("stats lock").window)
    }
}
