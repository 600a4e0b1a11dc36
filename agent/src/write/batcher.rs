//! The produce path: batches from every partition and connection go into one
//! ingest file per flush; the file is uploaded, then committed to the
//! metastore, which assigns offsets; only then are producers answered.
//!
//! Uploads of successive files may overlap (`max_inflight_uploads`), but their
//! commits are applied strictly in file order, so a partition's batches get
//! offsets in the order this agent accepted them.
//!
//! A file is sealed `flush_interval` after its first batch, once it holds
//! `flush_bytes`, or early once every producer with batches in it waits on
//! it with its pipeline full ([`super::pipelines`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floe_cache::BlockCache;
use floe_metastore::txn::TxnEnd;
use floe_metastore::{
    BatchKind, CommitBatch, IngestBatch, Metastore, Placed, Refusal, TopicId, ops::IngestCommit,
};
use floe_protocol::batch::RecordBatch;
use floe_storage::ids::Ids;
use floe_storage::ingest::IngestWriter;
use floe_storage::{ObjectPath, ObjectStore, keys};
use futures::StreamExt;
use object_store::ObjectStoreExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::time::Instant;

use super::pipelines::{Producer, Producers};
use crate::metrics::Metrics;
use crate::tasks::Tasks;

/// Why an append was not committed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AppendError {
    /// The upload or the commit failed; nothing was sequenced. Retriable.
    #[error("storage unavailable: {0}")]
    Storage(String),
    /// The metastore refused this batch (e.g. its topic was deleted meanwhile).
    #[error(transparent)]
    Refused(Refusal),
}

struct Append {
    topic_id: TopicId,
    partition: i32,
    batch: RecordBatch,
    /// What the sequencer makes of it (a marker's end is numbered when its
    /// file is built).
    kind: BatchKind,
    reply: oneshot::Sender<Result<Placed, AppendError>>,
    /// Whether to store the batch even if nobody waits for its answer any
    /// more (acks=0). Otherwise a batch whose connection closed before its
    /// file was sealed is dropped: its producer saw no answer and will retry,
    /// maybe through another agent, and storing both would land as X Y X.
    keep_if_abandoned: bool,
    /// The producer that sent it, if one waits on it.
    producer: Option<Producer>,
    /// Memory budget held until the batch is answered.
    _budget: OwnedSemaphorePermit,
}

/// What the batcher is handed: a batch, or a transaction's end with its
/// markers, which go into one file together.
enum Enqueued {
    One(Append),
    End(TxnEnd, Vec<Append>),
}

/// Handle to the batcher task; cheap to clone.
#[derive(Clone)]
pub struct Batcher {
    appends: mpsc::Sender<Enqueued>,
    budget: Arc<Semaphore>,
    budget_bytes: u32,
    clock: Arc<MetastoreClock>,
    /// Its two tasks (collecting appends, uploading files), apart from
    /// the agent's others so that they can be stopped alone.
    tasks: Tasks,
}

pub struct BatcherConfig {
    pub flush_interval: Duration,
    /// The shortest time between two files when every producer with
    /// batches in the open one waits on it (see [`super::pipelines`]).
    pub min_flush_interval: Duration,
    pub flush_bytes: u64,
    pub max_buffered_bytes: u64,
    pub max_inflight_uploads: usize,
}

impl Batcher {
    /// Starts the batcher and uploader tasks on `tasks`. `commits` is
    /// bumped after every successful commit so that long-polling fetches
    /// wake up.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        tasks: &Tasks,
        config: BatcherConfig,
        store: Arc<dyn ObjectStore>,
        meta: Arc<dyn Metastore>,
        cache: Arc<BlockCache>,
        commits: watch::Sender<u64>,
        metrics: Arc<Metrics>,
        ids: Arc<dyn Ids>,
    ) -> Batcher {
        let budget_bytes = config.max_buffered_bytes.min(u32::MAX as u64) as u32;
        let (appends, appends_rx) = mpsc::channel(4096);
        let (files, files_rx) = mpsc::channel(config.max_inflight_uploads);
        let tasks = tasks.child();
        let clock = MetastoreClock::start(&tasks, meta.clone());
        tasks.spawn(collect(
            appends_rx,
            files,
            (config.flush_interval, config.min_flush_interval),
            config.flush_bytes,
            ids,
        ));
        tasks.spawn(upload_and_commit(
            files_rx,
            config.max_inflight_uploads,
            (store, meta),
            (cache, clock.clone()),
            commits,
            metrics,
        ));
        Batcher {
            appends,
            budget: Arc::new(Semaphore::new(budget_bytes as usize)),
            budget_bytes,
            clock,
            tasks,
        }
    }

    /// The metastore's time as this agent last read it (`None` before the
    /// first reading): a time the metastore had certainly reached.
    pub fn metastore_time(&self) -> Option<i64> {
        *self.clock.reading.borrow()
    }

    /// How the agent's contact with the metastore stands, as its clock
    /// readings (every two seconds) found it; asks the metastore nothing.
    pub fn metastore_contact(&self) -> MetastoreContact {
        self.clock.contact()
    }

    /// Stops the batcher at once, wherever it is (mid-upload, mid-commit),
    /// as a crash would: waiting producers get a retriable error. The
    /// simulation crashes agents with this.
    pub fn abort(&self) {
        self.tasks.cancel();
    }

    /// Adds one validated batch to the next ingest file. Batches enqueued one
    /// after the other get offsets in that order. Waits only while the memory
    /// budget is spent (backpressure); the returned [`Committed`] resolves to the
    /// batch's base offset once its ingest file is committed.
    pub async fn enqueue(
        &self,
        topic_id: TopicId,
        partition: i32,
        batch: RecordBatch,
        (keep_if_abandoned, producer): (bool, Option<Producer>),
        kind: BatchKind,
    ) -> Result<Committed, AppendError> {
        let (mut append, committed) = self
            .append(topic_id, partition, batch, keep_if_abandoned, kind)
            .await?;
        append.producer = producer;
        self.appends
            .send(Enqueued::One(append))
            .await
            .map_err(|_| gone())?;
        Ok(committed)
    }

    /// Ends a transaction with `markers` (one control batch per partition
    /// of it), all in one ingest file, committed with the end: the metastore
    /// decides the end and sequences the markers in one step. Each marker
    /// resolves to its offset, or to why the end was refused.
    pub async fn enqueue_end(
        &self,
        end: TxnEnd,
        markers: Vec<(TopicId, i32, RecordBatch)>,
    ) -> Result<Vec<Committed>, AppendError> {
        let mut appends = Vec::with_capacity(markers.len());
        let mut committed = Vec::with_capacity(markers.len());
        for (topic_id, partition, batch) in markers {
            // Stored whoever waits: the end is decided when it commits.
            let (append, answer) = self
                .append(topic_id, partition, batch, true, BatchKind::Plain)
                .await?;
            appends.push(append);
            committed.push(answer);
        }
        self.appends
            .send(Enqueued::End(end, appends))
            .await
            .map_err(|_| gone())?;
        Ok(committed)
    }

    /// An append holding its share of the memory budget (waiting for it).
    async fn append(
        &self,
        topic_id: TopicId,
        partition: i32,
        batch: RecordBatch,
        keep_if_abandoned: bool,
        kind: BatchKind,
    ) -> Result<(Append, Committed), AppendError> {
        let cost = (batch.len() as u64).clamp(1, self.budget_bytes as u64) as u32;
        let budget = self
            .budget
            .clone()
            .acquire_many_owned(cost)
            .await
            .map_err(|_| gone())?;
        let (reply, answer) = oneshot::channel();
        let append = Append {
            topic_id,
            partition,
            batch,
            kind,
            reply,
            keep_if_abandoned,
            producer: None,
            _budget: budget,
        };
        Ok((append, Committed(answer)))
    }
}

fn gone() -> AppendError {
    AppendError::Storage("agent is shutting down".into())
}

impl Batcher {
    /// Waits until every enqueued batch has been answered, or `timeout`.
    /// Returns whether it got there.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.budget.available_permits() < self.budget_bytes as usize {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }
}

/// A batch on its way into an ingest file.
pub struct Committed(oneshot::Receiver<Result<Placed, AppendError>>);

impl Committed {
    /// Where the batch was placed, once committed.
    pub async fn placed(self) -> Result<Placed, AppendError> {
        self.0
            .await
            .map_err(|_| AppendError::Storage("agent is shutting down".into()))?
    }

    /// The batch's base offset, once committed.
    pub async fn offset(self) -> Result<i64, AppendError> {
        self.placed().await.map(|p| p.base_offset)
    }
}

/// The appends of one future ingest file, grouped by partition in arrival order.
struct PendingFile {
    /// Drawn when the file is started, so the run of ids follows the files.
    key: ObjectPath,
    partitions: Vec<((TopicId, i32), Vec<Append>)>,
    index: HashMap<(TopicId, i32), usize>,
    bytes: u64,
    /// Transactions this file ends (their markers are among the appends).
    ends: Vec<TxnEnd>,
    producers: Producers,
}

impl PendingFile {
    fn new(key: ObjectPath) -> PendingFile {
        PendingFile {
            key,
            partitions: Vec::new(),
            index: HashMap::new(),
            bytes: 0,
            ends: Vec::new(),
            producers: Producers::default(),
        }
    }

    fn add(&mut self, enqueued: Enqueued) {
        match enqueued {
            Enqueued::One(append) => self.push(append),
            Enqueued::End(end, markers) => {
                let end_at = self.ends.len() as u32;
                self.ends.push(end);
                for mut marker in markers {
                    marker.kind = BatchKind::Marker { end: end_at };
                    self.push(marker);
                }
            }
        }
    }

    fn push(&mut self, append: Append) {
        self.bytes += append.batch.len() as u64;
        if let Some(producer) = append.producer {
            self.producers.saw(producer);
        }
        let key = (append.topic_id, append.partition);
        let slot = *self.index.entry(key).or_insert_with(|| {
            self.partitions.push((key, Vec::new()));
            self.partitions.len() - 1
        });
        self.partitions[slot].1.push(append);
    }

    /// Its appends, for answering them without writing the file.
    fn into_appends(self) -> Vec<Append> {
        self.partitions
            .into_iter()
            .flat_map(|(_, group)| group)
            .collect()
    }

    /// Lays the batches out as an ingest file and lists them for the commit,
    /// stamped with the metastore's time read before the upload.
    fn build(self, not_before_ms: i64) -> (Bytes, IngestCommit, Vec<Append>) {
        let key = self.key;
        let mut writer = IngestWriter::new();
        let mut batches = Vec::new();
        let mut appends = Vec::new();
        for ((topic_id, partition), mut group) in self.partitions {
            // Sealing the file: drop what nobody waits for (see `Append`).
            group.retain(|a| a.keep_if_abandoned || !a.reply.is_closed());
            if group.is_empty() {
                continue;
            }
            let raw: Vec<Bytes> = group.iter().map(|a| a.batch.bytes().clone()).collect();
            let entry = writer.add_chunk(topic_id, partition, &raw);
            let mut position = entry.position;
            for append in group {
                let batch = CommitBatch {
                    topic_id,
                    partition,
                    position,
                    length: append.batch.len() as u32,
                    record_count: append.batch.record_count(),
                    max_timestamp: append.batch.max_timestamp(),
                    producer_id: append.batch.producer_id(),
                    producer_epoch: append.batch.producer_epoch(),
                    base_sequence: append.batch.base_sequence(),
                };
                batches.push(IngestBatch {
                    batch,
                    kind: append.kind,
                });
                position += append.batch.len() as u64;
                appends.push(append);
            }
        }
        let bytes = writer.finish();
        let commit = IngestCommit {
            object_key: key.to_string(),
            object_size: bytes.len() as u64,
            batches,
            ends: self.ends,
            not_before_ms,
        };
        (bytes, commit, appends)
    }
}

/// Gathers appends until `flush_bytes` or `flush_interval` after the first
/// one, or, once every producer with batches in the file waits on it with its
/// pipeline full, `min_flush_interval` after the file before was handed on
/// (when `min_flush_interval` is shorter than `flush_interval`).
async fn collect(
    mut appends: mpsc::Receiver<Enqueued>,
    files: mpsc::Sender<PendingFile>,
    (flush_interval, min_flush_interval): (Duration, Duration),
    flush_bytes: u64,
    ids: Arc<dyn Ids>,
) {
    let seals_early = min_flush_interval < flush_interval;
    let mut last_sealed = Instant::now();
    while let Some(first) = appends.recv().await {
        let deadline = Instant::now() + flush_interval;
        let early = last_sealed + min_flush_interval;
        let mut file = PendingFile::new(keys::new_ingest_key(ids.next_id()));
        file.add(first);
        while file.bytes < flush_bytes {
            // Early only while an upload could start at once: with the
            // uploads all busy, the file would only wait in line, and
            // filling it meanwhile costs nothing.
            let waited_on = seals_early && file.producers.all_blocked() && files.capacity() > 0;
            // Biased, deadline first: a steady stream of appends cannot hold
            // a file open past its interval, and the choice does not depend
            // on a random draw (the simulation replays it). Appends already
            // waiting go in before an early seal.
            tokio::select! {
                biased;
                _ = tokio::time::sleep_until(deadline) => break,
                next = appends.recv() => match next {
                    Some(append) => file.add(append),
                    None => break,
                },
                _ = tokio::time::sleep_until(early), if waited_on => break,
            }
        }
        if files.send(file).await.is_err() {
            return;
        }
        last_sealed = Instant::now();
    }
}

struct Uploaded {
    key: String,
    appends: Vec<Append>,
    /// The file and its commit, once stored.
    result: Result<(Bytes, IngestCommit), Failed>,
}

/// Why an ingest file was not uploaded.
enum Failed {
    /// The metastore's time is not known yet: nothing was written.
    NoClock,
    /// The PUT failed or outlived [`PUT_DEADLINE`]; the object may still
    /// have been stored (a lost reply).
    Put(String),
}

async fn upload_and_commit(
    files: mpsc::Receiver<PendingFile>,
    max_inflight: usize,
    (store, meta): (Arc<dyn ObjectStore>, Arc<dyn Metastore>),
    (cache, clock): (Arc<BlockCache>, Arc<MetastoreClock>),
    commits: watch::Sender<u64>,
    metrics: Arc<Metrics>,
) {
    let uploads = futures::stream::unfold(files, |mut rx| async move {
        rx.recv().await.map(|file| (file, rx))
    })
    .map(|file| {
        let store = store.clone();
        let clock = clock.clone();
        async move {
            // Read before the upload starts: the metastore refuses the commit
            // if it arrives more than its commit window after this. With no
            // time read yet (the metastore has not answered since this agent
            // started) the file is refused, not held: producers always hear back.
            let key = file.key.to_string();
            let Some(not_before_ms) = clock.get().await else {
                return Uploaded {
                    key,
                    appends: file.into_appends(),
                    result: Err(Failed::NoClock),
                };
            };
            let (bytes, commit, appends) = file.build(not_before_ms);
            let path = object_store::path::Path::from(key.as_str());
            // Uploads commit in order: one stuck PUT would hold every
            // later file, so it gets a deadline whatever the store's own.
            let put = tokio::time::timeout(PUT_DEADLINE, store.put(&path, bytes.clone().into()));
            let result = match put.await {
                Ok(Ok(_)) => Ok((bytes, commit)),
                Ok(Err(e)) => Err(Failed::Put(e.to_string())),
                Err(_) => Err(Failed::Put(format!("no answer within {PUT_DEADLINE:?}"))),
            };
            Uploaded {
                key,
                appends,
                result,
            }
        }
    })
    // `buffered` yields in submission order: uploads overlap, commits do not reorder.
    .buffered(max_inflight);
    futures::pin_mut!(uploads);
    while let Some(up) = uploads.next().await {
        let key = up.key;
        let (bytes, commit) = match up.result {
            Ok(stored) => stored,
            Err(Failed::NoClock) => {
                tracing::warn!(object = %key, "the metastore's time is unknown; producers get a retriable error");
                let why = format!("the metastore has not answered within {CLOCK_WAIT:?}");
                reply_all(up.appends, AppendError::Storage(why));
                continue;
            }
            Err(Failed::Put(e)) => {
                tracing::warn!(object = %key, error = %e, "ingest upload failed; producers get a retriable error");
                reply_all(up.appends, AppendError::Storage(e));
                // A failed PUT may still have stored the object (a lost reply).
                record_orphan(meta.as_ref(), key).await;
                continue;
            }
        };
        cache.insert_object(&key, &bytes);
        let batches = commit.batches.len();
        metrics.flush(bytes.len(), batches);
        // The metastore client bounds each call (attempt deadlines, 15 s of
        // retries); this bounds the whole commit whatever the metastore is,
        // so producers always hear back. A commit that timed out is declared
        // an orphan below, which the metastore resolves safely either way.
        let committed = tokio::time::timeout(COMMIT_DEADLINE, meta.ingest_commit(commit))
            .await
            .unwrap_or_else(|_| {
                Err(floe_metastore::MetaError::maybe_applied(format!(
                    "no commit answer within {COMMIT_DEADLINE:?}"
                )))
            });
        match committed {
            Ok(results) => {
                for (append, result) in up.appends.into_iter().zip(results) {
                    let _ = append.reply.send(result.map_err(AppendError::Refused));
                }
                commits.send_modify(|n| *n += 1);
                tracing::debug!(object = %key, bytes = bytes.len(), batches, "ingest file committed");
            }
            Err(e) => {
                // Whether the commit applied is unknown (a lost reply). The
                // producers get a retriable error; a retry is answered by
                // sequence checks (idempotent producers) or stored again
                // (others, as with Kafka's at-least-once retries). Declaring
                // the key an orphan is safe either way: the metastore skips a
                // key it sequenced, and otherwise refuses its commit from now
                // on, so the file is never both acknowledged and collected.
                tracing::warn!(object = %key, error = %e, "commit failed; producers get a retriable error");
                reply_all(up.appends, AppendError::Storage(e.to_string()));
                record_orphan(meta.as_ref(), key).await;
            }
        }
    }
}

/// The metastore's time as this agent last read it, kept fresh every
/// [`MetastoreClock::EVERY`] by a task that lives as long as the clock.
/// Uploads are stamped with it; being a little old only shortens the time
/// their commit has. The readings are also the agent's steady contact with
/// the metastore, which readiness reports ([`MetastoreContact`]).
struct MetastoreClock {
    reading: watch::Receiver<Option<i64>>,
    contact: Arc<std::sync::Mutex<Contact>>,
}

/// When a reading last answered, and why the latest failed if it did.
#[derive(Default)]
struct Contact {
    heard: Option<Instant>,
    failing: Option<String>,
}

/// How the agent's contact with the metastore stands.
#[derive(Debug, Clone)]
pub struct MetastoreContact {
    /// How long ago the metastore last answered (`None`: not since the
    /// agent started).
    pub heard_ago: Option<Duration>,
    /// Why the latest reading failed, if it did.
    pub failing: Option<String>,
}

/// The longest an upload waits for the agent's first reading of the
/// metastore's time before its producers are answered with an error.
const CLOCK_WAIT: Duration = Duration::from_secs(15);

impl MetastoreClock {
    const EVERY: Duration = Duration::from_secs(2);

    /// Starts reading the metastore's time on `tasks`, at once and then
    /// every [`Self::EVERY`]; the task ends when the clock is dropped.
    fn start(tasks: &Tasks, meta: Arc<dyn Metastore>) -> Arc<MetastoreClock> {
        let (read, reading) = watch::channel(None);
        let contact = Arc::new(std::sync::Mutex::new(Contact::default()));
        let noted = contact.clone();
        tasks.spawn(async move {
            while !read.is_closed() {
                let failing = match tokio::time::timeout(CLOCK_WAIT, meta.clock()).await {
                    Ok(Ok(ms)) => {
                        read.send_if_modified(|latest| {
                            let newer = latest.is_none_or(|l| ms > l);
                            if newer {
                                *latest = Some(ms);
                            }
                            newer
                        });
                        None
                    }
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(_) => Some(format!("no answer within {CLOCK_WAIT:?}")),
                };
                if let Some(why) = &failing {
                    tracing::debug!(error = %why, "reading the metastore's time failed");
                }
                {
                    let mut contact = noted.lock().expect("contact lock");
                    if failing.is_none() {
                        contact.heard = Some(Instant::now());
                    }
                    contact.failing = failing;
                }
                tokio::time::sleep(Self::EVERY).await;
            }
        });
        Arc::new(MetastoreClock { reading, contact })
    }

    /// The latest reading, waiting up to [`CLOCK_WAIT`] for the first one.
    async fn get(&self) -> Option<i64> {
        let mut clock = self.reading.clone();
        let read = tokio::time::timeout(CLOCK_WAIT, clock.wait_for(Option::is_some)).await;
        read.ok()?.ok().and_then(|ms| *ms)
    }

    fn contact(&self) -> MetastoreContact {
        let contact = self.contact.lock().expect("contact lock");
        MetastoreContact {
            heard_ago: contact.heard.map(|at| at.elapsed()),
            failing: contact.failing.clone(),
        }
    }
}

/// The longest an agent waits for a commit before answering its producers
/// with a retriable error.
pub const COMMIT_DEADLINE: Duration = Duration::from_secs(60);
/// The longest one ingest PUT may take, retries included (an S3 store's
/// own deadlines are shorter: see `floe_storage::store::S3_TIMEOUTS`).
pub const PUT_DEADLINE: Duration = Duration::from_secs(60);

async fn record_orphan(meta: &dyn Metastore, key: String) {
    if let Err(e) = meta.record_orphans(vec![key.clone()]).await {
        // Left in the bucket; a bucket-listing sweep is the backstop for this.
        tracing::warn!(object = %key, error = %e, "could not record orphaned object for gc");
    }
}

fn reply_all(appends: Vec<Append>, error: AppendError) {
    for append in appends {
        let _ = append.reply.send(Err(error.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_protocol::kafka_protocol::records::Compression;
    use floe_storage::ids::RandomIds;

    fn append(
        budget: &Arc<Semaphore>,
        keep_if_abandoned: bool,
    ) -> (Append, oneshot::Receiver<Result<Placed, AppendError>>) {
        let bytes = floe_protocol::testing::encode(&[b"x".to_vec()], Compression::None);
        let (reply, answer) = oneshot::channel();
        let append = Append {
            topic_id: TopicId::from_u128(1),
            partition: 0,
            batch: RecordBatch::parse_all(&bytes).unwrap().remove(0),
            kind: BatchKind::Plain,
            reply,
            keep_if_abandoned,
            producer: None,
            _budget: budget.clone().try_acquire_owned().unwrap(),
        };
        (append, answer)
    }

    /// A producer whose connection closed before its batch's file was sealed
    /// never hears of that batch; behind a load balancer it retries through
    /// another agent, and storing both copies would read X Y X. Such batches
    /// are dropped when the file is sealed, unless sent with acks=0.
    #[test]
    fn batches_nobody_waits_for_are_dropped_when_the_file_is_sealed() {
        let budget = Arc::new(Semaphore::new(10));
        let mut file = PendingFile::new(keys::new_ingest_key(RandomIds.next_id()));
        let (waited, _kept_answer) = append(&budget, false);
        let (abandoned, gone) = append(&budget, false);
        let (fire_and_forget, also_gone) = append(&budget, true);
        drop((gone, also_gone));
        for a in [waited, abandoned, fire_and_forget] {
            file.push(a);
        }
        let (_, commit, appends) = file.build(0);
        assert_eq!(
            commit.batches.len(),
            2,
            "the abandoned acks!=0 batch is dropped"
        );
        assert_eq!(appends.len(), 2);
        assert!(appends[1].keep_if_abandoned);
        drop(appends);
        assert_eq!(
            budget.available_permits(),
            10,
            "dropped batches give their budget back"
        );
    }

    /// A batcher uploading to `store` (caching from `cached`) and committing
    /// to `meta`, with one batch enqueued.
    async fn one_batch(
        store: Arc<dyn ObjectStore>,
        cached: Arc<dyn ObjectStore>,
        meta: Arc<dyn floe_metastore::Metastore>,
    ) -> (Batcher, Committed) {
        let interval = Duration::from_millis(10);
        let batcher = batcher(store, cached, meta, (interval, interval)).await;
        let committed = batcher
            .enqueue(
                TopicId::from_u128(1),
                0,
                one_record(),
                (false, None),
                BatchKind::Plain,
            )
            .await
            .unwrap();
        (batcher, committed)
    }

    fn one_record() -> RecordBatch {
        let bytes = floe_protocol::testing::encode(&[b"x".to_vec()], Compression::None);
        RecordBatch::parse_all(&bytes).unwrap().remove(0)
    }

    /// A batcher sealing files at `flush_interval` or, when its producers
    /// wait on them, `min_flush_interval`.
    async fn batcher(
        store: Arc<dyn ObjectStore>,
        cached: Arc<dyn ObjectStore>,
        meta: Arc<dyn floe_metastore::Metastore>,
        (flush_interval, min_flush_interval): (Duration, Duration),
    ) -> Batcher {
        Batcher::start(
            &Tasks::default(),
            BatcherConfig {
                flush_interval,
                min_flush_interval,
                flush_bytes: 1 << 20,
                max_buffered_bytes: 1 << 20,
                max_inflight_uploads: 2,
            },
            store,
            meta,
            Arc::new(
                BlockCache::new(cached, floe_cache::CacheOptions::memory(1 << 20, 1 << 16))
                    .await
                    .unwrap(),
            ),
            watch::channel(0).0,
            Arc::new(Metrics::new()),
            Arc::new(RandomIds),
        )
    }

    /// A producer that sends its next batch only once the last is answered
    /// (one request in flight: its pipeline is always full) gains nothing
    /// from a file held open: it gets a file every `min_flush_interval`
    /// instead of every `flush_interval`, and never more.
    #[tokio::test(start_paused = true)]
    async fn a_producer_waiting_on_each_file_gets_files_at_the_shorter_interval() {
        async fn files_in_ten_seconds(says_blocked: bool) -> usize {
            let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
            let intervals = (Duration::from_millis(250), Duration::from_millis(125));
            let batcher = batcher(
                store.clone(),
                store.clone(),
                Arc::new(Prompt::default()),
                intervals,
            )
            .await;
            let pipeline = Arc::new(super::super::pipelines::Pipeline::new(1));
            let until = Instant::now() + Duration::from_secs(10);
            while Instant::now() < until {
                let (outstanding, mut producer) = pipeline.begin();
                assert!(producer.blocked, "one request in flight fills the pipeline");
                producer.blocked = says_blocked;
                let committed = batcher
                    .enqueue(
                        TopicId::from_u128(1),
                        0,
                        one_record(),
                        (false, Some(producer)),
                        BatchKind::Plain,
                    )
                    .await
                    .unwrap();
                // Answered (refused: the topic does not exist), so it sends again.
                let _ = committed.placed().await;
                drop(outstanding);
            }
            store.list(None).count().await
        }
        let held_open = files_in_ten_seconds(false).await;
        let sealed_early = files_in_ten_seconds(true).await;
        assert!((39..=41).contains(&held_open), "{held_open} files");
        // Twice as many, and no more than one per `min_flush_interval`.
        assert!(
            sealed_early >= 2 * held_open - 2,
            "{sealed_early} files against {held_open}"
        );
        assert!(sealed_early <= 81, "{sealed_early} files");
    }

    /// A metastore that never answers (a frozen leader, a partition).
    struct Silent;

    impl floe_metastore::Sequencer for Silent {
        async fn propose(
            &self,
            _: floe_metastore::state::Command,
        ) -> Result<floe_metastore::state::Reply, floe_metastore::MetaError> {
            std::future::pending().await
        }
        async fn read<T: Send, F: FnOnce(&floe_metastore::state::State) -> T + Clone + Send>(
            &self,
            _: F,
        ) -> Result<T, floe_metastore::MetaError> {
            std::future::pending().await
        }
        fn now_ms(&self) -> i64 {
            0
        }
        fn new_id(&self) -> uuid::Uuid {
            uuid::Uuid::nil()
        }
    }

    /// A metastore of one state in memory, answering at once.
    #[derive(Default)]
    struct Prompt(std::sync::Mutex<floe_metastore::state::State>);

    impl floe_metastore::Sequencer for Prompt {
        async fn propose(
            &self,
            command: floe_metastore::state::Command,
        ) -> Result<floe_metastore::state::Reply, floe_metastore::MetaError> {
            let proposal = floe_metastore::state::Proposal {
                at_ms: 1_000,
                command,
            };
            Ok(self.0.lock().unwrap().apply_proposal(proposal))
        }
        async fn read<T: Send, F: FnOnce(&floe_metastore::state::State) -> T + Clone + Send>(
            &self,
            f: F,
        ) -> Result<T, floe_metastore::MetaError> {
            Ok(f(&self.0.lock().unwrap()))
        }
        fn now_ms(&self) -> i64 {
            1_000
        }
        fn new_id(&self) -> uuid::Uuid {
            uuid::Uuid::from_u128(7)
        }
    }

    /// A store whose PUTs never answer (a hung connection, a stuck proxy).
    struct HungPuts;

    #[async_trait::async_trait]
    impl floe_storage::hooked::Hooks for HungPuts {
        async fn before(&self, op: floe_storage::hooked::Op) -> object_store::Result<()> {
            if op == floe_storage::hooked::Op::Put {
                std::future::pending::<()>().await;
            }
            Ok(())
        }
    }

    /// Uploads commit in order, so one PUT that never returns would hold
    /// every later produce: it fails at its deadline, its producers get a
    /// retriable error, and its key goes to the metastore as a possible orphan.
    #[tokio::test(start_paused = true)]
    async fn a_put_that_never_returns_fails_at_its_deadline() {
        let memory: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let store: Arc<dyn ObjectStore> = Arc::new(floe_storage::hooked::HookedStore::new(
            memory.clone(),
            HungPuts,
        ));
        let meta = Arc::new(Prompt::default());
        let (_batcher, committed) = one_batch(store, memory, meta.clone()).await;
        let started = Instant::now();
        let answer = tokio::time::timeout(PUT_DEADLINE * 2, committed.offset())
            .await
            .expect("the producer is answered");
        assert!(
            matches!(&answer, Err(AppendError::Storage(why)) if why.contains("no answer")),
            "{answer:?}"
        );
        assert!(started.elapsed() >= PUT_DEADLINE);
        let garbage = meta.0.lock().unwrap().garbage().to_vec();
        assert_eq!(
            garbage.len(),
            1,
            "the key is handed to GC as a possible orphan"
        );
    }

    /// An agent that started while the metastore was unreachable has never
    /// read its time; its uploads must not wait for it forever (the produce
    /// would never be answered and every later request on the connection
    /// would queue behind it).
    #[tokio::test(start_paused = true)]
    async fn producers_hear_back_when_the_metastore_never_tells_its_time() {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let (_batcher, committed) = one_batch(store.clone(), store, Arc::new(Silent)).await;
        let answer = tokio::time::timeout(CLOCK_WAIT * 2, committed.offset())
            .await
            .expect("the producer is answered within the clock wait");
        assert!(
            matches!(answer, Err(AppendError::Storage(_))),
            "a retriable error, got {answer:?}"
        );
    }
}
