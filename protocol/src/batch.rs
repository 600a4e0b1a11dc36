//! A zero-copy view of Kafka v2 record batches.
//!
//! floe never decompresses a batch it only stores and forwards: it reads the
//! fixed 61-byte header, checks the CRC32C over everything after the CRC field,
//! and later rewrites the base offset, which lies outside the CRC.
//!
//! ```text
//! offset  size  field
//!  0      8     baseOffset
//!  8      4     batchLength (bytes after this field)
//! 12      4     partitionLeaderEpoch
//! 16      1     magic (= 2)
//! 17      4     crc (CRC32C of bytes 21..end)
//! 21      2     attributes
//! 23      4     lastOffsetDelta
//! 27      8     baseTimestamp
//! 35      8     maxTimestamp
//! 43      8     producerId
//! 51      2     producerEpoch
//! 53      4     baseSequence
//! 57      4     recordCount
//! 61      ...   records (possibly compressed)
//! ```

use bytes::Bytes;
use kafka_protocol::ResponseError;

/// Size of the fixed v2 batch header.
pub const HEADER_LEN: usize = 61;
/// Bytes before `batchLength` counts: baseOffset and batchLength itself.
pub const LOG_OVERHEAD: usize = 12;
const CRC_START: usize = 21;
/// The smallest a record can be: length, attributes, timestamp delta, offset
/// delta, key length, value length and header count, one byte each.
pub const MIN_RECORD_BYTES: usize = 7;

/// Why a batch was refused, with the Kafka error a broker sends for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("corrupt record batch: {0}")]
    Corrupt(&'static str),
    #[error("invalid record batch: {0}")]
    Invalid(&'static str),
    #[error("unsupported compression codec {0}")]
    UnsupportedCompression(u8),
    #[error("record batch magic {0} is not supported (only v2)")]
    UnsupportedMagic(i8),
    #[error("record batch larger than the limit once recompressed")]
    TooLarge,
}

impl BatchError {
    /// The Kafka error code a real broker answers with.
    pub fn kafka_error(&self) -> ResponseError {
        match self {
            BatchError::Corrupt(_) => ResponseError::CorruptMessage,
            BatchError::Invalid(_) => ResponseError::InvalidRecord,
            BatchError::UnsupportedCompression(_) => ResponseError::UnsupportedCompressionType,
            BatchError::UnsupportedMagic(_) => ResponseError::UnsupportedForMessageFormat,
            BatchError::TooLarge => ResponseError::MessageTooLarge,
        }
    }
}

/// Compression codec, bits 0-2 of the attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    /// The codec's value in a batch's attributes (their low three bits).
    pub fn attribute_bits(self) -> i16 {
        match self {
            Codec::None => 0,
            Codec::Gzip => 1,
            Codec::Snappy => 2,
            Codec::Lz4 => 3,
            Codec::Zstd => 4,
        }
    }
}

/// A validated v2 record batch: the raw bytes plus the header fields floe uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordBatch {
    bytes: Bytes,
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl RecordBatch {
    /// Validates the batch at the start of `bytes` and returns it with the rest.
    ///
    /// Checks sizes, magic, CRC32C, codec and offset/count consistency; the
    /// records themselves are not decoded.
    pub fn parse_one(bytes: &Bytes) -> Result<(RecordBatch, Bytes), BatchError> {
        let (batch, rest) = Self::parse_stored_one(bytes)?;
        if batch.record_count() <= 0 {
            return Err(BatchError::Invalid("batch holds no records"));
        }
        if batch.last_offset_delta() != batch.record_count() - 1 {
            return Err(BatchError::Invalid(
                "lastOffsetDelta does not match record count",
            ));
        }
        // The count must fit in the bytes: a record takes at least
        // MIN_RECORD_BYTES, and compressed ones at most the codec's ceiling
        // less. Otherwise a 61-byte batch could claim 2^31 offsets. Kafka
        // finds such a batch short of records as it reads them: an invalid
        // record (not retried), not a corrupt one (retried).
        let payload = batch.len() - HEADER_LEN;
        let room = crate::compression::decompressed_limit(batch.codec(), payload);
        if batch.record_count() as usize > room / MIN_RECORD_BYTES {
            return Err(BatchError::Invalid(
                "incorrect declared batch size: more records than the batch can hold",
            ));
        }
        Ok((batch, rest))
    }

    pub fn parse_all(bytes: &Bytes) -> Result<Vec<RecordBatch>, BatchError> {
        Self::parse_each(bytes, Self::parse_one)
    }

    /// Like [`Self::parse_one`], for batches floe stored itself: key compaction
    /// leaves batches with fewer records than their offset range (as Kafka's
    /// cleaner does), or none, so only structure, CRC and codec are checked.
    pub fn parse_stored_one(bytes: &Bytes) -> Result<(RecordBatch, Bytes), BatchError> {
        if bytes.len() < HEADER_LEN {
            return Err(BatchError::Corrupt("shorter than a batch header"));
        }
        let batch_length = be_i32(bytes, 8);
        if batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32 {
            return Err(BatchError::Corrupt("batch length smaller than its header"));
        }
        let total = LOG_OVERHEAD + batch_length as usize;
        if total > bytes.len() {
            return Err(BatchError::Corrupt("batch length past the end of the data"));
        }
        let magic = bytes[16] as i8;
        if magic != 2 {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        let stored_crc = be_i32(bytes, 17) as u32;
        if crc32c::crc32c(&bytes[CRC_START..total]) != stored_crc {
            return Err(BatchError::Corrupt("CRC32C mismatch"));
        }
        let batch = RecordBatch {
            bytes: bytes.slice(..total),
        };
        let codec_bits = (batch.attributes() & 0x07) as u8;
        if codec_bits > 4 {
            return Err(BatchError::UnsupportedCompression(codec_bits));
        }
        if batch.last_offset_delta() < 0 || batch.record_count() < 0 {
            return Err(BatchError::Invalid(
                "negative lastOffsetDelta or record count",
            ));
        }
        Ok((batch, bytes.slice(total..)))
    }

    pub fn parse_all_stored(bytes: &Bytes) -> Result<Vec<RecordBatch>, BatchError> {
        Self::parse_each(bytes, Self::parse_stored_one)
    }

    fn parse_each(
        bytes: &Bytes,
        parse_one: fn(&Bytes) -> Result<(RecordBatch, Bytes), BatchError>,
    ) -> Result<Vec<RecordBatch>, BatchError> {
        let mut rest = bytes.clone();
        let mut batches = Vec::new();
        while !rest.is_empty() {
            let (batch, tail) = parse_one(&rest)?;
            batches.push(batch);
            rest = tail;
        }
        Ok(batches)
    }

    /// Sets the batch's lastOffsetDelta and base offset, then its CRC (which
    /// covers the former): used by key compaction to make rewritten batches
    /// cover the whole offset range of the ones they replace.
    pub fn with_offsets(&self, base_offset: i64, last_offset_delta: i32) -> RecordBatch {
        let mut bytes = bytes::BytesMut::from(&self.bytes[..]);
        bytes[0..8].copy_from_slice(&base_offset.to_be_bytes());
        bytes[23..27].copy_from_slice(&last_offset_delta.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[CRC_START..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        RecordBatch {
            bytes: bytes.freeze(),
        }
    }

    /// The batch with log-append time: the timestamp-type attribute set and
    /// `maxTimestamp` = `now_ms`, CRC recomputed (what a Kafka broker does for
    /// `message.timestamp.type=LogAppendTime`; consumers then read every
    /// record's timestamp as the batch's max timestamp).
    pub fn with_log_append_time(&self, now_ms: i64) -> RecordBatch {
        let mut bytes = bytes::BytesMut::from(&self.bytes[..]);
        let attributes = self.attributes() | 0x08;
        bytes[21..23].copy_from_slice(&attributes.to_be_bytes());
        bytes[35..43].copy_from_slice(&now_ms.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[CRC_START..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        RecordBatch {
            bytes: bytes.freeze(),
        }
    }

    /// The batch with `maxTimestamp` = `max_timestamp`, CRC recomputed (what
    /// Kafka's LogValidator sets from the records it walked).
    pub fn with_max_timestamp(&self, max_timestamp: i64) -> RecordBatch {
        let mut bytes = bytes::BytesMut::from(&self.bytes[..]);
        bytes[35..43].copy_from_slice(&max_timestamp.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[CRC_START..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        RecordBatch {
            bytes: bytes.freeze(),
        }
    }

    /// A batch of no records covering `[base_offset, last_offset]`: what key
    /// compaction leaves where it removed every record of a range.
    pub fn empty(base_offset: i64, last_offset: i64) -> RecordBatch {
        let mut b = bytes::BytesMut::zeroed(HEADER_LEN);
        b[0..8].copy_from_slice(&base_offset.to_be_bytes());
        b[8..12].copy_from_slice(&((HEADER_LEN - LOG_OVERHEAD) as i32).to_be_bytes());
        b[12..16].copy_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
        b[16] = 2; // magic
        let delta = (last_offset - base_offset).clamp(0, i32::MAX as i64) as i32;
        b[23..27].copy_from_slice(&delta.to_be_bytes());
        b[27..35].copy_from_slice(&(-1i64).to_be_bytes()); // base timestamp: none
        b[35..43].copy_from_slice(&(-1i64).to_be_bytes()); // max timestamp: none
        b[43..51].copy_from_slice(&(-1i64).to_be_bytes()); // producer id
        b[51..53].copy_from_slice(&(-1i16).to_be_bytes()); // producer epoch
        b[53..57].copy_from_slice(&(-1i32).to_be_bytes()); // base sequence
        // record count 0 (already zero)
        let crc = crc32c::crc32c(&b[CRC_START..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        RecordBatch { bytes: b.freeze() }
    }

    /// A COMMIT or ABORT marker of a transaction (a control batch, as
    /// `MemoryRecords.withEndTransactionMarker` writes it): attributes
    /// transactional and control, the producer's id and `epoch`, no sequence,
    /// one record whose key is the marker's version (0) and type (0 ABORT,
    /// 1 COMMIT) and whose value is its version (0) and the coordinator epoch.
    /// 78 bytes; its base offset is set when it is sequenced.
    pub fn end_txn_marker(producer_id: i64, epoch: i16, commit: bool, now_ms: i64) -> RecordBatch {
        // The record: length, attributes, timestamp delta, offset delta,
        // key (4 bytes), value (6 bytes), no headers; varints zigzagged.
        let mut record = vec![
            16 << 1, // length of what follows: 16
            0,       // attributes
            0,       // timestamp delta
            0,       // offset delta
            4 << 1,  // key length
        ];
        record.extend_from_slice(&0i16.to_be_bytes()); // key version
        record.extend_from_slice(&(commit as i16).to_be_bytes()); // type
        record.push(6 << 1); // value length
        record.extend_from_slice(&0i16.to_be_bytes()); // value version
        record.extend_from_slice(&0i32.to_be_bytes()); // coordinator epoch
        record.push(0); // headers
        let mut b = bytes::BytesMut::zeroed(HEADER_LEN);
        b[8..12]
            .copy_from_slice(&((HEADER_LEN + record.len() - LOG_OVERHEAD) as i32).to_be_bytes());
        b[12..16].copy_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
        b[16] = 2; // magic
        b[21..23].copy_from_slice(&0x30i16.to_be_bytes()); // transactional | control
        // last offset delta 0 (already zero)
        b[27..35].copy_from_slice(&now_ms.to_be_bytes()); // base timestamp
        b[35..43].copy_from_slice(&now_ms.to_be_bytes()); // max timestamp
        b[43..51].copy_from_slice(&producer_id.to_be_bytes());
        b[51..53].copy_from_slice(&epoch.to_be_bytes());
        b[53..57].copy_from_slice(&(-1i32).to_be_bytes()); // base sequence
        b[57..61].copy_from_slice(&1i32.to_be_bytes()); // record count
        b.extend_from_slice(&record);
        let crc = crc32c::crc32c(&b[CRC_START..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
        RecordBatch { bytes: b.freeze() }
    }

    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }
    pub fn len(&self) -> usize {
        self.bytes.len()
    }
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
    pub fn base_offset(&self) -> i64 {
        be_i64(&self.bytes, 0)
    }
    pub fn attributes(&self) -> i16 {
        be_i16(&self.bytes, 21)
    }
    /// The leader epoch the batch was written in (-1: none stamped).
    pub fn partition_leader_epoch(&self) -> i32 {
        be_i32(&self.bytes, 12)
    }
    pub fn codec(&self) -> Codec {
        match self.attributes() & 0x07 {
            1 => Codec::Gzip,
            2 => Codec::Snappy,
            3 => Codec::Lz4,
            4 => Codec::Zstd,
            _ => Codec::None,
        }
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes() & 0x10 != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes() & 0x20 != 0
    }
    /// Whether timestamps are log-append time (attribute bit 3).
    pub fn is_log_append_time(&self) -> bool {
        self.attributes() & 0x08 != 0
    }
    pub fn last_offset_delta(&self) -> i32 {
        be_i32(&self.bytes, 23)
    }
    /// The offset of the batch's last record (its base offset as stored).
    pub fn last_offset(&self) -> i64 {
        self.base_offset() + self.last_offset_delta() as i64
    }
    pub fn base_timestamp(&self) -> i64 {
        be_i64(&self.bytes, 27)
    }
    pub fn max_timestamp(&self) -> i64 {
        be_i64(&self.bytes, 35)
    }
    pub fn producer_id(&self) -> i64 {
        be_i64(&self.bytes, 43)
    }
    pub fn producer_epoch(&self) -> i16 {
        be_i16(&self.bytes, 51)
    }
    pub fn base_sequence(&self) -> i32 {
        be_i32(&self.bytes, 53)
    }
    pub fn record_count(&self) -> i32 {
        be_i32(&self.bytes, 57)
    }
}

/// Walks a run of stored batches and rewrites each base offset so the first
/// starts at `base_offset` and each next one follows the previous one's last
/// offset. The base offset lies outside the CRC, so the batches stay valid.
///
/// Stops at the first incomplete batch and returns how many bytes were whole
/// batches, so a caller can cut a read that ended mid-batch.
pub fn patch_base_offsets(buf: &mut [u8], mut base_offset: i64) -> usize {
    let mut at = 0;
    while buf.len() - at >= HEADER_LEN {
        let batch_length = be_i32(buf, at + 8);
        if batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32 {
            break;
        }
        let total = LOG_OVERHEAD + batch_length as usize;
        if buf.len() - at < total {
            break;
        }
        buf[at..at + 8].copy_from_slice(&base_offset.to_be_bytes());
        base_offset += be_i32(buf, at + 23) as i64 + 1;
        at += total;
    }
    at
}

/// Whether `buf` is whole v2 batches end to end, each with the CRC32C it
/// carries: bytes read back from a cache or a peer are what was stored.
/// (The base offset, length, leader epoch and magic lie outside the CRC;
/// the lengths must tile `buf` exactly and the magic be 2, and the base
/// offset is patched after. The leader epoch is not checked: floe stores 0
/// and clients ignore it in fetched batches.)
pub fn batches_hold(buf: &[u8]) -> bool {
    let mut at = 0;
    while at < buf.len() {
        if buf.len() - at < HEADER_LEN {
            return false;
        }
        let batch_length = be_i32(buf, at + 8);
        if batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32 {
            return false;
        }
        let total = LOG_OVERHEAD + batch_length as usize;
        if buf.len() - at < total || buf[at + 16] != 2 {
            return false;
        }
        let stored = be_i32(buf, at + 17) as u32;
        if crc32c::crc32c(&buf[at + CRC_START..at + total]) != stored {
            return false;
        }
        at += total;
    }
    true
}

/// How many bytes of `buf` (whole batches end to end) to keep so that no more
/// than `limit` bytes are kept, cutting only at batch boundaries. With
/// `at_least_one`, the first batch is kept even when it alone exceeds `limit`
/// (KIP-74: a fetch must make progress past a batch larger than the limits).
pub fn whole_batches_within(buf: &[u8], limit: usize, at_least_one: bool) -> usize {
    let mut at = 0;
    while buf.len() - at >= HEADER_LEN {
        let total = LOG_OVERHEAD + be_i32(buf, at + 8).max(0) as usize;
        if buf.len() - at < total {
            break;
        }
        let first = at == 0 && at_least_one;
        if at + total > limit && !first {
            break;
        }
        at += total;
    }
    at
}

/// The last offset of the last whole batch in `buf` (whole batches end to
/// end, offsets patched), if there is one.
pub fn last_offset_of(buf: &[u8]) -> Option<i64> {
    let mut at = 0;
    let mut last = None;
    while buf.len() - at >= HEADER_LEN {
        let total = LOG_OVERHEAD + be_i32(buf, at + 8).max(0) as usize;
        if buf.len() - at < total {
            break;
        }
        last = Some(be_i64(buf, at) + be_i32(buf, at + 23) as i64);
        at += total;
    }
    last
}

/// Byte position of the first whole batch in `buf` whose last offset is at
/// least `offset` (or `buf.len()` if none is). Used after [`patch_base_offsets`]
/// to drop batches a fetch starts past.
pub fn skip_batches_before(buf: &[u8], offset: i64) -> usize {
    let mut at = 0;
    while buf.len() - at >= HEADER_LEN {
        let total = LOG_OVERHEAD + be_i32(buf, at + 8).max(0) as usize;
        let last_offset = be_i64(buf, at) + be_i32(buf, at + 23) as i64;
        if last_offset >= offset || buf.len() - at < total {
            return at;
        }
        at += total;
    }
    buf.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{CODECS, encode, lying_batch};
    use bytes::BytesMut;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType,
    };
    use proptest::prelude::*;

    #[test]
    fn stored_batches_may_cover_more_offsets_than_records() {
        let empty = RecordBatch::empty(10, 14);
        assert_eq!((empty.base_offset(), empty.last_offset_delta()), (10, 4));
        assert_eq!(empty.record_count(), 0);
        // Clients may not produce such a batch; floe may store one.
        assert!(RecordBatch::parse_all(empty.bytes()).is_err());
        assert_eq!(
            RecordBatch::parse_all_stored(empty.bytes()).unwrap(),
            vec![empty.clone()]
        );
        let moved = empty.with_offsets(20, 9);
        assert_eq!((moved.base_offset(), moved.last_offset_delta()), (20, 9));
        assert!(
            RecordBatch::parse_all_stored(moved.bytes()).is_ok(),
            "CRC recomputed"
        );
        let mut broken = BytesMut::from(&moved.bytes()[..]);
        broken[25] ^= 1;
        assert!(RecordBatch::parse_all_stored(&broken.freeze()).is_err());
    }

    /// The review's 61-byte produce: a valid CRC over a header claiming
    /// 2^31-1 records. It was acknowledged and moved the high watermark by 2^31.
    #[test]
    fn a_record_count_the_bytes_cannot_hold_is_invalid() {
        for compression in CODECS {
            let err = RecordBatch::parse_all(&lying_batch(i32::MAX, compression)).unwrap_err();
            assert_eq!(
                err.kafka_error(),
                ResponseError::InvalidRecord,
                "{compression:?}"
            );
        }
        // Uncompressed, a record takes at least 7 bytes: the 14 bytes of one
        // record (key, value, a header) could hold 2, never 3.
        let one = encode(&[b"x".to_vec()], Compression::None);
        assert_eq!(one.len() - HEADER_LEN, 14);
        assert!(RecordBatch::parse_all(&lying_batch(3, Compression::None)).is_err());
        assert!(RecordBatch::parse_all(&lying_batch(2, Compression::None)).is_ok());
        // Compressed, the codec's ceiling bounds it: zstd can hold many more.
        let zstd = lying_batch(1_000, Compression::Zstd);
        assert!(RecordBatch::parse_all(&zstd).is_ok());
    }

    #[test]
    fn header_fields_match_the_encoder() {
        let values: Vec<Vec<u8>> = (0..10).map(|i| vec![i as u8; 100]).collect();
        for compression in CODECS {
            let bytes = encode(&values, compression);
            let batches = RecordBatch::parse_all(&bytes).unwrap();
            assert_eq!(batches.len(), 1);
            let b = &batches[0];
            assert_eq!(b.record_count(), 10);
            assert_eq!(b.last_offset_delta(), 9);
            assert_eq!(b.base_timestamp(), 1_000);
            assert_eq!(b.max_timestamp(), 1_009);
            assert_eq!(b.producer_id(), -1);
            assert_eq!(b.len(), bytes.len());
            let expected = match compression {
                Compression::None => Codec::None,
                Compression::Gzip => Codec::Gzip,
                Compression::Snappy => Codec::Snappy,
                Compression::Lz4 => Codec::Lz4,
                Compression::Zstd => Codec::Zstd,
            };
            assert_eq!(b.codec(), expected);
        }
    }

    #[test]
    fn any_flipped_byte_after_the_crc_is_corrupt() {
        let bytes = encode(&[b"hello".to_vec(), b"world".to_vec()], Compression::None);
        for at in CRC_START..bytes.len() {
            let mut copy = BytesMut::from(&bytes[..]);
            copy[at] ^= 0x40;
            let err = RecordBatch::parse_all(&copy.freeze()).unwrap_err();
            assert_eq!(
                err.kafka_error(),
                ResponseError::CorruptMessage,
                "byte {at}"
            );
        }
    }

    #[test]
    fn truncated_and_wrong_magic_are_refused() {
        let bytes = encode(&[b"x".to_vec()], Compression::None);
        let err = RecordBatch::parse_all(&bytes.slice(..bytes.len() - 1)).unwrap_err();
        assert_eq!(
            err,
            BatchError::Corrupt("batch length past the end of the data")
        );
        let mut copy = BytesMut::from(&bytes[..]);
        copy[16] = 1;
        assert_eq!(
            RecordBatch::parse_all(&copy.freeze()).unwrap_err(),
            BatchError::UnsupportedMagic(1)
        );
    }

    #[test]
    fn log_append_time_stamps_the_batch_and_every_record() {
        let bytes = encode(&[b"a".to_vec(), b"b".to_vec()], Compression::Zstd);
        let batch = RecordBatch::parse_all(&bytes).unwrap().remove(0);
        let stamped = batch.with_log_append_time(77_000);
        assert!(stamped.is_log_append_time());
        assert_eq!(stamped.max_timestamp(), 77_000);
        assert_eq!(stamped.codec(), Codec::Zstd);
        let reparsed = RecordBatch::parse_all(stamped.bytes()).unwrap();
        assert_eq!(reparsed, vec![stamped.clone()], "CRC recomputed");
        let mut cursor = stamped.bytes().clone();
        let set = RecordBatchDecoder::decode(&mut cursor).unwrap();
        assert!(
            set.records
                .iter()
                .all(|r| r.timestamp_type == TimestampType::LogAppend)
        );
    }

    /// A marker is what Kafka writes: kafka-protocol's decoder (Kafka's
    /// rules) reads a control record of the right type, producer and epoch,
    /// and its bytes stay as pinned here.
    #[test]
    fn end_transaction_markers_are_kafkas_control_batches() {
        for (commit, kind) in [(false, 0u8), (true, 1)] {
            let marker = RecordBatch::end_txn_marker(7, 3, commit, 1_700_000_000_000);
            assert_eq!(marker.len(), 78);
            assert!(marker.is_control() && marker.is_transactional());
            assert_eq!(
                (
                    marker.producer_id(),
                    marker.producer_epoch(),
                    marker.record_count()
                ),
                (7, 3, 1)
            );
            assert_eq!(
                RecordBatch::parse_all(marker.bytes()).unwrap(),
                vec![marker.clone()]
            );
            let mut cursor = marker.bytes().clone();
            let set = RecordBatchDecoder::decode(&mut cursor).unwrap();
            let record = &set.records[0];
            assert!(record.control && record.transactional);
            assert_eq!(
                (record.producer_id, record.producer_epoch, record.sequence),
                (7, 3, -1)
            );
            assert_eq!(record.key.as_deref(), Some(&[0u8, 0, 0, kind][..]));
            assert_eq!(record.value.as_deref(), Some(&[0u8; 6][..]));
        }
        let hex: String = RecordBatch::end_txn_marker(7, 3, true, 1_700_000_000_000)
            .bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "000000000000000000000042ffffffff029b250fb60030000000000000018bcfe568000000018bcfe56800000000000000000700\
             03ffffffff000000012000000008000000010c00000000000000"
        );
    }

    proptest! {
        #[test]
        fn patched_batches_decode_with_new_offsets(
            sizes in proptest::collection::vec(1usize..20, 1..6),
            base in 0i64..1_000_000_000,
            codec in 0usize..5,
        ) {
            let mut all = BytesMut::new();
            for (n, size) in sizes.iter().enumerate() {
                let values: Vec<Vec<u8>> = (0..*size).map(|i| vec![(n + i) as u8; 8]).collect();
                all.extend_from_slice(&encode(&values, CODECS[codec]));
            }
            let whole = all.len();
            prop_assert_eq!(patch_base_offsets(&mut all, base), whole);
            let patched = all.freeze();
            // Still valid (CRC untouched) and offsets are contiguous from `base`.
            let batches = RecordBatch::parse_all(&patched).unwrap();
            let mut expected = base;
            for b in &batches {
                prop_assert_eq!(b.base_offset(), expected);
                expected += b.record_count() as i64;
            }
            let mut cursor = patched.clone();
            let sets = RecordBatchDecoder::decode_all(&mut cursor).unwrap();
            let offsets: Vec<i64> = sets.iter().flat_map(|s| s.records.iter().map(|r| r.offset)).collect();
            let want: Vec<i64> = (base..base + sizes.iter().sum::<usize>() as i64).collect();
            prop_assert_eq!(offsets, want);
        }

        #[test]
        fn skipping_lands_on_the_batch_holding_the_offset(sizes in proptest::collection::vec(1usize..10, 1..6), target in 0i64..60) {
            let mut all = BytesMut::new();
            let mut starts = Vec::new();
            for size in &sizes {
                starts.push(all.len());
                let values: Vec<Vec<u8>> = (0..*size).map(|i| vec![i as u8; 4]).collect();
                all.extend_from_slice(&encode(&values, Compression::None));
            }
            patch_base_offsets(&mut all, 0);
            let at = skip_batches_before(&all, target);
            let mut first = 0i64;
            let mut expected = all.len();
            for (n, size) in sizes.iter().enumerate() {
                if first + *size as i64 > target {
                    expected = starts[n];
                    break;
                }
                first += *size as i64;
            }
            prop_assert_eq!(at, expected);
        }

        #[test]
        fn batches_hold_until_one_byte_changes(at in 0usize..200, cut in 1usize..40) {
            let one = encode(&[b"abc".to_vec(), b"defgh".to_vec()], Compression::None);
            let mut two = BytesMut::from(&one[..]);
            two.extend_from_slice(&one);
            // Patched base offsets still check.
            patch_base_offsets(&mut two, 1000);
            prop_assert!(batches_hold(&two));
            // A torn batch at the end does not.
            prop_assert!(!batches_hold(&two[..two.len() - cut]));
            // Nor a byte changed inside the first batch's CRC span, its
            // length or its magic.
            let mut flipped = two.clone();
            let at = CRC_START + at % (one.len() - CRC_START);
            flipped[at] ^= 0x40;
            prop_assert!(!batches_hold(&flipped));
            let mut long = two.clone();
            long[11] ^= 0x01;
            prop_assert!(!batches_hold(&long));
            let mut magic = two.clone();
            magic[16] = 1;
            prop_assert!(!batches_hold(&magic));
        }

        #[test]
        fn patch_stops_at_a_partial_batch(cut in 1usize..60) {
            let one = encode(&[b"abc".to_vec()], Compression::None);
            let mut two = BytesMut::from(&one[..]);
            two.extend_from_slice(&one[..one.len() - cut.min(one.len() - 1)]);
            prop_assert_eq!(patch_base_offsets(&mut two, 5), one.len());
        }

        /// Records whose keys, values, headers and timestamp deltas cross the
        /// varint length boundaries survive encode -> our view -> decode, under
        /// every codec: the varint and zigzag coding floe depends on is sound.
        #[test]
        fn records_round_trip_across_varint_boundaries(
            specs in proptest::collection::vec(
                (proptest::option::of(0usize..300), 0usize..20_000, -1_000_000i64..1_000_000, 0usize..3),
                1..12),
            codec in 0usize..5,
        ) {
            let records: Vec<Record> = specs.iter().enumerate().map(|(i, (key, value, ts, headers))| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: i as i32,
                timestamp: 1_700_000_000_000 + ts,
                key: key.map(|n| Bytes::from(vec![b'k'; n])),
                value: Some(Bytes::from(vec![(i % 251) as u8; *value])),
                headers: (0..*headers)
                    .map(|h| (StrBytes::from_string(format!("h{h}")), Some(Bytes::from(vec![b'x'; h * 70]))))
                    .collect(),
            }).collect();
            let mut buf = BytesMut::new();
            RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression: CODECS[codec] }).unwrap();
            let bytes = buf.freeze();
            let batches = RecordBatch::parse_all(&bytes).unwrap();
            let count: i32 = batches.iter().map(|b| b.record_count()).sum();
            prop_assert_eq!(count as usize, records.len());
            let max_ts = records.iter().map(|r| r.timestamp).max().unwrap();
            prop_assert_eq!(batches.iter().map(|b| b.max_timestamp()).max().unwrap(), max_ts);
            let mut cursor = bytes.clone();
            let decoded: Vec<Record> = RecordBatchDecoder::decode_all(&mut cursor).unwrap()
                .into_iter().flat_map(|s| s.records).collect();
            prop_assert_eq!(decoded.len(), records.len());
            for (d, r) in decoded.iter().zip(&records) {
                prop_assert_eq!(&d.key, &r.key);
                prop_assert_eq!(&d.value, &r.value);
                prop_assert_eq!(d.timestamp, r.timestamp);
                prop_assert_eq!(&d.headers, &r.headers);
            }
        }

        #[test]
        fn cuts_keep_whole_batches_within_the_limit(sizes in proptest::collection::vec(1usize..10, 1..6), limit in 0usize..2_000, at_least_one: bool) {
            let mut all = BytesMut::new();
            let mut ends = vec![0];
            for size in &sizes {
                let values: Vec<Vec<u8>> = (0..*size).map(|i| vec![i as u8; 40]).collect();
                all.extend_from_slice(&encode(&values, Compression::None));
                ends.push(all.len());
            }
            let keep = whole_batches_within(&all, limit, at_least_one);
            prop_assert!(ends.contains(&keep), "cut inside a batch");
            let first_alone = at_least_one && keep == ends[1];
            prop_assert!(keep <= limit || first_alone);
            // The longest such prefix: one more batch would not fit.
            if let Some(next) = ends.iter().find(|&&e| e > keep) {
                prop_assert!(*next > limit && !(at_least_one && keep == 0));
            }
        }

        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = RecordBatch::parse_all(&Bytes::from(data.clone()));
            let mut copy = data;
            let _ = patch_base_offsets(&mut copy, 0);
        }
    }
}
