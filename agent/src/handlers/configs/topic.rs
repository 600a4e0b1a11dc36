//! A topic's configs as DescribeConfigs shows them: every topic config
//! Kafka 4 defines, each with its type, default and what it does here.
//! Its value is the topic's own, else the cluster's dynamic default (by
//! its broker name), else the agent's static setting, else the default.

use std::collections::BTreeMap;

use floe_metastore::TopicInfo;
use floe_metastore::topic_config::broker_key_of;

use super::entry::{Entry, Synonym, Type, source};

/// A topic config: name, type, Kafka's default, and documentation (what it
/// does in floe, and when it does nothing).
pub struct TopicKey {
    pub name: &'static str,
    pub kind: Type,
    pub default: &'static str,
    pub doc: &'static str,
}

const LONG_MAX: &str = "9223372036854775807";
const NO_DISK: &str = "No effect in floe: there are no local log files; data is in object storage.";
const NO_REPLICAS: &str =
    "No effect in floe: the object store replicates data; agents hold no replicas.";

/// Every topic config of Kafka 4 (`TopicConfig`/`LogConfig`), in name order.
pub const TOPIC_KEYS: &[TopicKey] = &[
    TopicKey {
        name: "cleanup.policy",
        kind: Type::List,
        default: "delete",
        doc: "`delete` removes data past retention.ms or retention.bytes; `compact` keeps each key's latest record (both may be given).",
    },
    TopicKey {
        name: "compression.gzip.level",
        kind: Type::Int,
        default: "-1",
        doc: "The gzip level batches recompressed to gzip get.",
    },
    TopicKey {
        name: "compression.lz4.level",
        kind: Type::Int,
        default: "9",
        doc: "The lz4 level batches recompressed to lz4 get.",
    },
    TopicKey {
        name: "compression.type",
        kind: Type::String,
        default: "producer",
        doc: "The codec batches are stored with: `producer` keeps the producer's; any other codec recompresses batches on produce, as Kafka does.",
    },
    TopicKey {
        name: "compression.zstd.level",
        kind: Type::Int,
        default: "3",
        doc: "The zstd level batches recompressed to zstd get.",
    },
    TopicKey {
        name: "delete.retention.ms",
        kind: Type::Long,
        default: "86400000",
        doc: "How long key compaction keeps a tombstone after it first kept it.",
    },
    TopicKey {
        name: "file.delete.delay.ms",
        kind: Type::Long,
        default: "60000",
        doc: NO_DISK,
    },
    TopicKey {
        name: "flush.messages",
        kind: Type::Long,
        default: LONG_MAX,
        doc: "No effect in floe: a produce is acknowledged once its object is in the object store and sequenced, which is stronger than any flush setting.",
    },
    TopicKey {
        name: "flush.ms",
        kind: Type::Long,
        default: LONG_MAX,
        doc: "No effect in floe: a produce is acknowledged once its object is in the object store and sequenced, which is stronger than any flush setting.",
    },
    TopicKey {
        name: "follower.replication.throttled.replicas",
        kind: Type::List,
        default: "",
        doc: NO_REPLICAS,
    },
    TopicKey {
        name: "index.interval.bytes",
        kind: Type::Int,
        default: "4096",
        doc: NO_DISK,
    },
    TopicKey {
        name: "leader.replication.throttled.replicas",
        kind: Type::List,
        default: "",
        doc: NO_REPLICAS,
    },
    TopicKey {
        name: "local.retention.bytes",
        kind: Type::Long,
        default: "-2",
        doc: "No effect in floe: all data is in object storage (there is no local tier).",
    },
    TopicKey {
        name: "local.retention.ms",
        kind: Type::Long,
        default: "-2",
        doc: "No effect in floe: all data is in object storage (there is no local tier).",
    },
    TopicKey {
        name: "max.compaction.lag.ms",
        kind: Type::Long,
        default: LONG_MAX,
        doc: "The longest a record of a compacted topic waits before key compaction considers it.",
    },
    TopicKey {
        name: "max.message.bytes",
        kind: Type::Int,
        default: "1048588",
        doc: "The largest record batch a producer may send to this topic.",
    },
    TopicKey {
        name: "message.timestamp.after.max.ms",
        kind: Type::Long,
        default: LONG_MAX,
        doc: "How far in the future a CreateTime timestamp may be; later batches are refused.",
    },
    TopicKey {
        name: "message.timestamp.before.max.ms",
        kind: Type::Long,
        default: LONG_MAX,
        doc: "How far in the past a CreateTime timestamp may be; older batches are refused.",
    },
    TopicKey {
        name: "message.timestamp.type",
        kind: Type::String,
        default: "CreateTime",
        doc: "`CreateTime` keeps the producer's timestamps; `LogAppendTime` stamps batches when they are sequenced.",
    },
    TopicKey {
        name: "min.cleanable.dirty.ratio",
        kind: Type::Double,
        default: "0.5",
        doc: "The share of a compacted partition written since its last cleaning that makes key compaction clean it.",
    },
    TopicKey {
        name: "min.compaction.lag.ms",
        kind: Type::Long,
        default: "0",
        doc: "Records younger than this are not key-compacted yet.",
    },
    TopicKey {
        name: "min.insync.replicas",
        kind: Type::Int,
        default: "1",
        doc: "No effect in floe: an acknowledged write is in the object store, replicated as the store replicates (acks=all and acks=1 are the same).",
    },
    TopicKey {
        name: "preallocate",
        kind: Type::Boolean,
        default: "false",
        doc: NO_DISK,
    },
    TopicKey {
        name: "remote.log.copy.disable",
        kind: Type::Boolean,
        default: "false",
        doc: "No effect in floe: all data is in object storage (tiered storage is the only storage).",
    },
    TopicKey {
        name: "remote.log.delete.on.disable",
        kind: Type::Boolean,
        default: "false",
        doc: "No effect in floe: all data is in object storage (tiered storage is the only storage).",
    },
    TopicKey {
        name: "remote.storage.enable",
        kind: Type::Boolean,
        default: "false",
        doc: "No effect in floe: all data is in object storage (tiered storage is the only storage).",
    },
    TopicKey {
        name: "retention.bytes",
        kind: Type::Long,
        default: "-1",
        doc: "The most bytes a partition keeps; older data goes first (-1: no limit).",
    },
    TopicKey {
        name: "retention.ms",
        kind: Type::Long,
        default: "604800000",
        doc: "How long data is kept (-1: forever).",
    },
    TopicKey {
        name: "segment.bytes",
        kind: Type::Int,
        default: "1073741824",
        doc: "No effect in floe: compaction sizes segments by the agent's `segment_bytes`.",
    },
    TopicKey {
        name: "segment.index.bytes",
        kind: Type::Int,
        default: "10485760",
        doc: NO_DISK,
    },
    TopicKey {
        name: "segment.jitter.ms",
        kind: Type::Long,
        default: "0",
        doc: NO_DISK,
    },
    TopicKey {
        name: "segment.ms",
        kind: Type::Long,
        default: "604800000",
        doc: "How long written data may wait before compaction rolls it out of the shared ingest files (for a compacted topic, before key compaction may clean it).",
    },
    TopicKey {
        name: "unclean.leader.election.enable",
        kind: Type::Boolean,
        default: "false",
        doc: "No effect in floe: any agent serves any partition, and there are no replicas to elect among.",
    },
];

/// Keys Kafka 3.x clients may still set, removed in Kafka 4: described when set.
const LEGACY_DOC: &str = "A Kafka 3.x config, removed in Kafka 4: accepted, with no effect.";

/// The broker's static value of a topic config's broker synonym, when the
/// agent sets one (`message.max.bytes` is the agent's).
pub type StaticBroker<'a> = &'a dyn Fn(&str) -> Option<String>;

/// A topic's entries, every known key and any other it sets.
pub fn entries(topic: &TopicInfo, static_broker: StaticBroker) -> Vec<Entry> {
    let mut out: BTreeMap<&str, Entry> = BTreeMap::new();
    for key in TOPIC_KEYS {
        out.insert(key.name, entry(key, topic, static_broker));
    }
    for (name, value) in &topic.configs {
        if !out.contains_key(name.as_str()) {
            out.insert(
                name,
                Entry {
                    name: name.clone(),
                    kind: Type::String,
                    read_only: false,
                    doc: LEGACY_DOC,
                    synonyms: vec![Synonym::new(
                        name,
                        Some(value.clone()),
                        source::DYNAMIC_TOPIC,
                    )],
                },
            );
        }
    }
    out.into_values().collect()
}

fn entry(key: &TopicKey, topic: &TopicInfo, static_broker: StaticBroker) -> Entry {
    let mut synonyms = Vec::new();
    if let Some(v) = topic.configs.get(key.name) {
        synonyms.push(Synonym::new(
            key.name,
            Some(v.clone()),
            source::DYNAMIC_TOPIC,
        ));
    }
    let broker = broker_key_of(key.name);
    if let Some(v) = topic.inherited.get(key.name) {
        synonyms.push(Synonym::new(
            broker.unwrap_or(key.name),
            Some(v.clone()),
            source::DYNAMIC_DEFAULT_BROKER,
        ));
    }
    if let Some(b) = broker {
        if let Some(v) = static_broker(b) {
            synonyms.push(Synonym::new(b, Some(v), source::STATIC_BROKER));
        }
        synonyms.push(Synonym::new(
            b,
            Some(key.default.to_string()),
            source::DEFAULT,
        ));
    } else {
        synonyms.push(Synonym::new(
            key.name,
            Some(key.default.to_string()),
            source::DEFAULT,
        ));
    }
    Entry {
        name: key.name.to_string(),
        kind: key.kind,
        read_only: false,
        doc: key.doc,
        synonyms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_metastore::TopicConfig;
    use floe_metastore::topic_config;

    #[test]
    fn the_catalogue_agrees_with_the_metastore_s_defaults() {
        // Every key is one the metastore takes as a topic config.
        for k in TOPIC_KEYS {
            assert!(topic_config::check(k.name, k.default).is_ok(), "{}", k.name);
        }
        let described: BTreeMap<&str, &str> =
            TOPIC_KEYS.iter().map(|k| (k.name, k.default)).collect();
        for (key, default) in TopicConfig::defaults(1_048_588) {
            assert_eq!(described.get(key), Some(&default.as_str()), "{key}");
        }
        // And every key whose broker synonym the cluster may set is described.
        for (topic_key, _) in topic_config::BROKER_SYNONYMS {
            assert!(described.contains_key(topic_key), "{topic_key}");
        }
    }

    #[test]
    fn a_value_comes_from_the_topic_then_the_cluster_then_the_agent_then_the_default() {
        let mut topic = TopicInfo {
            id: Default::default(),
            name: "t".into(),
            partitions: 1,
            configs: [("retention.ms".to_string(), "1000".to_string())].into(),
            inherited: [
                ("retention.ms".to_string(), "2000".to_string()),
                ("retention.bytes".to_string(), "5".to_string()),
            ]
            .into(),
        };
        let agent = |b: &str| (b == "message.max.bytes").then(|| "2000000".to_string());
        let find = |topic: &TopicInfo, name: &str| {
            entries(topic, &agent)
                .into_iter()
                .find(|e| e.name == name)
                .unwrap()
        };
        let retention = find(&topic, "retention.ms");
        assert_eq!(
            (retention.value(), retention.source()),
            (Some("1000"), source::DYNAMIC_TOPIC)
        );
        assert_eq!(
            retention
                .synonyms
                .iter()
                .map(|s| (s.name.as_str(), s.source))
                .collect::<Vec<_>>(),
            vec![
                ("retention.ms", source::DYNAMIC_TOPIC),
                ("log.retention.ms", source::DYNAMIC_DEFAULT_BROKER),
                ("log.retention.ms", source::DEFAULT),
            ]
        );
        let bytes = find(&topic, "retention.bytes");
        assert_eq!(
            (bytes.value(), bytes.source()),
            (Some("5"), source::DYNAMIC_DEFAULT_BROKER)
        );
        let max = find(&topic, "max.message.bytes");
        assert_eq!(
            (max.value(), max.source()),
            (Some("2000000"), source::STATIC_BROKER)
        );
        topic
            .configs
            .insert("message.format.version".into(), "3.0".into());
        let legacy = find(&topic, "message.format.version");
        assert_eq!(legacy.doc, LEGACY_DOC);
        let policy = find(&topic, "cleanup.policy");
        assert_eq!(
            (policy.value(), policy.source(), policy.kind),
            (Some("delete"), source::DEFAULT, Type::List)
        );
    }
}
