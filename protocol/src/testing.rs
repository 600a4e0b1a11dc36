//! Record batches for tests, in this crate and (with the `testing` feature)
//! in the others: well-formed ones built by `kafka-protocol`'s encoder, and
//! hostile ones built by hand.

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::batch::RecordBatch;

pub const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// Records `k{i}` -> `values[i]`, each with one header, timestamps from `base_ts`.
pub fn records(values: &[Vec<u8>], base_ts: i64) -> Vec<Record> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: i as i32,
            timestamp: base_ts + i as i64,
            delete_horizon: false,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(v.clone())),
            headers: [(
                StrBytes::from_static_str("h"),
                Some(Bytes::from_static(b"v")),
            )]
            .into_iter()
            .collect(),
        })
        .collect()
}

/// One batch of `values` (timestamps from 1,000), as a producer sends it.
pub fn encode(values: &[Vec<u8>], compression: Compression) -> Bytes {
    encode_records(&records(values, 1_000), compression)
}

/// A batch of one small record whose header then claims `count` records
/// (lastOffsetDelta and CRC made to agree): the review's 61-byte attack, with
/// a payload so it also reaches the decompressor.
pub fn lying_batch(count: i32, compression: Compression) -> Bytes {
    let honest = encode(&[b"x".to_vec()], compression);
    let mut b = BytesMut::from(&honest[..]);
    b[23..27].copy_from_slice(&(count - 1).to_be_bytes());
    b[57..61].copy_from_slice(&count.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

/// [`lying_batch`] as a stored batch (stored parsing does not bound counts,
/// so this is what an agent from before the bound may have written).
pub fn batch_claiming(count: i32, compression: Compression) -> RecordBatch {
    RecordBatch::parse_all_stored(&lying_batch(count, compression))
        .unwrap()
        .remove(0)
}

/// A batch of `values` whose records have no key.
pub fn keyless(values: &[Vec<u8>]) -> Bytes {
    let mut records = records(values, 1_000);
    records.iter_mut().for_each(|r| r.key = None);
    encode_records(&records, Compression::None)
}

/// A batch of `values` (each under 100 bytes) in `codec` whose records all
/// say offset delta 0 (as some old clients wrote them): Kafka rebuilds such
/// a batch.
pub fn misnumbered(values: &[Vec<u8>], codec: crate::batch::Codec) -> Bytes {
    use crate::batch::HEADER_LEN;
    let honest = encode(values, Compression::None);
    let mut section = honest[HEADER_LEN..].to_vec();
    // Each record: length, attributes, timestamp delta (one byte each
    // here), then its offset delta (one byte while under 64).
    let mut at = 0;
    for _ in values {
        let length = (section[at] >> 1) as usize;
        section[at + 3] = 0;
        at += 1 + length;
    }
    let payload = crate::compression::compress(codec, None, &section).unwrap();
    let mut b = BytesMut::from(&honest[..HEADER_LEN]);
    b.extend_from_slice(&payload);
    let length = (b.len() - crate::batch::LOG_OVERHEAD) as i32;
    b[8..12].copy_from_slice(&length.to_be_bytes());
    b[21..23].copy_from_slice(&codec.attribute_bits().to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

fn encode_records(records: &[Record], compression: Compression) -> Bytes {
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut buf, records, &options).unwrap();
    buf.freeze()
}

/// One-partition requests, as the agent's tests and the simulation send them.
pub mod requests {
    use bytes::Bytes;
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;

    fn name(topic: &str) -> TopicName {
        TopicName(StrBytes::from_string(topic.to_string()))
    }

    /// A Produce (acks=all) of `records` to one partition.
    pub fn produce(topic: &str, partition: i32, records: Bytes) -> ProduceRequest {
        use produce_request::*;
        ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(name(topic))
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(partition)
                            .with_records(Some(records)),
                    ]),
            ])
    }

    /// A Fetch of one partition from `offset`, answered at once.
    pub fn fetch(topic: &str, partition: i32, offset: i64) -> FetchRequest {
        use fetch_request::*;
        FetchRequest::default()
            .with_max_wait_ms(0)
            .with_min_bytes(1)
            .with_max_bytes(10 << 20)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(name(topic))
                    .with_partitions(vec![
                        FetchPartition::default()
                            .with_partition(partition)
                            .with_fetch_offset(offset)
                            .with_partition_max_bytes(1 << 20),
                    ]),
            ])
    }

    /// A DeleteRecords of one partition's records before `before`.
    pub fn delete_records(topic: &str, partition: i32, before: i64) -> DeleteRecordsRequest {
        use delete_records_request::*;
        DeleteRecordsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![
                DeleteRecordsTopic::default()
                    .with_name(name(topic))
                    .with_partitions(vec![
                        DeleteRecordsPartition::default()
                            .with_partition_index(partition)
                            .with_offset(before),
                    ]),
            ])
    }

    /// A ListOffsets of one partition at `timestamp` (-2 earliest, -1
    /// latest, -3 the largest timestamp).
    pub fn list_offsets(topic: &str, partition: i32, timestamp: i64) -> ListOffsetsRequest {
        use list_offsets_request::*;
        ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(name(topic))
                    .with_partitions(vec![
                        ListOffsetsPartition::default()
                            .with_partition_index(partition)
                            .with_timestamp(timestamp),
                    ]),
            ])
    }
}

/// A zstd batch of one record whose value is `value_len` zero bytes:
/// kilobytes on the wire, whatever it claims inside. Built a chunk at a
/// time, so making a bomb of any size costs no more memory than a chunk.
pub fn zstd_bomb(value_len: usize) -> Bytes {
    use std::io::Write;
    fn varint(out: &mut Vec<u8>, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }
    // attributes, timestamp delta, offset delta, no key, the value's length
    let mut head = vec![0u8];
    varint(&mut head, 0);
    varint(&mut head, 0);
    varint(&mut head, -1);
    varint(&mut head, value_len as i64);
    let body_len = head.len() + value_len + 1;
    let mut record = Vec::new();
    varint(&mut record, body_len as i64);
    record.extend_from_slice(&head);
    let mut encoder = zstd::Encoder::new(Vec::new(), 1).expect("a zstd encoder");
    encoder.write_all(&record).expect("in memory");
    let chunk = vec![0u8; 1 << 20];
    let mut left = value_len;
    while left > 0 {
        let n = left.min(chunk.len());
        encoder.write_all(&chunk[..n]).expect("in memory");
        left -= n;
    }
    encoder.write_all(&[0]).expect("in memory"); // no headers
    let payload = encoder.finish().expect("in memory");
    framed_batch(&payload, 1, crate::batch::Codec::Zstd)
}

/// A batch of `count` records whose records section (compressed as `codec`
/// says, or not) is `payload`: the header written around it, its CRC made
/// to agree, whatever the payload holds.
pub fn framed_batch(payload: &[u8], count: i32, codec: crate::batch::Codec) -> Bytes {
    use bytes::BufMut;
    let mut out = BytesMut::new();
    out.put_i64(0);
    out.put_i32((crate::batch::HEADER_LEN - crate::batch::LOG_OVERHEAD + payload.len()) as i32);
    out.put_i32(-1);
    out.put_i8(2);
    out.put_u32(0);
    out.put_i16(codec.attribute_bits());
    out.put_i32(count - 1);
    out.put_i64(1_000);
    out.put_i64(1_000);
    out.put_i64(-1);
    out.put_i16(-1);
    out.put_i32(-1);
    out.put_i32(count);
    out.put_slice(payload);
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out.freeze()
}
