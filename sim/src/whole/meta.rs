//! The simulation's metastore: the real [`State`] behind the real mapping of
//! the `Metastore` API ([`Sequencer`]), with the faults a replicated
//! metastore shows its callers. Stage 2 of the simulation stops at this
//! boundary; a Raft group over a simulated network is the next stage.
//!
//! - Writes wait a seeded latency, then apply; the caller may have given up
//!   meanwhile (the batcher's commit deadline), and the write still applies,
//!   as a proposal stuck behind a frozen leader does.
//! - A write may fail before it applies (`Unavailable`, nothing applied) or
//!   lose its reply after it applied (`Unavailable`, applied), and the
//!   client retries a repeatable write as `RemoteMetastore` does.
//! - Time is the simulation's: tokio's paused clock from a fixed epoch.

use std::sync::{Arc, Mutex};

use floe_metastore::state::{Command, Proposal, Reply, State};
use floe_metastore::{MetaError, Sequencer};
use tokio::sync::oneshot;
use tokio::time::{Duration, Instant};
use uuid::Uuid;

use super::Shared;

/// Simulated time starts here: 2030-01-01, a date like any other (listings
/// show objects at the simulated time they were stored, see
/// `store::SimStoreFaults::listed`, so the orphan sweep's ages are the
/// simulation's).
pub const EPOCH_MS: i64 = 1_893_456_000_000;

/// How the metastore misbehaves right now (the chaos actor changes it).
#[derive(Debug, Clone, Copy, Default)]
pub struct MetaFaults {
    /// Share of writes that fail before applying.
    pub unavailable: f64,
    /// Share of writes whose reply is lost after applying.
    pub lost_reply: f64,
    /// Each write waits up to this long before applying.
    pub max_latency: Duration,
    /// Until then, every write waits until then (a frozen leader).
    pub frozen_until: Option<Instant>,
}

pub struct SimMetastore {
    state: Arc<Mutex<State>>,
    shared: Shared,
}

impl SimMetastore {
    pub fn new(shared: Shared) -> SimMetastore {
        SimMetastore {
            state: Arc::new(Mutex::new(State::default())),
            shared,
        }
    }

    /// Applies `command` after its latency, whether or not the caller still waits.
    fn apply_later(&self, command: Command) -> oneshot::Receiver<Reply> {
        let (faults, latency) = self.shared.with(|w| {
            let f = w.meta_faults;
            (f, w.latency_up_to(f.max_latency))
        });
        let (tx, rx) = oneshot::channel();
        let state = self.state.clone();
        let shared = self.shared.clone();
        tokio::spawn(async move {
            if let Some(until) = faults.frozen_until {
                tokio::time::sleep_until(until).await;
            }
            tokio::time::sleep(latency).await;
            let at_ms = shared.with(|w| w.now_ms());
            let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
            // A broken invariant panics (debug builds check after every
            // apply): an anomaly of the run, not a lost task.
            if let Some(reply) = caught(&shared, "applying a command", || {
                state.apply_proposal(Proposal { at_ms, command })
            }) {
                let _ = tx.send(reply);
            }
        });
        rx
    }
}

/// Runs `f`; a panic (a debug assertion of the state machine) becomes an
/// anomaly of the run, which then stops, rather than a task that vanishes.
pub(super) fn caught<T>(shared: &Shared, doing: &str, f: impl FnOnce() -> T) -> Option<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(t) => Some(t),
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            shared.with(|w| w.anomaly(format!("the state machine panicked {doing}: {why}")));
            None
        }
    }
}

impl Sequencer for SimMetastore {
    async fn propose(&self, command: Command) -> Result<Reply, MetaError> {
        let mut attempts = 0;
        // Whether an attempt so far applied although its reply was lost.
        let mut maybe_applied = false;
        loop {
            attempts += 1;
            let (refused, lost) = self.shared.with(|w| {
                let f = w.meta_faults;
                (w.chance(f.unavailable), w.chance(f.lost_reply))
            });
            if refused {
                if command.retry_is_safe() && attempts < 3 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                return Err(MetaError::Unavailable {
                    why: "simulated: no leader".into(),
                    maybe_applied,
                });
            }
            let reply = self.apply_later(command.clone());
            let reply = reply
                .await
                .map_err(|_| MetaError::maybe_applied("simulated: stopped"))?;
            if lost {
                if command.retry_is_safe() && attempts < 3 {
                    self.shared.with(|w| w.summary.retried_writes += 1);
                    maybe_applied = true;
                    continue;
                }
                return Err(MetaError::maybe_applied("simulated: reply lost"));
            }
            return match reply.refusal() {
                Some(refusal) if maybe_applied => Err(refusal.after_retries(true)),
                _ => Ok(reply),
            };
        }
    }

    async fn read<T: Send, F: FnOnce(&State) -> T + Send>(&self, f: F) -> Result<T, MetaError> {
        let (refused, frozen) = self.shared.with(|w| {
            let faults = w.meta_faults;
            (w.chance(faults.unavailable), faults.frozen_until)
        });
        if let Some(until) = frozen {
            tokio::time::sleep_until(until).await;
        }
        if refused {
            return Err(MetaError::unavailable("simulated: no leader"));
        }
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        caught(&self.shared, "reading the state", || f(&state))
            .ok_or_else(|| MetaError::unavailable("simulated: the state machine panicked"))
    }

    fn now_ms(&self) -> i64 {
        self.shared.with(|w| w.now_ms())
    }

    fn new_id(&self) -> Uuid {
        self.shared.with(|w| w.next_uuid())
    }
}
