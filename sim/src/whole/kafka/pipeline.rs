//! Pipelining clients: one connection at a time, up to five requests in
//! flight on it (librdkafka's and Java's `max.in.flight` default), answered
//! in the order sent. Each owns one partition of its topic and produces to
//! it (without idempotence: nothing is retried; now and then a hostile
//! batch), fetches it, lists its
//! earliest and latest offsets and deletes its oldest records, in any mix.
//!
//! Checked as each answer arrives, against the answers of every request
//! sent before it (all in, since answers come in order): a request sees the
//! effects of all requests sent before it on its connection, and none of
//! those sent after. A listing or a fetch never reports an end below an
//! acknowledged produce sent before it, nor a start below an answered
//! deletion; a fetch never returns a record a later request produced, nor
//! one an earlier request deleted; produces take offsets in the order sent;
//! a hostile batch (a record count its bytes cannot hold, in any codec, or
//! a compression bomb) is refused.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use floe_protocol::ResponseError;
use floe_protocol::client::Connection;
use floe_protocol::kafka_protocol::messages::*;
use floe_protocol::testing::requests;
use tokio::time::{Duration, Instant};

use super::REQUEST_TIMEOUT;
use super::client::{SIM_USER, open};
use super::network::SimNetwork;
use super::produce::{any_codec, encode};
use super::read::Answer;
use crate::whole::Shared;

pub(super) const PIPE_TOPIC: &str = "sim-pipe";
/// Requests in flight on a connection, at most.
const IN_FLIGHT: usize = 5;

/// A request sent, as the checker needs it.
#[derive(Debug)]
enum Sent {
    Produce,
    /// A batch whose header claims far more records than its bytes hold.
    Hostile,
    Fetch {
        from: i64,
    },
    Latest,
    Earliest,
    Delete,
}

/// What the answers so far established about the partition.
#[derive(Default)]
struct Known {
    /// One past the last offset of every produce acknowledged.
    acked_end: i64,
    /// The base offset of the last produce acknowledged.
    last_base: Option<i64>,
    /// The log start every answered deletion left, at least.
    deleted_to: i64,
    /// Every deletion sent (answered or not): its request number and offset.
    deletes_sent: Vec<(u64, i64)>,
    /// Which request produced each value.
    producer_of: BTreeMap<String, u64>,
}

/// One pipelining client, on partition `me` of [`PIPE_TOPIC`], until `end`.
pub(super) async fn pipeline(
    shared: Shared,
    net: Arc<SimNetwork>,
    me: i32,
    agents: usize,
    end: Instant,
) {
    let mut known = Known::default();
    let mut number = 0u64;
    while Instant::now() < end {
        let agent = shared.with(|w| w.rng_below(agents as u64) as usize);
        let Some(mut conn) = open(&net, agent, SIM_USER, "sim-pipe").await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        // (number, what, correlation id), in the order sent.
        let mut in_flight: VecDeque<(u64, Sent, i32)> = VecDeque::new();
        let lasts = shared.with(|w| Duration::from_secs(5 + w.rng_below(30)));
        let until = (Instant::now() + lasts).min(end);
        loop {
            while in_flight.len() < IN_FLIGHT && Instant::now() < until {
                number += 1;
                let Ok(sent) = send(&shared, &mut conn, &mut known, me, number).await else {
                    break;
                };
                in_flight.push_back((number, sent.0, sent.1));
                if shared.with(|w| w.chance(0.3)) {
                    break;
                }
            }
            let Some((n, sent, id)) = in_flight.pop_front() else {
                break;
            };
            if !receive(&shared, &mut conn, &mut known, (me, n), (sent, id)).await {
                // The connection broke: what was in flight is unanswered.
                break;
            }
        }
        shared.with(|w| w.summary.pipelined_connections += 1);
    }
}

/// Sends the next request; what it was and its correlation id.
async fn send(
    shared: &Shared,
    conn: &mut Connection,
    known: &mut Known,
    me: i32,
    number: u64,
) -> Result<(Sent, i32), ()> {
    let (pick, spot, codec) =
        shared.with(|w| (w.rng_below(100), w.rng_below(1 << 20), any_codec(w)));
    let span = (known.acked_end - known.deleted_to).max(0) as u64;
    let inside = known.deleted_to + (spot % (span + 1)) as i64;
    match pick {
        0..40 => {
            // Now and then a hostile batch, else one value of its own.
            let (sent, records) = if pick == 0 && shared.with(|w| w.chance(0.3)) {
                (Sent::Hostile, bomb())
            } else if pick < 3 {
                let count = shared.with(|w| 2 + w.rng_below(i32::MAX as u64 - 2)) as i32;
                (
                    Sent::Hostile,
                    floe_protocol::testing::lying_batch(count, codec),
                )
            } else {
                let value = format!("q{me}-{number}");
                known.producer_of.insert(value.clone(), number);
                let now_ms = shared.with(|w| w.now_ms());
                let records = encode(&[value], (-1, -1), -1, now_ms, (codec, false));
                (Sent::Produce, records)
            };
            let request = requests::produce(PIPE_TOPIC, me, records);
            let id = conn
                .send(ApiKey::Produce, 9, &request)
                .await
                .map_err(drop)?;
            Ok((sent, id))
        }
        40..65 => {
            let request = requests::fetch(PIPE_TOPIC, me, inside).with_max_bytes(64 << 10);
            let id = conn.send(ApiKey::Fetch, 12, &request).await.map_err(drop)?;
            Ok((Sent::Fetch { from: inside }, id))
        }
        65..92 => {
            let (sent, timestamp) = if pick < 80 {
                (Sent::Latest, -1)
            } else {
                (Sent::Earliest, -2)
            };
            let request = requests::list_offsets(PIPE_TOPIC, me, timestamp);
            let id = conn
                .send(ApiKey::ListOffsets, 7, &request)
                .await
                .map_err(drop)?;
            Ok((sent, id))
        }
        _ => {
            known.deletes_sent.push((number, inside));
            let request = requests::delete_records(PIPE_TOPIC, me, inside);
            let id = conn
                .send(ApiKey::DeleteRecords, 2, &request)
                .await
                .map_err(drop)?;
            Ok((Sent::Delete, id))
        }
    }
}

/// Receives request `n`'s answer and holds it to what `known` says of the
/// requests before it; false when the connection broke.
async fn receive(
    shared: &Shared,
    conn: &mut Connection,
    known: &mut Known,
    (me, n): (i32, u64),
    (sent, id): (Sent, i32),
) -> bool {
    let anomaly = |what: String| {
        shared.with(|w| w.anomaly(format!("{PIPE_TOPIC}-{me} request {n} ({sent:?}): {what}")))
    };
    macro_rules! answer {
        ($api:expr, $version:expr, $t:ty) => {{
            let got = tokio::time::timeout(REQUEST_TIMEOUT, conn.receive::<$t>($api, $version, id));
            match got.await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) if e.to_string().contains("arrived for request") => {
                    anomaly(format!("answered out of order: {e}"));
                    return false;
                }
                _ => return false,
            }
        }};
    }
    match sent {
        Sent::Produce => {
            let r = answer!(ApiKey::Produce, 9, ProduceResponse);
            let Some(p) = r
                .responses
                .first()
                .and_then(|t| t.partition_responses.first())
            else {
                return true;
            };
            if p.error_code != 0 {
                return true;
            }
            if known.last_base.is_some_and(|last| p.base_offset <= last) {
                anomaly(format!(
                    "produced at {}, not after an earlier produce at {:?}",
                    p.base_offset, known.last_base
                ));
            }
            known.last_base = Some(p.base_offset);
            known.acked_end = known.acked_end.max(p.base_offset + 1);
        }
        Sent::Hostile => {
            let r = answer!(ApiKey::Produce, 9, ProduceResponse);
            // What the batch cost first: refused late is still too dear.
            super::check_memory(shared);
            let code = r
                .responses
                .first()
                .and_then(|t| t.partition_responses.first());
            if code.is_some_and(|p| p.error_code == 0) {
                anomaly(
                    "a hostile batch (a lying record count, or a bomb) was acknowledged".into(),
                );
            }
        }
        Sent::Latest | Sent::Earliest => {
            let r = answer!(ApiKey::ListOffsets, 7, ListOffsetsResponse);
            let Some(p) = r.topics.first().and_then(|t| t.partitions.first()) else {
                return true;
            };
            if p.error_code != 0 {
                return true;
            }
            match sent {
                Sent::Latest if p.offset < known.acked_end => anomaly(format!(
                    "latest offset {}, below {} produced before it",
                    p.offset, known.acked_end
                )),
                Sent::Earliest if p.offset < known.deleted_to => anomaly(format!(
                    "earliest offset {}, below {} deleted before it",
                    p.offset, known.deleted_to
                )),
                _ => {}
            }
        }
        Sent::Fetch { from } => {
            let r = answer!(ApiKey::Fetch, 12, FetchResponse);
            check_fetch(shared, known, n, from, &r, &anomaly);
        }
        Sent::Delete => {
            let r = answer!(ApiKey::DeleteRecords, 2, DeleteRecordsResponse);
            let Some(p) = r.topics.first().and_then(|t| t.partitions.first()) else {
                return true;
            };
            if p.error_code == 0 {
                known.deleted_to = known.deleted_to.max(p.low_watermark);
            }
        }
    }
    true
}

/// A fetch from `from`, request `n`: its ends and records against the
/// requests before it.
fn check_fetch(
    shared: &Shared,
    known: &Known,
    n: u64,
    from: i64,
    response: &FetchResponse,
    anomaly: &dyn Fn(String),
) {
    let answer = match Answer::of(shared, response) {
        Ok(answer) => answer,
        // Below a start some deletion may have moved (answered or not).
        Err(code) if code == ResponseError::OffsetOutOfRange.code() => {
            // Only a deletion sent before this fetch may have moved the start.
            let asked = known.deletes_sent.iter().filter(|(by, _)| *by < n);
            let asked = asked.map(|(_, before)| *before).max().unwrap_or(0);
            if from >= asked && from <= known.acked_end {
                anomaly(format!("out of range from {from}"));
            }
            return;
        }
        Err(_) => return,
    };
    if answer.high_watermark < known.acked_end {
        anomaly(format!(
            "high watermark {}, below {} produced before it",
            answer.high_watermark, known.acked_end
        ));
    }
    for (offset, value) in answer.kept(false) {
        if offset < known.deleted_to {
            anomaly(format!("gave {value} at {offset}, deleted before it"));
        }
        match known.producer_of.get(&value) {
            Some(by) if *by > n => anomaly(format!(
                "gave {value} at {offset}, produced by request {by} after it"
            )),
            Some(_) => {}
            None => anomaly(format!("gave {value} at {offset}, never produced")),
        }
    }
}

/// A compression bomb: kilobytes of zstd holding one record of 256 MiB of
/// zeros, four times what an agent decompresses of a batch. Made once.
fn bomb() -> bytes::Bytes {
    static BOMB: std::sync::OnceLock<bytes::Bytes> = std::sync::OnceLock::new();
    BOMB.get_or_init(|| floe_protocol::testing::zstd_bomb(256 << 20))
        .clone()
}
