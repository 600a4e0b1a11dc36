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
//! Each key is known with its type and bounds; anything else is refused
//! (`INVALID_CONFIG`). Kafka stores unknown broker keys and ignores them;
//! floe refuses them, so a misspelt key is an error rather than nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::groups::{MAX_SESSION_TIMEOUT_MS, MIN_SESSION_TIMEOUT_MS};
use crate::topic_config::{self, TopicConfig};

/// Kafka's `offsets.retention.minutes` (default 7 days): committed offsets
/// of a group empty this long (and not committed since) are forgotten.
pub const OFFSETS_RETENTION_MINUTES: &str = "offsets.retention.minutes";
pub const DEFAULT_OFFSETS_RETENTION_MINUTES: i64 = 7 * 24 * 60;

/// KIP-848 group configs: a consumer-protocol group's session timeout and
/// heartbeat interval, instead of the agents' (`group.consumer.*`).
pub const CONSUMER_SESSION_TIMEOUT_MS: &str = "consumer.session.timeout.ms";
pub const CONSUMER_HEARTBEAT_INTERVAL_MS: &str = "consumer.heartbeat.interval.ms";
/// The shortest heartbeat interval a group may ask for.
pub const MIN_HEARTBEAT_INTERVAL_MS: i32 = 1_000;

/// Keys one entity may set, and the bytes of one value: the state is
/// replicated and snapshotted, so nothing in it is unbounded.
pub const MAX_KEYS: usize = 64;
pub const MAX_VALUE_BYTES: usize = 1_024;
/// Entities with configs set at most (one per group, as many as groups).
pub const MAX_ENTITIES: usize = crate::groups::MAX_GROUPS;

/// What a config is set on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ConfigEntity {
    /// The cluster-wide default entity of Kafka's BROKER resource (name "").
    Cluster,
    /// A group (Kafka's GROUP resource), by group id.
    Group(String),
}

/// The range of an integer key's value.
fn bounds(entity: &ConfigEntity, key: &str) -> Option<(i64, i64)> {
    match entity {
        ConfigEntity::Cluster => match key {
            OFFSETS_RETENTION_MINUTES => Some((1, i32::MAX as i64)),
            _ => None,
        },
        ConfigEntity::Group(_) => match key {
            CONSUMER_SESSION_TIMEOUT_MS => {
                Some((MIN_SESSION_TIMEOUT_MS as i64, MAX_SESSION_TIMEOUT_MS as i64))
            }
            CONSUMER_HEARTBEAT_INTERVAL_MS => Some((
                MIN_HEARTBEAT_INTERVAL_MS as i64,
                MAX_SESSION_TIMEOUT_MS as i64 - 1,
            )),
            _ => None,
        },
    }
}

/// Whether `key = value` may be set on `entity`, or why not (Kafka's
/// `INVALID_CONFIG` message).
pub fn check(entity: &ConfigEntity, key: &str, value: &str) -> Result<(), String> {
    let what = match entity {
        ConfigEntity::Cluster => "dynamic broker",
        ConfigEntity::Group(_) => "group",
    };
    if let (ConfigEntity::Cluster, Some(topic_key)) = (entity, topic_config::topic_key_of(key)) {
        // Checked as the topic config it is the default of.
        let as_topic = BTreeMap::from([(topic_key.to_string(), value.to_string())]);
        return TopicConfig::parse(&as_topic)
            .map(drop)
            .map_err(|why| format!("Invalid value {value} for configuration {key}: {why}"));
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

/// An entity's configs after a change, or why the change is refused: every
/// value is checked, and so is the result (a group's heartbeat must be
/// shorter than its session). Deletes apply before sets.
pub fn altered(
    entity: &ConfigEntity,
    mut configs: BTreeMap<String, String>,
    set: BTreeMap<String, String>,
    delete: &[String],
) -> Result<BTreeMap<String, String>, String> {
    if let ConfigEntity::Group(group) = entity
        && group.is_empty()
    {
        return Err("a group config needs a group id".into());
    }
    for (key, value) in &set {
        if value.len() > MAX_VALUE_BYTES {
            return Err(format!(
                "the value of {key} is over {MAX_VALUE_BYTES} bytes"
            ));
        }
        check(entity, key, value)?;
    }
    for key in delete {
        configs.remove(key);
    }
    configs.extend(set);
    if configs.len() > MAX_KEYS {
        return Err(format!("more than {MAX_KEYS} configs on one resource"));
    }
    let int = |key: &str| configs.get(key).and_then(|v| v.trim().parse::<i64>().ok());
    if let (Some(session), Some(interval)) = (
        int(CONSUMER_SESSION_TIMEOUT_MS),
        int(CONSUMER_HEARTBEAT_INTERVAL_MS),
    ) && interval >= session
    {
        return Err(format!(
            "{CONSUMER_SESSION_TIMEOUT_MS} must be greater than {CONSUMER_HEARTBEAT_INTERVAL_MS} ({session} <= {interval})"
        ));
    }
    Ok(configs)
}

/// Every entity's configs as set, with a version that every change bumps
/// (so agents copy them only when they changed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DynamicConfigs {
    version: u64,
    entities: BTreeMap<ConfigEntity, BTreeMap<String, String>>,
}

impl DynamicConfigs {
    pub fn version(&self) -> u64 {
        self.version
    }

    /// What `entity` sets (nothing set: empty).
    pub fn of(&self, entity: &ConfigEntity) -> BTreeMap<String, String> {
        self.entities.get(entity).cloned().unwrap_or_default()
    }

    /// Sets and deletes keys of one entity, all or none (see [`altered`]).
    pub fn alter(
        &mut self,
        entity: ConfigEntity,
        set: BTreeMap<String, String>,
        delete: Vec<String>,
    ) -> Result<(), String> {
        let configs = altered(&entity, self.of(&entity), set, &delete)?;
        if !self.entities.contains_key(&entity) && self.entities.len() >= MAX_ENTITIES {
            return Err(format!(
                "configs are set on {MAX_ENTITIES} resources already"
            ));
        }
        if configs.is_empty() {
            self.entities.remove(&entity);
        } else {
            self.entities.insert(entity, configs);
        }
        self.version += 1;
        Ok(())
    }

    fn int(&self, entity: &ConfigEntity, key: &str) -> Option<i64> {
        self.entities.get(entity)?.get(key)?.trim().parse().ok()
    }

    /// The cluster's defaults of topic configs, by topic config name.
    pub fn topic_defaults(&self) -> BTreeMap<String, String> {
        let Some(cluster) = self.entities.get(&ConfigEntity::Cluster) else {
            return BTreeMap::new();
        };
        cluster
            .iter()
            .filter_map(|(k, v)| Some((topic_config::topic_key_of(k)?.to_string(), v.clone())))
            .collect()
    }

    /// `offsets.retention.minutes`, in milliseconds.
    pub fn offsets_retention_ms(&self) -> i64 {
        self.int(&ConfigEntity::Cluster, OFFSETS_RETENTION_MINUTES)
            .unwrap_or(DEFAULT_OFFSETS_RETENTION_MINUTES)
            .saturating_mul(60_000)
    }

    /// A consumer group's session timeout and heartbeat interval: the
    /// group's where it sets them, else what the agent asked with. An
    /// interval left at least the session it would miss is cut to a third
    /// of it (the group may set one key and the agents the other).
    pub fn consumer_timeouts(&self, group: &str, session_ms: i32, interval_ms: i32) -> (i32, i32) {
        let entity = ConfigEntity::Group(group.to_string());
        let session = self
            .int(&entity, CONSUMER_SESSION_TIMEOUT_MS)
            .map_or(session_ms, |v| v as i32);
        let interval = self
            .int(&entity, CONSUMER_HEARTBEAT_INTERVAL_MS)
            .map_or(interval_ms, |v| v as i32);
        match interval < session {
            true => (session, interval),
            false => (session, (session / 3).max(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_and_change_nothing() {
        let mut c = DynamicConfigs::default();
        let group = ConfigEntity::Group("g".into());
        let err = c
            .alter(
                ConfigEntity::Cluster,
                set(&[("dummy.doesntexist", "1")]),
                vec![],
            )
            .unwrap_err();
        assert!(err.contains("Unknown dynamic broker config"), "{err}");
        for bad in ["0", "x", "-5", "99999999999"] {
            assert!(
                c.alter(
                    ConfigEntity::Cluster,
                    set(&[(OFFSETS_RETENTION_MINUTES, bad)]),
                    vec![]
                )
                .is_err()
            );
        }
        // One bad value refuses the whole change.
        assert!(
            c.alter(
                group.clone(),
                set(&[
                    (CONSUMER_SESSION_TIMEOUT_MS, "10000"),
                    (CONSUMER_HEARTBEAT_INTERVAL_MS, "10")
                ]),
                vec![]
            )
            .is_err()
        );
        assert!(
            c.alter(ConfigEntity::Group(String::new()), set(&[]), vec![])
                .is_err()
        );
        assert_eq!((c.version(), c.of(&group)), (0, BTreeMap::new()));
        assert_eq!(c.offsets_retention_ms(), 7 * 24 * 3600 * 1000);
    }

    #[test]
    fn a_group_s_timeouts_override_the_agents_and_stay_consistent() {
        let mut c = DynamicConfigs::default();
        let group = ConfigEntity::Group("g".into());
        assert_eq!(c.consumer_timeouts("g", 45_000, 5_000), (45_000, 5_000));
        c.alter(
            group.clone(),
            set(&[(CONSUMER_SESSION_TIMEOUT_MS, "12000")]),
            vec![],
        )
        .unwrap();
        assert_eq!(c.consumer_timeouts("g", 45_000, 5_000), (12_000, 5_000));
        assert_eq!(c.consumer_timeouts("other", 45_000, 5_000), (45_000, 5_000));
        // The agents' interval would miss the group's session: cut.
        assert_eq!(c.consumer_timeouts("g", 45_000, 20_000), (12_000, 4_000));
        // Heartbeat at least the session in the group's own configs: refused.
        assert!(
            c.alter(
                group.clone(),
                set(&[(CONSUMER_HEARTBEAT_INTERVAL_MS, "12000")]),
                vec![]
            )
            .is_err()
        );
        c.alter(
            group.clone(),
            set(&[]),
            vec![CONSUMER_SESSION_TIMEOUT_MS.into()],
        )
        .unwrap();
        assert_eq!(c.of(&group), BTreeMap::new());
    }

    #[test]
    fn cluster_topic_defaults_are_checked_as_their_topic_configs() {
        let mut c = DynamicConfigs::default();
        for (key, bad) in [
            ("log.retention.ms", "-7"),
            ("log.cleanup.policy", "shred"),
            ("log.message.timestamp.type", "Sometime"),
            ("log.retention.minutes", "5"),
        ] {
            assert!(
                c.alter(ConfigEntity::Cluster, set(&[(key, bad)]), vec![])
                    .is_err(),
                "{key}={bad}"
            );
        }
        c.alter(
            ConfigEntity::Cluster,
            set(&[
                ("log.retention.ms", "60000"),
                ("log.cleanup.policy", "compact,delete"),
                (OFFSETS_RETENTION_MINUTES, "5"),
            ]),
            vec![],
        )
        .unwrap();
        assert_eq!(
            c.topic_defaults(),
            set(&[
                ("retention.ms", "60000"),
                ("cleanup.policy", "compact,delete")
            ])
        );
    }

    #[test]
    fn offsets_retention_is_read_in_minutes() {
        let mut c = DynamicConfigs::default();
        c.alter(
            ConfigEntity::Cluster,
            set(&[(OFFSETS_RETENTION_MINUTES, "2")]),
            vec![],
        )
        .unwrap();
        assert_eq!(c.offsets_retention_ms(), 120_000);
        assert_eq!(c.version(), 1);
    }
}
