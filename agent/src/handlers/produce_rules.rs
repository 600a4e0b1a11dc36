//! The per-topic checks a Kafka broker makes on a produced batch beyond its
//! structure: size limits, timestamps, log-append time, and the topic's
//! `compression.type`.
//!
//! All but one read only the batch header: floe does not decompress what it
//! forwards, so timestamp bounds are checked on the batch's first and largest
//! timestamps (Kafka checks every record; a record between them can only be
//! inside the bounds when both ends are). The exception is a compacted topic,
//! whose records must all have keys: there, as Kafka does, the batch is
//! decoded (within floe's decompression bounds) to check them.

use floe_metastore::{TimestampType, TopicCompression, TopicConfig};
use floe_protocol::ResponseError;
use floe_protocol::batch::{Codec, RecordBatch};

/// Kafka's default `message.max.bytes` (1 MiB plus the batch overhead).
pub const DEFAULT_MESSAGE_MAX_BYTES: u64 = 1_048_588;

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

    /// The batch as it is to be stored (but for its codec: see
    /// [`ProduceRules::recompress_to`]), or the error Kafka answers with.
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
        if self.keys_required {
            let records = floe_protocol::records::decode(&batch)
                .map_err(|e| (e.kafka_error(), e.to_string()))?;
            if records.iter().any(|r| r.key.is_none()) {
                return Err((
                    ResponseError::InvalidRecord,
                    "compacted topic cannot accept a record without a key".into(),
                ));
            }
        }
        if self.log_append_time {
            return Ok(batch.with_log_append_time(now_ms));
        }
        for timestamp in [batch.base_timestamp(), batch.max_timestamp()] {
            // -1: a record without a timestamp (older clients); Kafka lets it be.
            if timestamp < 0 {
                continue;
            }
            let too_old = now_ms.saturating_sub(timestamp) > self.before_max_ms;
            let too_new = timestamp.saturating_sub(now_ms) > self.after_max_ms;
            if too_old || too_new {
                return Err((
                    ResponseError::InvalidTimestamp,
                    format!(
                        "timestamp {timestamp} is outside [{}, {}] of the broker's time {now_ms}",
                        now_ms.saturating_sub(self.before_max_ms),
                        now_ms.saturating_add(self.after_max_ms)
                    ),
                ));
            }
        }
        Ok(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_metastore::topic_config::*;
    use floe_protocol::kafka_protocol::records::Compression;
    use floe_protocol::testing::encode;

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

    #[test]
    fn timestamps_outside_the_window_are_invalid() {
        let b = batch();
        let diff = rules(&[(TIMESTAMP_DIFFERENCE_MAX_MS, "100")]);
        assert!(diff.apply(b.clone(), 1_050).is_ok());
        assert_eq!(
            diff.apply(b.clone(), 5_000).unwrap_err().0,
            ResponseError::InvalidTimestamp
        );
        assert_eq!(
            diff.apply(b.clone(), 0).unwrap_err().0,
            ResponseError::InvalidTimestamp,
            "from the future"
        );
        let after_only = rules(&[(TIMESTAMP_AFTER_MAX_MS, "0")]);
        assert!(
            after_only.apply(b.clone(), 1_000_000).is_ok(),
            "the past is unbounded"
        );
        assert!(
            after_only.apply(b, 1_000).is_err(),
            "1001 is in the future at 1000"
        );
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
    fn compacted_topics_refuse_records_without_keys() {
        let compacted = rules(&[(CLEANUP_POLICY, "compact,delete")]);
        assert!(
            compacted.apply(batch(), 1_000).is_ok(),
            "keyed records pass"
        );
        let keyless = floe_protocol::testing::records(&[b"v".to_vec()], 1_000)
            .into_iter()
            .map(|mut r| {
                r.key = None;
                r
            })
            .collect::<Vec<_>>();
        let mut buf = bytes::BytesMut::new();
        floe_protocol::kafka_protocol::records::RecordBatchEncoder::encode(
            &mut buf,
            &keyless,
            &floe_protocol::kafka_protocol::records::RecordEncodeOptions {
                version: 2,
                compression: Compression::Lz4,
            },
        )
        .unwrap();
        let keyless = RecordBatch::parse_all(&buf.freeze()).unwrap().remove(0);
        assert_eq!(
            compacted.apply(keyless.clone(), 1_000).unwrap_err().0,
            ResponseError::InvalidRecord
        );
        assert!(rules(&[]).apply(keyless, 1_000).is_ok(), "fine elsewhere");
    }
}
