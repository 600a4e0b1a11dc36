//! Record-level work: decompressing a batch, walking its records, building
//! it again. A batch costs at most its decompressed bound
//! ([`floe_protocol::compression::MAX_DECOMPRESSED_BATCH_BYTES`]) of memory
//! and a core for as long as it takes, so such work runs off the runtime's
//! threads, at most [`WORKERS`] at once across the agent: clients whose
//! requests need none of it are never held up by one whose batch does, and
//! however many such batches arrive at once, memory holds [`WORKERS`] of
//! them.

use tokio::sync::Semaphore;
use tokio::time::Instant;

/// Record-level jobs running at once.
pub const WORKERS: usize = 2;

static TURNS: Semaphore = Semaphore::const_new(WORKERS);

/// Why a job did not run to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRun {
    /// No turn came before the deadline.
    TimedOut,
    /// It panicked (a bug; the agent goes on).
    Failed,
}

/// Runs `work` on a blocking thread once a turn comes, waiting for the turn
/// no later than `due`. The turn goes with the work: it is released when
/// the work ends, not when the caller stops waiting for it. On a
/// single-threaded runtime (the simulation) it runs in place, where a
/// thread outside the runtime would finish at a time the runtime's clock
/// does not decide.
pub async fn run<T: Send + 'static>(
    due: Instant,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, NotRun> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let turn = tokio::time::timeout_at(due, TURNS.acquire())
        .await
        .map_err(|_| NotRun::TimedOut)?
        .expect("the semaphore is never closed");
    if Handle::current().runtime_flavor() == RuntimeFlavor::CurrentThread {
        let _turn = turn;
        return Ok(work());
    }
    tokio::task::spawn_blocking(move || {
        let _turn = turn;
        work()
    })
    .await
    .map_err(|e| {
        tracing::error!(error = %e, "record-level work failed");
        NotRun::Failed
    })
}
