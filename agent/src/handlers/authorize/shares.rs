//! Share groups (KIP-932), as Kafka 4.2's `KafkaApis` authorizes them:
//! READ on the group to take part (heartbeat, fetch, acknowledge) or set
//! its offsets, DESCRIBE to see it, DELETE to delete its offsets; READ on
//! each topic whose records are taken or whose offsets are set, DESCRIBE
//! on topics subscribed or described.

use super::*;
use floe_protocol::str_bytes;

const GROUP_OPERATIONS: [i8; 3] = [op::READ, op::DESCRIBE, op::DELETE];
/// Topics one ShareFetch or ShareAcknowledge may name (a session's
/// partitions at most), each looked up here.
const MAX_TOPICS: usize = crate::handlers::shares::sessions::MAX_PARTITIONS;
const INVALID_REQUEST: i16 = ResponseError::InvalidRequest.code();

/// READ on the group, DESCRIBE on every topic subscribed.
pub(super) fn share_group_heartbeat(who: &Who, req: ShareGroupHeartbeatRequest) -> Gate {
    let error = if !who.group(op::READ, &req.group_id) {
        Some((GROUP_DENIED, "Group authorization failed".to_string()))
    } else {
        let hidden: Vec<String> = req
            .subscribed_topic_names
            .iter()
            .flatten()
            .filter(|t| !who.topic(op::DESCRIBE, t))
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
        None => Gate::Handle(RequestKind::ShareGroupHeartbeat(req), None),
        Some((code, message)) => Gate::Answer(ResponseKind::ShareGroupHeartbeat(
            ShareGroupHeartbeatResponse::default()
                .with_error_code(code)
                .with_error_message(Some(str_bytes(&message))),
        )),
    }
}

/// DESCRIBE on each group and on every topic its members name.
pub(super) fn share_group_describe(who: &Who, req: ShareGroupDescribeRequest) -> Gate {
    use share_group_describe_response::*;
    let with_ops = req.include_authorized_operations;
    let who = who.clone();
    let patch = patch!(ShareGroupDescribe, |r| {
        for g in &mut r.groups {
            let topics_hidden = g.members.iter().any(|m| {
                m.subscribed_topic_names
                    .iter()
                    .chain(m.assignment.topic_partitions.iter().map(|t| &t.topic_name))
                    .any(|t| !who.topic(op::DESCRIBE, t))
            });
            if !who.group(op::DESCRIBE, &g.group_id) {
                *g = DescribedGroup::default()
                    .with_group_id(g.group_id.clone())
                    .with_error_code(GROUP_DENIED);
            } else if topics_hidden {
                *g = DescribedGroup::default()
                    .with_group_id(g.group_id.clone())
                    .with_error_code(TOPIC_DENIED)
                    .with_error_message(Some(str_bytes(
                        "The group has described topic(s) that the client is not authorized to describe.",
                    )));
            } else if with_ops {
                g.authorized_operations = who.operations(rt::GROUP, &g.group_id, &GROUP_OPERATIONS);
            }
        }
    });
    Gate::Handle(RequestKind::ShareGroupDescribe(req), patch)
}

/// The topic ids a principal may not READ (unknown ids are the handler's
/// to answer; ids the metastore cannot name now are denied).
async fn unreadable(
    who: &Who,
    broker: &Broker,
    ids: impl Iterator<Item = uuid::Uuid>,
) -> Vec<uuid::Uuid> {
    let mut denied = Vec::new();
    for id in ids {
        if denied.contains(&id) {
            continue;
        }
        let allowed = match name_of(broker, id).await {
            Ok(None) => true,
            Ok(Some(name)) => who.topic(op::READ, &name),
            Err(()) => false,
        };
        if !allowed {
            denied.push(id);
        }
    }
    denied
}

/// READ on the group, else the request is refused whole; READ on each
/// topic, else its partitions are answered TOPIC_AUTHORIZATION_FAILED (and
/// neither fetched nor acknowledged).
pub(super) async fn share_fetch(who: &Who, broker: &Broker, mut req: ShareFetchRequest) -> Gate {
    let group = req
        .group_id
        .as_ref()
        .map(|g| g.to_string())
        .unwrap_or_default();
    if !who.group(op::READ, &group) {
        return Gate::Answer(ResponseKind::ShareFetch(
            ShareFetchResponse::default().with_error_code(GROUP_DENIED),
        ));
    }
    if req.topics.len() > MAX_TOPICS {
        // Refused before a topic is looked up (the handler would refuse it).
        return Gate::Answer(ResponseKind::ShareFetch(
            ShareFetchResponse::default().with_error_code(INVALID_REQUEST),
        ));
    }
    let denied_ids = unreadable(who, broker, req.topics.iter().map(|t| t.topic_id)).await;
    let denied = take_denied(&mut req.topics, |t| !denied_ids.contains(&t.topic_id));
    let patch = patch!(ShareFetch, |r| {
        use share_fetch_response::*;
        for t in denied {
            let parts = t.partitions.iter().map(|p| {
                PartitionData::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(TOPIC_DENIED)
                    .with_records(Some(Default::default()))
            });
            r.responses.push(
                ShareFetchableTopicResponse::default()
                    .with_topic_id(t.topic_id)
                    .with_partitions(parts.collect()),
            );
        }
    });
    Gate::Handle(RequestKind::ShareFetch(req), patch)
}

/// As [`share_fetch`].
pub(super) async fn share_acknowledge(
    who: &Who,
    broker: &Broker,
    mut req: ShareAcknowledgeRequest,
) -> Gate {
    let group = req
        .group_id
        .as_ref()
        .map(|g| g.to_string())
        .unwrap_or_default();
    if !who.group(op::READ, &group) {
        return Gate::Answer(ResponseKind::ShareAcknowledge(
            ShareAcknowledgeResponse::default().with_error_code(GROUP_DENIED),
        ));
    }
    if req.topics.len() > MAX_TOPICS {
        return Gate::Answer(ResponseKind::ShareAcknowledge(
            ShareAcknowledgeResponse::default().with_error_code(INVALID_REQUEST),
        ));
    }
    let denied_ids = unreadable(who, broker, req.topics.iter().map(|t| t.topic_id)).await;
    let denied = take_denied(&mut req.topics, |t| !denied_ids.contains(&t.topic_id));
    let patch = patch!(ShareAcknowledge, |r| {
        use share_acknowledge_response::*;
        for t in denied {
            let parts = t.partitions.iter().map(|p| {
                PartitionData::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(TOPIC_DENIED)
            });
            r.responses.push(
                ShareAcknowledgeTopicResponse::default()
                    .with_topic_id(t.topic_id)
                    .with_partitions(parts.collect()),
            );
        }
    });
    Gate::Handle(RequestKind::ShareAcknowledge(req), patch)
}

/// DESCRIBE on each group; DESCRIBE on each topic (a topic asked by name
/// is answered denied, one listed is left out).
pub(super) fn describe_share_group_offsets(
    who: &Who,
    req: DescribeShareGroupOffsetsRequest,
) -> Gate {
    let listing_all: Vec<String> = req
        .groups
        .iter()
        .filter(|g| g.topics.is_none())
        .map(|g| g.group_id.to_string())
        .collect();
    let who = who.clone();
    let patch = patch!(DescribeShareGroupOffsets, |r| {
        for g in &mut r.groups {
            if !who.group(op::DESCRIBE, &g.group_id) {
                g.error_code = GROUP_DENIED;
                g.topics.clear();
                continue;
            }
            let listing_all = listing_all.iter().any(|l| g.group_id.as_str() == l);
            g.topics.retain_mut(|t| {
                let allowed = who.topic(op::DESCRIBE, &t.topic_name);
                if !allowed {
                    for p in &mut t.partitions {
                        p.error_code = TOPIC_DENIED;
                        p.start_offset = -1;
                    }
                }
                allowed || !listing_all
            });
        }
    });
    Gate::Handle(RequestKind::DescribeShareGroupOffsets(req), patch)
}

/// READ on the group, else refused whole; READ on each topic, else its
/// partitions are answered TOPIC_AUTHORIZATION_FAILED.
pub(super) fn alter_share_group_offsets(who: &Who, mut req: AlterShareGroupOffsetsRequest) -> Gate {
    if !who.group(op::READ, &req.group_id) {
        return Gate::Answer(ResponseKind::AlterShareGroupOffsets(
            AlterShareGroupOffsetsResponse::default().with_error_code(GROUP_DENIED),
        ));
    }
    let denied = take_denied(&mut req.topics, |t| who.topic(op::READ, &t.topic_name));
    let patch = patch!(AlterShareGroupOffsets, |r| {
        use alter_share_group_offsets_response::*;
        for t in denied {
            let parts = t.partitions.iter().map(|p| {
                AlterShareGroupOffsetsResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(TOPIC_DENIED)
            });
            r.responses.push(
                AlterShareGroupOffsetsResponseTopic::default()
                    .with_topic_name(t.topic_name)
                    .with_partitions(parts.collect()),
            );
        }
    });
    Gate::Handle(RequestKind::AlterShareGroupOffsets(req), patch)
}

/// DELETE on the group, else refused whole; READ on each topic.
pub(super) fn delete_share_group_offsets(
    who: &Who,
    mut req: DeleteShareGroupOffsetsRequest,
) -> Gate {
    if !who.group(op::DELETE, &req.group_id) {
        return Gate::Answer(ResponseKind::DeleteShareGroupOffsets(
            DeleteShareGroupOffsetsResponse::default().with_error_code(GROUP_DENIED),
        ));
    }
    let denied = take_denied(&mut req.topics, |t| who.topic(op::READ, &t.topic_name));
    let patch = patch!(DeleteShareGroupOffsets, |r| {
        use delete_share_group_offsets_response::*;
        for t in denied {
            r.responses.push(
                DeleteShareGroupOffsetsResponseTopic::default()
                    .with_topic_name(t.topic_name)
                    .with_error_code(TOPIC_DENIED),
            );
        }
    });
    Gate::Handle(RequestKind::DeleteShareGroupOffsets(req), patch)
}
