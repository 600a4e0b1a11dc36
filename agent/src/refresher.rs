//! Copies of metastore state an agent keeps in memory (ACLs, client
//! metrics subscriptions, client quotas), each brought up to date by a
//! task of its own for as long as its holder lives.
//!
//! Each asks the metastore whether its state changed since the version it
//! holds, every [`Refreshed::EVERY`]. Under a subscription (see
//! [`crate::read::pushed`]) every renewal brings the versions, read by the
//! leader after it arrived: a copy whose version a renewal sent less than
//! `EVERY` ago does not pass is as current as an ask then would have made
//! it, so nothing is asked; one that moved is asked for at once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use floe_metastore::push::Versions;
use floe_metastore::{MetaError, Metastore};
use tokio::time::Instant;

use crate::read::pushed::Pushed;
use crate::tasks::Tasks;

/// A copy of metastore state an agent keeps in memory.
pub trait Refreshed: Send + Sync + 'static {
    /// What it copies, as logs name it.
    const WHAT: &str;
    /// How often it is brought up to date, at the latest.
    const EVERY: Duration;
    /// Whether it is kept at all (the ACLs of an agent without them are not).
    fn wanted(&self) -> bool {
        true
    }
    /// The version of the copy held (`None`: none yet).
    fn held_version(&self) -> Option<u64>;
    /// The version of what it copies, among those a renewal brings.
    fn pushed_version(versions: &Versions) -> u64;
    /// Brings the copy up to date (a read only when the state changed).
    fn refresh(&self, meta: &dyn Metastore) -> impl Future<Output = Result<(), MetaError>> + Send;
}

/// Refreshes `holder` from `meta` every [`Refreshed::EVERY`] unless the
/// versions `pushed` brought say it is current, and as soon as they move;
/// on `tasks`, until the holder is dropped or the tasks are cancelled. A
/// failure is logged once until a refresh succeeds again; the copy held is
/// kept meanwhile.
pub fn spawn<T: Refreshed>(
    tasks: &Tasks,
    holder: &Arc<T>,
    meta: Arc<dyn Metastore>,
    pushed: Arc<Pushed>,
) {
    if !holder.wanted() {
        return;
    }
    let holder = Arc::downgrade(holder);
    tasks.spawn(async move {
        let mut failing = false;
        let mut moved = pushed.version_changes();
        while let Some(held) = holder.upgrade() {
            // Until when the copy is as current as an ask would make it.
            let until = match current(&*held, &pushed) {
                Some(until) => until,
                None => {
                    failing = refresh(&*held, &*meta, failing).await;
                    Instant::now() + T::EVERY
                }
            };
            // The holder is given back before the wait: a dropped holder
            // ends the task at its next turn.
            drop(held);
            // `pushed` is held here, so `moved` never closes. Biased: no
            // random draw per wake-up (see `Tasks::spawn`).
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(until) => {}
                _ = moved.changed() => {}
            }
        }
    });
}

/// Refreshes `held`; whether it is failing now. A failure is logged only
/// when the one before did not fail.
async fn refresh<T: Refreshed>(held: &T, meta: &dyn Metastore, failing: bool) -> bool {
    match held.refresh(meta).await {
        Ok(()) => false,
        Err(e) => {
            if !failing {
                tracing::warn!(error = %e, "{} not refreshed; keeping the last copy", T::WHAT);
            }
            true
        }
    }
}

/// Until when the copy `held` is current by a renewal sent within the
/// last [`Refreshed::EVERY`] (`EVERY` after that renewal was sent, as after
/// an ask); `None`: it is not.
fn current<T: Refreshed>(held: &T, pushed: &Pushed) -> Option<Instant> {
    let (sent, versions) = pushed.versions_within(T::EVERY)?;
    let known = held.held_version()?;
    (T::pushed_version(&versions) <= known).then_some(sent + T::EVERY)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use floe_metastore::LocalMetastore;

    use super::*;

    /// A copy whose "metastore" holds version `truth`; counts its asks.
    #[derive(Default)]
    struct Copy {
        truth: AtomicU64,
        held: AtomicU64,
        asks: AtomicU64,
    }

    impl Refreshed for Copy {
        const WHAT: &str = "a test copy";
        const EVERY: Duration = Duration::from_secs(2);

        fn held_version(&self) -> Option<u64> {
            Some(self.held.load(Ordering::SeqCst))
        }

        fn pushed_version(versions: &Versions) -> u64 {
            versions.configs
        }

        async fn refresh(&self, _: &dyn Metastore) -> Result<(), MetaError> {
            self.asks.fetch_add(1, Ordering::SeqCst);
            let truth = self.truth.load(Ordering::SeqCst);
            self.held.store(truth, Ordering::SeqCst);
            Ok(())
        }
    }

    fn versions(configs: u64) -> Versions {
        Versions { configs, acls: 0 }
    }

    /// Renewals every 500 ms bringing version `v`, for `seconds`.
    async fn renewals(pushed: &Pushed, v: u64, seconds: u64) {
        for _ in 0..seconds * 2 {
            pushed.learn_versions(Instant::now(), versions(v));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Without renewals a copy is asked for every `EVERY`; under renewals
    /// that say it is current, never; once they say it moved, at once.
    #[tokio::test(start_paused = true)]
    async fn a_copy_is_asked_for_only_when_its_pushed_version_moves() {
        let meta: Arc<dyn Metastore> = Arc::new(LocalMetastore::in_memory().await.unwrap());
        let (tasks, pushed, copy) = (
            Tasks::default(),
            Arc::new(Pushed::default()),
            Arc::new(Copy::default()),
        );
        spawn(&tasks, &copy, meta, pushed.clone());
        let asks = || copy.asks.load(Ordering::SeqCst);

        tokio::time::sleep(Duration::from_millis(5_100)).await;
        assert_eq!(asks(), 3, "at 0, 2 and 4 s, with nothing pushed");

        renewals(&pushed, 0, 10).await;
        assert_eq!(asks(), 3, "nothing asked while renewals say it is current");

        copy.truth.store(1, Ordering::SeqCst);
        pushed.learn_versions(Instant::now(), versions(1));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(asks(), 4, "asked at once when the version moved");
        assert_eq!(copy.held_version(), Some(1));
        renewals(&pushed, 1, 10).await;
        assert_eq!(asks(), 4);

        // Renewals stop (the subscription ended): asked again `EVERY` after
        // the last renewal was sent, as after an ask, then every `EVERY`.
        tokio::time::sleep(Duration::from_millis(1_600)).await;
        assert_eq!(asks(), 5);
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        assert_eq!(asks(), 6);
        tasks.cancel();
    }
}
