//! Consumer groups on the classic protocol, as the Java consumer's eager
//! rebalance does it in its essentials: JoinGroup (a first join handed its
//! member id, KIP-394), the leader assigning partitions round-robin in
//! SyncGroup, heartbeats, offsets fetched at each assignment and committed
//! after processing, and a last commit when a rebalance begins (the revoke
//! callback), before rejoining. Members seek back now and then, leave, and
//! go silent past their session (a crash), so the group rebalances under
//! every other fault of the run. Every request goes through any agent.
//!
//! Checked: no two members of one generation are assigned a partition; a
//! member that synced its generation has no commit refused as
//! REBALANCE_IN_PROGRESS (Kafka keeps a commit while members rejoin, the
//! last of the old generation, and refuses one only while the next forms);
//! a committed offset as fetched is the last commit acknowledged before the
//! fetch or one sent after it, never a refused one or one nobody sent; and,
//! at the end, every acknowledged record was processed at least once (a
//! last member drains the group from its committed offsets).

use std::collections::BTreeMap;

use floe_protocol::kafka_protocol::messages::*;
use floe_protocol::kafka_protocol::protocol::StrBytes;
use floe_protocol::{ResponseError, decode_consumer_protocol, encode_consumer_protocol};
use tokio::time::{Duration, Instant};

use super::client::{Client, retriable};
use super::read::fetch_of;
use super::read::fetched;
use super::{Books, TOPIC};

pub(super) const GROUP: &str = "sim-group";
const SESSION_MS: i32 = 10_000;
const REBALANCE_MS: i32 = 20_000;
const HEARTBEAT: Duration = Duration::from_secs(3);

/// A commit sent, on the ledger's clock of moments.
struct Commit {
    sent: u64,
    /// When its acknowledgement arrived.
    acked: Option<u64>,
    /// Refused for certain (not a member, not its generation).
    refused: bool,
    offset: i64,
}

/// What group members were told and did.
#[derive(Default)]
pub(super) struct GroupLedger {
    /// A counter ordering sends and answers.
    moment: u64,
    /// Per generation, the member each partition was assigned to.
    owners: BTreeMap<i32, BTreeMap<i32, String>>,
    /// Per partition, every commit sent.
    commits: BTreeMap<i32, Vec<Commit>>,
    /// How often each (partition, offset) was processed.
    processed: BTreeMap<(i32, i64), u32>,
    pub(super) rebalances: u64,
    /// Per partition, the member that received it last and the moment
    /// (the consumer protocol's check, see `kip848`).
    pub(super) holders: BTreeMap<i32, (String, u64)>,
}

impl GroupLedger {
    pub(super) fn tick(&mut self) -> u64 {
        self.moment += 1;
        self.moment
    }

    /// The group may have been deleted (it had no members): a group of
    /// its name counts its generations from 1 again.
    pub(super) fn forget_generations(&mut self) {
        self.owners.clear();
    }
}

/// A member's place in the group after JoinGroup and SyncGroup.
struct Joined {
    generation: i32,
    partitions: Vec<i32>,
}

impl Joined {
    fn member<'a>(&self, id: &'a str) -> Member<'a> {
        Member {
            group: GROUP,
            id,
            epoch: self.generation,
            classic: true,
        }
    }
}

/// How a member's time in a generation ended.
enum Next {
    /// A rebalance began: rejoin with the same member id.
    Rejoin,
    /// Its membership is gone (expired, or fenced): join as a new member.
    Lost,
    /// It left, or went silent (and is joining again as a new member).
    Gone,
    /// The run's time is up: it left the group.
    Done,
}

/// Group member `me`, until `end`, then it leaves.
pub(super) async fn consume(client: Client, books: Books, partitions: i32, end: Instant) {
    let mut member = String::new();
    while Instant::now() < end {
        let Some(joined) = join(&client, &books, &mut member, partitions).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        match member_loop(&client, &books, &member, &joined, end).await {
            Next::Rejoin => {}
            Next::Lost => member.clear(),
            Next::Gone | Next::Done => {
                leave(&client, &member).await;
                member.clear();
                let pause = client
                    .shared
                    .with(|w| Duration::from_millis(w.rng_below(15_000)));
                tokio::time::sleep(pause).await;
            }
        }
    }
}

/// The last member: joins once every other has gone, and consumes the
/// group's partitions from their committed offsets to their ends.
pub(super) async fn drain(client: Client, books: Books, partitions: i32, ends: BTreeMap<i32, i64>) {
    let mut member = String::new();
    for _ in 0..100 {
        let Some(joined) = join(&client, &books, &mut member, partitions).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut positions = committed(&client, &books, GROUP, &joined.partitions).await;
        for &p in &joined.partitions {
            let end = ends.get(&p).copied().unwrap_or(0);
            for _ in 0..10_000 {
                if positions[&p] >= end {
                    break;
                }
                process(
                    &client,
                    &books,
                    GROUP,
                    p,
                    positions.get_mut(&p).expect("owned"),
                )
                .await;
            }
        }
        let done = commit(&client, &books, &joined.member(&member), &positions).await;
        if joined.partitions.len() == partitions as usize && matches!(done, Committed::Yes) {
            leave(&client, &member).await;
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    client
        .shared
        .with(|w| w.anomaly("the last group member never drained the group".into()));
}

fn group_id() -> GroupId {
    GroupId(StrBytes::from_static_str(GROUP))
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// JoinGroup, then SyncGroup (the leader assigning); `None` to try again.
async fn join(
    client: &Client,
    books: &Books,
    member: &mut String,
    partitions: i32,
) -> Option<Joined> {
    let subscription = consumer_protocol_subscription::ConsumerProtocolSubscription::default()
        .with_topics(vec![StrBytes::from_static_str(TOPIC)]);
    let request = JoinGroupRequest::default()
        .with_group_id(group_id())
        .with_session_timeout_ms(SESSION_MS)
        .with_rebalance_timeout_ms(REBALANCE_MS)
        .with_member_id(str_bytes(member))
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![
            join_group_request::JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str("roundrobin"))
                .with_metadata(encode_consumer_protocol(&subscription, 0)),
        ]);
    let answer: Result<JoinGroupResponse, _> = client.call(ApiKey::JoinGroup, 5, &request).await;
    let Ok(joined) = answer else {
        return None;
    };
    match ResponseError::try_from_code(joined.error_code) {
        None => {}
        Some(ResponseError::MemberIdRequired) => {
            *member = joined.member_id.to_string();
            return None;
        }
        Some(ResponseError::UnknownMemberId) => {
            member.clear();
            return None;
        }
        Some(_) => {
            tokio::time::sleep(Duration::from_millis(200)).await;
            return None;
        }
    }
    *member = joined.member_id.to_string();
    let assignments = match joined.leader == joined.member_id {
        true => assign(&joined.members, partitions),
        false => Vec::new(),
    };
    let request = SyncGroupRequest::default()
        .with_group_id(group_id())
        .with_generation_id(joined.generation_id)
        .with_member_id(str_bytes(member))
        .with_assignments(assignments);
    let answer: Result<SyncGroupResponse, _> = client.call(ApiKey::SyncGroup, 3, &request).await;
    let synced = answer.ok().filter(|s| s.error_code == 0)?;
    let assignment = decode_consumer_protocol::<
        consumer_protocol_assignment::ConsumerProtocolAssignment,
    >(&synced.assignment)
    .unwrap_or_default();
    let owned: Vec<i32> = assignment
        .assigned_partitions
        .iter()
        .flat_map(|t| t.partitions.iter().copied())
        .collect();
    note_assignment(client, books, member, joined.generation_id, &owned);
    Some(Joined {
        generation: joined.generation_id,
        partitions: owned,
    })
}

/// The leader's assignment: partitions round-robin over the members, in
/// member id order.
fn assign(
    members: &[join_group_response::JoinGroupResponseMember],
    partitions: i32,
) -> Vec<sync_group_request::SyncGroupRequestAssignment> {
    let mut ids: Vec<&StrBytes> = members.iter().map(|m| &m.member_id).collect();
    ids.sort();
    ids.iter()
        .enumerate()
        .map(|(n, id)| {
            let mine = (0..partitions).filter(|p| *p as usize % ids.len() == n);
            let assignment = consumer_protocol_assignment::ConsumerProtocolAssignment::default()
                .with_assigned_partitions(vec![
                    consumer_protocol_assignment::TopicPartition::default()
                        .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
                        .with_partitions(mine.collect()),
                ]);
            sync_group_request::SyncGroupRequestAssignment::default()
                .with_member_id((*id).clone())
                .with_assignment(encode_consumer_protocol(&assignment, 0))
        })
        .collect()
}

/// Records a member's assignment in its generation: no partition may have
/// two owners in one generation.
fn note_assignment(client: &Client, books: &Books, member: &str, generation: i32, owned: &[i32]) {
    let mut books = books.lock().expect("books");
    let ledger = books.group(GROUP);
    ledger.rebalances += 1;
    let owners = ledger.owners.entry(generation).or_default();
    for &p in owned {
        match owners.insert(p, member.to_string()) {
            Some(other) if other != member => client.shared.with(|w| {
                w.anomaly(format!(
                    "{GROUP} generation {generation}: partition {p} assigned to {other} and {member}"
                ))
            }),
            _ => {}
        }
    }
}

/// A member's life in one generation: fetch, process, commit, heartbeat.
async fn member_loop(
    client: &Client,
    books: &Books,
    member: &str,
    joined: &Joined,
    end: Instant,
) -> Next {
    let mut positions = committed(client, books, GROUP, &joined.partitions).await;
    let mut next_heartbeat = Instant::now() + HEARTBEAT;
    let mut next_commit = Instant::now() + Duration::from_secs(1);
    loop {
        if Instant::now() >= end {
            commit(client, books, &joined.member(member), &positions).await;
            return Next::Done;
        }
        let (pick, pause, back) = client.shared.with(|w| {
            (
                w.rng_below(1000),
                Duration::from_millis(w.rng_below(300)),
                w.rng_below(20) as i64,
            )
        });
        match pick {
            // Silent past its session: a crash, then a new member.
            0..2 => {
                let silent = Duration::from_millis(SESSION_MS as u64 + 5_000);
                tokio::time::sleep(silent).await;
                return Next::Gone;
            }
            2..4 => {
                commit(client, books, &joined.member(member), &positions).await;
                return Next::Gone;
            }
            // A seek back, as a consumer reprocessing does.
            4..20 => {
                if let Some(position) = positions.values_mut().next() {
                    *position = (*position - back).max(0);
                }
            }
            _ => {}
        }
        let owned: Vec<i32> = positions.keys().copied().collect();
        if !owned.is_empty() {
            let p = owned[pick as usize % owned.len()];
            process(
                client,
                books,
                GROUP,
                p,
                positions.get_mut(&p).expect("owned"),
            )
            .await;
        }
        if Instant::now() >= next_commit {
            next_commit = Instant::now() + Duration::from_secs(1);
            if let Committed::Lost = commit(client, books, &joined.member(member), &positions).await
            {
                return Next::Lost;
            }
        }
        if Instant::now() >= next_heartbeat {
            next_heartbeat = Instant::now() + HEARTBEAT;
            match heartbeat(client, member, joined.generation).await {
                Some(ResponseError::RebalanceInProgress) => {
                    // The revoke callback's commit, then rejoin.
                    return match commit(client, books, &joined.member(member), &positions).await {
                        Committed::Lost => Next::Lost,
                        _ => Next::Rejoin,
                    };
                }
                Some(ResponseError::UnknownMemberId | ResponseError::IllegalGeneration) => {
                    return Next::Lost;
                }
                _ => {}
            }
        }
        tokio::time::sleep(pause).await;
    }
}

/// One fetch of `partition` from `position`, its records processed.
pub(super) async fn process(
    client: &Client,
    books: &Books,
    group: &'static str,
    partition: i32,
    position: &mut i64,
) {
    let request = fetch_of(TOPIC, partition, *position, false);
    let answer: Result<FetchResponse, _> = client.call(ApiKey::Fetch, 12, &request).await;
    let Ok(response) = answer else {
        return;
    };
    let Ok((_, read)) = fetched(&client.shared, &response) else {
        return;
    };
    let mut books = books.lock().expect("books");
    let ledger = books.group(group);
    for (offset, _) in read {
        *ledger.processed.entry((partition, offset)).or_default() += 1;
        *position = offset + 1;
    }
}

/// The group's committed offsets of `partitions` (0 where none), each held
/// to the commits sent.
pub(super) async fn committed(
    client: &Client,
    books: &Books,
    group: &'static str,
    partitions: &[i32],
) -> BTreeMap<i32, i64> {
    use offset_fetch_request::OffsetFetchRequestTopic;
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(group)))
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partition_indexes(partitions.to_vec()),
        ]));
    loop {
        let sent = books.lock().expect("books").group(group).tick();
        let answer: Result<OffsetFetchResponse, _> =
            client.call(ApiKey::OffsetFetch, 7, &request).await;
        let Ok(r) = answer.map_err(drop).and_then(|r| match r.error_code {
            0 => Ok(r),
            _ => Err(()),
        }) else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let answered = r.topics.iter().flat_map(|t| t.partitions.iter());
        let answered: Vec<_> = answered.filter(|p| p.error_code == 0).collect();
        if answered.len() != partitions.len() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let mut books = books.lock().expect("books");
        let ledger = books.group(group);
        let mut positions = BTreeMap::new();
        for p in answered {
            check_committed(
                client,
                (group, ledger),
                p.partition_index,
                p.committed_offset,
                sent,
            );
            positions.insert(p.partition_index, p.committed_offset.max(0));
        }
        return positions;
    }
}

/// A committed offset fetched by a request sent at moment `sent`: the last
/// commit acknowledged before it, or one sent after that (it may have been
/// applied, answered or not), never one refused or never sent.
fn check_committed(
    client: &Client,
    (group, ledger): (&str, &GroupLedger),
    partition: i32,
    offset: i64,
    sent: u64,
) {
    let commits = ledger.commits.get(&partition).map_or(&[][..], |c| &c[..]);
    let floor = commits
        .iter()
        .filter(|c| c.acked.is_some_and(|a| a < sent))
        .max_by_key(|c| c.sent);
    // A commit not refused may land after the floor if it was sent after
    // it, or overlapped it (unanswered, or answered after it was sent).
    let later = commits.iter().filter(|c| {
        !c.refused && floor.is_none_or(|f| c.sent > f.sent || c.acked.is_none_or(|a| a > f.sent))
    });
    let fine = floor.is_some_and(|f| f.offset == offset)
        || (floor.is_none() && offset < 0)
        || later.clone().any(|c| c.offset == offset);
    if !fine {
        client.shared.with(|w| {
            w.anomaly(format!(
                "{group} {TOPIC}-{partition}: committed offset fetched as {offset}; \
                 the last acknowledged commit before the fetch was {:?}, later ones {:?}",
                floor.map(|f| f.offset),
                later.map(|c| c.offset).collect::<Vec<_>>()
            ))
        });
    }
}

/// Who commits: a member of `group` at its generation (classic) or member
/// epoch (the consumer protocol).
pub(super) struct Member<'a> {
    pub(super) group: &'static str,
    pub(super) id: &'a str,
    pub(super) epoch: i32,
    pub(super) classic: bool,
}

impl Member<'_> {
    /// OffsetCommit's version: 9 carries a member epoch (KIP-848).
    fn commit_version(&self) -> i16 {
        if self.classic { 7 } else { 9 }
    }
}

/// How a commit went.
pub(super) enum Committed {
    Yes,
    /// Not answered, or refused with an error to retry.
    Maybe,
    /// Its membership is gone.
    Lost,
}

/// An OffsetCommit of `positions` at the member's generation.
pub(super) async fn commit(
    client: &Client,
    books: &Books,
    member: &Member<'_>,
    positions: &BTreeMap<i32, i64>,
) -> Committed {
    let group = member.group;
    use offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
    if positions.is_empty() {
        return Committed::Yes;
    }
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_static_str(group)))
        .with_generation_id_or_member_epoch(member.epoch)
        .with_member_id(str_bytes(member.id))
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partitions(
                    positions
                        .iter()
                        .map(|(p, offset)| {
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(*p)
                                .with_committed_offset(*offset)
                        })
                        .collect(),
                ),
        ]);
    let sent = commit_sent(books, group, positions);
    let answer: Result<OffsetCommitResponse, _> = client
        .call(ApiKey::OffsetCommit, member.commit_version(), &request)
        .await;
    let Ok(r) = answer else {
        return Committed::Maybe;
    };
    let codes = r.topics.iter().flat_map(|t| t.partitions.iter());
    let code = codes.map(|p| p.error_code).find(|c| *c != 0).unwrap_or(0);
    commit_answered(books, group, positions.keys(), sent, code);
    match ResponseError::try_from_code(code) {
        None => Committed::Yes,
        Some(ResponseError::RebalanceInProgress) if member.classic => {
            client.shared.with(|w| {
                w.anomaly(format!(
                    "{group}: {}'s commit at its generation {} refused \
                     REBALANCE_IN_PROGRESS after it synced",
                    member.id, member.epoch
                ))
            });
            Committed::Maybe
        }
        Some(
            ResponseError::UnknownMemberId
            | ResponseError::IllegalGeneration
            | ResponseError::StaleMemberEpoch
            | ResponseError::FencedMemberEpoch,
        ) => Committed::Lost,
        Some(_) => Committed::Maybe,
    }
}

/// Notes a change of `positions`' committed offsets sent now (a commit,
/// or an admin's reset: offset -1 for a deletion); the moment it was sent.
pub(super) fn commit_sent(
    books: &Books,
    group: &'static str,
    positions: &BTreeMap<i32, i64>,
) -> u64 {
    let mut books = books.lock().expect("books");
    let ledger = books.group(group);
    let sent = ledger.tick();
    for (p, offset) in positions {
        let commit = Commit {
            sent,
            acked: None,
            refused: false,
            offset: *offset,
        };
        ledger.commits.entry(*p).or_default().push(commit);
    }
    sent
}

/// Notes the answer (error `code`) to the change sent at `sent`.
pub(super) fn commit_answered<'a>(
    books: &Books,
    group: &'static str,
    partitions: impl Iterator<Item = &'a i32>,
    sent: u64,
    code: i16,
) {
    let mut books = books.lock().expect("books");
    let ledger = books.group(group);
    let now = ledger.tick();
    let refused = code != 0 && !retriable(code);
    for p in partitions {
        let mine = ledger
            .commits
            .get_mut(p)
            .and_then(|c| c.iter_mut().rfind(|c| c.sent == sent));
        if let Some(c) = mine {
            c.acked = (code == 0).then_some(now);
            c.refused = refused;
        }
    }
}

/// A heartbeat; its error, if any (`None` also when unanswered).
async fn heartbeat(client: &Client, member: &str, generation: i32) -> Option<ResponseError> {
    let request = HeartbeatRequest::default()
        .with_group_id(group_id())
        .with_generation_id(generation)
        .with_member_id(str_bytes(member));
    let answer: Result<HeartbeatResponse, _> = client.call(ApiKey::Heartbeat, 3, &request).await;
    ResponseError::try_from_code(answer.ok()?.error_code)
}

/// LeaveGroup (once; a member that is not heard from expires anyway).
async fn leave(client: &Client, member: &str) {
    if member.is_empty() {
        return;
    }
    let request = LeaveGroupRequest::default()
        .with_group_id(group_id())
        .with_members(vec![
            leave_group_request::MemberIdentity::default().with_member_id(str_bytes(member)),
        ]);
    let _: Result<LeaveGroupResponse, _> = client.call(ApiKey::LeaveGroup, 3, &request).await;
}

/// At the end: every acknowledged record was processed at least once.
pub(super) fn audit_group(client: &Client, books: &Books, group: &'static str) {
    let books = books.lock().expect("books");
    let none = GroupLedger::default();
    let ledger = books.groups.get(group).unwrap_or(&none);
    let mut missing = Vec::new();
    for (partition, base, values) in &books.acked {
        for i in 0..values.len() as i64 {
            if !ledger.processed.contains_key(&(*partition, base + i)) {
                missing.push((*partition, base + i));
            }
        }
    }
    let twice = ledger.processed.values().filter(|n| **n > 1).count();
    client.shared.with(|w| {
        w.summary.group_rebalances += ledger.rebalances;
        w.log(format!(
            "audit: {group} processed {} offsets ({twice} more than once), {} assignments",
            ledger.processed.len(),
            ledger.rebalances
        ));
        if let Some(first) = missing.first() {
            w.anomaly(format!(
                "{group}: {} acknowledged records never processed, the first {first:?}",
                missing.len()
            ));
        }
    });
}
