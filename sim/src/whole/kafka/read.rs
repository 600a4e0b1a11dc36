//! Reading along the run: fetches through any agent, each answer held to
//! what was acknowledged before it began.

use floe_protocol::kafka_protocol::messages::*;
use floe_protocol::kafka_protocol::protocol::StrBytes;
use tokio::time::{Duration, Instant};

use super::client::Client;
use super::{Books, TOPIC};
use crate::whole::Shared;

/// A Fetch of `partition` from `offset`, answered at once.
pub(super) fn fetch_request(partition: i32, offset: i64) -> FetchRequest {
    use fetch_request::*;
    FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(partition)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(256 << 10),
                ]),
        ])
}

/// Records as read: (offset, value).
pub(super) type Log = Vec<(i64, String)>;

/// What a fetch answered: its high watermark and records, or its
/// partition's error code.
pub(super) type Fetched = Result<(i64, Log), i16>;

/// The partition's answer of a fetch. An answer without the partition, or
/// with records that do not decode, is an anomaly (and counts as the
/// unknown server error).
pub(super) fn fetched(shared: &Shared, response: &FetchResponse) -> Fetched {
    let unknown = floe_protocol::ResponseError::UnknownServerError.code();
    let Some(data) = response
        .responses
        .first()
        .and_then(|t| t.partitions.first())
    else {
        shared.with(|w| w.anomaly("a fetch answered without its partition".into()));
        return Err(unknown);
    };
    if data.error_code != 0 {
        return Err(data.error_code);
    }
    let bytes = data.records.clone().unwrap_or_default();
    let decoded = floe_protocol::batch::RecordBatch::parse_all_stored(&bytes)
        .map_err(|e| e.to_string())
        .and_then(|batches| {
            floe_protocol::records::decode_all(&batches).map_err(|e| e.to_string())
        });
    let records = match decoded {
        Ok(records) => records,
        Err(e) => {
            shared.with(|w| w.anomaly(format!("a fetch's records do not decode: {e}")));
            return Err(unknown);
        }
    };
    let read = records
        .into_iter()
        .map(|r| {
            let value = r.value.map(|v| String::from_utf8_lossy(&v).into_owned());
            (r.offset, value.unwrap_or_default())
        })
        .collect();
    Ok((data.high_watermark, read))
}

/// One fetch through a random agent (`None`: unanswered).
async fn fetch(client: &Client, partition: i32, offset: i64) -> Option<Fetched> {
    let request = fetch_request(partition, offset);
    let response: FetchResponse = client.call(ApiKey::Fetch, 12, &request).await.ok()?;
    Some(fetched(&client.shared, &response))
}

/// Notes what a fetch read; an offset read twice must hold the same record.
pub(super) fn note_read(shared: &Shared, books: &Books, partition: i32, read: &[(i64, String)]) {
    let mut books = books.lock().expect("books");
    for (offset, value) in read {
        match books.read.get(&(partition, *offset)) {
            Some(before) if before != value => shared.with(|w| {
                w.anomaly(format!(
                    "partition {partition} offset {offset} read as {before} and later as {value}"
                ))
            }),
            Some(_) => {}
            None => {
                books.read.insert((partition, *offset), value.clone());
            }
        }
    }
}

/// A reader along the run: fetches from anywhere below the acknowledged
/// end through any agent, and holds each answer's high watermark to every
/// acknowledgement that came before the fetch began.
pub(super) async fn read_along(client: Client, books: Books, partitions: i32, end: Instant) {
    while Instant::now() < end {
        let (partition, pause, pick) = client.shared.with(|w| {
            (
                w.rng_below(partitions as u64) as i32,
                Duration::from_millis(w.rng_below(300)),
                w.rng_below(1 << 20) as i64,
            )
        });
        let floor = books
            .lock()
            .expect("books")
            .acked_end
            .get(&partition)
            .copied()
            .unwrap_or(0);
        let from = if floor == 0 { 0 } else { pick % floor };
        let answer = fetch(&client, partition, from).await;
        // Nothing is trimmed in this stage: an offset below one acknowledged
        // is in range, whoever answers.
        let out_of_range = floe_protocol::ResponseError::OffsetOutOfRange.code();
        if let Some(Err(code)) = answer
            && code == out_of_range
        {
            client.shared.with(|w| {
                w.anomaly(format!(
                    "a fetch of partition {partition} from {from} was out of range, \
                     below {floor} acknowledged before it began"
                ))
            });
        }
        if let Some(Ok((high_watermark, read))) = answer {
            if high_watermark < floor {
                client.shared.with(|w| {
                    w.anomaly(format!(
                        "a fetch of partition {partition} from {from} reported high watermark \
                         {high_watermark}, below {floor} acknowledged before it began"
                    ))
                });
            }
            note_read(&client.shared, &books, partition, &read);
            books.lock().expect("books").fetches_checked += 1;
        }
        tokio::time::sleep(pause).await;
    }
}

