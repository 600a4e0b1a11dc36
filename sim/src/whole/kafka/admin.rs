//! An administrator's changes to a consumer group's offsets, as
//! `kafka-consumer-groups.sh` sends them: `--reset-offsets --to-earliest`
//! (an OffsetCommit from outside the group: generation -1, no member),
//! `--delete-offsets` (OffsetDelete) and `--delete` (DeleteGroups). Kafka
//! takes them only from a group without members (OffsetDelete: one not
//! subscribed to the topic); refused, they change nothing.
//!
//! Along the run they come now and then, against a group that mostly has
//! members, so mostly refused; before the last member drains the group,
//! one lands. Each is noted in the group's ledger as a commit (a deletion
//! as offset -1), so the checker of fetched committed offsets
//! (`groups::committed`) holds offsets to commits, resets and deletions
//! alone: a refused change that changed anything is found there, by the
//! fetch each change is followed by.

use std::collections::BTreeMap;

use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::*;
use floe_protocol::kafka_protocol::protocol::StrBytes;
use tokio::time::{Duration, Instant};

use super::client::{Client, retriable};
use super::groups::{commit_answered, commit_sent, committed};
use super::{Books, TOPIC};

/// Changes to `group` now and then until `end`.
pub(super) async fn meddle(
    client: Client,
    books: Books,
    group: &'static str,
    partitions: i32,
    end: Instant,
) {
    while Instant::now() < end {
        let pause = client
            .shared
            .with(|w| Duration::from_secs(20 + w.rng_below(60)));
        tokio::time::sleep(pause).await;
        change(&client, &books, group, partitions).await;
    }
}

/// Changes `group` (empty by now) until one lands.
pub(super) async fn reset_empty(
    client: &Client,
    books: &Books,
    group: &'static str,
    partitions: i32,
) {
    for _ in 0..100 {
        if change(client, books, group, partitions).await == Some(0) {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    client.shared.with(|w| {
        w.anomaly(format!(
            "no administrator's change to {group}, without members, ever landed"
        ))
    });
}

/// One change, chosen at random; its error code (`None`: unanswered).
async fn change(
    client: &Client,
    books: &Books,
    group: &'static str,
    partitions: i32,
) -> Option<i16> {
    let (which, partition) = client
        .shared
        .with(|w| (w.rng_below(3), w.rng_below(partitions as u64) as i32));
    let (positions, what): (BTreeMap<i32, i64>, _) = match which {
        0 => ((0..partitions).map(|p| (p, -1)).collect(), "DeleteGroups"),
        1 => ([(partition, -1)].into(), "OffsetDelete"),
        _ => ([(partition, 0)].into(), "a reset to the earliest offset"),
    };
    let sent = commit_sent(books, group, &positions);
    let code = match which {
        0 => delete_group(client, group).await,
        1 => delete_offset(client, group, partition).await,
        _ => reset_to_earliest(client, group, partition).await,
    };
    // Unanswered, done, or a retriable error (which may follow a write
    // that went in: the agent could not learn its outcome): the group may
    // be gone, and a group of its name starts again at generation 1.
    if which == 0 && code.is_none_or(|c| c == 0 || retriable(c)) {
        books
            .lock()
            .expect("books")
            .group(group)
            .forget_generations();
    }
    let code = code?;
    commit_answered(books, group, positions.keys(), sent, code);
    // What the change left, held to the commits and changes sent: one
    // refused that changed anything is found here.
    let changed: Vec<i32> = positions.keys().copied().collect();
    committed(client, books, group, &changed).await;
    use ResponseError as E;
    let told_as_kafka = [
        E::NonEmptyGroup,
        E::GroupSubscribedToTopic,
        E::UnknownMemberId,
        E::IllegalGeneration,
        E::RebalanceInProgress,
        E::GroupIdNotFound,
    ];
    let fine = code == 0 || retriable(code) || told_as_kafka.iter().any(|e| e.code() == code);
    client.shared.with(|w| {
        w.log(format!("admin: {what} of {group} answered {code}"));
        if !fine {
            w.anomaly(format!(
                "{what} of {group} answered {code}, which Kafka does not answer it"
            ));
        }
    });
    Some(code)
}

fn group_id(group: &'static str) -> GroupId {
    GroupId(StrBytes::from_static_str(group))
}

async fn delete_group(client: &Client, group: &'static str) -> Option<i16> {
    let request = DeleteGroupsRequest::default().with_groups_names(vec![group_id(group)]);
    let answer: DeleteGroupsResponse = client.call(ApiKey::DeleteGroups, 2, &request).await.ok()?;
    answer.results.first().map(|r| r.error_code)
}

async fn delete_offset(client: &Client, group: &'static str, partition: i32) -> Option<i16> {
    use offset_delete_request::*;
    let request = OffsetDeleteRequest::default()
        .with_group_id(group_id(group))
        .with_topics(vec![
            OffsetDeleteRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partitions(vec![
                    OffsetDeleteRequestPartition::default().with_partition_index(partition),
                ]),
        ]);
    let answer: OffsetDeleteResponse = client.call(ApiKey::OffsetDelete, 0, &request).await.ok()?;
    let partitions = answer.topics.iter().flat_map(|t| t.partitions.iter());
    let code = partitions.map(|p| p.error_code).find(|c| *c != 0);
    Some(match answer.error_code {
        0 => code.unwrap_or(0),
        code => code,
    })
}

/// An OffsetCommit of `offset` for `partition` from outside `group`
/// (generation -1, no member), as an administrator's tool sends it.
pub(super) fn outside_commit(
    group: &'static str,
    partition: i32,
    offset: i64,
) -> OffsetCommitRequest {
    use offset_commit_request::*;
    OffsetCommitRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default()
                        .with_partition_index(partition)
                        .with_committed_offset(offset),
                ]),
        ])
}

async fn reset_to_earliest(client: &Client, group: &'static str, partition: i32) -> Option<i16> {
    let request = outside_commit(group, partition, 0);
    let answer: OffsetCommitResponse = client.call(ApiKey::OffsetCommit, 7, &request).await.ok()?;
    let partitions = answer.topics.iter().flat_map(|t| t.partitions.iter());
    partitions.map(|p| p.error_code).next()
}
