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
use crate::stats::{Sample, Stats, histogram};

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

/// A request on the wire, waiting for its answer.
struct Outstanding {
    correlation_id: i32,
    sent: Instant,
    records: u64,
    bytes: u64,
}

impl Producer {
    pub async fn run(self) -> anyhow::Result<()> {
        let mut conn = Connection::connect(&self.args.bootstrap, "floe-bench").await?;
        let started = Instant::now();
        let mut sent_records = 0u64;
        let mut cursor = 0usize;
        let mut outstanding: VecDeque<Outstanding> = VecDeque::new();
        let in_flight = self.args.in_flight.max(1);
        let most_per_request = (self.args.batch_records * self.partitions.len()) as u64;
        loop {
            let stopping = self.stop.load(Ordering::Relaxed);
            if stopping && outstanding.is_empty() {
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
                let (request, bytes) = self.request(records, &mut cursor)?;
                let correlation_id = conn
                    .send(ApiKey::Produce, PRODUCE_VERSION, &request)
                    .await?;
                outstanding.push_back(Outstanding {
                    correlation_id,
                    sent: Instant::now(),
                    records,
                    bytes,
                });
                sent_records += records;
                continue;
            }
            let Some(oldest) = outstanding.front() else {
                tokio::time::sleep(self.args.linger.max(Duration::from_millis(1))).await;
                continue;
            };
            let id = oldest.correlation_id;
            let answer = tokio::select! {
                answer = conn.receive::<ProduceResponse>(ApiKey::Produce, PRODUCE_VERSION, id) => answer?,
                _ = tokio::time::sleep(self.args.linger.max(Duration::from_millis(1))),
                    if !stopping && outstanding.len() < in_flight => continue,
            };
            let done = outstanding.pop_front().expect("one is outstanding");
            self.count(&answer, &done);
        }
    }

    fn count(&self, answer: &ProduceResponse, done: &Outstanding) {
        let mut sample = Sample::default();
        let failed = answer
            .responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .any(|p| p.error_code != 0);
        if failed {
            // Which records failed is not worth tracking in a benchmark: the
            // request counts as an error, none of its records as written.
            sample.produce_errors += 1;
        } else {
            sample.produced_records = done.records;
            sample.produced_bytes = done.bytes;
            sample.produce_latency = histogram();
            sample
                .produce_latency
                .saturating_record(done.sent.elapsed().as_micros() as u64);
            self.stats.acked(done.records);
        }
        self.stats.add(&sample);
    }

    /// A request of `records` records spread over the partitions from
    /// `cursor` on, one batch each; and its batches' bytes.
    fn request(&self, records: u64, cursor: &mut usize) -> anyhow::Result<(ProduceRequest, u64)> {
        let n = self.partitions.len();
        let per_partition = records / n as u64;
        let extra = (records % n as u64) as usize;
        let now = self.stats.now_micros();
        let mut topics: Vec<TopicProduceData> = Vec::new();
        let mut bytes = 0u64;
        let take = if per_partition == 0 { extra } else { n };
        for i in 0..take {
            let index = (*cursor + i) % n;
            let count = per_partition + u64::from(i < extra);
            let (topic, partition) = &self.partitions[index];
            let batch = self.batch(count as usize, now)?;
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

    fn batch(&self, count: usize, now_micros: u64) -> anyhow::Result<Bytes> {
        let size = self.args.record_size.max(8);
        let timestamp = (now_micros / 1000) as i64;
        let records: Vec<Record> = (0..count)
            .map(|i| {
                let mut value = BytesMut::with_capacity(size);
                value.put_u64(now_micros);
                value.put_slice(&self.filler[..size - 8]);
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

/// `size` bytes of pseudo-random printable filler: half a random byte's
/// entropy, compressible about as JSON is, so codecs are not flattered.
pub fn filler(size: usize) -> Bytes {
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
