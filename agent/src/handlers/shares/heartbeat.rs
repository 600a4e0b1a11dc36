//! ShareGroupHeartbeat and ShareGroupDescribe: a share group's membership,
//! where the metastore assigns partitions (Kafka's simple assignor: several
//! members may share a partition). The agent checks what Kafka checks
//! before its coordinator (INVALID_REQUEST, with Kafka's messages).

use floe_metastore::TopicId;
use floe_metastore::groups::share::{JOIN_EPOCH, LEAVE_EPOCH, ShareHeartbeat};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::share_group_describe_response::{
    self as describe_response, DescribedGroup,
};
use floe_protocol::kafka_protocol::messages::share_group_heartbeat_response::{
    Assignment, TopicPartitions,
};
use floe_protocol::kafka_protocol::messages::{
    ShareGroupDescribeRequest, ShareGroupDescribeResponse, ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse, TopicName,
};
use floe_protocol::str_bytes;

use super::{
    KAFKA_HEARTBEAT_INTERVAL_MS, KAFKA_MAX_SIZE, KAFKA_SESSION_TIMEOUT_MS, member_id_is_valid,
};
use crate::broker::Broker;

/// Topics one member may subscribe to by name, and the longest name
/// (Kafka's topic names are at most 249 characters).
const MAX_SUBSCRIBED_TOPICS: usize = 10_000;
const MAX_TOPIC_NAME_BYTES: usize = 249;
/// How long a heartbeat may take to be answered (as for consumer groups:
/// past it the member retries rather than have this one land late).
const HEARTBEAT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);
/// The one assignor of share groups (Kafka's `group.share.assignors`).
const ASSIGNOR: &str = "simple";

/// Kafka's checks of a ShareGroupHeartbeat (`KafkaApis` and
/// `throwIfShareGroupHeartbeatRequestIsInvalid`): the message of an
/// INVALID_REQUEST, if the request is one.
fn invalid(req: &ShareGroupHeartbeatRequest) -> Option<&'static str> {
    if !member_id_is_valid(&req.member_id) {
        return Some("MemberId can't be empty and is at most 36 characters.");
    }
    if req.group_id.0.trim().is_empty() {
        return Some("GroupId can't be empty.");
    }
    if req.rack_id.as_ref().is_some_and(|r| r.trim().is_empty()) {
        return Some("RackId can't be empty.");
    }
    let topics = req.subscribed_topic_names.as_ref();
    if topics.is_some_and(|t| t.len() > MAX_SUBSCRIBED_TOPICS) {
        return Some("SubscribedTopicNames names more topics than this broker takes.");
    }
    if topics.is_some_and(|t| t.iter().any(|n| n.0.len() > MAX_TOPIC_NAME_BYTES)) {
        return Some("SubscribedTopicNames has a name longer than a topic's.");
    }
    if req.member_epoch == JOIN_EPOCH {
        if topics.is_none_or(|t| t.is_empty()) {
            return Some("SubscribedTopicNames must be set in first request.");
        }
    } else if req.member_epoch < LEAVE_EPOCH {
        return Some("MemberEpoch is invalid.");
    }
    None
}

pub async fn heartbeat(
    broker: &Broker,
    req: ShareGroupHeartbeatRequest,
    client_id: String,
    session: &crate::security::authorizer::Session,
) -> ShareGroupHeartbeatResponse {
    let failed = |e: ResponseError, message: Option<&str>| {
        ShareGroupHeartbeatResponse::default()
            .with_error_code(e.code())
            .with_error_message(message.map(str_bytes))
    };
    if let Some(why) = invalid(&req) {
        return failed(ResponseError::InvalidRequest, Some(why));
    }
    let beat = ShareHeartbeat {
        group: req.group_id.0.to_string(),
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        rack: req.rack_id.as_ref().map(|r| r.to_string()),
        subscribed: req
            .subscribed_topic_names
            .as_ref()
            .map(|names| names.iter().map(|n| n.0.to_string()).collect()),
        client_id,
        client_host: format!("/{}", session.ip),
        session_timeout_ms: KAFKA_SESSION_TIMEOUT_MS,
        heartbeat_interval_ms: KAFKA_HEARTBEAT_INTERVAL_MS,
        max_size: KAFKA_MAX_SIZE,
        now_ms: broker.world.now_ms(),
    };
    let answered = tokio::time::timeout(HEARTBEAT_DEADLINE, broker.meta.share_heartbeat(beat));
    let Ok(answered) = answered.await else {
        return failed(ResponseError::CoordinatorNotAvailable, None);
    };
    let answer = match answered {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => return failed(super::share_error(e), None),
        Err(e) => return failed(super::meta_error(e), None),
    };
    ShareGroupHeartbeatResponse::default()
        .with_member_id(Some(str_bytes(&answer.member_id)))
        .with_member_epoch(answer.member_epoch)
        .with_heartbeat_interval_ms(answer.heartbeat_interval_ms)
        .with_assignment(answer.assignment.map(|partitions| {
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
        }))
}

/// The name of the topic `id`, as far as this agent can tell ("" if gone).
pub async fn topic_name(broker: &Broker, id: TopicId) -> String {
    broker
        .fetch_topic("", Some(id), 0)
        .await
        .map(|t| t.name)
        .unwrap_or_default()
}

pub async fn describe(
    broker: &Broker,
    req: ShareGroupDescribeRequest,
) -> ShareGroupDescribeResponse {
    let mut groups = Vec::with_capacity(req.group_ids.len());
    for id in req.group_ids {
        let response = DescribedGroup::default().with_group_id(id.clone());
        groups.push(match broker.meta.describe_share_group(&id.0).await {
            Ok(Some(g)) => {
                let mut members = Vec::with_capacity(g.members.len());
                for m in g.members {
                    let mut partitions = Vec::with_capacity(m.assignment.len());
                    for (topic_id, assigned) in m.assignment {
                        partitions.push(
                            describe_response::TopicPartitions::default()
                                .with_topic_id(topic_id)
                                .with_topic_name(TopicName(str_bytes(
                                    &topic_name(broker, topic_id).await,
                                )))
                                .with_partitions(assigned),
                        );
                    }
                    members.push(
                        describe_response::Member::default()
                            .with_member_id(str_bytes(&m.member_id))
                            .with_rack_id(m.rack.as_deref().map(str_bytes))
                            .with_member_epoch(m.member_epoch)
                            .with_client_id(str_bytes(&m.client_id))
                            .with_client_host(str_bytes(&m.client_host))
                            .with_subscribed_topic_names(
                                m.subscribed
                                    .iter()
                                    .map(|t| TopicName(str_bytes(t)))
                                    .collect(),
                            )
                            .with_assignment(
                                describe_response::Assignment::default()
                                    .with_topic_partitions(partitions),
                            ),
                    );
                }
                let state = if members.is_empty() {
                    "Empty"
                } else {
                    "Stable"
                };
                response
                    .with_group_state(str_bytes(state))
                    .with_group_epoch(g.epoch)
                    .with_assignment_epoch(g.epoch)
                    .with_assignor_name(str_bytes(ASSIGNOR))
                    .with_members(members)
            }
            Ok(None) => response
                .with_error_code(ResponseError::GroupIdNotFound.code())
                .with_error_message(Some(str_bytes(&format!("Group {} not found.", id.0)))),
            Err(e) => response.with_error_code(super::meta_error(e).code()),
        });
    }
    ShareGroupDescribeResponse::default().with_groups(groups)
}
