//! Share groups (KIP-932) through the protocol: what a member is told it
//! holds is what it holds (records that do not fit an answer are handed
//! back, their delivery not counted), share sessions keep Kafka's epochs,
//! and a connection's close releases what its session held.

use floe_metastore::dynamic_config::{ConfigEntity, ConfigOp, ConfigTarget};
use floe_protocol::client::Connection;
use floe_protocol::kafka_protocol::messages::*;

use crate::support::*;

const GROUP: &str = "queue";

async fn earliest(meta: &std::sync::Arc<dyn floe_metastore::Metastore>) {
    let ops = vec![ConfigOp::Set(
        "share.auto.offset.reset".into(),
        "earliest".into(),
    )];
    let target = ConfigTarget::Dynamic(ConfigEntity::Group(GROUP.into()));
    meta.alter_configs(target, ops, false).await.unwrap();
}

async fn join(conn: &mut Connection, member: &str, topic: &str) {
    let request = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(str_bytes(GROUP)))
        .with_member_id(str_bytes(member))
        .with_member_epoch(0)
        .with_subscribed_topic_names(Some(vec![TopicName(str_bytes(topic))]));
    let answer: ShareGroupHeartbeatResponse = conn
        .call(ApiKey::ShareGroupHeartbeat, 1, &request)
        .await
        .unwrap();
    assert_eq!(answer.error_code, 0);
    assert!(answer.member_epoch > 0);
}

fn share_fetch(
    member: &str,
    epoch: i32,
    topic: uuid::Uuid,
    max_bytes: i32,
    acks: Vec<share_fetch_request::AcknowledgementBatch>,
) -> ShareFetchRequest {
    use share_fetch_request::*;
    ShareFetchRequest::default()
        .with_group_id(Some(GroupId(str_bytes(GROUP))))
        .with_member_id(Some(str_bytes(member)))
        .with_share_session_epoch(epoch)
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_max_records(100)
        .with_batch_size(100)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic_id(topic)
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition_index(0)
                        .with_acknowledgement_batches(acks),
                ]),
        ])
}

/// (first, last, delivery count) of each acquired range of the one
/// partition answered, and how many record bytes came with them (a
/// session's later answers leave out partitions with nothing new).
fn acquired(response: &ShareFetchResponse) -> (Vec<(i64, i64, i16)>, usize) {
    assert_eq!(response.error_code, 0, "{response:?}");
    let Some(p) = response
        .responses
        .first()
        .and_then(|t| t.partitions.first())
    else {
        return (Vec::new(), 0);
    };
    assert_eq!(p.error_code, 0);
    let ranges = p
        .acquired_records
        .iter()
        .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
        .collect();
    (ranges, p.records.as_ref().expect("never null").len())
}

/// Four batches; an answer that fits one: the member holds that one only,
/// and the others go to the next member as first deliveries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_that_do_not_fit_are_handed_back_uncounted() {
    let meta = metastore().await;
    let store = memory_store();
    let topic = create_topic(&meta, "jobs", 1).await;
    earliest(&meta).await;
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;
    let value = "x".repeat(1_000);
    for _ in 0..4 {
        produce_values(&mut conn, "jobs", &[&value]).await;
    }
    join(&mut conn, "first", "jobs").await;
    let small: ShareFetchResponse = conn
        .call(
            ApiKey::ShareFetch,
            1,
            &share_fetch("first", 0, topic.id, 100, vec![]),
        )
        .await
        .unwrap();
    let (ranges, bytes) = acquired(&small);
    assert_eq!(ranges, [(0, 0, 1)], "the first batch only (KIP-74)");
    assert!(
        bytes > 1_000 && bytes < 2_000,
        "one batch sent: {bytes} bytes"
    );

    let mut other = agent.connect().await;
    join(&mut other, "second", "jobs").await;
    let rest: ShareFetchResponse = other
        .call(
            ApiKey::ShareFetch,
            1,
            &share_fetch("second", 0, topic.id, 1 << 20, vec![]),
        )
        .await
        .unwrap();
    let (ranges, _) = acquired(&rest);
    assert_eq!(
        ranges,
        [(1, 3, 1)],
        "handed back, not delivered: still a first delivery"
    );
}

/// Sessions as Kafka's: none yet, acknowledgements at epoch 0 and wrong
/// epochs are refused; a connection's close releases its session's records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_keep_kafka_s_epochs_and_end_with_their_connection() {
    let meta = metastore().await;
    let store = memory_store();
    let topic = create_topic(&meta, "work", 1).await;
    earliest(&meta).await;
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;
    produce_values(&mut conn, "work", &["a", "b", "c"]).await;
    join(&mut conn, "holder", "work").await;
    let code = |r: &ShareFetchResponse| r.error_code;
    let no_session: ShareFetchResponse = conn
        .call(
            ApiKey::ShareFetch,
            1,
            &share_fetch("holder", 1, topic.id, 1 << 20, vec![]),
        )
        .await
        .unwrap();
    assert_eq!(code(&no_session), 122, "SHARE_SESSION_NOT_FOUND");
    let ack = share_fetch_request::AcknowledgementBatch::default()
        .with_first_offset(0)
        .with_last_offset(0)
        .with_acknowledge_types(vec![1]);
    let acks_at_open: ShareFetchResponse = conn
        .call(
            ApiKey::ShareFetch,
            1,
            &share_fetch("holder", 0, topic.id, 1 << 20, vec![ack]),
        )
        .await
        .unwrap();
    assert_eq!(code(&acks_at_open), 42, "INVALID_REQUEST");
    let opened: ShareFetchResponse = conn
        .call(
            ApiKey::ShareFetch,
            1,
            &share_fetch("holder", 0, topic.id, 1 << 20, vec![]),
        )
        .await
        .unwrap();
    assert_eq!(acquired(&opened).0, [(0, 2, 1)]);
    let skipped: ShareFetchResponse = conn
        .call(
            ApiKey::ShareFetch,
            1,
            &share_fetch("holder", 2, topic.id, 1 << 20, vec![]),
        )
        .await
        .unwrap();
    assert_eq!(code(&skipped), 123, "INVALID_SHARE_SESSION_EPOCH");
    let at_zero: ShareAcknowledgeResponse = conn
        .call(
            ApiKey::ShareAcknowledge,
            1,
            &ShareAcknowledgeRequest::default()
                .with_group_id(Some(GroupId(str_bytes(GROUP))))
                .with_member_id(Some(str_bytes("holder")))
                .with_share_session_epoch(0),
        )
        .await
        .unwrap();
    assert_eq!(
        at_zero.error_code, 123,
        "ShareAcknowledge cannot open a session"
    );

    // Another member finds nothing while the holder's locks last...
    let mut other = agent.connect().await;
    join(&mut other, "taker", "work").await;
    let nothing: ShareFetchResponse = other
        .call(
            ApiKey::ShareFetch,
            1,
            &share_fetch("taker", 0, topic.id, 1 << 20, vec![]),
        )
        .await
        .unwrap();
    assert!(acquired(&nothing).0.is_empty());
    // ...and everything once the holder's connection closes.
    drop(conn);
    let mut taken = Vec::new();
    for epoch in 1..50 {
        let answer: ShareFetchResponse = other
            .call(
                ApiKey::ShareFetch,
                1,
                &share_fetch("taker", epoch, topic.id, 1 << 20, vec![]),
            )
            .await
            .unwrap();
        taken = acquired(&answer).0;
        if !taken.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(taken, [(0, 2, 2)], "released by the close, delivered again");
}

/// ListGroups filters by type as Kafka 4 does; ShareGroupDescribe shows
/// the member and its assignment; DescribeGroups (the classic API) knows
/// no share group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_group_is_listed_and_described_as_kafka_shows_it() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "listed", 2).await;
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;
    join(&mut conn, "lister", "listed").await;
    let list = |types: &[&str]| {
        ListGroupsRequest::default().with_types_filter(types.iter().map(|t| str_bytes(t)).collect())
    };
    for (types, expected) in [(&["share"][..], vec!["queue"]), (&["consumer"][..], vec![])] {
        let listed: ListGroupsResponse = conn
            .call(ApiKey::ListGroups, 5, &list(types))
            .await
            .unwrap();
        let names: Vec<String> = listed
            .groups
            .iter()
            .map(|g| g.group_id.to_string())
            .collect();
        assert_eq!(names, expected, "{types:?}");
    }
    let described: ShareGroupDescribeResponse = conn
        .call(
            ApiKey::ShareGroupDescribe,
            1,
            &ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(str_bytes(GROUP))]),
        )
        .await
        .unwrap();
    let g = &described.groups[0];
    assert_eq!((g.error_code, g.group_state.as_str()), (0, "Stable"));
    assert_eq!(g.members[0].member_id.as_str(), "lister");
    let assigned = &g.members[0].assignment.topic_partitions[0];
    assert_eq!(
        (assigned.topic_name.as_str(), assigned.partitions.as_slice()),
        ("listed", &[0, 1][..])
    );
    let classic: DescribeGroupsResponse = conn
        .call(
            ApiKey::DescribeGroups,
            5,
            &DescribeGroupsRequest::default().with_groups(vec![GroupId(str_bytes(GROUP))]),
        )
        .await
        .unwrap();
    assert_eq!(classic.groups[0].group_state.as_str(), "Dead");
}
