//! Transactions in the simulation. Transactional producers drive the
//! coordinator as a Kafka client does (InitProducerId, AddPartitionsToTxn,
//! transactional produces, EndTxn; retried on what a client retries), through
//! the agents' own coordinator steps (`floe_agent::write::txn_coordinator`) and
//! random live agents, while agents crash, the store and the metastore fail,
//! and each agent runs the timeout job. Now and then an application stalls
//! past its transaction's timeout, or restarts and fences what it left.
//!
//! The audit ([`check`]) holds the retained topic's log to Jepsen's
//! transactional anomalies:
//!
//! - aborted read: a record of an aborted transaction is visible to a
//!   read_committed consumer (filtering as Kafka's consumer does, with the
//!   metastore's last stable offset and aborted-transaction index);
//! - lost committed write: a record of a committed transaction, or one
//!   outside any transaction, below the last stable offset, is not visible;
//! - torn transaction: one transaction committed in one partition and
//!   aborted in another;
//! - a transaction a producer was told committed is aborted in the log, or
//!   one it aborted is committed;
//! - a transaction still open once everything settled (its timeout must
//!   have ended it), or a record of an open one below the last stable offset;
//! - a last stable offset read along the way above a transaction that had
//!   not ended then (its marker is at or past the high watermark read with it).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use floe_agent::handlers::txn::coordinator_error;
use floe_agent::write::txn_coordinator;
use floe_agent::write::txn_sightings::TxnSightings;
use floe_metastore::ops::AddToTxn;
use floe_metastore::{
    BatchKind, MetaError, Metastore, ProducerIdentity, TopicInfo, TopicPartition,
};
use floe_protocol::ResponseError;
use tokio::time::{Duration, Instant};

use super::audit::{Log, Stored};
use super::{Ack, Cluster, Shared};

/// What a producer was told of a transaction's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Committed,
    Aborted,
    /// A commit whose answer never came: committed or aborted, but whole.
    Unknown,
}

/// One transaction as its producer saw it.
#[derive(Debug, Clone)]
pub struct TxnRecord {
    /// For the trace: `t<producer>.<n>`.
    pub name: String,
    pub producer: ProducerIdentity,
    /// Batches sent: partition, batch id, and offset when acknowledged.
    pub batches: Vec<(i32, u64, Option<i64>)>,
    pub outcome: Outcome,
}

/// Transactional batches' ids, apart from the other producers' (`me << 40`).
const BATCH_IDS: u64 = 1 << 48;

/// Records in a transactional batch at most.
const MAX_RECORDS: i32 = 3;

/// A transactional producer writing to `topic` (the retained one, index 0)
/// until `stop`.
pub(super) async fn transact(
    shared: Shared,
    cluster: Arc<tokio::sync::Mutex<Cluster>>,
    meta: Arc<dyn Metastore>,
    topic: TopicInfo,
    me: usize,
    stop: Instant,
) {
    let id = format!("txn-{me}");
    let timeout_ms = shared.with(|w| 5_000 + w.rng_below(25_000)) as i32;
    let mut producer: Option<ProducerIdentity> = None;
    let mut sequences: BTreeMap<i32, i32> = BTreeMap::new();
    let mut n = 0u64;
    let mut batches = 0u64;
    // What its coordinator saw of its transactions (one for all agents
    // here: these steps run on any live agent's batcher).
    let sightings = TxnSightings::default();
    while Instant::now() < stop {
        let pause = shared.with(|w| w.rng_below(2_000));
        tokio::time::sleep(Duration::from_millis(pause)).await;
        // A restarted application, now and then: its InitProducerId fences
        // (and aborts) whatever its previous incarnation left open.
        if producer.is_none() || shared.with(|w| w.chance(0.03)) {
            producer = init(&shared, &cluster, meta.as_ref(), &id, timeout_ms, None).await;
            sequences.clear();
        }
        let Some(p) = producer else {
            continue;
        };
        n += 1;
        let mut txn = Transaction {
            shared: &shared,
            cluster: &cluster,
            meta: meta.as_ref(),
            sightings: &sightings,
            topic: &topic,
            id: &id,
            record: TxnRecord {
                name: format!("t{me}.{n}"),
                producer: p,
                batches: Vec::new(),
                outcome: Outcome::Aborted,
            },
            next_batch: &mut batches,
            sequences: &mut sequences,
            me,
            timeout_ms,
        };
        let next = txn.run().await;
        let record = txn.record;
        shared.with(|w| {
            match record.outcome {
                Outcome::Committed => w.summary.committed_txns += 1,
                Outcome::Aborted => w.summary.aborted_txns += 1,
                Outcome::Unknown => w.summary.unknown_txns += 1,
            }
            w.log(format!(
                "txn {} {:?} ({} batches), then {next:?}",
                record.name,
                record.outcome,
                record.batches.len()
            ));
            w.txns.push(record);
        });
        match next {
            Next::Continue => {}
            // The producer's sequences are in doubt: KIP-360's bump, which
            // names the identity it had (librdkafka's abortable idempotence
            // errors), half the time; else the application starts over.
            Next::Bump => {
                sequences.clear();
                producer = if shared.with(|w| w.chance(0.5)) {
                    init(&shared, &cluster, meta.as_ref(), &id, timeout_ms, Some(p)).await
                } else {
                    None
                };
            }
            Next::Fenced => producer = None,
            Next::Successor(successor) => {
                producer = Some(successor);
                sequences.clear();
            }
        }
    }
}

/// What a producer does after a transaction.
#[derive(Debug, Clone, Copy)]
enum Next {
    /// It ended as asked: the next transaction, same epoch.
    Continue,
    /// An abort after a batch given up on: its sequences are in doubt.
    Bump,
    /// Fenced or timed out: a fatal error, the application starts over.
    Fenced,
    /// Its application restarted while it went on (a zombie): the new
    /// incarnation's identity.
    Successor(ProducerIdentity),
}

/// InitProducerId through a random live agent, retried; `None` if it never
/// answered.
/// `expected`: the identity it had, for KIP-360's bump (asked again as it
/// was when an answer is lost; refused, the application starts over).
async fn init(
    shared: &Shared,
    cluster: &tokio::sync::Mutex<Cluster>,
    meta: &dyn Metastore,
    id: &str,
    timeout_ms: i32,
    mut expected: Option<ProducerIdentity>,
) -> Option<ProducerIdentity> {
    for _ in 0..20 {
        let Some(batcher) = super::any_live_batcher(shared, cluster).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        let now_ms = shared.with(|w| w.now_ms());
        let asked = txn_coordinator::init_producer(
            meta,
            &batcher,
            id,
            timeout_ms,
            expected,
            now_ms,
            floe_metastore::txn::DEFAULT_ABORT_CHECK_INTERVAL_MS,
        );
        match asked.await {
            Ok(p) => {
                shared.with(|w| w.log(format!("{id}: producer {p:?} (had {expected:?})")));
                return Some(p);
            }
            Err(e) => {
                shared.with(|w| w.log(format!("{id}: InitProducerId (had {expected:?}): {e}")));
                if matches!(
                    coordinator_error(&e, true),
                    ResponseError::ProducerFenced | ResponseError::InvalidProducerEpoch
                ) {
                    expected = None;
                }
                let backoff = shared.with(|w| w.rng_below(1_000));
                tokio::time::sleep(Duration::from_millis(100 + backoff)).await;
            }
        }
    }
    None
}

/// One transaction of one producer.
struct Transaction<'a> {
    shared: &'a Shared,
    cluster: &'a tokio::sync::Mutex<Cluster>,
    meta: &'a dyn Metastore,
    sightings: &'a TxnSightings,
    topic: &'a TopicInfo,
    id: &'a str,
    record: TxnRecord,
    next_batch: &'a mut u64,
    /// The producer's next sequence per partition, in its epoch (they go on
    /// across its transactions).
    sequences: &'a mut BTreeMap<i32, i32>,
    me: usize,
    timeout_ms: i32,
}

impl Transaction<'_> {
    /// Adds partitions, produces to them, ends; what the producer does next.
    async fn run(&mut self) -> Next {
        let shared = self.shared;
        let count = shared.with(|w| 1 + w.rng_below(3)) as usize;
        let partitions: BTreeSet<i32> = (0..count)
            .map(|_| shared.with(|w| w.rng_below(self.topic.partitions as u64) as i32))
            .collect();
        if !self.add(&partitions).await {
            // Refused (fenced, timed out) or never answered: whatever it
            // started ends aborted (fenced now, or at its timeout).
            return Next::Fenced;
        }
        let mut abandon = false;
        'produce: for &partition in &partitions {
            for _ in 0..1 + shared.with(|w| w.rng_below(2)) {
                if !self.produce(partition).await {
                    abandon = true;
                    break 'produce;
                }
            }
        }
        // Its application restarts elsewhere while this one goes on (a
        // zombie): the new incarnation's InitProducerId fences this
        // transaction, whose next batch and commit must then be refused.
        if !abandon && shared.with(|w| w.chance(0.04)) {
            shared.with(|w| {
                w.summary.zombies += 1;
                w.log(format!(
                    "txn {}: its application restarts elsewhere",
                    self.record.name
                ))
            });
            let successor = init(
                shared,
                self.cluster,
                self.meta,
                self.id,
                self.timeout_ms,
                None,
            )
            .await;
            let partition = *partitions.first().expect("at least one partition");
            self.produce(partition).await;
            self.end(true).await;
            return successor.map_or(Next::Fenced, Next::Successor);
        }
        // An application that stalls past its transaction's timeout: the
        // coordinator aborts the transaction and fences the producer.
        if !abandon && shared.with(|w| w.chance(0.05)) {
            let extra = shared.with(|w| w.rng_below(5_000));
            shared.with(|w| w.log(format!("txn {} stalls past its timeout", self.record.name)));
            tokio::time::sleep(Duration::from_millis(self.timeout_ms as u64 + extra)).await;
        }
        let commit = !abandon && shared.with(|w| w.chance(0.7));
        match (self.end(commit).await, abandon) {
            (true, false) => Next::Continue,
            (true, true) => Next::Bump,
            (false, _) => Next::Fenced,
        }
    }

    /// AddPartitionsToTxn, retried while the metastore does not answer.
    /// False if refused (fenced, timed out) or never answered.
    async fn add(&mut self, partitions: &BTreeSet<i32>) -> bool {
        let add = AddToTxn {
            transactional_id: self.id.to_string(),
            producer_id: self.record.producer.producer_id,
            epoch: self.record.producer.epoch,
            partitions: partitions
                .iter()
                .map(|&partition| TopicPartition {
                    topic_id: self.topic.id,
                    partition,
                })
                .collect(),
            groups: Vec::new(),
        };
        for _ in 0..10 {
            match txn_coordinator::add(self.meta, self.sightings, add.clone()).await {
                Ok(()) => return true,
                Err(e) => match take(self.shared, &self.record.name, "add", &e) {
                    Take::Retry => self.backoff().await,
                    Take::Fatal => return false,
                },
            }
        }
        false
    }

    /// One transactional batch, retried as a Kafka producer retries (the
    /// same sequence). False if refused or given up on.
    async fn produce(&mut self, partition: i32) -> bool {
        let shared = self.shared;
        *self.next_batch += 1;
        let batch = BATCH_IDS | (self.me as u64) << 40 | *self.next_batch;
        let records = 1 + shared.with(|w| w.rng_below(MAX_RECORDS as u64)) as i32;
        let sequence = self.sequences.get(&partition).copied().unwrap_or(0);
        let sent_ms = shared.with(|w| w.now_ms());
        let keys = vec![None; records as usize];
        let tombstones = vec![false; records as usize];
        let bytes = super::encode(
            batch,
            &keys,
            &tombstones,
            sent_ms,
            Some(self.record.producer),
            sequence,
            true,
        );
        for _ in 0..10 {
            let answer = super::deliver(
                shared,
                self.cluster,
                self.topic.id,
                partition,
                &bytes,
                BatchKind::Transactional,
            )
            .await;
            match answer {
                Some(Ok(offset)) => {
                    shared.with(|w| {
                        w.summary.acked_batches += 1;
                        w.log(format!(
                            "ack b{batch:x} {}/{partition}@{offset} x{records} in txn {}",
                            self.topic.name, self.record.name
                        ));
                        w.acks.push(Ack {
                            topic: 0,
                            topic_id: self.topic.id,
                            partition,
                            offset,
                            batch,
                            records,
                            keys: keys.clone(),
                            tombstones: tombstones.clone(),
                            idempotent: true,
                            sent_ms,
                        });
                    });
                    self.record.batches.push((partition, batch, Some(offset)));
                    self.sequences
                        .insert(partition, sequence.wrapping_add(records));
                    return true;
                }
                Some(Err(e)) if super::retriable(&e) => self.backoff().await,
                None => tokio::time::sleep(Duration::from_millis(500)).await,
                Some(Err(e)) => {
                    shared.with(|w| {
                        w.log(format!(
                            "txn {}: b{batch:x} {}/{partition} refused: {e}",
                            self.record.name, self.topic.name
                        ))
                    });
                    break;
                }
            }
        }
        // It may still land (an answer lost): the audit looks for it.
        self.record.batches.push((partition, batch, None));
        false
    }

    /// EndTxn through random live agents, retried while its outcome is
    /// unknown. Records the outcome; true if it ended as asked.
    async fn end(&mut self, commit: bool) -> bool {
        let mut maybe_applied = false;
        for _ in 0..10 {
            let Some(batcher) = super::any_live_batcher(self.shared, self.cluster).await else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            let now_ms = self.shared.with(|w| w.now_ms());
            let ended = txn_coordinator::end(
                self.meta,
                (&batcher, self.sightings),
                self.id,
                self.record.producer,
                (commit, false),
                now_ms,
            )
            .await;
            match ended {
                Ok(()) => {
                    self.record.outcome = if commit {
                        Outcome::Committed
                    } else {
                        Outcome::Aborted
                    };
                    return true;
                }
                Err(e) => match take(self.shared, &self.record.name, "end", &e) {
                    Take::Retry => {
                        maybe_applied |= !e.certainly_not_applied();
                        self.backoff().await;
                    }
                    // The coordinator decided: the transaction was not
                    // this producer's to end (it timed out, or was
                    // fenced), so it ends aborted, unless an attempt of
                    // this commit may have landed first.
                    Take::Fatal => {
                        self.record.outcome = if commit && maybe_applied {
                            Outcome::Unknown
                        } else {
                            Outcome::Aborted
                        };
                        return false;
                    }
                },
            }
        }
        // Never answered: an abort is an abort (the timeout ends it if this
        // did not); a commit may or may not have landed.
        self.record.outcome = if commit {
            Outcome::Unknown
        } else {
            Outcome::Aborted
        };
        false
    }

    async fn backoff(&self) {
        let backoff = self.shared.with(|w| w.rng_below(1_000));
        tokio::time::sleep(Duration::from_millis(100 + backoff)).await;
    }
}

/// How a Kafka client takes a coordinator's refusal.
enum Take {
    Retry,
    Fatal,
}

/// The error the agents would send for `e` (`coordinator_error`), taken as
/// a Kafka client takes it: COORDINATOR_NOT_AVAILABLE (the metastore did
/// not answer, or refused without deciding) and CONCURRENT_TRANSACTIONS are
/// retried; a fence or a state the producer cannot leave is fatal; any other
/// is not an answer a coordinator gives here (an anomaly).
fn take(shared: &Shared, txn: &str, what: &str, e: &MetaError) -> Take {
    match coordinator_error(e, true) {
        ResponseError::CoordinatorNotAvailable | ResponseError::ConcurrentTransactions => {
            Take::Retry
        }
        error @ (ResponseError::ProducerFenced
        | ResponseError::InvalidProducerEpoch
        | ResponseError::InvalidProducerIdMapping
        | ResponseError::InvalidTxnState) => {
            shared.with(|w| w.log(format!("txn {txn}: {what} refused: {error:?} ({e})")));
            Take::Fatal
        }
        error => {
            shared.with(|w| {
                w.anomaly(format!(
                    "txn {txn}: {what} answered {error:?} ({e}), which a coordinator does not answer here"
                ))
            });
            Take::Fatal
        }
    }
}

/// Each transactional record's fate by its partition's markers: the first
/// COMMIT or ABORT of its producer after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Committed,
    Aborted,
}

/// The final audit of transactions on `topic`'s logs (see the module).
/// `stable_seen`: (partition, log start, last stable offset, high watermark) as read
/// along the way; `polled`, what the poller read of the topic. Answers the
/// anomalies, and how many transactional records had their fate judged.
pub fn check(
    topic: &TopicInfo,
    logs: &BTreeMap<i32, &Log>,
    polled: &BTreeMap<(i32, i64), Stored>,
    txns: &[TxnRecord],
    stable_seen: &[(i32, i64, i64, i64)],
) -> (Vec<String>, u64) {
    let name = &topic.name;
    let mut anomalies = Vec::new();
    let mut fates: BTreeMap<(i32, i64), Fate> = BTreeMap::new();
    // Per partition, each transactional record's marker offset.
    let mut ends: BTreeMap<i32, BTreeMap<i64, i64>> = BTreeMap::new();
    // Where each record (by its name) is in what is known: once, if at all.
    let mut copies: BTreeMap<&str, Vec<(i32, i64)>> = BTreeMap::new();
    // Every record known: what was polled before the log start, then the log.
    let mut history: BTreeMap<i32, BTreeMap<i64, &Stored>> = BTreeMap::new();
    for (&p, log) in logs {
        let known = history.entry(p).or_default();
        for ((_, offset), r) in polled.range((p, i64::MIN)..(p, log.start)) {
            known.insert(*offset, r);
        }
        known.extend(log.records.iter().map(|(o, r)| (*o, r)));
    }
    for (&p, log) in logs {
        // Fates, from the markers: a transactional record's is the first
        // marker of its producer after it. Across a gap in what is known
        // (retention ran ahead of the poller) a marker may be missing, so
        // records before a gap without one are left undecided.
        let mut pending: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        let mut next = None;
        for (&offset, r) in &history[&p] {
            if next.is_some_and(|n| n != offset) {
                pending.clear();
            }
            next = Some(offset + 1);
            if let Some(commit) = r.marker {
                let fate = if commit {
                    Fate::Committed
                } else {
                    Fate::Aborted
                };
                for o in pending.remove(&r.producer_id).unwrap_or_default() {
                    fates.insert((p, o), fate);
                    ends.entry(p).or_default().insert(o, offset);
                }
            } else if r.transactional {
                pending.entry(r.producer_id).or_default().push(offset);
            }
            if r.marker.is_none() {
                copies
                    .entry(r.value.as_str())
                    .or_default()
                    .push((p, offset));
            }
        }
        // Known up to the high watermark (the log has no gaps, but may be
        // empty, its records all removed unseen), what is pending after the
        // last gap has no marker at all.
        if next.is_some_and(|n| n != log.high_watermark) {
            pending.clear();
        }
        for (pid, offsets) in &pending {
            if let (Some(first), Some(last)) = (offsets.first(), offsets.last()) {
                anomalies.push(format!(
                    "{name}/{p}: producer {pid}'s transaction at {first}..={last} is still open once everything settled"
                ));
            }
        }
        if log.last_stable != log.high_watermark {
            anomalies.push(format!(
                "{name}/{p}: the last stable offset is {}, the high watermark {}, once everything settled",
                log.last_stable, log.high_watermark
            ));
        }
        // What a read_committed consumer sees: records below the last
        // stable offset, without those of the aborted transactions the
        // metastore lists (Kafka's consumer filter, as its Fetcher applies
        // it), nor markers.
        let mut aborted: VecDeque<_> = {
            let mut a = log.aborted.clone();
            a.sort_by_key(|a| a.first_offset);
            a.into()
        };
        let mut aborted_producers = BTreeSet::new();
        for (&offset, r) in log.records.range(..log.last_stable) {
            while aborted.front().is_some_and(|a| a.first_offset <= offset) {
                let a = aborted.pop_front().expect("a front");
                aborted_producers.insert(a.producer_id);
            }
            if let Some(commit) = r.marker {
                if !commit {
                    aborted_producers.remove(&r.producer_id);
                }
                continue;
            }
            let visible = !(r.transactional && aborted_producers.contains(&r.producer_id));
            let fate = fates.get(&(p, offset)).copied();
            let expected = match (r.transactional, fate) {
                (false, _) => true,
                (true, Some(Fate::Committed)) => true,
                (true, Some(Fate::Aborted)) => false,
                (true, None) => {
                    anomalies.push(format!(
                        "{name}/{p}@{offset} ({}) of an open transaction is below the last stable offset {}",
                        r.value, log.last_stable
                    ));
                    continue;
                }
            };
            if visible && !expected {
                anomalies.push(format!(
                    "aborted read: {name}/{p}@{offset} ({}) of an aborted transaction is visible to read_committed consumers",
                    r.value
                ));
            } else if !visible && expected {
                anomalies.push(format!(
                    "lost write: {name}/{p}@{offset} ({}) is hidden from read_committed consumers (its transaction committed, or it is in none)",
                    r.value
                ));
            }
        }
    }
    // A last stable offset read along the way: every transaction with data
    // below it had ended, so its marker was below the high watermark read
    // with it. (Records since removed are not checked.)
    for &(p, start, stable, high) in stable_seen {
        if !(start <= stable && stable <= high) {
            anomalies.push(format!(
                "{name}/{p}: the last stable offset was read as {stable}, outside the log [{start}, {high}]"
            ));
            continue;
        }
        let Some(ends) = ends.get(&p) else { continue };
        // Kafka's LSO is never below the log start: data below it does not count.
        if let Some((data, marker)) = ends.range(start..stable).find(|(_, m)| **m >= high) {
            anomalies.push(format!(
                "{name}/{p}: the last stable offset was read as {stable} (log start {start}, high watermark {high}), above {data} whose transaction ended later, at {marker}"
            ));
        }
    }
    // Each transaction whole, and as its producer was told.
    for t in txns {
        let mut seen: Vec<(u64, i32, i64, Fate)> = Vec::new();
        for &(_, batch, _) in &t.batches {
            // Every record of it that is known (a trim may have cut the
            // batch), wherever it is (an acknowledgement may have been lost).
            for i in 0..MAX_RECORDS {
                let Some(at) = copies.get(super::value(batch, i).as_str()) else {
                    continue;
                };
                if at.len() > 1 {
                    anomalies.push(format!(
                        "duplicate: record {i} of transactional b{batch:x} is at {at:?} of {name}"
                    ));
                }
                for &(p, offset) in at {
                    if let Some(&fate) = fates.get(&(p, offset)) {
                        seen.push((batch, p, offset, fate));
                    }
                }
            }
        }
        let committed = seen.iter().find(|s| s.3 == Fate::Committed);
        let aborted = seen.iter().find(|s| s.3 == Fate::Aborted);
        if let (Some(c), Some(a)) = (committed, aborted) {
            anomalies.push(format!(
                "torn transaction {}: b{:x} at {name}/{}@{} committed, b{:x} at {name}/{}@{} aborted",
                t.name, c.0, c.1, c.2, a.0, a.1, a.2
            ));
        }
        match (t.outcome, committed, aborted) {
            (Outcome::Committed, _, Some(a)) => anomalies.push(format!(
                "lost write: transaction {} was committed, yet b{:x} at {name}/{}@{} is aborted",
                t.name, a.0, a.1, a.2
            )),
            (Outcome::Aborted, Some(c), _) => anomalies.push(format!(
                "aborted read: transaction {} was aborted, yet b{:x} at {name}/{}@{} is committed",
                t.name, c.0, c.1, c.2
            )),
            _ => {}
        }
    }
    (anomalies, fates.len() as u64)
}
