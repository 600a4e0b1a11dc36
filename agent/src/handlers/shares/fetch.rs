//! ShareFetch: the member's acknowledgements first, then an acquisition of
//! the session's partitions by the metastore (one budget of `MaxRecords`
//! for all, each record under a lock), then the records it handed out,
//! read through the cache as Fetch reads them.
//!
//! What a member is told it holds is what it holds: the metastore hands
//! out offsets, and the agent sends the whole batches holding them. Offsets
//! whose batches do not fit the response (its bytes, the agent's response
//! budget) or could not be read are handed back at once as undelivered
//! (available again, the delivery not counted): a client acknowledges an
//! acquired offset missing from the records as a gap, which would archive
//! a record it never saw. Aborted transactions' records, for a group that
//! reads committed records only, are archived by the agent, as Kafka's
//! `SharePartition` archives them, and never handed out.
//!
//! A batch the acquisition cut is acquired whole, as Kafka's
//! batch-optimized acquisition does. Records are sent only while their
//! locks surely last; what is read later is handed back unsent.
//!
//! An acquisition that finds nothing waits, as Fetch does, for one of the
//! partitions to grow, and asks again when one does; at `MaxWaitMs` it
//! answers empty. Records released, or whose locks ended, meanwhile are
//! found by the member's next fetch.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use floe_metastore::groups::share::{
    Ack, AckBatch, AcknowledgeShare, AcquireShare, Acquired, PartitionAcks, ShareAcquisition,
};
use floe_metastore::{GroupError, TopicId, TopicPartition, TxnReadPlan};
use floe_protocol::ResponseError;
use floe_protocol::batch::{RecordBatch, last_offset_of, whole_batches_within};
use floe_protocol::kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, PartitionData, ShareFetchableTopicResponse,
};
use floe_protocol::kafka_protocol::messages::{ShareFetchRequest, ShareFetchResponse};
use floe_protocol::str_bytes;
use tokio::time::Instant;

use super::acknowledge::{self, Outcome, WireBatches, by_topic, error_fields};
use super::{FINAL_EPOCH, KAFKA_RULES};
use crate::broker::{Broker, kafka_error};
use crate::handlers::reads::{charge, read_extents};
use crate::limits::budget::{Held, Turn};

/// Longest a share fetch waits, whatever the client asks.
const MAX_WAIT_CAP: Duration = Duration::from_secs(30);

/// Records one share fetch may acquire, whatever the client asks (Kafka
/// bounds them by the partitions' record locks; this bounds the answer).
const MAX_RECORDS_CAP: i32 = 100_000;

/// A partition of a share fetch: a key, and its error if it has one.
type Key = (TopicId, i32);

/// The partitions of `entries` that exist, and those that do not with
/// their error (UNKNOWN_TOPIC_ID, or UNKNOWN_TOPIC_OR_PARTITION past the
/// topic's partitions).
pub async fn known_topics<'a>(
    broker: &Broker,
    entries: Vec<(Key, WireBatches<'a>)>,
) -> (Vec<(Key, WireBatches<'a>)>, Vec<(Key, ResponseError)>) {
    let mut known = Vec::with_capacity(entries.len());
    let mut unknown = Vec::new();
    // The highest partition asked of each topic: a topic the cache knows
    // with fewer (grown since) is looked up again.
    let mut highest: HashMap<TopicId, i32> = HashMap::new();
    for ((topic, partition), _) in &entries {
        let at = highest.entry(*topic).or_insert(0);
        *at = (*at).max(*partition);
    }
    let mut topics: HashMap<TopicId, Option<i32>> = HashMap::new();
    for ((topic, partition), batches) in entries {
        let partitions = match topics.get(&topic) {
            Some(count) => *count,
            None => {
                let count = broker
                    .fetch_topic("", Some(topic), highest[&topic])
                    .await
                    .map(|info| info.partitions);
                topics.insert(topic, count);
                count
            }
        };
        match partitions {
            None => unknown.push(((topic, partition), ResponseError::UnknownTopicId)),
            Some(count) if partition < 0 || partition >= count => {
                unknown.push(((topic, partition), ResponseError::UnknownTopicOrPartition))
            }
            Some(_) => known.push(((topic, partition), batches)),
        }
    }
    (known, unknown)
}

/// Why a request names more than an agent takes, if it does: at most a
/// session's partitions in its topics and in those it forgets, and
/// [`acknowledge::MAX_REQUEST_BATCHES`] acknowledgement batches in all.
fn oversized(req: &ShareFetchRequest) -> Option<&'static str> {
    let forgotten: usize = req
        .forgotten_topics_data
        .iter()
        .map(|t| t.partitions.len())
        .sum();
    if forgotten > super::sessions::MAX_PARTITIONS {
        return Some("more partitions than a share session fetches");
    }
    let batches = req.topics.iter().flat_map(|t| &t.partitions);
    (!super::within_request_limits(batches.map(|p| p.acknowledgement_batches.len())))
        .then_some("more partitions or acknowledgement batches than one request may carry")
}

/// One partition of the answer.
#[derive(Default)]
struct Answer {
    error: Option<ResponseError>,
    ack: Outcome,
    records: Bytes,
    acquired: Vec<Acquired>,
}

pub async fn handle(
    broker: &Broker,
    req: ShareFetchRequest,
    connection: u64,
    auth: &crate::security::authorizer::Session,
    turn: &Turn,
) -> (ShareFetchResponse, Option<Held>) {
    let failed = |e: ResponseError, why: Option<&str>| {
        let response = ShareFetchResponse::default()
            .with_error_code(e.code())
            .with_error_message(why.map(str_bytes));
        (response, None)
    };
    let (group, member) = match super::member_of(req.group_id.as_ref(), req.member_id.as_ref()) {
        Ok(named) => named,
        Err(why) => return failed(ResponseError::InvalidRequest, Some(why)),
    };
    if let Some(why) = oversized(&req) {
        return failed(ResponseError::InvalidRequest, Some(why));
    }
    let key = (group.clone(), member.clone());
    let epoch = req.share_session_epoch;
    let entries = acknowledge::merged(req.topics.iter().flat_map(|t| {
        t.partitions.iter().map(move |p| {
            let batches = p
                .acknowledgement_batches
                .iter()
                .map(|b| {
                    (
                        b.first_offset,
                        b.last_offset,
                        b.acknowledge_types.as_slice(),
                    )
                })
                .collect();
            ((t.topic_id, p.partition_index), batches)
        })
    }));
    let (known, unknown) = known_topics(broker, entries).await;
    let has_acks = known.iter().any(|(_, b)| !b.is_empty());
    let requested: Vec<Key> = known.iter().map(|(k, _)| *k).collect();
    let forgotten: Vec<Key> = req
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
        .collect();
    let sessions = &broker.share_sessions;
    let session = match epoch {
        0 if has_acks => {
            return failed(
                ResponseError::InvalidRequest,
                Some("a request that opens a share session carries no acknowledgements"),
            );
        }
        0 => {
            let id = broker.world.new_id().as_u64_pair().0;
            sessions.open(key.clone(), connection, id, requested)
        }
        FINAL_EPOCH if !sessions.exists(&key) => Err(ResponseError::ShareSessionNotFound),
        FINAL_EPOCH => Ok((0, Vec::new())),
        _ => sessions.advance(&key, epoch, requested, &forgotten),
    };
    broker.metrics.share_sessions.set(sessions.count() as i64);
    let (session, partitions) = match session {
        Ok(found) => found,
        Err(e) => {
            if e == ResponseError::ShareSessionLimitReached {
                // As Kafka: answered after MaxWaitMs, so a client retrying
                // at once does not spin.
                tokio::time::sleep(max_wait(&req)).await;
            }
            return failed(e, None);
        }
    };
    // Topics the principal may no longer read (ACLs changed since they
    // joined the session, or another principal names this member): not
    // fetched, as Kafka filters a session's partitions.
    let (partitions, unreadable) = readable(broker, auth, partitions).await;
    let acked: Vec<_> = known.into_iter().filter(|(_, b)| !b.is_empty()).collect();
    let mut answers: Vec<(Key, Answer)> = acknowledge::apply(broker, &group, &member, acked)
        .await
        .into_iter()
        .map(|(key, ack)| {
            (
                key,
                Answer {
                    ack,
                    ..Answer::default()
                },
            )
        })
        .collect();
    for (key, error) in unknown.into_iter().chain(unreadable) {
        answers.push((
            key,
            Answer {
                error: Some(error),
                ..Answer::default()
            },
        ));
    }
    if epoch == FINAL_EPOCH {
        if let Some(closed) = sessions.close(&key) {
            broker.metrics.share_sessions.set(sessions.count() as i64);
            acknowledge::release(broker, group, member, closed).await;
        }
        return (respond(answers, 0), None);
    }
    let cap = broker.config.max_fetch_bytes.as_u64().min(i32::MAX as u64) as i32;
    let max_bytes = req.max_bytes.min(cap).max(0) as usize;
    let max_records = req.max_records.min(MAX_RECORDS_CAP);
    if max_records <= 0 || max_bytes == 0 || partitions.is_empty() {
        return (respond(answers, 0), None);
    }
    if epoch == 0 {
        // The first answer of a session names every partition.
        for p in &partitions {
            if !answers.iter().any(|(k, _)| k == p) {
                answers.push((*p, Answer::default()));
            }
        }
    }
    let deadline = Instant::now() + max_wait(&req);
    let partitions_asked = partitions.clone();
    let asked = rotated(partitions, epoch);
    let mut lock_ms = 0;
    let mut held = None;
    let who = Who {
        group: &group,
        member: &member,
        session,
    };
    match acquire(broker, who, asked, max_records, deadline).await {
        Ok(Some((acquisition, sent))) => {
            lock_ms = acquisition.lock_ms;
            // Sent by when the locks surely last (a quarter of them left
            // for the member to get the answer): past it, nothing is.
            let lock = Duration::from_millis(lock_ms.max(0) as u64);
            let locked = sent + lock - lock / 4;
            let limits = (max_bytes, deadline, locked);
            held = deliver(broker, who, acquisition, limits, turn, &mut answers).await;
        }
        Ok(None) => {}
        Err(error) => {
            // Nothing was handed out: every partition of the session says why.
            for p in &partitions_asked {
                answer_of(&mut answers, *p).error.get_or_insert(error);
            }
        }
    }
    (respond(answers, lock_ms), held)
}

/// How long the request may wait (`MaxWaitMs`, within [`MAX_WAIT_CAP`]).
fn max_wait(req: &ShareFetchRequest) -> Duration {
    Duration::from_millis(req.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP)
}

/// The partitions of `partitions` whose topics `auth` may READ, and the
/// others with TOPIC_AUTHORIZATION_FAILED.
async fn readable(
    broker: &Broker,
    auth: &crate::security::authorizer::Session,
    partitions: Vec<Key>,
) -> (Vec<Key>, Vec<(Key, ResponseError)>) {
    use floe_metastore::acls::{operation, resource};
    if !broker.authorizer.enabled() {
        return (partitions, Vec::new());
    }
    let mut allowed: HashMap<TopicId, bool> = HashMap::new();
    let (mut kept, mut denied) = (Vec::with_capacity(partitions.len()), Vec::new());
    for key in partitions {
        let ok = match allowed.get(&key.0) {
            Some(ok) => *ok,
            None => {
                let name = broker.fetch_topic("", Some(key.0), 0).await.map(|t| t.name);
                let ok = name.is_some_and(|name| {
                    broker
                        .authorizer
                        .allows(auth, operation::READ, resource::TOPIC, &name)
                });
                allowed.insert(key.0, ok);
                ok
            }
        };
        match ok {
            true => kept.push(key),
            false => denied.push((key, ResponseError::TopicAuthorizationFailed)),
        }
    }
    (kept, denied)
}

/// The session's partitions, starting one further each request (Kafka
/// rotates them so by the session epoch): the budget of records is not
/// always spent on the first.
fn rotated(mut partitions: Vec<Key>, epoch: i32) -> Vec<Key> {
    if !partitions.is_empty() {
        let by = epoch.max(0) as usize % partitions.len();
        partitions.rotate_left(by);
    }
    partitions
}

/// A member through one share session.
#[derive(Clone, Copy)]
struct Who<'a> {
    group: &'a str,
    member: &'a str,
    session: u64,
}

/// Acquires up to `max_records` records of `partitions` for `who`,
/// waiting until `deadline` for one of them to grow while there are none.
/// `None`: the group does not exist (its members have not joined yet).
async fn acquire(
    broker: &Broker,
    who: Who<'_>,
    partitions: Vec<Key>,
    max_records: i32,
    deadline: Instant,
) -> Result<Option<(ShareAcquisition, Instant)>, ResponseError> {
    loop {
        let sent = Instant::now();
        let asked = AcquireShare {
            group: who.group.to_string(),
            member: who.member.to_string(),
            session: who.session,
            partitions: partitions.clone(),
            max_records: i64::from(max_records),
            rules: KAFKA_RULES,
            now_ms: broker.world.now_ms(),
        };
        let acquisition = match broker.meta.acquire_share(asked).await {
            Ok(Ok(acquisition)) => acquisition,
            // No such group yet (its members have not joined): nothing, at
            // the deadline, as a fetch that found nothing.
            Ok(Err(GroupError::GroupIdNotFound)) => {
                tokio::time::sleep_until(deadline).await;
                return Ok(None);
            }
            Ok(Err(e)) => return Err(super::share_error(e)),
            Err(e) => {
                tracing::warn!(error = %e, "share fetch: acquiring failed");
                return Err(kafka_error(&e));
            }
        };
        let got = acquisition
            .partitions
            .iter()
            .any(|p| p.acquired.as_ref().is_some_and(|a| !a.is_empty()));
        if got || Instant::now() >= deadline {
            return Ok(Some((acquisition, sent)));
        }
        let seen: Vec<(TopicId, i32, i64)> = acquisition
            .partitions
            .iter()
            .filter(|p| p.log_end >= 0)
            .map(|p| (p.topic, p.partition, p.log_end))
            .collect();
        if seen.is_empty() || !broker.watermarks.wait_for_growth(&seen, deadline).await {
            return Ok(Some((acquisition, sent)));
        }
    }
}

/// One partition's acquired records, to be read: where they are stored,
/// or the error its client gets (`None`: left unread, no error).
struct ToRead {
    key: Key,
    acquired: Vec<Acquired>,
    plan: Result<TxnReadPlan, Option<ResponseError>>,
}

/// Reads the records `acquisition` handed out into `answers`, hands back
/// what cannot be sent, and archives aborted records for a read_committed
/// group. The response budget it holds until the answer is written.
/// `limits`: the answer's bytes, the request's deadline, and when the
/// locks may end (nothing read by then is sent: another member may have
/// it).
async fn deliver(
    broker: &Broker,
    who: Who<'_>,
    acquisition: ShareAcquisition,
    (max_bytes, deadline, locked): (usize, Instant, Instant),
    turn: &Turn,
    answers: &mut Vec<(Key, Answer)>,
) -> Option<Held> {
    let read_committed = acquisition.read_committed;
    let mut to_read = Vec::new();
    for p in acquisition.partitions {
        let key = (p.topic, p.partition);
        match p.acquired {
            None => answer_of(answers, key).error = Some(ResponseError::UnknownTopicOrPartition),
            Some(acquired) if acquired.is_empty() => {}
            Some(acquired) => to_read.push((key, acquired)),
        }
    }
    if to_read.is_empty() {
        return None;
    }
    let mut reads = plan(broker, to_read, max_bytes, read_committed).await;
    let planned: usize = reads
        .iter()
        .filter_map(|r| r.plan.as_ref().ok().map(|p| (r, p)))
        .map(|(r, p)| charge(&p.plan.extents, r.acquired[0].first, max_bytes))
        .sum();
    let wait_until = deadline
        .max(Instant::now() + Duration::from_millis(100))
        .min(locked);
    let held = broker.responses.take(planned, turn, wait_until).await;
    if held.is_none() {
        tracing::debug!(
            planned,
            "share fetch: response budget spent; handing records back"
        );
        for r in &mut reads {
            r.plan = Err(None);
        }
    }
    let mut handed_back = Vec::new();
    let mut used = 0usize;
    for r in reads {
        let first = r.acquired[0].first;
        let last = r.acquired[r.acquired.len() - 1].last;
        let records = match r.plan {
            Ok(plan) => read(
                broker,
                &plan,
                first,
                last,
                max_bytes.saturating_sub(used),
                used == 0,
            )
            .await
            .map(|records| (plan, records))
            .map_err(Some),
            Err(e) => Err(e),
        };
        let (records, aborted) = match records {
            Ok((plan, records)) => {
                let aborted = match read_committed {
                    true => aborted_ranges(&plan, &records),
                    false => Vec::new(),
                };
                (records, aborted)
            }
            Err(e) => {
                if e.is_some() {
                    answer_of(answers, r.key).error = e;
                }
                (Bytes::new(), Vec::new())
            }
        };
        used += records.len();
        let covered = covered(&records);
        let mut acquired = r.acquired;
        // A batch the acquisition cut is handed out whole, as Kafka does:
        // the rest of it is acquired too (records of it already sent).
        if let (Some((_, sent_last)), Some(batch_last)) = (covered, batch_end(&records, last))
            && batch_last > last
            && sent_last >= batch_last
        {
            acquired.extend(rest_of_batch(broker, who, r.key, batch_last - last).await);
            acquired.sort_by_key(|a| a.first);
        }
        let split = split(&acquired, covered, &aborted);
        if !split.handed_back.is_empty() {
            handed_back.push((r.key, split.handed_back));
        }
        let answer = answer_of(answers, r.key);
        answer.records = records;
        answer.acquired = split.delivered;
    }
    if Instant::now() >= locked {
        // Too late: the locks may have ended. Nothing is sent.
        tracing::warn!("share fetch: records read after their locks may have ended; not sent");
        for (key, answer) in answers.iter_mut() {
            if !answer.acquired.is_empty() {
                let batches = answer
                    .acquired
                    .drain(..)
                    .map(|a| AckBatch {
                        first: a.first,
                        last: a.last,
                        types: vec![Ack::Undelivered],
                    })
                    .collect();
                handed_back.push((*key, batches));
                answer.records = Bytes::new();
            }
        }
        handed_back.sort_by_key(|(key, _)| *key);
        handed_back.dedup_by_key(|(key, _)| *key);
    }
    hand_back(broker, who, handed_back).await;
    count(broker, answers);
    held
}

/// Where each partition's acquired records are stored: from the extent
/// cache where it knows them (with every aborted transaction among them,
/// when `aborted`), the rest in one request to the metastore.
async fn plan(
    broker: &Broker,
    to_read: Vec<(Key, Vec<Acquired>)>,
    max_bytes: usize,
    aborted: bool,
) -> Vec<ToRead> {
    let mut reads: Vec<ToRead> = Vec::with_capacity(to_read.len());
    let mut misses = Vec::new();
    for ((topic, partition), acquired) in to_read {
        let tp = TopicPartition::new(topic, partition);
        let (first, last) = (acquired[0].first, acquired[acquired.len() - 1].last);
        let cached = broker
            .extents
            .plan_covering(tp, (first, last), max_bytes as u64, aborted);
        if cached.is_none() {
            misses.push((reads.len(), tp, first));
        }
        reads.push(ToRead {
            key: (topic, partition),
            acquired,
            plan: cached.ok_or(None),
        });
    }
    if misses.is_empty() {
        return reads;
    }
    let asked = crate::read::extent_cache::Moment::now();
    let wanted = misses.iter().map(|&(_, tp, first)| (tp, first)).collect();
    match broker
        .meta
        .txn_read_plans(wanted, max_bytes.max(1) as u64)
        .await
    {
        Ok(answers) => {
            for ((at, tp, _), answer) in misses.into_iter().zip(answers) {
                reads[at].plan = match answer {
                    Ok(plan) => {
                        broker.extents.learn(tp, &plan, asked);
                        Ok(plan)
                    }
                    Err(refusal) => Err(Some(crate::broker::refusal_error(&refusal))),
                };
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "share fetch: read plans failed");
            let error = kafka_error(&e);
            for (at, ..) in misses {
                reads[at].plan = Err(Some(error));
            }
        }
    }
    reads
}

/// The whole batches holding `first..=last`, within `budget` bytes (the
/// first partition's first batch always: KIP-74).
async fn read(
    broker: &Broker,
    plan: &TxnReadPlan,
    first: i64,
    last: i64,
    budget: usize,
    at_least_one: bool,
) -> Result<Bytes, ResponseError> {
    let mut records = read_extents(
        broker,
        &plan.plan.extents,
        first,
        plan.plan.high_watermark,
        budget.max(1),
        1,
    )
    .await
    .map_err(|e| {
        tracing::warn!(error = %e, "share fetch: reading objects failed");
        ResponseError::KafkaStorageError
    })?;
    // Batches past `last` dropped; then what fits.
    let through_last = batches_through(&records, last);
    records.truncate(through_last);
    let keep = whole_batches_within(&records, budget, at_least_one);
    records.truncate(keep);
    Ok(records)
}

/// The last offset of the batch of `records` holding `offset`.
fn batch_end(records: &Bytes, offset: i64) -> Option<i64> {
    let mut at = 0;
    while at < records.len() {
        let rest = records.slice(at..);
        let len = whole_batches_within(&rest, 0, true);
        if len == 0 {
            return None;
        }
        let base = i64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
        let last = last_offset_of(&rest.slice(..len))?;
        if (base..=last).contains(&offset) {
            return Some(last);
        }
        at += len;
    }
    None
}

/// Up to `records` more records of one partition for `member`: the rest
/// of a batch its acquisition cut (what is not of that batch is handed
/// back with the rest).
async fn rest_of_batch(broker: &Broker, who: Who<'_>, key: Key, records: i64) -> Vec<Acquired> {
    let asked = AcquireShare {
        group: who.group.to_string(),
        member: who.member.to_string(),
        session: who.session,
        partitions: vec![key],
        max_records: records,
        rules: KAFKA_RULES,
        now_ms: broker.world.now_ms(),
    };
    match broker.meta.acquire_share(asked).await {
        Ok(Ok(a)) => a
            .partitions
            .into_iter()
            .flat_map(|p| p.acquired.unwrap_or_default())
            .collect(),
        _ => Vec::new(),
    }
}

/// Bytes of the whole batches of `records` that begin at or before `last`.
fn batches_through(records: &Bytes, last: i64) -> usize {
    let mut at = 0;
    while at < records.len() {
        let rest = records.slice(at..);
        let keep = whole_batches_within(&rest, 0, true);
        if keep == 0 || rest.len() < 8 {
            break;
        }
        let base = i64::from_be_bytes(rest[..8].try_into().expect("eight bytes"));
        if base > last {
            break;
        }
        at += keep;
    }
    at
}

/// The offsets `records` hold, first to last (`None`: no batch).
fn covered(records: &Bytes) -> Option<(i64, i64)> {
    let last = last_offset_of(records)?;
    let base = i64::from_be_bytes(records.get(..8)?.try_into().ok()?);
    Some((base, last))
}

/// The offset ranges of aborted transactions' data batches among
/// `records` (a read_committed group never gets them).
fn aborted_ranges(plan: &TxnReadPlan, records: &Bytes) -> Vec<(i64, i64)> {
    if plan.aborted.is_empty() {
        return Vec::new();
    }
    let Ok(batches) = RecordBatch::parse_all(records) else {
        return Vec::new();
    };
    batches
        .iter()
        .filter(|b| b.is_transactional() && !b.is_control())
        .filter(|b| {
            plan.aborted.iter().any(|a| {
                a.producer_id == b.producer_id()
                    && a.first_offset <= b.base_offset()
                    && b.base_offset() <= a.last_offset
            })
        })
        .map(|b| (b.base_offset(), b.last_offset()))
        .collect()
}

/// What of one partition's acquired records is delivered, and what is
/// handed back: undelivered (outside the records sent) or archived as a
/// gap (aborted).
#[derive(Debug, Default, PartialEq)]
struct Split {
    delivered: Vec<Acquired>,
    handed_back: Vec<AckBatch>,
}

fn split(acquired: &[Acquired], covered: Option<(i64, i64)>, aborted: &[(i64, i64)]) -> Split {
    let mut out = Split::default();
    let back = |out: &mut Split, first: i64, last: i64, ack: Ack| {
        if first <= last {
            out.handed_back.push(AckBatch {
                first,
                last,
                types: vec![ack],
            });
        }
    };
    for a in acquired {
        let Some((from, to)) = covered else {
            back(&mut out, a.first, a.last, Ack::Undelivered);
            continue;
        };
        back(&mut out, a.first, a.last.min(from - 1), Ack::Undelivered);
        let mut at = a.first.max(from);
        let end = a.last.min(to);
        for &(af, al) in aborted {
            if al < at || af > end {
                continue;
            }
            if af > at {
                out.delivered.push(Acquired {
                    first: at,
                    last: af - 1,
                    deliveries: a.deliveries,
                });
            }
            back(&mut out, af.max(at), al.min(end), Ack::Gap);
            at = al + 1;
        }
        if at <= end {
            out.delivered.push(Acquired {
                first: at,
                last: end,
                deliveries: a.deliveries,
            });
        }
        back(&mut out, a.first.max(to + 1), a.last, Ack::Undelivered);
    }
    out.handed_back.sort_by_key(|b| b.first);
    out
}

/// Hands back what was acquired but not sent (available again, not
/// counted as delivered) and archives the aborted records sent around.
async fn hand_back(broker: &Broker, who: Who<'_>, back: Vec<(Key, Vec<AckBatch>)>) {
    if back.is_empty() {
        return;
    }
    let acks = back
        .into_iter()
        .map(|((topic, partition), batches)| PartitionAcks {
            topic,
            partition,
            batches,
        })
        .collect();
    let answer = broker
        .meta
        .acknowledge_share(AcknowledgeShare {
            group: who.group.to_string(),
            member: who.member.to_string(),
            acks,
            delivery_limit: KAFKA_RULES.delivery_limit,
            now_ms: broker.world.now_ms(),
        })
        .await;
    match answer {
        Ok(Ok(results)) if results.iter().all(Result::is_ok) => {}
        // Their locks end on their own: the records come back then.
        other => tracing::warn!(?other, "share fetch: handing records back failed"),
    }
}

/// Counts what was handed out.
fn count(broker: &Broker, answers: &[(Key, Answer)]) {
    for (_, a) in answers {
        for r in &a.acquired {
            let records = (r.last - r.first + 1) as u64;
            broker.metrics.share_acquired.inc_by(records);
            if r.deliveries > 1 {
                broker.metrics.share_redelivered.inc_by(records);
            }
        }
    }
}

/// The answer of `key`, added if it has none yet.
fn answer_of(answers: &mut Vec<(Key, Answer)>, key: Key) -> &mut Answer {
    let at = match answers.iter().position(|(k, _)| *k == key) {
        Some(at) => at,
        None => {
            answers.push((key, Answer::default()));
            answers.len() - 1
        }
    };
    &mut answers[at].1
}

fn respond(answers: Vec<(Key, Answer)>, lock_ms: i64) -> ShareFetchResponse {
    let responses = by_topic(answers)
        .into_iter()
        .map(|(topic, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(partition, a)| {
                    let (ack_code, ack_message) = error_fields(a.ack);
                    PartitionData::default()
                        .with_partition_index(partition)
                        .with_error_code(a.error.map_or(0, |e| e.code()))
                        .with_acknowledge_error_code(ack_code)
                        .with_acknowledge_error_message(ack_message)
                        // Never null: librdkafka fails the whole response on one.
                        .with_records(Some(a.records))
                        .with_acquired_records(
                            a.acquired
                                .into_iter()
                                .map(|r| {
                                    AcquiredRecords::default()
                                        .with_first_offset(r.first)
                                        .with_last_offset(r.last)
                                        .with_delivery_count(r.deliveries as i16)
                                })
                                .collect(),
                        )
                })
                .collect();
            ShareFetchableTopicResponse::default()
                .with_topic_id(topic)
                .with_partitions(partitions)
        })
        .collect();
    ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(lock_ms.clamp(0, i32::MAX as i64) as i32)
        .with_responses(responses)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquired(first: i64, last: i64, deliveries: u16) -> Acquired {
        Acquired {
            first,
            last,
            deliveries,
        }
    }

    fn back(first: i64, last: i64, ack: Ack) -> AckBatch {
        AckBatch {
            first,
            last,
            types: vec![ack],
        }
    }

    #[test]
    fn what_is_not_sent_is_handed_back_and_aborted_records_archived() {
        // All sent.
        let whole = split(&[acquired(0, 9, 1)], Some((0, 9)), &[]);
        assert_eq!(whole.delivered, [acquired(0, 9, 1)]);
        assert!(whole.handed_back.is_empty());
        // Batches 0..=4 fit, 5..=9 did not; an acquisition inside a batch.
        let cut = split(&[acquired(2, 9, 2)], Some((0, 4)), &[]);
        assert_eq!(cut.delivered, [acquired(2, 4, 2)]);
        assert_eq!(cut.handed_back, [back(5, 9, Ack::Undelivered)]);
        // Nothing read.
        let none = split(&[acquired(0, 3, 1), acquired(6, 7, 3)], None, &[]);
        assert!(none.delivered.is_empty());
        assert_eq!(
            none.handed_back,
            [back(0, 3, Ack::Undelivered), back(6, 7, Ack::Undelivered)]
        );
        // An aborted transaction's batch in the middle, and one at the end.
        let aborted = split(&[acquired(0, 9, 1)], Some((0, 9)), &[(3, 4), (8, 9)]);
        assert_eq!(aborted.delivered, [acquired(0, 2, 1), acquired(5, 7, 1)]);
        assert_eq!(
            aborted.handed_back,
            [back(3, 4, Ack::Gap), back(8, 9, Ack::Gap)]
        );
        // An aborted batch reaching past the acquired records.
        let partly = split(&[acquired(4, 6, 1)], Some((0, 9)), &[(2, 5)]);
        assert_eq!(partly.delivered, [acquired(6, 6, 1)]);
        assert_eq!(partly.handed_back, [back(4, 5, Ack::Gap)]);
    }

    #[test]
    fn partitions_rotate_with_the_session_epoch() {
        let t = TopicId::from_u128(1);
        let ps = vec![(t, 0), (t, 1), (t, 2)];
        assert_eq!(rotated(ps.clone(), 1), [(t, 1), (t, 2), (t, 0)]);
        assert_eq!(rotated(ps.clone(), 3), ps);
        assert!(rotated(vec![], 5).is_empty());
    }
}
