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

use floe_metastore::push::{FromLeader, MAX_WATCHED, Subscription, ToLeader};
use floe_metastore::{Metastore, Refusal, TopicPartition, TxnReadPlan};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::read::extent_cache::{ExtentCache, Moment};

/// How often the lease is renewed: a quarter of a 2 s lease.
const RENEW_EVERY: Duration = Duration::from_millis(500);
/// How long after an ended subscription another is asked for; after each
/// refusal in a row twice as long, up to [`RESUBSCRIBE_AT_MOST`] (a
/// metastore that grants no leases is asked once a minute).
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(5);
const RESUBSCRIBE_AT_MOST: Duration = Duration::from_secs(60);
/// A watched partition no fetch used for this long is dropped.
const UNUSED_FOR: Duration = Duration::from_secs(60);
/// Watched partitions at most (the leader's bound is far above).
const MAX_WATCHING: usize = 10_000;
const _: () = assert!(MAX_WATCHING <= MAX_WATCHED);

#[derive(Default)]
pub struct Pushed {
    inner: Mutex<Inner>,
    /// Wakes the task to send what was asked to be watched.
    wanted: Notify,
}

#[derive(Default)]
struct Inner {
    /// Until when the lease holds by this agent's clock.
    lease_until: Option<Instant>,
    /// Partitions whose watch the leader answered in this subscription,
    /// and when a fetch last used each.
    watched: HashMap<TopicPartition, Instant>,
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
    }
}

impl Pushed {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `tp`'s view is current now without asking: the lease holds
    /// and the leader answered its watch. Marks it used.
    pub fn covers(&self, tp: TopicPartition) -> bool {
        let mut inner = self.inner();
        if !inner.lease_holds() {
            return false;
        }
        match inner.watched.get_mut(&tp) {
            Some(used) => {
                *used = Instant::now();
                true
            }
            None => false,
        }
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

    #[cfg(test)]
    pub fn lease_holds(&self) -> bool {
        self.inner().lease_holds()
    }
}

/// What the task does with the plans a notice brings: learns them and
/// wakes the fetches waiting on them (`Watermarks`' job).
pub trait Noticed: Send + Sync + 'static {
    fn noticed(&self, plans: &[(TopicPartition, Result<TxnReadPlan, Refusal>)], at: Moment);
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
    let mut next_ask = 0u64;
    let mut ticks = tokio::time::interval(RENEW_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                next_ask += 1;
                renewals.insert(next_ask, Instant::now());
                // Answers come in order: older unanswered ones never will.
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
                Some(FromLeader::Renewed { ask, lease_ms }) => {
                    if let Some(sent) = renewals.remove(&ask) {
                        let lease = Duration::from_millis(lease_ms);
                        let mut inner = pushed.inner();
                        inner.lease_until = Some(sent + lease - lease / 8);
                    }
                }
                Some(FromLeader::Notice { seq, answers, plans }) => {
                    let Some(noticed) = noticed.upgrade() else {
                        return "the agent is stopping";
                    };
                    noticed.noticed(&plans, Moment::now());
                    let gone = plans.iter().filter(|(_, p)| !matches!(
                        p,
                        Ok(_) | Err(Refusal::OffsetOutOfRange { .. })
                    ));
                    let gone: Vec<TopicPartition> = gone.map(|(tp, _)| *tp).collect();
                    {
                        let mut inner = pushed.inner();
                        if let Some(added) = answers.and_then(|a| inner.adding.remove(&a)) {
                            let now = Instant::now();
                            inner.watched.extend(added.into_iter().map(|tp| (tp, now)));
                        }
                        // A partition that went away is no longer covered:
                        // its fetches ask, and learn its error.
                        for tp in &gone {
                            inner.watched.remove(tp);
                        }
                    }
                    extents.forget(gone);
                    if sub.to_leader.try_send(ToLeader::Ack { seq }).is_err() {
                        return "the stream to the leader is full";
                    }
                }
            }
        }
    }
}

/// Watched partitions no fetch used lately, no longer watched.
fn unused(pushed: &Pushed) -> Vec<TopicPartition> {
    let mut inner = pushed.inner();
    let now = Instant::now();
    let unused: Vec<TopicPartition> = inner
        .watched
        .iter()
        .filter(|(_, used)| now.duration_since(**used) > UNUSED_FOR)
        .map(|(tp, _)| *tp)
        .collect();
    for tp in &unused {
        inner.watched.remove(tp);
    }
    unused
}
