//! DescribeQuorum (`kafka-metadata-quorum.sh`): floe's metastore is its
//! KRaft quorum. Its Raft group's nodes are the voters (learners catching
//! up the observers), its log the `__cluster_metadata` partition, its term
//! the leader epoch; offsets are one past a Raft index, as Kafka's are one
//! past an offset. Any agent answers, asking the metastore's leader, as a
//! Kafka broker forwards the request to the active controller. Metastore
//! node ids are their own namespace, apart from the agents' broker ids, as
//! controller ids are in a Kafka cluster with dedicated controllers.

use floe_metastore::quorum::{Quorum, QuorumReplica};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use floe_protocol::kafka_protocol::messages::{
    BrokerId, DescribeQuorumRequest, DescribeQuorumResponse, TopicName,
};

use crate::broker::{Broker, kafka_error};
use floe_protocol::str_bytes;

/// The one partition a quorum has.
const METADATA_TOPIC: &str = "__cluster_metadata";
/// The listener name a metastore node's address is shown under.
const LISTENER: &str = "METASTORE";

pub async fn describe(broker: &Broker, req: DescribeQuorumRequest) -> DescribeQuorumResponse {
    // Kafka's raft client answers only a request naming exactly its one
    // partition; otherwise every partition named is
    // UNKNOWN_TOPIC_OR_PARTITION.
    let named: Vec<(&TopicName, i32)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (&t.topic_name, p.partition_index))
        })
        .collect();
    let (topic, partition) = match named.as_slice() {
        [] => {
            return DescribeQuorumResponse::default()
                .with_error_code(ResponseError::InvalidRequest.code())
                .with_error_message(Some(str_bytes("no partition to describe")));
        }
        [(topic, 0)] if topic.as_str() == METADATA_TOPIC => ((*topic).clone(), 0),
        _ => return unknown_partitions(&req),
    };
    match broker.meta.describe_quorum().await {
        Ok(quorum) if quorum.addresses.keys().any(|&id| id > i32::MAX as u64) => {
            DescribeQuorumResponse::default()
                .with_error_code(ResponseError::UnknownServerError.code())
                .with_error_message(Some(str_bytes(
                    "a metastore node id is beyond what Kafka's node ids hold (2^31 - 1)",
                )))
        }
        Ok(quorum) => {
            let nodes = nodes(&quorum);
            answer(topic, partition_of(&quorum, partition), nodes)
        }
        Err(e) => DescribeQuorumResponse::default()
            .with_error_code(kafka_error(&e).code())
            .with_error_message(Some(str_bytes(&e.to_string()))),
    }
}

/// Every partition named, unknown (as many as the request holds).
fn unknown_partitions(req: &DescribeQuorumRequest) -> DescribeQuorumResponse {
    let why = format!("the quorum has one partition, {METADATA_TOPIC}-0");
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    PartitionData::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                        .with_error_message(Some(str_bytes(&why)))
                })
                .collect();
            TopicData::default()
                .with_topic_name(t.topic_name.clone())
                .with_partitions(partitions)
        })
        .collect();
    DescribeQuorumResponse::default().with_topics(topics)
}

fn answer(topic: TopicName, partition: PartitionData, nodes: Vec<Node>) -> DescribeQuorumResponse {
    DescribeQuorumResponse::default()
        .with_topics(vec![
            TopicData::default()
                .with_topic_name(topic)
                .with_partitions(vec![partition]),
        ])
        .with_nodes(nodes)
}

fn partition_of(quorum: &Quorum, partition: i32) -> PartitionData {
    let replicas = |rs: &[QuorumReplica]| rs.iter().map(replica_state).collect();
    PartitionData::default()
        .with_partition_index(partition)
        .with_leader_id(BrokerId(node_id(quorum.leader_id)))
        .with_leader_epoch(quorum.term.min(i32::MAX as u64) as i32)
        .with_high_watermark(quorum.high_watermark)
        .with_current_voters(replicas(&quorum.voters))
        .with_observers(replicas(&quorum.observers))
}

/// One node's row. The leader keeps no time of each fetch, only whether a
/// node holds everything now: a fetch time is unknown (-1), a caught-up
/// time is now or unknown (Kafka shows the leader's own row as now).
fn replica_state(r: &QuorumReplica) -> ReplicaState {
    ReplicaState::default()
        .with_replica_id(BrokerId(node_id(r.id)))
        .with_log_end_offset(r.log_end_offset)
        .with_last_fetch_timestamp(-1)
        .with_last_caught_up_timestamp(r.last_caught_up_ms)
}

/// The voters' endpoints (v2): each node's address, under one listener
/// name. The in-process metastore has none to show.
fn nodes(quorum: &Quorum) -> Vec<Node> {
    quorum
        .voters
        .iter()
        .map(|v| {
            let listeners = quorum
                .addresses
                .get(&v.id)
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
                .map(|(host, port)| {
                    Listener::default()
                        .with_name(str_bytes(LISTENER))
                        .with_host(str_bytes(
                            host.trim_start_matches('[').trim_end_matches(']'),
                        ))
                        .with_port(port)
                })
                .into_iter()
                .collect();
            Node::default()
                .with_node_id(BrokerId(node_id(v.id)))
                .with_listeners(listeners)
        })
        .collect()
}

/// A node id as Kafka's (those beyond it are refused above).
fn node_id(id: u64) -> i32 {
    id.min(i32::MAX as u64) as i32
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn quorum() -> Quorum {
        Quorum {
            leader_id: 2,
            term: 5,
            high_watermark: 42,
            voters: vec![
                QuorumReplica {
                    id: 1,
                    log_end_offset: 40,
                    last_caught_up_ms: -1,
                },
                QuorumReplica {
                    id: 2,
                    log_end_offset: 42,
                    last_caught_up_ms: 1_000,
                },
            ],
            observers: vec![],
            addresses: BTreeMap::from([
                (1, "10.0.0.1:7000".to_string()),
                (2, "in-process".to_string()),
            ]),
        }
    }

    #[test]
    fn the_quorum_is_shown_as_kraft_s() {
        let p = partition_of(&quorum(), 0);
        assert_eq!(
            (p.leader_id.0, p.leader_epoch, p.high_watermark),
            (2, 5, 42)
        );
        let rows: Vec<(i32, i64, i64, i64)> = p
            .current_voters
            .iter()
            .map(|r| {
                (
                    r.replica_id.0,
                    r.log_end_offset,
                    r.last_fetch_timestamp,
                    r.last_caught_up_timestamp,
                )
            })
            .collect();
        assert_eq!(rows, vec![(1, 40, -1, -1), (2, 42, -1, 1_000)]);
        let nodes = nodes(&quorum());
        assert_eq!(nodes[0].listeners[0].host.as_str(), "10.0.0.1");
        assert_eq!(nodes[0].listeners[0].port, 7000);
        assert!(nodes[1].listeners.is_empty(), "no address to show");
    }
}
