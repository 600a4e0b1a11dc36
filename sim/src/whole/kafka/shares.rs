//! Share groups (KIP-932) in the simulation: members of one share group
//! over the producers' topic, as librdkafka's share consumer in its
//! essentials. A member heartbeats (ShareGroupHeartbeat) through any agent
//! for its assignment and fetches (ShareFetch) on one connection that
//! carries its share session, acknowledging what it got on the next fetch:
//! mostly accepted, now and then released, rejected, or left to its lock.
//! Now and then it closes its session (ShareAcknowledge, epoch -1), drops
//! its connection, or leaves the group; agents crash under it.
//!
//! Checked, as records are delivered:
//! - no record is handed to a member while another's lock on it lasts
//!   (unless that member gave it back first): a lock began after its fetch
//!   was sent and lasts the group's lock duration on the metastore's clock,
//!   which may run ahead of the simulation's by what `audit` allows;
//! - each delivery counts one more than the one before, and none passes
//!   the delivery limit;
//! - what is delivered at an offset is what was acknowledged there.
//!
//! At the end, a last member drains the group: every acknowledged record
//! was delivered, and the group's start offsets reach the log's ends
//! (every record accepted, rejected or archived).

use std::collections::{BTreeMap, BTreeSet};

use floe_metastore::Metastore;
use floe_metastore::dynamic_config::{ConfigEntity, ConfigOp, ConfigTarget};
use floe_protocol::ResponseError;
use floe_protocol::client::Connection;
use floe_protocol::kafka_protocol::messages::*;
use floe_protocol::kafka_protocol::protocol::StrBytes;
use tokio::time::{Duration, Instant};
use uuid::Uuid;

use super::client::{Client, SIM_USER, open};
use super::network::SimNetwork;
use super::{Books, REQUEST_TIMEOUT, TOPIC};

pub(super) const GROUP: &str = "sim-share";
/// The group's lock: long enough that a metastore clock a minute ahead
/// (Raft runs) still leaves a lock to check.
const LOCK: Duration = Duration::from_secs(150);
/// `group.share.delivery.count.limit`, at its highest: a record whose
/// deliveries all went unanswered (crashes, timeouts) is archived unseen
/// only after this many.
const DELIVERY_LIMIT: i16 = 10;

/// One delivery of a record to a member.
struct Delivery {
    member: String,
    count: i16,
    /// When the fetch that acquired it was sent (its lock began after).
    sent: Instant,
    /// When its member gave it back, or said how it ended (an
    /// acknowledgement sent, its session or connection closed).
    given_back: Option<Instant>,
    /// Its member's acceptance, rejection or gap was applied: it is done.
    done: bool,
}

/// What share-group members were handed and did.
#[derive(Default)]
pub(super) struct ShareLedger {
    /// Per (partition, offset), each delivery in order, and the value.
    deliveries: BTreeMap<(i32, i64), (String, Vec<Delivery>)>,
    pub(super) handed: u64,
    pub(super) redelivered: u64,
}

impl ShareLedger {
    /// Every record `member` holds is given back (at `at`).
    fn give_back_all(&mut self, member: &str, at: Instant) {
        for (_, ds) in self.deliveries.values_mut() {
            if let Some(last) = ds.last_mut()
                && last.member == member
                && last.given_back.is_none()
            {
                last.given_back = Some(at);
            }
        }
    }

    /// Each record a member holds gives it back (at `at`).
    fn give_back(&mut self, member: &str, records: &[(i32, i64)], at: Instant) {
        for key in records {
            if let Some((_, ds)) = self.deliveries.get_mut(key)
                && let Some(last) = ds.last_mut()
                && last.member == member
                && last.given_back.is_none()
            {
                last.given_back = Some(at);
            }
        }
    }
}

/// Sets the group to read from the earliest record with [`LOCK`].
pub(super) async fn configure(meta: &std::sync::Arc<dyn Metastore>) {
    let set = |entity, pairs: &[(&str, String)]| {
        let ops = pairs
            .iter()
            .map(|(k, v)| ConfigOp::Set(k.to_string(), v.clone()))
            .collect();
        meta.alter_configs(ConfigTarget::Dynamic(entity), ops, false)
    };
    let lock = LOCK.as_millis().to_string();
    loop {
        let cluster = set(
            ConfigEntity::Cluster,
            &[
                ("group.share.max.record.lock.duration.ms", "3600000".into()),
                (
                    "group.share.delivery.count.limit",
                    DELIVERY_LIMIT.to_string(),
                ),
            ],
        )
        .await;
        let group = set(
            ConfigEntity::Group(GROUP.into()),
            &[
                ("share.auto.offset.reset", "earliest".into()),
                ("share.record.lock.duration.ms", lock.clone()),
            ],
        )
        .await;
        if cluster.is_ok() && group.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A member's state.
struct Member {
    id: String,
    epoch: i32,
    assigned: BTreeSet<i32>,
    /// Its share session: the connection, the agent, the next epoch, the
    /// partitions it fetches.
    session: Option<(Connection, usize, i32, BTreeSet<i32>)>,
    /// Records delivered and not yet acknowledged, with how they end.
    pending: Vec<(i32, i64, i8)>,
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// One member of [`GROUP`] until `end` (then it leaves), or with `drain`
/// until every partition's start offset reaches its end in `drain`.
pub(super) async fn share_consume(
    client: Client,
    net: std::sync::Arc<SimNetwork>,
    agents: usize,
    books: Books,
    topic_id: Uuid,
    end: Instant,
    drain: Option<BTreeMap<i32, i64>>,
) {
    let mut m = Member {
        id: client
            .shared
            .with(|w| format!("share-{}", w.rng_below(1 << 40))),
        epoch: 0,
        assigned: BTreeSet::new(),
        session: None,
        pending: Vec::new(),
    };
    let mut next_beat = Instant::now();
    let give_up = Instant::now() + Duration::from_secs(1800);
    loop {
        let now = Instant::now();
        match &drain {
            None if now >= end => break,
            Some(ends) if started_past(&client, ends).await => break,
            Some(_) if now >= give_up => {
                let never = format!("the last member of {GROUP} never drained it");
                client.shared.with(|w| w.anomaly(never));
                break;
            }
            _ => {}
        }
        if now >= next_beat {
            next_beat = now + heartbeat(&client, &books, &mut m, topic_id).await;
        }
        if m.assigned.is_empty() {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        if drain.is_none() && misbehave(&client, &books, &mut m, topic_id).await {
            continue;
        }
        fetch(
            &client,
            &net,
            agents,
            &books,
            &mut m,
            topic_id,
            drain.is_some(),
        )
        .await;
    }
    close_session(&books, &mut m, topic_id).await;
    leave(&client, &m.id).await;
}

/// Now and then a member closes its session, drops its connection without
/// a word, or leaves and joins again (true: it did one).
async fn misbehave(client: &Client, books: &Books, m: &mut Member, topic_id: Uuid) -> bool {
    let pick = client.shared.with(|w| w.rng_below(1000));
    match pick {
        0..10 => close_session(books, m, topic_id).await,
        // Gone without a word: its records wait for their locks, or for
        // the agent to see the connection close.
        10..20 => forget_session(books, m),
        20..25 => {
            close_session(books, m, topic_id).await;
            leave(client, &m.id).await;
            m.epoch = 0;
            m.assigned.clear();
        }
        _ => return false,
    }
    true
}

/// One heartbeat; when the next is due.
async fn heartbeat(client: &Client, books: &Books, m: &mut Member, topic_id: Uuid) -> Duration {
    let mut request = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(GROUP)))
        .with_member_id(str_bytes(&m.id))
        .with_member_epoch(m.epoch);
    if m.epoch == 0 {
        request = request
            .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_static_str(TOPIC))]));
    }
    let answer: Result<ShareGroupHeartbeatResponse, _> =
        client.call(ApiKey::ShareGroupHeartbeat, 1, &request).await;
    let Ok(r) = answer else {
        return Duration::from_secs(1);
    };
    match ResponseError::try_from_code(r.error_code) {
        None => {}
        Some(e @ (ResponseError::FencedMemberEpoch | ResponseError::UnknownMemberId)) => {
            // Expired or fenced (its heartbeats went unanswered for a
            // session): the group released every record it held, as
            // Kafka's does, so acknowledging them means nothing now. It
            // joins again.
            let line = format!(
                "{GROUP}: {} is no member any more ({e:?}); joins again",
                m.id
            );
            client.shared.with(|w| w.log(line));
            books
                .lock()
                .expect("books")
                .shares
                .give_back_all(&m.id, Instant::now());
            m.pending.clear();
            m.epoch = 0;
            return Duration::ZERO;
        }
        Some(e) => {
            let line = format!("{GROUP}: heartbeat of {} refused: {e:?}", m.id);
            client.shared.with(|w| w.log(line));
            return Duration::from_secs(1);
        }
    }
    m.epoch = r.member_epoch;
    if let Some(assignment) = r.assignment {
        m.assigned = assignment
            .topic_partitions
            .iter()
            .filter(|t| t.topic_id == topic_id)
            .flat_map(|t| t.partitions.iter().copied())
            .collect();
    }
    Duration::from_millis(r.heartbeat_interval_ms.clamp(100, 10_000) as u64)
}

/// What the member acknowledges of what it holds: mostly accept, now and
/// then release or reject, or nothing (its lock runs out).
fn decide(client: &Client, drain: bool) -> Option<i8> {
    if drain {
        return Some(1);
    }
    let pick = client.shared.with(|w| w.rng_below(100));
    match pick {
        0..5 => None,
        5..15 => Some(2),
        15..20 => Some(3),
        _ => Some(1),
    }
}

/// The acknowledgement batches of `pending` records of one partition.
fn batches_of(
    pending: &[(i32, i64, i8)],
    partition: i32,
) -> Vec<share_fetch_request::AcknowledgementBatch> {
    pending
        .iter()
        .filter(|(p, ..)| *p == partition)
        .map(|&(_, offset, kind)| {
            share_fetch_request::AcknowledgementBatch::default()
                .with_first_offset(offset)
                .with_last_offset(offset)
                .with_acknowledge_types(vec![kind])
        })
        .collect()
}

/// One ShareFetch on the member's session (opened if it has none), with
/// its pending acknowledgements.
async fn fetch(
    client: &Client,
    net: &SimNetwork,
    agents: usize,
    books: &Books,
    m: &mut Member,
    topic_id: Uuid,
    drain: bool,
) {
    if m.session.is_none() {
        let agent = client.shared.with(|w| w.rng_below(agents as u64) as usize);
        let Some(conn) = open(net, agent, SIM_USER, "sim-share").await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            return;
        };
        m.session = Some((conn, agent, 0, BTreeSet::new()));
        // Acknowledgements are never sent when a session opens.
        m.pending.clear();
    }
    let (mut conn, agent, mut epoch, mut fetched) = m.session.take().expect("opened above");
    let wanted = m.assigned.clone();
    let partitions: BTreeSet<i32> = match epoch {
        0 => wanted.clone(),
        _ => wanted
            .difference(&fetched)
            .copied()
            .chain(m.pending.iter().map(|(p, ..)| *p))
            .collect(),
    };
    let forgotten: Vec<i32> = fetched.difference(&wanted).copied().collect();
    let topics = vec![
        share_fetch_request::FetchTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(
                partitions
                    .iter()
                    .map(|&p| {
                        share_fetch_request::FetchPartition::default()
                            .with_partition_index(p)
                            .with_acknowledgement_batches(batches_of(&m.pending, p))
                    })
                    .collect(),
            ),
    ];
    let request = ShareFetchRequest::default()
        .with_group_id(Some(GroupId(StrBytes::from_static_str(GROUP))))
        .with_member_id(Some(str_bytes(&m.id)))
        .with_share_session_epoch(epoch)
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(256 << 10)
        .with_max_records(50)
        .with_batch_size(50)
        .with_topics(topics)
        .with_forgotten_topics_data(match forgotten.is_empty() {
            true => vec![],
            false => vec![
                share_fetch_request::ForgottenTopic::default()
                    .with_topic_id(topic_id)
                    .with_partitions(forgotten.clone()),
            ],
        });
    let sent = Instant::now();
    let pending = m.pending.clone();
    let acked: Vec<(i32, i64)> = m.pending.iter().map(|(p, o, _)| (*p, *o)).collect();
    // Sent: what it acknowledged has ended, whatever the answer.
    books
        .lock()
        .expect("books")
        .shares
        .give_back(&m.id, &acked, sent);
    m.pending.clear();
    let answer = match conn.send(ApiKey::ShareFetch, 1, &request).await {
        Ok(id) => tokio::time::timeout(REQUEST_TIMEOUT, conn.receive(ApiKey::ShareFetch, 1, id))
            .await
            .ok()
            .and_then(Result::ok),
        Err(_) => None,
    };
    let Some(r): Option<ShareFetchResponse> = answer else {
        // The connection is dropped: the agent may release its records.
        forget_session(books, m);
        return;
    };
    if r.error_code != 0 {
        let line = format!("{GROUP}: {}'s share fetch refused: {}", m.id, r.error_code);
        client.shared.with(|w| w.log(line));
        forget_session(books, m);
        return;
    }
    epoch = if epoch == i32::MAX { 1 } else { epoch + 1 };
    fetched = wanted;
    for t in r.responses.iter().filter(|t| t.topic_id == topic_id) {
        for p in &t.partitions {
            let ours = pending
                .iter()
                .filter(|(part, ..)| *part == p.partition_index);
            let acks: Vec<(i64, i8)> = ours.map(|&(_, o, kind)| (o, kind)).collect();
            acknowledged(
                client,
                books,
                m,
                p.partition_index,
                &acks,
                p.acknowledge_error_code,
                sent,
            );
            if p.error_code != 0 {
                continue;
            }
            let got = delivered(client, books, m, p, sent);
            for (offset, control) in got {
                let kind = if control {
                    Some(0)
                } else {
                    decide(client, drain)
                };
                if let Some(kind) = kind {
                    m.pending.push((p.partition_index, offset, kind));
                }
            }
        }
    }
    m.session = Some((conn, agent, epoch, fetched));
}

/// The member's session is gone (its connection dropped): every record
/// it held may be released by its agent from now on.
fn forget_session(books: &Books, m: &mut Member) {
    m.session = None;
    m.pending.clear();
    books
        .lock()
        .expect("books")
        .shares
        .give_back_all(&m.id, Instant::now());
}

/// The answer to acknowledgements of `partition` sent at `sent`: applied
/// ones that end a record mark it done; INVALID_RECORD_STATE for records
/// whose lock surely lasted, and that nothing gave back before, is an
/// anomaly (the metastore let another take them, or forgot them).
fn acknowledged(
    client: &Client,
    books: &Books,
    m: &Member,
    partition: i32,
    acks: &[(i64, i8)],
    code: i16,
    sent: Instant,
) {
    let ahead = lock_slack(client);
    let mut books = books.lock().expect("books");
    for &(offset, kind) in acks {
        let key = (partition, offset);
        let Some((_, ds)) = books.shares.deliveries.get_mut(&key) else {
            continue;
        };
        let Some(last) = ds.last_mut() else { continue };
        if last.member != m.id || last.given_back != Some(sent) {
            continue;
        }
        if code == 0 {
            // Accepted, rejected or a gap: archived or acknowledged.
            last.done |= kind != 2;
        } else if code == ResponseError::InvalidRecordState.code()
            && sent < last.sent + LOCK.saturating_sub(ahead)
        {
            // (Other errors, a metastore that did not answer, leave it
            // unknown whether the acknowledgement was applied.)
            let what = format!(
                "{GROUP}: {}'s acknowledgement of {key:?} refused ({code}) while its lock lasted",
                m.id
            );
            client.shared.with(|w| w.anomaly(what));
        }
    }
}

/// How far the metastore's clock may run ahead of the simulation's now:
/// a lock may end that much early in the simulation's time.
fn lock_slack(client: &Client) -> Duration {
    let ahead = client
        .shared
        .with(|w| crate::whole::audit::max_ahead_ms(w.now_ms()));
    Duration::from_millis(ahead.max(0) as u64)
}

/// The offsets of one partition's answer the member now holds (each with
/// whether it is a control record), checked against what came before.
fn delivered(
    client: &Client,
    books: &Books,
    m: &Member,
    p: &share_fetch_response::PartitionData,
    sent: Instant,
) -> Vec<(i64, bool)> {
    let bytes = p.records.clone().unwrap_or_default();
    let batches = floe_protocol::batch::RecordBatch::parse_all_stored(&bytes);
    let spans: Vec<(i64, i64)> = batches
        .iter()
        .flatten()
        .map(|b| (b.base_offset(), b.last_offset()))
        .collect();
    let records = batches
        .map_err(|e| e.to_string())
        .and_then(|b| floe_protocol::records::decode_all(&b).map_err(|e| e.to_string()));
    let records = match records {
        Ok(records) => records,
        Err(e) => {
            client
                .shared
                .with(|w| w.anomaly(format!("a share fetch's records do not decode: {e}")));
            return Vec::new();
        }
    };
    let mut held = Vec::new();
    let mut books = books.lock().expect("books");
    for a in &p.acquired_records {
        for offset in a.first_offset..=a.last_offset {
            let Some(record) = records.iter().find(|r| r.offset == offset) else {
                // Not a record (compacted away, inside a batch sent):
                // acknowledged as a gap. One no batch sent holds is a
                // record the member was told it holds and never got.
                if !spans
                    .iter()
                    .any(|(first, last)| (*first..=*last).contains(&offset))
                {
                    client.shared.with(|w| {
                        w.anomaly(format!(
                            "{GROUP}: ({}, {offset}) acquired by {} without its batch",
                            p.partition_index, m.id
                        ))
                    });
                }
                held.push((offset, true));
                continue;
            };
            let value = record
                .value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            note(
                client,
                &mut books.shares,
                m,
                (p.partition_index, offset),
                value,
                a.delivery_count,
                sent,
            );
            held.push((offset, record.control));
        }
    }
    held
}

/// Holds one delivery to the checks above.
fn note(
    client: &Client,
    ledger: &mut ShareLedger,
    m: &Member,
    key: (i32, i64),
    value: String,
    count: i16,
    sent: Instant,
) {
    ledger.handed += 1;
    let (stored, deliveries) = ledger
        .deliveries
        .entry(key)
        .or_insert_with(|| (value.clone(), Vec::new()));
    let mut anomalies = Vec::new();
    if *stored != value {
        anomalies.push(format!(
            "{key:?} delivered as {value:?}, before as {stored:?}"
        ));
    }
    if count > DELIVERY_LIMIT {
        anomalies.push(format!("{key:?} delivered {count} times, past the limit"));
    }
    if let Some(last) = deliveries.last() {
        ledger.redelivered += 1;
        if count <= last.count {
            anomalies.push(format!(
                "{key:?} delivered to {} as delivery {count} after delivery {} to {}",
                m.id, last.count, last.member
            ));
        }
        // The last holder's lock lasted from after its fetch was sent for
        // LOCK on the metastore's clock, which may run ahead.
        let ahead = Duration::from_millis(
            client
                .shared
                .with(|w| crate::whole::audit::max_ahead_ms(w.now_ms())) as u64,
        );
        let surely_live_until = last.sent + LOCK.saturating_sub(ahead);
        let received = Instant::now();
        if last.given_back.is_none_or(|at| at > received) && received < surely_live_until {
            anomalies.push(format!(
                "{key:?} handed to {} while {}'s lock (its fetch sent {:?} ago) lasted",
                m.id,
                last.member,
                received - last.sent
            ));
        }
    }
    deliveries.push(Delivery {
        member: m.id.clone(),
        count,
        sent,
        given_back: None,
        done: false,
    });
    for a in anomalies {
        client.shared.with(|w| w.anomaly(format!("{GROUP}: {a}")));
    }
}

/// Closes the member's session (ShareAcknowledge, epoch -1) with its
/// pending acknowledgements: its records are released.
async fn close_session(books: &Books, m: &mut Member, topic_id: Uuid) {
    let Some((mut conn, _, epoch, _)) = m.session.take() else {
        return;
    };
    // Closing gives back everything the session held.
    books
        .lock()
        .expect("books")
        .shares
        .give_back_all(&m.id, Instant::now());
    if epoch > 0 {
        let partitions: BTreeSet<i32> = m.pending.iter().map(|(p, ..)| *p).collect();
        let topics = vec![
            share_acknowledge_request::AcknowledgeTopic::default()
                .with_topic_id(topic_id)
                .with_partitions(
                    partitions
                        .iter()
                        .map(|&p| {
                            share_acknowledge_request::AcknowledgePartition::default()
                                .with_partition_index(p)
                                .with_acknowledgement_batches(
                                    batches_of(&m.pending, p)
                                        .into_iter()
                                        .map(|b| {
                                            share_acknowledge_request::AcknowledgementBatch::default()
                                                .with_first_offset(b.first_offset)
                                                .with_last_offset(b.last_offset)
                                                .with_acknowledge_types(b.acknowledge_types)
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
        ];
        let request = ShareAcknowledgeRequest::default()
            .with_group_id(Some(GroupId(StrBytes::from_static_str(GROUP))))
            .with_member_id(Some(str_bytes(&m.id)))
            .with_share_session_epoch(-1)
            .with_topics(topics);
        if let Ok(id) = conn.send(ApiKey::ShareAcknowledge, 1, &request).await {
            let answered =
                conn.receive::<ShareAcknowledgeResponse>(ApiKey::ShareAcknowledge, 1, id);
            let _ = tokio::time::timeout(REQUEST_TIMEOUT, answered).await;
        }
    }
    m.pending.clear();
}

/// Leaves the group (epoch -1).
async fn leave(client: &Client, member: &str) {
    let request = ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(GROUP)))
        .with_member_id(str_bytes(member))
        .with_member_epoch(-1);
    let _: Result<ShareGroupHeartbeatResponse, _> =
        client.call(ApiKey::ShareGroupHeartbeat, 1, &request).await;
}

/// Whether the group's start offsets reached `ends` on every partition.
async fn started_past(client: &Client, ends: &BTreeMap<i32, i64>) -> bool {
    let starts = start_offsets(client).await;
    ends.iter()
        .all(|(p, end)| starts.get(p).is_some_and(|start| start >= end))
}

/// The group's start offsets of the producers' topic.
async fn start_offsets(client: &Client) -> BTreeMap<i32, i64> {
    use describe_share_group_offsets_request::*;
    let request = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(GroupId(StrBytes::from_static_str(GROUP)))
            .with_topics(None),
    ]);
    let answer: Result<DescribeShareGroupOffsetsResponse, _> = client
        .call(ApiKey::DescribeShareGroupOffsets, 0, &request)
        .await;
    let Ok(r) = answer else {
        return BTreeMap::new();
    };
    r.groups
        .iter()
        .flat_map(|g| &g.topics)
        .filter(|t| t.topic_name.0.as_str() == TOPIC)
        .flat_map(|t| &t.partitions)
        .filter(|p| p.error_code == 0)
        .map(|p| (p.partition_index, p.start_offset))
        .collect()
}

/// After the drain: every acknowledged record was delivered.
pub(super) fn audit_shares(client: &Client, books: &Books) {
    let books = books.lock().expect("books");
    let mut missing = Vec::new();
    for (partition, base, values) in &books.acked {
        for (i, value) in values.iter().enumerate() {
            let key = (*partition, base + i as i64);
            match books.shares.deliveries.get(&key) {
                None => missing.push(key),
                Some((delivered, _)) if delivered != value => client.shared.with(|w| {
                    w.anomaly(format!(
                        "{GROUP}: {key:?} acknowledged as {value:?}, delivered as {delivered:?}"
                    ))
                }),
                Some(_) => {}
            }
        }
    }
    let line = format!(
        "{GROUP}: {} records handed out, {} of them again",
        books.shares.handed, books.shares.redelivered
    );
    client.shared.with(|w| {
        w.log(line);
        w.summary.share_deliveries += books.shares.handed;
        w.summary.share_redeliveries += books.shares.redelivered;
        if !missing.is_empty() {
            w.anomaly(format!(
                "{GROUP}: {} acknowledged records never delivered, first {:?}",
                missing.len(),
                &missing[..missing.len().min(5)]
            ));
        }
    });
}
