//! What a run is checked for, after Jepsen's Kafka checker:
//!
//! - lost write: an acknowledged batch at or past its partition's log start
//!   is readable at its offsets with its own records; one before the log
//!   start was sent longer than `retention.ms` before the end (retention, not
//!   loss, removed it);
//! - duplicate: an idempotent batch is in the log once;
//! - offsets unique and contiguous: a partition's extents tile
//!   `[log start, high watermark)`, and two acknowledgements never share an
//!   offset;
//! - non-monotonic or inconsistent polls: a consumer reading along sees
//!   offsets without gaps, and what the log holds at the end at each offset
//!   it read;
//! - a live extent pointing at a deleted object;
//! - the state machine's own invariants.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::BytesMut;
use floe_metastore::{ExtentRef, MetaError, Metastore, TopicInfo};
use floe_protocol::batch::{RecordBatch, patch_base_offsets};
use floe_storage::{ObjectPath, ObjectStore};
use object_store::ObjectStoreExt;
use tokio::time::{Duration, Instant};

use super::Shared;
use super::meta::SimMetastore;

/// The records of an extent, as (offset, value), or why they cannot be read.
async fn read_extent(
    store: &Arc<dyn ObjectStore>,
    extent: &ExtentRef,
) -> Result<Vec<(i64, String)>, String> {
    let path = ObjectPath::from(extent.object_key.as_str());
    let bytes = store
        .get_range(&path, extent.position..extent.position + extent.length)
        .await
        .map_err(|e| match e {
            object_store::Error::NotFound { .. } => format!("missing: {}", extent.object_key),
            other => other.to_string(),
        })?;
    let mut data = BytesMut::from(&bytes[..]);
    let whole = patch_base_offsets(&mut data[..], extent.base_offset);
    if whole != data.len() {
        return Err(format!(
            "extent {}@{} does not end on a batch boundary",
            extent.object_key, extent.base_offset
        ));
    }
    let batches = RecordBatch::parse_all_stored(&data.freeze()).map_err(|e| e.to_string())?;
    let mut records = Vec::new();
    for batch in &batches {
        let decoded = floe_protocol::records::decode(batch).map_err(|e| e.to_string())?;
        for (i, r) in decoded.iter().enumerate() {
            let value = r
                .value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            records.push((batch.base_offset() + i as i64, value));
        }
    }
    Ok(records)
}

/// A consumer reading every partition along as records arrive, through the
/// faulty metastore and store, checking that what it sees has no gaps.
pub async fn poll(
    shared: Shared,
    meta: Arc<dyn Metastore>,
    store: Arc<dyn ObjectStore>,
    topic: TopicInfo,
    stop: Instant,
) {
    let mut positions = vec![0i64; topic.partitions as usize];
    while Instant::now() < stop {
        let pause = shared.with(|w| w.rng_below(3_000));
        tokio::time::sleep(Duration::from_millis(500 + pause)).await;
        for p in 0..topic.partitions {
            let pos = &mut positions[p as usize];
            let plan = match meta.read_plan(topic.id, p, *pos, 64 << 10).await {
                Ok(plan) => plan,
                Err(MetaError::OffsetOutOfRange {
                    log_start_offset, ..
                }) if log_start_offset > *pos => {
                    shared.with(|w| {
                        w.log(format!("poll p{p}: {pos} expired, from {log_start_offset}"))
                    });
                    *pos = log_start_offset;
                    continue;
                }
                Err(_) => continue,
            };
            'extents: for extent in &plan.extents {
                let records = match read_extent(&store, extent).await {
                    Ok(r) => r,
                    // Deleted after a swap and its grace, or a store fault:
                    // a consumer plans again (the final audit checks that no
                    // live extent points at a missing object).
                    Err(_) => break 'extents,
                };
                for (offset, value) in records {
                    if offset < *pos {
                        continue;
                    }
                    if offset != *pos {
                        shared.with(|w| {
                            w.anomaly(format!(
                                "poll of p{p} skipped from {pos} to {offset} (non-contiguous read)"
                            ))
                        });
                    }
                    shared.with(|w| {
                        w.summary.polled_records += 1;
                        w.polled.insert((p, offset), value);
                    });
                    *pos = offset + 1;
                }
            }
        }
    }
}

/// The final audit, on the state and the bucket as they are (no faults).
pub async fn settle_and_check(
    shared: &Shared,
    meta: &SimMetastore,
    bucket: &Arc<dyn ObjectStore>,
    topic: &TopicInfo,
    retention_ms: i64,
) {
    let mut anomalies = Vec::new();
    if let Err(broken) = meta.inspect(|s| s.check_invariants()) {
        anomalies.push(format!("state invariant broken: {broken}"));
    }
    let end_ms = meta.inspect(|s| s.clock_ms());
    let mut log: BTreeMap<(i32, i64), String> = BTreeMap::new();
    let mut starts = BTreeMap::new();
    let mut segments = std::collections::BTreeSet::new();
    for p in 0..topic.partitions {
        let (offsets, plan) = meta.inspect(|s| {
            let o = s.offsets(topic.id, p).expect("the partition exists");
            let plan = s
                .read_plan(topic.id, p, o.log_start_offset, u64::MAX)
                .expect("a plan from the log start");
            (o, plan)
        });
        starts.insert(p, offsets.log_start_offset);
        // The extents tile [log start, high watermark).
        let mut next = offsets.log_start_offset;
        for (i, e) in plan.extents.iter().enumerate() {
            let fits = if i == 0 {
                e.base_offset <= next && next <= e.last_offset
            } else {
                e.base_offset == next
            };
            if !fits {
                anomalies.push(format!(
                    "p{p}: extent {}..={} does not follow offset {next}",
                    e.base_offset, e.last_offset
                ));
            }
            next = e.last_offset + 1;
            if e.object_key.starts_with("segment/") {
                segments.insert(e.object_key.clone());
            }
            match read_extent(bucket, e).await {
                Ok(records) => {
                    for (offset, value) in records {
                        if offset >= offsets.log_start_offset
                            && log.insert((p, offset), value).is_some()
                        {
                            anomalies.push(format!("p{p}: offset {offset} is stored twice"));
                        }
                    }
                }
                Err(why) => anomalies.push(format!("p{p}: live extent unreadable: {why}")),
            }
        }
        if offsets.high_watermark > offsets.log_start_offset && next != offsets.high_watermark {
            anomalies.push(format!(
                "p{p}: extents end at {next}, the high watermark is {}",
                offsets.high_watermark
            ));
        }
    }

    let (acks, polled) = shared.with(|w| (w.acks.clone(), std::mem::take(&mut w.polled)));
    let mut claimed: BTreeMap<(i32, i64), u64> = BTreeMap::new();
    for ack in &acks {
        for i in 0..ack.records {
            let offset = ack.offset + i as i64;
            if let Some(other) = claimed.insert((ack.partition, offset), ack.batch)
                && other != ack.batch
            {
                anomalies.push(format!(
                    "p{}@{offset} acknowledged to batches {other:x} and {:x}",
                    ack.partition, ack.batch
                ));
            }
            if offset < starts[&ack.partition] {
                if ack.sent_ms + retention_ms >= end_ms {
                    anomalies.push(format!(
                        "lost write: b{:x} p{}@{offset} is before the log start {} but was sent at {} (retention {retention_ms} ms, now {end_ms})",
                        ack.batch, ack.partition, starts[&ack.partition], ack.sent_ms
                    ));
                }
                continue;
            }
            let want = super::value(ack.batch, i);
            match log.get(&(ack.partition, offset)) {
                Some(v) if *v == want => {}
                found => anomalies.push(format!(
                    "lost write: b{:x} acknowledged at p{}@{offset} but the log holds {found:?}",
                    ack.batch, ack.partition
                )),
            }
        }
    }
    // Idempotent batches are in the log once.
    let idempotent: std::collections::BTreeSet<u64> = acks
        .iter()
        .filter(|a| a.idempotent)
        .map(|a| a.batch)
        .collect();
    let mut copies: BTreeMap<String, u32> = BTreeMap::new();
    for value in log.values() {
        *copies.entry(value.clone()).or_default() += 1;
    }
    for batch in &idempotent {
        let first = super::value(*batch, 0);
        if let Some(&n) = copies.get(&first)
            && n > 1
        {
            anomalies.push(format!(
                "duplicate: idempotent b{batch:x} is in the log {n} times"
            ));
        }
    }
    // What the poller read is what the log holds (where it still holds it).
    for ((p, offset), value) in &polled {
        if let Some(now) = log.get(&(*p, *offset))
            && now != value
        {
            anomalies.push(format!(
                "inconsistent read: p{p}@{offset} was polled as {value}, the log now holds {now}"
            ));
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
    shared.with(|w| {
        w.summary.segments_live = segments.len() as u64;
        w.summary.objects_left = objects_left;
        w.summary.simulated_ms = w.start.elapsed().as_millis() as u64;
        w.log(format!(
            "audit: {} acks, {} records in the log, {} segments, {} objects left",
            acks.len(),
            log.len(),
            segments.len(),
            objects_left
        ));
        w.anomalies.extend(anomalies);
    });
}
