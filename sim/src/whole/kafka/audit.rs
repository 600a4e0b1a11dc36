//! The audit at the end of a run: every partition read whole through each
//! agent, and the log held to what producers were told.

use std::collections::BTreeMap;

use floe_protocol::client::Connection;
use floe_protocol::kafka_protocol::messages::*;
use tokio::time::Duration;

use super::client::{SIM_USER, open};
use super::network::SimNetwork;
use super::read::{Answer, Log, fetch_of, note_read};
use super::{Books, KafkaSettings, REQUEST_TIMEOUT, TOPIC};
use crate::whole::Shared;

/// Reads every partition whole through each agent, and checks the log:
/// every agent serves the same dense log up to the same high watermark, at
/// least every acknowledged offset; then the records themselves.
pub(super) async fn audit(
    shared: &Shared,
    net: &SimNetwork,
    books: &Books,
    settings: KafkaSettings,
) {
    for partition in 0..settings.partitions {
        let acked_end = books
            .lock()
            .expect("books")
            .acked_end
            .get(&partition)
            .copied()
            .unwrap_or(0);
        // The first agent's answer: who, its high watermark, its log.
        let mut first: Option<(usize, i64, Log)> = None;
        for agent in 0..settings.agents {
            let Whole {
                high_watermark,
                log,
            } = read_whole(shared, net, agent, (TOPIC, partition), false).await;
            let dense = log
                .iter()
                .enumerate()
                .all(|(i, (offset, _))| *offset == i as i64);
            if !dense || log.len() as i64 != high_watermark || high_watermark < acked_end {
                shared.with(|w| {
                    w.anomaly(format!(
                        "agent {agent} serves partition {partition} as {} records up to high \
                         watermark {high_watermark} (dense: {dense}), {acked_end} acknowledged",
                        log.len()
                    ))
                });
            }
            note_read(shared, books, partition, &log);
            match &first {
                None => first = Some((agent, high_watermark, log)),
                Some((other, hw, seen)) if *hw != high_watermark || *seen != log => {
                    shared.with(|w| {
                        w.anomaly(format!(
                            "agents {other} and {agent} serve partition {partition} differently \
                             (high watermarks {hw} and {high_watermark})"
                        ))
                    });
                }
                Some(_) => {}
            }
        }
    }
    let books = books.lock().expect("books");
    let mut anomalies = Vec::new();
    for (partition, offset, values) in &books.acked {
        for (i, value) in values.iter().enumerate() {
            let at = offset + i as i64;
            match books.read.get(&(*partition, at)) {
                Some(read) if read == value => {}
                Some(read) => anomalies.push(format!(
                    "acknowledged {value} at partition {partition} offset {at}, which holds {read}"
                )),
                None => anomalies.push(format!(
                    "acknowledged {value} at partition {partition} offset {at}, which reads as nothing"
                )),
            }
        }
    }
    let mut seen: BTreeMap<&str, (i32, i64)> = BTreeMap::new();
    // Per producer session and partition, the last batch read, by offset.
    let mut order: BTreeMap<(String, i32), (u64, i64)> = BTreeMap::new();
    for ((partition, offset), value) in &books.read {
        if !books.sent.contains(value) {
            anomalies.push(format!(
                "partition {partition} offset {offset} holds {value}, never sent"
            ));
        }
        if let Some(first) = seen.insert(value, (*partition, *offset)) {
            anomalies.push(format!(
                "{value} stored twice: at {first:?} and {:?}",
                (*partition, *offset)
            ));
        }
        if let Some((session, batch)) = session_and_batch(value) {
            let last = order
                .entry((session, *partition))
                .or_insert((batch, *offset));
            if batch < last.0 {
                anomalies.push(format!(
                    "{value} at partition {partition} offset {offset} after batch {} of its producer",
                    last.0
                ));
            }
            *last = (batch.max(last.0), *offset);
        }
    }
    shared.with(|w| {
        w.summary.polled_records += books.read.len() as u64;
        w.log(format!(
            "audit: {} batches acknowledged, {} records read, {} fetches checked",
            books.acked.len(),
            books.read.len(),
            books.fetches_checked
        ));
        for anomaly in anomalies {
            w.anomaly(anomaly);
        }
    });
}

/// `p{producer}-{id}-{epoch}-b{batch}-r{record}`: the producer session and
/// the batch.
fn session_and_batch(value: &str) -> Option<(String, u64)> {
    let (session, rest) = value.split_once("-b")?;
    let (batch, _) = rest.split_once("-r")?;
    Some((session.to_string(), batch.parse().ok()?))
}

/// A partition read whole, as one agent serves it.
pub(super) struct Whole {
    pub(super) high_watermark: i64,
    /// What a consumer keeps (see [`Answer::kept`]).
    pub(super) log: Log,
}

/// The partition from its start to its high watermark, as agent `agent`
/// serves it (retrying what fails), at read_committed when `committed`
/// (which must then reach the high watermark: nothing is left open).
pub(super) async fn read_whole(
    shared: &Shared,
    net: &SimNetwork,
    agent: usize,
    (topic, partition): (&str, i32),
    committed: bool,
) -> Whole {
    let mut log = Vec::new();
    let mut offset = 0;
    for _ in 0..10_000 {
        let Some(mut conn) = open(net, agent, SIM_USER, "audit").await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let request = fetch_of(topic, partition, offset, committed);
        let Some(Ok(answer)) = fetch_on(shared, &mut conn, &request).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        offset = answer.next_offset().unwrap_or(offset);
        log.extend(answer.kept(committed));
        let high_watermark = answer.high_watermark;
        if offset >= high_watermark {
            return Whole {
                high_watermark,
                log,
            };
        }
        if committed && offset >= answer.last_stable {
            // A transaction still open: its end (or its timeout) is coming.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    shared.with(|w| {
        w.anomaly(format!(
            "agent {agent} never served {topic}-{partition} past offset {offset}"
        ))
    });
    Whole {
        high_watermark: offset,
        log,
    }
}

async fn fetch_on(
    shared: &Shared,
    conn: &mut Connection,
    request: &FetchRequest,
) -> Option<Result<Answer, i16>> {
    let call = conn.call(ApiKey::Fetch, 12, request);
    let response: FetchResponse = tokio::time::timeout(REQUEST_TIMEOUT, call)
        .await
        .ok()?
        .ok()?;
    Some(Answer::of(shared, &response))
}
