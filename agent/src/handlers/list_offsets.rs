//! ListOffsets: earliest (-2), latest (-1), max timestamp (-3, KIP-734) and by
//! timestamp.
//!
//! For a timestamp the metastore names the first extent whose max timestamp
//! reaches it; the exact record is found by walking the records of the one
//! batch of that extent holding it (a segment is entered through its offset
//! index, and other batches are passed by their headers), because Kafka's
//! answer is exact. The walk is record-level work: it runs off the
//! runtime's threads, with the agent's other such work
//! ([`crate::write::record_work`]).

use floe_metastore::{ExtentRef, OffsetAnswer, OffsetQuery};
use floe_protocol::ResponseError;
use floe_protocol::batch::RecordBatch;
use floe_protocol::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use floe_protocol::kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use floe_protocol::walk::{Walk, section};

use crate::broker::{Broker, kafka_error};
use crate::handlers::reads::CacheRanges;
use crate::read::extent_reader::ExtentReader;
use floe_cache::Reading;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;

pub async fn handle(broker: &Broker, req: ListOffsetsRequest, version: i16) -> ListOffsetsResponse {
    // read_committed (v2+): nothing at or past the last stable offset.
    let committed = version >= 2 && req.isolation_level == 1;
    let mut topics = Vec::with_capacity(req.topics.len());
    for topic in req.topics {
        let info = broker.meta.topic(&topic.name.0).await.ok().flatten();
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in topic.partitions {
            let response =
                ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
            let answer = match &info {
                None => Err(ResponseError::UnknownTopicOrPartition),
                Some(info) => {
                    lookup(broker, info.id, p.partition_index, p.timestamp, committed).await
                }
            };
            partitions.push(match answer {
                Ok((timestamp, offset)) => response
                    .with_timestamp(timestamp)
                    .with_offset(offset)
                    // The field exists from v4; the encoder refuses it earlier.
                    .with_leader_epoch(if version >= 4 { 0 } else { -1 }),
                Err(error) => response
                    .with_error_code(error.code())
                    .with_timestamp(-1)
                    .with_offset(-1),
            });
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}

/// `(timestamp, offset)` for one partition, as Kafka answers it.
async fn lookup(
    broker: &Broker,
    topic: uuid::Uuid,
    partition: i32,
    timestamp: i64,
    committed: bool,
) -> Result<(i64, i64), ResponseError> {
    if !committed {
        return lookup_any(broker, topic, partition, timestamp, OffsetQuery::Latest).await;
    }
    // read_committed: the latest offset is the last stable one, and a record
    // found at or past it is not there yet (`Partition.fetchOffsetForTimestamp`).
    let found = lookup_any(broker, topic, partition, timestamp, OffsetQuery::LastStable).await?;
    if timestamp == LATEST || matches!(timestamp, EARLIEST | EARLIEST_LOCAL) || found.1 < 0 {
        return Ok(found);
    }
    let stable = match broker
        .meta
        .list_offsets(topic, partition, OffsetQuery::LastStable)
        .await
        .map_err(|e| kafka_error(&e))?
    {
        OffsetAnswer::Offset(offset) => offset,
        _ => return Err(ResponseError::UnknownServerError),
    };
    Ok(if found.1 >= stable { (-1, -1) } else { found })
}

/// `(timestamp, offset)`, `latest` being the query for the latest offset.
async fn lookup_any(
    broker: &Broker,
    topic: uuid::Uuid,
    partition: i32,
    timestamp: i64,
    latest: OffsetQuery,
) -> Result<(i64, i64), ResponseError> {
    let query = match timestamp {
        LATEST => latest,
        EARLIEST | EARLIEST_LOCAL => OffsetQuery::Earliest,
        MAX_TIMESTAMP => OffsetQuery::MaxTimestamp,
        t if t >= 0 => OffsetQuery::Timestamp(t),
        // -5 (latest tiered) means nothing here: floe has no tiers.
        _ => return Err(ResponseError::UnsupportedVersion),
    };
    let answer = broker
        .meta
        .list_offsets(topic, partition, query)
        .await
        .map_err(|e| kafka_error(&e))?;
    let (extent, target) = match answer {
        OffsetAnswer::Offset(offset) => return Ok((-1, offset)),
        OffsetAnswer::NotFound => return Ok((-1, -1)),
        // The first record reaching the extent's largest timestamp is the
        // first one with it.
        OffsetAnswer::InExtent(extent) if timestamp == MAX_TIMESTAMP => {
            let target = extent.max_timestamp;
            (extent, target)
        }
        OffsetAnswer::InExtent(extent) => (extent, timestamp),
    };
    // DeleteRecords and retention may have moved the log start into the
    // middle of this extent: records below it are gone for clients.
    let log_start = broker
        .meta
        .offsets(topic, partition)
        .await
        .map_err(|e| kafka_error(&e))?
        .log_start_offset;
    if let Some(found) = first_record_at(broker, &extent, target, log_start).await? {
        return Ok(found);
    }
    if timestamp == MAX_TIMESTAMP {
        // The largest timestamp lies only below the log start: answer the
        // largest among the records still there.
        return max_timestamp_from(broker, topic, partition, log_start).await;
    }
    // Every record reaching the timestamp in that extent lies below the log
    // start: the answer is in a later extent.
    let later = broker
        .meta
        .read_plan(topic, partition, extent.last_offset + 1, u64::MAX)
        .await
        .map_err(|e| kafka_error(&e))?;
    for next in later.extents.iter().filter(|e| e.max_timestamp >= target) {
        if let Some(found) = first_record_at(broker, next, target, log_start).await? {
            return Ok(found);
        }
    }
    Ok((-1, -1))
}

/// KIP-734 over the records from `log_start` on, when the partition's
/// largest timestamp was cut away with the records below the log start.
/// Batches are weighed by the largest timestamp in their header; only the
/// best one, and one straddling the log start, are decoded.
async fn max_timestamp_from(
    broker: &Broker,
    topic: uuid::Uuid,
    partition: i32,
    log_start: i64,
) -> Result<(i64, i64), ResponseError> {
    let plan = broker
        .meta
        .read_plan(topic, partition, log_start, u64::MAX)
        .await
        .map_err(|e| kafka_error(&e))?;
    let mut best: Option<(i64, i64)> = None;
    let better = |best: &mut Option<(i64, i64)>, timestamp: i64, offset: i64| {
        if best.is_none_or(|(ts, _)| timestamp > ts) {
            *best = Some((timestamp, offset));
        }
    };
    // The batch whose header holds the best timestamp so far, decoded last.
    let mut best_batch: Option<(i64, RecordBatch, &ExtentRef)> = None;
    for extent in &plan.extents {
        let ranges = CacheRanges {
            broker,
            reading: Reading::CatchUp,
        };
        let mut reader = ExtentReader::new(&ranges, extent);
        reader
            .land_at_offset(log_start)
            .await
            .map_err(storage_error)?;
        while let Some(window) = reader.next(WANT).await.map_err(storage_error)? {
            for batch in batches_of(extent, window)? {
                let last = batch.last_offset();
                if last < log_start {
                    continue;
                }
                if batch.base_offset() < log_start {
                    if let Some((timestamp, offset)) =
                        pick(extent, batch, Pick::Largest { log_start }).await?
                    {
                        better(&mut best, timestamp, offset);
                    }
                } else if best_batch
                    .as_ref()
                    .is_none_or(|(ts, _, _)| batch.max_timestamp() > *ts)
                {
                    best_batch = Some((batch.max_timestamp(), batch, extent));
                }
            }
        }
    }
    if let Some((timestamp, batch, extent)) = best_batch
        && best.is_none_or(|(ts, _)| timestamp > ts)
        && let Some((timestamp, offset)) = pick(
            extent,
            batch,
            Pick::FirstReaching {
                timestamp,
                log_start,
            },
        )
        .await?
    {
        better(&mut best, timestamp, offset);
    }
    Ok(best.unwrap_or((-1, -1)))
}

/// The first record of `extent` at or past `log_start` whose timestamp
/// reaches `timestamp`. A segment is entered through its offset index, and
/// only the batch holding the record is decoded: the others are passed by
/// their headers.
async fn first_record_at(
    broker: &Broker,
    extent: &ExtentRef,
    timestamp: i64,
    log_start: i64,
) -> Result<Option<(i64, i64)>, ResponseError> {
    let ranges = CacheRanges {
        broker,
        reading: Reading::CatchUp,
    };
    let mut reader = ExtentReader::new(&ranges, extent);
    reader
        .land_at_timestamp(timestamp, log_start)
        .await
        .map_err(storage_error)?;
    while let Some(window) = reader.next(WANT).await.map_err(storage_error)? {
        for batch in batches_of(extent, window)? {
            let last = batch.last_offset();
            if last < log_start || batch.max_timestamp() < timestamp {
                continue;
            }
            let first = Pick::FirstReaching {
                timestamp,
                log_start,
            };
            if let Some(found) = pick(extent, batch, first).await? {
                return Ok(Some(found));
            }
        }
    }
    Ok(None)
}

/// What ListOffsets wants of a large extent at a time beyond the reader's
/// window: nothing, since the index lands within an interval of the answer.
const WANT: u64 = 0;

fn storage_error(e: floe_cache::CacheError) -> ResponseError {
    tracing::warn!(error = %e, "list offsets: reading objects failed");
    ResponseError::KafkaStorageError
}

/// The batches of a window read from `extent`.
fn batches_of(
    extent: &ExtentRef,
    window: bytes::BytesMut,
) -> Result<Vec<RecordBatch>, ResponseError> {
    RecordBatch::parse_all_stored(&window.freeze()).map_err(|e| {
        tracing::error!(object = %extent.object_key, error = %e, "stored batches do not parse");
        ResponseError::CorruptMessage
    })
}

/// Which record of a batch a lookup wants, among those at or past the log
/// start: the first whose timestamp reaches `timestamp`, or the first with
/// the largest timestamp.
#[derive(Debug, Clone, Copy)]
enum Pick {
    FirstReaching { timestamp: i64, log_start: i64 },
    Largest { log_start: i64 },
}

/// How long a lookup waits for its turn at record-level work.
const PICK_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// `(timestamp, offset)` of the record of `batch` that `wanted` names, its
/// records walked off the runtime ([`crate::write::record_work`]).
async fn pick(
    extent: &ExtentRef,
    batch: RecordBatch,
    wanted: Pick,
) -> Result<Option<(i64, i64)>, ResponseError> {
    let due = tokio::time::Instant::now() + PICK_WITHIN;
    match crate::write::record_work::run(due, move || pick_from(&batch, wanted)).await {
        Ok(Ok(found)) => Ok(found),
        Ok(Err(e)) => {
            tracing::error!(object = %extent.object_key, error = %e, "stored batches do not decode");
            Err(ResponseError::CorruptMessage)
        }
        Err(crate::write::record_work::NotRun::TimedOut) => Err(ResponseError::RequestTimedOut),
        Err(crate::write::record_work::NotRun::Failed) => Err(ResponseError::UnknownServerError),
    }
}

/// [`pick`]'s walk. A record's timestamp is the batch's for log-append
/// time, as consumers read it.
fn pick_from(
    batch: &RecordBatch,
    wanted: Pick,
) -> Result<Option<(i64, i64)>, floe_protocol::batch::BatchError> {
    let records = section(batch)?;
    let mut best: Option<(i64, i64)> = None;
    for record in Walk::new(&records, batch.record_count()) {
        let record = record?;
        let offset = batch.base_offset() + record.offset_delta as i64;
        let timestamp = match batch.is_log_append_time() {
            true => batch.max_timestamp(),
            false => batch.base_timestamp().wrapping_add(record.timestamp_delta),
        };
        match wanted {
            Pick::FirstReaching {
                timestamp: target,
                log_start,
            } if offset >= log_start && timestamp >= target => {
                return Ok(Some((timestamp, offset)));
            }
            Pick::Largest { log_start }
                if offset >= log_start && best.is_none_or(|(ts, _)| timestamp > ts) =>
            {
                best = Some((timestamp, offset));
            }
            _ => {}
        }
    }
    Ok(best)
}
