//! Consumer groups on the consumer protocol (KIP-848), as the Java
//! consumer's in its essentials: one ConsumerGroupHeartbeat at a time
//! carrying the member epoch and the partitions owned; the assignment the
//! coordinator answers reconciled at once (revoked partitions committed and
//! given up, new ones read from their committed offsets), and the next
//! heartbeat says so; FENCED_MEMBER_EPOCH gives everything up and rejoins
//! at epoch 0, UNKNOWN_MEMBER_ID as a new member. Members commit with
//! their epoch (OffsetCommit v9), seek back, leave (epoch -1) and go silent
//! past their session.
//!
//! Checked, besides what every group is held to (see `groups`): a
//! partition is never owned by two live members. Once a member has
//! received a partition, a heartbeat another member sent afterwards still
//! claiming it must not be answered as if it held it (Kafka gives a
//! partition to a new owner only once the old one has given it up or been
//! fenced).

use std::collections::{BTreeMap, BTreeSet};

use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::*;
use floe_protocol::kafka_protocol::protocol::StrBytes;
use tokio::time::{Duration, Instant};
use uuid::Uuid;

use super::client::Client;
use super::groups::{Committed, Member, commit, committed, process};
use super::{Books, TOPIC};

pub(super) const GROUP: &str = "sim-group-848";
/// Kafka's `group.consumer.session.timeout.ms`.
const SESSION: Duration = Duration::from_secs(45);

/// A member's state between heartbeats.
struct State {
    id: String,
    epoch: i32,
    /// Partitions owned, with where reading goes on.
    positions: BTreeMap<i32, i64>,
    /// The next heartbeat carries every field (after one went unanswered,
    /// as the Java client does), so the coordinator answers the whole
    /// assignment again: one it sent may have been lost.
    full: bool,
}

impl State {
    fn member(&self) -> Member<'_> {
        Member {
            group: GROUP,
            id: &self.id,
            epoch: self.epoch,
            classic: false,
        }
    }
}

/// One consumer-protocol member of [`GROUP`] over `topic_id`, until `end`;
/// then it leaves, unless `drain` has it read every partition to `ends`
/// first (the last member: others are gone).
pub(super) async fn consume_848(
    client: Client,
    books: Books,
    topic_id: Uuid,
    end: Instant,
    drain: Option<BTreeMap<i32, i64>>,
) {
    let mut state = State {
        id: String::new(),
        epoch: 0,
        positions: BTreeMap::new(),
        full: true,
    };
    let mut interval = Duration::from_secs(3);
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        if drain.is_some() && Instant::now() >= deadline {
            let never = format!("the last member of {GROUP} never drained it");
            client.shared.with(|w| w.anomaly(never));
            break;
        }
        if let Some(ends) = &drain
            && drained(&state, ends)
        {
            commit(&client, &books, &state.member(), &state.positions).await;
            break;
        }
        if drain.is_none() && Instant::now() >= end {
            break;
        }
        if let Some(every) = heartbeat(&client, &books, &mut state, topic_id).await {
            interval = every;
        }
        if let Some(ends) = &drain {
            let line = format!(
                "{GROUP} draining: {} at epoch {} owns {:?} of ends {ends:?}; {}",
                state.id,
                state.epoch,
                state.positions,
                describe(&client).await
            );
            client.shared.with(|w| w.log(line));
        }
        if drain.is_none() && !live_a_while(&client, &books, &mut state).await {
            continue;
        }
        work_for(&client, &books, &mut state, interval, drain.as_ref()).await;
    }
    leave(&client, &state).await;
}

/// Whether every partition (a key of `ends`) is owned and read to its end.
fn drained(state: &State, ends: &BTreeMap<i32, i64>) -> bool {
    state.positions.len() == ends.len()
        && ends
            .iter()
            .all(|(p, end)| state.positions.get(p).is_some_and(|at| at >= end))
}

/// Now and then a member leaves or goes silent past its session, then
/// joins again as a new member (false: it did, start over).
async fn live_a_while(client: &Client, books: &Books, state: &mut State) -> bool {
    let (pick, back) = client
        .shared
        .with(|w| (w.rng_below(1000), w.rng_below(20) as i64));
    match pick {
        0..15 => {
            commit(client, books, &state.member(), &state.positions).await;
            leave(client, state).await;
        }
        15..25 => tokio::time::sleep(SESSION + Duration::from_secs(5)).await,
        25..100 => {
            if let Some(position) = state.positions.values_mut().next() {
                *position = (*position - back).max(0);
            }
            return true;
        }
        _ => return true,
    }
    state.id.clear();
    state.epoch = 0;
    state.positions.clear();
    false
}

/// Reads and commits until the next heartbeat is due.
async fn work_for(
    client: &Client,
    books: &Books,
    state: &mut State,
    interval: Duration,
    drain: Option<&BTreeMap<i32, i64>>,
) {
    let until = Instant::now() + interval;
    while Instant::now() < until {
        let owned: Vec<i32> = state.positions.keys().copied().collect();
        let pick = client.shared.with(|w| w.rng_below(1 << 20) as usize);
        if let Some(&p) = owned.get(pick % owned.len().max(1)) {
            let position = state.positions.get_mut(&p).expect("owned");
            if drain.is_none_or(|ends| ends.get(&p).is_some_and(|end| *position < *end)) {
                process(client, books, GROUP, p, position).await;
            }
        }
        if let Committed::Lost = commit(client, books, &state.member(), &state.positions).await {
            return;
        }
        let pause = client
            .shared
            .with(|w| Duration::from_millis(w.rng_below(500)));
        tokio::time::sleep(pause).await;
    }
}

/// One heartbeat, its answer reconciled; the heartbeat interval it asks.
async fn heartbeat(
    client: &Client,
    books: &Books,
    state: &mut State,
    topic_id: Uuid,
) -> Option<Duration> {
    use consumer_group_heartbeat_request::TopicPartitions;
    let owned: Vec<i32> = state.positions.keys().copied().collect();
    let mut request = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(GROUP)))
        .with_member_id(StrBytes::from_string(state.id.clone()))
        .with_member_epoch(state.epoch)
        .with_rebalance_timeout_ms(20_000)
        .with_topic_partitions(Some(match owned.is_empty() {
            true => vec![],
            false => vec![
                TopicPartitions::default()
                    .with_topic_id(topic_id)
                    .with_partitions(owned.clone()),
            ],
        }));
    if state.epoch == 0 {
        request = request
            .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_static_str(TOPIC))]));
    }
    let sent = books.lock().expect("books").group(GROUP).tick();
    let answer: Result<ConsumerGroupHeartbeatResponse, _> = client
        .call(ApiKey::ConsumerGroupHeartbeat, 0, &request)
        .await;
    state.full = true;
    let r = answer.ok()?;
    match ResponseError::try_from_code(r.error_code) {
        None => state.full = false,
        Some(ResponseError::FencedMemberEpoch) => {
            state.epoch = 0;
            state.positions.clear();
            return None;
        }
        Some(ResponseError::UnknownMemberId) => {
            state.id.clear();
            state.epoch = 0;
            state.positions.clear();
            return None;
        }
        Some(e) => {
            let line = format!("{GROUP}: heartbeat of {:?} refused: {e:?}", state.id);
            client.shared.with(|w| w.log(line));
            return None;
        }
    }
    check_claims(client, books, &state.id, &owned, sent);
    if let Some(id) = &r.member_id {
        state.id = id.to_string();
    }
    state.epoch = r.member_epoch;
    if let Some(assignment) = r.assignment {
        let given: BTreeSet<i32> = assignment
            .topic_partitions
            .iter()
            .filter(|t| t.topic_id == topic_id)
            .flat_map(|t| t.partitions.iter().copied())
            .collect();
        reconcile(client, books, state, given).await;
    }
    Some(Duration::from_millis(
        r.heartbeat_interval_ms.clamp(100, 10_000) as u64,
    ))
}

/// Takes the assignment answered: commits and gives up what was revoked,
/// reads the committed offsets of what is new.
async fn reconcile(client: &Client, books: &Books, state: &mut State, given: BTreeSet<i32>) {
    let revoked: BTreeMap<i32, i64> = state
        .positions
        .iter()
        .filter(|(p, _)| !given.contains(p))
        .map(|(p, at)| (*p, *at))
        .collect();
    if !revoked.is_empty() {
        commit(client, books, &state.member(), &revoked).await;
        state.positions.retain(|p, _| given.contains(p));
    }
    let new: Vec<i32> = given
        .iter()
        .filter(|p| !state.positions.contains_key(p))
        .copied()
        .collect();
    if new.is_empty() {
        return;
    }
    {
        let mut books = books.lock().expect("books");
        let ledger = books.group(GROUP);
        let at = ledger.tick();
        ledger.rebalances += 1;
        for p in &new {
            ledger.holders.insert(*p, (state.id.clone(), at));
        }
    }
    state
        .positions
        .extend(committed(client, books, GROUP, &new).await);
}

/// A heartbeat sent at `sent` claiming `owned`, answered as if its member
/// held them: no other member may have received one of them before.
fn check_claims(client: &Client, books: &Books, member: &str, owned: &[i32], sent: u64) {
    let mut books = books.lock().expect("books");
    let ledger = books.group(GROUP);
    for p in owned {
        if let Some((other, at)) = ledger.holders.get(p)
            && other != member
            && *at < sent
        {
            client.shared.with(|w| {
                w.anomaly(format!(
                    "{GROUP}: partition {p} given to {other}, then {member}'s heartbeat \
                     claiming it was answered as its owner"
                ))
            });
        }
    }
}

/// Leaves the group (epoch -1), once.
async fn leave(client: &Client, state: &State) {
    if state.id.is_empty() {
        return;
    }
    let request = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(GROUP)))
        .with_member_id(StrBytes::from_string(state.id.clone()))
        .with_member_epoch(-1);
    let _: Result<ConsumerGroupHeartbeatResponse, _> = client
        .call(ApiKey::ConsumerGroupHeartbeat, 0, &request)
        .await;
}

/// The group as ConsumerGroupDescribe tells it, for the trace.
async fn describe(client: &Client) -> String {
    let request = ConsumerGroupDescribeRequest::default()
        .with_group_ids(vec![GroupId(StrBytes::from_static_str(GROUP))]);
    let answer: Result<ConsumerGroupDescribeResponse, _> = client
        .call(ApiKey::ConsumerGroupDescribe, 0, &request)
        .await;
    let Ok(r) = answer else {
        return "not described".into();
    };
    let Some(g) = r.groups.first() else {
        return "no group".into();
    };
    let members: Vec<String> = g
        .members
        .iter()
        .map(|m| {
            let parts = |a: &consumer_group_describe_response::Assignment| -> Vec<i32> {
                a.topic_partitions
                    .iter()
                    .flat_map(|t| t.partitions.clone())
                    .collect()
            };
            format!(
                "{} epoch {} has {:?} target {:?}",
                m.member_id,
                m.member_epoch,
                parts(&m.assignment),
                parts(&m.target_assignment)
            )
        })
        .collect();
    format!(
        "group {} epoch {} assignment epoch {}: {members:?}",
        g.group_state, g.group_epoch, g.assignment_epoch
    )
}
