use super::*;
use proptest::prelude::*;
use uuid::Uuid;

fn create(state: &mut State, name: &str, partitions: i32) -> TopicId {
    let id = Uuid::from_u128(state.log.topics.len() as u128 + 1);
    let reply = state.apply(CreateTopic {
        id,
        topic: NewTopic {
            name: name.into(),
            partitions,
            configs: Default::default(),
        },
    });
    assert!(reply.is_ok(), "{reply:?}");
    id
}

fn batch(topic_id: TopicId, partition: i32, position: u64, count: i32) -> CommitBatch {
    CommitBatch {
        topic_id,
        partition,
        position,
        length: 100,
        record_count: count,
        max_timestamp: 1_000 + position as i64,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
    }
}

fn idempotent(t: TopicId, producer: ProducerIdentity, sequence: i32, count: i32) -> CommitBatch {
    CommitBatch {
        producer_id: producer.producer_id,
        producer_epoch: producer.epoch,
        base_sequence: sequence,
        ..batch(t, 0, 0, count)
    }
}

fn init(s: &mut State, existing: Option<ProducerIdentity>) -> ProducerIdentity {
    match s.apply(InitProducer { existing }) {
        Ok(p) => p,
        other => panic!("{other:?}"),
    }
}

/// KIP-730: once ids come in blocks, a producer id the state keeps
/// nothing of is sequenced by its partition's state alone (created by
/// its first write), as Kafka sequences it: the first batch at any
/// sequence, then the usual rules; before, it was an unknown producer.
#[test]
fn producer_ids_from_blocks_leave_no_state_until_they_write() {
    let mut s = State::default();
    let t = create(&mut s, "t", 1);
    let early = ProducerIdentity {
        producer_id: 5,
        epoch: 0,
    };
    assert_eq!(
        commit(&mut s, "o0", vec![idempotent(t, early, 0, 1)]),
        vec![Err(Refusal::UnknownProducerId(5))],
        "the rule of entries logged before blocks"
    );
    let first = s.apply(AllocateProducerIds { count: 1_000 }).unwrap();
    assert_eq!(first, 0);
    assert_eq!(
        s.apply(AllocateProducerIds { count: 1_000 }).unwrap(),
        1_000
    );
    assert!(
        s.producers.issued.is_empty(),
        "nothing kept of an id handed out"
    );
    let p = ProducerIdentity {
        producer_id: 7,
        epoch: 0,
    };
    assert_eq!(
        commit(&mut s, "o1", vec![idempotent(t, p, 42, 2)]),
        vec![Ok(0)]
    );
    assert_eq!(
        commit(&mut s, "o2", vec![idempotent(t, p, 42, 2)]),
        vec![Ok(0)],
        "a retry"
    );
    assert!(matches!(
        commit(&mut s, "o3", vec![idempotent(t, p, 50, 1)])[0],
        Err(Refusal::OutOfOrderSequence { .. })
    ));
    assert_eq!(
        commit(&mut s, "o4", vec![idempotent(t, p, 44, 1)]),
        vec![Ok(2)]
    );
    assert!(s.producers.issued.is_empty());
    s.check_invariants().unwrap();
}

#[test]
fn idempotent_producers_follow_kafka_sequence_rules() {
    let mut s = State::default();
    let t = create(&mut s, "t", 1);
    let p = init(&mut s, None);
    assert_eq!(
        p,
        ProducerIdentity {
            producer_id: 0,
            epoch: 0
        }
    );
    assert_eq!(
        commit(&mut s, "o1", vec![idempotent(t, p, 0, 3)]),
        vec![Ok(0)]
    );
    // A retry of the same batch, even in a later file, returns the original offset.
    assert_eq!(
        commit(&mut s, "o2", vec![idempotent(t, p, 0, 3)]),
        vec![Ok(0)]
    );
    assert_eq!(
        commit(
            &mut s,
            "o3",
            vec![idempotent(t, p, 3, 2), idempotent(t, p, 3, 2)]
        ),
        vec![Ok(3), Ok(3)]
    );
    assert_eq!(s.offsets(t, 0).unwrap().high_watermark, 5);
    // A gap is refused.
    assert!(matches!(
        commit(&mut s, "o4", vec![idempotent(t, p, 9, 1)])[0],
        Err(Refusal::OutOfOrderSequence {
            last: 4,
            got: 9,
            ..
        })
    ));
    // A bumped epoch restarts at 0; the old epoch is fenced.
    let bumped = init(&mut s, Some(p));
    assert_eq!(
        bumped,
        ProducerIdentity {
            producer_id: 0,
            epoch: 1
        }
    );
    assert!(matches!(
        commit(&mut s, "o5", vec![idempotent(t, p, 5, 1)])[0],
        Err(Refusal::InvalidProducerEpoch {
            got: 0,
            current: 1,
            ..
        })
    ));
    assert!(matches!(
        commit(&mut s, "o6", vec![idempotent(t, bumped, 5, 1)])[0],
        Err(Refusal::OutOfOrderSequence { .. })
    ));
    assert_eq!(
        commit(&mut s, "o7", vec![idempotent(t, bumped, 0, 1)]),
        vec![Ok(5)]
    );
    // A stale identity gets a fresh producer id; an unissued one is refused.
    assert_eq!(init(&mut s, Some(p)).producer_id, 1);
    let stranger = ProducerIdentity {
        producer_id: 77,
        epoch: 0,
    };
    assert_eq!(
        commit(&mut s, "o8", vec![idempotent(t, stranger, 0, 1)]),
        vec![Err(Refusal::UnknownProducerId(77))]
    );
    // Only five batches are remembered for duplicates.
    for n in 0..6 {
        commit(
            &mut s,
            &format!("o9-{n}"),
            vec![idempotent(t, bumped, 1 + n, 1)],
        );
    }
    assert!(matches!(
        commit(&mut s, "o10", vec![idempotent(t, bumped, 1, 1)])[0],
        Err(Refusal::OutOfOrderSequence { .. })
    ));
    assert_eq!(
        commit(&mut s, "o11", vec![idempotent(t, bumped, 6, 1)]),
        vec![Ok(11)]
    );
}

fn commit(state: &mut State, key: &str, batches: Vec<CommitBatch>) -> Vec<Result<i64, Refusal>> {
    match state.apply(Commit {
        object_key: key.into(),
        object_size: 1_000,
        batches,
        not_before_ms: state.clock_ms,
    }) {
        Ok(r) => r,
        other => panic!("{other:?}"),
    }
}

/// A batch of no records (or fewer) would move the high watermark back
/// over offsets already given: refused, and the rest of its commit goes on.
#[test]
fn a_batch_of_no_records_is_refused() {
    let mut s = State::default();
    let t = create(&mut s, "t", 1);
    commit(&mut s, "o1", vec![batch(t, 0, 0, 3)]);
    let r = commit(
        &mut s,
        "o2",
        vec![batch(t, 0, 0, 0), batch(t, 0, 100, -5), batch(t, 0, 200, 2)],
    );
    assert!(matches!(r[0], Err(Refusal::InvalidBatch(_))), "{r:?}");
    assert!(matches!(r[1], Err(Refusal::InvalidBatch(_))), "{r:?}");
    assert_eq!(r[2], Ok(3));
    assert_eq!(s.offsets(t, 0).unwrap().high_watermark, 5);
}

#[test]
fn offsets_are_contiguous_per_partition() {
    let mut s = State::default();
    let t = create(&mut s, "t", 2);
    let r = commit(
        &mut s,
        "o1",
        vec![batch(t, 0, 0, 3), batch(t, 1, 100, 5), batch(t, 0, 200, 2)],
    );
    assert_eq!(r, vec![Ok(0), Ok(0), Ok(3)]);
    let r = commit(&mut s, "o2", vec![batch(t, 0, 0, 1)]);
    assert_eq!(r, vec![Ok(5)]);
    assert_eq!(s.offsets(t, 0).unwrap().high_watermark, 6);
    assert_eq!(s.offsets(t, 1).unwrap().high_watermark, 5);
}

#[test]
fn a_retried_commit_is_answered_not_sequenced_again() {
    let mut s = State::default();
    let t = create(&mut s, "t", 1);
    let first = commit(&mut s, "o1", vec![batch(t, 0, 0, 3)]);
    let before = s.clone();
    assert_eq!(commit(&mut s, "o1", vec![batch(t, 0, 0, 3)]), first);
    assert_eq!(s, before);
    assert_eq!(commit(&mut s, "o2", vec![batch(t, 0, 0, 1)]), vec![Ok(3)]);
}

#[test]
fn trimming_moves_the_log_start_and_frees_whole_extents() {
    let mut s = State::default();
    let t = create(&mut s, "t", 1);
    commit(&mut s, "o1", vec![batch(t, 0, 0, 5)]);
    commit(&mut s, "o2", vec![batch(t, 0, 0, 5)]);
    let trim = |s: &mut State, offset| {
        s.apply(Trim {
            partition: TopicPartition::new(t, 0),
            offset,
        })
    };
    assert_eq!(trim(&mut s, 3), Ok(3));
    assert!(s.garbage().is_empty(), "o1 still holds offsets 3 and 4");
    assert!(matches!(
        s.read_plan(t, 0, 2, u64::MAX),
        Err(Refusal::OffsetOutOfRange { .. })
    ));
    assert_eq!(
        s.read_plan(t, 0, 3, u64::MAX).unwrap().extents[0].object_key,
        "o1"
    );
    assert_eq!(trim(&mut s, 2), Ok(3), "never moves back");
    assert_eq!(trim(&mut s, 6), Ok(6));
    assert_eq!(s.garbage(), ["o1".to_string()]);
    assert!(matches!(
        trim(&mut s, 11),
        Err(Refusal::OffsetOutOfRange { .. })
    ));
    assert_eq!(trim(&mut s, 10), Ok(10));
    assert_eq!(s.garbage(), ["o1".to_string(), "o2".to_string()]);
    assert_eq!(
        s.list_offsets(t, 0, OffsetQuery::Earliest).unwrap(),
        OffsetAnswer::Offset(10)
    );
}

#[test]
fn topics_grow_partitions_and_change_configs() {
    let mut s = State::default();
    let t = create(&mut s, "t", 2);
    let grow = |s: &mut State, count| {
        s.apply(CreatePartitions {
            name: "t".into(),
            count,
        })
    };
    assert_eq!(grow(&mut s, 2), Err(Refusal::InvalidPartitions(2)));
    assert_eq!(grow(&mut s, 5), Ok(()));
    assert_eq!(s.topic("t").unwrap().partitions, 5);
    assert_eq!(commit(&mut s, "o", vec![batch(t, 4, 0, 1)]), vec![Ok(0)]);
    let alter = AlterTopicConfigs {
        name: "t".into(),
        set: [("retention.ms".to_string(), "5".to_string())].into(),
        delete: vec!["nothing".into()],
    };
    assert_eq!(s.apply(alter), Ok(()));
    assert_eq!(s.topic("t").unwrap().configs["retention.ms"], "5");
}

#[test]
fn unknown_objects_are_neither_referenced_nor_garbage() {
    let mut s = State::default();
    let t = create(&mut s, "t", 1);
    commit(&mut s, "live", vec![batch(t, 0, 0, 1)]);
    commit(&mut s, "refused", vec![batch(t, 7, 0, 1)]);
    let keys = ["live", "refused", "stray"].map(String::from);
    assert_eq!(s.unknown_objects(&keys), vec!["stray".to_string()]);
}

#[test]
fn adjacent_batches_merge_into_one_extent() {
    let mut s = State::default();
    let t = create(&mut s, "t", 1);
    commit(&mut s, "o1", vec![batch(t, 0, 0, 3), batch(t, 0, 100, 2)]);
    let plan = s.read_plan(t, 0, 0, u64::MAX).unwrap();
    assert_eq!(plan.extents.len(), 1);
    assert_eq!(plan.extents[0].last_offset, 4);
    assert_eq!(plan.extents[0].length, 200);
    let plan = s.read_plan(t, 0, 4, u64::MAX).unwrap();
    assert_eq!(plan.extents.len(), 1);
    assert!(s.read_plan(t, 0, 5, u64::MAX).unwrap().extents.is_empty());
    assert!(matches!(
        s.read_plan(t, 0, 6, u64::MAX),
        Err(Refusal::OffsetOutOfRange { .. })
    ));
}

#[test]
fn unknown_partition_is_refused_per_batch() {
    let mut s = State::default();
    let t = create(&mut s, "t", 1);
    let r = commit(
        &mut s,
        "o1",
        vec![
            batch(t, 1, 0, 1),
            batch(Uuid::nil(), 0, 100, 1),
            batch(t, 0, 200, 1),
        ],
    );
    assert_eq!(
        r,
        vec![
            Err(Refusal::UnknownTopicOrPartition),
            Err(Refusal::UnknownTopicOrPartition),
            Ok(0)
        ]
    );
    // An object none of whose batches landed is garbage at once.
    commit(&mut s, "o2", vec![batch(t, 9, 0, 1)]);
    assert_eq!(s.garbage(), ["o2".to_string()]);
}

#[test]
fn deleting_a_topic_frees_its_objects() {
    let mut s = State::default();
    let a = create(&mut s, "a", 1);
    let b = create(&mut s, "b", 1);
    commit(
        &mut s,
        "shared",
        vec![batch(a, 0, 0, 1), batch(b, 0, 100, 1)],
    );
    commit(&mut s, "only-a", vec![batch(a, 0, 0, 1)]);
    assert_eq!(s.apply(DeleteTopic { name: "a".into() }), Ok(()));
    assert_eq!(s.garbage(), ["only-a".to_string()]);
    assert_eq!(s.apply(DeleteTopic { name: "b".into() }), Ok(()));
    assert_eq!(s.garbage(), ["only-a".to_string(), "shared".to_string()]);
    assert_eq!(
        s.apply(DeleteTopic { name: "b".into() }),
        Err(Refusal::UnknownTopicOrPartition)
    );
}

#[test]
fn topic_validation() {
    let mut s = State::default();
    create(&mut s, "ok.name_1-x", 1);
    for (name, partitions) in [
        ("", 1),
        ("..", 1),
        ("bad/name", 1),
        ("fine", 0),
        ("fine", MAX_PARTITIONS + 1),
    ] {
        let reply = s.apply(CreateTopic {
            id: Uuid::from_u128(99),
            topic: NewTopic {
                name: name.into(),
                partitions,
                configs: Default::default(),
            },
        });
        assert!(reply.is_err(), "{name} {partitions}");
    }
    let dup = s.apply(CreateTopic {
        id: Uuid::from_u128(98),
        topic: NewTopic {
            name: "ok.name_1-x".into(),
            partitions: 1,
            configs: Default::default(),
        },
    });
    assert_eq!(dup, Err(Refusal::TopicExists("ok.name_1-x".into())));
}

#[test]
fn timestamp_lookup_finds_first_extent_reaching_target() {
    let mut s = State::default();
    let t = create(&mut s, "t", 1);
    commit(&mut s, "o1", vec![batch(t, 0, 0, 2)]); // max ts 1000
    commit(&mut s, "o2", vec![batch(t, 0, 500, 2)]); // max ts 1500
    let at = |ts| s.list_offsets(t, 0, OffsetQuery::Timestamp(ts)).unwrap();
    assert!(matches!(at(900), OffsetAnswer::InExtent(e) if e.base_offset == 0));
    assert!(matches!(at(1200), OffsetAnswer::InExtent(e) if e.base_offset == 2));
    assert_eq!(at(2000), OffsetAnswer::NotFound);
    assert_eq!(
        s.list_offsets(t, 0, OffsetQuery::Latest).unwrap(),
        OffsetAnswer::Offset(4)
    );
    // The largest timestamp: the first extent holding it, even if a later
    // one ties.
    let max = |s: &State| s.list_offsets(t, 0, OffsetQuery::MaxTimestamp).unwrap();
    assert!(matches!(max(&s), OffsetAnswer::InExtent(e) if e.base_offset == 2));
    commit(&mut s, "o3", vec![batch(t, 0, 500, 2)]); // max ts 1500 again
    assert!(matches!(max(&s), OffsetAnswer::InExtent(e) if e.base_offset == 2));
    let empty = create(&mut s, "empty", 1);
    assert_eq!(
        s.list_offsets(empty, 0, OffsetQuery::MaxTimestamp).unwrap(),
        OffsetAnswer::NotFound
    );
}

fn replace(s: &mut State, t: TopicId, replaced: Vec<ExtentRef>, key: &str) -> Result<(), Refusal> {
    let length: u64 = replaced.iter().map(|e| e.length).sum();
    let piece = ExtentPiece {
        base_offset: replaced.first().map_or(0, |e| e.base_offset),
        last_offset: replaced.last().map_or(0, |e| e.last_offset),
        max_timestamp: replaced.iter().map(|e| e.max_timestamp).max().unwrap_or(-1),
        position: 0,
        length,
        appended_ms: 0,
    };
    s.apply(ReplaceExtents {
        topic_id: t,
        partition: 0,
        replaced,
        object_key: key.into(),
        object_size: length + 68,
        pieces: vec![piece],
        not_before_ms: 0,
    })
}

#[test]
fn replacing_extents_is_a_compare_and_set() {
    let mut s = State::default();
    let t = create(&mut s, "t", 1);
    let other = create(&mut s, "other", 1);
    commit(
        &mut s,
        "i1",
        vec![batch(t, 0, 0, 2), batch(other, 0, 100, 1)],
    );
    commit(&mut s, "i2", vec![batch(t, 0, 0, 3)]);
    commit(&mut s, "i3", vec![batch(t, 0, 0, 1)]);
    let plan = s.read_plan(t, 0, 0, u64::MAX).unwrap();
    assert_eq!(plan.extents.len(), 3);
    let first_two = plan.extents[..2].to_vec();

    // A stale view (an extent that is not there) is refused and changes nothing.
    let mut stale = first_two.clone();
    stale[1].object_key = "elsewhere".into();
    assert_eq!(
        replace(&mut s, t, stale, "seg0"),
        Err(Refusal::ExtentsChanged)
    );
    assert_eq!(s.read_plan(t, 0, 0, u64::MAX).unwrap(), plan);

    replace(&mut s, t, first_two.clone(), "seg1").unwrap();
    let after = s.read_plan(t, 0, 0, u64::MAX).unwrap();
    assert_eq!(after.extents.len(), 2);
    assert_eq!(
        (after.extents[0].base_offset, after.extents[0].last_offset),
        (0, 4)
    );
    assert_eq!(after.extents[0].object_key, "seg1");
    assert_eq!(after.extents[0].max_timestamp, 1_000);
    // i1 is still used by `other`; i2 is garbage now.
    assert_eq!(s.garbage(), ["i2".to_string()]);
    // Replaying the same swap fails: the extents are gone.
    assert_eq!(
        replace(&mut s, t, first_two, "seg2"),
        Err(Refusal::ExtentsChanged)
    );

    s.apply(ForgetGarbage {
        keys: vec!["i2".into()],
    })
    .unwrap();
    assert!(s.garbage().is_empty());
}

#[test]
fn replacement_pieces_must_tile_the_replaced_offsets() {
    let mut s = State::default();
    let t = create(&mut s, "t", 1);
    commit(&mut s, "i1", vec![batch(t, 0, 0, 4)]);
    commit(&mut s, "i2", vec![batch(t, 0, 0, 4)]);
    let replaced = s.read_plan(t, 0, 0, u64::MAX).unwrap().extents;
    let piece = |base, last, position| ExtentPiece {
        base_offset: base,
        last_offset: last,
        max_timestamp: 7,
        position,
        length: 100,
        appended_ms: 0,
    };
    let swap = |pieces| ReplaceExtents {
        topic_id: t,
        partition: 0,
        replaced: replaced.clone(),
        object_key: "seg".into(),
        object_size: 300,
        pieces,
        not_before_ms: 0,
    };
    for bad in [
        vec![piece(0, 2, 0), piece(4, 7, 100)],
        vec![piece(0, 6, 0)],
        vec![],
    ] {
        assert_eq!(s.apply(swap(bad)), Err(Refusal::ExtentsChanged));
    }
    let good = vec![piece(0, 2, 0), piece(3, 5, 100), piece(6, 7, 200)];
    assert_eq!(s.apply(swap(good)), Ok(()));
    let plan = s.read_plan(t, 0, 4, u64::MAX).unwrap();
    assert_eq!(plan.extents.len(), 2);
    assert_eq!(
        (plan.extents[0].base_offset, plan.extents[0].position),
        (3, 100)
    );
    assert_eq!(s.garbage(), ["i1".to_string(), "i2".to_string()]);
}

proptest! {
    /// Whatever the interleaving of commits, every partition's offsets are
    /// handed out exactly once, contiguously from 0, and the extents tile them.
    #[test]
    fn offsets_are_unique_and_contiguous(
        commits in proptest::collection::vec(
            proptest::collection::vec((0i32..4, 1i32..50), 1..10), 1..30)
    ) {
        let mut s = State::default();
        let t = create(&mut s, "t", 4);
        let mut seen: Vec<Vec<(i64, i32)>> = vec![Vec::new(); 4];
        for (n, batches) in commits.iter().enumerate() {
            let list: Vec<CommitBatch> = batches.iter().enumerate()
                .map(|(i, &(p, c))| batch(t, p, i as u64 * 100, c)).collect();
            let results = commit(&mut s, &format!("o{n}"), list);
            for (&(p, c), r) in batches.iter().zip(results) {
                seen[p as usize].push((r.unwrap(), c));
            }
        }
        for (p, got) in seen.iter().enumerate() {
            let mut next = 0i64;
            for &(base, count) in got {
                prop_assert_eq!(base, next);
                next += count as i64;
            }
            prop_assert_eq!(s.offsets(t, p as i32).unwrap().high_watermark, next);
            let plan = s.read_plan(t, p as i32, 0, u64::MAX).unwrap();
            let mut expect = 0i64;
            for e in &plan.extents {
                prop_assert_eq!(e.base_offset, expect);
                expect = e.last_offset + 1;
            }
            prop_assert_eq!(expect, next);
        }
    }
}

/// Two agents whose clocks differ by an hour used to expire each other's
/// group members on every heartbeat (each stamped `last_seen` with its
/// own clock). Replicated entries now carry the leader's time only.
#[test]
fn senders_clocks_do_not_decide_anything() {
    let mut s = State::default();
    let hour = 3_600_000;
    // Joined through an agent whose clock is an hour behind the leader's.
    let join = JoinGroup {
        group: "g".into(),
        member_id: String::new(),
        instance_id: None,
        client_id: "c".into(),
        client_host: String::new(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), vec![])],
        subscribed_topics: None,
        require_known_member_id: false,
        fresh_id: "1".into(),
        now_ms: 1_000_000 - hour,
        owned: None,
        rules: JoinRules::BEFORE_FORMAT_11,
    };
    let member = match at(&mut s, 1_000_000, join) {
        Ok(Ok(Joined::Member(id))) => id,
        other => panic!("{other:?}"),
    };
    // Its last sight is the leader's time of the join.
    let last_seen = |s: &State| s.groups().get("g").unwrap().members[&member].last_seen_ms;
    assert_eq!(last_seen(&s), 1_000_000);
    // An expiry sent with a time an hour ahead: the member must stay.
    at(
        &mut s,
        1_001_000,
        ExpireMembers {
            group: "g".into(),
            members: vec![(member.clone(), 0)],
            now_ms: 1_001_000 + hour,
        },
    )
    .unwrap();
    assert_eq!(s.groups().get("g").unwrap().members.len(), 1);
    // The leader's clock never runs backwards, whatever a new leader reads.
    at(&mut s, 5, ForgetGarbage { keys: vec![] }).unwrap();
    assert_eq!(s.clock_ms(), 1_001_000);
}

/// Any group name in a Heartbeat, SyncGroup or LeaveGroup created a group
/// (1,000 junk heartbeats left 1,000 groups); offsets never expired.
#[test]
fn groups_are_created_only_by_joins_and_standalone_commits_and_expire() {
    // Retention as `offsets.retention.minutes` sets it (an hour here).
    const OFFSETS_RETENTION_MS: i64 = 3_600_000;
    let mut s = State::default();
    at(
        &mut s,
        500,
        AlterConfigs {
            target: crate::dynamic_config::ConfigTarget::Dynamic(crate::ConfigEntity::Cluster),
            ops: vec![crate::dynamic_config::ConfigOp::Set(
                "offsets.retention.minutes".into(),
                "60".into(),
            )],
            replace: false,
        },
    )
    .unwrap();
    for n in 0..100 {
        let group = format!("junk-{n}");
        let beat = s.groups().check_heartbeat(&GroupHeartbeat {
            group: group.clone(),
            generation: 1,
            member_id: "m".into(),
            instance_id: None,
        });
        assert_eq!(beat, (Err(GroupError::UnknownMemberId), false));
        let sync = at(
            &mut s,
            1_000,
            SyncGroup {
                group: group.clone(),
                generation: 1,
                member_id: "m".into(),
                instance_id: None,
                protocol_type: None,
                protocol: None,
                assignments: vec![],
                now_ms: 0,
                decoded: vec![],
                decodes: true,
            },
        );
        assert_eq!(sync, Ok(Err(GroupError::UnknownMemberId)));
        at(
            &mut s,
            1_000,
            LeaveGroup {
                group: group.clone(),
                members: vec![Leaving {
                    member_id: "m".into(),
                    instance_id: None,
                }],
                now_ms: 0,
            },
        )
        .unwrap();
        let reply = at(
            &mut s,
            1_000,
            CommitOffsets {
                group,
                generation: 3,
                member_id: "m".into(),
                instance_id: None,
                offsets: vec![OffsetToCommit {
                    topic: "t".into(),
                    partition: 0,
                    offset: 1,
                    leader_epoch: -1,
                    metadata: None,
                }],
                now_ms: 0,
            },
        );
        assert_eq!(reply, Ok(Err(GroupError::GroupIdNotFound)));
    }
    assert!(
        s.groups().list().is_empty(),
        "junk requests left groups behind"
    );

    // A standalone commit keeps its group; metadata over the limit is not stored.
    let commit = |offset: i64, metadata: Option<String>| CommitOffsets {
        group: "standalone".into(),
        generation: -1,
        member_id: String::new(),
        instance_id: None,
        offsets: vec![OffsetToCommit {
            topic: "t".into(),
            partition: 0,
            offset,
            leader_epoch: -1,
            metadata,
        }],
        now_ms: 0,
    };
    at(&mut s, 2_000, commit(7, Some("x".repeat(5_000))))
        .unwrap()
        .unwrap();
    assert!(s.groups().get("standalone").unwrap().offsets.is_empty());
    at(&mut s, 3_000, commit(7, Some("fine".into())))
        .unwrap()
        .unwrap();
    assert_eq!(
        s.groups().get("standalone").unwrap().offsets[&("t".to_string(), 0)].offset,
        7
    );
    // Offsets live for the retention after their commit, then go with the group.
    at(
        &mut s,
        3_000 + OFFSETS_RETENTION_MS - 1,
        ForgetGarbage { keys: vec![] },
    )
    .unwrap();
    assert!(s.groups().get("standalone").is_some());
    at(
        &mut s,
        3_000 + OFFSETS_RETENTION_MS + 120_000,
        ForgetGarbage { keys: vec![] },
    )
    .unwrap();
    assert!(s.groups().get("standalone").is_none());
}

/// Dynamic configs act where they are read: the cluster's topic
/// defaults in every answer about a topic (and in which topics are
/// keyed), a group's timeouts in its members' next heartbeat.
#[test]
fn dynamic_configs_reach_topics_and_consumer_groups() {
    let mut s = State::default();
    create(&mut s, "t", 1);
    use crate::dynamic_config::{ConfigOp, ConfigTarget};
    let alter = |entity: crate::ConfigEntity, pairs: &[(&str, &str)]| AlterConfigs {
        target: ConfigTarget::Dynamic(entity),
        ops: pairs
            .iter()
            .map(|(k, v)| ConfigOp::Set(k.to_string(), v.to_string()))
            .collect(),
        replace: false,
    };
    let cluster = alter(
        crate::ConfigEntity::Cluster,
        &[
            ("log.retention.ms", "1000"),
            ("log.cleanup.policy", "compact"),
        ],
    );
    at(&mut s, 1_000, cluster).unwrap();
    let t = s.topic("t").unwrap();
    assert_eq!((t.config().retention_ms, t.config().compact), (1_000, true));
    assert!(t.configs.is_empty(), "the topic itself sets nothing");
    // The topic's own setting wins; its whole result is checked.
    let topic = |ops: Vec<ConfigOp>| AlterConfigs {
        target: ConfigTarget::Topic("t".into()),
        ops,
        replace: false,
    };
    at(
        &mut s,
        1_000,
        topic(vec![ConfigOp::Set("retention.ms".into(), "5".into())]),
    )
    .unwrap();
    assert_eq!(s.topic("t").unwrap().config().retention_ms, 5);
    let refused = at(
        &mut s,
        1_000,
        topic(vec![ConfigOp::Set("dummy.doesntexist".into(), "1".into())]),
    );
    assert!(
        matches!(refused, Err(Refusal::InvalidConfig(_))),
        "{refused:?}"
    );
    // A value older floe stored unchecked does not block other keys.
    at(
        &mut s,
        1_000,
        AlterTopicConfigs {
            name: "t".into(),
            set: [("cleanup.policy".to_string(), "compact,shred".to_string())].into(),
            delete: vec![],
        },
    )
    .unwrap();
    at(
        &mut s,
        1_000,
        topic(vec![ConfigOp::Set("retention.ms".into(), "7".into())]),
    )
    .unwrap();
    assert_eq!(s.topic("t").unwrap().config().retention_ms, 7);
    let bad = alter(crate::ConfigEntity::Cluster, &[("log.retention.ms", "x")]);
    assert!(matches!(
        at(&mut s, 1_000, bad),
        Err(Refusal::InvalidConfig(_))
    ));

    // A group's session timeout reaches its member at its next heartbeat.
    let group = alter(
        crate::ConfigEntity::Group("g".into()),
        &[("consumer.session.timeout.ms", "12000")],
    );
    at(&mut s, 1_000, group).unwrap();
    let mut owned = vec![];
    let beat = |member_epoch: i32, heartbeat_interval_ms: i32, owned: &Vec<(TopicId, Vec<i32>)>| {
        ConsumerHeartbeat {
            group: "g".into(),
            member_id: "m".into(),
            member_epoch,
            instance_id: None,
            rack_id: None,
            rebalance_timeout_ms: 30_000,
            subscribed_topics: Some(vec!["t".into()]),
            subscribed_regex: None,
            assignor: None,
            owned: Some(owned.clone()),
            client_id: "c".into(),
            client_host: "h".into(),
            session_timeout_ms: 45_000,
            heartbeat_interval_ms,
            now_ms: 0,
            describer: None,
        }
    };
    let answer = at(&mut s, 2_000, beat(0, 5_000, &owned)).unwrap().unwrap();
    assert_eq!(answer.heartbeat_interval_ms, 5_000);
    owned = answer.assignment.clone().unwrap();
    let member = |s: &State| {
        let m = &s.groups().consumer_group("g").unwrap().members["m"];
        (m.session_timeout_ms, m.heartbeat_interval_ms)
    };
    assert_eq!(member(&s), (12_000, 5_000));
    // A shorter session, and agents whose interval would miss it: cut.
    let group = alter(
        crate::ConfigEntity::Group("g".into()),
        &[("consumer.session.timeout.ms", "9000")],
    );
    at(&mut s, 3_000, group).unwrap();
    let epoch = answer.member_epoch;
    assert!(
        s.consumer_unchanged(&beat(epoch, 10_000, &owned)).is_none(),
        "a changed timeout is written, not answered from the state"
    );
    let answer = at(&mut s, 4_000, beat(epoch, 10_000, &owned))
        .unwrap()
        .unwrap();
    assert_eq!(answer.heartbeat_interval_ms, 3_000);
    assert_eq!(member(&s), (9_000, 3_000));
    // Then the leader answers it from its state, with the group's interval.
    let unchanged = s.consumer_unchanged(&beat(epoch, 10_000, &owned));
    assert_eq!(unchanged.unwrap().unwrap().heartbeat_interval_ms, 3_000);
}

/// Offsets of a deleted topic went on applying to a topic re-created
/// under its name; Kafka drops them with the topic.
#[test]
fn deleting_a_topic_drops_its_committed_offsets() {
    let mut s = State::default();
    create(&mut s, "t", 1);
    create(&mut s, "u", 1);
    let offsets = ["t", "u"]
        .map(|topic| OffsetToCommit {
            topic: topic.into(),
            partition: 0,
            offset: 5,
            leader_epoch: -1,
            metadata: None,
        })
        .to_vec();
    let commit = CommitOffsets {
        group: "g".into(),
        generation: -1,
        member_id: String::new(),
        instance_id: None,
        offsets,
        now_ms: 0,
    };
    at(&mut s, 1_000, commit).unwrap().unwrap();
    at(&mut s, 1_000, DeleteTopic { name: "t".into() }).unwrap();
    let left: Vec<_> = s
        .groups()
        .get("g")
        .unwrap()
        .offsets
        .keys()
        .cloned()
        .collect();
    assert_eq!(left, vec![("u".to_string(), 0)]);
}

/// Applies `command` as a leader would propose it at `at_ms`.
fn at<C: Apply>(s: &mut State, at_ms: i64, command: C) -> Result<C::Output, Refusal> {
    let reply = s.apply_proposal(Proposal {
        at_ms,
        command: command.into(),
    });
    reply.answer::<C>().unwrap()
}

fn commit_at(
    s: &mut State,
    at_ms: i64,
    key: &str,
    batches: Vec<CommitBatch>,
) -> Vec<Result<i64, Refusal>> {
    match at(
        s,
        at_ms,
        Commit {
            object_key: key.into(),
            object_size: 1_000,
            batches,
            not_before_ms: at_ms,
        },
    ) {
        Ok(r) => r,
        other => panic!("{other:?}"),
    }
}

/// Producer ids and their per-partition state never expired: each
/// InitProducerId grew the state for good (Kafka: producer.id.expiration.ms).
#[test]
fn unused_producer_ids_expire_and_may_start_over() {
    let mut s = State::default();
    let t = create(&mut s, "t", 1);
    let day = PRODUCER_ID_EXPIRATION_MS;
    let p = match at(&mut s, 1_000, InitProducer { existing: None }) {
        Ok(p) => p,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        commit_at(&mut s, 2_000, "a", vec![idempotent(t, p, 0, 5)]),
        vec![Ok(0)]
    );
    // Still used within the day: kept.
    assert_eq!(
        commit_at(&mut s, 2_000 + day - 1, "b", vec![idempotent(t, p, 5, 5)]),
        vec![Ok(5)]
    );
    let other = match at(&mut s, 3_000, InitProducer { existing: None }) {
        Ok(p) => p,
        other => panic!("{other:?}"),
    };
    // A day later (the sweep runs with the next proposal), both are gone.
    at(&mut s, 4_000 + 2 * day, ForgetGarbage { keys: vec![] }).unwrap();
    assert!(s.producers.issued.is_empty(), "{:?}", s.producers.issued);
    assert!(s.log.topics["t"].partitions[0].producers.is_empty());
    assert_eq!(
        commit_at(
            &mut s,
            5_000 + 2 * day,
            "c",
            vec![idempotent(t, other, 0, 1)]
        ),
        vec![Err(Refusal::UnknownProducerId(other.producer_id))]
    );
    // Re-initialised, a producer with no state in a partition may start
    // at any sequence (KIP-360): its retries after an expiry succeed.
    let again = match at(&mut s, 6_000 + 2 * day, InitProducer { existing: None }) {
        Ok(p) => p,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        commit_at(
            &mut s,
            7_000 + 2 * day,
            "d",
            vec![idempotent(t, again, 42, 1)]
        ),
        vec![Ok(10)]
    );
    assert_eq!(
        commit_at(
            &mut s,
            7_001 + 2 * day,
            "e",
            vec![idempotent(t, again, 44, 1)]
        ),
        vec![Err(Refusal::OutOfOrderSequence {
            producer_id: again.producer_id,
            last: 42,
            got: 44
        })],
        "once started, sequences must follow"
    );
}

/// Defect: commit idempotency was a window (4,096 commits or 200,000
/// batch results). A retry arriving after its answer was evicted was
/// sequenced again: idempotent batches answered Duplicate, the new object
/// had no extent, and its key went to GC while the first copy's extents
/// still pointed into it; plain batches were stored twice under one key.
#[test]
fn a_commit_retried_after_its_answer_is_forgotten_is_never_sequenced_again() {
    let mut s = State::default();
    let t = create(&mut s, "t", 1);
    let p = match s.apply(InitProducer { existing: None }) {
        Ok(p) => p,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        commit(&mut s, "idem", vec![idempotent(t, p, 0, 2)]),
        vec![Ok(0)]
    );
    assert_eq!(
        commit(&mut s, "plain", vec![batch(t, 0, 0, 3)]),
        vec![Ok(2)]
    );
    // A retry while the answer is remembered gets the same answer.
    assert_eq!(
        commit(&mut s, "plain", vec![batch(t, 0, 0, 3)]),
        vec![Ok(2)]
    );
    // Push both answers out of memory: by count, once they are older
    // than the least time answers are kept...
    let later = crate::ledger::ANSWER_MIN_MS + 1;
    for n in 0..=crate::ledger::ANSWERS_MAX_RESULTS / 1_000 {
        let many = (0..1_000).map(|i| batch(t, 0, i * 100, 1)).collect();
        commit_at(&mut s, later, &format!("filler-{n}"), many);
    }
    let hw = s.offsets(t, 0).unwrap().high_watermark;
    for key in ["idem", "plain"] {
        let again = commit(&mut s, key, vec![batch(t, 0, 0, 1)]);
        assert_eq!(again, vec![Err(Refusal::ObjectKeyUsed(key.into()))]);
    }
    assert_eq!(
        s.offsets(t, 0).unwrap().high_watermark,
        hw,
        "nothing sequenced twice"
    );
    assert!(
        s.garbage().is_empty(),
        "acknowledged objects handed to GC: {:?}",
        s.garbage()
    );
    s.check_invariants().unwrap();
}

/// Defect: the orphan sweep listed old objects, asked which were unknown,
/// then recorded them in three steps; a commit landing in between was
/// acknowledged and then deleted.
#[test]
fn the_orphan_sweep_cannot_collect_a_key_committed_after_it_looked() {
    let mut s = State::default();
    let t = create(&mut s, "t", 1);
    // The sweep looks: nobody knows "late" yet.
    assert_eq!(
        s.unknown_objects(&["late".to_string()]),
        vec!["late".to_string()]
    );
    // Its commit lands (and is acknowledged) before the sweep decides.
    assert_eq!(commit(&mut s, "late", vec![batch(t, 0, 0, 2)]), vec![Ok(0)]);
    s.apply(RecordOrphans {
        keys: vec!["late".into()],
    })
    .unwrap();
    assert!(s.garbage().is_empty(), "a committed key was collected");
    assert_eq!(s.read_plan(t, 0, 0, u64::MAX).unwrap().extents.len(), 1);
    // The other order: declared an orphan first, its commit is refused,
    // so its producers get an error and never an acknowledgement.
    s.apply(RecordOrphans {
        keys: vec!["later".into()],
    })
    .unwrap();
    assert_eq!(s.garbage(), ["later".to_string()]);
    assert_eq!(
        commit(&mut s, "later", vec![batch(t, 0, 0, 2)]),
        vec![Err(Refusal::ObjectKeyUsed("later".into()))]
    );
    assert_eq!(s.offsets(t, 0).unwrap().high_watermark, 2);
    // Collected keys stay retired long after GC deleted them.
    s.apply_proposal(Proposal {
        at_ms: 1_000,
        command: ForgetGarbage {
            keys: vec!["later".into()],
        }
        .into(),
    });
    s.apply_proposal(Proposal {
        at_ms: 1_000 + crate::ledger::KEY_MEMORY_MS - 1,
        command: ForgetGarbage { keys: vec![] }.into(),
    });
    assert!(matches!(
        commit(&mut s, "later", vec![batch(t, 0, 0, 1)])[0],
        Err(Refusal::ObjectKeyUsed(_))
    ));
    s.check_invariants().unwrap();
}

/// Review finding: DeleteRecords cut into an extent after a compactor
/// read it, and the compactor cut that extent into smaller pieces; the
/// first piece, wholly below the log start, was swapped in and broke the
/// invariant that the first extent holds the log start.
#[test]
fn pieces_below_the_log_start_are_not_swapped_in() {
    let mut s = State::default();
    let t = create(&mut s, "t", 1);
    commit(&mut s, "o1", vec![batch(t, 0, 0, 10)]);
    let replaced = s.read_plan(t, 0, 0, u64::MAX).unwrap().extents;
    s.apply(Trim {
        partition: TopicPartition::new(t, 0),
        offset: 5,
    })
    .unwrap();
    let piece = |base: i64, last: i64, position: u64| ExtentPiece {
        base_offset: base,
        last_offset: last,
        max_timestamp: 1_000,
        position,
        length: 50,
        appended_ms: 0,
    };
    let reply = s.apply(ReplaceExtents {
        topic_id: t,
        partition: 0,
        replaced,
        object_key: "seg".into(),
        object_size: 100,
        pieces: vec![piece(0, 4, 0), piece(5, 9, 50)],
        not_before_ms: 0,
    });
    assert_eq!(reply, Ok(()));
    let extents = s.read_plan(t, 0, 5, u64::MAX).unwrap().extents;
    assert_eq!((extents.len(), extents[0].base_offset), (1, 5));
    s.check_invariants().unwrap();
}
