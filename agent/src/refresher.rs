//! Copies of metastore state an agent keeps in memory (ACLs, client
//! metrics subscriptions, client quotas), each brought up to date by a
//! task of its own for as long as its holder lives.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use floe_metastore::{MetaError, Metastore};

use crate::tasks::Tasks;

/// A copy of metastore state an agent keeps in memory.
pub trait Refreshed: Send + Sync + 'static {
    /// What it copies, as logs name it.
    const WHAT: &str;
    /// How often it is brought up to date.
    const EVERY: Duration;
    /// Whether it is kept at all (the ACLs of an agent without them are not).
    fn wanted(&self) -> bool {
        true
    }
    /// Brings the copy up to date (a read only when the state changed).
    fn refresh(&self, meta: &dyn Metastore) -> impl Future<Output = Result<(), MetaError>> + Send;
}

/// Refreshes `holder` from `meta` every [`Refreshed::EVERY`], on `tasks`,
/// until the holder is dropped or the tasks are cancelled. A failure is
/// logged once until a refresh succeeds again; the copy held is kept
/// meanwhile.
pub fn spawn<T: Refreshed>(tasks: &Tasks, holder: &Arc<T>, meta: Arc<dyn Metastore>) {
    if !holder.wanted() {
        return;
    }
    let holder = Arc::downgrade(holder);
    tasks.spawn(async move {
        let mut failing = false;
        while let Some(held) = holder.upgrade() {
            // The holder is given back before the wait: a dropped holder
            // ends the task at its next turn.
            match held.refresh(&*meta).await {
                Ok(()) => failing = false,
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "{} not refreshed; keeping the last copy", T::WHAT);
                }
                Err(_) => {}
            }
            drop(held);
            tokio::time::sleep(T::EVERY).await;
        }
    });
}
