//! Reading along the run: fetches through any agent, each answer held to
//! what was acknowledged before it began.

use floe_protocol::kafka_protocol::messages::*;
use floe_protocol::kafka_protocol::records::Record;
use tokio::time::{Duration, Instant};

use super::client::Client;
use super::{Books, TOPIC};
use crate::whole::Shared;

/// A Fetch of `topic`'s `partition` from `offset`, answered at once, at
/// read_committed when `committed`.
pub(super) fn fetch_of(topic: &str, partition: i32, offset: i64, committed: bool) -> FetchRequest {
    floe_protocol::testing::requests::fetch(topic, partition, offset)
        .with_isolation_level(committed as i8)
        .with_max_bytes(256 << 10)
}

/// Records as read: (offset, value).
pub(super) type Log = Vec<(i64, String)>;

/// What a fetch answered: its high watermark and records, or its
/// partition's error code.
pub(super) type Fetched = Result<(i64, Log), i16>;

/// A partition's answer to a fetch, decoded.
pub(super) struct Answer {
    pub(super) high_watermark: i64,
    pub(super) last_stable: i64,
    /// Every record answered, control records included.
    pub(super) records: Vec<Record>,
    /// (first offset, producer id) of each aborted transaction listed.
    pub(super) aborted: Vec<(i64, i64)>,
}

impl Answer {
    /// The partition's answer, or its error code.
    pub(super) fn of(shared: &Shared, response: &FetchResponse) -> Result<Answer, i16> {
        let data = answered_partition(shared, response)?;
        let aborted = data.aborted_transactions.iter().flatten();
        Ok(Answer {
            high_watermark: data.high_watermark,
            last_stable: data.last_stable_offset,
            records: decoded_records(shared, data)?,
            aborted: aborted.map(|a| (a.first_offset, a.producer_id.0)).collect(),
        })
    }

    /// Where the next fetch starts: past the last record answered.
    pub(super) fn next_offset(&self) -> Option<i64> {
        self.records.last().map(|r| r.offset + 1)
    }

    /// What a consumer keeps, as Kafka's consumer does: no control records
    /// and, at read_committed, none of a transaction the answer lists as
    /// aborted, from its first offset to its abort marker.
    pub(super) fn kept(&self, committed: bool) -> Log {
        let mut listed = self.aborted.clone();
        listed.sort();
        let mut listed = listed.into_iter().peekable();
        let mut aborting = std::collections::BTreeSet::new();
        let mut kept = Vec::new();
        for r in &self.records {
            while let Some((_, producer)) = listed.next_if(|(first, _)| *first <= r.offset) {
                aborting.insert(producer);
            }
            if r.control {
                if is_abort_marker(r) {
                    aborting.remove(&r.producer_id);
                }
                continue;
            }
            if committed && r.transactional && aborting.contains(&r.producer_id) {
                continue;
            }
            let value = r.value.as_ref().map(|v| String::from_utf8_lossy(v));
            kept.push((r.offset, value.unwrap_or_default().into_owned()));
        }
        kept
    }
}

/// A control record's key: version (int16), then type (int16: 0 abort).
fn is_abort_marker(record: &Record) -> bool {
    record
        .key
        .as_ref()
        .is_some_and(|k| k.get(2..4) == Some(&[0, 0]))
}

/// The partition's answer of a fetch (records kept as read_uncommitted).
pub(super) fn fetched(shared: &Shared, response: &FetchResponse) -> Fetched {
    Answer::of(shared, response).map(|a| (a.high_watermark, a.kept(false)))
}

/// The one partition a fetch asked for, or its error code.
pub(super) fn answered_partition<'a>(
    shared: &Shared,
    response: &'a FetchResponse,
) -> Result<&'a fetch_response::PartitionData, i16> {
    let Some(data) = response
        .responses
        .first()
        .and_then(|t| t.partitions.first())
    else {
        shared.with(|w| w.anomaly("a fetch answered without its partition".into()));
        return Err(floe_protocol::ResponseError::UnknownServerError.code());
    };
    match data.error_code {
        0 => Ok(data),
        code => Err(code),
    }
}

/// A partition's records as answered; records that do not decode are an
/// anomaly (and count as the unknown server error).
pub(super) fn decoded_records(
    shared: &Shared,
    data: &fetch_response::PartitionData,
) -> Result<Vec<Record>, i16> {
    let bytes = data.records.clone().unwrap_or_default();
    floe_protocol::batch::RecordBatch::parse_all_stored(&bytes)
        .map_err(|e| e.to_string())
        .and_then(|batches| floe_protocol::records::decode_all(&batches).map_err(|e| e.to_string()))
        .map_err(|e| {
            shared.with(|w| w.anomaly(format!("a fetch's records do not decode: {e}")));
            floe_protocol::ResponseError::UnknownServerError.code()
        })
}

/// One fetch through a random agent (`None`: unanswered).
async fn fetch(client: &Client, partition: i32, offset: i64) -> Option<Fetched> {
    let request = fetch_of(TOPIC, partition, offset, false);
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

/// What a reader along the run reads next.
pub(super) struct ReadPick {
    pub(super) partition: i32,
    /// Anywhere below what was acknowledged in the partition.
    pub(super) from: i64,
    /// How long it waits after.
    pub(super) pause: Duration,
}

impl ReadPick {
    /// A partition and an offset below its acknowledged end (`ends`).
    pub(super) fn draw(
        shared: &Shared,
        partitions: i32,
        ends: &std::collections::BTreeMap<i32, i64>,
    ) -> ReadPick {
        let (partition, pause, pick) = shared.with(|w| {
            (
                w.rng_below(partitions as u64) as i32,
                Duration::from_millis(w.rng_below(300)),
                w.rng_below(1 << 20) as i64,
            )
        });
        let end = ends.get(&partition).copied().unwrap_or(0);
        let from = if end == 0 { 0 } else { pick % end };
        ReadPick {
            partition,
            from,
            pause,
        }
    }
}

/// A reader along the run: fetches from anywhere below the acknowledged
/// end through any agent, and holds each answer's high watermark to every
/// acknowledgement that came before the fetch began.
pub(super) async fn read_along(client: Client, books: Books, partitions: i32, end: Instant) {
    while Instant::now() < end {
        let (
            ReadPick {
                partition,
                pause,
                from,
            },
            floor,
        ) = {
            let ends = &books.lock().expect("books").acked_end;
            let pick = ReadPick::draw(&client.shared, partitions, ends);
            let floor = ends.get(&pick.partition).copied().unwrap_or(0);
            (pick, floor)
        };
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
