//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics,
//! the broker and groups.
//!
//! - Topic configs live with their topic in the metastore, stored as given;
//!   the keys floe acts on are checked, parsed and defaulted by
//!   [`TopicConfig`] ([`topic`] describes every key Kafka defines).
//! - The broker resource: a broker id describes the agent's configs under
//!   Kafka's names ([`broker`]); the default entity (an empty name, Kafka's
//!   `--entity-default`) holds the cluster's dynamic configs, kept in the
//!   metastore and shared by every agent. Agents have no per-broker dynamic
//!   configs: altering one is refused, and the default entity is where a
//!   change goes.
//! - Groups (KIP-848): a consumer group's session timeout and heartbeat
//!   interval ([`group`]), kept in the metastore.

mod broker;
mod entry;
mod group;
mod topic;

use std::collections::BTreeMap;

use floe_metastore::{ConfigEntity, TopicConfig, dynamic_config};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as AlterResult;
use floe_protocol::kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use floe_protocol::kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig;
use floe_protocol::kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse as IncrementalResult;
use floe_protocol::kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};

use super::str_bytes;
use crate::broker::{Broker, kafka_error};

/// ConfigResource types.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;
const GROUP: i8 = 32;

type Refused = (ResponseError, String);

/// Refuses topic configs floe would not be able to act on (as Kafka refuses them).
pub fn validate(configs: &BTreeMap<String, String>) -> Result<(), Refused> {
    TopicConfig::parse(configs)
        .map(drop)
        .map_err(|why| (ResponseError::InvalidConfig, why))
}

/// What a config resource names.
enum Target {
    Topic(String),
    /// A broker id: this agent.
    ThisBroker,
    /// The metastore's dynamic configs: the cluster's, or a group's.
    Dynamic(ConfigEntity),
}

/// The resource a request names, as Kafka's ConfigHelper and
/// ConfigAdminManager read names (their errors and messages).
fn target(broker: &Broker, kind: i8, name: &str, altering: bool) -> Result<Target, Refused> {
    let invalid = |why: String| Err((ResponseError::InvalidRequest, why));
    match kind {
        TOPIC => Ok(Target::Topic(name.to_string())),
        BROKER if name.is_empty() => Ok(Target::Dynamic(ConfigEntity::Cluster)),
        BROKER => this_broker(broker.config.node_id, name, altering),
        GROUP if name.is_empty() => invalid(match altering {
            true => "Default group resources are not allowed.".into(),
            false => "Group name must not be empty".into(),
        }),
        GROUP => Ok(Target::Dynamic(ConfigEntity::Group(name.to_string()))),
        BROKER_LOGGER => invalid(
            "floe has no broker loggers to configure: an agent's log levels are set with RUST_LOG"
                .into(),
        ),
        other => invalid(format!("unknown config resource type {other}")),
    }
}

/// A broker resource named by id: this agent's, to describe only.
fn this_broker(me: i32, name: &str, altering: bool) -> Result<Target, Refused> {
    let invalid = |why: String| Err((ResponseError::InvalidRequest, why));
    match name.parse::<i32>() {
        Err(_) => invalid(format!("Broker id must be an integer, but it is: {name}")),
        Ok(id) if id != me => invalid(format!(
            "Unexpected broker id, expected {me} or empty string, but received {name}"
        )),
        Ok(_) if altering => invalid(
            "floe's dynamic broker configs are cluster-wide: alter the default entity (an empty broker name; kafka-configs --entity-default)".into(),
        ),
        Ok(_) => Ok(Target::ThisBroker),
    }
}

fn meta_refused(e: floe_metastore::MetaError) -> Refused {
    (kafka_error(&e), e.to_string())
}

async fn entries(broker: &Broker, target: &Target) -> Result<Vec<entry::Entry>, Refused> {
    match target {
        Target::Topic(name) => {
            let topic = topic_of(broker, name).await?;
            let config = &broker.config;
            Ok(topic::entries(&topic, &|key| {
                broker::static_value(config, key)
            }))
        }
        Target::ThisBroker => {
            let dynamic = dynamic_of(broker, &ConfigEntity::Cluster).await?;
            Ok(broker::entries(&broker.config, &dynamic))
        }
        Target::Dynamic(entity) => {
            let set = dynamic_of(broker, entity).await?;
            Ok(match entity {
                ConfigEntity::Cluster => broker::default_entity_entries(&set),
                ConfigEntity::Group(_) => group::entries(&broker.config, &set),
            })
        }
    }
}

pub async fn describe(broker: &Broker, req: DescribeConfigsRequest) -> DescribeConfigsResponse {
    let mut results = Vec::with_capacity(req.resources.len());
    for resource in req.resources {
        let result = DescribeConfigsResult::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        let described = match target(
            broker,
            resource.resource_type,
            &resource.resource_name,
            false,
        ) {
            Ok(target) => entries(broker, &target).await,
            Err(refused) => Err(refused),
        };
        results.push(match described {
            Ok(entries) => {
                // Null or empty: every key (as Kafka reads it).
                let wanted: Option<Vec<String>> = resource
                    .configuration_keys
                    .filter(|keys| !keys.is_empty())
                    .map(|keys| keys.iter().map(|k| k.to_string()).collect());
                result.with_configs(
                    entries
                        .iter()
                        .filter(|e| wanted.as_ref().is_none_or(|w| w.contains(&e.name)))
                        .map(|e| e.to_wire(req.include_synonyms, req.include_documentation))
                        .collect(),
                )
            }
            Err((e, why)) => result
                .with_error_code(e.code())
                .with_error_message(Some(str_bytes(&why))),
        });
    }
    DescribeConfigsResponse::default().with_results(results)
}

async fn topic_of(broker: &Broker, name: &str) -> Result<floe_metastore::TopicInfo, Refused> {
    broker.meta.topic(name).await.map_err(meta_refused)?.ok_or((
        ResponseError::UnknownTopicOrPartition,
        format!("no topic `{name}`"),
    ))
}

async fn dynamic_of(
    broker: &Broker,
    entity: &ConfigEntity,
) -> Result<BTreeMap<String, String>, Refused> {
    broker
        .meta
        .dynamic_configs_of(entity.clone())
        .await
        .map_err(meta_refused)
}

/// What a resource sets now (what APPEND, SUBTRACT and AlterConfigs'
/// replacement start from).
async fn current(broker: &Broker, target: &Target) -> Result<BTreeMap<String, String>, Refused> {
    match target {
        Target::Topic(name) => Ok(topic_of(broker, name).await?.configs),
        Target::ThisBroker => Ok(BTreeMap::new()),
        Target::Dynamic(entity) => dynamic_of(broker, entity).await,
    }
}

/// Applies one resource's change: `set` and `delete` of its keys.
async fn alter(
    broker: &Broker,
    target: Target,
    set: BTreeMap<String, String>,
    delete: Vec<String>,
    validate_only: bool,
) -> Result<(), Refused> {
    match target {
        Target::Topic(name) => {
            validate(&set)?;
            topic_of(broker, &name).await?;
            if validate_only {
                return Ok(());
            }
            broker
                .meta
                .alter_topic_configs(&name, set, delete)
                .await
                .map_err(meta_refused)
        }
        Target::ThisBroker => unreachable!("`target` refuses to alter a broker id"),
        Target::Dynamic(entity) => {
            // Kafka's answer to a config it reads only at start-up.
            let fixed: Vec<&str> = set
                .keys()
                .chain(&delete)
                .map(String::as_str)
                .filter(|k| broker::is_static(k))
                .collect();
            if matches!(entity, ConfigEntity::Cluster) && !fixed.is_empty() {
                return Err((
                    ResponseError::InvalidRequest,
                    format!(
                        "Cannot update these configs dynamically: Set({})",
                        fixed.join(", ")
                    ),
                ));
            }
            if validate_only {
                let now = dynamic_of(broker, &entity).await?;
                return dynamic_config::altered(&entity, now, set, &delete)
                    .map(drop)
                    .map_err(|why| (ResponseError::InvalidConfig, why));
            }
            broker
                .meta
                .alter_dynamic_configs(entity, set, delete)
                .await
                .map_err(meta_refused)
        }
    }
}

pub async fn alter_configs(broker: &Broker, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let set: BTreeMap<String, String> = r
            .configs
            .iter()
            .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
            .collect();
        let result = async {
            let target = target(broker, r.resource_type, &r.resource_name, true)?;
            // AlterConfigs replaces: every key not given is deleted.
            let delete = current(broker, &target)
                .await?
                .into_keys()
                .filter(|k| !set.contains_key(k))
                .collect();
            alter(broker, target, set, delete, req.validate_only).await
        }
        .await;
        let response = AlterResult::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name);
        responses.push(match result {
            Ok(()) => response,
            Err((e, why)) => response
                .with_error_code(e.code())
                .with_error_message(Some(str_bytes(&why))),
        });
    }
    AlterConfigsResponse::default().with_responses(responses)
}

/// Kafka's list-valued configs, which APPEND and SUBTRACT change, with the
/// default they start from when not set.
const LIST_CONFIGS: &[(&str, &str)] = &[
    (floe_metastore::topic_config::CLEANUP_POLICY, "delete"),
    ("log.cleanup.policy", "delete"),
    ("follower.replication.throttled.replicas", ""),
    ("leader.replication.throttled.replicas", ""),
];

/// IncrementalAlterConfigs' operations (0 SET, 1 DELETE, 2 APPEND, 3
/// SUBTRACT) as the keys to set and to delete. APPEND and SUBTRACT start
/// from the resource's value (or the key's default) and apply only to lists.
async fn incremental_changes(
    broker: &Broker,
    target: &Target,
    configs: &[AlterableConfig],
) -> Result<(BTreeMap<String, String>, Vec<String>), Refused> {
    let mut set = BTreeMap::new();
    let mut delete = Vec::new();
    let mut now: Option<BTreeMap<String, String>> = None;
    for c in configs {
        let key = c.name.to_string();
        let value = c.value.as_ref().map(|v| v.to_string());
        match (c.config_operation, value) {
            (0, Some(value)) => {
                set.insert(key, value);
            }
            (1, _) => delete.push(key),
            (op @ (2 | 3), Some(value)) => {
                let Some((_, default)) = LIST_CONFIGS.iter().find(|(k, _)| *k == key) else {
                    return Err((
                        ResponseError::InvalidConfig,
                        format!("Config value append is not allowed for config key: {key}"),
                    ));
                };
                if now.is_none() {
                    now = Some(current(broker, target).await?);
                }
                let was = set
                    .get(&key)
                    .cloned()
                    .or_else(|| now.as_ref()?.get(&key).cloned())
                    .unwrap_or_else(|| default.to_string());
                let mut items: Vec<String> = was
                    .split(',')
                    .map(str::trim)
                    .filter(|i| !i.is_empty())
                    .map(str::to_string)
                    .collect();
                for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                    if op == 2 {
                        if !items.iter().any(|i| i == item) {
                            items.push(item.to_string());
                        }
                    } else {
                        items.retain(|i| i != item);
                    }
                }
                set.insert(key, items.join(","));
            }
            (op, _) => {
                return Err((
                    ResponseError::InvalidRequest,
                    format!("Null value not supported for : {key} (operation {op})"),
                ));
            }
        }
    }
    Ok((set, delete))
}

pub async fn incremental_alter_configs(
    broker: &Broker,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let result = async {
            let target = target(broker, r.resource_type, &r.resource_name, true)?;
            let (set, delete) = incremental_changes(broker, &target, &r.configs).await?;
            alter(broker, target, set, delete, req.validate_only).await
        }
        .await;
        let response = IncrementalResult::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name);
        responses.push(match result {
            Ok(()) => response,
            Err((e, why)) => response
                .with_error_code(e.code())
                .with_error_message(Some(str_bytes(&why))),
        });
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's answers for a broker id that is not this agent's (its
    /// admin clients send a broker's configs to that broker, so only a
    /// hand-built request gets here).
    #[test]
    fn a_broker_id_names_this_agent_only() {
        let refusal = |r: Result<Target, Refused>| r.err();
        assert!(matches!(this_broker(3, "3", false), Ok(Target::ThisBroker)));
        assert_eq!(
            refusal(this_broker(3, "4", false)),
            Some((
                ResponseError::InvalidRequest,
                "Unexpected broker id, expected 3 or empty string, but received 4".into()
            ))
        );
        assert_eq!(
            refusal(this_broker(3, "x", false)),
            Some((
                ResponseError::InvalidRequest,
                "Broker id must be an integer, but it is: x".into()
            ))
        );
        assert!(matches!(
            this_broker(3, "3", true),
            Err((ResponseError::InvalidRequest, _))
        ));
    }
}
