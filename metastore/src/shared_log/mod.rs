//! The metastore on a shared database: the log and snapshots of the same
//! state machine the Raft group runs, kept in a store every node reaches
//! (PostgreSQL), instead of replicated between the nodes themselves.
//!
//! The store does what Raft's quorum did:
//!
//! - **One writer.** A lease row names the node that may append, until a
//!   time on the store's own clock. Taking it from another holder, or after
//!   it lapsed, makes a new *term*.
//! - **Fencing.** An entry is appended at its log index (the primary key)
//!   only while its term still holds the lease, checked under the lease
//!   row's lock in the same statement: a paused or partitioned former leader
//!   can never append, and two writers can never both write one index.
//! - **Durability.** An entry is applied, and its commands answered, only
//!   after the store committed it.
//!
//! The leader keeps the state in memory, applies its own entries after the
//! store took them, and answers reads from it while its lease holds (with a
//! margin: it stops reading well before another node could take the lease).
//! A node that takes the lease first reads the log (from the latest
//! snapshot) to its end; other nodes tail it to be ready. Snapshots bound
//! the log: the leader stores one every so many entries and deletes the log
//! rows it covers (keeping a few).
//!
//! - [`SharedLog`]: what such a store provides, in five calls.
//! - [`postgres`]: the store in PostgreSQL (sqlx, versioned migrations).
//! - [`memory`]: a faithful model in memory, with injectable faults, for
//!   tests and the simulation.
//! - [`node`]: [`LogNode`], a metastore node on a store: the same
//!   [`Sequencer`](crate::Sequencer) as a Raft node, so every operation is
//!   answered by the same state machine.
//! - [`member`]: a node embedded in an agent, which sends calls on to the
//!   leader when it is another agent's node.

pub mod member;
pub mod memory;
mod node;
pub mod postgres;
mod writer;

use async_trait::async_trait;
use uuid::Uuid;

use crate::contract::quorum::NodeId;

pub use node::{LogNode, LogNodeOptions};

/// Who holds the lease, as the store says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenure {
    /// Bumped whenever the lease changes hands or lapses.
    pub term: u64,
    /// The holding node's instance: a fresh id each time a node starts, so
    /// that a restarted node never mistakes its predecessor's term for its own.
    pub holder: Uuid,
    pub node: NodeId,
    /// Where the holder serves clients.
    pub address: String,
    /// When the lease ends, on the store's clock (ms since the epoch).
    pub expires_ms: i64,
    /// The store's clock when it answered.
    pub store_now_ms: i64,
}

/// A node asking for the lease.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub holder: Uuid,
    pub node: NodeId,
    pub address: String,
}

/// What became of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// Committed at its index.
    Done,
    /// Refused: its term no longer holds the lease. Nothing was written.
    Fenced,
    /// Refused: another entry is at that index. Nothing was written.
    Taken,
}

/// One stored log entry: its index, the metastore format it was written in,
/// and the encoded [`Proposal`](crate::state::Proposal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEntry {
    pub index: u64,
    pub format: u8,
    pub entry: Vec<u8>,
}

/// A stored snapshot: the encoded state after applying every entry up to
/// and including `index`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSnapshot {
    pub index: u64,
    pub format: u8,
    pub state: Vec<u8>,
}

/// How much the store holds, for `floe metastore status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogSizes {
    /// Entries in the log (not yet deleted behind a snapshot).
    pub entries: u64,
    pub last_index: Option<u64>,
    pub snapshot_index: Option<u64>,
    pub snapshot_bytes: u64,
}

/// A store call that failed: the store refused it or did not answer.
/// Whether an append that failed so was committed is not known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LogError(pub String);

/// A store of one metastore's log, snapshots and lease. Every call is one
/// round trip (or one transaction) and bounded in time by the store.
#[async_trait]
pub trait SharedLog: Send + Sync + 'static {
    /// Takes the lease for `me` for `lease_ms` on the store's clock, if it
    /// is free, lapsed or already `me`'s (then renewed, in the same term);
    /// answers who holds it afterwards.
    async fn claim(&self, me: &Candidate, lease_ms: i64) -> Result<Tenure, LogError>;

    /// Ends `me`'s lease now, if it holds it (a node that stops gives the
    /// lease back rather than making the next leader wait it out).
    async fn release(&self, me: &Candidate) -> Result<(), LogError>;

    /// Appends `entry` at `index` if `term` holds the lease and no entry is
    /// at `index`.
    async fn append(&self, term: u64, entry: StoredEntry) -> Result<Appended, LogError>;

    /// Up to `max` entries after `index`, in order; fewer at the log's end.
    /// (Entries at or below the latest snapshot may be gone.)
    async fn read(&self, after: u64, max: usize) -> Result<Vec<StoredEntry>, LogError>;

    /// The latest snapshot, if any.
    async fn snapshot(&self) -> Result<Option<StoredSnapshot>, LogError>;

    /// Stores `snapshot` and deletes older snapshots and the entries at or
    /// below its index but the last `keep`. (Entries never change once
    /// appended, so a snapshot of any node is one of the log: no fence.)
    async fn save_snapshot(&self, snapshot: StoredSnapshot, keep: u64) -> Result<(), LogError>;

    /// How much is stored.
    async fn sizes(&self) -> Result<LogSizes, LogError>;

    /// The store, for messages and status (never a password).
    fn describe(&self) -> String;
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::memory::MemoryLog;
    use super::*;
    use crate::Metastore;

    /// `floe metastore backup` of a node on a shared log: a hold on GC
    /// taken through the log, then the state, which holds the hold and
    /// restores as the same state.
    #[tokio::test]
    async fn a_backup_holds_garbage_and_copies_the_state() {
        let node = LogNode::start(Arc::new(MemoryLog::default()), LogNodeOptions::new(1, "n1"))
            .await
            .unwrap();
        node.wait_until_leader(std::time::Duration::from_secs(10))
            .await
            .unwrap();
        node.claim_cluster_id("backed-up".into(), true)
            .await
            .unwrap();
        let backup = node.backup(60_000).await.unwrap();
        assert_eq!(backup.cluster_id.as_deref(), Some("backed-up"));
        assert!(
            backup.held_until_ms >= backup.taken_ms + 60_000 - 1_000,
            "{backup:?}"
        );
        assert_eq!(backup.last_index, node.applied_index());
        let restored = backup.state().unwrap();
        assert_eq!(restored, node.local_state(|s| s.clone()));
    }
}
