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
    /// The compactor's looks, kept over its passes.
    looks: KeptLooks,
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
    Setup {
        store,
        meta,
        a,
        b,
        looks: KeptLooks::default(),
    }
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

/// Counts GETs (requests, as S3 bills them).
#[derive(Default, Clone)]
struct CountGets(Arc<std::sync::atomic::AtomicU64>);

impl CountGets {
    /// GETs since the last call.
    fn since(&self) -> u64 {
        self.0.swap(0, std::sync::atomic::Ordering::Relaxed)
    }
}

impl floe_storage::hooked::Hooks for CountGets {
    fn after(
        &self,
        op: floe_storage::hooked::Op,
        _bytes: u64,
        _ok: bool,
    ) -> object_store::Result<()> {
        if op == floe_storage::hooked::Op::Get {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }
}

fn policy(min_extents: usize) -> CompactionPolicy {
    CompactionPolicy {
        min_extents,
        max_segment_bytes: u64::MAX,
        extent_bytes: u64::MAX,
        ..CompactionPolicy::default()
    }
}

/// One pass as a lone compactor (no leases), at the metastore's time.
async fn pass(s: &Setup, policy: &CompactionPolicy) -> Pass {
    let now_ms = s.meta.clock().await.unwrap();
    compact_all(
        &s.store,
        &s.meta,
        policy,
        None,
        0,
        &Counters::default(),
        now_ms,
        &RandomIds,
        &s.looks,
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn a_job_reads_each_ingest_file_once_and_frees_them_all() {
    let mut s = setup(10).await;
    let gets = CountGets::default();
    s.store = Arc::new(floe_storage::hooked::HookedStore::new(
        s.store.clone(),
        gets.clone(),
    ));
    let before = (read_values(&s, &s.a).await, read_values(&s, &s.b).await);
    assert_eq!(before.0.len(), 30);
    let gets_to_read = gets.0.swap(0, std::sync::atomic::Ordering::Relaxed);

    let done = pass(&s, &policy(4)).await;
    assert_eq!(done.merged.len(), 1);
    let job = &done.merged[0];
    assert_eq!((job.files, job.runs, job.swapped), (10, 2, 2));
    assert_eq!(
        gets.0.load(std::sync::atomic::Ordering::Relaxed),
        10,
        "one GET per ingest file, not one per partition"
    );
    assert!(
        gets_to_read >= 20,
        "reading extent by extent took a GET each"
    );

    // Both partitions now read from the one merged file, every record at
    // its offset, and every ingest file is garbage.
    for t in [&s.a, &s.b] {
        let plan = s.meta.read_plan(t.id, 0, 0, u64::MAX).await.unwrap();
        assert_eq!(plan.extents.len(), 1);
        assert_eq!(plan.extents[0].object_key, job.key);
    }
    assert_eq!(
        (read_values(&s, &s.a).await, read_values(&s, &s.b).await),
        before
    );
    assert_eq!(s.meta.garbage().await.unwrap().len(), 10);

    // The merged file is a valid file in the ingest format, one chunk per
    // partition, offsets already real.
    let merged = s
        .store
        .get(&ObjectPath::from(job.key.as_str()))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let file = IngestFile::parse(merged).unwrap();
    assert_eq!(file.entries().len(), 2);
    assert_eq!(file.entries()[0].batch_count, 10);
    let chunk = file.chunk(&file.entries()[0]);
    assert_eq!(RecordBatch::parse_all(&chunk).unwrap()[9].base_offset(), 27);

    // Nothing left to do.
    let again = pass(&s, &policy(4)).await;
    assert!(again.merged.is_empty() && again.compacted.is_empty());
}

/// A cache in front of the store, as an agent's: answers the GETs that
/// name their object's size from the copies it holds (spoiled ones, when
/// told to).
#[derive(Default, Clone)]
struct Held {
    objects: Arc<std::sync::Mutex<HashMap<String, Bytes>>>,
    spoiled: bool,
}

impl Held {
    async fn keep_every_object(&self, store: &Arc<dyn ObjectStore>) {
        let listed: Vec<_> = futures::StreamExt::collect(store.list(None)).await;
        for meta in listed {
            let path = meta.unwrap().location;
            let bytes = store.get(&path).await.unwrap().bytes().await.unwrap();
            self.objects.lock().unwrap().insert(path.to_string(), bytes);
        }
    }
}

#[async_trait::async_trait]
impl floe_storage::hooked::Hooks for Held {
    async fn serve_get(
        &self,
        location: &ObjectPath,
        options: &object_store::GetOptions,
    ) -> Option<object_store::GetResult> {
        let floe_storage::sized::ObjectSize(size) = *options.extensions.get()?;
        let Some(object_store::GetRange::Bounded(range)) = options.range.clone() else {
            return None;
        };
        let object = self.objects.lock().unwrap().get(location.as_ref())?.clone();
        let mut bytes = BytesMut::from(&object[range.start as usize..range.end as usize]);
        if self.spoiled {
            // The last byte of a batch's records: its CRC no longer holds.
            let last = bytes.len() - 1;
            bytes[last] ^= 0xff;
        }
        let answer = floe_storage::sized::answer(location, size, range, bytes.freeze());
        Some(answer)
    }
}

/// Compaction reads the ingest files a cache in front of the store holds
/// from it, sending the store no GET; bytes the cache holds wrong are read
/// from the store instead, and nothing is lost.
#[tokio::test]
async fn a_job_reads_ingest_files_from_a_cache_in_front_of_the_store() {
    for spoiled in [false, true] {
        let mut s = setup(10).await;
        let before = values_of(&s).await;
        let held = Held {
            spoiled,
            ..Held::default()
        };
        held.keep_every_object(&s.store).await;
        let gets = CountGets::default();
        let counted = floe_storage::hooked::HookedStore::new(s.store.clone(), gets.clone());
        s.store = Arc::new(floe_storage::hooked::HookedStore::new(
            Arc::new(counted),
            held.clone(),
        ));

        let done = pass(&s, &policy(4)).await;
        let job = &done.merged[0];
        assert_eq!((job.files, job.runs, job.swapped), (10, 2, 2));
        // The spoiled byte lies in b's chunk, the last of each file: b's
        // run alone is read again from the store, a GET per file.
        assert_eq!(
            gets.since(),
            if spoiled { 10 } else { 0 },
            "spoiled: {spoiled}"
        );
        assert_eq!(values_of(&s).await, before, "spoiled: {spoiled}");

        // Then each partition's merged chunk into a segment (it is old), read
        // from the cache too: again a GET only for bytes the cache holds wrong.
        held.keep_every_object(&s.store).await;
        gets.since();
        let aged = CompactionPolicy {
            max_age: Duration::ZERO,
            ..policy(4)
        };
        let done = pass(&s, &aged).await;
        assert_eq!(done.compacted.len(), 2, "spoiled: {spoiled}");
        assert_eq!(
            gets.since(),
            if spoiled { 2 } else { 0 },
            "spoiled: {spoiled}"
        );
        assert_eq!(values_of(&s).await, before, "spoiled: {spoiled}");
    }
}

/// Every record of `a` and of `b`, with its offset.
async fn values_of(s: &Setup) -> (Vec<(i64, String)>, Vec<(i64, String)>) {
    (read_values(s, &s.a).await, read_values(s, &s.b).await)
}

#[tokio::test]
async fn few_young_files_wait_and_old_ones_do_not() {
    let s = setup(3).await;
    let mut p = policy(8);
    p.max_age = Duration::from_secs(3600);
    assert!(
        pass(&s, &p).await.merged.is_empty(),
        "3 young files wait for 8"
    );
    p.max_age = Duration::ZERO;
    let done = pass(&s, &p).await;
    assert_eq!(done.merged.len(), 1, "old files are compacted however few");
    // The three files, and the merged file: each partition's lone chunk in
    // it is old too, so it went into a segment of its own.
    assert_eq!(done.compacted.len(), 2);
    assert_eq!(s.meta.garbage().await.unwrap().len(), 4);
}

#[tokio::test]
async fn a_job_holds_at_most_job_bytes() {
    let s = setup(10).await;
    let size = s
        .meta
        .compaction_work(merge::work(&policy(1), 1))
        .await
        .unwrap()
        .files[0]
        .size;
    let mut p = policy(1);
    p.job_bytes = size * 3;
    let done = pass(&s, &p).await;
    // 3 + 3 + 3 + 1 files.
    assert_eq!(
        done.merged.iter().map(|m| m.files).collect::<Vec<_>>(),
        vec![3, 3, 3, 1]
    );
    assert_eq!(read_values(&s, &s.a).await.len(), 30);
}

#[tokio::test]
async fn chunks_of_merged_files_are_merged_into_a_segment() {
    let s = setup(1).await;
    let mut p = policy(3);
    p.max_chunks = 3;
    // A job for every file; chunks not merged (not many, not old).
    let mut young = policy(1);
    young.max_chunks = 1_000;
    // Four jobs of one file each: four merged files, four chunks per partition.
    for n in 0..4 {
        commit_alone(&s, &s.a, 1).await;
        let done = pass(&s, &young).await;
        assert_eq!(done.merged.len(), 1, "job {n}");
    }
    let before = read_values(&s, &s.a).await;
    // (The first job took setup's file too.)
    let plan = s.meta.read_plan(s.a.id, 0, 0, u64::MAX).await.unwrap();
    assert_eq!(plan.extents.len(), 4);

    let done = pass(&s, &p).await;
    assert_eq!(done.compacted.len(), 1, "a's chunks merged: {done:?}");
    let plan = s.meta.read_plan(s.a.id, 0, 0, u64::MAX).await.unwrap();
    assert_eq!(plan.extents.len(), 1);
    assert!(plan.extents[0].object_key.starts_with("segment/"));
    assert_eq!(read_values(&s, &s.a).await, before);
    // b's one chunk is not worth a segment.
    let plan = s.meta.read_plan(s.b.id, 0, 0, u64::MAX).await.unwrap();
    assert!(plan.extents[0].object_key.starts_with("merged/"));
}

#[tokio::test]
async fn large_segments_are_cut_into_small_extents() {
    let s = setup(10).await;
    let before = read_values(&s, &s.a).await;
    // Each batch is well over 1 byte: every batch becomes its own extent.
    let mut p = policy(4);
    p.extent_bytes = 1;
    let done = pass(&s, &p).await;
    let plan = s.meta.read_plan(s.a.id, 0, 0, u64::MAX).await.unwrap();
    assert_eq!(plan.extents.len(), 10);
    assert!(
        plan.extents
            .iter()
            .all(|e| e.object_key == done.merged[0].key)
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
    let mut gc = Gc::new(Duration::ZERO);
    assert!(gc.run_once(&s.store, &s.meta).await.unwrap().is_empty());
    pass(&s, &policy(2)).await;
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
    pass(&s, &policy(2)).await;
    let mut gc = Gc::new(Duration::from_secs(3600));
    assert!(gc.run_once(&s.store, &s.meta).await.unwrap().is_empty());
    assert_eq!(s.meta.garbage().await.unwrap().len(), 3);
}

/// Commits `files` ingest files holding one batch of `topic` each, and
/// returns their keys.
async fn commit_alone(s: &Setup, topic: &TopicInfo, files: usize) -> Vec<ObjectPath> {
    let mut keys = Vec::new();
    for n in 0..files {
        keys.push(commit_claiming(s, topic, &format!("{}-{n}", topic.name), 0).await);
    }
    keys
}

/// Commits one ingest file holding one batch of `topic` with `value`, its
/// extent claiming `short` bytes fewer than the batch has.
async fn commit_claiming(s: &Setup, topic: &TopicInfo, value: &str, short: u32) -> ObjectPath {
    let batch = encode(&[value.to_string()], Compression::None);
    commit_batch(s, topic, batch, 1, short).await
}

/// Commits one ingest file holding `batch` (of `record_count` records) to
/// `topic`'s partition 0, its extent claiming `short` bytes fewer than the
/// batch has.
async fn commit_batch(
    s: &Setup,
    topic: &TopicInfo,
    batch: Bytes,
    record_count: i32,
    short: u32,
) -> ObjectPath {
    let mut writer = IngestWriter::new();
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
                length: entry.length - short,
                record_count,
                max_timestamp: 1_000,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            }],
            not_before_ms: s.meta.clock().await.unwrap(),
        })
        .await
        .unwrap();
    key
}

/// A run that cannot be read is left where it was; the job goes on with the
/// others, and the pass with its other work.
#[tokio::test]
async fn a_broken_run_does_not_stop_the_job() {
    let s = setup(3).await;
    let broken = topic(&s.meta, "c").await;
    // c's extent claims a byte less than its file's batch holds.
    let key = commit_claiming(&s, &broken, "c", 1).await;
    let done = pass(&s, &policy(2)).await;
    assert_eq!(
        (done.merged[0].runs, done.merged[0].swapped),
        (2, 2),
        "a and b moved"
    );
    let garbage = s.meta.garbage().await.unwrap();
    assert_eq!(
        garbage.len(),
        3,
        "the three files of a and b freed, c's kept"
    );
    assert!(!garbage.contains(&key.to_string()));
}

/// A file that cannot be read leaves its extents where they are; the job
/// moves the rest, and a job that could move nothing ends the pass's jobs.
#[tokio::test]
async fn an_unreadable_file_does_not_stop_the_job() {
    let s = setup(4).await;
    let first = s
        .meta
        .compaction_work(merge::work(&policy(1), 1))
        .await
        .unwrap()
        .files[0]
        .key
        .clone();
    s.store
        .delete(&ObjectPath::from(first.as_str()))
        .await
        .unwrap();
    let counters = Counters::default();
    let now_ms = s.meta.clock().await.unwrap();
    let done = compact_all(
        &s.store,
        &s.meta,
        &policy(2),
        None,
        0,
        &counters,
        now_ms,
        &RandomIds,
        &s.looks,
    )
    .await
    .unwrap();
    // The three readable files moved; the lost one's extents could not.
    assert_eq!(done.merged.len(), 1);
    assert_eq!((done.merged[0].runs, done.merged[0].swapped), (2, 2));
    assert_eq!(s.meta.garbage().await.unwrap().len(), 3);
    assert!(counters.compaction_failures.get() >= 1);
    // The next pass finds only the lost file: one job, nothing moved, no
    // file written, and no second job.
    let mut p = policy(1);
    p.max_age = Duration::ZERO;
    let merged_files =
        || futures::StreamExt::count(s.store.list(Some(&ObjectPath::from("merged"))));
    let before = merged_files().await;
    let again = compact_all(
        &s.store, &s.meta, &p, None, 0, &counters, now_ms, &RandomIds, &s.looks,
    )
    .await
    .unwrap();
    assert_eq!(again.merged.len(), 1);
    assert_eq!((again.merged[0].runs, again.merged[0].swapped), (0, 0));
    assert_eq!(merged_files().await, before);
}

#[test]
fn plan_takes_runs_of_small_merged_chunks_within_the_size_limit() {
    let extent = |base: i64, key: &str, length: u64| ExtentRef {
        appended_ms: 1_000 + base,
        base_offset: base,
        last_offset: base,
        max_timestamp: 0,
        object_key: key.into(),
        object_size: 100,
        position: 0,
        length,
    };
    let extents = vec![
        extent(0, "segment/x", 10),
        extent(1, "merged/1", 10),
        extent(2, "segment/y", 10),
        extent(3, "merged/3", 10),
        extent(4, "merged/4", 10),
        extent(5, "merged/5", 10),
        extent(6, "segment/6", 100),
        extent(7, "merged/7", 10),
    ];
    let policy = CompactionPolicy {
        min_extents: 2,
        max_segment_bytes: 60,
        extent_bytes: u64::MAX,
        max_chunks: 1_000,
        max_age: Duration::from_secs(3600),
        ..CompactionPolicy::default()
    };
    let offsets =
        |run: Option<Vec<ExtentRef>>| run.map(|r| r.iter().map(|e| e.base_offset).collect());
    // The lone chunk at 1 cannot grow (a segment follows it): merged at
    // once, small as it is. (The segments are each alone: not worth
    // merging.)
    assert_eq!(
        offsets(plan(&extents, &policy, 2_000, i64::MAX)),
        Some(vec![1])
    );
    // Chunks wait for half a segment, 30 bytes: the three in a row make it.
    let run = plan(&extents[2..], &policy, 2_000, i64::MAX).unwrap();
    assert_eq!(
        run.iter().map(|e| e.base_offset).collect::<Vec<_>>(),
        vec![3, 4, 5]
    );
    // Larger segments: three chunks of 10 bytes at the end, which newer
    // chunks may still join, are not worth one...
    let larger = CompactionPolicy {
        max_segment_bytes: 800,
        ..policy
    };
    let open_end = &extents[2..6];
    assert_eq!(plan(open_end, &larger, 2_000, i64::MAX), None);
    // ...unless they are many, or old.
    let few = CompactionPolicy {
        max_chunks: 3,
        ..larger
    };
    assert_eq!(
        plan(open_end, &few, 2_000, i64::MAX).map(|r| r.len()),
        Some(3)
    );
    let old_ms = 1_000 + 3 + 3_600_000;
    let old_run = |extents: &[ExtentRef]| offsets(plan(extents, &larger, old_ms, i64::MAX));
    assert_eq!(old_run(open_end), Some(vec![3, 4, 5]));
    // A run the size limit or the span limit ends cannot grow: merged at
    // once. (A chunk of 85 bytes after one of 10 does not fit in 88; chunks
    // appended more than the span apart do not share a segment.)
    let of_88 = CompactionPolicy {
        max_segment_bytes: 88,
        ..larger
    };
    let sized = vec![extent(0, "merged/0", 10), extent(1, "merged/1", 85)];
    assert_eq!(
        offsets(plan(&sized, &of_88, 2_000, i64::MAX)),
        Some(vec![0])
    );
    let spanned = vec![extent(0, "merged/0", 10), extent(100, "merged/1", 10)];
    assert_eq!(offsets(plan(&spanned, &larger, 2_000, 50)), Some(vec![0]));
    assert_eq!(plan(&spanned, &larger, 2_000, 500), None);
    // Pieces of one chunk count as one: a lone chunk is left as it is,
    // until it is old (it may be all that keeps its merged file).
    let one_file = vec![extent(0, "merged/1", 1), extent(1, "merged/1", 1)];
    assert_eq!(plan(&one_file, &few, 2_000, i64::MAX), None);
    assert_eq!(
        plan(&one_file, &few, old_ms, i64::MAX).map(|r| r.len()),
        Some(2)
    );
    // A segment stops growing at max_segment_bytes.
    let many: Vec<_> = (0..12)
        .map(|n| extent(n, &format!("merged/{n}"), 10))
        .collect();
    let tight = CompactionPolicy {
        max_segment_bytes: 88,
        ..few
    };
    assert_eq!(
        plan(&many, &tight, 2_000, i64::MAX).map(|r| r.len()),
        Some(8)
    );
}

#[test]
fn plan_bounds_a_partitions_segments() {
    // A chunk of `length` bytes of the object `key`, appended at `ms`.
    let extent = |base: i64, key: &str, length: u64, ms: i64| ExtentRef {
        appended_ms: ms,
        base_offset: base,
        last_offset: base,
        max_timestamp: 0,
        object_key: key.into(),
        object_size: 1_000,
        position: 0,
        length,
    };
    // A segment as compaction names it, its oldest data appended at `first`.
    let segment = |base: i64, length: u64, first: i64, newest: i64| {
        let key = format!("segment/00/t/0/{base:020}-a{first}-{base}");
        extent(base, &key, length, newest)
    };
    let small = |base: i64, length: u64| segment(base, length, 1_000, 1_000);
    let offsets = |run: Option<Vec<ExtentRef>>| {
        run.map(|r| r.iter().map(|e| e.base_offset).collect::<Vec<_>>())
    };
    // Segments of 800 bytes: small merged chunks are under 100 bytes, small
    // segments under 400; 4 in a row are many, and tiers grow by 4 (10
    // bytes is tier 1, 40 tier 2, 200 and 250 tier 3).
    let policy = CompactionPolicy {
        max_segment_bytes: 800,
        max_chunks: 4,
        max_age: Duration::from_secs(3600),
        ..CompactionPolicy::default()
    };
    let plan_at = |extents: &[ExtentRef]| offsets(plan(extents, &policy, 2_000, i64::MAX));
    // A large chunk of a merged file becomes a segment at once, alone: its
    // 1 MiB extents must not stay.
    let large = vec![
        small(0, 500),
        extent(1, "merged/1", 300, 1_000),
        extent(2, "merged/1", 300, 1_000),
    ];
    assert_eq!(plan_at(&large), Some(vec![1, 2]));
    // Small segments in a row merge once they make half a segment...
    let halves = vec![small(0, 500), small(1, 250), small(2, 250), small(3, 10)];
    assert_eq!(plan_at(&halves), Some(vec![1, 2, 3]));
    // ...or hold `many` of one tier; a few small ones, however old, wait: a
    // quiet partition's segments are not rewritten every pass.
    let few: Vec<_> = (0..3).map(|n| small(n, 10)).collect();
    assert_eq!(plan_at(&few), None);
    assert_eq!(offsets(plan(&few, &policy, i64::MAX, i64::MAX)), None);
    let many: Vec<_> = (0..4).map(|n| small(n, 10)).collect();
    assert_eq!(plan_at(&many), Some(vec![0, 1, 2, 3]));
    // Tiers: small segments merge among themselves, not into a larger one
    // before them (which would be rewritten for every few new bytes)...
    let mut tiered = vec![small(0, 200)];
    tiered.extend((1..5).map(|n| small(n, 10)));
    assert_eq!(plan_at(&tiered), Some(vec![1, 2, 3, 4]));
    // ...which waits for `many` of its own tier (or half a segment).
    let waiting = vec![small(0, 200), small(1, 40), small(2, 40), small(3, 40)];
    assert_eq!(plan_at(&waiting), None);
    // Mixed tiers none of which outweighs the rest merge once `many`, so
    // small segments of alternating sizes do not pile up.
    let mixed_tiers: Vec<_> = (0..12)
        .map(|n| small(n, if n % 4 == 3 { 40 } else { 10 }))
        .collect();
    assert_eq!(plan_at(&mixed_tiers).map(|r| r.len()), Some(12));
    // Segments written before the offset index (several extents) are left
    // as they are, and do not join runs.
    let v1 = vec![
        small(0, 10),
        small(1, 10),
        extent(2, "segment/v1", 10, 1_000),
        extent(3, "segment/v1", 10, 1_000),
        small(4, 10),
        small(5, 10),
    ];
    assert_eq!(plan_at(&v1), None);
    // A run spans at most `max_span_ms` from its oldest append to its
    // newest (segment.ms), as the segments' keys and extents tell.
    let spread: Vec<_> = (0..4)
        .map(|n| segment(n, 10, n * 10, n * 10 + 10))
        .collect();
    assert_eq!(
        offsets(plan(&spread, &policy, 2_000, 40)),
        Some(vec![0, 1, 2, 3])
    );
    assert_eq!(offsets(plan(&spread, &policy, 2_000, 39)), None);
    // Merged chunks go first; segments merge up to a whole segment.
    let mixed: Vec<_> = (0..10)
        .map(|n| small(n, 200))
        .chain([
            extent(10, "merged/x", 5, 1_000),
            extent(11, "merged/y", 500, 1_000),
        ])
        .collect();
    assert_eq!(plan_at(&mixed), Some(vec![10, 11]));
    assert_eq!(plan_at(&mixed[..10]), Some(vec![0, 1, 2, 3]));
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
    let p = policy(4);
    let worker = |holder: &str| Worker {
        holder: holder.into(),
        lease: std::time::Duration::from_secs(60),
    };
    let (a, b) = (worker("agent-a"), worker("agent-b"));
    let now_ms = s.meta.clock().await.unwrap();
    let run = |w: &Worker| {
        let w = Worker {
            holder: w.holder.clone(),
            lease: w.lease,
        };
        let (store, meta) = (s.store.clone(), s.meta.clone());
        async move {
            compact_all(
                &store,
                &meta,
                &p,
                Some(&w),
                0,
                &Counters::default(),
                now_ms,
                &RandomIds,
                &KeptLooks::default(),
            )
            .await
            .unwrap()
        }
    };
    // Agent a is busy with the ingest files.
    assert!(a.lease(&s.meta, "compact/ingest").await.unwrap());
    let objects_before = futures::StreamExt::count(s.store.list(None)).await;
    assert!(run(&b).await.merged.is_empty(), "b must not take a's job");
    assert_eq!(
        futures::StreamExt::count(s.store.list(None)).await,
        objects_before,
        "b uploaded nothing"
    );
    // Once a is done (its lease released), b may take the job...
    s.meta
        .release_lease("compact/ingest".into(), "agent-a".into())
        .await
        .unwrap();
    assert_eq!(run(&b).await.merged.len(), 1);
    // ...and it released its own lease: a can lease the job again.
    assert!(a.lease(&s.meta, "compact/ingest").await.unwrap());

    // A partition's merge is leased on its own.
    let tp_job = format!("compact/{}/0", s.a.id);
    assert!(a.lease(&s.meta, &tp_job).await.unwrap());
    assert_eq!(
        compact_partition(
            &s.store,
            &s.meta,
            s.a.id,
            0,
            &p,
            Some(&b),
            (now_ms, i64::MAX),
            &RandomIds
        )
        .await
        .unwrap(),
        None,
        "b must not merge a's partition"
    );
}

/// Commits one ingest file holding one batch of `records` (key, value) to
/// `topic`'s partition 0.
async fn commit_records(s: &Setup, topic: &TopicInfo, records: &[(Option<&str>, Option<&str>)]) {
    let batch = encode_batch(0, records, Compression::None);
    commit_batch(s, topic, batch, records.len() as i32, 0).await;
}

/// A compacted topic "table" that cleans whatever is dirty (its records
/// are tiny, next to which the empty batches keeping offsets tiled weigh
/// much), with `more` configs.
async fn compacted_table(s: &Setup, more: &[(&str, &str)]) -> TopicInfo {
    let mut configs: std::collections::BTreeMap<String, String> = [
        ("cleanup.policy".to_string(), "compact".to_string()),
        ("min.cleanable.dirty.ratio".to_string(), "0.01".to_string()),
    ]
    .into();
    configs.extend(more.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    s.meta
        .create_topic(NewTopic {
            name: "table".into(),
            partitions: 1,
            configs,
        })
        .await
        .unwrap()
}

/// `files` ingest files of five records each, record n keyed `k{n % keys}`
/// with the value `k{key}:{n}`; each key's latest value.
async fn write_keyed(
    s: &Setup,
    table: &TopicInfo,
    files: usize,
    keys: usize,
) -> std::collections::BTreeMap<String, String> {
    let mut latest = std::collections::BTreeMap::new();
    for n in 0..files {
        let rows: Vec<(String, String)> = (n * 5..n * 5 + 5)
            .map(|offset| {
                let key = format!("k{}", offset % keys);
                (key.clone(), format!("{key}:{offset}"))
            })
            .collect();
        for (k, v) in &rows {
            latest.insert(k.clone(), v.clone());
        }
        let records: Vec<_> = rows
            .iter()
            .map(|(k, v)| (Some(k.as_str()), Some(v.as_str())))
            .collect();
        commit_records(s, table, &records).await;
    }
    latest
}

/// A compacted partition larger than what key compaction holds at once,
/// with more keys than its map takes: it is cleaned group by group, over
/// several passes, into several keyed segments, and ends holding each
/// key's latest value and nothing else (the 512 MiB limit it replaces left
/// such a partition uncleaned for ever).
#[tokio::test]
async fn a_partition_larger_than_a_group_is_cleaned_in_groups_and_passes() {
    let s = setup(0).await;
    let table = compacted_table(&s, &[]).await;
    let latest = write_keyed(&s, &table, 40, 16).await;
    let policy = CompactionPolicy {
        min_extents: 1,
        // A few batches per group, a batch per extent, 8 keys per pass.
        max_segment_bytes: 400,
        keyed_group_bytes: 400,
        extent_bytes: 1,
        max_cleaner_keys: 8,
        ..CompactionPolicy::default()
    };
    let mut keyed_passes = 0;
    let mut most_segments = 0;
    for _ in 0..100 {
        let done = pass(&s, &policy).await;
        let plan = s.meta.read_plan(table.id, 0, 0, u64::MAX).await.unwrap();
        let segments: std::collections::BTreeSet<_> = plan
            .extents
            .iter()
            .filter(|e| floe_storage::keys::is_keyed_segment(&e.object_key))
            .map(|e| e.object_key.clone())
            .collect();
        most_segments = most_segments.max(segments.len());
        if done.compacted.is_empty() && done.merged.is_empty() {
            break;
        }
        keyed_passes += usize::from(!done.compacted.is_empty());
    }
    let values: Vec<String> = read_values(&s, &table)
        .await
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    let mut want: Vec<String> = latest.into_values().collect();
    want.sort_by_key(|v| v.split(':').nth(1).unwrap().parse::<i64>().unwrap());
    assert_eq!(values, want, "each key's latest value, in offset order");
    assert!(
        keyed_passes >= 3,
        "the map's bound made it take passes: {keyed_passes}"
    );
    assert!(most_segments >= 2, "groups made segments: {most_segments}");
    // The offsets still tile the partition: the next offset is where it was.
    let offsets = s.meta.offsets(table.id, 0).await.unwrap();
    assert_eq!(offsets.high_watermark, 200);
}

/// A key compaction whose later group lost its compare-and-set (the
/// partition changed under it) keeps the groups it swapped and stops there:
/// every key's latest value is still read, and a later pass finishes.
#[tokio::test]
async fn a_lost_swap_in_a_later_group_loses_nothing() {
    let s = setup(0).await;
    // Not cleaned until the test says so.
    let table = compacted_table(&s, &[("min.compaction.lag.ms", "86400000")]).await;
    let latest = write_keyed(&s, &table, 12, 7).await;
    let policy = CompactionPolicy {
        min_extents: 1,
        max_segment_bytes: 400,
        keyed_group_bytes: 400,
        extent_bytes: 1,
        ..CompactionPolicy::default()
    };
    pass(&s, &policy).await; // ingest files merged, nothing cleaned
    s.meta
        .alter_topic_configs(
            "table",
            [("min.compaction.lag.ms".into(), "0".into())].into(),
            vec![],
        )
        .await
        .unwrap();
    let table = s.meta.topic("table").await.unwrap().unwrap();
    let run = s
        .meta
        .read_plan(table.id, 0, 0, u64::MAX)
        .await
        .unwrap()
        .extents;
    assert!(
        run.iter()
            .all(|e| !floe_storage::keys::is_keyed_segment(&e.object_key))
    );
    // The last three extents change under the cleaner (as a merge would).
    let tail = run[run.len() - 3..].to_vec();
    let batches = read_run(&s.store, &tail).await.unwrap();
    let segment = floe_storage::keys::new_segment_key(
        table.id,
        0,
        tail[0].base_offset,
        0,
        RandomIds.next_id(),
    );
    swap_in(
        &s.store,
        &s.meta,
        (table.id, 0),
        &policy,
        tail.clone(),
        &batches,
        segment,
    )
    .await
    .unwrap()
    .expect("the tail moved");

    let now_ms = s.meta.clock().await.unwrap();
    let cleaner = keyed::Cleaner {
        store: &s.store,
        meta: &s.meta,
        topic: &table,
        partition: 0,
        policy: &policy,
        now_ms,
        counters: &Counters::default(),
        ids: &RandomIds,
        lease: None,
    };
    let done = cleaner
        .clean(run)
        .await
        .unwrap()
        .expect("the first groups swapped");
    assert!(
        done.last_offset < tail[0].base_offset,
        "stopped at the lost swap: {done:?}"
    );
    let values: std::collections::BTreeSet<String> = read_values(&s, &table)
        .await
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    for v in latest.values() {
        assert!(values.contains(v), "{v} lost: {values:?}");
    }
    assert!(values.len() < 60, "the first groups were cleaned");
    assert_eq!(
        s.meta.offsets(table.id, 0).await.unwrap().high_watermark,
        60
    );

    for _ in 0..20 {
        let done = pass(&s, &policy).await;
        if done.compacted.is_empty() && done.merged.is_empty() {
            break;
        }
    }
    let mut values: Vec<String> = read_values(&s, &table)
        .await
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    values.sort();
    let mut want: Vec<String> = latest.into_values().collect();
    want.sort();
    assert_eq!(values, want);
}

/// Issue 12's figure: a partition's extents stay bounded under a long steady
/// produce with compaction on, whatever the bytes retained. Segments are one
/// extent each (their offset index takes readers inside), and small segments
/// are merged further, so the count follows retained bytes over half a
/// segment, plus a few small ones: before, it grew by an extent per segment
/// written (and per 1 MiB of each), for ever.
#[tokio::test]
async fn a_partitions_extents_stay_bounded_under_steady_produce() {
    // A quiet partition (a merged chunk of about a twentieth of a segment
    // each pass), then a busy one (about a fifth each pass, so merged chunks
    // become segments every few passes beside the segments' own merges).
    steady_produce(3, 250).await;
    steady_produce(6, 600).await;
}

async fn steady_produce(records_per_pass: usize, value_bytes: usize) {
    let s = setup(0).await;
    let policy = CompactionPolicy {
        min_extents: 2,
        max_segment_bytes: 16 << 10,
        max_chunks: 4,
        max_age: Duration::from_secs(3600),
        index_interval: 1 << 10,
        ..CompactionPolicy::default()
    };
    let value = "v".repeat(value_bytes);
    let (mut most, mut written, mut rewritten) = (0usize, Vec::new(), 0u64);
    for round in 0..240 {
        let records: Vec<String> = (0..records_per_pass)
            .map(|i| format!("{round}-{i}-{value}"))
            .collect();
        let pairs: Vec<_> = records.iter().map(|v| (None, Some(v.as_str()))).collect();
        commit_records(&s, &s.a, &pairs).await;
        written.extend(records);
        let done = pass(&s, &policy).await;
        rewritten += done.merged.iter().map(|m| m.bytes).sum::<u64>();
        rewritten += done.compacted.iter().map(|c| c.bytes).sum::<u64>();
        let plan = s.meta.read_plan(s.a.id, 0, 0, u64::MAX).await.unwrap();
        most = most.max(plan.extents.len());
    }
    let plan = s.meta.read_plan(s.a.id, 0, 0, u64::MAX).await.unwrap();
    let retained: u64 = plan.extents.iter().map(|e| e.length).sum();
    // Eleven segments' worth or more retained, so a bound of a few extents
    // per segment would not hold by accident.
    assert!(retained > 11 * policy.max_segment_bytes, "{retained}");
    let bound = (retained / (policy.max_segment_bytes / 2)) as usize + 2 * policy.max_chunks + 2;
    assert!(
        most <= bound,
        "{most} extents at most, against a bound of {bound} for {retained} bytes"
    );
    // Every segment is one extent, with an index that holds.
    let mut segments = 0;
    for extents in plan.extents.chunk_by(|a, b| a.object_key == b.object_key) {
        if !extents[0]
            .object_key
            .starts_with(floe_storage::keys::SEGMENT_PREFIX)
        {
            continue;
        }
        segments += 1;
        assert_eq!(extents.len(), 1, "a segment is one extent");
        let path = ObjectPath::from(extents[0].object_key.as_str());
        let file = s.store.get(&path).await.unwrap().bytes().await.unwrap();
        let file = IngestFile::parse(file).unwrap();
        assert!(file.offset_index().unwrap().entries().len() > 1);
        file.check_offset_index().unwrap();
    }
    assert!(segments >= 2, "{segments} segments");
    // Each byte is written a few times (a merged file, then once a tier),
    // not once per segment written after it.
    let amplification = rewritten as f64 / retained as f64;
    assert!(amplification < 6.0, "{amplification}");
    println!(
        "{most} extents at most, {} at the end ({segments} segments), {retained} bytes retained, \
         compaction wrote {amplification:.1} times them",
        plan.extents.len()
    );
    // And nothing was lost or moved.
    let read: Vec<(i64, String)> = read_values(&s, &s.a).await;
    let want: Vec<(i64, String)> = written
        .into_iter()
        .enumerate()
        .map(|(n, v)| (n as i64, v))
        .collect();
    assert_eq!(read, want);
}

/// Passes until one does nothing; how many did something.
async fn passes_until_idle(s: &Setup, policy: &CompactionPolicy) -> usize {
    for n in 0..50 {
        let done = pass(s, policy).await;
        if done.compacted.is_empty() && done.merged.is_empty() {
            return n;
        }
    }
    panic!("compaction never settled");
}

/// A compacted partition nothing changed costs a pass its look's mark: the
/// metastore answers "unchanged", and the look kept from the last pass is
/// judged again. New records change the mark, and are cleaned.
#[tokio::test]
async fn an_unchanged_compacted_partition_is_not_looked_at_again() {
    use floe_metastore::ops::LookSince;
    let s = setup(0).await;
    let table = compacted_table(&s, &[]).await;
    write_keyed(&s, &table, 6, 4).await;
    let policy = CompactionPolicy {
        min_extents: 1,
        ..CompactionPolicy::default()
    };
    assert!(passes_until_idle(&s, &policy).await > 0);
    let tp = TopicPartition::new(table.id, 0);
    let kept = s.looks.mark(&tp).expect("the last pass kept its look");
    let answers = s
        .meta
        .partition_looks_since(vec![(tp, Some(kept))])
        .await
        .unwrap();
    assert_eq!(answers, vec![Ok(LookSince::Unchanged)]);
    assert_eq!(s.looks.size().0, 1);

    commit_records(
        &s,
        &table,
        &[(Some("k0"), Some("new0")), (Some("k1"), Some("new1"))],
    )
    .await;
    let answers = s
        .meta
        .partition_looks_since(vec![(tp, Some(kept))])
        .await
        .unwrap();
    assert!(matches!(answers[..], [Ok(LookSince::Changed { .. })]));
    assert!(passes_until_idle(&s, &policy).await > 0);
    let values: Vec<String> = read_values(&s, &table)
        .await
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(values, ["k2:26", "k3:27", "new0", "new1"]);
    assert_ne!(s.looks.mark(&tp), Some(kept));
}

/// Kept looks stay within their limit: a look that does not fit is not
/// kept, and its partition is looked at whole every pass.
#[test]
fn kept_looks_stay_within_their_limit() {
    use floe_metastore::ops::{LookMark, PartitionLook};
    let looks = KeptLooks::with_limit(3);
    let mark = LookMark {
        high_watermark: 1,
        log_start_offset: 0,
        extents: 2,
        newest_object: 1,
        last_stable_offset: 1,
    };
    let extent = ExtentRef {
        base_offset: 0,
        last_offset: 0,
        max_timestamp: 0,
        object_key: "segment/x".into(),
        object_size: 1,
        position: 0,
        length: 1,
        appended_ms: 0,
    };
    let look = |n: usize| PartitionLook {
        extents: vec![extent.clone(); n],
        last_stable_offset: 1,
    };
    let tp = |n: i32| TopicPartition::new(floe_metastore::TopicId::from_u128(1), n);
    looks.keep(tp(0), mark, &look(2));
    looks.keep(tp(1), mark, &look(2));
    assert_eq!(looks.size(), (1, 2));
    assert_eq!(looks.mark(&tp(1)), None);
    // Replacing a look frees its extents first.
    looks.keep(tp(0), mark, &look(3));
    assert_eq!(looks.size(), (1, 3));
    looks.retain(|p| *p != tp(0));
    assert_eq!(looks.size(), (0, 0));
}
