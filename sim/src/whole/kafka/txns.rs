//! Transactional producers and read_committed readers, as librdkafka's
//! transactional producer and Java's consumer in their essentials (TV1:
//! AddPartitionsToTxn, transactional Produce, EndTxn).
//!
//! Each producer has its own transactional id. A transaction adds one or
//! two partitions, produces a few batches to each and ends, mostly
//! committed. Any request may be abandoned (its connection dropped, the
//! agent left running it) and retried through another agent, EndTxn more
//! often than the rest: an end left running in a slow agent must never end
//! the producer's next transaction. A producer that cannot go on (a batch
//! given up, an end unanswered) starts over with InitProducerId, which
//! fences its old epoch and ends what it left open. Transactions time out
//! after librdkafka's default minute, so the coordinator's own aborts run.
//!
//! Checked: no end the producer asked for is refused but by fencing (a
//! guarantee stronger than Kafka's TV1, where an EndTxn that arrives late
//! with the same epoch may end the next transaction: floe's ends act only
//! on a transaction their agent knew before they came); along the run, a read_committed fetch never shows a record of a
//! transaction its producer was told was aborted; at the end, read through
//! every agent: every acknowledged record of a committed transaction, none
//! of an aborted one, all or none of one whose end is unknown, nothing
//! twice and nothing never sent.

use std::collections::{BTreeMap, BTreeSet};

use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::*;
use floe_protocol::kafka_protocol::protocol::StrBytes;
use floe_protocol::testing::requests::produce;
use tokio::time::{Duration, Instant};

use super::audit::{Whole, read_whole};
use super::client::{Client, retriable};
use super::network::SimNetwork;
use super::produce::{Delivery, any_codec, deliver, encode, init_producer_id};
use super::read::{Answer, ReadPick, fetch_of};
use super::{Books, DELIVERY_TIMEOUT, KafkaSettings};
use crate::whole::Shared;

pub(super) const TXN_TOPIC: &str = "sim-txn";
/// librdkafka's `transaction.timeout.ms`.
const TXN_TIMEOUT_MS: i32 = 60_000;
/// The share of EndTxn requests abandoned after sending (a client's
/// timeout, then its retry through another agent).
const END_ABANDONED: f64 = 0.15;

/// How a transaction ended, as its producer was told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Told {
    Open,
    Committed,
    /// Its abort answered, or it was never asked to commit and its producer
    /// started over (which aborts it), or its producer was fenced.
    Aborted,
    /// Its commit was asked and never answered.
    Unknown,
}

/// A batch acknowledged: partition, base offset, values.
type AckedBatch = (i32, i64, Vec<String>);

/// What transactional producers were told, and what readers saw.
#[derive(Default)]
pub(super) struct TxnLedger {
    /// Per transaction (`t{producer}-{id}-{epoch}-n{number}`): its
    /// acknowledged batches (partition, base offset, values) and its end.
    txns: BTreeMap<String, (Vec<AckedBatch>, Told)>,
    sent: BTreeSet<String>,
    /// Per partition, one past the highest offset acknowledged.
    acked_end: BTreeMap<i32, i64>,
    /// Values read_committed fetches kept along the run.
    seen_committed: BTreeSet<String>,
}

/// The transaction a value was sent in: what precedes `-b`.
fn txn_of(value: &str) -> &str {
    value.split_once("-b").map_or(value, |(txn, _)| txn)
}

/// A transactional id and its producer's identity and sequences.
pub(super) struct Producer {
    pub(super) id: String,
    pub(super) identity: (i64, i16),
    pub(super) sequences: BTreeMap<i32, i32>,
}

/// One transactional producer, until `end`.
pub(super) async fn transact(
    client: Client,
    books: Books,
    me: usize,
    partitions: i32,
    end: Instant,
) {
    let id = format!("sim-txn-{me}");
    let mut producer = Producer::new(&client, id).await;
    let mut number = 0u64;
    while Instant::now() < end {
        number += 1;
        let (pid, epoch) = producer.identity;
        let name = format!("t{me}-{pid}-{epoch}-n{number}");
        let open = (Vec::new(), Told::Open);
        books
            .lock()
            .expect("books")
            .txns
            .txns
            .insert(name.clone(), open);
        let told = one_transaction(&client, &books, &mut producer, &name, partitions).await;
        books
            .lock()
            .expect("books")
            .txns
            .txns
            .get_mut(&name)
            .expect("txn")
            .1 = told;
        client.shared.with(|w| {
            match told {
                Told::Committed => w.summary.committed_txns += 1,
                Told::Aborted => w.summary.aborted_txns += 1,
                _ => w.summary.unknown_txns += 1,
            }
            w.log(format!("{name} ended: {told:?}"));
        });
        let pause = client
            .shared
            .with(|w| Duration::from_millis(w.rng_below(300)));
        tokio::time::sleep(pause).await;
    }
}

/// Adds partitions, produces, ends; what the producer was told. A producer
/// that could not end its transaction has started over when this returns.
async fn one_transaction(
    client: &Client,
    books: &Books,
    producer: &mut Producer,
    name: &str,
    partitions: i32,
) -> Told {
    let (chosen, commit) = client.shared.with(|w| {
        let first = w.rng_below(partitions as u64) as i32;
        let mut chosen = vec![first];
        if w.chance(0.5) {
            chosen.push((first + 1) % partitions);
        }
        (chosen, w.chance(0.7))
    });
    let wrote = add_partitions(client, producer, (TXN_TOPIC, &chosen)).await
        && produce_into(client, books, producer, name, &chosen).await;
    if !wrote {
        // Never asked to commit: starting over aborts it.
        producer.start_over(client).await;
        return Told::Aborted;
    }
    match end_txn(client, producer, commit).await {
        Ended::Yes => {
            return match commit {
                true => Told::Committed,
                false => Told::Aborted,
            };
        }
        // Fenced: its timeout aborted it, or (a commit whose first attempt
        // is still running somewhere while an abandoned InitProducerId
        // bumps the epoch) it committed: unknown, as Kafka's clients take it.
        Ended::Fenced | Ended::Unanswered if commit => {
            producer.start_over(client).await;
            return Told::Unknown;
        }
        Ended::Fenced | Ended::Unanswered => {}
    }
    producer.start_over(client).await;
    Told::Aborted
}

impl Producer {
    /// A producer of transactional id `id`, initialised.
    pub(super) async fn new(client: &Client, id: String) -> Producer {
        Producer {
            identity: init(client, &id).await,
            id,
            sequences: BTreeMap::new(),
        }
    }

    /// InitProducerId again: a new epoch, and what it left open ended.
    pub(super) async fn start_over(&mut self, client: &Client) {
        self.identity = init(client, &self.id).await;
        self.sequences.clear();
    }
}

/// Fenced error codes: the producer's epoch is over.
pub(super) fn fenced(code: i16) -> bool {
    [
        ResponseError::ProducerFenced,
        ResponseError::InvalidProducerEpoch,
    ]
    .iter()
    .any(|e| e.code() == code)
}

async fn init(client: &Client, id: &str) -> (i64, i16) {
    init_producer_id(client, Some(id), TXN_TIMEOUT_MS).await
}

/// AddPartitionsToTxn of `topic`'s `chosen` partitions until answered
/// (false: refused, or given up).
pub(super) async fn add_partitions(
    client: &Client,
    producer: &Producer,
    (topic, chosen): (&'static str, &[i32]),
) -> bool {
    use add_partitions_to_txn_request::*;
    let request = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(
            producer.id.clone(),
        )))
        .with_v3_and_below_producer_id(ProducerId(producer.identity.0))
        .with_v3_and_below_producer_epoch(producer.identity.1)
        .with_v3_and_below_topics(vec![
            AddPartitionsToTxnTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(topic)))
                .with_partitions(chosen.to_vec()),
        ]);
    let deadline = Instant::now() + DELIVERY_TIMEOUT;
    while Instant::now() < deadline {
        let answer: Result<AddPartitionsToTxnResponse, _> =
            client.call(ApiKey::AddPartitionsToTxn, 3, &request).await;
        if let Ok(r) = answer {
            let codes = r.results_by_topic_v3_and_below.iter();
            let codes = codes.flat_map(|t| t.results_by_partition.iter());
            let code = codes.map(|p| p.partition_error_code).find(|c| *c != 0);
            match code {
                None => return true,
                Some(code) if retriable(code) => {}
                Some(code) if fenced(code) => return false,
                Some(code) => {
                    client.shared.with(|w| {
                        w.anomaly(format!(
                            "AddPartitionsToTxn of {} refused: {code}",
                            producer.id
                        ))
                    });
                    return false;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// A batch or two to each partition of the transaction (false: one was
/// refused or given up).
async fn produce_into(
    client: &Client,
    books: &Books,
    producer: &mut Producer,
    name: &str,
    chosen: &[i32],
) -> bool {
    let mut batch = 0;
    for &partition in chosen {
        let batches = client.shared.with(|w| 1 + w.rng_below(2));
        for _ in 0..batches {
            batch += 1;
            let (count, codec) = client
                .shared
                .with(|w| (1 + w.rng_below(4) as i32, any_codec(w)));
            let values: Vec<String> = (0..count)
                .map(|i| format!("{name}-b{batch}-r{i}"))
                .collect();
            let sequence = *producer.sequences.entry(partition).or_default();
            let now_ms = client.shared.with(|w| w.now_ms());
            let records = encode(&values, producer.identity, sequence, now_ms, (codec, true));
            let request = produce(TXN_TOPIC, partition, records).with_transactional_id(Some(
                TransactionalId(StrBytes::from_string(producer.id.clone())),
            ));
            let sent = values.iter().cloned();
            books.lock().expect("books").txns.sent.extend(sent);
            match deliver(client, partition, &request).await {
                Delivery::Acked(offset) => {
                    *producer.sequences.entry(partition).or_default() += count;
                    let ledger = &mut books.lock().expect("books").txns;
                    let end = ledger.acked_end.entry(partition).or_default();
                    *end = (*end).max(offset + count as i64);
                    let txn = &mut ledger.txns.get_mut(name).expect("txn").0;
                    txn.push((partition, offset, values));
                }
                Delivery::GaveUp => return false,
                Delivery::Refused(code) if fenced(code) => return false,
                Delivery::Refused(code) => {
                    client.shared.with(|w| {
                        w.anomaly(format!(
                            "a transactional produce of {name} to partition {partition} \
                             was refused with error {code}"
                        ))
                    });
                    return false;
                }
            }
        }
    }
    true
}

/// How an EndTxn went.
pub(super) enum Ended {
    Yes,
    Fenced,
    Unanswered,
}

/// EndTxn until answered, through any agent, abandoning many.
pub(super) async fn end_txn(client: &Client, producer: &Producer, commit: bool) -> Ended {
    let request = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(producer.id.clone())))
        .with_producer_id(ProducerId(producer.identity.0))
        .with_producer_epoch(producer.identity.1)
        .with_committed(commit);
    let deadline = Instant::now() + DELIVERY_TIMEOUT;
    while Instant::now() < deadline {
        let answer: Result<EndTxnResponse, _> = client
            .call_abandoning(ApiKey::EndTxn, 3, &request, END_ABANDONED)
            .await;
        match answer {
            Ok(r) if r.error_code == 0 => return Ended::Yes,
            Ok(r) if fenced(r.error_code) => return Ended::Fenced,
            Ok(r) if !retriable(r.error_code) => {
                // The producer's own end, retried with the same decision,
                // of the transaction it has open: floe answers it (no stale
                // end of an earlier transaction ends this one).
                client.shared.with(|w| {
                    w.anomaly(format!(
                        "EndTxn({}) of {} {:?} refused: {}",
                        if commit { "commit" } else { "abort" },
                        producer.id,
                        producer.identity,
                        r.error_code
                    ))
                });
                return Ended::Unanswered;
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ended::Unanswered
}

/// A read_committed reader along the run: no record of a transaction told
/// aborted, and a last stable offset never above the high watermark.
pub(super) async fn read_committed_along(
    client: Client,
    books: Books,
    partitions: i32,
    end: Instant,
) {
    while Instant::now() < end {
        let ReadPick {
            partition,
            pause,
            from,
        } = {
            let ends = &books.lock().expect("books").txns.acked_end;
            ReadPick::draw(&client.shared, partitions, ends)
        };
        let request = fetch_of(TXN_TOPIC, partition, from, true);
        let answered: Result<FetchResponse, _> = client.call(ApiKey::Fetch, 12, &request).await;
        let answer = answered
            .map_err(drop)
            .and_then(|r| Answer::of(&client.shared, &r).map_err(drop));
        let Ok(answer) = answer else {
            tokio::time::sleep(pause).await;
            continue;
        };
        if answer.last_stable > answer.high_watermark {
            client.shared.with(|w| {
                w.anomaly(format!(
                    "{TXN_TOPIC}-{partition}: last stable offset {} above high watermark {}",
                    answer.last_stable, answer.high_watermark
                ))
            });
        }
        for (offset, value) in answer.kept(true) {
            if offset >= answer.last_stable {
                client.shared.with(|w| {
                    w.anomaly(format!(
                        "{TXN_TOPIC}-{partition}: read_committed gave {value} at {offset}, \
                         at or past the last stable offset {}",
                        answer.last_stable
                    ))
                });
            }
            let ledger = &mut books.lock().expect("books").txns;
            if let Some((_, Told::Aborted)) = ledger.txns.get(txn_of(&value)) {
                client.shared.with(|w| {
                    w.anomaly(format!(
                        "{TXN_TOPIC}-{partition}: read_committed gave {value} at {offset}, \
                         of a transaction told aborted"
                    ))
                });
            }
            ledger.seen_committed.insert(value);
        }
        tokio::time::sleep(pause).await;
    }
}

/// Reads the transactional topic whole through each agent, at both
/// isolation levels, and holds it to what producers were told.
pub(super) async fn audit_txns(
    shared: &Shared,
    net: &SimNetwork,
    books: &Books,
    settings: KafkaSettings,
) {
    // Per value, where read_committed readers found it.
    let mut visible: BTreeMap<String, (i32, i64)> = BTreeMap::new();
    let mut anomalies = Vec::new();
    for partition in 0..settings.partitions {
        let mut first: Option<(usize, Whole, Whole)> = None;
        for agent in 0..settings.agents {
            let all = read_whole(shared, net, agent, (TXN_TOPIC, partition), false).await;
            let committed = read_whole(shared, net, agent, (TXN_TOPIC, partition), true).await;
            match &first {
                None => first = Some((agent, all, committed)),
                Some((other, a, c)) if a.log != all.log || c.log != committed.log => anomalies
                    .push(format!(
                        "agents {other} and {agent} serve {TXN_TOPIC}-{partition} differently"
                    )),
                Some(_) => {}
            }
        }
        let Some((_, all, committed)) = first else {
            continue;
        };
        let ledger = &books.lock().expect("books").txns;
        let acked_end = ledger.acked_end.get(&partition).copied().unwrap_or(0);
        if all.high_watermark < acked_end {
            anomalies.push(format!(
                "{TXN_TOPIC}-{partition}: high watermark {} below {acked_end} acknowledged",
                all.high_watermark
            ));
        }
        let stored: BTreeMap<i64, &String> = all.log.iter().map(|(o, v)| (*o, v)).collect();
        for (batches, _) in ledger.txns.values() {
            for (p, base, values) in batches.iter().filter(|b| b.0 == partition) {
                for (i, value) in values.iter().enumerate() {
                    let at = base + i as i64;
                    if stored.get(&at) != Some(&value) {
                        anomalies.push(format!(
                            "acknowledged {value} at {TXN_TOPIC}-{p} offset {at}, which holds {:?}",
                            stored.get(&at)
                        ));
                    }
                }
            }
        }
        for (offset, value) in committed.log {
            if !ledger.sent.contains(&value) {
                anomalies.push(format!(
                    "{TXN_TOPIC}-{partition} offset {offset} holds {value}, never sent"
                ));
            }
            if let Some(before) = visible.insert(value.clone(), (partition, offset)) {
                anomalies.push(format!(
                    "{value} visible twice: at {before:?} and {:?}",
                    (partition, offset)
                ));
            }
        }
    }
    let ledger = &books.lock().expect("books").txns;
    for value in &ledger.seen_committed {
        if !visible.contains_key(value) {
            anomalies.push(format!(
                "{value} was read as committed along the run, and is not at the end"
            ));
        }
    }
    // Any record of an aborted transaction, acknowledged or not (a batch
    // given up may have landed).
    for value in visible.keys() {
        if let Some((_, Told::Aborted)) = ledger.txns.get(txn_of(value)) {
            anomalies.push(format!("{value} visible, of a transaction told aborted"));
        }
    }
    let mut audited = 0;
    for (name, (batches, told)) in &ledger.txns {
        let values = batches.iter().flat_map(|(_, _, values)| values);
        let shown = values.clone().filter(|v| visible.contains_key(*v)).count();
        let acked = values.count();
        audited += acked as u64;
        let fine = match told {
            Told::Committed => shown == acked,
            Told::Aborted => shown == 0,
            Told::Unknown | Told::Open => shown == 0 || shown == acked,
        };
        if !fine {
            anomalies.push(format!(
                "transaction {name}, told {told:?}: {shown} of its {acked} acknowledged \
                 records visible to read_committed"
            ));
        }
    }
    shared.with(|w| {
        w.summary.txn_records_audited += audited;
        w.log(format!(
            "audit: {} transactions, {audited} acknowledged records, {} visible",
            ledger.txns.len(),
            visible.len()
        ));
        for anomaly in anomalies {
            w.anomaly(anomaly);
        }
    });
}
