//! The deterministic state machine: the only place where offsets are decided.
//!
//! `apply(command)` must give the same result and leave the same state on every
//! replica for the same sequence of commands, so it never reads clocks, random
//! numbers or anything outside its arguments: ids and times come inside commands.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::agents::AgentInfo;
use crate::groups::*;
use crate::leases::Leases;
use crate::ledger::{Ledger, Seen};
use crate::ops::*;
use crate::txn::{AbortedTxn, IssueProducerId, TxnEnd, TxnPhase, Txns};
use crate::types::*;

mod backlog;
mod cluster;
mod commits;
mod configs;
mod entries;
mod extents;
mod groups;
mod invariants;
mod legacy;
mod looks;
mod operations;
mod partitions;
mod producers;
mod reads;
mod security;
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
};
pub use topics::{MAX_PARTITIONS, validate_topic_name};

use extents::Object;
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

/// The whole metastore state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    topics: BTreeMap<String, Topic>,
    names_by_id: BTreeMap<TopicId, String>,
    objects: BTreeMap<u64, Object>,
    next_object: u64,
    /// Issued producer ids: their current epoch and when they were last
    /// issued or used (expired after [`PRODUCER_ID_EXPIRATION_MS`]).
    producers: BTreeMap<i64, IssuedProducer>,
    next_producer_id: i64,
    /// Keys of objects nothing points to any more, oldest first, for GC.
    garbage: Vec<String>,
    groups: Groups,
    agents: cluster::Agents,
    /// Every object key heard of: live, retired, recent answers. Commits are
    /// exact and GC fenced through it (see [`crate::ledger`]).
    ledger: Ledger,
    leases: Leases,
    /// The latest proposal stamp applied: the leaders' clock, never moving back
    /// (a new leader whose clock is behind does not rewind it).
    clock_ms: i64,
    /// When (on `clock_ms`) expired state is next swept.
    next_expiry_ms: i64,
    // Fields below were added after format 4: each appended, with a default,
    // so older snapshots read (see `crate::format`).
    /// Users' SCRAM credentials (format 5).
    #[serde(default)]
    scram: security::ScramCredentials,
    /// ACLs (format 6).
    #[serde(default)]
    acls: crate::acls::Acls,
    /// Transactions' coordinator state (format 7).
    #[serde(default)]
    txns: Txns,
    /// Dynamic cluster and group configs (format 8).
    #[serde(default)]
    configs: configs::DynamicConfigs,
    /// Producer ids are handed out in blocks (format 11, KIP-730): set by
    /// the first [`AllocateProducerIds`], after which a batch of a producer
    /// id the state keeps nothing of is sequenced as Kafka sequences it (its
    /// partition's state decides, created by its first write), not refused
    /// as an unknown producer. Entries logged before keep the old rule.
    #[serde(default)]
    producer_id_blocks: bool,
    // Fields below are derived and never stored (`serde(skip)`).
    /// Extent changes counted since this state was loaded: the source of
    /// partitions' `extents_version`.
    #[serde(skip)]
    extent_changes: Derived<u64>,
    /// The partitions compaction found not worth merging (see [`backlog`]).
    #[serde(skip)]
    settled: backlog::Settled,
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
            .retain(|id, p| p.last_ms > horizon || txns.is_transactional(*id));
        for topic in self.topics.values_mut() {
            for partition in &mut topic.partitions {
                partition.producers.retain(|_, p| p.last_ms > horizon);
            }
        }
        self.groups
            .expire_offsets(now_ms, self.configs.offsets_retention_ms());
        self.ledger.expire(now_ms);
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
        self.extent_changes.0 += 1;
        let version = self.extent_changes;
        let name = self.names_by_id.get(&tp.topic_id)?;
        let topic = self.topics.get_mut(name)?;
        let p = topic
            .partitions
            .get_mut(usize::try_from(tp.partition).ok()?)?;
        p.extents_version = version;
        Some(p)
    }

    /// Rebuilds what the state derives and never stores (each object's
    /// holders, each partition's newest object), after it is read from a
    /// snapshot.
    pub(crate) fn rebuild_derived(&mut self) {
        let mut holders: BTreeMap<u64, BTreeMap<TopicPartition, u64>> = BTreeMap::new();
        for topic in self.topics.values_mut() {
            for (n, p) in topic.partitions.iter_mut().enumerate() {
                let tp = TopicPartition::new(topic.info.id, n as i32);
                for e in p.extents.values() {
                    *holders.entry(e.object).or_default().entry(tp).or_default() += 1;
                }
                p.newest_object.0 = p.extents.values().map(|e| e.object).max().unwrap_or(0);
            }
        }
        for (id, object) in &mut self.objects {
            object.holders = backlog::Holders::of(holders.remove(id).unwrap_or_default());
        }
    }

    fn partition(&self, id: TopicId, partition: i32) -> Result<&Partition, Refusal> {
        self.names_by_id
            .get(&id)
            .and_then(|name| self.topics.get(name))
            .and_then(|t| t.partitions.get(usize::try_from(partition).ok()?))
            .ok_or(Refusal::UnknownTopicOrPartition)
    }

    fn extent_ref(&self, e: &Extent) -> ExtentRef {
        let object = &self.objects[&e.object];
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
