//! CreateTopics and DeleteTopics.

use std::collections::{BTreeMap, HashSet};

use floe_metastore::Refusal;
use floe_metastore::state::{MAX_PARTITIONS, validate_topic_name};
use floe_metastore::{MetaError, NewTopic};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use floe_protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use floe_protocol::kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use floe_protocol::kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use floe_protocol::kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};

use crate::broker::{Broker, kafka_error};
use floe_protocol::str_bytes;

pub async fn create(
    broker: &Broker,
    req: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let mut seen = HashSet::new();
    let duplicates: HashSet<TopicName> = req
        .topics
        .iter()
        .filter(|t| !seen.insert(t.name.clone()))
        .map(|t| t.name.clone())
        .collect();
    let mut results = Vec::with_capacity(req.topics.len());
    for topic in req.topics {
        let name = topic.name.clone();
        let result = if duplicates.contains(&name) {
            Err((
                ResponseError::InvalidRequest,
                "topic named more than once in the request".to_string(),
            ))
        } else {
            create_one(broker, topic, req.validate_only).await
        };
        results.push(match result {
            Ok(info) => CreatableTopicResult::default()
                .with_name(name)
                .with_topic_id(if version >= 7 {
                    info.id
                } else {
                    Default::default()
                })
                .with_num_partitions(info.partitions)
                .with_replication_factor(1)
                .with_configs(Some(Vec::new())),
            Err((error, message)) => {
                tracing::info!(topic = %name.0, ?error, %message, "create topic refused");
                CreatableTopicResult::default()
                    .with_name(name)
                    .with_error_code(error.code())
                    .with_error_message(Some(str_bytes(&message)))
            }
        });
    }
    CreateTopicsResponse::default().with_topics(results)
}

async fn create_one(
    broker: &Broker,
    topic: CreatableTopic,
    validate_only: bool,
) -> Result<floe_metastore::TopicInfo, (ResponseError, String)> {
    let refuse = |e: MetaError| (kafka_error(&e), e.to_string());
    let partitions = match (topic.num_partitions, topic.assignments.len()) {
        (-1, 0) => broker.config.default_partitions,
        (-1, n) => n as i32,
        (n, 0) => n,
        _ => {
            return Err((
                ResponseError::InvalidRequest,
                "give either num_partitions or assignments, not both".into(),
            ));
        }
    };
    if topic.replication_factor == 0 || topic.replication_factor < -1 {
        return Err((
            ResponseError::InvalidReplicationFactor,
            format!(
                "replication factor {} is not valid",
                topic.replication_factor
            ),
        ));
    }
    let mut configs = BTreeMap::new();
    for config in topic.configs {
        if let Some(value) = config.value {
            configs.insert(config.name.to_string(), value.to_string());
        }
    }
    super::configs::validate(&configs)?;
    let new = NewTopic {
        name: topic.name.0.to_string(),
        partitions,
        configs,
    };
    if validate_only {
        validate_topic_name(&new.name).map_err(|r| refuse(r.into()))?;
        if !(1..=MAX_PARTITIONS).contains(&partitions) {
            return Err(refuse(MetaError::Refused(Refusal::InvalidPartitions(
                partitions,
            ))));
        }
        if broker
            .meta
            .topic(&new.name)
            .await
            .map_err(refuse)?
            .is_some()
        {
            return Err(refuse(MetaError::Refused(Refusal::TopicExists(new.name))));
        }
        return Ok(floe_metastore::TopicInfo {
            id: Default::default(),
            name: new.name,
            partitions,
            configs: new.configs,
            inherited: Default::default(),
        });
    }
    let info = broker.meta.create_topic(new).await.map_err(refuse)?;
    tracing::info!(topic = %info.name, partitions = info.partitions, "created topic");
    Ok(info)
}

pub async fn delete(
    broker: &Broker,
    req: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    // v0-5 name topics in `topic_names`; v6 in `topics` (by name or by id).
    let mut wanted: Vec<(Option<String>, uuid::Uuid)> = req
        .topic_names
        .iter()
        .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
        .collect();
    wanted.extend(
        req.topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id)),
    );
    let mut responses = Vec::with_capacity(wanted.len());
    for (name, id) in wanted {
        let name = match name {
            Some(name) => Some(name),
            None => broker
                .meta
                .topic_by_id(id)
                .await
                .ok()
                .flatten()
                .map(|t| t.name),
        };
        let result = match &name {
            Some(name) => broker
                .meta
                .delete_topic(name)
                .await
                .map_err(|e| kafka_error(&e)),
            None => Err(ResponseError::UnknownTopicId),
        };
        let mut response = DeletableTopicResult::default()
            .with_name(name.as_deref().map(|n| TopicName(str_bytes(n))))
            .with_topic_id(if version >= 6 { id } else { Default::default() });
        if let Some(name) = &name {
            broker.topics.invalidate(name);
        }
        match result {
            Ok(()) => tracing::info!(topic = ?name, "deleted topic"),
            Err(e) => response = response.with_error_code(e.code()),
        }
        responses.push(response);
    }
    DeleteTopicsResponse::default().with_responses(responses)
}

/// A CreatePartitions' manual assignments, checked as Kafka's controller
/// checks them: one per new partition, each naming registered agents, none
/// twice, as many replicas as the partitions before (one: the leader). The
/// partitions are created all the same wherever a client is sent: every
/// agent serves every partition.
async fn check_assignments(
    broker: &Broker,
    topic: &str,
    count: i32,
    assignments: &[floe_protocol::kafka_protocol::messages::create_partitions_request::CreatePartitionsAssignment],
) -> Result<(), (ResponseError, String)> {
    let meta_error = |e: MetaError| (kafka_error(&e), e.to_string());
    let Some(info) = broker.meta.topic(topic).await.map_err(meta_error)? else {
        return Err((
            ResponseError::UnknownTopicOrPartition,
            format!("no topic `{topic}`"),
        ));
    };
    if count <= info.partitions {
        // Kafka's own check of the count comes first; the metastore's
        // answer gives its error.
        return Ok(());
    }
    let adding = (count - info.partitions) as usize;
    if assignments.len() != adding {
        return Err((
            ResponseError::InvalidReplicaAssignment,
            format!(
                "Attempted to add {adding} additional partition(s), but only {} assignment(s) were specified.",
                assignments.len()
            ),
        ));
    }
    let agents = super::replicas::agent_ids(broker)
        .await
        .map_err(|e| (e, e.to_string()))?;
    for assignment in assignments {
        if let Some(problem) =
            super::replicas::assignment_problem(&assignment.broker_ids, &agents, true)
        {
            return Err(problem);
        }
        if assignment.broker_ids.len() != 1 {
            return Err((
                ResponseError::InvalidReplicaAssignment,
                format!(
                    "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have 1 replica(s).",
                    assignment.broker_ids.len()
                ),
            ));
        }
    }
    Ok(())
}

pub async fn create_partitions(
    broker: &Broker,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let response = CreatePartitionsTopicResult::default().with_name(t.name.clone());
        if let Some(assignments) = &t.assignments
            && let Err((error, why)) =
                check_assignments(broker, &t.name.0, t.count, assignments).await
        {
            results.push(
                response
                    .with_error_code(error.code())
                    .with_error_message(Some(str_bytes(&why))),
            );
            continue;
        }
        let result = if req.validate_only {
            match broker.meta.topic(&t.name.0).await {
                Ok(Some(info)) if t.count > info.partitions && t.count <= MAX_PARTITIONS => Ok(()),
                Ok(Some(_)) => Err(MetaError::Refused(Refusal::InvalidPartitions(t.count))),
                Ok(None) => Err(MetaError::Refused(Refusal::UnknownTopicOrPartition)),
                Err(e) => Err(e),
            }
        } else {
            broker.meta.create_partitions(&t.name.0, t.count).await
        };
        broker.topics.invalidate(&t.name.0);
        results.push(match result {
            Ok(()) => {
                tracing::info!(topic = %t.name.0, partitions = t.count, "grew topic");
                response
            }
            Err(e) => response
                .with_error_code(kafka_error(&e).code())
                .with_error_message(Some(str_bytes(&e.to_string()))),
        });
    }
    CreatePartitionsResponse::default().with_results(results)
}
