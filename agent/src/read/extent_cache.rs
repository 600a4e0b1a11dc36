//! The read path's cache of extents (see docs/architecture.md, "Fetch"): a
//! local cache of immutable extents, so that a fetch asks the metastore nothing but a
//! confirmation when the agent already knows where its offsets are stored.
//!
//! Per partition it keeps a *view*: its log start and high watermark as last
//! learnt, and extents lying end to end over some of its offsets. A fetch
//! from an offset the view covers is planned from it; a fetch from the high
//! watermark is answered "nothing new" from it; anything else is a miss, and
//! the fetch asks the metastore once for all its misses ([`crate::handlers`]'
//! fetch). Views are fed by those answers and by the rounds that confirm
//! them ([`crate::read::watermarks`]).
//!
//! What a fetch reports is current: a view plans a fetch only if the
//! metastore confirmed it by an answer to a request sent after the fetch
//! began (`since`), so its high watermark is at least every one
//! acknowledged before then, through any agent, and every offset below it
//! is planned from extents the view holds or asked for. A fetch whose view
//! is older asks for what is new since the view's end ([`ExtentCache::stale`]),
//! one request for every such fetch of the agent at a time.
//!
//! Why a view's extents may be served without asking again: an extent that
//! was live when the metastore answered stays readable for at least
//! `gc_grace` after (compaction's swaps and trims make its object garbage,
//! and GC deletes garbage only `gc_grace` after it first sees it), so a
//! view's extents are trusted for a quarter of that, counted from when the
//! request was sent ([`ExtentCache::new`]'s `ttl`), leaving the rest for a
//! fetch that planned from them to wait for its response budget and read.
//! A confirmation brings the log start too, so a trim through any agent is
//! seen by the next fetch. A view's high watermark never moves back: an
//! answer older than what is known is dropped, so a waiting fetch never
//! sees its partition shrink.
//!
//! Transactions: a view also keeps the last stable offset (never moving
//! back) and the aborted transactions of its offsets. Claim: they are
//! complete for every offset below the view's LSO. Each answer's list is
//! complete for its extents' offsets as of its answer; a transaction that
//! aborted later was ongoing then, so its data lies at or past that
//! answer's LSO, and its marker at or past its high watermark, where the
//! next answer that extends the view (a confirmation asks from the view's
//! end) starts: that answer lists it, and brings the new LSO with it.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floe_metastore::txn::AbortedTxn;
use floe_metastore::{ExtentRef, ReadPlan, TopicPartition, TxnReadPlan};
use tokio::time::Instant;

/// Partitions with a view at most; past it, expired views go first, then all.
const MAX_VIEWS: usize = 10_000;
/// Extents one view keeps at most (the oldest go first). With the views,
/// this bounds the cache near 80 MiB (an extent is about 130 bytes).
const MAX_EXTENTS_PER_VIEW: usize = 64;
/// Aborted transactions one view keeps at most; a partition with more in
/// its view's offsets is not cached (each fetch asks).
const MAX_ABORTED_PER_VIEW: usize = 1_024;

struct View {
    log_start: i64,
    high_watermark: i64,
    /// The last stable offset as last learnt (never moving back).
    last_stable: i64,
    /// Aborted transactions with data in the view's offsets, by marker.
    aborted: Vec<AbortedTxn>,
    /// End to end, each holding offsets below `high_watermark`.
    extents: VecDeque<ExtentRef>,
    /// When the oldest of `extents` was learnt (from the metastore).
    learnt: Instant,
    /// The moment (its number) the last request was sent whose answer
    /// confirmed `high_watermark` (and the log start and LSO with it).
    confirmed: u64,
}

/// A moment of this process: when it was (for ages) and a number that
/// orders it strictly against every other moment taken here. Two moments
/// may share an instant (a paused clock, a coarse one), never a number, so
/// "a request sent after the fetch began" holds exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moment {
    pub at: Instant,
    seq: u64,
}

impl Moment {
    pub fn now() -> Moment {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Moment {
            at: Instant::now(),
            seq: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.at.elapsed()
    }
}

impl View {
    /// Its extents from the one holding `from`, about `max_bytes` (at least
    /// one), with what a read of them needs to know.
    fn plan(&self, from: i64, max_bytes: u64) -> TxnReadPlan {
        let plan = |extents: Vec<ExtentRef>| {
            let start = extents.first().map_or(from, |e| e.base_offset);
            let end = extents.last().map_or(from, |e| e.last_offset + 1);
            TxnReadPlan {
                plan: ReadPlan {
                    log_start_offset: self.log_start,
                    high_watermark: self.high_watermark,
                    extents,
                },
                last_stable_offset: self.last_stable,
                aborted: overlapping(&self.aborted, start, end),
            }
        };
        if from == self.high_watermark {
            return plan(Vec::new());
        }
        let mut extents = Vec::new();
        let mut bytes = 0;
        for extent in self.extents.iter().filter(|e| e.last_offset >= from) {
            if !extents.is_empty() && bytes >= max_bytes {
                break;
            }
            bytes += extent.length;
            extents.push(extent.clone());
        }
        plan(extents)
    }

    /// One past the last offset the extents hold.
    fn covered_to(&self) -> Option<i64> {
        self.extents.back().map(|e| e.last_offset + 1)
    }

    /// Whether a fetch from `from` can be planned from this view: its
    /// extents are not older than `ttl`, and it holds `from` (in its
    /// extents, or as its high watermark: nothing new).
    fn holds(&self, from: i64, ttl: Duration) -> bool {
        if self.learnt.elapsed() >= ttl || from < self.log_start || from > self.high_watermark {
            return false;
        }
        from == self.high_watermark
            || self
                .extents
                .front()
                .is_some_and(|first| first.base_offset <= from)
                && self.covered_to().is_some_and(|end| from < end)
    }
}

/// The least a view must hold to be as new as what a read lease brought:
/// the highest high watermark, log start and last stable offset taken in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Floor {
    pub high_watermark: i64,
    pub log_start: i64,
    pub last_stable: i64,
}

impl Floor {
    /// Raised to what `plan` says.
    pub fn raise(&mut self, plan: &TxnReadPlan) {
        self.high_watermark = self.high_watermark.max(plan.plan.high_watermark);
        self.log_start = self.log_start.max(plan.plan.log_start_offset);
        self.last_stable = self.last_stable.max(plan.last_stable_offset);
    }
}

pub struct ExtentCache {
    ttl: Duration,
    views: Mutex<HashMap<TopicPartition, View>>,
}

impl ExtentCache {
    /// Views' extents are trusted for `ttl` after they were learnt; zero
    /// caches nothing. `ttl` must stay well under `gc_grace` (see the
    /// module doc).
    pub fn new(ttl: Duration) -> Self {
        ExtentCache {
            ttl,
            views: Mutex::new(HashMap::new()),
        }
    }

    /// The plan for reading `tp` from `from` (about `max_bytes`, at least
    /// one extent), if the view can answer it for a fetch that began at
    /// `since`: it holds `from` and was confirmed since.
    pub fn plan(
        &self,
        tp: TopicPartition,
        from: i64,
        max_bytes: u64,
        since: Moment,
    ) -> Option<TxnReadPlan> {
        let views = self.views.lock().expect("extent cache lock poisoned");
        let view = views.get(&tp)?;
        if view.confirmed < since.seq || !view.holds(from, self.ttl) {
            return None;
        }
        Some(view.plan(from, max_bytes))
    }

    /// The plan for reading `tp` from `from` through `to`, if the view
    /// holds both, however long ago it was confirmed: records below the
    /// high watermark do not change, and a view younger than its `ttl`
    /// names extents that are still stored. (A share fetch reads what the
    /// metastore just handed out; it reports no high watermark.) With
    /// `aborted`, only below the view's last stable offset: its list of
    /// aborted transactions is complete there only.
    pub fn plan_covering(
        &self,
        tp: TopicPartition,
        (from, to): (i64, i64),
        max_bytes: u64,
        aborted: bool,
    ) -> Option<TxnReadPlan> {
        let views = self.views.lock().expect("extent cache lock poisoned");
        let view = views.get(&tp)?;
        if !view.holds(from, self.ttl) || view.covered_to().is_none_or(|end| to >= end) {
            return None;
        }
        if aborted && to >= view.last_stable {
            return None;
        }
        Some(view.plan(from, max_bytes))
    }

    /// Where to ask from, for a fetch that began at `since`, to have `tp`'s
    /// view confirmed: its end, if the view holds `from` but was not
    /// confirmed since (the answer extends it with whatever is new).
    /// `None` if the view can plan from `from` as it is, or cannot at all
    /// (a miss: the fetch asks from `from`).
    pub fn stale(&self, tp: TopicPartition, from: i64, since: Moment) -> Option<i64> {
        let views = self.views.lock().expect("extent cache lock poisoned");
        let view = views.get(&tp)?;
        (view.confirmed < since.seq && view.holds(from, self.ttl))
            .then(|| view.covered_to().unwrap_or(view.high_watermark))
    }

    /// What the metastore answered for `tp` (its plan from some offset), to
    /// a request sent at `asked` (the view's age counts from then: the
    /// extents were live when the metastore answered, which was after).
    pub fn learn(&self, tp: TopicPartition, txn_answer: &TxnReadPlan, asked: Moment) {
        self.learn_at(tp, txn_answer, asked.at, asked.seq);
    }

    /// What a notice pushed under a read lease brought for `tp`, taken in
    /// at `at`. It confirms nothing by itself: a notice may have been on
    /// its way after the lease lapsed or the watch ended, so only
    /// [`ExtentCache::reconfirm`] under a lease that holds marks the view
    /// current.
    pub fn learn_pushed(&self, tp: TopicPartition, txn_answer: &TxnReadPlan, at: Instant) {
        self.learn_at(tp, txn_answer, at, 0);
    }

    /// `learn`, the view confirmed at moment number `confirmed` at most.
    fn learn_at(&self, tp: TopicPartition, txn_answer: &TxnReadPlan, now: Instant, confirmed: u64) {
        let answer = &txn_answer.plan;
        if self.ttl.is_zero() {
            return;
        }
        let mut views = self.views.lock().expect("extent cache lock poisoned");
        if views.len() >= MAX_VIEWS && !views.contains_key(&tp) {
            views.retain(|_, v| v.learnt.elapsed() < self.ttl);
            if views.len() >= MAX_VIEWS {
                views.clear();
            }
        }
        let fresh = || View {
            log_start: answer.log_start_offset,
            high_watermark: answer.high_watermark,
            last_stable: txn_answer.last_stable_offset,
            aborted: Vec::new(),
            extents: VecDeque::new(),
            learnt: now,
            confirmed,
        };
        let view = views.entry(tp).or_insert_with(fresh);
        if answer.high_watermark < view.high_watermark {
            // Older than what is known, expired or not: a slower answer.
            return;
        }
        if view.learnt.elapsed() >= self.ttl {
            *view = fresh();
        }
        // Extents that continue the view are added to it; others replace it.
        // So does an answer without extents whose high watermark moved: it
        // was asked from elsewhere (a fetch from past the view's end), so
        // its aborted transactions say nothing of the view's offsets, and
        // its LSO must not cover them.
        let continues = match answer.extents.first() {
            Some(first) => Some(first.base_offset) == view.covered_to(),
            None => answer.high_watermark == view.high_watermark || view.extents.is_empty(),
        };
        if !continues {
            view.extents.clear();
            view.aborted.clear();
            view.learnt = now;
        }
        view.extents.extend(answer.extents.iter().cloned());
        for a in &txn_answer.aborted {
            if !view.aborted.contains(a) {
                view.aborted.push(*a);
            }
        }
        view.aborted.sort_by_key(|a| a.last_offset);
        view.high_watermark = answer.high_watermark;
        view.last_stable = view.last_stable.max(txn_answer.last_stable_offset);
        view.confirmed = view.confirmed.max(confirmed);
        view.log_start = view.log_start.max(answer.log_start_offset);
        let log_start = view.log_start;
        while view
            .extents
            .front()
            .is_some_and(|e| e.last_offset < log_start)
            || view.extents.len() > MAX_EXTENTS_PER_VIEW
        {
            view.extents.pop_front();
        }
        view.aborted.retain(|a| a.last_offset >= log_start);
        if view.aborted.len() > MAX_ABORTED_PER_VIEW {
            views.remove(&tp);
            return;
        }
        debug_assert!(
            view.extents
                .iter()
                .zip(view.extents.iter().skip(1))
                .all(|(a, b)| a.last_offset + 1 == b.base_offset),
            "a view's extents lie end to end"
        );
    }

    /// Marks `tp`'s view confirmed at `at` if it has taken in at least
    /// `floor` (the latest a read lease brought, see
    /// [`crate::read::pushed`]): it is then known current without asking.
    /// A view that lacks it (rebuilt from an older answer after it was
    /// forgotten, evicted or expired) is not: the fetch asks. Whether it
    /// was marked.
    pub fn reconfirm(&self, tp: TopicPartition, at: Moment, floor: Floor) -> bool {
        let mut views = self.views.lock().expect("extent cache lock poisoned");
        let Some(view) = views.get_mut(&tp) else {
            return false;
        };
        let current = view.high_watermark >= floor.high_watermark
            && view.log_start >= floor.log_start
            && view.last_stable >= floor.last_stable;
        if current {
            view.confirmed = view.confirmed.max(at.seq);
        }
        current
    }

    /// Forgets `tp`'s view: this agent committed to it or trimmed it.
    pub fn forget(&self, tps: impl IntoIterator<Item = TopicPartition>) {
        let mut views = self.views.lock().expect("extent cache lock poisoned");
        for tp in tps {
            views.remove(&tp);
        }
    }
}

/// The aborted transactions with data in `[from, to)` (for an empty range,
/// those that began before `from` and ended at or after it), as Kafka's
/// `collectAbortedTxns` selects them.
fn overlapping(aborted: &[AbortedTxn], from: i64, to: i64) -> Vec<AbortedTxn> {
    aborted
        .iter()
        .filter(|a| a.last_offset >= from && a.first_offset < to.max(from))
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(base: i64, last: i64) -> ExtentRef {
        ExtentRef {
            base_offset: base,
            last_offset: last,
            max_timestamp: 0,
            object_key: format!("ingest/{base}"),
            object_size: 100,
            position: 0,
            length: 10,
            appended_ms: 0,
        }
    }

    fn answer(log_start: i64, hw: i64, extents: Vec<ExtentRef>) -> TxnReadPlan {
        TxnReadPlan {
            plan: ReadPlan {
                log_start_offset: log_start,
                high_watermark: hw,
                extents,
            },
            last_stable_offset: hw,
            aborted: vec![],
        }
    }

    fn tp() -> TopicPartition {
        TopicPartition::new(uuid::Uuid::nil(), 0)
    }

    fn bases(plan: Option<TxnReadPlan>) -> Option<Vec<i64>> {
        plan.map(|p| p.plan.extents.iter().map(|e| e.base_offset).collect())
    }

    #[test]
    fn a_view_plans_what_it_covers_and_nothing_else() {
        let cache = ExtentCache::new(Duration::from_secs(60));
        let t0 = Moment::now();
        assert_eq!(cache.plan(tp(), 0, 100, t0), None, "nothing known");
        cache.learn(
            tp(),
            &answer(0, 30, vec![extent(0, 9), extent(10, 19)]),
            Moment::now(),
        );
        assert_eq!(bases(cache.plan(tp(), 5, 100, t0)), Some(vec![0, 10]));
        assert_eq!(bases(cache.plan(tp(), 12, 1, t0)), Some(vec![10]));
        assert_eq!(
            bases(cache.plan(tp(), 5, 1, t0)),
            Some(vec![0]),
            "at least one"
        );
        // Beyond the extents, below the high watermark: ask the metastore.
        assert_eq!(cache.plan(tp(), 20, 100, t0), None);
        // Out of range: the metastore answers with the error.
        assert_eq!(cache.plan(tp(), 31, 100, t0), None);
        // More of the same partition extends the view.
        cache.learn(tp(), &answer(0, 40, vec![extent(20, 39)]), Moment::now());
        assert_eq!(bases(cache.plan(tp(), 25, 100, t0)), Some(vec![20]));
        assert_eq!(bases(cache.plan(tp(), 0, 100, t0)), Some(vec![0, 10, 20]));
        // At the high watermark: nothing new, without asking.
        let tail = cache.plan(tp(), 40, 100, t0).unwrap();
        assert_eq!((tail.plan.extents.len(), tail.plan.high_watermark), (0, 40));
    }

    /// A fetch is planned only from a view confirmed by a request sent
    /// after it began: its high watermark is then at least every one
    /// acknowledged before. An older view says where to ask from (its end).
    #[test]
    fn a_view_plans_only_fetches_that_began_before_it_was_confirmed() {
        let cache = ExtentCache::new(Duration::from_secs(60));
        let t0 = Moment::now();
        cache.learn(tp(), &answer(0, 10, vec![extent(0, 9)]), t0);
        assert!(cache.plan(tp(), 0, 100, t0).is_some());
        assert!(cache.plan(tp(), 10, 100, t0).is_some());
        let later = Moment::now();
        assert_eq!(cache.plan(tp(), 0, 100, later), None, "not confirmed since");
        assert_eq!(cache.plan(tp(), 10, 100, later), None);
        assert_eq!(cache.stale(tp(), 0, later), Some(10), "ask from its end");
        assert_eq!(cache.stale(tp(), 10, later), Some(10));
        assert_eq!(cache.stale(tp(), 11, later), None, "a miss, not stale");
        assert_eq!(cache.stale(tp(), 0, t0), None, "fresh enough");
        // The confirmation brings what is new: the fetch from 0 now reports
        // the high watermark of 15 and plans through it.
        cache.learn(tp(), &answer(0, 15, vec![extent(10, 14)]), later);
        let plan = cache.plan(tp(), 0, 100, later).unwrap();
        assert_eq!(plan.plan.high_watermark, 15);
        assert_eq!(bases(Some(plan)), Some(vec![0, 10]));
        // Nothing new confirms it too.
        let latest = Moment::now();
        cache.learn(tp(), &answer(0, 15, vec![]), latest);
        assert_eq!(bases(cache.plan(tp(), 0, 100, latest)), Some(vec![0, 10]));
        assert_eq!(cache.stale(tp(), 0, latest), None);
    }

    #[test]
    fn an_older_answer_never_moves_the_high_watermark_back() {
        let cache = ExtentCache::new(Duration::from_secs(60));
        let t0 = Moment::now();
        cache.learn(
            tp(),
            &answer(0, 20, vec![extent(0, 9), extent(10, 19)]),
            Moment::now(),
        );
        cache.learn(tp(), &answer(0, 10, vec![extent(0, 9)]), Moment::now());
        assert_eq!(
            cache.plan(tp(), 20, 100, t0).unwrap().plan.high_watermark,
            20
        );
        // A trim seen in a later answer drops what lies below it.
        cache.learn(
            tp(),
            &answer(15, 30, vec![extent(10, 19), extent(20, 29)]),
            Moment::now(),
        );
        assert_eq!(cache.plan(tp(), 5, 100, t0), None);
        assert_eq!(bases(cache.plan(tp(), 15, 100, t0)), Some(vec![10, 20]));
    }

    #[test]
    fn views_expire_are_forgotten_and_a_zero_ttl_keeps_none() {
        let cache = ExtentCache::new(Duration::from_millis(50));
        let t0 = Moment::now();
        cache.learn(tp(), &answer(0, 10, vec![extent(0, 9)]), Moment::now());
        assert!(cache.plan(tp(), 0, 100, t0).is_some());
        cache.forget([tp()]);
        assert_eq!(cache.plan(tp(), 0, 100, t0), None);
        cache.learn(tp(), &answer(0, 10, vec![extent(0, 9)]), Moment::now());
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(cache.plan(tp(), 0, 100, t0), None, "expired");
        let none = ExtentCache::new(Duration::ZERO);
        none.learn(tp(), &answer(0, 10, vec![extent(0, 9)]), Moment::now());
        assert_eq!(none.plan(tp(), 0, 100, t0), None);
    }

    fn aborted(first: i64, last: i64, lso_after: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: 1,
            first_offset: first,
            last_offset: last,
            lso_after,
        }
    }

    /// A transaction open when the view was learnt holds its LSO; the poll's
    /// answer from the high watermark brings its marker, the new LSO and
    /// its aborted range, which later plans of the earlier offsets carry.
    #[test]
    fn a_view_keeps_the_last_stable_offset_and_the_aborted_transactions() {
        let cache = ExtentCache::new(Duration::from_secs(60));
        let t0 = Moment::now();
        let mut open = answer(0, 20, vec![extent(0, 9), extent(10, 19)]);
        open.last_stable_offset = 10;
        cache.learn(tp(), &open, Moment::now());
        let plan = cache.plan(tp(), 0, 100, t0).unwrap();
        assert_eq!((plan.last_stable_offset, plan.aborted.len()), (10, 0));
        // The poll, from the high watermark: the abort marker at 20.
        let mut ended = answer(0, 21, vec![extent(20, 20)]);
        ended.aborted = vec![aborted(10, 20, 21)];
        cache.learn(tp(), &ended, Moment::now());
        let plan = cache.plan(tp(), 0, 100, t0).unwrap();
        assert_eq!(plan.last_stable_offset, 21);
        assert_eq!(plan.aborted, vec![aborted(10, 20, 21)]);
        // Reading only below it: not told of it.
        let plan = cache.plan(tp(), 0, 1, t0).unwrap();
        assert_eq!(
            (bases(Some(plan.clone())), plan.aborted.len()),
            (Some(vec![0]), 0)
        );
        // An answer from past the view's end (a fetch at a later offset)
        // moves its LSO on: the view must not claim its offsets are stable
        // without the aborted transactions among them.
        let mut later = answer(0, 31, vec![]);
        later.last_stable_offset = 31;
        cache.learn(tp(), &later, Moment::now());
        assert_eq!(cache.plan(tp(), 0, 100, t0), None, "asked again");
        cache.learn(tp(), &ended, Moment::now());
        // An older answer moves nothing back.
        cache.learn(tp(), &open, Moment::now());
        assert_eq!(
            cache.plan(tp(), 31, 100, t0).unwrap().last_stable_offset,
            31
        );
        // A trim past the range forgets it.
        let mut trimmed = answer(31, 31, vec![]);
        trimmed.last_stable_offset = 31;
        cache.learn(tp(), &trimmed, Moment::now());
        assert!(cache.plan(tp(), 31, 100, t0).unwrap().aborted.is_empty());
    }
}
