//! Fetch: find the extents holding each requested offset, read them through the
//! cache, patch base offsets and return the raw batches. An empty fetch waits
//! for new commits until `min_bytes` arrive or `max_wait_ms` passes (see
//! [`crate::read::watermarks`]).

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use floe_metastore::{MetaError, Refusal, TopicId, TopicInfo, TopicPartition, TxnReadPlan};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use floe_protocol::kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use futures::future::join_all;
use tokio::time::Instant;

use crate::broker::{Broker, kafka_error};
use crate::handlers::reads::{charge, read_extents};
use crate::limits::budget::{Held, Turn};
use crate::read::extent_cache::Moment;
use floe_protocol::batch::{last_offset_of, skip_batches_before, whole_batches_within};

/// Longest a fetch may wait, whatever the client asks.
const MAX_WAIT_CAP: Duration = Duration::from_secs(30);

struct Wanted {
    topic: Option<TopicInfo>,
    /// As the client named the topic (name before v13, id from v13).
    name: TopicName,
    id: uuid::Uuid,
    partitions: Vec<(i32, i64, i32)>,
}

/// The response, and the bytes of the response budget it holds until the
/// connection has written it.
pub async fn handle(
    broker: &Broker,
    req: FetchRequest,
    version: i16,
    turn: &Turn,
) -> (FetchResponse, Option<Held>) {
    // What it reports is at least what was acknowledged before now.
    let began = Moment::now();
    let by_id = version >= 13;
    let mut wanted = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let max_partition = t.partitions.iter().map(|p| p.partition).max().unwrap_or(0);
        let id = by_id.then_some(t.topic_id);
        let topic = broker.fetch_topic(&t.topic.0, id, max_partition).await;
        wanted.push(Wanted {
            topic,
            name: t.topic,
            id: t.topic_id,
            partitions: t
                .partitions
                .iter()
                .map(|p| (p.partition, p.fetch_offset, p.partition_max_bytes))
                .collect(),
        });
    }

    let wait = Duration::from_millis(req.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP);
    let deadline = Instant::now() + wait;
    let min_bytes = req.min_bytes.max(0) as usize;
    let cap = broker.config.max_fetch_bytes.as_u64().min(i32::MAX as u64) as i32;
    let max_bytes = if req.max_bytes <= 0 {
        cap
    } else {
        req.max_bytes.min(cap)
    } as usize;
    // read_committed (KIP-98): records only below the last stable offset,
    // with the aborted transactions among them for the client to drop.
    let committed = req.isolation_level == 1;
    loop {
        let (responses, bytes, seen, held) = read_all(
            broker, &wanted, max_bytes, by_id, committed, began, deadline, turn,
        )
        .await;
        if bytes >= min_bytes.max(1) || Instant::now() >= deadline {
            count_fetched(broker, &wanted, &responses, bytes);
            return (FetchResponse::default().with_responses(responses), held);
        }
        // Commits through any agent, this one's at once (its commits trigger
        // a poll), wake the wait when one of its partitions grows; the poll
        // brings the new extents into the cache the next pass plans from.
        // At the deadline with nothing new, the empty answer just read stands.
        if !broker.watermarks.wait_for_growth(&seen, deadline).await {
            count_fetched(broker, &wanted, &responses, bytes);
            return (FetchResponse::default().with_responses(responses), held);
        }
    }
}

/// Counts the bytes answered, in all and by topic (responses come in the
/// order of the topics wanted).
fn count_fetched(
    broker: &Broker,
    wanted: &[Wanted],
    responses: &[FetchableTopicResponse],
    bytes: usize,
) {
    broker.metrics.fetched_bytes.inc_by(bytes as u64);
    for (want, response) in wanted.iter().zip(responses) {
        let Some(topic) = &want.topic else { continue };
        let bytes: usize = response
            .partitions
            .iter()
            .filter_map(|p| p.records.as_ref())
            .map(|r| r.len())
            .sum();
        if bytes > 0 {
            broker.metrics.topic_fetched(&topic.name, bytes as u64);
        }
    }
}

/// Plans every partition in request order (the byte budget is shared, so
/// this is sequential but touches only the metastore), then reads all the
/// planned extents concurrently: a cold fetch of many partitions costs one
/// object-store round trip, not one per partition. Last, in request order
/// again, each partition's batches are cut at a batch boundary to what is
/// left of `max_bytes` and to its own `partition_max_bytes`.
///
/// KIP-74: only the first batch of the first non-empty partition may exceed
/// the limits (so a batch larger than them still makes progress). A client
/// such as librdkafka refuses a response larger than it asked for and
/// retries the same fetch forever.
///
/// The planned bytes are taken from the agent's response budget before any
/// is read, waiting for them until `deadline`; without them by then, the
/// partitions are answered with their offsets and no records.
///
/// Plans are as current as the metastore when the fetch `began`: cached
/// views not confirmed since are confirmed first (see
/// [`crate::read::extent_cache`]).
#[allow(clippy::too_many_arguments)]
async fn read_all(
    broker: &Broker,
    wanted: &[Wanted],
    max_bytes: usize,
    by_id: bool,
    committed: bool,
    began: Moment,
    deadline: Instant,
    turn: &Turn,
) -> (
    Vec<FetchableTopicResponse>,
    usize,
    Vec<(TopicId, i32, i64)>,
    Option<Held>,
) {
    // Planning sees extent sizes, which bound the bytes read from above (an
    // extent may start before the fetch offset), so a partition the budget
    // cannot reach is not read at all.
    let mut planned = 0usize;
    let mut seen = Vec::new();
    let mut plans = Vec::with_capacity(wanted.len());
    confirm_views(broker, wanted, began).await;
    let mut asked = ask_misses(broker, wanted, max_bytes, began).await;
    for w in wanted {
        let mut partitions = Vec::with_capacity(w.partitions.len());
        for &(partition, offset, partition_max) in &w.partitions {
            let budget = (partition_max.max(0) as usize).min(max_bytes.saturating_sub(planned));
            let plan = match &w.topic {
                None if by_id => Err(ResponseError::UnknownTopicId),
                None => Err(ResponseError::UnknownTopicOrPartition),
                Some(topic) => {
                    let tp = TopicPartition::new(topic.id, partition);
                    plan_partition(broker, &mut asked, tp, offset, budget.max(1), began).await
                }
            };
            let plan = plan.map(|mut plan| {
                // Nothing fits, and an earlier partition already has data:
                // answer this one's offsets only.
                if budget == 0 && planned > 0 {
                    plan.plan.extents.clear();
                }
                // Nothing at or past the last stable offset for read_committed.
                let upper = readable_end(&plan, committed);
                plan.plan.extents.retain(|e| e.base_offset < upper);
                plan
            });
            // What is read of this partition: its extents, but no more than
            // its budget past the fetch offset (a segment is one large
            // extent, read in windows from where its index lands).
            let reads = budget.max(1);
            if let (Ok(plan), Some(topic)) = (&plan, &w.topic) {
                seen.push((topic.id, partition, plan.plan.high_watermark));
                planned += charge(&plan.plan.extents, offset, reads);
            }
            partitions.push(PartitionPlan {
                partition,
                offset,
                partition_max,
                reads,
                plan,
            });
        }
        plans.push((w, partitions));
    }
    let held = hold_budget(broker, &mut plans, planned, deadline, turn).await;
    let read = read_planned(broker, plans, committed).await;
    let (responses, total) = answer(read, max_bytes, by_id, committed);
    (responses, total, seen, held)
}

/// One partition of a fetch, planned: what is read of it, and from where.
struct PartitionPlan {
    partition: i32,
    offset: i64,
    partition_max: i32,
    /// The most bytes read past the fetch offset.
    reads: usize,
    plan: Result<TxnReadPlan, ResponseError>,
}

/// A topic of a fetch, planned partition by partition.
type TopicPlan<'a> = (&'a Wanted, Vec<PartitionPlan>);

/// A topic of a fetch, read: each partition's plan and records, or its
/// error.
type TopicRead<'a> = (
    &'a Wanted,
    Vec<(i32, i64, i32, Result<(TxnReadPlan, Bytes), ResponseError>)>,
);

/// A partition's plan: asked with the misses (see [`ask_misses`]), or from
/// a confirmed view, or, when that expired since, asked alone.
async fn plan_partition(
    broker: &Broker,
    asked: &mut HashMap<(TopicPartition, i64), Result<TxnReadPlan, ResponseError>>,
    tp: TopicPartition,
    offset: i64,
    budget: usize,
    began: Moment,
) -> Result<TxnReadPlan, ResponseError> {
    if let Some(answer) = asked.remove(&(tp, offset)) {
        return answer.map(|plan| cut(plan, offset, budget));
    }
    if let Some(plan) = broker.extents.plan(tp, offset, budget as u64, began) {
        return Ok(plan);
    }
    let asking = Moment::now();
    let answer = broker
        .meta
        .txn_read_plans(vec![(tp, offset)], budget as u64)
        .await
        .and_then(|mut plans| {
            plans
                .pop()
                .ok_or_else(|| MetaError::unavailable("no read plan in the answer"))?
                .map_err(MetaError::Refused)
        })
        .map_err(|e| plan_error(&e));
    if let Ok(plan) = &answer {
        broker.extents.learn(tp, plan, asking);
    }
    answer
}

/// Takes the planned bytes from the agent's response budget, waiting for
/// them until `deadline`; without them, the partitions are answered with
/// their offsets and no records.
async fn hold_budget(
    broker: &Broker,
    plans: &mut [TopicPlan<'_>],
    planned: usize,
    deadline: Instant,
    turn: &Turn,
) -> Option<Held> {
    if planned == 0 {
        return None;
    }
    // Waiting for budget must not outlast the fetch, but a fetch with no
    // wait (max_wait_ms = 0) still gets a moment.
    let wait_until = deadline.max(Instant::now() + Duration::from_millis(100));
    let held = broker.responses.take(planned, turn, wait_until).await;
    if held.is_none() {
        tracing::debug!(
            planned,
            "fetch: response budget spent; answering without records"
        );
        for p in plans
            .iter_mut()
            .flat_map(|(_, partitions)| partitions.iter_mut())
        {
            if let Ok(plan) = &mut p.plan {
                plan.plan.extents.clear();
            }
        }
    }
    held
}

/// Reads every planned partition at once, stopping read_committed ones at
/// the last stable offset (a batch boundary: a transaction's first batch).
/// Each partition's reads are placed in the cache by how far it lags, and
/// how many partitions the fetch reads something of (see
/// [`crate::handlers::reads::reading_for`]).
async fn read_planned<'a>(
    broker: &Broker,
    plans: Vec<TopicPlan<'a>>,
    committed: bool,
) -> Vec<TopicRead<'a>> {
    // Partitions with something to read: idle ones at their end say
    // nothing of how far back in the ingest files the fetch reads.
    let reading: usize = plans
        .iter()
        .map(|(_, partitions)| {
            let reads =
                |p: &&PartitionPlan| p.plan.as_ref().is_ok_and(|t| !t.plan.extents.is_empty());
            partitions.iter().filter(reads).count()
        })
        .sum();
    join_all(plans.into_iter().map(|(w, partitions)| async move {
        let partitions = join_all(partitions.into_iter().map(|p| async move {
            let data = match p.plan {
                Ok(plan) => read_extents(
                    broker,
                    &plan.plan.extents,
                    p.offset,
                    plan.plan.high_watermark,
                    p.reads,
                    reading,
                )
                .await
                .map(|mut records| {
                    let upper = readable_end(&plan, committed);
                    records.truncate(skip_batches_before(&records, upper));
                    (plan, records)
                })
                .map_err(|e| {
                    tracing::warn!(partition = p.partition, error = %e, "fetch: reading objects failed");
                    ResponseError::KafkaStorageError
                }),
                Err(e) => Err(e),
            };
            (p.partition, p.offset, p.partition_max, data)
        }))
        .await;
        (w, partitions)
    }))
    .await
}

/// The fetch's answer from what was read: whole batches within each
/// partition's and the fetch's limits (KIP-74: the first batch always), and
/// the bytes answered.
fn answer(
    read: Vec<TopicRead<'_>>,
    max_bytes: usize,
    by_id: bool,
    committed: bool,
) -> (Vec<FetchableTopicResponse>, usize) {
    let mut total = 0usize;
    let mut responses = Vec::with_capacity(read.len());
    for (w, partitions) in read {
        let mut out = Vec::with_capacity(partitions.len());
        for (partition, offset, partition_max, data) in partitions {
            let response = PartitionData::default().with_partition_index(partition);
            out.push(match data {
                Ok((plan, mut records)) => {
                    let limit =
                        (partition_max.max(0) as usize).min(max_bytes.saturating_sub(total));
                    let keep = whole_batches_within(&records, limit, total == 0);
                    records.truncate(keep);
                    total += keep;
                    let aborted = committed.then(|| aborted_within(&plan, offset, &records));
                    response
                        .with_high_watermark(plan.plan.high_watermark)
                        .with_last_stable_offset(plan.last_stable_offset)
                        .with_log_start_offset(plan.plan.log_start_offset)
                        .with_aborted_transactions(aborted)
                        .with_records(Some(records))
                }
                // As Kafka: invalid offsets with an error, so no client takes
                // the defaults (0) for a real high watermark and stops at "end".
                Err(error) => response
                    .with_error_code(error.code())
                    .with_high_watermark(-1)
                    .with_last_stable_offset(-1)
                    .with_log_start_offset(-1)
                    .with_records(Some(Bytes::new())),
            });
        }
        let topic = FetchableTopicResponse::default().with_partitions(out);
        responses.push(if by_id {
            topic.with_topic_id(w.id)
        } else {
            topic.with_topic(w.name.clone())
        });
    }
    (responses, total)
}

/// Where a fetch stops: the last stable offset for `read_committed`, the
/// high watermark otherwise.
fn readable_end(plan: &TxnReadPlan, committed: bool) -> i64 {
    match committed {
        true => plan.last_stable_offset.min(plan.plan.high_watermark),
        false => plan.plan.high_watermark,
    }
}

/// The aborted transactions with data among `records` (read from `from`),
/// as Kafka lists them for a `read_committed` fetch: those whose marker is
/// at or past `from` and that began before the records end.
fn aborted_within(plan: &TxnReadPlan, from: i64, records: &[u8]) -> Vec<AbortedTransaction> {
    let end = last_offset_of(records).map_or(from, |last| last + 1);
    plan.aborted
        .iter()
        .filter(|a| a.last_offset >= from && a.first_offset < end)
        .map(|a| {
            AbortedTransaction::default()
                .with_producer_id(a.producer_id.into())
                .with_first_offset(a.first_offset)
        })
        .collect()
}

/// Every partition of the fetch, with its offset (those of known topics).
fn partitions(wanted: &[Wanted]) -> impl Iterator<Item = (TopicPartition, i64, i32)> + '_ {
    wanted
        .iter()
        .filter_map(|w| Some((w.topic.as_ref()?, &w.partitions)))
        .flat_map(|(topic, partitions)| {
            partitions
                .iter()
                .map(|&(partition, offset, partition_max)| {
                    (
                        TopicPartition::new(topic.id, partition),
                        offset,
                        partition_max,
                    )
                })
        })
}

/// Has the views of the fetch's partitions that were not confirmed since it
/// `began` confirmed (in the agent's next round, shared with every fetch
/// asking meanwhile), so that what it reports is current.
async fn confirm_views(broker: &Broker, wanted: &[Wanted], began: Moment) {
    let stale = partitions(wanted)
        .filter_map(|(tp, offset, _)| Some((tp, broker.extents.stale(tp, offset, began)?)))
        .collect();
    broker.watermarks.confirm(stale).await;
}

/// Asks the metastore, in one request, for every partition of the fetch the
/// extent cache cannot plan, and teaches the cache the answers: the answers
/// by (partition, offset), errors as the client gets them.
async fn ask_misses(
    broker: &Broker,
    wanted: &[Wanted],
    max_bytes: usize,
    began: Moment,
) -> HashMap<(TopicPartition, i64), Result<TxnReadPlan, ResponseError>> {
    let mut per_partition = 1;
    let misses: Vec<(TopicPartition, i64)> = partitions(wanted)
        .filter(|&(tp, offset, _)| broker.extents.plan(tp, offset, 1, began).is_none())
        .map(|(tp, offset, partition_max)| {
            per_partition = per_partition.max(partition_max.max(0) as usize);
            (tp, offset)
        })
        .collect();
    if misses.is_empty() {
        return HashMap::new();
    }
    // Each partition's plan as large as the largest partition limit asked
    // (a response takes no more of any one partition).
    let asked = Moment::now();
    let ask = per_partition.min(max_bytes).max(1) as u64;
    match broker.meta.txn_read_plans(misses.clone(), ask).await {
        Ok(answers) => misses
            .into_iter()
            .zip(answers)
            .map(|((tp, offset), answer)| {
                let answer = answer.map_err(MetaError::Refused);
                if let Ok(plan) = &answer {
                    broker.extents.learn(tp, plan, asked);
                } else if let Err(e @ MetaError::Refused(Refusal::UnknownTopicOrPartition)) =
                    &answer
                {
                    // Deleted (or re-created): look the topic up again next time.
                    tracing::debug!(error = %e, "fetch: a partition went away");
                    broker.forget_topic(tp.topic_id);
                }
                ((tp, offset), answer.map_err(|e| plan_error(&e)))
            })
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "fetch: read plans failed");
            let error = kafka_error(&e);
            misses.into_iter().map(|key| (key, Err(error))).collect()
        }
    }
}

/// A plan cut to about `max_bytes` from `offset`, as the metastore plans:
/// at least one extent, the first one holding `offset`.
fn cut(mut txn_plan: TxnReadPlan, offset: i64, max_bytes: usize) -> TxnReadPlan {
    let plan = &mut txn_plan.plan;
    let mut bytes = 0usize;
    let mut keep = 0;
    for extent in plan.extents.iter().filter(|e| e.last_offset >= offset) {
        if keep > 0 && bytes >= max_bytes {
            break;
        }
        bytes += extent.length as usize;
        keep += 1;
    }
    plan.extents.retain(|e| e.last_offset >= offset);
    plan.extents.truncate(keep);
    txn_plan
}

/// The error a client gets for a plan the metastore refused.
fn plan_error(e: &MetaError) -> ResponseError {
    if !matches!(
        e,
        MetaError::Refused(Refusal::OffsetOutOfRange { .. })
            | MetaError::Refused(Refusal::UnknownTopicOrPartition)
    ) {
        tracing::warn!(error = %e, "fetch: read plan failed");
    }
    kafka_error(e)
}
