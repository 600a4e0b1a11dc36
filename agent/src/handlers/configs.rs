//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics.
//!
//! Topic configs live in the metastore, stored as given and described as
//! stored; the keys floe acts on are checked, parsed and defaulted by
//! [`TopicConfig`].

use std::collections::BTreeMap;

use floe_metastore::TopicConfig;
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse as AlterResult;
use floe_protocol::kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use floe_protocol::kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse as IncrementalResult;
use floe_protocol::kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};

use super::str_bytes;
use crate::broker::{Broker, kafka_error};

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
/// `config_source` values.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const DEFAULT_CONFIG: i8 = 5;

/// Refuses values floe would not be able to act on (as Kafka refuses them).
pub fn validate(configs: &BTreeMap<String, String>) -> Result<(), (ResponseError, String)> {
    TopicConfig::parse(configs)
        .map(drop)
        .map_err(|why| (ResponseError::InvalidConfig, why))
}

pub async fn describe(broker: &Broker, req: DescribeConfigsRequest) -> DescribeConfigsResponse {
    let mut results = Vec::with_capacity(req.resources.len());
    for resource in req.resources {
        let result = DescribeConfigsResult::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        results.push(match resource.resource_type {
            TOPIC => match broker.meta.topic(&resource.resource_name).await {
                Ok(Some(topic)) => {
                    let wanted = resource
                        .configuration_keys
                        .map(|keys| keys.iter().map(|k| k.to_string()).collect::<Vec<_>>());
                    let mut entries: BTreeMap<String, (String, i8)> =
                        TopicConfig::defaults(broker.config.message_max_bytes.as_u64())
                            .into_iter()
                            .map(|(k, v)| (k.to_string(), (v, DEFAULT_CONFIG)))
                            .collect();
                    for (k, v) in &topic.configs {
                        entries.insert(k.clone(), (v.clone(), DYNAMIC_TOPIC_CONFIG));
                    }
                    let configs = entries
                        .into_iter()
                        .filter(|(k, _)| wanted.as_ref().is_none_or(|w| w.contains(k)))
                        .map(|(name, (value, source))| {
                            DescribeConfigsResourceResult::default()
                                .with_name(str_bytes(&name))
                                .with_value(Some(str_bytes(&value)))
                                .with_config_source(source)
                        })
                        .collect();
                    result.with_configs(configs)
                }
                Ok(None) => result.with_error_code(ResponseError::UnknownTopicOrPartition.code()),
                Err(e) => result.with_error_code(kafka_error(&e).code()),
            },
            // Agents have no per-broker configs to show.
            BROKER => result,
            _ => result.with_error_code(ResponseError::InvalidRequest.code()),
        });
    }
    DescribeConfigsResponse::default().with_results(results)
}

/// The topic whose configs a request alters, or the error to answer.
async fn topic_to_alter(
    broker: &Broker,
    name: &str,
) -> Result<floe_metastore::TopicInfo, (ResponseError, String)> {
    broker
        .meta
        .topic(name)
        .await
        .map_err(|e| (kafka_error(&e), e.to_string()))?
        .ok_or((
            ResponseError::UnknownTopicOrPartition,
            format!("no topic `{name}`"),
        ))
}

/// Applies one resource's change; `replace` drops keys not in `set` (AlterConfigs).
async fn alter(
    broker: &Broker,
    resource_type: i8,
    name: &str,
    set: BTreeMap<String, String>,
    mut delete: Vec<String>,
    replace: bool,
    validate_only: bool,
) -> Result<(), (ResponseError, String)> {
    if resource_type != TOPIC {
        return Err((
            ResponseError::InvalidRequest,
            "only topic configs can be altered".into(),
        ));
    }
    validate(&set)?;
    let topic = topic_to_alter(broker, name).await?;
    if replace {
        delete.extend(
            topic
                .configs
                .keys()
                .filter(|k| !set.contains_key(*k))
                .cloned(),
        );
    }
    if validate_only {
        return Ok(());
    }
    broker
        .meta
        .alter_topic_configs(name, set, delete)
        .await
        .map_err(|e| (kafka_error(&e), e.to_string()))
}

pub async fn alter_configs(broker: &Broker, req: AlterConfigsRequest) -> AlterConfigsResponse {
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let set = r
            .configs
            .iter()
            .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
            .collect();
        let result = alter(
            broker,
            r.resource_type,
            &r.resource_name,
            set,
            Vec::new(),
            true,
            req.validate_only,
        )
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

/// Kafka's list-valued topic configs, which APPEND and SUBTRACT change.
const LIST_CONFIGS: &[&str] = &[
    floe_metastore::topic_config::CLEANUP_POLICY,
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
];

/// IncrementalAlterConfigs' operations (0 SET, 1 DELETE, 2 APPEND, 3
/// SUBTRACT) as the keys to set and to delete. APPEND and SUBTRACT start
/// from the topic's value (or the key's default) and apply only to lists.
async fn incremental_changes(
    broker: &Broker,
    resource_type: i8,
    name: &str,
    configs: &[floe_protocol::kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig],
) -> Result<(BTreeMap<String, String>, Vec<String>), (ResponseError, String)> {
    let mut set = BTreeMap::new();
    let mut delete = Vec::new();
    let mut current: Option<BTreeMap<String, String>> = None;
    for c in configs {
        let key = c.name.to_string();
        let value = c.value.as_ref().map(|v| v.to_string());
        match (c.config_operation, value) {
            (0, Some(value)) => {
                set.insert(key, value);
            }
            (1, _) => delete.push(key),
            (op @ (2 | 3), Some(value)) => {
                if !LIST_CONFIGS.contains(&key.as_str()) {
                    return Err((
                        ResponseError::InvalidConfig,
                        format!("Config value append is not allowed for config key: {key}"),
                    ));
                }
                if current.is_none() && resource_type == TOPIC {
                    current = Some(topic_to_alter(broker, name).await?.configs);
                }
                let was = set
                    .get(&key)
                    .cloned()
                    .or_else(|| current.as_ref()?.get(&key).cloned())
                    .unwrap_or_else(|| {
                        if key == floe_metastore::topic_config::CLEANUP_POLICY {
                            "delete".into()
                        } else {
                            String::new()
                        }
                    });
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
                    format!("operation {op} on {key} needs a value it does not have"),
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
        let result = match incremental_changes(
            broker,
            r.resource_type,
            &r.resource_name,
            &r.configs,
        )
        .await
        {
            Ok((set, delete)) => {
                alter(
                    broker,
                    r.resource_type,
                    &r.resource_name,
                    set,
                    delete,
                    false,
                    req.validate_only,
                )
                .await
            }
            Err(refused) => Err(refused),
        };
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
