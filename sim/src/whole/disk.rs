//! A disk that forgets what was not synced when its node crashes.
//!
//! The metastore nodes keep their log, vote and snapshot in redb, which
//! writes pages and syncs only for durable commits (the commit index is
//! saved without a sync, see `log_store::save_committed`). A killed process
//! keeps what was synced and may lose the rest; the simulation takes the
//! worst case: every write since the last sync is undone at the crash. (The
//! disk was shared across restarts before, so a restarted node found even
//! its unsynced writes, and a leader restarting with a commit index behind
//! its log was never simulated.)

use std::fmt;
use std::sync::{Arc, Mutex};

use redb::StorageBackend;

/// What redb's `StorageBackend` methods fail with.
type BackendIoError = std::io::Error;

/// One node's disk. [`Disk::handle`] gives the backend a database opens;
/// [`Disk::crash`] undoes unsynced writes and retires every earlier handle
/// (a crashed process writes nothing more).
#[derive(Clone, Default)]
pub struct Disk(Arc<Mutex<Bytes>>);

#[derive(Default)]
struct Bytes {
    data: Vec<u8>,
    /// How to put back what was written since the last sync, oldest first.
    undo: Vec<Undo>,
    /// Handles of an older generation belong to a crashed process.
    generation: u64,
}

enum Undo {
    /// Bytes overwritten at an offset.
    Bytes { offset: usize, old: Vec<u8> },
    /// The length before a write or `set_len` changed it.
    Len(usize),
}

impl Disk {
    pub fn handle(&self) -> Handle {
        let generation = self.0.lock().expect("disk lock").generation;
        Handle {
            disk: self.clone(),
            generation,
        }
    }

    /// The process using this disk died: unsynced writes are gone, and so
    /// are its handles.
    pub fn crash(&self) {
        let mut disk = self.0.lock().expect("disk lock");
        while let Some(undo) = disk.undo.pop() {
            match undo {
                Undo::Bytes { offset, old } => {
                    disk.data[offset..offset + old.len()].copy_from_slice(&old)
                }
                Undo::Len(len) => disk.data.resize(len, 0),
            }
        }
        disk.generation += 1;
    }

    /// A new machine in the old one's place: nothing on it, and the old
    /// process's handles retired.
    pub fn wipe(&self) {
        self.crash();
        self.0.lock().expect("disk lock").data.clear();
    }

    /// Bytes written and not yet synced (for tests).
    #[cfg(test)]
    fn unsynced(&self) -> usize {
        self.0.lock().expect("disk lock").undo.len()
    }
}

/// The backend of one database opened on a [`Disk`].
pub struct Handle {
    disk: Disk,
    generation: u64,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sim disk (generation {})", self.generation)
    }
}

impl Handle {
    fn with<T>(&self, f: impl FnOnce(&mut Bytes) -> T) -> Result<T, BackendIoError> {
        let mut disk = self.disk.0.lock().expect("disk lock");
        if disk.generation != self.generation {
            return Err(std::io::Error::other("the process using this disk crashed"));
        }
        Ok(f(&mut disk))
    }
}

fn out_of_range() -> BackendIoError {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "read past the end of the disk",
    )
}

impl StorageBackend for Handle {
    fn len(&self) -> Result<u64, BackendIoError> {
        self.with(|d| d.data.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendIoError> {
        self.with(|d| {
            let start = offset as usize;
            let bytes = d
                .data
                .get(start..start + out.len())
                .ok_or_else(out_of_range)?;
            out.copy_from_slice(bytes);
            Ok(())
        })?
    }

    fn set_len(&self, len: u64) -> Result<(), BackendIoError> {
        self.with(|d| {
            let len = len as usize;
            if len < d.data.len() {
                let old = d.data[len..].to_vec();
                d.undo.push(Undo::Bytes { offset: len, old });
            }
            d.undo.push(Undo::Len(d.data.len()));
            d.data.resize(len, 0);
        })
    }

    fn sync_data(&self) -> Result<(), BackendIoError> {
        self.with(|d| d.undo.clear())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BackendIoError> {
        self.with(|d| {
            let start = offset as usize;
            let end = start + data.len();
            if end > d.data.len() {
                d.undo.push(Undo::Len(d.data.len()));
                d.data.resize(end, 0);
            }
            let old = d.data[start..end].to_vec();
            d.undo.push(Undo::Bytes { offset: start, old });
            d.data[start..end].copy_from_slice(data);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_keeps_what_was_synced_and_only_that() {
        let disk = Disk::default();
        let h = disk.handle();
        h.write(0, b"hello").unwrap();
        h.sync_data().unwrap();
        h.write(2, b"LLO world").unwrap();
        h.set_len(4).unwrap();
        assert!(disk.unsynced() > 0);
        disk.crash();
        let h2 = disk.handle();
        let mut out = [0u8; 5];
        h2.read(0, &mut out).unwrap();
        assert_eq!(&out, b"hello");
        assert_eq!(h2.len().unwrap(), 5);
        assert!(
            h.write(0, b"x").is_err(),
            "the crashed process's handle is dead"
        );
    }

    #[test]
    fn a_database_reopens_after_a_crash_at_its_last_durable_commit() {
        use redb::{ReadableDatabase, TableDefinition};
        const T: TableDefinition<u64, u64> = TableDefinition::new("t");
        let disk = Disk::default();
        let db = redb::Database::builder()
            .create_with_backend(disk.handle())
            .unwrap();
        let write = |value: u64, durability: redb::Durability| {
            let mut txn = db.begin_write().unwrap();
            txn.set_durability(durability).unwrap();
            txn.open_table(T).unwrap().insert(0, value).unwrap();
            txn.commit().unwrap();
        };
        write(1, redb::Durability::Immediate);
        write(2, redb::Durability::None);
        disk.crash();
        drop(db);
        let db = redb::Database::builder()
            .create_with_backend(disk.handle())
            .unwrap();
        let read = db.begin_read().unwrap();
        let value = read.open_table(T).unwrap().get(0).unwrap().unwrap().value();
        assert_eq!(
            value, 1,
            "the unsynced commit is gone, the durable one stays"
        );
    }
}
