//! What a produce is checked against, as Kafka checks it.

use floe_protocol::kafka_protocol::messages::*;

use crate::support::*;

fn keyless(count: usize) -> bytes::Bytes {
    floe_protocol::testing::keyless(&vec![b"v".to_vec(); count])
}

fn alter_topic(topic: &str, key: &str, value: &str) -> IncrementalAlterConfigsRequest {
    use incremental_alter_configs_request::*;
    IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(str_bytes(topic))
            .with_configs(vec![
                AlterableConfig::default()
                    .with_name(str_bytes(key))
                    .with_config_operation(0)
                    .with_value(Some(str_bytes(value))),
            ]),
    ])
}

/// A produce sent after a config change on the same connection is checked
/// against the new configs (the topic's configs were cached for 10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_produce_after_a_config_change_is_checked_against_it() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "changing", 1).await;
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;
    let sent: ProduceResponse = conn
        .call(ApiKey::Produce, 9, &produce("changing", 0, keyless(1)))
        .await
        .unwrap();
    assert_eq!(
        produced(&sent).error_code,
        0,
        "keyless is fine on a delete topic"
    );
    let altered: IncrementalAlterConfigsResponse = conn
        .call(
            ApiKey::IncrementalAlterConfigs,
            1,
            &alter_topic("changing", "cleanup.policy", "compact"),
        )
        .await
        .unwrap();
    assert_eq!(altered.responses[0].error_code, 0);
    let sent: ProduceResponse = conn
        .call(ApiKey::Produce, 9, &produce("changing", 0, keyless(1)))
        .await
        .unwrap();
    assert_eq!(
        produced(&sent).error_code,
        floe_protocol::ResponseError::InvalidRecord.code(),
        "checked against the configs before the change"
    );
}

/// Records refused one by one are listed (KIP-467), but at most 1,024 for
/// a whole request, however many partitions it names: what a request makes
/// the agent hold is bounded by the request, not by partitions times
/// records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_lists_at_most_so_many_record_errors() {
    use produce_request::*;
    let meta = metastore().await;
    let store = memory_store();
    meta.create_topic(floe_metastore::NewTopic {
        name: "strict".into(),
        partitions: 1,
        configs: [("cleanup.policy".to_string(), "compact".to_string())].into(),
    })
    .await
    .unwrap();
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;
    let partition = PartitionProduceData::default()
        .with_index(0)
        .with_records(Some(keyless(600)));
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(str_bytes("strict")))
                .with_partition_data(vec![partition; 3]),
        ]);
    let answer: ProduceResponse = conn.call(ApiKey::Produce, 9, &request).await.unwrap();
    let listed: Vec<usize> = answer.responses[0]
        .partition_responses
        .iter()
        .map(|p| {
            assert_eq!(
                p.error_code,
                floe_protocol::ResponseError::InvalidRecord.code()
            );
            assert!(
                p.error_message
                    .as_ref()
                    .is_some_and(|m| m.contains("600 record errors in total")),
                "{:?}",
                p.error_message
            );
            p.record_errors.len()
        })
        .collect();
    assert_eq!(listed, vec![600, 424, 0]);
    let why = &answer.responses[0].partition_responses[0].record_errors[599];
    assert_eq!(why.batch_index, 599);
    assert_eq!(
        why.batch_index_error_message.as_deref(),
        Some("Compacted topic cannot accept message without key in topic partition strict-0")
    );
    // Before v8 the answer has no place for them.
    let old: ProduceResponse = conn.call(ApiKey::Produce, 7, &request).await.unwrap();
    assert!(
        old.responses[0]
            .partition_responses
            .iter()
            .all(|p| p.record_errors.is_empty())
    );
}

/// Produce v13 names topics by id (Kafka 4.1): answered by id, and an id
/// that is no topic's is UNKNOWN_TOPIC_ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_v13_names_topics_by_id() {
    use produce_request::*;
    let meta = metastore().await;
    let store = memory_store();
    let topic = create_topic(&meta, "by-id", 1).await;
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;
    let by_id = |id: uuid::Uuid| {
        ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_topic_id(id)
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(0)
                            .with_records(Some(batch(&["x"]))),
                    ]),
            ])
    };
    let sent: ProduceResponse = conn
        .call(ApiKey::Produce, 13, &by_id(topic.id))
        .await
        .unwrap();
    assert_eq!(sent.responses[0].topic_id, topic.id);
    assert_eq!(
        (produced(&sent).error_code, produced(&sent).base_offset),
        (0, 0)
    );
    let unknown = uuid::Uuid::from_u128(7);
    let sent: ProduceResponse = conn
        .call(ApiKey::Produce, 13, &by_id(unknown))
        .await
        .unwrap();
    assert_eq!(sent.responses[0].topic_id, unknown);
    assert_eq!(
        produced(&sent).error_code,
        floe_protocol::ResponseError::UnknownTopicId.code()
    );
}

/// FindCoordinator finds group and transaction coordinators; a key type
/// floe does not serve (2: share groups) is INVALID_REQUEST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_coordinator_serves_groups_and_transactions_only() {
    let meta = metastore().await;
    let store = memory_store();
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;
    for (key_type, error) in [
        (0, 0),
        (1, 0),
        (2, floe_protocol::ResponseError::InvalidRequest.code()),
    ] {
        let request = FindCoordinatorRequest::default()
            .with_key_type(key_type)
            .with_coordinator_keys(vec![str_bytes("k")]);
        let found: FindCoordinatorResponse = conn
            .call(ApiKey::FindCoordinator, 6, &request)
            .await
            .unwrap();
        assert_eq!(
            found.coordinators[0].error_code, error,
            "key type {key_type}"
        );
        if error == 0 {
            assert_eq!(found.coordinators[0].error_message, None, "null, as Kafka");
        }
    }
}
