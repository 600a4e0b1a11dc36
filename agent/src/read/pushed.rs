//! The agent's side of changes pushed by the metastore under a read lease
//! (see `floe_metastore::contract::push`, whose rules this keeps).
//!
//! One task holds the agent's subscription: it renews the lease, names the
//! partitions fetches use, takes every notice into the extent cache and
//! the watched high watermarks (waking fetches that wait), and only then
//! acknowledges it. The leader answers no write that changed a watched
//! partition before that acknowledgement, or before the lease expired. So
//! while the lease holds, a partition whose watch was answered has views
//! as current as a confirmation round would make them, and a fetch asks
//! nothing ([`Pushed::covers`]).
//!
//! The lease counts from when its renewal was sent, less an eighth for
//! clocks that run at different rates. It is lost, and fetches confirm
//! with rounds again, the moment the stream ends or says it ended.
//! Without a subscription (a metastore that pushes nothing, or one that
//! cannot be reached) everything goes by rounds, as it always may.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use floe_metastore::push::{FromLeader, MAX_WATCHED, Subscription, ToLeader, Versions};
use floe_metastore::{Metastore, Refusal, TopicPartition, TxnReadPlan};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::read::extent_cache::{ExtentCache, Floor};

/// How often the lease is renewed: a quarter of a 2 s lease.
const RENEW_EVERY: Duration = Duration::from_millis(500);
/// How long after an ended subscription another is asked for; after each
/// refusal in a row twice as long, up to [`RESUBSCRIBE_AT_MOST`] (a
/// metastore that grants no leases is asked once a minute).
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(5);
const RESUBSCRIBE_AT_MOST: Duration = Duration::from_secs(60);
/// A watched partition no fetch used for this long is dropped.
const UNUSED_FOR: Duration = Duration::from_secs(60);
/// A subscription whose renewals go unanswered this long is given up (its
/// node may lead no more without knowing it yet).
const NO_RENEWAL_FOR: Duration = Duration::from_secs(3);
/// Watched partitions at most (the leader's bound is far above).
const MAX_WATCHING: usize = 10_000;
const _: () = assert!(MAX_WATCHING <= MAX_WATCHED);

pub struct Pushed {
    inner: Mutex<Inner>,
    /// Wakes the task to send what was asked to be watched.
    wanted: Notify,
    /// The versions the latest renewal brought, and when it was sent;
    /// told to the refreshers when they move.
    versions: watch::Sender<Option<(Instant, Versions)>>,
}

impl Default for Pushed {
    fn default() -> Pushed {
        Pushed {
            inner: Mutex::default(),
            wanted: Notify::new(),
            versions: watch::Sender::new(None),
        }
    }
}

struct Watched {
    /// When a fetch last used it.
    used: Instant,
    /// The latest the subscription brought of it: a view that holds less
    /// is older than a notice already taken in, and is not current.
    floor: Floor,
}

#[derive(Default)]
struct Inner {
    /// Until when the lease holds by this agent's clock.
    lease_until: Option<Instant>,
    /// Partitions whose watch the leader answered in this subscription.
    watched: HashMap<TopicPartition, Watched>,
    /// No longer watched here, to tell the leader.
    to_remove: Vec<TopicPartition>,
    /// Asked to be watched and not sent yet: from which offset.
    to_add: BTreeMap<TopicPartition, i64>,
    /// Sent and not answered, by the watch request's number.
    adding: HashMap<u64, Vec<TopicPartition>>,
}

impl Inner {
    fn lease_holds(&self) -> bool {
        self.lease_until.is_some_and(|until| Instant::now() < until)
    }

    fn lose_lease(&mut self) {
        self.lease_until = None;
        self.watched.clear();
        self.adding.clear();
        self.to_add.clear();
        self.to_remove.clear();
    }
}

impl Pushed {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `tp`'s view is current now without asking, if it holds at
    /// least the floor answered: the lease holds and the leader answered
    /// its watch. Marks it used.
    pub fn covers(&self, tp: TopicPartition) -> Option<Floor> {
        let mut inner = self.inner();
        if !inner.lease_holds() {
            return None;
        }
        let watched = inner.watched.get_mut(&tp)?;
        watched.used = Instant::now();
        Some(watched.floor)
    }

    /// Asks for `tp` to be watched from `from`, if it is not (and the
    /// lease holds: without one there is nothing to watch under).
    pub fn want(&self, tp: TopicPartition, from: i64) {
        let mut inner = self.inner();
        let watching = inner.watched.len() + inner.to_add.len();
        if !inner.lease_holds() || inner.watched.contains_key(&tp) || watching >= MAX_WATCHING {
            return;
        }
        if inner.adding.values().any(|tps| tps.contains(&tp)) {
            return;
        }
        let at = inner.to_add.entry(tp).or_insert(from);
        *at = (*at).min(from);
        drop(inner);
        self.wanted.notify_one();
    }

    /// The versions a renewal sent less than `within` ago brought, and when
    /// it was sent: as current as an answer to an ask made then (the leader
    /// read them after the renewal arrived). Lease or not.
    pub fn versions_within(&self, within: Duration) -> Option<(Instant, Versions)> {
        let (sent, versions) = (*self.versions.borrow())?;
        (sent.elapsed() < within).then_some((sent, versions))
    }

    /// Changes whenever a renewal brings versions that moved.
    pub fn version_changes(&self) -> watch::Receiver<Option<(Instant, Versions)>> {
        self.versions.subscribe()
    }

    /// Takes the versions renewal `sent` brought, if no later renewal's
    /// came first.
    pub fn learn_versions(&self, sent: Instant, versions: Versions) {
        self.versions.send_if_modified(|latest| {
            if latest.is_some_and(|(at, _)| at >= sent) {
                return false;
            }
            let moved = latest.is_none_or(|(_, held)| held != versions);
            *latest = Some((sent, versions));
            moved
        });
    }

    #[cfg(test)]
    pub fn lease_holds(&self) -> bool {
        self.inner().lease_holds()
    }
}

/// What the task does with the plans a notice brings: learns them (as
/// confirming nothing: see [`ExtentCache::learn_pushed`]) and wakes the
/// fetches waiting on them (`Watermarks`' job).
pub trait Noticed: Send + Sync + 'static {
    fn noticed(&self, plans: &[(TopicPartition, Result<TxnReadPlan, Refusal>)], at: Instant);
}

/// Holds a subscription for as long as `pushed` lives, one after another.
pub async fn run(
    pushed: Weak<Pushed>,
    meta: Arc<dyn Metastore>,
    noticed: Weak<dyn Noticed>,
    extents: Arc<ExtentCache>,
) {
    let mut wait = RESUBSCRIBE_AFTER;
    loop {
        let subscription = meta.subscribe().await;
        let Some(p) = pushed.upgrade() else {
            return;
        };
        wait = match subscription {
            Ok(_) => RESUBSCRIBE_AFTER,
            Err(_) => (wait * 2).min(RESUBSCRIBE_AT_MOST),
        };
        match subscription {
            Ok(mut subscription) => {
                let why = hold(&p, &mut subscription, &noticed, &extents).await;
                // Trusted no more, and then said so: the leader need not
                // hold writes back for this agent until the lease ends.
                p.inner().lose_lease();
                let _ = subscription.to_leader.try_send(ToLeader::Goodbye);
                tracing::debug!(why, "a metastore subscription ended");
            }
            Err(e) => tracing::debug!(error = %e, "no metastore subscription"),
        }
        drop(p);
        tokio::time::sleep(wait).await;
    }
}

/// Holds one subscription until it ends; why it did.
async fn hold(
    pushed: &Pushed,
    sub: &mut Subscription,
    noticed: &Weak<dyn Noticed>,
    extents: &ExtentCache,
) -> &'static str {
    let mut renewals: BTreeMap<u64, Instant> = BTreeMap::new();
    let mut renewed = Instant::now();
    let mut next_ask = 0u64;
    let mut ticks = tokio::time::interval(RENEW_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                if renewed.elapsed() > NO_RENEWAL_FOR {
                    return "no renewal was answered";
                }
                next_ask += 1;
                renewals.insert(next_ask, Instant::now());
                // Renewals the leader did not grant are never answered.
                while renewals.len() > 8 {
                    renewals.pop_first();
                }
                let remove = unused(pushed);
                let mut sent = sub.to_leader.try_send(ToLeader::Renew { ask: next_ask }).is_ok();
                if !remove.is_empty() {
                    next_ask += 1;
                    let watch = ToLeader::Watch { ask: next_ask, add: vec![], remove };
                    sent &= sub.to_leader.try_send(watch).is_ok();
                }
                if !sent {
                    return "the stream to the leader is full";
                }
            }
            _ = pushed.wanted.notified() => {
                let add: Vec<(TopicPartition, i64)> = {
                    let mut inner = pushed.inner();
                    let add: Vec<_> = std::mem::take(&mut inner.to_add).into_iter().collect();
                    if !add.is_empty() {
                        next_ask += 1;
                        inner.adding.insert(next_ask, add.iter().map(|(tp, _)| *tp).collect());
                    }
                    add
                };
                if !add.is_empty() {
                    let watch = ToLeader::Watch { ask: next_ask, add, remove: vec![] };
                    if sub.to_leader.try_send(watch).is_err() {
                        return "the stream to the leader is full";
                    }
                }
            }
            message = sub.from_leader.recv() => match message {
                None => return "the stream closed",
                Some(FromLeader::Ended { .. }) => return "the leader ended it",
                Some(FromLeader::Renewed { ask, lease_ms, versions }) => {
                    if let Some(sent) = renewals.remove(&ask) {
                        renewed = Instant::now();
                        pushed.learn_versions(sent, versions);
                        let lease = Duration::from_millis(lease_ms);
                        let until = sent + lease - lease / 8;
                        // Renewals are confirmed apart and may be answered
                        // out of order: a later one never shortens it.
                        let mut inner = pushed.inner();
                        inner.lease_until = inner.lease_until.max(Some(until));
                    }
                }
                Some(FromLeader::Notice { seq, answers, plans }) => {
                    let Some(noticed) = noticed.upgrade() else {
                        return "the agent is stopping";
                    };
                    let now = Instant::now();
                    noticed.noticed(&plans, now);
                    take_in(pushed, answers, &plans, now);
                    let gone = plans.iter().filter(|(_, p)| !matches!(
                        p,
                        Ok(_) | Err(Refusal::OffsetOutOfRange { .. })
                    ));
                    extents.forget(gone.map(|(tp, _)| *tp));
                    if sub.to_leader.try_send(ToLeader::Ack { seq }).is_err() {
                        return "the stream to the leader is full";
                    }
                }
            }
        }
    }
}

/// Takes a notice's plans into the watched partitions' floors (and, for
/// the watch it answers, watches its partitions from now). A partition
/// that went away is watched no more: its fetches ask, and learn its
/// error.
fn take_in(
    pushed: &Pushed,
    answers: Option<u64>,
    plans: &[(TopicPartition, Result<TxnReadPlan, Refusal>)],
    now: Instant,
) {
    let mut inner = pushed.inner();
    if let Some(added) = answers.and_then(|a| inner.adding.remove(&a)) {
        for tp in added {
            let watched = Watched {
                used: now,
                floor: Floor::default(),
            };
            inner.watched.entry(tp).or_insert(watched);
        }
    }
    for (tp, plan) in plans {
        let Some(watched) = inner.watched.get_mut(tp) else {
            continue;
        };
        match plan {
            Ok(plan) => watched.floor.raise(plan),
            Err(Refusal::OffsetOutOfRange {
                high_watermark,
                log_start_offset,
                ..
            }) => {
                let floor = &mut watched.floor;
                floor.high_watermark = floor.high_watermark.max(*high_watermark);
                floor.log_start = floor.log_start.max(*log_start_offset);
            }
            Err(_) => {
                inner.watched.remove(tp);
                inner.to_remove.push(*tp);
            }
        }
    }
}

/// Watched partitions no fetch used lately, and those that went away: no
/// longer watched.
fn unused(pushed: &Pushed) -> Vec<TopicPartition> {
    let mut inner = pushed.inner();
    let now = Instant::now();
    let mut unused: Vec<TopicPartition> = inner
        .watched
        .iter()
        .filter(|(_, w)| now.duration_since(w.used) > UNUSED_FOR)
        .map(|(tp, _)| *tp)
        .collect();
    for tp in &unused {
        inner.watched.remove(tp);
    }
    unused.append(&mut inner.to_remove);
    unused
}
