//! Transactions in the state machine, through its commands and queries
//! only: Kafka's transitions row by row, the KIP-890 check, the last stable
//! offset and the aborted index. Every command is applied as a leader
//! proposes it, so the invariants (`State::check_invariants`) are checked
//! after each one.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::ops::*;
use crate::state::{Apply, Query};
use crate::state::{Proposal, State};
use crate::txn::{AbortedTxn, EndReason, TxnEnd, TxnPhase, TxnView};
use crate::types::*;

const TIMEOUT_MS: i32 = 60_000;

/// A state with topic "t" of three partitions, at time 1 000.
fn state() -> (State, TopicId) {
    let mut s = State::default();
    let t = Uuid::from_u128(1);
    at(
        &mut s,
        1_000,
        CreateTopic {
            id: t,
            topic: NewTopic {
                name: "t".into(),
                partitions: 3,
                configs: BTreeMap::new(),
            },
        },
    )
    .unwrap();
    (s, t)
}

fn at<C: Apply>(s: &mut State, at_ms: i64, command: C) -> Result<C::Output, Refusal> {
    let reply = s.apply_proposal(Proposal {
        at_ms,
        command: command.into(),
    });
    reply.answer::<C>().unwrap()
}

fn init(s: &mut State, now: i64, id: &str) -> Result<ProducerIdentity, Refusal> {
    init_expecting(s, now, id, None)
}

fn init_expecting(
    s: &mut State,
    now: i64,
    id: &str,
    expected: Option<ProducerIdentity>,
) -> Result<ProducerIdentity, Refusal> {
    at(
        s,
        now,
        InitTxnProducer {
            transactional_id: id.into(),
            timeout_ms: TIMEOUT_MS,
            expected,
        },
    )
}

fn add(
    s: &mut State,
    now: i64,
    id: &str,
    p: ProducerIdentity,
    partitions: &[TopicPartition],
) -> Result<u64, Refusal> {
    at(
        s,
        now,
        AddToTxn {
            transactional_id: id.into(),
            producer_id: p.producer_id,
            epoch: p.epoch,
            partitions: partitions.to_vec(),
            groups: vec![],
        },
    )
}

fn tp(t: TopicId, partition: i32) -> TopicPartition {
    TopicPartition::new(t, partition)
}

/// `count` records of producer `p` at sequence `seq` (`p` None: plain, not
/// idempotent).
fn data(tp: TopicPartition, p: Option<ProducerIdentity>, seq: i32, count: i32) -> CommitBatch {
    CommitBatch {
        topic_id: tp.topic_id,
        partition: tp.partition,
        position: 0,
        length: 100,
        record_count: count,
        max_timestamp: 1_000,
        producer_id: p.map_or(-1, |p| p.producer_id),
        producer_epoch: p.map_or(-1, |p| p.epoch),
        base_sequence: if p.is_some() { seq } else { -1 },
    }
}

fn marker(tp: TopicPartition, producer_id: i64, epoch: i16) -> CommitBatch {
    CommitBatch {
        record_count: 1,
        length: 78,
        producer_id,
        producer_epoch: epoch,
        base_sequence: -1,
        ..data(tp, None, 0, 1)
    }
}

/// Sequences one object of `batches`, ending `ends`; each batch's answer.
fn ingest(
    s: &mut State,
    now: i64,
    key: &str,
    batches: Vec<(CommitBatch, BatchKind)>,
    ends: Vec<TxnEnd>,
) -> Vec<Result<i64, Refusal>> {
    at(
        s,
        now,
        IngestCommit {
            object_key: key.into(),
            object_size: 1_000,
            batches: batches
                .into_iter()
                .map(|(batch, kind)| IngestBatch { batch, kind })
                .collect(),
            ends,
            not_before_ms: now,
        },
    )
    .unwrap()
    .into_iter()
    .map(|placed| placed.map(|p| p.base_offset))
    .collect()
}

fn txn_data(s: &mut State, now: i64, key: &str, batch: CommitBatch) -> Result<i64, Refusal> {
    ingest(s, now, key, vec![(batch, BatchKind::Transactional)], vec![])
        .pop()
        .unwrap()
}

fn known(s: &State, id: &str) -> Option<TxnView> {
    DescribeTxns {
        ids: vec![id.into()],
    }
    .query(s, s.clock_ms())
    .unwrap()
    .pop()
    .unwrap()
}

fn view(s: &State, id: &str) -> TxnView {
    DescribeTxns {
        ids: vec![id.into()],
    }
    .query(s, s.clock_ms())
    .unwrap()
    .pop()
    .unwrap()
    .expect("a known transactional id")
}

fn end(s: &State, id: &str, commit: bool, reason: EndReason) -> TxnEnd {
    let v = view(s, id);
    TxnEnd {
        transactional_id: id.into(),
        producer_id: v.producer_id,
        epoch: v.epoch,
        commit,
        reason,
        version: v.version,
    }
}

/// Ends `id` with one marker per partition of its transaction; the
/// markers' answers.
fn end_with_markers(
    s: &mut State,
    now: i64,
    key: &str,
    id: &str,
    commit: bool,
    reason: EndReason,
) -> Vec<Result<i64, Refusal>> {
    let e = end(s, id, commit, reason);
    let markers = view(s, id)
        .partitions
        .into_iter()
        .map(|p| {
            (
                marker(p, e.producer_id, e.marker_epoch()),
                BatchKind::Marker { end: 0 },
            )
        })
        .collect();
    ingest(s, now, key, markers, vec![e])
}

fn lso(s: &State, tp: TopicPartition) -> i64 {
    match s
        .list_offsets(tp.topic_id, tp.partition, OffsetQuery::LastStable)
        .unwrap()
    {
        OffsetAnswer::Offset(o) => o,
        other => panic!("{other:?}"),
    }
}

fn hw(s: &State, tp: TopicPartition) -> i64 {
    s.offsets(tp.topic_id, tp.partition).unwrap().high_watermark
}

fn aborted(s: &State, tp: TopicPartition, from: i64) -> Vec<AbortedTxn> {
    s.txn_read_plan(tp.topic_id, tp.partition, from, u64::MAX)
        .unwrap()
        .aborted
}

#[test]
fn an_open_transaction_holds_the_last_stable_offset_until_its_markers() {
    let (mut s, t) = state();
    let (p0, p1) = (tp(t, 0), tp(t, 1));
    let p = init(&mut s, 2_000, "tx").unwrap();
    add(&mut s, 2_000, "tx", p, &[p0, p1]).unwrap();
    // Plain records before, then the transaction's, then plain ones again.
    ingest(
        &mut s,
        2_100,
        "a",
        vec![(data(p0, None, 0, 2), BatchKind::Plain)],
        vec![],
    );
    assert_eq!(txn_data(&mut s, 2_200, "b", data(p0, Some(p), 0, 3)), Ok(2));
    ingest(
        &mut s,
        2_300,
        "c",
        vec![(data(p0, None, 0, 4), BatchKind::Plain)],
        vec![],
    );
    assert_eq!((lso(&s, p0), hw(&s, p0)), (2, 9));
    // p1 was added but holds no data: nothing unstable there.
    assert_eq!(lso(&s, p1), 0);
    let plan = s.txn_read_plan(t, 0, 0, u64::MAX).unwrap();
    assert_eq!((plan.last_stable_offset, plan.aborted.len()), (2, 0));

    let markers = end_with_markers(&mut s, 2_400, "d", "tx", false, EndReason::Client);
    assert_eq!(markers, vec![Ok(9), Ok(0)]);
    assert_eq!((lso(&s, p0), hw(&s, p0)), (10, 10));
    assert_eq!((lso(&s, p1), hw(&s, p1)), (1, 1));
    // The aborted range runs from the first batch to the marker; a
    // partition without data has a marker but no entry.
    let entry = AbortedTxn {
        producer_id: p.producer_id,
        first_offset: 2,
        last_offset: 9,
        lso_after: 10,
    };
    assert_eq!(aborted(&s, p0, 0), vec![entry]);
    assert_eq!(aborted(&s, p1, 0), vec![]);
    assert_eq!(view(&s, "tx").phase, TxnPhase::CompleteAbort);

    // The next transaction commits: no entry, the abort's stays.
    add(&mut s, 3_000, "tx", p, &[p0]).unwrap();
    assert_eq!(
        txn_data(&mut s, 3_000, "e", data(p0, Some(p), 3, 1)),
        Ok(10)
    );
    assert_eq!(lso(&s, p0), 10);
    end_with_markers(&mut s, 3_100, "f", "tx", true, EndReason::Client);
    assert_eq!((lso(&s, p0), hw(&s, p0)), (12, 12));
    assert_eq!(aborted(&s, p0, 0), vec![entry]);
    // A read from past the aborted range is not told of it.
    assert_eq!(aborted(&s, p0, 10), vec![]);
    assert_eq!(view(&s, "tx").phase, TxnPhase::CompleteCommit);
}

/// Jepsen's finding, KIP-890's check: a transactional batch is sequenced
/// only into a partition of an ongoing transaction of its producer and
/// epoch, so a produce retry that arrives after its transaction ended
/// cannot land in the log (or in the next transaction).
/// A transactions-v1 EndTxn names only the producer; `began` tells its
/// transactions apart, even two begun in the same millisecond.
#[test]
fn each_transaction_of_a_producer_has_its_own_identity() {
    let (mut s, t) = state();
    let p = init(&mut s, 1_000, "x").unwrap();
    let first = add(&mut s, 1_000, "x", p, &[tp(t, 0)]).unwrap();
    assert_eq!(view(&s, "x").began, first);
    // Adding to the ongoing transaction keeps it.
    assert_eq!(add(&mut s, 1_000, "x", p, &[tp(t, 1)]).unwrap(), first);
    assert_eq!(add(&mut s, 1_000, "x", p, &[tp(t, 1)]).unwrap(), first);
    end_with_markers(&mut s, 1_000, "k1", "x", true, EndReason::Client);
    assert_eq!(view(&s, "x").phase, TxnPhase::CompleteCommit);
    let next = add(&mut s, 1_000, "x", p, &[tp(t, 0)]).unwrap();
    assert!(next > first, "{next} after {first}");
    let v = view(&s, "x");
    assert_eq!((v.began, v.start_ms, v.epoch), (next, 1_000, p.epoch));
}

#[test]
fn a_transactional_batch_outside_an_ongoing_transaction_is_refused() {
    let (mut s, t) = state();
    let (p0, p1) = (tp(t, 0), tp(t, 1));
    let p = init(&mut s, 2_000, "tx").unwrap();
    // Before any AddPartitionsToTxn.
    assert_eq!(
        txn_data(&mut s, 2_000, "a", data(p0, Some(p), 0, 1)),
        Err(Refusal::NotInTransaction)
    );
    add(&mut s, 2_000, "tx", p, &[p0]).unwrap();
    // A partition that was not added.
    assert_eq!(
        txn_data(&mut s, 2_000, "b", data(p1, Some(p), 0, 1)),
        Err(Refusal::NotInTransaction)
    );
    assert_eq!(txn_data(&mut s, 2_000, "c", data(p0, Some(p), 0, 2)), Ok(0));
    end_with_markers(&mut s, 2_100, "d", "tx", true, EndReason::Client);
    // The late retry of a batch of the ended transaction, and the next
    // batch it would have sent.
    assert_eq!(
        txn_data(&mut s, 2_200, "e", data(p0, Some(p), 0, 2)),
        Err(Refusal::NotInTransaction)
    );
    assert_eq!(
        txn_data(&mut s, 2_200, "f", data(p0, Some(p), 2, 1)),
        Err(Refusal::NotInTransaction)
    );
    // Another epoch, or a producer id the transactional id does not have.
    add(&mut s, 2_300, "tx", p, &[p0]).unwrap();
    let older = ProducerIdentity {
        epoch: p.epoch - 1,
        ..p
    };
    assert!(matches!(
        txn_data(&mut s, 2_300, "g", data(p0, Some(older), 2, 1)),
        Err(Refusal::InvalidProducerEpoch { .. })
    ));
    let idempotent = at(&mut s, 2_300, InitProducer { existing: None }).unwrap();
    assert_eq!(
        txn_data(&mut s, 2_300, "h", data(p0, Some(idempotent), 0, 1)),
        Err(Refusal::InvalidProducerIdMapping)
    );
    // A plain batch from the producer in the middle of its transaction.
    assert_eq!(txn_data(&mut s, 2_300, "i", data(p0, Some(p), 2, 1)), Ok(3));
    let plain = ingest(
        &mut s,
        2_300,
        "j",
        vec![(data(p0, Some(p), 3, 1), BatchKind::Plain)],
        vec![],
    );
    assert!(matches!(plain[0], Err(Refusal::InvalidTxnState(_))));
    assert_eq!(hw(&s, p0), 4, "nothing refused reached the log");
}

#[test]
fn ends_are_checked_as_kafkas_end_transaction() {
    let (mut s, t) = state();
    let (p0, p1) = (tp(t, 0), tp(t, 1));
    let p = init(&mut s, 2_000, "tx").unwrap();
    // Nothing to end.
    let empty = end(&s, "tx", true, EndReason::Client);
    assert!(matches!(
        at(&mut s, 2_000, EndTxn { end: empty.clone() }),
        Err(Refusal::InvalidTxnState(_))
    ));
    add(&mut s, 2_000, "tx", p, &[p0]).unwrap();
    let stale = end(&s, "tx", true, EndReason::Client);
    add(&mut s, 2_000, "tx", p, &[p1]).unwrap();
    // Markers built before p1 was added: refused whole, nothing written.
    let refused = ingest(
        &mut s,
        2_100,
        "a",
        vec![(
            marker(p0, p.producer_id, p.epoch),
            BatchKind::Marker { end: 0 },
        )],
        vec![stale],
    );
    assert_eq!(refused, vec![Err(Refusal::ConcurrentTransactions)]);
    assert_eq!(hw(&s, p0), 0);
    // Markers of the wrong epoch.
    let mut e = end(&s, "tx", true, EndReason::Client);
    let wrong = ingest(
        &mut s,
        2_100,
        "b",
        vec![
            (
                marker(p0, p.producer_id, p.epoch + 1),
                BatchKind::Marker { end: 0 },
            ),
            (
                marker(p1, p.producer_id, p.epoch + 1),
                BatchKind::Marker { end: 0 },
            ),
        ],
        vec![e.clone()],
    );
    assert!(
        wrong
            .iter()
            .all(|r| matches!(r, Err(Refusal::InvalidTxnState(_))))
    );
    // A transaction with partitions cannot end without markers.
    assert_eq!(
        at(&mut s, 2_100, EndTxn { end: e.clone() }),
        Err(Refusal::ConcurrentTransactions)
    );
    // Another producer's epoch.
    e.epoch += 1;
    assert!(matches!(
        at(&mut s, 2_100, EndTxn { end: e }),
        Err(Refusal::ProducerFenced { .. })
    ));
    assert_eq!(
        end_with_markers(&mut s, 2_200, "c", "tx", true, EndReason::Client),
        vec![Ok(0), Ok(0)]
    );
    // EndTxn retried: answered as done; the other outcome is refused.
    let done = TxnEnd {
        version: view(&s, "tx").version,
        ..end(&s, "tx", true, EndReason::Client)
    };
    assert_eq!(
        at(&mut s, 2_300, EndTxn { end: done.clone() }),
        Err(Refusal::TxnEnded { committed: true })
    );
    assert!(matches!(
        at(
            &mut s,
            2_300,
            EndTxn {
                end: TxnEnd {
                    commit: false,
                    ..done
                }
            }
        ),
        Err(Refusal::InvalidTxnState(_))
    ));
    // A transaction of offsets only ends without markers.
    at(
        &mut s,
        2_400,
        AddToTxn {
            transactional_id: "tx".into(),
            producer_id: p.producer_id,
            epoch: p.epoch,
            partitions: vec![],
            groups: vec!["g".into()],
        },
    )
    .unwrap();
    let offsets_only = end(&s, "tx", true, EndReason::Client);
    at(&mut s, 2_400, EndTxn { end: offsets_only }).unwrap();
    assert_eq!(view(&s, "tx").phase, TxnPhase::CompleteCommit);
}

/// A transaction past its timeout (on the metastore's clock, from its
/// start) is as good as fenced: no more data, adds or commit; the timeout
/// job aborts it with the epoch bumped, which fences its producer for good.
#[test]
fn a_timed_out_transaction_is_fenced_and_aborted() {
    let (mut s, t) = state();
    let p0 = tp(t, 0);
    let p = init(&mut s, 2_000, "tx").unwrap();
    add(&mut s, 2_000, "tx", p, &[p0]).unwrap();
    assert_eq!(txn_data(&mut s, 2_000, "a", data(p0, Some(p), 0, 1)), Ok(0));
    // Not yet expired: the timeout job may not abort it.
    let early = end_with_markers(
        &mut s,
        2_000 + TIMEOUT_MS as i64,
        "b",
        "tx",
        false,
        EndReason::Timeout,
    );
    assert!(matches!(early[0], Err(Refusal::InvalidTxnState(_))));
    let late = 2_001 + TIMEOUT_MS as i64;
    assert!(matches!(
        txn_data(&mut s, late, "c", data(p0, Some(p), 1, 1)),
        Err(Refusal::InvalidProducerEpoch { .. })
    ));
    assert!(matches!(
        add(&mut s, late, "tx", p, &[tp(t, 1)]),
        Err(Refusal::ProducerFenced { .. })
    ));
    assert_eq!(
        ExpiredTxns { limit: 10 }.query(&s, late).unwrap().len(),
        1,
        "the timeout job finds it"
    );
    let commit = end_with_markers(&mut s, late, "d", "tx", true, EndReason::Client);
    assert!(matches!(commit[0], Err(Refusal::ProducerFenced { .. })));
    let abort = end_with_markers(&mut s, late, "e", "tx", false, EndReason::Timeout);
    assert_eq!(abort, vec![Ok(1)]);
    let v = view(&s, "tx");
    assert_eq!((v.phase, v.epoch), (TxnPhase::CompleteAbort, p.epoch + 1));
    assert_eq!(aborted(&s, p0, 0).len(), 1);
    // The zombie's every request is fenced.
    assert!(matches!(
        add(&mut s, late, "tx", p, &[p0]),
        Err(Refusal::ProducerFenced { .. })
    ));
    assert!(matches!(
        init_expecting(&mut s, late, "tx", Some(p)),
        Err(Refusal::ProducerFenced { .. })
    ));
    assert!(
        ExpiredTxns { limit: 10 }
            .query(&s, late)
            .unwrap()
            .is_empty()
    );
}

/// From format 11, a transaction times out when the coordinator's
/// periodic look finds it past its timeout (Kafka's
/// `transaction.abort.timed.out.transaction.cleanup.interval.ms`, 10 s):
/// here at the first multiple of the interval after the deadline, on the
/// metastore's clock. Until then its producer may still write and commit.
#[test]
fn a_transaction_times_out_at_the_coordinator_s_next_look() {
    let (mut s, t) = state();
    let p0 = tp(t, 0);
    let init = InitTxnProducerChecked {
        init: InitTxnProducer {
            transactional_id: "tx".into(),
            timeout_ms: 1_000,
            expected: None,
        },
        abort_check_interval_ms: 10_000,
    };
    // Started at 22 s with a 1 s timeout: past it at 23 s, found at 30 s.
    let p = at(&mut s, 22_000, init.clone()).unwrap();
    add(&mut s, 22_000, "tx", p, &[p0]).unwrap();
    let expired = |s: &State, now| ExpiredTxns { limit: 10 }.query(s, now).unwrap().len();
    assert_eq!((expired(&s, 23_001), expired(&s, 29_999)), (0, 0));
    assert_eq!(expired(&s, 30_000), 1);
    // Before the look, the producer is served as Kafka serves it.
    assert_eq!(
        txn_data(&mut s, 29_000, "a", data(p0, Some(p), 0, 1)),
        Ok(0)
    );
    let commit = end_with_markers(&mut s, 29_999, "b", "tx", true, EndReason::Client);
    assert_eq!(commit, vec![Ok(1)]);
    // The next transaction, found at the look: fenced, and aborted by the job.
    add(&mut s, 40_500, "tx", p, &[p0]).unwrap();
    assert!(matches!(
        add(&mut s, 50_000, "tx", p, &[tp(t, 1)]),
        Err(Refusal::ProducerFenced { .. })
    ));
    let abort = end_with_markers(&mut s, 50_000, "c", "tx", false, EndReason::Timeout);
    assert_eq!(abort, vec![Ok(2)]);
}

/// InitProducerId with a transactional id, as `handleInitProducerId`.
#[test]
fn init_bumps_epochs_and_fences_an_ongoing_transaction() {
    let (mut s, t) = state();
    let p0 = tp(t, 0);
    let first = init(&mut s, 2_000, "tx").unwrap();
    assert_eq!(first.epoch, 0);
    let second = init(&mut s, 2_000, "tx").unwrap();
    assert_eq!(second, ProducerIdentity { epoch: 1, ..first });
    // KIP-360: with its current identity; a retry of that is answered alike.
    let third = init_expecting(&mut s, 2_000, "tx", Some(second)).unwrap();
    assert_eq!(third.epoch, 2);
    assert_eq!(init_expecting(&mut s, 2_000, "tx", Some(second)), Ok(third));
    assert!(matches!(
        init_expecting(&mut s, 2_000, "tx", Some(first)),
        Err(Refusal::ProducerFenced { .. })
    ));
    assert!(matches!(
        init_expecting(
            &mut s,
            2_000,
            "tx",
            Some(ProducerIdentity {
                producer_id: 99,
                epoch: 0
            })
        ),
        Err(Refusal::ProducerFenced { .. })
    ));
    // An ongoing transaction with data: a zombie's. Refused until its abort
    // markers (epoch bumped) are written, then the new producer starts.
    add(&mut s, 2_000, "tx", third, &[p0]).unwrap();
    txn_data(&mut s, 2_000, "a", data(p0, Some(third), 0, 1)).unwrap();
    assert_eq!(
        init(&mut s, 2_100, "tx"),
        Err(Refusal::ConcurrentTransactions)
    );
    let fenced = view(&s, "tx");
    assert_eq!(
        (fenced.phase, fenced.fencing, fenced.epoch),
        (TxnPhase::Ongoing, true, third.epoch + 1)
    );
    // The zombie is refused at once, before the abort markers are written:
    // no more data, partitions or end of its own.
    assert!(matches!(
        txn_data(&mut s, 2_100, "z1", data(p0, Some(third), 1, 1)),
        Err(Refusal::InvalidProducerEpoch { .. })
    ));
    assert!(matches!(
        add(&mut s, 2_100, "tx", third, &[tp(t, 2)]),
        Err(Refusal::ProducerFenced { .. })
    ));
    let zombie_end = TxnEnd {
        epoch: third.epoch,
        ..end(&s, "tx", true, EndReason::Client)
    };
    assert!(matches!(
        at(&mut s, 2_100, EndTxn { end: zombie_end }),
        Err(Refusal::ProducerFenced { .. })
    ));
    // Asking again while the markers are pending bumps nothing more.
    assert_eq!(
        init(&mut s, 2_100, "tx"),
        Err(Refusal::ConcurrentTransactions)
    );
    assert_eq!(view(&s, "tx").epoch, third.epoch + 1);
    let fence = end_with_markers(&mut s, 2_100, "b", "tx", false, EndReason::Fence);
    assert_eq!(fence, vec![Ok(1)]);
    assert_eq!(lso(&s, p0), 2);
    let fresh = init(&mut s, 2_200, "tx").unwrap();
    assert_eq!(
        fresh.epoch,
        third.epoch + 2,
        "one bump for the fence, one for the init"
    );
    // The zombie's next batch fails the epoch check.
    assert!(matches!(
        txn_data(&mut s, 2_200, "c", data(p0, Some(third), 1, 1)),
        Err(Refusal::InvalidProducerEpoch { .. })
    ));
    // Ongoing without partitions: fenced at once, the producer asks again.
    at(
        &mut s,
        2_300,
        AddToTxn {
            transactional_id: "tx".into(),
            producer_id: fresh.producer_id,
            epoch: fresh.epoch,
            partitions: vec![],
            groups: vec!["g".into()],
        },
    )
    .unwrap();
    assert_eq!(
        init(&mut s, 2_300, "tx"),
        Err(Refusal::ConcurrentTransactions)
    );
    assert_eq!(view(&s, "tx").phase, TxnPhase::CompleteAbort);
    assert_eq!(init(&mut s, 2_300, "tx").unwrap().epoch, fresh.epoch + 2);
    // An idempotent InitProducerId cannot bump a transactional producer.
    let other = at(
        &mut s,
        2_300,
        InitProducer {
            existing: Some(fresh),
        },
    )
    .unwrap();
    assert_ne!(other.producer_id, fresh.producer_id);
    assert!(matches!(
        at(
            &mut s,
            2_300,
            InitTxnProducer {
                transactional_id: "tx".into(),
                timeout_ms: 0,
                expected: None
            }
        ),
        Err(Refusal::InvalidTxnTimeout(0))
    ));
}

/// Kafka's `prepareProducerIdRotation`: when the epoch is about to
/// overflow, the id gets a new producer id at epoch 0, and a retry of that
/// InitProducerId is recognised through the previous one.
#[test]
fn an_exhausted_epoch_rotates_the_producer_id() {
    let (mut s, _) = state();
    let mut p = init(&mut s, 2_000, "tx").unwrap();
    while p.epoch < i16::MAX - 1 {
        p = init_expecting(&mut s, 2_000, "tx", Some(p)).unwrap();
    }
    let rotated = init_expecting(&mut s, 2_000, "tx", Some(p)).unwrap();
    assert_ne!(rotated.producer_id, p.producer_id);
    assert_eq!(rotated.epoch, 0);
    // The producer retries with the identity it had: answered alike.
    assert_eq!(init_expecting(&mut s, 2_000, "tx", Some(p)), Ok(rotated));
    assert_eq!(init_expecting(&mut s, 2_000, "tx", Some(p)), Ok(rotated));
    let v = view(&s, "tx");
    assert_eq!((v.producer_id, v.epoch), (rotated.producer_id, 0));
    // An expected identity without an epoch is a client's mistake.
    let no_epoch = ProducerIdentity {
        epoch: -1,
        ..rotated
    };
    assert!(matches!(
        init_expecting(&mut s, 2_000, "tx", Some(no_epoch)),
        Err(Refusal::InvalidTxnState(_))
    ));
}

#[test]
fn a_retried_ingest_commit_is_answered_not_applied_again() {
    let (mut s, t) = state();
    let p0 = tp(t, 0);
    let p = init(&mut s, 2_000, "tx").unwrap();
    add(&mut s, 2_000, "tx", p, &[p0]).unwrap();
    txn_data(&mut s, 2_000, "a", data(p0, Some(p), 0, 1)).unwrap();
    let first = end_with_markers(&mut s, 2_100, "b", "tx", false, EndReason::Client);
    let e = TxnEnd {
        version: view(&s, "tx").version - 1,
        ..end(&s, "tx", false, EndReason::Client)
    };
    let again = ingest(
        &mut s,
        2_200,
        "b",
        vec![(
            marker(p0, p.producer_id, p.epoch),
            BatchKind::Marker { end: 0 },
        )],
        vec![e],
    );
    assert_eq!(again, first);
    assert_eq!(aborted(&s, p0, 0).len(), 1);
    assert_eq!(hw(&s, p0), 2);
}

#[test]
fn trims_and_deletes_forget_what_they_remove() {
    let (mut s, t) = state();
    let p0 = tp(t, 0);
    let p = init(&mut s, 2_000, "tx").unwrap();
    for (n, key) in ["a", "c"].into_iter().enumerate() {
        add(&mut s, 2_000, "tx", p, &[p0]).unwrap();
        txn_data(&mut s, 2_000, key, data(p0, Some(p), n as i32, 1)).unwrap();
        end_with_markers(
            &mut s,
            2_000,
            &format!("{key}-end"),
            "tx",
            false,
            EndReason::Client,
        );
    }
    assert_eq!(aborted(&s, p0, 0).len(), 2);
    at(
        &mut s,
        2_100,
        Trim {
            partition: p0,
            offset: 2,
        },
    )
    .unwrap();
    assert_eq!(
        aborted(&s, p0, 2).len(),
        1,
        "the first abort's range is gone"
    );
    // A deleted topic leaves the transactions that held it.
    add(&mut s, 2_200, "tx", p, &[p0]).unwrap();
    txn_data(&mut s, 2_200, "e", data(p0, Some(p), 2, 1)).unwrap();
    at(&mut s, 2_300, DeleteTopic { name: "t".into() }).unwrap();
    let v = view(&s, "tx");
    assert_eq!((v.phase, v.partitions.len()), (TxnPhase::Ongoing, 0));
    let e = end(&s, "tx", true, EndReason::Client);
    at(&mut s, 2_300, EndTxn { end: e }).unwrap();
}

/// Seeded random transactions, plain and idempotent producers, trims and
/// timeouts interleaved: the invariants hold after every command (checked
/// by `apply_proposal`), the LSO never passes the HW nor moves back, and
/// every aborted range ends at a marker under the high watermark.
#[test]
fn random_transactions_keep_the_invariants() {
    use rand08::{Rng, SeedableRng};
    // Transactions ended with markers: aborted, committed.
    let mut ended = [0; 2];
    for seed in 0..40u64 {
        let mut rng = rand08::rngs::StdRng::seed_from_u64(seed);
        let (mut s, t) = state();
        let ids = ["a", "b", "c"];
        let mut now = 2_000i64;
        let mut seqs: BTreeMap<(i64, i32), i32> = BTreeMap::new();
        let mut last_lso = [0i64; 3];
        for step in 0..300 {
            now += rng.gen_range(0..2_000);
            let id = ids[rng.gen_range(0..ids.len())];
            let key = format!("k{step}");
            match rng.gen_range(0..10) {
                0 => {
                    let _ = init(&mut s, now, id);
                }
                1 | 2 => {
                    if let Some(v) = known(&s, id) {
                        let p = ProducerIdentity {
                            producer_id: v.producer_id,
                            epoch: v.epoch,
                        };
                        let part = tp(t, rng.gen_range(0..3));
                        let _ = add(&mut s, now, id, p, &[part]);
                    }
                }
                3..=5 => {
                    if let Some(v) = known(&s, id) {
                        let p = ProducerIdentity {
                            producer_id: v.producer_id,
                            epoch: v.epoch,
                        };
                        let part = rng.gen_range(0..3);
                        let seq = seqs.entry((p.producer_id, part)).or_insert(0);
                        if txn_data(&mut s, now, &key, data(tp(t, part), Some(p), *seq, 2)).is_ok()
                        {
                            *seq += 2;
                        }
                    }
                }
                6 => {
                    let part = tp(t, rng.gen_range(0..3));
                    ingest(
                        &mut s,
                        now,
                        &key,
                        vec![(data(part, None, 0, 1), BatchKind::Plain)],
                        vec![],
                    );
                }
                7 | 8 => {
                    if known(&s, id).is_some() {
                        let commit = rng.gen_bool(0.5);
                        let reason = match rng.gen_range(0..5) {
                            0 => EndReason::Timeout,
                            1 => EndReason::Fence,
                            _ => EndReason::Client,
                        };
                        let answers = end_with_markers(&mut s, now, &key, id, commit, reason);
                        if !answers.is_empty() && answers.iter().all(Result::is_ok) {
                            ended[commit as usize] += 1;
                        }
                    }
                }
                _ => {
                    let part = tp(t, rng.gen_range(0..3));
                    let lso = lso(&s, part);
                    let _ = at(
                        &mut s,
                        now,
                        Trim {
                            partition: part,
                            offset: lso / 2,
                        },
                    );
                }
            }
            for n in 0..3 {
                let part = tp(t, n);
                let (l, h) = (lso(&s, part), hw(&s, part));
                assert!(
                    l <= h && l >= last_lso[n as usize],
                    "seed {seed}: lso {l} hw {h}"
                );
                last_lso[n as usize] = l;
                let start = s.offsets(t, n).unwrap().log_start_offset;
                for a in aborted(&s, part, start) {
                    assert!(
                        a.first_offset <= a.last_offset && a.last_offset < h,
                        "seed {seed}"
                    );
                }
            }
        }
    }
    assert!(ended[0] > 100 && ended[1] > 100, "too few ends: {ended:?}");
}

fn offsets_for(group: &str, offset: i64) -> crate::groups::CommitOffsets {
    crate::groups::CommitOffsets {
        group: group.into(),
        generation: -1,
        member_id: String::new(),
        instance_id: None,
        offsets: vec![crate::groups::OffsetToCommit {
            topic: "t".into(),
            partition: 0,
            offset,
            leader_epoch: -1,
            metadata: None,
        }],
        now_ms: 0,
    }
}

fn group_offset(s: &State, group: &str) -> Option<i64> {
    crate::groups::GroupOffsets {
        group: group.into(),
        partitions: Some(vec![("t".into(), 0)]),
    }
    .query(s, s.clock_ms())
    .unwrap()
    .into_iter()
    .next()
    .and_then(|(_, o)| o.map(|o| o.offset))
}

/// KIP-98's offsets in a transaction (send_offsets_to_transaction): held
/// by the transaction, visible to OffsetFetch(require_stable) as pending,
/// stored for the group only if it commits.
#[test]
fn offsets_sent_in_a_transaction_are_stored_only_when_it_commits() {
    let (mut s, _) = state();
    let p = init(&mut s, 2_000, "tx").unwrap();
    let commit_offsets = |s: &mut State, offset: i64| {
        at(
            s,
            2_000,
            TxnCommitOffsets {
                transactional_id: "tx".into(),
                producer_id: p.producer_id,
                epoch: p.epoch,
                commit: offsets_for("g", offset),
            },
        )
    };
    // The group was not added (AddOffsetsToTxn).
    assert_eq!(commit_offsets(&mut s, 5), Err(Refusal::NotInTransaction));
    for (offset, commit) in [(5, false), (7, true)] {
        at(
            &mut s,
            2_000,
            AddToTxn {
                transactional_id: "tx".into(),
                producer_id: p.producer_id,
                epoch: p.epoch,
                partitions: vec![],
                groups: vec!["g".into()],
            },
        )
        .unwrap();
        assert_eq!(commit_offsets(&mut s, offset), Ok(Ok(())));
        let pending = PendingTxnOffsets { group: "g".into() }
            .query(&s, 2_000)
            .unwrap();
        assert_eq!(pending, vec![("t".to_string(), 0)]);
        let e = end(&s, "tx", commit, EndReason::Client);
        at(&mut s, 2_100, EndTxn { end: e }).unwrap();
        assert!(
            PendingTxnOffsets { group: "g".into() }
                .query(&s, 2_100)
                .unwrap()
                .is_empty()
        );
        // Aborted: nothing stored (the group does not even exist yet).
        assert_eq!(group_offset(&s, "g"), commit.then_some(offset));
    }
}

/// Adds group "g" to producer `p`'s transaction "tx" and sends it `offset`
/// for partition t/0 (send_offsets_to_transaction), at 2,000.
fn send_offsets(s: &mut State, p: ProducerIdentity, offset: i64) {
    at(
        s,
        2_000,
        AddToTxn {
            transactional_id: "tx".into(),
            producer_id: p.producer_id,
            epoch: p.epoch,
            partitions: vec![],
            groups: vec!["g".into()],
        },
    )
    .unwrap();
    at(
        s,
        2_000,
        TxnCommitOffsets {
            transactional_id: "tx".into(),
            producer_id: p.producer_id,
            epoch: p.epoch,
            commit: offsets_for("g", offset),
        },
    )
    .unwrap()
    .unwrap();
}

/// Kafka keeps a group's most recent commit: a plain OffsetCommit made after
/// the transaction sent its offset is not replaced when it commits.
#[test]
fn a_later_plain_commit_is_not_replaced_by_a_transactions_older_offset() {
    let (mut s, _) = state();
    let p = init(&mut s, 2_000, "tx").unwrap();
    send_offsets(&mut s, p, 5);
    at(&mut s, 2_500, offsets_for("g", 9)).unwrap().unwrap();
    let e = end(&s, "tx", true, EndReason::Client);
    at(&mut s, 3_000, EndTxn { end: e }).unwrap();
    assert_eq!(group_offset(&s, "g"), Some(9));
}

/// As Kafka's offset tombstones: DeleteGroups and OffsetDelete drop what
/// open transactions hold for the group, so their commit restores nothing.
#[test]
fn deleted_groups_and_offsets_leave_open_transactions() {
    for delete_group in [true, false] {
        let (mut s, _) = state();
        // The group exists, empty, with a committed offset.
        at(&mut s, 1_000, offsets_for("g", 1)).unwrap().unwrap();
        let p = init(&mut s, 2_000, "tx").unwrap();
        send_offsets(&mut s, p, 5);
        if delete_group {
            let deleted = at(
                &mut s,
                2_100,
                crate::groups::DeleteGroups {
                    groups: vec!["g".into()],
                },
            )
            .unwrap();
            assert_eq!(deleted, vec![Ok(())]);
        } else {
            let deleted = at(
                &mut s,
                2_100,
                crate::groups::DeleteOffsets {
                    group: "g".into(),
                    partitions: vec![("t".into(), 0)],
                },
            )
            .unwrap();
            assert_eq!(deleted, Ok(vec![Ok(())]));
        }
        assert!(
            PendingTxnOffsets { group: "g".into() }
                .query(&s, 2_100)
                .unwrap()
                .is_empty()
        );
        let e = end(&s, "tx", true, EndReason::Client);
        at(&mut s, 3_000, EndTxn { end: e }).unwrap();
        assert_eq!(group_offset(&s, "g"), None, "delete_group: {delete_group}");
        s.check_invariants().unwrap();
    }
}

/// Transactions v2 (KIP-890, EndTxn v5): every end bumps the producer's
/// epoch, so a late EndTxn of transaction 1 is fenced from transaction 2
/// (under v1 it would end it); a retry of the end, at the epoch before the
/// bump, is answered as the end was; a produce adds its own partition.
#[test]
fn transactions_v2_bump_the_epoch_at_every_end() {
    let (mut s, t) = state();
    let p0 = tp(t, 0);
    let p = init(&mut s, 2_000, "tx").unwrap();
    // Produce v12: the batch adds its partition (no AddPartitionsToTxn).
    let adding = ingest(
        &mut s,
        2_100,
        "a",
        vec![(data(p0, Some(p), 0, 2), BatchKind::TransactionalAdding)],
        vec![],
    );
    assert_eq!(adding, vec![Ok(0)]);
    assert_eq!(view(&s, "tx").phase, TxnPhase::Ongoing);
    let first = end(&s, "tx", true, EndReason::ClientBumping);
    let markers = end_with_markers(&mut s, 2_200, "b", "tx", true, EndReason::ClientBumping);
    assert_eq!(markers, vec![Ok(2)]);
    let after = view(&s, "tx");
    assert_eq!(
        (after.producer_id, after.epoch),
        (p.producer_id, p.epoch + 1)
    );
    assert_eq!(lso(&s, p0), 3);
    // The retry, at the old epoch: answered as the end was, nothing moves.
    let retry = TxnEnd {
        version: after.version,
        ..first.clone()
    };
    assert_eq!(
        at(&mut s, 2_250, EndTxn { end: retry.clone() }),
        Err(Refusal::TxnEnded { committed: true })
    );
    assert!(matches!(
        at(
            &mut s,
            2_250,
            EndTxn {
                end: TxnEnd {
                    commit: false,
                    ..retry.clone()
                }
            }
        ),
        Err(Refusal::InvalidTxnState(_))
    ));
    // Transaction 2 at the bumped epoch; the late end of transaction 1 is
    // now fenced instead of ending it.
    let bumped = ProducerIdentity {
        producer_id: p.producer_id,
        epoch: p.epoch + 1,
    };
    assert_eq!(
        ingest(
            &mut s,
            2_300,
            "c",
            vec![(data(p0, Some(bumped), 0, 1), BatchKind::TransactionalAdding)],
            vec![],
        ),
        vec![Ok(3)]
    );
    let stale = TxnEnd {
        version: view(&s, "tx").version,
        ..first
    };
    assert!(matches!(
        at(&mut s, 2_350, EndTxn { end: stale }),
        Err(Refusal::ProducerFenced { .. })
    ));
    assert_eq!(view(&s, "tx").phase, TxnPhase::Ongoing);
    // The old epoch's batches are fenced too.
    assert!(matches!(
        ingest(
            &mut s,
            2_400,
            "d",
            vec![(data(p0, Some(p), 2, 1), BatchKind::TransactionalAdding)],
            vec![],
        )[0],
        Err(Refusal::ProducerFenced { .. })
    ));
    s.check_invariants().unwrap();
}

/// With its epochs spent, a v2 end gives the producer a new id at epoch 0;
/// a retry of that end at the old id is still recognised.
#[test]
fn a_v2_end_with_its_epochs_spent_gives_a_new_producer_id() {
    let (mut s, t) = state();
    let p0 = tp(t, 0);
    let mut p = init(&mut s, 2_000, "tx").unwrap();
    // Walk the epoch to the last one an end may bump from.
    while p.epoch < i16::MAX - 1 {
        p = init_expecting(&mut s, 2_000, "tx", Some(p)).unwrap();
    }
    add(&mut s, 2_000, "tx", p, &[p0]).unwrap();
    let first = end(&s, "tx", false, EndReason::ClientBumping);
    assert_eq!(first.marker_epoch(), i16::MAX, "Kafka's last marker epoch");
    end_with_markers(&mut s, 2_100, "a", "tx", false, EndReason::ClientBumping);
    let after = view(&s, "tx");
    assert_ne!(after.producer_id, p.producer_id);
    assert_eq!(after.epoch, 0);
    let retry = TxnEnd {
        version: after.version,
        ..first
    };
    assert_eq!(
        at(&mut s, 2_200, EndTxn { end: retry }),
        Err(Refusal::TxnEnded { committed: false })
    );
    s.check_invariants().unwrap();
}
