//! The replica APIs tools call (`kafka-leader-election.sh`,
//! `kafka-reassign-partitions.sh`, `kafka-log-dirs.sh`), answered as a
//! Kafka cluster answers when there is nothing to move: floe has no
//! replicas to elect a leader among, to reassign or to move between log
//! directories. Every agent serves every partition from the object store,
//! whose own replication stands in for Kafka's.
//!
//! - ElectLeaders: `ELECTION_NOT_NEEDED` for every partition that exists
//!   (the leader a client is given is always there); with no partitions
//!   named, every topic with nothing to elect, as Kafka answers.
//! - AlterPartitionReassignments: an assignment is checked as Kafka's
//!   controller checks one (every broker an agent, none twice, not empty);
//!   a valid one is already satisfied (every agent serves the partition),
//!   so nothing is in progress; cancelling one answers
//!   `NO_REASSIGNMENT_IN_PROGRESS`.
//! - ListPartitionReassignments: none in progress.
//! - AlterReplicaLogDirs: the one log dir floe reports (the object store)
//!   is where every partition already is; any other is `LOG_DIR_NOT_FOUND`.

use std::collections::{BTreeMap, BTreeSet};

use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::*;

use crate::broker::{Broker, kafka_error};
use floe_protocol::str_bytes;

/// The partitions of every topic, by name; `Err` if the metastore cannot say.
async fn partition_counts(broker: &Broker) -> Result<BTreeMap<String, i32>, ResponseError> {
    let topics = broker.meta.topics().await.map_err(|e| kafka_error(&e))?;
    Ok(topics
        .into_iter()
        .map(|t| (t.name.clone(), t.partitions))
        .collect())
}

/// Why `topic`-`partition` cannot be named, in Kafka's words of `api`.
fn missing(
    counts: &BTreeMap<String, i32>,
    topic: &str,
    partition: i32,
    no_topic: impl Fn(&str) -> String,
    no_partition: impl Fn(&str, i32) -> String,
) -> Option<String> {
    match counts.get(topic) {
        None => Some(no_topic(topic)),
        Some(&n) if !(0..n).contains(&partition) => Some(no_partition(topic, partition)),
        Some(_) => None,
    }
}

pub async fn elect_leaders(broker: &Broker, req: ElectLeadersRequest) -> ElectLeadersResponse {
    use elect_leaders_response::{PartitionResult, ReplicaElectionResult};
    let counts = match partition_counts(broker).await {
        Ok(counts) => counts,
        Err(error) => return ElectLeadersResponse::default().with_error_code(error.code()),
    };
    let results = match req.topic_partitions {
        // Every partition: none needs an election, and Kafka leaves those
        // out, listing each topic with no partition.
        None => counts
            .keys()
            .map(|name| ReplicaElectionResult::default().with_topic(TopicName(str_bytes(name))))
            .collect(),
        Some(asked) => asked
            .into_iter()
            .map(|t| {
                let partitions = t
                    .partitions
                    .iter()
                    .map(|&p| {
                        let result = PartitionResult::default().with_partition_id(p);
                        match missing(
                            &counts,
                            &t.topic,
                            p,
                            |t| format!("No such topic as {t}"),
                            |t, p| format!("No such partition as {t}-{p}"),
                        ) {
                            Some(why) => result
                                .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                                .with_error_message(Some(str_bytes(&why))),
                            None => result
                                .with_error_code(ResponseError::ElectionNotNeeded.code())
                                .with_error_message(Some(str_bytes(
                                    "Leader election not needed for topic partition.",
                                ))),
                        }
                    })
                    .collect();
                ReplicaElectionResult::default()
                    .with_topic(t.topic)
                    .with_partition_result(partitions)
            })
            .collect(),
    };
    ElectLeadersResponse::default().with_replica_election_results(results)
}

pub async fn alter_partition_reassignments(
    broker: &Broker,
    req: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    use alter_partition_reassignments_response::{
        ReassignablePartitionResponse, ReassignableTopicResponse,
    };
    let response = AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(req.allow_replication_factor_change);
    let (counts, agents) = match (partition_counts(broker).await, agent_ids(broker).await) {
        (Ok(counts), Ok(agents)) => (counts, agents),
        (Err(error), _) | (_, Err(error)) => return response.with_error_code(error.code()),
    };
    let responses = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let refused = match missing(
                        &counts,
                        &t.name,
                        p.partition_index,
                        |t| format!("Unable to find a topic named {t}."),
                        |t, p| format!("Unable to find partition {t}:{p}."),
                    ) {
                        Some(why) => Some((ResponseError::UnknownTopicOrPartition, why)),
                        None => match &p.replicas {
                            None => Some((
                                ResponseError::NoReassignmentInProgress,
                                "No partition reassignment is in progress.".to_string(),
                            )),
                            Some(replicas) => assignment_problem(
                                replicas,
                                &agents,
                                req.allow_replication_factor_change,
                            ),
                        },
                    };
                    let (code, why) = match refused {
                        Some((error, why)) => (error.code(), Some(str_bytes(&why))),
                        None => (0, None),
                    };
                    ReassignablePartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                        .with_error_message(why)
                })
                .collect();
            ReassignableTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    response.with_responses(responses)
}

/// What Kafka's controller finds wrong with a manual assignment (its
/// `validateManualPartitionAssignment`), given the registered agents; a
/// partition's one replica is its leader, so any other count changes its
/// replication factor.
pub(crate) fn assignment_problem(
    replicas: &[BrokerId],
    agents: &BTreeSet<i32>,
    allow_replication_factor_change: bool,
) -> Option<(ResponseError, String)> {
    let invalid = |why: String| Some((ResponseError::InvalidReplicaAssignment, why));
    if replicas.is_empty() {
        return invalid("The manual partition assignment includes an empty replica list.".into());
    }
    let mut seen = BTreeSet::new();
    for id in replicas.iter().map(|b| b.0) {
        if !agents.contains(&id) {
            return invalid(format!(
                "The manual partition assignment includes broker {id}, but no such broker is registered."
            ));
        }
        if !seen.insert(id) {
            return invalid(format!(
                "The manual partition assignment includes the broker {id} more than once."
            ));
        }
    }
    if !allow_replication_factor_change && replicas.len() != 1 {
        return Some((
            ResponseError::InvalidReplicationFactor,
            format!(
                "The replication factor is changed from 1 to {}",
                replicas.len()
            ),
        ));
    }
    None
}

/// The node ids of the agents registered now.
pub(crate) async fn agent_ids(broker: &Broker) -> Result<BTreeSet<i32>, ResponseError> {
    let agents = broker.meta.agents().await.map_err(|e| kafka_error(&e))?;
    Ok(agents.into_iter().map(|a| a.node_id).collect())
}

pub fn list_partition_reassignments() -> ListPartitionReassignmentsResponse {
    ListPartitionReassignmentsResponse::default().with_error_message(None)
}

pub async fn alter_replica_log_dirs(
    broker: &Broker,
    req: AlterReplicaLogDirsRequest,
) -> AlterReplicaLogDirsResponse {
    use alter_replica_log_dirs_response::{
        AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
    };
    let counts = partition_counts(broker).await;
    let here = super::log_dirs::log_dir(broker);
    let mut results: Vec<AlterReplicaLogDirTopicResult> = Vec::new();
    for dir in req.dirs {
        for topic in dir.topics {
            let partitions = topic
                .partitions
                .iter()
                .map(|&p| {
                    let error = match &counts {
                        Err(error) => Some(*error),
                        Ok(counts)
                            if counts
                                .get(topic.name.as_str())
                                .is_none_or(|&n| !(0..n).contains(&p)) =>
                        {
                            // Not a partition of this broker (Kafka's
                            // answer for a replica it does not host).
                            Some(ResponseError::ReplicaNotAvailable)
                        }
                        Ok(_) if dir.path.as_str() != here => Some(ResponseError::LogDirNotFound),
                        Ok(_) => None,
                    };
                    AlterReplicaLogDirPartitionResult::default()
                        .with_partition_index(p)
                        .with_error_code(error.map_or(0, |e| e.code()))
                })
                .collect();
            results.push(
                AlterReplicaLogDirTopicResult::default()
                    .with_topic_name(topic.name)
                    .with_partitions(partitions),
            );
        }
    }
    AlterReplicaLogDirsResponse::default().with_results(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_assignment_is_checked_as_kafka_checks_one() {
        let agents: BTreeSet<i32> = [0, 1].into();
        let ids = |ids: &[i32]| ids.iter().map(|&i| BrokerId(i)).collect::<Vec<_>>();
        assert_eq!(assignment_problem(&ids(&[1]), &agents, true), None);
        let code =
            |r: &[i32], allow| assignment_problem(&ids(r), &agents, allow).map(|(error, _)| error);
        assert_eq!(
            code(&[], true),
            Some(ResponseError::InvalidReplicaAssignment)
        );
        assert_eq!(
            code(&[7], true),
            Some(ResponseError::InvalidReplicaAssignment)
        );
        assert_eq!(
            code(&[0, 0], true),
            Some(ResponseError::InvalidReplicaAssignment)
        );
        assert_eq!(code(&[0, 1], true), None);
        assert_eq!(
            code(&[0, 1], false),
            Some(ResponseError::InvalidReplicationFactor)
        );
    }
}
