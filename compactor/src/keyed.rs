//! Key compaction, for topics with `cleanup.policy=compact`: the partition is
//! rewritten keeping only the latest record of each key, as Kafka's log
//! cleaner does. Tombstones (records with a null value) are kept for
//! `delete.retention.ms` after the cleaner first keeps them, as KIP-534 has
//! it: that pass stamps their batch with a delete horizon, and a pass after
//! the horizon drops them. A producer's timestamp never decides it, so a
//! tombstone stamped in the past still reaches lagging consumers.
//!
//! Memory stays bounded whatever the partition's size, as in Kafka's
//! cleaner: the run is read in groups of at most a segment's bytes. A first
//! pass records, for each key written since the last key compaction (the
//! *dirty* part), its latest offset by a 128-bit digest of the key (Kafka's
//! offset map), up to [`CompactionPolicy::max_cleaner_keys`] keys; the run is
//! cut where the map is full, and the rest waits for the next pass. A second
//! pass rewrites each group into its own keyed segment, swapped in for that
//! group with its own compare-and-set. A record of the already-compacted
//! (*clean*) part is dropped only when the map holds a later offset of its
//! key; one of the dirty part is kept only at its key's latest offset.
//!
//! Why a group swapped alone loses nothing: a record is dropped only for a
//! later record of its key, in the same run, which stays readable in its
//! own group whether that group's swap happens or not; the groups are
//! swapped in offset order and the pass stops at the first lost swap.
//!
//! Offsets never change. Each rewritten batch keeps its base offset where it
//! can and its range is stretched (lastOffsetDelta) to reach the next one, so
//! the batches still tile the partition's offsets: consumers step over the
//! gaps as they do on a compacted Kafka topic, and floe's read path, which
//! lays batches end to end, needs no change. A range left with no record at
//! all becomes an empty batch.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use floe_metastore::{ExtentRef, Metastore, TopicInfo};
use floe_protocol::batch::{BatchError, RecordBatch};
use floe_protocol::records;
use floe_protocol::walk::{RecordView, Walk, section};
use floe_storage::ids::Ids;
use floe_storage::{ObjectStore, keys};

use crate::{
    CompactError, Compacted, CompactionPolicy, Counters, Worker, leased, read_run, swap_in,
    whole_partition,
};

fn corrupt(extent: &ExtentRef, reason: impl ToString) -> CompactError {
    CompactError::Corrupt {
        key: extent.object_key.clone(),
        offset: extent.base_offset,
        reason: reason.to_string(),
    }
}

/// What key compaction would rewrite now: the partition up to its first
/// extent in an ingest file (ingest jobs move those, and a rewrite racing
/// them would lose its compare-and-set every time) or appended less than
/// `min.compaction.lag.ms` ago, if it is worth it, as Kafka's cleaner picks
/// a log: what was written since its last key compaction (in merged files,
/// not keyed segments) is at least `min.cleanable.dirty.ratio` of the
/// bytes, or was appended `max.compaction.lag.ms` ago, or a kept
/// tombstone's delete horizon has passed.
fn cleanable(
    all: Vec<ExtentRef>,
    topic: &TopicInfo,
    now_ms: i64,
    last_stable: i64,
) -> Option<Vec<ExtentRef>> {
    let config = topic.config();
    let settled = now_ms.saturating_sub(config.min_compaction_lag_ms);
    let run: Vec<ExtentRef> = all
        .into_iter()
        .take_while(|e| {
            // Never past the last stable offset (as Kafka's cleaner stops at
            // the first unstable one): a record there must not evict one a
            // read_committed reader still sees as the latest.
            e.last_offset < last_stable
                && !e.object_key.starts_with(keys::INGEST_PREFIX)
                && (keys::is_keyed_segment(&e.object_key) || e.appended_ms <= settled)
        })
        .collect();
    let is_dirty = |e: &&ExtentRef| !keys::is_keyed_segment(&e.object_key);
    let dirty_bytes: u64 = run.iter().filter(is_dirty).map(|e| e.length).sum();
    let total: u64 = run.iter().map(|e| e.length).sum();
    let lagging = run
        .iter()
        .filter(is_dirty)
        .map(|e| e.appended_ms)
        .min()
        .is_some_and(|oldest| now_ms.saturating_sub(oldest) >= config.max_compaction_lag_ms);
    let dirty = dirty_bytes > 0
        && (dirty_bytes as f64 >= total as f64 * config.min_cleanable_dirty_ratio || lagging);
    // Tombstones past their delete horizon make a partition worth cleaning
    // even with nothing new (KIP-534).
    let expired_tombstones = run
        .iter()
        .filter_map(|e| keys::keyed_segment_horizon(&e.object_key))
        .any(|horizon| horizon <= now_ms);
    (dirty || expired_tombstones).then_some(run)
}

/// Compacted partitions looked at with one metastore request
/// (`PartitionLooks`: extents and last stable offset, no aborted
/// transactions); those worth it are cleaned before the next are looked at,
/// so a pass holds one chunk's extent lists at a time.
pub const LOOKS_PER_REQUEST: usize = 64;

/// Key-compacts one partition of a compacted topic when it is worth it (see
/// [`cleanable`]), judged first from `first_look` (its extents and last
/// stable offset, read for many partitions at once, see
/// [`LOOKS_PER_REQUEST`]), so that a partition with nothing to do costs no
/// lease nor request. `Ok(None)`: nothing to do, or another
/// compactor holds the job. The extents are read again under the lease, so
/// two compactors never both rewrite the same run.
#[allow(clippy::too_many_arguments)]
pub async fn compact_keys(
    store: &Arc<dyn ObjectStore>,
    meta: &Arc<dyn Metastore>,
    topic: &TopicInfo,
    partition: i32,
    first_look: (Vec<ExtentRef>, i64),
    policy: &CompactionPolicy,
    worker: Option<&Worker>,
    now_ms: i64,
    counters: &Counters,
    ids: &dyn Ids,
) -> Result<Option<Compacted>, CompactError> {
    let (all, stable) = first_look;
    if cleanable(all, topic, now_ms, stable).is_none() {
        return Ok(None);
    }
    let job = format!("compact/{}/{partition}", topic.id);
    leased(worker, meta, job.clone(), async {
        let (all, stable) = stable_partition(meta, topic.id, partition).await?;
        let Some(run) = cleanable(all, topic, now_ms, stable) else {
            return Ok(None);
        };
        let cleaner = Cleaner {
            store,
            meta,
            topic,
            partition,
            policy,
            now_ms,
            counters,
            ids,
            lease: worker.map(|w| (w, job.as_str())),
        };
        cleaner.clean(run).await
    })
    .await
}

/// A partition's extents and its last stable offset.
async fn stable_partition(
    meta: &Arc<dyn Metastore>,
    topic_id: floe_metastore::TopicId,
    partition: i32,
) -> Result<(Vec<ExtentRef>, i64), floe_metastore::MetaError> {
    let extents = whole_partition(meta, topic_id, partition).await?.extents;
    let stable = match meta
        .list_offsets(topic_id, partition, floe_metastore::OffsetQuery::LastStable)
        .await?
    {
        floe_metastore::OffsetAnswer::Offset(offset) => offset,
        _ => 0,
    };
    Ok((extents, stable))
}

/// Whether `extent` was written since the partition's last key compaction.
fn is_dirty(extent: &ExtentRef) -> bool {
    !keys::is_keyed_segment(&extent.object_key)
}

/// `run` cut into groups of extents of at most `max_bytes` stored bytes
/// (one extent at least), the unit read and rewritten at once.
fn groups(run: &[ExtentRef], max_bytes: u64) -> Vec<&[ExtentRef]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, extent) in run.iter().enumerate() {
        if i > start && bytes.saturating_add(extent.length) > max_bytes {
            out.push(&run[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes = bytes.saturating_add(extent.length);
    }
    if start < run.len() {
        out.push(&run[start..]);
    }
    out
}

/// The batches of `group` that each of its extents holds (they tile it).
fn by_extent<'a>(
    group: &'a [ExtentRef],
    batches: &'a [RecordBatch],
) -> impl Iterator<Item = (&'a ExtentRef, &'a [RecordBatch])> {
    let mut rest = batches;
    group.iter().map(move |extent| {
        let n = rest
            .iter()
            .take_while(|b| b.base_offset() <= extent.last_offset)
            .count();
        let (these, after) = rest.split_at(n);
        rest = after;
        (extent, these)
    })
}

/// One key compaction of a partition (see the module's doc).
pub(crate) struct Cleaner<'a> {
    pub(crate) store: &'a Arc<dyn ObjectStore>,
    pub(crate) meta: &'a Arc<dyn Metastore>,
    pub(crate) topic: &'a TopicInfo,
    pub(crate) partition: i32,
    pub(crate) policy: &'a CompactionPolicy,
    pub(crate) now_ms: i64,
    pub(crate) counters: &'a Counters,
    pub(crate) ids: &'a dyn Ids,
    /// The job's lease, renewed before each group (a partition of any
    /// size may take longer than one lease).
    pub(crate) lease: Option<(&'a Worker, &'a str)>,
}

impl Cleaner<'_> {
    /// Key-compacts `run` (keyed segments first, then what was written
    /// since): what was swapped in, if anything.
    pub(crate) async fn clean(
        &self,
        mut run: Vec<ExtentRef>,
    ) -> Result<Option<Compacted>, CompactError> {
        let group_bytes = self.policy.keyed_group_bytes;
        // Everything from the first extent written since the last cleaning
        // on is dirty (keyed segments only ever form a prefix; were one to
        // follow, taking it as dirty keeps its records by the map).
        let dirty_from = run.iter().position(is_dirty).unwrap_or(run.len());
        let dirty_offset = run.get(dirty_from).map_or(i64::MAX, |e| e.base_offset);
        // Pass 1: the dirty part's keys, extent by extent, until the map is
        // full. The first dirty extent is always taken, so every pass
        // moves on.
        let mut map = KeyMap::default();
        let mut mapped = dirty_from;
        let mut read_once = None;
        let dirty_groups = groups(&run[dirty_from..], group_bytes);
        'mapping: for group in &dirty_groups {
            let batches = read_run(self.store, group).await?;
            for (_, batches) in by_extent(group, &batches) {
                if mapped > dirty_from && map.latest.len() >= self.policy.max_cleaner_keys {
                    break 'mapping;
                }
                let batches = batches.to_vec();
                map = off_runtime(move || {
                    map.add_latest(&batches);
                    map
                })
                .await;
                mapped += 1;
            }
            if dirty_from == 0 && dirty_groups.len() == 1 {
                read_once = Some(batches);
            }
        }
        if mapped < run.len() {
            tracing::info!(topic = %self.topic.name, partition = self.partition,
                keys = map.latest.len(), cleaned_to = run[mapped - 1].last_offset,
                "the cleaner's map is full; the rest of the partition waits for the next pass");
            run.truncate(mapped);
            read_once = None;
        }
        // Pass 2: each group rewritten into its own segment, in offset
        // order, learning the keys transactional records hold as it goes
        // (only those older than a tombstone, or beside it, keep it).
        let mut map = Arc::new(map);
        let mut done: Option<Compacted> = None;
        for group in groups(&run, group_bytes) {
            if let Some((worker, job)) = self.lease
                && !worker.lease(self.meta, job).await?
            {
                tracing::info!(%job, "lost the key compaction lease; the rest waits");
                break;
            }
            let batches = match read_once.take() {
                Some(batches) => batches,
                None => read_run(self.store, group).await?,
            };
            let Some(swapped) = self.rewrite(group, batches, &mut map, dirty_offset).await? else {
                // A lost swap: the partition changed; what is left waits.
                break;
            };
            done = Some(match done {
                None => swapped,
                Some(before) => Compacted {
                    segment_key: before.segment_key,
                    extents: before.extents + swapped.extents,
                    bytes: before.bytes + swapped.bytes,
                    base_offset: before.base_offset,
                    last_offset: swapped.last_offset,
                },
            });
        }
        Ok(done)
    }

    /// Rewrites one group's `batches` by `map` into a keyed segment and
    /// swaps it in for the group. The records' work (the transactional
    /// keys `map` learns from the group, and the rewrite) runs off the
    /// runtime's threads.
    async fn rewrite(
        &self,
        group: &[ExtentRef],
        batches: Vec<RecordBatch>,
        map: &mut Arc<KeyMap>,
        dirty_offset: i64,
    ) -> Result<Option<Compacted>, CompactError> {
        let last_offset = group[group.len() - 1].last_offset;
        let (max_keys, retention) = (
            self.policy.max_cleaner_keys,
            self.topic.config().delete_retention_ms,
        );
        let now_ms = self.now_ms;
        let mut owned = std::mem::take(map);
        let (learnt, kept) = off_runtime(move || {
            Arc::make_mut(&mut owned).add_transactional(&batches, max_keys);
            let kept = keep_latest_with(
                &owned,
                &batches,
                &|offset| offset >= dirty_offset,
                retention,
                now_ms,
                last_offset,
            );
            (owned, kept)
        })
        .await;
        *map = learnt;
        let kept = kept.map_err(|e| corrupt(&group[0], e))?;
        if kept.undecodable > 0 {
            self.counters
                .undecodable_batches
                .inc_by(kept.undecodable as u64);
            tracing::warn!(topic = %self.topic.name, partition = self.partition,
                batches = kept.undecodable,
                "key compaction kept batches it could not decode as they were");
        }
        // Only a horizon not yet passed schedules a pass (one stamped now,
        // with delete.retention.ms of 0, is now): a tombstone kept past its
        // own (a transaction's record holds its key) would otherwise have
        // every pass rewrite the partition.
        let horizon = kept
            .batches
            .iter()
            .filter_map(records::delete_horizon)
            .filter(|&h| h >= self.now_ms)
            .min();
        let key = keys::new_keyed_segment_key(
            self.topic.id,
            self.partition,
            group[0].base_offset,
            horizon,
            self.ids.next_id(),
        );
        swap_in(
            self.store,
            self.meta,
            (self.topic.id, self.partition),
            self.policy,
            group.to_vec(),
            &kept.batches,
            key,
        )
        .await
    }
}

/// Runs CPU-bound record work off the runtime's async workers; in place on
/// a single-threaded runtime (tests, the simulation), where a thread outside
/// the runtime would finish at a time the runtime's clock does not decide,
/// so that a seed would not replay.
async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    if Handle::current().runtime_flavor() == RuntimeFlavor::CurrentThread {
        return work();
    }
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => done,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Calls `f` with each record of `batch`, walked from its (decompressed)
/// records section without a copy per record; or, if they are not exactly
/// the batch's records, with none of them (so that a batch kept whole as
/// undecodable never has its keys count against other records).
fn each_record(batch: &RecordBatch, mut f: impl FnMut(RecordView<'_>)) -> Result<(), BatchError> {
    let records = section(batch)?;
    Walk::new(&records, batch.record_count()).finish()?;
    for record in Walk::new(&records, batch.record_count()) {
        f(record?);
    }
    Ok(())
}

/// A 128-bit digest of a key: the cleaner's map holds this, not the key
/// (two halves, so a map entry is 24 bytes, not a u128's aligned 32).
type Digest = (u64, u64);

fn digest(key: &[u8]) -> Digest {
    use std::hash::{Hash, Hasher};
    let half = |salt: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        salt.hash(&mut h);
        key.hash(&mut h);
        h.finish()
    };
    (half(0), half(1))
}

/// What [`keep_latest`] made of a run of batches.
#[derive(Debug)]
pub struct Kept {
    /// Still tiling the same offsets.
    pub batches: Vec<RecordBatch>,
    /// Batches that did not decode and were kept as they were: the cleaner
    /// must never stop (and retry forever) on one bad batch, nor drop data.
    pub undecodable: usize,
}

/// The cleaner's map (Kafka's `OffsetMap`): each key written in the dirty
/// part of a run, by digest, with its latest offset; and the keys that kept
/// transactional records hold.
#[derive(Debug, Default, Clone)]
pub struct KeyMap {
    latest: HashMap<Digest, i64>,
    /// Keys a kept transactional record holds: their tombstones stay, or
    /// the transaction's older value would come back once they went.
    in_transactions: HashSet<Digest>,
    /// A transactional batch did not decode, or there were too many such
    /// keys to hold: every tombstone stays.
    unknown_transactional_keys: bool,
}

impl KeyMap {
    /// Takes in the keys of `batches` (of the dirty part) with their
    /// latest offsets. Control batches (transaction markers) take no part,
    /// nor do batches that do not decode (they are kept as they are), nor
    /// transactional batches: they are kept as they are, for now, since an
    /// aborted or undecided record must never evict a committed one
    /// (Kafka's cleaner knows which transactions aborted; this one keeps
    /// them all, which costs space and loses nothing).
    pub fn add_latest(&mut self, batches: &[RecordBatch]) {
        for batch in batches {
            if batch.is_control() || batch.is_transactional() || batch.record_count() == 0 {
                continue;
            }
            let walked = each_record(batch, |record| {
                if let Some(key) = record.key {
                    let offset = batch.base_offset() + record.offset_delta as i64;
                    let latest = self.latest.entry(digest(key)).or_insert(offset);
                    *latest = (*latest).max(offset);
                }
            });
            if let Err(e) = walked {
                tracing::debug!(offset = batch.base_offset(), error = %e, "undecodable stored batch")
            }
        }
    }

    /// Takes in the keys transactional records of `batches` hold, at most
    /// `max` of them (past that, every tombstone stays).
    pub fn add_transactional(&mut self, batches: &[RecordBatch], max: usize) {
        for batch in batches {
            if self.unknown_transactional_keys {
                return;
            }
            if batch.is_control() || !batch.is_transactional() || batch.record_count() == 0 {
                continue;
            }
            let in_transactions = &mut self.in_transactions;
            let walked = each_record(batch, |record| {
                if let Some(key) = record.key
                    && in_transactions.len() <= max
                {
                    in_transactions.insert(digest(key));
                }
            });
            if walked.is_err() || self.in_transactions.len() > max {
                self.unknown_transactional_keys = true;
                self.in_transactions = HashSet::new();
            }
        }
    }

    /// Whether the record of `key` at `offset` stays: in the dirty part only
    /// at its key's latest offset, in the clean part unless the dirty part
    /// has a later one.
    fn keeps(&self, key: Digest, offset: i64, dirty: bool) -> bool {
        match dirty {
            true => self.latest.get(&key) == Some(&offset),
            false => self.latest.get(&key).is_none_or(|&latest| latest <= offset),
        }
    }

    /// Whether a tombstone of `key` may be dropped once its horizon passed.
    fn tombstone_may_go(&self, key: Digest) -> bool {
        !self.unknown_transactional_keys && !self.in_transactions.contains(&key)
    }
}

/// The batches (tiling `[first base offset, last_offset]`, real offsets)
/// rewritten to hold only each key's latest record, still tiling the same
/// offsets, all of them taken as dirty (see [`keep_latest_with`]).
pub fn keep_latest(
    batches: &[RecordBatch],
    delete_retention_ms: i64,
    now_ms: i64,
    last_offset: i64,
) -> Result<Kept, String> {
    let mut map = KeyMap::default();
    map.add_latest(batches);
    map.add_transactional(batches, usize::MAX);
    keep_latest_with(
        &map,
        batches,
        &|_| true,
        delete_retention_ms,
        now_ms,
        last_offset,
    )
}

/// The batches (tiling `[first base offset, last_offset]`, real offsets)
/// rewritten by `map` (see [`KeyMap::keeps`]; `dirty(offset)` says which
/// part a batch is of), still tiling the same offsets. Records without a
/// key are kept. A batch keeping tombstones gets a delete horizon of
/// `now_ms + delete_retention_ms` the first time; its tombstones are
/// dropped by a pass at or after that horizon.
pub fn keep_latest_with(
    map: &KeyMap,
    batches: &[RecordBatch],
    dirty: &dyn Fn(i64) -> bool,
    delete_retention_ms: i64,
    now_ms: i64,
    last_offset: i64,
) -> Result<Kept, String> {
    let Some(first) = batches.first() else {
        return Ok(Kept {
            batches: Vec::new(),
            undecodable: 0,
        });
    };
    let untouched =
        |b: &RecordBatch| b.is_control() || b.is_transactional() || b.record_count() == 0;
    let mut undecodable = 0;
    // One batch at a time.
    let mut rewritten_batches = Vec::with_capacity(batches.len());
    for batch in batches {
        if untouched(batch) {
            rewritten_batches.push(Some(batch.clone()));
            continue;
        }
        let Ok(records) = section(batch) else {
            // Its keys are unknown: kept as it is, never fatal (the cleaner
            // must not stop, and retry forever, on one bad batch).
            undecodable += 1;
            rewritten_batches.push(Some(batch.clone()));
            continue;
        };
        let in_dirty = dirty(batch.base_offset());
        let horizon = records::delete_horizon(batch);
        let tombstones_expire = horizon.is_some_and(|h| now_ms >= h);
        let keeps = |record: &RecordView<'_>| match record.key {
            None => true,
            Some(key) => {
                let digest = digest(key);
                let offset = batch.base_offset() + record.offset_delta as i64;
                let tombstone_may_go = tombstones_expire && map.tombstone_may_go(digest);
                map.keeps(digest, offset, in_dirty) && !(record.value.is_none() && tombstone_may_go)
            }
        };
        // What would go, and whether a kept tombstone needs a horizon.
        let (mut total, mut kept, mut has_tombstones) = (0usize, 0usize, false);
        let walked = each_record(batch, |record| {
            total += 1;
            if keeps(&record) {
                kept += 1;
                has_tombstones |= record.value.is_none();
            }
        });
        if walked.is_err() {
            undecodable += 1;
            rewritten_batches.push(Some(batch.clone()));
            continue;
        }
        rewritten_batches.push(if kept == total && (horizon.is_some() || !has_tombstones) {
            // Nothing to drop and nothing to stamp: the bytes as they were.
            Some(batch.clone())
        } else {
            let stamp = has_tombstones
                .then(|| horizon.unwrap_or(now_ms.saturating_add(delete_retention_ms)));
            records::encode_kept(batch, &records, &keeps, stamp)
                .map_err(|e| format!("re-encoding batch at {}: {e}", batch.base_offset()))?
        });
    }

    let mut out: Vec<RecordBatch> = Vec::new();
    // The first offset the next output batch must start at.
    let mut next = first.base_offset();
    for rewritten in rewritten_batches {
        let Some(rewritten) = rewritten else { continue };
        let start = rewritten.base_offset();
        if start > next {
            // The records before this batch's first are gone: the previous
            // batch stretches over them, or an empty one stands in.
            match out.last_mut() {
                Some(previous) if stretchable(previous) => stretch(previous, start - 1)?,
                _ => out.push(RecordBatch::empty(next, start - 1)),
            }
        }
        next = start + rewritten.last_offset_delta() as i64 + 1;
        out.push(rewritten);
    }
    match out.last_mut() {
        Some(previous) if next <= last_offset && stretchable(previous) => {
            stretch(previous, last_offset)?
        }
        Some(_) if next <= last_offset => out.push(RecordBatch::empty(next, last_offset)),
        Some(_) => {}
        None => out.push(RecordBatch::empty(first.base_offset(), last_offset)),
    }
    Ok(Kept {
        batches: out,
        undecodable,
    })
}

/// Whether a gap after `batch` may be covered by stretching it: not a
/// transaction's batch or marker (a consumer decides whether a batch was
/// aborted by its range, so a stretched one could be dropped with an abort
/// of its producer, or a marker read over records it does not end).
fn stretchable(batch: &RecordBatch) -> bool {
    !batch.is_transactional() && !batch.is_control()
}

/// Makes `batch` end at `last_offset`.
fn stretch(batch: &mut RecordBatch, last_offset: i64) -> Result<(), String> {
    let delta = last_offset - batch.base_offset();
    let delta =
        i32::try_from(delta).map_err(|_| format!("offset range {delta} too long for one batch"))?;
    *batch = batch.with_offsets(batch.base_offset(), delta);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use floe_protocol::kafka_protocol::records::Compression;

    fn batch(
        base: i64,
        records: &[(Option<&str>, Option<&str>)],
        codec: Compression,
    ) -> RecordBatch {
        let bytes = crate::tests::encode_batch(base, records, codec);
        RecordBatch::parse_all(&bytes).unwrap().remove(0)
    }

    /// (offset, key, value) of one record.
    type Row = (i64, Option<String>, Option<String>);

    /// Every record, and each batch's offset range.
    fn contents(batches: &[RecordBatch]) -> (Vec<Row>, Vec<(i64, i64)>) {
        let text = |b: &Option<Bytes>| b.as_ref().map(|b| String::from_utf8(b.to_vec()).unwrap());
        let mut records = Vec::new();
        let mut ranges = Vec::new();
        for b in batches {
            ranges.push((b.base_offset(), b.last_offset()));
            if b.record_count() > 0 {
                let decoded = floe_protocol::records::decode(b).unwrap();
                records.extend(
                    decoded
                        .iter()
                        .map(|r| (r.offset, text(&r.key), text(&r.value))),
                );
            }
        }
        (records, ranges)
    }

    /// `b` as producer 7's transactional batch.
    fn transactional(b: RecordBatch) -> RecordBatch {
        let mut bytes = b.bytes().to_vec();
        let attributes = i16::from_be_bytes([bytes[21], bytes[22]]) | 0x10;
        bytes[21..23].copy_from_slice(&attributes.to_be_bytes());
        bytes[43..51].copy_from_slice(&7i64.to_be_bytes());
        bytes[51..53].copy_from_slice(&0i16.to_be_bytes());
        bytes[53..57].copy_from_slice(&0i32.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[21..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        RecordBatch::parse_all(&Bytes::from(bytes))
            .unwrap()
            .remove(0)
    }

    /// A transaction's records never evict others (the transaction may have
    /// aborted: its record for `a` must not take the committed one's place),
    /// are kept whole, and no gap is covered by stretching one of its
    /// batches or markers.
    #[test]
    fn transactions_records_and_markers_are_kept_as_they_are() {
        let aborted = transactional(batch(1, &[(Some("a"), Some("aborted"))], Compression::None));
        let marker = RecordBatch::end_txn_marker(7, 0, false, 1_000).with_offsets(2, 0);
        let batches = vec![
            batch(0, &[(Some("a"), Some("committed"))], Compression::None),
            aborted.clone(),
            marker.clone(),
            batch(3, &[(Some("b"), Some("1"))], Compression::None),
            batch(4, &[(Some("b"), Some("2"))], Compression::None),
        ];
        let out = keep_latest(&batches, 60_000, 1_010, 4).unwrap().batches;
        let (records, ranges) = contents(&out);
        assert_eq!(
            records,
            vec![
                (0, Some("a".into()), Some("committed".into())),
                (1, Some("a".into()), Some("aborted".into())),
                // The ABORT marker's control record.
                (2, Some("\0\0\0\0".into()), Some("\0\0\0\0\0\0".into())),
                (4, Some("b".into()), Some("2".into())),
            ]
        );
        // b@3 is gone: an empty batch stands in, the marker is not stretched.
        assert_eq!(ranges, vec![(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]);
        assert_eq!(out[1].bytes(), aborted.bytes());
        assert_eq!(out[2].bytes(), marker.bytes());
    }

    #[test]
    fn keeps_each_keys_latest_record_and_tiles_the_offsets() {
        let batches = vec![
            batch(
                0,
                &[
                    (Some("a"), Some("1")),
                    (Some("b"), Some("1")),
                    (None, Some("x")),
                ],
                Compression::Zstd,
            ),
            batch(
                3,
                &[(Some("a"), Some("2")), (Some("c"), Some("1"))],
                Compression::None,
            ),
            batch(
                5,
                &[(Some("c"), Some("2")), (Some("b"), None)],
                Compression::Lz4,
            ),
            batch(7, &[(Some("c"), Some("3"))], Compression::Gzip),
        ];
        // The tombstone for b is young: it stays.
        let out = keep_latest(&batches, 60_000, 1_010, 7).unwrap().batches;
        let (records, ranges) = contents(&out);
        assert_eq!(
            records,
            vec![
                (2, None, Some("x".into())),
                (3, Some("a".into()), Some("2".into())),
                (6, Some("b".into()), None),
                (7, Some("c".into()), Some("3".into())),
            ]
        );
        // Every offset 0..=7 is covered once, in order: an empty batch stands
        // where nothing of the first batch's range is left before offset 2.
        assert_eq!(ranges, vec![(0, 1), (2, 2), (3, 5), (6, 6), (7, 7)]);
        for b in &out {
            RecordBatch::parse_stored_one(b.bytes()).unwrap();
        }
        // Codecs are kept: the rewritten first batch of records was zstd.
        assert_eq!(out[1].codec(), floe_protocol::batch::Codec::Zstd);

        // A tombstone is kept by the pass that first sees it, however old its
        // timestamp (KIP-534): that pass stamps its batch with a delete horizon.
        let first = keep_latest(&batches, 5_000, 1_000_000, 7).unwrap().batches;
        let (records, _) = contents(&first);
        assert!(records.contains(&(6, Some("b".into()), None)));
        let stamped: Vec<i64> = first.iter().filter_map(records::delete_horizon).collect();
        assert_eq!(stamped, vec![1_005_000]);
        // Before the horizon it stays; from it on, b disappears altogether.
        let early = keep_latest(&first, 5_000, 1_004_999, 7).unwrap().batches;
        assert_eq!(contents(&early).0, records);
        let out = keep_latest(&first, 5_000, 1_005_000, 7).unwrap().batches;
        let (records, ranges) = contents(&out);
        assert!(records.iter().all(|(_, k, _)| k.as_deref() != Some("b")));
        assert_eq!(ranges.first().unwrap().0, 0);
        assert_eq!(ranges.last().unwrap().1, 7);
        for pair in ranges.windows(2) {
            assert_eq!(pair[0].1 + 1, pair[1].0, "batches must tile: {ranges:?}");
        }
    }

    #[test]
    fn a_range_with_nothing_left_becomes_one_empty_batch() {
        let batches = vec![batch(10, &[(Some("k"), None)], Compression::None)];
        let stamped = keep_latest(&batches, 0, 1_000_000, 10).unwrap().batches;
        let out = keep_latest(&stamped, 0, 1_000_000, 10).unwrap().batches;
        assert_eq!(out.len(), 1);
        assert_eq!(
            (
                out[0].base_offset(),
                out[0].last_offset_delta(),
                out[0].record_count()
            ),
            (10, 0, 0)
        );
        // Compacting again is stable.
        let again = keep_latest(&out, 0, 1_000_000, 10).unwrap().batches;
        assert_eq!(again, out);
    }

    /// A stored batch whose header claims 2^31-1 records made the decoder
    /// abort the process, and every agent crash-looped on the compacted
    /// topic. It is now kept as it was and counted, and the rest compacts.
    #[test]
    fn an_undecodable_batch_is_kept_and_counted_not_fatal() {
        let lying = floe_protocol::testing::lying_batch(i32::MAX, Compression::None);
        let mut b = bytes::BytesMut::from(&lying[..]);
        b[0..8].copy_from_slice(&2i64.to_be_bytes());
        let lying = RecordBatch::parse_all_stored(&b.freeze())
            .unwrap()
            .remove(0);
        let end = 2 + lying.last_offset_delta() as i64;
        let batches = vec![
            batch(
                0,
                &[(Some("a"), Some("1")), (Some("a"), Some("2"))],
                Compression::None,
            ),
            lying.clone(),
        ];
        let kept = keep_latest(&batches, 0, 1_000_000, end).unwrap();
        assert_eq!(kept.undecodable, 1);
        assert_eq!(kept.batches.last(), Some(&lying), "kept byte for byte");
        let (records, _) = contents(&kept.batches[..kept.batches.len() - 1]);
        assert_eq!(records, vec![(1, Some("a".into()), Some("2".into()))]);
    }
}
