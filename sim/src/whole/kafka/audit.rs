//! The audit at the end of a run: every partition read whole through each
//! agent, and the log held to what producers were told.

use std::collections::BTreeMap;

use floe_protocol::client::Connection;
use floe_protocol::kafka_protocol::messages::*;
use tokio::time::Duration;

use super::cluster::kafka_address;
use super::network::SimNetwork;
use super::read::{Fetched, Log, fetch_request, fetched, note_read};
use super::{Books, KafkaSettings, REQUEST_TIMEOUT};
use crate::whole::Shared;

/// Reads every partition whole through each agent, and checks the log:
/// every agent serves the same dense log up to the same high watermark, at
/// least every acknowledged offset; then the records themselves.
pub(super) async fn audit(shared: &Shared, net: &SimNetwork, books: &Books, settings: KafkaSettings) {
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
            let (high_watermark, log) = read_whole(shared, net, agent, partition).await;
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

/// The partition from its start to its high watermark, as agent `agent`
/// serves it (retrying what fails), and that high watermark.
async fn read_whole(
    shared: &Shared,
    net: &SimNetwork,
    agent: usize,
    partition: i32,
) -> (i64, Vec<(i64, String)>) {
    let mut log = Vec::new();
    let mut offset = 0;
    for _ in 0..10_000 {
        let Ok(stream) = net.connect(kafka_address(agent)).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut conn = Connection::over(stream, "audit");
        let Some(Ok((high_watermark, read))) = fetch_on(shared, &mut conn, partition, offset).await
        else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        if let Some((last, _)) = read.last() {
            offset = last + 1;
        }
        log.extend(read);
        if offset >= high_watermark {
            return (high_watermark, log);
        }
    }
    shared.with(|w| {
        w.anomaly(format!(
            "agent {agent} never served partition {partition} past offset {offset}"
        ))
    });
    (offset, log)
}

async fn fetch_on(
    shared: &Shared,
    conn: &mut Connection,
    partition: i32,
    offset: i64,
) -> Option<Fetched> {
    let request = fetch_request(partition, offset);
    let call = conn.call(ApiKey::Fetch, 12, &request);
    let response: FetchResponse = tokio::time::timeout(REQUEST_TIMEOUT, call)
        .await
        .ok()?
        .ok()?;
    Some(fetched(shared, &response))
}

