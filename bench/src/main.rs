//! `floe-bench`: drives a running agent over the Kafka protocol and prints
//! produce and fetch throughput and produce latency percentiles.
//!
//!     cargo run --release -p floe-bench -- --bootstrap 127.0.0.1:9092
//!
//! Each connection keeps `--in-flight` Produce requests pipelined, each request
//! carrying one batch for every partition, as librdkafka does.

mod client;

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::{Bytes, BytesMut};
use clap::Parser;
use floe_protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use floe_protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use floe_protocol::kafka_protocol::messages::produce_request::{
    PartitionProduceData, TopicProduceData,
};
use floe_protocol::kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, FetchRequest, FetchResponse, ProduceRequest,
    ProduceResponse, TopicName,
};
use floe_protocol::kafka_protocol::protocol::StrBytes;
use floe_protocol::kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use floe_protocol::client::Connection;

#[derive(Parser, Clone)]
#[command(about = "Produce/fetch load generator for floe (or any Kafka broker)")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    #[arg(long, default_value = "floe-bench")]
    topic: String,
    #[arg(long, default_value_t = 8)]
    partitions: i32,
    /// Bytes of each record's value.
    #[arg(long, default_value_t = 1024)]
    record_size: usize,
    /// Records in each partition's batch of a request.
    #[arg(long, default_value_t = 250)]
    batch_records: usize,
    /// Produce requests sent by each connection.
    #[arg(long, default_value_t = 40)]
    requests: usize,
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Produce requests pipelined on each connection.
    #[arg(long, default_value_t = 5)]
    in_flight: usize,
    /// none, gzip, snappy, lz4 or zstd
    #[arg(long, default_value = "none")]
    compression: String,
}

fn compression(name: &str) -> anyhow::Result<Compression> {
    Ok(match name {
        "none" => Compression::None,
        "gzip" => Compression::Gzip,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        other => bail!("unknown compression `{other}`"),
    })
}

/// One batch of `records` values of `size` bytes; values are pseudo-random so
/// compression ratios are not flattering.
fn batch(
    records: usize,
    size: usize,
    seed: u64,
    compression: Compression,
) -> anyhow::Result<Bytes> {
    let mut state = seed | 1;
    let now = floe_metastore::now_ms();
    let records: Vec<Record> = (0..records)
        .map(|i| {
            let value: Vec<u8> = (0..size)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    // Printable, half the entropy of a random byte: compressible-ish, like JSON.
                    b'a' + (state % 16) as u8
                })
                .collect();
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
                timestamp: now,
                key: None,
                value: Some(value.into()),
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
            compression,
        },
    )?;
    Ok(buf.freeze())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let codec = compression(&args.compression)?;
    let topic = TopicName(StrBytes::from_string(args.topic.clone()));

    let mut admin = Connection::connect(&args.bootstrap, "floe-bench").await?;
    let create = CreateTopicsRequest::default().with_topics(vec![
        CreatableTopic::default()
            .with_name(topic.clone())
            .with_num_partitions(args.partitions)
            .with_replication_factor(-1),
    ]);
    let created: CreateTopicsResponse = admin.call(ApiKey::CreateTopics, 5, &create).await?;
    let code = created.topics.first().map_or(0, |t| t.error_code);
    if code != 0 && code != 36 {
        bail!("creating topic failed with error {code}");
    }

    // One request body, reused: every partition gets the same batch.
    let batch = batch(args.batch_records, args.record_size, 42, codec)?;
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(topic.clone())
                .with_partition_data(
                    (0..args.partitions)
                        .map(|p| {
                            PartitionProduceData::default()
                                .with_index(p)
                                .with_records(Some(batch.clone()))
                        })
                        .collect(),
                ),
        ]);

    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let (args, request) = (args.clone(), request.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = Connection::connect(&args.bootstrap, "floe-bench").await?;
            conn.pipeline::<_, ProduceResponse>(
                ApiKey::Produce,
                9,
                &request,
                args.requests,
                args.in_flight,
                |r| {
                    for t in &r.responses {
                        for p in &t.partition_responses {
                            if p.error_code != 0 {
                                bail!("produce error {} on partition {}", p.error_code, p.index);
                            }
                        }
                    }
                    Ok(())
                },
            )
            .await
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.context("producer task")??);
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let requests = latencies.len() as u64;
    let records = requests * (args.partitions as u64) * args.batch_records as u64;
    let raw_bytes = records * args.record_size as u64;
    let wire_bytes = requests * args.partitions as u64 * batch.len() as u64;
    println!(
        "produce: {records} records ({:.1} MiB of values, {:.1} MiB on the wire, {}) in {:.2}s",
        mib(raw_bytes),
        mib(wire_bytes),
        args.compression,
        elapsed.as_secs_f64()
    );
    println!(
        "produce: {:.1} MiB/s of values, {:.0} records/s; {} connections x {} in flight, acks=all",
        mib(raw_bytes) / elapsed.as_secs_f64(),
        records as f64 / elapsed.as_secs_f64(),
        args.connections,
        args.in_flight
    );
    println!(
        "produce latency: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({requests} requests)",
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        percentile(&latencies, 1.0).as_secs_f64() * 1e3,
    );

    // Fetch everything back from offset 0 on one connection.
    let mut offsets = vec![0i64; args.partitions as usize];
    let mut fetched_bytes = 0u64;
    let mut conn = Connection::connect(&args.bootstrap, "floe-bench").await?;
    let fetch_started = Instant::now();
    let mut high_watermarks = vec![i64::MAX; args.partitions as usize];
    while offsets.iter().zip(&high_watermarks).any(|(o, hw)| o < hw) {
        let request = FetchRequest::default()
            .with_replica_id((-1).into())
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_max_bytes(64 * 1024 * 1024)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(topic.clone())
                    .with_partitions(
                        (0..args.partitions)
                            .map(|p| {
                                FetchPartition::default()
                                    .with_partition(p)
                                    .with_fetch_offset(offsets[p as usize])
                                    .with_partition_max_bytes(8 * 1024 * 1024)
                            })
                            .collect(),
                    ),
            ]);
        let response: FetchResponse = conn.call(ApiKey::Fetch, 11, &request).await?;
        for t in &response.responses {
            for p in &t.partitions {
                if p.error_code != 0 {
                    bail!(
                        "fetch error {} on partition {}",
                        p.error_code,
                        p.partition_index
                    );
                }
                let index = p.partition_index as usize;
                high_watermarks[index] = p.high_watermark;
                if let Some(records) = &p.records {
                    fetched_bytes += records.len() as u64;
                    if let Some(next) = client::next_offset(records) {
                        offsets[index] = next;
                    }
                }
            }
        }
    }
    let fetch_elapsed = fetch_started.elapsed();
    let fetched_records: i64 = offsets.iter().sum();
    println!(
        "fetch: {fetched_records} records, {:.1} MiB on the wire in {:.2}s = {:.1} MiB/s",
        mib(fetched_bytes),
        fetch_elapsed.as_secs_f64(),
        mib(fetched_bytes) / fetch_elapsed.as_secs_f64()
    );
    Ok(())
}
