//! The cluster: DESCRIBE to see it (log dirs, SCRAM users, quotas, ACLs,
//! the quorum), ALTER to change it, DESCRIBE_CONFIGS and ALTER_CONFIGS for
//! client quotas and config resources; ALL for an API without rules.

use super::*;
use floe_protocol::str_bytes;

const CLUSTER_OPERATIONS: [i8; 7] = [
    op::CREATE,
    op::ALTER,
    op::DESCRIBE,
    op::CLUSTER_ACTION,
    op::DESCRIBE_CONFIGS,
    op::ALTER_CONFIGS,
    op::IDEMPOTENT_WRITE,
];

/// The cluster operations `who` is allowed, as Kafka's bit field.
pub(super) fn operations(who: &Who) -> i32 {
    let name = floe_metastore::acls::CLUSTER_NAME;
    who.operations(rt::CLUSTER, name, &CLUSTER_OPERATIONS)
}

/// What Kafka says with a denial that carries a message.
const DENIED_MESSAGE: &str = "Cluster authorization failed";

/// Handles `req` (made a request by `kind`) when `o` is allowed on the
/// cluster; else answers what `denied` makes of it.
fn on_cluster<R>(
    who: &Who,
    o: i8,
    req: R,
    kind: fn(R) -> RequestKind,
    denied: impl FnOnce(&R) -> ResponseKind,
) -> Gate {
    match who.cluster(o) {
        true => Gate::Handle(kind(req), None),
        false => Gate::Answer(denied(&req)),
    }
}

/// Open (the cluster's shape); its operations only to those allowed them.
pub(super) fn describe_cluster(who: &Who, req: DescribeClusterRequest) -> Gate {
    let with_ops = req.include_cluster_authorized_operations;
    let who = who.clone();
    let patch = patch!(DescribeCluster, |r| {
        if with_ops {
            r.cluster_authorized_operations = operations(&who);
        }
    });
    Gate::Handle(RequestKind::DescribeCluster(req), patch)
}

pub(super) fn describe_log_dirs(who: &Who, req: DescribeLogDirsRequest) -> Gate {
    on_cluster(who, op::DESCRIBE, req, RequestKind::DescribeLogDirs, |_| {
        ResponseKind::DescribeLogDirs(
            DescribeLogDirsResponse::default().with_error_code(CLUSTER_DENIED),
        )
    })
}

pub(super) fn describe_user_scram_credentials(
    who: &Who,
    req: DescribeUserScramCredentialsRequest,
) -> Gate {
    let kind = RequestKind::DescribeUserScramCredentials;
    on_cluster(who, op::DESCRIBE, req, kind, |_| {
        ResponseKind::DescribeUserScramCredentials(
            DescribeUserScramCredentialsResponse::default()
                .with_error_code(CLUSTER_DENIED)
                .with_error_message(Some(str_bytes(DENIED_MESSAGE))),
        )
    })
}

/// Each user named, once, denied.
pub(super) fn alter_user_scram_credentials(
    who: &Who,
    req: AlterUserScramCredentialsRequest,
) -> Gate {
    use alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
    let kind = RequestKind::AlterUserScramCredentials;
    on_cluster(who, op::ALTER, req, kind, |req| {
        let users: std::collections::BTreeSet<String> = req
            .deletions
            .iter()
            .map(|d| d.name.to_string())
            .chain(req.upsertions.iter().map(|u| u.name.to_string()))
            .collect();
        let results = users.into_iter().map(|u| {
            AlterUserScramCredentialsResult::default()
                .with_user(str_bytes(&u))
                .with_error_code(CLUSTER_DENIED)
        });
        ResponseKind::AlterUserScramCredentials(
            AlterUserScramCredentialsResponse::default().with_results(results.collect()),
        )
    })
}

/// Kafka's client quota APIs: DESCRIBE_CONFIGS on the cluster.
pub(super) fn describe_client_quotas(who: &Who, req: DescribeClientQuotasRequest) -> Gate {
    let kind = RequestKind::DescribeClientQuotas;
    on_cluster(who, op::DESCRIBE_CONFIGS, req, kind, |_| {
        ResponseKind::DescribeClientQuotas(
            DescribeClientQuotasResponse::default()
                .with_error_code(CLUSTER_DENIED)
                .with_error_message(Some(str_bytes(DENIED_MESSAGE))),
        )
    })
}

/// ALTER_CONFIGS on the cluster; each entry answered denied.
pub(super) fn alter_client_quotas(who: &Who, req: AlterClientQuotasRequest) -> Gate {
    use alter_client_quotas_response::{EntityData, EntryData};
    let kind = RequestKind::AlterClientQuotas;
    on_cluster(who, op::ALTER_CONFIGS, req, kind, |req| {
        let entries = req.entries.iter().map(|e| {
            let entity = e.entity.iter().map(|p| {
                EntityData::default()
                    .with_entity_type(p.entity_type.clone())
                    .with_entity_name(p.entity_name.clone())
            });
            EntryData::default()
                .with_error_code(CLUSTER_DENIED)
                .with_error_message(Some(str_bytes(DENIED_MESSAGE)))
                .with_entity(entity.collect())
        });
        ResponseKind::AlterClientQuotas(
            AlterClientQuotasResponse::default().with_entries(entries.collect()),
        )
    })
}

/// Kafka's `handleListClientMetricsResources`: DESCRIBE_CONFIGS on the
/// cluster.
pub(super) fn list_config_resources(who: &Who, req: ListConfigResourcesRequest) -> Gate {
    let kind = RequestKind::ListConfigResources;
    on_cluster(who, op::DESCRIBE_CONFIGS, req, kind, |_| {
        ResponseKind::ListConfigResources(
            ListConfigResourcesResponse::default().with_error_code(CLUSTER_DENIED),
        )
    })
}

// The replica APIs (see `handlers::replicas`): as Kafka's controller,
// ALTER on the cluster to change, DESCRIBE to list.

pub(super) fn elect_leaders(who: &Who, req: ElectLeadersRequest) -> Gate {
    on_cluster(who, op::ALTER, req, RequestKind::ElectLeaders, |_| {
        ResponseKind::ElectLeaders(ElectLeadersResponse::default().with_error_code(CLUSTER_DENIED))
    })
}

pub(super) fn alter_partition_reassignments(
    who: &Who,
    req: AlterPartitionReassignmentsRequest,
) -> Gate {
    let kind = RequestKind::AlterPartitionReassignments;
    on_cluster(who, op::ALTER, req, kind, |_| {
        ResponseKind::AlterPartitionReassignments(
            AlterPartitionReassignmentsResponse::default()
                .with_error_code(CLUSTER_DENIED)
                .with_error_message(Some(str_bytes(DENIED_MESSAGE))),
        )
    })
}

pub(super) fn list_partition_reassignments(
    who: &Who,
    req: ListPartitionReassignmentsRequest,
) -> Gate {
    let kind = RequestKind::ListPartitionReassignments;
    on_cluster(who, op::DESCRIBE, req, kind, |_| {
        ResponseKind::ListPartitionReassignments(
            ListPartitionReassignmentsResponse::default()
                .with_error_code(CLUSTER_DENIED)
                .with_error_message(Some(str_bytes(DENIED_MESSAGE))),
        )
    })
}

/// Each partition named answered denied.
pub(super) fn alter_replica_log_dirs(who: &Who, req: AlterReplicaLogDirsRequest) -> Gate {
    use alter_replica_log_dirs_response::{
        AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
    };
    let kind = RequestKind::AlterReplicaLogDirs;
    on_cluster(who, op::ALTER, req, kind, |req| {
        let results = req.dirs.iter().flat_map(|d| &d.topics).map(|t| {
            let parts = t.partitions.iter().map(|&p| {
                AlterReplicaLogDirPartitionResult::default()
                    .with_partition_index(p)
                    .with_error_code(CLUSTER_DENIED)
            });
            AlterReplicaLogDirTopicResult::default()
                .with_topic_name(t.name.clone())
                .with_partitions(parts.collect())
        });
        ResponseKind::AlterReplicaLogDirs(
            AlterReplicaLogDirsResponse::default().with_results(results.collect()),
        )
    })
}

/// As Kafka's controller: DESCRIBE on the cluster.
pub(super) fn describe_quorum(who: &Who, req: DescribeQuorumRequest) -> Gate {
    on_cluster(who, op::DESCRIBE, req, RequestKind::DescribeQuorum, |_| {
        ResponseKind::DescribeQuorum(
            DescribeQuorumResponse::default()
                .with_error_code(CLUSTER_DENIED)
                .with_error_message(Some(str_bytes(DENIED_MESSAGE))),
        )
    })
}

pub(super) fn describe_acls(who: &Who, req: DescribeAclsRequest) -> Gate {
    on_cluster(who, op::DESCRIBE, req, RequestKind::DescribeAcls, |_| {
        ResponseKind::DescribeAcls(
            DescribeAclsResponse::default()
                .with_error_code(CLUSTER_DENIED)
                .with_error_message(Some(str_bytes(DENIED_MESSAGE))),
        )
    })
}

/// Each creation answered denied.
pub(super) fn create_acls(who: &Who, req: CreateAclsRequest) -> Gate {
    on_cluster(who, op::ALTER, req, RequestKind::CreateAcls, |req| {
        let results = req.creations.iter().map(|_| {
            create_acls_response::AclCreationResult::default().with_error_code(CLUSTER_DENIED)
        });
        ResponseKind::CreateAcls(CreateAclsResponse::default().with_results(results.collect()))
    })
}

/// Each filter answered denied.
pub(super) fn delete_acls(who: &Who, req: DeleteAclsRequest) -> Gate {
    on_cluster(who, op::ALTER, req, RequestKind::DeleteAcls, |req| {
        let results = req.filters.iter().map(|_| {
            delete_acls_response::DeleteAclsFilterResult::default().with_error_code(CLUSTER_DENIED)
        });
        ResponseKind::DeleteAcls(
            DeleteAclsResponse::default().with_filter_results(results.collect()),
        )
    })
}

/// Served, yet without rules here: only for those allowed everything on
/// the cluster (a new API stays closed until its rules are written).
pub(super) fn without_rules(who: &Who, req: RequestKind) -> Gate {
    match who.cluster(op::ALL) {
        true => Gate::Handle(req, None),
        false => {
            tracing::warn!(principal = %who.session.principal, "closing: a request of an API without ACL rules");
            Gate::Close
        }
    }
}
