use super::*;

type Topics = BTreeMap<String, (TopicId, i32)>;

const T: TopicId = TopicId::from_u128(1);

fn topics() -> Topics {
    BTreeMap::from([("t".to_string(), (T, 6))])
}

fn beat(member: &str, epoch: i32, owned: Option<&[i32]>, now_ms: i64) -> ConsumerHeartbeat {
    ConsumerHeartbeat {
        group: "g".into(),
        member_id: member.into(),
        member_epoch: epoch,
        instance_id: None,
        rack_id: None,
        rebalance_timeout_ms: if epoch == 0 { 10_000 } else { -1 },
        subscribed_topics: (epoch == 0).then(|| vec!["t".to_string()]),
        subscribed_regex: None,
        assignor: None,
        owned: owned.map(|ps| {
            if ps.is_empty() {
                vec![]
            } else {
                vec![(T, ps.to_vec())]
            }
        }),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 45_000,
        heartbeat_interval_ms: 5_000,
        now_ms,
        describer: None,
    }
}

fn parts(answer: &ConsumerAnswer) -> Option<Vec<i32>> {
    answer
        .assignment
        .as_ref()
        .map(|a| a.iter().flat_map(|(_, ps)| ps.clone()).collect())
}

#[test]
fn a_partition_moves_only_once_its_owner_gave_it_up() {
    let mut g = ConsumerGroup::default();
    let t = topics();
    let a = g.heartbeat(beat("a", 0, Some(&[]), 0), &t).unwrap();
    assert_eq!(
        (a.member_epoch, parts(&a)),
        (1, Some(vec![0, 1, 2, 3, 4, 5]))
    );
    // b joins: epoch 2; a must give up three partitions first.
    let b = g.heartbeat(beat("b", 0, Some(&[]), 10), &t).unwrap();
    assert_eq!((b.member_epoch, parts(&b)), (2, Some(vec![])));
    assert_eq!(g.state_name(), "Reconciling");
    // a, still owning everything: told to keep only its share, epoch 1.
    let a = g
        .heartbeat(beat("a", 1, Some(&[0, 1, 2, 3, 4, 5]), 20), &t)
        .unwrap();
    assert_eq!(a.member_epoch, 1);
    let kept = parts(&a).unwrap();
    assert_eq!(kept.len(), 3);
    // b asks again: what a still owns is not b's yet.
    let b = g.heartbeat(beat("b", 2, None, 30), &t).unwrap();
    assert_eq!(parts(&b), None, "nothing new");
    // a reports it gave them up: it moves to epoch 2...
    let a = g.heartbeat(beat("a", 1, Some(&kept), 40), &t).unwrap();
    assert_eq!(a.member_epoch, 2);
    // ...and b receives them.
    let b = g.heartbeat(beat("b", 2, None, 50), &t).unwrap();
    let got = parts(&b).unwrap();
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|p| !kept.contains(p)));
    assert_eq!(g.state_name(), "Stable");
    // Now a heartbeat changes nothing: answered without a write.
    assert!(matches!(
        g.unchanged(&beat("a", 2, None, 60), &t),
        Some(Ok(_))
    ));
    assert!(matches!(
        g.unchanged(&beat("b", 2, Some(&got), 60), &t),
        Some(Ok(_))
    ));
    // Refusals cost no write either.
    assert_eq!(
        g.unchanged(&beat("b", 1, None, 60), &t),
        Some(Err(GroupError::FencedMemberEpoch))
    );
    assert_eq!(
        g.unchanged(&beat("x", 2, None, 60), &t),
        Some(Err(GroupError::UnknownMemberId))
    );
}

#[test]
fn epochs_fence_and_members_leave_and_expire() {
    let mut g = ConsumerGroup::default();
    let t = topics();
    g.heartbeat(beat("a", 0, Some(&[]), 0), &t).unwrap();
    assert_eq!(
        g.heartbeat(beat("a", 5, None, 1), &t),
        Err(GroupError::FencedMemberEpoch)
    );
    assert_eq!(
        g.heartbeat(beat("x", 1, None, 1), &t),
        Err(GroupError::UnknownMemberId)
    );
    g.heartbeat(beat("b", 0, Some(&[]), 2), &t).unwrap();
    let left = g.heartbeat(beat("b", LEAVE_EPOCH, None, 3), &t).unwrap();
    assert_eq!(left.member_epoch, LEAVE_EPOCH);
    assert_eq!(g.members.len(), 1);
    // a's session: heard at 40 s, 45 s session.
    g.expire_members(&[("a".into(), 40_000)], 84_999);
    assert_eq!(g.members.len(), 1);
    g.expire_members(&[("a".into(), 40_000)], 85_000);
    assert!(g.members.is_empty());
    assert_eq!(g.state_name(), "Empty");
}

#[test]
fn a_member_that_keeps_what_it_must_give_up_is_fenced_at_its_rebalance_timeout() {
    let mut g = ConsumerGroup::default();
    let t = topics();
    g.heartbeat(beat("a", 0, Some(&[]), 0), &t).unwrap();
    g.heartbeat(beat("b", 0, Some(&[]), 0), &t).unwrap();
    g.heartbeat(beat("a", 1, Some(&[0, 1, 2, 3, 4, 5]), 100), &t)
        .unwrap();
    assert_eq!(g.next_deadline_ms(), Some(10_100));
    g.tick(10_099);
    assert!(g.members.contains_key("a"));
    g.tick(10_100);
    assert!(!g.members.contains_key("a"), "fenced");
    let b = g.heartbeat(beat("b", 2, None, 10_200), &t);
    assert_eq!(b.map(|b| parts(&b).map(|p| p.len())), Ok(Some(6)));
}

#[test]
fn a_static_member_away_keeps_its_partitions_and_comes_back_to_them() {
    let mut g = ConsumerGroup::default();
    let t = topics();
    let with_instance = |mut hb: ConsumerHeartbeat| {
        hb.instance_id = Some("i1".into());
        hb
    };
    g.heartbeat(with_instance(beat("s1", 0, Some(&[]), 0)), &t)
        .unwrap();
    let away = g
        .heartbeat(with_instance(beat("s1", STATIC_LEAVE_EPOCH, None, 10)), &t)
        .unwrap();
    assert_eq!(away.member_epoch, STATIC_LEAVE_EPOCH);
    // Another process with the instance id, while it is held: refused...
    g.members.get_mut("s1").unwrap().epoch = 1;
    assert_eq!(
        g.heartbeat(with_instance(beat("s2", 0, Some(&[]), 20)), &t),
        Err(GroupError::UnreleasedInstanceId)
    );
    g.members.get_mut("s1").unwrap().epoch = STATIC_LEAVE_EPOCH;
    // ...and once released, the new process takes the place and the partitions.
    let back = g
        .heartbeat(with_instance(beat("s2", 0, Some(&[]), 30)), &t)
        .unwrap();
    assert_eq!(parts(&back).map(|p| p.len()), Some(6));
    assert!(!g.members.contains_key("s1"));
    assert_eq!(g.instances["i1"], "s2");
}

#[test]
fn a_regex_is_resolved_again_and_new_topics_join() {
    let mut g = ConsumerGroup::default();
    let mut t = topics();
    let mut join = beat("a", 0, Some(&[]), 0);
    join.subscribed_topics = None;
    join.subscribed_regex = Some("t|u".into());
    let a = g.heartbeat(join, &t).unwrap();
    assert_eq!(parts(&a).map(|p| p.len()), Some(6));
    t.insert("u".into(), (TopicId::from_u128(2), 2));
    // Before the refresh is due, nothing changes...
    assert!(matches!(
        g.unchanged(&beat("a", 1, None, REGEX_REFRESH_MS - 1), &t),
        Some(Ok(_))
    ));
    // ...then the heartbeat is written and the new topic assigned.
    assert!(
        g.unchanged(&beat("a", 1, None, REGEX_REFRESH_MS), &t)
            .is_none()
    );
    let a = g
        .heartbeat(beat("a", 1, None, REGEX_REFRESH_MS), &t)
        .unwrap();
    assert_eq!((a.member_epoch, parts(&a).map(|p| p.len())), (2, Some(8)));
    let mut bad = beat("b", 0, Some(&[]), 0);
    bad.subscribed_regex = Some("(".into());
    assert_eq!(
        g.heartbeat(bad, &t),
        Err(GroupError::InvalidRegularExpression)
    );
}

/// Topics of which the principal "bob" may not describe `u`.
struct Hiding(Topics);

impl TopicLookup for Hiding {
    fn find(&self, name: &str) -> Option<(TopicId, i32)> {
        self.0.find(name)
    }
    fn names(&self) -> Vec<String> {
        self.0.names()
    }
    fn may_describe<'a>(&'a self, who: &'a Describer) -> Box<dyn Fn(&str) -> bool + 'a> {
        Box::new(move |name| !(who.principal == "User:bob" && name == "u"))
    }
}

#[test]
fn a_regex_matches_only_topics_its_member_may_describe() {
    let mut t = topics();
    t.insert("u".into(), (TopicId::from_u128(2), 2));
    let t = Hiding(t);
    let regex_join = |who: &str| {
        let mut join = beat("a", 0, Some(&[]), 0);
        join.subscribed_topics = None;
        join.subscribed_regex = Some("t|u".into());
        join.describer = Some(Describer {
            principal: who.into(),
            host: "127.0.0.1".into(),
            allow_if_no_acl: false,
        });
        join
    };
    let mut g = ConsumerGroup::default();
    let a = g.heartbeat(regex_join("User:bob"), &t).unwrap();
    assert_eq!(parts(&a).map(|p| p.len()), Some(6), "u is hidden");
    let mut g = ConsumerGroup::default();
    let a = g.heartbeat(regex_join("User:alice"), &t).unwrap();
    assert_eq!(parts(&a).map(|p| p.len()), Some(8), "alice sees u");
}

#[test]
fn offsets_need_the_member_s_current_epoch() {
    let mut g = ConsumerGroup::default();
    let t = topics();
    g.heartbeat(beat("a", 0, Some(&[]), 0), &t).unwrap();
    let commit = |generation: i32, member: &str| CommitOffsets {
        group: "g".into(),
        generation,
        member_id: member.into(),
        instance_id: None,
        offsets: vec![],
        now_ms: 0,
    };
    assert_eq!(g.check_commit(&commit(1, "a")), Ok(()));
    assert_eq!(
        g.check_commit(&commit(0, "a")),
        Err(GroupError::StaleMemberEpoch)
    );
    assert_eq!(
        g.check_commit(&commit(-1, "")),
        Err(GroupError::UnknownMemberId)
    );
}
