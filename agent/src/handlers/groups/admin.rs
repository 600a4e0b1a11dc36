//! FindCoordinator, ListGroups, DescribeGroups and DeleteGroups.

use bytes::Bytes;
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use floe_protocol::kafka_protocol::messages::describe_groups_response::{
    DescribedGroup, DescribedGroupMember,
};
use floe_protocol::kafka_protocol::messages::find_coordinator_response::Coordinator;
use floe_protocol::kafka_protocol::messages::list_groups_response::ListedGroup;
use floe_protocol::kafka_protocol::messages::{
    BrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    ListGroupsRequest, ListGroupsResponse,
};

use super::{group_error, meta_error};
use crate::broker::Broker;
use crate::cluster::discovery;
use floe_protocol::str_bytes;

pub async fn find_coordinator(
    broker: &Broker,
    req: FindCoordinatorRequest,
    version: i16,
    session: &crate::security::authorizer::Session,
    client_id: &str,
) -> FindCoordinatorResponse {
    // All group state is in the metastore, so any agent can coordinate any
    // group; hashing the key onto the client's visible agents spreads the work.
    let agents =
        discovery::visible(&*broker.meta, &broker.config, &session.listener, client_id).await;
    let for_key = |key: &str| &agents[discovery::pick(key, agents.len())];
    // Groups (0) and transactions (1); floe has no share groups (2).
    let served = matches!(req.key_type, 0 | 1);
    let unknown_type = || format!("no coordinator of key type {}", req.key_type);
    if version >= 4 {
        let coordinators = req
            .coordinator_keys
            .into_iter()
            .map(|key| match served {
                true => {
                    let a = for_key(&key);
                    Coordinator::default()
                        .with_key(key)
                        .with_node_id(BrokerId(a.node_id))
                        .with_host(str_bytes(&a.host))
                        .with_port(a.port)
                }
                false => Coordinator::default()
                    .with_key(key)
                    .with_node_id(BrokerId(-1))
                    .with_port(-1)
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(str_bytes(&unknown_type()))),
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    if !served {
        return FindCoordinatorResponse::default()
            .with_node_id(BrokerId(-1))
            .with_port(-1)
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(str_bytes(&unknown_type())));
    }
    let a = for_key(&req.key);
    FindCoordinatorResponse::default()
        .with_node_id(BrokerId(a.node_id))
        .with_host(str_bytes(&a.host))
        .with_port(a.port)
}

/// ListGroups: the groups this agent coordinates for the client (see
/// [`discovery::coordinates`]).
pub async fn list(
    broker: &Broker,
    req: ListGroupsRequest,
    version: i16,
    session: &crate::security::authorizer::Session,
    client_id: &str,
) -> ListGroupsResponse {
    let groups = match broker.meta.groups().await {
        Ok(groups) => groups,
        Err(e) => return ListGroupsResponse::default().with_error_code(meta_error(e).code()),
    };
    let agents =
        match discovery::known_visible(&*broker.meta, &broker.config, &session.listener, client_id)
            .await
        {
            Ok(agents) => agents,
            Err(e) => return ListGroupsResponse::default().with_error_code(meta_error(e).code()),
        };
    let me = broker.config.node_id;
    let matches = |filter: &[floe_protocol::kafka_protocol::protocol::StrBytes], value: &str| {
        filter.is_empty() || filter.iter().any(|f| f.eq_ignore_ascii_case(value))
    };
    let listed = groups
        .iter()
        .filter(|g| {
            discovery::coordinates(&agents, me, &g.name)
                && matches(&req.states_filter, &g.state)
                && matches(&req.types_filter, &g.group_type)
        })
        .map(|g| {
            let listed = ListedGroup::default()
                .with_group_id(GroupId(str_bytes(&g.name)))
                .with_protocol_type(str_bytes(&g.protocol_type));
            match version {
                4 => listed.with_group_state(str_bytes(&g.state)),
                5.. => listed
                    .with_group_state(str_bytes(&g.state))
                    .with_group_type(str_bytes(&g.group_type)),
                _ => listed,
            }
        })
        .collect();
    ListGroupsResponse::default().with_groups(listed)
}

pub async fn describe(
    broker: &Broker,
    req: DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let mut described = Vec::with_capacity(req.groups.len());
    for id in req.groups {
        let response = DescribedGroup::default().with_group_id(id.clone());
        described.push(match broker.meta.describe_group(&id.0).await {
            // Kafka (before DescribeGroups v6) describes a group it does not
            // know as Dead, without an error.
            Ok(None) => response.with_group_state(str_bytes("Dead")),
            Ok(Some(g)) => {
                let members = g
                    .members
                    .into_iter()
                    .map(|m| {
                        let member = DescribedGroupMember::default()
                            .with_member_id(str_bytes(&m.member_id))
                            .with_client_id(str_bytes(&m.client_id))
                            .with_client_host(str_bytes(&m.client_host))
                            .with_member_metadata(Bytes::from(m.metadata))
                            .with_member_assignment(Bytes::from(m.assignment));
                        if version >= 4 {
                            member.with_group_instance_id(m.instance_id.as_deref().map(str_bytes))
                        } else {
                            member
                        }
                    })
                    .collect();
                response
                    .with_group_state(str_bytes(&g.state))
                    .with_protocol_type(str_bytes(&g.protocol_type))
                    .with_protocol_data(str_bytes(&g.protocol))
                    .with_members(members)
            }
            Err(e) => response.with_error_code(meta_error(e).code()),
        });
    }
    DescribeGroupsResponse::default().with_groups(described)
}

pub async fn delete(broker: &Broker, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let names: Vec<String> = req.groups_names.iter().map(|g| g.0.to_string()).collect();
    let results = match broker.meta.delete_groups(names).await {
        Ok(results) => results
            .into_iter()
            .map(|r| r.err().map(group_error))
            .collect(),
        Err(e) => vec![Some(meta_error(e)); req.groups_names.len()],
    };
    let results = req
        .groups_names
        .into_iter()
        .zip(results)
        .map(|(group, error)| {
            DeletableGroupResult::default()
                .with_group_id(group)
                .with_error_code(error.map_or(0, |e| e.code()))
        })
        .collect();
    DeleteGroupsResponse::default().with_results(results)
}
