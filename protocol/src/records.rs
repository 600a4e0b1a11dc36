//! Decoding the records inside a stored batch, for the few jobs that must
//! (ListOffsets by timestamp, key compaction), with every allocation bounded.
//!
//! The decoder is `kafka-protocol`'s, but it decompresses through
//! [`crate::compression`], so a batch can cost at most
//! [`crate::compression::MAX_DECOMPRESSED_BATCH_BYTES`] however it lies, and a
//! batch whose records do not add up to its header's count is refused.

use bytes::Bytes;
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder};

use crate::batch::{BatchError, Codec, HEADER_LEN, RecordBatch};
use crate::compression::{decompress, decompressed_limit};
use crate::walk::{RecordView, Walk};

/// The records of one batch, decompressed within the codec's bounds.
pub fn decode(batch: &RecordBatch) -> Result<Vec<Record>, BatchError> {
    let limit = decompressed_limit(batch.codec(), batch.len().saturating_sub(HEADER_LEN));
    let bounded = |payload: &mut Bytes, compression: Compression| -> anyhow::Result<Bytes> {
        let codec = match compression {
            Compression::None => return Ok(std::mem::take(payload)),
            _ => batch.codec(),
        };
        Ok(decompress(codec, payload, limit)?)
    };
    let set = RecordBatchDecoder::decode_with_custom_compression(
        &mut batch.bytes().clone(),
        Some(bounded),
    )
    .map_err(|e| match e.downcast::<BatchError>() {
        Ok(e) => e,
        Err(_) => BatchError::Corrupt("records do not decode"),
    })?;
    if set.records.len() != batch.record_count().max(0) as usize {
        return Err(BatchError::Corrupt(
            "record count does not match the records",
        ));
    }
    Ok(set.records)
}

/// The records of a run of stored batches, in order.
pub fn decode_all(batches: &[RecordBatch]) -> Result<Vec<Record>, BatchError> {
    let mut records = Vec::new();
    for batch in batches {
        records.extend(decode(batch)?);
    }
    Ok(records)
}

/// Attribute bit 6: the batch's base timestamp is its delete horizon (KIP-534).
pub const DELETE_HORIZON_FLAG: i16 = 0x40;

/// `batch` with its records compressed with `codec` instead, as Kafka
/// stores a produced batch when the topic's `compression.type` names
/// another codec than the producer's.
///
/// A v2 batch compresses its records section as a whole, and the records'
/// bytes are the same whatever the codec: they are carried over byte for
/// byte (keys, values, headers with any keys, timestamps and offset
/// deltas), after checking they are `record_count` well-formed records.
/// Records not numbered 0, 1, ... are renumbered, as Kafka's LogValidator
/// rebuilds such a batch rather than refuse it. The
/// header is kept but for its codec bits, length and CRC: producer fields
/// (idempotence still recognises retries), timestamps and their type,
/// leader epoch. The records are compressed at `level` (the codec's
/// default when `None`, see [`crate::compression::compress`]). Decompression is bounded as [`decode`]'s, and nothing is
/// allocated per record; an uncompressed result larger than `max_bytes` is
/// refused before it is built.
pub fn recompress(
    batch: &RecordBatch,
    codec: Codec,
    level: Option<i32>,
    max_bytes: usize,
) -> Result<RecordBatch, BatchError> {
    rebuild(
        batch,
        &crate::walk::section(batch)?,
        codec,
        level,
        max_bytes,
    )
}

/// [`recompress`] from the batch's records section, already decompressed.
/// The records are checked (see [`crate::walk`]) and then compressed as
/// they are renumbered, a chunk at a time: memory holds the compressed
/// bytes, and a batch that cannot fit `max_bytes` is given up as soon as
/// its compressed bytes pass it.
pub fn rebuild(
    batch: &RecordBatch,
    records: &[u8],
    codec: Codec,
    level: Option<i32>,
    max_bytes: usize,
) -> Result<RecordBatch, BatchError> {
    use bytes::BufMut;
    let count = batch.record_count();
    let mut walk = Walk::new(records, count);
    let mut numbered = true;
    for record in walk.by_ref() {
        let record = record?;
        numbered &= record.offset_delta == record.index;
    }
    walk.finish()?;
    let room = max_bytes.saturating_sub(HEADER_LEN);
    let size = numbered.then_some(records.len());
    let mut compressing = crate::compression::Compressing::new(codec, level, size, room)?;
    if numbered {
        compressing.write(records)?;
    } else {
        // Each record with its offset delta made its index, its length
        // with it, and otherwise byte for byte.
        let mut chunk = bytes::BytesMut::new();
        let mut body = bytes::BytesMut::new();
        for record in Walk::new(records, count) {
            let record = record?;
            body.clear();
            body.extend_from_slice(&records[record.body.start..record.offset_delta_span.start]);
            varlong(&mut body, record.index as i64);
            body.extend_from_slice(&records[record.offset_delta_span.end..record.body.end]);
            varlong(&mut chunk, body.len() as i64);
            chunk.extend_from_slice(&body);
            if chunk.len() >= 64 * 1024 {
                compressing.write(&chunk)?;
                chunk.clear();
            }
        }
        compressing.write(&chunk)?;
    }
    let compressed = compressing.finish()?;
    let mut out = bytes::BytesMut::with_capacity(HEADER_LEN + compressed.len());
    out.put_slice(&batch.bytes()[..HEADER_LEN]);
    out.put_slice(&compressed);
    let length = (out.len() - crate::batch::LOG_OVERHEAD) as i32;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    let attributes = (batch.attributes() & !0x07) | codec.attribute_bits();
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    let (again, rest) = RecordBatch::parse_one(&out.freeze())?;
    debug_assert!(rest.is_empty());
    Ok(again)
}

/// The records of `like` that `keep` keeps, as one v2 batch with the
/// producer fields and codec of `like`, as a log cleaner rewrites a batch;
/// `None` if it keeps none. `section` is `like`'s records section (see
/// [`crate::walk::section`]). Each kept record is carried over byte for
/// byte but for its deltas, which are taken from the new batch's first
/// offset and base timestamp; two walks of `section`, nothing allocated
/// per record.
///
/// With `delete_horizon`, the batch carries it the way Kafka's cleaner does
/// (KIP-534): attribute bit 6 set and the base timestamp field holding the
/// horizon, record timestamps stored as deltas from it, so every record keeps
/// its own timestamp. A log-append-time batch keeps its max timestamp (the
/// one its consumers read for every record).
pub fn encode_kept(
    like: &RecordBatch,
    section: &[u8],
    keep: &dyn Fn(&RecordView<'_>) -> bool,
    delete_horizon: Option<i64>,
) -> Result<Option<RecordBatch>, BatchError> {
    use bytes::BufMut;
    let offset_of = |r: &RecordView<'_>| like.base_offset() + r.offset_delta as i64;
    // As Java's long arithmetic (a consumer's): a delta that overflows
    // wraps, and wraps back when the delta is taken again below.
    let timestamp_of = |r: &RecordView<'_>| like.base_timestamp().wrapping_add(r.timestamp_delta);
    let kept = || Walk::new(section, like.record_count()).filter(|r| r.as_ref().map_or(true, keep));
    // The first walk: where the new batch begins and ends.
    let (mut count, mut first, mut last) = (0i32, i64::MAX, i64::MIN);
    let (mut min_timestamp, mut max_timestamp) = (i64::MAX, i64::MIN);
    for record in kept() {
        let record = record?;
        count += 1;
        first = first.min(offset_of(&record));
        last = last.max(offset_of(&record));
        min_timestamp = min_timestamp.min(timestamp_of(&record));
        max_timestamp = max_timestamp.max(timestamp_of(&record));
    }
    if count == 0 {
        return Ok(None);
    }
    let base_timestamp = delete_horizon.unwrap_or(min_timestamp);
    if like.is_log_append_time() {
        max_timestamp = like.max_timestamp();
    }
    // The second: the kept records, rewritten.
    let mut records = bytes::BytesMut::new();
    let mut body = bytes::BytesMut::new();
    for record in kept() {
        let record = record?;
        body.clear();
        body.put_i8(0); // attributes
        varlong(
            &mut body,
            timestamp_of(&record).wrapping_sub(base_timestamp),
        );
        varlong(&mut body, offset_of(&record) - first);
        // Key, value and headers as they lie.
        body.extend_from_slice(&section[record.offset_delta_span.end..record.body.end]);
        varlong(&mut records, body.len() as i64);
        records.extend_from_slice(&body);
    }
    let payload = crate::compression::compress(like.codec(), None, &records)?;
    let last_offset_delta = i32::try_from(last - first)
        .map_err(|_| BatchError::Invalid("offsets too far apart for one batch"))?;
    let mut attributes = like.attributes() & !DELETE_HORIZON_FLAG;
    if delete_horizon.is_some() {
        attributes |= DELETE_HORIZON_FLAG;
    }
    let mut out = bytes::BytesMut::with_capacity(HEADER_LEN + payload.len());
    out.put_i64(first);
    out.put_i32((HEADER_LEN - crate::batch::LOG_OVERHEAD + payload.len()) as i32);
    out.put_i32(like.partition_leader_epoch());
    out.put_i8(2);
    out.put_u32(0); // CRC, below
    out.put_i16(attributes);
    out.put_i32(last_offset_delta);
    out.put_i64(base_timestamp);
    out.put_i64(max_timestamp);
    out.put_i64(like.producer_id());
    out.put_i16(like.producer_epoch());
    // As Kafka's cleaner: the producer fields of the batch it came from.
    out.put_i32(like.base_sequence());
    out.put_i32(count);
    out.put_slice(&payload);
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    let batch = RecordBatch::parse_all_stored(&out.freeze())?
        .pop()
        .ok_or(BatchError::Invalid("encoded nothing"))?;
    Ok(Some(batch))
}

/// A zigzag varint, as the record format writes every length and delta (an
/// `i32` field's value encodes the same as a varint of it).
fn varlong(buf: &mut bytes::BytesMut, value: i64) {
    use bytes::BufMut;
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// The delete horizon a cleaned batch carries (KIP-534), if any.
pub fn delete_horizon(batch: &RecordBatch) -> Option<i64> {
    (batch.attributes() & DELETE_HORIZON_FLAG != 0).then(|| batch.base_timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{batch_claiming, encode as encode_values};
    use kafka_protocol::records::Compression;

    #[test]
    fn decodes_every_codec() {
        for compression in crate::testing::CODECS {
            let values: Vec<Vec<u8>> = (0..50).map(|i| vec![i as u8; 300]).collect();
            let bytes = encode_values(&values, compression);
            let batch = RecordBatch::parse_all(&bytes).unwrap().remove(0);
            let records = decode(&batch).unwrap();
            assert_eq!(records.len(), 50);
            assert_eq!(records[49].value.as_deref(), Some(&[49u8; 300][..]));
        }
    }

    #[test]
    fn recompressing_changes_only_the_codec() {
        let all = [
            Codec::None,
            Codec::Gzip,
            Codec::Snappy,
            Codec::Lz4,
            Codec::Zstd,
        ];
        for compression in crate::testing::CODECS {
            let values: Vec<Vec<u8>> = (0..20).map(|i| vec![b'a' + i as u8; 100]).collect();
            let batch = RecordBatch::parse_all(&encode_values(&values, compression))
                .unwrap()
                .remove(0);
            for codec in all {
                let again = recompress(&batch, codec, None, usize::MAX).unwrap();
                assert_eq!(again.codec(), codec);
                // The header but for codec, length and CRC; every record.
                assert_eq!(again.attributes() & !0x07, batch.attributes() & !0x07);
                assert_eq!(again.bytes()[..8], batch.bytes()[..8]);
                assert_eq!(again.bytes()[12..17], batch.bytes()[12..17]);
                assert_eq!(again.bytes()[23..HEADER_LEN], batch.bytes()[23..HEADER_LEN]);
                assert_eq!(decode(&again).unwrap(), decode(&batch).unwrap());
            }
        }
    }

    /// A batch whose records section is `records`, claiming `count` records.
    fn batch_of(records: &[u8], count: i32, codec: Codec) -> RecordBatch {
        use bytes::BufMut;
        use kafka_protocol::compression::{Compressor, Zstd};
        let mut payload = bytes::BytesMut::new();
        match codec {
            Codec::None => payload.put_slice(records),
            _ => Zstd::compress(&mut payload, |b: &mut bytes::BytesMut| {
                b.put_slice(records);
                Ok(())
            })
            .unwrap(),
        }
        let framed = crate::testing::framed_batch(&payload, count, codec);
        RecordBatch::parse_all(&framed).unwrap().remove(0)
    }

    /// One record's bytes: length, attributes, deltas, no key, `value`,
    /// then `headers` as (key, value) with keys as raw bytes.
    fn record(offset_delta: i64, value: &[u8], headers: &[(&[u8], &[u8])]) -> Vec<u8> {
        use bytes::BufMut;
        let mut body = bytes::BytesMut::new();
        body.put_i8(0);
        varlong(&mut body, 0);
        varlong(&mut body, offset_delta);
        varlong(&mut body, -1);
        varlong(&mut body, value.len() as i64);
        body.put_slice(value);
        varlong(&mut body, headers.len() as i64);
        for (k, v) in headers {
            varlong(&mut body, k.len() as i64);
            body.put_slice(k);
            varlong(&mut body, v.len() as i64);
            body.put_slice(v);
        }
        let mut out = bytes::BytesMut::new();
        varlong(&mut out, body.len() as i64);
        out.put_slice(&body);
        out.to_vec()
    }

    #[test]
    fn levels_change_the_bytes_not_the_records() {
        let values: Vec<Vec<u8>> = (0..200)
            .map(|i| format!("value {i} {}", "abcabcabd".repeat(i % 7)).into_bytes())
            .collect();
        let encoded = crate::testing::encode(&values, kafka_protocol::records::Compression::None);
        let batch = RecordBatch::parse_one(&encoded).unwrap().0;
        for (codec, low, high) in [
            (Codec::Zstd, 1, 19),
            (Codec::Gzip, 1, 9),
            (Codec::Lz4, 1, 12),
        ] {
            let fast = recompress(&batch, codec, Some(low), usize::MAX).unwrap();
            let small = recompress(&batch, codec, Some(high), usize::MAX).unwrap();
            assert!(
                small.len() < fast.len(),
                "{codec:?}: {} vs {}",
                small.len(),
                fast.len()
            );
            for stored in [fast, small] {
                let read: Vec<Vec<u8>> = decode(&stored)
                    .unwrap()
                    .into_iter()
                    .map(|r| r.value.unwrap().to_vec())
                    .collect();
                assert_eq!(read, values);
            }
        }
    }

    #[test]
    fn recompressing_keeps_records_byte_for_byte() {
        // Duplicate header keys and a key that is not UTF-8: kept as sent.
        let headers: &[(&[u8], &[u8])] = &[(b"k", b"1"), (b"k", b"2"), (&[0xff, 0xfe], b"x")];
        let records = [record(0, b"a", headers), record(1, b"b", &[])].concat();
        let batch = batch_of(&records, 2, Codec::None);
        let zstd = recompress(&batch, Codec::Zstd, None, usize::MAX).unwrap();
        let back = recompress(&zstd, Codec::None, None, usize::MAX).unwrap();
        assert_eq!(back.bytes(), batch.bytes());
    }

    #[test]
    fn a_log_append_time_header_survives_recompression() {
        let records = [record(0, b"a", &[]), record(1, b"b", &[])].concat();
        let stamped = batch_of(&records, 2, Codec::None).with_log_append_time(7_777);
        let again = recompress(&stamped, Codec::Lz4, None, usize::MAX).unwrap();
        assert!(again.is_log_append_time());
        assert_eq!(again.max_timestamp(), 7_777);
    }

    #[test]
    fn records_with_lengths_past_their_end_are_refused() {
        // The value's length (the byte before "value") says 60 bytes; the
        // record holds 5.
        let mut broken = record(0, b"value", &[]);
        let at = broken.len() - 7;
        assert_eq!(broken[at], 10, "zigzag 5");
        broken[at] = 120;
        let batch = batch_of(&broken, 1, Codec::None);
        assert!(matches!(
            recompress(&batch, Codec::Zstd, None, usize::MAX),
            Err(BatchError::Invalid(_))
        ));
        // A record longer than its fields: refused too.
        let mut padded = record(0, b"v", &[]);
        padded[0] += 2; // one more byte (zigzag)
        padded.push(0);
        let batch = batch_of(&padded, 1, Codec::None);
        assert!(recompress(&batch, Codec::Zstd, None, usize::MAX).is_err());
        // Honest records of every shape pass.
        let ok = record(0, b"value", &[(b"k", b"v")]);
        assert!(
            recompress(
                &batch_of(&ok, 1, Codec::None),
                Codec::Zstd,
                None,
                usize::MAX
            )
            .is_ok()
        );
    }

    #[test]
    fn records_not_numbered_as_counted_are_renumbered_as_kafka_does() {
        // Deltas wrong, repeated, out of order, or a varint longer than the
        // right one (the record's length changes with it).
        for deltas in [vec![0, 0], vec![1, 0], vec![0, 2], vec![5_000, 70_000]] {
            let records: Vec<u8> = deltas
                .iter()
                .enumerate()
                .flat_map(|(i, &d)| record(d, format!("v{i}").as_bytes(), &[(b"h", b"x")]))
                .collect();
            let batch = batch_of(&records, 2, Codec::None);
            let fixed = recompress(&batch, Codec::Zstd, None, usize::MAX).unwrap();
            let read = decode(&fixed).unwrap();
            let seen: Vec<(i64, &[u8])> = read
                .iter()
                .map(|r| (r.offset, r.value.as_deref().unwrap_or_default()))
                .collect();
            assert_eq!(seen, vec![(0, &b"v0"[..]), (1, &b"v1"[..])], "{deltas:?}");
            assert_eq!(read[1].headers.len(), 1);
        }
        // More bytes than the count's records, or fewer: refused.
        let v = [b'v'; 20];
        let three = [record(0, &v, &[]), record(1, &v, &[]), record(2, &v, &[])].concat();
        let batch = batch_of(&three, 2, Codec::None);
        assert!(recompress(&batch, Codec::Zstd, None, usize::MAX).is_err());
        let batch = batch_of(&three, 4, Codec::None);
        assert!(recompress(&batch, Codec::Zstd, None, usize::MAX).is_err());
    }

    #[test]
    fn a_bomb_is_refused_within_the_bounds() {
        // 8 MiB of one byte zstd-compresses to a few hundred bytes; held to
        // a limit of 1 MiB uncompressed, it is refused before it is built.
        let records = record(0, &vec![7u8; 8 << 20], &[]);
        let bomb = batch_of(&records, 1, Codec::Zstd);
        assert!(bomb.len() < 4096, "{}", bomb.len());
        assert!(matches!(
            recompress(&bomb, Codec::None, None, 1 << 20),
            Err(BatchError::TooLarge)
        ));
        // Within bounds it recompresses, and the result is checked again.
        let lz4 = recompress(&bomb, Codec::Lz4, None, usize::MAX).unwrap();
        assert_eq!(lz4.record_count(), 1);
    }

    #[test]
    fn encoding_keeps_records_and_can_carry_a_delete_horizon() {
        for compression in crate::testing::CODECS {
            let values: Vec<Vec<u8>> = (0..5).map(|i| vec![i as u8; 50]).collect();
            let batch = RecordBatch::parse_all(&encode_values(&values, compression))
                .unwrap()
                .remove(0);
            let records = decode(&batch).unwrap();
            let kept: Vec<Record> = records.iter().skip(1).step_by(2).cloned().collect();
            let section = crate::walk::section(&batch).unwrap();
            let odd = |r: &RecordView<'_>| r.index % 2 == 1;
            for horizon in [None, Some(9_999_999)] {
                let rewritten = super::encode_kept(&batch, &section, &odd, horizon)
                    .unwrap()
                    .unwrap();
                assert_eq!(rewritten.codec(), batch.codec());
                assert_eq!(delete_horizon(&rewritten), horizon);
                assert_eq!(rewritten.base_offset(), 1);
                assert_eq!(rewritten.last_offset_delta(), 2);
                assert_eq!(rewritten.record_count(), 2);
                assert_eq!(rewritten.max_timestamp(), 1_003);
                let again = decode(&rewritten).unwrap();
                let view = |rs: &[Record]| {
                    rs.iter()
                        .map(|r| {
                            (
                                r.offset,
                                r.timestamp,
                                r.key.clone(),
                                r.value.clone(),
                                r.headers.clone(),
                            )
                        })
                        .collect::<Vec<_>>()
                };
                assert_eq!(view(&again), view(&kept), "{compression:?} {horizon:?}");
            }
            let none = |_: &RecordView<'_>| false;
            assert_eq!(super::encode_kept(&batch, &section, &none, None), Ok(None));
        }
    }

    /// The 61-byte batch of the review: a header claiming 2^31-1 records
    /// used to make the decoder reserve 378 GB and abort the process.
    #[test]
    fn a_header_claiming_billions_of_records_is_corrupt_not_an_abort() {
        for compression in [Compression::None, Compression::Zstd] {
            let batch = batch_claiming(i32::MAX, compression);
            assert!(decode(&batch).is_err());
        }
    }
}
