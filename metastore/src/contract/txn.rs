//! Transactions' messages (KIP-98): how an agent ends a transaction, what a
//! client is shown of one, the ranges aborted transactions leave in a
//! partition, and the limits both ends check. The coordinator's state and
//! its rules are the node's (`crate::txn`).

use serde::{Deserialize, Serialize};

use crate::contract::types::TopicPartition;

/// Most partitions one transaction may write to.
pub const MAX_TXN_PARTITIONS: usize = 10_000;
/// Most groups one transaction may commit offsets for.
pub const MAX_TXN_GROUPS: usize = 64;
/// Most offsets one transaction may hold for its groups.
pub const MAX_TXN_OFFSETS: usize = 10_000;
/// Most bytes of a transactional id (Kafka bounds it by its string field).
pub const MAX_TRANSACTIONAL_ID_BYTES: usize = 32_767;

/// Where a transaction is (Kafka's `TransactionState` without the
/// transient ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnPhase {
    Empty,
    Ongoing,
    CompleteCommit,
    CompleteAbort,
}

impl TxnPhase {
    /// The name Kafka's DescribeTransactions and ListTransactions report.
    pub fn kafka_name(self) -> &'static str {
        match self {
            TxnPhase::Empty => "Empty",
            TxnPhase::Ongoing => "Ongoing",
            TxnPhase::CompleteCommit => "CompleteCommit",
            TxnPhase::CompleteAbort => "CompleteAbort",
        }
    }
}

/// How often Kafka's coordinator looks for timed-out transactions by
/// default (`transaction.abort.timed.out.transaction.cleanup.interval.ms`).
pub const DEFAULT_ABORT_CHECK_INTERVAL_MS: i32 = 10_000;

/// A range of offsets an aborted transaction wrote in a partition (Kafka's
/// `AbortedTxn`): from its first batch to its ABORT marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The ABORT marker's offset.
    pub last_offset: i64,
    /// The partition's last stable offset once this transaction ended: no
    /// transaction that ended later began below it.
    pub lso_after: i64,
}

/// Why a transaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndReason {
    /// EndTxn from the producer.
    Client,
    /// InitProducerId found it ongoing: aborted, and its epoch bumped so the
    /// old producer is fenced.
    Fence,
    /// It ran past its timeout: aborted and fenced the same way.
    Timeout,
    /// EndTxn v5 (transactions v2, KIP-890): the producer's end, which
    /// bumps its epoch (or, with its epochs spent, gives it a new producer
    /// id), so that a late request of this transaction is fenced from the
    /// next one. Appended: older log entries decode as before.
    ClientBumping,
}

/// A transaction's end, as an agent asks for it: alone ([`crate::ops::EndTxn`],
/// when no partition needs a marker) or with its markers in an ingest file
/// ([`crate::ops::IngestCommit`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnEnd {
    pub transactional_id: String,
    pub producer_id: i64,
    /// The epoch the end is decided against (the producer's, or the one
    /// being fenced).
    pub epoch: i16,
    pub commit: bool,
    pub reason: EndReason,
    /// The version (the node's `Txn::version`) its markers were built for.
    pub version: u64,
}

impl TxnEnd {
    /// The epoch its markers carry: the producer's, or one past it when a
    /// timeout fences (as Kafka writes the bumped epoch into fencing
    /// markers; a fence's epoch was bumped when it began).
    pub fn marker_epoch(&self) -> i16 {
        match self.reason {
            EndReason::Client | EndReason::Fence => self.epoch,
            // The epoch the end bumps to (with the epochs spent, the last
            // one of the old producer id, as Kafka writes it).
            EndReason::Timeout | EndReason::ClientBumping => self.epoch.saturating_add(1),
        }
    }

    /// Whether the producer ends it (EndTxn), as opposed to a fence.
    pub fn by_client(&self) -> bool {
        matches!(self.reason, EndReason::Client | EndReason::ClientBumping)
    }
}

/// A transactional id as DescribeTransactions shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnView {
    pub transactional_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub phase: TxnPhase,
    pub timeout_ms: i32,
    pub start_ms: i64,
    pub last_update_ms: i64,
    pub partitions: Vec<TopicPartition>,
    pub groups: Vec<String>,
    pub version: u64,
    /// Ongoing, fenced, waiting for its abort markers (the node's `Txn::fencing`).
    pub fencing: bool,
    /// The version at which the ongoing transaction began (the node's
    /// `Txn::began`): with the producer id and epoch, its identity.
    pub began: u64,
}
