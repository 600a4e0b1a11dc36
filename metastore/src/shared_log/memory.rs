//! [`MemoryLog`]: the shared log's rules in memory, one lock for the whole
//! store, as PostgreSQL's statements keep them (see `postgres`): the lease
//! on the store's clock, appends fenced by term and by index, snapshots that
//! delete what they cover. Tests and the simulation run nodes on it, and
//! [`Weather`] makes its calls fail, slow down, or commit and lose their
//! answer, as a real database's do.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::*;
use crate::{Clock, SystemClock};

/// A call to the store, as [`Weather`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Claim,
    Release,
    Append,
    Read,
    Snapshot,
    SaveSnapshot,
    Sizes,
}

/// What happens to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    #[default]
    None,
    /// Fails before the store did anything.
    Fail,
    /// Takes effect, then the answer is lost (a connection that broke
    /// after the commit).
    LoseAnswer,
    /// Takes effect after this long, whether or not the caller still
    /// waits for it (a slow statement, which commits though its client
    /// gave up).
    Slow(Duration),
    /// Never reaches the store: fails after this long, having done nothing
    /// (a request lost on a link that drops everything).
    Unanswered(Duration),
    /// Takes effect at once, and answers this much later (a reply held up
    /// on its way back).
    SlowAnswer(Duration),
}

/// Decides each call's fate (the simulation draws it from its seed).
pub type Weather = Arc<dyn Fn(Call) -> Fault + Send + Sync>;

#[derive(Default)]
struct Store {
    term: u64,
    holder: Option<(Uuid, NodeId, String)>,
    expires_ms: i64,
    log: BTreeMap<u64, StoredEntry>,
    snapshot: Option<StoredSnapshot>,
}

/// A shared log in this process. Clones share the store.
#[derive(Clone)]
pub struct MemoryLog {
    store: Arc<Mutex<Store>>,
    clock: Arc<dyn Clock>,
    weather: Option<Weather>,
}

impl Default for MemoryLog {
    fn default() -> Self {
        MemoryLog::new(Arc::new(SystemClock))
    }
}

impl MemoryLog {
    /// An empty store whose clock is `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> MemoryLog {
        MemoryLog {
            store: Default::default(),
            clock,
            weather: None,
        }
    }

    /// The same store, its calls subject to `weather`.
    pub fn with_weather(&self, weather: Weather) -> MemoryLog {
        MemoryLog {
            weather: Some(weather),
            ..self.clone()
        }
    }

    /// The term that holds the lease now (tests).
    pub fn term(&self) -> u64 {
        self.store.lock().expect("memory log poisoned").term
    }

    /// Ends the lease at once, as if its holder had stopped renewing it
    /// long ago (tests of a paused leader).
    pub fn lapse(&self) {
        self.store.lock().expect("memory log poisoned").expires_ms = i64::MIN;
    }

    /// Every entry still stored (tests: what the log holds).
    pub fn entries(&self) -> Vec<StoredEntry> {
        let store = self.store.lock().expect("memory log poisoned");
        store.log.values().cloned().collect()
    }

    /// Runs `f` on the store unless the weather fails the call first; a
    /// slow call takes effect after its wait whether or not its caller
    /// still waits (a statement commits though its client gave up), and an
    /// answer may be lost or late after the effect.
    async fn call<T: Send + 'static>(
        &self,
        call: Call,
        f: impl FnOnce(&mut Store, i64) -> T + Send + 'static,
    ) -> Result<T, LogError> {
        let fault = self.weather.as_ref().map_or(Fault::None, |w| w(call));
        if fault == Fault::Fail {
            return Err(LogError(format!("{call:?} failed (injected)")));
        }
        if let Fault::Unanswered(wait) = fault {
            tokio::time::sleep(wait).await;
            return Err(LogError(format!("{call:?}: no answer (injected)")));
        }
        let (store, clock) = (self.store.clone(), self.clock.clone());
        let effect = move || {
            f(
                &mut store.lock().expect("memory log poisoned"),
                clock.now_ms(),
            )
        };
        let answer = match fault {
            Fault::Slow(wait) => {
                let (answer, answered) = tokio::sync::oneshot::channel();
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    let _ = answer.send(effect());
                });
                answered
                    .await
                    .map_err(|_| LogError(format!("{call:?}: the store stopped")))?
            }
            _ => effect(),
        };
        match fault {
            Fault::LoseAnswer => Err(LogError(format!(
                "{call:?}: the answer was lost (injected)"
            ))),
            Fault::SlowAnswer(wait) => {
                tokio::time::sleep(wait).await;
                Ok(answer)
            }
            _ => Ok(answer),
        }
    }
}

impl Store {
    fn tenure(&self, store_now_ms: i64) -> Tenure {
        let (holder, node, address) = self.holder.clone().unwrap_or_default();
        Tenure {
            term: self.term,
            holder,
            node,
            address,
            expires_ms: self.expires_ms,
            store_now_ms,
        }
    }
}

#[async_trait]
impl SharedLog for MemoryLog {
    async fn claim(&self, me: &Candidate, lease_ms: i64) -> Result<Tenure, LogError> {
        let me = me.clone();
        self.call(Call::Claim, move |store, now_ms| {
            let mine = store
                .holder
                .as_ref()
                .is_some_and(|(h, _, _)| *h == me.holder);
            if mine || store.holder.is_none() || store.expires_ms <= now_ms {
                if !mine {
                    store.term += 1;
                }
                store.holder = Some((me.holder, me.node, me.address.clone()));
                store.expires_ms = now_ms.saturating_add(lease_ms);
            }
            store.tenure(now_ms)
        })
        .await
    }

    async fn release(&self, me: &Candidate) -> Result<(), LogError> {
        let holder = me.holder;
        self.call(Call::Release, move |store, now_ms| {
            if store.holder.as_ref().is_some_and(|(h, _, _)| *h == holder) {
                store.expires_ms = store.expires_ms.min(now_ms);
            }
        })
        .await
    }

    async fn append(&self, term: u64, entry: StoredEntry) -> Result<Appended, LogError> {
        self.call(Call::Append, move |store, _| {
            if store.term != term {
                Appended::Fenced
            } else if store.log.contains_key(&entry.index)
                || store
                    .snapshot
                    .as_ref()
                    .is_some_and(|s| s.index >= entry.index)
            {
                Appended::Taken
            } else {
                store.log.insert(entry.index, entry);
                Appended::Done
            }
        })
        .await
    }

    async fn read(&self, after: u64, max: usize) -> Result<Vec<StoredEntry>, LogError> {
        self.call(Call::Read, move |store, _| {
            store
                .log
                .range(after.saturating_add(1)..)
                .take(max)
                .map(|(_, e)| e.clone())
                .collect()
        })
        .await
    }

    async fn snapshot(&self) -> Result<Option<StoredSnapshot>, LogError> {
        self.call(Call::Snapshot, |store, _| store.snapshot.clone())
            .await
    }

    async fn save_snapshot(&self, snapshot: StoredSnapshot, keep: u64) -> Result<(), LogError> {
        self.call(Call::SaveSnapshot, move |store, _| {
            if store
                .snapshot
                .as_ref()
                .is_none_or(|s| s.index < snapshot.index)
            {
                store.snapshot = Some(snapshot);
            }
            let newest = store.snapshot.as_ref().map_or(0, |s| s.index);
            let below = newest.saturating_sub(keep);
            store.log.retain(|i, _| *i > below);
        })
        .await
    }

    async fn sizes(&self) -> Result<LogSizes, LogError> {
        self.call(Call::Sizes, |store, _| LogSizes {
            entries: store.log.len() as u64,
            last_index: store.log.keys().next_back().copied(),
            snapshot_index: store.snapshot.as_ref().map(|s| s.index),
            snapshot_bytes: store.snapshot.as_ref().map_or(0, |s| s.state.len() as u64),
        })
        .await
    }

    fn describe(&self) -> String {
        "memory".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(node: NodeId) -> Candidate {
        Candidate {
            holder: crate::random_id(),
            node,
            address: format!("n{node}"),
        }
    }

    fn entry(index: u64) -> StoredEntry {
        StoredEntry {
            index,
            format: 1,
            entry: vec![index as u8],
        }
    }

    /// The lease passes only when it lapsed; a new holder gets a new term,
    /// and the old term can no longer append.
    #[tokio::test]
    async fn a_lapsed_lease_passes_on_and_fences_its_old_term() {
        let log = MemoryLog::default();
        let (a, b) = (candidate(1), candidate(2));
        let first = log.claim(&a, 60_000).await.unwrap();
        assert_eq!((first.term, first.node), (1, 1));
        assert_eq!(log.claim(&b, 60_000).await.unwrap().node, 1, "still a's");
        assert_eq!(log.claim(&a, 60_000).await.unwrap().term, 1, "renewed");
        assert_eq!(log.append(1, entry(1)).await.unwrap(), Appended::Done);
        log.lapse();
        let second = log.claim(&b, 60_000).await.unwrap();
        assert_eq!((second.term, second.node), (2, 2));
        assert_eq!(log.append(1, entry(2)).await.unwrap(), Appended::Fenced);
        assert_eq!(log.append(2, entry(1)).await.unwrap(), Appended::Taken);
        assert_eq!(log.append(2, entry(2)).await.unwrap(), Appended::Done);
        assert_eq!(log.entries(), vec![entry(1), entry(2)]);
    }

    /// A snapshot deletes what it covers but the last few entries, and an
    /// older snapshot never replaces a newer one.
    #[tokio::test]
    async fn a_snapshot_bounds_the_log() {
        let log = MemoryLog::default();
        let term = log.claim(&candidate(1), 60_000).await.unwrap().term;
        for i in 1..=10 {
            log.append(term, entry(i)).await.unwrap();
        }
        let snapshot = |index| StoredSnapshot {
            index,
            format: 1,
            state: vec![],
        };
        log.save_snapshot(snapshot(8), 2).await.unwrap();
        let left: Vec<u64> = log.entries().iter().map(|e| e.index).collect();
        assert_eq!(left, vec![7, 8, 9, 10]);
        // An older snapshot is not kept; the log is cut by the newest.
        log.save_snapshot(snapshot(5), 0).await.unwrap();
        assert_eq!(log.snapshot().await.unwrap().unwrap().index, 8);
        // An index a snapshot covers stays taken once its row is gone.
        assert_eq!(log.append(term, entry(8)).await.unwrap(), Appended::Taken);
        let sizes = log.sizes().await.unwrap();
        assert_eq!((sizes.entries, sizes.last_index), (2, Some(10)));
    }

    /// A lost answer still took effect; a failed call did not.
    #[tokio::test]
    async fn lost_answers_take_effect_and_failures_do_not() {
        let log = MemoryLog::default();
        let term = log.claim(&candidate(1), 60_000).await.unwrap().term;
        let lossy = log.with_weather(Arc::new(|_| Fault::LoseAnswer));
        assert!(lossy.append(term, entry(1)).await.is_err());
        let failing = log.with_weather(Arc::new(|_| Fault::Fail));
        assert!(failing.append(term, entry(2)).await.is_err());
        assert_eq!(log.entries(), vec![entry(1)]);
    }
}
