//! The deterministic state machine: the only place where offsets are decided.
//!
//! `apply(command)` must give the same result and leave the same state on every
//! replica for the same sequence of commands, so it never reads clocks, random
//! numbers or anything outside its arguments: ids and times come inside commands.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::agents::AgentInfo;
use crate::groups::*;

use crate::ledger::Seen;
use crate::ops::*;
use crate::txn::{AbortedTxn, IssueProducerId, TxnEnd, TxnPhase, Txns};
use crate::types::*;

mod backlog;
mod cluster;
mod commits;
mod configs;
mod entries;
mod extents;
mod garbage_holds;
mod groups;
mod invariants;
mod layout;
mod legacy;
mod log;
mod looks;
mod operations;
mod partitions;
mod producers;
mod reads;
mod security;
mod shares;
mod topics;
mod txns;

#[cfg(test)]
mod tests;

pub use entries::{Batch, Command, GroupCommand, Proposal, Reply};
pub use legacy::{
    ConsumerHeartbeatV8, ConsumerHeartbeatV10, JoinGroupV8, JoinGroupV10, SyncGroupV8,
};
pub(crate) use operations::as_in_contract;
pub use operations::{Apply, Query};
pub use producers::{
    EXPIRY_SWEEP_EVERY_MS, PRODUCER_BATCHES_REMEMBERED, PRODUCER_ID_EXPIRATION_MS,
    RESTORE_PRODUCER_ID_GAP,
};
pub use topics::{MAX_PARTITIONS, validate_topic_name};

use partitions::{Extent, Partition};
use producers::{IssuedProducer, NextProducerId, ProducerPartition, SequenceCheck};
use topics::Topic;

/// A value derived from the state and never stored, so not part of what a
/// state is: any two compare equal, and a state read from a snapshot
/// derives it afresh (see [`State::rebuild_derived`]).
#[derive(Debug, Default, Clone, Copy)]
struct Derived<T>(T);

impl<T> PartialEq for Derived<T> {
    fn eq(&self, _: &Derived<T>) -> bool {
        true
    }
}

impl<T> Eq for Derived<T> {}

/// The whole metastore state: its parts, each with its own file (or
/// files) holding the commands that change only it, composed here. The
/// commands that change several parts at once (a commit touches the log,
/// producers and transactions; a transactional offset commit, groups and
/// transactions; a topic's deletion, the log and groups) are the
/// machine's. How a snapshot lays the parts out is `layout.rs`'s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    /// Every partition's log: topics, extents, the objects they lie in,
    /// garbage, and every object key heard of (see [`log::Log`]).
    log: log::Log,
    /// Issued producer ids and their epochs.
    producers: producers::Producers,
    groups: Groups,
    /// Transactions' coordinator state.
    txns: Txns,
    /// SCRAM credentials and ACLs.
    security: security::Security,
    /// Dynamic cluster, group and client configs.
    configs: configs::DynamicConfigs,
    /// Agents and job leases.
    cluster: cluster::Cluster,
    /// The latest proposal stamp applied: the leaders' clock, never moving back
    /// (a new leader whose clock is behind does not rewind it).
    clock_ms: i64,
    /// When (on `clock_ms`) expired state is next swept.
    next_expiry_ms: i64,
}

impl State {
    /// Applies one replicated entry: the clock advances to its stamp, and
    /// the command is applied at that time, whatever time its sender wrote.
    pub fn apply_proposal(&mut self, proposal: Proposal) -> Reply {
        self.clock_ms = self.clock_ms.max(proposal.at_ms);
        if self.clock_ms >= self.next_expiry_ms {
            self.next_expiry_ms = self.clock_ms.saturating_add(EXPIRY_SWEEP_EVERY_MS);
            self.expire(self.clock_ms);
        }
        let mut command = proposal.command;
        command.restamp(self.clock_ms);
        self.apply_command(command)
    }

    /// Forgets what has gone unused too long on the metastore's clock:
    /// producer ids and their sequence state (`producer.id.expiration.ms`),
    /// and committed offsets of groups long empty (`offsets.retention.minutes`).
    fn expire(&mut self, now_ms: i64) {
        let horizon = now_ms.saturating_sub(PRODUCER_ID_EXPIRATION_MS);
        self.txns.expire(now_ms);
        // A transactional id's producer id stays issued while the id is known.
        let txns = &self.txns;
        self.producers
            .issued
            .retain(|id, p| p.last_ms > horizon || txns.is_transactional(*id));
        for topic in self.log.topics.values_mut() {
            for partition in &mut topic.partitions {
                partition.producers.retain(|_, p| p.last_ms > horizon);
            }
        }
        self.groups
            .expire_offsets(now_ms, self.configs.offsets_retention_ms());
        self.log.ledger.expire(now_ms);
    }

    /// As a snapshot of a format before 12 has it: no transaction's
    /// `began` (the golden test's upgrade check).
    #[cfg(test)]
    pub(crate) fn forget_txn_identities(&mut self) {
        self.txns.forget_identities();
    }

    /// The metastore's time: the latest leader stamp applied.
    pub fn clock_ms(&self) -> i64 {
        self.clock_ms
    }

    /// Whether an upload that began at `not_before_ms` (metastore time) is
    /// past the commit window (see [`crate::ledger::COMMIT_WINDOW_MS`]).
    /// A time ahead of the clock was never read from it: refused too.
    fn too_late(&self, not_before_ms: i64) -> bool {
        not_before_ms > self.clock_ms
            || self.clock_ms.saturating_sub(not_before_ms) > crate::ledger::COMMIT_WINDOW_MS
    }

    /// Applies a command with the times it carries (tests drive time this
    /// way; replicated entries go through [`State::apply_proposal`]).
    pub fn apply<C: Apply>(&mut self, command: C) -> Result<C::Output, Refusal> {
        let answer = command.apply(self);
        self.assert_invariants();
        answer
    }

    fn apply_command(&mut self, command: Command) -> Reply {
        let reply = command.apply_to(self);
        self.assert_invariants();
        reply
    }

    fn assert_invariants(&self) {
        #[cfg(debug_assertions)]
        if let Err(broken) = self.check_invariants() {
            panic!("metastore invariant broken: {broken}");
        }
    }

    /// A partition whose extents are about to change, stamped with the next
    /// extents version: a compaction pass that found it settled looks at it
    /// again.
    fn changing_partition(&mut self, tp: TopicPartition) -> Option<&mut Partition> {
        self.log.extent_changes.0 += 1;
        self.log.changed.0.insert(tp);
        let version = self.log.extent_changes;
        let name = self.log.names_by_id.get(&tp.topic_id)?;
        let topic = self.log.topics.get_mut(name)?;
        let p = topic
            .partitions
            .get_mut(usize::try_from(tp.partition).ok()?)?;
        p.extents_version = version;
        Some(p)
    }

    /// The partitions whose log (extents, high watermark, last stable
    /// offset, log start) changed or that were deleted since the last call.
    pub fn take_changed_partitions(&mut self) -> BTreeSet<TopicPartition> {
        std::mem::take(&mut self.log.changed.0)
    }

    /// Rebuilds what the state derives and never stores (each object's
    /// holders, each partition's newest object), after it is read from a
    /// snapshot.
    pub(crate) fn rebuild_derived(&mut self) {
        let mut holders: BTreeMap<u64, BTreeMap<TopicPartition, u64>> = BTreeMap::new();
        for topic in self.log.topics.values_mut() {
            for (n, p) in topic.partitions.iter_mut().enumerate() {
                let tp = TopicPartition::new(topic.info.id, n as i32);
                for e in p.extents.values() {
                    *holders.entry(e.object).or_default().entry(tp).or_default() += 1;
                }
                p.newest_object.0 = p.extents.values().map(|e| e.object).max().unwrap_or(0);
            }
        }
        for (id, object) in &mut self.log.objects {
            object.holders = backlog::Holders::of(holders.remove(id).unwrap_or_default());
        }
    }

    fn partition(&self, id: TopicId, partition: i32) -> Result<&Partition, Refusal> {
        self.log
            .names_by_id
            .get(&id)
            .and_then(|name| self.log.topics.get(name))
            .and_then(|t| t.partitions.get(usize::try_from(partition).ok()?))
            .ok_or(Refusal::UnknownTopicOrPartition)
    }

    fn extent_ref(&self, e: &Extent) -> ExtentRef {
        let object = &self.log.objects[&e.object];
        ExtentRef {
            base_offset: e.base_offset,
            last_offset: e.last_offset,
            max_timestamp: e.max_timestamp,
            object_key: object.key.clone(),
            object_size: object.size,
            position: e.position,
            length: e.length,
            appended_ms: e.appended_ms,
        }
    }
}
