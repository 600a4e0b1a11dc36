//! Every object key the sequencer has heard of, and what became of it.
//!
//! This is what makes commits exact and garbage collection fenced, by
//! construction rather than by timing:
//!
//! - A key is sequenced at most once. A commit of a key seen before is
//!   answered with its first answer while that is remembered, and refused
//!   (a retriable error for its producers) once it is not: never sequenced
//!   again, so no offsets are assigned twice and no two objects share a key.
//! - A key that is live (extents point into it) is never declared an orphan:
//!   the orphan sweep's decision is a command, applied in log order, that
//!   skips live keys. A key declared an orphan or collected is *retired*, and
//!   a later commit of it is refused, so GC can never delete an object whose
//!   commit was acknowledged.
//! - Retired keys are remembered while their object may still exist
//!   (garbage not yet deleted), and [`KEY_MEMORY_MS`] after it was deleted.
//!   Every commit carries the metastore's time read before its upload, and
//!   is refused past [`COMMIT_WINDOW_MS`] of it, which is shorter: no
//!   commit, however delayed (an agent paused for hours between upload and
//!   commit), can reach a key the ledger has forgotten.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::Refusal;

/// How long (on the metastore's clock) a deleted object's key stays retired.
pub const KEY_MEMORY_MS: i64 = 3_600_000;
/// A commit (or compaction swap) is refused when its upload began longer
/// ago than this on the metastore's clock. Being shorter than
/// [`KEY_MEMORY_MS`], no commit can outlive the memory of its key: a key
/// retired at or after the upload began is forgotten only after every commit
/// of it would be refused anyway.
pub const COMMIT_WINDOW_MS: i64 = 600_000;
/// How long a commit's answer is kept to answer its retries...
pub const ANSWER_MEMORY_MS: i64 = 300_000;
/// ...and at most this many batch results in all (a retry past either gets a
/// retriable error, never a second sequencing)...
pub const ANSWERS_MAX_RESULTS: usize = 200_000;
/// ...but every answer is kept at least this long, longer than an agent
/// retries a commit (60 s): a retry of an applied commit whose reply was lost
/// gets its answer, not an error its producers would retry into a duplicate.
pub const ANSWER_MIN_MS: i64 = 120_000;

/// A key no object uses any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Retired {
    since_ms: i64,
    /// Deleted from the store (no longer on the GC list).
    collected: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// Keys of live objects, with the object id.
    live: BTreeMap<String, u64>,
    retired: BTreeMap<String, Retired>,
    /// The answers of recent commits, oldest first.
    answers: BTreeMap<String, Vec<Result<i64, Refusal>>>,
    answer_order: VecDeque<(i64, String)>,
    answer_results: usize,
}

/// What a commit of a key may do.
pub enum Seen {
    New,
    /// Sequenced before: its answer.
    Answered(Vec<Result<i64, Refusal>>),
    /// Live, retired, or sequenced with its answer forgotten.
    Used,
}

impl Ledger {
    pub fn seen(&self, key: &str) -> Seen {
        if let Some(answer) = self.answers.get(key) {
            return Seen::Answered(answer.clone());
        }
        if self.live.contains_key(key) || self.retired.contains_key(key) {
            return Seen::Used;
        }
        Seen::New
    }

    pub fn is_known(&self, key: &str) -> bool {
        !matches!(self.seen(key), Seen::New)
    }

    pub fn is_live(&self, key: &str) -> bool {
        self.live.contains_key(key)
    }

    /// Remembers the answer of a commit just sequenced at `now_ms`.
    pub fn answered(&mut self, key: &str, answer: Vec<Result<i64, Refusal>>, now_ms: i64) {
        self.answer_results += answer.len();
        self.answers.insert(key.to_string(), answer);
        self.answer_order.push_back((now_ms, key.to_string()));
        while self.answer_results > ANSWERS_MAX_RESULTS
            && self
                .answer_order
                .front()
                .is_some_and(|(at, _)| now_ms.saturating_sub(*at) > ANSWER_MIN_MS)
        {
            self.forget_oldest_answer();
        }
    }

    pub fn went_live(&mut self, key: &str, object: u64) {
        debug_assert!(!self.retired.contains_key(key), "a retired key went live");
        self.live.insert(key.to_string(), object);
    }

    /// The object under `key` has no extents any more: it is garbage now.
    pub fn retire(&mut self, key: &str, now_ms: i64) {
        self.live.remove(key);
        self.retired.insert(
            key.to_string(),
            Retired {
                since_ms: now_ms,
                collected: false,
            },
        );
    }

    /// GC deleted the object: its key is remembered [`KEY_MEMORY_MS`] more.
    pub fn collected(&mut self, key: &str, now_ms: i64) {
        if let Some(r) = self.retired.get_mut(key) {
            r.since_ms = now_ms;
            r.collected = true;
        }
    }

    /// Forgets answers and collected keys past their time.
    pub fn expire(&mut self, now_ms: i64) {
        while self
            .answer_order
            .front()
            .is_some_and(|(at, _)| now_ms.saturating_sub(*at) > ANSWER_MEMORY_MS)
        {
            self.forget_oldest_answer();
        }
        self.retired
            .retain(|_, r| !r.collected || now_ms.saturating_sub(r.since_ms) <= KEY_MEMORY_MS);
    }

    fn forget_oldest_answer(&mut self) {
        if let Some((_, key)) = self.answer_order.pop_front()
            && let Some(gone) = self.answers.remove(&key)
        {
            self.answer_results -= gone.len();
        }
    }

    /// Live keys and their objects, for the invariant checker.
    pub fn live(&self) -> &BTreeMap<String, u64> {
        &self.live
    }

    /// Whether `key` is retired and not yet deleted (on the GC list).
    pub fn awaiting_collection(&self, key: &str) -> bool {
        self.retired.get(key).is_some_and(|r| !r.collected)
    }
}
