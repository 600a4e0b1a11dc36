//! OffsetCommit, OffsetFetch and OffsetDelete.

use std::collections::{BTreeMap, HashMap};

use floe_metastore::ops::TxnCommitOffsets;
use floe_metastore::{CommitOffsets, CommittedOffset, OffsetToCommit};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use floe_protocol::kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use floe_protocol::kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use floe_protocol::kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use floe_protocol::kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse, TopicName, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
};

use super::{answer, group_error, meta_error};
use crate::broker::Broker;
use floe_protocol::str_bytes;

/// The offsets a commit's topics ask for, as [`Asked`] by topic: OffsetCommit
/// and TxnOffsetCommit name them alike in types of their own.
macro_rules! asked {
    ($topics:expr) => {
        $topics
            .iter()
            .map(|t| {
                let partitions = t.partitions.iter().map(|p| Asked {
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                });
                (t.name.clone(), partitions.collect())
            })
            .collect()
    };
}

/// OffsetCommit: several commits of one member of one group, written in
/// one metastore command (see [`super::commit_runs`]), each answered on its
/// own. Partitions of unknown topics, or with metadata over Kafka's
/// `offset.metadata.max.bytes`, are refused one by one; the rest are
/// committed together, a later commit's offset for a partition replacing an
/// earlier one's, as one after another.
pub async fn commit_offsets_together(
    broker: &Broker,
    commits: Vec<(OffsetCommitRequest, i16)>,
) -> Vec<OffsetCommitResponse> {
    let Some((first, _)) = commits.first() else {
        return Vec::new();
    };
    if first.group_id.0.is_empty() {
        return commits
            .iter()
            .map(|(req, _)| refuse_all(req, ResponseError::InvalidGroupId))
            .collect();
    }
    let mut offsets: Vec<OffsetToCommit> = Vec::new();
    let mut index: HashMap<(String, i32), usize> = HashMap::new();
    let mut refusals = Vec::with_capacity(commits.len());
    for (req, _) in &commits {
        let (accepted, refused) = sort_offsets(broker, asked!(req.topics)).await;
        for offset in accepted {
            let at = (offset.topic.clone(), offset.partition);
            match index.get(&at) {
                Some(&i) => offsets[i] = offset,
                None => {
                    index.insert(at, offsets.len());
                    offsets.push(offset);
                }
            }
        }
        refusals.push(refused);
    }
    let commit = CommitOffsets {
        group: first.group_id.0.to_string(),
        generation: first.generation_id_or_member_epoch,
        member_id: first.member_id.to_string(),
        instance_id: first.group_instance_id.as_ref().map(|i| i.to_string()),
        offsets,
        now_ms: broker.world.now_ms(),
    };
    let result = answer(broker.meta.commit_offsets(commit).await);
    commits
        .iter()
        .zip(refusals)
        .map(|((req, version), refused)| {
            let result = result.map_err(|e| match e {
                // A group that does not exist: named so from v9 (KIP-848),
                // before as a generation that cannot be.
                ResponseError::GroupIdNotFound if *version < 9 => ResponseError::IllegalGeneration,
                e => e,
            });
            answer_commit(req, &refused, result)
        })
        .collect()
}

/// One commit's answer: its own refusals, else the group's.
fn answer_commit(
    req: &OffsetCommitRequest,
    refused: &HashMap<(TopicName, i32), ResponseError>,
    result: Result<(), ResponseError>,
) -> OffsetCommitResponse {
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let error = match refused.get(&(t.name.clone(), p.partition_index)) {
                        Some(refusal) => refusal.code(),
                        None => result.err().map_or(0, |e| e.code()),
                    };
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error)
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// One partition's offset as a commit asks it.
struct Asked {
    partition: i32,
    offset: i64,
    leader_epoch: i32,
    metadata: Option<String>,
}

/// The offsets to store, and the partitions refused one by one: of unknown
/// topics, or with metadata over Kafka's `offset.metadata.max.bytes`.
async fn sort_offsets(
    broker: &Broker,
    topics: Vec<(TopicName, Vec<Asked>)>,
) -> (
    Vec<OffsetToCommit>,
    HashMap<(TopicName, i32), ResponseError>,
) {
    let mut offsets = Vec::new();
    let mut refused = HashMap::new();
    for (name, asked) in topics {
        let max_partition = asked.iter().map(|p| p.partition).max();
        let partitions = match max_partition {
            Some(max) => broker
                .fetch_topic(&name.0, None, max.max(0))
                .await
                .map(|t| t.partitions),
            None => None,
        };
        for p in asked {
            let metadata_len = p.metadata.as_ref().map_or(0, |m| m.len());
            let refusal = if !partitions.is_some_and(|n| (0..n).contains(&p.partition)) {
                Some(ResponseError::UnknownTopicOrPartition)
            } else if metadata_len > floe_metastore::groups::OFFSET_METADATA_MAX_BYTES {
                Some(ResponseError::OffsetMetadataTooLarge)
            } else {
                None
            };
            match refusal {
                Some(e) => {
                    refused.insert((name.clone(), p.partition), e);
                }
                None => offsets.push(OffsetToCommit {
                    topic: name.0.to_string(),
                    partition: p.partition,
                    offset: p.offset,
                    leader_epoch: p.leader_epoch,
                    metadata: p.metadata,
                }),
            }
        }
    }
    (offsets, refused)
}

/// TxnOffsetCommit v0-3: offsets stored for the group when the producer's
/// transaction commits (the group must have been added with
/// AddOffsetsToTxn). Checked now as the group coordinator would.
pub async fn txn_commit_offsets(
    broker: &Broker,
    req: TxnOffsetCommitRequest,
    version: i16,
) -> TxnOffsetCommitResponse {
    let (offsets, refused) = sort_offsets(broker, asked!(req.topics)).await;
    let nothing_to_commit = offsets.is_empty();
    // Transactions v2 (v5, KIP-890): the commit adds its group to the
    // transaction itself (the producer sends no AddOffsetsToTxn).
    let added = match version >= 5 && !nothing_to_commit {
        false => Ok(()),
        true => {
            let add = floe_metastore::ops::AddToTxn {
                transactional_id: req.transactional_id.to_string(),
                producer_id: req.producer_id.0,
                epoch: req.producer_epoch,
                partitions: vec![],
                groups: vec![req.group_id.0.to_string()],
            };
            let sightings = &broker.txn_sightings;
            crate::write::txn_coordinator::add(broker.meta.as_ref(), sightings, add).await
        }
    };
    let commit = TxnCommitOffsets {
        transactional_id: req.transactional_id.to_string(),
        producer_id: req.producer_id.0,
        epoch: req.producer_epoch,
        commit: CommitOffsets {
            group: req.group_id.0.to_string(),
            generation: req.generation_id,
            member_id: req.member_id.to_string(),
            instance_id: req.group_instance_id.as_ref().map(|i| i.to_string()),
            offsets,
            now_ms: broker.world.now_ms(),
        },
    };
    // Nothing left to commit (every partition refused): nothing is asked.
    let result = match (nothing_to_commit, added) {
        (true, _) => Ok(Ok(())),
        (false, Err(e)) => Err(e),
        (false, Ok(())) => broker.meta.txn_commit_offsets(commit).await,
    };
    let result = match result {
        Ok(Ok(())) => Ok(()),
        // As OffsetCommit before v9: a group that cannot have this
        // generation; a KIP-848 member's stale epoch is told so too
        // (`validateTransactionalOffsetCommit`).
        Ok(Err(
            floe_metastore::GroupError::GroupIdNotFound
            | floe_metastore::GroupError::StaleMemberEpoch,
        )) => Err(ResponseError::IllegalGeneration),
        Ok(Err(e)) => Err(group_error(e)),
        // The group coordinator's answer to a fenced transactional producer.
        Err(floe_metastore::MetaError::Refused(floe_metastore::Refusal::ProducerFenced {
            ..
        })) => Err(ResponseError::InvalidProducerEpoch),
        Err(e) => Err(crate::handlers::txn::coordinator_error(&e, false)),
    };
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let error = match refused.get(&(t.name.clone(), p.partition_index)) {
                        Some(refusal) => refusal.code(),
                        None => result.err().map_or(0, |e| e.code()),
                    };
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error)
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

/// Every partition of the request answered with one error.
pub(super) fn refuse_all(req: &OffsetCommitRequest, e: ResponseError) -> OffsetCommitResponse {
    let topics = req
        .topics
        .iter()
        .map(|t| {
            OffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(e.code())
                        })
                        .collect(),
                )
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// One committed offset as OffsetFetch reports it: Kafka's -1s when none.
struct Row {
    partition: i32,
    offset: i64,
    leader_epoch: i32,
    metadata: String,
    /// UNSTABLE_OFFSET_COMMIT for a partition a transaction holds offsets
    /// of, when the client asked for stable offsets.
    error: i16,
}

/// A group's committed offsets by topic, for the partitions asked (every
/// one committed when `None`).
async fn committed(
    broker: &Broker,
    group: &str,
    wanted: Option<Vec<(TopicName, Vec<i32>)>>,
    require_stable: bool,
) -> Result<Vec<(TopicName, Vec<Row>)>, ResponseError> {
    // KIP-447: a read_committed consumer must not start from an offset a
    // transaction is about to replace; it retries until the end.
    let unstable: std::collections::BTreeSet<(String, i32)> = match require_stable {
        true => broker
            .meta
            .pending_txn_offsets(group)
            .await
            .map_err(meta_error)?
            .into_iter()
            .collect(),
        false => Default::default(),
    };
    let partitions = wanted.map(|topics| {
        topics
            .into_iter()
            .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.0.to_string(), p)))
            .collect()
    });
    let found = broker
        .meta
        .group_offsets(group, partitions)
        .await
        .map_err(meta_error)?;
    let mut by_topic: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    for ((topic, partition), offset) in found {
        if unstable.contains(&(topic.clone(), partition)) {
            let row = Row {
                partition,
                offset: -1,
                leader_epoch: -1,
                metadata: String::new(),
                error: ResponseError::UnstableOffsetCommit.code(),
            };
            by_topic.entry(topic).or_default().push(row);
            continue;
        }
        let row = match offset {
            Some(CommittedOffset {
                offset,
                leader_epoch,
                metadata,
                ..
            }) => Row {
                partition,
                offset,
                leader_epoch,
                metadata: metadata.unwrap_or_default(),
                error: 0,
            },
            None => Row {
                partition,
                offset: -1,
                leader_epoch: -1,
                metadata: String::new(),
                error: 0,
            },
        };
        by_topic.entry(topic).or_default().push(row);
    }
    Ok(by_topic
        .into_iter()
        .map(|(t, rows)| (TopicName(str_bytes(&t)), rows))
        .collect())
}

pub async fn fetch_offsets(
    broker: &Broker,
    req: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    if version >= 8 {
        let mut groups = Vec::with_capacity(req.groups.len());
        for group in req.groups {
            let wanted = group.topics.map(|ts| {
                ts.into_iter()
                    .map(|t| (t.name, t.partition_indexes))
                    .collect()
            });
            let response =
                OffsetFetchResponseGroup::default().with_group_id(group.group_id.clone());
            let stable = req.require_stable;
            groups.push(
                match committed(broker, &group.group_id.0, wanted, stable).await {
                    Ok(topics) => response.with_topics(
                        topics
                            .into_iter()
                            .map(|(name, rows)| {
                                OffsetFetchResponseTopics::default()
                                    .with_name(name)
                                    .with_partitions(
                                        rows.into_iter()
                                            .map(|row| {
                                                OffsetFetchResponsePartitions::default()
                                                    .with_error_code(row.error)
                                                    .with_partition_index(row.partition)
                                                    .with_committed_offset(row.offset)
                                                    .with_committed_leader_epoch(row.leader_epoch)
                                                    .with_metadata(Some(str_bytes(&row.metadata)))
                                            })
                                            .collect(),
                                    )
                            })
                            .collect(),
                    ),
                    Err(e) => response.with_error_code(e.code()),
                },
            );
        }
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let wanted = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name, t.partition_indexes))
            .collect()
    });
    let stable = version >= 7 && req.require_stable;
    match committed(broker, &req.group_id.0, wanted, stable).await {
        Ok(topics) => OffsetFetchResponse::default().with_topics(
            topics
                .into_iter()
                .map(|(name, rows)| {
                    OffsetFetchResponseTopic::default()
                        .with_name(name)
                        .with_partitions(
                            rows.into_iter()
                                .map(|row| {
                                    OffsetFetchResponsePartition::default()
                                        .with_error_code(row.error)
                                        .with_partition_index(row.partition)
                                        .with_committed_offset(row.offset)
                                        .with_committed_leader_epoch(row.leader_epoch)
                                        .with_metadata(Some(str_bytes(&row.metadata)))
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
        Err(e) => OffsetFetchResponse::default().with_error_code(e.code()),
    }
}

/// OffsetDelete (KIP-496): offsets of topics the group does not subscribe to.
pub async fn delete_offsets(broker: &Broker, req: OffsetDeleteRequest) -> OffsetDeleteResponse {
    let partitions: Vec<(String, i32)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index))
        })
        .collect();
    let results = match answer(
        broker
            .meta
            .delete_offsets(&req.group_id.0, partitions.clone())
            .await,
    ) {
        Ok(results) => results,
        Err(e) => return OffsetDeleteResponse::default().with_error_code(e.code()),
    };
    let mut results = results.into_iter();
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let error = results
                        .next()
                        .and_then(Result::err)
                        .map_or(0, |e| group_error(e).code());
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error)
                })
                .collect();
            OffsetDeleteResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}
