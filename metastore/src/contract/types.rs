//! Plain types the metastore speaks in. It knows nothing of the Kafka wire.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub type TopicId = Uuid;

/// One partition of one topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TopicPartition {
    pub topic_id: TopicId,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic_id: TopicId, partition: i32) -> Self {
        TopicPartition {
            topic_id,
            partition,
        }
    }
}

/// A topic as clients see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicInfo {
    pub id: TopicId,
    pub name: String,
    pub partitions: i32,
    /// What the topic itself sets, as its client sent it.
    pub configs: BTreeMap<String, String>,
    /// The cluster's dynamic defaults of topic configs (`log.retention.ms`
    /// as `retention.ms`, see [`crate::contract::dynamic_config`]) in force when the
    /// topic was read: filled by the metastore's answers, empty in the
    /// state. The topic's own configs win over them.
    #[serde(default)]
    pub inherited: BTreeMap<String, String>,
}

/// A request to create a topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub configs: BTreeMap<String, String>,
}

/// One Kafka record batch, uploaded inside an object, to be given offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitBatch {
    pub topic_id: TopicId,
    pub partition: i32,
    /// First byte of the batch in the object.
    pub position: u64,
    pub length: u32,
    pub record_count: i32,
    pub max_timestamp: i64,
    /// Idempotent producer fields from the batch header (-1 when not idempotent).
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

impl CommitBatch {
    /// The partition the batch is for.
    pub fn partition_of(&self) -> TopicPartition {
        TopicPartition::new(self.topic_id, self.partition)
    }
}

/// What a batch of an [`IngestBatch`] is to the sequencer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BatchKind {
    /// Records outside any transaction (idempotent or not).
    Plain,
    /// Records of a transaction (attribute bit 4): sequenced only into a
    /// partition of an ongoing transaction of their producer and epoch.
    Transactional,
    /// A COMMIT or ABORT marker of `ends[end]` of its commit.
    Marker { end: u32 },
    /// Records of a transaction sent with Produce v12+ (transactions v2,
    /// KIP-890): their partition is first added to their producer's
    /// transaction (which begins if none is ongoing), as Kafka's produce
    /// adds it; then sequenced as `Transactional`. Appended (format 11).
    TransactionalAdding,
}

/// One batch of an [`crate::contract::ops::IngestCommit`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngestBatch {
    pub batch: CommitBatch,
    pub kind: BatchKind,
}

/// A read plan with what `read_committed` consumers need: the last stable
/// offset, and the aborted transactions that overlap the planned extents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnReadPlan {
    pub plan: ReadPlan,
    pub last_stable_offset: i64,
    /// Every aborted transaction with data in the planned extents' offsets,
    /// in marker order.
    pub aborted: Vec<crate::contract::txn::AbortedTxn>,
}

/// "This object is uploaded; sequence these batches in it." Batches of one
/// partition are given offsets in the order listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commit {
    pub object_key: String,
    pub object_size: u64,
    pub batches: Vec<CommitBatch>,
    /// The metastore's time (see [`crate::Metastore::clock`]) read before the
    /// object was uploaded. The sequencer refuses a commit more than
    /// [`crate::ledger::COMMIT_WINDOW_MS`] older than that on its clock, which
    /// bounds how long a commit can be in flight: shorter than keys are
    /// remembered, so a late commit can never land on a collected key.
    pub not_before_ms: i64,
}

/// A run of batches of one partition stored contiguously in one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtentRef {
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub object_key: String,
    pub object_size: u64,
    pub position: u64,
    pub length: u64,
    /// Latest commit time of the batches in the extent.
    pub appended_ms: i64,
}

/// What a reader needs to serve a fetch from some offset on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadPlan {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// Extents covering `[from, ...)` in offset order, the first one containing `from`.
    pub extents: Vec<ExtentRef>,
}

/// Which offset a ListOffsets asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OffsetQuery {
    Earliest,
    Latest,
    /// The first record whose timestamp is at least this.
    Timestamp(i64),
    /// The (first) record with the largest timestamp (KIP-734).
    MaxTimestamp,
    /// The last stable offset (ListOffsets latest with `read_committed`).
    LastStable,
}

/// The answer to an [`OffsetQuery`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OffsetAnswer {
    /// An exact offset (earliest, latest).
    Offset(i64),
    /// The first extent whose max timestamp reaches the target; the exact record
    /// is inside it, which only a reader of the batches can tell.
    InExtent(ExtentRef),
    /// No record has a timestamp that late.
    NotFound,
}

/// A partition's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionOffsets {
    pub log_start_offset: i64,
    pub high_watermark: i64,
}

/// A partition as DescribeLogDirs and DescribeProducers report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    pub log_start_offset: i64,
    pub high_watermark: i64,
    /// Bytes of the record batches it holds (in the object store).
    pub size_bytes: u64,
    /// Idempotent producers whose state it keeps, by producer id.
    pub producers: Vec<ProducerState>,
}

/// One idempotent producer's state in one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerState {
    pub producer_id: i64,
    pub epoch: i16,
    /// The sequence of the last record it appended here.
    pub last_sequence: i32,
    /// The metastore's time of its last append here.
    pub last_append_ms: i64,
}

/// What the metastore decided not to do: in log order for a write, on an
/// up-to-date state for a read. Nothing was changed, so a refusal is final:
/// sending the same request again gets the same answer (unless the state
/// moved meanwhile). Each maps onto one Kafka error code.
///
/// A commit's answers are remembered in the state (see [`crate::ledger`]), so
/// the variant order is part of the stored encoding: append only. (Variants
/// 0..=8 are those of the `MetaError` of before, which the snapshots of
/// format 1 hold.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Refusal {
    #[error("topic `{0}` already exists")]
    TopicExists(String),
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
    #[error("invalid topic name `{0}`: {1}")]
    InvalidTopicName(String, String),
    #[error("invalid partition count {0}")]
    InvalidPartitions(i32),
    #[error("offset {offset} is outside [{log_start_offset}, {high_watermark}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        high_watermark: i64,
    },
    #[error("sequence {got} of producer {producer_id} does not follow {last}")]
    OutOfOrderSequence {
        producer_id: i64,
        last: i32,
        got: i32,
    },
    #[error("producer {producer_id} epoch {got} is older than {current}")]
    InvalidProducerEpoch {
        producer_id: i64,
        got: i16,
        current: i16,
    },
    #[error("producer id {0} was never issued")]
    UnknownProducerId(i64),
    #[error("extents changed since they were read; compaction result discarded")]
    ExtentsChanged,
    /// A commit (or compaction) of an object key already sequenced, collected
    /// or declared an orphan: never sequenced twice. Retriable for producers:
    /// a new upload gets a new key.
    #[error("object key `{0}` was already sequenced, collected or declared an orphan")]
    ObjectKeyUsed(String),
    /// A commit or swap whose upload began longer ago (on the metastore's
    /// clock) than commits may stay in flight. Retriable for producers.
    #[error("commit of `{0}` arrived too late (uploaded more than the commit window ago)")]
    CommitTooLate(String),
    /// A membership change that cannot be made as asked (decided by the Raft
    /// node, not the state machine; never stored).
    #[error("invalid membership change: {0}")]
    InvalidMembership(String),
    // Transactions (see `crate::contract::txn`), appended: a variant's index is its
    // encoding.
    /// INVALID_TXN_STATE: the request does not fit the transaction's state.
    #[error("invalid transaction state: {0}")]
    InvalidTxnState(String),
    /// PRODUCER_FENCED: a newer producer holds the transactional id, or the
    /// transaction timed out.
    #[error("producer {producer_id} at epoch {epoch} is fenced")]
    ProducerFenced { producer_id: i64, epoch: i16 },
    /// INVALID_PRODUCER_ID_MAPPING: the producer id is not the transactional id's.
    #[error("the producer id is not the transactional id's")]
    InvalidProducerIdMapping,
    /// CONCURRENT_TRANSACTIONS: the transaction is being ended, or changed
    /// since the request was built; retriable.
    #[error("the transaction is being ended or changed; try again")]
    ConcurrentTransactions,
    /// A retried EndTxn: the transaction already ended this way (`committed`)
    /// or the other.
    #[error("the transaction already ended (committed: {committed})")]
    TxnEnded { committed: bool },
    /// A transactional batch for a partition that is not in an ongoing
    /// transaction of its producer (the KIP-890 check).
    #[error("the partition is not in an ongoing transaction of this producer")]
    NotInTransaction,
    /// INVALID_TRANSACTION_TIMEOUT.
    #[error("invalid transaction timeout {0} ms")]
    InvalidTxnTimeout(i32),
    /// A transaction, or the number of transactional ids, reached its bound.
    #[error("{0}")]
    TxnLimit(String),
    /// INVALID_CONFIG: a dynamic config Kafka would refuse (see
    /// `crate::contract::dynamic_config`).
    #[error("{0}")]
    InvalidConfig(String),
    /// CORRUPT_MESSAGE: a batch the sequencer cannot place as described (of
    /// no records): agents check what they upload, and the sequencer, which
    /// alone decides offsets, does not take their word for it.
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
}

/// Why a metastore call failed: refused by the metastore (see [`Refusal`]),
/// or the call itself failed, perhaps after the metastore applied it.
/// [`MetaError::certainly_not_applied`] is the one place that tells which.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum MetaError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Asked of a metastore node that does not lead its group; the leader's
    /// address if it knows one. Nothing was applied.
    #[error("this metastore node is not the leader (leader: {})", .0.as_deref().unwrap_or("unknown"))]
    NotLeader(Option<String>),
    /// No answer: no leader, no quorum, no connection, no reply in time.
    /// `maybe_applied` when the request may have reached the log regardless.
    #[error("metastore unavailable: {why}{}", if *.maybe_applied { "; the request may have been applied" } else { "" })]
    Unavailable { why: String, maybe_applied: bool },
    /// The node's own storage failed, or a message could not be encoded or
    /// decoded (a peer of another version). Whether anything was applied is
    /// not known.
    #[error("metastore storage failed: {0}")]
    Storage(String),
}

impl MetaError {
    /// Unavailable, and certainly not applied (refused or never sent).
    pub fn unavailable(why: impl Into<String>) -> Self {
        MetaError::Unavailable {
            why: why.into(),
            maybe_applied: false,
        }
    }

    /// Unavailable after the request may have reached the log.
    pub fn maybe_applied(why: impl Into<String>) -> Self {
        MetaError::Unavailable {
            why: why.into(),
            maybe_applied: true,
        }
    }

    /// Whether the request certainly changed nothing, so that any request,
    /// safe to repeat or not, may be sent again. Every retry decides on this.
    pub fn certainly_not_applied(&self) -> bool {
        match self {
            MetaError::Refused(_) | MetaError::NotLeader(_) => true,
            MetaError::Unavailable { maybe_applied, .. } => !maybe_applied,
            MetaError::Storage(_) => false,
        }
    }

    /// Whether a client should send the request again (to the leader, or
    /// after a pause): not a refusal, which is final; a call that failed
    /// before it applied; or one that may have applied, if the request is
    /// safe to repeat.
    pub fn worth_retrying(&self, retry_is_safe: bool) -> bool {
        match self {
            MetaError::Refused(_) | MetaError::Storage(_) => false,
            MetaError::NotLeader(_) => true,
            MetaError::Unavailable { .. } => retry_is_safe || self.certainly_not_applied(),
        }
    }
}

impl Refusal {
    /// The error a client reports for this refusal of its request, when an
    /// earlier attempt at the same request `maybe_applied`: the refusal says
    /// nothing of that attempt, so it is no longer "certainly not applied".
    pub fn after_retries(self, maybe_applied: bool) -> MetaError {
        if maybe_applied {
            MetaError::maybe_applied(format!(
                "a retry was refused ({self}) after an attempt that may have applied"
            ))
        } else {
            MetaError::Refused(self)
        }
    }
}

/// "These extents are now stored here": compaction's compare-and-set. Applied
/// only if the partition still holds exactly `replaced`, contiguous.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplaceExtents {
    pub topic_id: TopicId,
    pub partition: i32,
    pub replaced: Vec<ExtentRef>,
    /// The object now holding the same batches, with the same offsets.
    pub object_key: String,
    pub object_size: u64,
    /// How the new object is cut into extents; they must tile the replaced
    /// offsets exactly. Small pieces keep a fetch from the middle of a large
    /// segment from reading the segment's start.
    pub pieces: Vec<ExtentPiece>,
    /// As [`Commit::not_before_ms`]: read before the segment was uploaded.
    pub not_before_ms: i64,
}

/// Compaction's compare-and-set for a *merged* file: one object it wrote
/// from the runs of many partitions, each run a chunk of it. Every run is
/// swapped on its own terms (its partition must still hold exactly
/// `replaced`), all in one step; a run that changed meanwhile is refused
/// alone. The object goes live if any run was swapped in, and is handed to GC
/// at once if none was, so the compactor never deletes what it wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplaceRuns {
    pub object_key: String,
    pub object_size: u64,
    pub runs: Vec<RunSwap>,
    /// As [`Commit::not_before_ms`]: read before the file was uploaded.
    pub not_before_ms: i64,
}

/// One partition's part of a [`ReplaceRuns`]: as a [`ReplaceExtents`]
/// without the object, which the runs share.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSwap {
    pub partition: TopicPartition,
    pub replaced: Vec<ExtentRef>,
    pub pieces: Vec<ExtentPiece>,
}

/// What compaction has to do, as [`crate::contract::ops::CompactionWork`] asks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backlog {
    /// The oldest ingest files still referenced, oldest first.
    pub files: Vec<BacklogFile>,
    /// Every run of consecutive extents lying in `files`, by partition, in
    /// offset order: moving them all out frees every file listed.
    pub runs: Vec<ExtentRun>,
    /// Ingest files referenced in all, listed or not.
    pub ingest_files: u64,
    /// Partitions (of topics without key compaction) holding a run of
    /// merged extents spread over enough objects to be worth merging.
    pub merge: Vec<TopicPartition>,
}

/// One ingest file of a [`Backlog`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BacklogFile {
    pub key: String,
    pub size: u64,
    /// The metastore's time of the oldest append still stored in it.
    pub oldest_appended_ms: i64,
}

/// Consecutive extents of one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtentRun {
    pub partition: TopicPartition,
    pub extents: Vec<ExtentRef>,
}

/// One extent of a [`ReplaceExtents`]' new object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtentPiece {
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub position: u64,
    pub length: u64,
    pub appended_ms: i64,
}

/// Where a committed batch was placed: its base offset, and its
/// partition's log start offset once the commit applied (a Produce
/// response carries both, as Kafka's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placed {
    pub base_offset: i64,
    pub log_start_offset: i64,
}

/// An idempotent producer's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerIdentity {
    pub producer_id: i64,
    pub epoch: i16,
}
