//! A connection's requests take effect in the order they were sent, as a
//! Kafka broker's do (it reads the next request only once the last one is
//! answered), however many a client pipelines.

use floe_protocol::kafka_protocol::messages::*;

use crate::support::*;

/// What an admin client does (confluent-kafka's AdminClient sends them on
/// one connection): DeleteRecords, then ListOffsets(earliest) without
/// waiting. The list must see the deletion the connection asked first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_sent_after_a_deletion_sees_it() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "ordered", 1).await;
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;
    for round in 0..10i64 {
        let sent = conn
            .call::<_, ProduceResponse>(
                ApiKey::Produce,
                9,
                &produce("ordered", 0, batch(&["a", "b"])),
            )
            .await
            .unwrap();
        assert_eq!(produced(&sent).error_code, 0);
        let before = 2 * round + 1;
        let deleting = conn
            .send(
                ApiKey::DeleteRecords,
                2,
                &delete_records("ordered", 0, before),
            )
            .await
            .unwrap();
        let listing = conn
            .send(ApiKey::ListOffsets, 7, &list_offsets("ordered", 0, -2))
            .await
            .unwrap();
        let deleted: DeleteRecordsResponse = conn
            .receive(ApiKey::DeleteRecords, 2, deleting)
            .await
            .unwrap();
        let low = &deleted.topics[0].partitions[0];
        assert_eq!((low.error_code, low.low_watermark), (0, before));
        let listed: ListOffsetsResponse =
            conn.receive(ApiKey::ListOffsets, 7, listing).await.unwrap();
        let earliest = &listed.topics[0].partitions[0];
        assert_eq!(
            (earliest.error_code, earliest.offset),
            (0, before),
            "round {round}: ListOffsets did not see the DeleteRecords sent before it"
        );
    }
}

/// A fetch waiting at the end of a partition, then a produce to it on the
/// same connection: the produce takes effect after the fetch is answered,
/// so the fetch cannot return the record of a request sent after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_never_returns_what_a_later_request_produced() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "later", 1).await;
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;
    let waiting = conn
        .send(
            ApiKey::Fetch,
            FETCH_VERSION,
            &fetch("later", 0, 0).with_max_wait_ms(300),
        )
        .await
        .unwrap();
    let producing = conn
        .send(ApiKey::Produce, 9, &produce("later", 0, batch(&["x"])))
        .await
        .unwrap();
    let fetched_first: FetchResponse = conn
        .receive(ApiKey::Fetch, FETCH_VERSION, waiting)
        .await
        .unwrap();
    let data = fetched(&fetched_first);
    assert_eq!(data.high_watermark, 0, "the fetch saw a later produce");
    assert!(values(data).is_empty());
    let sent: ProduceResponse = conn.receive(ApiKey::Produce, 9, producing).await.unwrap();
    assert_eq!(
        (produced(&sent).error_code, produced(&sent).base_offset),
        (0, 0)
    );
}

/// Produces pipelined behind each other still run together (a producer
/// keeps several in flight behind one flush), and take offsets in the order
/// they were sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_produces_share_a_flush_and_keep_their_order() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "pipelined", 1).await;
    let agent = agent_with(&meta, &store, |c| {
        c.flush_interval = std::time::Duration::from_millis(200)
    })
    .await;
    let mut conn = agent.connect().await;
    let mut ids = Vec::new();
    for n in 0..8 {
        let value = format!("v{n}");
        let id = conn
            .send(
                ApiKey::Produce,
                9,
                &produce("pipelined", 0, batch(&[value.as_str()])),
            )
            .await
            .unwrap();
        ids.push(id);
    }
    for (n, id) in ids.into_iter().enumerate() {
        let sent: ProduceResponse = conn.receive(ApiKey::Produce, 9, id).await.unwrap();
        assert_eq!(produced(&sent).base_offset, n as i64);
    }
    // One ingest file or two, not eight: they waited for a flush together.
    let files = ingest_files(&store).await;
    assert!(files <= 2, "{files} ingest files for 8 pipelined produces");
}
