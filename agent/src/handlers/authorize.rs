//! Authorization of each request, as Kafka's `KafkaApis` does it, in one
//! place: before a request is handled, the parts its principal may not
//! touch are taken out of it, and after, they are added back to the
//! response with Kafka's error (`TOPIC_AUTHORIZATION_FAILED`,
//! `GROUP_AUTHORIZATION_FAILED`, `CLUSTER_AUTHORIZATION_FAILED`). Lists
//! (Metadata of all topics, ListGroups, OffsetFetch of all offsets) leave
//! out what the principal may not describe. A request naming nothing it
//! may touch is answered without being handled.
//!
//! An API not listed here needs ALTER on the cluster: a new API stays
//! closed until its rules are written.

use floe_metastore::acls::{operation as op, resource as rt};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::*;

use super::str_bytes;
use crate::authorizer::Session;
use crate::broker::Broker;

/// Adds what was taken out of a request back to its response.
pub type Patch = Box<dyn FnOnce(&mut ResponseKind) + Send>;

/// What to do with a request.
pub enum Gate {
    /// Handle it (perhaps narrowed), then apply the patch to the response.
    Handle(RequestKind, Option<Patch>),
    /// Answer this without handling it.
    Answer(ResponseKind),
    /// Close the connection (an API without rules, for a principal not
    /// allowed everything).
    Close,
}

const TOPIC_DENIED: i16 = ResponseError::TopicAuthorizationFailed.code();
const GROUP_DENIED: i16 = ResponseError::GroupAuthorizationFailed.code();
const CLUSTER_DENIED: i16 = ResponseError::ClusterAuthorizationFailed.code();
const TXN_DENIED: i16 = ResponseError::TransactionalIdAuthorizationFailed.code();

/// The operations Metadata reports for a topic when asked (Kafka's).
const TOPIC_OPERATIONS: [i8; 8] = [
    op::READ,
    op::WRITE,
    op::CREATE,
    op::DELETE,
    op::ALTER,
    op::DESCRIBE,
    op::DESCRIBE_CONFIGS,
    op::ALTER_CONFIGS,
];
const CLUSTER_OPERATIONS: [i8; 7] = [
    op::CREATE,
    op::ALTER,
    op::DESCRIBE,
    op::CLUSTER_ACTION,
    op::DESCRIBE_CONFIGS,
    op::ALTER_CONFIGS,
    op::IDEMPOTENT_WRITE,
];
const GROUP_OPERATIONS: [i8; 3] = [op::READ, op::DESCRIBE, op::DELETE];

/// A patch of the response of one kind (`$variant`), given the response.
macro_rules! patch {
    ($variant:ident, |$r:ident| $body:block) => {
        Some(Box::new(move |k: &mut ResponseKind| {
            if let ResponseKind::$variant($r) = k $body
        }) as Patch)
    };
}

/// Decides what of `body` the session may do.
pub async fn gate(broker: &Broker, session: &Session, body: RequestKind, version: i16) -> Gate {
    let authz = broker.authorizer.clone();
    if !authz.enabled() {
        return Gate::Handle(body, None);
    }
    let s = session.clone();
    let topic = |o: i8, name: &str| authz.allows(session, o, rt::TOPIC, name);
    let group = |o: i8, name: &str| authz.allows(session, o, rt::GROUP, name);
    let cluster = |o: i8| authz.allows_cluster(session, o);
    match body {
        // Before and around authentication, and the cluster's shape: open.
        // Client telemetry too: Kafka checks no ACL for it (KIP-714), a
        // client pushes what it is asked.
        RequestKind::ApiVersions(_)
        | RequestKind::SaslHandshake(_)
        | RequestKind::SaslAuthenticate(_)
        | RequestKind::GetTelemetrySubscriptions(_)
        | RequestKind::PushTelemetry(_) => Gate::Handle(body, None),
        RequestKind::DescribeCluster(req) => {
            let with_ops = req.include_cluster_authorized_operations;
            let patch = patch!(DescribeCluster, |r| {
                if with_ops {
                    r.cluster_authorized_operations = authz.operations(
                        &s,
                        rt::CLUSTER,
                        floe_metastore::acls::CLUSTER_NAME,
                        &CLUSTER_OPERATIONS,
                    );
                }
            });
            Gate::Handle(RequestKind::DescribeCluster(req), patch)
        }

        // ---- topics: data ----
        // A transactional produce needs WRITE on its transactional id, or
        // nothing of it is written (`handleProduceRequest`).
        RequestKind::Produce(req)
            if req
                .transactional_id
                .as_ref()
                .is_some_and(|id| !authz.allows(session, op::WRITE, rt::TRANSACTIONAL_ID, id)) =>
        {
            if req.acks == 0 {
                return Gate::Close;
            }
            let topics = req.topic_data.iter().map(|t| {
                let parts = t.partition_data.iter().map(|p| {
                    produce_response::PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_error_code(TXN_DENIED)
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1)
                });
                produce_response::TopicProduceResponse::default()
                    .with_name(t.name.clone())
                    .with_topic_id(t.topic_id)
                    .with_partition_responses(parts.collect())
            });
            Gate::Answer(ResponseKind::Produce(
                ProduceResponse::default().with_responses(topics.collect()),
            ))
        }
        RequestKind::Produce(mut req) => {
            let mut denied = Vec::new();
            req.topic_data.retain(|t| {
                // An unknown topic id (v13, its name left empty) is the
                // handler's to answer.
                let ok = (version >= 13 && t.name.is_empty()) || topic(op::WRITE, &t.name);
                if !ok {
                    denied.push((
                        (t.name.clone(), t.topic_id),
                        t.partition_data.iter().map(|p| p.index).collect::<Vec<_>>(),
                    ));
                }
                ok
            });
            let patch = patch!(Produce, |r| {
                use produce_response::*;
                for ((name, id), parts) in denied {
                    let parts = parts.into_iter().map(|i| {
                        PartitionProduceResponse::default()
                            .with_index(i)
                            .with_error_code(TOPIC_DENIED)
                            .with_base_offset(-1)
                            .with_log_append_time_ms(-1)
                            .with_log_start_offset(-1)
                    });
                    r.responses.push(
                        TopicProduceResponse::default()
                            .with_name(name)
                            .with_topic_id(id)
                            .with_partition_responses(parts.collect()),
                    );
                }
            });
            Gate::Handle(RequestKind::Produce(req), patch)
        }
        RequestKind::Fetch(mut req) => {
            let mut denied = Vec::new();
            let mut kept = Vec::with_capacity(req.topics.len());
            for t in std::mem::take(&mut req.topics) {
                let name = match version >= 13 {
                    true => match name_of(broker, t.topic_id).await {
                        // An unknown id is the handler's to answer.
                        Ok(None) => {
                            kept.push(t);
                            continue;
                        }
                        Ok(Some(name)) => name,
                        // Not known to be allowed: denied.
                        Err(()) => {
                            denied.push(t);
                            continue;
                        }
                    },
                    false => t.topic.to_string(),
                };
                match topic(op::READ, &name) {
                    true => kept.push(t),
                    false => denied.push(t),
                }
            }
            req.topics = kept;
            let patch = patch!(Fetch, |r| {
                use fetch_response::*;
                for t in denied {
                    let parts = t.partitions.iter().map(|p| {
                        PartitionData::default()
                            .with_partition_index(p.partition)
                            .with_error_code(TOPIC_DENIED)
                            .with_high_watermark(-1)
                            .with_last_stable_offset(-1)
                            .with_log_start_offset(-1)
                    });
                    r.responses.push(
                        FetchableTopicResponse::default()
                            .with_topic(t.topic)
                            .with_topic_id(t.topic_id)
                            .with_partitions(parts.collect()),
                    );
                }
            });
            Gate::Handle(RequestKind::Fetch(req), patch)
        }
        RequestKind::ListOffsets(req) => {
            let patch = patch!(ListOffsets, |r| {
                for t in &mut r.topics {
                    if !authz.allows(&s, op::DESCRIBE, rt::TOPIC, &t.name) {
                        for p in &mut t.partitions {
                            p.error_code = TOPIC_DENIED;
                            p.offset = -1;
                            p.timestamp = -1;
                        }
                    }
                }
            });
            Gate::Handle(RequestKind::ListOffsets(req), patch)
        }
        RequestKind::OffsetForLeaderEpoch(req) => {
            let patch = patch!(OffsetForLeaderEpoch, |r| {
                for t in &mut r.topics {
                    if !authz.allows(&s, op::DESCRIBE, rt::TOPIC, &t.topic) {
                        for p in &mut t.partitions {
                            p.error_code = TOPIC_DENIED;
                            p.end_offset = -1;
                            p.leader_epoch = -1;
                        }
                    }
                }
            });
            Gate::Handle(RequestKind::OffsetForLeaderEpoch(req), patch)
        }
        RequestKind::DescribeProducers(req) => {
            let patch = patch!(DescribeProducers, |r| {
                for t in &mut r.topics {
                    if !authz.allows(&s, op::READ, rt::TOPIC, &t.name) {
                        for p in &mut t.partitions {
                            p.error_code = TOPIC_DENIED;
                            p.active_producers.clear();
                        }
                    }
                }
            });
            Gate::Handle(RequestKind::DescribeProducers(req), patch)
        }

        // ---- topics: metadata ----
        RequestKind::Metadata(req) => {
            // Auto-creation is the handler's to decide, topic by topic
            // (`Authorizer::may_create_topic`).
            let listing_all = match &req.topics {
                None => true,
                // v0 asks for all topics with an empty list.
                Some(topics) => version == 0 && topics.is_empty(),
            };
            let named: std::collections::BTreeSet<String> = req
                .topics
                .iter()
                .flatten()
                .filter_map(|t| t.name.as_ref().map(|n| n.to_string()))
                .collect();
            let with_topic_ops = req.include_topic_authorized_operations;
            let with_cluster_ops = req.include_cluster_authorized_operations;
            let patch = patch!(Metadata, |r| {
                r.topics.retain_mut(|t| {
                    let Some(name) = t.name.as_ref().map(|n| n.to_string()) else {
                        return true;
                    };
                    if !authz.allows(&s, op::DESCRIBE, rt::TOPIC, &name) {
                        // Asked by name: told it is not allowed. Asked by
                        // id: not told its name. Listed: unseen.
                        let by_name = named.contains(&name);
                        *t = metadata_response::MetadataResponseTopic::default()
                            .with_name(by_name.then(|| t.name.take()).flatten())
                            .with_topic_id(if by_name {
                                Default::default()
                            } else {
                                t.topic_id
                            })
                            .with_error_code(TOPIC_DENIED);
                        return !listing_all;
                    }
                    if with_topic_ops {
                        t.topic_authorized_operations =
                            authz.operations(&s, rt::TOPIC, &name, &TOPIC_OPERATIONS);
                    }
                    true
                });
                if with_cluster_ops {
                    r.cluster_authorized_operations = authz.operations(
                        &s,
                        rt::CLUSTER,
                        floe_metastore::acls::CLUSTER_NAME,
                        &CLUSTER_OPERATIONS,
                    );
                }
            });
            Gate::Handle(RequestKind::Metadata(req), patch)
        }
        RequestKind::DescribeTopicPartitions(req) => {
            let named: std::collections::BTreeSet<String> =
                req.topics.iter().map(|t| t.name.to_string()).collect();
            let patch = patch!(DescribeTopicPartitions, |r| {
                r.topics.retain_mut(|t| {
                    let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
                    if authz.allows(&s, op::DESCRIBE, rt::TOPIC, &name) {
                        return true;
                    }
                    t.error_code = TOPIC_DENIED;
                    t.partitions.clear();
                    t.topic_id = Default::default();
                    // Asked by name: told; listed: unseen.
                    named.contains(&name)
                });
            });
            Gate::Handle(RequestKind::DescribeTopicPartitions(req), patch)
        }
        RequestKind::CreateTopics(mut req) => {
            let mut denied = Vec::new();
            if !cluster(op::CREATE) {
                req.topics.retain(|t| {
                    let ok = topic(op::CREATE, &t.name);
                    if !ok {
                        denied.push(t.name.clone());
                    }
                    ok
                });
            }
            let patch = patch!(CreateTopics, |r| {
                for name in denied {
                    r.topics.push(
                        create_topics_response::CreatableTopicResult::default()
                            .with_name(name)
                            .with_error_code(TOPIC_DENIED)
                            .with_num_partitions(-1)
                            .with_replication_factor(-1),
                    );
                }
            });
            Gate::Handle(RequestKind::CreateTopics(req), patch)
        }
        RequestKind::DeleteTopics(mut req) => {
            let mut denied_names = Vec::new();
            req.topic_names.retain(|n| {
                let ok = topic(op::DELETE, n);
                if !ok {
                    denied_names.push(n.clone());
                }
                ok
            });
            let mut denied = Vec::new();
            let mut kept = Vec::new();
            for t in std::mem::take(&mut req.topics) {
                let name = match &t.name {
                    Some(n) => Ok(Some(n.to_string())),
                    None => name_of(broker, t.topic_id).await,
                };
                match name {
                    Ok(Some(n)) if !topic(op::DELETE, &n) => denied.push(t),
                    // An unknown id is the handler's to answer.
                    Ok(_) => kept.push(t),
                    Err(()) => denied.push(t),
                }
            }
            req.topics = kept;
            let patch = patch!(DeleteTopics, |r| {
                use delete_topics_response::DeletableTopicResult;
                for name in denied_names {
                    r.responses.push(
                        DeletableTopicResult::default()
                            .with_name(Some(name))
                            .with_error_code(TOPIC_DENIED),
                    );
                }
                for t in denied {
                    r.responses.push(
                        DeletableTopicResult::default()
                            .with_name(t.name)
                            .with_topic_id(t.topic_id)
                            .with_error_code(TOPIC_DENIED),
                    );
                }
            });
            Gate::Handle(RequestKind::DeleteTopics(req), patch)
        }
        RequestKind::CreatePartitions(mut req) => {
            let mut denied = Vec::new();
            req.topics.retain(|t| {
                let ok = topic(op::ALTER, &t.name);
                if !ok {
                    denied.push(t.name.clone());
                }
                ok
            });
            let patch = patch!(CreatePartitions, |r| {
                for name in denied {
                    r.results.push(
                        create_partitions_response::CreatePartitionsTopicResult::default()
                            .with_name(name)
                            .with_error_code(TOPIC_DENIED),
                    );
                }
            });
            Gate::Handle(RequestKind::CreatePartitions(req), patch)
        }
        RequestKind::DeleteRecords(mut req) => {
            let mut denied = Vec::new();
            req.topics.retain(|t| {
                let ok = topic(op::DELETE, &t.name);
                if !ok {
                    denied.push((
                        t.name.clone(),
                        t.partitions
                            .iter()
                            .map(|p| p.partition_index)
                            .collect::<Vec<_>>(),
                    ));
                }
                ok
            });
            let patch = patch!(DeleteRecords, |r| {
                use delete_records_response::*;
                for (name, parts) in denied {
                    let parts = parts.into_iter().map(|i| {
                        DeleteRecordsPartitionResult::default()
                            .with_partition_index(i)
                            .with_low_watermark(-1)
                            .with_error_code(TOPIC_DENIED)
                    });
                    r.topics.push(
                        DeleteRecordsTopicResult::default()
                            .with_name(name)
                            .with_partitions(parts.collect()),
                    );
                }
            });
            Gate::Handle(RequestKind::DeleteRecords(req), patch)
        }

        // ---- configs: topics, or the brokers (the cluster) ----
        RequestKind::DescribeConfigs(mut req) => {
            let mut denied = Vec::new();
            req.resources.retain(|c| {
                let ok = config_allowed(
                    &authz,
                    &s,
                    op::DESCRIBE_CONFIGS,
                    c.resource_type,
                    &c.resource_name,
                );
                if !ok {
                    denied.push((c.resource_type, c.resource_name.clone()));
                }
                ok
            });
            let patch = patch!(DescribeConfigs, |r| {
                for (kind, name) in denied {
                    r.results.push(
                        describe_configs_response::DescribeConfigsResult::default()
                            .with_resource_type(kind)
                            .with_resource_name(name)
                            .with_error_code(config_denied(kind)),
                    );
                }
            });
            Gate::Handle(RequestKind::DescribeConfigs(req), patch)
        }
        RequestKind::AlterConfigs(mut req) => {
            let mut denied = Vec::new();
            req.resources.retain(|c| {
                let ok = config_allowed(
                    &authz,
                    &s,
                    op::ALTER_CONFIGS,
                    c.resource_type,
                    &c.resource_name,
                );
                if !ok {
                    denied.push((c.resource_type, c.resource_name.clone()));
                }
                ok
            });
            let patch = patch!(AlterConfigs, |r| {
                for (kind, name) in denied {
                    r.responses.push(
                        alter_configs_response::AlterConfigsResourceResponse::default()
                            .with_resource_type(kind)
                            .with_resource_name(name)
                            .with_error_code(config_denied(kind)),
                    );
                }
            });
            Gate::Handle(RequestKind::AlterConfigs(req), patch)
        }
        RequestKind::IncrementalAlterConfigs(mut req) => {
            let mut denied = Vec::new();
            req.resources.retain(|c| {
                let ok = config_allowed(
                    &authz,
                    &s,
                    op::ALTER_CONFIGS,
                    c.resource_type,
                    &c.resource_name,
                );
                if !ok {
                    denied.push((c.resource_type, c.resource_name.clone()));
                }
                ok
            });
            let patch = patch!(IncrementalAlterConfigs, |r| {
                for (kind, name) in denied {
                    r.responses.push(
                        incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                            .with_resource_type(kind)
                            .with_resource_name(name)
                            .with_error_code(config_denied(kind)),
                    );
                }
            });
            Gate::Handle(RequestKind::IncrementalAlterConfigs(req), patch)
        }

        // ---- groups ----
        RequestKind::FindCoordinator(req) => {
            let key_type = req.key_type;
            let resource = if key_type == 1 {
                rt::TRANSACTIONAL_ID
            } else {
                rt::GROUP
            };
            let error = if key_type == 1 {
                ResponseError::TransactionalIdAuthorizationFailed.code()
            } else {
                GROUP_DENIED
            };
            let key = req.key.to_string();
            let patch = patch!(FindCoordinator, |r| {
                if version < 4 {
                    if !authz.allows(&s, op::DESCRIBE, resource, &key) {
                        *r = FindCoordinatorResponse::default()
                            .with_error_code(error)
                            .with_node_id((-1).into())
                            .with_port(-1);
                    }
                } else {
                    for c in &mut r.coordinators {
                        if !authz.allows(&s, op::DESCRIBE, resource, &c.key) {
                            c.error_code = error;
                            c.node_id = (-1).into();
                            c.host = Default::default();
                            c.port = -1;
                        }
                    }
                }
            });
            Gate::Handle(RequestKind::FindCoordinator(req), patch)
        }
        RequestKind::JoinGroup(req) => match group(op::READ, &req.group_id) {
            true => Gate::Handle(RequestKind::JoinGroup(req), None),
            false => Gate::Answer(ResponseKind::JoinGroup(
                JoinGroupResponse::default()
                    .with_error_code(GROUP_DENIED)
                    .with_generation_id(-1),
            )),
        },
        RequestKind::SyncGroup(req) => match group(op::READ, &req.group_id) {
            true => Gate::Handle(RequestKind::SyncGroup(req), None),
            false => Gate::Answer(ResponseKind::SyncGroup(
                SyncGroupResponse::default().with_error_code(GROUP_DENIED),
            )),
        },
        RequestKind::Heartbeat(req) => match group(op::READ, &req.group_id) {
            true => Gate::Handle(RequestKind::Heartbeat(req), None),
            false => Gate::Answer(ResponseKind::Heartbeat(
                HeartbeatResponse::default().with_error_code(GROUP_DENIED),
            )),
        },
        RequestKind::LeaveGroup(req) => match group(op::READ, &req.group_id) {
            true => Gate::Handle(RequestKind::LeaveGroup(req), None),
            false => Gate::Answer(ResponseKind::LeaveGroup(
                LeaveGroupResponse::default().with_error_code(GROUP_DENIED),
            )),
        },
        RequestKind::ConsumerGroupHeartbeat(req) => {
            let error = if !group(op::READ, &req.group_id) {
                Some((GROUP_DENIED, "Group authorization failed".to_string()))
            } else {
                let hidden: Vec<String> = req
                    .subscribed_topic_names
                    .iter()
                    .flatten()
                    .filter(|t| !topic(op::DESCRIBE, t))
                    .map(|t| t.to_string())
                    .collect();
                (!hidden.is_empty()).then(|| {
                    (
                        TOPIC_DENIED,
                        format!("Topic authorization failed for topics {hidden:?}"),
                    )
                })
            };
            match error {
                None => Gate::Handle(RequestKind::ConsumerGroupHeartbeat(req), None),
                Some((code, message)) => Gate::Answer(ResponseKind::ConsumerGroupHeartbeat(
                    ConsumerGroupHeartbeatResponse::default()
                        .with_error_code(code)
                        .with_error_message(Some(str_bytes(&message))),
                )),
            }
        }
        RequestKind::OffsetCommit(mut req) => {
            let group_ok = group(op::READ, &req.group_id);
            let mut denied = Vec::new();
            req.topics.retain(|t| {
                let ok = group_ok && topic(op::READ, &t.name);
                if !ok {
                    denied.push((
                        t.name.clone(),
                        t.partitions
                            .iter()
                            .map(|p| p.partition_index)
                            .collect::<Vec<_>>(),
                    ));
                }
                ok
            });
            let error = if group_ok { TOPIC_DENIED } else { GROUP_DENIED };
            let patch = patch!(OffsetCommit, |r| {
                use offset_commit_response::*;
                for (name, parts) in denied {
                    let parts = parts.into_iter().map(|i| {
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(i)
                            .with_error_code(error)
                    });
                    r.topics.push(
                        OffsetCommitResponseTopic::default()
                            .with_name(name)
                            .with_partitions(parts.collect()),
                    );
                }
            });
            match group_ok {
                true => Gate::Handle(RequestKind::OffsetCommit(req), patch),
                false => {
                    let mut response = ResponseKind::OffsetCommit(OffsetCommitResponse::default());
                    if let Some(patch) = patch {
                        patch(&mut response);
                    }
                    Gate::Answer(response)
                }
            }
        }
        RequestKind::OffsetFetch(req) => {
            // Asked for every offset (null topics): v0-7 for the one group,
            // v8+ group by group.
            let listing_all = req.topics.is_none();
            let listing_all_of: std::collections::BTreeSet<String> = req
                .groups
                .iter()
                .filter(|g| g.topics.is_none())
                .map(|g| g.group_id.to_string())
                .collect();
            let group_id = req.group_id.to_string();
            let patch = patch!(OffsetFetch, |r| {
                // v0-7: one group, at the top.
                if version < 8 {
                    if !authz.allows(&s, op::DESCRIBE, rt::GROUP, &group_id) {
                        r.error_code = GROUP_DENIED;
                        r.topics.clear();
                        return;
                    }
                    r.topics.retain_mut(|t| {
                        if authz.allows(&s, op::DESCRIBE, rt::TOPIC, &t.name) {
                            return true;
                        }
                        for p in &mut t.partitions {
                            p.error_code = TOPIC_DENIED;
                            p.committed_offset = -1;
                            p.metadata = None;
                        }
                        !listing_all
                    });
                    return;
                }
                for g in &mut r.groups {
                    if !authz.allows(&s, op::DESCRIBE, rt::GROUP, &g.group_id) {
                        g.error_code = GROUP_DENIED;
                        g.topics.clear();
                        continue;
                    }
                    let listing_all = listing_all_of.contains(g.group_id.as_str());
                    g.topics.retain_mut(|t| {
                        if authz.allows(&s, op::DESCRIBE, rt::TOPIC, &t.name) {
                            return true;
                        }
                        for p in &mut t.partitions {
                            p.error_code = TOPIC_DENIED;
                            p.committed_offset = -1;
                            p.metadata = None;
                        }
                        !listing_all
                    });
                }
            });
            Gate::Handle(RequestKind::OffsetFetch(req), patch)
        }
        RequestKind::DescribeGroups(req) => {
            let with_ops = req.include_authorized_operations;
            let patch = patch!(DescribeGroups, |r| {
                for g in &mut r.groups {
                    if !authz.allows(&s, op::DESCRIBE, rt::GROUP, &g.group_id) {
                        *g = describe_groups_response::DescribedGroup::default()
                            .with_group_id(g.group_id.clone())
                            .with_error_code(GROUP_DENIED);
                    } else if with_ops {
                        g.authorized_operations =
                            authz.operations(&s, rt::GROUP, &g.group_id, &GROUP_OPERATIONS);
                    }
                }
            });
            Gate::Handle(RequestKind::DescribeGroups(req), patch)
        }
        RequestKind::ConsumerGroupDescribe(req) => {
            let with_ops = req.include_authorized_operations;
            let patch = patch!(ConsumerGroupDescribe, |r| {
                for g in &mut r.groups {
                    let topics_hidden = g.members.iter().any(|m| {
                        m.subscribed_topic_names
                            .iter()
                            .chain(m.assignment.topic_partitions.iter().map(|t| &t.topic_name))
                            .chain(
                                m.target_assignment
                                    .topic_partitions
                                    .iter()
                                    .map(|t| &t.topic_name),
                            )
                            .any(|t| !authz.allows(&s, op::DESCRIBE, rt::TOPIC, t))
                    });
                    if !authz.allows(&s, op::DESCRIBE, rt::GROUP, &g.group_id) {
                        *g = consumer_group_describe_response::DescribedGroup::default()
                            .with_group_id(g.group_id.clone())
                            .with_error_code(GROUP_DENIED);
                    } else if topics_hidden {
                        // Kafka's answer when members name topics the
                        // principal may not describe.
                        *g = consumer_group_describe_response::DescribedGroup::default()
                            .with_group_id(g.group_id.clone())
                            .with_error_code(TOPIC_DENIED)
                            .with_error_message(Some(str_bytes(
                                "The group has described topic(s) that the client is not authorized to describe.",
                            )));
                    } else if with_ops {
                        g.authorized_operations =
                            authz.operations(&s, rt::GROUP, &g.group_id, &GROUP_OPERATIONS);
                    }
                }
            });
            Gate::Handle(RequestKind::ConsumerGroupDescribe(req), patch)
        }
        RequestKind::ListGroups(req) => {
            let all = cluster(op::DESCRIBE);
            let patch = patch!(ListGroups, |r| {
                if !all {
                    r.groups
                        .retain(|g| authz.allows(&s, op::DESCRIBE, rt::GROUP, &g.group_id));
                }
            });
            Gate::Handle(RequestKind::ListGroups(req), patch)
        }
        RequestKind::DeleteGroups(mut req) => {
            let mut denied = Vec::new();
            req.groups_names.retain(|g| {
                let ok = group(op::DELETE, g);
                if !ok {
                    denied.push(g.clone());
                }
                ok
            });
            let patch = patch!(DeleteGroups, |r| {
                for g in denied {
                    r.results.push(
                        delete_groups_response::DeletableGroupResult::default()
                            .with_group_id(g)
                            .with_error_code(GROUP_DENIED),
                    );
                }
            });
            Gate::Handle(RequestKind::DeleteGroups(req), patch)
        }
        RequestKind::OffsetDelete(mut req) => {
            if !group(op::DELETE, &req.group_id) {
                return Gate::Answer(ResponseKind::OffsetDelete(
                    OffsetDeleteResponse::default().with_error_code(GROUP_DENIED),
                ));
            }
            let mut denied = Vec::new();
            req.topics.retain(|t| {
                let ok = topic(op::READ, &t.name);
                if !ok {
                    denied.push((
                        t.name.clone(),
                        t.partitions
                            .iter()
                            .map(|p| p.partition_index)
                            .collect::<Vec<_>>(),
                    ));
                }
                ok
            });
            let patch = patch!(OffsetDelete, |r| {
                use offset_delete_response::*;
                for (name, parts) in denied {
                    let parts = parts.into_iter().map(|i| {
                        OffsetDeleteResponsePartition::default()
                            .with_partition_index(i)
                            .with_error_code(TOPIC_DENIED)
                    });
                    r.topics.push(
                        OffsetDeleteResponseTopic::default()
                            .with_name(name)
                            .with_partitions(parts.collect()),
                    );
                }
            });
            Gate::Handle(RequestKind::OffsetDelete(req), patch)
        }

        // ---- producers ----
        RequestKind::InitProducerId(req) => {
            let allowed = match &req.transactional_id {
                Some(id) => authz.allows(session, op::WRITE, rt::TRANSACTIONAL_ID, id),
                // Idempotence: IDEMPOTENT_WRITE on the cluster, or WRITE on
                // some topic (KIP-679).
                None => {
                    cluster(op::IDEMPOTENT_WRITE) || authz.allows_any(session, op::WRITE, rt::TOPIC)
                }
            };
            let error = match req.transactional_id {
                Some(_) => ResponseError::TransactionalIdAuthorizationFailed.code(),
                None => CLUSTER_DENIED,
            };
            match allowed {
                true => Gate::Handle(RequestKind::InitProducerId(req), None),
                false => Gate::Answer(ResponseKind::InitProducerId(
                    InitProducerIdResponse::default()
                        .with_error_code(error)
                        .with_producer_id((-1).into())
                        .with_producer_epoch(-1),
                )),
            }
        }

        // ---- transactions (KafkaApis' checks) ----
        RequestKind::AddPartitionsToTxn(req) => {
            let txn_ok = authz.allows(
                session,
                op::WRITE,
                rt::TRANSACTIONAL_ID,
                &req.v3_and_below_transactional_id,
            );
            let denied_topics: Vec<String> = req
                .v3_and_below_topics
                .iter()
                .filter(|t| !topic(op::WRITE, &t.name))
                .map(|t| t.name.to_string())
                .collect();
            if txn_ok && denied_topics.is_empty() {
                return Gate::Handle(RequestKind::AddPartitionsToTxn(req), None);
            }
            // Nothing is added: the denied get their error, the others
            // OPERATION_NOT_ATTEMPTED.
            let code = |name: &str, _| match (txn_ok, denied_topics.iter().any(|d| d == name)) {
                (false, _) => TXN_DENIED,
                (true, true) => TOPIC_DENIED,
                (true, false) => ResponseError::OperationNotAttempted.code(),
            };
            Gate::Answer(ResponseKind::AddPartitionsToTxn(
                super::txn::add_partitions_answer(&req.v3_and_below_topics, &code),
            ))
        }
        RequestKind::AddOffsetsToTxn(req) => {
            let code = if !authz.allows(
                session,
                op::WRITE,
                rt::TRANSACTIONAL_ID,
                &req.transactional_id,
            ) {
                TXN_DENIED
            } else if !group(op::READ, &req.group_id) {
                GROUP_DENIED
            } else {
                return Gate::Handle(RequestKind::AddOffsetsToTxn(req), None);
            };
            Gate::Answer(ResponseKind::AddOffsetsToTxn(
                AddOffsetsToTxnResponse::default().with_error_code(code),
            ))
        }
        RequestKind::TxnOffsetCommit(mut req) => {
            use txn_offset_commit_response::*;
            let whole = if !authz.allows(
                session,
                op::WRITE,
                rt::TRANSACTIONAL_ID,
                &req.transactional_id,
            ) {
                Some(TXN_DENIED)
            } else if !group(op::READ, &req.group_id) {
                Some(GROUP_DENIED)
            } else {
                None
            };
            let answer = |t: &txn_offset_commit_request::TxnOffsetCommitRequestTopic, code: i16| {
                TxnOffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                TxnOffsetCommitResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(code)
                            })
                            .collect(),
                    )
            };
            if let Some(code) = whole {
                let topics = req.topics.iter().map(|t| answer(t, code)).collect();
                return Gate::Answer(ResponseKind::TxnOffsetCommit(
                    TxnOffsetCommitResponse::default().with_topics(topics),
                ));
            }
            // Partitions of topics it may not read are answered so; the
            // others are committed.
            let (kept, denied): (Vec<_>, Vec<_>) = req
                .topics
                .into_iter()
                .partition(|t| topic(op::READ, &t.name));
            req.topics = kept;
            let denied: Vec<_> = denied.iter().map(|t| answer(t, TOPIC_DENIED)).collect();
            let patch = patch!(TxnOffsetCommit, |r| {
                r.topics.extend(denied);
            });
            Gate::Handle(RequestKind::TxnOffsetCommit(req), patch)
        }
        RequestKind::DescribeTransactions(req) => {
            let patch = patch!(DescribeTransactions, |r| {
                for t in &mut r.transaction_states {
                    if !authz.allows(&s, op::DESCRIBE, rt::TRANSACTIONAL_ID, &t.transactional_id) {
                        *t = describe_transactions_response::TransactionState::default()
                            .with_transactional_id(t.transactional_id.clone())
                            .with_error_code(TXN_DENIED);
                    }
                }
            });
            Gate::Handle(RequestKind::DescribeTransactions(req), patch)
        }
        // Lists only what the principal may describe (`handleListTransactionsRequest`).
        RequestKind::ListTransactions(req) => {
            let patch = patch!(ListTransactions, |r| {
                r.transaction_states.retain(|t| {
                    authz.allows(&s, op::DESCRIBE, rt::TRANSACTIONAL_ID, &t.transactional_id)
                });
            });
            Gate::Handle(RequestKind::ListTransactions(req), patch)
        }
        RequestKind::EndTxn(req) => {
            match authz.allows(
                session,
                op::WRITE,
                rt::TRANSACTIONAL_ID,
                &req.transactional_id,
            ) {
                true => Gate::Handle(RequestKind::EndTxn(req), None),
                false => Gate::Answer(ResponseKind::EndTxn(
                    EndTxnResponse::default()
                        .with_error_code(TXN_DENIED)
                        .with_producer_id((-1).into())
                        .with_producer_epoch(-1),
                )),
            }
        }

        // ---- the cluster ----
        RequestKind::DescribeLogDirs(req) => match cluster(op::DESCRIBE) {
            true => Gate::Handle(RequestKind::DescribeLogDirs(req), None),
            false => Gate::Answer(ResponseKind::DescribeLogDirs(
                DescribeLogDirsResponse::default().with_error_code(CLUSTER_DENIED),
            )),
        },
        RequestKind::DescribeUserScramCredentials(req) => match cluster(op::DESCRIBE) {
            true => Gate::Handle(RequestKind::DescribeUserScramCredentials(req), None),
            false => Gate::Answer(ResponseKind::DescribeUserScramCredentials(
                DescribeUserScramCredentialsResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(Some(str_bytes("Cluster authorization failed"))),
            )),
        },
        RequestKind::AlterUserScramCredentials(req) => match cluster(op::ALTER) {
            true => Gate::Handle(RequestKind::AlterUserScramCredentials(req), None),
            false => {
                use alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
                let users: std::collections::BTreeSet<String> = req
                    .deletions
                    .iter()
                    .map(|d| d.name.to_string())
                    .chain(req.upsertions.iter().map(|u| u.name.to_string()))
                    .collect();
                Gate::Answer(ResponseKind::AlterUserScramCredentials(
                    AlterUserScramCredentialsResponse::default().with_results(
                        users
                            .into_iter()
                            .map(|u| {
                                AlterUserScramCredentialsResult::default()
                                    .with_user(str_bytes(&u))
                                    .with_error_code(CLUSTER_DENIED)
                            })
                            .collect(),
                    ),
                ))
            }
        },
        // Kafka's client quota APIs: DESCRIBE_CONFIGS and ALTER_CONFIGS on
        // the cluster.
        RequestKind::DescribeClientQuotas(req) => match cluster(op::DESCRIBE_CONFIGS) {
            true => Gate::Handle(RequestKind::DescribeClientQuotas(req), None),
            false => Gate::Answer(ResponseKind::DescribeClientQuotas(
                DescribeClientQuotasResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(Some(str_bytes("Cluster authorization failed"))),
            )),
        },
        RequestKind::AlterClientQuotas(req) => match cluster(op::ALTER_CONFIGS) {
            true => Gate::Handle(RequestKind::AlterClientQuotas(req), None),
            false => {
                use alter_client_quotas_response::{EntityData, EntryData};
                let entries = req.entries.iter().map(|e| {
                    EntryData::default()
                        .with_error_code(CLUSTER_DENIED)
                        .with_error_message(Some(str_bytes("Cluster authorization failed")))
                        .with_entity(
                            e.entity
                                .iter()
                                .map(|p| {
                                    EntityData::default()
                                        .with_entity_type(p.entity_type.clone())
                                        .with_entity_name(p.entity_name.clone())
                                })
                                .collect(),
                        )
                });
                Gate::Answer(ResponseKind::AlterClientQuotas(
                    AlterClientQuotasResponse::default().with_entries(entries.collect()),
                ))
            }
        },
        // Kafka's `handleListClientMetricsResources`: DESCRIBE_CONFIGS on
        // the cluster.
        RequestKind::ListConfigResources(req) => match cluster(op::DESCRIBE_CONFIGS) {
            true => Gate::Handle(RequestKind::ListConfigResources(req), None),
            false => Gate::Answer(ResponseKind::ListConfigResources(
                ListConfigResourcesResponse::default().with_error_code(CLUSTER_DENIED),
            )),
        },
        // The replica APIs (see `replicas`): as Kafka's controller, ALTER
        // on the cluster to change, DESCRIBE to list.
        RequestKind::ElectLeaders(req) => match cluster(op::ALTER) {
            true => Gate::Handle(RequestKind::ElectLeaders(req), None),
            false => Gate::Answer(ResponseKind::ElectLeaders(
                ElectLeadersResponse::default().with_error_code(CLUSTER_DENIED),
            )),
        },
        RequestKind::AlterPartitionReassignments(req) => match cluster(op::ALTER) {
            true => Gate::Handle(RequestKind::AlterPartitionReassignments(req), None),
            false => Gate::Answer(ResponseKind::AlterPartitionReassignments(
                AlterPartitionReassignmentsResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(Some(str_bytes("Cluster authorization failed"))),
            )),
        },
        RequestKind::ListPartitionReassignments(req) => match cluster(op::DESCRIBE) {
            true => Gate::Handle(RequestKind::ListPartitionReassignments(req), None),
            false => Gate::Answer(ResponseKind::ListPartitionReassignments(
                ListPartitionReassignmentsResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(Some(str_bytes("Cluster authorization failed"))),
            )),
        },
        RequestKind::AlterReplicaLogDirs(req) => match cluster(op::ALTER) {
            true => Gate::Handle(RequestKind::AlterReplicaLogDirs(req), None),
            false => {
                use alter_replica_log_dirs_response::{
                    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
                };
                let results = req
                    .dirs
                    .iter()
                    .flat_map(|d| &d.topics)
                    .map(|t| {
                        AlterReplicaLogDirTopicResult::default()
                            .with_topic_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|&p| {
                                        AlterReplicaLogDirPartitionResult::default()
                                            .with_partition_index(p)
                                            .with_error_code(CLUSTER_DENIED)
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                Gate::Answer(ResponseKind::AlterReplicaLogDirs(
                    AlterReplicaLogDirsResponse::default().with_results(results),
                ))
            }
        },
        // As Kafka's controller: DESCRIBE on the cluster.
        RequestKind::DescribeQuorum(req) => match cluster(op::DESCRIBE) {
            true => Gate::Handle(RequestKind::DescribeQuorum(req), None),
            false => Gate::Answer(ResponseKind::DescribeQuorum(
                DescribeQuorumResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(Some(str_bytes("Cluster authorization failed"))),
            )),
        },
        RequestKind::DescribeAcls(req) => match cluster(op::DESCRIBE) {
            true => Gate::Handle(RequestKind::DescribeAcls(req), None),
            false => Gate::Answer(ResponseKind::DescribeAcls(
                DescribeAclsResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(Some(str_bytes("Cluster authorization failed"))),
            )),
        },
        RequestKind::CreateAcls(req) => match cluster(op::ALTER) {
            true => Gate::Handle(RequestKind::CreateAcls(req), None),
            false => Gate::Answer(ResponseKind::CreateAcls(
                CreateAclsResponse::default().with_results(
                    req.creations
                        .iter()
                        .map(|_| {
                            create_acls_response::AclCreationResult::default()
                                .with_error_code(CLUSTER_DENIED)
                        })
                        .collect(),
                ),
            )),
        },
        RequestKind::DeleteAcls(req) => match cluster(op::ALTER) {
            true => Gate::Handle(RequestKind::DeleteAcls(req), None),
            false => Gate::Answer(ResponseKind::DeleteAcls(
                DeleteAclsResponse::default().with_filter_results(
                    req.filters
                        .iter()
                        .map(|_| {
                            delete_acls_response::DeleteAclsFilterResult::default()
                                .with_error_code(CLUSTER_DENIED)
                        })
                        .collect(),
                ),
            )),
        },

        // Served, yet without rules here: only for those allowed
        // everything on the cluster (a new API stays closed until its
        // rules are written).
        other => match cluster(op::ALL) {
            true => Gate::Handle(other, None),
            false => {
                tracing::warn!(principal = %session.principal, "closing: a request of an API without ACL rules");
                Gate::Close
            }
        },
    }
}

/// The name of the topic of this id: `Ok(None)` if there is none, `Err`
/// when the metastore cannot say (then the request is not authorized).
async fn name_of(broker: &Broker, id: uuid::Uuid) -> Result<Option<String>, ()> {
    if let Some(info) = broker.topics.get_by_id(id, 0) {
        return Ok(Some(info.name));
    }
    match broker.meta.topic_by_id(id).await {
        Ok(found) => Ok(found.map(|info| info.name)),
        Err(e) => {
            tracing::debug!(error = %e, "authorizing by topic id: the metastore did not answer");
            Err(())
        }
    }
}

/// Configs of a topic need the operation on the topic; of a group, on the
/// group (KIP-848); of a broker (or its loggers), on the cluster.
fn config_allowed(
    authz: &crate::authorizer::Authorizer,
    session: &Session,
    o: i8,
    kind: i8,
    name: &str,
) -> bool {
    match kind {
        TOPIC_CONFIG => authz.allows(session, o, rt::TOPIC, name),
        GROUP_CONFIG => authz.allows(session, o, rt::GROUP, name),
        _ => authz.allows_cluster(session, o),
    }
}

/// The ConfigResource types of a topic and of a group.
const TOPIC_CONFIG: i8 = 2;
const GROUP_CONFIG: i8 = 32;

fn config_denied(kind: i8) -> i16 {
    match kind {
        TOPIC_CONFIG => TOPIC_DENIED,
        GROUP_CONFIG => GROUP_DENIED,
        _ => CLUSTER_DENIED,
    }
}
