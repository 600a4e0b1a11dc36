//! The ingest-file format (see `docs/ingest-format.md`).
//!
//! An ingest file holds chunks of raw Kafka record batches for many partitions,
//! each partition's chunk contiguous, followed by an index of the chunks and a
//! fixed-size footer. Compacted segments use the same format with a single
//! chunk. Readers serving fetches never need the index: the metastore records
//! where each chunk lies. The index exists so compaction, recovery and GC can
//! understand a file on their own.
//!
//! Version 2 adds an offset index ([`crate::segment_index`]) to segments, so a
//! segment can be described to the metastore as one extent however large it
//! is. Ingest and merged files stay version 1; both versions are read.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use uuid::Uuid;

use crate::segment_index::{self, IndexBuilder, IndexLocation, OffsetIndex};

/// `FLOEINGS`: identifies a floe ingest or segment file.
pub const MAGIC: [u8; 8] = *b"FLOEINGS";
/// Format version of ingest and merged files.
pub const VERSION: u16 = 1;
/// Format version of segments, which carry an offset index.
pub const INDEXED_VERSION: u16 = 2;
/// Where a batch's base offset and largest timestamp lie in its header.
const BASE_OFFSET_AT: usize = 0;
const MAX_TIMESTAMP_AT: usize = 35;
/// Size of the fixed footer at the end of every file.
pub const FOOTER_LEN: usize = 28;
/// Size of one index entry.
pub const ENTRY_LEN: usize = 40;

/// Where one partition's chunk lies in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkEntry {
    pub topic_id: Uuid,
    pub partition: i32,
    pub position: u64,
    pub length: u32,
    /// CRC32C of the chunk's bytes, so compaction can verify what it copies.
    pub crc: u32,
    /// Number of Kafka record batches in the chunk.
    pub batch_count: u32,
}

/// Why a file could not be read as an ingest file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("file of {0} bytes is too short for a footer")]
    TooShort(usize),
    #[error("bad magic: not a floe ingest file")]
    BadMagic,
    #[error("unsupported ingest format version {0}")]
    UnsupportedVersion(u16),
    #[error("reserved footer bits {0:#x} are set")]
    ReservedBits(u16),
    #[error("index does not fit in the file")]
    BadIndexBounds,
    #[error("index checksum mismatch")]
    IndexCrc,
    #[error("chunk {0} lies outside the data area")]
    BadChunkBounds(usize),
    #[error("chunk {0} checksum mismatch")]
    ChunkCrc(usize),
    #[error("offset index: {0}")]
    OffsetIndex(#[from] segment_index::IndexError),
    #[error("offset index entry {0} lies outside the data area")]
    BadIndexEntry(usize),
}

/// Builds one ingest file in memory. Chunks are appended as they are given;
/// their bytes are kept as the `Bytes` handed in (no copy until [`finish`]).
///
/// [`finish`]: IngestWriter::finish
#[derive(Default)]
pub struct IngestWriter {
    parts: Vec<Bytes>,
    entries: Vec<ChunkEntry>,
    position: u64,
    /// A segment's offset index (version 2), when this writes one.
    index: Option<IndexBuilder>,
}

impl IngestWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// A writer of a segment (version 2): one chunk of batches carrying
    /// their real base offsets, with an offset index entry every `interval`
    /// bytes.
    pub fn segment(interval: u64) -> Self {
        IngestWriter {
            index: Some(IndexBuilder::new(interval)),
            ..Self::default()
        }
    }

    /// Appends one partition's chunk, made of `batches` (each a whole Kafka batch),
    /// and returns its entry.
    pub fn add_chunk(&mut self, topic_id: Uuid, partition: i32, batches: &[Bytes]) -> ChunkEntry {
        assert!(
            self.index.is_none() || self.entries.is_empty(),
            "a segment holds one chunk"
        );
        let mut crc = 0u32;
        let mut length = 0u64;
        for batch in batches {
            if let Some(index) = &mut self.index {
                // Callers hand whole, checked batches (61 bytes of header at least).
                let at = |n: usize| header_i64(batch, n).expect("a whole batch");
                index.batch(
                    at(BASE_OFFSET_AT),
                    self.position + length,
                    batch.len() as u64,
                    at(MAX_TIMESTAMP_AT),
                );
            }
            crc = crc32c::crc32c_append(crc, batch);
            length += batch.len() as u64;
            self.parts.push(batch.clone());
        }
        let entry = ChunkEntry {
            topic_id,
            partition,
            position: self.position,
            length: u32::try_from(length).expect("a chunk is bounded by the flush size"),
            crc,
            batch_count: batches.len() as u32,
        };
        self.position += length;
        self.entries.push(entry);
        entry
    }

    /// Bytes of chunk data so far.
    pub fn data_len(&self) -> u64 {
        self.position
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn entries(&self) -> &[ChunkEntry] {
        &self.entries
    }

    /// The whole file: data, index, footer. This is the one copy of the data,
    /// into the buffer that is uploaded.
    pub fn finish(self) -> Bytes {
        let index_len = self.entries.len() * ENTRY_LEN;
        let mut out = BytesMut::with_capacity(self.position as usize + index_len + FOOTER_LEN);
        for part in &self.parts {
            out.put_slice(part);
        }
        let index_offset = out.len() as u64;
        for e in &self.entries {
            out.put_slice(e.topic_id.as_bytes());
            out.put_i32(e.partition);
            out.put_u64(e.position);
            out.put_u32(e.length);
            out.put_u32(e.crc);
            out.put_u32(e.batch_count);
        }
        let index_crc = crc32c::crc32c(&out[index_offset as usize..]);
        let version = match &self.index {
            None => VERSION,
            Some(index) => {
                let offset = out.len();
                index.encode(&mut out);
                IndexLocation {
                    offset: offset as u64,
                    count: index.entries().len() as u32,
                    crc: crc32c::crc32c(&out[offset..]),
                }
                .encode(&mut out);
                INDEXED_VERSION
            }
        };
        out.put_u64(index_offset);
        out.put_u32(self.entries.len() as u32);
        out.put_u32(index_crc);
        out.put_u16(version);
        out.put_u16(0);
        out.put_slice(&MAGIC);
        out.freeze()
    }
}

/// The big-endian i64 of a batch's header at `at`, if the batch holds it.
fn header_i64(batch: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_be_bytes(batch.get(at..at + 8)?.try_into().ok()?))
}

/// The parsed footer: where the index lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    pub index_offset: u64,
    pub entry_count: u32,
    pub index_crc: u32,
    pub version: u16,
}

impl Footer {
    /// Parses the last [`FOOTER_LEN`] bytes of a file.
    pub fn parse(tail: &[u8]) -> Result<Footer, FormatError> {
        if tail.len() < FOOTER_LEN {
            return Err(FormatError::TooShort(tail.len()));
        }
        let mut f = &tail[tail.len() - FOOTER_LEN..];
        let index_offset = f.get_u64();
        let entry_count = f.get_u32();
        let index_crc = f.get_u32();
        let version = f.get_u16();
        let reserved = f.get_u16();
        if f != MAGIC {
            return Err(FormatError::BadMagic);
        }
        if reserved != 0 {
            return Err(FormatError::ReservedBits(reserved));
        }
        if version != VERSION && version != INDEXED_VERSION {
            return Err(FormatError::UnsupportedVersion(version));
        }
        Ok(Footer {
            index_offset,
            entry_count,
            index_crc,
            version,
        })
    }

    /// Bytes at the end of a file of this version that are not chunk data
    /// or chunk index: the footer, and a v2 file's offset index trailer.
    pub fn tail_len(&self) -> usize {
        match self.version {
            VERSION => FOOTER_LEN,
            _ => FOOTER_LEN + segment_index::TRAILER_LEN,
        }
    }

    /// Where a v2 file of `file_size` bytes keeps its offset index, read
    /// from the file's last [`Footer::tail_len`] bytes (or more) and checked
    /// to lie between the chunk index and the trailer; `None` for version 1.
    pub fn offset_index(
        &self,
        tail: &[u8],
        file_size: u64,
    ) -> Result<Option<IndexLocation>, FormatError> {
        if self.version == VERSION {
            return Ok(None);
        }
        if tail.len() < self.tail_len() {
            return Err(FormatError::TooShort(tail.len()));
        }
        let at = tail.len() - self.tail_len();
        let location = IndexLocation::parse(&tail[at..at + segment_index::TRAILER_LEN]);
        let chunk_index_end = self
            .index_offset
            .checked_add(self.entry_count as u64 * ENTRY_LEN as u64);
        let trailer_at = file_size.checked_sub(self.tail_len() as u64);
        if chunk_index_end != Some(location.offset)
            || location.offset.checked_add(location.len()) != trailer_at
        {
            return Err(FormatError::BadIndexBounds);
        }
        Ok(Some(location))
    }
}

/// A whole ingest file, checked: footer, index and every chunk's CRC.
#[derive(Debug, Clone)]
pub struct IngestFile {
    bytes: Bytes,
    entries: Vec<ChunkEntry>,
    offset_index: Option<OffsetIndex>,
}

impl IngestFile {
    pub fn parse(bytes: Bytes) -> Result<IngestFile, FormatError> {
        let footer = Footer::parse(&bytes)?;
        if bytes.len() < footer.tail_len() {
            return Err(FormatError::TooShort(bytes.len()));
        }
        let index_start = footer.index_offset as usize;
        let index_end = index_start
            .checked_add(footer.entry_count as usize * ENTRY_LEN)
            .ok_or(FormatError::BadIndexBounds)?;
        let offset_index = match footer.offset_index(&bytes, bytes.len() as u64)? {
            None if index_end != bytes.len() - FOOTER_LEN => {
                return Err(FormatError::BadIndexBounds);
            }
            None => None,
            Some(location) => {
                let start = location.offset as usize;
                let index =
                    OffsetIndex::parse(&bytes[start..start + location.len() as usize], &location)?;
                if let Some(n) = index
                    .entries()
                    .iter()
                    .position(|e| e.position >= footer.index_offset)
                {
                    return Err(FormatError::BadIndexEntry(n));
                }
                Some(index)
            }
        };
        let index = &bytes[index_start..index_end];
        if crc32c::crc32c(index) != footer.index_crc {
            return Err(FormatError::IndexCrc);
        }
        let mut cursor = index;
        let mut entries = Vec::with_capacity(footer.entry_count as usize);
        for n in 0..footer.entry_count as usize {
            let mut id = [0u8; 16];
            cursor.copy_to_slice(&mut id);
            let entry = ChunkEntry {
                topic_id: Uuid::from_bytes(id),
                partition: cursor.get_i32(),
                position: cursor.get_u64(),
                length: cursor.get_u32(),
                crc: cursor.get_u32(),
                batch_count: cursor.get_u32(),
            };
            let end = entry.position.checked_add(entry.length as u64);
            if end.is_none_or(|end| end > footer.index_offset) {
                return Err(FormatError::BadChunkBounds(n));
            }
            let data =
                &bytes[entry.position as usize..(entry.position + entry.length as u64) as usize];
            if crc32c::crc32c(data) != entry.crc {
                return Err(FormatError::ChunkCrc(n));
            }
            entries.push(entry);
        }
        Ok(IngestFile {
            bytes,
            entries,
            offset_index,
        })
    }

    pub fn entries(&self) -> &[ChunkEntry] {
        &self.entries
    }

    /// A segment's offset index (version 2 files only).
    pub fn offset_index(&self) -> Option<&OffsetIndex> {
        self.offset_index.as_ref()
    }

    /// Checks a segment's offset index against its batches: the first batch
    /// has an entry, and each entry lies on a batch boundary of the one
    /// chunk, naming that batch's base offset and the largest timestamp of
    /// the batches before it. (Readers check only the batch they land on;
    /// the simulation's auditor and tests check every entry with this.)
    pub fn check_offset_index(&self) -> Result<(), String> {
        let Some(index) = &self.offset_index else {
            return Ok(());
        };
        let [chunk] = self.entries.as_slice() else {
            return Err(format!("a segment of {} chunks", self.entries.len()));
        };
        let data = self.chunk(chunk);
        let mut entries = index.entries().iter().peekable();
        let (mut at, mut max_timestamp) = (0usize, i64::MIN);
        while at < data.len() {
            let batch = &data[at..];
            let torn = || format!("a torn batch at {at}");
            let length = batch.get(8..12).ok_or_else(torn)?;
            let length = u32::from_be_bytes(length.try_into().expect("4 bytes")) as usize;
            let base_offset = header_i64(batch, BASE_OFFSET_AT).ok_or_else(torn)?;
            let batch_max = header_i64(batch, MAX_TIMESTAMP_AT).ok_or_else(torn)?;
            let position = chunk.position + at as u64;
            if at == 0 && entries.peek().is_none_or(|e| e.position != position) {
                return Err("the first batch has no entry".into());
            }
            if let Some(entry) = entries.next_if(|e| e.position == position)
                && (entry.offset != base_offset || entry.max_timestamp_before != max_timestamp)
            {
                return Err(format!(
                    "the entry at {position} names offset {} and timestamp {}, the batch there \
                     starts at {base_offset} after timestamp {max_timestamp}",
                    entry.offset, entry.max_timestamp_before
                ));
            }
            if let Some(entry) = entries.peek().filter(|e| e.position < position) {
                return Err(format!("the entry at {} is inside a batch", entry.position));
            }
            max_timestamp = max_timestamp.max(batch_max);
            at += 12 + length;
        }
        match entries.next() {
            Some(entry) => Err(format!(
                "the entry at {} is past the batches",
                entry.position
            )),
            None => Ok(()),
        }
    }

    /// The raw batches of one chunk (a zero-copy slice of the file).
    pub fn chunk(&self, entry: &ChunkEntry) -> Bytes {
        self.bytes
            .slice(entry.position as usize..(entry.position + entry.length as u64) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> (Bytes, Vec<ChunkEntry>) {
        let mut w = IngestWriter::new();
        let t = Uuid::from_u128(7);
        w.add_chunk(
            t,
            0,
            &[Bytes::from_static(b"aaaa"), Bytes::from_static(b"bb")],
        );
        w.add_chunk(t, 1, &[Bytes::from_static(b"cccccc")]);
        let entries = w.entries().to_vec();
        (w.finish(), entries)
    }

    #[test]
    fn round_trip() {
        let (bytes, entries) = sample();
        let file = IngestFile::parse(bytes).unwrap();
        assert_eq!(file.entries(), &entries[..]);
        assert_eq!(&file.chunk(&entries[0])[..], b"aaaabb");
        assert_eq!(&file.chunk(&entries[1])[..], b"cccccc");
        assert_eq!(entries[1].position, 6);
        assert_eq!(entries[0].batch_count, 2);
    }

    /// Every single-bit flip of `bytes` makes the file refused.
    fn assert_every_flip_is_detected(bytes: &Bytes) {
        for at in 0..bytes.len() {
            let mut copy = BytesMut::from(&bytes[..]);
            copy[at] ^= 0x01;
            assert!(
                IngestFile::parse(copy.freeze()).is_err(),
                "flip at {at} undetected"
            );
        }
    }

    #[test]
    fn every_single_byte_flip_is_detected() {
        assert_every_flip_is_detected(&sample().0);
    }

    /// A stand-in for a Kafka batch: 64 bytes, with a base offset and a
    /// largest timestamp where a batch header has them.
    fn fake_batch(base_offset: i64, max_timestamp: i64) -> Bytes {
        let mut b = vec![0xabu8; 64];
        b[BASE_OFFSET_AT..BASE_OFFSET_AT + 8].copy_from_slice(&base_offset.to_be_bytes());
        b[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&max_timestamp.to_be_bytes());
        Bytes::from(b)
    }

    /// A segment of six batches of 5 offsets, an index entry every 128 bytes.
    fn segment_sample() -> Bytes {
        let mut w = IngestWriter::segment(128);
        let batches: Vec<Bytes> = (0..6).map(|n| fake_batch(100 + n * 5, 7_000 + n)).collect();
        w.add_chunk(Uuid::from_u128(7), 3, &batches);
        w.finish()
    }

    #[test]
    fn a_segment_carries_an_offset_index() {
        let file = IngestFile::parse(segment_sample()).unwrap();
        let chunk = file.entries()[0];
        assert_eq!(
            (chunk.position, chunk.length, chunk.batch_count),
            (0, 384, 6)
        );
        let index = file.offset_index().unwrap();
        let entries: Vec<(i64, u64, i64)> = index
            .entries()
            .iter()
            .map(|e| (e.offset, e.position, e.max_timestamp_before))
            .collect();
        assert_eq!(
            entries,
            vec![(100, 0, i64::MIN), (110, 128, 7_001), (120, 256, 7_003)]
        );
        // A reader finds the index from the file's tail alone.
        let footer = Footer::parse(&segment_sample()).unwrap();
        assert_eq!(footer.version, INDEXED_VERSION);
        let bytes = segment_sample();
        let location = footer
            .offset_index(
                &bytes[bytes.len() - footer.tail_len()..],
                bytes.len() as u64,
            )
            .unwrap()
            .unwrap();
        let start = location.offset as usize;
        let parsed =
            OffsetIndex::parse(&bytes[start..start + location.len() as usize], &location).unwrap();
        assert_eq!(&parsed, index);
        // Ingest files stay version 1, without one.
        let (v1, _) = sample();
        assert_eq!(Footer::parse(&v1).unwrap().version, VERSION);
        assert!(IngestFile::parse(v1).unwrap().offset_index().is_none());
    }

    #[test]
    fn an_index_naming_the_wrong_batch_is_caught() {
        fn real_batch(base_offset: i64, max_timestamp: i64) -> Bytes {
            let mut b = fake_batch(base_offset, max_timestamp).to_vec();
            b[8..12].copy_from_slice(&52u32.to_be_bytes()); // 12 + 52 = 64 bytes
            Bytes::from(b)
        }
        let batches: Vec<Bytes> = (0..6).map(|n| real_batch(100 + n * 5, 7_000 + n)).collect();
        let indexed = |batches: &[Bytes]| {
            let mut w = IngestWriter::segment(128);
            w.add_chunk(Uuid::from_u128(7), 3, batches);
            IngestFile::parse(w.finish()).unwrap()
        };
        assert_eq!(indexed(&batches).check_offset_index(), Ok(()));
        // An index written for batches off by one offset.
        let file = indexed(&batches);
        let mut shifted = batches.clone();
        shifted[2] = real_batch(111, 7_002);
        let mut wrong = IngestWriter::segment(128);
        wrong.add_chunk(Uuid::from_u128(7), 3, &shifted);
        let mut bytes = BytesMut::from(&wrong.finish()[..]);
        // Put the right batches back under the wrong index (and fix the
        // chunk's CRC, 32 bytes into its entry, and the chunk index's, in
        // the footer).
        let chunk = file.entries()[0];
        bytes[..384].copy_from_slice(&file.chunk(&chunk));
        let crc = crc32c::crc32c(&bytes[..384]);
        bytes[384 + 32..384 + 36].copy_from_slice(&crc.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[384..384 + ENTRY_LEN]);
        let footer = bytes.len() - FOOTER_LEN;
        bytes[footer + 12..footer + 16].copy_from_slice(&crc.to_be_bytes());
        let lying = IngestFile::parse(bytes.freeze()).unwrap();
        assert!(
            lying
                .check_offset_index()
                .unwrap_err()
                .contains("names offset 111")
        );
    }

    #[test]
    fn every_single_byte_flip_of_a_segment_is_detected() {
        assert_every_flip_is_detected(&segment_sample());
    }

    /// The persisted formats, byte for byte: a change to either is a new
    /// version, and files already in buckets must still be read. Rewrite with
    /// `FLOE_BLESS=1 cargo test -p floe-storage golden` only for a new version.
    #[test]
    fn golden_files() {
        let (v1, _) = sample();
        for (name, bytes) in [("ingest-v1.hex", v1), ("segment-v2.hex", segment_sample())] {
            let hex: String = bytes
                .chunks(32)
                .map(|line| line.iter().map(|b| format!("{b:02x}")).collect::<String>() + "\n")
                .collect();
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("golden")
                .join(name);
            if std::env::var_os("FLOE_BLESS").is_some() {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &hex).unwrap();
                continue;
            }
            let golden = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}; write it with FLOE_BLESS=1", path.display()));
            assert_eq!(hex, golden, "{name}: the stored format changed");
            assert!(IngestFile::parse(bytes).is_ok());
        }
    }

    proptest! {
        #[test]
        fn truncation_or_garbage_is_an_error_not_a_panic(data in proptest::collection::vec(any::<u8>(), 0..200), cut in 0usize..100) {
            let _ = IngestFile::parse(Bytes::from(data));
            let (bytes, _) = sample();
            let cut = cut.min(bytes.len() - 1);
            prop_assert!(IngestFile::parse(bytes.slice(..cut)).is_err());
            let bytes = segment_sample();
            let cut = cut.min(bytes.len() - 1);
            prop_assert!(IngestFile::parse(bytes.slice(..cut)).is_err());
        }
    }
}
