//! The log part of the state: every topic and its partitions' extents, the
//! objects the extents lie in, the keys of objects nothing points to any
//! more, and the ledger of every object key heard of. The sequencer
//! (`commits.rs`), the swaps and trims (`extents.rs`), topics
//! (`topics.rs`), reads and compaction's queries change or read it.

use std::collections::{BTreeMap, BTreeSet};

use super::Derived;
use super::backlog::Settled;
use super::extents::Object;
use super::topics::Topic;
use crate::ledger::Ledger;
use crate::types::{TopicId, TopicPartition};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Log {
    pub(super) topics: BTreeMap<String, Topic>,
    pub(super) names_by_id: BTreeMap<TopicId, String>,
    pub(super) objects: BTreeMap<u64, Object>,
    pub(super) next_object: u64,
    /// Keys of objects nothing points to any more, oldest first, for GC.
    pub(super) garbage: Vec<String>,
    /// Backup holds: keys freed after one was taken wait for it to expire.
    pub(super) garbage_holds: super::garbage_holds::GarbageHolds,
    /// Every object key heard of: live, retired, recent answers. Commits
    /// are exact and GC fenced through it (see [`crate::ledger`]).
    pub(super) ledger: Ledger,
    /// Derived, never stored: extent changes counted since this state was
    /// loaded, the source of partitions' `extents_version`.
    pub(super) extent_changes: Derived<u64>,
    /// Derived, never stored: the partitions compaction found not worth
    /// merging (see [`super::backlog`]).
    pub(super) settled: Settled,
    /// Derived, never stored: the partitions whose log changed since the
    /// node last took them, to notice subscribers (see
    /// [`crate::read_leases`]); at most every partition.
    pub(super) changed: Derived<BTreeSet<TopicPartition>>,
}
