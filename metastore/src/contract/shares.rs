//! Share groups' messages (KIP-932): a member's heartbeat and its answer,
//! the records an acquisition hands out, and the acknowledgements that end
//! a member's hold on them. The rules are the state machine's
//! (`groups::share`).

use serde::{Deserialize, Serialize};

use crate::contract::types::TopicId;

/// Epoch of a member joining, and of one leaving.
pub const JOIN_EPOCH: i32 = 0;
pub const LEAVE_EPOCH: i32 = -1;

/// One ShareGroupHeartbeat, with what its agent adds. The session
/// timeout, heartbeat interval and size limit are the agent's defaults
/// (Kafka's): the cluster's `group.share.*` and the group's `share.*`
/// configs win, as the state resolves them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareHeartbeat {
    pub group: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub rack: Option<String>,
    /// `None`: unchanged.
    pub subscribed: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
    /// `share.session.timeout.ms` and `share.heartbeat.interval.ms` for the group.
    pub session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    /// `group.share.max.size`.
    pub max_size: usize,
    pub now_ms: i64,
}

/// The answer to a [`ShareHeartbeat`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's whole assignment, when it joined, sent its
    /// subscription, or its assignment changed.
    pub assignment: Option<Vec<(TopicId, Vec<i32>)>>,
}

/// Records handed to a member by one acquisition: Kafka's `AcquiredRecords`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acquired {
    pub first: i64,
    pub last: i64,
    pub deliveries: u16,
}

/// How a member ends its hold on records: Kafka's acknowledge types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Ack {
    /// Not a record (a transaction marker, a compacted-away offset): archived.
    Gap,
    Accept,
    /// Back to available (archived at the delivery limit).
    Release,
    Reject,
    /// Acquired but never sent to the member (its agent could not read or
    /// fit the records): available again, this delivery not counted.
    /// Agents only; no client sends it.
    Undelivered,
}

impl Ack {
    /// Kafka's wire value (0 gap, 1 accept, 2 release, 3 reject).
    pub fn from_wire(value: i8) -> Option<Ack> {
        match value {
            0 => Some(Ack::Gap),
            1 => Some(Ack::Accept),
            2 => Some(Ack::Release),
            3 => Some(Ack::Reject),
            _ => None,
        }
    }
}

/// Why an acknowledgement was refused, whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AckRefused {
    /// Kafka's INVALID_RECORD_STATE: an offset not acquired by the member,
    /// or whose lock has ended.
    InvalidRecordState(String),
    /// Kafka's INVALID_REQUEST: batches unsorted or overlapping, types that
    /// do not fit their range, or past the records in flight.
    InvalidRequest(String),
}

/// One acknowledged range: a type for all of it, or one per offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckBatch {
    pub first: i64,
    pub last: i64,
    pub types: Vec<Ack>,
}

impl AckBatch {
    pub fn ack_of(&self, offset: i64) -> Ack {
        match self.types.as_slice() {
            [one] => *one,
            many => many[(offset - self.first) as usize],
        }
    }
}

/// Where a share group starts reading a partition it has not read before
/// (`share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StartFrom {
    Earliest,
    Latest,
    /// The first record at most this long ago (`by_duration:`).
    Ago(i64),
}

/// What one partition of an acquisition handed out: `None` for a
/// partition that does not exist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionAcquired {
    pub topic: TopicId,
    pub partition: i32,
    pub acquired: Option<Vec<Acquired>>,
    /// The partition's high watermark as the acquisition saw it (-1: no
    /// such partition): a fetch that got nothing waits for it to grow.
    pub log_end: i64,
}

/// A share group's rules for an acquisition. An agent asks with Kafka's
/// defaults; the cluster's `group.share.*` and the group's `share.*`
/// configs win, as the state resolves them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcquireRules {
    pub delivery_limit: u16,
    pub max_in_flight: i64,
    pub lock_ms: i64,
    pub start_from: StartFrom,
    pub read_committed: bool,
}

/// ShareFetch's acquisition: up to `max_records` records of `partitions`
/// for `member`, one budget for all, each under a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcquireShare {
    pub group: String,
    pub member: String,
    /// The share session acquiring (an agent's number for it): its close
    /// releases what it acquired, and only that.
    pub session: u64,
    pub partitions: Vec<(TopicId, i32)>,
    pub max_records: i64,
    pub rules: AcquireRules,
    pub now_ms: i64,
}

/// What one acquisition handed out, partition by partition, under the
/// rules it was taken with: how long the locks last
/// (`AcquisitionLockTimeoutMs`) and whether the group reads committed
/// records only (its agent then archives aborted ones it handed out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareAcquisition {
    pub partitions: Vec<PartitionAcquired>,
    pub lock_ms: i64,
    pub read_committed: bool,
}

/// One partition's acknowledgement batches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionAcks {
    pub topic: TopicId,
    pub partition: i32,
    pub batches: Vec<AckBatch>,
}

/// ShareFetch's and ShareAcknowledge's acknowledgements: each partition's
/// all or none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcknowledgeShare {
    pub group: String,
    pub member: String,
    pub acks: Vec<PartitionAcks>,
    pub delivery_limit: u16,
    pub now_ms: i64,
}

/// A member's share session closed: every record the session acquired
/// of `partitions` (none named: of every partition) is released; its
/// sessions with other agents keep theirs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseShare {
    pub group: String,
    pub member: String,
    pub session: u64,
    pub partitions: Vec<(TopicId, i32)>,
    pub delivery_limit: u16,
}

/// AlterShareGroupOffsets: where the group reads each partition from (the
/// group must have no members; it is created if it does not exist).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterShareOffsets {
    pub group: String,
    pub starts: Vec<(TopicId, i32, i64)>,
}

/// DeleteShareGroupOffsets: forgets what the group read of `topics` (the
/// group must have no members); for each, whether it had read any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteShareOffsets {
    pub group: String,
    pub topics: Vec<TopicId>,
}

/// ShareGroupDescribe and DescribeShareGroupOffsets of one group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescribeShareGroup {
    pub name: String,
}

/// A share group as ShareGroupDescribe and DescribeShareGroupOffsets show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareGroupView {
    pub epoch: i32,
    pub members: Vec<ShareMemberView>,
    pub partitions: Vec<ShareOffsetView>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareMemberView {
    pub member_id: String,
    pub member_epoch: i32,
    pub rack: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: Vec<String>,
    pub assignment: Vec<(TopicId, Vec<i32>)>,
}

/// One share-partition: its start offset, the end of what was acquired,
/// and how many records in between are done (Kafka's
/// `deliveryCompleteCount`, which lag subtracts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareOffsetView {
    pub topic: TopicId,
    pub partition: i32,
    pub start_offset: i64,
    pub end_offset: i64,
    pub done: i64,
    /// Records archived so far (rejected, gaps, at the delivery limit).
    pub archived: u64,
}
