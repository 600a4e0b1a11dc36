//! The broker resource's configs: what the agent was started with, under
//! Kafka's names (read-only: changing one means restarting the agent), and
//! the cluster's dynamic defaults (see `floe_metastore::dynamic_config`),
//! which AlterConfigs on the default entity sets for every agent at once.

use std::collections::BTreeMap;

use floe_metastore::dynamic_config::{
    DEFAULT_OFFSETS_RETENTION_MINUTES, GROUP_CONSUMER_MIGRATION_POLICY, OFFSETS_RETENTION_MINUTES,
};
use floe_metastore::topic_config::BROKER_SYNONYMS;

use super::entry::{Entry, Synonym, Type, source};
use super::topic::TOPIC_KEYS;
use crate::config::Config;

/// A config the agent reads at start-up, under its Kafka name.
struct StaticKey {
    name: &'static str,
    kind: Type,
    doc: &'static str,
    value: fn(&Config) -> Option<String>,
}

fn millis(d: std::time::Duration) -> Option<String> {
    Some(d.as_millis().to_string())
}

/// The listener's security protocol, as Kafka names it.
fn protocol(c: &Config) -> &'static str {
    match (c.tls_cert.is_some(), !c.sasl_mechanisms().is_empty()) {
        (false, false) => "PLAINTEXT",
        (true, false) => "SSL",
        (false, true) => "SASL_PLAINTEXT",
        (true, true) => "SASL_SSL",
    }
}

const STATIC_KEYS: &[StaticKey] = &[
    StaticKey {
        name: "node.id",
        kind: Type::Int,
        doc: "This agent's broker id (the agent's `node_id`, or the one the metastore assigned).",
        value: |c| Some(c.node_id.to_string()),
    },
    StaticKey {
        name: "broker.rack",
        kind: Type::String,
        doc: "This agent's zone (`zone`), which clients name with `floe_az=<zone>` in their client id.",
        value: |c| c.zone.clone(),
    },
    StaticKey {
        name: "listeners",
        kind: Type::String,
        doc: "The Kafka listeners (`listeners`, or `listen` with `tls_cert` and SASL settings).",
        value: |c| {
            Some(match c.listeners.is_empty() {
                true => format!("{}://{}", protocol(c), c.listen),
                false => c.listeners.join(","),
            })
        },
    },
    StaticKey {
        name: "advertised.listeners",
        kind: Type::String,
        doc: "The addresses clients are told to connect to (`advertised_listeners`, or `advertise`).",
        value: |c| {
            if c.listeners.is_empty() {
                let at = c.advertise.clone().unwrap_or_else(|| c.listen.to_string());
                return Some(format!("{}://{at}", protocol(c)));
            }
            let name = |entry: &str| entry.split("://").next().unwrap_or("").to_ascii_uppercase();
            let told = c.listeners.iter().map(|listener| {
                c.advertised_listeners
                    .iter()
                    .find(|advertised| name(advertised) == name(listener))
                    .unwrap_or(listener)
                    .as_str()
            });
            Some(told.collect::<Vec<_>>().join(","))
        },
    },
    StaticKey {
        name: "listener.security.protocol.map",
        kind: Type::String,
        doc: "Each listener's security protocol (`listener_security_protocol_map`).",
        value: |c| {
            Some(match c.listener_security_protocol_map.is_empty() {
                true => {
                    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
                        .to_string()
                }
                false => c.listener_security_protocol_map.join(","),
            })
        },
    },
    StaticKey {
        name: "socket.request.max.bytes",
        kind: Type::Int,
        doc: "The largest request accepted (`max_frame_bytes`).",
        value: |c| Some(c.max_frame_bytes.as_u64().to_string()),
    },
    StaticKey {
        name: "queued.max.request.bytes",
        kind: Type::Long,
        doc: "Memory for requests read and not yet admitted, across connections (`queued_max_request_bytes`).",
        value: |c| Some(c.queued_max_request_bytes.as_u64().to_string()),
    },
    StaticKey {
        name: "max.connections",
        kind: Type::Int,
        doc: "Connections open at once (`max_connections`).",
        value: |c| Some(c.max_connections.to_string()),
    },
    StaticKey {
        name: "max.connections.per.ip",
        kind: Type::Int,
        doc: "Connections open at once from one address (`max_connections_per_ip`).",
        value: |c| Some(c.max_connections_per_ip.to_string()),
    },
    StaticKey {
        name: "connections.max.idle.ms",
        kind: Type::Long,
        doc: "An idle connection is closed after this long (`connections_max_idle`).",
        value: |c| millis(c.connections_max_idle),
    },
    StaticKey {
        name: "auto.create.topics.enable",
        kind: Type::Boolean,
        doc: "Whether Metadata and Produce create a topic they name (`auto_create_topics`).",
        value: |c| Some(c.auto_create_topics.to_string()),
    },
    StaticKey {
        name: "num.partitions",
        kind: Type::Int,
        doc: "Partitions of an automatically created topic (`default_partitions`).",
        value: |c| Some(c.default_partitions.to_string()),
    },
    StaticKey {
        name: "default.replication.factor",
        kind: Type::Int,
        doc: "Replicas of an automatically created topic: one, always; the object store's own replication keeps the data (tools that create topics with it get what they asked for).",
        value: |_| Some("1".into()),
    },
    StaticKey {
        name: "group.consumer.session.timeout.ms",
        kind: Type::Int,
        doc: "Session timeout of consumer-protocol group members (`consumer_session_timeout`); a group's `consumer.session.timeout.ms` overrides it.",
        value: |c| millis(c.consumer_session_timeout),
    },
    StaticKey {
        name: "group.consumer.heartbeat.interval.ms",
        kind: Type::Int,
        doc: "Heartbeat interval of consumer-protocol group members (`consumer_heartbeat_interval`); a group's `consumer.heartbeat.interval.ms` overrides it.",
        value: |c| millis(c.consumer_heartbeat_interval),
    },
    StaticKey {
        name: "group.consumer.assignors",
        kind: Type::List,
        doc: "The server-side assignors of the consumer group protocol; the first is the default.",
        value: |_| Some("uniform,range".into()),
    },
    StaticKey {
        name: "group.min.session.timeout.ms",
        kind: Type::Int,
        doc: "The shortest session timeout a classic group member may ask for (`group_min_session_timeout`).",
        value: |c| millis(c.group_min_session_timeout),
    },
    StaticKey {
        name: "group.max.session.timeout.ms",
        kind: Type::Int,
        doc: "The longest session timeout a classic group member may ask for (`group_max_session_timeout`).",
        value: |c| millis(c.group_max_session_timeout),
    },
    StaticKey {
        name: "group.initial.rebalance.delay.ms",
        kind: Type::Int,
        doc: "How long the first rebalance of an empty classic group waits for more members (`group_initial_rebalance_delay`).",
        value: |c| millis(c.group_initial_rebalance_delay),
    },
    StaticKey {
        name: "transaction.max.timeout.ms",
        kind: Type::Int,
        doc: "The longest transaction timeout a producer may ask for (`transaction_max_timeout`).",
        value: |c| millis(c.transaction_max_timeout),
    },
    StaticKey {
        name: "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        kind: Type::Int,
        doc: "How often transactions past their timeout are looked for, on the metastore's clock (`transaction_abort_check_interval`): one times out at the first look after its timeout.",
        value: |c| millis(c.transaction_abort_check_interval),
    },
    StaticKey {
        name: "producer.id.expiration.ms",
        kind: Type::Int,
        doc: "How long an idle producer id's sequence state is kept.",
        value: |_| Some(floe_metastore::state::PRODUCER_ID_EXPIRATION_MS.to_string()),
    },
    StaticKey {
        name: "sasl.enabled.mechanisms",
        kind: Type::List,
        doc: "SASL mechanisms clients authenticate with (`sasl_mechanisms`).",
        value: |c| Some(c.sasl_mechanisms().join(",")),
    },
    StaticKey {
        name: "super.users",
        kind: Type::String,
        doc: "Principals allowed everything (`super_users`).",
        value: |c| Some(c.super_users.join(";")),
    },
    StaticKey {
        name: "allow.everyone.if.no.acl.found",
        kind: Type::Boolean,
        doc: "Allow what no ACL names (`allow_everyone_if_no_acl_found`).",
        value: |c| Some(c.allow_everyone_if_no_acl_found.to_string()),
    },
];

/// Kafka's synonyms that are read only at start-up (only a config's first
/// synonym is dynamic): `kafka-configs --add-config log.retention.hours=...`
/// gets Kafka's answer.
const READ_ONLY_SYNONYMS: &[&str] = &[
    "log.retention.minutes",
    "log.retention.hours",
    "log.roll.hours",
    "log.roll.jitter.hours",
    "log.flush.scheduler.interval.ms",
];

/// Whether `name` is a broker config read at start-up only.
pub fn is_static(name: &str) -> bool {
    STATIC_KEYS.iter().any(|k| k.name == name) || READ_ONLY_SYNONYMS.contains(&name)
}

/// Whether the cluster may set `name` (on the default broker entity).
pub fn is_cluster_wide(name: &str) -> bool {
    dynamic_keys().any(|(key, ..)| key == name)
}

/// The agent's value of a broker config set at start-up, when it sets one
/// other than the default.
pub fn static_value(config: &Config, name: &str) -> Option<String> {
    if name == "message.max.bytes" {
        let default = Config::default().message_max_bytes;
        return (config.message_max_bytes != default)
            .then(|| config.message_max_bytes.as_u64().to_string());
    }
    let key = STATIC_KEYS.iter().find(|k| k.name == name)?;
    let value = (key.value)(config);
    match value == (key.value)(&Config::default()) {
        true => None,
        false => value,
    }
}

/// This broker's every config: the static ones read-only, then the ones
/// the cluster may set (`dynamic`: those it sets).
pub fn entries(config: &Config, dynamic: &BTreeMap<String, String>) -> Vec<Entry> {
    let mut out: BTreeMap<String, Entry> = BTreeMap::new();
    for key in STATIC_KEYS {
        let value = (key.value)(config);
        let source = match value == (key.value)(&Config::default()) {
            true => source::DEFAULT,
            false => source::STATIC_BROKER,
        };
        out.insert(
            key.name.to_string(),
            Entry {
                name: key.name.to_string(),
                kind: key.kind,
                read_only: true,
                doc: key.doc,
                synonyms: vec![Synonym::new(key.name, value, source)],
            },
        );
    }
    for (name, kind, default, doc) in dynamic_keys() {
        let mut synonyms = Vec::new();
        if let Some(v) = dynamic.get(name) {
            synonyms.push(Synonym::new(
                name,
                Some(v.clone()),
                source::DYNAMIC_DEFAULT_BROKER,
            ));
        }
        if let Some(v) = static_value(config, name) {
            synonyms.push(Synonym::new(name, Some(v), source::STATIC_BROKER));
        }
        synonyms.push(Synonym::new(name, Some(default), source::DEFAULT));
        out.insert(
            name.to_string(),
            Entry::alterable(name, kind, doc, synonyms),
        );
    }
    out.into_values().collect()
}

/// The default entity's configs: only those the cluster sets.
pub fn default_entity_entries(dynamic: &BTreeMap<String, String>) -> Vec<Entry> {
    dynamic_keys()
        .filter_map(|(name, kind, _, doc)| {
            let value = dynamic.get(name)?;
            let set = Synonym::new(name, Some(value.clone()), source::DYNAMIC_DEFAULT_BROKER);
            Some(Entry::alterable(name, kind, doc, vec![set]))
        })
        .collect()
}

/// The configs the cluster may set: name, type, default, documentation.
fn dynamic_keys() -> impl Iterator<Item = (&'static str, Type, String, &'static str)> {
    let topic_defaults = BROKER_SYNONYMS.iter().filter_map(|(topic, broker)| {
        let key = TOPIC_KEYS.iter().find(|k| k.name == *topic)?;
        Some((*broker, key.kind, key.default.to_string(), key.doc))
    });
    std::iter::once((
        OFFSETS_RETENTION_MINUTES,
        Type::Int,
        DEFAULT_OFFSETS_RETENTION_MINUTES.to_string(),
        "Committed offsets of a group empty this long (and not committed since) are forgotten. Kafka reads it at start-up; in floe the cluster sets it while running.",
    ))
    .chain(std::iter::once((
        GROUP_CONSUMER_MIGRATION_POLICY,
        Type::String,
        "bidirectional".to_string(),
        "Whether a group with members moves between the classic and the consumer protocol: bidirectional, upgrade (classic to consumer only), downgrade (consumer to classic only) or disabled. Kafka reads it at start-up; in floe the cluster sets it while running.",
    )))
    .chain(share_keys())
    .chain(topic_defaults)
}

/// Share groups' cluster configs (KIP-932): Kafka's broker configs, which
/// the cluster sets while running here.
fn share_keys() -> impl Iterator<Item = (&'static str, Type, String, &'static str)> {
    use floe_metastore::share_config::*;
    CLUSTER_INTS.iter().map(|&(name, default, ..)| {
        let doc = match name {
            GROUP_SHARE_DELIVERY_COUNT_LIMIT => "How many times a share group delivers a record before archiving it (2 to 10).",
            GROUP_SHARE_PARTITION_MAX_RECORD_LOCKS => "Records of one share-partition in flight at most (100 to 10,000).",
            GROUP_SHARE_RECORD_LOCK_DURATION_MS => "How long a share-group member holds the records it acquired; a group's share.record.lock.duration.ms overrides it.",
            GROUP_SHARE_MIN_RECORD_LOCK_DURATION_MS => "The shortest lock a share group may set.",
            GROUP_SHARE_MAX_RECORD_LOCK_DURATION_MS => "The longest lock a share group may set.",
            GROUP_SHARE_MAX_SIZE => "Members of one share group at most (1 to 1,000).",
            GROUP_SHARE_SESSION_TIMEOUT_MS => "A share-group member not heard from for this long is removed; a group's share.session.timeout.ms overrides it.",
            _ => "How often share-group members heartbeat; a group's share.heartbeat.interval.ms overrides it.",
        };
        (name, Type::Int, default.to_string(), doc)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cluster_default_of_a_topic_config_is_described() {
        assert_eq!(dynamic_keys().count(), BROKER_SYNONYMS.len() + 2 + 8);
        assert!(dynamic_keys().all(|(name, ..)| !is_static(name)));
    }

    #[test]
    fn static_and_dynamic_values_come_with_their_sources() {
        let config = Config {
            max_connections: 7,
            ..Config::default()
        };
        let dynamic = BTreeMap::from([("log.retention.ms".to_string(), "5".to_string())]);
        let all = entries(&config, &dynamic);
        let find = |name: &str| all.iter().find(|e| e.name == name).unwrap();
        let max = find("max.connections");
        assert_eq!(
            (max.value(), max.source(), max.read_only),
            (Some("7"), source::STATIC_BROKER, true)
        );
        let idle = find("connections.max.idle.ms");
        assert_eq!(
            (idle.value(), idle.source()),
            (Some("600000"), source::DEFAULT)
        );
        let retention = find("log.retention.ms");
        assert_eq!(
            (retention.value(), retention.source(), retention.read_only),
            (Some("5"), source::DYNAMIC_DEFAULT_BROKER, false)
        );
        assert_eq!(retention.synonyms.len(), 2, "dynamic default, then default");
        assert_eq!(
            default_entity_entries(&dynamic)
                .iter()
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>(),
            vec!["log.retention.ms"]
        );
    }
}
