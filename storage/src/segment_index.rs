//! The offset index of a version-2 segment (see `docs/ingest-format.md`).
//!
//! A segment is described to the metastore as one extent, however large, so
//! a partition's extent count follows its segments, not its bytes. A reader
//! starting inside it lands through this index instead of reading from the
//! extent's start: an entry every `interval` bytes of batches gives a
//! batch's real base offset, its position in the file, and the largest
//! timestamp of every batch before it (Kafka's `.index` and `.timeindex` in
//! one). Entries are increasing in offset, position and timestamp.
//!
//! The index is a hint to be checked, never trusted alone: it carries its
//! own CRC, and a reader that lands checks the batch it lands on starts at
//! the entry's offset (see `agent/src/handlers/reads.rs`).

use bytes::{Buf, BufMut, BytesMut};

/// Bytes of one entry: offset i64, position u64, max timestamp before i64.
pub const ENTRY_LEN: usize = 24;
/// Bytes of batches between two entries, by default. A fetch landing on an
/// entry reads at most this much before the offset it asked for.
pub const DEFAULT_INTERVAL: u64 = 64 * 1024;
/// Where a v2 file's offset index lies: offset u64, entry count u32, CRC u32,
/// just before the common footer.
pub const TRAILER_LEN: usize = 16;

/// One point a reader can start at: a batch boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// The base offset of the batch at `position`.
    pub offset: i64,
    /// Where that batch starts in the file.
    pub position: u64,
    /// The largest timestamp of the batches before `position` (`i64::MIN`
    /// for the first entry): every record reaching a larger timestamp lies
    /// at or past this entry.
    pub max_timestamp_before: i64,
}

/// Collects entries as a segment's batches are laid out.
#[derive(Debug, Clone)]
pub struct IndexBuilder {
    interval: u64,
    entries: Vec<IndexEntry>,
    /// Batch bytes since the last entry.
    since_entry: u64,
    max_timestamp: i64,
}

impl IndexBuilder {
    pub fn new(interval: u64) -> Self {
        IndexBuilder {
            interval: interval.max(1),
            entries: Vec::new(),
            since_entry: 0,
            max_timestamp: i64::MIN,
        }
    }

    /// Records a batch of `len` bytes at `position` whose offsets start at
    /// `base_offset`: it gets an entry when it is the first, or when
    /// `interval` bytes have passed since the last entry.
    pub fn batch(&mut self, base_offset: i64, position: u64, len: u64, max_timestamp: i64) {
        if self.entries.is_empty() || self.since_entry >= self.interval {
            if let Some(last) = self.entries.last() {
                debug_assert!(last.offset < base_offset && last.position < position);
            }
            self.entries.push(IndexEntry {
                offset: base_offset,
                position,
                max_timestamp_before: self.max_timestamp,
            });
            self.since_entry = 0;
        }
        self.since_entry += len;
        self.max_timestamp = self.max_timestamp.max(max_timestamp);
    }

    pub fn entries(&self) -> &[IndexEntry] {
        &self.entries
    }

    /// The entries as stored.
    pub fn encode(&self, out: &mut BytesMut) {
        for e in &self.entries {
            out.put_i64(e.offset);
            out.put_u64(e.position);
            out.put_i64(e.max_timestamp_before);
        }
    }
}

/// Why an offset index could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("offset index of {0} bytes is not whole entries")]
    Torn(usize),
    #[error("offset index checksum mismatch")]
    Crc,
    #[error("offset index entries are not increasing at entry {0}")]
    NotIncreasing(usize),
}

/// Where a v2 file's offset index lies (its trailer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexLocation {
    pub offset: u64,
    pub count: u32,
    pub crc: u32,
}

impl IndexLocation {
    pub fn len(&self) -> u64 {
        self.count as u64 * ENTRY_LEN as u64
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub(crate) fn encode(&self, out: &mut BytesMut) {
        out.put_u64(self.offset);
        out.put_u32(self.count);
        out.put_u32(self.crc);
    }

    pub(crate) fn parse(mut trailer: &[u8]) -> IndexLocation {
        IndexLocation {
            offset: trailer.get_u64(),
            count: trailer.get_u32(),
            crc: trailer.get_u32(),
        }
    }
}

/// A checked offset index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetIndex {
    entries: Vec<IndexEntry>,
}

impl OffsetIndex {
    /// Parses the index's bytes, checking them against `location`'s CRC and
    /// that entries increase.
    pub fn parse(bytes: &[u8], location: &IndexLocation) -> Result<OffsetIndex, IndexError> {
        if bytes.len() as u64 != location.len() {
            return Err(IndexError::Torn(bytes.len()));
        }
        if crc32c::crc32c(bytes) != location.crc {
            return Err(IndexError::Crc);
        }
        let mut cursor = bytes;
        let mut entries: Vec<IndexEntry> = Vec::with_capacity(location.count as usize);
        for n in 0..location.count as usize {
            let entry = IndexEntry {
                offset: cursor.get_i64(),
                position: cursor.get_u64(),
                max_timestamp_before: cursor.get_i64(),
            };
            if let Some(last) = entries.last()
                && (entry.offset <= last.offset
                    || entry.position <= last.position
                    || entry.max_timestamp_before < last.max_timestamp_before)
            {
                return Err(IndexError::NotIncreasing(n));
            }
            entries.push(entry);
        }
        Ok(OffsetIndex { entries })
    }

    pub fn entries(&self) -> &[IndexEntry] {
        &self.entries
    }

    /// The last entry within `range` (file positions) at or before `offset`:
    /// where a read of `offset` starts.
    pub fn by_offset(&self, range: std::ops::Range<u64>, offset: i64) -> Option<IndexEntry> {
        self.within(range)
            .iter()
            .take_while(|e| e.offset <= offset)
            .last()
            .copied()
    }

    /// The last entry within `range` before which every batch is below
    /// `timestamp`: the first record reaching it lies at or past this entry
    /// (and before the next one).
    pub fn by_timestamp(&self, range: std::ops::Range<u64>, timestamp: i64) -> Option<IndexEntry> {
        self.within(range)
            .iter()
            .take_while(|e| e.max_timestamp_before < timestamp)
            .last()
            .copied()
    }

    /// The entries lying in `range`, found by binary search.
    fn within(&self, range: std::ops::Range<u64>) -> &[IndexEntry] {
        let start = self.entries.partition_point(|e| e.position < range.start);
        let end = self.entries.partition_point(|e| e.position < range.end);
        &self.entries[start..end.max(start)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stored index of batches `(offset, length, max timestamp)` laid
    /// out from position 100, with its location.
    fn encoded(batches: &[(i64, u64, i64)], interval: u64) -> (BytesMut, IndexLocation) {
        let mut b = IndexBuilder::new(interval);
        let mut position = 100;
        for &(offset, len, ts) in batches {
            b.batch(offset, position, len, ts);
            position += len;
        }
        let mut out = BytesMut::new();
        b.encode(&mut out);
        let location = IndexLocation {
            offset: 0,
            count: b.entries().len() as u32,
            crc: crc32c::crc32c(&out),
        };
        (out, location)
    }

    fn index(batches: &[(i64, u64, i64)], interval: u64) -> (OffsetIndex, IndexLocation) {
        let (out, location) = encoded(batches, interval);
        (OffsetIndex::parse(&out, &location).unwrap(), location)
    }

    #[test]
    fn an_entry_every_interval_bytes() {
        // Batches of 40 bytes, 10 offsets each, an entry every 100 bytes.
        let batches: Vec<_> = (0..10).map(|n| (n * 10, 40, 1000 + n)).collect();
        let (index, _) = index(&batches, 100);
        let offsets: Vec<i64> = index.entries().iter().map(|e| e.offset).collect();
        assert_eq!(offsets, vec![0, 30, 60, 90]);
        assert_eq!(index.entries()[1].position, 100 + 3 * 40);
        assert_eq!(index.entries()[0].max_timestamp_before, i64::MIN);
        assert_eq!(index.entries()[1].max_timestamp_before, 1002);

        let all = 0..u64::MAX;
        assert_eq!(index.by_offset(all.clone(), 0).unwrap().offset, 0);
        assert_eq!(index.by_offset(all.clone(), 59).unwrap().offset, 30);
        assert_eq!(index.by_offset(all.clone(), 60).unwrap().offset, 60);
        assert_eq!(index.by_offset(all.clone(), 1_000).unwrap().offset, 90);
        assert_eq!(index.by_offset(all.clone(), -1), None);
        // The batch with timestamp 1004 (offset 40) lies past the entry at 30.
        assert_eq!(index.by_timestamp(all.clone(), 1004).unwrap().offset, 30);
        assert_eq!(index.by_timestamp(all.clone(), 1003).unwrap().offset, 30);
        assert_eq!(index.by_timestamp(all.clone(), 1002).unwrap().offset, 0);
        assert_eq!(index.by_timestamp(all.clone(), 0).unwrap().offset, 0);
        // Only entries inside the range count.
        assert_eq!(index.by_offset(220..340, 1_000).unwrap().offset, 30);
        assert_eq!(index.by_offset(221..400, 40), None);
    }

    #[test]
    fn a_changed_index_is_refused() {
        let batches: Vec<_> = (0..10).map(|n| (n * 10, 40, 1000 + n)).collect();
        let (out, location) = encoded(&batches, 100);
        for at in 0..out.len() {
            let mut copy = out.clone();
            copy[at] ^= 1;
            assert!(
                OffsetIndex::parse(&copy, &location).is_err(),
                "flip at {at}"
            );
        }
        assert_eq!(
            OffsetIndex::parse(&out[..out.len() - 1], &location),
            Err(IndexError::Torn(out.len() - 1))
        );
        // Entries out of order are refused even with a matching CRC.
        let mut swapped = BytesMut::new();
        swapped.extend_from_slice(&out[ENTRY_LEN..2 * ENTRY_LEN]);
        swapped.extend_from_slice(&out[..ENTRY_LEN]);
        let location = IndexLocation {
            offset: 0,
            count: 2,
            crc: crc32c::crc32c(&swapped),
        };
        assert_eq!(
            OffsetIndex::parse(&swapped, &location),
            Err(IndexError::NotIncreasing(1))
        );
    }
}
