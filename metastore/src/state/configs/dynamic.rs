//! The dynamic configs set on the cluster, on groups and on client-metrics
//! and client-quota entities (a part of the state; their keys, checks and
//! operations are the contract's).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::contract::dynamic_config::*;
use crate::contract::share_config::*;
use crate::contract::shares::{AcquireRules, ShareHeartbeat};
use crate::contract::topic_config;

/// Every entity's configs as set, with a version that every change bumps.
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

    /// Applies a change to one entity, all or none (see [`apply_ops`] and
    /// [`checked`]).
    pub fn alter(
        &mut self,
        entity: ConfigEntity,
        ops: &[ConfigOp],
        replace: bool,
    ) -> Result<(), String> {
        let configs = checked(&entity, apply_ops(&self.of(&entity), ops, replace)?)?;
        if let ConfigEntity::Group(_) = entity {
            self.check_share_lock(&configs)?;
        }
        if !configs.is_empty() && !self.entities.contains_key(&entity) {
            let same_kind =
                |e: &&ConfigEntity| std::mem::discriminant(*e) == std::mem::discriminant(&entity);
            let held = self.entities.keys().filter(same_kind).count();
            match entity {
                ConfigEntity::Group(_) if held >= MAX_GROUP_ENTITIES => {
                    return Err(format!(
                        "configs are set on {MAX_GROUP_ENTITIES} groups already"
                    ));
                }
                ConfigEntity::ClientMetrics(_) if held >= MAX_CLIENT_METRICS_ENTITIES => {
                    return Err(format!(
                        "there are {MAX_CLIENT_METRICS_ENTITIES} client metrics subscriptions already"
                    ));
                }
                ConfigEntity::ClientQuota(_)
                    if held >= crate::contract::quotas::MAX_QUOTA_ENTITIES =>
                {
                    return Err(format!(
                        "quotas are set on {} entities already",
                        crate::contract::quotas::MAX_QUOTA_ENTITIES
                    ));
                }
                _ => {}
            }
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

    /// The names of the groups that set configs (at most
    /// [`MAX_GROUP_ENTITIES`]).
    pub fn groups(&self) -> Vec<String> {
        self.entities
            .keys()
            .filter_map(|entity| match entity {
                ConfigEntity::Group(name) => Some(name.clone()),
                _ => None,
            })
            .collect()
    }

    /// Every client metrics subscription's configs, by name.
    pub fn client_metrics(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.entities
            .iter()
            .filter_map(|(entity, configs)| match entity {
                ConfigEntity::ClientMetrics(name) => Some((name.clone(), configs.clone())),
                _ => None,
            })
            .collect()
    }

    /// Every client quota entity's quotas.
    pub fn client_quotas(
        &self,
    ) -> BTreeMap<crate::contract::quotas::QuotaEntity, BTreeMap<String, String>> {
        self.entities
            .iter()
            .filter_map(|(entity, configs)| match entity {
                ConfigEntity::ClientQuota(quota) => Some((quota.clone(), configs.clone())),
                _ => None,
            })
            .collect()
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

    /// `group.consumer.migration.policy` (Kafka's default, bidirectional).
    pub fn migration_policy(&self) -> crate::contract::groups::MigrationPolicy {
        self.entities
            .get(&ConfigEntity::Cluster)
            .and_then(|c| c.get(GROUP_CONSUMER_MIGRATION_POLICY))
            .and_then(|v| crate::contract::groups::MigrationPolicy::parse(v))
            .unwrap_or_default()
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
    fn cluster_int(&self, key: &str) -> Option<i64> {
        self.int(&ConfigEntity::Cluster, key)
    }

    fn group_share(&self, group: &str, key: &str) -> Option<String> {
        self.entities
            .get(&ConfigEntity::Group(group.to_string()))?
            .get(key)
            .cloned()
    }

    /// A share group's rules for acquisitions: the group's `share.*`
    /// configs, else the cluster's `group.share.*`, else what the agent
    /// asked with (Kafka's defaults). The lock stays within the cluster's
    /// `group.share.{min,max}.record.lock.duration.ms`.
    pub fn share_rules(&self, group: &str, asked: AcquireRules) -> AcquireRules {
        let cluster = |key: &str, asked: i64| self.cluster_int(key).unwrap_or(asked);
        let group_int = |key: &str| {
            self.group_share(group, key)
                .and_then(|v| v.trim().parse::<i64>().ok())
        };
        let min_lock = cluster(GROUP_SHARE_MIN_RECORD_LOCK_DURATION_MS, 1_000);
        let max_lock = cluster(GROUP_SHARE_MAX_RECORD_LOCK_DURATION_MS, 3_600_000).max(min_lock);
        let lock_ms = group_int(SHARE_RECORD_LOCK_DURATION_MS)
            .unwrap_or_else(|| cluster(GROUP_SHARE_RECORD_LOCK_DURATION_MS, asked.lock_ms))
            .clamp(min_lock, max_lock);
        AcquireRules {
            delivery_limit: self.share_delivery_limit(asked.delivery_limit),
            max_in_flight: cluster(GROUP_SHARE_PARTITION_MAX_RECORD_LOCKS, asked.max_in_flight),
            lock_ms,
            start_from: self
                .group_share(group, SHARE_AUTO_OFFSET_RESET)
                .and_then(|v| parse_start_from(&v))
                .unwrap_or(asked.start_from),
            read_committed: match self.group_share(group, SHARE_ISOLATION_LEVEL) {
                Some(level) => read_committed(Some(&level)),
                None => asked.read_committed,
            },
        }
    }

    /// A group's `share.record.lock.duration.ms` within the cluster's
    /// `group.share.{min,max}.record.lock.duration.ms`, with Kafka's
    /// message.
    fn check_share_lock(&self, configs: &BTreeMap<String, String>) -> Result<(), String> {
        let Some(lock) = configs
            .get(SHARE_RECORD_LOCK_DURATION_MS)
            .and_then(|v| v.parse::<i64>().ok())
        else {
            return Ok(());
        };
        let bound = |key: &str| {
            self.cluster_int(key)
                .or_else(|| cluster_default(key))
                .unwrap_or_default()
        };
        let (min_key, max_key) = (
            GROUP_SHARE_MIN_RECORD_LOCK_DURATION_MS,
            GROUP_SHARE_MAX_RECORD_LOCK_DURATION_MS,
        );
        if lock < bound(min_key) {
            return Err(format!(
                "{SHARE_RECORD_LOCK_DURATION_MS} must be greater than or equal to {min_key}"
            ));
        }
        if lock > bound(max_key) {
            return Err(format!(
                "{SHARE_RECORD_LOCK_DURATION_MS} must be less than or equal to {max_key}"
            ));
        }
        Ok(())
    }

    /// `group.share.delivery.count.limit`, else what the agent asked with.
    pub fn share_delivery_limit(&self, asked: u16) -> u16 {
        self.cluster_int(GROUP_SHARE_DELIVERY_COUNT_LIMIT)
            .map_or(asked, |v| v.clamp(2, 10) as u16)
    }

    /// A share heartbeat's session timeout, heartbeat interval and group
    /// size limit as the group's and the cluster's configs set them. An
    /// interval left at least the session it would miss is cut to a third
    /// of it, as for consumer groups.
    pub fn share_member_rules(&self, hb: &mut ShareHeartbeat) {
        let int = |group_key: &str, cluster_key: &str, asked: i32| {
            self.group_share(&hb.group, group_key)
                .and_then(|v| v.trim().parse::<i64>().ok())
                .or_else(|| self.cluster_int(cluster_key))
                .map_or(asked, |v| v.clamp(1, i32::MAX as i64) as i32)
        };
        let session = int(
            SHARE_SESSION_TIMEOUT_MS,
            GROUP_SHARE_SESSION_TIMEOUT_MS,
            hb.session_timeout_ms,
        );
        let interval = int(
            SHARE_HEARTBEAT_INTERVAL_MS,
            GROUP_SHARE_HEARTBEAT_INTERVAL_MS,
            hb.heartbeat_interval_ms,
        );
        hb.session_timeout_ms = session;
        hb.heartbeat_interval_ms = match interval < session {
            true => interval,
            false => (session / 3).max(1),
        };
        if let Some(max) = self.cluster_int(GROUP_SHARE_MAX_SIZE) {
            hb.max_size = max.clamp(1, 1_000) as usize;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn set(pairs: &[(&str, &str)]) -> Vec<ConfigOp> {
        pairs
            .iter()
            .map(|(k, v)| ConfigOp::Set(k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused_and_change_nothing() {
        let mut c = DynamicConfigs::default();
        let group = ConfigEntity::Group("g".into());
        let err = c
            .alter(
                ConfigEntity::Cluster,
                &set(&[("dummy.doesntexist", "1")]),
                false,
            )
            .unwrap_err();
        assert!(err.contains("Unknown dynamic broker config"), "{err}");
        for bad in ["0", "x", "-5", "99999999999"] {
            assert!(
                c.alter(
                    ConfigEntity::Cluster,
                    &set(&[(OFFSETS_RETENTION_MINUTES, bad)]),
                    false
                )
                .is_err()
            );
        }
        // One bad value refuses the whole change.
        assert!(
            c.alter(
                group.clone(),
                &set(&[
                    (CONSUMER_SESSION_TIMEOUT_MS, "10000"),
                    (CONSUMER_HEARTBEAT_INTERVAL_MS, "10")
                ]),
                false
            )
            .is_err()
        );
        assert!(
            c.alter(ConfigEntity::Group(String::new()), &set(&[]), false)
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
            &set(&[(CONSUMER_SESSION_TIMEOUT_MS, "12000")]),
            false,
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
                &set(&[(CONSUMER_HEARTBEAT_INTERVAL_MS, "12000")]),
                false
            )
            .is_err()
        );
        c.alter(
            group.clone(),
            &[ConfigOp::Delete(CONSUMER_SESSION_TIMEOUT_MS.into())],
            false,
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
                c.alter(ConfigEntity::Cluster, &set(&[(key, bad)]), false)
                    .is_err(),
                "{key}={bad}"
            );
        }
        c.alter(
            ConfigEntity::Cluster,
            &set(&[
                ("log.retention.ms", "60000"),
                ("log.cleanup.policy", "compact,delete"),
                (OFFSETS_RETENTION_MINUTES, "5"),
            ]),
            false,
        )
        .unwrap();
        assert_eq!(
            c.topic_defaults(),
            map(&[
                ("retention.ms", "60000"),
                ("cleanup.policy", "compact,delete")
            ])
        );
    }

    #[test]
    fn operations_apply_to_the_configs_as_they_are() {
        let mut c = DynamicConfigs::default();
        let cluster = ConfigEntity::Cluster;
        let append = |v: &str| ConfigOp::Append("log.cleanup.policy".into(), v.into());
        c.alter(cluster.clone(), &[append("compact")], false)
            .unwrap();
        // Appending what is there, or padding, changes nothing stored.
        c.alter(cluster.clone(), &[append(" compact ,compact")], false)
            .unwrap();
        c.alter(
            cluster.clone(),
            &set(&[("log.retention.ms", "  5  ")]),
            false,
        )
        .unwrap();
        assert_eq!(
            c.of(&cluster),
            map(&[
                ("log.cleanup.policy", "delete,compact"),
                ("log.retention.ms", "5")
            ])
        );
        let subtract = ConfigOp::Subtract("log.cleanup.policy".into(), "delete".into());
        c.alter(cluster.clone(), &[subtract], false).unwrap();
        assert_eq!(c.of(&cluster)["log.cleanup.policy"], "compact");
        // APPEND is for lists only; a replace keeps only what it sets.
        let err = c
            .alter(
                cluster.clone(),
                &[ConfigOp::Append("log.retention.ms".into(), "1".into())],
                false,
            )
            .unwrap_err();
        assert!(err.contains("append is not allowed"), "{err}");
        c.alter(
            cluster.clone(),
            &set(&[(OFFSETS_RETENTION_MINUTES, "9")]),
            true,
        )
        .unwrap();
        assert_eq!(c.of(&cluster), map(&[(OFFSETS_RETENTION_MINUTES, "9")]));
        // Over the bounds: refused.
        let long = "9".repeat(MAX_CLUSTER_VALUE_BYTES + 1);
        assert!(
            c.alter(
                cluster.clone(),
                &set(&[(OFFSETS_RETENTION_MINUTES, &long)]),
                false
            )
            .is_err()
        );
        let many: Vec<ConfigOp> = (0..=MAX_OPS)
            .map(|n| ConfigOp::Delete(format!("k{n}")))
            .collect();
        assert!(c.alter(cluster.clone(), &many, false).is_err());
        let name = "g".repeat(MAX_GROUP_ID_BYTES + 1);
        assert!(
            c.alter(
                ConfigEntity::Group(name),
                &set(&[(CONSUMER_SESSION_TIMEOUT_MS, "9000")]),
                false
            )
            .is_err()
        );
    }

    #[test]
    fn offsets_retention_is_read_in_minutes() {
        let mut c = DynamicConfigs::default();
        c.alter(
            ConfigEntity::Cluster,
            &set(&[(OFFSETS_RETENTION_MINUTES, "2")]),
            false,
        )
        .unwrap();
        assert_eq!(c.offsets_retention_ms(), 120_000);
        assert_eq!(c.version(), 1);
    }

    /// Subscriptions are checked as Kafka's `ClientMetricsConfigs` checks
    /// them, listed by name, and bounded in number.
    #[test]
    fn client_metrics_subscriptions() {
        let mut c = DynamicConfigs::default();
        let sub = |name: &str| ConfigEntity::ClientMetrics(name.into());
        c.alter(
            sub("producers"),
            &set(&[
                (
                    CLIENT_METRICS_METRICS,
                    "org.apache.kafka.producer., org.apache.kafka.producer.",
                ),
                (CLIENT_METRICS_INTERVAL_MS, "1000"),
                (
                    CLIENT_METRICS_MATCH,
                    "client_id=app-.*,client_software_name=librdkafka",
                ),
            ]),
            false,
        )
        .unwrap();
        let listed = c.client_metrics();
        assert_eq!(listed.len(), 1);
        // Repeats dropped, as every list config.
        assert_eq!(
            listed["producers"][CLIENT_METRICS_METRICS],
            "org.apache.kafka.producer."
        );
        c.alter(
            sub("producers"),
            &[ConfigOp::Append(CLIENT_METRICS_METRICS.into(), "*".into())],
            false,
        )
        .unwrap();
        assert_eq!(
            c.of(&sub("producers"))[CLIENT_METRICS_METRICS],
            "org.apache.kafka.producer.,*"
        );

        for (key, bad) in [
            (CLIENT_METRICS_INTERVAL_MS, "99"),
            (CLIENT_METRICS_INTERVAL_MS, "3600001"),
            (CLIENT_METRICS_MATCH, "client_id"),
            (CLIENT_METRICS_MATCH, "client_id=a=b"),
            (CLIENT_METRICS_MATCH, "user=alice"),
            (CLIENT_METRICS_MATCH, "client_id="),
            ("retention.ms", "1"),
        ] {
            assert!(
                c.alter(sub("s"), &set(&[(key, bad)]), false).is_err(),
                "{key}={bad}"
            );
        }
        assert!(
            c.alter(sub(""), &set(&[(CLIENT_METRICS_METRICS, "*")]), false)
                .is_err()
        );

        // A match is of the whole attribute; a selector given twice keeps
        // its last pattern.
        let matched = parse_match("client_id=x,client_id=app-.*").unwrap();
        assert_eq!(matched.len(), 1);
        assert!(matched[0].1.is_match("app-1"));
        assert!(!matched[0].1.is_match("my-app-1"));
        // Patterns the regex crate does not take are the agents' to refuse
        // (the state does not compile them: see `match_items`).
        for agent_refuses in ["client_id=(unclosed", "client_id=(?!x).*"] {
            assert!(match_items(agent_refuses).is_ok());
            assert!(parse_match(agent_refuses).is_err(), "{agent_refuses}");
        }

        for n in 1..MAX_CLIENT_METRICS_ENTITIES {
            c.alter(
                sub(&format!("s{n}")),
                &set(&[(CLIENT_METRICS_METRICS, "*")]),
                false,
            )
            .unwrap();
        }
        assert!(
            c.alter(
                sub("one-too-many"),
                &set(&[(CLIENT_METRICS_METRICS, "*")]),
                false
            )
            .is_err()
        );
        // Group configs are counted apart.
        c.alter(
            ConfigEntity::Group("g".into()),
            &set(&[(CONSUMER_SESSION_TIMEOUT_MS, "9000")]),
            false,
        )
        .unwrap();
        // Deleting every key removes the subscription.
        c.alter(
            sub("s1"),
            &[ConfigOp::Delete(CLIENT_METRICS_METRICS.into())],
            false,
        )
        .unwrap();
        assert_eq!(c.client_metrics().len(), MAX_CLIENT_METRICS_ENTITIES - 1);
    }
}
