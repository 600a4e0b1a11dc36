//! The Raft log, vote and commit index, in `redb`.
//!
//! Entries are postcard-encoded under their index. Every append is one write
//! transaction, fsynced before openraft is told it is durable.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{RaftLogReader, StorageIOError};
use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Entry, LogId, StorageError, TypeConfig, Vote, any, blocking};

pub(crate) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");
const VOTE: &str = "vote";
const COMMITTED: &str = "committed";
const PURGED: &str = "purged";

/// The log store; cheap to clone (the log reader is a clone).
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
}

fn read_meta<T: DeserializeOwned>(
    db: &Database,
    key: &str,
) -> Result<Option<T>, openraft::AnyError> {
    let txn = db.begin_read().map_err(any)?;
    let table = txn.open_table(META).map_err(any)?;
    match table.get(key).map_err(any)? {
        Some(bytes) => Ok(Some(postcard::from_bytes(bytes.value()).map_err(any)?)),
        None => Ok(None),
    }
}

fn write_meta<T: Serialize>(
    db: &Database,
    key: &str,
    value: &T,
    durability: Durability,
) -> Result<(), openraft::AnyError> {
    let bytes = postcard::to_stdvec(value).map_err(any)?;
    let mut txn = db.begin_write().map_err(any)?;
    txn.set_durability(durability).map_err(any)?;
    txn.open_table(META)
        .map_err(any)?
        .insert(key, bytes.as_slice())
        .map_err(any)?;
    txn.commit().map_err(any)
}

impl LogStore {
    /// The tables must exist (see [`super::node`]'s opening of the file).
    pub fn new(db: Arc<Database>) -> Self {
        LogStore { db }
    }

    fn last_entry(db: &Database) -> Result<Option<LogId>, openraft::AnyError> {
        let txn = db.begin_read().map_err(any)?;
        let table = txn.open_table(LOG).map_err(any)?;
        match table.last().map_err(any)? {
            Some((_, bytes)) => {
                let entry: Entry = postcard::from_bytes(bytes.value()).map_err(any)?;
                Ok(Some(entry.log_id))
            }
            None => Ok(None),
        }
    }
}

fn owned_bounds<RB: RangeBounds<u64>>(range: &RB) -> (Bound<u64>, Bound<u64>) {
    (range.start_bound().cloned(), range.end_bound().cloned())
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let db = self.db.clone();
        let bounds = owned_bounds(&range);
        blocking(move || {
            let txn = db.begin_read().map_err(any)?;
            let table = txn.open_table(LOG).map_err(any)?;
            let mut entries = Vec::new();
            for item in table.range::<u64>(bounds).map_err(any)? {
                let (_, bytes) = item.map_err(any)?;
                entries.push(postcard::from_bytes(bytes.value()).map_err(any)?);
            }
            Ok(entries)
        })
        .await
        .map_err(|e| StorageIOError::read_logs(e).into())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let db = self.db.clone();
        blocking(move || {
            let last_purged_log_id: Option<LogId> = read_meta(&db, PURGED)?;
            let last_log_id = Self::last_entry(&db)?.or(last_purged_log_id);
            Ok(LogState {
                last_purged_log_id,
                last_log_id,
            })
        })
        .await
        .map_err(|e| StorageIOError::read_logs(e).into())
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let db = self.db.clone();
        let vote = *vote;
        blocking(move || write_meta(&db, VOTE, &vote, Durability::Immediate))
            .await
            .map_err(|e| StorageIOError::write_vote(e).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        let db = self.db.clone();
        blocking(move || read_meta(&db, VOTE))
            .await
            .map_err(|e| StorageIOError::read_vote(e).into())
    }

    // Saving the commit index lets a restarted node apply its committed log
    // at once, instead of waiting to hear it from a leader. It need not be
    // fsynced (the next append's commit carries it to disk): a stale one only
    // means re-learning the rest from the leader, and an fsync here would
    // double the cost of every write.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let db = self.db.clone();
        blocking(move || write_meta(&db, COMMITTED, &committed, Durability::None))
            .await
            .map_err(|e| StorageIOError::write(e).into())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let db = self.db.clone();
        blocking(move || Ok(read_meta::<Option<LogId>>(&db, COMMITTED)?.flatten()))
            .await
            .map_err(|e| StorageIOError::read(e).into())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let encoded = entries
            .into_iter()
            .map(|e| Ok((e.log_id.index, postcard::to_stdvec(&e).map_err(any)?)))
            .collect::<Result<Vec<_>, openraft::AnyError>>()
            .map_err(StorageIOError::write_logs)?;
        let db = self.db.clone();
        let written = blocking(move || {
            let txn = db.begin_write().map_err(any)?;
            {
                let mut table = txn.open_table(LOG).map_err(any)?;
                for (index, bytes) in &encoded {
                    table.insert(*index, bytes.as_slice()).map_err(any)?;
                }
            }
            txn.commit().map_err(any)
        })
        .await;
        match written {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(StorageIOError::write_logs(e).into())
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let db = self.db.clone();
        blocking(move || {
            let txn = db.begin_write().map_err(any)?;
            txn.open_table(LOG)
                .map_err(any)?
                .retain_in(log_id.index.., |_, _| false)
                .map_err(any)?;
            txn.commit().map_err(any)
        })
        .await
        .map_err(|e| StorageIOError::write_logs(e).into())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let db = self.db.clone();
        blocking(move || {
            let bytes = postcard::to_stdvec(&log_id).map_err(any)?;
            let txn = db.begin_write().map_err(any)?;
            txn.open_table(META)
                .map_err(any)?
                .insert(PURGED, bytes.as_slice())
                .map_err(any)?;
            txn.open_table(LOG)
                .map_err(any)?
                .retain_in(..=log_id.index, |_, _| false)
                .map_err(any)?;
            txn.commit().map_err(any)
        })
        .await
        .map_err(|e| StorageIOError::write_logs(e).into())
    }
}

/// Entries in the log (purged ones excluded): for tests and status.
pub(crate) fn log_entries(db: &Database) -> Result<u64, openraft::AnyError> {
    let txn = db.begin_read().map_err(any)?;
    let table = txn.open_table(LOG).map_err(any)?;
    table.len().map_err(any)
}
