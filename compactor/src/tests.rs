use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use floe_metastore::{Commit, CommitBatch, LocalMetastore, Metastore, NewTopic, TopicInfo};
use floe_storage::ingest::{IngestFile, IngestWriter};
use floe_storage::{ObjectPath, ObjectStore};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use object_store::ObjectStoreExt;
use object_store::memory::InMemory;

use crate::*;
use floe_storage::ids::{Ids, RandomIds};

fn encode(values: &[String], compression: Compression) -> Bytes {
    let records: Vec<_> = values.iter().map(|v| (None, Some(v.as_str()))).collect();
    encode_batch(0, &records, compression)
}

/// One batch of (key, value) records at offsets from `base`, all stamped
/// 1,000, with no producer (sequences as a decoder reports them: -1 + delta).
pub(crate) fn encode_batch(
    base: i64,
    records: &[(Option<&str>, Option<&str>)],
    compression: Compression,
) -> Bytes {
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: base + i as i64,
            sequence: -1 + i as i32,
            timestamp: 1_000,
            key: k.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value: v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .unwrap();
    buf.freeze()
}

struct Setup {
    store: Arc<dyn ObjectStore>,
    meta: Arc<dyn Metastore>,
    a: TopicInfo,
    b: TopicInfo,
}

async fn topic(meta: &Arc<dyn Metastore>, name: &str) -> TopicInfo {
    meta.create_topic(NewTopic {
        name: name.into(),
        partitions: 1,
        configs: Default::default(),
    })
    .await
    .unwrap()
}

/// Like the agent: each ingest file holds one batch of topic `a` and one of `b`.
async fn setup(files: usize) -> Setup {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let meta: Arc<dyn Metastore> = Arc::new(LocalMetastore::in_memory().await.unwrap());
    let a = topic(&meta, "a").await;
    let b = topic(&meta, "b").await;
    for n in 0..files {
        let mut writer = IngestWriter::new();
        let mut batches = Vec::new();
        for t in [&a, &b] {
            let values: Vec<String> = (0..3).map(|i| format!("{}-{n}-{i}", t.name)).collect();
            let compression = if n % 2 == 0 {
                Compression::Zstd
            } else {
                Compression::None
            };
            let batch = encode(&values, compression);
            let entry = writer.add_chunk(t.id, 0, std::slice::from_ref(&batch));
            batches.push(CommitBatch {
                topic_id: t.id,
                partition: 0,
                position: entry.position,
                length: entry.length,
                record_count: 3,
                max_timestamp: 1_000,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            });
        }
        let key = floe_storage::keys::new_ingest_key(RandomIds.next_id());
        let file = writer.finish();
        store.put(&key, file.clone().into()).await.unwrap();
        meta.commit(Commit {
            object_key: key.to_string(),
            object_size: file.len() as u64,
            batches,
            not_before_ms: meta.clock().await.unwrap(),
        })
        .await
        .unwrap();
    }
    Setup { store, meta, a, b }
}

async fn read_values(s: &Setup, t: &TopicInfo) -> Vec<(i64, String)> {
    let plan = s.meta.read_plan(t.id, 0, 0, u64::MAX).await.unwrap();
    let mut out = Vec::new();
    for e in plan.extents {
        let bytes = s
            .store
            .get_range(
                &ObjectPath::from(e.object_key.as_str()),
                e.position..e.position + e.length,
            )
            .await
            .unwrap();
        let mut buf = BytesMut::from(&bytes[..]);
        patch_base_offsets(&mut buf, e.base_offset);
        let mut buf = buf.freeze();
        for set in RecordBatchDecoder::decode_all(&mut buf).unwrap() {
            for r in set.records {
                out.push((
                    r.offset,
                    String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
                ));
            }
        }
    }
    out
}

#[tokio::test]
async fn compaction_keeps_every_record_at_its_offset() {
    let s = setup(10).await;
    let before = read_values(&s, &s.a).await;
    assert_eq!(before.len(), 30);
    let policy = CompactionPolicy {
        min_extents: 4,
        max_segment_bytes: u64::MAX,
        extent_bytes: u64::MAX,
    };
    let done = compact_partition(&s.store, &s.meta, s.a.id, 0, &policy, None, &RandomIds)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (done.extents, done.base_offset, done.last_offset),
        (10, 0, 29)
    );

    let plan = s.meta.read_plan(s.a.id, 0, 0, u64::MAX).await.unwrap();
    assert_eq!(plan.extents.len(), 1);
    assert!(plan.extents[0].object_key.starts_with("segment/"));
    assert_eq!(read_values(&s, &s.a).await, before);

    // The segment is a valid file in the ingest format, offsets already real.
    let seg = s
        .store
        .get(&ObjectPath::from(done.segment_key.as_str()))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let file = IngestFile::parse(seg).unwrap();
    assert_eq!(file.entries().len(), 1);
    assert_eq!(file.entries()[0].batch_count, 10);
    let chunk = file.chunk(&file.entries()[0]);
    assert_eq!(RecordBatch::parse_all(&chunk).unwrap()[9].base_offset(), 27);

    // Nothing left to do for `a`; `b` still reads from the shared ingest files.
    assert_eq!(
        compact_partition(&s.store, &s.meta, s.a.id, 0, &policy, None, &RandomIds)
            .await
            .unwrap(),
        None
    );
    assert_eq!(read_values(&s, &s.b).await.len(), 30);
}

#[tokio::test]
async fn large_segments_are_cut_into_small_extents() {
    let s = setup(10).await;
    let before = read_values(&s, &s.a).await;
    // Each batch is well over 1 byte: every batch becomes its own extent.
    let policy = CompactionPolicy {
        min_extents: 4,
        max_segment_bytes: u64::MAX,
        extent_bytes: 1,
    };
    let done = compact_partition(&s.store, &s.meta, s.a.id, 0, &policy, None, &RandomIds)
        .await
        .unwrap()
        .unwrap();
    let plan = s.meta.read_plan(s.a.id, 0, 0, u64::MAX).await.unwrap();
    assert_eq!(plan.extents.len(), 10);
    assert!(
        plan.extents
            .iter()
            .all(|e| e.object_key == done.segment_key)
    );
    assert_eq!(read_values(&s, &s.a).await, before);
    // A read from the middle starts at the extent holding the offset.
    let from_middle = s.meta.read_plan(s.a.id, 0, 16, 1).await.unwrap();
    assert_eq!(from_middle.extents.len(), 1);
    assert_eq!(from_middle.extents[0].base_offset, 15);
}

#[tokio::test]
async fn gc_deletes_ingest_files_once_no_partition_needs_them() {
    let s = setup(6).await;
    let policy = CompactionPolicy {
        min_extents: 2,
        max_segment_bytes: u64::MAX,
        extent_bytes: u64::MAX,
    };
    let mut gc = Gc::new(Duration::ZERO);
    compact_partition(&s.store, &s.meta, s.a.id, 0, &policy, None, &RandomIds)
        .await
        .unwrap()
        .unwrap();
    // `b` still points into every ingest file.
    assert!(gc.run_once(&s.store, &s.meta).await.unwrap().is_empty());
    let all = compact_all(
        &s.store,
        &s.meta,
        &policy,
        None,
        0,
        &Counters::default(),
        0,
        &RandomIds,
    )
    .await
    .unwrap();
    assert_eq!(all.len(), 1);
    let deleted = gc.run_once(&s.store, &s.meta).await.unwrap();
    assert_eq!(deleted.len(), 6);
    for key in &deleted {
        assert!(s.store.head(&ObjectPath::from(key.as_str())).await.is_err());
    }
    assert!(s.meta.garbage().await.unwrap().is_empty());
    assert_eq!(read_values(&s, &s.a).await.len(), 18);
    assert_eq!(read_values(&s, &s.b).await.len(), 18);
}

#[tokio::test]
async fn gc_waits_for_the_grace_period() {
    let s = setup(3).await;
    let policy = CompactionPolicy {
        min_extents: 2,
        max_segment_bytes: u64::MAX,
        extent_bytes: u64::MAX,
    };
    compact_all(
        &s.store,
        &s.meta,
        &policy,
        None,
        0,
        &Counters::default(),
        0,
        &RandomIds,
    )
    .await
    .unwrap();
    let mut gc = Gc::new(Duration::from_secs(3600));
    assert!(gc.run_once(&s.store, &s.meta).await.unwrap().is_empty());
    assert_eq!(s.meta.garbage().await.unwrap().len(), 3);
}

/// Commits `files` ingest files holding one batch of `topic` each, and
/// returns their keys.
async fn commit_alone(s: &Setup, topic: &TopicInfo, files: usize) -> Vec<ObjectPath> {
    let mut keys = Vec::new();
    for n in 0..files {
        let mut writer = IngestWriter::new();
        let batch = encode(&[format!("{}-{n}", topic.name)], Compression::None);
        let entry = writer.add_chunk(topic.id, 0, std::slice::from_ref(&batch));
        let key = floe_storage::keys::new_ingest_key(RandomIds.next_id());
        let file = writer.finish();
        s.store.put(&key, file.clone().into()).await.unwrap();
        s.meta
            .commit(Commit {
                object_key: key.to_string(),
                object_size: file.len() as u64,
                batches: vec![CommitBatch {
                    topic_id: topic.id,
                    partition: 0,
                    position: entry.position,
                    length: entry.length,
                    record_count: 1,
                    max_timestamp: 1_000,
                    producer_id: -1,
                    producer_epoch: -1,
                    base_sequence: -1,
                }],
                not_before_ms: s.meta.clock().await.unwrap(),
            })
            .await
            .unwrap();
        keys.push(key);
    }
    keys
}

/// One partition whose objects cannot be read used to end the whole pass
/// (`compact_all` returned at the first error), so every partition after it
/// was never compacted again.
#[tokio::test]
async fn a_failing_partition_does_not_stop_the_pass() {
    let s = setup(3).await;
    let broken = topic(&s.meta, "c").await;
    for key in commit_alone(&s, &broken, 3).await {
        s.store.delete(&key).await.unwrap();
    }
    let policy = CompactionPolicy {
        min_extents: 2,
        max_segment_bytes: u64::MAX,
        extent_bytes: u64::MAX,
    };
    let counters = Counters::default();
    // Partitions a, b, c rotated to start with the broken one.
    let done = compact_all(
        &s.store, &s.meta, &policy, None, 2, &counters, 0, &RandomIds,
    )
    .await
    .unwrap();
    assert_eq!(done.len(), 2, "a and b compacted after c failed");
    assert_eq!(counters.compaction_failures.get(), 1);
}

#[test]
fn plan_takes_runs_of_ingest_extents_within_the_size_limit() {
    let extent = |base: i64, key: &str| ExtentRef {
        appended_ms: 0,
        base_offset: base,
        last_offset: base,
        max_timestamp: 0,
        object_key: key.into(),
        object_size: 100,
        position: 0,
        length: 10,
    };
    let extents = vec![
        extent(0, "segment/x"),
        extent(1, "ingest/1"),
        extent(2, "segment/y"),
        extent(3, "ingest/3"),
        extent(4, "ingest/4"),
        extent(5, "ingest/5"),
    ];
    let policy = CompactionPolicy {
        min_extents: 2,
        max_segment_bytes: 25,
        extent_bytes: u64::MAX,
    };
    let run = plan(&extents, &policy).unwrap();
    assert_eq!(
        run.iter().map(|e| e.base_offset).collect::<Vec<_>>(),
        vec![3, 4]
    );
    let strict = CompactionPolicy {
        min_extents: 4,
        max_segment_bytes: 1000,
        extent_bytes: u64::MAX,
    };
    assert_eq!(plan(&extents, &strict), None);
}

#[tokio::test]
async fn sweep_hands_old_unknown_objects_to_gc() {
    let s = setup(2).await;
    let stray = floe_storage::keys::new_ingest_key(RandomIds.next_id());
    s.store
        .put(&stray, Bytes::from_static(b"never committed").into())
        .await
        .unwrap();
    // Too young: left alone (its commit may still be on its way).
    assert_eq!(
        sweep::sweep_orphans(&s.store, &s.meta, Duration::from_secs(3600), now_ms())
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        sweep::sweep_orphans(&s.store, &s.meta, Duration::ZERO, now_ms())
            .await
            .unwrap(),
        1
    );
    assert_eq!(s.meta.garbage().await.unwrap(), vec![stray.to_string()]);
    let deleted = Gc::new(Duration::ZERO)
        .run_once(&s.store, &s.meta)
        .await
        .unwrap();
    assert_eq!(deleted, vec![stray.to_string()]);
    // Committed objects are untouched.
    assert_eq!(read_values(&s, &s.a).await.len(), 6);
}

#[tokio::test]
async fn a_leased_job_is_left_to_its_holder() {
    let s = setup(10).await;
    let policy = CompactionPolicy {
        min_extents: 4,
        max_segment_bytes: u64::MAX,
        extent_bytes: u64::MAX,
    };
    let worker = |holder: &str| Worker {
        holder: holder.into(),
        lease: std::time::Duration::from_secs(60),
    };
    let (a, b) = (worker("agent-a"), worker("agent-b"));
    let job = format!("compact/{}/0", s.a.id);
    // Agent a is busy with partition 0 of topic a.
    assert!(a.lease(&s.meta, &job).await.unwrap());
    let puts_before = futures::StreamExt::count(s.store.list(None)).await;
    assert_eq!(
        compact_partition(&s.store, &s.meta, s.a.id, 0, &policy, Some(&b), &RandomIds)
            .await
            .unwrap(),
        None,
        "b must not compact a's job"
    );
    assert_eq!(
        futures::StreamExt::count(s.store.list(None)).await,
        puts_before,
        "b uploaded nothing"
    );
    // b still does the jobs nobody holds.
    assert!(
        compact_partition(&s.store, &s.meta, s.b.id, 0, &policy, Some(&b), &RandomIds)
            .await
            .unwrap()
            .is_some()
    );
    // Once a is done (its lease released), b may take the job.
    s.meta.release_lease(job, "agent-a".into()).await.unwrap();
    let done = compact_partition(&s.store, &s.meta, s.a.id, 0, &policy, Some(&b), &RandomIds)
        .await
        .unwrap();
    assert!(done.is_some());
    // ...and it released its own lease: a can lease the job again.
    assert!(
        a.lease(&s.meta, &format!("compact/{}/0", s.a.id))
            .await
            .unwrap()
    );
}
