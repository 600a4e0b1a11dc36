//! Produce: validate each partition's batch (its header inline, its records
//! as Kafka's LogValidator does, off the runtime when it is large or
//! compressed), hand it to the batcher, and answer once the ingest file
//! holding it is committed.
//!
//! Handling is split in two. [`admit`] validates and enqueues the batches; the
//! connection runs it to completion before it reads the next request, so the
//! batches of pipelined requests get offsets in request order, as in Kafka.
//! The future it returns waits for the commit, concurrently with later requests.

use std::sync::Arc;
use std::time::Duration;

use floe_metastore::{BatchKind, Refusal};
use floe_protocol::ResponseError;
use floe_protocol::batch::RecordBatch;
use floe_protocol::kafka_protocol::messages::produce_request::PartitionProduceData;
use floe_protocol::kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, TopicProduceResponse,
};
use floe_protocol::kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};
use futures::future::join_all;
use tokio::time::Instant;

use super::produce_rules::{ProduceRules, Refused};
use crate::broker::{Broker, kafka_error, refusal_error};
use crate::read::topic_cache::TopicCache;
use crate::security::authorizer::Session;
use crate::write::batcher::{AppendError, Committed};
use crate::write::pipelines::Producer;
use floe_protocol::str_bytes;

/// What [`admit`] leaves to wait for: per topic, per partition, a commit or an error.
pub struct Admitted {
    acks: i16,
    /// The request's version (some errors depend on it).
    version: i16,
    /// How long the client waits for its answer (the request's `timeout_ms`).
    timeout: Duration,
    /// When the answer is due: `timeout` after the request was read,
    /// however long admission waited for the produce buffer.
    due: Instant,
    topics: Vec<AdmittedTopic>,
    /// To forget a topic the metastore no longer knows by the id we used.
    topic_cache: Arc<TopicCache>,
}

/// A topic as the request named it (by id from v13), and its partitions'
/// admissions.
struct AdmittedTopic {
    name: TopicName,
    id: uuid::Uuid,
    partitions: Vec<(i32, Admission)>,
}

enum Admission {
    /// With the log-append time stamped on the batch, if the topic uses it.
    Enqueued(Committed, Option<i64>),
    Refused(Refused),
}

/// Produce v13 names topics by id: each is given its name here (before
/// the request is authorized by name), or an empty one if the id is not a
/// topic's (answered `UNKNOWN_TOPIC_ID`). A metastore that cannot say
/// leaves it empty too: the producer retries.
pub async fn name_topics_by_id(broker: &Broker, req: &mut ProduceRequest) {
    for topic in &mut req.topic_data {
        let name = match broker.topics.get_by_id(topic.topic_id, 0) {
            Some(info) => Some(info.name),
            None => broker
                .meta
                .topic_by_id(topic.topic_id)
                .await
                .ok()
                .flatten()
                .map(|info| info.name),
        };
        topic.name = TopicName(str_bytes(&name.unwrap_or_default()));
    }
}

/// Validates every partition's batch and enqueues the good ones, in request order.
pub async fn admit(
    broker: &Broker,
    req: ProduceRequest,
    version: i16,
    session: &Session,
    producer: Producer,
) -> Admitted {
    let timeout = answer_within(req.timeout_ms);
    let due = Instant::now() + timeout;
    let refusal = if !matches!(req.acks, -1..=1) {
        Some((
            ResponseError::InvalidRequiredAcks,
            "acks must be -1, 0 or 1",
        ))
    } else {
        None
    };
    // Records refused one by one are listed from Produce v8 (KIP-467), at
    // most so many for the whole request.
    let mut record_errors_left = match version >= 8 {
        true => floe_protocol::validate::MAX_RECORD_ERRORS,
        false => 0,
    };
    let mut topics = Vec::with_capacity(req.topic_data.len());
    for topic in req.topic_data {
        // From v13 a topic is named by id: its name was looked up before
        // the request was authorized (`handlers::admit`), empty if unknown.
        let unknown_id = version >= 13 && topic.name.0.is_empty();
        let info = match refusal {
            Some((error, why)) => Err((error, why.to_string())),
            None if unknown_id => Err((
                ResponseError::UnknownTopicId,
                format!("no topic of id {}", topic.topic_id),
            )),
            None => broker
                .produce_topic(
                    &topic.name.0,
                    topic
                        .partition_data
                        .iter()
                        .map(|p| p.index)
                        .max()
                        .unwrap_or(0),
                    broker.authorizer.may_create_topic(session, &topic.name.0),
                )
                .await
                .map_err(|e| (kafka_error(&e), e.to_string())),
        };
        // The topic's rules, read from its configs once for all its partitions.
        let info = info.map(|info| {
            let rules = ProduceRules::of(&info.config(), broker.config.message_max_bytes.as_u64());
            (info, rules)
        });
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in topic.partition_data {
            let index = data.index;
            let admission = match &info {
                Err((error, why)) => Admission::Refused((*error, why.clone()).into()),
                Ok((info, rules)) => {
                    let transactional = req.transactional_id.is_some();
                    let admitted = admit_partition(
                        broker,
                        info,
                        rules,
                        data,
                        (req.acks, transactional, record_errors_left),
                        (version, due, producer),
                    )
                    .await;
                    match admitted {
                        Ok((committed, append_time)) => Admission::Enqueued(committed, append_time),
                        Err(refused) => {
                            record_errors_left -= refused.records.len();
                            tracing::debug!(topic = %info.name, partition = index, error = ?refused.error, why = %refused.message, "produce refused");
                            Admission::Refused(refused)
                        }
                    }
                }
            };
            partitions.push((index, admission));
        }
        topics.push(AdmittedTopic {
            name: topic.name,
            id: topic.topic_id,
            partitions,
        });
    }
    Admitted {
        acks: req.acks,
        version,
        timeout,
        due,
        topics,
        topic_cache: broker.topics.clone(),
    }
}

impl Admitted {
    /// Waits for every commit; `None` for `acks=0`, which gets no response.
    ///
    /// acks=1 and acks=all are both answered only after the commit: the object
    /// store's replication is what makes a record durable.
    /// A commit not answered within the request's timeout is answered
    /// `REQUEST_TIMED_OUT`, as Kafka answers a produce whose replication
    /// outlived it: the batch may still be stored, and the producer retries.
    pub async fn respond(self) -> Option<ProduceResponse> {
        let (acks, version) = (self.acks, self.version);
        let (timeout, due) = (self.timeout, self.due);
        let cache = &self.topic_cache;
        let topics = join_all(self.topics.into_iter().map(
            |AdmittedTopic {
                 name,
                 id,
                 partitions,
             }| async move {
                let topic = &name.0;
                let partitions =
                    join_all(partitions.into_iter().map(|(index, admission)| async move {
                        let mut append_time = None;
                        let result = match admission {
                            Admission::Enqueued(committed, stamped) => {
                                append_time = stamped;
                                match tokio::time::timeout_at(due, committed.placed()).await {
                                    Ok(answered) => answered
                                        .map_err(|e| refusal(e, cache, topic, version).into()),
                                    Err(_) => Err(Refused::from((
                                        ResponseError::RequestTimedOut,
                                        format!(
                                            "not committed within {timeout:?}; it may still be"
                                        ),
                                    ))),
                                }
                            }
                            Admission::Refused(refused) => Err(refused),
                        };
                        match result {
                            Ok(placed) => PartitionProduceResponse::default()
                                .with_index(index)
                                .with_base_offset(placed.base_offset)
                                .with_log_start_offset(placed.log_start_offset)
                                .with_log_append_time_ms(append_time.unwrap_or(-1)),
                            Err(refused) => refuse(index, refused),
                        }
                    }))
                    .await;
                TopicProduceResponse::default()
                    .with_name(name)
                    .with_topic_id(id)
                    .with_partition_responses(partitions)
            },
        ))
        .await;
        (acks != 0).then(|| ProduceResponse::default().with_responses(topics))
    }
}

/// The Kafka error for a batch the batcher did not commit.
fn refusal(
    error: AppendError,
    cache: &TopicCache,
    topic: &str,
    version: i16,
) -> (ResponseError, String) {
    match error {
        AppendError::Storage(why) => (ResponseError::KafkaStorageError, why),
        AppendError::Refused(refusal) => {
            if refusal == Refusal::UnknownTopicOrPartition {
                // Deleted, maybe recreated under a new id.
                cache.invalidate(topic);
                tracing::debug!(%topic, "forgot topic {topic}: the metastore refused its id");
            }
            let error = match refusal {
                // KIP-890: a transactional batch for a partition not in an
                // ongoing transaction of its producer. Produce v11+ clients
                // know TRANSACTION_ABORTABLE (they abort and go on).
                Refusal::NotInTransaction if version >= 11 => ResponseError::TransactionAbortable,
                // Kafka answers a fenced transactional producer's batches so.
                Refusal::ProducerFenced { .. } => ResponseError::InvalidProducerEpoch,
                _ => refusal_error(&refusal),
            };
            (error, refusal.to_string())
        }
    }
}

/// The shortest wait a produce gets, whatever its `timeout_ms`: floe answers
/// acks=1 as acks=all, after the commit, which takes a flush interval and a
/// PUT; Kafka answers acks=1 from the leader's log and ignores the timeout.
const MIN_ANSWER_WAIT: Duration = Duration::from_secs(5);

fn answer_within(timeout_ms: i32) -> Duration {
    Duration::from_millis(timeout_ms.max(0) as u64).max(MIN_ANSWER_WAIT)
}

fn refuse(partition: i32, refused: Refused) -> PartitionProduceResponse {
    use floe_protocol::kafka_protocol::messages::produce_response::BatchIndexAndErrorMessage;
    let records = refused
        .records
        .into_iter()
        .map(|(index, message)| {
            BatchIndexAndErrorMessage::default()
                .with_batch_index(index)
                .with_batch_index_error_message(Some(str_bytes(&message)))
        })
        .collect();
    PartitionProduceResponse::default()
        .with_index(partition)
        .with_error_code(refused.error.code())
        .with_base_offset(-1)
        .with_error_message(Some(str_bytes(&refused.message)))
        .with_record_errors(records)
}

/// One partition's batch admitted: checked and enqueued. `(acks,
/// transactional, record_errors)`: the request's acks, whether it names a
/// transactional id, and how many record errors it may still list.
async fn admit_partition(
    broker: &Broker,
    topic: &floe_metastore::TopicInfo,
    rules: &ProduceRules,
    data: PartitionProduceData,
    (acks, transactional, record_errors): (i16, bool, usize),
    (version, due, producer): (i16, Instant, Producer),
) -> Result<(Committed, Option<i64>), Refused> {
    if data.index < 0 || data.index >= topic.partitions {
        return Err((
            ResponseError::UnknownTopicOrPartition,
            format!("no partition {}", data.index),
        )
            .into());
    }
    let records = data.records.unwrap_or_default();
    let mut batches =
        RecordBatch::parse_all(&records).map_err(|e| (e.kafka_error(), e.to_string()))?;
    // Like Kafka: magic v2 produce requests carry exactly one batch per partition.
    if batches.len() != 1 {
        return Err((
            ResponseError::InvalidRecord,
            format!("expected exactly one record batch, got {}", batches.len()),
        )
            .into());
    }
    let batch = batches.remove(0);
    if batch.is_control() {
        return Err((
            ResponseError::InvalidRecord,
            "clients may not produce control batches".to_string(),
        )
            .into());
    }
    // A transactional batch comes with its transactional id (Kafka's
    // `ProduceRequest.validateRecords`), and is sequenced only into a
    // partition of its producer's ongoing transaction (the metastore's check).
    let kind = match (batch.is_transactional(), transactional) {
        // Transactions v2: the produce adds its partition (KIP-890).
        (true, true) if version >= 12 => BatchKind::TransactionalAdding,
        (true, true) => BatchKind::Transactional,
        (true, false) => {
            return Err((
                ResponseError::InvalidRecord,
                "a transactional batch in a request without a transactional id".to_string(),
            )
                .into());
        }
        (false, _) => BatchKind::Plain,
    };
    // The agent's clock, as a Kafka leader uses its own: this stamps data,
    // it decides nothing.
    let now_ms = broker.world.now_ms();
    let batch = rules.apply(batch, now_ms)?;
    let partition = format!("{}-{}", topic.name, data.index);
    let record_rules = rules.for_records(&batch, now_ms, record_errors);
    let batch = check_records(batch, record_rules, partition, due).await?;
    let (bytes, records) = (batch.len() as u64, batch.record_count().max(0) as u64);
    // With the produce buffer full (uploads slower than producers), wait
    // for room no longer than the client waits for its answer: the batch
    // is then not enqueued, and the producer retries it.
    let enqueue = broker
        .batcher
        // An acks=0 producer waits on nothing: it never holds a file open.
        .enqueue(
            topic.id,
            data.index,
            batch,
            (acks == 0, (acks != 0).then_some(producer)),
            kind,
        );
    let committed = tokio::time::timeout_at(due, enqueue)
        .await
        .map_err(|_| {
            (
                ResponseError::RequestTimedOut,
                "the produce buffer stayed full until the request's timeout".to_string(),
            )
        })?
        .map_err(|e| (ResponseError::KafkaStorageError, e.to_string()))?;
    broker.metrics.produced_bytes.inc_by(bytes);
    broker.metrics.topic_produced(&topic.name, bytes, records);
    Ok((committed, rules.log_append_time.then_some(now_ms)))
}

/// Batches this small and uncompressed are walked where they are: their
/// walk costs microseconds, less than a hop to another thread.
const INLINE_WALK_BYTES: usize = 16 * 1024;

/// `batch` with its records checked as Kafka checks them (and rebuilt if
/// they must be: misnumbered, or in another codec than the topic's),
/// off the runtime's threads unless it is small and uncompressed, waiting
/// for a turn no longer than the request's timeout (see
/// [`crate::write::record_work`]).
async fn check_records(
    batch: RecordBatch,
    rules: floe_protocol::validate::RecordRules,
    partition: String,
    due: Instant,
) -> Result<RecordBatch, Refused> {
    let inline = batch.codec() == floe_protocol::batch::Codec::None
        && rules.recompress.is_none()
        && batch.len() <= INLINE_WALK_BYTES;
    if inline {
        return ProduceRules::check_records(batch, &rules, &partition);
    }
    crate::write::record_work::run(due, move || {
        ProduceRules::check_records(batch, &rules, &partition)
    })
    .await
    .map_err(|not_run| match not_run {
        crate::write::record_work::NotRun::TimedOut => Refused::from((
            ResponseError::RequestTimedOut,
            "no turn to check the batch's records before the request's timeout".to_string(),
        )),
        crate::write::record_work::NotRun::Failed => Refused::from((
            ResponseError::UnknownServerError,
            "checking the batch's records failed".to_string(),
        )),
    })?
}
