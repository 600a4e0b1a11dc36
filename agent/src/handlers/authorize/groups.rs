//! Groups: READ on the group to take part in it or commit its offsets,
//! DESCRIBE to see it, DELETE to delete it; READ (to commit) or DESCRIBE
//! (to see offsets and subscriptions) on its topics.

use std::collections::BTreeSet;

use super::*;
use floe_protocol::kafka_protocol::protocol::StrBytes;

use floe_protocol::str_bytes;

const GROUP_OPERATIONS: [i8; 3] = [op::READ, op::DESCRIBE, op::DELETE];

/// DESCRIBE on the group or transactional id whose coordinator is asked.
pub(super) fn find_coordinator(who: &Who, req: FindCoordinatorRequest, version: i16) -> Gate {
    let (resource, error) = match req.key_type {
        1 => (rt::TRANSACTIONAL_ID, TXN_DENIED),
        _ => (rt::GROUP, GROUP_DENIED),
    };
    let key = req.key.to_string();
    let who = who.clone();
    let patch = patch!(FindCoordinator, |r| {
        if version < 4 {
            if !who.allows(op::DESCRIBE, resource, &key) {
                *r = FindCoordinatorResponse::default()
                    .with_error_code(error)
                    .with_node_id((-1).into())
                    .with_port(-1);
            }
            return;
        }
        for c in &mut r.coordinators {
            if !who.allows(op::DESCRIBE, resource, &c.key) {
                c.error_code = error;
                c.node_id = (-1).into();
                c.host = Default::default();
                c.port = -1;
            }
        }
    });
    Gate::Handle(RequestKind::FindCoordinator(req), patch)
}

pub(super) fn join_group(who: &Who, req: JoinGroupRequest) -> Gate {
    match who.group(op::READ, &req.group_id) {
        true => Gate::Handle(RequestKind::JoinGroup(req), None),
        false => Gate::Answer(ResponseKind::JoinGroup(
            JoinGroupResponse::default()
                .with_error_code(GROUP_DENIED)
                .with_generation_id(-1),
        )),
    }
}

pub(super) fn sync_group(who: &Who, req: SyncGroupRequest) -> Gate {
    match who.group(op::READ, &req.group_id) {
        true => Gate::Handle(RequestKind::SyncGroup(req), None),
        false => Gate::Answer(ResponseKind::SyncGroup(
            SyncGroupResponse::default().with_error_code(GROUP_DENIED),
        )),
    }
}

pub(super) fn heartbeat(who: &Who, req: HeartbeatRequest) -> Gate {
    match who.group(op::READ, &req.group_id) {
        true => Gate::Handle(RequestKind::Heartbeat(req), None),
        false => Gate::Answer(ResponseKind::Heartbeat(
            HeartbeatResponse::default().with_error_code(GROUP_DENIED),
        )),
    }
}

pub(super) fn leave_group(who: &Who, req: LeaveGroupRequest) -> Gate {
    match who.group(op::READ, &req.group_id) {
        true => Gate::Handle(RequestKind::LeaveGroup(req), None),
        false => Gate::Answer(ResponseKind::LeaveGroup(
            LeaveGroupResponse::default().with_error_code(GROUP_DENIED),
        )),
    }
}

/// READ on the group, DESCRIBE on every topic subscribed by name (topics
/// a regex matches are filtered by DESCRIBE where the regex is resolved).
pub(super) fn consumer_group_heartbeat(who: &Who, req: ConsumerGroupHeartbeatRequest) -> Gate {
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
        None => Gate::Handle(RequestKind::ConsumerGroupHeartbeat(req), None),
        Some((code, message)) => Gate::Answer(ResponseKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default()
                .with_error_code(code)
                .with_error_message(Some(str_bytes(&message))),
        )),
    }
}

/// READ on the group and on each topic; without the group, every
/// partition is answered GROUP_AUTHORIZATION_FAILED.
pub(super) fn offset_commit(who: &Who, mut req: OffsetCommitRequest) -> Gate {
    let group_ok = who.group(op::READ, &req.group_id);
    let denied = take_denied(&mut req.topics, |t| {
        group_ok && who.topic(op::READ, &t.name)
    });
    let error = if group_ok { TOPIC_DENIED } else { GROUP_DENIED };
    let patch = patch!(OffsetCommit, |r| {
        use offset_commit_response::*;
        for t in denied {
            let parts = t.partitions.iter().map(|p| {
                OffsetCommitResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(error)
            });
            r.topics.push(
                OffsetCommitResponseTopic::default()
                    .with_name(t.name)
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

/// DESCRIBE on each group and topic: a topic asked by name is answered
/// denied, one listed (all offsets asked) is left out.
pub(super) fn offset_fetch(who: &Who, req: OffsetFetchRequest, version: i16) -> Gate {
    // Asked for every offset (null topics): v0-7 for the one group, v8+
    // group by group.
    let listing_all = req.topics.is_none();
    let listing_all_of: BTreeSet<String> = req
        .groups
        .iter()
        .filter(|g| g.topics.is_none())
        .map(|g| g.group_id.to_string())
        .collect();
    let group_id = req.group_id.to_string();
    let who = who.clone();
    let patch = patch!(OffsetFetch, |r| {
        // v0-7: one group, at the top.
        if version < 8 {
            if !who.group(op::DESCRIBE, &group_id) {
                r.error_code = GROUP_DENIED;
                r.topics.clear();
                return;
            }
            r.topics.retain_mut(|t| {
                let allowed = who.topic(op::DESCRIBE, &t.name);
                if !allowed {
                    t.partitions.iter_mut().for_each(|p| {
                        deny_offset(&mut p.error_code, &mut p.committed_offset, &mut p.metadata)
                    });
                }
                allowed || !listing_all
            });
            return;
        }
        for g in &mut r.groups {
            if !who.group(op::DESCRIBE, &g.group_id) {
                g.error_code = GROUP_DENIED;
                g.topics.clear();
                continue;
            }
            let listing_all = listing_all_of.contains(g.group_id.as_str());
            g.topics.retain_mut(|t| {
                let allowed = who.topic(op::DESCRIBE, &t.name);
                if !allowed {
                    t.partitions.iter_mut().for_each(|p| {
                        deny_offset(&mut p.error_code, &mut p.committed_offset, &mut p.metadata)
                    });
                }
                allowed || !listing_all
            });
        }
    });
    Gate::Handle(RequestKind::OffsetFetch(req), patch)
}

/// A committed offset the principal may not see (its topic's DESCRIBE).
fn deny_offset(error: &mut i16, offset: &mut i64, metadata: &mut Option<StrBytes>) {
    *error = TOPIC_DENIED;
    *offset = -1;
    *metadata = None;
}

/// DESCRIBE on each group, decided on the answer.
pub(super) fn describe_groups(who: &Who, req: DescribeGroupsRequest) -> Gate {
    let with_ops = req.include_authorized_operations;
    let who = who.clone();
    let patch = patch!(DescribeGroups, |r| {
        for g in &mut r.groups {
            if !who.group(op::DESCRIBE, &g.group_id) {
                *g = describe_groups_response::DescribedGroup::default()
                    .with_group_id(g.group_id.clone())
                    .with_error_code(GROUP_DENIED);
            } else if with_ops {
                g.authorized_operations = who.operations(rt::GROUP, &g.group_id, &GROUP_OPERATIONS);
            }
        }
    });
    Gate::Handle(RequestKind::DescribeGroups(req), patch)
}

/// DESCRIBE on each group and on every topic its members name.
pub(super) fn consumer_group_describe(who: &Who, req: ConsumerGroupDescribeRequest) -> Gate {
    use consumer_group_describe_response::*;
    let with_ops = req.include_authorized_operations;
    let who = who.clone();
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
                    .any(|t| !who.topic(op::DESCRIBE, t))
            });
            if !who.group(op::DESCRIBE, &g.group_id) {
                *g = DescribedGroup::default()
                    .with_group_id(g.group_id.clone())
                    .with_error_code(GROUP_DENIED);
            } else if topics_hidden {
                // Kafka's answer when members name topics the principal
                // may not describe.
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
    Gate::Handle(RequestKind::ConsumerGroupDescribe(req), patch)
}

/// Every group with DESCRIBE on the cluster; else those it may describe.
pub(super) fn list_groups(who: &Who, req: ListGroupsRequest) -> Gate {
    let all = who.cluster(op::DESCRIBE);
    let who = who.clone();
    let patch = patch!(ListGroups, |r| {
        if !all {
            r.groups.retain(|g| who.group(op::DESCRIBE, &g.group_id));
        }
    });
    Gate::Handle(RequestKind::ListGroups(req), patch)
}

/// DELETE on each group.
pub(super) fn delete_groups(who: &Who, mut req: DeleteGroupsRequest) -> Gate {
    let denied = take_denied(&mut req.groups_names, |g| who.group(op::DELETE, g));
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

/// DELETE on the group, READ on each topic.
pub(super) fn offset_delete(who: &Who, mut req: OffsetDeleteRequest) -> Gate {
    if !who.group(op::DELETE, &req.group_id) {
        return Gate::Answer(ResponseKind::OffsetDelete(
            OffsetDeleteResponse::default().with_error_code(GROUP_DENIED),
        ));
    }
    let denied = take_denied(&mut req.topics, |t| who.topic(op::READ, &t.name));
    let patch = patch!(OffsetDelete, |r| {
        use offset_delete_response::*;
        for t in denied {
            let parts = t.partitions.iter().map(|p| {
                OffsetDeleteResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(TOPIC_DENIED)
            });
            r.topics.push(
                OffsetDeleteResponseTopic::default()
                    .with_name(t.name)
                    .with_partitions(parts.collect()),
            );
        }
    });
    Gate::Handle(RequestKind::OffsetDelete(req), patch)
}
