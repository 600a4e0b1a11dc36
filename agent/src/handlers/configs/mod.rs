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
//! - Client metrics subscriptions (KIP-714, [`client_metrics`]), kept in
//!   the metastore and read by every agent's `crate::telemetry`.

mod broker;
mod client_metrics;
mod entry;
mod group;
mod list;
mod topic;

pub use list::list as list_resources;

use std::collections::BTreeMap;

use floe_metastore::dynamic_config::{self, ConfigOp, ConfigTarget};
use floe_metastore::{ConfigEntity, TopicConfig};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as AlterResult;
use floe_protocol::kafka_protocol::messages::describe_configs_response::DescribeConfigsResult;
use floe_protocol::kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig;
use floe_protocol::kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse as IncrementalResult;
use floe_protocol::kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};

use crate::broker::{Broker, kafka_error};
use floe_protocol::str_bytes;

/// One resource's answer to AlterConfigs or IncrementalAlterConfigs (two
/// types with the same fields).
macro_rules! answered {
    ($ty:ty, $resource:expr, $result:expr) => {{
        let response = <$ty>::default()
            .with_resource_type($resource.resource_type)
            .with_resource_name($resource.resource_name);
        match $result {
            Ok(()) => response,
            Err((e, why)) => response
                .with_error_code(e.code())
                .with_error_message(Some(str_bytes(&why))),
        }
    }};
}

/// ConfigResource types.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;
const CLIENT_METRICS: i8 = 16;
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
        BROKER => this_broker(broker.config.node_id, name),
        GROUP if name.is_empty() => invalid(match altering {
            true => "Default group resources are not allowed.".into(),
            false => "Group name must not be empty".into(),
        }),
        GROUP => Ok(Target::Dynamic(ConfigEntity::Group(name.to_string()))),
        CLIENT_METRICS if name.is_empty() => invalid(match altering {
            true => "Subscription name can't be empty".into(),
            false => "Client metrics subscription name must not be empty".into(),
        }),
        CLIENT_METRICS => Ok(Target::Dynamic(ConfigEntity::ClientMetrics(
            name.to_string(),
        ))),
        BROKER_LOGGER => invalid(
            "floe has no broker loggers to configure: an agent's log levels are set with RUST_LOG"
                .into(),
        ),
        other => invalid(format!("unknown config resource type {other}")),
    }
}

/// A broker resource named by id: this agent (see [`per_broker_change`]).
fn this_broker(me: i32, name: &str) -> Result<Target, Refused> {
    let invalid = |why: String| Err((ResponseError::InvalidRequest, why));
    match name.parse::<i32>() {
        Err(_) => invalid(format!("Broker id must be an integer, but it is: {name}")),
        Ok(id) if id != me => invalid(format!(
            "Unexpected broker id, expected {me} or empty string, but received {name}"
        )),
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
                ConfigEntity::Group(_) => {
                    let cluster = dynamic_of(broker, &ConfigEntity::Cluster).await?;
                    group::entries(&broker.config, &set, &cluster)
                }
                ConfigEntity::ClientMetrics(_) => client_metrics::entries(&set),
                // Not a config resource: quotas are described by
                // DescribeClientQuotas (`target` never names one).
                ConfigEntity::ClientQuota(_) => Vec::new(),
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

/// Applies one resource's change. It is checked here first, against the
/// configs as they are now (so a refusal costs the metastore no write, and
/// `validate_only` answers as a change would), then sent as operations that
/// the metastore applies to the configs as they are then, and checks again.
async fn alter(
    broker: &Broker,
    target: Target,
    ops: Vec<ConfigOp>,
    replace: bool,
    validate_only: bool,
) -> Result<(), Refused> {
    let invalid_config = |why: String| (ResponseError::InvalidConfig, why);
    if ops.len() > dynamic_config::MAX_OPS {
        return Err(invalid_config(format!(
            "more than {} config operations in one change",
            dynamic_config::MAX_OPS
        )));
    }
    let mut keys = std::collections::BTreeSet::new();
    if !ops.iter().all(|op| keys.insert(op.key())) {
        return Err((
            ResponseError::InvalidRequest,
            "Error due to duplicate config keys".into(),
        ));
    }
    let target = match target {
        Target::Topic(name) => ConfigTarget::Topic(name),
        Target::Dynamic(entity) => ConfigTarget::Dynamic(entity),
        Target::ThisBroker => return per_broker_change(&ops),
    };
    let now = match &target {
        ConfigTarget::Topic(name) => topic_of(broker, name).await?.configs,
        ConfigTarget::Dynamic(entity) => dynamic_of(broker, entity).await?,
    };
    let result = dynamic_config::apply_ops(&now, &ops, replace).map_err(invalid_config)?;
    match &target {
        ConfigTarget::Topic(_) => {
            dynamic_config::check_topic_change(&result, &ops).map_err(invalid_config)?
        }
        ConfigTarget::Dynamic(entity) => {
            // Kafka's answer to a config it reads only at start-up.
            let fixed: Vec<&str> = ops
                .iter()
                .map(ConfigOp::key)
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
            // Kafka refuses unknown keys and intervals out of range of a
            // subscription as invalid requests, bad `match` items as
            // invalid configs.
            let code = |op: &ConfigOp| match (entity, op.key()) {
                (ConfigEntity::ClientMetrics(_), dynamic_config::CLIENT_METRICS_MATCH) => {
                    ResponseError::InvalidConfig
                }
                (ConfigEntity::ClientMetrics(_), _) => ResponseError::InvalidRequest,
                _ => ResponseError::InvalidConfig,
            };
            for op in &ops {
                if let Some(value) = result.get(op.key()) {
                    dynamic_config::check(entity, op.key(), value)
                        .map_err(|why| (code(op), why))?;
                    // The patterns too, which the metastore leaves to the
                    // agents (see `dynamic_config::match_items`).
                    if let (ConfigEntity::ClientMetrics(_), dynamic_config::CLIENT_METRICS_MATCH) =
                        (entity, op.key())
                    {
                        dynamic_config::parse_match(value)
                            .map_err(|why| (ResponseError::InvalidConfig, why))?;
                    }
                }
            }
            dynamic_config::checked(entity, result)
                .map(drop)
                .map_err(invalid_config)?;
        }
    }
    if validate_only {
        return Ok(());
    }
    // Produce checks batches against the topic's configs as this agent last
    // read them: what this agent changed, its next request sees (other
    // agents see it within their topic cache's 10 s).
    let changed = target.clone();
    broker
        .meta
        .alter_configs(target, ops, replace)
        .await
        .map_err(meta_refused)?;
    match changed {
        ConfigTarget::Topic(name) => broker.topics.invalidate(&name),
        ConfigTarget::Dynamic(_) => broker.topics.clear(),
    }
    Ok(())
}

/// A change to one agent's own configs. floe has none that one agent may
/// hold apart from the others: what Kafka reads at start-up is refused as
/// Kafka refuses it, what the cluster may set applies to every agent (each
/// serves every partition and group) and is set on the default entity, and
/// any other name is unknown, as it is there. Deleting a key is done
/// already (an agent holds none of its own), and a change naming nothing
/// else is accepted, as in Kafka.
fn per_broker_change(ops: &[ConfigOp]) -> Result<(), Refused> {
    let ops: Vec<&ConfigOp> = ops
        .iter()
        .filter(|op| !matches!(op, ConfigOp::Delete(_)))
        .collect();
    let fixed: Vec<&str> = ops
        .iter()
        .map(|op| op.key())
        .filter(|k| broker::is_static(k))
        .collect();
    if !fixed.is_empty() {
        return Err((
            ResponseError::InvalidRequest,
            format!(
                "Cannot update these configs dynamically: Set({})",
                fixed.join(", ")
            ),
        ));
    }
    match ops.first().map(|op| op.key()) {
        None => Ok(()),
        Some(key) if broker::is_cluster_wide(key) => Err((
            ResponseError::InvalidConfig,
            format!(
                "{key} applies to every agent of a floe cluster: set it on the default broker entity (an empty broker name; kafka-configs --entity-default)"
            ),
        )),
        Some(key) => Err((
            ResponseError::InvalidConfig,
            format!("Unknown dynamic broker config name: {key}"),
        )),
    }
}

pub async fn alter_configs(broker: &Broker, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let result = async {
            let target = target(broker, r.resource_type, &r.resource_name, true)?;
            // AlterConfigs replaces the resource's configs with those given.
            let mut ops = Vec::with_capacity(r.configs.len());
            for c in &r.configs {
                let Some(value) = &c.value else {
                    return Err((
                        ResponseError::InvalidRequest,
                        format!("Null value not supported for : {}", c.name),
                    ));
                };
                ops.push(ConfigOp::Set(c.name.to_string(), value.to_string()));
            }
            alter(broker, target, ops, true, req.validate_only).await
        }
        .await;
        responses.push(answered!(AlterResult, r, result));
    }
    AlterConfigsResponse::default().with_responses(responses)
}

/// IncrementalAlterConfigs' operations (0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT).
fn incremental_ops(configs: &[AlterableConfig]) -> Result<Vec<ConfigOp>, Refused> {
    configs
        .iter()
        .map(|c| {
            let key = c.name.to_string();
            let value = c.value.as_ref().map(|v| v.to_string());
            Ok(match (c.config_operation, value) {
                (1, _) => ConfigOp::Delete(key),
                (0, Some(v)) => ConfigOp::Set(key, v),
                (2, Some(v)) => ConfigOp::Append(key, v),
                (3, Some(v)) => ConfigOp::Subtract(key, v),
                (0..=3, None) => {
                    return Err((
                        ResponseError::InvalidRequest,
                        format!("Null value not supported for : {key}"),
                    ));
                }
                (op, _) => {
                    return Err((
                        ResponseError::InvalidRequest,
                        format!("unknown config operation {op} on {key}"),
                    ));
                }
            })
        })
        .collect()
}

pub async fn incremental_alter_configs(
    broker: &Broker,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let result = async {
            let target = target(broker, r.resource_type, &r.resource_name, true)?;
            let ops = incremental_ops(&r.configs)?;
            alter(broker, target, ops, false, req.validate_only).await
        }
        .await;
        responses.push(answered!(IncrementalResult, r, result));
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
        assert!(matches!(this_broker(3, "3"), Ok(Target::ThisBroker)));
        assert_eq!(
            refusal(this_broker(3, "4")),
            Some((
                ResponseError::InvalidRequest,
                "Unexpected broker id, expected 3 or empty string, but received 4".into()
            ))
        );
        assert_eq!(
            refusal(this_broker(3, "x")),
            Some((
                ResponseError::InvalidRequest,
                "Broker id must be an integer, but it is: x".into()
            ))
        );
    }

    /// An agent holds no configs of its own apart from the cluster's.
    #[test]
    fn a_change_to_one_agent_s_configs_is_answered_as_kafka_would() {
        let set = |key: &str| ConfigOp::Set(key.into(), "1".into());
        assert_eq!(per_broker_change(&[]), Ok(()));
        let delete = ConfigOp::Delete("log.retention.ms".into());
        assert_eq!(per_broker_change(&[delete]), Ok(()));
        assert_eq!(
            per_broker_change(&[set("log.retention.ms"), set("max.connections")]),
            Err((
                ResponseError::InvalidRequest,
                "Cannot update these configs dynamically: Set(max.connections)".into()
            ))
        );
        assert!(matches!(
            per_broker_change(&[set("log.retention.ms")]),
            Err((ResponseError::InvalidConfig, why)) if why.contains("default broker entity")
        ));
        assert_eq!(
            per_broker_change(&[set("no.such.config")]),
            Err((
                ResponseError::InvalidConfig,
                "Unknown dynamic broker config name: no.such.config".into()
            ))
        );
    }
}
