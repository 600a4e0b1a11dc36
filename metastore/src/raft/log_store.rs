//! The Raft log, vote and commit index, in `redb`.
//!
//! Entries are postcard-encoded under their index. Every write goes, in the
//! order openraft makes it, to one writer task ([`write_log`]), which puts
//! all that waits into one redb transaction and fsyncs it once. `append`
//! returns as soon as its entries are queued and readable, and openraft is
//! told they are durable (`LogFlushed`) only after that fsync, as its
//! contract asks. Votes, truncations and purges go through the same queue
//! and are awaited, so every write reaches the disk in the order it was
//! made; a transaction holding them in that order is the same as one each.
//!
//! What this buys with openraft 0.9, whose core waits for each append's
//! `LogFlushed` before its next command: the commit index, saved after
//! every commit, rides the next sync instead of costing the core a
//! transaction of its own; and replication reads the entry it sends from
//! memory ([`Tail`]), where it read the file. (A later openraft that goes on
//! while an append syncs would get appends sharing syncs too; nothing here
//! assumes either way.)

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{RaftLogReader, StorageIOError};
use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, oneshot};

use super::{Entry, LogId, StorageError, TypeConfig, Vote, any, blocking};

pub(crate) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_meta");
const VOTE: &str = "vote";
const COMMITTED: &str = "committed";
const PURGED: &str = "purged";

/// Writes waiting for the writer at most; openraft waits for room past it.
const QUEUE: usize = 1_024;
/// Writes in one transaction at most.
const MAX_GROUP: usize = 256;

/// Synced entries kept in memory behind the unsynced ones, at most, so that
/// replication (which reads an entry right after it is synced) and a
/// follower a little behind read memory, not the file.
const TAIL_KEEP: usize = 64;

/// The end of the log in memory: every entry appended and not yet synced,
/// and up to [`TAIL_KEEP`] synced ones before them. Every entry below the
/// first one here is in the file.
#[derive(Default)]
struct Tail {
    entries: BTreeMap<u64, Entry>,
    /// The last entry known synced (every one before it is too).
    synced: Option<u64>,
    /// Moves when a truncation or purge is queued and when it is made, so a
    /// read that took part of its range from here and part from the file
    /// can tell that the log changed between the two.
    generation: u64,
}

type SharedTail = Arc<Mutex<Tail>>;

impl Tail {
    fn append(&mut self, entry: Entry) {
        self.entries.insert(entry.log_id.index, entry);
    }

    /// `ids`, appended in this order, are synced.
    fn synced(&mut self, ids: &[LogId]) {
        if let Some(last) = ids.last()
            && self
                .entries
                .get(&last.index)
                .is_some_and(|e| e.log_id == *last)
        {
            self.synced = Some(last.index);
        }
        while self.entries.len() > TAIL_KEEP {
            match self.entries.first_key_value() {
                Some((&first, _)) if self.synced.is_some_and(|s| first <= s) => {
                    self.entries.pop_first();
                }
                _ => break,
            }
        }
    }

    /// Entries from `from` on are to go (applied here when queued, so no
    /// reader gets them from memory while the file still has them).
    fn truncate(&mut self, from: u64) {
        self.entries.split_off(&from);
        // Everything up to `synced` was synced, the entry before `from` too.
        self.synced = self.synced.and_then(|s| s.min(from.checked_sub(1)?).into());
        self.generation += 1;
    }

    /// Entries up to `upto` are to go.
    fn purge(&mut self, upto: u64) {
        self.entries = self.entries.split_off(&(upto + 1));
        self.generation += 1;
    }

    /// A truncation or purge is made in the file.
    fn changed_file(&mut self) {
        self.generation += 1;
    }

    fn range(&self, bounds: (Bound<u64>, Bound<u64>)) -> Vec<Entry> {
        self.entries.range(bounds).map(|(_, e)| e.clone()).collect()
    }
}

/// The log store, as the Raft core holds it: it reads as its readers do.
pub struct LogStore {
    reader: LogReader,
    writes: mpsc::Sender<Write>,
}

/// Reads the log for replication: synced entries from the file, the rest
/// from memory.
#[derive(Clone)]
pub struct LogReader {
    db: Arc<Database>,
    tail: SharedTail,
}

/// One write, as openraft made it: what it changes in the file, if
/// anything, and how it is answered once synced, if it is.
struct Write {
    change: Option<Change>,
    answer: Option<Answer>,
}

type Done = oneshot::Sender<Result<(), String>>;

/// What a write changes in the file, apart from how it is answered.
enum Change {
    Insert(Vec<(u64, Vec<u8>)>),
    Meta(&'static str, Vec<u8>),
    Truncate(u64),
    Purge(u64, Vec<u8>),
}

/// How a write is answered once its transaction is synced.
enum Answer {
    Flushed(Vec<LogId>, LogFlushed<TypeConfig>),
    Done(Done),
    /// A truncation or purge, which readers must notice.
    Changed(Done),
}

/// Marks the log of a new file purged up to `last` (and committed to it): a
/// restored node's log starts after its snapshot.
pub(super) fn write_purged_in(
    txn: &redb::WriteTransaction,
    last: &LogId,
) -> Result<(), openraft::AnyError> {
    let bytes = encode(last)?;
    let committed = encode(&Some(*last))?;
    let mut meta = txn.open_table(META).map_err(any)?;
    meta.insert(PURGED, bytes.as_slice()).map_err(any)?;
    meta.insert(COMMITTED, committed.as_slice()).map_err(any)?;
    Ok(())
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

fn writer_stopped() -> openraft::AnyError {
    openraft::AnyError::error("the log writer stopped")
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, openraft::AnyError> {
    postcard::to_stdvec(value).map_err(any)
}

impl LogStore {
    /// The tables must exist (see [`super::node`]'s opening of the file).
    /// Starts the writer, which ends when this is dropped.
    pub fn new(db: Arc<Database>) -> Self {
        let tail = SharedTail::default();
        let (writes, queue) = mpsc::channel(QUEUE);
        tokio::spawn(write_log(db.clone(), tail.clone(), queue));
        LogStore {
            reader: LogReader { db, tail },
            writes,
        }
    }

    fn db(&self) -> Arc<Database> {
        self.reader.db.clone()
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, Tail> {
        self.reader.tail.lock().expect("log tail lock")
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

    /// Queues `change`, answered by `answer` made with `done`'s sender, and
    /// waits until it is synced.
    async fn submit(
        &self,
        change: Option<Change>,
        answer: fn(Done) -> Answer,
    ) -> Result<(), openraft::AnyError> {
        let (done, synced) = oneshot::channel();
        let write = Write {
            change,
            answer: Some(answer(done)),
        };
        self.writes
            .send(write)
            .await
            .map_err(|_| writer_stopped())?;
        synced
            .await
            .map_err(|_| writer_stopped())?
            .map_err(openraft::AnyError::error)
    }

    /// Waits until every write made before is on disk (for reads of the file).
    async fn written(&self) -> Result<(), openraft::AnyError> {
        self.submit(None, Answer::Done).await
    }
}

fn owned_bounds<RB: RangeBounds<u64>>(range: &RB) -> (Bound<u64>, Bound<u64>) {
    (range.start_bound().cloned(), range.end_bound().cloned())
}

/// The entries in `bounds`: those in the tail from memory, the rest from the
/// file. Memory is read first: an entry leaves it only once synced, so every
/// entry below the first one still there is in the file by the time it is
/// read. A truncation or purge in between (a leader purges after its
/// snapshots while replication reads; a deposed leader's replication may
/// read while it truncates) changes the generation: read again. And what is
/// returned never has a hole: it ends at the first gap.
async fn read_entries(
    db: &Arc<Database>,
    tail: &SharedTail,
    bounds: (Bound<u64>, Bound<u64>),
) -> Result<Vec<Entry>, StorageError> {
    if holds_nothing(bounds) {
        return Ok(Vec::new());
    }
    loop {
        let generation = tail.lock().expect("log tail lock").generation;
        let entries = read_once(db, tail, bounds).await?;
        if tail.lock().expect("log tail lock").generation == generation {
            return Ok(contiguous(entries));
        }
    }
}

/// Whether `bounds` hold no index. openraft may ask for a range whose start
/// is past its end (its own check of an answer takes that as empty), which
/// `BTreeMap::range` and redb's ranges refuse with a panic.
fn holds_nothing((start, end): (Bound<u64>, Bound<u64>)) -> bool {
    let first = match start {
        Bound::Included(s) => Some(s),
        Bound::Excluded(s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let last = match end {
        Bound::Included(e) => Some(e),
        Bound::Excluded(e) => e.checked_sub(1),
        Bound::Unbounded => Some(u64::MAX),
    };
    match (first, last) {
        (Some(first), Some(last)) => first > last,
        _ => true,
    }
}

/// `entries` up to the first one that does not follow the one before.
/// (They may start past the range's start: purged entries are not there.)
fn contiguous(mut entries: Vec<Entry>) -> Vec<Entry> {
    let gap = entries
        .windows(2)
        .position(|pair| pair[1].log_id.index != pair[0].log_id.index + 1);
    if let Some(last) = gap {
        entries.truncate(last + 1);
    }
    entries
}

async fn read_once(
    db: &Arc<Database>,
    tail: &SharedTail,
    bounds: (Bound<u64>, Bound<u64>),
) -> Result<Vec<Entry>, StorageError> {
    let pending = tail.lock().expect("log tail lock").range(bounds);
    let on_disk_end = match pending.first() {
        Some(first) => Bound::Excluded(first.log_id.index),
        None => bounds.1,
    };
    let on_disk = (bounds.0, on_disk_end);
    let empty = match on_disk {
        (Bound::Included(s), Bound::Excluded(e)) => s >= e,
        _ => false,
    };
    let mut entries = if empty {
        Vec::new()
    } else {
        let db = db.clone();
        blocking(move || {
            let txn = db.begin_read().map_err(any)?;
            let table = txn.open_table(LOG).map_err(any)?;
            let mut entries = Vec::new();
            for item in table.range::<u64>(on_disk).map_err(any)? {
                let (_, bytes) = item.map_err(any)?;
                entries.push(postcard::from_bytes(bytes.value()).map_err(any)?);
            }
            Ok(entries)
        })
        .await
        .map_err(StorageIOError::read_logs)?
    };
    entries.extend(pending);
    Ok(entries)
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        read_entries(&self.db, &self.tail, owned_bounds(&range)).await
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        self.reader.try_get_log_entries(range).await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        self.written().await.map_err(StorageIOError::read_logs)?;
        let db = self.db();
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
        self.reader.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let bytes = encode(vote).map_err(StorageIOError::write_vote)?;
        self.submit(Some(Change::Meta(VOTE, bytes)), Answer::Done)
            .await
            .map_err(|e| StorageIOError::write_vote(e).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.written().await.map_err(StorageIOError::read_vote)?;
        let db = self.db();
        blocking(move || read_meta(&db, VOTE))
            .await
            .map_err(|e| StorageIOError::read_vote(e).into())
    }

    // Saving the commit index lets a restarted node apply its committed log
    // at once, instead of waiting to hear it from a leader. It need not be
    // fsynced (the next sync carries it to disk): a stale one only means
    // re-learning the rest from the leader, and a sync of its own would
    // double the cost of every write.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let bytes = encode(&committed).map_err(StorageIOError::write)?;
        let write = Write {
            change: Some(Change::Meta(COMMITTED, bytes)),
            answer: None,
        };
        self.writes
            .send(write)
            .await
            .map_err(|_| StorageIOError::write(writer_stopped()).into())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        self.written().await.map_err(StorageIOError::read)?;
        let db = self.db();
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
        let entries: Vec<Entry> = entries.into_iter().collect();
        let rows = entries
            .iter()
            .map(|entry| Ok((entry.log_id.index, encode(entry)?)))
            .collect::<Result<Vec<_>, openraft::AnyError>>()
            .map_err(StorageIOError::write_logs)?;
        let ids = entries.iter().map(|entry| entry.log_id).collect();
        {
            let mut tail = self.tail();
            for entry in entries {
                tail.append(entry);
            }
        }
        let write = Write {
            change: Some(Change::Insert(rows)),
            answer: Some(Answer::Flushed(ids, callback)),
        };
        if let Err(mpsc::error::SendError(write)) = self.writes.send(write).await {
            let stopped = Err(writer_stopped().to_string());
            if let Some(answer) = write.answer {
                answer.give(&self.reader.tail, &stopped);
            }
            return Err(StorageIOError::write_logs(writer_stopped()).into());
        }
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.tail().truncate(log_id.index);
        self.submit(Some(Change::Truncate(log_id.index)), Answer::Changed)
            .await
            .map_err(|e| StorageIOError::write_logs(e).into())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let bytes = encode(&log_id).map_err(StorageIOError::write_logs)?;
        self.tail().purge(log_id.index);
        self.submit(Some(Change::Purge(log_id.index, bytes)), Answer::Changed)
            .await
            .map_err(|e| StorageIOError::write_logs(e).into())
    }
}

/// The writer: takes every write waiting (up to [`MAX_GROUP`]), makes them
/// in order in one transaction, syncs it once (unless it holds only a commit
/// index), then answers them in order. After a failed write it refuses the
/// rest: nothing after a lost write may be called durable.
async fn write_log(db: Arc<Database>, tail: SharedTail, mut queue: mpsc::Receiver<Write>) {
    let mut failed: Option<String> = None;
    while let Some(first) = queue.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(write) => group.push(write),
                Err(_) => break,
            }
        }
        let (changes, answers): (Vec<_>, Vec<_>) = group
            .into_iter()
            .map(|write| (write.change, write.answer))
            .unzip();
        let changes: Vec<Change> = changes.into_iter().flatten().collect();
        let result = match &failed {
            Some(e) => Err(e.clone()),
            None => {
                let db = db.clone();
                blocking(move || commit(&db, &changes))
                    .await
                    .map_err(|e| e.to_string())
            }
        };
        if let Err(e) = &result {
            failed = Some(e.clone());
        }
        for answer in answers.into_iter().flatten() {
            answer.give(&tail, &result);
        }
    }
}

/// Makes `changes` in order in one transaction: synced, unless all it holds
/// is the commit index.
fn commit(db: &Database, changes: &[Change]) -> Result<(), openraft::AnyError> {
    if changes.is_empty() {
        return Ok(());
    }
    let mut txn = db.begin_write().map_err(any)?;
    let only_committed = changes
        .iter()
        .all(|c| matches!(c, Change::Meta(COMMITTED, _)));
    if only_committed {
        txn.set_durability(Durability::None).map_err(any)?;
    }
    {
        let mut log = txn.open_table(LOG).map_err(any)?;
        let mut meta = txn.open_table(META).map_err(any)?;
        for change in changes {
            match change {
                Change::Insert(rows) => {
                    for (index, bytes) in rows {
                        log.insert(*index, bytes.as_slice()).map_err(any)?;
                    }
                }
                Change::Meta(key, bytes) => {
                    meta.insert(*key, bytes.as_slice()).map_err(any)?;
                }
                Change::Truncate(from) => {
                    log.retain_in(*from.., |_, _| false).map_err(any)?;
                }
                Change::Purge(upto, bytes) => {
                    meta.insert(PURGED, bytes.as_slice()).map_err(any)?;
                    log.retain_in(..=*upto, |_, _| false).map_err(any)?;
                }
            }
        }
    }
    txn.commit().map_err(any)
}

impl Answer {
    /// Answers one write of a transaction that ended with `result`: synced
    /// entries may leave the tail, and a truncation or purge made in the
    /// file moves the tail's generation.
    fn give(self, tail: &SharedTail, result: &Result<(), String>) {
        if result.is_ok() {
            let mut tail = tail.lock().expect("log tail lock");
            match &self {
                Answer::Flushed(ids, _) => tail.synced(ids),
                Answer::Changed(_) => tail.changed_file(),
                Answer::Done(_) => {}
            }
        }
        match self {
            Answer::Flushed(_, flushed) => {
                flushed.log_io_completed(result.clone().map_err(std::io::Error::other))
            }
            Answer::Done(done) | Answer::Changed(done) => {
                // A caller that stopped waiting does not mind.
                let _ = done.send(result.clone());
            }
        }
    }
}

/// Entries in the log (purged ones excluded): for tests and status.
pub(crate) fn log_entries(db: &Database) -> Result<u64, openraft::AnyError> {
    let txn = db.begin_read().map_err(any)?;
    let table = txn.open_table(LOG).map_err(any)?;
    table.len().map_err(any)
}

#[cfg(test)]
mod tests {
    use openraft::testing::{StoreBuilder, Suite};
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::super::group_watch::GroupWatch;
    use super::super::node::database_on;
    use super::super::state_machine::StateMachine;
    use super::*;

    struct InMemory;

    impl StoreBuilder<TypeConfig, LogStore, StateMachine, ()> for InMemory {
        async fn build(&self) -> Result<((), LogStore, StateMachine), StorageError> {
            let db = Arc::new(
                database_on(redb::backends::InMemoryBackend::new())
                    .map_err(|e| StorageIOError::read(openraft::AnyError::error(e)))?,
            );
            let (state_machine, _, _) = StateMachine::open(
                db.clone(),
                Arc::new(crate::SystemClock),
                Arc::new(GroupWatch::default()),
                None,
            )
            .await?;
            Ok(((), LogStore::new(db), state_machine))
        }
    }

    /// openraft's own checks of a log store and state machine: reads,
    /// appends, truncation, purges, votes, membership and snapshots.
    #[test]
    fn the_log_store_passes_openraft_storage_suite() {
        Suite::test_all(InMemory).unwrap();
    }

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    fn indexes(tail: &Tail) -> Vec<u64> {
        tail.entries.keys().copied().collect()
    }

    /// The tail keeps every unsynced entry, and synced ones only up to
    /// `TAIL_KEEP`, dropping the oldest; a truncation drops what follows it,
    /// and what is appended again in its place is synced on its own.
    #[test]
    fn the_tail_keeps_unsynced_entries_and_a_bounded_synced_rest() {
        let mut tail = Tail::default();
        let ids: Vec<LogId> = (1..=100).map(|i| entry(1, i).log_id).collect();
        for i in 1..=100 {
            tail.append(entry(1, i));
        }
        // Nothing synced yet: all stay, however many.
        tail.synced(&[]);
        assert_eq!(tail.entries.len(), 100);
        tail.synced(&ids[..80]);
        // 20 unsynced and 44 synced ones.
        assert_eq!(indexes(&tail), (37..=100).collect::<Vec<_>>());
        tail.synced(&ids[80..]);
        assert_eq!(indexes(&tail), (37..=100).collect::<Vec<_>>());

        let generation = tail.generation;
        tail.truncate(90);
        assert_eq!(tail.synced, Some(89));
        assert_eq!(indexes(&tail), (37..=89).collect::<Vec<_>>());
        assert_ne!(tail.generation, generation, "readers notice");
        for i in 90..=120 {
            tail.append(entry(2, i));
        }
        // A sync of the entries truncated away says nothing of their
        // replacements.
        tail.synced(&ids[89..90]);
        assert_eq!(tail.synced, Some(89));
        assert_eq!(indexes(&tail), (57..=120).collect::<Vec<_>>());
        tail.synced(&[entry(2, 110).log_id]);
        assert_eq!(indexes(&tail), (57..=120).collect::<Vec<_>>());
        tail.append(entry(2, 121));
        tail.synced(&[entry(2, 121).log_id]);
        assert_eq!(indexes(&tail), (58..=121).collect::<Vec<_>>());

        tail.purge(100);
        assert_eq!(indexes(&tail), (101..=121).collect::<Vec<_>>());
    }

    /// What a read returns never has a hole: it ends before the first one.
    #[test]
    fn reads_end_at_a_gap() {
        let with_gap = vec![entry(1, 5), entry(1, 6), entry(1, 9), entry(1, 10)];
        assert_eq!(contiguous(with_gap), vec![entry(1, 5), entry(1, 6)]);
        assert_eq!(contiguous(vec![entry(1, 5)]), vec![entry(1, 5)]);
        assert_eq!(contiguous(Vec::new()), Vec::<Entry>::new());
    }

    /// Reads take what is below the tail from the file and the rest from
    /// the tail: the same entries, wherever the range starts and ends.
    #[tokio::test]
    async fn reads_join_the_file_and_the_tail() {
        let ((), mut store, _) = InMemory.build().await.unwrap();
        let rows = (1..=100)
            .map(|i| (i, encode(&entry(1, i)).unwrap()))
            .collect();
        commit(&store.db(), &[Change::Insert(rows)]).unwrap();
        {
            // 81..=100 synced and still in the tail, 101..=120 not synced.
            let mut tail = store.tail();
            for i in 81..=120 {
                tail.append(entry(1, i));
            }
            let synced: Vec<LogId> = (81..=100).map(|i| entry(1, i).log_id).collect();
            tail.synced(&synced);
        }
        for (from, to) in [
            (1, 120),
            (50, 90),
            (81, 81),
            (85, 110),
            (101, 120),
            (110, 130),
        ] {
            let read = store.try_get_log_entries(from..=to).await.unwrap();
            let expected: Vec<Entry> = (from..=to.min(120)).map(|i| entry(1, i)).collect();
            assert_eq!(read, expected, "{from}..={to}");
        }
        // A range that holds nothing, its start past its end, reads empty
        // (in the file and in the tail), never a panic.
        for (from, to) in [(90, 85), (111, 101), (5, 4)] {
            let read = store.try_get_log_entries(from..to).await.unwrap();
            assert!(read.is_empty(), "{from}..{to}");
        }
    }

    /// Writes queued one after another reach the file in that order, the
    /// commit index with the next synced write, and reads see them all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_writes_reach_the_file_in_order() {
        let ((), mut store, _) = InMemory.build().await.unwrap();
        let rows = (1..=10)
            .map(|i| (i, encode(&entry(1, i)).unwrap()))
            .collect();
        commit(&store.db(), &[Change::Insert(rows)]).unwrap();
        store
            .save_committed(Some(entry(1, 5).log_id))
            .await
            .unwrap();
        let vote = Vote::new_committed(2, 1);
        store.save_vote(&vote).await.unwrap();
        store.truncate(entry(1, 8).log_id).await.unwrap();
        store.purge(entry(1, 3).log_id).await.unwrap();

        assert_eq!(store.read_vote().await.unwrap(), Some(vote));
        assert_eq!(
            store.read_committed().await.unwrap(),
            Some(entry(1, 5).log_id)
        );
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(entry(1, 3).log_id));
        assert_eq!(state.last_log_id, Some(entry(1, 7).log_id));
        let read = store.try_get_log_entries(0..20).await.unwrap();
        assert_eq!(read, (4..=7).map(|i| entry(1, i)).collect::<Vec<_>>());
    }
}
