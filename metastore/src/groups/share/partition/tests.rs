use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const LIMITS: Limits = Limits {
    delivery_limit: 3,
    max_in_flight: 10,
    lock_ms: 1_000,
};

fn log(readable_end: i64) -> LogBounds {
    LogBounds {
        log_start: 0,
        log_end: readable_end,
        readable_end,
    }
}

fn ack(first: i64, last: i64, types: &[Ack]) -> AckBatch {
    AckBatch {
        first,
        last,
        types: types.to_vec(),
    }
}

fn got(first: i64, last: i64, deliveries: u16) -> Acquired {
    Acquired {
        first,
        last,
        deliveries,
    }
}

#[test]
fn new_records_are_acquired_up_to_the_log_and_the_in_flight_limit() {
    let mut p = SharePartition::starting_at(0);
    assert_eq!(p.acquire("a", 4, log(6), LIMITS, 0), [got(0, 3, 1)]);
    assert_eq!(p.acquire("b", 4, log(6), LIMITS, 0), [got(4, 5, 1)]);
    assert_eq!(
        p.acquire("b", 4, log(6), LIMITS, 0),
        [],
        "nothing more to read"
    );
    // Ten in flight at most: 6 now, so 4 more however many are asked.
    assert_eq!(p.acquire("c", 100, log(100), LIMITS, 0), [got(6, 9, 1)]);
    assert_eq!(p.acquire("c", 100, log(100), LIMITS, 0), []);
    p.check(LIMITS.delivery_limit).unwrap();
    assert_eq!((p.start_offset(), p.end_offset()), (0, 10));
}

#[test]
fn acknowledged_records_move_the_start_and_make_room() {
    let mut p = SharePartition::starting_at(0);
    p.acquire("a", 10, log(20), LIMITS, 0);
    p.acknowledge("a", &[ack(0, 3, &[Ack::Accept])], LIMITS, 10)
        .unwrap();
    assert_eq!(p.start_offset(), 4);
    // Rejected and gaps are done too; a hole below them keeps the start.
    p.acknowledge(
        "a",
        &[ack(5, 7, &[Ack::Reject, Ack::Gap, Ack::Accept])],
        LIMITS,
        10,
    )
    .unwrap();
    assert_eq!(p.start_offset(), 4);
    assert_eq!(p.done_in_flight(), 3);
    p.acknowledge("a", &[ack(4, 4, &[Ack::Accept])], LIMITS, 10)
        .unwrap();
    assert_eq!(p.start_offset(), 8);
    assert_eq!(p.acquire("b", 10, log(20), LIMITS, 10), [got(10, 17, 1)]);
    p.check(LIMITS.delivery_limit).unwrap();
}

#[test]
fn an_acknowledgement_is_checked_whole_before_any_of_it_applies() {
    let mut p = SharePartition::starting_at(0);
    p.acquire("a", 3, log(10), LIMITS, 0);
    p.acquire("b", 3, log(10), LIMITS, 0);
    let before = p.clone();
    // 0..=2 are a's, 3..=5 b's: a cannot acknowledge 2..=3.
    let refused = p.acknowledge(
        "a",
        &[ack(0, 1, &[Ack::Accept]), ack(2, 3, &[Ack::Accept])],
        LIMITS,
        10,
    );
    assert!(matches!(refused, Err(AckRefused::InvalidRecordState(_))));
    assert_eq!(p, before, "nothing applied");
    for bad in [
        vec![ack(2, 1, &[Ack::Accept])],
        vec![ack(0, 2, &[Ack::Accept, Ack::Accept])],
        vec![ack(1, 2, &[Ack::Accept]), ack(0, 0, &[Ack::Accept])],
        vec![ack(0, 6, &[Ack::Accept])],
        vec![ack(0, 0, &[])],
    ] {
        assert!(
            matches!(
                p.acknowledge("a", &bad, LIMITS, 10),
                Err(AckRefused::InvalidRequest(_))
            ),
            "{bad:?}"
        );
    }
    assert_eq!(p, before);
    // After its lock ends a member cannot acknowledge.
    assert!(matches!(
        p.acknowledge("a", &[ack(0, 0, &[Ack::Accept])], LIMITS, 1_000),
        Err(AckRefused::InvalidRecordState(_))
    ));
}

#[test]
fn released_and_expired_records_are_delivered_again_until_the_limit() {
    let mut p = SharePartition::starting_at(0);
    assert_eq!(p.acquire("a", 2, log(2), LIMITS, 0), [got(0, 1, 1)]);
    p.acknowledge("a", &[ack(0, 1, &[Ack::Release])], LIMITS, 1)
        .unwrap();
    assert_eq!(p.acquire("b", 5, log(2), LIMITS, 2), [got(0, 1, 2)]);
    // b's lock ends at 1_002: the records go to c, a third delivery.
    assert_eq!(p.acquire("c", 5, log(2), LIMITS, 1_001), []);
    assert_eq!(p.acquire("c", 5, log(2), LIMITS, 1_002), [got(0, 1, 3)]);
    // The last delivery released: archived, never delivered again.
    p.acknowledge("c", &[ack(0, 1, &[Ack::Release])], LIMITS, 1_003)
        .unwrap();
    assert_eq!(p.acquire("d", 5, log(2), LIMITS, 1_004), []);
    assert_eq!((p.start_offset(), p.end_offset()), (2, 2));
    p.check(LIMITS.delivery_limit).unwrap();
}

/// A member with sessions on two agents: the one that closes releases
/// what it acquired, not what the other did; either acknowledges both.
#[test]
fn a_closing_session_releases_only_its_own_records() {
    let mut p = SharePartition::starting_at(0);
    let on = |session| Who {
        member: "a",
        session,
    };
    assert_eq!(p.acquire(on(1), 3, log(20), LIMITS, 0), [got(0, 2, 1)]);
    assert_eq!(p.acquire(on(2), 3, log(20), LIMITS, 0), [got(3, 5, 1)]);
    p.release(on(1), LIMITS);
    assert_eq!(p.held_by("a", 0), 3);
    assert_eq!(p.acquire("b", 10, log(6), LIMITS, 0), [got(0, 2, 2)]);
    let accept = AckBatch {
        first: 3,
        last: 5,
        types: vec![Ack::Accept],
    };
    assert_eq!(p.acknowledge("a", &[accept], LIMITS, 0), Ok(()));
    p.check(LIMITS.delivery_limit).unwrap();
}

#[test]
fn a_member_that_leaves_releases_what_it_holds() {
    let mut p = SharePartition::starting_at(5);
    p.acquire("a", 3, log(20), LIMITS, 0);
    p.acquire("b", 3, log(20), LIMITS, 0);
    p.release("a", LIMITS);
    assert_eq!(p.held_by("a", 0), 0);
    assert_eq!(p.held_by("b", 0), 3);
    assert_eq!(p.acquire("c", 10, log(20), LIMITS, 0)[0], got(5, 7, 2));
    p.check(LIMITS.delivery_limit).unwrap();
}

#[test]
fn records_below_a_moved_log_start_are_gone() {
    let mut p = SharePartition::starting_at(0);
    p.acquire("a", 6, log(10), LIMITS, 0);
    let bounds = LogBounds {
        log_start: 4,
        log_end: 10,
        readable_end: 10,
    };
    assert_eq!(p.acquire("b", 10, bounds, LIMITS, 0), [got(6, 9, 1)]);
    assert_eq!(p.start_offset(), 4);
    // a still holds 4 and 5, and may acknowledge them; 0..=3 are skipped.
    p.acknowledge("a", &[ack(0, 5, &[Ack::Accept])], LIMITS, 1)
        .unwrap();
    assert_eq!(p.start_offset(), 6);
    let bounds = LogBounds {
        log_start: 50,
        log_end: 60,
        readable_end: 60,
    };
    assert_eq!(p.acquire("b", 3, bounds, LIMITS, 2), [got(50, 52, 1)]);
    p.check(LIMITS.delivery_limit).unwrap();
}

/// What a model of the partition expects of each offset: who holds it and
/// until when, how often it was delivered, and whether it is done.
#[derive(Debug, Default, Clone)]
struct Offset {
    holder: Option<(String, i64)>,
    deliveries: u16,
    done: bool,
}

#[derive(Debug, Clone)]
enum Step {
    Acquire(usize, i64),
    Ack(usize, u8),
    /// An acknowledgement of an offset the member does not hold.
    WrongAck(usize, i64),
    Release(usize),
    Wait(i64),
    /// Retention or DeleteRecords moves the log start on.
    Trim(i64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..3usize, 1..6i64).prop_map(|(m, n)| Step::Acquire(m, n)),
        (0..3usize, 0..4u8).prop_map(|(m, t)| Step::Ack(m, t)),
        (0..3usize, 0..40i64).prop_map(|(m, o)| Step::WrongAck(m, o)),
        (0..3usize).prop_map(Step::Release),
        (1..700i64).prop_map(Step::Wait),
        (1..4i64).prop_map(Step::Trim),
    ]
}

proptest! {
    /// Against a model of every offset: no record is handed to a second
    /// member while its holder's lock lasts, none done is handed again,
    /// delivery counts count acquisitions and stop at the limit, and the
    /// start offset passes exactly the done records at the head.
    #[test]
    fn no_record_is_held_twice_and_none_done_comes_back(steps in prop::collection::vec(step(), 1..80)) {
        let members = ["a", "b", "c"];
        let mut p = SharePartition::starting_at(0);
        let mut model: BTreeMap<i64, Offset> = BTreeMap::new();
        let mut now = 0i64;
        let mut log_start = 0i64;
        let bounds = |log_start| LogBounds { log_start, log_end: 40, readable_end: 40 };
        let limit = LIMITS.delivery_limit;
        for s in steps {
            match s {
                Step::Acquire(m, n) => {
                    for got in p.acquire(members[m], n, bounds(log_start), LIMITS, now) {
                        for o in got.first..=got.last {
                            let e = model.entry(o).or_default();
                            prop_assert!(!e.done, "done offset {o} handed again");
                            if let Some((h, until)) = &e.holder {
                                prop_assert!(*until <= now, "{o} held by {h} until {until}, handed at {now}");
                            }
                            e.deliveries += 1;
                            prop_assert!(e.deliveries <= limit);
                            prop_assert_eq!(e.deliveries, got.deliveries);
                            e.holder = Some((members[m].to_string(), now + LIMITS.lock_ms));
                        }
                    }
                }
                Step::Ack(m, t) => {
                    // Everything the member holds, with one type.
                    let held: Vec<i64> = model.iter()
                        .filter(|(_, e)| matches!(&e.holder, Some((h, until)) if h == members[m] && *until > now))
                        .map(|(o, _)| *o)
                        .filter(|o| *o >= p.start_offset())
                        .collect();
                    let ack_type = [Ack::Gap, Ack::Accept, Ack::Release, Ack::Reject][t as usize];
                    for o in held {
                        let batch = [ack(o, o, &[ack_type])];
                        prop_assert_eq!(p.acknowledge(members[m], &batch, LIMITS, now), Ok(()));
                        let e = model.get_mut(&o).unwrap();
                        e.holder = None;
                        e.done = ack_type != Ack::Release || e.deliveries >= limit;
                    }
                }
                Step::WrongAck(m, o) => {
                    let held = matches!(model.get(&o), Some(Offset { holder: Some((h, until)), .. })
                        if h == members[m] && *until > now);
                    if !held && o >= p.start_offset() && o < p.end_offset() {
                        let before = p.clone();
                        let batch = [ack(o, o, &[Ack::Accept])];
                        prop_assert!(p.acknowledge(members[m], &batch, LIMITS, now).is_err());
                        prop_assert_eq!(&p, &before, "a refused acknowledgement changed the state");
                    }
                }
                Step::Trim(k) => {
                    log_start = (log_start + k).min(40);
                    for (o, e) in model.iter_mut() {
                        if *o < log_start {
                            e.done = true;
                            e.holder = None;
                        }
                    }
                    // Any acquisition follows the log start; this one takes nothing.
                    prop_assert!(p.acquire("a", 0, bounds(log_start), LIMITS, now).is_empty());
                }
                Step::Release(m) => {
                    p.release(members[m], LIMITS);
                    for e in model.values_mut() {
                        if matches!(&e.holder, Some((h, _)) if h == members[m]) {
                            e.holder = None;
                            e.done = e.deliveries >= limit;
                        }
                    }
                }
                Step::Wait(ms) => {
                    now += ms;
                    for e in model.values_mut() {
                        if matches!(&e.holder, Some((_, until)) if *until <= now) {
                            e.holder = None;
                            e.done = e.deliveries >= limit;
                        }
                    }
                    p.end_locks(now, limit);
                }
            }
            p.check(limit).map_err(TestCaseError::fail)?;
            let first_undone = model.iter().find(|(o, e)| !e.done && **o >= log_start).map(|(o, _)| *o)
                .unwrap_or(p.end_offset().max(log_start));
            prop_assert_eq!(p.start_offset(), first_undone);
        }
    }
}

#[test]
fn archived_records_are_counted() {
    let limits = Limits {
        delivery_limit: 2,
        ..LIMITS
    };
    let mut p = SharePartition::starting_at(0);
    p.acquire("a", 4, log(4), limits, 0);
    let reject = AckBatch {
        first: 0,
        last: 1,
        types: vec![Ack::Reject],
    };
    p.acknowledge("a", &[reject], limits, 0).unwrap();
    assert_eq!(p.archived(), 2);
    // Released at its second delivery, the limit: archived too.
    let release = AckBatch {
        first: 2,
        last: 3,
        types: vec![Ack::Release],
    };
    p.acknowledge("a", std::slice::from_ref(&release), limits, 0)
        .unwrap();
    assert_eq!(p.acquire("a", 4, log(4), limits, 0), [got(2, 3, 2)]);
    p.acknowledge("a", &[release], limits, 0).unwrap();
    assert_eq!(p.archived(), 4);
    p.check(limits.delivery_limit).unwrap();
}
