//! Plain types the metastore speaks in. It knows nothing of the Kafka wire.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub type TopicId = Uuid;

/// A topic as clients see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicInfo {
    pub id: TopicId,
    pub name: String,
    pub partitions: i32,
    pub configs: BTreeMap<String, String>,
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

/// Errors of metastore operations. Each maps onto one Kafka error code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum MetaError {
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
    #[error("metastore unavailable: {0}")]
    Unavailable(String),
    #[error("metastore storage failed: {0}")]
    Storage(String),
    // Appended last: variant indices are part of the stored and wire encodings.
    /// Asked of a metastore node that does not lead its group; the leader's
    /// address if it knows one. Nothing was applied.
    #[error("this metastore node is not the leader (leader: {})", .0.as_deref().unwrap_or("unknown"))]
    NotLeader(Option<String>),
    /// A membership change that cannot be made as asked.
    #[error("invalid membership change: {0}")]
    InvalidMembership(String),
    /// A commit (or compaction) of an object key already sequenced, collected
    /// or declared an orphan: never sequenced twice. Retriable for producers:
    /// a new upload gets a new key.
    #[error("object key `{0}` was already sequenced, collected or declared an orphan")]
    ObjectKeyUsed(String),
    /// A commit or swap whose upload began longer ago (on the metastore's
    /// clock) than commits may stay in flight. Retriable for producers.
    #[error("commit of `{0}` arrived too late (uploaded more than the commit window ago)")]
    CommitTooLate(String),
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

/// An idempotent producer's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerIdentity {
    pub producer_id: i64,
    pub epoch: i16,
}
