//! JoinGroup, SyncGroup, Heartbeat and LeaveGroup.
//!
//! A JoinGroup's answer is due when the generation forms, and a follower's
//! SyncGroup's when the leader syncs; either may be caused by another
//! member's request on any agent. The waiting request long-polls the
//! metastore ([`AwaitGroup`]), which answers the moment the group changes,
//! so every member waiting is answered together, as by Kafka's coordinator.
//! Deadlines (sessions, rebalance and sync timeouts) are the metastore
//! leader's to enforce; a waiting request gives up only well past them.

use std::time::Duration;

use bytes::Bytes;
use floe_metastore::groups::MAX_GROUP_WAIT_MS;
use floe_metastore::groups::{ClassicAssignment, TopicPartitions};
use floe_metastore::{
    AwaitGroup, GroupHeartbeat, JoinGroup, JoinRules, Joined, LeaveGroup, Leaving, MemberView,
    Phase, SyncGroup,
};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedPartition;
use floe_protocol::kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use floe_protocol::kafka_protocol::messages::leave_group_response::MemberResponse;
use floe_protocol::kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, HeartbeatRequest, HeartbeatResponse,
    JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, SyncGroupRequest,
    SyncGroupResponse, TopicName,
};
use tokio::time::Instant;

use super::{answer, group_error, meta_error};
use crate::broker::Broker;
use floe_protocol::str_bytes;

/// Slack past the group's own deadlines before a waiting request gives up.
const SLACK: Duration = Duration::from_secs(5);

/// Waits for `group` to change from what was `seen`, as `member` sees it.
async fn await_group(
    broker: &Broker,
    group: &str,
    member: &str,
    instance: Option<&str>,
    seen: Option<u64>,
) -> Result<Option<MemberView>, ResponseError> {
    broker
        .meta
        .await_group(AwaitGroup {
            group: group.to_string(),
            member_id: member.to_string(),
            instance_id: instance.map(str::to_string),
            seen,
            wait_ms: MAX_GROUP_WAIT_MS,
        })
        .await
        .map_err(meta_error)
}

/// Why a waiting member is no longer one: a newer member took its
/// `group.instance.id` (fatal to the client, as in Kafka), or it was removed.
fn gone(view: &MemberView) -> ResponseError {
    if view.fenced {
        ResponseError::FencedInstanceId
    } else {
        ResponseError::UnknownMemberId
    }
}

/// A `consumer` member's subscription, read from its metadata (the
/// metastore does not read Kafka's bytes); `None` if unreadable.
fn subscription(protocol_type: &str, metadata: &[u8]) -> Option<ConsumerProtocolSubscription> {
    if protocol_type != "consumer" {
        return None;
    }
    floe_protocol::decode_consumer_protocol(metadata)
}

/// The topics of a `consumer` member's subscription (the metastore keeps
/// them for OffsetDelete, offset expiry and a group's upgrade).
fn subscribed_topics(subscription: &ConsumerProtocolSubscription) -> Vec<String> {
    subscription.topics.iter().map(|t| t.to_string()).collect()
}

/// The partitions a `consumer` member says it owns (v1+ subscriptions; a
/// cooperative member's): what it keeps while it is a classic member of a
/// consumer-protocol group.
fn owned_partitions(subscription: &ConsumerProtocolSubscription) -> TopicPartitions {
    subscription
        .owned_partitions
        .iter()
        .map(|tp| (tp.topic.to_string(), tp.partitions.clone()))
        .collect()
}

/// A leader's assignment read as a ConsumerProtocol assignment: what the
/// member owns if the group is upgraded. An assignor's user data (the
/// sticky assignors put the member's partitions and generation there) is
/// not kept, as Kafka keeps none in a consumer-protocol group.
fn decoded_assignment(assignment: &[u8]) -> Option<TopicPartitions> {
    let decoded: ConsumerProtocolAssignment = floe_protocol::decode_consumer_protocol(assignment)?;
    Some(
        decoded
            .assigned_partitions
            .iter()
            .map(|tp| (tp.topic.to_string(), tp.partitions.clone()))
            .collect(),
    )
}

/// What a consumer-protocol group assigned a classic member, encoded as a
/// ConsumerProtocol assignment at its subscription's version (as Kafka).
fn encode_assignment(assigned: &ClassicAssignment) -> Bytes {
    let version = assigned
        .subscription
        .first_chunk::<2>()
        .map_or(0, |v| i16::from_be_bytes(*v));
    let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(
        assigned
            .partitions
            .iter()
            .map(|(topic, partitions)| {
                AssignedPartition::default()
                    .with_topic(TopicName(str_bytes(topic)))
                    .with_partitions(partitions.clone())
            })
            .collect(),
    );
    floe_protocol::encode_consumer_protocol(&assignment, version)
}

/// The agent's group settings, as a join carries them to the metastore.
fn join_rules(config: &crate::config::Config) -> JoinRules {
    let millis = |d: Duration| d.as_millis().min(i32::MAX as u128) as i32;
    JoinRules {
        min_session_timeout_ms: millis(config.group_min_session_timeout),
        max_session_timeout_ms: millis(config.group_max_session_timeout),
        initial_rebalance_delay_ms: millis(config.group_initial_rebalance_delay),
    }
}

pub async fn join(
    broker: &Broker,
    req: JoinGroupRequest,
    version: i16,
    client_id: String,
    peer: std::net::IpAddr,
) -> JoinGroupResponse {
    let failed = |e: ResponseError, member: &str| {
        JoinGroupResponse::default()
            .with_error_code(e.code())
            .with_generation_id(-1)
            .with_member_id(str_bytes(member))
    };
    let group = req.group_id.0.to_string();
    if group.is_empty() {
        return failed(ResponseError::InvalidGroupId, "");
    }
    let instance = req.group_instance_id.as_ref().map(|i| i.to_string());
    // KIP-800 (v8): why the member joins, for the operator's log as Kafka
    // logs it; it changes nothing.
    if let Some(reason) = req.reason.as_deref().filter(|r| !r.is_empty()) {
        tracing::info!(%group, member = %req.member_id.as_str(), reason, "member joins the group");
    }
    let protocol_type = req.protocol_type.to_string();
    let protocols: Vec<(String, Vec<u8>)> = req
        .protocols
        .iter()
        .map(|p| (p.name.to_string(), p.metadata.to_vec()))
        .collect();
    // The first protocol's subscription, read once for every (re)join.
    let first = protocols
        .first()
        .and_then(|(_, metadata)| subscription(&protocol_type, metadata));
    let rules = join_rules(&broker.config);
    let join = |member_id: String| JoinGroup {
        group: group.clone(),
        member_id,
        instance_id: req.group_instance_id.as_ref().map(|i| i.to_string()),
        client_id: client_id.clone(),
        client_host: format!("/{peer}"),
        session_timeout_ms: req.session_timeout_ms,
        // v0 has no rebalance timeout; Kafka uses the session timeout.
        rebalance_timeout_ms: if version >= 1 {
            req.rebalance_timeout_ms.max(0)
        } else {
            req.session_timeout_ms
        },
        protocol_type: protocol_type.clone(),
        protocols: protocols.clone(),
        subscribed_topics: first.as_ref().map(subscribed_topics),
        owned: first.as_ref().map(owned_partitions),
        require_known_member_id: version >= 4,
        fresh_id: broker.world.new_id().to_string(),
        now_ms: broker.world.now_ms(),
        rules,
    };
    // A first rebalance waits at least the initial delay, however short
    // the rebalance timeout.
    let longest_wait = req
        .rebalance_timeout_ms
        .max(req.session_timeout_ms)
        .max(rules.initial_rebalance_delay_ms)
        .max(0);
    let give_up = Instant::now() + Duration::from_millis(longest_wait as u64) + SLACK;
    let mut member_id = req.member_id.to_string();
    let mut must_join = true;
    let mut seen = None;
    loop {
        if must_join {
            match answer(broker.meta.join_group(join(member_id.clone())).await) {
                Ok(Joined::Member(id)) => member_id = id,
                Ok(Joined::MemberIdRequired(id)) => {
                    return failed(ResponseError::MemberIdRequired, &id);
                }
                // A classic member of a consumer-protocol group: a follower
                // answered at once, its SyncGroup to get the group's choice.
                Ok(Joined::InConsumerGroup {
                    member_id: id,
                    generation,
                    protocol,
                }) => {
                    return JoinGroupResponse::default()
                        .with_generation_id(generation)
                        .with_protocol_type(Some(str_bytes("consumer")))
                        .with_protocol_name(Some(str_bytes(&protocol)))
                        .with_leader(str_bytes(""))
                        .with_member_id(str_bytes(&id));
                }
                Ok(Joined::Replaced {
                    member_id: id,
                    leader,
                }) => {
                    let mut view = match await_group(broker, &group, &id, None, None).await {
                        Ok(Some(view)) => view,
                        Ok(None) => return failed(ResponseError::UnknownMemberId, &id),
                        Err(e) => return failed(e, &id),
                    };
                    // Before v9: the leader named as it was, and no
                    // members, so a returning leader does not assign.
                    if version < 9 {
                        view.members.clear();
                        return joined(&view, &id, Some(&leader), version);
                    }
                    // KIP-814 (v9): a leader is told its members and to
                    // skip the assignment (the group keeps the one it has);
                    // a follower, the leader as it is now. Only while the
                    // group is as the replacement left it; if a rebalance
                    // began since, this member waits for it as any other.
                    if view.phase == Phase::Stable && view.member.is_some() {
                        let skip = view.leader.as_deref() == Some(id.as_str());
                        if !skip {
                            view.members.clear();
                        }
                        return joined(&view, &id, None, version).with_skip_assignment(skip);
                    }
                    member_id = id;
                }
                Err(e) => return failed(e, &member_id),
            }
            must_join = false;
            seen = None;
        }
        let view = match await_group(broker, &group, &member_id, instance.as_deref(), seen).await {
            Ok(Some(view)) => view,
            Ok(None) => return failed(ResponseError::UnknownMemberId, &member_id),
            Err(e) => return failed(e, &member_id),
        };
        // Upgraded to the consumer protocol meanwhile: rejoin it.
        if view.converted {
            return failed(ResponseError::RebalanceInProgress, &member_id);
        }
        let Some(rejoined) = view.member else {
            return failed(gone(&view), &member_id);
        };
        match view.phase {
            Phase::Syncing | Phase::Stable => return joined(&view, &member_id, None, version),
            Phase::Empty => return failed(ResponseError::UnknownMemberId, &member_id),
            // A new rebalance began while we waited: this request joins it too.
            Phase::Joining { .. } if !rejoined => must_join = true,
            Phase::Joining { .. } => {}
        }
        if Instant::now() >= give_up {
            return failed(ResponseError::RebalanceInProgress, &member_id);
        }
        seen = Some(view.version);
    }
}

/// The JoinGroup answer of a formed generation (`leader` overrides the
/// group's, for a static member that took its place without a rebalance).
fn joined(
    view: &MemberView,
    member_id: &str,
    leader: Option<&str>,
    version: i16,
) -> JoinGroupResponse {
    let leader = leader
        .map(str::to_string)
        .or_else(|| view.leader.clone())
        .unwrap_or_default();
    let members = view
        .members
        .iter()
        .map(|(id, instance, metadata)| {
            let member = JoinGroupResponseMember::default()
                .with_member_id(str_bytes(id))
                .with_metadata(Bytes::from(metadata.clone()));
            if version >= 5 {
                member.with_group_instance_id(instance.as_deref().map(str_bytes))
            } else {
                member
            }
        })
        .collect();
    JoinGroupResponse::default()
        .with_generation_id(view.generation)
        .with_protocol_type(view.protocol_type.as_deref().map(str_bytes))
        .with_protocol_name(view.protocol.as_deref().map(str_bytes))
        .with_leader(str_bytes(&leader))
        .with_member_id(str_bytes(member_id))
        .with_members(members)
}

pub async fn sync(broker: &Broker, req: SyncGroupRequest) -> SyncGroupResponse {
    let failed = |e: ResponseError| SyncGroupResponse::default().with_error_code(e.code());
    let group = req.group_id.0.to_string();
    if group.is_empty() {
        return failed(ResponseError::InvalidGroupId);
    }
    let member_id = req.member_id.to_string();
    let instance = req.group_instance_id.as_ref().map(|i| i.to_string());
    let sync = SyncGroup {
        group: group.clone(),
        generation: req.generation_id,
        member_id: member_id.clone(),
        instance_id: req.group_instance_id.as_ref().map(|i| i.to_string()),
        protocol_type: req.protocol_type.as_ref().map(|p| p.to_string()),
        protocol: req.protocol_name.as_ref().map(|p| p.to_string()),
        assignments: req
            .assignments
            .iter()
            .map(|a| (a.member_id.to_string(), a.assignment.to_vec()))
            .collect(),
        now_ms: broker.world.now_ms(),
        decoded: req
            .assignments
            .iter()
            .filter_map(|a| Some((a.member_id.to_string(), decoded_assignment(&a.assignment)?)))
            .collect(),
        decodes: true,
    };
    match answer(broker.meta.sync_group(sync).await) {
        Err(e) => return failed(e),
        // A classic member of a consumer-protocol group: what it assigned.
        Ok(Some(assigned)) => {
            return SyncGroupResponse::default()
                .with_protocol_type(Some(str_bytes("consumer")))
                .with_protocol_name(Some(str_bytes(&assigned.protocol)))
                .with_assignment(encode_assignment(&assigned));
        }
        Ok(None) => {}
    }
    let mut give_up = None;
    let mut seen = None;
    loop {
        let view = match await_group(broker, &group, &member_id, instance.as_deref(), seen).await {
            Ok(Some(view)) => view,
            Ok(None) => return failed(ResponseError::UnknownMemberId),
            Err(e) => return failed(e),
        };
        if view.converted {
            return failed(ResponseError::RebalanceInProgress);
        }
        if view.member.is_none() {
            return failed(gone(&view));
        }
        // The leader's assignments of this generation: answered even if
        // another rebalance began since (Kafka answers every waiting member
        // the moment the leader syncs).
        if let Some((generation, assignment)) = &view.assignment
            && *generation == req.generation_id
        {
            return SyncGroupResponse::default()
                .with_protocol_type(view.protocol_type.as_deref().map(str_bytes))
                .with_protocol_name(view.protocol.as_deref().map(str_bytes))
                .with_assignment(Bytes::from(assignment.clone()));
        }
        if view.generation != req.generation_id || view.phase != Phase::Syncing {
            return failed(ResponseError::RebalanceInProgress);
        }
        // The metastore ends the wait at the sync deadline (the group's
        // rebalance timeout); this is a backstop past the longest one.
        let give_up = *give_up.get_or_insert_with(|| {
            Instant::now()
                + Duration::from_millis(floe_metastore::groups::MAX_SESSION_TIMEOUT_MS as u64)
                + SLACK
        });
        if Instant::now() >= give_up {
            return failed(ResponseError::RebalanceInProgress);
        }
        seen = Some(view.version);
    }
}

pub async fn heartbeat(broker: &Broker, req: HeartbeatRequest) -> HeartbeatResponse {
    if req.group_id.0.is_empty() {
        return HeartbeatResponse::default().with_error_code(ResponseError::InvalidGroupId.code());
    }
    let beat = GroupHeartbeat {
        group: req.group_id.0.to_string(),
        generation: req.generation_id,
        member_id: req.member_id.to_string(),
        instance_id: req.group_instance_id.as_ref().map(|i| i.to_string()),
    };
    match answer(broker.meta.group_heartbeat(beat).await) {
        Ok(()) => HeartbeatResponse::default(),
        Err(e) => HeartbeatResponse::default().with_error_code(e.code()),
    }
}

pub async fn leave(broker: &Broker, req: LeaveGroupRequest, version: i16) -> LeaveGroupResponse {
    // v0-2 name one member; v3+ a list, each by member id and/or instance
    // id, and from v5 why it leaves (KIP-800, logged as Kafka does).
    for m in req.members.iter() {
        if let Some(reason) = m.reason.as_deref().filter(|r| !r.is_empty()) {
            tracing::info!(
                group = %req.group_id.0.as_str(),
                member = %m.member_id.as_str(),
                reason,
                "member leaves the group"
            );
        }
    }
    let members: Vec<Leaving> = if version >= 3 {
        req.members
            .iter()
            .map(|m| Leaving {
                member_id: m.member_id.to_string(),
                instance_id: m.group_instance_id.as_ref().map(|i| i.to_string()),
            })
            .collect()
    } else {
        vec![Leaving {
            member_id: req.member_id.to_string(),
            instance_id: None,
        }]
    };
    let leave = LeaveGroup {
        group: req.group_id.0.to_string(),
        members: members.clone(),
        now_ms: broker.world.now_ms(),
    };
    let results = match broker.meta.leave_group(leave).await {
        Ok(results) => results,
        Err(e) => return LeaveGroupResponse::default().with_error_code(meta_error(e).code()),
    };
    if version < 3 {
        let error = results.first().copied().unwrap_or(Ok(())).err();
        return LeaveGroupResponse::default()
            .with_error_code(error.map_or(0, |e| group_error(e).code()));
    }
    let members = members
        .into_iter()
        .zip(results)
        .map(|(m, result)| {
            MemberResponse::default()
                .with_member_id(str_bytes(&m.member_id))
                .with_group_instance_id(m.instance_id.as_deref().map(str_bytes))
                .with_error_code(result.err().map_or(0, |e| group_error(e).code()))
        })
        .collect();
    LeaveGroupResponse::default().with_members(members)
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_protocol::kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn a_consumer_subscription_is_read_and_junk_is_not() {
        for version in 0..=3 {
            let sent = ConsumerProtocolSubscription::default().with_topics(vec![
                StrBytes::from_static_str("a"),
                StrBytes::from_static_str("b"),
            ]);
            let mut buf = bytes::BytesMut::new();
            bytes::BufMut::put_i16(&mut buf, version);
            sent.encode(&mut buf, version).unwrap();
            assert_eq!(
                subscription("consumer", &buf)
                    .as_ref()
                    .map(subscribed_topics),
                Some(vec!["a".to_string(), "b".to_string()]),
                "v{version}"
            );
        }
        assert_eq!(
            subscription("consumer", &[0, 0, 0x7f, 0xff, 0xff, 0xff])
                .as_ref()
                .map(subscribed_topics),
            None
        );
        assert_eq!(
            subscription("connect", &[0, 0, 0, 0, 0, 0])
                .as_ref()
                .map(subscribed_topics),
            None
        );
    }
}
