//! What a run is checked for, after Jepsen's Kafka checker:
//!
//! - lost write: an acknowledged batch at or past its partition's log start
//!   is readable at its offsets with its own records; one before the log
//!   start was sent longer than `retention.ms` before the end (retention, not
//!   loss, removed it) or below an offset DeleteRecords was asked for. On
//!   the key-compacted topic, each key's latest acknowledged record is still
//!   there, or a later record of that key is; when tombstones may expire, a
//!   key may be gone whole, but never with an older record left behind (a
//!   resurrected key). Acknowledgements to a topic since deleted and
//!   re-created are not held against the new one, whose data shared ingest
//!   files with the others;
//! - duplicate: an idempotent batch is in the log once;
//! - offsets unique and contiguous: a partition's extents tile
//!   `[log start, high watermark)`, and two acknowledgements never share an
//!   offset;
//! - non-monotonic or inconsistent polls: a consumer reading along sees
//!   offsets without gaps (but where key compaction removed records), and
//!   what the log holds at the end at each offset it read;
//! - a live extent pointing at a deleted object;
//! - the state machine's own invariants.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::BytesMut;
use floe_agent::read::extent_reader::{ByteRanges, ExtentReader, Source};
use floe_metastore::{ExtentRef, MetaError, Metastore, Refusal, TopicInfo};
use floe_protocol::batch::{RecordBatch, patch_base_offsets};
use floe_storage::ingest::IngestFile;
use floe_storage::{ObjectPath, ObjectStore};
use object_store::ObjectStoreExt;
use tokio::time::{Duration, Instant};

use super::Shared;
use floe_metastore::Sequencer;

/// One record as stored: its offset, key, and the name the producer gave it
/// (its value, or for a tombstone, which has none, its header); its batch's
/// producer and whether it is transactional, or a COMMIT (`Some(true)`) or
/// ABORT marker.
#[derive(Clone)]
pub struct Stored {
    pub offset: i64,
    pub key: Option<String>,
    pub value: String,
    pub tombstone: bool,
    pub producer_id: i64,
    pub transactional: bool,
    pub marker: Option<bool>,
}

fn text(bytes: &Option<bytes::Bytes>) -> Option<String> {
    bytes
        .as_ref()
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Why an extent could not be read.
#[derive(Debug)]
enum Unreadable {
    /// Its object is not in the bucket.
    Missing,
    /// A fault the simulation injected.
    Injected,
    /// Anything else: a short object, bytes that are not whole batches.
    Corrupt(String),
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreadable::Missing => f.write_str("its object is missing"),
            Unreadable::Injected => f.write_str("an injected fault"),
            Unreadable::Corrupt(why) => f.write_str(why),
        }
    }
}

/// The records of an extent, or why they cannot be read.
async fn read_extent(
    store: &Arc<dyn ObjectStore>,
    extent: &ExtentRef,
) -> Result<Vec<Stored>, Unreadable> {
    let path = ObjectPath::from(extent.object_key.as_str());
    let bytes = store
        .get_range(&path, extent.position..extent.position + extent.length)
        .await
        .map_err(|e| match e {
            object_store::Error::NotFound { .. } => Unreadable::Missing,
            object_store::Error::Generic { store: "sim", .. } => Unreadable::Injected,
            other => Unreadable::Corrupt(other.to_string()),
        })?;
    let mut data = BytesMut::from(&bytes[..]);
    let whole = patch_base_offsets(&mut data[..], extent.base_offset);
    let corrupt = |e: &dyn std::fmt::Display| Unreadable::Corrupt(e.to_string());
    if whole != data.len() {
        return Err(corrupt(&"it does not end on a batch boundary"));
    }
    let batches = RecordBatch::parse_all_stored(&data.freeze()).map_err(|e| corrupt(&e))?;
    let mut records = Vec::new();
    for batch in &batches {
        for r in floe_protocol::records::decode(batch).map_err(|e| corrupt(&e))? {
            let name = r.headers.get(b"sim".as_slice()).and_then(text);
            // A control record's key: version, then type (0 ABORT, 1 COMMIT).
            let marker = match (r.control, r.key.as_ref().and_then(|k| k.get(2..4))) {
                (false, _) => None,
                (true, Some([0, 1])) => Some(true),
                (true, Some([0, 0])) => Some(false),
                (true, other) => {
                    return Err(corrupt(&format!(
                        "a control record of an unknown type {other:?}"
                    )));
                }
            };
            records.push(Stored {
                offset: r.offset,
                key: text(&r.key),
                value: name.unwrap_or_default(),
                tombstone: r.value.is_none(),
                producer_id: r.producer_id,
                transactional: r.transactional,
                marker,
            });
        }
    }
    Ok(records)
}

/// How far ahead of the simulation's time the metastore's clock may run
/// (a node's clock skewed a minute ahead, in Raft runs, stamps it).
const MAX_SKEW_MS: i64 = 61_000;

/// How far ahead of the simulation's time the metastore's clock may be at
/// `now_ms`: a minute of ordinary skew, and what a node whose clock is
/// hours ahead can add while it leads (its stamps move the group's time
/// 1/16 faster than real time at most: `floe_metastore::raft::stamps`).
pub(crate) fn max_ahead_ms(now_ms: i64) -> i64 {
    let elapsed = now_ms - super::meta::EPOCH_MS;
    MAX_SKEW_MS + elapsed / floe_metastore::raft::stamps::CATCH_UP_DIVISOR
}

/// Where each partition's acknowledged records end: a read that begins
/// after these acknowledgements must see a high watermark at least there.
fn acked_ends(shared: &Shared, topics: &[TopicInfo]) -> BTreeMap<(usize, i32), i64> {
    shared.with(|w| {
        let mut ends = BTreeMap::new();
        for a in &w.acks {
            if topics.get(a.topic).is_some_and(|t| t.id == a.topic_id) {
                let end = ends.entry((a.topic, a.partition)).or_insert(0);
                *end = (*end).max(a.offset + a.records as i64);
            }
        }
        ends
    })
}

/// Reads every partition's offsets and checks none is older than what was
/// acknowledged before the read began: a stale read (a leader answering from
/// a state that has not applied everything committed). Run after a power
/// cut, when a leader may resume its term with a commit index behind.
/// How many reads were answered (the rest were refused).
pub async fn reads_are_current(
    shared: &Shared,
    meta: &Arc<dyn Metastore>,
    topics: &[TopicInfo],
) -> usize {
    let acked = acked_ends(shared, topics);
    let mut answered = 0;
    for (t, topic) in topics.iter().enumerate() {
        for p in 0..topic.partitions {
            let Ok(offsets) = meta.offsets(topic.id, p).await else {
                continue;
            };
            answered += 1;
            check_current(shared, &acked, (t, p), &topic.name, offsets.high_watermark);
        }
    }
    answered
}

fn check_current(
    shared: &Shared,
    acked: &BTreeMap<(usize, i32), i64>,
    at: (usize, i32),
    name: &str,
    high_watermark: i64,
) {
    let end = acked.get(&at).copied().unwrap_or(0);
    if high_watermark < end {
        shared.with(|w| {
            w.anomaly(format!(
                "stale read: {name}/{} answered high watermark {high_watermark}, below {end}, acknowledged before the read",
                at.1
            ))
        });
    }
}

/// A consumer reading every partition along as records arrive, through the
/// faulty metastore and store. It checks what it sees as it goes: no gaps
/// (but where key compaction removed records), no high watermark moving
/// back, no live extent whose object is gone, and that whatever retention
/// removed under it had expired.
pub async fn poll(
    shared: Shared,
    meta: Arc<dyn Metastore>,
    store: Arc<dyn ObjectStore>,
    topics: Vec<TopicInfo>,
    stop: Instant,
    retention_ms: i64,
) {
    let mut positions: BTreeMap<(usize, i32), i64> = BTreeMap::new();
    while Instant::now() < stop {
        let pause = shared.with(|w| w.rng_below(3_000));
        tokio::time::sleep(Duration::from_millis(500 + pause)).await;
        // Acknowledged before this pass began, so before each of its reads.
        let acked = acked_ends(&shared, &topics);
        for (t, topic) in topics.iter().enumerate() {
            let compacted = topic.config().compact;
            let name = &topic.name;
            for p in 0..topic.partitions {
                let pos = positions.entry((t, p)).or_insert(0);
                let plan = match meta.read_plan(topic.id, p, *pos, 64 << 10).await {
                    Ok(plan) => {
                        check_current(&shared, &acked, (t, p), name, plan.high_watermark);
                        plan
                    }
                    Err(MetaError::Refused(Refusal::OffsetOutOfRange {
                        log_start_offset, ..
                    })) if log_start_offset > *pos => {
                        let (from, to) = (*pos, log_start_offset);
                        shared.with(|w| {
                            w.log(format!("poll {name}/{p}: {from} expired, from {to}"));
                            let now = w.now_ms();
                            // DeleteRecords may have removed what is below its offset.
                            let deleted = w.deleted_before.get(&(t, p)).copied().unwrap_or(0);
                            let early: Vec<String> = w
                                .acks
                                .iter()
                                .filter(|a| a.topic == t && a.partition == p)
                                .filter(|a| {
                                    // Some record of it in [from, to), at or above `deleted`.
                                    let end = a.offset + a.records as i64;
                                    a.offset.max(from).max(deleted) < end.min(to)
                                })
                                .filter(|a| compacted || a.sent_ms + retention_ms > now + max_ahead_ms(now))
                                .map(|a| format!("b{:x}@{} sent at {}", a.batch, a.offset, a.sent_ms))
                                .collect();
                            if let Some(first) = early.first() {
                                w.anomaly(format!(
                                    "lost write: the log start of {name}/{p} moved from {from} to {to} at {now}, past {first} (retention {retention_ms} ms; {} such)",
                                    early.len()
                                ));
                            }
                        });
                        *pos = log_start_offset;
                        continue;
                    }
                    Err(MetaError::Refused(Refusal::OffsetOutOfRange {
                        high_watermark, ..
                    })) if high_watermark < *pos => {
                        let at = *pos;
                        shared.with(|w| {
                            w.anomaly(format!(
                                "the high watermark of {name}/{p} moved back to {high_watermark} after offset {} was polled",
                                at - 1
                            ))
                        });
                        continue;
                    }
                    Err(_) => continue,
                };
                // The retained topic holds transactions: what its last
                // stable offset says now is checked at the end (every
                // transaction with data below it had ended by now).
                if t == 0 {
                    let tp = floe_metastore::TopicPartition {
                        topic_id: topic.id,
                        partition: p,
                    };
                    if let Ok(mut plans) = meta.txn_read_plans(vec![(tp, *pos)], 1).await
                        && let Some(Ok(seen)) = plans.pop()
                    {
                        shared.with(|w| {
                            w.stable_seen.push((
                                p,
                                seen.plan.log_start_offset,
                                seen.last_stable_offset,
                                seen.plan.high_watermark,
                            ))
                        });
                    }
                }
                for extent in &plan.extents {
                    let records = match read_extent(&store, extent).await {
                        Ok(r) => r,
                        Err(Unreadable::Injected) => break,
                        // Deleted after a compaction swapped it out and its
                        // grace passed: a consumer plans again. But if the
                        // partition still points at it, it was deleted live.
                        Err(Unreadable::Missing) => {
                            if let Ok(again) = meta.read_plan(topic.id, p, *pos, 64 << 10).await
                                && again
                                    .extents
                                    .iter()
                                    .any(|e| e.object_key == extent.object_key)
                            {
                                shared.with(|w| {
                                    w.anomaly(format!(
                                        "{name}/{p}: live extent {}..={} points at deleted {}",
                                        extent.base_offset, extent.last_offset, extent.object_key
                                    ))
                                });
                            }
                            break;
                        }
                        Err(why) => {
                            shared.with(|w| {
                                w.anomaly(format!(
                                    "{name}/{p}: extent {}..={} of {} is unreadable: {why}",
                                    extent.base_offset, extent.last_offset, extent.object_key
                                ))
                            });
                            break;
                        }
                    };
                    for r in records {
                        if r.offset < *pos {
                            continue;
                        }
                        if r.offset != *pos && !compacted {
                            let at = *pos;
                            shared.with(|w| {
                                w.anomaly(format!(
                                    "poll of {name}/{p} skipped from {at} to {} (non-contiguous read)",
                                    r.offset
                                ))
                            });
                        }
                        let offset = r.offset;
                        shared.with(|w| {
                            w.summary.polled_records += 1;
                            w.polled.insert((t, p, offset), r.value.clone());
                            // The retained topic's transactions are judged
                            // also on what retention removed before the end.
                            if t == 0 {
                                w.polled_retained.insert((p, offset), r);
                            }
                        });
                        *pos = offset + 1;
                    }
                    if *pos <= extent.last_offset && !compacted {
                        let at = *pos;
                        shared.with(|w| {
                            w.anomaly(format!(
                                "{name}/{p}: extent {}..={} holds records only up to {}",
                                extent.base_offset,
                                extent.last_offset,
                                at - 1
                            ))
                        });
                    }
                    // Key compaction may have dropped the extent's last records.
                    *pos = (*pos).max(extent.last_offset + 1);
                }
            }
        }
    }
}

/// One partition's log at the end: its start and its records by offset,
/// and what the metastore says of its transactions.
pub struct Log {
    pub start: i64,
    pub records: BTreeMap<i64, Stored>,
    pub high_watermark: i64,
    pub last_stable: i64,
    /// The aborted transactions with data in the log.
    pub aborted: Vec<floe_metastore::txn::AbortedTxn>,
}

/// Reads a partition whole from the bucket as the state describes it,
/// checking that its extents tile `[log start, high watermark)` and exist.
async fn read_log(
    meta: &impl Sequencer,
    bucket: &Arc<dyn ObjectStore>,
    topic: &TopicInfo,
    p: i32,
    segments: &mut BTreeSet<String>,
    anomalies: &mut Vec<String>,
) -> Log {
    let name = &topic.name;
    let id = topic.id;
    let (offsets, txn_plan) = meta
        .read(move |s| {
            let o = s.offsets(id, p).expect("the partition exists");
            let plan = s
                .txn_read_plan(id, p, o.log_start_offset, u64::MAX)
                .expect("a plan from the log start");
            (o, plan)
        })
        .await
        .expect("the metastore answers once calm");
    let plan = &txn_plan.plan;
    let mut records = BTreeMap::new();
    let mut next = offsets.log_start_offset;
    for (i, e) in plan.extents.iter().enumerate() {
        let fits = if i == 0 {
            e.base_offset <= next && next <= e.last_offset
        } else {
            e.base_offset == next
        };
        if !fits {
            anomalies.push(format!(
                "{name}/{p}: extent {}..={} does not follow offset {next}",
                e.base_offset, e.last_offset
            ));
        }
        next = e.last_offset + 1;
        if e.object_key.starts_with("segment/") {
            segments.insert(e.object_key.clone());
        }
        match read_extent(bucket, e).await {
            Ok(stored) => {
                if e.object_key.starts_with("segment/") {
                    check_landing(bucket, e, &stored, anomalies).await;
                }
                for r in stored {
                    if r.offset < e.base_offset || r.offset > e.last_offset {
                        anomalies.push(format!(
                            "{name}/{p}: offset {} is outside its extent {}..={}",
                            r.offset, e.base_offset, e.last_offset
                        ));
                    }
                    let offset = r.offset;
                    if offset >= offsets.log_start_offset && records.insert(offset, r).is_some() {
                        anomalies.push(format!("{name}/{p}: offset {offset} is stored twice"));
                    }
                }
            }
            Err(why) => anomalies.push(format!(
                "{name}/{p}: live extent {}..={} of {} is unreadable: {why}",
                e.base_offset, e.last_offset, e.object_key
            )),
        }
    }
    if offsets.high_watermark > offsets.log_start_offset && next != offsets.high_watermark {
        anomalies.push(format!(
            "{name}/{p}: extents end at {next}, the high watermark is {}",
            offsets.high_watermark
        ));
    }
    // Only key compaction removes records from inside the log.
    if !topic.config().compact {
        let held = records.len() as i64;
        let span = offsets.high_watermark - offsets.log_start_offset;
        if held != span {
            anomalies.push(format!(
                "{name}/{p}: {held} records between the log start {} and the high watermark {}",
                offsets.log_start_offset, offsets.high_watermark
            ));
        }
    }
    Log {
        start: offsets.log_start_offset,
        records,
        high_watermark: offsets.high_watermark,
        last_stable: txn_plan.last_stable_offset,
        aborted: txn_plan.aborted,
    }
}

/// The bucket's ranges, as the agent's reader takes them.
struct BucketRanges<'a>(&'a Arc<dyn ObjectStore>);

impl ByteRanges for BucketRanges<'_> {
    async fn read(
        &self,
        key: &str,
        _size: u64,
        range: std::ops::Range<u64>,
        _source: Source,
    ) -> Result<BytesMut, floe_cache::CacheError> {
        let got = self
            .0
            .get_range(&ObjectPath::from(key), range.clone())
            .await;
        got.map(|bytes| BytesMut::from(&bytes[..]))
            .map_err(|e| floe_cache::CacheError::Load {
                key: key.into(),
                block: range.start,
                reason: e.to_string(),
            })
    }
}

/// Reads a segment's extent as the agent does from inside it (landing
/// through the offset index in every segment, however small) from a few
/// offsets, and checks each read finds what the whole extent holds from
/// there on, in order, and that the index was never found wrong.
async fn check_landing(
    bucket: &Arc<dyn ObjectStore>,
    extent: &ExtentRef,
    stored: &[Stored],
    anomalies: &mut Vec<String>,
) {
    let span = extent.last_offset - extent.base_offset;
    for from in [
        extent.base_offset + span / 3,
        extent.base_offset + span * 2 / 3,
        extent.last_offset,
    ] {
        let ranges = BucketRanges(bucket);
        let mut reader = ExtentReader::landing_above(&ranges, extent, 0);
        let mut read = Vec::new();
        let landed = reader.land_at_offset(from).await;
        let mut failed = landed.err().map(|e| e.to_string());
        while failed.is_none() {
            match reader.next(1).await {
                Ok(Some(window)) => read.push(window),
                Ok(None) => break,
                Err(e) => failed = Some(e.to_string()),
            }
        }
        let records: Result<Vec<i64>, String> = read
            .into_iter()
            .map(|w| RecordBatch::parse_all_stored(&w.freeze()).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()
            .and_then(|windows| {
                let batches: Vec<RecordBatch> = windows.into_iter().flatten().collect();
                let decoded = floe_protocol::records::decode_all(&batches);
                decoded.map_err(|e| e.to_string())
            })
            .map(|records| {
                records
                    .iter()
                    .map(|r| r.offset)
                    .filter(|&o| o >= from)
                    .collect()
            });
        let want: Vec<i64> = stored
            .iter()
            .map(|r| r.offset)
            .filter(|&o| o >= from)
            .collect();
        let why = match (failed, records) {
            (Some(why), _) | (None, Err(why)) => Some(why),
            (None, Ok(_)) if reader.missed => Some("its index named the wrong batch".into()),
            (None, Ok(got)) if got != want => Some(format!(
                "it read offsets {:?}.. where the extent holds {:?}..",
                got.first(),
                want.first()
            )),
            _ => None,
        };
        if let Some(why) = why {
            anomalies.push(format!(
                "a read of {} from {from} landing through its index failed: {why}",
                extent.object_key
            ));
        }
    }
}

/// Checks every live segment's offset index against its batches (a reader
/// sent to the wrong batch by one would serve the wrong records, or none);
/// returns how many segments had one.
async fn check_segment_indexes(
    bucket: &Arc<dyn ObjectStore>,
    segments: &BTreeSet<String>,
    anomalies: &mut Vec<String>,
) -> u64 {
    let mut indexed = 0;
    for key in segments {
        let read = bucket.get(&ObjectPath::from(key.as_str())).await;
        let file = match read {
            Ok(got) => got.bytes().await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
        .and_then(|bytes| IngestFile::parse(bytes).map_err(|e| e.to_string()));
        match file {
            Ok(file) => {
                indexed += file.offset_index().is_some() as u64;
                if let Err(why) = file.check_offset_index() {
                    anomalies.push(format!("segment {key}: its offset index is wrong: {why}"));
                }
            }
            Err(why) => anomalies.push(format!("segment {key} does not read: {why}")),
        }
    }
    indexed
}

/// What the topics promise, for the final audit.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    pub retention_ms: i64,
    /// Whether tombstones outlive the run (then every key's latest record,
    /// tombstone or not, must be there at the end).
    pub tombstones_kept: bool,
}

/// The final audit, on the state and the bucket as they are (no faults).
/// `topics` are the topics as they are at the end: acknowledgements to an
/// earlier incarnation of a re-created topic are not held against it.
pub async fn settle_and_check(
    shared: &Shared,
    meta: &impl Sequencer,
    bucket: &Arc<dyn ObjectStore>,
    topics: &[TopicInfo],
    rules: Rules,
) {
    let retention_ms = rules.retention_ms;
    let mut anomalies = Vec::new();
    let (invariants, end_ms) = meta
        .read(|s| (s.check_invariants(), s.clock_ms()))
        .await
        .expect("the metastore answers once calm");
    if let Err(broken) = invariants {
        anomalies.push(format!("state invariant broken: {broken}"));
    }
    // Retention below is judged on the metastore's clock: it must not have
    // run further ahead than skew allows (then it would excuse early trims).
    let sim_ms = shared.with(|w| w.now_ms());
    if end_ms > sim_ms + max_ahead_ms(sim_ms) {
        anomalies.push(format!(
            "the metastore's clock is {} ms ahead of the simulation's",
            end_ms - sim_ms
        ));
    }
    let mut logs: BTreeMap<(usize, i32), Log> = BTreeMap::new();
    let mut segments = BTreeSet::new();
    for (t, topic) in topics.iter().enumerate() {
        for p in 0..topic.partitions {
            let log = read_log(meta, bucket, topic, p, &mut segments, &mut anomalies).await;
            logs.insert((t, p), log);
        }
    }
    let indexed = check_segment_indexes(bucket, &segments, &mut anomalies).await;

    // Transactions, on the retained topic they write to.
    let (txns, stable_seen, polled_retained) = shared.with(|w| {
        (
            w.txns.clone(),
            std::mem::take(&mut w.stable_seen),
            std::mem::take(&mut w.polled_retained),
        )
    });
    let retained: BTreeMap<i32, &Log> = logs
        .iter()
        .filter(|((t, _), _)| *t == 0)
        .map(|((_, p), log)| (*p, log))
        .collect();
    let (found, audited) =
        super::txns::check(&topics[0], &retained, &polled_retained, &txns, &stable_seen);
    anomalies.extend(found);
    shared.with(|w| w.summary.txn_records_audited = audited);

    let (acks, polled, deleted_before, unacked_tombstones) = shared.with(|w| {
        (
            w.acks.clone(),
            std::mem::take(&mut w.polled),
            w.deleted_before.clone(),
            w.unacked_tombstones.clone(),
        )
    });
    // Of topics that still exist as they were.
    let acks: Vec<_> = acks
        .into_iter()
        .filter(|a| topics.get(a.topic).is_some_and(|t| t.id == a.topic_id))
        .collect();
    let mut claimed: BTreeMap<(usize, i32, i64), u64> = BTreeMap::new();
    // Compacted topic: per (partition, key), the latest acknowledged record
    // and whether it is a tombstone.
    let mut latest: BTreeMap<(i32, String), (i64, String, bool)> = BTreeMap::new();
    for ack in &acks {
        let name = &topics[ack.topic].name;
        let compacted = topics[ack.topic].config().compact;
        let log = &logs[&(ack.topic, ack.partition)];
        for i in 0..ack.records {
            let offset = ack.offset + i as i64;
            let want = super::value(ack.batch, i);
            if let Some(other) = claimed.insert((ack.topic, ack.partition, offset), ack.batch)
                && other != ack.batch
            {
                anomalies.push(format!(
                    "{name}/{}@{offset} acknowledged to batches {other:x} and {:x}",
                    ack.partition, ack.batch
                ));
            }
            if compacted {
                // Still there: it must be what was acknowledged (a
                // tombstone stays one).
                if let Some(r) = log.records.get(&offset)
                    && (r.value != want || r.tombstone != ack.tombstones[i as usize])
                {
                    anomalies.push(format!(
                        "altered write: {name}/{}@{offset} holds {} (tombstone: {}), acknowledged as {want}",
                        ack.partition, r.value, r.tombstone
                    ));
                }
                let key = format!("k{}", ack.keys[i as usize].expect("keyed"));
                let tombstone = ack.tombstones[i as usize];
                let entry =
                    latest
                        .entry((ack.partition, key))
                        .or_insert((offset, want.clone(), tombstone));
                if offset > entry.0 {
                    *entry = (offset, want, tombstone);
                }
                continue;
            }
            let deleted = deleted_before.get(&(ack.topic, ack.partition)).copied();
            if offset < log.start {
                // Not expired, and above any DeleteRecords offset asked for.
                if ack.sent_ms + retention_ms >= end_ms && deleted.is_none_or(|d| offset >= d) {
                    anomalies.push(format!(
                        "lost write: b{:x} {name}/{}@{offset} is before the log start {} but was sent at {} (retention {retention_ms} ms, now {end_ms})",
                        ack.batch, ack.partition, log.start, ack.sent_ms
                    ));
                }
                continue;
            }
            match log.records.get(&offset) {
                Some(r) if r.value == want => {}
                found => anomalies.push(format!(
                    "lost write: b{:x} acknowledged at {name}/{}@{offset} but the log holds {:?}",
                    ack.batch,
                    ack.partition,
                    found.map(|r| &r.value)
                )),
            }
        }
    }
    // Key compaction keeps each key's latest record: the latest acknowledged
    // one, or one after it (committed, its acknowledgement lost).
    for (t, topic) in topics.iter().enumerate() {
        if !topic.config().compact {
            continue;
        }
        for ((p, key), (offset, value, tombstone)) in &latest {
            let log = &logs[&(t, *p)];
            let of_key = |r: &Stored| r.key.as_deref() == Some(key);
            let kept = log
                .records
                .range(offset..)
                .any(|(o, r)| of_key(r) && (o > offset || r.value == *value));
            if kept {
                continue;
            }
            // A tombstone past its `delete.retention.ms` goes, and with it
            // the whole key (the latest acknowledged record may also be
            // shadowed by a later tombstone whose acknowledgement was lost):
            // allowed, if none of the key's older records is left behind.
            let key_byte: u8 = key[1..].parse().expect("keys are k<n>");
            let may_be_gone = !rules.tombstones_kept
                && (*tombstone || unacked_tombstones.contains(&(*p, key_byte)));
            let left_behind = log.records.range(..offset).find(|(_, r)| of_key(r));
            match left_behind {
                None if may_be_gone => {}
                Some((at, r)) if may_be_gone => anomalies.push(format!(
                    "resurrected key: {key} of {}/{p} was deleted by a tombstone (last acknowledged at {offset}), yet {} at {at} is still there",
                    topic.name, r.value
                )),
                _ => anomalies.push(format!(
                    "lost write: key {key} of {}/{p} was last acknowledged at {offset} ({value}{}), and the log holds no record of it from there",
                    topic.name,
                    if *tombstone { ", a tombstone" } else { "" }
                )),
            }
        }
    }
    // Idempotent batches are in the (uncompacted) log once.
    let idempotent: BTreeSet<u64> = acks
        .iter()
        .filter(|a| a.idempotent)
        .map(|a| a.batch)
        .collect();
    let mut copies: BTreeMap<&str, u32> = BTreeMap::new();
    for log in logs.values() {
        for r in log.records.values() {
            *copies.entry(r.value.as_str()).or_default() += 1;
        }
    }
    for batch in &idempotent {
        let first = super::value(*batch, 0);
        if let Some(&n) = copies.get(first.as_str())
            && n > 1
        {
            anomalies.push(format!(
                "duplicate: idempotent b{batch:x} is in the log {n} times"
            ));
        }
    }
    // What the poller read is what the log holds: the same record, unless
    // retention (before the log start) or key compaction removed it.
    for ((t, p, offset), value) in &polled {
        let log = &logs[&(*t, *p)];
        match log.records.get(offset) {
            Some(now) if now.value != *value => anomalies.push(format!(
                "inconsistent read: {}/{p}@{offset} was polled as {value}, the log now holds {}",
                topics[*t].name, now.value
            )),
            None if *offset >= log.start && !topics[*t].config().compact => {
                anomalies.push(format!(
                    "lost read: {}/{p}@{offset} was polled as {value} and is gone from the log",
                    topics[*t].name
                ))
            }
            _ => {}
        }
    }
    let objects_left = {
        use futures::TryStreamExt;
        bucket
            .list(None)
            .try_collect::<Vec<_>>()
            .await
            .map_or(0, |l| l.len() as u64)
    };
    let records: usize = logs.values().map(|l| l.records.len()).sum();
    shared.with(|w| {
        w.summary.segments_live = segments.len() as u64;
        w.summary.segments_indexed = indexed;
        w.summary.objects_left = objects_left;
        w.summary.simulated_ms = w.start.elapsed().as_millis() as u64;
        w.log(format!(
            "audit: {} acks, {records} records in the logs, {} segments, {objects_left} objects left",
            acks.len(),
            segments.len(),
        ));
        w.anomalies.extend(anomalies);
    });
}
