//! Compaction of ingest files: each file is read once, whole.
//!
//! An ingest file holds a small piece of every partition an agent wrote to in
//! one flush. Compacting partition by partition read every file once per
//! partition in it (a GET per piece: at 1 GiB/s over a thousand partitions,
//! more than a million dollars a year of GETs). Here a job takes the oldest
//! ingest files still referenced, reads each with one ranged GET, and writes
//! one *merged* file holding every partition's run from them as its own
//! chunk (contiguous offsets, real base offsets), swapped in for all
//! partitions at once with [`ReplaceRuns`]. Every extent in the files is in
//! some run, so a job frees every file it read, however little of a
//! partition a file held: no file stays pinned by a quiet partition.
//!
//! A partition's small chunks in successive merged files are merged further,
//! per partition, into segments ([`crate::compact_partition`]) once they add
//! up to half a segment, are many, or are old, so its extent count
//! does not grow with each job and segment writes stay proportional to bytes.
//!
//! Invariant (safety rule 1): the merged file holds exactly the batches of
//! the runs it replaces, at the same offsets, and a run is swapped in only if
//! its partition still holds exactly those extents (the metastore's
//! compare-and-set); a run refused is left where it was, and a file none of
//! whose runs went in is handed to GC by the metastore, never deleted here.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use floe_metastore::ops::CompactionWork;
use floe_metastore::{Backlog, BacklogFile, ExtentRef, ExtentRun, Metastore, ReplaceRuns, RunSwap};
use floe_protocol::batch::RecordBatch;
use floe_storage::ids::Ids;
use floe_storage::ingest::IngestWriter;
use floe_storage::{ObjectStore, keys};
use futures::StreamExt;
use object_store::ObjectStoreExt;

use crate::{
    CompactError, CompactionPolicy, Counters, Reads, append_extent, millis, parse_run, pieces,
    read_range, read_run_from,
};

/// Ingest files read at once.
const CONCURRENT_GETS: usize = 8;
/// Most ingest files one job reads (besides `job_bytes`).
pub(crate) const MAX_JOB_FILES: u32 = 1_000;
/// Most extents one job moves: bounds the work list and the swap's entry.
const MAX_JOB_EXTENTS: u64 = 100_000;

/// What one job did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    pub key: String,
    /// Ingest files read, each with one GET.
    pub files: usize,
    /// Runs written, and how many of them the metastore swapped in.
    pub runs: usize,
    pub swapped: usize,
    pub bytes: u64,
}

/// Jobs' worth of files one work list asks for, so that a long backlog costs
/// the metastore one scan of its extents per few jobs, not per job.
const JOBS_PER_LIST: u64 = 8;

/// The request for this policy's work list; `max_files` 0 asks only for the
/// partitions worth merging further.
pub(crate) fn work(policy: &CompactionPolicy, max_files: u32) -> CompactionWork {
    CompactionWork {
        ingest_prefix: keys::INGEST_PREFIX.into(),
        max_files,
        max_bytes: policy.job_bytes.saturating_mul(JOBS_PER_LIST),
        max_extents: MAX_JOB_EXTENTS * JOBS_PER_LIST,
        merged_prefix: keys::MERGED_PREFIX.into(),
        segment_bytes: policy.max_segment_bytes,
        merge_max_chunks: policy.max_chunks.min(u32::MAX as usize) as u32,
        merge_max_age_ms: millis(policy.max_age),
    }
}

/// Whether `backlog` is worth a job now: enough files wait, or the oldest
/// append in them is older than `policy.max_age` on the metastore's clock.
pub(crate) fn due(backlog: &Backlog, policy: &CompactionPolicy, now_ms: i64) -> bool {
    let max_age_ms = millis(policy.max_age);
    let oldest = backlog.files.iter().map(|f| f.oldest_appended_ms).min();
    !backlog.files.is_empty()
        && (backlog.ingest_files >= policy.min_extents.max(1) as u64
            || oldest.is_some_and(|ms| now_ms.saturating_sub(ms) >= max_age_ms))
}

/// Cuts a work list into jobs, oldest files first: each of at most
/// `job_bytes` of files and [`MAX_JOB_EXTENTS`] extents (its first file
/// whatever its size), with the list's runs cut to its files (consecutive
/// extents still: a partition's extents in older files come first).
pub(crate) fn jobs(backlog: &Backlog, policy: &CompactionPolicy) -> Vec<Backlog> {
    let mut extents_in: HashMap<&str, u64> = HashMap::new();
    for e in backlog.runs.iter().flat_map(|r| &r.extents) {
        *extents_in.entry(e.object_key.as_str()).or_default() += 1;
    }
    let mut groups: Vec<Vec<&BacklogFile>> = Vec::new();
    let (mut bytes, mut extents) = (0u64, 0u64);
    for file in &backlog.files {
        let count = extents_in.get(file.key.as_str()).copied().unwrap_or(0);
        let fits = groups.last().is_some_and(|g| !g.is_empty())
            && bytes + file.size <= policy.job_bytes
            && extents + count <= MAX_JOB_EXTENTS;
        if !fits {
            groups.push(Vec::new());
            (bytes, extents) = (0, 0);
        }
        groups.last_mut().expect("pushed").push(file);
        bytes += file.size;
        extents += count;
    }
    let mut before = 0u64;
    groups
        .into_iter()
        .map(|files| {
            // What still waits when this job's turn comes (see `due`).
            let waiting = backlog.ingest_files.saturating_sub(before);
            before += files.len() as u64;
            let keys: std::collections::HashSet<&str> =
                files.iter().map(|f| f.key.as_str()).collect();
            let runs = backlog
                .runs
                .iter()
                .flat_map(|run| {
                    run.extents
                        .split(|e| !keys.contains(e.object_key.as_str()))
                        .filter(|extents| !extents.is_empty())
                        .map(|extents| ExtentRun {
                            partition: run.partition,
                            extents: extents.to_vec(),
                        })
                })
                .collect();
            Backlog {
                files: files.into_iter().cloned().collect(),
                runs,
                ingest_files: waiting,
                merge: Vec::new(),
            }
        })
        .collect()
}

/// Runs one job over `backlog`'s files (the caller holds the job's lease).
/// A file that cannot be read, or a run that does not hold valid batches,
/// is left where it is (counted in `counters`), and the job goes on with
/// the others; a job with nothing left to move writes nothing.
pub async fn merge_files(
    store: &Arc<dyn ObjectStore>,
    meta: &Arc<dyn Metastore>,
    policy: &CompactionPolicy,
    backlog: &Backlog,
    counters: &Counters,
    ids: &dyn Ids,
) -> Result<Merged, CompactError> {
    // The metastore's time before the upload: the swap is refused if it
    // arrives after the commit window.
    let not_before_ms = meta.clock().await?;
    let files = read_files(store, &backlog.runs, counters).await;
    let mut writer = IngestWriter::new();
    let mut swaps = Vec::with_capacity(backlog.runs.len());
    // A run's extents in files that could not be read stay; what lies
    // between them moves (consecutive extents, so still runs).
    let readable = backlog.runs.iter().flat_map(|run| {
        run.extents
            .split(|e| !files.contains_key(&e.object_key))
            .filter(|extents| !extents.is_empty())
            .map(move |extents| (run.partition, extents))
    });
    let readable: Vec<_> = readable.collect();
    for (partition, extents) in readable {
        // What a cache held may not check: the store's bytes may.
        let batches = match run_batches(&files, extents) {
            Err(CompactError::Corrupt { .. }) => read_run_from(store, extents, Reads::Store).await,
            read => read,
        };
        let batches = match batches {
            Ok(batches) => batches,
            Err(e) => {
                counters.compaction_failures.inc();
                tracing::warn!(?partition, error = %e,
                    "a run of an ingest file cannot be compacted; left where it is");
                continue;
            }
        };
        let raw: Vec<Bytes> = batches.iter().map(|b| b.bytes().clone()).collect();
        let chunk = writer.add_chunk(partition.topic_id, partition.partition, &raw);
        let appended_ms = extents.iter().map(|e| e.appended_ms).max().unwrap_or(0);
        swaps.push(RunSwap {
            partition,
            replaced: extents.to_vec(),
            pieces: pieces(&batches, chunk.position, policy.extent_bytes, appended_ms),
        });
    }
    drop(files);
    let mut merged = Merged {
        key: String::new(),
        files: backlog.files.len(),
        runs: swaps.len(),
        swapped: 0,
        bytes: writer.data_len(),
    };
    if swaps.is_empty() {
        return Ok(merged);
    }
    let file = writer.finish();
    let key = keys::new_merged_key(ids.next_id());
    store.put(&key, file.clone().into()).await?;
    let answers = meta
        .replace_runs(ReplaceRuns {
            object_key: key.to_string(),
            object_size: file.len() as u64,
            runs: swaps,
            not_before_ms,
        })
        .await?;
    merged.key = key.to_string();
    merged.swapped = answers.iter().filter(|a| a.is_ok()).count();
    if merged.swapped < merged.runs {
        // Retention, DeleteRecords or a deleted topic moved them meanwhile;
        // they go in the next job.
        tracing::info!(merged = %key, runs = merged.runs, swapped = merged.swapped,
            "some runs changed while being compacted");
    }
    Ok(merged)
}

/// Each file the runs point into, read once: the span from its first
/// extent's start to its last one's end. A file that cannot be read is
/// left out (its runs then fail alone).
async fn read_files(
    store: &Arc<dyn ObjectStore>,
    runs: &[ExtentRun],
    counters: &Counters,
) -> HashMap<String, (u64, Bytes)> {
    // Ordered: the reads start in one order every run, so a simulation
    // that injects faults by the order of requests replays (a HashMap's
    // order differs between maps, even in one process).
    let mut spans: std::collections::BTreeMap<&str, (u64, u64, u64)> = Default::default();
    for e in runs.iter().flat_map(|r| &r.extents) {
        let span = spans.entry(e.object_key.as_str()).or_insert((
            e.object_size,
            e.position,
            e.position + e.length,
        ));
        span.1 = span.1.min(e.position);
        span.2 = span.2.max(e.position + e.length);
    }
    let reads: Vec<_> = spans
        .into_iter()
        .map(|(key, (size, start, end))| {
            let (store, key) = (store.clone(), key.to_string());
            async move {
                let object = (key.as_str(), size);
                let read = read_range(&store, object, start..end, Reads::CacheFirst).await;
                (key, start, read)
            }
        })
        .collect();
    let mut read = futures::stream::iter(reads).buffer_unordered(CONCURRENT_GETS);
    let mut files = HashMap::new();
    while let Some((key, start, bytes)) = read.next().await {
        match bytes {
            Ok(bytes) => {
                files.insert(key, (start, bytes));
            }
            Err(e) => {
                counters.compaction_failures.inc();
                tracing::warn!(file = %key, error = %e, "compaction could not read an ingest file");
            }
        }
    }
    files
}

/// A run's batches cut from the files read, their real offsets set, each
/// checked.
fn run_batches(
    files: &HashMap<String, (u64, Bytes)>,
    run: &[ExtentRef],
) -> Result<Vec<RecordBatch>, CompactError> {
    let mut data = BytesMut::with_capacity(run.iter().map(|e| e.length as usize).sum());
    for extent in run {
        let (origin, bytes) =
            files
                .get(&extent.object_key)
                .ok_or_else(|| CompactError::Corrupt {
                    key: extent.object_key.clone(),
                    offset: extent.base_offset,
                    reason: "its file was not read".into(),
                })?;
        append_extent(&mut data, bytes, *origin, extent)?;
    }
    parse_run(data, run)
}
