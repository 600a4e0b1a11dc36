//! Applies committed entries to the metastore [`State`], and snapshots it.
//!
//! The state lives in memory (shared with the node, which reads it); the
//! latest snapshot is kept in the `redb` file next to the log, so a restart
//! loads the snapshot and re-applies the committed log after it.

use std::sync::{Arc, RwLock};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{EntryPayload, RaftSnapshotBuilder, StorageIOError};
use redb::{Database, ReadableDatabase, TableDefinition};

use super::group_watch::GroupWatch;
use super::stamps::Stamps;
use super::{
    Entry, LogId, SnapshotMeta, StorageError, StoredMembership, TypeConfig, any, blocking,
};
use crate::Clock;
use crate::format::{decode_snapshot, encode_snapshot};
use crate::read_leases::ReadLeases;
use crate::state::{Reply, State};

pub(crate) const SNAPSHOT: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_snapshot");
const SNAPSHOT_META: &str = "meta";
pub(crate) const SNAPSHOT_DATA: &str = "data";

pub struct StateMachine {
    state: Arc<RwLock<State>>,
    /// Told the group's time after every apply, to bound this node's stamps.
    stamps: Arc<Stamps>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    db: Arc<Database>,
    /// Distinguishes snapshots taken at the same log index.
    snapshots_built: u64,
    /// Told of every group an applied entry changed.
    group_watch: Arc<GroupWatch>,
    /// Told of every partition an applied entry changed, while leading.
    read_leases: Option<Arc<ReadLeases>>,
}

fn load_snapshot(db: &Database) -> Result<Option<(SnapshotMeta, Vec<u8>)>, openraft::AnyError> {
    let txn = db.begin_read().map_err(any)?;
    let table = txn.open_table(SNAPSHOT).map_err(any)?;
    let (Some(meta), Some(data)) = (
        table.get(SNAPSHOT_META).map_err(any)?,
        table.get(SNAPSHOT_DATA).map_err(any)?,
    ) else {
        return Ok(None);
    };
    let meta = postcard::from_bytes(meta.value()).map_err(any)?;
    Ok(Some((meta, data.value().to_vec())))
}

fn save_snapshot(
    db: &Database,
    meta: &SnapshotMeta,
    data: &[u8],
) -> Result<(), openraft::AnyError> {
    let txn = db.begin_write().map_err(any)?;
    save_snapshot_in(&txn, meta, data)?;
    txn.commit().map_err(any)
}

/// Stores a snapshot as part of `txn`.
pub(super) fn save_snapshot_in(
    txn: &redb::WriteTransaction,
    meta: &SnapshotMeta,
    data: &[u8],
) -> Result<(), openraft::AnyError> {
    let meta = postcard::to_stdvec(meta).map_err(any)?;
    let mut table = txn.open_table(SNAPSHOT).map_err(any)?;
    table.insert(SNAPSHOT_META, meta.as_slice()).map_err(any)?;
    table.insert(SNAPSHOT_DATA, data).map_err(any)?;
    Ok(())
}

impl StateMachine {
    /// Restores the state from the file's snapshot, if it has one; the
    /// node's stamps start from its time.
    pub async fn open(
        db: Arc<Database>,
        wall: Arc<dyn Clock>,
        group_watch: Arc<GroupWatch>,
        read_leases: Option<Arc<ReadLeases>>,
    ) -> Result<(StateMachine, Arc<RwLock<State>>, Arc<Stamps>), StorageError> {
        let loaded = {
            let db = db.clone();
            blocking(move || load_snapshot(&db))
                .await
                .map_err(|e| StorageIOError::read_snapshot(None, e))?
        };
        let (state, last_applied, membership) = match loaded {
            Some((meta, data)) => {
                let state = decode_snapshot(&data)
                    .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), any(e)))?;
                (state, meta.last_log_id, meta.last_membership)
            }
            None => (State::default(), None, StoredMembership::default()),
        };
        let fresh = last_applied.is_none() && super::log_store::log_entries(&db).unwrap_or(0) == 0;
        let stamps = Arc::new(Stamps::new(wall, state.clock_ms(), fresh));
        let state = Arc::new(RwLock::new(state));
        let machine = StateMachine {
            state: state.clone(),
            stamps: stamps.clone(),
            last_applied,
            membership,
            db,
            snapshots_built: 0,
            group_watch,
            read_leases,
        };
        Ok((machine, state, stamps))
    }

    fn write_state(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().expect("metastore state lock poisoned")
    }
}

/// A copy of the state taken when a snapshot was asked for (so it matches
/// `last_applied` exactly), to be encoded and stored off the async workers.
pub struct SnapshotBuilder {
    db: Arc<Database>,
    meta: SnapshotMeta,
    state: Option<State>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let signature = Some(self.meta.signature());
        let state = self.state.take().ok_or_else(|| {
            StorageIOError::write_snapshot(
                signature.clone(),
                openraft::AnyError::error("snapshot builder used twice"),
            )
        })?;
        let (db, meta) = (self.db.clone(), self.meta.clone());
        // Encoding a large state takes a while: never on an async worker.
        let data = blocking(move || {
            let data = encode_snapshot(&state).map_err(any)?;
            save_snapshot(&db, &meta, &data)?;
            Ok(data)
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(signature, e))?;
        tracing::info!(snapshot = %self.meta, bytes = data.len(), "metastore snapshot stored");
        Ok(Snapshot {
            meta: self.meta.clone(),
            snapshot: Box::new(data),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Option<Reply>>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut replies = Vec::new();
        let mut groups_changed = Vec::new();
        let mut state = self.state.write().expect("metastore state lock poisoned");
        for entry in entries {
            self.last_applied = Some(entry.log_id);
            replies.push(match entry.payload {
                EntryPayload::Blank => None,
                EntryPayload::Normal(proposal) => {
                    proposal.command.groups_changed(&mut groups_changed);
                    Some(state.apply_proposal(proposal))
                }
                EntryPayload::Membership(membership) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), membership);
                    None
                }
            });
        }
        self.stamps.observe(state.clock_ms());
        // Taken always, so the set stays small; noticed under the state's
        // lock, so notices leave in log order.
        let changed = state.take_changed_partitions();
        if let Some(read_leases) = &self.read_leases {
            read_leases.applied(&state, &changed);
        }
        drop(state);
        for group in &groups_changed {
            self.group_watch.changed(group);
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.snapshots_built += 1;
        // A copy under the read lock, made on a blocking thread (a large
        // state takes a while to copy); nothing applies meanwhile, as the
        // state machine waits here, so it matches `last_applied`. The
        // builder encodes it on a blocking thread too.
        let shared = self.state.clone();
        let copied = blocking(move || {
            Ok(shared
                .read()
                .expect("metastore state lock poisoned")
                .clone())
        })
        .await;
        let state = copied.unwrap_or_else(|_| {
            // The blocking pool is gone (shutting down): copy here instead.
            self.state
                .read()
                .expect("metastore state lock poisoned")
                .clone()
        });
        let snapshot_id = match self.last_applied {
            Some(log_id) => format!(
                "{}-{}-{}",
                log_id.leader_id, log_id.index, self.snapshots_built
            ),
            None => format!("empty-{}", self.snapshots_built),
        };
        SnapshotBuilder {
            db: self.db.clone(),
            meta: SnapshotMeta {
                last_log_id: self.last_applied,
                last_membership: self.membership.clone(),
                snapshot_id,
            },
            state: Some(state),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Vec<u8>>, StorageError> {
        Ok(Box::default())
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Vec<u8>>,
    ) -> Result<(), StorageError> {
        // Decoding and storing a large state: on a blocking thread.
        let (db, stored_meta) = (self.db.clone(), meta.clone());
        let state = blocking(move || {
            let state = decode_snapshot(&snapshot).map_err(any)?;
            save_snapshot(&db, &stored_meta, &snapshot)?;
            Ok(state)
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), e))?;
        self.stamps.observe(state.clock_ms());
        *self.write_state() = state;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        tracing::info!(snapshot = %meta, "metastore snapshot installed from the leader");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let db = self.db.clone();
        let loaded = blocking(move || load_snapshot(&db))
            .await
            .map_err(|e| StorageIOError::read_snapshot(None, e))?;
        Ok(loaded.map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(data),
        }))
    }
}
