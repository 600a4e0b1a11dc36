//! Idempotent producers, as librdkafka's in their essentials.

use std::collections::BTreeMap;

use bytes::Bytes;
use floe_protocol::kafka_protocol::messages::*;
use floe_protocol::kafka_protocol::protocol::StrBytes;
use floe_protocol::kafka_protocol::records::{Compression, Record, TimestampType};
use tokio::time::{Duration, Instant};

use floe_protocol::testing::CODECS;
use floe_protocol::testing::requests::produce as produce_request;

use super::client::{Client, retriable};
use super::{Books, DELIVERY_TIMEOUT, TOPIC};
use crate::whole::{World, encode_batch};

/// One idempotent producer: batches of a few records to random partitions,
/// one in flight, until `end`.
pub(super) async fn produce(
    client: Client,
    books: Books,
    me: usize,
    partitions: i32,
    end: Instant,
) {
    let mut identity = init_producer(&client).await;
    let mut sequences: BTreeMap<i32, i32> = BTreeMap::new();
    let mut batch = 0u64;
    while Instant::now() < end {
        batch += 1;
        let (partition, count, codec, pause) = client.shared.with(|w| {
            // Mostly its own partition, as a keyed workload's producer.
            let partition = match w.chance(0.8) {
                true => me as i32 % partitions,
                false => w.rng_below(partitions as u64) as i32,
            };
            (
                partition,
                1 + w.rng_below(5) as i32,
                any_codec(w),
                Duration::from_millis(w.rng_below(200)),
            )
        });
        let values: Vec<String> = (0..count)
            .map(|i| format!("p{me}-{}-{}-b{batch}-r{i}", identity.0, identity.1))
            .collect();
        let sequence = *sequences.entry(partition).or_default();
        let now_ms = client.shared.with(|w| w.now_ms());
        let records = encode(&values, identity, sequence, now_ms, (codec, false));
        books
            .lock()
            .expect("books")
            .sent
            .extend(values.iter().cloned());
        let request = produce_request(TOPIC, partition, records);
        match deliver(&client, partition, &request).await {
            Delivery::Acked(offset) => {
                *sequences.entry(partition).or_default() += count;
                let mut books = books.lock().expect("books");
                let end_offset = books.acked_end.entry(partition).or_default();
                *end_offset = (*end_offset).max(offset + count as i64);
                books.acked.push((partition, offset, values));
                client.shared.with(|w| w.summary.acked_batches += 1);
            }
            Delivery::Refused(code) => {
                // An idempotent producer with one request in flight that
                // resends the same sequence is never refused its order,
                // nor anything else.
                client.shared.with(|w| {
                    w.anomaly(format!(
                        "a produce to partition {partition} was refused with error {code}"
                    ))
                });
                return;
            }
            Delivery::GaveUp => {
                // Given up: librdkafka's idempotent producer starts a new
                // producer id rather than leave a gap in its sequences.
                client.shared.with(|w| {
                    w.summary.failed_produces += 1;
                    w.log(format!(
                        "producer {me} gave up batch {batch}; new producer id"
                    ));
                });
                identity = init_producer(&client).await;
                sequences.clear();
            }
        }
        tokio::time::sleep(pause).await;
    }
}

/// A codec, any of Kafka's.
pub(super) fn any_codec(w: &mut World) -> Compression {
    CODECS[w.rng_below(CODECS.len() as u64) as usize]
}

async fn init_producer(client: &Client) -> (i64, i16) {
    init_producer_id(client, None, 60_000).await
}

/// InitProducerId until answered: the producer's id and epoch. A refusal
/// no client retries is an anomaly (nothing here asks anything invalid).
pub(super) async fn init_producer_id(
    client: &Client,
    transactional_id: Option<&str>,
    timeout_ms: i32,
) -> (i64, i16) {
    let id = transactional_id.map(|id| TransactionalId(StrBytes::from_string(id.into())));
    let request = InitProducerIdRequest::default()
        .with_transactional_id(id)
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    loop {
        let answer: Result<InitProducerIdResponse, _> =
            client.call(ApiKey::InitProducerId, 4, &request).await;
        match answer {
            Ok(r) if r.error_code == 0 => return (r.producer_id.0, r.producer_epoch),
            Ok(r) if !retriable(r.error_code) => client.shared.with(|w| {
                w.anomaly(format!(
                    "InitProducerId {transactional_id:?} refused: {}",
                    r.error_code
                ))
            }),
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How a batch's delivery ended.
pub(super) enum Delivery {
    /// Acknowledged at this base offset.
    Acked(i64),
    /// The delivery timeout passed: its fate is unknown.
    GaveUp,
    /// Refused with an error no producer retries.
    Refused(i16),
}

/// Sends one batch until it is acknowledged, refused, or the delivery
/// timeout passes.
pub(super) async fn deliver(client: &Client, partition: i32, request: &ProduceRequest) -> Delivery {
    let deadline = Instant::now() + DELIVERY_TIMEOUT;
    let mut backoff = Duration::from_millis(100);
    while Instant::now() < deadline {
        let answer: Result<ProduceResponse, _> = client.call(ApiKey::Produce, 9, request).await;
        match answer {
            Ok(r) => {
                let answered = r
                    .responses
                    .first()
                    .and_then(|t| t.partition_responses.first());
                let Some(p) = answered else {
                    client.shared.with(|w| {
                        w.anomaly(format!("a produce answered without its partition: {r:?}"))
                    });
                    return Delivery::GaveUp;
                };
                match p.error_code {
                    0 => return Delivery::Acked(p.base_offset),
                    code if retriable(code) => {}
                    code => return Delivery::Refused(code),
                }
            }
            Err(why) => client
                .shared
                .with(|w| w.log(format!("produce to {partition} unanswered: {why:?}"))),
        }
        client.shared.with(|w| w.summary.retried_writes += 1);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
    Delivery::GaveUp
}

/// One batch of `values` from producer `identity` at `sequence`.
pub(super) fn encode(
    values: &[String],
    identity: (i64, i16),
    sequence: i32,
    timestamp: i64,
    (compression, transactional): (Compression, bool),
) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, value)| Record {
            transactional,
            control: false,
            partition_leader_epoch: 0,
            producer_id: identity.0,
            producer_epoch: identity.1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: sequence.wrapping_add(i as i32),
            timestamp,
            delete_horizon: false,
            key: None,
            value: Some(Bytes::from(value.clone())),
            headers: Default::default(),
        })
        .collect();
    encode_batch(&records, compression)
}
