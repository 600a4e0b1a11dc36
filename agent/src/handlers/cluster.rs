//! DescribeCluster and OffsetForLeaderEpoch.
//!
//! Every agent leads every partition it is asked about, and a partition's
//! leader never changes in a way that could truncate its log (the log is
//! the metastore's), so every partition has one leader epoch, 0, as
//! Metadata reports. OffsetForLeaderEpoch (KIP-320), which a consumer sends
//! to check its position after a leader change, therefore always finds no
//! truncation: epoch 0 ends at the log's end.

use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use floe_protocol::kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use floe_protocol::kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
};

use crate::broker::{Broker, kafka_error};
use crate::cluster::discovery;
use floe_protocol::str_bytes;

/// The only leader epoch of every partition (see the module's doc).
pub const LEADER_EPOCH: i32 = 0;

/// DescribeCluster's endpoint types: brokers (1) and controllers (2).
const BROKERS: i8 = 1;

/// Kafka's ACL operations a principal may hold on the cluster; with no
/// authorizer, every one is allowed.
pub const CLUSTER_OPERATIONS: &[i32] = &[
    5,  // CREATE
    7,  // ALTER
    8,  // DESCRIBE
    9,  // CLUSTER_ACTION
    10, // DESCRIBE_CONFIGS
    11, // ALTER_CONFIGS
    12, // IDEMPOTENT_WRITE
];

pub async fn describe_cluster(
    broker: &Broker,
    req: DescribeClusterRequest,
    session: &crate::security::authorizer::Session,
    client_id: &str,
) -> DescribeClusterResponse {
    if req.endpoint_type != BROKERS {
        return DescribeClusterResponse::default()
            .with_error_code(ResponseError::UnsupportedEndpointType.code())
            .with_error_message(Some(str_bytes(
                "floe has no controllers to describe: its metastore nodes are not Kafka brokers",
            )));
    }
    let agents =
        discovery::visible(&*broker.meta, &broker.config, &session.listener, client_id).await;
    let client = discovery::client_key(client_id, session.ip.to_canonical());
    let controller = agents[discovery::pick(&client, agents.len())].node_id;
    let brokers = agents
        .iter()
        .map(|a| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(a.node_id))
                .with_host(str_bytes(&a.host))
                .with_port(a.port)
        })
        .collect();
    let operations = if req.include_cluster_authorized_operations {
        CLUSTER_OPERATIONS
            .iter()
            .fold(0, |bits, op| bits | (1 << op))
    } else {
        i32::MIN
    };
    DescribeClusterResponse::default()
        .with_endpoint_type(BROKERS)
        .with_cluster_id(str_bytes(&broker.cluster_id))
        .with_controller_id(BrokerId(controller))
        .with_brokers(brokers)
        .with_cluster_authorized_operations(operations)
}

pub async fn offset_for_leader_epoch(
    broker: &Broker,
    req: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let max_partition = t.partitions.iter().map(|p| p.partition).max().unwrap_or(0);
        let topic = broker
            .fetch_topic(&t.topic.0, None, max_partition.max(0))
            .await;
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let answer = EpochEndOffset::default().with_partition(p.partition);
            let refused = |e: ResponseError| {
                answer
                    .clone()
                    .with_error_code(e.code())
                    .with_leader_epoch(-1)
                    .with_end_offset(-1)
            };
            let Some(topic) = topic
                .as_ref()
                .filter(|t| (0..t.partitions).contains(&p.partition))
            else {
                partitions.push(refused(ResponseError::UnknownTopicOrPartition));
                continue;
            };
            // The client's view of the current epoch, checked as Kafka does
            // (-1: not given; none is older than 0, so none is fenced).
            if p.current_leader_epoch > LEADER_EPOCH {
                partitions.push(refused(ResponseError::UnknownLeaderEpoch));
                continue;
            }
            // An epoch before any the partition had: none to report.
            if p.leader_epoch < LEADER_EPOCH {
                partitions.push(answer.with_leader_epoch(-1).with_end_offset(-1));
                continue;
            }
            partitions.push(match broker.meta.offsets(topic.id, p.partition).await {
                Ok(offsets) => answer
                    .with_leader_epoch(LEADER_EPOCH)
                    .with_end_offset(offsets.high_watermark),
                Err(e) => refused(kafka_error(&e)),
            });
        }
        topics.push(
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic)
                .with_partitions(partitions),
        );
    }
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
