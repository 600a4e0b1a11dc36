//! Metadata: this agent is the one broker and leads every partition.

use floe_metastore::TopicInfo;
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use floe_protocol::kafka_protocol::messages::{
    BrokerId, MetadataRequest, MetadataResponse, TopicName,
};

use crate::broker::{Broker, kafka_error};
use crate::cluster::discovery;
use floe_protocol::str_bytes;

pub async fn handle(
    broker: &Broker,
    req: MetadataRequest,
    version: i16,
    client_id: &str,
    session: &crate::security::authorizer::Session,
) -> MetadataResponse {
    let (agents, node) = leader(broker, session, client_id).await;
    let brokers = agents
        .iter()
        .map(|a| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(a.node_id))
                .with_host(str_bytes(&a.host))
                .with_port(a.port)
        })
        .collect();
    // v0 asks for all topics with an empty list, later versions with null.
    let requested = match req.topics {
        Some(topics) if !(version == 0 && topics.is_empty()) => Some(topics),
        _ => None,
    };
    // Before v4 there is no flag and brokers auto-create as configured.
    let auto_create = version < 4 || req.allow_auto_topic_creation;
    let with_operations = |mut t: MetadataResponseTopic| {
        if req.include_topic_authorized_operations && t.error_code == 0 {
            t.topic_authorized_operations = operations(TOPIC_OPERATIONS);
        }
        t
    };
    let topics = match requested {
        None => match broker.meta.topics().await {
            Ok(all) => all
                .iter()
                .map(|t| with_operations(topic_metadata(t, node)))
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "metadata: listing topics failed");
                Vec::new()
            }
        },
        Some(wanted) => {
            let mut out = Vec::with_capacity(wanted.len());
            for t in wanted {
                let Some(name) = t.name else {
                    // By topic id alone (KIP-516; a consumer of the
                    // KIP-848 protocol is assigned partitions by id).
                    out.push(match broker.meta.topic_by_id(t.topic_id).await {
                        Ok(Some(info)) => with_operations(topic_metadata(&info, node)),
                        Ok(None) => MetadataResponseTopic::default()
                            .with_topic_id(t.topic_id)
                            .with_error_code(ResponseError::UnknownTopicId.code()),
                        Err(e) => MetadataResponseTopic::default()
                            .with_topic_id(t.topic_id)
                            .with_error_code(kafka_error(&e).code()),
                    });
                    continue;
                };
                let may_create = auto_create && broker.authorizer.may_create_topic(session, &name);
                out.push(match broker.topic_or_create(&name, may_create).await {
                    Ok(info) => with_operations(topic_metadata(&info, node)),
                    Err(e) => MetadataResponseTopic::default()
                        .with_name(Some(name))
                        .with_error_code(kafka_error(&e).code()),
                });
            }
            out
        }
    };
    let cluster_operations = if req.include_cluster_authorized_operations {
        operations(super::cluster::CLUSTER_OPERATIONS)
    } else {
        i32::MIN
    };
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(str_bytes(&broker.cluster_id)))
        .with_controller_id(node)
        .with_topics(topics)
        .with_cluster_authorized_operations(cluster_operations)
}

/// The agents this client may see, and the one that leads every partition
/// for it. One agent leads every partition for a client: its Produce
/// requests carry all partitions at once, and every agent gives the same
/// answer (when they see the client from one address: not across NAT per
/// agent). Canonical, so agents listening on IPv4 and on IPv6 see one
/// address.
pub async fn leader(
    broker: &Broker,
    session: &crate::security::authorizer::Session,
    client_id: &str,
) -> (Vec<discovery::Endpoint>, BrokerId) {
    let agents =
        discovery::visible(&*broker.meta, &broker.config, &session.listener, client_id).await;
    let client = discovery::client_key(client_id, session.ip.to_canonical());
    let node = BrokerId(agents[discovery::pick(&client, agents.len())].node_id);
    (agents, node)
}

/// Whether this agent is the one that leads every partition for the client.
pub async fn leads(
    broker: &Broker,
    session: &crate::security::authorizer::Session,
    client_id: &str,
) -> bool {
    leader(broker, session, client_id).await.1 == BrokerId(broker.config.node_id)
}

/// Kafka's ACL operations on a topic; with no authorizer, every one is
/// allowed (and Metadata reports them when asked, as tools expect).
pub const TOPIC_OPERATIONS: &[i32] = &[
    3,  // READ
    4,  // WRITE
    5,  // CREATE
    6,  // DELETE
    7,  // ALTER
    8,  // DESCRIBE
    10, // DESCRIBE_CONFIGS
    11, // ALTER_CONFIGS
];

/// Operations as Kafka's bit field (bit n: operation n).
pub fn operations(ops: &[i32]) -> i32 {
    ops.iter().fold(0, |bits, op| bits | (1 << op))
}

fn topic_metadata(topic: &TopicInfo, node: BrokerId) -> MetadataResponseTopic {
    let partitions = (0..topic.partitions)
        .map(|p| {
            MetadataResponsePartition::default()
                .with_partition_index(p)
                .with_leader_id(node)
                .with_leader_epoch(0)
                .with_replica_nodes(vec![node])
                .with_isr_nodes(vec![node])
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(&topic.name))))
        .with_topic_id(topic.id)
        .with_partitions(partitions)
}
