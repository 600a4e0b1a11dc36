//! ConsumerGroupHeartbeat and ConsumerGroupDescribe: the consumer group
//! protocol of Kafka 4 (KIP-848), where the broker assigns partitions. The
//! agent checks what Kafka checks before the coordinator (the request's
//! shape, INVALID_REQUEST with Kafka's messages); the metastore decides the
//! rest (`floe_metastore::groups::consumer`).

use floe_metastore::ConsumerHeartbeat;
use floe_metastore::groups::assign;
use floe_metastore::groups::{JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::consumer_group_describe_response::{
    self as describe_response, DescribedGroup,
};
use floe_protocol::kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment, TopicPartitions,
};
use floe_protocol::kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, TopicName,
};
use floe_protocol::kafka_protocol::protocol::StrBytes;

use super::{answer, meta_error};
use crate::broker::Broker;
use floe_protocol::str_bytes;

/// Topics one member may subscribe to by name.
const MAX_SUBSCRIBED_TOPICS: usize = 10_000;
/// How long a heartbeat may take to be answered: past it the member is told
/// to try again rather than have this one land late (after a newer one of
/// its own, from a new connection, said what it owns now).
const HEARTBEAT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

fn blank(s: &Option<StrBytes>) -> bool {
    s.as_ref().is_some_and(|s| s.trim().is_empty())
}

/// Kafka's `throwIfConsumerGroupHeartbeatRequestIsInvalid`: the message of
/// an INVALID_REQUEST, if the request is one.
fn invalid(req: &ConsumerGroupHeartbeatRequest, version: i16) -> Option<&'static str> {
    let epoch = req.member_epoch;
    if req.group_id.0.trim().is_empty() {
        return Some("GroupId can't be empty.");
    }
    if req.member_id.trim().is_empty() && (version >= 1 || epoch > 0 || epoch == LEAVE_EPOCH) {
        return Some("MemberId can't be empty.");
    }
    if blank(&req.instance_id) {
        return Some("InstanceId can't be empty.");
    }
    if blank(&req.rack_id) {
        return Some("RackId can't be empty.");
    }
    if req
        .subscribed_topic_names
        .as_ref()
        .is_some_and(|names| names.len() > MAX_SUBSCRIBED_TOPICS)
    {
        return Some("SubscribedTopicNames names more topics than this broker takes.");
    }
    if req.rebalance_timeout_ms < -1 {
        return Some("RebalanceTimeoutMs is invalid.");
    }
    if epoch == JOIN_EPOCH {
        if req.rebalance_timeout_ms == -1 {
            return Some("RebalanceTimeoutMs must be provided in first request.");
        }
        if req.topic_partitions.as_ref().is_none_or(|t| !t.is_empty()) {
            return Some("TopicPartitions must be empty when (re-)joining.");
        }
        if req.subscribed_topic_names.is_none() && req.subscribed_topic_regex.is_none() {
            return Some(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
            );
        }
    } else if epoch == STATIC_LEAVE_EPOCH {
        if req.instance_id.is_none() {
            return Some("InstanceId can't be null.");
        }
    } else if epoch < STATIC_LEAVE_EPOCH {
        return Some("MemberEpoch is invalid.");
    }
    None
}

pub async fn heartbeat(
    broker: &Broker,
    req: ConsumerGroupHeartbeatRequest,
    version: i16,
    client_id: String,
    session: &crate::security::authorizer::Session,
) -> ConsumerGroupHeartbeatResponse {
    let peer = session.ip;
    let failed = |e: ResponseError, message: Option<&str>| {
        ConsumerGroupHeartbeatResponse::default()
            .with_error_code(e.code())
            .with_error_message(message.map(str_bytes))
    };
    if let Some(why) = invalid(&req, version) {
        return failed(ResponseError::InvalidRequest, Some(why));
    }
    if let Some(a) = &req.server_assignor
        && !assign::is_known(a)
    {
        return failed(
            ResponseError::UnsupportedAssignor,
            Some("floe's assignors are uniform and range"),
        );
    }
    // v0 lets the broker name a new member; from v1 the client does.
    let member_id = if req.member_id.is_empty() {
        broker.world.new_id().to_string()
    } else {
        req.member_id.to_string()
    };
    let config = &broker.config;
    let beat = ConsumerHeartbeat {
        group: req.group_id.0.to_string(),
        member_id,
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.as_ref().map(|s| s.to_string()),
        rack_id: req.rack_id.as_ref().map(|s| s.to_string()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed_topics: req
            .subscribed_topic_names
            .as_ref()
            .map(|names| names.iter().map(|n| n.0.to_string()).collect()),
        subscribed_regex: req.subscribed_topic_regex.as_ref().map(|r| r.to_string()),
        assignor: req.server_assignor.as_ref().map(|a| a.to_string()),
        owned: req.topic_partitions.as_ref().map(|owned| {
            owned
                .iter()
                .map(|t| (t.topic_id, t.partitions.clone()))
                .collect()
        }),
        client_id,
        client_host: format!("/{peer}"),
        session_timeout_ms: config.consumer_session_timeout.as_millis() as i32,
        heartbeat_interval_ms: config.consumer_heartbeat_interval.as_millis() as i32,
        now_ms: broker.world.now_ms(),
        // A regular expression matches only topics this member may
        // describe (Kafka 4 filters them so).
        describer: broker.authorizer.describer(session),
    };
    let answered = tokio::time::timeout(HEARTBEAT_DEADLINE, broker.meta.consumer_heartbeat(beat));
    let Ok(answered) = answered.await else {
        return failed(ResponseError::CoordinatorNotAvailable, None);
    };
    match answer(answered) {
        Ok(a) => ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(str_bytes(&a.member_id)))
            .with_member_epoch(a.member_epoch)
            .with_heartbeat_interval_ms(a.heartbeat_interval_ms)
            .with_assignment(a.assignment.map(|partitions| {
                Assignment::default().with_topic_partitions(
                    partitions
                        .into_iter()
                        .map(|(topic_id, partitions)| {
                            TopicPartitions::default()
                                .with_topic_id(topic_id)
                                .with_partitions(partitions)
                        })
                        .collect(),
                )
            })),
        Err(e) => failed(e, None),
    }
}

pub async fn describe(
    broker: &Broker,
    req: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let mut groups = Vec::with_capacity(req.group_ids.len());
    for id in req.group_ids {
        let response = DescribedGroup::default().with_group_id(id.clone());
        groups.push(match broker.meta.describe_consumer_group(&id.0).await {
            Ok(Some(g)) => {
                let assignment = |parts: Vec<(uuid::Uuid, String, Vec<i32>)>| {
                    describe_response::Assignment::default().with_topic_partitions(
                        parts
                            .into_iter()
                            .map(|(topic_id, name, partitions)| {
                                describe_response::TopicPartitions::default()
                                    .with_topic_id(topic_id)
                                    .with_topic_name(TopicName(str_bytes(&name)))
                                    .with_partitions(partitions)
                            })
                            .collect(),
                    )
                };
                let members = g
                    .members
                    .into_iter()
                    .map(|m| {
                        describe_response::Member::default()
                            .with_member_id(str_bytes(&m.member_id))
                            .with_instance_id(m.instance_id.as_deref().map(str_bytes))
                            .with_rack_id(m.rack_id.as_deref().map(str_bytes))
                            .with_member_epoch(m.member_epoch)
                            .with_client_id(str_bytes(&m.client_id))
                            .with_client_host(str_bytes(&m.client_host))
                            .with_subscribed_topic_names(
                                m.subscribed_topics
                                    .iter()
                                    .map(|t| TopicName(str_bytes(t)))
                                    .collect(),
                            )
                            .with_subscribed_topic_regex(
                                m.subscribed_regex.as_deref().map(str_bytes),
                            )
                            .with_assignment(assignment(m.assignment))
                            .with_target_assignment(assignment(m.target))
                            // KIP-1099: 0 a classic member, 1 a consumer-protocol one.
                            .with_member_type(if m.classic { 0 } else { 1 })
                    })
                    .collect();
                response
                    .with_group_state(str_bytes(&g.state))
                    .with_group_epoch(g.epoch)
                    .with_assignment_epoch(g.assignment_epoch)
                    .with_assignor_name(str_bytes(&g.assignor))
                    .with_members(members)
            }
            Ok(None) => response
                .with_error_code(ResponseError::GroupIdNotFound.code())
                .with_error_message(Some(str_bytes(&format!("Group {} not found.", id.0)))),
            Err(e) => response.with_error_code(meta_error(e).code()),
        });
    }
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}
