//! Copies of metastore state an agent keeps in memory (ACLs, client
//! metrics subscriptions, client quotas), each brought up to date by a
//! task of its own for as long as its holder lives.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use floe_metastore::MetaError;

use crate::tasks::Tasks;

/// Runs `refresh` on `holder` every `every`, on `tasks`, until the holder
/// is dropped or the tasks are cancelled. A failure is logged once until a
/// refresh succeeds again; the copy held is kept meanwhile.
pub fn spawn<T, F, Fut>(
    tasks: &Tasks,
    holder: &Arc<T>,
    every: Duration,
    what: &'static str,
    refresh: F,
) where
    T: Send + Sync + 'static,
    F: Fn(Arc<T>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), MetaError>> + Send + 'static,
{
    let holder = Arc::downgrade(holder);
    tasks.spawn(async move {
        let mut failing = false;
        while let Some(held) = holder.upgrade() {
            // The holder is given back before the wait: a dropped holder
            // ends the task at its next turn.
            match refresh(held).await {
                Ok(()) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "{what} not refreshed; keeping the last copy");
                }
                Err(_) => {}
            }
            tokio::time::sleep(every).await;
        }
    });
}
