//! Reading one extent's batches a window at a time, entering a large one
//! (a segment) through its object's offset index.
//!
//! A segment is one extent however large (up to `segment_bytes`), so a read
//! starting inside it must not read it from its start: [`ExtentReader`]
//! reads the object's footer and offset index (`floe_storage::segment_index`),
//! lands on the last entry at or before the offset (or timestamp) wanted,
//! and reads on in windows of about what its caller still wants, keeping
//! whole batches. The index is a hint, checked and never trusted: the batch
//! landed on must carry the entry's offset, and one that does not (or that
//! does not hold its CRC) sends the reader back to the extent's start.
//!
//! Where the bytes come from is a [`ByteRanges`]: the agent's block cache, or
//! in the simulation the bucket itself.

use std::future::Future;
use std::ops::Range;

use bytes::BytesMut;
use floe_cache::CacheError;
use floe_metastore::ExtentRef;
use floe_protocol::batch::{
    LOG_OVERHEAD, batches_hold, last_offset_of, patch_base_offsets, whole_batches_within,
};
use floe_storage::ingest::{FOOTER_LEN, Footer};
use floe_storage::segment_index::{IndexEntry, OffsetIndex, TRAILER_LEN};

/// An extent longer than this, read from inside, is entered through its
/// object's offset index (segments have one); a shorter one is read from
/// its start, whole. Extents of merged files and of segments written before
/// the index are about 1 MiB (a batch more at most), so they never look for
/// an index they do not have; a partition's extent in an ingest file can be
/// longer (up to `flush_bytes`), and then costs a look at its file's footer
/// (cached) to learn it has none.
pub const LAND_ABOVE: u64 = 2 * 1024 * 1024;
/// What the first read after landing takes beside what its caller wants:
/// enough to cross the gap between index entries (64 KiB by default) to
/// the offset wanted.
pub const LANDING_SLACK: u64 = 256 * 1024;
/// The least a read of a large extent takes: a batch's header at least, so
/// a batch longer than the window is known by its length.
pub const MIN_WINDOW: u64 = 16 * 1024;

/// Where a reader's bytes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Wherever they are kept: memory, disk, a peer, or the object store.
    Cache,
    /// The object store itself, for bytes found wrong.
    Store,
}

/// Byte ranges of objects.
pub trait ByteRanges {
    /// Bytes `range` of object `key` (of `object_size` bytes).
    fn read(
        &self,
        key: &str,
        object_size: u64,
        range: Range<u64>,
        source: Source,
    ) -> impl Future<Output = Result<BytesMut, CacheError>> + Send;
}

/// Reads one extent's batches, checked and with their offsets set, a window
/// at a time from where it starts or from where its object's offset index
/// lands it.
pub struct ExtentReader<'a, R> {
    ranges: &'a R,
    extent: &'a ExtentRef,
    land_above: u64,
    /// The next byte to read, at a batch boundary.
    position: u64,
    /// The offset of the batch at `position`.
    next_offset: i64,
    /// Set after landing through the index: the offset the batch at
    /// `position` must carry.
    landed: Option<i64>,
    /// Whether the index sent this reader to a batch it does not name (it
    /// then read from the extent's start).
    pub missed: bool,
}

impl<'a, R: ByteRanges + Sync> ExtentReader<'a, R> {
    pub fn new(ranges: &'a R, extent: &'a ExtentRef) -> Self {
        Self::landing_above(ranges, extent, LAND_ABOVE)
    }

    /// A reader landing through the index in extents longer than
    /// `land_above` (the simulation lands in every segment).
    pub fn landing_above(ranges: &'a R, extent: &'a ExtentRef, land_above: u64) -> Self {
        ExtentReader {
            ranges,
            extent,
            land_above,
            position: extent.position,
            next_offset: extent.base_offset,
            landed: None,
            missed: false,
        }
    }

    fn end(&self) -> u64 {
        self.extent.position + self.extent.length
    }

    /// Moves to the last index entry at or before `offset`, if the extent is
    /// large and its object has an index.
    pub async fn land_at_offset(&mut self, offset: i64) -> Result<(), CacheError> {
        if offset <= self.extent.base_offset || self.extent.length <= self.land_above {
            return Ok(());
        }
        let range = self.position..self.end();
        if let Some(entry) = self.index().await?.and_then(|i| i.by_offset(range, offset)) {
            self.land(entry);
        }
        Ok(())
    }

    /// Moves to the last index entry before which every batch is below
    /// `timestamp` or, if `from` lies further, to the last entry at or
    /// before `from` (if the extent is large and its object has an index):
    /// the first record at or past `from` reaching `timestamp` lies past it.
    pub async fn land_at_timestamp(&mut self, timestamp: i64, from: i64) -> Result<(), CacheError> {
        if self.extent.length <= self.land_above {
            return Ok(());
        }
        let Some(index) = self.index().await? else {
            return Ok(());
        };
        let range = self.position..self.end();
        let by_time = index.by_timestamp(range.clone(), timestamp);
        let by_offset = index.by_offset(range, from);
        if let Some(later) = by_time
            .into_iter()
            .chain(by_offset)
            .max_by_key(|e| e.position)
        {
            self.land(later);
        }
        Ok(())
    }

    fn land(&mut self, entry: IndexEntry) {
        self.position = entry.position;
        self.next_offset = entry.offset;
        self.landed = Some(entry.offset);
    }

    /// The offset index of the extent's object, read from its footer on.
    /// `None` for an object without one (version 1), or whose index fails
    /// its checks from the cache and from the store alike (logged: the
    /// reader then reads from the extent's start). A read that fails is an
    /// error, not a reason to read the whole extent.
    async fn index(&self) -> Result<Option<OffsetIndex>, CacheError> {
        for source in [Source::Cache, Source::Store] {
            match self.index_from(source).await? {
                Ok(index) => return Ok(index),
                Err(reason) => tracing::warn!(object = %self.extent.object_key, ?source, %reason,
                    "a segment's offset index fails its checks"),
            }
        }
        Ok(None)
    }

    async fn index_from(
        &self,
        source: Source,
    ) -> Result<Result<Option<OffsetIndex>, String>, CacheError> {
        let (key, size) = (self.extent.object_key.as_str(), self.extent.object_size);
        let tail_len = (FOOTER_LEN + TRAILER_LEN) as u64;
        let tail = self
            .ranges
            .read(key, size, size.saturating_sub(tail_len)..size, source)
            .await?;
        let footer = match Footer::parse(&tail) {
            Ok(footer) => footer,
            Err(e) => return Ok(Err(e.to_string())),
        };
        let location = match footer.offset_index(&tail, size) {
            Ok(Some(location)) => location,
            Ok(None) => return Ok(Ok(None)),
            Err(e) => return Ok(Err(e.to_string())),
        };
        let range = location.offset..location.offset + location.len();
        let bytes = self.ranges.read(key, size, range, source).await?;
        Ok(OffsetIndex::parse(&bytes, &location)
            .map(Some)
            .map_err(|e| e.to_string()))
    }

    /// The next whole batches, about `want` bytes of them (one at least,
    /// however long; an extent no longer than the landing threshold is read
    /// whole), checked and with offsets set; `None` at the extent's end.
    pub async fn next(&mut self, want: u64) -> Result<Option<BytesMut>, CacheError> {
        loop {
            if self.position >= self.end() {
                return Ok(None);
            }
            let size = match (self.extent.length <= self.land_above, self.landed) {
                (true, _) => self.end() - self.position,
                (false, Some(_)) => want.saturating_add(LANDING_SLACK),
                (false, None) => want.max(MIN_WINDOW),
            }
            .min(self.end() - self.position);
            // Bytes from memory, disk or a peer that are not whole batches
            // holding their CRCs, or that are not where the index said, are
            // read again from the object store.
            let mut found = None;
            for source in [Source::Cache, Source::Store] {
                match self.window(size, source).await? {
                    Some(window) if self.lands(&window) => {
                        found = Some(window);
                        break;
                    }
                    _ => {
                        tracing::error!(object = %self.extent.object_key, position = self.position, ?source,
                        landed = ?self.landed, "read bytes are not the batches stored")
                    }
                }
            }
            let Some(mut window) = found else {
                if self.landed.is_some() {
                    // The index sent us somewhere the store holds no such
                    // batch: it cannot be trusted; read from the start.
                    self.missed = true;
                    self.landed = None;
                    self.position = self.extent.position;
                    self.next_offset = self.extent.base_offset;
                    continue;
                }
                // The metastore's ranges always hold whole batches: never
                // hand out a torn one.
                return Err(CacheError::Load {
                    key: self.extent.object_key.clone(),
                    block: self.position,
                    reason: "the cached and the stored bytes both fail their batches' checks"
                        .into(),
                });
            };
            self.landed = None;
            patch_base_offsets(&mut window, self.next_offset);
            self.position += window.len() as u64;
            self.next_offset = last_offset_of(&window).map_or(self.next_offset, |last| last + 1);
            return Ok(Some(window));
        }
    }

    /// Whether `window` starts with the batch the index named, if it led
    /// here (a segment's batches carry their real base offsets).
    fn lands(&self, window: &[u8]) -> bool {
        let stored = window
            .get(..8)
            .map(|b| i64::from_be_bytes(b.try_into().expect("8")));
        self.landed.is_none_or(|offset| stored == Some(offset))
    }

    /// The whole batches of about `size` bytes from `position` (the first
    /// batch whole, however long), if they hold their CRCs.
    async fn window(&self, size: u64, source: Source) -> Result<Option<BytesMut>, CacheError> {
        let (key, object_size) = (self.extent.object_key.as_str(), self.extent.object_size);
        let end = self.end();
        let range = self.position..self.position + size;
        let at_end = range.end == end;
        let mut window = self.ranges.read(key, object_size, range, source).await?;
        let whole = match at_end {
            true => window.len(),
            false => whole_batches_within(&window, window.len(), false),
        };
        if whole == 0 && !at_end {
            // One batch longer than the window: read to its end.
            let Some(length) = first_batch_len(&window).filter(|&l| l <= end - self.position)
            else {
                return Ok(None);
            };
            let range = self.position..self.position + length;
            window = self.ranges.read(key, object_size, range, source).await?;
        } else {
            window.truncate(whole);
        }
        Ok(batches_hold(&window).then_some(window))
    }
}

/// The length of the batch `window` starts with, from its header.
fn first_batch_len(window: &[u8]) -> Option<u64> {
    let length = i32::from_be_bytes(window.get(8..12)?.try_into().ok()?);
    (length > 0).then(|| LOG_OVERHEAD as u64 + length as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use floe_protocol::batch::RecordBatch;
    use floe_protocol::kafka_protocol::records::{
        Compression, RecordBatchEncoder, RecordEncodeOptions,
    };
    use floe_protocol::testing::records;
    use floe_storage::ingest::IngestWriter;
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// Objects in memory, with bytes that lie where a test wants them to,
    /// counting what is read from each source.
    #[derive(Default)]
    struct Objects {
        objects: HashMap<String, Bytes>,
        /// Bytes the cache gets wrong: (object, position) -> byte.
        cache_lies: HashMap<(String, u64), u8>,
        read: Mutex<Vec<(Range<u64>, Source)>>,
    }

    impl ByteRanges for Objects {
        async fn read(
            &self,
            key: &str,
            _size: u64,
            range: Range<u64>,
            source: Source,
        ) -> Result<BytesMut, CacheError> {
            self.read.lock().unwrap().push((range.clone(), source));
            let object = &self.objects[key];
            let mut out = BytesMut::from(&object[range.start as usize..range.end as usize]);
            if source == Source::Cache {
                for ((k, at), byte) in &self.cache_lies {
                    if k == key && range.contains(at) {
                        out[(at - range.start) as usize] = *byte;
                    }
                }
            }
            Ok(out)
        }
    }

    /// A batch of `count` records of 100 bytes from `base`, stamped `ts + n`.
    fn batch(base: i64, count: i64, ts: i64) -> Bytes {
        let values = vec![vec![b'v'; 100]; count as usize];
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(&mut buf, &records(&values, ts), &options).unwrap();
        patch_base_offsets(&mut buf, base);
        buf.freeze()
    }

    /// A segment of 50 batches of 4 records (offsets 1000..1200), an index
    /// entry every 1,000 bytes, with its extent.
    fn segment() -> (Objects, ExtentRef) {
        let batches: Vec<Bytes> = (0..50).map(|n| batch(1000 + n * 4, 4, n * 10)).collect();
        let mut writer = IngestWriter::segment(1_000);
        let chunk = writer.add_chunk(uuid::Uuid::nil(), 0, &batches);
        let file = writer.finish();
        let extent = ExtentRef {
            base_offset: 1000,
            last_offset: 1199,
            max_timestamp: 493,
            object_key: "segment/s".into(),
            object_size: file.len() as u64,
            position: chunk.position,
            length: chunk.length as u64,
            appended_ms: 0,
        };
        let mut objects = Objects::default();
        objects.objects.insert("segment/s".into(), file);
        (objects, extent)
    }

    /// Every batch read from `from` on, `want` bytes at a time.
    async fn read_all(reader: &mut ExtentReader<'_, Objects>, want: u64) -> Vec<RecordBatch> {
        let mut out = Vec::new();
        while let Some(window) = reader.next(want).await.unwrap() {
            out.extend(RecordBatch::parse_all_stored(&window.freeze()).unwrap());
        }
        out
    }

    /// The base offsets of every batch of [`segment`].
    fn every_batch() -> Vec<i64> {
        (1000..1200).step_by(4).collect()
    }

    /// Where a reader of `extent` lands for `offset`.
    async fn landing(objects: &Objects, extent: &ExtentRef, offset: i64) -> u64 {
        let mut reader = ExtentReader::landing_above(objects, extent, 0);
        reader.land_at_offset(offset).await.unwrap();
        reader.position
    }

    fn offsets(batches: &[RecordBatch]) -> Vec<i64> {
        batches.iter().map(|b| b.base_offset()).collect()
    }

    #[tokio::test]
    async fn a_read_from_inside_lands_near_its_offset_and_reads_in_windows() {
        let (objects, extent) = segment();
        let mut reader = ExtentReader::landing_above(&objects, &extent, 0);
        reader.land_at_offset(1150).await.unwrap();
        let landed = reader.position;
        let batches = read_all(&mut reader, 500).await;
        // Landed at most an interval (1,000 bytes, under 5 batches) before.
        let first = batches[0].base_offset();
        assert!((1130..=1148).contains(&first), "landed at {first}");
        assert_eq!(
            offsets(&batches),
            (first..1200).step_by(4).collect::<Vec<_>>()
        );
        assert!(!reader.missed);
        // Nothing before the landing was read, and windows stayed small.
        let read = objects.read.lock().unwrap().clone();
        let data: Vec<_> = read
            .iter()
            .filter(|(r, _)| r.start < extent.length)
            .collect();
        assert!(
            data.iter()
                .all(|(r, s)| *s == Source::Cache && r.start >= landed)
        );
        assert!(
            data.iter()
                .all(|(r, _)| r.end - r.start <= 500 + LANDING_SLACK)
        );
        assert!(landed > extent.position + extent.length / 2);

        // A timestamp lands before the first batch reaching it.
        let mut reader = ExtentReader::landing_above(&objects, &extent, 0);
        reader.land_at_timestamp(305, 0).await.unwrap();
        let batches = read_all(&mut reader, 0).await;
        let at = batches
            .iter()
            .position(|b| b.max_timestamp() >= 305)
            .unwrap();
        assert!(at <= 5, "landed {at} batches before");
        assert_eq!(batches[at].base_offset(), 1000 + 31 * 4);
    }

    #[tokio::test]
    async fn reads_wanting_a_byte_still_get_whole_batches() {
        // (The simulation found windows of one byte reading nothing.)
        let (objects, extent) = segment();
        let mut reader = ExtentReader::landing_above(&objects, &extent, 0);
        let batches = read_all(&mut reader, 1).await;
        assert_eq!(offsets(&batches), every_batch());
        let mut reader = ExtentReader::landing_above(&objects, &extent, 0);
        reader.land_at_offset(1199).await.unwrap();
        assert_eq!(offsets(&read_all(&mut reader, 1).await).last(), Some(&1196));
    }

    #[tokio::test]
    async fn a_small_extent_is_read_whole_from_its_start() {
        let (objects, extent) = segment();
        let mut reader = ExtentReader::new(&objects, &extent);
        reader.land_at_offset(1150).await.unwrap();
        let batches = read_all(&mut reader, 1).await;
        assert_eq!(offsets(&batches), every_batch());
        assert_eq!(
            objects.read.lock().unwrap().len(),
            1,
            "no index read, one read"
        );
    }

    #[tokio::test]
    async fn an_index_pointing_at_the_wrong_batch_sends_the_reader_to_the_start() {
        let (mut objects, extent) = segment();
        // The batch the index lands on for 1150 carries another base offset
        // in the cache and in the store alike (outside its CRC).
        let landed = landing(&objects, &extent, 1150).await;
        let mut file = BytesMut::from(&objects.objects["segment/s"][..]);
        file[landed as usize + 7] ^= 1;
        objects.objects.insert("segment/s".into(), file.freeze());
        let mut reader = ExtentReader::landing_above(&objects, &extent, 0);
        reader.land_at_offset(1150).await.unwrap();
        let batches = read_all(&mut reader, 100_000).await;
        assert!(reader.missed);
        assert_eq!(offsets(&batches), every_batch());
    }

    #[tokio::test]
    async fn wrong_cached_bytes_are_read_again_from_the_store() {
        let (mut objects, extent) = segment();
        let landed = landing(&objects, &extent, 1150).await;
        // The cache's copy of the landed batch has another base offset, and
        // a later batch a flipped byte under its CRC.
        let stored = |at: u64| objects.objects["segment/s"][at as usize];
        let lies = [
            (landed + 7, stored(landed + 7) ^ 1),
            (landed + 300, stored(landed + 300) ^ 1),
        ];
        for (at, byte) in lies {
            objects.cache_lies.insert(("segment/s".into(), at), byte);
        }
        let mut reader = ExtentReader::landing_above(&objects, &extent, 0);
        reader.land_at_offset(1150).await.unwrap();
        let batches = read_all(&mut reader, 100_000).await;
        assert!(!reader.missed);
        let first = batches[0].base_offset();
        assert_eq!(
            offsets(&batches),
            (first..1200).step_by(4).collect::<Vec<_>>()
        );
        assert!(
            objects
                .read
                .lock()
                .unwrap()
                .iter()
                .any(|(_, s)| *s == Source::Store)
        );
    }

    #[tokio::test]
    async fn a_broken_index_is_not_used() {
        let (mut objects, extent) = segment();
        let file = objects.objects["segment/s"].clone();
        let footer = Footer::parse(&file).unwrap();
        let location = footer
            .offset_index(&file, file.len() as u64)
            .unwrap()
            .unwrap();
        // A flipped byte in the index fails its CRC, from both sources.
        let mut broken = BytesMut::from(&file[..]);
        broken[location.offset as usize + 3] ^= 1;
        objects.objects.insert("segment/s".into(), broken.freeze());
        let mut reader = ExtentReader::landing_above(&objects, &extent, 0);
        reader.land_at_offset(1150).await.unwrap();
        assert_eq!(reader.position, extent.position);
        let batches = read_all(&mut reader, 100_000).await;
        assert_eq!(batches.len(), 50);
        // A segment written before the index (version 1) reads from its start.
        let mut writer = IngestWriter::new();
        let raw: Vec<Bytes> = (0..50).map(|n| batch(1000 + n * 4, 4, n * 10)).collect();
        writer.add_chunk(uuid::Uuid::nil(), 0, &raw);
        objects.objects.insert("segment/s".into(), writer.finish());
        let v1 = ExtentRef {
            object_size: objects.objects["segment/s"].len() as u64,
            ..extent.clone()
        };
        let mut reader = ExtentReader::landing_above(&objects, &v1, 0);
        reader.land_at_offset(1150).await.unwrap();
        assert_eq!(read_all(&mut reader, 100_000).await.len(), 50);
    }
}
