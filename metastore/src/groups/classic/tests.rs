use super::*;

fn join_as(
    gs: &mut Groups,
    member: &str,
    instance: Option<&str>,
    fresh: &str,
    now_ms: i64,
) -> Result<Joined, GroupError> {
    let rules = JoinRules::BEFORE_FORMAT_11;
    join_ruled(gs, member, instance, fresh, now_ms, rules)
}

fn join_ruled(
    gs: &mut Groups,
    member: &str,
    instance: Option<&str>,
    fresh: &str,
    now_ms: i64,
    rules: JoinRules,
) -> Result<Joined, GroupError> {
    gs.join(
        JoinGroup {
            group: "g".into(),
            member_id: member.into(),
            instance_id: instance.map(str::to_string),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 5_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), b"t".to_vec())],
            subscribed_topics: Some(vec!["t".into()]),
            require_known_member_id: instance.is_none(),
            fresh_id: fresh.into(),
            now_ms,
            owned: None,
            rules,
        },
        &NoTopics,
        TEST_RULES,
    )
}

/// A new dynamic member: handed an id, then joins with it.
fn join_new(gs: &mut Groups, fresh: &str, now_ms: i64) -> String {
    let Ok(Joined::MemberIdRequired(id)) = join_as(gs, "", None, fresh, now_ms) else {
        panic!("KIP-394: a new member is first handed an id");
    };
    assert_eq!(
        join_as(gs, &id, None, "unused", now_ms),
        Ok(Joined::Member(id.clone()))
    );
    id
}

fn sync(gs: &mut Groups, member: &str, generation: i32, now_ms: i64) -> Result<(), GroupError> {
    gs.sync(SyncGroup {
        group: "g".into(),
        generation,
        member_id: member.into(),
        instance_id: None,
        protocol_type: Some("consumer".into()),
        protocol: Some("range".into()),
        assignments: vec![(member.into(), member.as_bytes().to_vec())],
        now_ms,
        decoded: vec![],
        decodes: true,
    })
    .map(drop)
}

fn beat(
    gs: &Groups,
    member: &str,
    instance: Option<&str>,
    generation: i32,
) -> (Result<(), GroupError>, bool) {
    gs.check_heartbeat(&GroupHeartbeat {
        group: "g".into(),
        generation,
        member_id: member.into(),
        instance_id: instance.map(str::to_string),
    })
}

fn commit(gs: &mut Groups, member: &str, generation: i32, offset: i64) -> Result<(), GroupError> {
    gs.commit_offsets(CommitOffsets {
        group: "g".into(),
        generation,
        member_id: member.into(),
        instance_id: None,
        offsets: vec![OffsetToCommit {
            topic: "t".into(),
            partition: 0,
            offset,
            leader_epoch: 1,
            metadata: None,
        }],
        now_ms: 0,
    })
}

fn group(gs: &Groups) -> &Group {
    gs.get("g").unwrap()
}

fn tick(gs: &mut Groups, now_ms: i64) {
    let tick = TickGroup {
        group: "g".into(),
        now_ms,
    };
    gs.tick(tick, &NoTopics, MigrationPolicy::default());
}

const DELAYED: JoinRules = JoinRules::KAFKA;

#[test]
fn the_first_rebalance_waits_for_members_started_together() {
    let mut gs = Groups::default();
    // a (handed an id, then joining with it) starts the first rebalance.
    let handed = join_ruled(&mut gs, "", None, "a", 0, DELAYED);
    assert_eq!(handed, Ok(Joined::MemberIdRequired("c-a".into())));
    join_ruled(&mut gs, "c-a", None, "unused", 0, DELAYED).unwrap();
    assert_eq!(group(&gs).phase, Phase::Joining { deadline_ms: 3_000 });
    // b comes 1 ms later: no generation formed in between...
    join_ruled(&mut gs, "", None, "b", 1, DELAYED).unwrap();
    join_ruled(&mut gs, "c-b", None, "unused", 1, DELAYED).unwrap();
    tick(&mut gs, 2_999);
    assert_eq!(group(&gs).generation, 0, "all joined, still waiting");
    // ...and a member added extends the wait by the delay, within the
    // rebalance timeout (5 s: 2 s remain).
    tick(&mut gs, 3_000);
    assert_eq!(group(&gs).phase, Phase::Joining { deadline_ms: 5_000 });
    tick(&mut gs, 5_000);
    let g = group(&gs);
    assert_eq!(
        (g.generation, g.phase, g.members.len()),
        (1, Phase::Syncing, 2)
    );
    assert_eq!(g.initial_join, None);
    // A later rebalance does not wait: a third member forms generation 2
    // once everyone rejoined.
    join_ruled(&mut gs, "", None, "c", 6_000, DELAYED).unwrap();
    join_ruled(&mut gs, "c-c", None, "unused", 6_000, DELAYED).unwrap();
    join_ruled(&mut gs, "c-a", None, "unused", 6_001, DELAYED).unwrap();
    join_ruled(&mut gs, "c-b", None, "unused", 6_002, DELAYED).unwrap();
    assert_eq!(
        (group(&gs).generation, group(&gs).phase),
        (2, Phase::Syncing)
    );
}

#[test]
fn session_timeouts_are_bounded_by_the_agent_s_settings() {
    let mut gs = Groups::default();
    let bounds = |min, max| JoinRules {
        min_session_timeout_ms: min,
        max_session_timeout_ms: max,
        ..JoinRules::BEFORE_FORMAT_11
    };
    // The helper asks for a 10 s session.
    assert_eq!(
        join_ruled(&mut gs, "", None, "a", 0, bounds(11_000, 60_000)),
        Err(GroupError::InvalidSessionTimeout)
    );
    assert_eq!(
        join_ruled(&mut gs, "", None, "a", 0, bounds(1_000, 9_000)),
        Err(GroupError::InvalidSessionTimeout)
    );
    assert!(join_ruled(&mut gs, "", None, "a", 0, bounds(10_000, 10_000)).is_ok());
}

#[test]
fn a_lone_member_forms_a_generation_and_heartbeats() {
    let mut gs = Groups::default();
    let a = join_new(&mut gs, "a", 0);
    assert_eq!(
        (
            group(&gs).generation,
            group(&gs).phase,
            group(&gs).leader.as_deref()
        ),
        (1, Phase::Syncing, Some(a.as_str()))
    );
    assert_eq!(a, "c-a");
    sync(&mut gs, &a, 1, 10).unwrap();
    assert_eq!(group(&gs).phase, Phase::Stable);
    assert_eq!(
        gs.view("g", &a, None).unwrap().assignment,
        Some((1, b"c-a".to_vec()))
    );
    assert_eq!(beat(&gs, &a, None, 1), (Ok(()), true));
    // An old generation's heartbeat does not keep the session (Kafka).
    assert_eq!(
        beat(&gs, &a, None, 0),
        (Err(GroupError::IllegalGeneration), false)
    );
    assert_eq!(
        beat(&gs, "x", None, 1),
        (Err(GroupError::UnknownMemberId), false)
    );
    // A member id the group never handed out cannot join.
    assert_eq!(
        join_as(&mut gs, "c-forged", None, "f", 0),
        Err(GroupError::UnknownMemberId)
    );
}

#[test]
fn a_second_member_rebalances_and_commits_follow_kafka_s_states() {
    let mut gs = Groups::default();
    let a = join_new(&mut gs, "a", 0);
    sync(&mut gs, &a, 1, 0).unwrap();
    let b = join_new(&mut gs, "b", 100);
    assert!(matches!(group(&gs).phase, Phase::Joining { .. }));
    // `a` learns of the rebalance through its heartbeat, which keeps it.
    assert_eq!(
        beat(&gs, &a, None, 1),
        (Err(GroupError::RebalanceInProgress), true)
    );
    // Its last commit of the old generation (in its revoke callback) is kept.
    commit(&mut gs, &a, 1, 42).unwrap();
    // The assignment of the stable generation stays readable meanwhile.
    assert_eq!(
        gs.view("g", &a, None).unwrap().assignment,
        Some((1, b"c-a".to_vec()))
    );
    join_as(&mut gs, &a, None, "x", 300).unwrap();
    let g = group(&gs);
    assert_eq!((g.generation, g.phase), (2, Phase::Syncing));
    assert_eq!(g.leader.as_deref(), Some(a.as_str()), "the leader stays");
    assert_eq!(gs.view("g", &a, None).unwrap().members.len(), 2);
    assert!(
        gs.view("g", &b, None).unwrap().members.is_empty(),
        "only the leader sees members"
    );
    assert_eq!(gs.view("g", &a, None).unwrap().assignment, None);
    // While the generation forms, commits are refused.
    assert_eq!(
        commit(&mut gs, &a, 2, 43),
        Err(GroupError::RebalanceInProgress)
    );
    sync(&mut gs, &b, 2, 400).unwrap();
    assert_eq!(
        group(&gs).phase,
        Phase::Syncing,
        "a follower's sync does not finish it"
    );
    sync(&mut gs, &a, 2, 400).unwrap();
    assert_eq!(group(&gs).phase, Phase::Stable);
    assert_eq!(
        gs.view("g", &b, None).unwrap().assignment,
        Some((2, Vec::new())),
        "left out: empty"
    );
    commit(&mut gs, &b, 2, 44).unwrap();
    assert_eq!(
        commit(&mut gs, &b, 1, 45),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(group(&gs).offsets[&("t".to_string(), 0)].offset, 44);
}

#[test]
fn members_that_do_not_rejoin_or_sync_in_time_leave() {
    let mut gs = Groups::default();
    let a = join_new(&mut gs, "a", 0);
    sync(&mut gs, &a, 1, 0).unwrap();
    let b = join_new(&mut gs, "b", 0);
    join_as(&mut gs, &a, None, "x", 0).unwrap();
    sync(&mut gs, &a, 2, 0).unwrap();
    // A third member joins; `a` rejoins, `b` never does.
    let c = join_new(&mut gs, "c", 1_000);
    join_as(&mut gs, &a, None, "x", 1_100).unwrap();
    assert_eq!(group(&gs).phase, Phase::Joining { deadline_ms: 6_000 });
    gs.tick(
        TickGroup {
            group: "g".into(),
            now_ms: 5_999,
        },
        &NoTopics,
        MigrationPolicy::default(),
    );
    assert_eq!(group(&gs).generation, 2);
    gs.tick(
        TickGroup {
            group: "g".into(),
            now_ms: 6_000,
        },
        &NoTopics,
        MigrationPolicy::default(),
    );
    let g = group(&gs);
    assert_eq!((g.generation, g.phase), (3, Phase::Syncing));
    assert!(g.members.contains_key(&a) && g.members.contains_key(&c));
    assert!(!g.members.contains_key(&b));
    // `c` syncs, the leader `a` never does: at the sync deadline the
    // members still awaiting sync leave and the rest rebalance.
    sync(&mut gs, &c, 3, 6_100).unwrap();
    gs.tick(
        TickGroup {
            group: "g".into(),
            now_ms: 11_000,
        },
        &NoTopics,
        MigrationPolicy::default(),
    );
    let g = group(&gs);
    assert!(!g.members.contains_key(&a), "{g:?}");
    assert!(matches!(g.phase, Phase::Joining { .. }));
}

#[test]
fn expiry_spares_members_waiting_in_a_join_or_heard_recently() {
    let mut gs = Groups::default();
    let a = join_new(&mut gs, "a", 0);
    sync(&mut gs, &a, 1, 0).unwrap();
    let expire = |gs: &mut Groups, heard_ms: i64, now_ms: i64| {
        gs.expire_members(
            ExpireMembers {
                group: "g".into(),
                members: vec![(a.clone(), heard_ms)],
                now_ms,
            },
            &NoTopics,
            MigrationPolicy::default(),
        )
    };
    expire(&mut gs, 5_000, 14_999);
    assert_eq!(group(&gs).members.len(), 1, "heard at 5 s, session 10 s");
    // A commit at 12 s showed it alive since.
    gs.commit_offsets(CommitOffsets {
        group: "g".into(),
        generation: 1,
        member_id: a.clone(),
        instance_id: None,
        offsets: vec![],
        now_ms: 12_000,
    })
    .unwrap();
    expire(&mut gs, 5_000, 21_999);
    assert_eq!(group(&gs).members.len(), 1);
    expire(&mut gs, 5_000, 22_000);
    let g = group(&gs);
    assert_eq!((g.phase, g.generation), (Phase::Empty, 2));
}

#[test]
fn a_static_member_restarts_without_a_rebalance_and_fences_its_old_self() {
    let mut gs = Groups::default();
    let Ok(Joined::Member(old)) = join_as(&mut gs, "", Some("i1"), "1", 0) else {
        panic!("a static member joins at once");
    };
    assert_eq!(old, "i1-1");
    sync(&mut gs, &old, 1, 0).unwrap();
    let b = join_new(&mut gs, "b", 0);
    join_as(&mut gs, &old, Some("i1"), "x", 0).unwrap();
    gs.sync(SyncGroup {
        group: "g".into(),
        generation: 2,
        member_id: old.clone(),
        instance_id: Some("i1".into()),
        protocol_type: None,
        protocol: None,
        assignments: vec![(old.clone(), b"p0".to_vec()), (b.clone(), b"p1".to_vec())],
        now_ms: 0,
        decoded: vec![],
        decodes: true,
    })
    .unwrap();
    assert_eq!(group(&gs).phase, Phase::Stable);
    // Restarted: same instance id, no member id. No rebalance; the leader
    // is named as it was (JoinGroup before v9).
    let rejoined = join_as(&mut gs, "", Some("i1"), "2", 1_000).unwrap();
    assert_eq!(
        rejoined,
        Joined::Replaced {
            member_id: "i1-2".into(),
            leader: old.clone()
        }
    );
    let g = group(&gs);
    assert_eq!((g.phase, g.generation), (Phase::Stable, 2));
    assert_eq!(g.leader.as_deref(), Some("i1-2"));
    assert_eq!(
        gs.view("g", "i1-2", None).unwrap().assignment,
        Some((2, b"p0".to_vec()))
    );
    assert_eq!(
        beat(&gs, &old, Some("i1"), 2).0,
        Err(GroupError::FencedInstanceId)
    );
    assert_eq!(beat(&gs, "i1-2", Some("i1"), 2), (Ok(()), true));
    // Leaving by instance id alone.
    let left = gs.leave(
        LeaveGroup {
            group: "g".into(),
            members: vec![Leaving {
                member_id: String::new(),
                instance_id: Some("i1".into()),
            }],
            now_ms: 2_000,
        },
        &NoTopics,
        MigrationPolicy::default(),
    );
    assert_eq!(left, vec![Ok(())]);
    assert!(matches!(group(&gs).phase, Phase::Joining { .. }));
    assert!(group(&gs).instances.is_empty());
}

#[test]
fn a_static_member_that_does_not_rejoin_keeps_its_place_through_a_rebalance() {
    let mut gs = Groups::default();
    let Ok(Joined::Member(s)) = join_as(&mut gs, "", Some("i1"), "1", 0) else {
        panic!()
    };
    sync(&mut gs, &s, 1, 0).unwrap();
    let d = join_new(&mut gs, "d", 0);
    gs.tick(
        TickGroup {
            group: "g".into(),
            now_ms: 5_000,
        },
        &NoTopics,
        MigrationPolicy::default(),
    );
    let g = group(&gs);
    assert_eq!((g.phase, g.generation), (Phase::Syncing, 2));
    assert!(g.members.contains_key(&s) && g.members.contains_key(&d));
}

#[test]
fn ids_handed_out_expire_and_block_the_rebalance_until_then() {
    let mut gs = Groups::default();
    let a = join_new(&mut gs, "a", 0);
    sync(&mut gs, &a, 1, 0).unwrap();
    let Ok(Joined::MemberIdRequired(pending)) = join_as(&mut gs, "", None, "p", 100) else {
        panic!()
    };
    assert_eq!(
        group(&gs).phase,
        Phase::Stable,
        "no rebalance for an id handed out"
    );
    gs.tick(
        TickGroup {
            group: "g".into(),
            now_ms: 10_100,
        },
        &NoTopics,
        MigrationPolicy::default(),
    );
    assert!(group(&gs).pending.is_empty());
    assert_eq!(
        join_as(&mut gs, &pending, None, "x", 10_200),
        Err(GroupError::UnknownMemberId)
    );
}

#[test]
fn protocols_must_be_shared_and_syncs_must_match_them() {
    let mut gs = Groups::default();
    let a = join_new(&mut gs, "a", 0);
    let other = gs.join(
        JoinGroup {
            group: "g".into(),
            member_id: String::new(),
            instance_id: None,
            client_id: "c".into(),
            client_host: String::new(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 5_000,
            protocol_type: "consumer".into(),
            protocols: vec![("roundrobin".into(), vec![])],
            subscribed_topics: None,
            require_known_member_id: false,
            fresh_id: "z".into(),
            now_ms: 0,
            owned: None,
            rules: JoinRules::BEFORE_FORMAT_11,
        },
        &NoTopics,
        TEST_RULES,
    );
    assert_eq!(other, Err(GroupError::InconsistentGroupProtocol));
    let wrong = gs.sync(SyncGroup {
        group: "g".into(),
        generation: 1,
        member_id: a,
        instance_id: None,
        protocol_type: Some("consumer".into()),
        protocol: Some("roundrobin".into()),
        assignments: vec![],
        now_ms: 0,
        decoded: vec![],
        decodes: true,
    });
    assert_eq!(wrong, Err(GroupError::InconsistentGroupProtocol));
}

#[test]
fn offsets_of_topics_not_subscribed_can_be_deleted() {
    let mut gs = Groups::default();
    let a = join_new(&mut gs, "a", 0);
    sync(&mut gs, &a, 1, 0).unwrap();
    gs.commit_offsets(CommitOffsets {
        group: "g".into(),
        generation: 1,
        member_id: a,
        instance_id: None,
        offsets: ["t", "old"]
            .map(|topic| OffsetToCommit {
                topic: topic.into(),
                partition: 0,
                offset: 1,
                leader_epoch: -1,
                metadata: None,
            })
            .to_vec(),
        now_ms: 0,
    })
    .unwrap();
    let deleted = gs.delete_offsets(DeleteOffsets {
        group: "g".into(),
        partitions: vec![("t".into(), 0), ("old".into(), 0)],
    });
    assert_eq!(
        deleted,
        Ok(vec![Err(GroupError::GroupSubscribedToTopic), Ok(())])
    );
    assert_eq!(group(&gs).offsets.len(), 1);
    assert_eq!(
        gs.delete_offsets(DeleteOffsets {
            group: "nope".into(),
            partitions: vec![]
        }),
        Err(GroupError::GroupIdNotFound)
    );
}
