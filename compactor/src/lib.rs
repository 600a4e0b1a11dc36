//! Compaction and garbage collection.
//!
//! Ingest files hold many partitions in small pieces. [`merge`] reads the
//! oldest of them, each once, and writes every partition's run from them into
//! one merged file, swapped in for all of them at once; [`compact_partition`]
//! then rewrites a partition's chunks from successive merged files into one
//! *segment* (same file format, one chunk, base offsets set to the real
//! ones), so its extents do not grow with every job. Each swap is a
//! compare-and-set in the metastore, so a reader sees either the old extents
//! or the new ones, never a gap. [`Gc`] deletes objects nothing refers to any
//! more, after a grace period for reads still in flight. [`retention`] moves
//! log starts past expired data; [`sweep`] finds objects the metastore never
//! heard of.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use bytes::BytesMut;
use floe_metastore::merge_policy::Chunk;
use floe_metastore::ops::LookSince;
use floe_metastore::{
    Backlog, ExtentPiece, ExtentRef, MetaError, Metastore, ReadPlan, Refusal, ReplaceExtents,
    TopicId, TopicInfo, TopicPartition, now_ms,
};
use floe_protocol::batch::{RecordBatch, patch_base_offsets};
use floe_storage::ids::Ids;
use floe_storage::ingest::IngestWriter;
use floe_storage::{ObjectPath, ObjectStore, keys};
use object_store::ObjectStoreExt;

#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    #[error("extent at offset {offset} of `{key}` does not hold valid batches: {reason}")]
    Corrupt {
        key: String,
        offset: i64,
        reason: String,
    },
}

/// When compaction runs, and what it writes.
#[derive(Debug, Clone, Copy)]
pub struct CompactionPolicy {
    /// Ingest files waiting before a job starts; new extents of a
    /// key-compacted partition before it is cleaned.
    pub min_extents: usize,
    /// A segment stops growing past this size; a partition's chunks of merged
    /// files wait to make half of it before they are merged into one.
    pub max_segment_bytes: u64,
    /// A partition's chunk of a merged file is described to the metastore as
    /// extents of about this size, so a fetch from its middle reads little
    /// more than it returns. (A segment is one extent, however large: its
    /// offset index takes a fetch to the middle.)
    pub extent_bytes: u64,
    /// Bytes of batches between two entries of a segment's offset index: at
    /// most what a fetch landing in a segment reads before its offset.
    pub index_interval: u64,
    /// The most bytes of ingest files one job reads, and holds, at once.
    pub job_bytes: u64,
    /// However few files wait, a job starts once the oldest append in them
    /// is this old, so no file waits for ever; a partition's small chunks
    /// this old are merged however few.
    pub max_age: Duration,
    /// A partition's small chunks in a row merged however small they are,
    /// so its extents stay few.
    pub max_chunks: usize,
    /// Most keys key compaction maps in one pass (Kafka's
    /// `log.cleaner.dedupe.buffer.size`): a partition with more keys written
    /// since it was last cleaned is cleaned in several passes. (Also the
    /// most keys of transactional records it keeps track of.)
    pub max_cleaner_keys: usize,
    /// Stored bytes key compaction reads, rewrites and swaps in at once
    /// (one extent at least): what it holds in memory is about three times
    /// this, beside the map.
    pub keyed_group_bytes: u64,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        CompactionPolicy {
            min_extents: 8,
            max_segment_bytes: 256 * 1024 * 1024,
            extent_bytes: 1024 * 1024,
            index_interval: floe_storage::segment_index::DEFAULT_INTERVAL,
            job_bytes: 128 * 1024 * 1024,
            max_age: Duration::from_secs(300),
            max_chunks: 64,
            // 24-byte entries in a table of 4 Mi slots: about 100 MiB, as
            // Kafka's default dedupe buffer of 128 MiB.
            max_cleaner_keys: 2_000_000,
            keyed_group_bytes: 128 * 1024 * 1024,
        }
    }
}

/// What one compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compacted {
    pub segment_key: String,
    pub extents: usize,
    pub bytes: u64,
    pub base_offset: i64,
    pub last_offset: i64,
}

/// Picks the first run of a partition's small chunks of merged files worth
/// merging into a segment, by the rule the metastore lists partitions by
/// ([`CompactionWork::merge_run`]).
///
/// [`CompactionWork::merge_run`]: floe_metastore::ops::CompactionWork::merge_run
pub fn plan(
    extents: &[ExtentRef],
    policy: &CompactionPolicy,
    now_ms: i64,
    max_span_ms: i64,
) -> Option<Vec<ExtentRef>> {
    plan_run(extents, policy, now_ms, max_span_ms).map(|(run, _)| run)
}

/// [`plan`]'s run, with when its oldest data was appended (what its
/// segment's key says).
fn plan_run(
    extents: &[ExtentRef],
    policy: &CompactionPolicy,
    now_ms: i64,
    max_span_ms: i64,
) -> Option<(Vec<ExtentRef>, i64)> {
    let by_object: Vec<&[ExtentRef]> = extents
        .chunk_by(|a, b| a.object_key == b.object_key)
        .collect();
    let work = merge::work(policy, 0);
    let chunks: Vec<Chunk> = by_object
        .iter()
        .map(|extents| {
            let sizes = extents.iter().map(|e| (e.length, e.appended_ms));
            Chunk::of(&work, &extents[0].object_key, sizes)
        })
        .collect();
    let run = work.merge_run(&chunks, now_ms, max_span_ms)?;
    let first_appended_ms = chunks[run.clone()]
        .iter()
        .map(|c| c.oldest_appended_ms)
        .min()
        .unwrap_or(0)
        .max(0);
    Some((by_object[run].concat(), first_appended_ms))
}

/// Cuts a segment's batches (laid out from `position` on) into extents of
/// about `extent_bytes`, at batch boundaries. Each piece keeps the latest
/// append time of the run it replaces (conservative for retention).
pub(crate) fn pieces(
    batches: &[RecordBatch],
    mut position: u64,
    extent_bytes: u64,
    appended_ms: i64,
) -> Vec<ExtentPiece> {
    let mut pieces: Vec<ExtentPiece> = Vec::new();
    for batch in batches {
        let last_offset = batch.last_offset();
        match pieces.last_mut().filter(|p| p.length < extent_bytes) {
            Some(piece) => {
                piece.last_offset = last_offset;
                piece.max_timestamp = piece.max_timestamp.max(batch.max_timestamp());
                piece.length += batch.len() as u64;
            }
            None => pieces.push(ExtentPiece {
                base_offset: batch.base_offset(),
                last_offset,
                max_timestamp: batch.max_timestamp(),
                position,
                length: batch.len() as u64,
                appended_ms,
            }),
        }
        position += batch.len() as u64;
    }
    pieces
}

/// Merges a run of a partition's chunks of merged files into a segment, if
/// the policy finds one. `Ok(None)`: nothing to do, another compactor holds
/// the job, or the extents changed under us. The lease is taken before the
/// extents are read.
#[allow(clippy::too_many_arguments)]
pub async fn compact_partition(
    store: &Arc<dyn ObjectStore>,
    meta: &Arc<dyn Metastore>,
    topic_id: TopicId,
    partition: i32,
    policy: &CompactionPolicy,
    worker: Option<&Worker>,
    (now_ms, max_span_ms): (i64, i64),
    ids: &dyn Ids,
) -> Result<Option<Compacted>, CompactError> {
    let job = format!("compact/{topic_id}/{partition}");
    leased(worker, meta, job, async {
        let all = whole_partition(meta, topic_id, partition).await?;
        let Some(run) = plan_run(&all.extents, policy, now_ms, max_span_ms) else {
            return Ok(None);
        };
        compact_run(store, meta, (topic_id, partition), policy, run, ids).await
    })
    .await
}

/// Every extent of a partition, from its log start to its high watermark.
pub(crate) async fn whole_partition(
    meta: &Arc<dyn Metastore>,
    topic_id: TopicId,
    partition: i32,
) -> Result<ReadPlan, MetaError> {
    let offsets = meta.offsets(topic_id, partition).await?;
    meta.read_plan(topic_id, partition, offsets.log_start_offset, u64::MAX)
        .await
}

/// Runs `work` holding the lease on `job` when several workers share the
/// jobs (a lone compactor needs none); `Ok(None)` while another holds it.
pub(crate) async fn leased<T>(
    worker: Option<&Worker>,
    meta: &Arc<dyn Metastore>,
    job: String,
    work: impl std::future::Future<Output = Result<Option<T>, CompactError>>,
) -> Result<Option<T>, CompactError> {
    let Some(worker) = worker else {
        return work.await;
    };
    if !worker.lease(meta, &job).await? {
        tracing::debug!(%job, "another compactor holds this job");
        return Ok(None);
    }
    let done = work.await;
    if let Err(e) = meta.release_lease(job, worker.holder.clone()).await {
        tracing::debug!(error = %e, "releasing a compaction lease failed; it expires");
    }
    done
}

/// Rewrites `run` (contiguous extents of one partition) into one segment and
/// swaps it in.
#[allow(clippy::too_many_arguments)]
async fn compact_run(
    store: &Arc<dyn ObjectStore>,
    meta: &Arc<dyn Metastore>,
    (topic_id, partition): (TopicId, i32),
    policy: &CompactionPolicy,
    (run, first_appended_ms): (Vec<ExtentRef>, i64),
    ids: &dyn Ids,
) -> Result<Option<Compacted>, CompactError> {
    let batches = read_run(store, &run).await?;
    let key = keys::new_segment_key(
        topic_id,
        partition,
        run[0].base_offset,
        first_appended_ms,
        ids.next_id(),
    );
    swap_in(
        store,
        meta,
        (topic_id, partition),
        policy,
        run,
        &batches,
        key,
    )
    .await
}

/// The batches of `run`, read with their real offsets set and each checked:
/// through a cache in front of the store if there is one, and again from
/// the store itself if what the cache held does not check.
pub(crate) async fn read_run(
    store: &Arc<dyn ObjectStore>,
    run: &[ExtentRef],
) -> Result<Vec<RecordBatch>, CompactError> {
    match read_run_from(store, run, Reads::CacheFirst).await {
        Err(CompactError::Corrupt { .. }) => read_run_from(store, run, Reads::Store).await,
        read => read,
    }
}

/// Where compaction reads an object's bytes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reads {
    /// Through a cache in front of the store, when it holds them (the
    /// request names the object's size: [`floe_storage::sized`]).
    CacheFirst,
    /// From the store.
    Store,
}

/// Bytes `range` of `key`, an object of `size` bytes, read as `reads` says.
pub(crate) async fn read_range(
    store: &Arc<dyn ObjectStore>,
    (key, size): (&str, u64),
    range: std::ops::Range<u64>,
    reads: Reads,
) -> Result<bytes::Bytes, object_store::Error> {
    match reads {
        Reads::CacheFirst => floe_storage::sized::get_range(store.as_ref(), key, size, range).await,
        Reads::Store => store.get_range(&ObjectPath::from(key), range).await,
    }
}

pub(crate) async fn read_run_from(
    store: &Arc<dyn ObjectStore>,
    run: &[ExtentRef],
    reads: Reads,
) -> Result<Vec<RecordBatch>, CompactError> {
    let mut data = BytesMut::with_capacity(run.iter().map(|e| e.length as usize).sum());
    // Extents lying end to end in one object are read with one GET.
    let adjacent = |a: &ExtentRef, b: &ExtentRef| {
        a.object_key == b.object_key && a.position + a.length == b.position
    };
    for extents in run.chunk_by(adjacent) {
        let (first, last) = (&extents[0], &extents[extents.len() - 1]);
        let object = (first.object_key.as_str(), first.object_size);
        let span = first.position..last.position + last.length;
        let bytes = read_range(store, object, span, reads).await?;
        for extent in extents {
            append_extent(&mut data, &bytes, first.position, extent)?;
        }
    }
    parse_run(data, run)
}

/// Appends `extent`'s batches, cut from `read` (its object's bytes from
/// position `origin` on), to `data` with their real base offsets set; they
/// must be whole batches.
pub(crate) fn append_extent(
    data: &mut BytesMut,
    read: &[u8],
    origin: u64,
    extent: &ExtentRef,
) -> Result<(), CompactError> {
    let corrupt = |reason: &str| CompactError::Corrupt {
        key: extent.object_key.clone(),
        offset: extent.base_offset,
        reason: reason.into(),
    };
    let from = extent
        .position
        .checked_sub(origin)
        .ok_or_else(|| corrupt("the extent starts before what was read"))? as usize;
    let piece = read
        .get(from..from + extent.length as usize)
        .ok_or_else(|| corrupt("the object is shorter than the extent"))?;
    let start = data.len();
    data.extend_from_slice(piece);
    if patch_base_offsets(&mut data[start..], extent.base_offset) != piece.len() {
        return Err(corrupt("extent does not end on a batch boundary"));
    }
    Ok(())
}

/// A duration in whole milliseconds, as the metastore's times are kept.
pub(crate) fn millis(d: Duration) -> i64 {
    d.as_millis().min(i64::MAX as u128) as i64
}

/// The batches read for `run` (offsets patched), each checked, and checked
/// to hold exactly the run's offsets.
pub(crate) fn parse_run(
    data: BytesMut,
    run: &[ExtentRef],
) -> Result<Vec<RecordBatch>, CompactError> {
    let batches =
        RecordBatch::parse_all_stored(&data.freeze()).map_err(|e| CompactError::Corrupt {
            key: run[0].object_key.clone(),
            offset: run[0].base_offset,
            reason: e.to_string(),
        })?;
    check_tiling(&batches, run)?;
    Ok(batches)
}

/// Safety rule 1's last guard: the batches read for `run` hold exactly its
/// offsets, end to end, so what is swapped in for it serves every offset it
/// served (the metastore checks only that the pieces tile the run).
fn check_tiling(batches: &[RecordBatch], run: &[ExtentRef]) -> Result<(), CompactError> {
    let mut next = run[0].base_offset;
    for batch in batches {
        if batch.base_offset() != next {
            return Err(CompactError::Corrupt {
                key: run[0].object_key.clone(),
                offset: next,
                reason: format!(
                    "a batch starts at {} where {next} was next",
                    batch.base_offset()
                ),
            });
        }
        next = batch.last_offset() + 1;
    }
    let last = run[run.len() - 1].last_offset;
    if next != last + 1 {
        return Err(CompactError::Corrupt {
            key: run[run.len() - 1].object_key.clone(),
            offset: last,
            reason: format!("the batches end at {} but the run at {last}", next - 1),
        });
    }
    Ok(())
}

/// Uploads `batches` (tiling `run`'s offsets) as the segment `key` and swaps
/// it in for `run` with a compare-and-set. `Ok(None)` when the swap lost:
/// the partition changed meanwhile (new compaction, trim, deleted topic),
/// and the segment is deleted again.
pub(crate) async fn swap_in(
    store: &Arc<dyn ObjectStore>,
    meta: &Arc<dyn Metastore>,
    (topic_id, partition): (TopicId, i32),
    policy: &CompactionPolicy,
    run: Vec<ExtentRef>,
    batches: &[RecordBatch],
    key: ObjectPath,
) -> Result<Option<Compacted>, CompactError> {
    // The metastore's time before the upload: the swap is refused if it
    // arrives after the commit window (this compactor paused for long).
    let not_before_ms = meta.clock().await?;
    let raw: Vec<_> = batches.iter().map(|b| b.bytes().clone()).collect();
    let mut writer = IngestWriter::segment(policy.index_interval);
    let chunk = writer.add_chunk(topic_id, partition, &raw);
    let file = writer.finish();
    // Readers land through the index and check only where they land: in
    // tests, every entry is checked against the batches before upload.
    debug_assert_eq!(
        floe_storage::ingest::IngestFile::parse(file.clone()).map(|f| f.check_offset_index()),
        Ok(Ok(()))
    );
    store.put(&key, file.clone().into()).await?;

    let base_offset = run[0].base_offset;
    let last_offset = run[run.len() - 1].last_offset;
    let swap = ReplaceExtents {
        topic_id,
        partition,
        object_key: key.to_string(),
        object_size: file.len() as u64,
        // One extent: its offset index takes readers inside it.
        pieces: pieces(
            batches,
            chunk.position,
            u64::MAX,
            run.iter().map(|e| e.appended_ms).max().unwrap_or(0),
        ),
        replaced: run,
        not_before_ms,
    };
    let extents = swap.replaced.len();
    match meta.replace_extents(swap).await {
        Ok(()) => Ok(Some(Compacted {
            segment_key: key.to_string(),
            extents,
            bytes: chunk.length as u64,
            base_offset,
            last_offset,
        })),
        Err(
            MetaError::Refused(Refusal::ExtentsChanged)
            | MetaError::Refused(Refusal::UnknownTopicOrPartition)
            | MetaError::Refused(Refusal::CommitTooLate(_)),
        ) => {
            // Someone else compacted, the topic went away, or this swap came
            // too late: our segment is unused.
            tracing::info!(segment = %key, "compaction lost its compare-and-set; deleting its segment");
            if let Err(e) = store.delete(&key).await {
                tracing::warn!(segment = %key, error = %e, "could not delete unused segment");
            }
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// One of several compactors (agents): it takes a partition's job only with
/// its lease in the metastore, so each run is compacted once, not uploaded by
/// every agent with all but one losing the compare-and-set.
pub struct Worker {
    /// Unique to this process.
    pub holder: String,
    /// How long a lease lasts if its holder dies mid-job.
    pub lease: Duration,
}

impl Worker {
    pub(crate) async fn lease(
        &self,
        meta: &Arc<dyn Metastore>,
        job: &str,
    ) -> Result<bool, MetaError> {
        let ttl_ms = millis(self.lease);
        meta.acquire_lease(job.to_string(), self.holder.clone(), now_ms(), ttl_ms)
            .await
    }
}

/// The lease on jobs over ingest files: one compactor at a time reads them,
/// so each file is read once.
const INGEST_JOB: &str = "compact/ingest";
/// Jobs over ingest files in one pass, so that the pass's other work (key
/// compaction, retention, GC) is not starved under a long backlog.
const MAX_JOBS_PER_PASS: usize = 64;
/// Merges of one partition's chunks in one pass at most.
const RUNS_PER_PARTITION: usize = 4;

/// What one pass did.
#[derive(Debug, Default)]
pub struct Pass {
    /// Jobs over ingest files.
    pub merged: Vec<merge::Merged>,
    /// Segments written (merges of a partition's chunks, key compaction).
    pub compacted: Vec<Compacted>,
}

/// One pass of compaction: jobs over the oldest ingest files while enough
/// wait (or they are old), holding one lease; then, each under its own
/// lease, the partitions the metastore names as worth merging further,
/// starting at the `start`th (so that workers starting together do not queue
/// for the same leases); then key compaction of compacted topics. A job or
/// partition that fails is logged and counted, and the pass goes on.
/// `now_ms` is the metastore's time (it decides when tombstones expire and
/// when ingest files are old). `looks` keeps compacted partitions' looks
/// from one pass to the next (the same for every pass of one compactor).
#[allow(clippy::too_many_arguments)]
pub async fn compact_all(
    store: &Arc<dyn ObjectStore>,
    meta: &Arc<dyn Metastore>,
    policy: &CompactionPolicy,
    worker: Option<&Worker>,
    start: usize,
    counters: &Counters,
    now_ms: i64,
    ids: &dyn Ids,
    looks: &KeptLooks,
) -> Result<Pass, CompactError> {
    let mut pass = Pass::default();
    let topics = meta.topics().await?;
    // A compacted topic's `segment.ms` bounds how long its records may wait
    // in ingest files before key compaction may see them (Kafka rolls the
    // active segment, which its cleaner never touches, after that long).
    let rolled_within = topics
        .iter()
        .filter(|t| t.config().compact)
        .map(|t| Duration::from_millis(t.config().segment_ms.max(0) as u64))
        .min();
    let shortened;
    let policy = match rolled_within {
        Some(within) if within < policy.max_age => {
            shortened = CompactionPolicy {
                max_age: within,
                ..*policy
            };
            &shortened
        }
        _ => policy,
    };
    let merging = match worker {
        Some(worker) => worker.lease(meta, INGEST_JOB).await?,
        None => true,
    };
    let max_files = if merging { merge::MAX_JOB_FILES } else { 0 };
    let mut backlog = meta.compaction_work(merge::work(policy, max_files)).await?;
    let mut queue: std::collections::VecDeque<Backlog> = std::collections::VecDeque::new();
    if merging && merge::due(&backlog, policy, now_ms) {
        queue.extend(merge::jobs(&backlog, policy));
    }
    // Whether a job since the last work list moved anything: if none did,
    // asking again would find the same files.
    let mut progressed = false;
    while pass.merged.len() < MAX_JOBS_PER_PASS {
        let Some(job) = queue.pop_front() else {
            if !progressed {
                break;
            }
            progressed = false;
            match meta.compaction_work(merge::work(policy, max_files)).await {
                Ok(next) => backlog = next,
                Err(e) => {
                    tracing::warn!(error = %e, "compaction could not go on with the ingest files");
                    break;
                }
            }
            if merge::due(&backlog, policy, now_ms) {
                queue.extend(merge::jobs(&backlog, policy));
            }
            continue;
        };
        // Later jobs of a list run only while enough files still wait (or
        // theirs are old), as the first did.
        if !merge::due(&job, policy, now_ms) {
            continue;
        }
        match merge::merge_files(store, meta, policy, &job, counters, ids).await {
            Ok(merged) => {
                progressed |= merged.swapped > 0;
                pass.merged.push(merged);
            }
            Err(e) => {
                counters.compaction_failures.inc();
                tracing::warn!(error = %e, "a compaction job over ingest files failed");
                break;
            }
        }
        // Renewed for the next job (or learnt lost to a compactor that
        // thought this one dead).
        if let Some(worker) = worker {
            match worker.lease(meta, INGEST_JOB).await {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "compaction could not renew its lease");
                    break;
                }
            }
        }
    }
    if merging
        && let Some(worker) = worker
        && let Err(e) = meta
            .release_lease(INGEST_JOB.into(), worker.holder.clone())
            .await
    {
        tracing::debug!(error = %e, "releasing the ingest job's lease failed; it expires");
    }

    let mut partitions = backlog.merge;
    if !partitions.is_empty() {
        let at = start % partitions.len();
        partitions.rotate_left(at);
    }
    for tp in partitions {
        // A segment spans at most the topic's `segment.ms` of appends.
        let max_span_ms = topics
            .iter()
            .find(|t| t.id == tp.topic_id)
            .map_or(i64::MAX, |t| t.config().segment_ms);
        // A busy partition may have new merged chunks every pass: its
        // segments' own merges get their turn after them, in the same pass.
        for _ in 0..RUNS_PER_PARTITION {
            let done = compact_partition(
                store,
                meta,
                tp.topic_id,
                tp.partition,
                policy,
                worker,
                (now_ms, max_span_ms),
                ids,
            )
            .await;
            let more = matches!(done, Ok(Some(_)));
            note(&mut pass, done, counters, &tp);
            if !more {
                break;
            }
        }
    }

    // Compacted topics (`cleanup.policy=compact`) get key compaction.
    let mut keyed: Vec<(&TopicInfo, i32)> = topics
        .iter()
        .filter(|t| t.config().compact)
        .flat_map(|t| (0..t.partitions).map(move |p| (t, p)))
        .collect();
    if !keyed.is_empty() {
        let at = start % keyed.len();
        keyed.rotate_left(at);
    }
    let compacted: std::collections::HashSet<TopicPartition> = keyed
        .iter()
        .map(|(t, p)| TopicPartition::new(t.id, *p))
        .collect();
    looks.retain(|tp| compacted.contains(tp));
    for chunk in keyed.chunks(keyed::LOOKS_PER_REQUEST) {
        let asked = chunk
            .iter()
            .map(|(t, p)| {
                let tp = TopicPartition::new(t.id, *p);
                (tp, looks.mark(&tp))
            })
            .collect();
        let answers = match meta.partition_looks_since(asked).await {
            Ok(answers) => answers,
            Err(e) => {
                counters.compaction_failures.inc();
                tracing::warn!(error = %e, "looking at compacted partitions failed; they wait for the next pass");
                continue;
            }
        };
        for (&(topic, partition), answer) in chunk.iter().zip(answers) {
            let tp = TopicPartition::new(topic.id, partition);
            let look = match answer {
                Ok(LookSince::Changed { look, mark }) => {
                    counters.looks_sent.inc();
                    looks.keep(tp, mark, &look);
                    (look.extents, look.last_stable_offset)
                }
                Ok(LookSince::Unchanged) => match looks.look(&tp) {
                    Some(look) => {
                        counters.looks_kept.inc();
                        look
                    }
                    // Not kept after all: asked whole next pass.
                    None => continue,
                },
                Err(e) => {
                    looks.forget(&tp);
                    note(&mut pass, Err(MetaError::Refused(e).into()), counters, &tp);
                    continue;
                }
            };
            let done = keyed::compact_keys(
                store, meta, topic, partition, look, policy, worker, now_ms, counters, ids,
            )
            .await;
            note(&mut pass, done, counters, &tp);
        }
    }
    Ok(pass)
}

/// Records one partition's outcome in the pass.
fn note(
    pass: &mut Pass,
    done: Result<Option<Compacted>, CompactError>,
    counters: &Counters,
    tp: &TopicPartition,
) {
    match done {
        Ok(Some(c)) => pass.compacted.push(c),
        Ok(None) => {}
        // A deleted topic is not an error of the whole pass.
        Err(CompactError::Meta(MetaError::Refused(Refusal::UnknownTopicOrPartition))) => {}
        Err(e) => {
            counters.compaction_failures.inc();
            tracing::warn!(topic = %tp.topic_id, partition = tp.partition, error = %e,
                "compacting a partition failed; going on with the others");
        }
    }
}

/// Deletes garbage objects once they have been garbage for `grace`, so reads
/// that planned with the old extents can finish.
pub struct Gc {
    grace: Duration,
    first_seen: HashMap<String, Instant>,
}

impl Gc {
    pub fn new(grace: Duration) -> Self {
        Gc {
            grace,
            first_seen: HashMap::new(),
        }
    }

    /// One pass; returns the keys deleted.
    pub async fn run_once(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        meta: &Arc<dyn Metastore>,
    ) -> Result<Vec<String>, CompactError> {
        let now = Instant::now();
        let garbage = meta.garbage().await?;
        {
            let listed: std::collections::HashSet<&String> = garbage.iter().collect();
            self.first_seen.retain(|k, _| listed.contains(k));
        }
        let mut due = Vec::new();
        for key in garbage {
            let seen = *self.first_seen.entry(key.clone()).or_insert(now);
            if now.duration_since(seen) >= self.grace {
                due.push(key);
            }
        }
        let deleted = delete_all(store, due).await;
        if !deleted.is_empty() {
            meta.forget_garbage(deleted.clone()).await?;
            for key in &deleted {
                self.first_seen.remove(key);
            }
        }
        Ok(deleted)
    }
}

/// Deletes `keys` in bulk (S3's DeleteObjects takes 1,000 keys a request;
/// other stores delete several at once): the keys deleted, or found gone.
async fn delete_all(store: &Arc<dyn ObjectStore>, keys: Vec<String>) -> Vec<String> {
    use futures::StreamExt;
    let paths: Vec<_> = keys
        .iter()
        .map(|k| Ok(ObjectPath::from(k.as_str())))
        .collect();
    let mut results = store.delete_stream(futures::stream::iter(paths).boxed());
    let mut deleted = Vec::with_capacity(keys.len());
    while let Some(result) = results.next().await {
        match result {
            Ok(path) => deleted.push(path.to_string()),
            // Already gone. Some stores name it by their own path (a file's),
            // which ends with the key.
            Err(object_store::Error::NotFound { path, .. }) => {
                if let Some(key) = keys.iter().find(|k| path.ends_with(k.as_str())) {
                    deleted.push(key.clone());
                }
            }
            Err(e) => tracing::warn!(error = %e, "gc: a delete failed; will retry"),
        }
    }
    deleted
}

mod counters;
pub mod kept_looks;
pub mod keyed;
pub use kept_looks::KeptLooks;
pub mod merge;
pub mod retention;

pub use counters::Counters;
pub mod sweep;

#[cfg(test)]
mod tests;
