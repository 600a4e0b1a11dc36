//! Decoding the records inside a stored batch, for the few jobs that must
//! (ListOffsets by timestamp, key compaction), with every allocation bounded.
//!
//! The decoder is `kafka-protocol`'s, but it decompresses through
//! [`crate::compression`], so a batch can cost at most
//! [`crate::compression::MAX_DECOMPRESSED_BATCH_BYTES`] however it lies, and a
//! batch whose records do not add up to its header's count is refused.

use bytes::Bytes;
use kafka_protocol::records::{Compression, Record, RecordBatchDecoder};

use crate::batch::{BatchError, HEADER_LEN, RecordBatch};
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{batch_claiming, encode};
    use kafka_protocol::records::Compression;

    #[test]
    fn decodes_every_codec() {
        for compression in crate::testing::CODECS {
            let values: Vec<Vec<u8>> = (0..50).map(|i| vec![i as u8; 300]).collect();
            let bytes = encode(&values, compression);
            let batch = RecordBatch::parse_all(&bytes).unwrap().remove(0);
            let records = decode(&batch).unwrap();
            assert_eq!(records.len(), 50);
            assert_eq!(records[49].value.as_deref(), Some(&[49u8; 300][..]));
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
