//! A fetch reports the current high watermark, and every acknowledged
//! record below it is readable at once, from any agent.

use floe_protocol::kafka_protocol::messages::*;

use crate::support::*;

async fn fetch_from(
    conn: &mut floe_protocol::client::Connection,
    topic: &str,
    offset: i64,
) -> (i16, i64, i64, Vec<(i64, String)>) {
    let response: FetchResponse = conn
        .call(ApiKey::Fetch, FETCH_VERSION, &fetch(topic, 0, offset))
        .await
        .unwrap();
    let data = fetched(&response);
    let read = match data.error_code {
        0 => values(data),
        _ => Vec::new(),
    };
    (
        data.error_code,
        data.high_watermark,
        data.log_start_offset,
        read,
    )
}

fn offsets(read: &[(i64, String)]) -> Vec<i64> {
    read.iter().map(|(o, _)| *o).collect()
}

/// Produce 3, fetch from 0, produce 3 more, fetch from 0 again: the second
/// fetch sees all 6 (it used to report the first answer's high watermark
/// of 3 for up to 15 s: the view learnt for offset 0 was trusted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_from_an_earlier_offset_sees_every_acknowledged_record() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "again", 1).await;
    let agent = agent(&meta, &store).await;
    let mut conn = agent.connect().await;
    produce_values(&mut conn, "again", &["a", "b", "c"]).await;
    let (error, hw, _, read) = fetch_from(&mut conn, "again", 0).await;
    assert_eq!((error, hw, offsets(&read)), (0, 3, vec![0, 1, 2]));
    produce_values(&mut conn, "again", &["d", "e", "f"]).await;
    let (error, hw, _, read) = fetch_from(&mut conn, "again", 0).await;
    assert_eq!((error, hw), (0, 6), "a stale high watermark");
    assert_eq!(offsets(&read), vec![0, 1, 2, 3, 4, 5]);
    let (_, hw, _, read) = fetch_from(&mut conn, "again", 6).await;
    assert_eq!((hw, read.len()), (6, 0));
}

/// The same across agents: what one agent acknowledged, another reports at
/// once, from an earlier offset and at the end; and a trim through one is
/// seen by the other's next fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_one_agent_acknowledged_another_reports_at_once() {
    let meta = metastore().await;
    let store = memory_store();
    create_topic(&meta, "across", 1).await;
    let writer = agent(&meta, &store).await;
    let reader = agent(&meta, &store).await;
    let mut produce_conn = writer.connect().await;
    let mut fetch_conn = reader.connect().await;
    produce_values(&mut produce_conn, "across", &["a", "b", "c"]).await;
    let (_, hw, _, read) = fetch_from(&mut fetch_conn, "across", 0).await;
    assert_eq!((hw, read.len()), (3, 3));
    let (_, hw, _, _) = fetch_from(&mut fetch_conn, "across", 3).await;
    assert_eq!(hw, 3);
    for round in 1..=5i64 {
        produce_values(&mut produce_conn, "across", &["x", "y", "z"]).await;
        let end = 3 + 3 * round;
        let (_, hw, _, read) = fetch_from(&mut fetch_conn, "across", 0).await;
        assert_eq!(hw, end, "round {round}: from 0");
        assert_eq!(read.len() as i64, end);
        let (_, hw, _, _) = fetch_from(&mut fetch_conn, "across", end).await;
        assert_eq!(hw, end, "round {round}: at the end");
    }
    // Records below 7 deleted through the writer: the reader's next fetch
    // from 0 is out of range, and from 7 reports the new log start.
    let deleted: DeleteRecordsResponse = produce_conn
        .call(ApiKey::DeleteRecords, 2, &delete_records("across", 0, 7))
        .await
        .unwrap();
    assert_eq!(deleted.topics[0].partitions[0].error_code, 0);
    let (error, _, _, _) = fetch_from(&mut fetch_conn, "across", 0).await;
    assert_eq!(
        error,
        floe_protocol::ResponseError::OffsetOutOfRange.code(),
        "served below the log start"
    );
    let (error, hw, log_start, read) = fetch_from(&mut fetch_conn, "across", 7).await;
    assert_eq!((error, hw, log_start), (0, 18, 7));
    // Whole batches: the one holding 7 begins at 6 (clients skip to 7).
    let read = offsets(&read);
    assert_eq!((read.first(), read.last()), (Some(&6), Some(&17)));
}
