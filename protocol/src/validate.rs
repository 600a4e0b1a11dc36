//! A produced batch's records checked as Kafka's `LogValidator` checks them,
//! in one walk that allocates nothing per record (see [`crate::walk`]):
//!
//! - the records' framing and count (`INVALID_RECORD`), so that a batch whose
//!   header claims millions of records it does not hold never moves a high
//!   watermark, compressed or not;
//! - each record's key on a compacted topic (`INVALID_RECORD`), and each
//!   record's timestamp against the topic's bounds (`INVALID_TIMESTAMP`),
//!   reported record by record as KIP-467 has it;
//! - offset deltas not numbered 0, 1, ...: the batch is rebuilt numbered so
//!   (Kafka rebuilds it rather than refuse it);
//! - the header's `maxTimestamp` set to the records' largest, as Kafka sets it,
//!   so that ListOffsets can trust the headers of what floe stores.
//!
//! A batch to be stored in another codec (the topic's `compression.type`)
//! is rebuilt in it from the same walk's records.

use bytes::Bytes;

use crate::batch::{BatchError, Codec, RecordBatch};
use crate::walk::{Walk, section};

/// What a topic asks of the records of a batch produced to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRules {
    /// Every record needs a key (`cleanup.policy` includes `compact`).
    pub keys_required: bool,
    /// The range `[min, max]` every record's timestamp must lie in
    /// (`CreateTime` topics); `None` for `LogAppendTime`.
    pub timestamps: Option<(i64, i64)>,
    /// The codec and level to store the batch in, if not its own.
    pub recompress: Option<(Codec, Option<i32>)>,
    /// The largest the batch may be once rebuilt.
    pub max_bytes: usize,
    /// The most record errors to list (what is left of the request's
    /// [`MAX_RECORD_ERRORS`]).
    pub max_record_errors: usize,
}

/// The most record errors one produce request's answer lists (KIP-467),
/// across its partitions: past them a batch is still refused, and its
/// answer says how many there were. A bound on what a request can make
/// the agent hold, whatever its bytes.
pub const MAX_RECORD_ERRORS: usize = 1024;

/// Why a batch's records were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The batch as a whole (its framing, its codec, its size once rebuilt).
    Batch(BatchError),
    /// Some of its records: by their index in the batch, at most
    /// `max_record_errors` of them, of `total`.
    Records {
        errors: Vec<(i32, RecordError)>,
        total: usize,
    },
}

/// What is wrong with one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// No key, on a compacted topic.
    NoKey,
    /// Its timestamp, outside the topic's bounds.
    Timestamp(i64),
    /// Its batch says log-append time, on a topic of create time.
    LogAppendTime,
}

/// A record without a timestamp.
const NO_TIMESTAMP: i64 = -1;

impl From<BatchError> for Refused {
    fn from(e: BatchError) -> Self {
        Refused::Batch(e)
    }
}

/// `batch` as it is to be stored, or why it is refused (see the module doc).
pub fn validate(batch: RecordBatch, rules: &RecordRules) -> Result<RecordBatch, Refused> {
    // Compressed bytes that do not decompress, under a good CRC: Kafka
    // finds them invalid (a producer must not retry them).
    let records = section(&batch).map_err(|e| match e {
        BatchError::Corrupt(why) => BatchError::Invalid(why),
        other => other,
    })?;
    let mut walk = Walk::new(&records, batch.record_count());
    let mut errors = Vec::new();
    let mut total = 0usize;
    let mut numbered = true;
    let mut max_timestamp = i64::MIN;
    for record in walk.by_ref() {
        let record = record?;
        numbered &= record.offset_delta == record.index;
        // As Java's long arithmetic: a delta that overflows wraps.
        let timestamp = batch.base_timestamp().wrapping_add(record.timestamp_delta);
        max_timestamp = max_timestamp.max(timestamp);
        // Kafka's `validateRecord`: the key first, then the timestamp.
        let error = match rules.timestamps {
            _ if rules.keys_required && record.key.is_none() => Some(RecordError::NoKey),
            Some(_) if batch.is_log_append_time() => Some(RecordError::LogAppendTime),
            // NO_TIMESTAMP (older clients): Kafka lets it be.
            Some((min, max)) if timestamp != NO_TIMESTAMP && !(min..=max).contains(&timestamp) => {
                Some(RecordError::Timestamp(timestamp))
            }
            _ => None,
        };
        if let Some(error) = error {
            total += 1;
            if errors.len() < rules.max_record_errors {
                errors.push((record.index, error));
            }
        }
    }
    walk.finish()?;
    if total > 0 {
        return Err(Refused::Records { errors, total });
    }
    let batch = match rules.timestamps.is_some() && max_timestamp != batch.max_timestamp() {
        true => batch.with_max_timestamp(max_timestamp),
        false => batch,
    };
    let codec = match (rules.recompress, numbered) {
        (Some((codec, level)), _) => Some((codec, level)),
        (None, false) => Some((batch.codec(), None)),
        (None, true) => None,
    };
    match codec {
        None => Ok(batch),
        Some((codec, level)) => Ok(rebuild(&batch, &records, codec, level, rules.max_bytes)?),
    }
}

/// `batch` rebuilt from its checked `records` in `codec` at `level`,
/// numbered 0, 1, ... (see [`crate::records::recompress`]).
fn rebuild(
    batch: &RecordBatch,
    records: &Bytes,
    codec: Codec,
    level: Option<i32>,
    max_bytes: usize,
) -> Result<RecordBatch, BatchError> {
    crate::records::rebuild(batch, records, codec, level, max_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::encode;
    use kafka_protocol::records::Compression;

    fn rules() -> RecordRules {
        RecordRules {
            keys_required: false,
            timestamps: None,
            recompress: None,
            max_bytes: usize::MAX,
            max_record_errors: MAX_RECORD_ERRORS,
        }
    }

    fn batch(values: &[&str], compression: Compression) -> RecordBatch {
        let values: Vec<Vec<u8>> = values.iter().map(|v| v.as_bytes().to_vec()).collect();
        RecordBatch::parse_all(&encode(&values, compression))
            .unwrap()
            .remove(0)
    }

    #[test]
    fn an_honest_batch_is_stored_as_it_came() {
        for compression in crate::testing::CODECS {
            let b = batch(&["a", "b", "c"], compression);
            let stored = validate(b.clone(), &rules()).unwrap();
            assert_eq!(stored, b);
        }
    }

    #[test]
    fn a_compressed_batch_lying_about_its_count_is_invalid() {
        for compression in crate::testing::CODECS {
            let lying = crate::testing::lying_batch(2, compression);
            let lying = RecordBatch::parse_all(&lying).unwrap().remove(0);
            assert!(
                matches!(
                    validate(lying, &rules()),
                    Err(Refused::Batch(BatchError::Invalid(_)))
                ),
                "{compression:?}"
            );
        }
    }

    #[test]
    fn keyless_records_on_a_compacted_topic_are_each_refused() {
        // The test batches' records have keys: strip them by hand.
        let keyed = batch(&["a", "b"], Compression::None);
        let strict = RecordRules {
            keys_required: true,
            ..rules()
        };
        assert!(validate(keyed, &strict).is_ok());
        let keyless = crate::testing::keyless(&[b"x".to_vec(), b"y".to_vec(), b"z".to_vec()]);
        let keyless = RecordBatch::parse_all(&keyless).unwrap().remove(0);
        assert_eq!(
            validate(keyless, &strict),
            Err(Refused::Records {
                errors: vec![
                    (0, RecordError::NoKey),
                    (1, RecordError::NoKey),
                    (2, RecordError::NoKey)
                ],
                total: 3
            })
        );
    }

    #[test]
    fn every_record_s_timestamp_is_checked_and_the_header_made_true() {
        // Timestamps 1,000, 1,001, 1,002 (see `testing::records`).
        let b = batch(&["a", "b", "c"], Compression::Lz4);
        let within = RecordRules {
            timestamps: Some((1_000, 1_002)),
            ..rules()
        };
        assert!(validate(b.clone(), &within).is_ok());
        let tight = RecordRules {
            timestamps: Some((1_000, 1_001)),
            ..rules()
        };
        assert_eq!(
            validate(b.clone(), &tight),
            Err(Refused::Records {
                errors: vec![(2, RecordError::Timestamp(1_002))],
                total: 1
            })
        );
        // A header claiming a larger max timestamp than its records hold
        // is stored with the records' own.
        let lying = b.with_max_timestamp(9_999_999);
        let stored = validate(lying, &within).unwrap();
        assert_eq!(stored.max_timestamp(), 1_002);
        assert_eq!(stored.bytes()[61..], b.bytes()[61..]);
        // A producer may not claim log-append time on a create-time topic.
        assert_eq!(
            validate(b.with_log_append_time(1_001), &within),
            Err(Refused::Records {
                errors: vec![
                    (0, RecordError::LogAppendTime),
                    (1, RecordError::LogAppendTime),
                    (2, RecordError::LogAppendTime)
                ],
                total: 3
            })
        );
    }

    #[test]
    fn record_errors_are_listed_up_to_the_allowance() {
        let keyless = crate::testing::keyless(&vec![b"x".to_vec(); 10]);
        let keyless = RecordBatch::parse_all(&keyless).unwrap().remove(0);
        let strict = RecordRules {
            keys_required: true,
            max_record_errors: 3,
            ..rules()
        };
        match validate(keyless, &strict) {
            Err(Refused::Records { errors, total }) => {
                assert_eq!((errors.len(), total), (3, 10));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn records_not_numbered_are_rebuilt_in_their_own_codec() {
        let b = crate::testing::misnumbered(&[b"a".to_vec(), b"b".to_vec()], Codec::Gzip);
        let b = RecordBatch::parse_all(&b).unwrap().remove(0);
        let stored = validate(b, &rules()).unwrap();
        assert_eq!(stored.codec(), Codec::Gzip);
        let offsets: Vec<i64> = crate::records::decode(&stored)
            .unwrap()
            .iter()
            .map(|r| r.offset)
            .collect();
        assert_eq!(offsets, vec![0, 1]);
    }
}
