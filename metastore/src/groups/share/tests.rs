use std::collections::BTreeMap;

use uuid::Uuid;

use super::*;

const T: TopicId = Uuid::from_u128(1);

struct Log {
    bounds: BTreeMap<i32, LogBounds>,
}

impl PartitionLog for Log {
    fn bounds(&self, topic: TopicId, partition: i32, _read_committed: bool) -> Option<LogBounds> {
        (topic == T)
            .then(|| self.bounds.get(&partition).copied())
            .flatten()
    }
    fn offset_at(&self, _topic: TopicId, _partition: i32, _timestamp_ms: i64) -> Option<i64> {
        Some(3)
    }
}

struct Topics;

impl TopicLookup for Topics {
    fn find(&self, name: &str) -> Option<(TopicId, i32)> {
        (name == "t").then_some((T, 2))
    }
    fn names(&self) -> Vec<String> {
        vec!["t".into()]
    }
}

fn log() -> Log {
    let b = |log_start, readable_end| LogBounds {
        log_start,
        log_end: readable_end,
        readable_end,
    };
    Log {
        bounds: BTreeMap::from([(0, b(0, 10)), (1, b(5, 8))]),
    }
}

fn rules(start_from: StartFrom) -> AcquireRules {
    AcquireRules {
        delivery_limit: 5,
        max_in_flight: 2_000,
        lock_ms: 30_000,
        start_from,
        read_committed: false,
    }
}

fn beat(member: &str, epoch: i32, subscribed: Option<&str>, now_ms: i64) -> ShareHeartbeat {
    ShareHeartbeat {
        group: "g".into(),
        member_id: member.into(),
        member_epoch: epoch,
        rack: None,
        subscribed: subscribed.map(|t| vec![t.to_string()]),
        client_id: "c".into(),
        client_host: "h".into(),
        session_timeout_ms: 45_000,
        heartbeat_interval_ms: 5_000,
        max_size: 200,
        now_ms,
    }
}

fn join(g: &mut ShareGroup, member: &str, now_ms: i64) {
    g.heartbeat(beat(member, 0, Some("t"), now_ms), &Topics)
        .unwrap();
}

fn taken(answers: &[PartitionAcquired]) -> Vec<(i32, i64, i64)> {
    answers
        .iter()
        .flat_map(|a| {
            let p = a.partition;
            a.acquired
                .iter()
                .flatten()
                .map(move |r| (p, r.first, r.last))
        })
        .collect()
}

#[test]
fn one_budget_for_all_partitions_from_where_the_group_starts() {
    let mut g = ShareGroup::default();
    join(&mut g, "a", 0);
    let parts = [(T, 0), (T, 1), (T, 9)];
    let got = g.acquire("a", &parts, 12, &log(), rules(StartFrom::Earliest), 0);
    assert_eq!(taken(&got), [(0, 0, 9), (1, 5, 6)]);
    assert_eq!(got[2].acquired, None, "no such partition");
    // A group starting at the latest records has nothing until more come.
    let mut late = ShareGroup::default();
    join(&mut late, "a", 0);
    assert!(taken(&late.acquire("a", &parts, 12, &log(), rules(StartFrom::Latest), 0)).is_empty());
    let mut ago = ShareGroup::default();
    join(&mut ago, "a", 0);
    let got = ago.acquire(
        "a",
        &parts[..1],
        12,
        &log(),
        rules(StartFrom::Ago(60_000)),
        0,
    );
    assert_eq!(taken(&got), [(0, 3, 9)]);
    g.check(5).unwrap();
}

#[test]
fn records_outlive_their_members_session_until_their_lock_ends_or_its_share_session_closes() {
    let mut g = ShareGroup::default();
    join(&mut g, "a", 0);
    join(&mut g, "b", 0);
    // Locks longer than the session.
    let rules = AcquireRules {
        lock_ms: 100_000,
        ..rules(StartFrom::Earliest)
    };
    assert_eq!(
        taken(&g.acquire("a", &[(T, 0)], 4, &log(), rules, 0)),
        [(0, 0, 3)]
    );
    assert_eq!(
        taken(&g.acquire("b", &[(T, 0)], 3, &log(), rules, 0)),
        [(0, 4, 6)]
    );
    // a is silent: its session ends at 45 s, when b's heartbeat notices.
    let epoch = g.members.get("b").unwrap().epoch;
    let answer = g
        .heartbeat(beat("b", epoch, None, 30_000), &Topics)
        .unwrap();
    g.heartbeat(beat("b", answer.member_epoch, None, 45_000), &Topics)
        .unwrap();
    assert!(g.members.get("a").is_none());
    // As in Kafka, a's records stay a's until their lock ends: b gets none
    // of them, and a's acknowledgement (through any agent) still counts.
    assert_eq!(
        taken(&g.acquire("b", &[(T, 0)], 100, &log(), rules, 45_001)),
        [(0, 7, 9)]
    );
    let ack = |first, last| {
        [PartitionAcks {
            topic: T,
            partition: 0,
            batches: vec![AckBatch {
                first,
                last,
                types: vec![Ack::Accept],
            }],
        }]
    };
    assert_eq!(g.acknowledge("a", &ack(0, 1), 5, 45_002), [Ok(())]);
    // b's share session closes: what it holds is released at once.
    g.release("b", &[(T, 1)], 5);
    let untouched = g.acquire("c", &[(T, 0)], 100, &log(), rules, 45_003);
    assert_eq!(untouched[0].acquired.as_ref().unwrap(), &[]);
    g.release("b", &[(T, 0)], 5);
    let again = g.acquire("c", &[(T, 0)], 100, &log(), rules, 45_003);
    assert_eq!(
        again[0].acquired.as_ref().unwrap(),
        &[Acquired {
            first: 4,
            last: 9,
            deliveries: 2
        }]
    );
    // a's last two run out at 100 s.
    let later = g.acquire("c", &[(T, 0)], 100, &log(), rules, 100_000);
    assert_eq!(
        later[0].acquired.as_ref().unwrap(),
        &[Acquired {
            first: 2,
            last: 3,
            deliveries: 2
        }]
    );
    assert!(matches!(
        g.acknowledge("a", &ack(2, 3), 5, 100_001)[0],
        Err(AckRefused::InvalidRecordState(_))
    ));
    assert_eq!(g.acknowledge("c", &ack(2, 9), 5, 100_001), [Ok(())]);
    assert_eq!(g.partitions().next().unwrap().1.start_offset(), 10);
    g.check(5).unwrap();
}

#[test]
fn a_fetch_grows_share_state_only_for_the_groups_topics_and_when_it_takes() {
    let mut g = ShareGroup::default();
    join(&mut g, "a", 0);
    let other: TopicId = Uuid::from_u128(2);
    let rules = rules(StartFrom::Earliest);
    // An acknowledging fetch (no records asked) creates nothing.
    g.acquire("a", &[(T, 0)], 0, &log(), rules, 0);
    assert_eq!(g.partitions().count(), 0);
    // A topic no member subscribes to is not read.
    let got = g.acquire("a", &[(other, 0)], 10, &log(), rules, 0);
    assert_eq!(got[0].acquired, None);
    assert_eq!(g.partitions().count(), 0);
}

#[test]
fn offsets_are_altered_and_deleted_only_while_the_group_is_empty() {
    let mut g = ShareGroup::default();
    join(&mut g, "a", 0);
    assert_eq!(
        g.set_start(T, 0, 7, 1, &Topics),
        Err(GroupError::NonEmptyGroup)
    );
    assert_eq!(
        g.forget_topic(T, 1, &Topics),
        Err(GroupError::NonEmptyGroup)
    );
    // Once a's session has ended, the group is empty.
    g.set_start(T, 0, 7, 45_000, &Topics).unwrap();
    assert_eq!(g.partitions().next().unwrap().1.start_offset(), 7);
    assert_eq!(g.forget_topic(T, 45_000, &Topics), Ok(true));
    assert_eq!(g.forget_topic(T, 45_000, &Topics), Ok(false));
}
