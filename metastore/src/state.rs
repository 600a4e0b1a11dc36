//! The deterministic state machine: the only place where offsets are decided.
//!
//! `apply(command)` must give the same result and leave the same state on every
//! replica for the same sequence of commands, so it never reads clocks, random
//! numbers or anything outside its arguments: ids and times come inside commands.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::agents::{AgentInfo, Agents};
use crate::api::{Apply, Query};
use crate::groups::*;
use crate::leases::Leases;
use crate::ledger::{Ledger, Seen};
use crate::ops::*;
use crate::scram::{ScramCredential, ScramCredentials, ScramRefusal};
use crate::txn::{AbortedTxn, IssueProducerId, TxnEnd, TxnPhase, TxnView, Txns};
use crate::types::*;

mod backlog;
mod looks;

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

/// The log's entries, one variant per write in the order of their variant
/// indices, which are part of the log's encoding (see `golden.rs`): append
/// only. Each variant's answer and how it is applied are its [`Apply`] impl.
macro_rules! commands {
    ($($variant:ident($command:ty)),* $(,)?) => {
        /// A mutation of the metastore, as logged.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        pub enum Command {
            $($variant($command),)*
        }

        $(impl From<$command> for Command {
            fn from(command: $command) -> Command {
                Command::$variant(command)
            }
        })*

        impl Command {
            /// Whether a client may send this command again when it does
            /// not know whether the first one applied.
            pub fn retry_is_safe(&self) -> bool {
                match self {
                    $(Command::$variant(c) => Entry::retry_is_safe(c),)*
                }
            }

            /// Replaces every time the sender put in the command with `now_ms`.
            fn restamp(&mut self, now_ms: i64) {
                match self {
                    $(Command::$variant(c) => Entry::restamp(c, now_ms),)*
                }
            }

            fn apply_to(self, state: &mut State) -> Reply {
                match self {
                    $(Command::$variant(c) => Entry::apply_to(c, state),)*
                }
            }
        }
    };
}

/// What the log does with a variant's content: an [`Apply`], or an enum of
/// them kept as one variant for the log's format ([`GroupCommand`]).
trait Entry {
    fn retry_is_safe(&self) -> bool;
    fn restamp(&mut self, now_ms: i64);
    fn apply_to(self, state: &mut State) -> Reply;
}

impl<C: Apply> Entry for C {
    fn retry_is_safe(&self) -> bool {
        Apply::retry_is_safe(self)
    }
    fn restamp(&mut self, now_ms: i64) {
        Apply::restamp(self, now_ms)
    }
    fn apply_to(self, state: &mut State) -> Reply {
        Reply::of::<C>(&self.apply(state))
    }
}

/// Each group operation is its own [`Apply`]; the log keeps them under one
/// variant, as it always has.
macro_rules! group_commands {
    ($($variant:ident($command:ty)),* $(,)?) => {
        /// A group operation as the log holds it (`Command::Group`): the
        /// order of the variants is part of the log's format (see
        /// `golden.rs`). Each is applied, and answered with its own type,
        /// through its `Apply` impl.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        pub enum GroupCommand {
            $($variant($command),)*
        }

        $(impl From<$command> for Command {
            fn from(command: $command) -> Command {
                Command::Group(GroupCommand::$variant(command))
            }
        })*

        impl Entry for GroupCommand {
            fn retry_is_safe(&self) -> bool {
                match self {
                    $(GroupCommand::$variant(c) => Entry::retry_is_safe(c),)*
                }
            }
            fn restamp(&mut self, now_ms: i64) {
                match self {
                    $(GroupCommand::$variant(c) => Entry::restamp(c, now_ms),)*
                }
            }
            fn apply_to(self, state: &mut State) -> Reply {
                match self {
                    $(GroupCommand::$variant(c) => Entry::apply_to(c, state),)*
                }
            }
        }
    };
}

group_commands! {
    Join(JoinGroupV8),
    Sync(SyncGroupV8),
    Leave(LeaveGroup),
    Tick(TickGroup),
    CommitOffsets(CommitOffsets),
    Expire(ExpireMembers),
    Delete(DeleteGroups),
    DeleteOffsets(DeleteOffsets),
    Consumer(ConsumerHeartbeatV8),
    JoinWithOwned(JoinGroupV10),
    SyncWithDecoded(SyncGroup),
    ConsumerMigrating(ConsumerHeartbeatV10),
    ConsumerDescribing(ConsumerHeartbeat),
    JoinRuled(JoinGroup),
}

/// A ConsumerGroupHeartbeat as format 8 logged it: the same fields, applied
/// with format 8's rules (no group with members changes protocol), so a
/// replica replaying it decides as the one whose snapshot holds it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerHeartbeatV8(pub ConsumerHeartbeatV10);

/// A ConsumerGroupHeartbeat as the log held it up to format 10, before it
/// said whose DESCRIBE filters regular expressions (see [`JoinGroupV8`]):
/// applied as one that says nobody's (no filter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerHeartbeatV10 {
    pub group: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed_topics: Option<Vec<String>>,
    pub subscribed_regex: Option<String>,
    pub assignor: Option<String>,
    pub owned: Option<Vec<(TopicId, Vec<i32>)>>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    pub now_ms: i64,
}

impl From<ConsumerHeartbeatV10> for ConsumerHeartbeat {
    fn from(c: ConsumerHeartbeatV10) -> ConsumerHeartbeat {
        ConsumerHeartbeat {
            group: c.group,
            member_id: c.member_id,
            member_epoch: c.member_epoch,
            instance_id: c.instance_id,
            rack_id: c.rack_id,
            rebalance_timeout_ms: c.rebalance_timeout_ms,
            subscribed_topics: c.subscribed_topics,
            subscribed_regex: c.subscribed_regex,
            assignor: c.assignor,
            owned: c.owned,
            client_id: c.client_id,
            client_host: c.client_host,
            session_timeout_ms: c.session_timeout_ms,
            heartbeat_interval_ms: c.heartbeat_interval_ms,
            now_ms: c.now_ms,
            describer: None,
        }
    }
}

/// A JoinGroup as the log held it up to format 8 (postcard keeps no field
/// names, so a command that gains fields is a new variant; entries written
/// before are read as this and applied as the new one, with format 8's
/// rules: see [`Rules`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinGroupV8 {
    pub group: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Vec<u8>)>,
    pub subscribed_topics: Option<Vec<String>>,
    pub require_known_member_id: bool,
    pub fresh_id: String,
    pub now_ms: i64,
}

impl From<JoinGroupV8> for JoinGroup {
    fn from(j: JoinGroupV8) -> JoinGroup {
        JoinGroupV10 {
            group: j.group,
            member_id: j.member_id,
            instance_id: j.instance_id,
            client_id: j.client_id,
            client_host: j.client_host,
            session_timeout_ms: j.session_timeout_ms,
            rebalance_timeout_ms: j.rebalance_timeout_ms,
            protocol_type: j.protocol_type,
            protocols: j.protocols,
            subscribed_topics: j.subscribed_topics,
            require_known_member_id: j.require_known_member_id,
            fresh_id: j.fresh_id,
            now_ms: j.now_ms,
            owned: None,
        }
        .into()
    }
}

/// A JoinGroup as the log held it in formats 9 and 10, before it carried
/// the agent's [`JoinRules`] (see [`JoinGroupV8`]): applied with the rules
/// of then, Kafka's session bounds and no initial rebalance delay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinGroupV10 {
    pub group: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Vec<u8>)>,
    pub subscribed_topics: Option<Vec<String>>,
    pub require_known_member_id: bool,
    pub fresh_id: String,
    pub now_ms: i64,
    pub owned: Option<TopicPartitions>,
}

impl From<JoinGroupV10> for JoinGroup {
    fn from(j: JoinGroupV10) -> JoinGroup {
        JoinGroup {
            group: j.group,
            member_id: j.member_id,
            instance_id: j.instance_id,
            client_id: j.client_id,
            client_host: j.client_host,
            session_timeout_ms: j.session_timeout_ms,
            rebalance_timeout_ms: j.rebalance_timeout_ms,
            protocol_type: j.protocol_type,
            protocols: j.protocols,
            subscribed_topics: j.subscribed_topics,
            require_known_member_id: j.require_known_member_id,
            fresh_id: j.fresh_id,
            now_ms: j.now_ms,
            owned: j.owned,
            rules: JoinRules::BEFORE_FORMAT_11,
        }
    }
}

/// A SyncGroup as the log held it up to format 8 (see [`JoinGroupV8`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncGroupV8 {
    pub group: String,
    pub generation: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub assignments: Vec<(String, Vec<u8>)>,
    pub now_ms: i64,
}

impl From<SyncGroupV8> for SyncGroup {
    fn from(s: SyncGroupV8) -> SyncGroup {
        SyncGroup {
            group: s.group,
            generation: s.generation,
            member_id: s.member_id,
            instance_id: s.instance_id,
            protocol_type: s.protocol_type,
            protocol: s.protocol,
            assignments: s.assignments,
            now_ms: s.now_ms,
            decoded: Vec::new(),
            decodes: false,
        }
    }
}

impl GroupCommand {
    /// The group whose members, phase or assignments this may change (what
    /// waiters of [`crate::groups::AwaitGroup`] are woken for).
    fn changes_members_of(&self) -> Option<&str> {
        match self {
            GroupCommand::Join(c) => Some(&c.group),
            GroupCommand::Sync(c) => Some(&c.group),
            GroupCommand::JoinWithOwned(c) => Some(&c.group),
            GroupCommand::JoinRuled(c) => Some(&c.group),
            GroupCommand::SyncWithDecoded(c) => Some(&c.group),
            GroupCommand::Consumer(c) => Some(&c.0.group),
            // A join may upgrade a classic group, whose waiters must learn.
            GroupCommand::ConsumerMigrating(c) => Some(&c.group),
            GroupCommand::ConsumerDescribing(c) => Some(&c.group),
            GroupCommand::Leave(c) => Some(&c.group),
            GroupCommand::Tick(c) => Some(&c.group),
            GroupCommand::Expire(c) => Some(&c.group),
            GroupCommand::CommitOffsets(_)
            | GroupCommand::Delete(_)
            | GroupCommand::DeleteOffsets(_) => None,
        }
    }
}

commands! {
    CreateTopic(CreateTopic),
    DeleteTopic(DeleteTopic),
    Commit(Commit),
    ReplaceExtents(ReplaceExtents),
    InitProducer(InitProducer),
    ForgetGarbage(ForgetGarbage),
    RegisterAgent(RegisterAgent),
    AgentHeartbeat(AgentHeartbeat),
    AlterTopicConfigs(AlterTopicConfigs),
    CreatePartitions(CreatePartitions),
    Trim(Trim),
    RecordOrphans(RecordOrphans),
    Group(GroupCommand),
    AcquireLease(AcquireLease),
    ReleaseLease(ReleaseLease),
    Tick(Tick),
    ReplaceRuns(ReplaceRuns),
    Batch(Batch),
    AlterScramCredentials(AlterScramCredentials),
    CreateAcls(CreateAcls),
    DeleteAcls(DeleteAcls),
    InitTxnProducer(InitTxnProducer),
    AddToTxn(AddToTxn),
    EndTxn(EndTxn),
    IngestCommit(IngestCommit),
    TxnCommitOffsets(TxnCommitOffsets),
    AlterConfigs(AlterConfigs),
    RegisterAgentListeners(RegisterAgentListeners),
    AllocateProducerIds(AllocateProducerIds),
    InitTxnProducerChecked(InitTxnProducerChecked),
}

/// Commands proposed together in one entry (group commit, see
/// `raft::group_commit`): applied in order, at the entry's time, each
/// answered as if it had been alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch(pub Vec<Command>);

impl Entry for Batch {
    fn retry_is_safe(&self) -> bool {
        self.0.iter().all(Command::retry_is_safe)
    }
    fn restamp(&mut self, now_ms: i64) {
        self.0.iter_mut().for_each(|c| c.restamp(now_ms));
    }
    fn apply_to(self, state: &mut State) -> Reply {
        let replies: Vec<Reply> = self.0.into_iter().map(|c| c.apply_to(state)).collect();
        Reply(postcard::to_stdvec(&replies).unwrap_or_default())
    }
}

impl Command {
    /// Every group whose members, phase or assignments this command may change.
    pub fn groups_changed(&self, out: &mut Vec<String>) {
        match self {
            Command::Group(g) => out.extend(g.changes_members_of().map(str::to_string)),
            Command::Batch(b) => b.0.iter().for_each(|c| c.groups_changed(out)),
            _ => {}
        }
    }

    /// How much of an entry this command takes, roughly in committed
    /// batches (the bulk of a commit), so group commit keeps entries small.
    pub fn weight(&self) -> usize {
        match self {
            Command::Commit(c) => 1 + c.batches.len(),
            Command::IngestCommit(c) => 1 + c.batches.len() + c.ends.len(),
            Command::AddToTxn(a) => 1 + (a.partitions.len() + a.groups.len()) / 64,
            Command::TxnCommitOffsets(c) => 1 + c.commit.offsets.len(),
            Command::ReplaceRuns(r) => {
                1 + r
                    .runs
                    .iter()
                    .map(|run| run.replaced.len() + run.pieces.len())
                    .sum::<usize>()
            }
            Command::ReplaceExtents(r) => 1 + r.replaced.len() + r.pieces.len(),
            Command::Batch(b) => b.0.iter().map(Command::weight).sum(),
            Command::RecordOrphans(r) => 1 + r.keys.len(),
            Command::ForgetGarbage(f) => 1 + f.keys.len(),
            Command::CreateTopic(c) => 1 + c.topic.partitions.max(0) as usize / 16,
            Command::Group(GroupCommand::CommitOffsets(c)) => 1 + c.offsets.len(),
            Command::Group(GroupCommand::JoinWithOwned(JoinGroupV10 { protocols, .. }))
            | Command::Group(GroupCommand::JoinRuled(JoinGroup { protocols, .. })) => {
                1 + protocols.iter().map(|(_, m)| m.len()).sum::<usize>() / 64
            }
            Command::Group(GroupCommand::SyncWithDecoded(s)) => {
                1 + s.assignments.iter().map(|(_, a)| a.len()).sum::<usize>() / 64
            }
            _ => 1,
        }
    }
}

/// One entry of the replicated log: a command and the time the leader that
/// proposed it read from its clock. Every decision about time (sessions,
/// liveness, leases, expiry) is made on these stamps, through the state's
/// monotonic [`State::clock_ms`], never on a sender's clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    pub at_ms: i64,
    pub command: Command,
}

/// What applying a [`Command`] answered: the command's `Result<Output,
/// Refusal>`, encoded, so that one type carries every command's answer
/// through the log's machinery. [`Reply::answer`] reads it as the answer of
/// the same command's type; the node that proposed a command is the one
/// that applies it and reads its reply, so both ends are one binary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply(Vec<u8>);

impl Reply {
    fn of<C: Apply>(answer: &Result<C::Output, Refusal>) -> Reply {
        // Plain data always encodes; an empty reply would fail to decode.
        Reply(postcard::to_stdvec(answer).unwrap_or_default())
    }

    /// The refusal, if the command was refused (whatever its type: an
    /// answer is a `Result`, whose `Err` begins with 1).
    pub fn refusal(&self) -> Option<Refusal> {
        match self.0.as_slice() {
            [1, rest @ ..] => postcard::from_bytes(rest).ok(),
            _ => None,
        }
    }

    /// The replies of a [`Batch`]'s commands, in order.
    pub fn batch(&self) -> Result<Vec<Reply>, MetaError> {
        postcard::from_bytes(&self.0)
            .map_err(|e| MetaError::Storage(format!("a reply that is not a batch's: {e}")))
    }

    /// The answer of command type `C`.
    pub fn answer<C: Apply>(&self) -> Result<Result<C::Output, Refusal>, MetaError> {
        postcard::from_bytes(&self.0).map_err(|e| {
            MetaError::Storage(format!(
                "a reply that is not the answer of a {}: {e}",
                std::any::type_name::<C>()
            ))
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Extent {
    base_offset: i64,
    last_offset: i64,
    max_timestamp: i64,
    object: u64,
    position: u64,
    length: u64,
    appended_ms: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Partition {
    log_start_offset: i64,
    high_watermark: i64,
    /// By base offset; contiguous and non-overlapping.
    extents: BTreeMap<i64, Extent>,
    /// Idempotent producers that wrote here, by producer id.
    producers: BTreeMap<i64, ProducerPartition>,
    // Fields below were added after format 4 (see `crate::format`).
    /// Ongoing transactions with data here: first offset -> producer id.
    /// The first one bounds the last stable offset (format 7).
    #[serde(default)]
    ongoing: BTreeMap<i64, i64>,
    /// Aborted transactions with data here, in marker order (so sorted by
    /// `last_offset`); pruned with the log start (format 7).
    #[serde(default)]
    aborted: VecDeque<AbortedTxn>,
    /// The state's count of extent changes at this partition's last one
    /// (see [`State::changing_partition`]). Derived, never stored: a
    /// compaction pass passes over a partition it found settled at this
    /// version (see [`backlog`]).
    #[serde(skip)]
    extents_version: Derived<u64>,
    /// The newest object (the highest id) an extent of it was placed in
    /// since the state was loaded, or of those it holds at load. Derived,
    /// never stored: any change of its extents moves it, its high
    /// watermark, its log start or its count of extents (see
    /// [`crate::ops::LookMark`]).
    #[serde(skip)]
    newest_object: Derived<u64>,
}

impl Partition {
    /// The last stable offset: the first offset of the oldest ongoing
    /// transaction, or the high watermark (Kafka's `firstUnstableOffset`).
    fn last_stable(&self) -> i64 {
        self.ongoing
            .keys()
            .next()
            .copied()
            .unwrap_or(self.high_watermark)
            .clamp(self.log_start_offset, self.high_watermark)
    }

    /// The aborted transactions with data in `[from, to)`, as Kafka's
    /// `TransactionIndex.collectAbortedTxns` finds them: those whose marker
    /// is at or past `from` and that began before `to`. The walk stops at
    /// the first whose end left the last stable offset at `to` or past it:
    /// every transaction that ended later began at or after that offset.
    fn aborted_between(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        let start = self.aborted.partition_point(|a| a.last_offset < from);
        let mut found = Vec::new();
        for a in self.aborted.range(start..) {
            if a.first_offset < to {
                found.push(*a);
            }
            if a.lso_after >= to {
                break;
            }
        }
        found
    }

    /// Gives `batch` the next offsets and stores where it lies: extending
    /// the last extent when it continues it in the same object. Answers its
    /// base offset and whether an extent was added.
    fn place(&mut self, batch: &CommitBatch, object: u64, now_ms: i64) -> (i64, bool) {
        let base_offset = self.high_watermark;
        let last_offset = base_offset + batch.record_count as i64 - 1;
        self.high_watermark = last_offset + 1;
        let extends_last = self.extents.values_mut().next_back().filter(|e| {
            e.object == object
                && e.position + e.length == batch.position
                && e.last_offset + 1 == base_offset
        });
        match extends_last {
            Some(extent) => {
                extent.last_offset = last_offset;
                extent.length += batch.length as u64;
                extent.max_timestamp = extent.max_timestamp.max(batch.max_timestamp);
                extent.appended_ms = extent.appended_ms.max(now_ms);
                (base_offset, false)
            }
            None => {
                self.newest_object.0 = self.newest_object.0.max(object);
                self.extents.insert(
                    base_offset,
                    Extent {
                        base_offset,
                        last_offset,
                        max_timestamp: batch.max_timestamp,
                        object,
                        position: batch.position,
                        length: batch.length as u64,
                        appended_ms: now_ms,
                    },
                );
                (base_offset, true)
            }
        }
    }
}

/// Batches Kafka remembers per producer and partition to recognise retries.
pub const PRODUCER_BATCHES_REMEMBERED: usize = 5;

/// One producer's recent batches in one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct ProducerPartition {
    epoch: i16,
    /// (first sequence, last sequence, base offset), oldest first.
    batches: std::collections::VecDeque<(i32, i32, i64)>,
    /// The metastore's time of its latest append here: the state expires
    /// after [`PRODUCER_ID_EXPIRATION_MS`] without one.
    last_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct IssuedProducer {
    epoch: i16,
    last_ms: i64,
}

/// Kafka's `producer.id.expiration.ms` default: a producer id (and its
/// sequence state in each partition) unused this long is forgotten. The
/// producer then gets UNKNOWN_PRODUCER_ID and starts over, as on Kafka.
pub const PRODUCER_ID_EXPIRATION_MS: i64 = 24 * 3600 * 1000;
/// How often (on the metastore's clock) expired state is swept.
pub const EXPIRY_SWEEP_EVERY_MS: i64 = 60_000;

/// What the sequence check decided for one idempotent batch.
enum SequenceCheck {
    Append,
    /// A retry of a batch already sequenced at this base offset.
    Duplicate(i64),
}

impl ProducerPartition {
    fn check(
        &self,
        producer_id: i64,
        epoch: i16,
        first: i32,
        last: i32,
    ) -> Result<SequenceCheck, Refusal> {
        if epoch < self.epoch {
            return Err(Refusal::InvalidProducerEpoch {
                producer_id,
                got: epoch,
                current: self.epoch,
            });
        }
        if self.epoch < 0 {
            // No state here (new, or expired): any sequence starts it, as in
            // Kafka since KIP-360.
            return Ok(SequenceCheck::Append);
        }
        if epoch > self.epoch {
            // A new epoch starts its sequences again at 0.
            return if first == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err(Refusal::OutOfOrderSequence {
                    producer_id,
                    last: -1,
                    got: first,
                })
            };
        }
        if let Some(&(_, _, base)) = self
            .batches
            .iter()
            .find(|(f, l, _)| *f == first && *l == last)
        {
            return Ok(SequenceCheck::Duplicate(base));
        }
        let last_seq = self.batches.back().map_or(-1, |&(_, l, _)| l);
        let follows = first == last_seq.wrapping_add(1) || (first == 0 && last_seq == i32::MAX);
        if follows {
            Ok(SequenceCheck::Append)
        } else {
            Err(Refusal::OutOfOrderSequence {
                producer_id,
                last: last_seq,
                got: first,
            })
        }
    }

    fn record(&mut self, epoch: i16, first: i32, last: i32, base_offset: i64, now_ms: i64) {
        self.last_ms = now_ms;
        if epoch != self.epoch {
            self.epoch = epoch;
            self.batches.clear();
        }
        if self.batches.len() == PRODUCER_BATCHES_REMEMBERED {
            self.batches.pop_front();
        }
        self.batches.push_back((first, last, base_offset));
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Topic {
    info: TopicInfo,
    partitions: Vec<Partition>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Object {
    key: String,
    size: u64,
    /// Extents that still point into this object; at zero it is garbage.
    live_extents: u64,
    /// The partitions those extents belong to, and how many each. Derived,
    /// never stored (rebuilt on load by [`State::rebuild_derived`]): a
    /// compaction pass visits only the partitions in the files it takes.
    #[serde(skip)]
    holders: backlog::Holders,
}

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
    agents: Agents,
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
    scram: ScramCredentials,
    /// ACLs (format 6).
    #[serde(default)]
    acls: crate::acls::Acls,
    /// Transactions' coordinator state (format 7).
    #[serde(default)]
    txns: Txns,
    /// Dynamic cluster and group configs (format 8).
    #[serde(default)]
    configs: crate::dynamic_config::DynamicConfigs,
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

/// Issues producer ids from the state's counter (for [`Txns::init`]).
struct NextProducerId<'a>(&'a mut i64);

impl IssueProducerId for NextProducerId<'_> {
    fn issue(&mut self) -> i64 {
        let id = *self.0;
        *self.0 += 1;
        id
    }
}

/// Kafka's rule for topic names: 1..=249 chars of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), Refusal> {
    let invalid = |why: &str| Err(Refusal::InvalidTopicName(name.to_string(), why.to_string()));
    if name.is_empty() {
        return invalid("it is empty");
    }
    if name == "." || name == ".." {
        return invalid("`.` and `..` are not allowed");
    }
    if name.len() > 249 {
        return invalid("it is longer than 249 characters");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
    {
        return invalid("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

/// Most partitions one topic may have; bounds the memory a request can claim.
pub const MAX_PARTITIONS: i32 = 10_000;

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

    /// What must hold after every command; checked after each one in debug
    /// builds and tests (a violation is a bug that could lose data).
    ///
    /// - A partition's extents are contiguous, end at its high watermark, and
    ///   the first holds its log start (or there are none and the log is empty).
    /// - Each object's live count is the number of extents pointing into it,
    ///   and its holders count them by partition; a partition's newest
    ///   object is at least each of its extents' objects.
    /// - Live objects and the ledger's live keys are the same, one key each.
    /// - No live key is on the GC list; every key on it awaits collection.
    /// - Idempotent producers' windows stay bounded.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut pointing: BTreeMap<u64, BTreeMap<TopicPartition, u64>> = BTreeMap::new();
        for topic in self.topics.values() {
            for (n, p) in topic.partitions.iter().enumerate() {
                let at = format!("{}/{n}", topic.info.name);
                let tp = TopicPartition::new(topic.info.id, n as i32);
                if p.log_start_offset > p.high_watermark {
                    return Err(format!(
                        "{at}: log start {} past the high watermark {}",
                        p.log_start_offset, p.high_watermark
                    ));
                }
                let mut next: Option<i64> = None;
                for (base, e) in &p.extents {
                    if *base != e.base_offset || e.last_offset < e.base_offset {
                        return Err(format!("{at}: malformed extent at {base}"));
                    }
                    if next.is_some_and(|n| n != e.base_offset) {
                        return Err(format!("{at}: gap or overlap before {}", e.base_offset));
                    }
                    next = Some(e.last_offset + 1);
                    if e.object > p.newest_object.0 || p.newest_object.0 >= self.next_object {
                        return Err(format!(
                            "{at}: extent at {base} newer than its newest object, or that never issued"
                        ));
                    }
                    *pointing.entry(e.object).or_default().entry(tp).or_default() += 1;
                    if !self.objects.contains_key(&e.object) {
                        return Err(format!("{at}: extent at {base} points at no object"));
                    }
                }
                match (p.extents.values().next(), next) {
                    (Some(first), Some(end)) => {
                        if end != p.high_watermark {
                            return Err(format!(
                                "{at}: extents end at {end}, high watermark {}",
                                p.high_watermark
                            ));
                        }
                        if first.base_offset > p.log_start_offset
                            || first.last_offset < p.log_start_offset
                        {
                            return Err(format!(
                                "{at}: log start {} outside the first extent",
                                p.log_start_offset
                            ));
                        }
                    }
                    _ if p.log_start_offset != p.high_watermark => {
                        return Err(format!(
                            "{at}: no extents for [{}, {})",
                            p.log_start_offset, p.high_watermark
                        ));
                    }
                    _ => {}
                }
                for (id, producer) in &p.producers {
                    if producer.batches.len() > PRODUCER_BATCHES_REMEMBERED {
                        return Err(format!(
                            "{at}: producer {id} remembers {} batches",
                            producer.batches.len()
                        ));
                    }
                }
                self.check_partition_txns(&at, tp, p)?;
            }
        }
        self.check_txns()?;
        for (id, object) in &self.objects {
            let holders = pointing.remove(id).unwrap_or_default();
            let count: u64 = holders.values().sum();
            if object.live_extents != count || count == 0 {
                return Err(format!(
                    "object {} counts {} extents, {count} point into it",
                    object.key, object.live_extents
                ));
            }
            if !object
                .holders
                .counts()
                .eq(holders.iter().map(|(tp, n)| (*tp, *n)))
            {
                return Err(format!(
                    "object {} names holders {:?}, its extents are of {holders:?}",
                    object.key, object.holders
                ));
            }
            if self.ledger.live().get(&object.key) != Some(id) {
                return Err(format!("object {} is not live in the ledger", object.key));
            }
        }
        if self.ledger.live().len() != self.objects.len() {
            return Err("the ledger's live keys and the objects differ".into());
        }
        for key in &self.garbage {
            if self.ledger.is_live(key) {
                return Err(format!("live key {key} is on the GC list"));
            }
            if !self.ledger.awaiting_collection(key) {
                return Err(format!("key {key} is on the GC list but not retired"));
            }
        }
        Ok(())
    }

    /// A partition's transactions: each ongoing entry is the first batch of
    /// an ongoing transaction that holds this partition, below the high
    /// watermark; the aborted index is in marker order, each range below
    /// the high watermark.
    fn check_partition_txns(
        &self,
        at: &str,
        tp: TopicPartition,
        p: &Partition,
    ) -> Result<(), String> {
        for (&first, &producer_id) in &p.ongoing {
            let holds = self.txns.of_producer(producer_id).is_some_and(|(_, t)| {
                t.phase == TxnPhase::Ongoing && t.partitions.get(&tp) == Some(&Some(first))
            });
            if !holds || first >= p.high_watermark {
                return Err(format!(
                    "{at}: ongoing entry {first} of producer {producer_id} has no transaction"
                ));
            }
        }
        let mut last = i64::MIN;
        for a in &p.aborted {
            if a.last_offset < last
                || a.first_offset > a.last_offset
                || a.last_offset >= p.high_watermark
            {
                return Err(format!("{at}: aborted index out of order at {a:?}"));
            }
            last = a.last_offset;
        }
        Ok(())
    }

    /// Transactions: [`Txns::check`]; each partition a transaction has data
    /// in has its ongoing entry; its producer id is issued at its epoch.
    fn check_txns(&self) -> Result<(), String> {
        self.txns.check()?;
        for (id, t) in self.txns.iter() {
            if self.producers.get(&t.producer_id).map(|p| p.epoch) != Some(t.epoch) {
                return Err(format!(
                    "transactional id {id}: producer not issued at its epoch"
                ));
            }
            for (tp, first) in &t.partitions {
                let Ok(p) = self.partition(tp.topic_id, tp.partition) else {
                    return Err(format!(
                        "transactional id {id} holds a partition that is gone"
                    ));
                };
                if let Some(first) = first
                    && p.ongoing.get(first) != Some(&t.producer_id)
                {
                    return Err(format!(
                        "transactional id {id}: no ongoing entry at {first}"
                    ));
                }
            }
        }
        Ok(())
    }

    fn create_topic(&mut self, id: TopicId, topic: NewTopic) -> Result<TopicInfo, Refusal> {
        validate_topic_name(&topic.name)?;
        if topic.partitions < 1 || topic.partitions > MAX_PARTITIONS {
            return Err(Refusal::InvalidPartitions(topic.partitions));
        }
        if self.topics.contains_key(&topic.name) {
            return Err(Refusal::TopicExists(topic.name));
        }
        let info = TopicInfo {
            id,
            name: topic.name.clone(),
            partitions: topic.partitions,
            configs: topic.configs,
            inherited: BTreeMap::new(),
        };
        self.names_by_id.insert(id, topic.name.clone());
        self.topics.insert(
            topic.name,
            Topic {
                info: info.clone(),
                partitions: vec![Partition::default(); info.partitions as usize],
            },
        );
        Ok(info)
    }

    fn delete_topic(&mut self, name: &str) -> Result<(), Refusal> {
        let topic = self
            .topics
            .remove(name)
            .ok_or(Refusal::UnknownTopicOrPartition)?;
        self.names_by_id.remove(&topic.info.id);
        self.groups.forget_topic(name);
        self.txns.forget_topic(topic.info.id, name, self.clock_ms);
        for (n, partition) in topic.partitions.into_iter().enumerate() {
            let tp = TopicPartition::new(topic.info.id, n as i32);
            for extent in partition.extents.into_values() {
                self.release(extent.object, tp);
            }
        }
        Ok(())
    }

    /// Drops one extent's hold (an extent of `tp`) on an object; the last
    /// one makes it garbage.
    fn release(&mut self, object: u64, tp: TopicPartition) {
        let Some(entry) = self.objects.get_mut(&object) else {
            return;
        };
        entry.live_extents -= 1;
        let held = entry.holders.release(tp);
        debug_assert!(held, "object {} released by {tp:?}, no holder", entry.key);
        if entry.live_extents == 0 {
            let gone = self.objects.remove(&object).expect("just seen");
            self.ledger.retire(&gone.key, self.clock_ms);
            self.garbage.push(gone.key);
        }
    }

    fn init_producer(&mut self, existing: Option<ProducerIdentity>) -> ProducerIdentity {
        let last_ms = self.clock_ms;
        // A transactional id's producer is bumped through its id only.
        if let Some(known) = existing.filter(|k| !self.txns.is_transactional(k.producer_id)) {
            let current = self.producers.get(&known.producer_id).map(|p| p.epoch);
            if current == Some(known.epoch) && known.epoch < i16::MAX {
                let epoch = known.epoch + 1;
                self.producers
                    .insert(known.producer_id, IssuedProducer { epoch, last_ms });
                return ProducerIdentity {
                    producer_id: known.producer_id,
                    epoch,
                };
            }
        }
        let producer_id = self.next_producer_id;
        self.next_producer_id += 1;
        self.producers
            .insert(producer_id, IssuedProducer { epoch: 0, last_ms });
        ProducerIdentity {
            producer_id,
            epoch: 0,
        }
    }

    /// Sequences a commit exactly once per object key (see [`crate::ledger`]).
    fn commit(&mut self, commit: IngestCommit) -> Vec<Result<i64, Refusal>> {
        let refuse = |e: Refusal| vec![Err(e); commit.batches.len()];
        match self.ledger.seen(&commit.object_key) {
            Seen::Answered(answer) => answer,
            Seen::Used => refuse(Refusal::ObjectKeyUsed(commit.object_key.clone())),
            Seen::New if self.too_late(commit.not_before_ms) => {
                // Its object will never be committed: to GC with it now
                // rather than after the bucket sweep finds it.
                let refused = refuse(Refusal::CommitTooLate(commit.object_key.clone()));
                self.ledger.retire(&commit.object_key, self.clock_ms);
                self.garbage.push(commit.object_key);
                refused
            }
            Seen::New => {
                let key = commit.object_key.clone();
                let results = self.sequence(commit);
                self.ledger.answered(&key, results.clone(), self.clock_ms);
                results
            }
        }
    }

    /// Sequences an object's batches: data first, in the order listed, then
    /// each transaction's end with its markers (see [`IngestCommit`]).
    fn sequence(&mut self, commit: IngestCommit) -> Vec<Result<i64, Refusal>> {
        // Appends are dated by the metastore's clock, never the agent's.
        let now_ms = self.clock_ms;
        let object = self.next_object;
        self.next_object += 1;
        // The extents added, by partition.
        let mut holders: BTreeMap<TopicPartition, u64> = BTreeMap::new();
        let mut results: Vec<Option<Result<i64, Refusal>>> = vec![None; commit.batches.len()];
        for (at, b) in commit.batches.iter().enumerate() {
            let transactional = match b.kind {
                BatchKind::Marker { .. } => continue,
                BatchKind::Transactional => true,
                BatchKind::TransactionalAdding => {
                    if let Err(refused) = self.add_to_producers_txn(&b.batch, now_ms) {
                        results[at] = Some(Err(refused));
                        continue;
                    }
                    true
                }
                BatchKind::Plain => false,
            };
            let result = self.sequence_data(&b.batch, transactional, object, now_ms);
            if let Ok((_, true)) = result {
                *holders.entry(b.batch.partition_of()).or_default() += 1;
            }
            results[at] = Some(result.map(|(offset, _)| offset));
        }
        let mut markers_of: Vec<Vec<usize>> = vec![Vec::new(); commit.ends.len()];
        for (at, b) in commit.batches.iter().enumerate() {
            if let BatchKind::Marker { end } = b.kind
                && let Some(markers) = markers_of.get_mut(end as usize)
            {
                markers.push(at);
            }
        }
        for (end, markers) in commit.ends.iter().zip(markers_of) {
            match self.sequence_end(end, &markers, &commit.batches, object, now_ms) {
                Ok((offsets, added)) => {
                    for tp in added {
                        *holders.entry(tp).or_default() += 1;
                    }
                    for (at, offset) in markers.into_iter().zip(offsets) {
                        results[at] = Some(Ok(offset));
                    }
                }
                Err(refusal) => {
                    for at in markers {
                        results[at] = Some(Err(refusal.clone()));
                    }
                }
            }
        }
        self.went_live(object, commit.object_key, commit.object_size, holders);
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(Refusal::InvalidTxnState("a marker of no end".into())))
            })
            .collect()
    }

    /// Adds `batch`'s partition to its producer's transaction, beginning
    /// one if none is ongoing (Produce v12+, see
    /// [`BatchKind::TransactionalAdding`]): refused as AddPartitionsToTxn
    /// would be (a fenced producer, one ending its transaction).
    fn add_to_producers_txn(&mut self, batch: &CommitBatch, now_ms: i64) -> Result<(), Refusal> {
        let Some((id, _)) = self.txns.of_producer(batch.producer_id) else {
            return Err(Refusal::InvalidProducerIdMapping);
        };
        let id = id.to_string();
        self.txns.add(
            &id,
            batch.producer_id,
            batch.producer_epoch,
            &[batch.partition_of()],
            &[],
            now_ms,
        )
    }

    /// Sequences one data batch: the transaction check (a transactional
    /// batch goes only into a partition of an ongoing transaction of its
    /// producer, at its epoch: the KIP-890 check), the idempotence check,
    /// then its offsets. Answers its base offset (a retry's original one)
    /// and whether it added an extent.
    fn sequence_data(
        &mut self,
        batch: &CommitBatch,
        transactional: bool,
        object: u64,
        now_ms: i64,
    ) -> Result<(i64, bool), Refusal> {
        let tp = batch.partition_of();
        if batch.record_count < 1 {
            // It would leave an extent ending before it begins, or move the
            // high watermark back over offsets already given.
            return Err(Refusal::InvalidBatch(format!(
                "{} records",
                batch.record_count
            )));
        }
        let producer_id = batch.producer_id;
        // For a transactional batch: whether its transaction has data here yet.
        let mut first_of_txn = false;
        if transactional {
            let Some((_, txn)) = self.txns.of_producer(producer_id) else {
                return Err(Refusal::InvalidProducerIdMapping);
            };
            if batch.producer_epoch != txn.epoch || txn.expired(now_ms) {
                // Past its timeout, the transaction is as good as aborted
                // with its epoch bumped (what the timeout's markers carry).
                let current = if txn.expired(now_ms) {
                    txn.epoch.saturating_add(1)
                } else {
                    txn.epoch
                };
                return Err(Refusal::InvalidProducerEpoch {
                    producer_id,
                    got: batch.producer_epoch,
                    current,
                });
            }
            match (txn.phase, txn.partitions.get(&tp)) {
                (TxnPhase::Ongoing, Some(first)) => first_of_txn = first.is_none(),
                _ => return Err(Refusal::NotInTransaction),
            }
        } else if producer_id >= 0
            && let Some((_, txn)) = self.txns.of_producer(producer_id)
            && matches!(txn.partitions.get(&tp), Some(Some(_)))
        {
            // ProducerAppendInfo: no plain batch in the middle of its own
            // transaction.
            return Err(Refusal::InvalidTxnState(
                "a non-transactional batch from a producer with an open transaction here".into(),
            ));
        }
        let issued_epoch = self.producers.get_mut(&producer_id).map(|p| {
            p.last_ms = now_ms;
            p.epoch
        });
        let blocks = self.producer_id_blocks;
        let partition = self
            .changing_partition(tp)
            .ok_or(Refusal::UnknownTopicOrPartition)?;
        if producer_id >= 0 {
            let last_sequence = batch.base_sequence.wrapping_add(batch.record_count - 1);
            let check = match issued_epoch {
                None if !blocks => Err(Refusal::UnknownProducerId(producer_id)),
                Some(current) if batch.producer_epoch < current => {
                    Err(Refusal::InvalidProducerEpoch {
                        producer_id,
                        got: batch.producer_epoch,
                        current,
                    })
                }
                Some(_) | None => {
                    let state =
                        partition
                            .producers
                            .entry(producer_id)
                            .or_insert(ProducerPartition {
                                epoch: -1,
                                batches: Default::default(),
                                last_ms: now_ms,
                            });
                    state.check(
                        producer_id,
                        batch.producer_epoch,
                        batch.base_sequence,
                        last_sequence,
                    )
                }
            };
            match check? {
                SequenceCheck::Append => partition
                    .producers
                    .get_mut(&producer_id)
                    .expect("inserted above")
                    .record(
                        batch.producer_epoch,
                        batch.base_sequence,
                        last_sequence,
                        partition.high_watermark,
                        now_ms,
                    ),
                SequenceCheck::Duplicate(original) => return Ok((original, false)),
            }
        }
        let (base_offset, added) = partition.place(batch, object, now_ms);
        if first_of_txn {
            partition.ongoing.insert(base_offset, producer_id);
            let txn = self
                .txns
                .of_producer_mut(producer_id)
                .expect("checked above");
            txn.partitions.insert(tp, Some(base_offset));
        }
        Ok((base_offset, added))
    }

    /// Ends a transaction with its markers (`batches[markers]`), if
    /// [`Txns::check_end`] accepts it: each marker takes the next offset of
    /// its partition, which leaves the transaction's ongoing entry (and, on
    /// abort, enters the aborted index); then the transaction completes.
    /// Answers the markers' offsets and the partitions given an extent.
    fn sequence_end(
        &mut self,
        end: &TxnEnd,
        markers: &[usize],
        batches: &[IngestBatch],
        object: u64,
        now_ms: i64,
    ) -> Result<(Vec<i64>, Vec<TopicPartition>), Refusal> {
        let tps: BTreeSet<TopicPartition> = markers
            .iter()
            .map(|&at| batches[at].batch.partition_of())
            .collect();
        if tps.len() != markers.len() {
            return Err(Refusal::InvalidTxnState(
                "two markers of one transaction in one partition".into(),
            ));
        }
        self.txns.check_end(end, &tps, now_ms)?;
        let malformed = markers.iter().any(|&at| {
            let b = &batches[at].batch;
            b.producer_id != end.producer_id
                || b.producer_epoch != end.marker_epoch()
                || b.record_count != 1
        });
        if malformed {
            return Err(Refusal::InvalidTxnState(
                "a marker of another producer, epoch or size".into(),
            ));
        }
        let firsts = self
            .txns
            .get(&end.transactional_id)
            .map(|t| t.partitions.clone())
            .unwrap_or_default();
        let mut offsets = Vec::with_capacity(markers.len());
        let mut added = Vec::new();
        for &at in markers {
            let batch = &batches[at].batch;
            let tp = batch.partition_of();
            let partition = self
                .changing_partition(tp)
                .expect("a transaction's partitions exist (deleted topics leave it)");
            let (offset, new_extent) = partition.place(batch, object, now_ms);
            if new_extent {
                added.push(tp);
            }
            // A fence's markers carry the bumped epoch: the producer's
            // sequence state starts over at it, as Kafka's marker append does.
            if let Some(state) = partition.producers.get_mut(&end.producer_id)
                && state.epoch < batch.producer_epoch
            {
                state.epoch = batch.producer_epoch;
                state.batches.clear();
            }
            if let Some(Some(first)) = firsts.get(&tp) {
                partition.ongoing.remove(first);
                if !end.commit {
                    let lso_after = partition.last_stable();
                    partition.aborted.push_back(AbortedTxn {
                        producer_id: end.producer_id,
                        first_offset: *first,
                        last_offset: offset,
                        lso_after,
                    });
                }
            }
            offsets.push(offset);
        }
        self.finish_end(end, now_ms);
        Ok((offsets, added))
    }

    /// Completes an accepted end; the producer id is issued at its epoch
    /// from now on (a fenced producer's batches then fail the epoch check).
    fn finish_end(&mut self, end: &TxnEnd, now_ms: i64) {
        let (now, pending) =
            self.txns
                .finish_end(end, now_ms, &mut NextProducerId(&mut self.next_producer_id));
        if end.commit {
            for (group, offsets) in pending {
                self.groups
                    .store_txn_offsets(&group, offsets.into_values().collect(), now_ms);
            }
        }
        self.producers.insert(
            now.producer_id,
            IssuedProducer {
                epoch: now.epoch,
                last_ms: now_ms,
            },
        );
    }

    /// InitProducerId with a transactional id (see [`Txns::init_checked`]).
    fn init_txn_producer(
        &mut self,
        c: InitTxnProducer,
        abort_check_interval_ms: i32,
    ) -> Result<ProducerIdentity, Refusal> {
        let now_ms = self.clock_ms;
        let answer = self.txns.init_checked(
            &c.transactional_id,
            c.timeout_ms,
            c.expected,
            now_ms,
            &mut NextProducerId(&mut self.next_producer_id),
            abort_check_interval_ms,
        );
        // Whatever it answered (a fence also bumps), the id's producer is
        // issued at its current epoch.
        if let Some(t) = self.txns.get(&c.transactional_id) {
            self.producers.insert(
                t.producer_id,
                IssuedProducer {
                    epoch: t.epoch,
                    last_ms: now_ms,
                },
            );
        }
        answer
    }

    fn add_to_txn(&mut self, a: AddToTxn) -> Result<(), Refusal> {
        if a.partitions
            .iter()
            .any(|tp| self.partition(tp.topic_id, tp.partition).is_err())
        {
            return Err(Refusal::UnknownTopicOrPartition);
        }
        self.txns.add(
            &a.transactional_id,
            a.producer_id,
            a.epoch,
            &a.partitions,
            &a.groups,
            self.clock_ms,
        )
    }

    /// TxnOffsetCommit: the transaction's checks, then the group's, then
    /// the offsets wait in the transaction for its end.
    fn txn_commit_offsets(
        &mut self,
        c: TxnCommitOffsets,
    ) -> Result<Result<(), GroupError>, Refusal> {
        let now_ms = self.clock_ms;
        // Nothing is stored unless both checks pass.
        self.txns.check_offsets(
            &c.transactional_id,
            c.producer_id,
            c.epoch,
            &c.commit.group,
            c.commit.offsets.len(),
            now_ms,
        )?;
        if let Err(e) = self.groups.check_txn_commit(&c.commit) {
            return Ok(Err(e));
        }
        self.txns.add_offsets(
            &c.transactional_id,
            c.producer_id,
            c.epoch,
            &c.commit.group,
            c.commit.offsets,
            now_ms,
        )?;
        Ok(Ok(()))
    }

    /// Ends a transaction that needs no marker.
    fn end_txn(&mut self, end: TxnEnd) -> Result<(), Refusal> {
        let now_ms = self.clock_ms;
        self.txns.check_end(&end, &BTreeSet::new(), now_ms)?;
        self.finish_end(&end, now_ms);
        Ok(())
    }

    fn replace_extents(&mut self, r: ReplaceExtents) -> Result<(), Refusal> {
        // First: a key seen before is never swapped in again (and a swap
        // applied twice must not read as "changed", which would make its
        // compactor delete the segment now live).
        if self.ledger.is_known(&r.object_key) {
            return Err(Refusal::ObjectKeyUsed(r.object_key));
        }
        let tp = TopicPartition::new(r.topic_id, r.partition);
        self.check_run(tp, &r.replaced, &r.pieces)?;
        if self.too_late(r.not_before_ms) {
            return Err(Refusal::CommitTooLate(r.object_key));
        }
        let object = self.next_object;
        self.next_object += 1;
        let kept = self.swap_run(object, tp, &r.replaced, r.pieces);
        self.went_live(
            object,
            r.object_key,
            r.object_size,
            BTreeMap::from([(tp, kept)]),
        );
        Ok(())
    }

    /// A merged file's swap: each run on its own terms (see [`ReplaceRuns`]).
    fn replace_runs(&mut self, r: ReplaceRuns) -> Result<Vec<Result<(), Refusal>>, Refusal> {
        if self.ledger.is_known(&r.object_key) {
            return Err(Refusal::ObjectKeyUsed(r.object_key));
        }
        if self.too_late(r.not_before_ms) {
            // Never to be swapped in: to GC now rather than after the sweep.
            self.ledger.retire(&r.object_key, self.clock_ms);
            self.garbage.push(r.object_key.clone());
            return Err(Refusal::CommitTooLate(r.object_key));
        }
        let object = self.next_object;
        self.next_object += 1;
        let mut holders: BTreeMap<TopicPartition, u64> = BTreeMap::new();
        let mut results = Vec::with_capacity(r.runs.len());
        for run in r.runs {
            let checked = self.check_run(run.partition, &run.replaced, &run.pieces);
            if checked.is_ok() {
                let kept = self.swap_run(object, run.partition, &run.replaced, run.pieces);
                *holders.entry(run.partition).or_default() += kept;
            }
            results.push(checked);
        }
        self.went_live(object, r.object_key, r.object_size, holders);
        Ok(results)
    }

    /// Whether `pieces` may replace `replaced`: the pieces tile exactly the
    /// offsets replaced, and the partition holds exactly `replaced` over them.
    fn check_run(
        &self,
        tp: TopicPartition,
        replaced: &[ExtentRef],
        pieces: &[ExtentPiece],
    ) -> Result<(), Refusal> {
        let (Some(first), Some(last)) = (replaced.first(), replaced.last()) else {
            return Err(Refusal::ExtentsChanged);
        };
        let (base_offset, last_offset) = (first.base_offset, last.last_offset);
        let mut next = base_offset;
        for piece in pieces {
            if piece.base_offset != next || piece.last_offset < piece.base_offset {
                return Err(Refusal::ExtentsChanged);
            }
            next = piece.last_offset + 1;
        }
        if pieces.is_empty() || next != last_offset + 1 {
            return Err(Refusal::ExtentsChanged);
        }
        let partition = self.partition(tp.topic_id, tp.partition)?;
        let mut current = partition.extents.range(base_offset..=last_offset);
        let unchanged = replaced.len() == current.clone().count()
            && replaced.iter().all(|want| {
                let (_, have) = current.next().expect("counted");
                have.base_offset == want.base_offset
                    && have.last_offset == want.last_offset
                    && have.position == want.position
                    && have.length == want.length
                    && self
                        .objects
                        .get(&have.object)
                        .is_some_and(|o| o.key == want.object_key)
            });
        if unchanged {
            Ok(())
        } else {
            Err(Refusal::ExtentsChanged)
        }
    }

    /// Swaps a checked run for `pieces` of `object`, releasing the objects
    /// it leaves; returns how many pieces now point into `object`.
    fn swap_run(
        &mut self,
        object: u64,
        tp: TopicPartition,
        replaced: &[ExtentRef],
        mut pieces: Vec<ExtentPiece>,
    ) -> u64 {
        let partition = self.changing_partition(tp).expect("checked");
        // Pieces wholly below the log start (DeleteRecords cut into the
        // first replaced extent after the compactor read it) hold nothing
        // readable: they are not swapped in.
        let log_start = partition.log_start_offset;
        pieces.retain(|p| p.last_offset >= log_start);
        let old: Vec<u64> = replaced
            .iter()
            .filter_map(|e| partition.extents.remove(&e.base_offset))
            .map(|e| e.object)
            .collect();
        let kept = pieces.len() as u64;
        if kept > 0 {
            partition.newest_object.0 = partition.newest_object.0.max(object);
        }
        for piece in pieces {
            partition.extents.insert(
                piece.base_offset,
                Extent {
                    base_offset: piece.base_offset,
                    last_offset: piece.last_offset,
                    max_timestamp: piece.max_timestamp,
                    object,
                    position: piece.position,
                    length: piece.length,
                    appended_ms: piece.appended_ms,
                },
            );
        }
        for old in old {
            self.release(old, tp);
        }
        kept
    }

    /// Records the object committed or compacted under `object` (its id,
    /// drawn before its extents were placed), with the extents each
    /// partition placed in it: live if any extent points into it, and
    /// otherwise garbage at once.
    fn went_live(
        &mut self,
        object: u64,
        key: String,
        size: u64,
        holders: BTreeMap<TopicPartition, u64>,
    ) {
        let live_extents: u64 = holders.values().sum();
        let holders = backlog::Holders::of(holders);
        if live_extents == 0 {
            self.ledger.retire(&key, self.clock_ms);
            self.garbage.push(key);
            return;
        }
        self.ledger.went_live(&key, object);
        self.objects.insert(
            object,
            Object {
                key,
                size,
                live_extents,
                holders,
            },
        );
    }

    fn create_partitions(&mut self, name: &str, count: i32) -> Result<(), Refusal> {
        let topic = self
            .topics
            .get_mut(name)
            .ok_or(Refusal::UnknownTopicOrPartition)?;
        if count <= topic.info.partitions || count > MAX_PARTITIONS {
            return Err(Refusal::InvalidPartitions(count));
        }
        topic.info.partitions = count;
        topic
            .partitions
            .resize(count as usize, Partition::default());
        Ok(())
    }

    fn trim(&mut self, topic_id: TopicId, partition: i32, offset: i64) -> Result<i64, Refusal> {
        let tp = TopicPartition::new(topic_id, partition);
        let p = self
            .changing_partition(tp)
            .ok_or(Refusal::UnknownTopicOrPartition)?;
        if offset > p.high_watermark || offset < 0 {
            return Err(Refusal::OffsetOutOfRange {
                offset,
                log_start_offset: p.log_start_offset,
                high_watermark: p.high_watermark,
            });
        }
        if offset <= p.log_start_offset {
            return Ok(p.log_start_offset);
        }
        p.log_start_offset = offset;
        // Kafka drops a segment's transaction index with the segment.
        while p.aborted.front().is_some_and(|a| a.last_offset < offset) {
            p.aborted.pop_front();
        }
        let below: Vec<i64> = p
            .extents
            .values()
            .take_while(|e| e.last_offset < offset)
            .map(|e| e.base_offset)
            .collect();
        let objects: Vec<u64> = below
            .iter()
            .filter_map(|base| p.extents.remove(base))
            .map(|e| e.object)
            .collect();
        for object in objects {
            self.release(object, tp);
        }
        Ok(offset)
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

    // ---- queries ----

    /// Every topic, as clients see it (with the cluster's topic defaults).
    pub fn topics(&self) -> Vec<TopicInfo> {
        let inherited = self.configs.topic_defaults();
        self.topics
            .values()
            .map(|t| self.answered(t, &inherited))
            .collect()
    }

    pub fn topic(&self, name: &str) -> Option<TopicInfo> {
        let inherited = self.configs.topic_defaults();
        self.topics.get(name).map(|t| self.answered(t, &inherited))
    }

    /// A topic's description as an answer carries it.
    fn answered(&self, topic: &Topic, inherited: &BTreeMap<String, String>) -> TopicInfo {
        TopicInfo {
            inherited: inherited.clone(),
            ..topic.info.clone()
        }
    }

    /// `tp`'s log start offset, if it is a partition.
    fn log_start_of(&self, tp: TopicPartition) -> Option<i64> {
        self.partition(tp.topic_id, tp.partition)
            .ok()
            .map(|p| p.log_start_offset)
    }

    pub fn offsets(&self, id: TopicId, partition: i32) -> Result<PartitionOffsets, Refusal> {
        let p = self.partition(id, partition)?;
        Ok(PartitionOffsets {
            log_start_offset: p.log_start_offset,
            high_watermark: p.high_watermark,
        })
    }

    /// Each partition's high watermark; `None` for one that does not exist.
    pub fn high_watermarks(&self, partitions: &[TopicPartition]) -> Vec<Option<i64>> {
        partitions
            .iter()
            .map(|tp| {
                self.partition(tp.topic_id, tp.partition)
                    .ok()
                    .map(|p| p.high_watermark)
            })
            .collect()
    }

    /// Each partition's offsets, bytes held and idempotent producers
    /// (`None`: no such partition), for DescribeLogDirs and
    /// DescribeProducers. Walks the partitions' extents: an admin request,
    /// bounded by the partitions asked for.
    pub fn partition_states(
        &self,
        partitions: &[TopicPartition],
        with_producers: bool,
    ) -> Vec<Option<PartitionState>> {
        partitions
            .iter()
            .map(|tp| {
                let p = self.partition(tp.topic_id, tp.partition).ok()?;
                Some(PartitionState {
                    log_start_offset: p.log_start_offset,
                    high_watermark: p.high_watermark,
                    size_bytes: p.extents.values().map(|e| e.length).sum(),
                    producers: p
                        .producers
                        .iter()
                        .filter(|_| with_producers)
                        .filter_map(|(&producer_id, state)| {
                            let &(_, last_sequence, _) = state.batches.back()?;
                            Some(ProducerState {
                                producer_id,
                                epoch: state.epoch,
                                last_sequence,
                                last_append_ms: state.last_ms,
                            })
                        })
                        .collect(),
                })
            })
            .collect()
    }

    /// Extents holding `[from, ...)`, adding extents until `max_bytes` is reached
    /// (always at least one if there is data at `from`).
    pub fn read_plan(
        &self,
        id: TopicId,
        partition: i32,
        from: i64,
        max_bytes: u64,
    ) -> Result<ReadPlan, Refusal> {
        let p = self.partition(id, partition)?;
        if from < p.log_start_offset || from > p.high_watermark {
            return Err(Refusal::OffsetOutOfRange {
                offset: from,
                log_start_offset: p.log_start_offset,
                high_watermark: p.high_watermark,
            });
        }
        let mut extents = Vec::new();
        let mut bytes = 0u64;
        let first = p
            .extents
            .range(..=from)
            .next_back()
            .map(|(base, _)| *base)
            .unwrap_or(from);
        for extent in p.extents.range(first..).map(|(_, e)| e) {
            if extent.last_offset < from {
                continue;
            }
            if !extents.is_empty() && bytes >= max_bytes {
                break;
            }
            bytes += extent.length;
            extents.push(self.extent_ref(extent));
        }
        Ok(ReadPlan {
            log_start_offset: p.log_start_offset,
            high_watermark: p.high_watermark,
            extents,
        })
    }

    /// [`State::read_plan`] with the last stable offset and the aborted
    /// transactions with data in the planned extents' offsets.
    pub fn txn_read_plan(
        &self,
        id: TopicId,
        partition: i32,
        from: i64,
        max_bytes: u64,
    ) -> Result<TxnReadPlan, Refusal> {
        let plan = self.read_plan(id, partition, from, max_bytes)?;
        let p = self.partition(id, partition)?;
        let start = plan.extents.first().map_or(from, |e| e.base_offset);
        let end = plan.extents.last().map_or(from, |e| e.last_offset + 1);
        Ok(TxnReadPlan {
            last_stable_offset: p.last_stable(),
            aborted: p.aborted_between(start, end),
            plan,
        })
    }

    pub fn list_offsets(
        &self,
        id: TopicId,
        partition: i32,
        query: OffsetQuery,
    ) -> Result<OffsetAnswer, Refusal> {
        let p = self.partition(id, partition)?;
        Ok(match query {
            OffsetQuery::Earliest => OffsetAnswer::Offset(p.log_start_offset),
            OffsetQuery::Latest => OffsetAnswer::Offset(p.high_watermark),
            OffsetQuery::LastStable => OffsetAnswer::Offset(p.last_stable()),
            OffsetQuery::Timestamp(ts) => p
                .extents
                .values()
                .find(|e| e.max_timestamp >= ts)
                .map(|e| OffsetAnswer::InExtent(self.extent_ref(e)))
                .unwrap_or(OffsetAnswer::NotFound),
            // The first extent holding the largest timestamp (a later equal
            // one does not replace it, as Kafka keeps the first such record).
            OffsetQuery::MaxTimestamp => p
                .extents
                .values()
                .filter(|e| e.max_timestamp >= 0)
                .fold(None::<&Extent>, |best, e| match best {
                    Some(b) if b.max_timestamp >= e.max_timestamp => Some(b),
                    _ => Some(e),
                })
                .map(|e| OffsetAnswer::InExtent(self.extent_ref(e)))
                .unwrap_or(OffsetAnswer::NotFound),
        })
    }

    /// Every agent with its age as of `now_ms`, which must be the
    /// metastore's time (a leader's clock, at least [`State::clock_ms`]).
    pub fn agents(&self, now_ms: i64) -> Vec<AgentInfo> {
        self.agents.list(now_ms.max(self.clock_ms))
    }

    /// As [`State::agents`], at their addresses on `listener`.
    pub fn agents_on(&self, listener: &str, protocol: &str, now_ms: i64) -> Vec<AgentInfo> {
        self.agents
            .list_on(listener, protocol, now_ms.max(self.clock_ms))
    }

    pub fn groups(&self) -> &Groups {
        &self.groups
    }

    /// A topic from its id.
    pub fn topic_by_id(&self, id: TopicId) -> Option<TopicInfo> {
        self.names_by_id.get(&id).and_then(|name| self.topic(name))
    }

    /// Object keys no extent points to any more.
    pub fn garbage(&self) -> &[String] {
        &self.garbage
    }

    /// Those of `keys` that no extent points to and that are not awaiting GC:
    /// objects the metastore has never heard of (or has forgotten).
    pub fn unknown_objects(&self, keys: &[String]) -> Vec<String> {
        keys.iter()
            .filter(|k| !self.ledger.is_known(k))
            .cloned()
            .collect()
    }
}

// ---- how each write is applied (in log order, on every replica) ----

impl Apply for CreateTopic {
    type Output = TopicInfo;
    fn apply(self, state: &mut State) -> Result<TopicInfo, Refusal> {
        let created = state.create_topic(self.id, self.topic)?;
        Ok(TopicInfo {
            inherited: state.configs.topic_defaults(),
            ..created
        })
    }
    /// A blind retry after another client deleted the topic would create it again.
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Apply for DeleteTopic {
    type Output = ();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        state.delete_topic(&self.name)
    }
    /// A blind retry after another client re-created the topic would delete it.
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Apply for Commit {
    /// Per batch, in commit order: its base offset, or why it was refused.
    type Output = Vec<Result<i64, Refusal>>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.commit(self.into()))
    }
    /// A repeated commit of an object key is answered from the ledger.
    fn retry_is_safe(&self) -> bool {
        true
    }
}

impl Apply for ReplaceExtents {
    type Output = ();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        state.replace_extents(self)
    }
    /// A repeated swap is refused (its key is known), not re-applied; but
    /// the compactor must see the first answer, so it does not retry.
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Apply for ReplaceRuns {
    type Output = Vec<Result<(), Refusal>>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        state.replace_runs(self)
    }
    /// As [`ReplaceExtents`]: a repeat is refused, its key being known.
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Apply for InitProducer {
    type Output = ProducerIdentity;
    fn apply(self, state: &mut State) -> Result<ProducerIdentity, Refusal> {
        Ok(state.init_producer(self.existing))
    }
    /// A second one costs only a producer id or an epoch: the producer uses
    /// whichever answer reaches it.
    fn retry_is_safe(&self) -> bool {
        true
    }
}

impl Apply for AllocateProducerIds {
    /// The first id of the block (of `count` ids, 1 to
    /// [`MAX_PRODUCER_ID_BLOCK`]).
    type Output = i64;
    fn apply(self, state: &mut State) -> Result<i64, Refusal> {
        let count = self.count.clamp(1, MAX_PRODUCER_ID_BLOCK);
        let first = state.next_producer_id;
        state.next_producer_id = first.saturating_add(count as i64);
        state.producer_id_blocks = true;
        Ok(first)
    }
    /// A second block only wastes ids.
    fn retry_is_safe(&self) -> bool {
        true
    }
}

impl Apply for ForgetGarbage {
    type Output = ();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        let keys: std::collections::HashSet<String> = self.keys.into_iter().collect();
        state.garbage.retain(|k| !keys.contains(k));
        for key in &keys {
            state.ledger.collected(key, state.clock_ms);
        }
        Ok(())
    }
    fn retry_is_safe(&self) -> bool {
        true
    }
}

impl Apply for RegisterAgent {
    type Output = i32;
    fn apply(self, state: &mut State) -> Result<i32, Refusal> {
        Ok(state
            .agents
            .register(self.host, self.port, self.zone, None, self.now_ms))
    }
    /// The same address registers as the same node.
    fn retry_is_safe(&self) -> bool {
        true
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for RegisterAgentListeners {
    type Output = i32;
    fn apply(self, state: &mut State) -> Result<i32, Refusal> {
        crate::agents::check_listeners(&self.listeners).map_err(Refusal::InvalidConfig)?;
        if self
            .zone
            .as_ref()
            .is_some_and(|z| z.len() > crate::agents::MAX_ZONE_BYTES)
        {
            return Err(Refusal::InvalidConfig(format!(
                "zones have at most {} bytes",
                crate::agents::MAX_ZONE_BYTES
            )));
        }
        let first = &self.listeners[0];
        if (first.host.as_str(), first.port) != (self.host.as_str(), self.port) {
            return Err(Refusal::InvalidConfig(
                "an agent's first listener is its own address".into(),
            ));
        }
        Ok(state.agents.register(
            self.host,
            self.port,
            self.zone,
            Some(self.listeners),
            self.now_ms,
        ))
    }
    /// The same address registers as the same node.
    fn retry_is_safe(&self) -> bool {
        true
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for AgentHeartbeat {
    type Output = bool;
    fn apply(self, state: &mut State) -> Result<bool, Refusal> {
        Ok(state.agents.heartbeat(self.node_id, self.now_ms))
    }
    fn retry_is_safe(&self) -> bool {
        true
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for AlterTopicConfigs {
    type Output = ();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        let topic = state
            .topics
            .get_mut(&self.name)
            .ok_or(Refusal::UnknownTopicOrPartition)?;
        for key in self.delete {
            topic.info.configs.remove(&key);
        }
        topic.info.configs.extend(self.set);
        Ok(())
    }
    /// A blind retry landing after another client's change would undo it.
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Apply for CreatePartitions {
    type Output = ();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        state.create_partitions(&self.name, self.count)
    }
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Apply for Trim {
    /// The partition's log start offset after the trim.
    type Output = i64;
    fn apply(self, state: &mut State) -> Result<i64, Refusal> {
        state.trim(
            self.partition.topic_id,
            self.partition.partition,
            self.offset,
        )
    }
    /// The log start only moves up: a second trim to the same offset is none.
    fn retry_is_safe(&self) -> bool {
        true
    }
}

impl Apply for RecordOrphans {
    type Output = ();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        // Decided here, in log order: a key committed since the sweep
        // looked is live (or remembered) and stays; the others are
        // retired, so their commits are refused from now on.
        for key in self.keys {
            if !state.ledger.is_known(&key) {
                state.ledger.retire(&key, state.clock_ms);
                state.garbage.push(key);
            }
        }
        Ok(())
    }
    /// The state skips keys it knows, so a second time changes nothing.
    fn retry_is_safe(&self) -> bool {
        true
    }
}

impl Apply for JoinGroupV8 {
    type Output = Result<Joined, GroupError>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        let State {
            groups,
            topics,
            acls,
            ..
        } = state;
        Ok(groups.join(self.into(), &TopicsByName(topics, acls), Rules::Format8))
    }
    fn retry_is_safe(&self) -> bool {
        false
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for JoinGroupV10 {
    type Output = Result<Joined, GroupError>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        JoinGroup::from(self).apply(state)
    }
    fn retry_is_safe(&self) -> bool {
        false
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for SyncGroupV8 {
    type Output = Result<Synced, GroupError>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        SyncGroup::from(self).apply(state)
    }
    fn retry_is_safe(&self) -> bool {
        true
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for JoinGroup {
    type Output = Result<Joined, GroupError>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        let rules = Rules::Migrating(state.configs.migration_policy());
        let State {
            groups,
            topics,
            acls,
            ..
        } = state;
        Ok(groups.join(self, &TopicsByName(topics, acls), rules))
    }
    /// A retry of a new member's join would add a second member.
    fn retry_is_safe(&self) -> bool {
        false
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for SyncGroup {
    type Output = Result<Synced, GroupError>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.groups.sync(self))
    }
    /// Applied twice, the second finds the group stable and only marks the
    /// member synced again.
    fn retry_is_safe(&self) -> bool {
        true
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for LeaveGroup {
    /// Per member, in order.
    type Output = Vec<Result<(), GroupError>>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        let policy = state.configs.migration_policy();
        let State {
            groups,
            topics,
            acls,
            ..
        } = state;
        Ok(groups.leave(self, &TopicsByName(topics, acls), policy))
    }
    fn retry_is_safe(&self) -> bool {
        false
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for TickGroup {
    type Output = ();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        let policy = state.configs.migration_policy();
        let State {
            groups,
            topics,
            acls,
            ..
        } = state;
        groups.tick(self, &TopicsByName(topics, acls), policy);
        Ok(())
    }
    fn retry_is_safe(&self) -> bool {
        true
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for ExpireMembers {
    type Output = ();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        let policy = state.configs.migration_policy();
        let State {
            groups,
            topics,
            acls,
            ..
        } = state;
        groups.expire_members(self, &TopicsByName(topics, acls), policy);
        Ok(())
    }
    /// A member expired once is gone; a second time finds nothing.
    fn retry_is_safe(&self) -> bool {
        true
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for CommitOffsets {
    type Output = Result<(), GroupError>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.groups.commit_offsets(self))
    }
    /// A blind retry landing after a later commit of the same group would
    /// move its offset backwards.
    fn retry_is_safe(&self) -> bool {
        false
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

/// The state's topics, as consumer groups look them up, and its ACLs.
struct TopicsByName<'a>(&'a BTreeMap<String, Topic>, &'a crate::acls::Acls);

impl TopicLookup for TopicsByName<'_> {
    fn find(&self, name: &str) -> Option<(TopicId, i32)> {
        self.0.get(name).map(|t| (t.info.id, t.info.partitions))
    }
    fn names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
    fn may_describe<'a>(&'a self, who: &'a Describer) -> Box<dyn Fn(&str) -> bool + 'a> {
        use crate::acls::{CoveringIndex, Requester, authorize, operation, resource};
        // Indexed once, so each name costs only the bindings covering it.
        let index = CoveringIndex::new(self.1.bindings(), resource::TOPIC);
        Box::new(move |name| {
            let requester = Requester {
                principal: &who.principal,
                host: &who.host,
            };
            authorize(
                index.covering(name),
                &requester,
                operation::DESCRIBE,
                resource::TOPIC,
                name,
                who.allow_if_no_acl,
            )
        })
    }
}

impl State {
    /// A consumer-protocol heartbeat that would change nothing: its answer.
    pub fn consumer_unchanged(
        &self,
        hb: &ConsumerHeartbeat,
    ) -> Option<Result<ConsumerAnswer, GroupError>> {
        let hb = self.with_group_timeouts(std::borrow::Cow::Borrowed(hb));
        self.groups
            .consumer_unchanged(&hb, &TopicsByName(&self.topics, &self.acls))
    }

    /// The heartbeat with its group's session timeout and heartbeat
    /// interval where the group's configs set them (KIP-848 group configs
    /// win over the agents'), so a change reaches each member at its next
    /// heartbeat.
    fn with_group_timeouts<'a>(
        &self,
        mut hb: std::borrow::Cow<'a, ConsumerHeartbeat>,
    ) -> std::borrow::Cow<'a, ConsumerHeartbeat> {
        let (session, interval) = self.configs.consumer_timeouts(
            &hb.group,
            hb.session_timeout_ms,
            hb.heartbeat_interval_ms,
        );
        if (session, interval) != (hb.session_timeout_ms, hb.heartbeat_interval_ms) {
            let hb = hb.to_mut();
            hb.session_timeout_ms = session;
            hb.heartbeat_interval_ms = interval;
        }
        hb
    }
}

impl State {
    fn apply_consumer_heartbeat(
        &mut self,
        hb: ConsumerHeartbeat,
        rules: Option<Rules>,
    ) -> Result<ConsumerAnswer, GroupError> {
        let hb = self
            .with_group_timeouts(std::borrow::Cow::Owned(hb))
            .into_owned();
        let rules = rules.unwrap_or(Rules::Migrating(self.configs.migration_policy()));
        let State {
            groups,
            topics,
            acls,
            ..
        } = self;
        groups.consumer_heartbeat(hb, &TopicsByName(topics, acls), rules)
    }
}

impl Apply for ConsumerHeartbeatV8 {
    type Output = Result<ConsumerAnswer, GroupError>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.apply_consumer_heartbeat(self.0.into(), Some(Rules::Format8)))
    }
    fn retry_is_safe(&self) -> bool {
        false
    }
    fn restamp(&mut self, now_ms: i64) {
        self.0.now_ms = now_ms;
    }
}

impl Apply for ConsumerHeartbeatV10 {
    type Output = Result<ConsumerAnswer, GroupError>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.apply_consumer_heartbeat(self.into(), None))
    }
    fn retry_is_safe(&self) -> bool {
        false
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for ConsumerHeartbeat {
    type Output = Result<ConsumerAnswer, GroupError>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.apply_consumer_heartbeat(self, None))
    }
    /// A join again would be a second join; a leave again is refused.
    fn retry_is_safe(&self) -> bool {
        false
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for DeleteGroups {
    /// Per group, in order. A deleted group's offsets held by open
    /// transactions go with it.
    type Output = Vec<Result<(), GroupError>>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        let names = self.groups.clone();
        let results = state.groups.delete(self);
        for (name, result) in names.iter().zip(&results) {
            if result.is_ok() {
                state.txns.forget_group_offsets(name, None);
            }
        }
        Ok(results)
    }
    /// A retry after a member joined a re-created group of the name would
    /// be refused (not empty), never delete a live group; but its answer
    /// would say "not found" for what the first attempt deleted.
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Apply for DeleteOffsets {
    /// Deleted offsets held by open transactions go too.
    type Output = Result<Vec<Result<(), GroupError>>, GroupError>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        let (group, partitions) = (self.group.clone(), self.partitions.clone());
        let result = state.groups.delete_offsets(self);
        if let Ok(results) = &result {
            let deleted: BTreeSet<(String, i32)> = partitions
                .into_iter()
                .zip(results)
                .filter(|(_, r)| r.is_ok())
                .map(|(at, _)| at)
                .collect();
            state.txns.forget_group_offsets(&group, Some(&deleted));
        }
        Ok(result)
    }
    /// A blind retry landing after a new commit of the partition (to an
    /// empty group) would delete that commit.
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Apply for AcquireLease {
    /// Whether `holder` holds the lease now.
    type Output = bool;
    fn apply(self, state: &mut State) -> Result<bool, Refusal> {
        Ok(state
            .leases
            .acquire(self.job, self.holder, self.now_ms, self.ttl_ms))
    }
    /// A holder re-acquiring its own lease renews it.
    fn retry_is_safe(&self) -> bool {
        true
    }
    fn restamp(&mut self, now_ms: i64) {
        self.now_ms = now_ms;
    }
}

impl Apply for ReleaseLease {
    type Output = ();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        state.leases.release(&self.job, &self.holder);
        Ok(())
    }
    /// Releasing twice is releasing once.
    fn retry_is_safe(&self) -> bool {
        true
    }
}

impl Apply for Tick {
    /// The metastore's time once this entry applied.
    type Output = i64;
    fn apply(self, state: &mut State) -> Result<i64, Refusal> {
        Ok(state.clock_ms)
    }
    fn retry_is_safe(&self) -> bool {
        true
    }
}

// ---- how each read is answered ----

impl Query for ListTopics {
    type Output = Vec<TopicInfo>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.topics())
    }
}

impl Query for TopicNamed {
    type Output = Option<TopicInfo>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.topic(&self.name))
    }
}

impl Query for TopicById {
    type Output = Option<TopicInfo>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.topic_by_id(self.id))
    }
}

impl Query for Offsets {
    type Output = PartitionOffsets;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        state.offsets(self.partition.topic_id, self.partition.partition)
    }
}

impl Query for HighWatermarks {
    type Output = Vec<Option<i64>>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.high_watermarks(&self.partitions))
    }
}

impl Query for PartitionStates {
    type Output = Vec<Option<PartitionState>>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.partition_states(&self.partitions, self.with_producers))
    }
}

impl Query for PlanRead {
    type Output = ReadPlan;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        let p = self.partition;
        state.read_plan(p.topic_id, p.partition, self.from, self.max_bytes)
    }
}

impl Query for CompactionWork {
    type Output = Backlog;
    fn query(self, state: &State, now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.backlog(&self, now_ms))
    }
}

impl Query for PlanReads {
    type Output = Vec<Result<ReadPlan, Refusal>>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(self
            .partitions
            .into_iter()
            .map(|(p, from)| state.read_plan(p.topic_id, p.partition, from, self.max_bytes))
            .collect())
    }
}

impl Query for FindOffset {
    type Output = OffsetAnswer;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        let p = self.partition;
        state.list_offsets(p.topic_id, p.partition, self.query)
    }
}

impl Query for DescribeGroup {
    type Output = Option<GroupDescription>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.groups.describe(&self.name))
    }
}

impl Query for DescribeConsumerGroup {
    type Output = Option<ConsumerGroupDescription>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        let name_of = |id: TopicId| state.names_by_id.get(&id).cloned();
        Ok(state.groups.describe_consumer(&self.name, &name_of))
    }
}

impl Query for ListGroups {
    type Output = Vec<GroupListing>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.groups.list())
    }
}

impl Query for GroupOffsets {
    /// Each partition asked (or every one committed) with its offset, if any.
    type Output = Vec<((String, i32), Option<CommittedOffset>)>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.groups.offsets(&self.group, self.partitions))
    }
}

impl Query for ListGarbage {
    type Output = Vec<String>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.garbage().to_vec())
    }
}

impl Query for UnknownObjects {
    type Output = Vec<String>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.unknown_objects(&self.keys))
    }
}

impl Query for ListAgents {
    type Output = Vec<AgentInfo>;
    fn query(self, state: &State, now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.agents(now_ms))
    }
}

impl Apply for AlterScramCredentials {
    type Output = Vec<(String, Result<(), ScramRefusal>)>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.scram.alter(self.alterations))
    }
    /// A blind retry landing after another client's change would undo it.
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Query for ScramCredentialOf {
    type Output = Option<ScramCredential>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.scram.get(&self.user, self.mechanism).cloned())
    }
}

impl Query for DescribeScramCredentials {
    type Output = Vec<crate::scram::UserMechanisms>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.scram.describe(self.users.as_deref()))
    }
}

impl Apply for CreateAcls {
    type Output = Vec<Result<(), String>>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.acls.create(self.bindings))
    }
    /// A blind retry landing after another admin deleted the binding would
    /// bring it back.
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Apply for DeleteAcls {
    type Output = Vec<Vec<crate::acls::AclBinding>>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.acls.delete(&self.filters))
    }
    /// A retry deletes what matches then (a binding created meanwhile too).
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Query for DescribeAcls {
    type Output = Vec<crate::acls::AclBinding>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.acls.describe(&self.filter))
    }
}

impl Query for AclsIfChanged {
    type Output = (u64, Option<Vec<crate::acls::AclBinding>>);
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        let version = state.acls.version();
        Ok(match self.known_version == Some(version) {
            true => (version, None),
            false => (version, Some(state.acls.bindings().cloned().collect())),
        })
    }
}

impl Apply for AlterConfigs {
    type Output = ();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        use crate::dynamic_config::{ConfigTarget, apply_ops};
        match self.target {
            ConfigTarget::Topic(name) => {
                let topic = state
                    .topics
                    .get_mut(&name)
                    .ok_or(Refusal::UnknownTopicOrPartition)?;
                let configs = apply_ops(&topic.info.configs, &self.ops, self.replace)
                    .map_err(Refusal::InvalidConfig)?;
                crate::dynamic_config::check_topic_change(&configs, &self.ops)
                    .map_err(Refusal::InvalidConfig)?;
                topic.info.configs = configs;
                Ok(())
            }
            ConfigTarget::Dynamic(entity) => state
                .configs
                .alter(entity, &self.ops, self.replace)
                .map_err(Refusal::InvalidConfig),
        }
    }
    /// A blind retry landing after another admin's change would undo it.
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Query for DynamicConfigsOf {
    type Output = std::collections::BTreeMap<String, String>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.configs.of(&self.entity))
    }
}

impl Query for ConfiguredGroups {
    type Output = Vec<String>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.configs.groups())
    }
}

impl Query for ClientMetricsIfChanged {
    type Output = (u64, Option<BTreeMap<String, BTreeMap<String, String>>>);
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        let version = state.configs.version();
        Ok(match self.known_version == Some(version) {
            true => (version, None),
            false => (version, Some(state.configs.client_metrics())),
        })
    }
}

impl Query for ListAgentsOn {
    type Output = Vec<AgentInfo>;
    fn query(self, state: &State, now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.agents_on(&self.listener, &self.protocol, now_ms))
    }
}

impl Query for ClientQuotasIfChanged {
    type Output = (
        u64,
        Option<BTreeMap<crate::quotas::QuotaEntity, BTreeMap<String, String>>>,
    );
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        let version = state.configs.version();
        Ok(match self.known_version == Some(version) {
            true => (version, None),
            false => (version, Some(state.configs.client_quotas())),
        })
    }
}

/// As logged before format 11: its transactions time out at once.
impl Apply for InitTxnProducer {
    type Output = ProducerIdentity;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        state.init_txn_producer(self, 0)
    }
    /// A blind repeat bumps the epoch twice (the producer retries itself).
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Apply for InitTxnProducerChecked {
    type Output = ProducerIdentity;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        state.init_txn_producer(self.init, self.abort_check_interval_ms)
    }
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Apply for AddToTxn {
    type Output = ();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        state.add_to_txn(self)
    }
    fn retry_is_safe(&self) -> bool {
        true
    }
}

impl Apply for EndTxn {
    type Output = ();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        state.end_txn(self.end)
    }
    /// A repeat is refused with `TxnEnded`, which answers a retried EndTxn.
    fn retry_is_safe(&self) -> bool {
        true
    }
}

impl Apply for IngestCommit {
    /// Per batch, where it was placed (wire 7; [`Commit`]'s base offsets
    /// before), or why it was refused.
    type Output = Vec<Result<Placed, Refusal>>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        let partitions: Vec<TopicPartition> = self
            .batches
            .iter()
            .map(|b| b.batch.partition_of())
            .collect();
        let results = state.commit(self);
        // Log starts as this commit leaves them (a retried commit answered
        // from the ledger gets them as they are now).
        Ok(results
            .into_iter()
            .zip(partitions)
            .map(|(result, tp)| {
                result.map(|base_offset| Placed {
                    base_offset,
                    log_start_offset: state.log_start_of(tp).unwrap_or(-1),
                })
            })
            .collect())
    }
    /// A repeated commit of an object key is answered from the ledger.
    fn retry_is_safe(&self) -> bool {
        true
    }
}

impl Apply for TxnCommitOffsets {
    type Output = Result<(), GroupError>;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        state.txn_commit_offsets(self)
    }
    /// A blind repeat could land in the producer's next transaction (TV1
    /// keeps the epoch), moving its offsets back: the client retries.
    fn retry_is_safe(&self) -> bool {
        false
    }
    fn restamp(&mut self, now_ms: i64) {
        self.commit.now_ms = now_ms;
    }
}

impl Query for PendingTxnOffsets {
    type Output = Vec<(String, i32)>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state
            .txns
            .pending_partitions(&self.group)
            .into_iter()
            .collect())
    }
}

impl Query for DescribeTxns {
    type Output = Vec<Option<TxnView>>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(self.ids.iter().map(|id| state.txns.view(id)).collect())
    }
}

impl Query for ListTxns {
    type Output = Vec<TxnView>;
    fn query(self, state: &State, now_ms: i64) -> Result<Self::Output, Refusal> {
        let now_ms = now_ms.max(state.clock_ms);
        Ok(state
            .txns
            .iter()
            .filter(|(_, t)| self.phases.is_empty() || self.phases.contains(&t.phase))
            .filter(|(_, t)| {
                self.producer_ids.is_empty() || self.producer_ids.contains(&t.producer_id)
            })
            .filter(|(_, t)| {
                self.min_duration_ms < 0
                    || (t.phase == TxnPhase::Ongoing
                        && now_ms.saturating_sub(t.start_ms) >= self.min_duration_ms)
            })
            .filter_map(|(id, _)| state.txns.view(id))
            .collect())
    }
}

impl Query for ExpiredTxns {
    type Output = Vec<TxnView>;
    fn query(self, state: &State, now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state
            .txns
            .expired(now_ms.max(state.clock_ms), self.limit as usize))
    }
}

impl Query for TxnReadPlans {
    type Output = Vec<Result<TxnReadPlan, Refusal>>;
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(self
            .partitions
            .into_iter()
            .map(|(p, from)| state.txn_read_plan(p.topic_id, p.partition, from, self.max_bytes))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use uuid::Uuid;

    fn create(state: &mut State, name: &str, partitions: i32) -> TopicId {
        let id = Uuid::from_u128(state.topics.len() as u128 + 1);
        let reply = state.apply(CreateTopic {
            id,
            topic: NewTopic {
                name: name.into(),
                partitions,
                configs: Default::default(),
            },
        });
        assert!(reply.is_ok(), "{reply:?}");
        id
    }

    fn batch(topic_id: TopicId, partition: i32, position: u64, count: i32) -> CommitBatch {
        CommitBatch {
            topic_id,
            partition,
            position,
            length: 100,
            record_count: count,
            max_timestamp: 1_000 + position as i64,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        }
    }

    fn idempotent(
        t: TopicId,
        producer: ProducerIdentity,
        sequence: i32,
        count: i32,
    ) -> CommitBatch {
        CommitBatch {
            producer_id: producer.producer_id,
            producer_epoch: producer.epoch,
            base_sequence: sequence,
            ..batch(t, 0, 0, count)
        }
    }

    fn init(s: &mut State, existing: Option<ProducerIdentity>) -> ProducerIdentity {
        match s.apply(InitProducer { existing }) {
            Ok(p) => p,
            other => panic!("{other:?}"),
        }
    }

    /// KIP-730: once ids come in blocks, a producer id the state keeps
    /// nothing of is sequenced by its partition's state alone (created by
    /// its first write), as Kafka sequences it: the first batch at any
    /// sequence, then the usual rules; before, it was an unknown producer.
    #[test]
    fn producer_ids_from_blocks_leave_no_state_until_they_write() {
        let mut s = State::default();
        let t = create(&mut s, "t", 1);
        let early = ProducerIdentity {
            producer_id: 5,
            epoch: 0,
        };
        assert_eq!(
            commit(&mut s, "o0", vec![idempotent(t, early, 0, 1)]),
            vec![Err(Refusal::UnknownProducerId(5))],
            "the rule of entries logged before blocks"
        );
        let first = s.apply(AllocateProducerIds { count: 1_000 }).unwrap();
        assert_eq!(first, 0);
        assert_eq!(
            s.apply(AllocateProducerIds { count: 1_000 }).unwrap(),
            1_000
        );
        assert!(s.producers.is_empty(), "nothing kept of an id handed out");
        let p = ProducerIdentity {
            producer_id: 7,
            epoch: 0,
        };
        assert_eq!(
            commit(&mut s, "o1", vec![idempotent(t, p, 42, 2)]),
            vec![Ok(0)]
        );
        assert_eq!(
            commit(&mut s, "o2", vec![idempotent(t, p, 42, 2)]),
            vec![Ok(0)],
            "a retry"
        );
        assert!(matches!(
            commit(&mut s, "o3", vec![idempotent(t, p, 50, 1)])[0],
            Err(Refusal::OutOfOrderSequence { .. })
        ));
        assert_eq!(
            commit(&mut s, "o4", vec![idempotent(t, p, 44, 1)]),
            vec![Ok(2)]
        );
        assert!(s.producers.is_empty());
        s.check_invariants().unwrap();
    }

    #[test]
    fn idempotent_producers_follow_kafka_sequence_rules() {
        let mut s = State::default();
        let t = create(&mut s, "t", 1);
        let p = init(&mut s, None);
        assert_eq!(
            p,
            ProducerIdentity {
                producer_id: 0,
                epoch: 0
            }
        );
        assert_eq!(
            commit(&mut s, "o1", vec![idempotent(t, p, 0, 3)]),
            vec![Ok(0)]
        );
        // A retry of the same batch, even in a later file, returns the original offset.
        assert_eq!(
            commit(&mut s, "o2", vec![idempotent(t, p, 0, 3)]),
            vec![Ok(0)]
        );
        assert_eq!(
            commit(
                &mut s,
                "o3",
                vec![idempotent(t, p, 3, 2), idempotent(t, p, 3, 2)]
            ),
            vec![Ok(3), Ok(3)]
        );
        assert_eq!(s.offsets(t, 0).unwrap().high_watermark, 5);
        // A gap is refused.
        assert!(matches!(
            commit(&mut s, "o4", vec![idempotent(t, p, 9, 1)])[0],
            Err(Refusal::OutOfOrderSequence {
                last: 4,
                got: 9,
                ..
            })
        ));
        // A bumped epoch restarts at 0; the old epoch is fenced.
        let bumped = init(&mut s, Some(p));
        assert_eq!(
            bumped,
            ProducerIdentity {
                producer_id: 0,
                epoch: 1
            }
        );
        assert!(matches!(
            commit(&mut s, "o5", vec![idempotent(t, p, 5, 1)])[0],
            Err(Refusal::InvalidProducerEpoch {
                got: 0,
                current: 1,
                ..
            })
        ));
        assert!(matches!(
            commit(&mut s, "o6", vec![idempotent(t, bumped, 5, 1)])[0],
            Err(Refusal::OutOfOrderSequence { .. })
        ));
        assert_eq!(
            commit(&mut s, "o7", vec![idempotent(t, bumped, 0, 1)]),
            vec![Ok(5)]
        );
        // A stale identity gets a fresh producer id; an unissued one is refused.
        assert_eq!(init(&mut s, Some(p)).producer_id, 1);
        let stranger = ProducerIdentity {
            producer_id: 77,
            epoch: 0,
        };
        assert_eq!(
            commit(&mut s, "o8", vec![idempotent(t, stranger, 0, 1)]),
            vec![Err(Refusal::UnknownProducerId(77))]
        );
        // Only five batches are remembered for duplicates.
        for n in 0..6 {
            commit(
                &mut s,
                &format!("o9-{n}"),
                vec![idempotent(t, bumped, 1 + n, 1)],
            );
        }
        assert!(matches!(
            commit(&mut s, "o10", vec![idempotent(t, bumped, 1, 1)])[0],
            Err(Refusal::OutOfOrderSequence { .. })
        ));
        assert_eq!(
            commit(&mut s, "o11", vec![idempotent(t, bumped, 6, 1)]),
            vec![Ok(11)]
        );
    }

    fn commit(
        state: &mut State,
        key: &str,
        batches: Vec<CommitBatch>,
    ) -> Vec<Result<i64, Refusal>> {
        match state.apply(Commit {
            object_key: key.into(),
            object_size: 1_000,
            batches,
            not_before_ms: state.clock_ms,
        }) {
            Ok(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// A batch of no records (or fewer) would move the high watermark back
    /// over offsets already given: refused, and the rest of its commit goes on.
    #[test]
    fn a_batch_of_no_records_is_refused() {
        let mut s = State::default();
        let t = create(&mut s, "t", 1);
        commit(&mut s, "o1", vec![batch(t, 0, 0, 3)]);
        let r = commit(
            &mut s,
            "o2",
            vec![batch(t, 0, 0, 0), batch(t, 0, 100, -5), batch(t, 0, 200, 2)],
        );
        assert!(matches!(r[0], Err(Refusal::InvalidBatch(_))), "{r:?}");
        assert!(matches!(r[1], Err(Refusal::InvalidBatch(_))), "{r:?}");
        assert_eq!(r[2], Ok(3));
        assert_eq!(s.offsets(t, 0).unwrap().high_watermark, 5);
    }

    #[test]
    fn offsets_are_contiguous_per_partition() {
        let mut s = State::default();
        let t = create(&mut s, "t", 2);
        let r = commit(
            &mut s,
            "o1",
            vec![batch(t, 0, 0, 3), batch(t, 1, 100, 5), batch(t, 0, 200, 2)],
        );
        assert_eq!(r, vec![Ok(0), Ok(0), Ok(3)]);
        let r = commit(&mut s, "o2", vec![batch(t, 0, 0, 1)]);
        assert_eq!(r, vec![Ok(5)]);
        assert_eq!(s.offsets(t, 0).unwrap().high_watermark, 6);
        assert_eq!(s.offsets(t, 1).unwrap().high_watermark, 5);
    }

    #[test]
    fn a_retried_commit_is_answered_not_sequenced_again() {
        let mut s = State::default();
        let t = create(&mut s, "t", 1);
        let first = commit(&mut s, "o1", vec![batch(t, 0, 0, 3)]);
        let before = s.clone();
        assert_eq!(commit(&mut s, "o1", vec![batch(t, 0, 0, 3)]), first);
        assert_eq!(s, before);
        assert_eq!(commit(&mut s, "o2", vec![batch(t, 0, 0, 1)]), vec![Ok(3)]);
    }

    #[test]
    fn trimming_moves_the_log_start_and_frees_whole_extents() {
        let mut s = State::default();
        let t = create(&mut s, "t", 1);
        commit(&mut s, "o1", vec![batch(t, 0, 0, 5)]);
        commit(&mut s, "o2", vec![batch(t, 0, 0, 5)]);
        let trim = |s: &mut State, offset| {
            s.apply(Trim {
                partition: TopicPartition::new(t, 0),
                offset,
            })
        };
        assert_eq!(trim(&mut s, 3), Ok(3));
        assert!(s.garbage().is_empty(), "o1 still holds offsets 3 and 4");
        assert!(matches!(
            s.read_plan(t, 0, 2, u64::MAX),
            Err(Refusal::OffsetOutOfRange { .. })
        ));
        assert_eq!(
            s.read_plan(t, 0, 3, u64::MAX).unwrap().extents[0].object_key,
            "o1"
        );
        assert_eq!(trim(&mut s, 2), Ok(3), "never moves back");
        assert_eq!(trim(&mut s, 6), Ok(6));
        assert_eq!(s.garbage(), ["o1".to_string()]);
        assert!(matches!(
            trim(&mut s, 11),
            Err(Refusal::OffsetOutOfRange { .. })
        ));
        assert_eq!(trim(&mut s, 10), Ok(10));
        assert_eq!(s.garbage(), ["o1".to_string(), "o2".to_string()]);
        assert_eq!(
            s.list_offsets(t, 0, OffsetQuery::Earliest).unwrap(),
            OffsetAnswer::Offset(10)
        );
    }

    #[test]
    fn topics_grow_partitions_and_change_configs() {
        let mut s = State::default();
        let t = create(&mut s, "t", 2);
        let grow = |s: &mut State, count| {
            s.apply(CreatePartitions {
                name: "t".into(),
                count,
            })
        };
        assert_eq!(grow(&mut s, 2), Err(Refusal::InvalidPartitions(2)));
        assert_eq!(grow(&mut s, 5), Ok(()));
        assert_eq!(s.topic("t").unwrap().partitions, 5);
        assert_eq!(commit(&mut s, "o", vec![batch(t, 4, 0, 1)]), vec![Ok(0)]);
        let alter = AlterTopicConfigs {
            name: "t".into(),
            set: [("retention.ms".to_string(), "5".to_string())].into(),
            delete: vec!["nothing".into()],
        };
        assert_eq!(s.apply(alter), Ok(()));
        assert_eq!(s.topic("t").unwrap().configs["retention.ms"], "5");
    }

    #[test]
    fn unknown_objects_are_neither_referenced_nor_garbage() {
        let mut s = State::default();
        let t = create(&mut s, "t", 1);
        commit(&mut s, "live", vec![batch(t, 0, 0, 1)]);
        commit(&mut s, "refused", vec![batch(t, 7, 0, 1)]);
        let keys = ["live", "refused", "stray"].map(String::from);
        assert_eq!(s.unknown_objects(&keys), vec!["stray".to_string()]);
    }

    #[test]
    fn adjacent_batches_merge_into_one_extent() {
        let mut s = State::default();
        let t = create(&mut s, "t", 1);
        commit(&mut s, "o1", vec![batch(t, 0, 0, 3), batch(t, 0, 100, 2)]);
        let plan = s.read_plan(t, 0, 0, u64::MAX).unwrap();
        assert_eq!(plan.extents.len(), 1);
        assert_eq!(plan.extents[0].last_offset, 4);
        assert_eq!(plan.extents[0].length, 200);
        let plan = s.read_plan(t, 0, 4, u64::MAX).unwrap();
        assert_eq!(plan.extents.len(), 1);
        assert!(s.read_plan(t, 0, 5, u64::MAX).unwrap().extents.is_empty());
        assert!(matches!(
            s.read_plan(t, 0, 6, u64::MAX),
            Err(Refusal::OffsetOutOfRange { .. })
        ));
    }

    #[test]
    fn unknown_partition_is_refused_per_batch() {
        let mut s = State::default();
        let t = create(&mut s, "t", 1);
        let r = commit(
            &mut s,
            "o1",
            vec![
                batch(t, 1, 0, 1),
                batch(Uuid::nil(), 0, 100, 1),
                batch(t, 0, 200, 1),
            ],
        );
        assert_eq!(
            r,
            vec![
                Err(Refusal::UnknownTopicOrPartition),
                Err(Refusal::UnknownTopicOrPartition),
                Ok(0)
            ]
        );
        // An object none of whose batches landed is garbage at once.
        commit(&mut s, "o2", vec![batch(t, 9, 0, 1)]);
        assert_eq!(s.garbage(), ["o2".to_string()]);
    }

    #[test]
    fn deleting_a_topic_frees_its_objects() {
        let mut s = State::default();
        let a = create(&mut s, "a", 1);
        let b = create(&mut s, "b", 1);
        commit(
            &mut s,
            "shared",
            vec![batch(a, 0, 0, 1), batch(b, 0, 100, 1)],
        );
        commit(&mut s, "only-a", vec![batch(a, 0, 0, 1)]);
        assert_eq!(s.apply(DeleteTopic { name: "a".into() }), Ok(()));
        assert_eq!(s.garbage(), ["only-a".to_string()]);
        assert_eq!(s.apply(DeleteTopic { name: "b".into() }), Ok(()));
        assert_eq!(s.garbage(), ["only-a".to_string(), "shared".to_string()]);
        assert_eq!(
            s.apply(DeleteTopic { name: "b".into() }),
            Err(Refusal::UnknownTopicOrPartition)
        );
    }

    #[test]
    fn topic_validation() {
        let mut s = State::default();
        create(&mut s, "ok.name_1-x", 1);
        for (name, partitions) in [
            ("", 1),
            ("..", 1),
            ("bad/name", 1),
            ("fine", 0),
            ("fine", MAX_PARTITIONS + 1),
        ] {
            let reply = s.apply(CreateTopic {
                id: Uuid::from_u128(99),
                topic: NewTopic {
                    name: name.into(),
                    partitions,
                    configs: Default::default(),
                },
            });
            assert!(reply.is_err(), "{name} {partitions}");
        }
        let dup = s.apply(CreateTopic {
            id: Uuid::from_u128(98),
            topic: NewTopic {
                name: "ok.name_1-x".into(),
                partitions: 1,
                configs: Default::default(),
            },
        });
        assert_eq!(dup, Err(Refusal::TopicExists("ok.name_1-x".into())));
    }

    #[test]
    fn timestamp_lookup_finds_first_extent_reaching_target() {
        let mut s = State::default();
        let t = create(&mut s, "t", 1);
        commit(&mut s, "o1", vec![batch(t, 0, 0, 2)]); // max ts 1000
        commit(&mut s, "o2", vec![batch(t, 0, 500, 2)]); // max ts 1500
        let at = |ts| s.list_offsets(t, 0, OffsetQuery::Timestamp(ts)).unwrap();
        assert!(matches!(at(900), OffsetAnswer::InExtent(e) if e.base_offset == 0));
        assert!(matches!(at(1200), OffsetAnswer::InExtent(e) if e.base_offset == 2));
        assert_eq!(at(2000), OffsetAnswer::NotFound);
        assert_eq!(
            s.list_offsets(t, 0, OffsetQuery::Latest).unwrap(),
            OffsetAnswer::Offset(4)
        );
        // The largest timestamp: the first extent holding it, even if a later
        // one ties.
        let max = |s: &State| s.list_offsets(t, 0, OffsetQuery::MaxTimestamp).unwrap();
        assert!(matches!(max(&s), OffsetAnswer::InExtent(e) if e.base_offset == 2));
        commit(&mut s, "o3", vec![batch(t, 0, 500, 2)]); // max ts 1500 again
        assert!(matches!(max(&s), OffsetAnswer::InExtent(e) if e.base_offset == 2));
        let empty = create(&mut s, "empty", 1);
        assert_eq!(
            s.list_offsets(empty, 0, OffsetQuery::MaxTimestamp).unwrap(),
            OffsetAnswer::NotFound
        );
    }

    fn replace(
        s: &mut State,
        t: TopicId,
        replaced: Vec<ExtentRef>,
        key: &str,
    ) -> Result<(), Refusal> {
        let length: u64 = replaced.iter().map(|e| e.length).sum();
        let piece = ExtentPiece {
            base_offset: replaced.first().map_or(0, |e| e.base_offset),
            last_offset: replaced.last().map_or(0, |e| e.last_offset),
            max_timestamp: replaced.iter().map(|e| e.max_timestamp).max().unwrap_or(-1),
            position: 0,
            length,
            appended_ms: 0,
        };
        s.apply(ReplaceExtents {
            topic_id: t,
            partition: 0,
            replaced,
            object_key: key.into(),
            object_size: length + 68,
            pieces: vec![piece],
            not_before_ms: 0,
        })
    }

    #[test]
    fn replacing_extents_is_a_compare_and_set() {
        let mut s = State::default();
        let t = create(&mut s, "t", 1);
        let other = create(&mut s, "other", 1);
        commit(
            &mut s,
            "i1",
            vec![batch(t, 0, 0, 2), batch(other, 0, 100, 1)],
        );
        commit(&mut s, "i2", vec![batch(t, 0, 0, 3)]);
        commit(&mut s, "i3", vec![batch(t, 0, 0, 1)]);
        let plan = s.read_plan(t, 0, 0, u64::MAX).unwrap();
        assert_eq!(plan.extents.len(), 3);
        let first_two = plan.extents[..2].to_vec();

        // A stale view (an extent that is not there) is refused and changes nothing.
        let mut stale = first_two.clone();
        stale[1].object_key = "elsewhere".into();
        assert_eq!(
            replace(&mut s, t, stale, "seg0"),
            Err(Refusal::ExtentsChanged)
        );
        assert_eq!(s.read_plan(t, 0, 0, u64::MAX).unwrap(), plan);

        replace(&mut s, t, first_two.clone(), "seg1").unwrap();
        let after = s.read_plan(t, 0, 0, u64::MAX).unwrap();
        assert_eq!(after.extents.len(), 2);
        assert_eq!(
            (after.extents[0].base_offset, after.extents[0].last_offset),
            (0, 4)
        );
        assert_eq!(after.extents[0].object_key, "seg1");
        assert_eq!(after.extents[0].max_timestamp, 1_000);
        // i1 is still used by `other`; i2 is garbage now.
        assert_eq!(s.garbage(), ["i2".to_string()]);
        // Replaying the same swap fails: the extents are gone.
        assert_eq!(
            replace(&mut s, t, first_two, "seg2"),
            Err(Refusal::ExtentsChanged)
        );

        s.apply(ForgetGarbage {
            keys: vec!["i2".into()],
        })
        .unwrap();
        assert!(s.garbage().is_empty());
    }

    #[test]
    fn replacement_pieces_must_tile_the_replaced_offsets() {
        let mut s = State::default();
        let t = create(&mut s, "t", 1);
        commit(&mut s, "i1", vec![batch(t, 0, 0, 4)]);
        commit(&mut s, "i2", vec![batch(t, 0, 0, 4)]);
        let replaced = s.read_plan(t, 0, 0, u64::MAX).unwrap().extents;
        let piece = |base, last, position| ExtentPiece {
            base_offset: base,
            last_offset: last,
            max_timestamp: 7,
            position,
            length: 100,
            appended_ms: 0,
        };
        let swap = |pieces| ReplaceExtents {
            topic_id: t,
            partition: 0,
            replaced: replaced.clone(),
            object_key: "seg".into(),
            object_size: 300,
            pieces,
            not_before_ms: 0,
        };
        for bad in [
            vec![piece(0, 2, 0), piece(4, 7, 100)],
            vec![piece(0, 6, 0)],
            vec![],
        ] {
            assert_eq!(s.apply(swap(bad)), Err(Refusal::ExtentsChanged));
        }
        let good = vec![piece(0, 2, 0), piece(3, 5, 100), piece(6, 7, 200)];
        assert_eq!(s.apply(swap(good)), Ok(()));
        let plan = s.read_plan(t, 0, 4, u64::MAX).unwrap();
        assert_eq!(plan.extents.len(), 2);
        assert_eq!(
            (plan.extents[0].base_offset, plan.extents[0].position),
            (3, 100)
        );
        assert_eq!(s.garbage(), ["i1".to_string(), "i2".to_string()]);
    }

    proptest! {
        /// Whatever the interleaving of commits, every partition's offsets are
        /// handed out exactly once, contiguously from 0, and the extents tile them.
        #[test]
        fn offsets_are_unique_and_contiguous(
            commits in proptest::collection::vec(
                proptest::collection::vec((0i32..4, 1i32..50), 1..10), 1..30)
        ) {
            let mut s = State::default();
            let t = create(&mut s, "t", 4);
            let mut seen: Vec<Vec<(i64, i32)>> = vec![Vec::new(); 4];
            for (n, batches) in commits.iter().enumerate() {
                let list: Vec<CommitBatch> = batches.iter().enumerate()
                    .map(|(i, &(p, c))| batch(t, p, i as u64 * 100, c)).collect();
                let results = commit(&mut s, &format!("o{n}"), list);
                for (&(p, c), r) in batches.iter().zip(results) {
                    seen[p as usize].push((r.unwrap(), c));
                }
            }
            for (p, got) in seen.iter().enumerate() {
                let mut next = 0i64;
                for &(base, count) in got {
                    prop_assert_eq!(base, next);
                    next += count as i64;
                }
                prop_assert_eq!(s.offsets(t, p as i32).unwrap().high_watermark, next);
                let plan = s.read_plan(t, p as i32, 0, u64::MAX).unwrap();
                let mut expect = 0i64;
                for e in &plan.extents {
                    prop_assert_eq!(e.base_offset, expect);
                    expect = e.last_offset + 1;
                }
                prop_assert_eq!(expect, next);
            }
        }
    }

    /// Two agents whose clocks differ by an hour used to expire each other's
    /// group members on every heartbeat (each stamped `last_seen` with its
    /// own clock). Replicated entries now carry the leader's time only.
    #[test]
    fn senders_clocks_do_not_decide_anything() {
        let mut s = State::default();
        let hour = 3_600_000;
        // Joined through an agent whose clock is an hour behind the leader's.
        let join = JoinGroup {
            group: "g".into(),
            member_id: String::new(),
            instance_id: None,
            client_id: "c".into(),
            client_host: String::new(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), vec![])],
            subscribed_topics: None,
            require_known_member_id: false,
            fresh_id: "1".into(),
            now_ms: 1_000_000 - hour,
            owned: None,
            rules: JoinRules::BEFORE_FORMAT_11,
        };
        let member = match at(&mut s, 1_000_000, join) {
            Ok(Ok(Joined::Member(id))) => id,
            other => panic!("{other:?}"),
        };
        // Its last sight is the leader's time of the join.
        let last_seen = |s: &State| s.groups().get("g").unwrap().members[&member].last_seen_ms;
        assert_eq!(last_seen(&s), 1_000_000);
        // An expiry sent with a time an hour ahead: the member must stay.
        at(
            &mut s,
            1_001_000,
            ExpireMembers {
                group: "g".into(),
                members: vec![(member.clone(), 0)],
                now_ms: 1_001_000 + hour,
            },
        )
        .unwrap();
        assert_eq!(s.groups().get("g").unwrap().members.len(), 1);
        // The leader's clock never runs backwards, whatever a new leader reads.
        at(&mut s, 5, ForgetGarbage { keys: vec![] }).unwrap();
        assert_eq!(s.clock_ms(), 1_001_000);
    }

    /// Any group name in a Heartbeat, SyncGroup or LeaveGroup created a group
    /// (1,000 junk heartbeats left 1,000 groups); offsets never expired.
    #[test]
    fn groups_are_created_only_by_joins_and_standalone_commits_and_expire() {
        // Retention as `offsets.retention.minutes` sets it (an hour here).
        const OFFSETS_RETENTION_MS: i64 = 3_600_000;
        let mut s = State::default();
        at(
            &mut s,
            500,
            AlterConfigs {
                target: crate::dynamic_config::ConfigTarget::Dynamic(crate::ConfigEntity::Cluster),
                ops: vec![crate::dynamic_config::ConfigOp::Set(
                    "offsets.retention.minutes".into(),
                    "60".into(),
                )],
                replace: false,
            },
        )
        .unwrap();
        for n in 0..100 {
            let group = format!("junk-{n}");
            let beat = s.groups().check_heartbeat(&GroupHeartbeat {
                group: group.clone(),
                generation: 1,
                member_id: "m".into(),
                instance_id: None,
            });
            assert_eq!(beat, (Err(GroupError::UnknownMemberId), false));
            let sync = at(
                &mut s,
                1_000,
                SyncGroup {
                    group: group.clone(),
                    generation: 1,
                    member_id: "m".into(),
                    instance_id: None,
                    protocol_type: None,
                    protocol: None,
                    assignments: vec![],
                    now_ms: 0,
                    decoded: vec![],
                    decodes: true,
                },
            );
            assert_eq!(sync, Ok(Err(GroupError::UnknownMemberId)));
            at(
                &mut s,
                1_000,
                LeaveGroup {
                    group: group.clone(),
                    members: vec![Leaving {
                        member_id: "m".into(),
                        instance_id: None,
                    }],
                    now_ms: 0,
                },
            )
            .unwrap();
            let reply = at(
                &mut s,
                1_000,
                CommitOffsets {
                    group,
                    generation: 3,
                    member_id: "m".into(),
                    instance_id: None,
                    offsets: vec![OffsetToCommit {
                        topic: "t".into(),
                        partition: 0,
                        offset: 1,
                        leader_epoch: -1,
                        metadata: None,
                    }],
                    now_ms: 0,
                },
            );
            assert_eq!(reply, Ok(Err(GroupError::GroupIdNotFound)));
        }
        assert!(
            s.groups().list().is_empty(),
            "junk requests left groups behind"
        );

        // A standalone commit keeps its group; metadata over the limit is not stored.
        let commit = |offset: i64, metadata: Option<String>| CommitOffsets {
            group: "standalone".into(),
            generation: -1,
            member_id: String::new(),
            instance_id: None,
            offsets: vec![OffsetToCommit {
                topic: "t".into(),
                partition: 0,
                offset,
                leader_epoch: -1,
                metadata,
            }],
            now_ms: 0,
        };
        at(&mut s, 2_000, commit(7, Some("x".repeat(5_000))))
            .unwrap()
            .unwrap();
        assert!(s.groups().get("standalone").unwrap().offsets.is_empty());
        at(&mut s, 3_000, commit(7, Some("fine".into())))
            .unwrap()
            .unwrap();
        assert_eq!(
            s.groups().get("standalone").unwrap().offsets[&("t".to_string(), 0)].offset,
            7
        );
        // Offsets live for the retention after their commit, then go with the group.
        at(
            &mut s,
            3_000 + OFFSETS_RETENTION_MS - 1,
            ForgetGarbage { keys: vec![] },
        )
        .unwrap();
        assert!(s.groups().get("standalone").is_some());
        at(
            &mut s,
            3_000 + OFFSETS_RETENTION_MS + 120_000,
            ForgetGarbage { keys: vec![] },
        )
        .unwrap();
        assert!(s.groups().get("standalone").is_none());
    }

    /// Dynamic configs act where they are read: the cluster's topic
    /// defaults in every answer about a topic (and in which topics are
    /// keyed), a group's timeouts in its members' next heartbeat.
    #[test]
    fn dynamic_configs_reach_topics_and_consumer_groups() {
        let mut s = State::default();
        create(&mut s, "t", 1);
        use crate::dynamic_config::{ConfigOp, ConfigTarget};
        let alter = |entity: crate::ConfigEntity, pairs: &[(&str, &str)]| AlterConfigs {
            target: ConfigTarget::Dynamic(entity),
            ops: pairs
                .iter()
                .map(|(k, v)| ConfigOp::Set(k.to_string(), v.to_string()))
                .collect(),
            replace: false,
        };
        let cluster = alter(
            crate::ConfigEntity::Cluster,
            &[
                ("log.retention.ms", "1000"),
                ("log.cleanup.policy", "compact"),
            ],
        );
        at(&mut s, 1_000, cluster).unwrap();
        let t = s.topic("t").unwrap();
        assert_eq!((t.config().retention_ms, t.config().compact), (1_000, true));
        assert!(t.configs.is_empty(), "the topic itself sets nothing");
        // The topic's own setting wins; its whole result is checked.
        let topic = |ops: Vec<ConfigOp>| AlterConfigs {
            target: ConfigTarget::Topic("t".into()),
            ops,
            replace: false,
        };
        at(
            &mut s,
            1_000,
            topic(vec![ConfigOp::Set("retention.ms".into(), "5".into())]),
        )
        .unwrap();
        assert_eq!(s.topic("t").unwrap().config().retention_ms, 5);
        let refused = at(
            &mut s,
            1_000,
            topic(vec![ConfigOp::Set("dummy.doesntexist".into(), "1".into())]),
        );
        assert!(
            matches!(refused, Err(Refusal::InvalidConfig(_))),
            "{refused:?}"
        );
        // A value older floe stored unchecked does not block other keys.
        at(
            &mut s,
            1_000,
            AlterTopicConfigs {
                name: "t".into(),
                set: [("cleanup.policy".to_string(), "compact,shred".to_string())].into(),
                delete: vec![],
            },
        )
        .unwrap();
        at(
            &mut s,
            1_000,
            topic(vec![ConfigOp::Set("retention.ms".into(), "7".into())]),
        )
        .unwrap();
        assert_eq!(s.topic("t").unwrap().config().retention_ms, 7);
        let bad = alter(crate::ConfigEntity::Cluster, &[("log.retention.ms", "x")]);
        assert!(matches!(
            at(&mut s, 1_000, bad),
            Err(Refusal::InvalidConfig(_))
        ));

        // A group's session timeout reaches its member at its next heartbeat.
        let group = alter(
            crate::ConfigEntity::Group("g".into()),
            &[("consumer.session.timeout.ms", "12000")],
        );
        at(&mut s, 1_000, group).unwrap();
        let mut owned = vec![];
        let beat = |member_epoch: i32,
                    heartbeat_interval_ms: i32,
                    owned: &Vec<(TopicId, Vec<i32>)>| ConsumerHeartbeat {
            group: "g".into(),
            member_id: "m".into(),
            member_epoch,
            instance_id: None,
            rack_id: None,
            rebalance_timeout_ms: 30_000,
            subscribed_topics: Some(vec!["t".into()]),
            subscribed_regex: None,
            assignor: None,
            owned: Some(owned.clone()),
            client_id: "c".into(),
            client_host: "h".into(),
            session_timeout_ms: 45_000,
            heartbeat_interval_ms,
            now_ms: 0,
            describer: None,
        };
        let answer = at(&mut s, 2_000, beat(0, 5_000, &owned)).unwrap().unwrap();
        assert_eq!(answer.heartbeat_interval_ms, 5_000);
        owned = answer.assignment.clone().unwrap();
        let member = |s: &State| {
            let m = &s.groups().consumer_group("g").unwrap().members["m"];
            (m.session_timeout_ms, m.heartbeat_interval_ms)
        };
        assert_eq!(member(&s), (12_000, 5_000));
        // A shorter session, and agents whose interval would miss it: cut.
        let group = alter(
            crate::ConfigEntity::Group("g".into()),
            &[("consumer.session.timeout.ms", "9000")],
        );
        at(&mut s, 3_000, group).unwrap();
        let epoch = answer.member_epoch;
        assert!(
            s.consumer_unchanged(&beat(epoch, 10_000, &owned)).is_none(),
            "a changed timeout is written, not answered from the state"
        );
        let answer = at(&mut s, 4_000, beat(epoch, 10_000, &owned))
            .unwrap()
            .unwrap();
        assert_eq!(answer.heartbeat_interval_ms, 3_000);
        assert_eq!(member(&s), (9_000, 3_000));
        // Then the leader answers it from its state, with the group's interval.
        let unchanged = s.consumer_unchanged(&beat(epoch, 10_000, &owned));
        assert_eq!(unchanged.unwrap().unwrap().heartbeat_interval_ms, 3_000);
    }

    /// Offsets of a deleted topic went on applying to a topic re-created
    /// under its name; Kafka drops them with the topic.
    #[test]
    fn deleting_a_topic_drops_its_committed_offsets() {
        let mut s = State::default();
        create(&mut s, "t", 1);
        create(&mut s, "u", 1);
        let offsets = ["t", "u"]
            .map(|topic| OffsetToCommit {
                topic: topic.into(),
                partition: 0,
                offset: 5,
                leader_epoch: -1,
                metadata: None,
            })
            .to_vec();
        let commit = CommitOffsets {
            group: "g".into(),
            generation: -1,
            member_id: String::new(),
            instance_id: None,
            offsets,
            now_ms: 0,
        };
        at(&mut s, 1_000, commit).unwrap().unwrap();
        at(&mut s, 1_000, DeleteTopic { name: "t".into() }).unwrap();
        let left: Vec<_> = s
            .groups()
            .get("g")
            .unwrap()
            .offsets
            .keys()
            .cloned()
            .collect();
        assert_eq!(left, vec![("u".to_string(), 0)]);
    }

    /// Applies `command` as a leader would propose it at `at_ms`.
    fn at<C: Apply>(s: &mut State, at_ms: i64, command: C) -> Result<C::Output, Refusal> {
        let reply = s.apply_proposal(Proposal {
            at_ms,
            command: command.into(),
        });
        reply.answer::<C>().unwrap()
    }

    fn commit_at(
        s: &mut State,
        at_ms: i64,
        key: &str,
        batches: Vec<CommitBatch>,
    ) -> Vec<Result<i64, Refusal>> {
        match at(
            s,
            at_ms,
            Commit {
                object_key: key.into(),
                object_size: 1_000,
                batches,
                not_before_ms: at_ms,
            },
        ) {
            Ok(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// Producer ids and their per-partition state never expired: each
    /// InitProducerId grew the state for good (Kafka: producer.id.expiration.ms).
    #[test]
    fn unused_producer_ids_expire_and_may_start_over() {
        let mut s = State::default();
        let t = create(&mut s, "t", 1);
        let day = PRODUCER_ID_EXPIRATION_MS;
        let p = match at(&mut s, 1_000, InitProducer { existing: None }) {
            Ok(p) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            commit_at(&mut s, 2_000, "a", vec![idempotent(t, p, 0, 5)]),
            vec![Ok(0)]
        );
        // Still used within the day: kept.
        assert_eq!(
            commit_at(&mut s, 2_000 + day - 1, "b", vec![idempotent(t, p, 5, 5)]),
            vec![Ok(5)]
        );
        let other = match at(&mut s, 3_000, InitProducer { existing: None }) {
            Ok(p) => p,
            other => panic!("{other:?}"),
        };
        // A day later (the sweep runs with the next proposal), both are gone.
        at(&mut s, 4_000 + 2 * day, ForgetGarbage { keys: vec![] }).unwrap();
        assert!(s.producers.is_empty(), "{:?}", s.producers);
        assert!(s.topics["t"].partitions[0].producers.is_empty());
        assert_eq!(
            commit_at(
                &mut s,
                5_000 + 2 * day,
                "c",
                vec![idempotent(t, other, 0, 1)]
            ),
            vec![Err(Refusal::UnknownProducerId(other.producer_id))]
        );
        // Re-initialised, a producer with no state in a partition may start
        // at any sequence (KIP-360): its retries after an expiry succeed.
        let again = match at(&mut s, 6_000 + 2 * day, InitProducer { existing: None }) {
            Ok(p) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            commit_at(
                &mut s,
                7_000 + 2 * day,
                "d",
                vec![idempotent(t, again, 42, 1)]
            ),
            vec![Ok(10)]
        );
        assert_eq!(
            commit_at(
                &mut s,
                7_001 + 2 * day,
                "e",
                vec![idempotent(t, again, 44, 1)]
            ),
            vec![Err(Refusal::OutOfOrderSequence {
                producer_id: again.producer_id,
                last: 42,
                got: 44
            })],
            "once started, sequences must follow"
        );
    }

    /// Defect: commit idempotency was a window (4,096 commits or 200,000
    /// batch results). A retry arriving after its answer was evicted was
    /// sequenced again: idempotent batches answered Duplicate, the new object
    /// had no extent, and its key went to GC while the first copy's extents
    /// still pointed into it; plain batches were stored twice under one key.
    #[test]
    fn a_commit_retried_after_its_answer_is_forgotten_is_never_sequenced_again() {
        let mut s = State::default();
        let t = create(&mut s, "t", 1);
        let p = match s.apply(InitProducer { existing: None }) {
            Ok(p) => p,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            commit(&mut s, "idem", vec![idempotent(t, p, 0, 2)]),
            vec![Ok(0)]
        );
        assert_eq!(
            commit(&mut s, "plain", vec![batch(t, 0, 0, 3)]),
            vec![Ok(2)]
        );
        // A retry while the answer is remembered gets the same answer.
        assert_eq!(
            commit(&mut s, "plain", vec![batch(t, 0, 0, 3)]),
            vec![Ok(2)]
        );
        // Push both answers out of memory: by count, once they are older
        // than the least time answers are kept...
        let later = crate::ledger::ANSWER_MIN_MS + 1;
        for n in 0..=crate::ledger::ANSWERS_MAX_RESULTS / 1_000 {
            let many = (0..1_000).map(|i| batch(t, 0, i * 100, 1)).collect();
            commit_at(&mut s, later, &format!("filler-{n}"), many);
        }
        let hw = s.offsets(t, 0).unwrap().high_watermark;
        for key in ["idem", "plain"] {
            let again = commit(&mut s, key, vec![batch(t, 0, 0, 1)]);
            assert_eq!(again, vec![Err(Refusal::ObjectKeyUsed(key.into()))]);
        }
        assert_eq!(
            s.offsets(t, 0).unwrap().high_watermark,
            hw,
            "nothing sequenced twice"
        );
        assert!(
            s.garbage().is_empty(),
            "acknowledged objects handed to GC: {:?}",
            s.garbage()
        );
        s.check_invariants().unwrap();
    }

    /// Defect: the orphan sweep listed old objects, asked which were unknown,
    /// then recorded them in three steps; a commit landing in between was
    /// acknowledged and then deleted.
    #[test]
    fn the_orphan_sweep_cannot_collect_a_key_committed_after_it_looked() {
        let mut s = State::default();
        let t = create(&mut s, "t", 1);
        // The sweep looks: nobody knows "late" yet.
        assert_eq!(
            s.unknown_objects(&["late".to_string()]),
            vec!["late".to_string()]
        );
        // Its commit lands (and is acknowledged) before the sweep decides.
        assert_eq!(commit(&mut s, "late", vec![batch(t, 0, 0, 2)]), vec![Ok(0)]);
        s.apply(RecordOrphans {
            keys: vec!["late".into()],
        })
        .unwrap();
        assert!(s.garbage().is_empty(), "a committed key was collected");
        assert_eq!(s.read_plan(t, 0, 0, u64::MAX).unwrap().extents.len(), 1);
        // The other order: declared an orphan first, its commit is refused,
        // so its producers get an error and never an acknowledgement.
        s.apply(RecordOrphans {
            keys: vec!["later".into()],
        })
        .unwrap();
        assert_eq!(s.garbage(), ["later".to_string()]);
        assert_eq!(
            commit(&mut s, "later", vec![batch(t, 0, 0, 2)]),
            vec![Err(Refusal::ObjectKeyUsed("later".into()))]
        );
        assert_eq!(s.offsets(t, 0).unwrap().high_watermark, 2);
        // Collected keys stay retired long after GC deleted them.
        s.apply_proposal(Proposal {
            at_ms: 1_000,
            command: ForgetGarbage {
                keys: vec!["later".into()],
            }
            .into(),
        });
        s.apply_proposal(Proposal {
            at_ms: 1_000 + crate::ledger::KEY_MEMORY_MS - 1,
            command: ForgetGarbage { keys: vec![] }.into(),
        });
        assert!(matches!(
            commit(&mut s, "later", vec![batch(t, 0, 0, 1)])[0],
            Err(Refusal::ObjectKeyUsed(_))
        ));
        s.check_invariants().unwrap();
    }

    /// Review finding: DeleteRecords cut into an extent after a compactor
    /// read it, and the compactor cut that extent into smaller pieces; the
    /// first piece, wholly below the log start, was swapped in and broke the
    /// invariant that the first extent holds the log start.
    #[test]
    fn pieces_below_the_log_start_are_not_swapped_in() {
        let mut s = State::default();
        let t = create(&mut s, "t", 1);
        commit(&mut s, "o1", vec![batch(t, 0, 0, 10)]);
        let replaced = s.read_plan(t, 0, 0, u64::MAX).unwrap().extents;
        s.apply(Trim {
            partition: TopicPartition::new(t, 0),
            offset: 5,
        })
        .unwrap();
        let piece = |base: i64, last: i64, position: u64| ExtentPiece {
            base_offset: base,
            last_offset: last,
            max_timestamp: 1_000,
            position,
            length: 50,
            appended_ms: 0,
        };
        let reply = s.apply(ReplaceExtents {
            topic_id: t,
            partition: 0,
            replaced,
            object_key: "seg".into(),
            object_size: 100,
            pieces: vec![piece(0, 4, 0), piece(5, 9, 50)],
            not_before_ms: 0,
        });
        assert_eq!(reply, Ok(()));
        let extents = s.read_plan(t, 0, 5, u64::MAX).unwrap().extents;
        assert_eq!((extents.len(), extents[0].base_offset), (1, 5));
        s.check_invariants().unwrap();
    }
}
