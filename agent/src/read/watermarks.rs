//! The high watermarks that this agent's waiting fetches wait on, watched
//! with one metastore request per poll for all of them; and the
//! confirmations fetches ask for, made in the same rounds.
//!
//! A fetch that found nothing new waits for its partitions to grow. Asking
//! the metastore from every waiting fetch would cost one read per partition
//! per consumer per poll; here the agent asks once per poll for every
//! partition anyone waits on, however many consumers wait, and at once when
//! this agent commits (`Broker::commits`). The answer holds the new extents
//! too: they go into the [`ExtentCache`], so the woken fetches read them
//! without asking again. A partition that grows wakes only the fetches
//! waiting on it.
//!
//! A fetch reports the current high watermark: one whose views were not
//! confirmed since it began asks for a confirmation ([`Watermarks::confirm`])
//! and waits for the next round to start and answer. Every fetch that asks
//! meanwhile shares that round's request, so the metastore sees at most
//! one request per round trip, however many fetches the agent serves.
//!
//! Under a read lease ([`crate::read::pushed`]) the metastore pushes the
//! changes of the partitions this agent watches: their fetches confirm and
//! wait without rounds, and polls leave them out. The others (and all of
//! them without a lease) go by rounds, and are watched from their first.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use floe_metastore::{Metastore, Refusal, TopicId, TopicPartition, TxnReadPlan};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::read::extent_cache::{ExtentCache, Moment};
use crate::read::pushed::{Noticed, Pushed};
use crate::tasks::Tasks;

/// Bytes of new extents a poll asks for per partition; a fetch asks for more
/// when it needs them.
const POLL_BYTES: u64 = 1024 * 1024;

type Key = TopicPartition;

struct Watched {
    /// The highest high watermark known (seen by a fetch or polled).
    high_watermark: i64,
    /// The fetches waiting on this partition, by their number: woken when
    /// it grows, and only then (a commit to one partition wakes none of the
    /// fetches waiting on others).
    waiters: BTreeMap<u64, Arc<Notify>>,
}

impl Watched {
    fn wake(&self) {
        // A permit is kept for a waiter not yet waiting: no wake-up is lost.
        self.waiters.values().for_each(|n| n.notify_one());
    }
}

/// Confirmations asked for, and the number of the round that will ask.
struct Confirmations {
    asks: BTreeMap<Key, i64>,
    round: u64,
}

/// Longest a fetch waits for a round to confirm its views; past it, the
/// fetch asks the metastore alone (and gets its error).
const CONFIRM_WITHIN: Duration = Duration::from_secs(5);

pub struct Watermarks {
    watched: Mutex<BTreeMap<Key, Watched>>,
    /// Partitions a read lease keeps current without asking.
    pushed: Arc<Pushed>,
    extents: Arc<ExtentCache>,
    confirmations: Mutex<Confirmations>,
    /// Wakes the poll loop to start a round for the confirmations asked.
    confirm_wanted: Arc<Notify>,
    /// The number of the last round answered (or failed).
    rounds: watch::Sender<u64>,
    /// Numbers the waiting fetches.
    next_waiter: AtomicU64,
    /// Times a waiting fetch was woken (grown or not), for tests.
    wakeups: AtomicU64,
}

impl Watermarks {
    /// The agent's subscription to pushed changes.
    pub fn pushed(&self) -> &Arc<Pushed> {
        &self.pushed
    }

    /// Starts polling `meta`, on `tasks`, every `poll` while anything is
    /// watched, and as soon as `commits` (this agent's) changes; what it
    /// learns goes into `extents` too.
    pub fn start(
        tasks: &Tasks,
        meta: Arc<dyn Metastore>,
        extents: Arc<ExtentCache>,
        poll: Duration,
        commits: watch::Receiver<u64>,
    ) -> Arc<Watermarks> {
        let watermarks = Arc::new(Watermarks {
            watched: Mutex::new(BTreeMap::new()),
            pushed: Arc::new(Pushed::default()),
            extents: extents.clone(),
            confirmations: Mutex::new(Confirmations {
                asks: BTreeMap::new(),
                round: 1,
            }),
            confirm_wanted: Arc::new(Notify::new()),
            rounds: watch::channel(0).0,
            next_waiter: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
        });
        let noticed: Arc<dyn Noticed> = watermarks.clone();
        tasks.spawn(crate::read::pushed::run(
            Arc::downgrade(&watermarks.pushed),
            meta.clone(),
            Arc::downgrade(&noticed),
            extents.clone(),
        ));
        tasks.spawn(poll_loop(
            Arc::downgrade(&watermarks),
            meta,
            extents,
            poll,
            commits,
        ));
        watermarks
    }

    /// Waits until one of `partitions` (topic, partition, high watermark the
    /// caller saw) has grown past what the caller saw (true), or until
    /// `deadline` (false).
    pub async fn wait_for_growth(
        &self,
        partitions: &[(TopicId, i32, i64)],
        deadline: Instant,
    ) -> bool {
        let watching = Watching::new(self, partitions);
        loop {
            if self.any_grew(partitions) {
                return true;
            }
            if tokio::time::timeout_at(deadline, watching.woken.notified())
                .await
                .is_err()
            {
                return false;
            }
            self.wakeups.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Has each of `asks` (a partition, and the offset to ask from) asked
    /// of the metastore in a round that starts after this call, and waits
    /// for that round's answer (learnt into the extent cache). A round
    /// under way when this is called may have sent its request before:
    /// its answer is not waited for.
    pub async fn confirm(&self, asks: Vec<(Key, i64)>) {
        // Views a read lease covers are current now if they hold what the
        // lease brought: confirmed without a round (at a moment after the
        // fetch began, taken before the lease was checked). The others ask
        // a round, and are watched from now.
        let now = Moment::now();
        let asks: Vec<(Key, i64)> = asks
            .into_iter()
            .filter(|&(key, from)| match self.pushed.covers(key) {
                Some(floor) => !self.extents.reconfirm(key, now, floor),
                None => {
                    self.pushed.want(key, from);
                    true
                }
            })
            .collect();
        if asks.is_empty() {
            return;
        }
        let mut answered = self.rounds.subscribe();
        let round = {
            let mut confirmations = self.confirmations.lock().expect("watermarks lock poisoned");
            for (key, from) in asks {
                let at = confirmations.asks.entry(key).or_insert(from);
                *at = (*at).min(from);
            }
            confirmations.round
        };
        self.confirm_wanted.notify_one();
        let _ = tokio::time::timeout(CONFIRM_WITHIN, answered.wait_for(|&r| r >= round)).await;
    }

    /// The confirmations asked for, taken by the round that starts now,
    /// and that round's number.
    fn start_round(&self) -> (BTreeMap<Key, i64>, u64) {
        let mut confirmations = self.confirmations.lock().expect("watermarks lock poisoned");
        let round = confirmations.round;
        confirmations.round += 1;
        (std::mem::take(&mut confirmations.asks), round)
    }

    fn any_grew(&self, partitions: &[(TopicId, i32, i64)]) -> bool {
        let watched = self.watched.lock().expect("watermarks lock poisoned");
        partitions.iter().any(|&(topic, partition, seen)| {
            watched
                .get(&TopicPartition::new(topic, partition))
                .is_some_and(|w| w.high_watermark > seen)
        })
    }

    #[cfg(test)]
    fn watched_keys(&self) -> Vec<Key> {
        let watched = self.watched.lock().expect("watermarks lock poisoned");
        watched.keys().copied().collect()
    }

    /// Each watched partition, and the offset to ask for what is new from:
    /// the highest high watermark its waiters saw (not where a view ends,
    /// which a lagging reader's view may hold far behind).
    /// Those a read lease covers are not: their changes are pushed.
    fn to_poll(&self) -> Vec<(Key, i64)> {
        let watched = self.watched.lock().expect("watermarks lock poisoned");
        watched
            .iter()
            .filter(|(key, _)| self.pushed.covers(**key).is_none())
            .map(|(key, w)| (*key, w.high_watermark))
            .collect()
    }

    fn update(&self, keys: &[Key], high_watermarks: &[Option<i64>]) {
        let mut watched = self.watched.lock().expect("watermarks lock poisoned");
        for (key, polled) in keys.iter().zip(high_watermarks) {
            if let (Some(w), Some(hw)) = (watched.get_mut(key), polled)
                && *hw > w.high_watermark
            {
                w.high_watermark = *hw;
                w.wake();
            }
        }
    }
}

/// Registers a waiting fetch's partitions for as long as it lives.
struct Watching<'a> {
    watermarks: &'a Watermarks,
    number: u64,
    woken: Arc<Notify>,
    keys: Vec<Key>,
}

impl<'a> Watching<'a> {
    fn new(watermarks: &'a Watermarks, partitions: &[(TopicId, i32, i64)]) -> Self {
        let number = watermarks.next_waiter.fetch_add(1, Ordering::Relaxed);
        let woken = Arc::new(Notify::new());
        let mut watched = watermarks.watched.lock().expect("watermarks lock poisoned");
        for &(topic, partition, seen) in partitions {
            let w = watched
                .entry(TopicPartition::new(topic, partition))
                .or_insert(Watched {
                    high_watermark: seen,
                    waiters: BTreeMap::new(),
                });
            // A newcomer that saw more than the others: they wake to read
            // it (the poll would not, finding nothing above what it knows).
            if seen > w.high_watermark {
                w.high_watermark = seen;
                w.wake();
            }
            w.waiters.insert(number, woken.clone());
        }
        drop(watched);
        for &(topic, partition, seen) in partitions {
            let key = TopicPartition::new(topic, partition);
            if watermarks.pushed.covers(key).is_none() {
                watermarks.pushed.want(key, seen);
            }
        }
        Watching {
            watermarks,
            number,
            woken,
            keys: partitions
                .iter()
                .map(|&(t, p, _)| TopicPartition::new(t, p))
                .collect(),
        }
    }
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        let mut watched = self
            .watermarks
            .watched
            .lock()
            .expect("watermarks lock poisoned");
        for key in &self.keys {
            if let Some(w) = watched.get_mut(key) {
                w.waiters.remove(&self.number);
                if w.waiters.is_empty() {
                    watched.remove(key);
                }
            }
        }
    }
}

async fn poll_loop(
    watermarks: Weak<Watermarks>,
    meta: Arc<dyn Metastore>,
    extents: Arc<ExtentCache>,
    poll: Duration,
    mut commits: watch::Receiver<u64>,
) {
    let mut ticks = tokio::time::interval(poll);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut committing = true;
    // Held apart, so that the loop does not keep the watermarks alive.
    let Some(confirm_wanted) = watermarks.upgrade().map(|w| w.confirm_wanted.clone()) else {
        return;
    };
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            changed = commits.changed(), if committing => committing = changed.is_ok(),
            _ = confirm_wanted.notified() => {}
        }
        let Some(w) = watermarks.upgrade() else {
            return;
        };
        let (confirm, round) = w.start_round();
        let mut asks: BTreeMap<Key, i64> = w.to_poll().into_iter().collect();
        for (key, from) in confirm {
            let at = asks.entry(key).or_insert(from);
            *at = (*at).min(from);
        }
        let asks: Vec<(Key, i64)> = asks.into_iter().collect();
        if !asks.is_empty() {
            let asked = Moment::now();
            match meta.txn_read_plans(asks.clone(), POLL_BYTES).await {
                Ok(plans) => {
                    let keys: Vec<Key> = asks.iter().map(|(key, _)| *key).collect();
                    let high_watermarks: Vec<Option<i64>> = keys
                        .iter()
                        .zip(&plans)
                        .map(|(key, plan)| learn(&extents, *key, plan, asked))
                        .collect();
                    w.update(&keys, &high_watermarks);
                }
                Err(e) => tracing::debug!(error = %e, "polling high watermarks failed"),
            }
        }
        // Answered or not: what it did not confirm, its fetches ask alone.
        w.rounds.send_replace(round);
    }
}

impl Noticed for Watermarks {
    /// A notice is a round the leader ran for this agent, taken in alike
    /// except that it confirms no view by itself (see
    /// `Watermarks::confirm`).
    fn noticed(&self, plans: &[(Key, Result<TxnReadPlan, Refusal>)], at: Instant) {
        let keys: Vec<Key> = plans.iter().map(|(key, _)| *key).collect();
        let high_watermarks: Vec<Option<i64>> = plans
            .iter()
            .map(|(key, plan)| match plan {
                Ok(plan) => {
                    self.extents.learn_pushed(*key, plan, at);
                    Some(plan.plan.high_watermark)
                }
                other => learn(&self.extents, *key, other, Moment::now()),
            })
            .collect();
        self.update(&keys, &high_watermarks);
    }
}

/// Puts a polled plan into the cache; its high watermark, if any.
fn learn(
    extents: &ExtentCache,
    key: Key,
    plan: &Result<TxnReadPlan, Refusal>,
    asked: Moment,
) -> Option<i64> {
    match plan {
        Ok(plan) => {
            extents.learn(key, plan, asked);
            Some(plan.plan.high_watermark)
        }
        // Trimmed past what the view knew: forget it, so the next fetch
        // asks and gets the new log start (or its error).
        Err(Refusal::OffsetOutOfRange { high_watermark, .. }) => {
            extents.forget([key]);
            Some(*high_watermark)
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_metastore::{Commit, CommitBatch, LocalMetastore, NewTopic};

    /// A topic of two partitions, and watermarks polled every 10 ms.
    async fn two_partitions() -> (
        Arc<dyn Metastore>,
        floe_metastore::TopicInfo,
        Arc<ExtentCache>,
        Arc<Watermarks>,
        watch::Sender<u64>,
    ) {
        let meta: Arc<dyn Metastore> = Arc::new(LocalMetastore::in_memory().await.unwrap());
        let topic = meta
            .create_topic(NewTopic {
                name: "w".into(),
                partitions: 2,
                configs: Default::default(),
            })
            .await
            .unwrap();
        let extents = Arc::new(ExtentCache::new(Duration::from_secs(10)));
        let (commits, committed) = watch::channel(0);
        let watermarks = Watermarks::start(
            &Tasks::default(),
            meta.clone(),
            extents.clone(),
            Duration::from_millis(10),
            committed,
        );
        (meta, topic, extents, watermarks, commits)
    }

    /// A metastore that counts the read plans it is asked for, and answers
    /// them a round trip of 50 ms late.
    struct Counting {
        inner: LocalMetastore,
        plans: AtomicU64,
    }

    impl floe_metastore::api::Transport for Counting {
        fn call<O: floe_metastore::api::Op>(
            &self,
            op: O,
        ) -> impl std::future::Future<Output = Result<O::Output, floe_metastore::MetaError>> + Send
        {
            let plans = std::any::type_name::<O>().ends_with("TxnReadPlans");
            if plans {
                self.plans.fetch_add(1, Ordering::Relaxed);
            }
            async move {
                if plans {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                self.inner.call(op).await
            }
        }

        /// Its notices arrive 100 ms late: an agent that trusted its lease
        /// before taking in a notice would show an old high watermark.
        async fn subscribe(
            &self,
        ) -> Result<floe_metastore::push::Subscription, floe_metastore::MetaError> {
            let mut inner = floe_metastore::Transport::subscribe(&self.inner).await?;
            let (late, from_leader) = tokio::sync::mpsc::channel(1024);
            tokio::spawn(async move {
                while let Some(message) = inner.from_leader.recv().await {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if late.send(message).await.is_err() {
                        return;
                    }
                }
            });
            Ok(floe_metastore::push::Subscription {
                to_leader: inner.to_leader,
                from_leader,
            })
        }
    }

    /// A topic of one partition holding one record, and watermarks on
    /// `meta` (polling seldom: only confirmations start rounds) once they
    /// hold a lease and watch the partition (its first fetch asked a
    /// round).
    pub(super) async fn watching_under_a_lease(
        meta: Arc<dyn Metastore>,
    ) -> (Arc<Watermarks>, Arc<ExtentCache>, TopicPartition) {
        let topic = meta
            .create_topic(NewTopic {
                name: "leased".into(),
                partitions: 1,
                configs: Default::default(),
            })
            .await
            .unwrap();
        commit_batch(meta.as_ref(), topic.id, 0, 1, "c0").await;
        let extents = Arc::new(ExtentCache::new(Duration::from_secs(10)));
        let (_commits, committed) = watch::channel(0);
        let watermarks = Watermarks::start(
            &Tasks::default(),
            meta,
            extents.clone(),
            Duration::from_secs(3600),
            committed,
        );
        let tp = TopicPartition::new(topic.id, 0);
        eventually("a lease", || watermarks.pushed.lease_holds()).await;
        watermarks.confirm(vec![(tp, 0)]).await;
        eventually("the watch", || watermarks.pushed.covers(tp).is_some()).await;
        (watermarks, extents, tp)
    }

    /// Waits up to 10 s for `done`.
    pub(super) async fn eventually(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "never: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Under a read lease, fetches confirm without asking the metastore and
    /// still see every commit answered before they began (the leader
    /// answers a commit only once this agent took its notice in); a
    /// fetch waiting on the partition is woken by the notice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_a_lease_fetches_ask_nothing_and_see_every_commit() {
        let mut options = floe_metastore::NodeOptions::new(1, "in-process");
        options.heartbeat_ms = 20;
        options.read_lease = Some(Duration::from_secs(2));
        let node = floe_metastore::RaftMetastore::start(options).await.unwrap();
        node.wait_until_leader(Duration::from_secs(10))
            .await
            .unwrap();
        let counting = Arc::new(Counting {
            inner: node,
            plans: AtomicU64::new(0),
        });
        let meta: Arc<dyn Metastore> = counting.clone();
        let (watermarks, extents, tp) = watching_under_a_lease(meta.clone()).await;
        let before = counting.plans.load(Ordering::Relaxed);
        for n in 1..=5 {
            let waiting = tokio::spawn({
                let watermarks = watermarks.clone();
                async move {
                    let deadline = Instant::now() + Duration::from_secs(10);
                    watermarks
                        .wait_for_growth(&[(tp.topic_id, 0, n)], deadline)
                        .await
                }
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
            commit_batch(meta.as_ref(), tp.topic_id, 0, 1, &format!("c{n}")).await;
            let began = Moment::now();
            watermarks.confirm(vec![(tp, 0)]).await;
            let plan = extents
                .plan(tp, 0, 1 << 20, began)
                .expect("confirmed since it began");
            assert_eq!(
                plan.plan.high_watermark,
                n + 1,
                "a commit answered before it"
            );
            assert!(waiting.await.unwrap(), "the waiting fetch was not woken");
        }
        assert_eq!(
            counting.plans.load(Ordering::Relaxed),
            before,
            "asked under a lease"
        );
    }

    /// Fetches that ask for confirmations at once share the metastore
    /// requests of a round or two, and each returns only once a round sent
    /// after it asked has answered: its view is then confirmed since.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn confirmations_asked_at_once_share_a_round() {
        let counting = Arc::new(Counting {
            inner: LocalMetastore::in_memory().await.unwrap(),
            plans: AtomicU64::new(0),
        });
        let meta: Arc<dyn Metastore> = counting.clone();
        let topic = meta
            .create_topic(NewTopic {
                name: "c".into(),
                partitions: 1,
                configs: Default::default(),
            })
            .await
            .unwrap();
        commit_elsewhere(&meta, topic.id, 0, 5).await;
        let extents = Arc::new(ExtentCache::new(Duration::from_secs(10)));
        let (_commits, committed) = watch::channel(0);
        // Polls seldom: only confirmations start rounds here.
        let watermarks = Watermarks::start(
            &Tasks::default(),
            meta.clone(),
            extents.clone(),
            Duration::from_secs(3600),
            committed,
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        let before = counting.plans.load(Ordering::Relaxed);
        let tp = TopicPartition::new(topic.id, 0);
        let fetches: Vec<_> = (0..64)
            .map(|_| {
                let (watermarks, extents) = (watermarks.clone(), extents.clone());
                tokio::spawn(async move {
                    let began = Moment::now();
                    watermarks.confirm(vec![(tp, 0)]).await;
                    extents.plan(tp, 0, 1 << 20, began).is_some()
                })
            })
            .collect();
        for fetch in fetches {
            assert!(fetch.await.unwrap(), "not confirmed since it asked");
        }
        let rounds = counting.plans.load(Ordering::Relaxed) - before;
        assert!(
            (1..=3).contains(&rounds),
            "{rounds} requests for 64 fetches"
        );
    }

    /// `records` records of `partition` committed as another agent would.
    async fn commit_elsewhere(
        meta: &Arc<dyn Metastore>,
        topic: TopicId,
        partition: i32,
        records: i32,
    ) {
        let key = format!("elsewhere-{partition}");
        commit_batch(meta.as_ref(), topic, partition, records, &key).await;
    }

    /// Commits one batch of `records` to `partition` in object `key`.
    pub(super) async fn commit_batch(
        meta: &dyn Metastore,
        topic: TopicId,
        partition: i32,
        records: i32,
        key: &str,
    ) {
        let commit = Commit {
            object_key: key.into(),
            object_size: 10,
            batches: vec![CommitBatch {
                topic_id: topic,
                partition,
                position: 0,
                length: 10,
                record_count: records,
                max_timestamp: 0,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            }],
            not_before_ms: meta.clock().await.unwrap(),
        };
        meta.commit(commit).await.unwrap();
    }

    /// A waiter that saw more than those already waiting wakes them: the
    /// poll, finding nothing above what it was told, would not.
    #[tokio::test]
    async fn a_waiter_that_saw_more_wakes_the_others() {
        let meta: Arc<dyn Metastore> = Arc::new(LocalMetastore::in_memory().await.unwrap());
        let extents = Arc::new(ExtentCache::new(Duration::from_secs(10)));
        let (_commits, committed) = watch::channel(0);
        let watermarks = Watermarks::start(
            &Tasks::default(),
            meta.clone(),
            extents,
            Duration::from_millis(10),
            committed,
        );
        let id = floe_metastore::random_id();
        let first = {
            let w = watermarks.clone();
            tokio::spawn(async move {
                w.wait_for_growth(&[(id, 0, 40)], Instant::now() + Duration::from_secs(10))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = Instant::now();
        let second = {
            let w = watermarks.clone();
            tokio::spawn(async move {
                w.wait_for_growth(&[(id, 0, 50)], Instant::now() + Duration::from_millis(200))
                    .await
            })
        };
        assert!(first.await.unwrap(), "woken by what the second saw");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(!second.await.unwrap());
    }

    #[tokio::test]
    async fn waiters_wake_when_another_agent_commits_and_share_one_poll() {
        let (meta, topic, extents, watermarks, _commits) = two_partitions().await;

        // Nothing grows: the wait ends at its deadline.
        let started = Instant::now();
        let deadline = started + Duration::from_millis(100);
        assert!(
            !watermarks
                .wait_for_growth(&[(topic.id, 0, 0)], deadline)
                .await
        );
        assert!(Instant::now() >= deadline);
        assert!(
            watermarks.watched_keys().is_empty(),
            "a finished wait unregisters"
        );

        // Ten waiters on the same partitions, woken by one commit.
        let waiters: Vec<_> = (0..10)
            .map(|_| {
                let w = watermarks.clone();
                let id = topic.id;
                tokio::spawn(async move {
                    let deadline = Instant::now() + Duration::from_secs(10);
                    w.wait_for_growth(&[(id, 0, 0), (id, 1, 0)], deadline).await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(watermarks.watched_keys().len(), 2);
        let before_the_poll = Moment::now();
        commit_elsewhere(&meta, topic.id, 1, 3).await;
        for waiter in waiters {
            assert!(waiter.await.unwrap(), "woken before the deadline");
        }
        // The poll brought the new extent: a fetch reads it without asking.
        let tp1 = TopicPartition::new(topic.id, 1);
        let plan = extents
            .plan(tp1, 0, 1 << 20, before_the_poll)
            .expect("learnt by the poll");
        assert_eq!((plan.plan.extents.len(), plan.plan.high_watermark), (1, 3));
        // A caller that already saw the new high watermark keeps waiting.
        let deadline = Instant::now() + Duration::from_millis(50);
        assert!(
            !watermarks
                .wait_for_growth(&[(topic.id, 1, 3)], deadline)
                .await
        );
    }

    /// A commit to one partition wakes the fetches waiting on it, and none
    /// of those waiting on another partition.
    #[tokio::test]
    async fn a_commit_wakes_only_its_partitions_waiters() {
        let (meta, topic, _extents, watermarks, _commits) = two_partitions().await;
        let wait_on = |partition: i32, for_ms: u64| {
            let w = watermarks.clone();
            let id = topic.id;
            tokio::spawn(async move {
                let deadline = Instant::now() + Duration::from_millis(for_ms);
                w.wait_for_growth(&[(id, partition, 0)], deadline).await
            })
        };
        let on_zero: Vec<_> = (0..5).map(|_| wait_on(0, 10_000)).collect();
        let on_one: Vec<_> = (0..5).map(|_| wait_on(1, 1_000)).collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        commit_elsewhere(&meta, topic.id, 0, 1).await;
        for waiter in on_zero {
            assert!(waiter.await.unwrap());
        }
        for waiter in on_one {
            assert!(!waiter.await.unwrap(), "partition 1 never grew");
        }
        // Each of partition 0's waiters woke once; partition 1's never did
        // (with one signal for every growth, all ten woke).
        assert_eq!(watermarks.wakeups.load(Ordering::Relaxed), 5);
    }
}

#[cfg(test)]
mod lease_tests {
    use std::sync::atomic::AtomicBool;

    use floe_metastore::LocalMetastore;
    use floe_metastore::push::{FromLeader, Subscription, ToLeader};

    use super::tests::{commit_batch, eventually, watching_under_a_lease};
    use super::*;

    /// A metastore whose subscription this test plays the leader of:
    /// renewals granted (2 s) while `granting`, watches answered with the
    /// partitions' plans, and notices injected through `notices`.
    struct Played {
        inner: Arc<LocalMetastore>,
        plans: AtomicU64,
        granting: Arc<AtomicBool>,
        notices: Mutex<Option<tokio::sync::mpsc::Sender<FromLeader>>>,
    }

    impl floe_metastore::api::Transport for Played {
        async fn call<O: floe_metastore::api::Op>(
            &self,
            op: O,
        ) -> Result<O::Output, floe_metastore::MetaError> {
            if std::any::type_name::<O>().ends_with("TxnReadPlans") {
                self.plans.fetch_add(1, Ordering::Relaxed);
            }
            self.inner.call(op).await
        }

        async fn subscribe(&self) -> Result<Subscription, floe_metastore::MetaError> {
            let (to_leader, mut asks) = tokio::sync::mpsc::channel(1024);
            let (out, from_leader) = tokio::sync::mpsc::channel(1024);
            *self.notices.lock().unwrap() = Some(out.clone());
            let (inner, granting) = (self.inner.clone(), self.granting.clone());
            tokio::spawn(async move {
                let mut seq = 0;
                while let Some(ask) = asks.recv().await {
                    let said = match ask {
                        ToLeader::Renew { ask } if granting.load(Ordering::Relaxed) => {
                            FromLeader::Renewed {
                                ask,
                                lease_ms: 2000,
                                versions: Default::default(),
                            }
                        }
                        ToLeader::Watch { ask, add, .. } => {
                            let plans = inner.txn_read_plans(add.clone(), 1 << 20).await.unwrap();
                            seq += 1;
                            let plans = add.iter().map(|(tp, _)| *tp).zip(plans).collect();
                            FromLeader::Notice {
                                seq,
                                answers: Some(ask),
                                plans,
                            }
                        }
                        _ => continue,
                    };
                    if out.send(said).await.is_err() {
                        return;
                    }
                }
            });
            Ok(Subscription {
                to_leader,
                from_leader,
            })
        }
    }

    impl Played {
        /// Pushes a notice of `tp`'s plan from `from`, as the metastore
        /// holds it now.
        async fn notice(&self, tp: TopicPartition, from: i64) {
            let plans = self.inner.txn_read_plans(vec![(tp, from)], 1 << 20).await;
            let notices = self.notices.lock().unwrap().clone().unwrap();
            let notice = FromLeader::Notice {
                seq: 1000,
                answers: None,
                plans: vec![(tp, plans.unwrap().remove(0))],
            };
            notices.send(notice).await.unwrap();
        }
    }

    /// A topic with one record, watermarks on a played leader holding a
    /// lease, the partition watched.
    async fn leased() -> (
        Arc<Played>,
        Arc<Watermarks>,
        Arc<ExtentCache>,
        TopicPartition,
    ) {
        let played = Arc::new(Played {
            inner: Arc::new(LocalMetastore::in_memory().await.unwrap()),
            plans: AtomicU64::new(0),
            granting: Arc::new(AtomicBool::new(true)),
            notices: Mutex::new(None),
        });
        let (watermarks, extents, tp) = watching_under_a_lease(played.clone()).await;
        (played, watermarks, extents, tp)
    }

    /// A notice that arrives after the lease lapsed (on its way, or sent
    /// past the leader's expiry) confirms no view: a fetch that began
    /// before it arrived is not answered from it without asking.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_late_notice_confirms_nothing() {
        let (played, watermarks, extents, tp) = leased().await;
        played.granting.store(false, Ordering::Relaxed);
        eventually("the lease lapses", || !watermarks.pushed.lease_holds()).await;
        commit_batch(played.as_ref(), tp.topic_id, 0, 1, "b").await;
        let began = Moment::now();
        played.notice(tp, 1).await;
        eventually("the notice is taken in", || {
            extents
                .plan_covering(tp, (0, 1), 1, false)
                .is_some_and(|p| p.plan.high_watermark == 2)
        })
        .await;
        assert!(
            extents.plan(tp, 0, 1 << 20, began).is_none(),
            "a late notice confirmed the view"
        );
    }

    /// A view rebuilt from an answer older than what the lease brought (it
    /// was forgotten, then a late round taught it again) is not current:
    /// the fetch asks, and sees the newer high watermark.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_view_older_than_the_leases_news_is_asked_again() {
        let (played, watermarks, extents, tp) = leased().await;
        let old = played
            .inner
            .txn_read_plans(vec![(tp, 0)], 1 << 20)
            .await
            .unwrap();
        commit_batch(played.as_ref(), tp.topic_id, 0, 1, "b").await;
        played.notice(tp, 1).await;
        eventually("the notice is taken in", || {
            watermarks
                .pushed
                .covers(tp)
                .is_some_and(|f| f.high_watermark == 2)
        })
        .await;
        extents.forget([tp]);
        extents.learn(tp, old[0].as_ref().unwrap(), Moment::now());
        let asked = played.plans.load(Ordering::Relaxed);
        let began = Moment::now();
        watermarks.confirm(vec![(tp, 0)]).await;
        let plan = extents
            .plan(tp, 0, 1 << 20, began)
            .expect("confirmed since it began");
        assert_eq!(
            plan.plan.high_watermark, 2,
            "an older view passed for current"
        );
        assert_eq!(
            played.plans.load(Ordering::Relaxed),
            asked + 1,
            "it asked a round"
        );
    }
}
