//! Exactly-once consume-transform-produce, as a Kafka Streams task or a
//! librdkafka `send_offsets_to_transaction` loop does it (TV1).
//!
//! One transformer per partition of the producers' topic, each with its own
//! transactional id: it reads a few records from its committed offset, and
//! in one transaction writes each to the same partition of the output topic
//! (as `partition:offset:value`) and commits the offset past them for its
//! group (AddOffsetsToTxn, then TxnOffsetCommit as a group without
//! members, generation -1); mostly it commits, sometimes it aborts and
//! goes back to its committed offset. Any request may be abandoned; one it
//! cannot finish makes it start over as a restarted application would:
//! InitProducerId (fencing what it left open), then its position from
//! OffsetFetch with `require_stable` (which waits out pending offsets).
//!
//! Checked: along the run, a stable committed offset is never below one a
//! commit was told committed, and after an abort it is where the aborted
//! transaction began; at the end, read_committed, every input
//! record below the group's committed offset is in the output exactly once,
//! nothing past it and nothing that is not an input record is.

use std::collections::BTreeMap;

use floe_protocol::kafka_protocol::messages::*;
use floe_protocol::kafka_protocol::protocol::StrBytes;
use floe_protocol::testing::requests::produce;
use tokio::time::{Duration, Instant};

use super::audit::read_whole;
use super::client::{Client, retriable};
use super::network::SimNetwork;
use super::produce::{Delivery, any_codec, deliver, encode};
use super::read::{Answer, fetch_of};
use super::txns::{Ended, Producer, add_partitions, end_txn, fenced};
use super::{Books, KafkaSettings, TOPIC};
use crate::whole::Shared;

pub(super) const EOS_TOPIC: &str = "sim-eos";
const EOS_GROUP: &str = "sim-eos-group";
/// Input records one transaction carries at most.
const MOST_PER_TRANSACTION: usize = 5;

/// What transformers were told, per input partition.
#[derive(Default)]
pub(super) struct EosLedger {
    /// The highest offset a commit of the group was told committed at.
    told: BTreeMap<i32, i64>,
}

/// How one transaction went.
enum Went {
    /// Committed: the position after its records.
    Committed(i64),
    Aborted,
    /// It could not finish (fenced, refused, given up, end unknown).
    Lost,
}

/// The transformer of input `partition`, until `end`.
pub(super) async fn transform(client: Client, books: Books, partition: i32, end: Instant) {
    let mut producer = Producer::new(&client, format!("sim-eos-{partition}")).await;
    let mut position = stable_position(&client, &books, partition).await;
    while Instant::now() < end {
        let input = read_input(&client, partition, position).await;
        if input.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        let commit = client.shared.with(|w| w.chance(0.8));
        match one_transaction(&client, &mut producer, partition, &input, commit).await {
            Went::Committed(next) => {
                position = next;
                let mut books = books.lock().expect("books");
                let told = books.eos.told.entry(partition).or_default();
                *told = (*told).max(next);
            }
            // As Kafka Streams after an abort: back to the committed
            // offset, which must be where the aborted transaction began.
            Went::Aborted => {
                let committed = stable_position(&client, &books, partition).await;
                if committed != position {
                    client.shared.with(|w| {
                        w.anomaly(format!(
                            "{EOS_GROUP}: {TOPIC}-{partition} committed at {committed} after a \
                             transaction from {position} was told aborted"
                        ))
                    });
                }
                position = committed;
            }
            Went::Lost => {
                producer.start_over(&client).await;
                position = stable_position(&client, &books, partition).await;
            }
        }
        client.shared.with(|w| {
            w.summary.eos_transactions += 1;
            w.log(format!("eos {partition}: at {position}"))
        });
    }
}

/// Up to a few input records from `position` (none on any failure).
async fn read_input(client: &Client, partition: i32, position: i64) -> Vec<(i64, String)> {
    let request = fetch_of(TOPIC, partition, position, false);
    let answered: Result<FetchResponse, _> = client.call(ApiKey::Fetch, 12, &request).await;
    let Ok(answer) = answered
        .map_err(drop)
        .and_then(|r| Answer::of(&client.shared, &r).map_err(drop))
    else {
        return Vec::new();
    };
    let mut kept = answer.kept(false);
    kept.retain(|(offset, _)| *offset >= position);
    let take = client
        .shared
        .with(|w| 1 + w.rng_below(MOST_PER_TRANSACTION as u64) as usize);
    kept.truncate(take);
    kept
}

/// Writes `input` transformed and commits the offset past it, in one
/// transaction ended as `commit` says.
async fn one_transaction(
    client: &Client,
    producer: &mut Producer,
    partition: i32,
    input: &[(i64, String)],
    commit: bool,
) -> Went {
    let next = input.last().map_or(0, |(offset, _)| offset + 1);
    let wrote = add_partitions(client, producer, (EOS_TOPIC, &[partition])).await
        && write_output(client, producer, partition, input).await
        && add_offsets(client, producer).await
        && commit_offset(client, producer, partition, next).await;
    if !wrote {
        return Went::Lost;
    }
    match (end_txn(client, producer, commit).await, commit) {
        (Ended::Yes, true) => Went::Committed(next),
        (Ended::Yes, false) => Went::Aborted,
        _ => Went::Lost,
    }
}

async fn write_output(
    client: &Client,
    producer: &mut Producer,
    partition: i32,
    input: &[(i64, String)],
) -> bool {
    let values: Vec<String> = input
        .iter()
        .map(|(offset, value)| format!("{partition}:{offset}:{value}"))
        .collect();
    let sequence = *producer.sequences.entry(partition).or_default();
    let (now_ms, codec) = client.shared.with(|w| (w.now_ms(), any_codec(w)));
    let records = encode(&values, producer.identity, sequence, now_ms, (codec, true));
    let request = produce(EOS_TOPIC, partition, records).with_transactional_id(Some(
        TransactionalId(StrBytes::from_string(producer.id.clone())),
    ));
    match deliver(client, partition, &request).await {
        Delivery::Acked(_) => {
            *producer.sequences.entry(partition).or_default() += values.len() as i32;
            true
        }
        Delivery::Refused(code) if !fenced(code) => {
            client.shared.with(|w| {
                w.anomaly(format!(
                    "a transformer's produce to {EOS_TOPIC}-{partition} was refused: {code}"
                ))
            });
            false
        }
        _ => false,
    }
}

/// Sends `request` until an answer whose error `code_of` finds is not
/// retriable: whether it was none.
async fn until_answered<Req, Resp>(
    client: &Client,
    (api, version): (ApiKey, i16),
    request: &Req,
    code_of: impl Fn(&Resp) -> i16,
) -> bool
where
    Req: floe_protocol::kafka_protocol::protocol::Encodable,
    Resp: floe_protocol::kafka_protocol::protocol::Decodable,
{
    let deadline = Instant::now() + super::DELIVERY_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(answer) = client.call::<Req, Resp>(api, version, request).await {
            match code_of(&answer) {
                0 => return true,
                code if retriable(code) => {}
                code if fenced(code) => return false,
                code => {
                    client.shared.with(|w| {
                        w.anomaly(format!("a transformer's {api:?} was refused: {code}"))
                    });
                    return false;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

async fn add_offsets(client: &Client, producer: &Producer) -> bool {
    let request = AddOffsetsToTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(producer.id.clone())))
        .with_producer_id(ProducerId(producer.identity.0))
        .with_producer_epoch(producer.identity.1)
        .with_group_id(GroupId(StrBytes::from_static_str(EOS_GROUP)));
    let code = |r: &AddOffsetsToTxnResponse| r.error_code;
    until_answered(client, (ApiKey::AddOffsetsToTxn, 3), &request, code).await
}

async fn commit_offset(client: &Client, producer: &Producer, partition: i32, next: i64) -> bool {
    use txn_offset_commit_request::*;
    let request = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(producer.id.clone())))
        .with_group_id(GroupId(StrBytes::from_static_str(EOS_GROUP)))
        .with_producer_id(ProducerId(producer.identity.0))
        .with_producer_epoch(producer.identity.1)
        .with_generation_id(-1)
        .with_topics(vec![
            TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partitions(vec![
                    TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(partition)
                        .with_committed_offset(next),
                ]),
        ]);
    let code = |r: &TxnOffsetCommitResponse| {
        let partitions = r.topics.iter().flat_map(|t| t.partitions.iter());
        let codes = partitions.map(|p| p.error_code);
        codes.clone().find(|c| *c != 0).unwrap_or(0)
    };
    until_answered(client, (ApiKey::TxnOffsetCommit, 3), &request, code).await
}

/// The group's committed offset of `partition` once no transaction holds
/// one pending (OffsetFetch v7, `require_stable`), held to what commits
/// were told: never below one told committed before it was asked.
async fn stable_position(client: &Client, books: &Books, partition: i32) -> i64 {
    use offset_fetch_request::OffsetFetchRequestTopic;
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(EOS_GROUP)))
        .with_require_stable(true)
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partition_indexes(vec![partition]),
        ]));
    loop {
        let told = books
            .lock()
            .expect("books")
            .eos
            .told
            .get(&partition)
            .copied();
        let answer: Result<OffsetFetchResponse, _> =
            client.call(ApiKey::OffsetFetch, 7, &request).await;
        let committed = answer.ok().filter(|r| r.error_code == 0).and_then(|r| {
            let mut answered = r.topics.iter().flat_map(|t| t.partitions.iter());
            let mine = answered.find(|p| p.partition_index == partition)?;
            (mine.error_code == 0).then_some(mine.committed_offset)
        });
        let Some(committed) = committed else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        if let Some(told) = told
            && committed < told
        {
            client.shared.with(|w| {
                w.anomaly(format!(
                    "{EOS_GROUP}: {TOPIC}-{partition}'s stable committed offset is {committed}, \
                     below {told} a transaction was told committed"
                ))
            });
        }
        return committed.max(0);
    }
}

/// Holds the output, read_committed, to the input and the group's offsets:
/// each input record below the committed offset exactly once, nothing else.
pub(super) async fn audit_eos(
    client: &Client,
    net: &SimNetwork,
    books: &Books,
    settings: KafkaSettings,
) {
    let shared: &Shared = &client.shared;
    let mut anomalies = Vec::new();
    let mut transformed = 0u64;
    for partition in 0..settings.partitions {
        let committed = stable_position(client, books, partition).await;
        let input = read_whole(shared, net, 0, (TOPIC, partition), false).await;
        let input: BTreeMap<i64, String> = input.log.into_iter().collect();
        let output = read_whole(shared, net, 0, (EOS_TOPIC, partition), true).await;
        let mut seen: BTreeMap<i64, i64> = BTreeMap::new();
        for (at, value) in &output.log {
            let parsed = value.split_once(':').and_then(|(p, rest)| {
                let (offset, value) = rest.split_once(':')?;
                Some((p.parse::<i32>().ok()?, offset.parse::<i64>().ok()?, value))
            });
            let Some((p, offset, value)) = parsed else {
                anomalies.push(format!(
                    "{EOS_TOPIC}-{partition} at {at}: {value}, not an output"
                ));
                continue;
            };
            if p != partition || input.get(&offset).map(String::as_str) != Some(value) {
                anomalies.push(format!(
                    "{EOS_TOPIC}-{partition} at {at}: {value} is not {TOPIC}-{p}'s record at \
                     {offset} ({:?})",
                    input.get(&offset)
                ));
            }
            if offset >= committed {
                anomalies.push(format!(
                    "{EOS_TOPIC}-{partition} at {at} carries input {offset}, at or past the \
                     group's committed offset {committed}"
                ));
            }
            if let Some(before) = seen.insert(offset, *at) {
                anomalies.push(format!(
                    "input {TOPIC}-{partition} at {offset} transformed twice: output {before} and {at}"
                ));
            }
        }
        let missing = input
            .keys()
            .filter(|offset| **offset < committed && !seen.contains_key(offset));
        if let Some(first) = missing.clone().next() {
            anomalies.push(format!(
                "{} input records of {TOPIC}-{partition} below the committed offset {committed} \
                 are not in the output (the first at {first})",
                missing.count()
            ));
        }
        transformed += seen.len() as u64;
    }
    shared.with(|w| {
        w.summary.eos_records += transformed;
        w.log(format!(
            "audit: {transformed} records transformed exactly once"
        ));
        for anomaly in anomalies {
            w.anomaly(anomaly);
        }
    });
}
