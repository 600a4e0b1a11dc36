//! Topics' data (READ to fetch, WRITE to produce, DESCRIBE to list
//! offsets) and their metadata (DESCRIBE, CREATE, DELETE, ALTER).

use std::collections::BTreeSet;

use super::*;

/// The operations Metadata reports for a topic when asked (Kafka's).
const TOPIC_OPERATIONS: [i8; 8] = [
    op::READ,
    op::WRITE,
    op::CREATE,
    op::DELETE,
    op::ALTER,
    op::DESCRIBE,
    op::DESCRIBE_CONFIGS,
    op::ALTER_CONFIGS,
];

/// WRITE on each topic; a transactional produce needs WRITE on its
/// transactional id too, or nothing of it is written (`handleProduceRequest`).
pub(super) fn produce(who: &Who, mut req: ProduceRequest, version: i16) -> Gate {
    use produce_response::*;
    let denied_partition = |index| {
        PartitionProduceResponse::default()
            .with_index(index)
            .with_base_offset(-1)
            .with_log_append_time_ms(-1)
            .with_log_start_offset(-1)
    };
    if let Some(id) = &req.transactional_id
        && !who.transactional_id(op::WRITE, id)
    {
        if req.acks == 0 {
            return Gate::Close;
        }
        let topics = req.topic_data.iter().map(|t| {
            let parts = t
                .partition_data
                .iter()
                .map(|p| denied_partition(p.index).with_error_code(TXN_DENIED));
            TopicProduceResponse::default()
                .with_name(t.name.clone())
                .with_topic_id(t.topic_id)
                .with_partition_responses(parts.collect())
        });
        return Gate::Answer(ResponseKind::Produce(
            ProduceResponse::default().with_responses(topics.collect()),
        ));
    }
    // An unknown topic id (v13, its name left empty) is the handler's to
    // answer.
    let denied = take_denied(&mut req.topic_data, |t| {
        (version >= 13 && t.name.is_empty()) || who.topic(op::WRITE, &t.name)
    });
    let patch = patch!(Produce, |r| {
        for t in denied {
            let parts = t
                .partition_data
                .iter()
                .map(|p| denied_partition(p.index).with_error_code(TOPIC_DENIED));
            r.responses.push(
                TopicProduceResponse::default()
                    .with_name(t.name)
                    .with_topic_id(t.topic_id)
                    .with_partition_responses(parts.collect()),
            );
        }
    });
    Gate::Handle(RequestKind::Produce(req), patch)
}

/// READ on each topic, named or (v13+) by id.
pub(super) async fn fetch(who: &Who, broker: &Broker, mut req: FetchRequest, version: i16) -> Gate {
    let mut denied = Vec::new();
    let mut kept = Vec::with_capacity(req.topics.len());
    for t in std::mem::take(&mut req.topics) {
        let name = match version >= 13 {
            true => match name_of(broker, t.topic_id).await {
                // An unknown id is the handler's to answer.
                Ok(None) => {
                    kept.push(t);
                    continue;
                }
                Ok(Some(name)) => name,
                // Not known to be allowed: denied.
                Err(()) => {
                    denied.push(t);
                    continue;
                }
            },
            false => t.topic.to_string(),
        };
        match who.topic(op::READ, &name) {
            true => kept.push(t),
            false => denied.push(t),
        }
    }
    req.topics = kept;
    let patch = patch!(Fetch, |r| {
        use fetch_response::*;
        for t in denied {
            let parts = t.partitions.iter().map(|p| {
                PartitionData::default()
                    .with_partition_index(p.partition)
                    .with_error_code(TOPIC_DENIED)
                    .with_high_watermark(-1)
                    .with_last_stable_offset(-1)
                    .with_log_start_offset(-1)
            });
            r.responses.push(
                FetchableTopicResponse::default()
                    .with_topic(t.topic)
                    .with_topic_id(t.topic_id)
                    .with_partitions(parts.collect()),
            );
        }
    });
    Gate::Handle(RequestKind::Fetch(req), patch)
}

/// DESCRIBE on each topic, decided on the answer.
pub(super) fn list_offsets(who: &Who, req: ListOffsetsRequest) -> Gate {
    let who = who.clone();
    let patch = patch!(ListOffsets, |r| {
        for t in &mut r.topics {
            if !who.topic(op::DESCRIBE, &t.name) {
                for p in &mut t.partitions {
                    p.error_code = TOPIC_DENIED;
                    p.offset = -1;
                    p.timestamp = -1;
                }
            }
        }
    });
    Gate::Handle(RequestKind::ListOffsets(req), patch)
}

/// DESCRIBE on each topic, decided on the answer.
pub(super) fn offset_for_leader_epoch(who: &Who, req: OffsetForLeaderEpochRequest) -> Gate {
    let who = who.clone();
    let patch = patch!(OffsetForLeaderEpoch, |r| {
        for t in &mut r.topics {
            if !who.topic(op::DESCRIBE, &t.topic) {
                for p in &mut t.partitions {
                    p.error_code = TOPIC_DENIED;
                    p.end_offset = -1;
                    p.leader_epoch = -1;
                }
            }
        }
    });
    Gate::Handle(RequestKind::OffsetForLeaderEpoch(req), patch)
}

/// READ on each topic, decided on the answer.
pub(super) fn describe_producers(who: &Who, req: DescribeProducersRequest) -> Gate {
    let who = who.clone();
    let patch = patch!(DescribeProducers, |r| {
        for t in &mut r.topics {
            if !who.topic(op::READ, &t.name) {
                for p in &mut t.partitions {
                    p.error_code = TOPIC_DENIED;
                    p.active_producers.clear();
                }
            }
        }
    });
    Gate::Handle(RequestKind::DescribeProducers(req), patch)
}

/// DESCRIBE on each topic: a topic asked by name is answered denied, one
/// asked by id is not named, one listed is left out. Auto-creation is the
/// handler's to decide, topic by topic (`Authorizer::may_create_topic`).
pub(super) fn metadata(who: &Who, req: MetadataRequest, version: i16) -> Gate {
    let listing_all = match &req.topics {
        None => true,
        // v0 asks for all topics with an empty list.
        Some(topics) => version == 0 && topics.is_empty(),
    };
    let named: BTreeSet<String> = req
        .topics
        .iter()
        .flatten()
        .filter_map(|t| t.name.as_ref().map(|n| n.to_string()))
        .collect();
    let with_topic_ops = req.include_topic_authorized_operations;
    let with_cluster_ops = req.include_cluster_authorized_operations;
    let who = who.clone();
    let patch = patch!(Metadata, |r| {
        r.topics.retain_mut(|t| {
            let Some(name) = t.name.as_ref().map(|n| n.to_string()) else {
                return true;
            };
            if !who.topic(op::DESCRIBE, &name) {
                let by_name = named.contains(&name);
                *t = metadata_response::MetadataResponseTopic::default()
                    .with_name(by_name.then(|| t.name.take()).flatten())
                    .with_topic_id(if by_name {
                        Default::default()
                    } else {
                        t.topic_id
                    })
                    .with_error_code(TOPIC_DENIED);
                return !listing_all;
            }
            if with_topic_ops {
                t.topic_authorized_operations = who.operations(rt::TOPIC, &name, &TOPIC_OPERATIONS);
            }
            true
        });
        if with_cluster_ops {
            r.cluster_authorized_operations = cluster::operations(&who);
        }
    });
    Gate::Handle(RequestKind::Metadata(req), patch)
}

/// DESCRIBE on each topic: asked by name, told; listed, unseen.
pub(super) fn describe_topic_partitions(who: &Who, req: DescribeTopicPartitionsRequest) -> Gate {
    let named: BTreeSet<String> = req.topics.iter().map(|t| t.name.to_string()).collect();
    let who = who.clone();
    let patch = patch!(DescribeTopicPartitions, |r| {
        r.topics.retain_mut(|t| {
            let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
            if who.topic(op::DESCRIBE, &name) {
                return true;
            }
            t.error_code = TOPIC_DENIED;
            t.partitions.clear();
            t.topic_id = Default::default();
            named.contains(&name)
        });
    });
    Gate::Handle(RequestKind::DescribeTopicPartitions(req), patch)
}

/// CREATE on the cluster, or on each topic.
pub(super) fn create_topics(who: &Who, mut req: CreateTopicsRequest) -> Gate {
    let denied = match who.cluster(op::CREATE) {
        true => Vec::new(),
        false => take_denied(&mut req.topics, |t| who.topic(op::CREATE, &t.name)),
    };
    let patch = patch!(CreateTopics, |r| {
        for t in denied {
            r.topics.push(
                create_topics_response::CreatableTopicResult::default()
                    .with_name(t.name)
                    .with_error_code(TOPIC_DENIED)
                    .with_num_partitions(-1)
                    .with_replication_factor(-1),
            );
        }
    });
    Gate::Handle(RequestKind::CreateTopics(req), patch)
}

/// DELETE on each topic, named or by id.
pub(super) async fn delete_topics(
    who: &Who,
    broker: &Broker,
    mut req: DeleteTopicsRequest,
) -> Gate {
    let denied_names = take_denied(&mut req.topic_names, |n| who.topic(op::DELETE, n));
    let mut denied = Vec::new();
    let mut kept = Vec::new();
    for t in std::mem::take(&mut req.topics) {
        let name = match &t.name {
            Some(n) => Ok(Some(n.to_string())),
            None => name_of(broker, t.topic_id).await,
        };
        match name {
            Ok(Some(n)) if !who.topic(op::DELETE, &n) => denied.push(t),
            // An unknown id is the handler's to answer.
            Ok(_) => kept.push(t),
            Err(()) => denied.push(t),
        }
    }
    req.topics = kept;
    let patch = patch!(DeleteTopics, |r| {
        use delete_topics_response::DeletableTopicResult;
        for name in denied_names {
            r.responses.push(
                DeletableTopicResult::default()
                    .with_name(Some(name))
                    .with_error_code(TOPIC_DENIED),
            );
        }
        for t in denied {
            r.responses.push(
                DeletableTopicResult::default()
                    .with_name(t.name)
                    .with_topic_id(t.topic_id)
                    .with_error_code(TOPIC_DENIED),
            );
        }
    });
    Gate::Handle(RequestKind::DeleteTopics(req), patch)
}

/// ALTER on each topic.
pub(super) fn create_partitions(who: &Who, mut req: CreatePartitionsRequest) -> Gate {
    let denied = take_denied(&mut req.topics, |t| who.topic(op::ALTER, &t.name));
    let patch = patch!(CreatePartitions, |r| {
        for t in denied {
            r.results.push(
                create_partitions_response::CreatePartitionsTopicResult::default()
                    .with_name(t.name)
                    .with_error_code(TOPIC_DENIED),
            );
        }
    });
    Gate::Handle(RequestKind::CreatePartitions(req), patch)
}

/// DELETE on each topic.
pub(super) fn delete_records(who: &Who, mut req: DeleteRecordsRequest) -> Gate {
    let denied = take_denied(&mut req.topics, |t| who.topic(op::DELETE, &t.name));
    let patch = patch!(DeleteRecords, |r| {
        use delete_records_response::*;
        for t in denied {
            let parts = t.partitions.iter().map(|p| {
                DeleteRecordsPartitionResult::default()
                    .with_partition_index(p.partition_index)
                    .with_low_watermark(-1)
                    .with_error_code(TOPIC_DENIED)
            });
            r.topics.push(
                DeleteRecordsTopicResult::default()
                    .with_name(t.name)
                    .with_partitions(parts.collect()),
            );
        }
    });
    Gate::Handle(RequestKind::DeleteRecords(req), patch)
}
