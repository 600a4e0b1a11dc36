//! DescribeLogDirs and DescribeProducers: what a partition holds and which
//! idempotent producers write to it, from the metastore (the partitions'
//! one copy of that state).
//!
//! A floe agent has no log directories: every partition lives in the
//! object store. DescribeLogDirs reports that store as the one "log dir"
//! (its URL without its query, which may name an endpoint), with each
//! partition's bytes held, and volume sizes unknown (-1), as Kafka reports
//! a volume it cannot measure.
//!
//! Both answer only for the partitions the agent leads for the client (as
//! Metadata told it: all, or none), as a Kafka broker answers only for its
//! replicas: a tool that asks every broker and adds up their sizes counts
//! each partition once.

use std::collections::{BTreeMap, BTreeSet};

use floe_metastore::{PartitionState, TopicInfo, TopicPartition};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use floe_protocol::kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use floe_protocol::kafka_protocol::messages::{
    DescribeLogDirsRequest, DescribeLogDirsResponse, DescribeProducersRequest,
    DescribeProducersResponse, ProducerId, TopicName,
};

use crate::broker::{Broker, kafka_error};
use floe_protocol::str_bytes;

/// Partitions asked of the metastore in one request.
const PARTITIONS_PER_REQUEST: usize = 10_000;

/// Kafka's "unknown" for a volume's total and usable bytes.
const UNKNOWN_VOLUME_BYTES: i64 = -1;

/// Each partition's state, asked in bounded requests; `Err` if the
/// metastore could not answer.
async fn states(
    broker: &Broker,
    partitions: &[TopicPartition],
    with_producers: bool,
) -> Result<Vec<Option<PartitionState>>, ResponseError> {
    let mut out = Vec::with_capacity(partitions.len());
    for chunk in partitions.chunks(PARTITIONS_PER_REQUEST) {
        let answer = broker
            .meta
            .partition_states(chunk.to_vec(), with_producers)
            .await
            .map_err(|e| kafka_error(&e))?;
        out.extend(answer);
    }
    Ok(out)
}

/// The object store's URL as a log dir's name: scheme, bucket and prefix.
pub(crate) fn log_dir(broker: &Broker) -> String {
    let url = &broker.config.object_store;
    url.split('?').next().unwrap_or(url).to_string()
}

pub async fn describe_log_dirs(
    broker: &Broker,
    req: DescribeLogDirsRequest,
    leads: bool,
) -> DescribeLogDirsResponse {
    let dir = DescribeLogDirsResult::default()
        .with_log_dir(str_bytes(&log_dir(broker)))
        .with_total_bytes(UNKNOWN_VOLUME_BYTES)
        .with_usable_bytes(UNKNOWN_VOLUME_BYTES);
    // As Kafka reports a log dir it cannot read: the dir with the error
    // (every version), and the request's error (v3+).
    let offline = |dir: DescribeLogDirsResult, e: ResponseError| {
        tracing::warn!(error = ?e, "DescribeLogDirs: the metastore did not answer");
        DescribeLogDirsResponse::default()
            .with_error_code(e.code())
            .with_results(vec![
                dir.with_error_code(ResponseError::KafkaStorageError.code()),
            ])
    };
    if !leads {
        return DescribeLogDirsResponse::default().with_results(vec![dir]);
    }
    // The topics asked for (all when null), each once with the partitions
    // that exist; Kafka leaves out partitions it does not host.
    let mut wanted: BTreeMap<String, (TopicInfo, BTreeSet<i32>)> = BTreeMap::new();
    match req.topics {
        None => match broker.meta.topics().await {
            Ok(all) => {
                for t in all {
                    let partitions = (0..t.partitions).collect();
                    wanted.insert(t.name.clone(), (t, partitions));
                }
            }
            Err(e) => return offline(dir, kafka_error(&e)),
        },
        Some(topics) => {
            for t in topics {
                let name = t.topic.0.to_string();
                if !wanted.contains_key(&name) {
                    match broker.meta.topic(&name).await {
                        Ok(Some(info)) => {
                            wanted.insert(name.clone(), (info, BTreeSet::new()));
                        }
                        Ok(None) => continue,
                        Err(e) => return offline(dir, kafka_error(&e)),
                    }
                }
                let (info, partitions) = wanted.get_mut(&name).expect("inserted above");
                partitions.extend(
                    t.partitions
                        .into_iter()
                        .filter(|p| (0..info.partitions).contains(p)),
                );
            }
        }
    }
    let asked: Vec<TopicPartition> = wanted
        .values()
        .flat_map(|(t, ps)| ps.iter().map(|&p| TopicPartition::new(t.id, p)))
        .collect();
    let states = match states(broker, &asked, false).await {
        Ok(states) => states,
        Err(e) => return offline(dir, e),
    };
    let mut states = states.into_iter();
    let mut topics = Vec::with_capacity(wanted.len());
    for (name, (_, partitions)) in wanted {
        let partitions: Vec<_> = partitions
            .into_iter()
            .zip(states.by_ref())
            .filter_map(|(p, state)| {
                let state = state?;
                Some(
                    DescribeLogDirsPartition::default()
                        .with_partition_index(p)
                        .with_partition_size(state.size_bytes.min(i64::MAX as u64) as i64)
                        .with_offset_lag(0),
                )
            })
            .collect();
        if !partitions.is_empty() {
            topics.push(
                DescribeLogDirsTopic::default()
                    .with_name(TopicName(str_bytes(&name)))
                    .with_partitions(partitions),
            );
        }
    }
    DescribeLogDirsResponse::default().with_results(vec![dir.with_topics(topics)])
}

/// DescribeProducers: each partition's idempotent producers, as Kafka's
/// `ProducerStateManager` reports its active producers. floe keeps no
/// transactions yet, so none has a coordinator epoch or an open
/// transaction (-1); the last timestamp is the metastore's time of the
/// producer's last append to the partition.
pub async fn describe_producers(
    broker: &Broker,
    req: DescribeProducersRequest,
    leads: bool,
) -> DescribeProducersResponse {
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let refuse = |p: i32, e: ResponseError| {
            PartitionResponse::default()
                .with_partition_index(p)
                .with_error_code(e.code())
        };
        if !leads {
            // As a Kafka broker that is not the partitions' leader.
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&p| refuse(p, ResponseError::NotLeaderOrFollower))
                .collect();
            topics.push(
                TopicResponse::default()
                    .with_name(t.name)
                    .with_partitions(partitions),
            );
            continue;
        }
        let info = broker.meta.topic(&t.name.0).await;
        let partitions = match info {
            Ok(Some(info)) => {
                let asked: Vec<TopicPartition> = t
                    .partition_indexes
                    .iter()
                    .map(|&p| TopicPartition::new(info.id, p))
                    .collect();
                match states(broker, &asked, true).await {
                    Ok(states) => t
                        .partition_indexes
                        .iter()
                        .zip(states)
                        .map(|(&p, state)| match state {
                            None => refuse(p, ResponseError::UnknownTopicOrPartition),
                            Some(state) => PartitionResponse::default()
                                .with_partition_index(p)
                                .with_active_producers(
                                    state.producers.iter().map(producer).collect(),
                                ),
                        })
                        .collect(),
                    Err(e) => t.partition_indexes.iter().map(|&p| refuse(p, e)).collect(),
                }
            }
            Ok(None) => {
                let error = if floe_metastore::state::validate_topic_name(&t.name.0).is_err() {
                    ResponseError::InvalidTopicException
                } else {
                    ResponseError::UnknownTopicOrPartition
                };
                t.partition_indexes
                    .iter()
                    .map(|&p| refuse(p, error))
                    .collect()
            }
            Err(e) => t
                .partition_indexes
                .iter()
                .map(|&p| refuse(p, kafka_error(&e)))
                .collect(),
        };
        topics.push(
            TopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions),
        );
    }
    DescribeProducersResponse::default().with_topics(topics)
}

fn producer(p: &floe_metastore::ProducerState) -> ProducerState {
    ProducerState::default()
        .with_producer_id(ProducerId(p.producer_id))
        .with_producer_epoch(p.epoch as i32)
        .with_last_sequence(p.last_sequence)
        .with_last_timestamp(p.last_append_ms)
        .with_coordinator_epoch(-1)
        .with_current_txn_start_offset(-1)
}
