//! Behaviour every `Metastore` implementation must show, run against each.

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

fn batch(t: &TopicInfo, partition: i32, position: u64, records: i32) -> CommitBatch {
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
) -> Vec<Result<i64, MetaError>> {
    m.commit(Commit {
        object_key: key.into(),
        object_size: 100,
        batches,
        appended_ms: 0,
    })
    .await
    .unwrap()
}

pub async fn suite(m: &dyn Metastore) {
    let t = topic(m, "events", 3).await;
    assert_eq!(m.topics().await.unwrap(), vec![t.clone()]);
    assert_eq!(m.topic_by_id(t.id).await.unwrap(), Some(t.clone()));
    assert_eq!(m.topic_by_id(uuid::Uuid::nil()).await.unwrap(), None);
    let dup = m
        .create_topic(NewTopic {
            name: "events".into(),
            partitions: 1,
            configs: Default::default(),
        })
        .await;
    assert_eq!(dup, Err(MetaError::TopicExists("events".into())));

    let r = commit(m, "a", vec![batch(&t, 0, 0, 5), batch(&t, 2, 10, 1)]).await;
    assert_eq!(r, vec![Ok(0), Ok(0)]);
    let r = commit(m, "b", vec![batch(&t, 0, 0, 2), batch(&t, 3, 10, 1)]).await;
    assert_eq!(r, vec![Ok(5), Err(MetaError::UnknownTopicOrPartition)]);

    let offsets = m.offsets(t.id, 0).await.unwrap();
    assert_eq!((offsets.log_start_offset, offsets.high_watermark), (0, 7));
    let plan = m.read_plan(t.id, 0, 6, 1 << 20).await.unwrap();
    assert_eq!(plan.extents.len(), 1);
    assert_eq!(plan.extents[0].object_key, "b");
    assert_eq!(
        m.list_offsets(t.id, 0, OffsetQuery::Latest).await.unwrap(),
        OffsetAnswer::Offset(7)
    );

    assert_eq!(m.trim(t.id, 2, 1).await, Ok(1));
    m.create_partitions("events", 4).await.unwrap();
    m.alter_topic_configs(
        "events",
        [("retention.ms".to_string(), "9".to_string())].into(),
        vec![],
    )
    .await
    .unwrap();
    let events = m.topic("events").await.unwrap().unwrap();
    assert_eq!(
        (events.partitions, events.configs["retention.ms"].as_str()),
        (4, "9")
    );
    let t = events;
    assert_eq!(m.offsets(t.id, 2).await.unwrap().log_start_offset, 1);

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
    assert_eq!(m.init_producer(Some(p)).await.unwrap().epoch, p.epoch + 1);

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
    assert_eq!(m.agents().await.unwrap()[0].last_seen_ms, 7);

    assert!(m.groups().await.unwrap().is_empty());
    assert_eq!(
        m.unknown_objects(vec!["a".into(), "stray".into()])
            .await
            .unwrap(),
        vec!["stray".to_string()]
    );
    m.delete_topic("events").await.unwrap();
    assert!(m.topics().await.unwrap().is_empty());
    let mut garbage = m.garbage().await.unwrap();
    garbage.sort();
    assert_eq!(
        garbage,
        vec!["a".to_string(), "b".to_string(), "c".to_string()]
    );
}

#[tokio::test]
async fn in_memory_conforms() {
    suite(&LocalMetastore::in_memory()).await;
}

#[tokio::test]
async fn durable_conforms_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.redb");
    // A tiny snapshot interval so both the snapshot and the log replay are exercised.
    let m = LocalMetastore::open_with(&path, 3).unwrap();
    suite(&m).await;
    let t = topic(&m, "kept", 1).await;
    for n in 0..7 {
        commit(&m, &format!("k{n}"), vec![batch(&t, 0, 0, 2)]).await;
    }
    let before = m.read_plan(t.id, 0, 0, u64::MAX).await.unwrap();
    assert!(m.log_len() < 3, "snapshots should bound the log");
    drop(m);

    let reopened = LocalMetastore::open_with(&path, 3).unwrap();
    assert_eq!(reopened.topics().await.unwrap(), vec![t.clone()]);
    assert_eq!(
        reopened.read_plan(t.id, 0, 0, u64::MAX).await.unwrap(),
        before
    );
    let r = commit(&reopened, "after", vec![batch(&t, 0, 0, 1)]).await;
    assert_eq!(r, vec![Ok(14)]);
}

#[tokio::test]
async fn remote_conforms() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let served: std::sync::Arc<dyn Metastore> = std::sync::Arc::new(LocalMetastore::in_memory());
    tokio::spawn(crate::rpc::serve(listener, served));
    suite(&RemoteMetastore::new(address)).await;
}

#[tokio::test]
async fn remote_reports_an_unreachable_metastore() {
    // Nothing listens on port 9 of loopback here.
    let m =
        RemoteMetastore::new("127.0.0.1:9").with_retry_for(std::time::Duration::from_millis(200));
    let err = m.topics().await.unwrap_err();
    assert!(matches!(err, MetaError::Unavailable(_)), "{err:?}");
}
