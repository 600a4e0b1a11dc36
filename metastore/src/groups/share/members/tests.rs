use std::collections::BTreeMap;

use uuid::Uuid;

use super::*;

type Topics = BTreeMap<String, (TopicId, i32)>;

fn topics(list: &[(&str, i32)]) -> Topics {
    list.iter()
        .enumerate()
        .map(|(i, (name, n))| (name.to_string(), (Uuid::from_u128(i as u128 + 1), *n)))
        .collect()
}

fn beat(member: &str, epoch: i32, subscribed: Option<&[&str]>, now_ms: i64) -> ShareHeartbeat {
    ShareHeartbeat {
        group: "g".into(),
        member_id: member.into(),
        member_epoch: epoch,
        rack: None,
        subscribed: subscribed.map(|s| s.iter().map(|t| t.to_string()).collect()),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 45_000,
        heartbeat_interval_ms: 5_000,
        max_size: 3,
        now_ms,
    }
}

fn partitions(answer: &ShareAnswer) -> Vec<i32> {
    let mut all: Vec<i32> = answer
        .assignment
        .iter()
        .flatten()
        .flat_map(|(_, ps)| ps.clone())
        .collect();
    all.sort();
    all
}

#[test]
fn members_join_share_the_partitions_and_leave() {
    let t = topics(&[("orders", 4)]);
    let mut g = Members::default();
    let (a, _) = g.heartbeat(beat("a", 0, Some(&["orders"]), 0), &t).unwrap();
    assert_eq!((a.member_epoch, partitions(&a)), (1, vec![0, 1, 2, 3]));
    let (b, _) = g.heartbeat(beat("b", 0, Some(&["orders"]), 0), &t).unwrap();
    assert_eq!((b.member_epoch, partitions(&b)), (2, vec![1, 3]));
    // a learns its new assignment with its next heartbeat (its old epoch).
    let (a, _) = g.heartbeat(beat("a", 1, None, 10), &t).unwrap();
    assert_eq!((a.member_epoch, partitions(&a)), (2, vec![0, 2]));
    // Nothing changed: no assignment sent.
    let (a, _) = g.heartbeat(beat("a", 2, None, 20), &t).unwrap();
    assert_eq!(a.assignment, None);
    let (left, released) = g.heartbeat(beat("b", -1, None, 30), &t).unwrap();
    assert!(released && left.member_epoch == -1);
    let (a, _) = g.heartbeat(beat("a", 2, None, 40), &t).unwrap();
    assert_eq!((a.member_epoch, partitions(&a)), (3, vec![0, 1, 2, 3]));
}

#[test]
fn more_members_than_partitions_share_them() {
    let t = topics(&[("orders", 2)]);
    let mut g = Members::default();
    for m in ["a", "b", "c"] {
        g.heartbeat(beat(m, 0, Some(&["orders"]), 0), &t).unwrap();
    }
    let held: Vec<usize> = g
        .iter()
        .map(|(_, m)| m.target.values().map(|p| p.len()).sum())
        .collect();
    assert_eq!(held, [1, 1, 1], "every member has a partition");
    let mut per_partition = BTreeMap::new();
    for (_, m) in g.iter() {
        for p in m.target.values().flatten() {
            *per_partition.entry(*p).or_insert(0) += 1;
        }
    }
    assert_eq!(per_partition, BTreeMap::from([(0, 2), (1, 1)]));
}

#[test]
fn subscriptions_differ_per_topic() {
    let t = topics(&[("orders", 2), ("audit", 1)]);
    let mut g = Members::default();
    g.heartbeat(beat("a", 0, Some(&["orders", "audit"]), 0), &t)
        .unwrap();
    g.heartbeat(beat("b", 0, Some(&["orders"]), 0), &t).unwrap();
    let a = &g.get("a").unwrap().target;
    let b = &g.get("b").unwrap().target;
    let audit = t.find("audit").unwrap().0;
    assert_eq!(a[&audit], BTreeSet::from([0]));
    assert!(!b.contains_key(&audit));
    assert_eq!(a.values().map(BTreeSet::len).sum::<usize>(), 2);
    assert_eq!(b.values().map(BTreeSet::len).sum::<usize>(), 1);
}

#[test]
fn epochs_fence_unknown_and_stale_members_and_the_group_is_bounded() {
    let t = topics(&[("orders", 1)]);
    let mut g = Members::default();
    assert_eq!(
        g.heartbeat(beat("a", 3, None, 0), &t).unwrap_err(),
        GroupError::UnknownMemberId
    );
    for m in ["a", "b", "c"] {
        g.heartbeat(beat(m, 0, Some(&["orders"]), 0), &t).unwrap();
    }
    assert_eq!(
        g.heartbeat(beat("d", 0, Some(&["orders"]), 0), &t)
            .unwrap_err(),
        GroupError::GroupMaxSizeReached
    );
    // a joined at epoch 1; b and c moved the group to 3: a's heartbeat at
    // its own epoch moves it there.
    let (a, _) = g.heartbeat(beat("a", 1, None, 1), &t).unwrap();
    assert_eq!(a.member_epoch, 3);
    // Its previous epoch is accepted (the answer may have been lost), older not.
    assert!(g.heartbeat(beat("a", 1, None, 2), &t).is_ok());
    assert_eq!(
        g.heartbeat(beat("a", 7, None, 2), &t).unwrap_err(),
        GroupError::FencedMemberEpoch
    );
    assert_eq!(
        g.heartbeat(beat("zz", -1, None, 2), &t).unwrap_err(),
        GroupError::UnknownMemberId
    );
}

#[test]
fn silent_members_expire_and_the_rest_take_over() {
    let t = topics(&[("orders", 2)]);
    let mut g = Members::default();
    g.heartbeat(beat("a", 0, Some(&["orders"]), 0), &t).unwrap();
    g.heartbeat(beat("b", 0, Some(&["orders"]), 30_000), &t)
        .unwrap();
    assert!(g.expire(44_999, &t).is_empty());
    assert_eq!(g.expire(45_000, &t), vec!["a".to_string()]);
    let (b, _) = g.heartbeat(beat("b", 2, None, 45_001), &t).unwrap();
    assert_eq!(partitions(&b), vec![0, 1]);
}

#[test]
fn new_partitions_are_assigned_at_the_next_heartbeat() {
    let mut g = Members::default();
    g.heartbeat(
        beat("a", 0, Some(&["orders"]), 0),
        &topics(&[("orders", 1)]),
    )
    .unwrap();
    let (a, _) = g
        .heartbeat(beat("a", 1, None, 1), &topics(&[("orders", 3)]))
        .unwrap();
    assert_eq!((a.member_epoch, partitions(&a)), (2, vec![0, 1, 2]));
}

#[test]
fn uneven_topics_spread_their_extra_partitions_over_members() {
    let t = topics(&[("a", 4), ("b", 4)]);
    let mut g = Members::default();
    for m in ["x", "y", "z"] {
        g.heartbeat(beat(m, 0, Some(&["a", "b"]), 0), &t).unwrap();
    }
    let mut counts: Vec<usize> = g
        .iter()
        .map(|(_, m)| m.target.values().map(BTreeSet::len).sum())
        .collect();
    counts.sort();
    assert_eq!(counts, [2, 3, 3]);
}
