//! Compaction and garbage collection.
//!
//! Ingest files hold many partitions in small pieces. [`compact_partition`]
//! rewrites a run of a partition's ingest extents into one *segment* object
//! (same file format, one chunk, base offsets set to the real ones), then swaps
//! the extents in the metastore with a compare-and-set, so a reader sees either
//! the old extents or the new one, never a gap. [`Gc`] deletes objects nothing
//! refers to any more, after a grace period for reads still in flight.
//! [`retention`] moves log starts past expired data; [`sweep`] finds objects
//! the metastore never heard of.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use bytes::BytesMut;
use floe_metastore::{
    ExtentPiece, ExtentRef, MetaError, Metastore, ReadPlan, Refusal, ReplaceExtents, TopicId,
    TopicInfo, now_ms,
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

/// When a partition is worth compacting.
#[derive(Debug, Clone, Copy)]
pub struct CompactionPolicy {
    /// At least this many ingest extents in a row.
    pub min_extents: usize,
    /// A segment stops growing past this size.
    pub max_segment_bytes: u64,
    /// A segment is described to the metastore as extents of about this size,
    /// so a fetch from its middle reads little more than it returns.
    pub extent_bytes: u64,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        CompactionPolicy {
            min_extents: 8,
            max_segment_bytes: 256 * 1024 * 1024,
            extent_bytes: 1024 * 1024,
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

fn is_ingest(extent: &ExtentRef) -> bool {
    extent.object_key.starts_with("ingest/")
}

/// Picks the first run of consecutive ingest extents the policy allows.
pub fn plan(extents: &[ExtentRef], policy: &CompactionPolicy) -> Option<Vec<ExtentRef>> {
    let mut start = 0;
    while start < extents.len() {
        if !is_ingest(&extents[start]) {
            start += 1;
            continue;
        }
        let mut run = Vec::new();
        let mut bytes = 0;
        for extent in extents[start..].iter().take_while(|e| is_ingest(e)) {
            if !run.is_empty() && bytes + extent.length > policy.max_segment_bytes {
                break;
            }
            bytes += extent.length;
            run.push(extent.clone());
        }
        if run.len() >= policy.min_extents.max(2) {
            return Some(run);
        }
        start += run.len().max(1);
    }
    None
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
        let last_offset = batch.base_offset() + batch.last_offset_delta() as i64;
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

/// Compacts one run of a partition's ingest extents into a segment, if the
/// policy finds one. `Ok(None)`: nothing to do, or the extents changed under us.
pub async fn compact_partition(
    store: &Arc<dyn ObjectStore>,
    meta: &Arc<dyn Metastore>,
    topic_id: TopicId,
    partition: i32,
    policy: &CompactionPolicy,
    worker: Option<&Worker>,
    ids: &dyn Ids,
) -> Result<Option<Compacted>, CompactError> {
    let all = whole_partition(meta, topic_id, partition).await?;
    let Some(run) = plan(&all.extents, policy) else {
        return Ok(None);
    };
    let job = format!("compact/{topic_id}/{partition}");
    leased(
        worker,
        meta,
        job,
        compact_run(store, meta, topic_id, partition, policy, run, ids),
    )
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
pub(crate) async fn leased(
    worker: Option<&Worker>,
    meta: &Arc<dyn Metastore>,
    job: String,
    work: impl std::future::Future<Output = Result<Option<Compacted>, CompactError>>,
) -> Result<Option<Compacted>, CompactError> {
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
    topic_id: TopicId,
    partition: i32,
    policy: &CompactionPolicy,
    run: Vec<ExtentRef>,
    ids: &dyn Ids,
) -> Result<Option<Compacted>, CompactError> {
    let batches = read_run(store, &run).await?;
    let key = keys::new_segment_key(topic_id, partition, run[0].base_offset, ids.next_id());
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

/// The batches of `run`, read from the store with their real offsets set and
/// each checked.
pub(crate) async fn read_run(
    store: &Arc<dyn ObjectStore>,
    run: &[ExtentRef],
) -> Result<Vec<RecordBatch>, CompactError> {
    let mut data = BytesMut::with_capacity(run.iter().map(|e| e.length as usize).sum());
    for extent in run {
        let start = data.len();
        let path = ObjectPath::from(extent.object_key.as_str());
        let bytes = store
            .get_range(&path, extent.position..extent.position + extent.length)
            .await?;
        data.extend_from_slice(&bytes);
        let whole = patch_base_offsets(&mut data[start..], extent.base_offset);
        if whole != data.len() - start {
            return Err(CompactError::Corrupt {
                key: extent.object_key.clone(),
                offset: extent.base_offset,
                reason: "extent does not end on a batch boundary".into(),
            });
        }
    }
    RecordBatch::parse_all_stored(&data.freeze()).map_err(|e| CompactError::Corrupt {
        key: run[0].object_key.clone(),
        offset: run[0].base_offset,
        reason: e.to_string(),
    })
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
    let mut writer = IngestWriter::new();
    let chunk = writer.add_chunk(topic_id, partition, &raw);
    let file = writer.finish();
    store.put(&key, file.clone().into()).await?;

    let base_offset = run[0].base_offset;
    let last_offset = run[run.len() - 1].last_offset;
    let swap = ReplaceExtents {
        topic_id,
        partition,
        object_key: key.to_string(),
        object_size: file.len() as u64,
        pieces: pieces(
            batches,
            chunk.position,
            policy.extent_bytes,
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
        let ttl_ms = self.lease.as_millis().min(i64::MAX as u128) as i64;
        meta.acquire_lease(job.to_string(), self.holder.clone(), now_ms(), ttl_ms)
            .await
    }
}

/// Runs [`compact_partition`] over every partition once, starting at
/// partition `start` (modulo their number) so that workers starting together
/// do not all queue for the same leases. A partition that fails is logged and
/// counted, and the pass goes on to the next. `now_ms` is the metastore's
/// time (it decides when tombstones expire).
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
) -> Result<Vec<Compacted>, CompactError> {
    let topics = meta.topics().await?;
    let mut partitions: Vec<(&TopicInfo, i32)> = topics
        .iter()
        .flat_map(|t| (0..t.partitions).map(move |p| (t, p)))
        .collect();
    if !partitions.is_empty() {
        let at = start % partitions.len();
        partitions.rotate_left(at);
    }
    let mut done = Vec::new();
    for (topic, partition) in partitions {
        // Compacted topics (`cleanup.policy=compact`) get key compaction instead.
        let result = if topic.config().compact {
            keyed::compact_keys(
                store, meta, topic, partition, policy, worker, now_ms, counters, ids,
            )
            .await
        } else {
            compact_partition(store, meta, topic.id, partition, policy, worker, ids).await
        };
        match result {
            Ok(Some(c)) => done.push(c),
            Ok(None) => {}
            // A deleted topic is not an error of the whole pass.
            Err(CompactError::Meta(MetaError::Refused(Refusal::UnknownTopicOrPartition))) => {}
            Err(e) => {
                counters.compaction_failures.inc();
                tracing::warn!(topic = %topic.name, partition, error = %e,
                    "compacting a partition failed; going on with the others");
            }
        }
    }
    Ok(done)
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
        let mut deleted = Vec::with_capacity(due.len());
        for key in due {
            match store.delete(&ObjectPath::from(key.as_str())).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => deleted.push(key),
                Err(e) => {
                    tracing::warn!(object = %key, error = %e, "gc: delete failed; will retry")
                }
            }
        }
        if !deleted.is_empty() {
            meta.forget_garbage(deleted.clone()).await?;
            for key in &deleted {
                self.first_seen.remove(key);
            }
        }
        Ok(deleted)
    }
}

mod counters;
pub mod keyed;
pub mod retention;

pub use counters::Counters;
pub mod sweep;

#[cfg(test)]
mod tests;
