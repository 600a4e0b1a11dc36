//! Consumer groups: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup, OffsetCommit and OffsetFetch.
//!
//! Every decision is a command of the metastore's group state machine; this
//! agent only waits. A JoinGroup or SyncGroup answer is due when the group
//! reaches the next phase, which another member's request (on any agent) may
//! cause, so the waiting handler polls the group, and ticks the state machine
//! when a deadline it can see has passed.

use std::time::Duration;

use bytes::Bytes;
use floe_metastore::{
    CommitOffsets, Group, GroupError, GroupHeartbeat, JoinGroup, LeaveGroup, MetaError,
    OffsetToCommit, Phase, SyncGroup, TickGroup,
};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::describe_groups_response::{
    DescribedGroup, DescribedGroupMember,
};
use floe_protocol::kafka_protocol::messages::find_coordinator_response::Coordinator;
use floe_protocol::kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use floe_protocol::kafka_protocol::messages::leave_group_response::MemberResponse;
use floe_protocol::kafka_protocol::messages::list_groups_response::ListedGroup;
use floe_protocol::kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use floe_protocol::kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use floe_protocol::kafka_protocol::messages::{
    BrokerId, DescribeGroupsRequest, DescribeGroupsResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest,
    ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest,
    OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use tokio::time::Instant;

use super::str_bytes;
use crate::broker::{Broker, kafka_error};
use crate::discovery::{self, now_ms};

/// How often a waiting JoinGroup/SyncGroup looks at its group again.
const POLL: Duration = Duration::from_millis(20);
/// Slack past the group's own deadlines before a waiting request gives up.
const SLACK: Duration = Duration::from_secs(5);

fn group_error(e: GroupError) -> ResponseError {
    match e {
        GroupError::UnknownMemberId => ResponseError::UnknownMemberId,
        GroupError::IllegalGeneration => ResponseError::IllegalGeneration,
        GroupError::RebalanceInProgress => ResponseError::RebalanceInProgress,
        GroupError::InconsistentGroupProtocol => ResponseError::InconsistentGroupProtocol,
        GroupError::InvalidSessionTimeout => ResponseError::InvalidSessionTimeout,
    }
}

fn meta_error(e: MetaError) -> ResponseError {
    tracing::warn!(error = %e, "group operation failed in the metastore");
    kafka_error(&e)
}

/// A group operation's answer: the metastore's failure or the group's refusal.
fn answer<T>(result: Result<Result<T, GroupError>, MetaError>) -> Result<T, ResponseError> {
    result.map_err(meta_error)?.map_err(group_error)
}

/// Reads the group, first ticking it if one of its deadlines has passed.
async fn observe(broker: &Broker, group: &str) -> Result<Option<Group>, ResponseError> {
    let mut seen = broker.meta.group(group).await.map_err(meta_error)?;
    if let Some(g) = &seen
        && g.next_deadline_ms().is_some_and(|d| d <= now_ms())
    {
        broker
            .meta
            .tick_group(TickGroup {
                group: group.to_string(),
                now_ms: now_ms(),
            })
            .await
            .map_err(meta_error)?;
        seen = broker.meta.group(group).await.map_err(meta_error)?;
    }
    Ok(seen)
}

pub async fn find_coordinator(
    broker: &Broker,
    req: FindCoordinatorRequest,
    version: i16,
    client_id: &str,
) -> FindCoordinatorResponse {
    // All group state is in the metastore, so any agent can coordinate any
    // group; hashing the key onto the client's visible agents spreads the work.
    let agents = discovery::visible(broker, client_id).await;
    let for_key = |key: &str| &agents[discovery::pick(key, agents.len())];
    if version >= 4 {
        let coordinators = req
            .coordinator_keys
            .into_iter()
            .map(|key| {
                let a = for_key(&key);
                Coordinator::default()
                    .with_key(key)
                    .with_node_id(BrokerId(a.node_id))
                    .with_host(str_bytes(&a.host))
                    .with_port(a.port)
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let a = for_key(&req.key);
    FindCoordinatorResponse::default()
        .with_node_id(BrokerId(a.node_id))
        .with_host(str_bytes(&a.host))
        .with_port(a.port)
}

pub async fn join(
    broker: &Broker,
    req: JoinGroupRequest,
    version: i16,
    client_id: String,
) -> JoinGroupResponse {
    let failed = |e: ResponseError, member: &str| {
        JoinGroupResponse::default()
            .with_error_code(e.code())
            .with_generation_id(-1)
            .with_member_id(str_bytes(member))
    };
    let group = req.group_id.0.to_string();
    let join = |member_id: String| JoinGroup {
        group: group.clone(),
        member_id,
        client_id: client_id.clone(),
        session_timeout_ms: req.session_timeout_ms,
        // v0 has no rebalance timeout; Kafka uses the session timeout.
        rebalance_timeout_ms: if version >= 1 {
            req.rebalance_timeout_ms
        } else {
            req.session_timeout_ms
        },
        protocol_type: req.protocol_type.to_string(),
        protocols: req
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.to_vec()))
            .collect(),
        now_ms: now_ms(),
    };
    let mut member_id = req.member_id.to_string();
    let give_up = Instant::now()
        + Duration::from_millis(req.rebalance_timeout_ms.max(req.session_timeout_ms).max(0) as u64)
        + SLACK;
    let mut must_join = true;
    loop {
        if must_join {
            match answer(broker.meta.join_group(join(member_id.clone())).await) {
                Ok(id) => member_id = id,
                Err(e) => return failed(e, &member_id),
            }
            must_join = false;
        }
        let g = match observe(broker, &group).await {
            Ok(Some(g)) => g,
            Ok(None) => return failed(ResponseError::UnknownMemberId, &member_id),
            Err(e) => return failed(e, &member_id),
        };
        let Some(me) = g.members.get(&member_id) else {
            return failed(ResponseError::UnknownMemberId, &member_id);
        };
        match g.phase {
            Phase::Syncing | Phase::Stable => return joined(&g, &member_id),
            // A new rebalance began while we waited: this request joins it too.
            Phase::Joining { .. } if !me.joined => must_join = true,
            _ => {}
        }
        if Instant::now() >= give_up {
            return failed(ResponseError::RebalanceInProgress, &member_id);
        }
        tokio::time::sleep(POLL).await;
    }
}

fn joined(g: &Group, member_id: &str) -> JoinGroupResponse {
    let leader = g.leader.clone().unwrap_or_default();
    let members = if leader == member_id {
        g.member_metadata()
            .into_iter()
            .map(|(id, metadata)| {
                JoinGroupResponseMember::default()
                    .with_member_id(str_bytes(&id))
                    .with_metadata(Bytes::from(metadata))
            })
            .collect()
    } else {
        Vec::new()
    };
    JoinGroupResponse::default()
        .with_generation_id(g.generation)
        .with_protocol_type(g.protocol_type.as_deref().map(str_bytes))
        .with_protocol_name(g.protocol.as_deref().map(str_bytes))
        .with_leader(str_bytes(&leader))
        .with_member_id(str_bytes(member_id))
        .with_members(members)
}

pub async fn sync(broker: &Broker, req: SyncGroupRequest) -> SyncGroupResponse {
    let failed = |e: ResponseError| SyncGroupResponse::default().with_error_code(e.code());
    let group = req.group_id.0.to_string();
    let member_id = req.member_id.to_string();
    let sync = SyncGroup {
        group: group.clone(),
        generation: req.generation_id,
        member_id: member_id.clone(),
        assignments: req
            .assignments
            .iter()
            .map(|a| (a.member_id.to_string(), a.assignment.to_vec()))
            .collect(),
        now_ms: now_ms(),
    };
    if let Err(e) = answer(broker.meta.sync_group(sync).await) {
        return failed(e);
    }
    let mut give_up = None;
    loop {
        let g = match observe(broker, &group).await {
            Ok(Some(g)) => g,
            Ok(None) => return failed(ResponseError::UnknownMemberId),
            Err(e) => return failed(e),
        };
        let Some(me) = g.members.get(&member_id) else {
            return failed(ResponseError::UnknownMemberId);
        };
        if g.generation != req.generation_id
            || matches!(g.phase, Phase::Joining { .. } | Phase::Empty)
        {
            return failed(ResponseError::RebalanceInProgress);
        }
        if g.phase == Phase::Stable {
            let assignment = g.assignments.get(&member_id).cloned().unwrap_or_default();
            return SyncGroupResponse::default()
                .with_protocol_type(g.protocol_type.as_deref().map(str_bytes))
                .with_protocol_name(g.protocol.as_deref().map(str_bytes))
                .with_assignment(Bytes::from(assignment));
        }
        // Waiting for the leader's assignments.
        let give_up = *give_up.get_or_insert_with(|| {
            Instant::now() + Duration::from_millis(me.rebalance_timeout_ms.max(0) as u64) + SLACK
        });
        if Instant::now() >= give_up {
            return failed(ResponseError::RebalanceInProgress);
        }
        tokio::time::sleep(POLL).await;
    }
}

pub async fn heartbeat(broker: &Broker, req: HeartbeatRequest) -> HeartbeatResponse {
    let beat = GroupHeartbeat {
        group: req.group_id.0.to_string(),
        generation: req.generation_id,
        member_id: req.member_id.to_string(),
        now_ms: now_ms(),
    };
    match answer(broker.meta.group_heartbeat(beat).await) {
        Ok(()) => HeartbeatResponse::default(),
        Err(e) => HeartbeatResponse::default().with_error_code(e.code()),
    }
}

pub async fn leave(broker: &Broker, req: LeaveGroupRequest, version: i16) -> LeaveGroupResponse {
    // v0-2 name one member; v3+ a list.
    let member_ids: Vec<String> = if version >= 3 {
        req.members
            .iter()
            .map(|m| m.member_id.to_string())
            .collect()
    } else {
        vec![req.member_id.to_string()]
    };
    let leave = LeaveGroup {
        group: req.group_id.0.to_string(),
        member_ids: member_ids.clone(),
        now_ms: now_ms(),
    };
    let results = match broker.meta.leave_group(leave).await {
        Ok(results) => results,
        Err(e) => return LeaveGroupResponse::default().with_error_code(meta_error(e).code()),
    };
    if version < 3 {
        let error = results
            .first()
            .copied()
            .unwrap_or(Ok(()))
            .err()
            .map(group_error);
        return LeaveGroupResponse::default().with_error_code(error.map_or(0, |e| e.code()));
    }
    let members = member_ids
        .into_iter()
        .zip(results)
        .map(|(id, result)| {
            MemberResponse::default()
                .with_member_id(str_bytes(&id))
                .with_error_code(result.err().map_or(0, |e| group_error(e).code()))
        })
        .collect();
    LeaveGroupResponse::default().with_members(members)
}

pub async fn commit_offsets(broker: &Broker, req: OffsetCommitRequest) -> OffsetCommitResponse {
    // Partitions of unknown topics, or with metadata over Kafka's
    // offset.metadata.max.bytes, are refused one by one; the rest are
    // committed together.
    let mut offsets = Vec::new();
    let mut refused = std::collections::HashMap::new();
    for topic in &req.topics {
        let partitions = broker
            .meta
            .topic(&topic.name.0)
            .await
            .ok()
            .flatten()
            .map(|t| t.partitions);
        for p in &topic.partitions {
            let metadata_len = p.committed_metadata.as_ref().map_or(0, |m| m.len());
            if !partitions.is_some_and(|n| (0..n).contains(&p.partition_index)) {
                refused.insert(
                    (topic.name.clone(), p.partition_index),
                    ResponseError::UnknownTopicOrPartition,
                );
            } else if metadata_len > floe_metastore::groups::OFFSET_METADATA_MAX_BYTES {
                refused.insert(
                    (topic.name.clone(), p.partition_index),
                    ResponseError::OffsetMetadataTooLarge,
                );
            } else {
                offsets.push(OffsetToCommit {
                    topic: topic.name.0.to_string(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                });
            }
        }
    }
    let commit = CommitOffsets {
        group: req.group_id.0.to_string(),
        generation: req.generation_id_or_member_epoch,
        member_id: req.member_id.to_string(),
        offsets,
        now_ms: now_ms(),
    };
    let result = answer(broker.meta.commit_offsets(commit).await);
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let error = match refused.get(&(t.name.clone(), p.partition_index)) {
                        Some(refusal) => refusal.code(),
                        None => result.err().map_or(0, |e| e.code()),
                    };
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error)
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// `(topic, [(partition, offset, metadata)])` committed by a group, for the
/// topics asked (all committed topics when `None`).
async fn committed(
    broker: &Broker,
    group: &str,
    wanted: Option<Vec<(TopicName, Vec<i32>)>>,
) -> Result<Vec<(TopicName, Vec<(i32, i64, Option<String>)>)>, ResponseError> {
    let g = broker
        .meta
        .group(group)
        .await
        .map_err(meta_error)?
        .unwrap_or_default();
    let wanted = wanted.unwrap_or_else(|| {
        let mut by_topic: std::collections::BTreeMap<String, Vec<i32>> = Default::default();
        for (topic, partition) in g.offsets.keys() {
            by_topic.entry(topic.clone()).or_default().push(*partition);
        }
        by_topic
            .into_iter()
            .map(|(t, ps)| (TopicName(str_bytes(&t)), ps))
            .collect()
    });
    Ok(wanted
        .into_iter()
        .map(|(topic, partitions)| {
            let rows = partitions
                .into_iter()
                .map(|p| match g.offsets.get(&(topic.0.to_string(), p)) {
                    Some(c) => (p, c.offset, c.metadata.clone()),
                    None => (p, -1, None),
                })
                .collect();
            (topic, rows)
        })
        .collect())
}

pub async fn fetch_offsets(
    broker: &Broker,
    req: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    if version >= 8 {
        let mut groups = Vec::with_capacity(req.groups.len());
        for group in req.groups {
            let wanted = group.topics.map(|ts| {
                ts.into_iter()
                    .map(|t| (t.name, t.partition_indexes))
                    .collect()
            });
            let response =
                OffsetFetchResponseGroup::default().with_group_id(group.group_id.clone());
            groups.push(match committed(broker, &group.group_id.0, wanted).await {
                Ok(topics) => response.with_topics(
                    topics
                        .into_iter()
                        .map(|(name, rows)| {
                            OffsetFetchResponseTopics::default()
                                .with_name(name)
                                .with_partitions(
                                    rows.into_iter()
                                        .map(|(p, offset, metadata)| {
                                            OffsetFetchResponsePartitions::default()
                                                .with_partition_index(p)
                                                .with_committed_offset(offset)
                                                .with_metadata(Some(str_bytes(
                                                    metadata.as_deref().unwrap_or(""),
                                                )))
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
                Err(e) => response.with_error_code(e.code()),
            });
        }
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let wanted = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name, t.partition_indexes))
            .collect()
    });
    match committed(broker, &req.group_id.0, wanted).await {
        Ok(topics) => OffsetFetchResponse::default().with_topics(
            topics
                .into_iter()
                .map(|(name, rows)| {
                    OffsetFetchResponseTopic::default()
                        .with_name(name)
                        .with_partitions(
                            rows.into_iter()
                                .map(|(p, offset, metadata)| {
                                    OffsetFetchResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(offset)
                                        .with_metadata(Some(str_bytes(
                                            metadata.as_deref().unwrap_or(""),
                                        )))
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
        Err(e) => OffsetFetchResponse::default().with_error_code(e.code()),
    }
}

/// Kafka's name for a group's state.
fn state_name(g: &Group) -> &'static str {
    match g.phase {
        Phase::Empty => "Empty",
        Phase::Joining { .. } => "PreparingRebalance",
        Phase::Syncing => "CompletingRebalance",
        Phase::Stable => "Stable",
    }
}

pub async fn list(broker: &Broker, req: ListGroupsRequest, version: i16) -> ListGroupsResponse {
    let groups = match broker.meta.groups().await {
        Ok(groups) => groups,
        Err(e) => return ListGroupsResponse::default().with_error_code(meta_error(e).code()),
    };
    let wanted: Vec<String> = req.states_filter.iter().map(|s| s.to_string()).collect();
    let listed = groups
        .iter()
        .filter(|(_, g)| {
            wanted.is_empty() || wanted.iter().any(|w| w.eq_ignore_ascii_case(state_name(g)))
        })
        .map(|(name, g)| {
            let listed = ListedGroup::default()
                .with_group_id(GroupId(str_bytes(name)))
                .with_protocol_type(str_bytes(g.protocol_type.as_deref().unwrap_or("consumer")));
            if version >= 4 {
                listed.with_group_state(str_bytes(state_name(g)))
            } else {
                listed
            }
        })
        .collect();
    ListGroupsResponse::default().with_groups(listed)
}

pub async fn describe(broker: &Broker, req: DescribeGroupsRequest) -> DescribeGroupsResponse {
    let mut described = Vec::with_capacity(req.groups.len());
    for id in req.groups {
        let response = DescribedGroup::default().with_group_id(id.clone());
        described.push(match broker.meta.group(&id.0).await {
            // Kafka describes a group it does not know as Dead, without an error.
            Ok(None) => response.with_group_state(str_bytes("Dead")),
            Ok(Some(g)) => {
                let members = g
                    .member_metadata()
                    .into_iter()
                    .map(|(member_id, metadata)| {
                        let client_id = g
                            .members
                            .get(&member_id)
                            .map(|m| m.client_id.clone())
                            .unwrap_or_default();
                        let assignment = g.assignments.get(&member_id).cloned().unwrap_or_default();
                        DescribedGroupMember::default()
                            .with_member_id(str_bytes(&member_id))
                            .with_client_id(str_bytes(&client_id))
                            .with_member_metadata(Bytes::from(metadata))
                            .with_member_assignment(Bytes::from(assignment))
                    })
                    .collect();
                response
                    .with_group_state(str_bytes(state_name(&g)))
                    .with_protocol_type(str_bytes(g.protocol_type.as_deref().unwrap_or("")))
                    .with_protocol_data(str_bytes(g.protocol.as_deref().unwrap_or("")))
                    .with_members(members)
            }
            Err(e) => response.with_error_code(meta_error(e).code()),
        });
    }
    DescribeGroupsResponse::default().with_groups(described)
}
