//! The per-topic checks a Kafka broker makes on a produced batch beyond its
//! structure: size limits, log-append time, the topic's `compression.type`,
//! and what Kafka's LogValidator checks of every record (framing and count,
//! keys on compacted topics, timestamps; see [`floe_protocol::validate`]).
//!
//! The header's checks are cheap and made inline ([`ProduceRules::apply`]);
//! the records' walk is record-level work, which the produce handler runs
//! off the runtime's threads when a batch is large or compressed
//! ([`ProduceRules::check_records`]).

use floe_metastore::{TimestampType, TopicCompression, TopicConfig};
use floe_protocol::ResponseError;
use floe_protocol::batch::{Codec, RecordBatch};
use floe_protocol::validate::{RecordError, RecordRules, Refused as RecordsRefused, validate};

/// A produced batch refused: the error, its message, and the records at
/// fault with theirs (KIP-467's `record_errors`, Produce v8+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub error: ResponseError,
    pub message: String,
    pub records: Vec<(i32, String)>,
}

impl From<(ResponseError, String)> for Refused {
    fn from((error, message): (ResponseError, String)) -> Self {
        Refused {
            error,
            message,
            records: Vec::new(),
        }
    }
}

pub use crate::config::DEFAULT_MESSAGE_MAX_BYTES;

/// What a topic's configs ask of produced batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceRules {
    /// `max.message.bytes` (else the broker's `message.max.bytes`).
    pub max_message_bytes: u64,
    /// `message.timestamp.type=LogAppendTime`.
    pub log_append_time: bool,
    /// `message.timestamp.before.max.ms` (or `difference.max.ms`): how far in
    /// the past a CreateTime timestamp may be.
    pub before_max_ms: i64,
    /// `message.timestamp.after.max.ms` (or `difference.max.ms`): how far in
    /// the future.
    pub after_max_ms: i64,
    /// `cleanup.policy` includes `compact`: every record needs a key.
    pub keys_required: bool,
    /// `compression.type` other than `producer`: the codec batches are
    /// stored with, recompressed to it when they come in another.
    pub codec: Option<Codec>,
    /// The topic's `compression.<codec>.level` for that codec (KIP-390);
    /// `None`: the codec's default.
    pub level: Option<i32>,
}

impl ProduceRules {
    /// `message_max_bytes`: the broker's, which the topic's `max.message.bytes` overrides.
    pub fn of(config: &TopicConfig, message_max_bytes: u64) -> ProduceRules {
        ProduceRules {
            max_message_bytes: config.max_message_bytes.unwrap_or(message_max_bytes),
            log_append_time: config.timestamp_type == TimestampType::LogAppendTime,
            before_max_ms: config.timestamp_before_max_ms,
            after_max_ms: config.timestamp_after_max_ms,
            keys_required: config.compact,
            level: match config.compression {
                TopicCompression::Gzip => Some(config.gzip_level).filter(|l| *l != -1),
                TopicCompression::Lz4 => Some(config.lz4_level),
                TopicCompression::Zstd => Some(config.zstd_level),
                _ => None,
            },
            codec: match config.compression {
                TopicCompression::Producer => None,
                TopicCompression::Uncompressed => Some(Codec::None),
                TopicCompression::Gzip => Some(Codec::Gzip),
                TopicCompression::Snappy => Some(Codec::Snappy),
                TopicCompression::Lz4 => Some(Codec::Lz4),
                TopicCompression::Zstd => Some(Codec::Zstd),
            },
        }
    }

    /// The codec (and level) `batch` is to be stored in when it is not its
    /// own: the topic's `compression.type` and `compression.<codec>.level`.
    /// As Kafka's LogValidator, a batch already in the topic's codec is kept
    /// as it came, whatever level made it. The one case floe decompresses
    /// what it stores; see [`recompress`].
    pub fn recompress_to(&self, batch: &RecordBatch) -> Option<(Codec, Option<i32>)> {
        self.codec
            .filter(|&codec| codec != batch.codec())
            .map(|codec| (codec, self.level))
    }

    /// The batch as it is to be stored, as far as its header says (its
    /// size, and log-append time), or the error Kafka answers with. Its
    /// records are checked by [`ProduceRules::check_records`].
    pub fn apply(
        &self,
        batch: RecordBatch,
        now_ms: i64,
    ) -> Result<RecordBatch, (ResponseError, String)> {
        if batch.len() as u64 > self.max_message_bytes {
            return Err((
                ResponseError::MessageTooLarge,
                format!(
                    "batch of {} bytes exceeds max.message.bytes {}",
                    batch.len(),
                    self.max_message_bytes
                ),
            ));
        }
        if self.log_append_time {
            return Ok(batch.with_log_append_time(now_ms));
        }
        Ok(batch)
    }

    /// What the records of `batch` must satisfy at `now_ms`, listing at
    /// most `max_record_errors` of those at fault.
    pub fn for_records(
        &self,
        batch: &RecordBatch,
        now_ms: i64,
        max_record_errors: usize,
    ) -> RecordRules {
        RecordRules {
            max_record_errors,
            keys_required: self.keys_required,
            timestamps: (!self.log_append_time).then(|| {
                (
                    now_ms.saturating_sub(self.before_max_ms),
                    now_ms.saturating_add(self.after_max_ms),
                )
            }),
            recompress: self.recompress_to(batch),
            max_bytes: usize::try_from(self.max_message_bytes).unwrap_or(usize::MAX),
        }
    }

    /// The batch as it is to be stored, its records checked by `rules`
    /// (from [`ProduceRules::for_records`]), or the error Kafka answers
    /// with. `partition` names it in messages (`topic-partition`).
    /// Record-level work: bounded by the batch's bytes, but run it off the
    /// runtime's threads unless the batch is small.
    pub fn check_records(
        batch: RecordBatch,
        rules: &RecordRules,
        partition: &str,
    ) -> Result<RecordBatch, Refused> {
        validate(batch, rules).map_err(|refused| refusal(refused, rules, partition))
    }
}

/// The answer Kafka gives for records it refused (`LogValidator`'s
/// `processRecordErrors`, as `ReplicaManager` answers it).
fn refusal(refused: RecordsRefused, rules: &RecordRules, partition: &str) -> Refused {
    let (errors, total) = match refused {
        RecordsRefused::Batch(e) => return (e.kafka_error(), e.to_string()).into(),
        RecordsRefused::Records { errors, total } => (errors, total),
    };
    let records: Vec<(i32, String)> = errors
        .iter()
        .map(|&(index, error)| (index, record_message(index, error, rules, partition)))
        .collect();
    let timestamps = errors
        .iter()
        .any(|(_, e)| matches!(e, RecordError::Timestamp(_) | RecordError::LogAppendTime));
    let (error, message) = match timestamps {
        true => (
            ResponseError::InvalidTimestamp,
            "One or more records have been rejected due to invalid timestamp".to_string(),
        ),
        false => {
            let shown: Vec<String> = records
                .iter()
                .take(3)
                .map(|(index, message)| {
                    format!("RecordError(batchIndex={index}, message='{message}')")
                })
                .collect();
            (
                ResponseError::InvalidRecord,
                format!(
                    "One or more records have been rejected due to {total} record errors in total, and only showing the first three errors at most: [{}]",
                    shown.join(", ")
                ),
            )
        }
    };
    Refused {
        error,
        message,
        records,
    }
}

/// One record's error message, as Kafka words it.
fn record_message(index: i32, error: RecordError, rules: &RecordRules, partition: &str) -> String {
    match error {
        RecordError::NoKey => {
            format!(
                "Compacted topic cannot accept message without key in topic partition {partition}"
            )
        }
        RecordError::Timestamp(timestamp) => {
            let (min, max) = rules.timestamps.unwrap_or((i64::MIN, i64::MAX));
            format!(
                "Timestamp {timestamp} of message with offset {index} is out of range. The timestamp should be within [{min}, {max}]"
            )
        }
        RecordError::LogAppendTime => format!(
            "Invalid timestamp type in message with offset {index}. Producer should not set timestamp type to LogAppendTime."
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_metastore::topic_config::*;
    use floe_protocol::kafka_protocol::records::Compression;
    use floe_protocol::testing::encode;
    use floe_protocol::validate::MAX_RECORD_ERRORS;

    fn batch() -> RecordBatch {
        // Timestamps 1000 and 1001.
        RecordBatch::parse_all(&encode(&[b"a".to_vec(), b"b".to_vec()], Compression::None))
            .unwrap()
            .remove(0)
    }

    fn rules(pairs: &[(&str, &str)]) -> ProduceRules {
        let configs = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ProduceRules::of(&TopicConfig::of(&configs), DEFAULT_MESSAGE_MAX_BYTES)
    }

    #[test]
    fn size_limits_come_from_the_topic_or_the_broker() {
        let b = batch();
        assert!(rules(&[]).apply(b.clone(), 1_000).is_ok());
        let small = rules(&[(MAX_MESSAGE_BYTES, "50")]);
        assert_eq!(
            small.apply(b.clone(), 1_000).unwrap_err().0,
            ResponseError::MessageTooLarge
        );
        let broker_small = ProduceRules::of(&TopicConfig::default(), 10);
        assert_eq!(
            broker_small.apply(b, 1_000).unwrap_err().0,
            ResponseError::MessageTooLarge
        );
    }

    /// The records of `b`, checked by `rules` at `now_ms`.
    fn checked(rules: &ProduceRules, b: RecordBatch, now_ms: i64) -> Result<RecordBatch, Refused> {
        let b = rules.apply(b, now_ms)?;
        let records = rules.for_records(&b, now_ms, MAX_RECORD_ERRORS);
        ProduceRules::check_records(b, &records, "t-0")
    }

    #[test]
    fn timestamps_outside_the_window_are_invalid() {
        let b = batch();
        let diff = rules(&[(TIMESTAMP_DIFFERENCE_MAX_MS, "100")]);
        assert!(checked(&diff, b.clone(), 1_050).is_ok());
        let old = checked(&diff, b.clone(), 5_000).unwrap_err();
        assert_eq!(old.error, ResponseError::InvalidTimestamp);
        assert_eq!(
            old.message,
            "One or more records have been rejected due to invalid timestamp"
        );
        assert_eq!(
            old.records,
            vec![
                (0, "Timestamp 1000 of message with offset 0 is out of range. The timestamp should be within [4900, 5100]".to_string()),
                (1, "Timestamp 1001 of message with offset 1 is out of range. The timestamp should be within [4900, 5100]".to_string()),
            ]
        );
        assert_eq!(
            checked(&diff, b.clone(), 0).unwrap_err().error,
            ResponseError::InvalidTimestamp,
            "from the future"
        );
        let after_only = rules(&[(TIMESTAMP_AFTER_MAX_MS, "0")]);
        assert!(
            checked(&after_only, b.clone(), 1_000_000).is_ok(),
            "the past is unbounded"
        );
        let future = checked(&after_only, b, 1_000).unwrap_err();
        assert_eq!(future.records.len(), 1, "1001 is in the future at 1000");
    }

    #[test]
    fn log_append_time_replaces_the_producers_timestamps() {
        let stamped = rules(&[
            (TIMESTAMP_TYPE, "LogAppendTime"),
            (TIMESTAMP_DIFFERENCE_MAX_MS, "1"),
        ])
        .apply(batch(), 9_999_999)
        .unwrap();
        assert!(stamped.is_log_append_time());
        assert_eq!(stamped.max_timestamp(), 9_999_999);
    }

    #[test]
    fn batches_are_recompressed_when_the_topic_names_another_codec() {
        assert_eq!(
            rules(&[]).recompress_to(&batch()),
            None,
            "`producer`: as sent"
        );
        let zstd = rules(&[("compression.type", "zstd")]);
        assert_eq!(zstd.recompress_to(&batch()), Some((Codec::Zstd, Some(3))));
        let zstd_9 = rules(&[
            ("compression.type", "zstd"),
            ("compression.zstd.level", "9"),
        ]);
        assert_eq!(zstd_9.recompress_to(&batch()), Some((Codec::Zstd, Some(9))));
        let gzip = rules(&[("compression.type", "gzip")]);
        assert_eq!(gzip.recompress_to(&batch()), Some((Codec::Gzip, None)));
        let none = rules(&[("compression.type", "uncompressed")]);
        assert_eq!(none.recompress_to(&batch()), None, "already uncompressed");
        let stored =
            floe_protocol::records::recompress(&batch(), Codec::Zstd, None, usize::MAX).unwrap();
        assert_eq!(zstd.recompress_to(&stored), None);
        assert_eq!(
            zstd_9.recompress_to(&stored),
            None,
            "a level alone does not recompress"
        );
        assert_eq!(none.recompress_to(&stored), Some((Codec::None, None)));
    }

    #[test]
    fn compacted_topics_refuse_records_without_keys_one_by_one() {
        let compacted = rules(&[(CLEANUP_POLICY, "compact,delete")]);
        assert!(
            checked(&compacted, batch(), 1_000).is_ok(),
            "keyed records pass"
        );
        let keyless = floe_protocol::testing::keyless(&[b"v".to_vec(), b"w".to_vec()]);
        let keyless = RecordBatch::parse_all(&keyless).unwrap().remove(0);
        let refused = checked(&compacted, keyless.clone(), 1_000).unwrap_err();
        assert_eq!(refused.error, ResponseError::InvalidRecord);
        let why = "Compacted topic cannot accept message without key in topic partition t-0";
        assert_eq!(
            refused.records,
            vec![(0, why.to_string()), (1, why.to_string())]
        );
        assert_eq!(
            refused.message,
            format!(
                "One or more records have been rejected due to 2 record errors in total, and only showing the first three errors at most: [RecordError(batchIndex=0, message='{why}'), RecordError(batchIndex=1, message='{why}')]"
            )
        );
        assert!(
            checked(&rules(&[]), keyless, 1_000).is_ok(),
            "fine elsewhere"
        );
    }
}
