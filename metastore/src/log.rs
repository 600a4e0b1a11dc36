//! The durable command log of the in-process metastore, in `redb`.
//!
//! Every command is appended (and fsynced) before it is applied, so a restart
//! replays exactly the commands whose replies anyone could have seen. Every
//! `snapshot_every` commands the whole state is written as a snapshot and the
//! log up to it is dropped, which keeps the file bounded.

use std::path::Path;

use redb::{Database, ReadableDatabase, TableDefinition};

use crate::state::{Command, State};
use crate::types::MetaError;

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const SNAPSHOT: TableDefinition<&str, &[u8]> = TableDefinition::new("snapshot");
const SNAPSHOT_STATE: &str = "state";
const SNAPSHOT_INDEX: &str = "index";

fn storage<E: std::fmt::Display>(e: E) -> MetaError {
    MetaError::Storage(e.to_string())
}

pub struct CommandLog {
    db: Database,
    /// Index the next appended command gets.
    next_index: u64,
    /// Index of the first command not covered by the snapshot.
    snapshot_index: u64,
    snapshot_every: u64,
}

impl CommandLog {
    /// Opens (or creates) the log at `path` and rebuilds the state it holds.
    pub fn open(path: &Path, snapshot_every: u64) -> Result<(CommandLog, State), MetaError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(storage)?;
        }
        let db = Database::create(path).map_err(storage)?;
        let txn = db.begin_write().map_err(storage)?;
        txn.open_table(LOG).map_err(storage)?;
        txn.open_table(SNAPSHOT).map_err(storage)?;
        txn.commit().map_err(storage)?;

        let read = db.begin_read().map_err(storage)?;
        let snapshots = read.open_table(SNAPSHOT).map_err(storage)?;
        let mut state = match snapshots.get(SNAPSHOT_STATE).map_err(storage)? {
            Some(bytes) => postcard::from_bytes(bytes.value()).map_err(storage)?,
            None => State::default(),
        };
        let snapshot_index = match snapshots.get(SNAPSHOT_INDEX).map_err(storage)? {
            Some(bytes) => postcard::from_bytes(bytes.value()).map_err(storage)?,
            None => 0,
        };
        let mut next_index = snapshot_index;
        let log = read.open_table(LOG).map_err(storage)?;
        for entry in log.range(snapshot_index..).map_err(storage)? {
            let (index, bytes) = entry.map_err(storage)?;
            let command: Command = postcard::from_bytes(bytes.value()).map_err(storage)?;
            state.apply(command);
            next_index = index.value() + 1;
        }
        let replayed = next_index - snapshot_index;
        tracing::info!(path = %path.display(), snapshot_index, replayed, "metastore state restored");
        Ok((
            CommandLog {
                db,
                next_index,
                snapshot_index,
                snapshot_every,
            },
            state,
        ))
    }

    /// Makes `command` durable. Returns once it is on disk.
    pub fn append(&mut self, command: &Command) -> Result<(), MetaError> {
        let bytes = postcard::to_stdvec(command).map_err(storage)?;
        let txn = self.db.begin_write().map_err(storage)?;
        txn.open_table(LOG)
            .map_err(storage)?
            .insert(self.next_index, bytes.as_slice())
            .map_err(storage)?;
        txn.commit().map_err(storage)?;
        self.next_index += 1;
        Ok(())
    }

    pub fn wants_snapshot(&self) -> bool {
        self.next_index - self.snapshot_index >= self.snapshot_every
    }

    /// Stores `state` (which must include every appended command) as the
    /// snapshot and drops the log it covers, in one transaction.
    pub fn snapshot(&mut self, state: &State) -> Result<(), MetaError> {
        let bytes = postcard::to_stdvec(state).map_err(storage)?;
        let index = postcard::to_stdvec(&self.next_index).map_err(storage)?;
        let txn = self.db.begin_write().map_err(storage)?;
        {
            let mut snapshots = txn.open_table(SNAPSHOT).map_err(storage)?;
            snapshots
                .insert(SNAPSHOT_STATE, bytes.as_slice())
                .map_err(storage)?;
            snapshots
                .insert(SNAPSHOT_INDEX, index.as_slice())
                .map_err(storage)?;
            let mut log = txn.open_table(LOG).map_err(storage)?;
            log.retain_in(..self.next_index, |_, _| false)
                .map_err(storage)?;
        }
        txn.commit().map_err(storage)?;
        self.snapshot_index = self.next_index;
        tracing::debug!(
            index = self.next_index,
            bytes = bytes.len(),
            "metastore snapshot written"
        );
        Ok(())
    }

    /// Commands in the log after the snapshot (for tests and metrics).
    pub fn log_len(&self) -> u64 {
        self.next_index - self.snapshot_index
    }
}
