//! A topic's configs, parsed and defaulted in one place.
//!
//! The metastore stores a topic's configs as the strings its client sent
//! (DescribeConfigs shows them as given). Everything that acts on them (the
//! produce checks, retention, key compaction, DescribeConfigs' defaults)
//! reads them through [`TopicConfig`], so each key is parsed, checked and
//! defaulted once, with Kafka's names, types, bounds and defaults.

use std::collections::BTreeMap;

use crate::contract::types::TopicInfo;

pub const CLEANUP_POLICY: &str = "cleanup.policy";
pub const RETENTION_MS: &str = "retention.ms";
pub const RETENTION_BYTES: &str = "retention.bytes";
pub const DELETE_RETENTION_MS: &str = "delete.retention.ms";
pub const MAX_MESSAGE_BYTES: &str = "max.message.bytes";
pub const TIMESTAMP_TYPE: &str = "message.timestamp.type";
/// Deprecated by KIP-937 for the two below, which it still bounds when they are unset.
pub const TIMESTAMP_DIFFERENCE_MAX_MS: &str = "message.timestamp.difference.max.ms";
pub const TIMESTAMP_BEFORE_MAX_MS: &str = "message.timestamp.before.max.ms";
pub const TIMESTAMP_AFTER_MAX_MS: &str = "message.timestamp.after.max.ms";
pub const MAX_COMPACTION_LAG_MS: &str = "max.compaction.lag.ms";
pub const MIN_COMPACTION_LAG_MS: &str = "min.compaction.lag.ms";
pub const MIN_CLEANABLE_DIRTY_RATIO: &str = "min.cleanable.dirty.ratio";
pub const SEGMENT_MS: &str = "segment.ms";
/// Kafka's default `segment.ms`: seven days.
pub const DEFAULT_SEGMENT_MS: i64 = 7 * 24 * 3600 * 1000;

const COMPRESSION_TYPE: &str = "compression.type";
const GZIP_LEVEL: &str = "compression.gzip.level";
const LZ4_LEVEL: &str = "compression.lz4.level";
const ZSTD_LEVEL: &str = "compression.zstd.level";
/// Kafka's defaults (KIP-390).
const DEFAULT_LZ4_LEVEL: i32 = 9;
const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// Kafka's default `retention.ms`: seven days.
pub const DEFAULT_RETENTION_MS: i64 = 7 * 24 * 3600 * 1000;
/// Kafka's default `delete.retention.ms`: one day.
pub const DEFAULT_DELETE_RETENTION_MS: i64 = 24 * 3600 * 1000;

/// `message.timestamp.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// `compression.type`: the codec a topic's batches are stored with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicCompression {
    /// As the producer sent them (Kafka's default).
    Producer,
    Uncompressed,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

/// What a topic's configs ask of floe, with Kafka's defaults for keys not set.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfig {
    /// `cleanup.policy` includes `delete` (the default): time and size retention apply.
    pub delete: bool,
    /// `cleanup.policy` includes `compact`: each key's latest record is kept,
    /// and every record needs a key.
    pub compact: bool,
    /// `retention.ms`; -1 is unlimited.
    pub retention_ms: i64,
    /// `retention.bytes`; -1 is unlimited.
    pub retention_bytes: i64,
    /// `delete.retention.ms`: how long a compacted topic keeps a tombstone
    /// after the cleaner first kept it.
    pub delete_retention_ms: i64,
    /// `max.message.bytes`; `None` is the broker's `message.max.bytes`.
    pub max_message_bytes: Option<u64>,
    pub timestamp_type: TimestampType,
    /// How far in the past a CreateTime timestamp may be.
    pub timestamp_before_max_ms: i64,
    /// How far in the future.
    pub timestamp_after_max_ms: i64,
    /// `max.compaction.lag.ms`: a compacted topic's records are cleaned at
    /// the latest this long after they were appended, however few.
    pub max_compaction_lag_ms: i64,
    /// `min.compaction.lag.ms`: records appended more recently than this
    /// are not key-compacted yet.
    pub min_compaction_lag_ms: i64,
    /// `min.cleanable.dirty.ratio`: the share of a compacted partition's
    /// bytes written since its last cleaning that makes it worth cleaning.
    pub min_cleanable_dirty_ratio: f64,
    /// `segment.ms`: how long written data may stay before it is rolled
    /// into what compaction considers (for floe: out of the ingest files).
    pub segment_ms: i64,
    /// `compression.type`: batches in another codec are recompressed when
    /// produced, as Kafka does.
    pub compression: TopicCompression,
    /// `compression.gzip.level`, `compression.lz4.level`,
    /// `compression.zstd.level` (KIP-390): the level batches recompressed
    /// to the topic's codec get (-1: gzip's default).
    pub gzip_level: i32,
    pub lz4_level: i32,
    pub zstd_level: i32,
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig::of(&BTreeMap::new())
    }
}

impl TopicConfig {
    /// The configs, or why one would be refused by Kafka (answered
    /// `INVALID_CONFIG`): a key that is not a topic config, or a value not
    /// of its key's type and range (checked for every key of Kafka's, also
    /// those floe does not act on).
    pub fn parse(configs: &BTreeMap<String, String>) -> Result<TopicConfig, String> {
        Self::read(configs, Strict)
    }

    /// The configs as [`TopicConfig::parse`] reads them, a value it would
    /// refuse taking its key's default. (Every value is checked before it is
    /// stored; this keeps readers total all the same.)
    pub fn of(configs: &BTreeMap<String, String>) -> TopicConfig {
        Self::read(configs, Lenient).expect("a lenient read takes defaults")
    }

    fn read(configs: &BTreeMap<String, String>, mode: Mode) -> Result<TopicConfig, String> {
        if matches!(mode, Strict) {
            for (key, value) in configs {
                check_known(key, value)?;
            }
        }
        let get = |key: &'static str| Value {
            key,
            raw: configs.get(key).map(String::as_str),
            mode,
        };
        // (delete, compact). Read leniently, an unknown policy is skipped
        // alone: `compact,shred` still compacts (falling back to `delete`
        // would let retention remove a compacted topic's keys). An empty
        // list is neither: nothing is removed, ever (KIP-1161, Kafka 4.2:
        // what a SUBTRACT of the last policy leaves).
        let policies = get(CLEANUP_POLICY).parsed((true, false), |v| {
            let mut policies = (false, false);
            let listed: Vec<&str> = v
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .collect();
            for policy in &listed {
                match *policy {
                    "delete" => policies.0 = true,
                    "compact" => policies.1 = true,
                    _ if matches!(mode, Lenient) => {}
                    _ => return Err("`delete`, `compact`, both or none"),
                }
            }
            match policies {
                (false, false) if !listed.is_empty() => Err("`delete`, `compact`, both or none"),
                known => Ok(known),
            }
        })?;
        let difference = get(TIMESTAMP_DIFFERENCE_MAX_MS).long_at_least(0, i64::MAX)?;
        Ok(TopicConfig {
            delete: policies.0,
            compact: policies.1,
            retention_ms: get(RETENTION_MS).long_at_least(-1, DEFAULT_RETENTION_MS)?,
            retention_bytes: get(RETENTION_BYTES).long_at_least(-1, -1)?,
            delete_retention_ms: get(DELETE_RETENTION_MS)
                .long_at_least(0, DEFAULT_DELETE_RETENTION_MS)?,
            max_message_bytes: get(MAX_MESSAGE_BYTES).parsed(None, |v| {
                v.parse::<i32>()
                    .ok()
                    .and_then(|v| u64::try_from(v).ok())
                    .map(Some)
                    .ok_or("an int >= 0")
            })?,
            timestamp_type: get(TIMESTAMP_TYPE).parsed(TimestampType::CreateTime, |v| match v {
                "CreateTime" => Ok(TimestampType::CreateTime),
                "LogAppendTime" => Ok(TimestampType::LogAppendTime),
                _ => Err("CreateTime or LogAppendTime"),
            })?,
            timestamp_before_max_ms: get(TIMESTAMP_BEFORE_MAX_MS).long_at_least(0, difference)?,
            timestamp_after_max_ms: get(TIMESTAMP_AFTER_MAX_MS).long_at_least(0, difference)?,
            max_compaction_lag_ms: get(MAX_COMPACTION_LAG_MS).long_at_least(0, i64::MAX)?,
            min_compaction_lag_ms: get(MIN_COMPACTION_LAG_MS).long_at_least(0, 0)?,
            min_cleanable_dirty_ratio: get(MIN_CLEANABLE_DIRTY_RATIO).parsed(0.5, |v| {
                v.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or("a number between 0 and 1")
            })?,
            segment_ms: get(SEGMENT_MS).long_at_least(0, DEFAULT_SEGMENT_MS)?.max(1),
            gzip_level: get(GZIP_LEVEL).level(-1)?,
            lz4_level: get(LZ4_LEVEL).level(DEFAULT_LZ4_LEVEL)?,
            zstd_level: get(ZSTD_LEVEL).level(DEFAULT_ZSTD_LEVEL)?,
            compression: get(COMPRESSION_TYPE).parsed(TopicCompression::Producer, |v| {
                Ok(match v {
                    "producer" => TopicCompression::Producer,
                    "uncompressed" => TopicCompression::Uncompressed,
                    "gzip" => TopicCompression::Gzip,
                    "snappy" => TopicCompression::Snappy,
                    "lz4" => TopicCompression::Lz4,
                    "zstd" => TopicCompression::Zstd,
                    _ => return Err("uncompressed, zstd, lz4, snappy, gzip or producer"),
                })
            })?,
        })
    }

    /// Every key floe acts on with its default, as DescribeConfigs shows a
    /// key the topic does not set (`message_max_bytes`: the broker's, which
    /// `max.message.bytes` defaults to).
    pub fn defaults(message_max_bytes: u64) -> Vec<(&'static str, String)> {
        vec![
            (CLEANUP_POLICY, "delete".into()),
            (COMPRESSION_TYPE, "producer".into()),
            (GZIP_LEVEL, "-1".into()),
            (LZ4_LEVEL, DEFAULT_LZ4_LEVEL.to_string()),
            (ZSTD_LEVEL, DEFAULT_ZSTD_LEVEL.to_string()),
            (DELETE_RETENTION_MS, DEFAULT_DELETE_RETENTION_MS.to_string()),
            (MAX_COMPACTION_LAG_MS, i64::MAX.to_string()),
            (MAX_MESSAGE_BYTES, message_max_bytes.to_string()),
            (MIN_CLEANABLE_DIRTY_RATIO, "0.5".into()),
            (MIN_COMPACTION_LAG_MS, "0".into()),
            (SEGMENT_MS, DEFAULT_SEGMENT_MS.to_string()),
            (TIMESTAMP_AFTER_MAX_MS, i64::MAX.to_string()),
            (TIMESTAMP_BEFORE_MAX_MS, i64::MAX.to_string()),
            (TIMESTAMP_TYPE, "CreateTime".into()),
            (RETENTION_BYTES, "-1".into()),
            (RETENTION_MS, DEFAULT_RETENTION_MS.to_string()),
        ]
    }
}

impl TopicInfo {
    /// This topic's configs over the cluster's defaults, parsed (see
    /// [`TopicConfig::of`]).
    pub fn config(&self) -> TopicConfig {
        TopicConfig::over(&self.inherited, &self.configs)
    }
}

impl TopicConfig {
    /// A topic's own configs over defaults (the cluster's), parsed.
    pub fn over(
        defaults: &BTreeMap<String, String>,
        own: &BTreeMap<String, String>,
    ) -> TopicConfig {
        if defaults.is_empty() {
            return TopicConfig::of(own);
        }
        let mut merged = defaults.clone();
        merged.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
        TopicConfig::of(&merged)
    }
}

/// Each topic config with its broker synonym, the name the cluster-wide
/// default goes by (Kafka's `ServerTopicConfigSynonyms`, first synonyms).
pub const BROKER_SYNONYMS: &[(&str, &str)] = &[
    (CLEANUP_POLICY, "log.cleanup.policy"),
    (COMPRESSION_TYPE, "compression.type"),
    (GZIP_LEVEL, "compression.gzip.level"),
    (LZ4_LEVEL, "compression.lz4.level"),
    (ZSTD_LEVEL, "compression.zstd.level"),
    (DELETE_RETENTION_MS, "log.cleaner.delete.retention.ms"),
    ("file.delete.delay.ms", "log.segment.delete.delay.ms"),
    ("flush.messages", "log.flush.interval.messages"),
    ("flush.ms", "log.flush.interval.ms"),
    ("index.interval.bytes", "log.index.interval.bytes"),
    ("local.retention.bytes", "log.local.retention.bytes"),
    ("local.retention.ms", "log.local.retention.ms"),
    (MAX_COMPACTION_LAG_MS, "log.cleaner.max.compaction.lag.ms"),
    (MAX_MESSAGE_BYTES, "message.max.bytes"),
    (TIMESTAMP_AFTER_MAX_MS, "log.message.timestamp.after.max.ms"),
    (
        TIMESTAMP_BEFORE_MAX_MS,
        "log.message.timestamp.before.max.ms",
    ),
    (TIMESTAMP_TYPE, "log.message.timestamp.type"),
    (MIN_CLEANABLE_DIRTY_RATIO, "log.cleaner.min.cleanable.ratio"),
    (MIN_COMPACTION_LAG_MS, "log.cleaner.min.compaction.lag.ms"),
    ("min.insync.replicas", "min.insync.replicas"),
    ("preallocate", "log.preallocate"),
    (RETENTION_BYTES, "log.retention.bytes"),
    (RETENTION_MS, "log.retention.ms"),
    ("segment.bytes", "log.segment.bytes"),
    ("segment.index.bytes", "log.index.size.max.bytes"),
    ("segment.jitter.ms", "log.roll.jitter.ms"),
    (SEGMENT_MS, "log.roll.ms"),
    (
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
    ),
];

/// The topic config a broker config name is the cluster default of.
pub fn topic_key_of(broker_key: &str) -> Option<&'static str> {
    BROKER_SYNONYMS
        .iter()
        .find(|(_, b)| *b == broker_key)
        .map(|(t, _)| *t)
}

/// The broker config name of a topic config's cluster default.
pub fn broker_key_of(topic_key: &str) -> Option<&'static str> {
    BROKER_SYNONYMS
        .iter()
        .find(|(t, _)| *t == topic_key)
        .map(|(_, b)| *b)
}

/// Whether Kafka would take `key = value` as a topic config, or why not.
pub fn check(key: &str, value: &str) -> Result<(), String> {
    check_known(key, value)
}

/// What a topic config's value must be (Kafka's `ConfigDef` types and
/// validators for its topic configs).
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// An integer at least this.
    Long(i64),
    /// A 32-bit integer at least this.
    Int(i32),
    /// A 32-bit integer in one of these inclusive ranges (compression levels).
    Levels(&'static [(i32, i32)]),
    /// A number within [0, 1].
    Ratio,
    Bool,
    /// One of these words.
    OneOf(&'static [&'static str]),
    /// Anything (lists, versions).
    Text,
}

/// Every topic config Kafka 4 knows (`TopicConfig`, `LogConfig`), and the
/// older ones its 3.x clients may still set.
const KNOWN: &[(&str, Kind)] = &[
    (CLEANUP_POLICY, Kind::Text),
    (
        COMPRESSION_TYPE,
        Kind::OneOf(&["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
    ),
    (GZIP_LEVEL, Kind::Levels(&[(-1, -1), (1, 9)])),
    (LZ4_LEVEL, Kind::Levels(&[(1, 17)])),
    (ZSTD_LEVEL, Kind::Levels(&[(-131_072, 22)])),
    (DELETE_RETENTION_MS, Kind::Long(0)),
    ("file.delete.delay.ms", Kind::Long(0)),
    ("flush.messages", Kind::Long(1)),
    ("flush.ms", Kind::Long(0)),
    ("follower.replication.throttled.replicas", Kind::Text),
    ("index.interval.bytes", Kind::Int(0)),
    ("leader.replication.throttled.replicas", Kind::Text),
    ("local.retention.bytes", Kind::Long(-2)),
    ("local.retention.ms", Kind::Long(-2)),
    (MAX_COMPACTION_LAG_MS, Kind::Long(1)),
    (MAX_MESSAGE_BYTES, Kind::Int(0)),
    ("message.downconversion.enable", Kind::Bool),
    ("message.format.version", Kind::Text),
    (TIMESTAMP_AFTER_MAX_MS, Kind::Long(0)),
    (TIMESTAMP_BEFORE_MAX_MS, Kind::Long(0)),
    (TIMESTAMP_DIFFERENCE_MAX_MS, Kind::Long(0)),
    (
        TIMESTAMP_TYPE,
        Kind::OneOf(&["CreateTime", "LogAppendTime"]),
    ),
    (MIN_CLEANABLE_DIRTY_RATIO, Kind::Ratio),
    (MIN_COMPACTION_LAG_MS, Kind::Long(0)),
    ("min.insync.replicas", Kind::Int(1)),
    ("preallocate", Kind::Bool),
    ("remote.log.copy.disable", Kind::Bool),
    ("remote.log.delete.on.disable", Kind::Bool),
    ("remote.storage.enable", Kind::Bool),
    (RETENTION_BYTES, Kind::Long(-1)),
    (RETENTION_MS, Kind::Long(-1)),
    ("segment.bytes", Kind::Int(14)),
    ("segment.index.bytes", Kind::Int(4)),
    ("segment.jitter.ms", Kind::Long(0)),
    (SEGMENT_MS, Kind::Long(1)),
    ("unclean.leader.election.enable", Kind::Bool),
];

/// Whether Kafka would take `key = value` as a topic config.
fn check_known(key: &str, value: &str) -> Result<(), String> {
    let Some((_, kind)) = KNOWN.iter().find(|(k, _)| *k == key) else {
        return Err(format!("Unknown topic config name: {key}"));
    };
    let fits = match kind {
        Kind::Long(min) => value.trim().parse::<i64>().is_ok_and(|v| v >= *min),
        Kind::Int(min) => value.trim().parse::<i32>().is_ok_and(|v| v >= *min),
        Kind::Levels(ranges) => value
            .trim()
            .parse::<i32>()
            .is_ok_and(|v| ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&v))),
        Kind::Ratio => value
            .trim()
            .parse::<f64>()
            .is_ok_and(|v| (0.0..=1.0).contains(&v)),
        Kind::Bool => {
            value.trim().eq_ignore_ascii_case("true") || value.trim().eq_ignore_ascii_case("false")
        }
        Kind::OneOf(words) => words.contains(&value.trim()),
        Kind::Text => true,
    };
    if fits {
        Ok(())
    } else {
        let want = match kind {
            Kind::Long(min) => format!("an integer >= {min}"),
            Kind::Int(min) => format!("a 32-bit integer >= {min}"),
            Kind::Levels(ranges) => ranges
                .iter()
                .map(|(lo, hi)| match lo == hi {
                    true => lo.to_string(),
                    false => format!("[{lo},...,{hi}]"),
                })
                .collect::<Vec<_>>()
                .join(" or "),
            Kind::Ratio => "a number between 0 and 1".into(),
            Kind::Bool => "true or false".into(),
            Kind::OneOf(words) => format!("one of {}", words.join(", ")),
            Kind::Text => unreachable!("text always fits"),
        };
        Err(format!(
            "Invalid value {value} for configuration {key}: must be {want}"
        ))
    }
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    /// A bad value is an error.
    Strict,
    /// A bad value is its key's default.
    Lenient,
}
use Mode::*;

/// One key's value as set (if it is).
struct Value<'a> {
    key: &'static str,
    raw: Option<&'a str>,
    mode: Mode,
}

impl Value<'_> {
    /// `parse` reads a set value, or says what it should have been.
    fn parsed<T>(
        &self,
        default: T,
        parse: impl FnOnce(&str) -> Result<T, &'static str>,
    ) -> Result<T, String> {
        let Some(raw) = self.raw else {
            return Ok(default);
        };
        match (parse(raw), self.mode) {
            (Ok(value), _) => Ok(value),
            (Err(_), Lenient) => Ok(default),
            (Err(want), Strict) => Err(format!("{} must be {want}, not `{raw}`", self.key)),
        }
    }

    fn long_at_least(&self, min: i64, default: i64) -> Result<i64, String> {
        let want = if min == 0 {
            "an integer >= 0"
        } else {
            "an integer >= -1"
        };
        debug_assert!(min == 0 || min == -1);
        self.parsed(default, |v| {
            v.parse::<i64>().ok().filter(|v| *v >= min).ok_or(want)
        })
    }

    /// A compression level, checked as [`KNOWN`] says for its key.
    fn level(&self, default: i32) -> Result<i32, String> {
        self.parsed(default, |v| {
            check_known(self.key, v)
                .ok()
                .and_then(|()| v.trim().parse::<i32>().ok())
                .ok_or("a level the codec takes")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_levels_are_kept_within_their_codecs_ranges() {
        let c = TopicConfig::parse(&configs(&[
            ("compression.gzip.level", "9"),
            ("compression.zstd.level", "-5"),
        ]))
        .unwrap();
        assert_eq!((c.gzip_level, c.lz4_level, c.zstd_level), (9, 9, -5));
        let d = TopicConfig::default();
        assert_eq!((d.gzip_level, d.lz4_level, d.zstd_level), (-1, 9, 3));
        for (key, bad) in [
            ("compression.gzip.level", "0"),
            ("compression.gzip.level", "10"),
            ("compression.lz4.level", "18"),
            ("compression.zstd.level", "23"),
            ("compression.zstd.level", "fast"),
        ] {
            let refused = TopicConfig::parse(&configs(&[(key, bad)])).unwrap_err();
            assert!(refused.contains(key), "{refused}");
        }
        assert!(TopicConfig::parse(&configs(&[("compression.gzip.level", "-1")])).is_ok());
    }

    fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Kafka refuses a key that is not a topic config, and a value not of
    /// its key's type, also for keys floe does not act on.
    #[test]
    fn unknown_keys_and_ill_typed_values_are_refused() {
        let err = TopicConfig::parse(&configs(&[("dummy.doesntexist", "1")])).unwrap_err();
        assert_eq!(err, "Unknown topic config name: dummy.doesntexist");
        for (key, bad) in [
            ("segment.ms", "0"),
            ("min.cleanable.dirty.ratio", "1.5"),
            ("compression.type", "brotli"),
            ("preallocate", "yes"),
            ("min.insync.replicas", "0"),
        ] {
            assert!(
                TopicConfig::parse(&configs(&[(key, bad)])).is_err(),
                "{key}={bad}"
            );
        }
        let fine = configs(&[
            ("segment.ms", "100"),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("compression.type", "zstd"),
            ("preallocate", "false"),
            ("min.insync.replicas", "2"),
            ("message.format.version", "3.0"),
        ]);
        TopicConfig::parse(&fine).unwrap();
        // Stored configs are read leniently whatever they hold.
        assert_eq!(
            TopicConfig::of(&configs(&[("dummy", "x")])),
            TopicConfig::default()
        );
    }

    #[test]
    fn unset_keys_take_kafkas_defaults() {
        let c = TopicConfig::parse(&BTreeMap::new()).unwrap();
        assert_eq!(
            c,
            TopicConfig {
                delete: true,
                compact: false,
                retention_ms: DEFAULT_RETENTION_MS,
                retention_bytes: -1,
                delete_retention_ms: DEFAULT_DELETE_RETENTION_MS,
                max_message_bytes: None,
                timestamp_type: TimestampType::CreateTime,
                timestamp_before_max_ms: i64::MAX,
                timestamp_after_max_ms: i64::MAX,
                max_compaction_lag_ms: i64::MAX,
                min_compaction_lag_ms: 0,
                min_cleanable_dirty_ratio: 0.5,
                segment_ms: DEFAULT_SEGMENT_MS,
                compression: TopicCompression::Producer,
                gzip_level: -1,
                lz4_level: DEFAULT_LZ4_LEVEL,
                zstd_level: DEFAULT_ZSTD_LEVEL,
            }
        );
        assert_eq!(c, TopicConfig::default());
    }

    #[test]
    fn set_keys_are_read() {
        let c = TopicConfig::parse(&configs(&[
            (CLEANUP_POLICY, "compact, delete"),
            (RETENTION_MS, "-1"),
            (RETENTION_BYTES, "1024"),
            (DELETE_RETENTION_MS, "0"),
            (MAX_MESSAGE_BYTES, "100"),
            (TIMESTAMP_TYPE, "LogAppendTime"),
            (TIMESTAMP_DIFFERENCE_MAX_MS, "5000"),
            (TIMESTAMP_AFTER_MAX_MS, "60"),
        ]))
        .unwrap();
        assert!(c.delete && c.compact);
        assert_eq!((c.retention_ms, c.retention_bytes), (-1, 1024));
        assert_eq!(c.delete_retention_ms, 0);
        assert_eq!(c.max_message_bytes, Some(100));
        assert_eq!(c.timestamp_type, TimestampType::LogAppendTime);
        // KIP-937: difference bounds the side that is not set.
        assert_eq!(
            (c.timestamp_before_max_ms, c.timestamp_after_max_ms),
            (5000, 60)
        );
        let compact_only = TopicConfig::parse(&configs(&[(CLEANUP_POLICY, "compact")])).unwrap();
        assert!(compact_only.compact && !compact_only.delete);
        // KIP-1161: no policy at all keeps everything.
        for none in ["", " ", ","] {
            let kept = TopicConfig::parse(&configs(&[(CLEANUP_POLICY, none)])).unwrap();
            assert!(!kept.compact && !kept.delete, "{none:?}");
        }
    }

    #[test]
    fn values_kafka_refuses_are_refused_by_parse_and_defaulted_by_of() {
        for (key, value) in [
            (CLEANUP_POLICY, "shred"),
            (RETENTION_MS, "-2"),
            (RETENTION_MS, "week"),
            (RETENTION_BYTES, "1.5"),
            (DELETE_RETENTION_MS, "-1"),
            (MAX_MESSAGE_BYTES, "-1"),
            (MAX_MESSAGE_BYTES, "3000000000"),
            (TIMESTAMP_TYPE, "Now"),
            (TIMESTAMP_BEFORE_MAX_MS, "-5"),
            (TIMESTAMP_DIFFERENCE_MAX_MS, "x"),
        ] {
            let bad = configs(&[(key, value)]);
            let why = TopicConfig::parse(&bad).unwrap_err();
            assert!(why.contains(key) && why.contains(value), "{why}");
            assert_eq!(
                TopicConfig::of(&bad),
                TopicConfig::default(),
                "{key}={value}"
            );
        }
    }

    #[test]
    fn a_stored_policy_with_an_unknown_entry_keeps_the_known_ones() {
        let stored = configs(&[(CLEANUP_POLICY, "compact,shred")]);
        assert!(TopicConfig::parse(&stored).is_err());
        let read = TopicConfig::of(&stored);
        assert!(read.compact && !read.delete, "{read:?}");
    }

    #[test]
    fn every_default_shown_is_the_default_read() {
        let shown: BTreeMap<String, String> = TopicConfig::defaults(1_000)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let read = TopicConfig::parse(&shown).unwrap();
        assert_eq!(
            read,
            TopicConfig {
                max_message_bytes: Some(1_000),
                ..TopicConfig::default()
            }
        );
    }
}
