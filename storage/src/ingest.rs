//! The ingest-file format (see `docs/ingest-format.md`).
//!
//! An ingest file holds chunks of raw Kafka record batches for many partitions,
//! each partition's chunk contiguous, followed by an index of the chunks and a
//! fixed-size footer. Compacted segments use the same format with a single
//! chunk. Readers serving fetches never need the index: the metastore records
//! where each chunk lies. The index exists so compaction, recovery and GC can
//! understand a file on their own.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use uuid::Uuid;

/// `FLOEINGS`: identifies a floe ingest or segment file.
pub const MAGIC: [u8; 8] = *b"FLOEINGS";
/// Format version written by this code.
pub const VERSION: u16 = 1;
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
}

impl IngestWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one partition's chunk, made of `batches` (each a whole Kafka batch),
    /// and returns its entry.
    pub fn add_chunk(&mut self, topic_id: Uuid, partition: i32, batches: &[Bytes]) -> ChunkEntry {
        let mut crc = 0u32;
        let mut length = 0u64;
        for batch in batches {
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
        out.put_u64(index_offset);
        out.put_u32(self.entries.len() as u32);
        out.put_u32(index_crc);
        out.put_u16(VERSION);
        out.put_u16(0);
        out.put_slice(&MAGIC);
        out.freeze()
    }
}

/// The parsed footer: where the index lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    pub index_offset: u64,
    pub entry_count: u32,
    pub index_crc: u32,
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
        if version != VERSION {
            return Err(FormatError::UnsupportedVersion(version));
        }
        Ok(Footer {
            index_offset,
            entry_count,
            index_crc,
        })
    }
}

/// A whole ingest file, checked: footer, index and every chunk's CRC.
#[derive(Debug, Clone)]
pub struct IngestFile {
    bytes: Bytes,
    entries: Vec<ChunkEntry>,
}

impl IngestFile {
    pub fn parse(bytes: Bytes) -> Result<IngestFile, FormatError> {
        let footer = Footer::parse(&bytes)?;
        let index_start = footer.index_offset as usize;
        let index_end = index_start
            .checked_add(footer.entry_count as usize * ENTRY_LEN)
            .ok_or(FormatError::BadIndexBounds)?;
        if index_end != bytes.len() - FOOTER_LEN {
            return Err(FormatError::BadIndexBounds);
        }
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
        Ok(IngestFile { bytes, entries })
    }

    pub fn entries(&self) -> &[ChunkEntry] {
        &self.entries
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

    #[test]
    fn every_single_byte_flip_is_detected() {
        let (bytes, _) = sample();
        for at in 0..bytes.len() {
            let mut copy = BytesMut::from(&bytes[..]);
            copy[at] ^= 0x01;
            assert!(
                IngestFile::parse(copy.freeze()).is_err(),
                "flip at {at} undetected"
            );
        }
    }

    proptest! {
        #[test]
        fn truncation_or_garbage_is_an_error_not_a_panic(data in proptest::collection::vec(any::<u8>(), 0..200), cut in 0usize..100) {
            let _ = IngestFile::parse(Bytes::from(data));
            let (bytes, _) = sample();
            let cut = cut.min(bytes.len() - 1);
            prop_assert!(IngestFile::parse(bytes.slice(..cut)).is_err());
        }
    }
}
