//! One producer: a connection sending Produce requests (acks=all) with up to
//! `in_flight` outstanding, at its share of the rate or as fast as they are
//! acknowledged. Each record's value starts with its send time.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::bail;
use bytes::{BufMut, Bytes, BytesMut};
use floe_protocol::client::Connection;
use floe_protocol::kafka_protocol::messages::produce_request::{
    PartitionProduceData, TopicProduceData,
};
use floe_protocol::kafka_protocol::messages::{ApiKey, ProduceRequest, ProduceResponse, TopicName};
use floe_protocol::kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tokio::time::Instant;

use crate::args::BenchArgs;
use crate::stats::{HAND_IN_EVERY, Sample, Stats};

const PRODUCE_VERSION: i16 = 9;

pub struct Producer {
    pub args: BenchArgs,
    pub codec: Compression,
    /// Every partition of every topic: a producer spreads its records over
    /// all of them in turn, as Kafka's round-robin partitioner does.
    pub partitions: Vec<(TopicName, i32)>,
    /// Records a second for this producer; 0 for as fast as acknowledged.
    pub rate: f64,
    /// Filler for values after the send time.
    pub filler: Bytes,
    pub stats: Arc<Stats>,
    pub stop: Arc<AtomicBool>,
}

/// Kafka's default `message.max.bytes`: a batch larger than this is
/// refused by a broker left at its defaults.
const MAX_BATCH_BYTES: usize = 1024 * 1024;

/// When each record of a request was due. Latency counts from then, not
/// from the send, so a producer that falls behind its rate shows the delay
/// rather than hiding it (coordinated omission).
#[derive(Clone, Copy)]
enum Due {
    /// At a fixed rate, record n is due at `start + n x every` microseconds.
    Schedule { start: u64, every: f64 },
    /// At full speed, every record of a request is due when it is built.
    At(u64),
}

impl Due {
    fn of(self, n: u64) -> u64 {
        match self {
            Due::Schedule { start, every } => start + (n as f64 * every) as u64,
            Due::At(t) => t,
        }
    }
}

/// A request on the wire, waiting for its answer.
struct Outstanding {
    correlation_id: i32,
    sent: Instant,
    due: Due,
    /// The number of its first record, and how many it holds.
    first: u64,
    records: u64,
    bytes: u64,
}

impl Producer {
    pub async fn run(self) -> anyhow::Result<()> {
        let mut conn = Connection::connect(&self.args.bootstrap, "floe-bench").await?;
        let schedule = Due::Schedule {
            start: self.stats.now_micros(),
            every: 1e6 / self.rate,
        };
        let started = Instant::now();
        let mut sent_records = 0u64;
        let mut cursor = 0usize;
        let mut outstanding: VecDeque<Outstanding> = VecDeque::new();
        let mut counted = Sample::default();
        let mut handed_in = Instant::now();
        let in_flight = self.args.in_flight.max(1);
        let per_batch = self
            .args
            .batch_records
            .min(MAX_BATCH_BYTES / self.args.record_size.max(8))
            .max(1);
        let most_per_request = (per_batch * self.partitions.len()) as u64;
        loop {
            let stopping = self.stop.load(Ordering::Relaxed);
            if handed_in.elapsed() >= HAND_IN_EVERY {
                self.stats.hand_in(&mut counted);
                handed_in = Instant::now();
            }
            if stopping && outstanding.is_empty() {
                self.stats.hand_in(&mut counted);
                return Ok(());
            }
            let due = if self.rate > 0.0 {
                ((started.elapsed().as_secs_f64() * self.rate) as u64).saturating_sub(sent_records)
            } else {
                most_per_request
            };
            // A fixed rate sends what is due once a linger has passed since
            // the last request, or as soon as a full request is due.
            let linger_over = outstanding
                .back()
                .is_none_or(|o| o.sent.elapsed() >= self.args.linger);
            if !stopping
                && due > 0
                && outstanding.len() < in_flight
                && (linger_over || due >= most_per_request)
            {
                let records = due.min(most_per_request);
                let due = if self.rate > 0.0 {
                    schedule
                } else {
                    Due::At(self.stats.now_micros())
                };
                let (request, bytes) = self.request(records, &mut cursor, sent_records, due)?;
                let correlation_id = conn
                    .send(ApiKey::Produce, PRODUCE_VERSION, &request)
                    .await?;
                outstanding.push_back(Outstanding {
                    correlation_id,
                    sent: Instant::now(),
                    due,
                    first: sent_records,
                    records,
                    bytes,
                });
                sent_records += records;
                continue;
            }
            // What is left of the linger since the last send (at least a
            // millisecond, so a rate below one record a linger still sleeps).
            let pause = self
                .args
                .linger
                .saturating_sub(
                    outstanding
                        .back()
                        .map_or(Duration::ZERO, |o| o.sent.elapsed()),
                )
                .max(Duration::from_millis(1));
            let Some(oldest) = outstanding.front() else {
                tokio::time::sleep(pause).await;
                continue;
            };
            let id = oldest.correlation_id;
            let answer = tokio::select! {
                answer = conn.receive::<ProduceResponse>(ApiKey::Produce, PRODUCE_VERSION, id) => answer?,
                _ = tokio::time::sleep(pause), if !stopping && outstanding.len() < in_flight => continue,
            };
            let done = outstanding.pop_front().expect("one is outstanding");
            self.count(&answer, &done, &mut counted);
        }
    }

    /// Counts an answered request: each record's latency from when it was
    /// due, or the request as an error.
    fn count(&self, answer: &ProduceResponse, done: &Outstanding, counted: &mut Sample) {
        let failed = answer
            .responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .any(|p| p.error_code != 0);
        if failed {
            // Which records failed is not worth tracking in a benchmark: the
            // request counts as an error, none of its records as written,
            // and the run fails at its end.
            counted.produce_errors += 1;
            return;
        }
        let now = self.stats.now_micros();
        counted.produced_records += done.records;
        counted.produced_bytes += done.bytes;
        match done.due {
            Due::At(t) => counted
                .produce_latency
                .saturating_record_n(now.saturating_sub(t), done.records),
            schedule => {
                for n in done.first..done.first + done.records {
                    counted
                        .produce_latency
                        .saturating_record(now.saturating_sub(schedule.of(n)));
                }
            }
        }
        self.stats.acked(done.records);
    }

    /// A request of `records` records, numbered from `first`, spread over
    /// the partitions from `cursor` on, one batch each; and its batches'
    /// bytes.
    fn request(
        &self,
        records: u64,
        cursor: &mut usize,
        first: u64,
        due: Due,
    ) -> anyhow::Result<(ProduceRequest, u64)> {
        let n = self.partitions.len();
        let per_partition = records / n as u64;
        let extra = (records % n as u64) as usize;
        let mut next = first;
        let mut topics: Vec<TopicProduceData> = Vec::new();
        let mut bytes = 0u64;
        let take = if per_partition == 0 { extra } else { n };
        for i in 0..take {
            let index = (*cursor + i) % n;
            let count = per_partition + u64::from(i < extra);
            let (topic, partition) = &self.partitions[index];
            let batch = self.batch(count as usize, next, due)?;
            next += count;
            bytes += batch.len() as u64;
            let data = PartitionProduceData::default()
                .with_index(*partition)
                .with_records(Some(batch));
            match topics.iter_mut().find(|t| &t.name == topic) {
                Some(t) => t.partition_data.push(data),
                None => topics.push(
                    TopicProduceData::default()
                        .with_name(topic.clone())
                        .with_partition_data(vec![data]),
                ),
            }
        }
        *cursor = (*cursor + extra) % n;
        if topics.is_empty() {
            bail!("a request of no records");
        }
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(topics);
        Ok((request, bytes))
    }

    /// One batch of `count` records numbered from `first`, each value
    /// starting with the time the record was due.
    fn batch(&self, count: usize, first: u64, due: Due) -> anyhow::Result<Bytes> {
        let size = self.args.record_size.max(8);
        // The Kafka timestamp is wall-clock time, as a client's (retention
        // by time reads it); latency uses the run's own clock in the value.
        let timestamp = floe_metastore::now_ms();
        let records: Vec<Record> = (0..count)
            .map(|i| {
                let n = first + i as u64;
                let mut value = BytesMut::with_capacity(size);
                value.put_u64(due.of(n));
                // Each record's filler starts elsewhere, so a codec finds
                // no more repetition across records than within one.
                let at = (n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize % FILLER_SPREAD;
                value.put_slice(&self.filler[at..at + size - 8]);
                Record {
                    transactional: false,
                    control: false,
                    delete_horizon: false,
                    partition_leader_epoch: -1,
                    producer_id: -1,
                    producer_epoch: -1,
                    timestamp_type: TimestampType::Creation,
                    offset: i as i64,
                    sequence: i as i32,
                    timestamp,
                    key: None,
                    value: Some(value.freeze()),
                    headers: Default::default(),
                }
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression: self.codec,
            },
        )?;
        Ok(buf.freeze())
    }
}

/// Records' filler starts at one of this many offsets into [`filler`].
const FILLER_SPREAD: usize = 64 * 1024;

/// Pseudo-random printable filler for values of `record_size` bytes: half
/// a random byte's entropy, compressible about as JSON is.
pub fn filler(record_size: usize) -> Bytes {
    let size = record_size + FILLER_SPREAD;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..size)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            b'a' + (state % 16) as u8
        })
        .collect::<Vec<u8>>()
        .into()
}

pub fn compression(name: &str) -> anyhow::Result<Compression> {
    Ok(match name {
        "none" => Compression::None,
        "gzip" => Compression::Gzip,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        other => bail!("unknown compression `{other}`"),
    })
}
