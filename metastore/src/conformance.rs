//! Behaviour every `Metastore` implementation must show: one named test per
//! behaviour and per shape of metastore (in memory, durable, served over the
//! network, a three-node Raft group), so that one failure hides no other;
//! then tests of what only some shapes have (reopening, failover,
//! membership, deadlines).

use crate::ops::CompactionWork;
use crate::*;

async fn topic(m: &dyn Metastore, name: &str, partitions: i32) -> TopicInfo {
    m.create_topic(NewTopic {
        name: name.into(),
        partitions,
        configs: Default::default(),
    })
    .await
    .unwrap()
}

pub(crate) fn batch(t: &TopicInfo, partition: i32, position: u64, records: i32) -> CommitBatch {
    CommitBatch {
        topic_id: t.id,
        partition,
        position,
        length: 10,
        record_count: records,
        max_timestamp: 0,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
    }
}

async fn commit(
    m: &dyn Metastore,
    key: &str,
    batches: Vec<CommitBatch>,
) -> Vec<Result<i64, Refusal>> {
    m.commit(Commit {
        object_key: key.into(),
        object_size: 100,
        batches,
        // As an agent stamps an upload: the metastore's time, never its own.
        not_before_ms: m.clock().await.unwrap(),
    })
    .await
    .unwrap()
}

// ---- the behaviours: each takes a fresh metastore ----

async fn topics_are_created_found_and_not_created_twice(m: &dyn Metastore) {
    let t = topic(m, "events", 3).await;
    assert_eq!(m.topics().await.unwrap(), vec![t.clone()]);
    assert_eq!(m.topic("events").await.unwrap(), Some(t.clone()));
    assert_eq!(m.topic("nothing").await.unwrap(), None);
    assert_eq!(m.topic_by_id(t.id).await.unwrap(), Some(t.clone()));
    assert_eq!(m.topic_by_id(uuid::Uuid::nil()).await.unwrap(), None);
    let dup = m
        .create_topic(NewTopic {
            name: "events".into(),
            partitions: 1,
            configs: Default::default(),
        })
        .await;
    assert_eq!(dup, Err(Refusal::TopicExists("events".into()).into()));
    assert_eq!(m.topics().await.unwrap(), vec![t]);
}

async fn commits_are_sequenced_into_offsets(m: &dyn Metastore) {
    let t = topic(m, "events", 3).await;
    let r = commit(m, "a", vec![batch(&t, 0, 0, 5), batch(&t, 2, 10, 1)]).await;
    assert_eq!(r, vec![Ok(0), Ok(0)]);
    let r = commit(m, "b", vec![batch(&t, 0, 0, 2), batch(&t, 3, 10, 1)]).await;
    assert_eq!(r, vec![Ok(5), Err(Refusal::UnknownTopicOrPartition)]);

    let offsets = m.offsets(t.id, 0).await.unwrap();
    assert_eq!((offsets.log_start_offset, offsets.high_watermark), (0, 7));
    assert_eq!(
        m.high_watermarks(vec![
            TopicPartition::new(t.id, 0),
            TopicPartition::new(t.id, 1),
            TopicPartition::new(t.id, 2),
            TopicPartition::new(t.id, 3),
            TopicPartition::new(uuid::Uuid::nil(), 0)
        ])
        .await
        .unwrap(),
        vec![Some(7), Some(0), Some(1), None, None]
    );
    let plan = m.read_plan(t.id, 0, 6, 1 << 20).await.unwrap();
    assert_eq!(plan.extents.len(), 1);
    assert_eq!(plan.extents[0].object_key, "b");
    assert_eq!(
        m.list_offsets(t.id, 0, OffsetQuery::Latest).await.unwrap(),
        OffsetAnswer::Offset(7)
    );
    assert_eq!(
        m.list_offsets(t.id, 0, OffsetQuery::Earliest)
            .await
            .unwrap(),
        OffsetAnswer::Offset(0)
    );
}

async fn a_commit_sent_again_gets_the_first_answer(m: &dyn Metastore) {
    let t = topic(m, "events", 1).await;
    let first = commit(m, "a", vec![batch(&t, 0, 0, 5)]).await;
    let again = commit(m, "a", vec![batch(&t, 0, 0, 5)]).await;
    assert_eq!((first, again), (vec![Ok(0)], vec![Ok(0)]));
    assert_eq!(m.offsets(t.id, 0).await.unwrap().high_watermark, 5);
}

async fn partitions_are_trimmed_added_and_configured(m: &dyn Metastore) {
    let t = topic(m, "events", 3).await;
    commit(m, "a", vec![batch(&t, 2, 0, 3)]).await;
    assert_eq!(m.trim(t.id, 2, 1).await, Ok(1));
    assert_eq!(m.offsets(t.id, 2).await.unwrap().log_start_offset, 1);
    m.create_partitions("events", 4).await.unwrap();
    m.alter_topic_configs(
        "events",
        [("retention.ms".to_string(), "9".to_string())].into(),
        vec![],
    )
    .await
    .unwrap();
    let events = m.topic("events").await.unwrap().unwrap();
    assert_eq!((events.partitions, events.config().retention_ms), (4, 9));
    m.alter_topic_configs("events", Default::default(), vec!["retention.ms".into()])
        .await
        .unwrap();
    let events = m.topic("events").await.unwrap().unwrap();
    assert!(events.configs.is_empty(), "{events:?}");
}

async fn idempotent_batches_are_stored_once_and_epochs_fence(m: &dyn Metastore) {
    let t = topic(m, "events", 2).await;
    let p = m.init_producer(None).await.unwrap();
    let idempotent = CommitBatch {
        producer_id: p.producer_id,
        producer_epoch: p.epoch,
        base_sequence: 0,
        ..batch(&t, 1, 0, 2)
    };
    assert_eq!(
        commit(m, "c", vec![idempotent, idempotent]).await,
        vec![Ok(0), Ok(0)]
    );
    assert_eq!(m.offsets(t.id, 1).await.unwrap().high_watermark, 2);
    let bumped = m.init_producer(Some(p)).await.unwrap();
    assert_eq!(bumped.epoch, p.epoch + 1);
    let fenced = CommitBatch {
        base_sequence: 2,
        ..idempotent
    };
    assert!(matches!(
        commit(m, "d", vec![fenced]).await[..],
        [Err(Refusal::InvalidProducerEpoch { .. })]
    ));
}

async fn partition_states_report_bytes_and_producers(m: &dyn Metastore) {
    let t = topic(m, "events", 2).await;
    let p = m.init_producer(None).await.unwrap();
    let idempotent = CommitBatch {
        producer_id: p.producer_id,
        producer_epoch: p.epoch,
        base_sequence: 0,
        ..batch(&t, 1, 0, 3)
    };
    let before = m.clock().await.unwrap();
    commit(m, "a", vec![batch(&t, 0, 0, 5), idempotent]).await;
    // The producer's next batch, then a newer epoch's first: the state is
    // the newest batch's.
    let next = CommitBatch {
        base_sequence: 3,
        record_count: 4,
        ..idempotent
    };
    commit(m, "b", vec![batch(&t, 0, 10, 1), next]).await;
    let bumped = m.init_producer(Some(p)).await.unwrap();
    let fresh = CommitBatch {
        producer_epoch: bumped.epoch,
        base_sequence: 0,
        record_count: 2,
        ..idempotent
    };
    commit(m, "c", vec![fresh]).await;
    let after = m.clock().await.unwrap();
    let asked = vec![
        TopicPartition::new(t.id, 0),
        TopicPartition::new(t.id, 1),
        TopicPartition::new(t.id, 2),
    ];
    let states = m.partition_states(asked.clone(), true).await.unwrap();
    let zero = states[0].as_ref().unwrap();
    // Two batches of 10 bytes each, no idempotent producer.
    assert_eq!((zero.high_watermark, zero.size_bytes), (6, 20));
    assert!(zero.producers.is_empty());
    let one = states[1].as_ref().unwrap();
    assert_eq!((one.high_watermark, one.size_bytes), (9, 30));
    assert_eq!(one.producers.len(), 1);
    let producer = &one.producers[0];
    assert_eq!(
        (producer.producer_id, producer.epoch, producer.last_sequence),
        (p.producer_id, bumped.epoch, 1),
        "the bumped epoch's records 0 and 1"
    );
    // Stamped with the metastore's clock when appended.
    assert!(
        (before..=after).contains(&producer.last_append_ms),
        "{producer:?} not in {before}..={after}"
    );
    assert_eq!(states[2], None, "no partition 2");
    // Without producers, the rest is the same.
    let lean = m.partition_states(asked, false).await.unwrap();
    assert!(lean[1].as_ref().unwrap().producers.is_empty());
    assert_eq!(lean[1].as_ref().unwrap().size_bytes, 30);
}

async fn agents_register_once_on_the_metastores_clock(m: &dyn Metastore) {
    let a = m
        .register_agent("h".into(), 1, Some("z".into()), 5)
        .await
        .unwrap();
    assert_eq!(
        m.register_agent("h".into(), 1, Some("z".into()), 6)
            .await
            .unwrap(),
        a
    );
    assert!(m.agent_heartbeat(a, 7).await.unwrap());
    assert!(!m.agent_heartbeat(a + 100, 7).await.unwrap());
    // The sender's times (5, 6, 7) are ignored: the metastore's clock decides.
    let agents = m.agents().await.unwrap();
    assert!(agents[0].last_seen_ms >= now_ms() - 60_000, "{agents:?}");
    assert!((0..60_000).contains(&agents[0].age_ms), "{agents:?}");
    let clock = m.clock().await.unwrap();
    assert!((now_ms() - 60_000..=now_ms() + 60_000).contains(&clock));
}

async fn agents_are_listed_by_listener(m: &dyn Metastore) {
    use crate::agents::ListenerEndpoint;
    let endpoint = |name: &str, host: &str, port| ListenerEndpoint {
        name: name.into(),
        host: host.into(),
        port,
        protocol: "SSL".into(),
    };
    let listeners = vec![
        endpoint("INTERNAL", "10.1.0.1", 9092),
        endpoint("EXTERNAL", "kafka.example.com", 9094),
    ];
    let a = m
        .register_agent_listeners("10.1.0.1".into(), 9092, None, listeners.clone(), 1)
        .await
        .unwrap();
    let on = |name: &'static str| async move {
        let listed = m.agents_on(name, "SSL").await.unwrap().into_iter();
        listed
            .map(|a| (a.node_id, a.host, a.port))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        on("EXTERNAL").await,
        vec![(a, "kafka.example.com".into(), 9094)]
    );
    assert_eq!(on("INTERNAL").await, vec![(a, "10.1.0.1".into(), 9092)]);
    assert_eq!(on("OTHER").await, vec![]);
    // The same address is the same node; a first listener elsewhere, or
    // one name twice, is refused.
    let again = m.register_agent_listeners("10.1.0.1".into(), 9092, None, listeners.clone(), 2);
    assert_eq!(again.await.unwrap(), a);
    let elsewhere = m.register_agent_listeners("10.1.0.2".into(), 9092, None, listeners, 3);
    assert!(matches!(
        elsewhere.await,
        Err(MetaError::Refused(Refusal::InvalidConfig(_)))
    ));
    let zone = Some("z".repeat(256));
    let one = vec![endpoint("INTERNAL", "10.1.0.1", 9092)];
    let long_zone = m.register_agent_listeners("10.1.0.1".into(), 9092, zone, one, 3);
    assert!(matches!(
        long_zone.await,
        Err(MetaError::Refused(Refusal::InvalidConfig(_)))
    ));
    let twice = vec![endpoint("A", "10.1.0.3", 1), endpoint("A", "10.1.0.3", 2)];
    let twice = m.register_agent_listeners("10.1.0.3".into(), 1, None, twice, 4);
    assert!(matches!(
        twice.await,
        Err(MetaError::Refused(Refusal::InvalidConfig(_)))
    ));
}

async fn agents_find_each_others_caches(m: &dyn Metastore) {
    let peer = |node_id: i32| crate::peers::CachePeer {
        node_id,
        zone: Some("z".into()),
        address: format!("10.0.0.{node_id}:9644"),
    };
    assert_eq!(m.cache_peers(Some(peer(1))).await.unwrap(), vec![peer(1)]);
    assert_eq!(
        m.cache_peers(Some(peer(2))).await.unwrap(),
        vec![peer(1), peer(2)]
    );
    assert_eq!(m.cache_peers(None).await.unwrap(), vec![peer(1), peer(2)]);
}

fn join_request(member_id: &str, session_timeout_ms: i32) -> JoinGroup {
    JoinGroup {
        group: "g".into(),
        member_id: member_id.into(),
        instance_id: None,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms,
        rebalance_timeout_ms: 30_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), vec![])],
        subscribed_topics: Some(vec!["t".into()]),
        require_known_member_id: true,
        fresh_id: crate::random_id().to_string(),
        now_ms: 0,
        owned: None,
        rules: JoinRules::BEFORE_FORMAT_11,
    }
}

fn sync_request(member: &str, generation: i32) -> SyncGroup {
    SyncGroup {
        group: "g".into(),
        generation,
        member_id: member.into(),
        instance_id: None,
        protocol_type: Some("consumer".into()),
        protocol: Some("range".into()),
        assignments: vec![(member.into(), b"all".to_vec())],
        now_ms: 0,
        decoded: vec![],
        decodes: true,
    }
}

async fn a_group_forms_and_keeps_its_offsets(m: &dyn Metastore) {
    assert!(m.groups().await.unwrap().is_empty());
    // KIP-394: a new member is first handed an id.
    let Ok(Joined::MemberIdRequired(member)) =
        m.join_group(join_request("", 30_000)).await.unwrap()
    else {
        panic!("a new member must be asked to come back with an id");
    };
    let joined = m.join_group(join_request(&member, 30_000)).await.unwrap();
    assert_eq!(joined, Ok(Joined::Member(member.clone())));
    let wait = |seen| AwaitGroup {
        group: "g".into(),
        member_id: member.clone(),
        instance_id: None,
        seen,
        wait_ms: 50,
    };
    let view = m.await_group(wait(None)).await.unwrap().unwrap();
    assert_eq!(
        (view.generation, view.phase, view.member),
        (1, Phase::Syncing, Some(true))
    );
    assert_eq!(view.members.len(), 1, "the leader sees every member");
    // Nothing changes: the wait ends at its deadline with the same version.
    let same = m
        .await_group(wait(Some(view.version)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(same.version, view.version);
    m.sync_group(sync_request(&member, 1))
        .await
        .unwrap()
        .unwrap();
    let view = m
        .await_group(wait(Some(view.version)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(view.phase, Phase::Stable);
    assert_eq!(view.assignment, Some((1, b"all".to_vec())));
    let beat = |generation| GroupHeartbeat {
        group: "g".into(),
        generation,
        member_id: member.clone(),
        instance_id: None,
    };
    assert_eq!(m.group_heartbeat(beat(1)).await.unwrap(), Ok(()));
    assert_eq!(
        m.group_heartbeat(beat(0)).await.unwrap(),
        Err(GroupError::IllegalGeneration)
    );
    let offsets = vec![OffsetToCommit {
        topic: "t".into(),
        partition: 0,
        offset: 42,
        leader_epoch: 7,
        metadata: Some("m".into()),
    }];
    let commit = CommitOffsets {
        group: "g".into(),
        generation: 1,
        member_id: member.clone(),
        instance_id: None,
        offsets,
        now_ms: 0,
    };
    m.commit_offsets(commit).await.unwrap().unwrap();
    let described = m.describe_group("g").await.unwrap().unwrap();
    assert_eq!(
        (described.state.as_str(), described.protocol.as_str()),
        ("Stable", "range")
    );
    assert_eq!(described.members[0].client_host, "/127.0.0.1");
    assert_eq!(described.members[0].assignment, b"all".to_vec());
    let committed = m
        .group_offsets("g", Some(vec![("t".into(), 0), ("t".into(), 1)]))
        .await
        .unwrap();
    assert_eq!(
        committed[0].1.as_ref().map(|o| (o.offset, o.leader_epoch)),
        Some((42, 7))
    );
    assert_eq!(committed[1].1, None);
    // Subscribed to `t`: its offsets cannot be deleted; the group neither.
    assert_eq!(
        m.delete_offsets("g", vec![("t".into(), 0)]).await.unwrap(),
        Ok(vec![Err(GroupError::GroupSubscribedToTopic)])
    );
    assert_eq!(
        m.delete_groups(vec!["g".into()]).await.unwrap(),
        vec![Err(GroupError::NonEmptyGroup)]
    );
    let leave = LeaveGroup {
        group: "g".into(),
        members: vec![
            Leaving {
                member_id: member,
                instance_id: None,
            },
            Leaving {
                member_id: "stranger".into(),
                instance_id: None,
            },
        ],
        now_ms: 0,
    };
    assert_eq!(
        m.leave_group(leave).await.unwrap(),
        vec![Ok(()), Err(GroupError::UnknownMemberId)]
    );
    let listed = m.groups().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state, "Empty", "offsets outlive the members");
    assert_eq!(m.group_offsets("g", None).await.unwrap().len(), 1);
    assert_eq!(
        m.delete_groups(vec!["g".into(), "g".into()]).await.unwrap(),
        vec![Ok(()), Err(GroupError::GroupIdNotFound)]
    );
    assert!(m.groups().await.unwrap().is_empty());
}

/// Heartbeats are not written, yet they keep a member; when they stop, the
/// leader's timers expire it after its session.
async fn a_silent_member_is_expired_by_the_leader(m: &dyn Metastore) {
    let Ok(Joined::MemberIdRequired(member)) = m.join_group(join_request("", 6_000)).await.unwrap()
    else {
        panic!("a new member must be asked to come back with an id");
    };
    m.join_group(join_request(&member, 6_000))
        .await
        .unwrap()
        .unwrap();
    m.sync_group(sync_request(&member, 1))
        .await
        .unwrap()
        .unwrap();
    let beat = GroupHeartbeat {
        group: "g".into(),
        generation: 1,
        member_id: member.clone(),
        instance_id: None,
    };
    let started = tokio::time::Instant::now();
    // Beating for longer than its session keeps it.
    let mut silent = started;
    while started.elapsed() < std::time::Duration::from_secs(8) {
        silent = tokio::time::Instant::now();
        assert_eq!(m.group_heartbeat(beat.clone()).await.unwrap(), Ok(()));
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    // Silent since its last beat was sent: gone within its session and
    // the timers' period, never before the session.
    loop {
        let state = m.groups().await.unwrap()[0].state.clone();
        if state == "Empty" {
            break;
        }
        assert!(
            silent.elapsed() < std::time::Duration::from_secs(12),
            "a silent member was never expired ({state})"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(silent.elapsed() >= std::time::Duration::from_millis(6_000));
    assert_eq!(
        m.group_heartbeat(beat).await.unwrap(),
        Err(GroupError::UnknownMemberId)
    );
}

async fn objects_it_never_heard_of_are_found(m: &dyn Metastore) {
    let t = topic(m, "events", 1).await;
    commit(m, "a", vec![batch(&t, 0, 0, 1)]).await;
    assert_eq!(
        m.unknown_objects(vec!["a".into(), "stray".into()])
            .await
            .unwrap(),
        vec!["stray".to_string()]
    );
    m.record_orphans(vec!["stray".into(), "a".into()])
        .await
        .unwrap();
    assert_eq!(m.garbage().await.unwrap(), vec!["stray".to_string()]);
    m.forget_garbage(vec!["stray".into()]).await.unwrap();
    assert!(m.garbage().await.unwrap().is_empty());
}

/// A share group's name is its own: a classic join or a consumer heartbeat
/// under it is refused; ListGroups shows it; DeleteGroups deletes it, and
/// its share state, once it has no members.
async fn a_share_group_keeps_its_name_and_is_deleted_when_empty(m: &dyn Metastore) {
    topic(m, "t", 2).await;
    let beat = |epoch| crate::contract::shares::ShareHeartbeat {
        group: "g".into(),
        member_id: "share-1".into(),
        member_epoch: epoch,
        rack: None,
        subscribed: (epoch == 0).then(|| vec!["t".to_string()]),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 45_000,
        heartbeat_interval_ms: 5_000,
        max_size: 200,
        now_ms: 0,
    };
    let joined = m.share_heartbeat(beat(0)).await.unwrap().unwrap();
    assert_eq!(joined.member_epoch, 1);
    let assigned: Vec<i32> = joined
        .assignment
        .unwrap()
        .into_iter()
        .flat_map(|(_, p)| p)
        .collect();
    assert_eq!(assigned, [0, 1]);
    assert_eq!(
        m.join_group(join_request("", 30_000)).await.unwrap(),
        Err(GroupError::InconsistentGroupProtocol)
    );
    let listed = m.groups().await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|g| (g.name.as_str(), g.group_type.as_str(), g.state.as_str()))
            .collect::<Vec<_>>(),
        [("g", "share", "Stable")]
    );
    assert_eq!(
        m.delete_groups(vec!["g".into()]).await.unwrap(),
        [Err(GroupError::NonEmptyGroup)]
    );
    let view = m.describe_share_group("g").await.unwrap().unwrap();
    assert_eq!(view.members.len(), 1);
    let left = m.share_heartbeat(beat(-1)).await.unwrap().unwrap();
    assert_eq!(left.member_epoch, -1);
    assert_eq!(m.delete_groups(vec!["g".into()]).await.unwrap(), [Ok(())]);
    assert_eq!(m.describe_share_group("g").await.unwrap(), None);
}

/// A share group works under its own configs, else the cluster's, else
/// Kafka's defaults, whatever its agent asked: where it starts reading,
/// how long a lock lasts, how often a record is delivered; a record held
/// back by an agent (never sent) does not count as delivered.
async fn a_share_group_works_under_its_configs(m: &dyn Metastore) {
    use crate::contract::dynamic_config::{ConfigEntity, ConfigOp, ConfigTarget};
    use crate::contract::shares::*;
    let t = topic(m, "t", 1).await;
    commit(m, "o1", vec![batch(&t, 0, 0, 4)]).await;
    let set = |entity, pairs: &[(&str, &str)]| {
        let ops = pairs
            .iter()
            .map(|(k, v)| ConfigOp::Set(k.to_string(), v.to_string()))
            .collect();
        m.alter_configs(ConfigTarget::Dynamic(entity), ops, false)
    };
    let group = ConfigEntity::Group("g".into());
    set(group.clone(), &[("share.auto.offset.reset", "earliest")])
        .await
        .unwrap();
    set(group.clone(), &[("share.record.lock.duration.ms", "20000")])
        .await
        .unwrap();
    // Below the cluster's group.share.min.record.lock.duration.ms (15 s).
    let short = set(group.clone(), &[("share.record.lock.duration.ms", "3000")]).await;
    assert!(
        matches!(short, Err(MetaError::Refused(Refusal::InvalidConfig(_)))),
        "{short:?}"
    );
    let bad = set(group, &[("share.isolation.level", "dirty")]).await;
    assert!(
        matches!(bad, Err(MetaError::Refused(Refusal::InvalidConfig(_)))),
        "{bad:?}"
    );
    set(
        ConfigEntity::Cluster,
        &[("group.share.delivery.count.limit", "2")],
    )
    .await
    .unwrap();
    m.share_heartbeat(ShareHeartbeat {
        group: "g".into(),
        member_id: "share-1".into(),
        member_epoch: JOIN_EPOCH,
        rack: None,
        subscribed: Some(vec!["t".into()]),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 45_000,
        heartbeat_interval_ms: 5_000,
        max_size: 200,
        now_ms: 0,
    })
    .await
    .unwrap()
    .unwrap();
    let acquire = || {
        m.acquire_share(AcquireShare {
            group: "g".into(),
            member: "share-1".into(),
            session: 1,
            partitions: vec![(t.id, 0)],
            max_records: 10,
            // What an agent asks with: Kafka's defaults.
            rules: AcquireRules {
                delivery_limit: 5,
                max_in_flight: 2_000,
                lock_ms: 30_000,
                start_from: StartFrom::Latest,
                read_committed: false,
            },
            now_ms: 0,
        })
    };
    let ack = |ack: Ack| {
        m.acknowledge_share(AcknowledgeShare {
            group: "g".into(),
            member: "share-1".into(),
            acks: vec![PartitionAcks {
                topic: t.id,
                partition: 0,
                batches: vec![AckBatch {
                    first: 0,
                    last: 3,
                    types: vec![ack],
                }],
            }],
            delivery_limit: 5,
            now_ms: 0,
        })
    };
    let taken = |a: ShareAcquisition| a.partitions[0].acquired.clone().unwrap();
    let first = acquire().await.unwrap().unwrap();
    assert_eq!((first.lock_ms, first.read_committed), (20_000, false));
    let whole = |deliveries| Acquired {
        first: 0,
        last: 3,
        deliveries,
    };
    assert_eq!(taken(first), [whole(1)], "from the earliest record");
    assert_eq!(ack(Ack::Undelivered).await.unwrap().unwrap(), [Ok(())]);
    assert_eq!(taken(acquire().await.unwrap().unwrap()), [whole(1)]);
    assert_eq!(ack(Ack::Release).await.unwrap().unwrap(), [Ok(())]);
    assert_eq!(taken(acquire().await.unwrap().unwrap()), [whole(2)]);
    // Released at the cluster's limit of two deliveries: archived.
    assert_eq!(ack(Ack::Release).await.unwrap().unwrap(), [Ok(())]);
    assert_eq!(taken(acquire().await.unwrap().unwrap()), []);
    let view = m.describe_share_group("g").await.unwrap().unwrap();
    assert_eq!(view.partitions[0].start_offset, 4);
    assert_eq!(view.partitions[0].archived, 4, "the four, at the limit");
}

/// A backup's hold: objects freed after it are not handed to GC (nor
/// forgotten) while it lasts; those freed before it are.
async fn garbage_freed_under_a_backup_hold_is_kept(m: &dyn Metastore) {
    let t = topic(m, "events", 1).await;
    for key in ["a", "b"] {
        commit(m, key, vec![batch(&t, 0, 0, 5)]).await;
    }
    m.trim(t.id, 0, 5).await.unwrap();
    let held = m.hold_garbage(3_600_000).await.unwrap();
    assert!(held.until_ms > 3_600_000);
    m.trim(t.id, 0, 10).await.unwrap();
    assert_eq!(m.garbage().await.unwrap(), vec!["a".to_string()]);
    m.forget_garbage(vec!["a".into(), "b".into()])
        .await
        .unwrap();
    assert!(m.garbage().await.unwrap().is_empty());
    // `b` is still awaiting collection: not unknown, so no sweep takes it.
    assert!(
        m.unknown_objects(vec!["b".into()])
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        m.hold_garbage(0).await,
        Err(MetaError::Refused(Refusal::InvalidConfig(_)))
    ));
}

/// A backup of a three-node group restores into a new group of one that
/// holds the same state, leads at start, goes on sequencing from it, and
/// keeps it across a restart.
#[tokio::test]
async fn a_backup_restores_into_a_new_group() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, servers, addresses) = three_nodes(dir.path()).await;
    let _servers = AbortOnDrop(servers);
    let group = RemoteMetastore::new(&addresses);
    let t = topic(&group, "events", 2).await;
    commit(&group, "a", vec![batch(&t, 0, 0, 5), batch(&t, 1, 0, 2)]).await;
    group.claim_cluster_id("c-1".into(), true).await.unwrap();
    let backup = group.backup(3_600_000).await.unwrap();
    // Written after the backup: not in it.
    commit(&group, "later", vec![batch(&t, 0, 0, 1)]).await;

    let bytes = backup.to_bytes().unwrap();
    let read = crate::raft::backup::Backup::from_bytes(&bytes).unwrap();
    assert_eq!(read, backup);
    assert_eq!(read.cluster_id.as_deref(), Some("c-1"));
    let mut damaged = bytes.clone();
    damaged[40] ^= 1;
    assert!(crate::raft::backup::Backup::from_bytes(&damaged).is_err());
    assert!(crate::raft::backup::Backup::from_bytes(b"floe").is_err());
    for node in &nodes {
        node.shutdown().await;
    }

    let path = dir.path().join("restored.redb");
    crate::raft::backup::restore(&read, &path, 7, "127.0.0.1:1").unwrap();
    assert!(
        crate::raft::backup::restore(&read, &path, 7, "127.0.0.1:1").is_err(),
        "an existing file is not overwritten"
    );
    for start in ["restored", "restarted"] {
        let mut options = NodeOptions::new(7, "127.0.0.1:1");
        options.path = Some(path.clone());
        options.heartbeat_ms = 20;
        let node = RaftMetastore::start(options).await.unwrap();
        node.wait_until_leader(std::time::Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("{start}: {e}"));
        let offsets = node.offsets(t.id, 0).await.unwrap();
        let expected = if start == "restored" { 5 } else { 6 };
        assert_eq!(offsets.high_watermark, expected, "{start}");
        assert_eq!(node.offsets(t.id, 1).await.unwrap().high_watermark, 2);
        let plan = node.read_plan(t.id, 0, 0, 1 << 20).await.unwrap();
        assert_eq!(plan.extents[0].object_key, "a");
        let identity = node.claim_cluster_id("other".into(), false).await.unwrap();
        assert_eq!(identity.id, "c-1", "{start}: the cluster keeps its id");
        if start == "restored" {
            assert!(node.applied_index() > backup.last_index);
            // Ids handed out after the backup are never handed out again.
            let id = node.init_producer(None).await.unwrap().producer_id;
            assert!(id >= crate::state::RESTORE_PRODUCER_ID_GAP, "{id}");
            let r = commit(&node, "after-restore", vec![batch(&t, 0, 0, 1)]).await;
            assert_eq!(r, vec![Ok(5)], "sequencing goes on from the backup");
        }
        node.local_state(|s| s.check_invariants()).unwrap();
        node.shutdown().await;
    }
}

async fn a_lease_has_one_holder_at_a_time(m: &dyn Metastore) {
    let lease = |holder: &str| m.acquire_lease("compact/x/0".into(), holder.into(), 0, 60_000);
    assert!(lease("agent-a").await.unwrap());
    assert!(lease("agent-a").await.unwrap(), "its holder renews it");
    assert!(!lease("agent-b").await.unwrap());
    m.release_lease("compact/x/0".into(), "agent-b".into())
        .await
        .unwrap();
    assert!(
        !lease("agent-b").await.unwrap(),
        "only the holder releases it"
    );
    m.release_lease("compact/x/0".into(), "agent-a".into())
        .await
        .unwrap();
    assert!(lease("agent-b").await.unwrap());
}

async fn the_cluster_id_is_set_once(m: &dyn Metastore) {
    let claim = |id: &str, store_marked| m.claim_cluster_id(id.into(), store_marked);
    let identity = |id: &str, store_marked| crate::contract::ops::ClusterIdentity {
        id: id.into(),
        store_marked,
        known_object: None,
    };
    assert!(claim("not an id", false).await.is_err());
    assert!(claim("", false).await.is_err());
    assert_eq!(
        claim("first-Id_1", false).await.unwrap(),
        identity("first-Id_1", false)
    );
    assert_eq!(
        claim("second", true).await.unwrap(),
        identity("first-Id_1", false),
        "a later claim learns the first, and marks no store for another id"
    );
    assert_eq!(
        claim("first-Id_1", true).await.unwrap(),
        identity("first-Id_1", true)
    );
    assert_eq!(
        claim("third", false).await.unwrap(),
        identity("first-Id_1", true)
    ); // Once it knows objects, it names one, for agents to look for.
    let t = topic(m, "events", 1).await;
    commit(m, "ingest/a", vec![batch(&t, 0, 0, 1)]).await;
    let known = claim("first-Id_1", false).await.unwrap().known_object;
    assert_eq!(known.as_deref(), Some("ingest/a"));
}

async fn a_deleted_topics_objects_become_garbage(m: &dyn Metastore) {
    let t = topic(m, "events", 2).await;
    commit(m, "a", vec![batch(&t, 0, 0, 1)]).await;
    commit(m, "b", vec![batch(&t, 1, 0, 1)]).await;
    m.delete_topic("events").await.unwrap();
    assert!(m.topics().await.unwrap().is_empty());
    assert_eq!(
        m.delete_topic("events").await,
        Err(Refusal::UnknownTopicOrPartition.into())
    );
    let mut garbage = m.garbage().await.unwrap();
    garbage.sort();
    assert_eq!(garbage, vec!["a".to_string(), "b".to_string()]);
}

fn work(max_files: u32) -> CompactionWork {
    CompactionWork {
        ingest_prefix: "ingest/".into(),
        max_files,
        max_bytes: u64::MAX,
        max_extents: u64::MAX,
        merged_prefix: "merged/".into(),
        segment_bytes: 1 << 30,
        merge_max_chunks: 2,
        merge_max_age_ms: i64::MAX,
    }
}

/// Each run moved into the merged file `key`, as one piece at the same place.
async fn merge_runs(m: &dyn Metastore, key: &str, runs: &[ExtentRun]) -> Vec<Result<(), Refusal>> {
    let mut position = 0;
    let runs = runs
        .iter()
        .map(|run| {
            let length: u64 = run.extents.iter().map(|e| e.length).sum();
            let first = &run.extents[0];
            let piece = ExtentPiece {
                base_offset: first.base_offset,
                last_offset: run.extents[run.extents.len() - 1].last_offset,
                max_timestamp: 0,
                position,
                length,
                appended_ms: first.appended_ms,
            };
            position += length;
            RunSwap {
                partition: run.partition,
                replaced: run.extents.clone(),
                pieces: vec![piece],
            }
        })
        .collect();
    m.replace_runs(ReplaceRuns {
        object_key: key.into(),
        object_size: position,
        runs,
        not_before_ms: m.clock().await.unwrap(),
    })
    .await
    .unwrap()
}

async fn compaction_moves_the_oldest_files_out_in_one_swap(m: &dyn Metastore) {
    let t = topic(m, "events", 2).await;
    let tp = |p| TopicPartition::new(t.id, p);
    commit(m, "ingest/a", vec![batch(&t, 0, 0, 1), batch(&t, 1, 10, 2)]).await;
    commit(m, "ingest/b", vec![batch(&t, 0, 0, 3)]).await;
    commit(m, "ingest/c", vec![batch(&t, 1, 0, 1)]).await;

    // The two oldest files, and every run of extents in them.
    let backlog = m.compaction_work(work(2)).await.unwrap();
    let files: Vec<&str> = backlog.files.iter().map(|f| f.key.as_str()).collect();
    assert_eq!(
        (files, backlog.ingest_files),
        (vec!["ingest/a", "ingest/b"], 3)
    );
    let runs: Vec<(TopicPartition, Vec<&str>)> = backlog
        .runs
        .iter()
        .map(|r| {
            (
                r.partition,
                r.extents.iter().map(|e| e.object_key.as_str()).collect(),
            )
        })
        .collect();
    assert_eq!(
        runs,
        vec![
            (tp(0), vec!["ingest/a", "ingest/b"]),
            (tp(1), vec!["ingest/a"])
        ]
    );

    // A run that changed meanwhile is refused alone; the others swap in and
    // free both files.
    let mut stale = backlog.runs[1].clone();
    stale.extents[0].length += 1;
    let mut runs = backlog.runs.clone();
    runs.push(stale);
    let swapped = merge_runs(m, "merged/1", &runs).await;
    assert_eq!(swapped, vec![Ok(()), Ok(()), Err(Refusal::ExtentsChanged)]);
    let mut garbage = m.garbage().await.unwrap();
    garbage.sort();
    assert_eq!(
        garbage,
        vec!["ingest/a".to_string(), "ingest/b".to_string()]
    );
    let plan = m.read_plan(t.id, 0, 0, u64::MAX).await.unwrap();
    assert_eq!(plan.extents.len(), 1);
    assert_eq!(plan.extents[0].object_key, "merged/1");
    assert_eq!(
        (plan.extents[0].base_offset, plan.extents[0].last_offset),
        (0, 3)
    );

    // The same swap again is refused whole: its key is known.
    assert_eq!(
        m.replace_runs(ReplaceRuns {
            object_key: "merged/1".into(),
            object_size: 1,
            runs: vec![],
            not_before_ms: m.clock().await.unwrap(),
        })
        .await,
        Err(Refusal::ObjectKeyUsed("merged/1".into()).into())
    );
    // A merged file none of whose runs could be swapped is garbage at once.
    let lost = merge_runs(m, "merged/lost", &backlog.runs).await;
    assert!(lost.iter().all(|r| r == &Err(Refusal::ExtentsChanged)));
    assert!(
        m.garbage()
            .await
            .unwrap()
            .contains(&"merged/lost".to_string())
    );

    // Partition 1 now has merged extents in two objects in a row: worth
    // merging further. Nothing is left in ingest files.
    let backlog = m.compaction_work(work(10)).await.unwrap();
    assert_eq!(backlog.files.len(), 1);
    merge_runs(m, "merged/2", &backlog.runs).await;
    let backlog = m.compaction_work(work(10)).await.unwrap();
    assert_eq!((backlog.files.len(), backlog.ingest_files), (0, 0));
    assert_eq!(backlog.merge, vec![tp(1)]);
}

/// A metastore of one shape for one test, with what must live as long.
struct Shape {
    meta: Box<dyn Metastore>,
    _keep: Box<dyn std::any::Any + Send>,
}

async fn in_memory() -> Option<Shape> {
    Some(Shape {
        meta: Box::new(LocalMetastore::in_memory().await.unwrap()),
        _keep: Box::new(()),
    })
}

async fn durable() -> Option<Shape> {
    let dir = tempfile::tempdir().unwrap();
    // A tiny snapshot interval, so snapshots are taken along the way.
    let meta = LocalMetastore::open_with(&dir.path().join("meta.redb"), 3)
        .await
        .unwrap();
    Some(Shape {
        meta: Box::new(meta),
        _keep: Box::new(dir),
    })
}

async fn remote() -> Option<Shape> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let served = std::sync::Arc::new(LocalMetastore::in_memory().await.unwrap());
    let server = tokio::spawn(crate::rpc::serve(listener, served));
    Some(Shape {
        meta: Box::new(RemoteMetastore::new(address)),
        _keep: Box::new(AbortOnDrop(vec![server])),
    })
}

async fn three_node_group() -> Option<Shape> {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, servers, addresses) = three_nodes(dir.path()).await;
    Some(Shape {
        meta: Box::new(RemoteMetastore::new(&addresses)),
        _keep: Box::new((AbortOnDrop(servers), nodes, dir)),
    })
}

/// Stops the servers a shape started when its test ends.
struct AbortOnDrop<T>(Vec<tokio::task::JoinHandle<T>>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

/// One test per behaviour for a shape of metastore (Quickwit's
/// `metastore_test_suite!`): a new behaviour is a function above and a line
/// here, and every shape runs it.
macro_rules! conformance_suite {
    ($($shape:ident),* $(,)?) => {
        $(conformance_suite!(@shape $shape:
            topics_are_created_found_and_not_created_twice,
            commits_are_sequenced_into_offsets,
            a_commit_sent_again_gets_the_first_answer,
            partitions_are_trimmed_added_and_configured,
            idempotent_batches_are_stored_once_and_epochs_fence,
            partition_states_report_bytes_and_producers,
            agents_register_once_on_the_metastores_clock,
            agents_are_listed_by_listener,
            agents_find_each_others_caches,
            a_group_forms_and_keeps_its_offsets,
            a_silent_member_is_expired_by_the_leader,
            objects_it_never_heard_of_are_found,
            garbage_freed_under_a_backup_hold_is_kept,
            a_share_group_keeps_its_name_and_is_deleted_when_empty,
            a_share_group_works_under_its_configs,
            a_lease_has_one_holder_at_a_time,
            the_cluster_id_is_set_once,
            a_deleted_topics_objects_become_garbage,
            compaction_moves_the_oldest_files_out_in_one_swap,
        );)*
    };
    (@shape $shape:ident: $($behaviour:ident),* $(,)?) => {
        mod $shape {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $behaviour() {
                    // A shape that needs a server the machine lacks says so (see `shapes`).
                    let Some(shape) = super::$shape().await else { return };
                    super::$behaviour(&*shape.meta).await;
                }
            )*
        }
    };
}

/// A node on a shared log in memory, snapshotting every 3 entries.
async fn shared_log() -> Option<Shape> {
    let log = std::sync::Arc::new(crate::shared_log::memory::MemoryLog::default());
    Some(Shape {
        meta: Box::new(log_node(log).await),
        _keep: Box::new(()),
    })
}

/// A node on PostgreSQL, in a schema of its own in the test server.
async fn postgres() -> Option<Shape> {
    let url = crate::shared_log::postgres::testing::fresh_schema().await?;
    let log = crate::shared_log::postgres::PostgresLog::connect(&url)
        .await
        .unwrap();
    Some(Shape {
        meta: Box::new(log_node(std::sync::Arc::new(log)).await),
        _keep: Box::new(()),
    })
}

async fn log_node(log: std::sync::Arc<dyn crate::shared_log::SharedLog>) -> crate::LogNode {
    let mut options = crate::LogNodeOptions::new(1, "node-1");
    options.snapshot_every = 3;
    let node = crate::LogNode::start(log, options).await.unwrap();
    node.wait_until_leader(std::time::Duration::from_secs(10))
        .await
        .unwrap();
    node
}

conformance_suite!(
    in_memory,
    durable,
    remote,
    three_node_group,
    shared_log,
    postgres
);

#[tokio::test]
async fn durable_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.redb");
    // A tiny snapshot interval so both the snapshot and the log replay are exercised.
    let m = LocalMetastore::open_with(&path, 3).await.unwrap();
    m.claim_cluster_id("kept-id".into(), true).await.unwrap();
    let t = topic(&m, "kept", 1).await;
    for n in 0..7 {
        commit(&m, &format!("k{n}"), vec![batch(&t, 0, 0, 2)]).await;
    }
    let before = m.read_plan(t.id, 0, 0, u64::MAX).await.unwrap();
    let status = m.status();
    assert!(status.snapshot_index.is_some(), "{status:?}");
    assert!(
        status.log_entries < 10,
        "snapshots should bound the log: {status:?}"
    );
    m.shutdown().await;
    drop(m);

    // openraft's storage tasks let go of the file shortly after shutdown.
    let mut attempts = 0;
    let reopened = loop {
        match LocalMetastore::open_with(&path, 3).await {
            Ok(m) => break m,
            Err(e) if attempts < 50 => {
                attempts += 1;
                tracing::debug!(error = %e, "metastore file still open");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("reopening: {e}"),
        }
    };
    assert_eq!(reopened.topics().await.unwrap(), vec![t.clone()]);
    assert_eq!(
        reopened
            .claim_cluster_id("other".into(), false)
            .await
            .unwrap()
            .id,
        "kept-id"
    );
    assert_eq!(
        reopened.read_plan(t.id, 0, 0, u64::MAX).await.unwrap(),
        before
    );
    let r = commit(&reopened, "after", vec![batch(&t, 0, 0, 1)]).await;
    assert_eq!(r, vec![Ok(14)]);
}

/// Waits (up to 10 s) until `condition` holds.
async fn eventually(condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within 10s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Three served nodes bootstrapped together, each with its own storage.
async fn three_nodes(
    dir: &std::path::Path,
) -> (
    Vec<std::sync::Arc<RaftMetastore>>,
    Vec<tokio::task::JoinHandle<std::io::Result<()>>>,
    String,
) {
    three_nodes_with(dir, None, None).await
}

/// Three nodes that prove `secret` to each other and ask it of clients,
/// granting read leases of `read_lease`.
async fn three_nodes_with(
    dir: &std::path::Path,
    secret: Option<crate::peer_auth::ClusterSecret>,
    read_lease: Option<std::time::Duration>,
) -> (
    Vec<std::sync::Arc<RaftMetastore>>,
    Vec<tokio::task::JoinHandle<std::io::Result<()>>>,
    String,
) {
    let mut listeners = Vec::new();
    let mut peers = std::collections::BTreeMap::new();
    for id in 1..=3u64 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        peers.insert(id, listener.local_addr().unwrap().to_string());
        listeners.push((id, listener));
    }
    let mut nodes = Vec::new();
    let mut servers = Vec::new();
    for (id, listener) in listeners {
        let mut options = NodeOptions::new(id, peers[&id].clone());
        options.path = Some(dir.join(format!("node{id}.redb")));
        options.bootstrap = crate::raft::node::Bootstrap::Cluster(peers.clone());
        options.heartbeat_ms = 50;
        options.snapshot_every = 50;
        options.secret = secret.clone();
        options.read_lease = read_lease;
        let node = std::sync::Arc::new(RaftMetastore::start(options).await.unwrap());
        servers.push(tokio::spawn(crate::rpc::serve(listener, node.clone())));
        nodes.push(node);
    }
    let addresses = peers.values().cloned().collect::<Vec<_>>().join(",");
    (nodes, servers, addresses)
}

/// What the leader says next on `sub`, within 5 s.
pub(crate) async fn next(
    sub: &mut crate::contract::push::Subscription,
) -> crate::contract::push::FromLeader {
    let recv = sub.from_leader.recv();
    tokio::time::timeout(std::time::Duration::from_secs(5), recv)
        .await
        .expect("the leader says something")
        .expect("the subscription is open")
}

/// A subscription over the wire: opened on the leader whichever node the
/// client asks first, noticed of another client's commit (which waits for
/// its ack), and, when the leader fails, no commit is answered by the new
/// leader while the lease the old one granted still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_is_served_over_the_wire_and_outlives_no_leader() {
    use crate::contract::push::{FromLeader, ToLeader};
    use std::time::Duration;
    use tokio::time::Instant;

    let lease = Duration::from_secs(2);
    let dir = tempfile::tempdir().unwrap();
    let (nodes, servers, addresses) = three_nodes_with(dir.path(), None, Some(lease)).await;
    let producer = RemoteMetastore::new(&addresses);
    let t = topic(&producer, "pushed", 1).await;
    // Past the first leader's own wait of a lease.
    commit(&producer, "first", vec![batch(&t, 0, 0, 1)]).await;

    let agent = RemoteMetastore::new(&addresses);
    let mut sub = Metastore::subscribe(&agent).await.unwrap();
    let renewed = Instant::now();
    sub.to_leader
        .send(ToLeader::Renew { ask: 1 })
        .await
        .unwrap();
    assert!(matches!(
        next(&mut sub).await,
        FromLeader::Renewed { ask: 1, .. }
    ));
    let tp = TopicPartition::new(t.id, 0);
    let watch = ToLeader::Watch {
        ask: 2,
        add: vec![(tp, 0)],
        remove: vec![],
    };
    sub.to_leader.send(watch).await.unwrap();
    let FromLeader::Notice {
        seq,
        answers: Some(2),
        plans,
    } = next(&mut sub).await
    else {
        panic!("not the watch's answer");
    };
    assert_eq!(plans[0].1.as_ref().unwrap().plan.high_watermark, 1);
    sub.to_leader.send(ToLeader::Ack { seq }).await.unwrap();

    let committing = tokio::spawn({
        let producer = RemoteMetastore::new(&addresses);
        let t = t.clone();
        async move { commit(&producer, "second", vec![batch(&t, 0, 10, 1)]).await }
    });
    let FromLeader::Notice {
        seq,
        answers: None,
        plans,
    } = next(&mut sub).await
    else {
        panic!("not the commit's notice");
    };
    assert_eq!(plans[0].1.as_ref().unwrap().plan.high_watermark, 2);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !committing.is_finished(),
        "answered before the holder had the notice"
    );
    sub.to_leader.send(ToLeader::Ack { seq }).await.unwrap();
    assert_eq!(committing.await.unwrap(), vec![Ok(1)]);

    // The leader fails; the holder renewed just before.
    sub.to_leader
        .send(ToLeader::Renew { ask: 3 })
        .await
        .unwrap();
    let renewed_last = Instant::now();
    assert!(matches!(
        next(&mut sub).await,
        FromLeader::Renewed { ask: 3, .. }
    ));
    assert!(renewed_last >= renewed);
    let leader = nodes.iter().position(|n| n.leads()).unwrap();
    nodes[leader].shutdown().await;
    servers[leader].abort();
    let r = commit(&producer, "after-failover", vec![batch(&t, 0, 20, 1)]).await;
    assert_eq!(r, vec![Ok(2)]);
    assert!(
        Instant::now() >= renewed_last + lease,
        "a new leader answered a change while the old leader's lease held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_node_group_survives_losing_its_leader() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, servers, addresses) = three_nodes(dir.path()).await;
    let client = RemoteMetastore::new(&addresses);

    // Enough commits for snapshots and log purging to happen on every node.
    let t = topic(&client, "replicated", 2).await;
    for n in 0..120 {
        commit(&client, &format!("r{n}"), vec![batch(&t, n % 2, 0, 1)]).await;
    }
    let leader = nodes
        .iter()
        .position(|n| n.status().role == "Leader")
        .unwrap();
    nodes[leader].shutdown().await;
    servers[leader].abort();

    // The other two elect a leader; commits go on where they left off, and a
    // commit retried after its reply was lost is not sequenced twice.
    let r = commit(&client, "after-failover", vec![batch(&t, 0, 0, 1)]).await;
    assert_eq!(r, vec![Ok(60)]);
    let again = commit(&client, "after-failover", vec![batch(&t, 0, 0, 1)]).await;
    assert_eq!(again, vec![Ok(60)]);
    assert_eq!(client.offsets(t.id, 1).await.unwrap().high_watermark, 60);
    for (n, node) in nodes.iter().enumerate().filter(|(n, _)| *n != leader) {
        let status = node.status();
        assert!(status.snapshot_index.is_some(), "node {n}: {status:?}");
        assert!(
            status.log_entries < 120,
            "node {n} kept its whole log: {status:?}"
        );
    }
}

/// Heartbeats live only in the leader's memory: when it fails, the new
/// leader counts every member as heard when it began to lead. A member that
/// goes on beating through the failover stays; a silent one still goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_liveness_survives_losing_the_leader() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let (nodes, servers, addresses) = three_nodes(dir.path()).await;
    let client = RemoteMetastore::new(&addresses);
    let join = |member: &str| {
        let mut j = join_request(member, 6_000);
        j.require_known_member_id = false;
        j
    };
    let Ok(Joined::Member(live)) = client.join_group(join("")).await.unwrap() else {
        panic!("the first member joins");
    };
    let Ok(Joined::Member(silent)) = client.join_group(join("")).await.unwrap() else {
        panic!("the second member joins");
    };
    // The first member rejoins the rebalance the second started; the
    // generation forms and is synced.
    client.join_group(join(&live)).await.unwrap().unwrap();
    client
        .sync_group(sync_request(&live, 2))
        .await
        .unwrap()
        .unwrap();
    let beat = GroupHeartbeat {
        group: "g".into(),
        generation: 2,
        member_id: live.clone(),
        instance_id: None,
    };
    assert_eq!(client.group_heartbeat(beat.clone()).await.unwrap(), Ok(()));
    let leader = nodes
        .iter()
        .position(|n| n.status().role == "Leader")
        .unwrap();
    nodes[leader].shutdown().await;
    servers[leader].abort();
    let failed_over = tokio::time::Instant::now();
    let mut silent_gone = None;
    while failed_over.elapsed() < Duration::from_secs(15) {
        // Errors while the group elects are expected; a refusal is not.
        if let Ok(answer) = client.group_heartbeat(beat.clone()).await {
            assert!(
                matches!(answer, Ok(()) | Err(GroupError::RebalanceInProgress)),
                "the beating member was dropped: {answer:?}"
            );
        }
        if silent_gone.is_none()
            && let Ok(Some(g)) = client.describe_group("g").await
            && !g.members.iter().any(|m| m.member_id == silent)
        {
            silent_gone = Some(failed_over.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let gone = silent_gone.expect("the silent member was never expired");
    // Not before a whole session after the new leader began.
    assert!(gone >= Duration::from_secs(6), "expired after {gone:?}");
}

/// Starts node 4 served on a fresh port, waiting to join, and adds it.
async fn add_fourth_node(client: &RemoteMetastore) -> std::sync::Arc<RaftMetastore> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let mut options = NodeOptions::new(4, address.clone());
    options.bootstrap = crate::raft::node::Bootstrap::Join;
    options.heartbeat_ms = 50;
    let fourth = std::sync::Arc::new(RaftMetastore::start(options).await.unwrap());
    tokio::spawn(crate::rpc::serve(listener, fourth.clone()));
    client.add_node(4, address).await.unwrap();
    fourth
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_changes_add_and_remove_a_node() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, _servers, addresses) = three_nodes(dir.path()).await;
    let client = RemoteMetastore::new(&addresses);
    let t = topic(&client, "grown", 1).await;
    for n in 0..80 {
        commit(&client, &format!("g{n}"), vec![batch(&t, 0, 0, 1)]).await;
    }

    // A fourth node that waits to be added, then catches up (from a snapshot:
    // the others have purged the log's start).
    let fourth = add_fourth_node(&client).await;
    // Committed on the leader; each member learns of it with its next append.
    let voters_seen_by =
        |node: &RaftMetastore| node.status().voters.keys().copied().collect::<Vec<_>>();
    eventually(|| voters_seen_by(&fourth) == vec![1, 2, 3, 4]).await;
    assert!(fourth.status().learners.is_empty());

    client.remove_node(1).await.unwrap();
    eventually(|| voters_seen_by(&nodes[1]) == vec![2, 3, 4]).await;
    let status = nodes[1].status();
    // The new member has every commit.
    let r = commit(&client, "after-change", vec![batch(&t, 0, 0, 1)]).await;
    assert_eq!(r, vec![Ok(80)]);
    fourth
        .raft()
        .wait(Some(std::time::Duration::from_secs(10)))
        .applied_index_at_least(
            status.last_applied_index.map(|i| i + 1),
            "fourth catches up",
        )
        .await
        .unwrap();
}

/// A leader that removed itself leads on until its removal is applied. Asked
/// for another change meanwhile, it answers `NotLeader` (openraft's leader
/// must not append a membership it is not in: a debug assertion killed its
/// core in simulation seed 1005, where a caller had given up between the
/// removal's two steps); the next leader takes the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_removed_itself_passes_further_changes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, _servers, addresses) = three_nodes(dir.path()).await;
    let client = RemoteMetastore::new(&addresses);
    topic(&client, "t", 1).await;
    let leader = nodes
        .iter()
        .find(|n| n.status().leader == Some(n.id()))
        .unwrap();
    leader.remove_node(leader.id()).await.unwrap();
    let again = leader.add_node(leader.id(), "127.0.0.1:1".into()).await;
    assert!(matches!(again, Err(MetaError::NotLeader(_))), "{again:?}");
    let remaining: Vec<_> = nodes.iter().filter(|n| n.id() != leader.id()).collect();
    eventually(|| {
        remaining
            .iter()
            .any(|n| n.status().leader == Some(n.id()) && n.status().voters.len() == 2)
    })
    .await;
    // The group goes on, and the removed leader's core lives to step down.
    topic(&client, "after", 1).await;
    eventually(|| leader.status().role != "Leader").await;
}

/// The snapshot used to travel as one message, capped at the frame limit:
/// once the state outgrew a frame, no node could ever be added or catch up.
/// It now goes in pieces (the frame limit is 4 MiB in tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joins_a_group_whose_state_is_larger_than_a_frame() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, _servers, addresses) = three_nodes(dir.path()).await;
    let client = RemoteMetastore::new(&addresses);
    let big = "x".repeat(200 * 1024);
    for n in 0..30 {
        client
            .create_topic(NewTopic {
                name: format!("big-{n}"),
                partitions: 1,
                configs: [("note".to_string(), big.clone())].into(),
            })
            .await
            .unwrap();
    }
    let t = topic(&client, "small", 1).await;
    for n in 0..80 {
        commit(&client, &format!("s{n}"), vec![batch(&t, 0, 0, 1)]).await;
    }
    let size = nodes[0].local_state(|s| crate::format::encode_snapshot(s).unwrap().len());
    assert!(
        size > crate::rpc::MAX_FRAME_FOR_TESTS,
        "state of {size} bytes"
    );

    let fourth = add_fourth_node(&client).await;
    eventually(|| {
        fourth.local_state(|s| s.topic("big-29").is_some() && s.topic("small").is_some())
    })
    .await;
    let theirs = nodes[0].local_state(|s| s.topic("big-7"));
    assert_eq!(fourth.local_state(|s| s.topic("big-7")), theirs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_never_answers_reads_from_stale_state() {
    let dir = tempfile::tempdir().unwrap();
    let (nodes, servers, addresses) = three_nodes(dir.path()).await;
    let client = RemoteMetastore::new(&addresses);
    let t = topic(&client, "leases", 1).await;
    commit(&client, "before", vec![batch(&t, 0, 0, 1)]).await;
    let at = nodes
        .iter()
        .position(|n| n.status().role == "Leader")
        .unwrap();
    let old = &nodes[at];
    assert_eq!(old.offsets(t.id, 0).await.unwrap().high_watermark, 1);

    // The leader is cut off (nothing reaches it, it sends nothing unasked):
    // the others elect a new one and commit more.
    servers[at].abort();
    old.raft().runtime_config().heartbeat(false);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let new = loop {
        let leader = nodes
            .iter()
            .find(|n| n.id() != old.id() && n.status().role == "Leader");
        if let Some(leader) = leader {
            break leader;
        }
        assert!(tokio::time::Instant::now() < deadline, "no new leader");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let r = new
        .commit(Commit {
            object_key: "after".into(),
            object_size: 10,
            batches: vec![batch(&t, 0, 0, 1)],
            not_before_ms: new.clock().await.unwrap(),
        })
        .await
        .unwrap();
    assert_eq!(r, vec![Ok(1)]);

    // Its lease has run out, so it checks with a quorum, learns it was
    // deposed, and points at the new leader instead of answering 1.
    match old.offsets(t.id, 0).await {
        Err(MetaError::NotLeader(_)) | Err(MetaError::Unavailable { .. }) => {}
        Ok(answer) => assert_eq!(answer.high_watermark, 2, "stale read from a deposed leader"),
        Err(e) => panic!("{e:?}"),
    }
    assert_eq!(client.offsets(t.id, 0).await.unwrap().high_watermark, 2);
}

#[tokio::test]
async fn a_client_sent_round_in_circles_gives_up() {
    use futures::{SinkExt, StreamExt};
    // A node that always says "not me, ask me".
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let hint = address.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let hint = hint.clone();
            tokio::spawn(async move {
                let mut framed = tokio_util::codec::Framed::new(stream, crate::rpc::codec());
                while let Some(Ok(_)) = framed.next().await {
                    let reply: Result<(), MetaError> =
                        Err(MetaError::NotLeader(Some(hint.clone())));
                    let bytes = postcard::to_stdvec(&reply).unwrap();
                    if framed.send(bytes::Bytes::from(bytes)).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    let m = RemoteMetastore::new(&address).with_retry_for(std::time::Duration::from_millis(300));
    let answer = tokio::time::timeout(std::time::Duration::from_secs(10), m.topics())
        .await
        .expect("the client must stop following hints that lead nowhere");
    assert!(
        matches!(answer, Err(MetaError::Unavailable { .. })),
        "{answer:?}"
    );
}

#[tokio::test]
async fn remote_reports_an_unreachable_metastore() {
    // Nothing listens on port 9 of loopback here.
    let m =
        RemoteMetastore::new("127.0.0.1:9").with_retry_for(std::time::Duration::from_millis(200));
    let err = m.topics().await.unwrap_err();
    assert!(matches!(err, MetaError::Unavailable { .. }), "{err:?}");
}

/// A frozen node (SIGSTOP): it accepts connections and reads requests into
/// its socket but never answers. The client used to wait on it forever;
/// now each attempt has a deadline, a safe request moves on to the next node,
/// and an unsafe one fails as "may have been applied".
#[tokio::test]
async fn a_frozen_node_costs_one_attempt_timeout_not_forever() {
    use std::time::Duration;
    let frozen = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let frozen_address = frozen.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (stream, _) = frozen.accept().await.unwrap();
            held.push(stream); // never read, never answered, never closed
        }
    });
    // A live node behind it, served over TCP.
    let live = std::sync::Arc::new(crate::LocalMetastore::in_memory().await.unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let live_address = listener.local_addr().unwrap().to_string();
    tokio::spawn(crate::rpc::serve(listener, live.clone()));
    live.create_topic(NewTopic {
        name: "t".into(),
        partitions: 1,
        configs: Default::default(),
    })
    .await
    .unwrap();

    let m = RemoteMetastore::new(format!("{frozen_address},{live_address}"))
        .with_attempt_timeout(Duration::from_millis(300))
        .with_retry_for(Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let topics = tokio::time::timeout(Duration::from_secs(10), m.topics())
        .await
        .expect("a frozen node must not hold the client");
    assert_eq!(topics.unwrap().len(), 1, "answered by the live node");
    assert!(started.elapsed() < Duration::from_secs(3));

    // Alone with the frozen node, an unsafe request gives up after one attempt.
    let m = RemoteMetastore::new(&frozen_address).with_attempt_timeout(Duration::from_millis(300));
    let err = tokio::time::timeout(Duration::from_secs(10), m.delete_topic("t"))
        .await
        .expect("bounded")
        .unwrap_err();
    assert!(
        matches!(
            err,
            MetaError::Unavailable {
                maybe_applied: true,
                ..
            }
        ),
        "{err:?}"
    );
}

/// A Raft message from a node of another log format is refused, never
/// applied: a mixed-version group must stall, not replay entries as
/// something else.
#[tokio::test]
async fn a_peer_of_another_format_is_refused() {
    use crate::raft::network::PeerRequest;
    use futures::{SinkExt, StreamExt};
    let node = std::sync::Arc::new(crate::LocalMetastore::in_memory().await.unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(crate::rpc::serve(listener, node.clone()));
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let mut framed = tokio_util::codec::Framed::new(stream, crate::rpc::codec());
    let vote = || {
        PeerRequest::Vote(openraft::raft::VoteRequest::new(
            openraft::Vote::new(9, 9),
            None,
        ))
    };
    // A peer of log format 99: refused with the reason, in the layout
    // peers have always read (the bytes of the old
    // `Request::PeerOfFormat(99, ..)`: variant 32).
    let mut frame = vec![32u8];
    frame.extend(postcard::to_stdvec(&(99u8, vote())).unwrap());
    framed.send(bytes::Bytes::from(frame)).await.unwrap();
    let answer = framed.next().await.unwrap().unwrap();
    // The old `Err(MetaError::Storage(..))`: variant 1, then 10.
    assert_eq!(answer[..2], [1, 10]);
    let answer = crate::rpc::read_peer_reply(&answer);
    assert!(
        matches!(&answer, Err(why) if why.contains("format")),
        "{answer:?}"
    );
    // A peer from before formats were versioned (its variant index was 25):
    // the connection is closed.
    let mut frame = vec![25u8];
    frame.extend(postcard::to_stdvec(&vote()).unwrap());
    framed.send(bytes::Bytes::from(frame)).await.unwrap();
    assert!(
        framed.next().await.is_none(),
        "an old peer's frame is not answered"
    );
    // The node's term is untouched by the refused vote.
    assert!(node.status().term < 9);
}

/// With a cluster secret, nodes replicate to each other (each proves it),
/// a client holding it is served, and one without it or with another is
/// refused before any request is read, as is a peer's vote without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_secret_keeps_out_who_does_not_hold_it() {
    use crate::peer_auth::ClusterSecret;
    let dir = tempfile::tempdir().unwrap();
    let secret = ClusterSecret::new(b"a secret of the cluster").unwrap();
    let (nodes, _servers, addresses) =
        three_nodes_with(dir.path(), Some(secret.clone()), None).await;
    let client = RemoteMetastore::new(&addresses).with_secret(Some(secret));
    let t = topic(&client, "guarded", 1).await;
    commit(&client, "g0", vec![batch(&t, 0, 0, 1)]).await;
    // Replicated: every node applies it, so the nodes authenticated each other.
    eventually(|| {
        nodes
            .iter()
            .all(|n| n.local_state(|s| s.topic("guarded").is_some()))
    })
    .await;

    let quick = |c: RemoteMetastore| {
        c.with_retry_for(std::time::Duration::from_millis(300))
            .with_attempt_timeout(std::time::Duration::from_secs(2))
    };
    let stranger = quick(RemoteMetastore::new(&addresses));
    assert!(stranger.topics().await.is_err(), "no secret: refused");
    let impostor = quick(RemoteMetastore::new(&addresses).with_secret(Some(
        ClusterSecret::new(b"another secret, same length").unwrap(),
    )));
    let refused = impostor.topics().await.unwrap_err().to_string();
    assert!(refused.contains("cluster secret"), "{refused}");
    let term = nodes[0].status().term;
    // A vote from a peer without the secret is not read.
    let address = addresses.split(',').next().unwrap();
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let mut framed = tokio_util::codec::Framed::new(stream, crate::rpc::codec());
    let vote = crate::raft::network::PeerRequest::Vote(openraft::raft::VoteRequest::new(
        openraft::Vote::new(term + 100, 9),
        None,
    ));
    let frame = crate::rpc::peer_frame(&vote).unwrap();
    use futures::{SinkExt, StreamExt};
    framed.send(frame).await.unwrap();
    assert!(framed.next().await.is_none(), "closed without an answer");
    assert!(nodes.iter().all(|n| n.status().term < term + 100));
}
