//! `floe topics create|list|describe|alter|delete`.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use floe_protocol::kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use floe_protocol::kafka_protocol::messages::create_topics_request::{
    CreatableTopic, CreatableTopicConfig,
};
use floe_protocol::kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use floe_protocol::kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use floe_protocol::kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use floe_protocol::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use floe_protocol::kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use floe_protocol::kafka_protocol::messages::*;

use super::{Broker, Output, Table, check, print, str_bytes};

#[derive(clap::Subcommand)]
pub enum TopicsCommand {
    /// Create a topic.
    Create {
        name: String,
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        /// A topic config, e.g. --config retention.ms=3600000 (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
        /// Accepted and ignored, as Kafka's tools and scripts pass it: the
        /// object store keeps every record's copies, floe no replicas.
        #[arg(long)]
        replication_factor: Option<i16>,
    },
    /// List topics and their partition counts.
    List,
    /// Partitions (leader, log start and end offsets) and the configs set on topics.
    Describe { names: Vec<String> },
    /// Add partitions, set or delete configs.
    Alter {
        name: String,
        /// The new partition count (only ever more).
        #[arg(long)]
        partitions: Option<i32>,
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
        #[arg(long = "delete-config", value_name = "KEY")]
        delete_configs: Vec<String>,
    },
    /// Delete topics.
    Delete {
        #[arg(required = true)]
        names: Vec<String>,
    },
}

/// The TOPIC resource type of the config APIs.
const TOPIC_RESOURCE: i8 = 2;

pub async fn run(
    bootstrap: &str,
    security: &floe_protocol::client::Security,
    output: Output,
    command: TopicsCommand,
) -> anyhow::Result<()> {
    let mut broker = Broker::connect(bootstrap, security).await?;
    match command {
        TopicsCommand::Create {
            name,
            partitions,
            configs,
            replication_factor,
        } => {
            if let Some(factor) = replication_factor {
                eprintln!(
                    "note: replication factor {factor} ignored: the object store keeps every \
                     record's copies (floe has no broker replicas)"
                );
            }
            let configs = parse_configs(&configs)?
                .into_iter()
                .map(|(k, v)| {
                    CreatableTopicConfig::default()
                        .with_name(str_bytes(&k))
                        .with_value(Some(str_bytes(&v)))
                })
                .collect();
            let topic = CreatableTopic::default()
                .with_name(TopicName(str_bytes(&name)))
                .with_num_partitions(partitions)
                .with_replication_factor(-1)
                .with_configs(configs);
            let request = CreateTopicsRequest::default()
                .with_topics(vec![topic])
                .with_timeout_ms(30_000);
            let response: CreateTopicsResponse =
                broker.call(ApiKey::CreateTopics, 7, &request).await?;
            for t in &response.topics {
                check(
                    t.error_code,
                    &format!("creating {}", t.name.0),
                    t.error_message.as_ref(),
                )?;
            }
            eprintln!("created topic {name} with {partitions} partitions");
        }
        TopicsCommand::List => {
            let mut table = Table::new(&["TOPIC", "PARTITIONS", "TOPIC-ID"]);
            for t in metadata(&mut broker, None).await? {
                table.push(vec![
                    topic_name(&t).into(),
                    t.partitions.len().into(),
                    t.topic_id.to_string().into(),
                ]);
            }
            print(output, &[("topics", &table)]);
        }
        TopicsCommand::Describe { names } => {
            let wanted = (!names.is_empty()).then_some(names);
            let topics = metadata(&mut broker, wanted).await?;
            let mut partitions =
                Table::new(&["TOPIC", "PARTITION", "LEADER", "LOG-START", "LOG-END"]);
            let mut configs = Table::new(&["TOPIC", "CONFIG", "VALUE"]);
            for t in &topics {
                let name = topic_name(t);
                let ids: Vec<i32> = t.partitions.iter().map(|p| p.partition_index).collect();
                let earliest = list_offsets(&mut broker, &name, &ids, -2).await?;
                let latest = list_offsets(&mut broker, &name, &ids, -1).await?;
                for p in &t.partitions {
                    partitions.push(vec![
                        name.as_str().into(),
                        p.partition_index.into(),
                        p.leader_id.0.into(),
                        earliest.get(&p.partition_index).copied().into(),
                        latest.get(&p.partition_index).copied().into(),
                    ]);
                }
                for (key, value) in topic_configs(&mut broker, &name).await? {
                    configs.push(vec![name.as_str().into(), key.into(), value.into()]);
                }
            }
            print(
                output,
                &[("partitions", &partitions), ("configs", &configs)],
            );
        }
        TopicsCommand::Alter {
            name,
            partitions,
            configs,
            delete_configs,
        } => {
            if partitions.is_none() && configs.is_empty() && delete_configs.is_empty() {
                bail!("nothing to alter: give --partitions, --config or --delete-config");
            }
            if let Some(count) = partitions {
                let request = CreatePartitionsRequest::default()
                    .with_topics(vec![
                        // No manual assignment: null, as Kafka's admin client
                        // sends it (an empty list asks for none to be added).
                        CreatePartitionsTopic::default()
                            .with_name(TopicName(str_bytes(&name)))
                            .with_count(count)
                            .with_assignments(None),
                    ])
                    .with_timeout_ms(30_000);
                let response: CreatePartitionsResponse =
                    broker.call(ApiKey::CreatePartitions, 3, &request).await?;
                for r in &response.results {
                    check(
                        r.error_code,
                        &format!("growing {name}"),
                        r.error_message.as_ref(),
                    )?;
                }
                eprintln!("{name} now has {count} partitions");
            }
            if !configs.is_empty() || !delete_configs.is_empty() {
                super::configs::alter(
                    &mut broker,
                    TOPIC_RESOURCE,
                    &name,
                    &configs,
                    &delete_configs,
                    &name,
                )
                .await?;
                eprintln!("{name}'s configs altered");
            }
        }
        TopicsCommand::Delete { names } => {
            let request = DeleteTopicsRequest::default()
                .with_topics(
                    names
                        .iter()
                        .map(|n| {
                            DeleteTopicState::default().with_name(Some(TopicName(str_bytes(n))))
                        })
                        .collect(),
                )
                .with_timeout_ms(30_000);
            let response: DeleteTopicsResponse =
                broker.call(ApiKey::DeleteTopics, 6, &request).await?;
            let mut failed = Vec::new();
            for r in &response.responses {
                let name = r.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
                match check(
                    r.error_code,
                    &format!("deleting {name}"),
                    r.error_message.as_ref(),
                ) {
                    Ok(()) => eprintln!("deleted topic {name}"),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            if !failed.is_empty() {
                bail!("{}", failed.join("; "));
            }
        }
    }
    Ok(())
}

/// `KEY=VALUE` pairs.
pub(super) fn parse_configs(configs: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    configs
        .iter()
        .map(|c| {
            c.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .with_context(|| format!("`{c}` is not KEY=VALUE"))
        })
        .collect()
}

fn topic_name(t: &MetadataResponseTopic) -> String {
    t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default()
}

/// Topics (all, or those named, each of which must exist), sorted by name.
async fn metadata(
    broker: &mut Broker,
    names: Option<Vec<String>>,
) -> anyhow::Result<Vec<MetadataResponseTopic>> {
    let request = MetadataRequest::default()
        .with_topics(names.map(|ns| {
            ns.iter()
                .map(|n| MetadataRequestTopic::default().with_name(Some(TopicName(str_bytes(n)))))
                .collect()
        }))
        .with_allow_auto_topic_creation(false);
    let response: MetadataResponse = broker.call(ApiKey::Metadata, 12, &request).await?;
    let mut topics = response.topics;
    for t in &topics {
        check(t.error_code, &format!("topic {}", topic_name(t)), None)?;
    }
    topics.sort_by_key(topic_name);
    Ok(topics)
}

/// Offsets of a topic's partitions at `timestamp` (-2 earliest, -1 latest,
/// or a time in milliseconds); partitions without one are left out.
pub async fn list_offsets(
    broker: &mut Broker,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
) -> anyhow::Result<BTreeMap<i32, i64>> {
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(TopicName(str_bytes(topic)))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|&p| {
                            ListOffsetsPartition::default()
                                .with_partition_index(p)
                                .with_timestamp(timestamp)
                        })
                        .collect(),
                ),
        ]);
    let response: ListOffsetsResponse = broker.call(ApiKey::ListOffsets, 7, &request).await?;
    let mut offsets = BTreeMap::new();
    for t in response.topics {
        for p in t.partitions {
            check(
                p.error_code,
                &format!("offsets of {topic}-{}", p.partition_index),
                None,
            )?;
            if p.offset >= 0 {
                offsets.insert(p.partition_index, p.offset);
            }
        }
    }
    Ok(offsets)
}

/// The configs set on a topic (not defaults), by name.
async fn topic_configs(broker: &mut Broker, topic: &str) -> anyhow::Result<Vec<(String, String)>> {
    let request = DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(TOPIC_RESOURCE)
            .with_resource_name(str_bytes(topic))
            .with_configuration_keys(None),
    ]);
    let response: DescribeConfigsResponse =
        broker.call(ApiKey::DescribeConfigs, 4, &request).await?;
    let mut set = Vec::new();
    for r in response.results {
        check(
            r.error_code,
            &format!("configs of {topic}"),
            r.error_message.as_ref(),
        )?;
        // Config source 1: DYNAMIC_TOPIC_CONFIG, set on the topic.
        for c in r.configs.into_iter().filter(|c| c.config_source == 1) {
            let value = c.value.map(|v| v.to_string()).unwrap_or_default();
            set.push((c.name.to_string(), value));
        }
    }
    set.sort();
    Ok(set)
}
