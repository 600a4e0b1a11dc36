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

/// Encodes `records` (offsets and timestamps absolute) as one v2 batch with
/// the producer fields and codec of `like`, as a log cleaner rewrites a batch.
///
/// With `delete_horizon`, the batch carries it the way Kafka's cleaner does
/// (KIP-534): attribute bit 6 set and the base timestamp field holding the
/// horizon, record timestamps stored as deltas from it, so every record keeps
/// its own timestamp. `kafka-protocol`'s encoder always bases timestamps on
/// the smallest record timestamp, hence this writer.
pub fn encode(
    records: &[Record],
    like: &RecordBatch,
    delete_horizon: Option<i64>,
) -> Result<RecordBatch, BatchError> {
    encode_as(records, like, like.codec(), -1, delete_horizon)
}

/// `batch` rewritten with `codec`, as Kafka stores a produced batch when the
/// topic's `compression.type` names another codec than the producer's:
/// every record, its offset delta, timestamp, key, value and headers kept,
/// the producer fields (so idempotence still recognises retries) and the
/// partition leader epoch.
/// Decompression is bounded as [`decode`]'s.
pub fn recompress(batch: &RecordBatch, codec: Codec) -> Result<RecordBatch, BatchError> {
    let epoch = batch.partition_leader_epoch();
    encode_as(&decode(batch)?, batch, codec, epoch, None)
}

fn encode_as(
    records: &[Record],
    like: &RecordBatch,
    codec: Codec,
    leader_epoch: i32,
    delete_horizon: Option<i64>,
) -> Result<RecordBatch, BatchError> {
    use bytes::BufMut;
    use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
    let (Some(first), Some(last)) = (records.first(), records.last()) else {
        return Err(BatchError::Invalid("a batch needs records"));
    };
    let base_offset = first.offset;
    let max_timestamp = records.iter().map(|r| r.timestamp).max().unwrap_or(-1);
    let base_timestamp =
        delete_horizon.unwrap_or_else(|| records.iter().map(|r| r.timestamp).min().unwrap_or(-1));
    let write_records = |buf: &mut bytes::BytesMut| -> anyhow::Result<()> {
        for r in records {
            write_record(buf, r, base_offset, base_timestamp)?;
        }
        Ok(())
    };
    let mut payload = bytes::BytesMut::new();
    let compressed = match codec {
        Codec::None => write_records(&mut payload),
        Codec::Gzip => Gzip::compress(&mut payload, write_records),
        Codec::Snappy => Snappy::compress(&mut payload, write_records),
        Codec::Lz4 => Lz4::compress(&mut payload, write_records),
        Codec::Zstd => Zstd::compress(&mut payload, write_records),
    };
    compressed.map_err(|_| BatchError::Invalid("records do not encode"))?;
    let last_offset_delta = i32::try_from(last.offset - base_offset)
        .map_err(|_| BatchError::Invalid("offsets too far apart for one batch"))?;
    let count = i32::try_from(records.len())
        .map_err(|_| BatchError::Invalid("too many records for one batch"))?;
    let mut attributes =
        (like.attributes() & !DELETE_HORIZON_FLAG & !0x07) | codec.attribute_bits();
    if delete_horizon.is_some() {
        attributes |= DELETE_HORIZON_FLAG;
    }
    let mut out = bytes::BytesMut::with_capacity(HEADER_LEN + payload.len());
    out.put_i64(base_offset);
    out.put_i32((HEADER_LEN - crate::batch::LOG_OVERHEAD + payload.len()) as i32);
    out.put_i32(leader_epoch);
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
    RecordBatch::parse_all_stored(&out.freeze())?
        .pop()
        .ok_or(BatchError::Invalid("encoded nothing"))
}

fn write_record(
    buf: &mut bytes::BytesMut,
    r: &Record,
    base_offset: i64,
    base_timestamp: i64,
) -> anyhow::Result<()> {
    use bytes::BufMut;
    let len = |b: &Option<Bytes>| b.as_ref().map_or(-1, |b| b.len() as i64);
    let mut body = bytes::BytesMut::new();
    body.put_i8(0); // attributes
    varlong(&mut body, r.timestamp - base_timestamp);
    varlong(&mut body, i32::try_from(r.offset - base_offset)? as i64);
    varlong(&mut body, len(&r.key));
    if let Some(key) = &r.key {
        body.put_slice(key);
    }
    varlong(&mut body, len(&r.value));
    if let Some(value) = &r.value {
        body.put_slice(value);
    }
    varlong(&mut body, r.headers.len() as i64);
    for (key, value) in &r.headers {
        varlong(&mut body, key.len() as i64);
        body.put_slice(key.as_bytes());
        varlong(&mut body, len(value));
        if let Some(value) = value {
            body.put_slice(value);
        }
    }
    varlong(buf, i64::from(i32::try_from(body.len())?));
    buf.put_slice(&body);
    Ok(())
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
                let again = recompress(&batch, codec).unwrap();
                assert_eq!(again.codec(), codec);
                // Everything but the codec bits, and every record, kept.
                assert_eq!(again.attributes() & !0x07, batch.attributes() & !0x07);
                assert_eq!(
                    (
                        again.base_offset(),
                        again.last_offset_delta(),
                        again.record_count()
                    ),
                    (
                        batch.base_offset(),
                        batch.last_offset_delta(),
                        batch.record_count()
                    )
                );
                assert_eq!(
                    (
                        again.producer_id(),
                        again.producer_epoch(),
                        again.base_sequence()
                    ),
                    (
                        batch.producer_id(),
                        batch.producer_epoch(),
                        batch.base_sequence()
                    )
                );
                assert_eq!(again.max_timestamp(), batch.max_timestamp());
                assert_eq!(decode(&again).unwrap(), decode(&batch).unwrap());
            }
        }
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
            for horizon in [None, Some(9_999_999)] {
                let rewritten = super::encode(&kept, &batch, horizon).unwrap();
                assert_eq!(rewritten.codec(), batch.codec());
                assert_eq!(delete_horizon(&rewritten), horizon);
                assert_eq!(rewritten.base_offset(), 1);
                assert_eq!(rewritten.last_offset_delta(), 2);
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
