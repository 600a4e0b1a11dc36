//! The transaction coordinator's APIs (KIP-98, Kafka's TV1): InitProducerId
//! with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn.
//!
//! Every decision is the metastore's (`floe_metastore::txn`), so any agent
//! coordinates any transaction and a client may move between agents between
//! any two requests. What writes (an end's markers, a zombie's fence) is
//! [`crate::write::txn_coordinator`]'s, through this agent's batcher.

use floe_metastore::txn::TxnPhase;
use floe_metastore::{MetaError, ProducerIdentity, Refusal, TopicPartition, ops::AddToTxn};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use floe_protocol::kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use floe_protocol::kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, DescribeTransactionsRequest, DescribeTransactionsResponse,
    EndTxnRequest, EndTxnResponse, InitProducerIdRequest, InitProducerIdResponse,
    ListTransactionsRequest, ListTransactionsResponse, ProducerId,
};

use crate::broker::Broker;
// The agent's clock stamps markers (it decides nothing).
use crate::write::txn_coordinator;

/// No error.
const NONE: i16 = 0;

/// The error Kafka sends for a coordinator's refusal. `fenced_code`: the
/// request's version knows PRODUCER_FENCED (older ones get
/// INVALID_PRODUCER_EPOCH, as `KafkaApis` translates).
pub fn coordinator_error(e: &MetaError, fenced_code: bool) -> ResponseError {
    let MetaError::Refused(refusal) = e else {
        // The metastore did not answer: the client finds its coordinator
        // again and retries.
        return ResponseError::CoordinatorNotAvailable;
    };
    match refusal {
        Refusal::ProducerFenced { .. } if fenced_code => ResponseError::ProducerFenced,
        Refusal::ProducerFenced { .. } | Refusal::InvalidProducerEpoch { .. } => {
            ResponseError::InvalidProducerEpoch
        }
        Refusal::InvalidProducerIdMapping => ResponseError::InvalidProducerIdMapping,
        Refusal::ConcurrentTransactions => ResponseError::ConcurrentTransactions,
        Refusal::InvalidTxnTimeout(_) => ResponseError::InvalidTransactionTimeout,
        Refusal::UnknownTopicOrPartition => ResponseError::UnknownTopicOrPartition,
        Refusal::InvalidTxnState(_) | Refusal::NotInTransaction | Refusal::TxnEnded { .. } => {
            ResponseError::InvalidTxnState
        }
        Refusal::TxnLimit(_) => ResponseError::InvalidRequest,
        // Not a decision about the transaction (a file committed too late,
        // a key used): nothing was decided, the client retries.
        other => {
            tracing::info!(refusal = %other, "transaction request not applied; the client retries");
            ResponseError::CoordinatorNotAvailable
        }
    }
}

/// InitProducerId with a transactional id (`handleInitProducerId`).
pub async fn init_producer_id(
    broker: &Broker,
    req: InitProducerIdRequest,
    id: &str,
    version: i16,
) -> InitProducerIdResponse {
    let answer = |error: i16, p: Option<ProducerIdentity>| {
        InitProducerIdResponse::default()
            .with_error_code(error)
            .with_producer_id(ProducerId(p.map_or(-1, |p| p.producer_id)))
            .with_producer_epoch(p.map_or(-1, |p| p.epoch))
    };
    // As KafkaApis: a producer id comes with an epoch.
    if id.is_empty() || (req.producer_id.0 >= 0 && req.producer_epoch < 0) {
        return answer(ResponseError::InvalidRequest.code(), None);
    }
    let max = broker.config.transaction_max_timeout.as_millis();
    if req.transaction_timeout_ms <= 0 || req.transaction_timeout_ms as u128 > max {
        return answer(ResponseError::InvalidTransactionTimeout.code(), None);
    }
    // v3+: the producer's current identity, for KIP-360's bump.
    let expected = (req.producer_id.0 >= 0).then_some(ProducerIdentity {
        producer_id: req.producer_id.0,
        epoch: req.producer_epoch,
    });
    let fenced_code = version >= 4;
    match txn_coordinator::init_producer(
        broker.meta.as_ref(),
        &broker.batcher,
        id,
        req.transaction_timeout_ms,
        expected,
        broker.world.now_ms(),
        broker.config.transaction_abort_check_interval.as_millis() as i32,
    )
    .await
    {
        Ok(p) => answer(NONE, Some(p)),
        Err(e) => answer(coordinator_error(&e, fenced_code).code(), None),
    }
}

/// AddPartitionsToTxn v0-3 (v4+ are between brokers).
pub async fn add_partitions(
    broker: &Broker,
    req: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    let topics = req.v3_and_below_topics;
    let answer = |code: &dyn Fn(&str, i32) -> i16| add_partitions_answer(&topics, code);
    let asked: usize = topics.iter().map(|t| t.partitions.len()).sum();
    if asked > floe_metastore::txn::MAX_TXN_PARTITIONS {
        return answer(&|_, _| ResponseError::InvalidRequest.code());
    }
    // Every partition must exist, or nothing is added (KafkaApis).
    let mut partitions = std::collections::BTreeSet::new();
    let mut unknown = std::collections::HashSet::new();
    for t in &topics {
        let max = t.partitions.iter().copied().max().unwrap_or(0);
        let info = match broker.topics.get(&t.name.0, max) {
            Some(info) => Some(info),
            None => match broker.meta.topic(&t.name.0).await {
                Ok(info) => info,
                Err(e) => {
                    let error = coordinator_error(&e, false).code();
                    return answer(&|_, _| error);
                }
            },
        };
        for &p in &t.partitions {
            match &info {
                Some(info) if (0..info.partitions).contains(&p) => {
                    partitions.insert(TopicPartition::new(info.id, p));
                }
                _ => {
                    unknown.insert((t.name.0.to_string(), p));
                }
            }
        }
    }
    if !unknown.is_empty() {
        return answer(&|name, p| match unknown.contains(&(name.to_string(), p)) {
            true => ResponseError::UnknownTopicOrPartition.code(),
            false => ResponseError::OperationNotAttempted.code(),
        });
    }
    let add = AddToTxn {
        transactional_id: req.v3_and_below_transactional_id.to_string(),
        producer_id: req.v3_and_below_producer_id.0,
        epoch: req.v3_and_below_producer_epoch,
        partitions: partitions.into_iter().collect(),
        groups: vec![],
    };
    let error = match txn_coordinator::add(broker.meta.as_ref(), &broker.txn_sightings, add).await {
        Ok(()) => NONE,
        Err(e) => coordinator_error(&e, version >= 2).code(),
    };
    answer(&|_, _| error)
}

/// The AddPartitionsToTxn v0-3 answer: every partition asked, with `code`'s
/// error for it (one error decides the whole request, or none does).
pub fn add_partitions_answer(
    topics: &[AddPartitionsToTxnTopic],
    code: &dyn Fn(&str, i32) -> i16,
) -> AddPartitionsToTxnResponse {
    let results = topics
        .iter()
        .map(|t| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(
                    t.partitions
                        .iter()
                        .map(|&p| {
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(p)
                                .with_partition_error_code(code(&t.name.0, p))
                        })
                        .collect(),
                )
        })
        .collect();
    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results)
}

/// AddOffsetsToTxn: the group whose offsets the transaction will commit.
pub async fn add_offsets(
    broker: &Broker,
    req: AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    let add = AddToTxn {
        transactional_id: req.transactional_id.to_string(),
        producer_id: req.producer_id.0,
        epoch: req.producer_epoch,
        partitions: vec![],
        groups: vec![req.group_id.to_string()],
    };
    let error = match txn_coordinator::add(broker.meta.as_ref(), &broker.txn_sightings, add).await {
        Ok(()) => NONE,
        Err(e) => coordinator_error(&e, version >= 2).code(),
    };
    AddOffsetsToTxnResponse::default().with_error_code(error)
}

/// EndTxn: commit or abort, with a marker in every partition of the
/// transaction (`endTransaction`).
pub async fn end_txn(broker: &Broker, req: EndTxnRequest, version: i16) -> EndTxnResponse {
    let id = req.transactional_id.to_string();
    let fenced_code = version >= 2;
    let answer = |error: i16| {
        EndTxnResponse::default()
            .with_error_code(error)
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    let producer = ProducerIdentity {
        producer_id: req.producer_id.0,
        epoch: req.producer_epoch,
    };
    // v5: transactions v2 (KIP-890), an epoch bump per transaction.
    let bumping = version >= 5;
    let ended = txn_coordinator::end(
        broker.meta.as_ref(),
        (&broker.batcher, &broker.txn_sightings),
        &id,
        producer,
        (req.committed, bumping),
        broker.world.now_ms(),
    )
    .await;
    match ended {
        Ok(()) if bumping => {
            // The producer's identity from now on (its next epoch, or a
            // new producer id), as Kafka answers EndTxn v5.
            match txn_coordinator::describe(broker.meta.as_ref(), &id).await {
                Ok(Some(now)) => answer(NONE)
                    .with_producer_id(ProducerId(now.producer_id))
                    .with_producer_epoch(now.epoch),
                // Ended, but its identity unknown: a retry is answered with it.
                _ => answer(ResponseError::CoordinatorNotAvailable.code()),
            }
        }
        Ok(()) => answer(NONE),
        Err(e) => answer(coordinator_error(&e, fenced_code).code()),
    }
}

/// DescribeTransactions v0: each id's state as the coordinator holds it.
pub async fn describe_transactions(
    broker: &Broker,
    req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    use floe_protocol::kafka_protocol::messages::describe_transactions_response::{
        TopicData, TransactionState,
    };
    let ids: Vec<String> = req
        .transactional_ids
        .iter()
        .map(|i| i.to_string())
        .collect();
    let views = broker.meta.describe_txns(ids.clone()).await;
    let mut states = Vec::with_capacity(ids.len());
    for (n, id) in req.transactional_ids.into_iter().enumerate() {
        let state = TransactionState::default().with_transactional_id(id);
        let view = match &views {
            Ok(views) => views.get(n).cloned().flatten(),
            Err(e) => {
                states.push(state.with_error_code(coordinator_error(e, true).code()));
                continue;
            }
        };
        let Some(v) = view else {
            states.push(state.with_error_code(ResponseError::TransactionalIdNotFound.code()));
            continue;
        };
        // Partitions by topic name (a deleted topic's are gone from it).
        let mut topics: std::collections::BTreeMap<String, Vec<i32>> = Default::default();
        for tp in &v.partitions {
            if let Ok(Some(info)) = broker.meta.topic_by_id(tp.topic_id).await {
                topics.entry(info.name).or_default().push(tp.partition);
            }
        }
        states.push(
            state
                .with_transaction_state(floe_protocol::str_bytes(v.phase.kafka_name()))
                .with_transaction_timeout_ms(v.timeout_ms)
                .with_transaction_start_time_ms(v.start_ms)
                .with_producer_id(ProducerId(v.producer_id))
                .with_producer_epoch(v.epoch)
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(name, partitions)| {
                            TopicData::default()
                                .with_topic(floe_protocol::str_bytes(&name).into())
                                .with_partitions(partitions)
                        })
                        .collect(),
                ),
        );
    }
    DescribeTransactionsResponse::default().with_transaction_states(states)
}

/// ListTransactions v0-1: the transactional ids in the states, of the
/// producers and running longer than asked, that this agent coordinates
/// for the client (every agent knows them all; see
/// [`crate::cluster::discovery::coordinates`]).
pub async fn list_transactions(
    broker: &Broker,
    req: ListTransactionsRequest,
    session: &crate::security::authorizer::Session,
    client_id: &str,
) -> ListTransactionsResponse {
    use floe_protocol::kafka_protocol::messages::list_transactions_response::TransactionState;
    let known = [
        TxnPhase::Empty,
        TxnPhase::Ongoing,
        TxnPhase::CompleteCommit,
        TxnPhase::CompleteAbort,
    ];
    let mut phases = Vec::new();
    let mut unknown = Vec::new();
    for filter in &req.state_filters {
        match known.iter().find(|p| p.kafka_name() == filter.as_str()) {
            Some(p) => phases.push(*p),
            None => unknown.push(filter.clone()),
        }
    }
    let response = ListTransactionsResponse::default().with_unknown_state_filters(unknown.clone());
    // Only unknown states asked: nothing can match.
    if phases.is_empty() && !unknown.is_empty() {
        return response;
    }
    let list = floe_metastore::ops::ListTxns {
        phases,
        producer_ids: req.producer_id_filters.iter().map(|p| p.0).collect(),
        min_duration_ms: req.duration_filter,
    };
    // v2 (KIP-1152): ids matching a pattern, whole, as Java's `matches`.
    let pattern = match req
        .transactional_id_pattern
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        None => None,
        Some(pattern) => match regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
            .size_limit(1 << 20)
            .build()
        {
            Ok(re) => Some(re),
            Err(_) => {
                return response.with_error_code(ResponseError::InvalidRegularExpression.code());
            }
        },
    };
    let agents = match crate::cluster::discovery::known_visible(
        &*broker.meta,
        &broker.config,
        &session.listener,
        client_id,
    )
    .await
    {
        Ok(agents) => agents,
        Err(e) => return response.with_error_code(coordinator_error(&e, true).code()),
    };
    let me = broker.config.node_id;
    match broker.meta.list_txns(list).await {
        Ok(views) => response.with_transaction_states(
            views
                .into_iter()
                .filter(|v| {
                    crate::cluster::discovery::coordinates(&agents, me, &v.transactional_id)
                })
                .filter(|v| {
                    pattern
                        .as_ref()
                        .is_none_or(|re| re.is_match(&v.transactional_id))
                })
                .map(|v| {
                    TransactionState::default()
                        .with_transactional_id(floe_protocol::str_bytes(&v.transactional_id).into())
                        .with_producer_id(ProducerId(v.producer_id))
                        .with_transaction_state(floe_protocol::str_bytes(v.phase.kafka_name()))
                })
                .collect(),
        ),
        Err(e) => response.with_error_code(coordinator_error(&e, true).code()),
    }
}
