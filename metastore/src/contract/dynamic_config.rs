//! Configs altered while the cluster runs: Kafka's dynamic broker configs
//! at the cluster-wide default entity (`kafka-configs --entity-type brokers
//! --entity-default`), and KIP-848's per-group configs (resource type
//! GROUP).
//!
//! They live in the state because the state machine acts on them (offset
//! expiry, a consumer group's session timeout, which topics are keyed), and
//! because every agent must see the same values: an agent is no broker with
//! its own `server.properties` that a per-broker config could change.
//!
//! The cluster entity takes the cluster-wide defaults of topic configs by
//! their broker names (`log.retention.ms` for `retention.ms`, see
//! [`topic_config::BROKER_SYNONYMS`]): every topic that does not set a key
//! gets its cluster default, in every answer the metastore gives about it
//! ([`TopicInfo::inherited`](crate::TopicInfo)). It also takes
//! `offsets.retention.minutes`, which Kafka reads only at start-up; the
//! metastore has no start-up file of broker configs, so here it is dynamic.
//!
//! A group's configs do not need the group to exist, and outlive its
//! deletion, as Kafka's (they are configs of a name, not group state).
//!
//! KIP-714's client metrics subscriptions (resource type CLIENT_METRICS)
//! are named entities too: which metrics matching clients push, and how
//! often. Agents keep a copy and answer GetTelemetrySubscriptions from it
//! (`floe_agent::telemetry`).
//!
//! Each key is known with its type and bounds; anything else is refused
//! (`INVALID_CONFIG`). Kafka stores unknown broker keys and ignores them;
//! floe refuses them, so a misspelt key is an error rather than nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::contract::groups::{MAX_SESSION_TIMEOUT_MS, MIN_SESSION_TIMEOUT_MS};
use crate::contract::share_config;
use crate::contract::topic_config::{self, TopicConfig};

/// Kafka's `offsets.retention.minutes` (default 7 days): committed offsets
/// of a group empty this long (and not committed since) are forgotten.
pub const OFFSETS_RETENTION_MINUTES: &str = "offsets.retention.minutes";
pub const DEFAULT_OFFSETS_RETENTION_MINUTES: i64 = 7 * 24 * 60;

/// Kafka's `group.consumer.migration.policy`: whether groups with members
/// move between the classic and the consumer protocol (see
/// [`crate::contract::groups::convert`]). Kafka reads it at start-up; here it is
/// dynamic, as `offsets.retention.minutes` is.
pub const GROUP_CONSUMER_MIGRATION_POLICY: &str = "group.consumer.migration.policy";

/// KIP-848 group configs: a consumer-protocol group's session timeout and
/// heartbeat interval, instead of the agents' (`group.consumer.*`).
pub const CONSUMER_SESSION_TIMEOUT_MS: &str = "consumer.session.timeout.ms";
pub const CONSUMER_HEARTBEAT_INTERVAL_MS: &str = "consumer.heartbeat.interval.ms";
/// The shortest heartbeat interval a group may ask for.
pub const MIN_HEARTBEAT_INTERVAL_MS: i32 = 1_000;

/// KIP-714 subscription configs (Kafka's `ClientMetricsConfigs`): the
/// metric name prefixes asked for (`*`: every metric), the push interval,
/// and which clients the subscription is for (`selector=regex` items; none:
/// every client).
pub const CLIENT_METRICS_METRICS: &str = "metrics";
pub const CLIENT_METRICS_INTERVAL_MS: &str = "interval.ms";
pub const CLIENT_METRICS_MATCH: &str = "match";
pub const ALL_CLIENT_METRICS: &str = "*";
pub const DEFAULT_PUSH_INTERVAL_MS: i32 = 5 * 60 * 1000;
pub const MIN_PUSH_INTERVAL_MS: i32 = 100;
pub const MAX_PUSH_INTERVAL_MS: i32 = 3_600_000;
/// What a `match` item may select on: a client's attributes as KIP-714
/// names them.
pub const CLIENT_SELECTORS: [&str; 6] = [
    "client_instance_id",
    "client_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "client_source_port",
];
/// Subscriptions at most (Kafka sets no limit; every agent holds a copy and
/// matches each client against all of them), and the bytes of a name.
pub const MAX_CLIENT_METRICS_ENTITIES: usize = 256;
pub const MAX_SUBSCRIPTION_NAME_BYTES: usize = 255;
/// A `match` regex compiled at most this large (the regex crate matches
/// in linear time; this bounds its memory: a subscription has at most one
/// regex per selector).
const MAX_MATCH_REGEX_BYTES: usize = 64 << 10;

/// Bounds: the state is replicated and snapshotted, and the cluster's
/// topic defaults are copied into every answer about a topic, so nothing
/// here is unbounded. Keys one entity may set; operations in one change;
/// the bytes of a key, of a value, of a cluster value (its values are
/// numbers, words and short lists) and of a group id.
pub const MAX_KEYS: usize = 64;
pub const MAX_OPS: usize = 256;
pub const MAX_KEY_BYTES: usize = 256;
pub const MAX_VALUE_BYTES: usize = 1_024;
pub const MAX_CLUSTER_VALUE_BYTES: usize = 64;
pub const MAX_GROUP_ID_BYTES: usize = 1_024;
/// Groups with configs set at most (as many as groups); the cluster entity
/// is never refused for their number.
pub const MAX_GROUP_ENTITIES: usize = crate::contract::groups::MAX_GROUPS;

/// What a config is set on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ConfigEntity {
    /// The cluster-wide default entity of Kafka's BROKER resource (name "").
    Cluster,
    /// A group (Kafka's GROUP resource), by group id.
    Group(String),
    /// A client metrics subscription (KIP-714's CLIENT_METRICS resource),
    /// by name.
    ClientMetrics(String),
    /// A client quota's entity (see [`crate::contract::quotas`]).
    ClientQuota(crate::contract::quotas::QuotaEntity),
}

/// What a change applies to: a topic's configs, or an entity's dynamic ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConfigTarget {
    Topic(String),
    Dynamic(ConfigEntity),
}

/// One operation of a change (IncrementalAlterConfigs' SET, DELETE, APPEND
/// and SUBTRACT), applied in the metastore to the configs as they are then,
/// so concurrent changes never undo each other's keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConfigOp {
    Set(String, String),
    Delete(String),
    /// Adds list items not there yet (list configs only).
    Append(String, String),
    /// Removes list items (list configs only).
    Subtract(String, String),
}

impl ConfigOp {
    pub fn key(&self) -> &str {
        match self {
            ConfigOp::Set(k, _) | ConfigOp::Append(k, _) | ConfigOp::Subtract(k, _) => k,
            ConfigOp::Delete(k) => k,
        }
    }
}

/// Kafka's list-valued configs (which APPEND and SUBTRACT change), with the
/// value they start from when not set.
const LIST_CONFIGS: &[(&str, &str)] = &[
    (topic_config::CLEANUP_POLICY, "delete"),
    (CLIENT_METRICS_METRICS, ""),
    (CLIENT_METRICS_MATCH, ""),
    ("log.cleanup.policy", "delete"),
    ("follower.replication.throttled.replicas", ""),
    ("leader.replication.throttled.replicas", ""),
];

/// A comma-separated list's items, trimmed, empty ones dropped.
fn items(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|i| !i.is_empty())
}

/// Configs after a change's operations (from nothing when `replace`, as
/// AlterConfigs replaces them all), or why it is refused. The result's
/// values are checked by the target ([`check_topic_change`], [`checked`]).
///
/// This and the checks run in `apply`: a change to what they accept changes
/// how logged changes replay, so it needs a `FORMAT_VERSION` bump (nodes of
/// different formats never replicate to each other).
pub fn apply_ops(
    current: &BTreeMap<String, String>,
    ops: &[ConfigOp],
    replace: bool,
) -> Result<BTreeMap<String, String>, String> {
    if ops.len() > MAX_OPS {
        return Err(format!(
            "more than {MAX_OPS} config operations in one change"
        ));
    }
    let mut configs = match replace {
        true => BTreeMap::new(),
        false => current.clone(),
    };
    for op in ops {
        let key = op.key();
        if key.len() > MAX_KEY_BYTES {
            return Err(format!("a config name is over {MAX_KEY_BYTES} bytes"));
        }
        match op {
            ConfigOp::Set(k, v) => {
                if v.len() > MAX_VALUE_BYTES {
                    return Err(format!("the value of {k} is over {MAX_VALUE_BYTES} bytes"));
                }
                configs.insert(k.clone(), v.clone());
            }
            ConfigOp::Delete(k) => {
                configs.remove(k);
            }
            ConfigOp::Append(k, v) | ConfigOp::Subtract(k, v) => {
                if v.len() > MAX_VALUE_BYTES {
                    return Err(format!("the value of {k} is over {MAX_VALUE_BYTES} bytes"));
                }
                let appending = matches!(op, ConfigOp::Append(..));
                let Some((_, default)) = LIST_CONFIGS.iter().find(|(l, _)| l == k) else {
                    let what = if appending { "append" } else { "subtract" };
                    return Err(format!(
                        "Config value {what} is not allowed for config key: {k}"
                    ));
                };
                let was = configs.get(k).map_or(*default, String::as_str);
                let mut list: Vec<&str> = items(was).collect();
                for item in items(v) {
                    if appending {
                        if !list.contains(&item) {
                            list.push(item);
                        }
                    } else {
                        list.retain(|i| *i != item);
                    }
                }
                let joined = list.join(",");
                if joined.len() > MAX_VALUE_BYTES {
                    return Err(format!("the value of {k} is over {MAX_VALUE_BYTES} bytes"));
                }
                configs.insert(k.clone(), joined);
            }
        }
    }
    Ok(configs)
}

/// The range of an integer key's value.
fn bounds(entity: &ConfigEntity, key: &str) -> Option<(i64, i64)> {
    match entity {
        ConfigEntity::Cluster => match key {
            OFFSETS_RETENTION_MINUTES => Some((1, i32::MAX as i64)),
            _ => share_config::int_bounds(false, key),
        },
        ConfigEntity::Group(_) => match key {
            CONSUMER_SESSION_TIMEOUT_MS => {
                Some((MIN_SESSION_TIMEOUT_MS as i64, MAX_SESSION_TIMEOUT_MS as i64))
            }
            CONSUMER_HEARTBEAT_INTERVAL_MS => Some((
                MIN_HEARTBEAT_INTERVAL_MS as i64,
                MAX_SESSION_TIMEOUT_MS as i64 - 1,
            )),
            _ => share_config::int_bounds(true, key),
        },
        ConfigEntity::ClientMetrics(_) => match key {
            CLIENT_METRICS_INTERVAL_MS => {
                Some((MIN_PUSH_INTERVAL_MS as i64, MAX_PUSH_INTERVAL_MS as i64))
            }
            _ => None,
        },
        ConfigEntity::ClientQuota(_) => None,
    }
}

/// A subscription's `match` list as (selector, pattern) pairs, or why it
/// is refused (Kafka's message): each item `selector=pattern` with exactly
/// one `=` and a pattern, as Java's `split("=")` leaves them; a selector
/// given twice keeps its last pattern, as Kafka's map does.
///
/// This is what the metastore checks. It does not compile the patterns:
/// what a regex engine accepts can change with its version, and a replayed
/// log entry must be decided the same by every floe. The agents compile
/// them ([`parse_match`]) and refuse, before proposing, what their engine
/// does not take.
pub fn match_items(list: &str) -> Result<BTreeMap<&str, &str>, String> {
    let mut matched = BTreeMap::new();
    for item in items(list) {
        let illegal = || format!("Illegal client matching pattern: {item}");
        let mut parts = item.split('=');
        let (Some(selector), Some(pattern), None) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(illegal());
        };
        let (selector, pattern) = (selector.trim(), pattern.trim());
        if !CLIENT_SELECTORS.contains(&selector) || pattern.is_empty() {
            return Err(illegal());
        }
        matched.insert(selector, pattern);
    }
    Ok(matched)
}

/// A subscription's `match` list as (selector, regex) pairs, each regex
/// matching a whole attribute (Java's `Matcher.matches`). The regex
/// crate's syntax is close to Java's but has no look-around or
/// back-references; such patterns are refused.
pub fn parse_match(list: &str) -> Result<Vec<(String, regex::Regex)>, String> {
    match_items(list)?
        .into_iter()
        .map(|(selector, pattern)| {
            let regex = regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
                .size_limit(MAX_MATCH_REGEX_BYTES)
                .build()
                .map_err(|_| format!("Illegal client matching pattern: {selector}={pattern}"))?;
            Ok((selector.to_string(), regex))
        })
        .collect()
}

/// Whether `key = value` may be set on `entity`, or why not (Kafka's
/// `INVALID_CONFIG` message).
pub fn check(entity: &ConfigEntity, key: &str, value: &str) -> Result<(), String> {
    let what = match entity {
        ConfigEntity::Cluster => "dynamic broker",
        ConfigEntity::Group(_) => "group",
        ConfigEntity::ClientMetrics(_) => "client metrics",
        ConfigEntity::ClientQuota(_) => return crate::contract::quotas::check(key, value),
    };
    if let (ConfigEntity::Cluster, Some(topic_key)) = (entity, topic_config::topic_key_of(key)) {
        // Checked as the topic config it is the default of.
        let as_topic = BTreeMap::from([(topic_key.to_string(), value.trim().to_string())]);
        return TopicConfig::parse(&as_topic)
            .map(drop)
            .map_err(|why| format!("Invalid value {value} for configuration {key}: {why}"));
    }
    if let (ConfigEntity::Cluster, GROUP_CONSUMER_MIGRATION_POLICY) = (entity, key) {
        return match crate::contract::groups::MigrationPolicy::parse(value) {
            Some(_) => Ok(()),
            None => Err(format!(
                "Invalid value {value} for configuration {key}: must be one of bidirectional, upgrade, downgrade, disabled"
            )),
        };
    }
    if let ConfigEntity::Group(_) = entity
        && let Some(checked) = share_config::check_group_string(key, value)
    {
        return checked;
    }
    if let ConfigEntity::ClientMetrics(_) = entity {
        match key {
            // Any names: a client pushes those it has.
            CLIENT_METRICS_METRICS => return Ok(()),
            CLIENT_METRICS_MATCH => return match_items(value).map(drop),
            _ => {}
        }
    }
    let Some((min, max)) = bounds(entity, key) else {
        return Err(format!("Unknown {what} config name: {key}"));
    };
    match value.trim().parse::<i64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(()),
        _ => Err(format!(
            "Invalid value {value} for configuration {key}: must be an integer in [{min}, {max}]"
        )),
    }
}

/// Whether a topic's change may be stored: each key it sets is checked
/// strictly (Kafka's definitions), the others left as they were stored, so
/// a value older floe took (before keys were checked) never blocks a change
/// to another key. Topic configs have no rules across keys.
pub fn check_topic_change(
    result: &BTreeMap<String, String>,
    ops: &[ConfigOp],
) -> Result<(), String> {
    let touched: BTreeMap<String, String> = ops
        .iter()
        .filter(|op| !matches!(op, ConfigOp::Delete(_)))
        .filter_map(|op| Some((op.key().to_string(), result.get(op.key())?.clone())))
        .collect();
    TopicConfig::parse(&touched).map(drop)
}

/// An entity's configs as they would be stored, or why they are refused:
/// every value checked (and stored trimmed; a cluster list without repeats,
/// so padding cannot grow what every topic answer carries), and the whole
/// (a group's heartbeat must be shorter than its session).
pub fn checked(
    entity: &ConfigEntity,
    configs: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, String> {
    if let ConfigEntity::Group(group) = entity {
        if group.is_empty() {
            return Err("a group config needs a group id".into());
        }
        if group.len() > MAX_GROUP_ID_BYTES {
            return Err(format!("a group id is over {MAX_GROUP_ID_BYTES} bytes"));
        }
    }
    if let ConfigEntity::ClientMetrics(name) = entity {
        if name.is_empty() {
            return Err("Subscription name can't be empty".into());
        }
        if name.len() > MAX_SUBSCRIPTION_NAME_BYTES {
            return Err(format!(
                "a subscription name is over {MAX_SUBSCRIPTION_NAME_BYTES} bytes"
            ));
        }
    }
    if let ConfigEntity::ClientQuota(quota) = entity {
        quota.check()?;
    }
    if configs.len() > MAX_KEYS {
        return Err(format!("more than {MAX_KEYS} configs on one resource"));
    }
    let mut stored = BTreeMap::new();
    for (key, value) in configs {
        check(entity, &key, &value)?;
        let value = match LIST_CONFIGS.iter().any(|(l, _)| *l == key) {
            true => {
                let mut list: Vec<&str> = Vec::new();
                for item in items(&value) {
                    if !list.contains(&item) {
                        list.push(item);
                    }
                }
                list.join(",")
            }
            false => value.trim().to_string(),
        };
        if matches!(entity, ConfigEntity::Cluster) && value.len() > MAX_CLUSTER_VALUE_BYTES {
            return Err(format!(
                "the value of {key} is over {MAX_CLUSTER_VALUE_BYTES} bytes"
            ));
        }
        stored.insert(key, value);
    }
    let int = |key: &str| stored.get(key).and_then(|v| v.parse::<i64>().ok());
    if let (Some(session), Some(interval)) = (
        int(CONSUMER_SESSION_TIMEOUT_MS),
        int(CONSUMER_HEARTBEAT_INTERVAL_MS),
    ) && interval >= session
    {
        return Err(format!(
            "{CONSUMER_SESSION_TIMEOUT_MS} must be greater than {CONSUMER_HEARTBEAT_INTERVAL_MS} ({session} <= {interval})"
        ));
    }
    if let ConfigEntity::Group(_) = entity {
        share_config::check_group(&stored)?;
    }
    Ok(stored)
}
