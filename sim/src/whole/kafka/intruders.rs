//! Clients with only the rights the ACLs give them, beside the super users
//! every other client of the simulation authenticates as (SASL/PLAIN).
//!
//! mallory has no ACLs: she tries what a stolen password would (produce,
//! fetch, delete records, commit a group's offsets, delete the group,
//! create a topic) through any agent. alice produces to the producers'
//! topic while an administrator grants and revokes her WRITE on it
//! (CreateAcls, DeleteAcls); agents see the change within their ACL
//! refresh, so either answer may come near a change.
//!
//! Checked: mallory is refused every time, with an authorization error (or
//! one to retry); none of her records is ever stored (they are not among
//! the values sent, so the audit finds any that landed). alice's produce
//! refused for authorization never lands either; one acknowledged is held
//! to its offset as any producer's.

use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::*;
use floe_protocol::kafka_protocol::protocol::StrBytes;
use floe_protocol::testing::requests;
use tokio::time::{Duration, Instant};

use super::client::{Client, retriable};
use super::produce::{any_codec, encode};
use super::read::fetch_of;
use super::{Books, TOPIC, groups};

/// Whether `code` refuses for want of rights (Kafka's authorization errors).
fn unauthorized(code: i16) -> bool {
    [
        ResponseError::TopicAuthorizationFailed,
        ResponseError::GroupAuthorizationFailed,
        ResponseError::ClusterAuthorizationFailed,
    ]
    .iter()
    .any(|e| e.code() == code)
}

/// mallory, until `end`.
pub(super) async fn mallory(client: Client, partitions: i32, end: Instant) {
    let client = client.authenticating_as("mallory");
    let mut n = 0u64;
    while Instant::now() < end {
        n += 1;
        let (what, partition, pause) = client.shared.with(|w| {
            (
                w.rng_below(6),
                w.rng_below(partitions as u64) as i32,
                Duration::from_millis(500 + w.rng_below(3_000)),
            )
        });
        let (asked, code) = match what {
            0 => ("Produce", mallory_produce(&client, partition, n).await),
            1 => ("Fetch", mallory_fetch(&client, partition).await),
            2 => ("DeleteRecords", mallory_delete(&client, partition).await),
            3 => ("OffsetCommit", mallory_commit(&client, partition).await),
            4 => ("DeleteGroups", mallory_delete_group(&client).await),
            _ => ("CreateTopics", mallory_create(&client).await),
        };
        if let Some(code) = code
            && !unauthorized(code)
            && !retriable(code)
        {
            client.shared.with(|w| {
                w.anomaly(format!(
                    "mallory, with no ACLs, had her {asked} answered {code}, not refused"
                ))
            });
        }
        tokio::time::sleep(pause).await;
    }
}

async fn mallory_produce(client: &Client, partition: i32, n: u64) -> Option<i16> {
    let now_ms = client.shared.with(|w| w.now_ms());
    let value = vec![format!("mallory-{n}")];
    let records = encode(&value, (-1, -1), -1, now_ms, (any_codec_of(client), false));
    let request = requests::produce(TOPIC, partition, records);
    let r: ProduceResponse = client.call(ApiKey::Produce, 9, &request).await.ok()?;
    let answered = r.responses.first()?.partition_responses.first()?;
    Some(answered.error_code)
}

fn any_codec_of(client: &Client) -> floe_protocol::kafka_protocol::records::Compression {
    client.shared.with(any_codec)
}

async fn mallory_fetch(client: &Client, partition: i32) -> Option<i16> {
    let request = fetch_of(TOPIC, partition, 0, false);
    let r: FetchResponse = client.call(ApiKey::Fetch, 12, &request).await.ok()?;
    match r.error_code {
        0 => Some(r.responses.first()?.partitions.first()?.error_code),
        code => Some(code),
    }
}

async fn mallory_delete(client: &Client, partition: i32) -> Option<i16> {
    let request = requests::delete_records(TOPIC, partition, 1);
    let r: DeleteRecordsResponse = client.call(ApiKey::DeleteRecords, 2, &request).await.ok()?;
    Some(r.topics.first()?.partitions.first()?.error_code)
}

async fn mallory_commit(client: &Client, partition: i32) -> Option<i16> {
    let request = super::admin::outside_commit(groups::GROUP, partition, 1 << 40);
    let r: OffsetCommitResponse = client.call(ApiKey::OffsetCommit, 7, &request).await.ok()?;
    Some(r.topics.first()?.partitions.first()?.error_code)
}

async fn mallory_delete_group(client: &Client) -> Option<i16> {
    let group = GroupId(StrBytes::from_static_str(groups::GROUP));
    let request = DeleteGroupsRequest::default().with_groups_names(vec![group]);
    let r: DeleteGroupsResponse = client.call(ApiKey::DeleteGroups, 2, &request).await.ok()?;
    Some(r.results.first()?.error_code)
}

async fn mallory_create(client: &Client) -> Option<i16> {
    use create_topics_request::CreatableTopic;
    let request = CreateTopicsRequest::default()
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("mallory")))
                .with_num_partitions(1)
                .with_replication_factor(-1),
        ])
        .with_timeout_ms(5_000);
    let r: CreateTopicsResponse = client.call(ApiKey::CreateTopics, 5, &request).await.ok()?;
    Some(r.topics.first()?.error_code)
}

/// alice, until `end`: one record at a time, not retried.
pub(super) async fn alice(client: Client, books: Books, partitions: i32, end: Instant) {
    let client = client.authenticating_as("alice");
    let mut n = 0u64;
    while Instant::now() < end {
        n += 1;
        let (partition, pause) = client.shared.with(|w| {
            (
                w.rng_below(partitions as u64) as i32,
                Duration::from_millis(200 + w.rng_below(2_000)),
            )
        });
        let value = format!("alice-{n}");
        let now_ms = client.shared.with(|w| w.now_ms());
        let codec = any_codec_of(&client);
        let records = encode(
            std::slice::from_ref(&value),
            (-1, -1),
            -1,
            now_ms,
            (codec, false),
        );
        // Sent, so maybe stored, until refused for certain.
        books.lock().expect("books").sent.insert(value.clone());
        let request = requests::produce(TOPIC, partition, records);
        let answer: Result<ProduceResponse, _> = client.call(ApiKey::Produce, 9, &request).await;
        let answered = answer.ok().and_then(|r| {
            let p = r.responses.first()?.partition_responses.first()?;
            Some((p.error_code, p.base_offset))
        });
        match answered {
            Some((0, offset)) => {
                let mut books = books.lock().expect("books");
                let end_offset = books.acked_end.entry(partition).or_default();
                *end_offset = (*end_offset).max(offset + 1);
                books.acked.push((partition, offset, vec![value]));
            }
            Some((code, _)) if unauthorized(code) => {
                books.lock().expect("books").sent.remove(&value);
                client.shared.with(|w| w.summary.refused_for_rights += 1);
            }
            Some((code, _)) if !retriable(code) => client
                .shared
                .with(|w| w.anomaly(format!("alice's produce was answered {code}"))),
            _ => {}
        }
        tokio::time::sleep(pause).await;
    }
}

/// The administrator, until `end`: grants alice WRITE on the topic, or
/// takes it back, now and then.
pub(super) async fn grant_and_revoke(client: Client, end: Instant) {
    let mut granted = false;
    while Instant::now() < end {
        let pause = client
            .shared
            .with(|w| Duration::from_secs(5 + w.rng_below(40)));
        tokio::time::sleep(pause).await;
        let done = match granted {
            false => grant(&client).await,
            true => revoke(&client).await,
        };
        if done {
            granted = !granted;
            client
                .shared
                .with(|w| w.log(format!("alice may write: {granted}")));
        }
    }
}

const WRITE: i8 = 4;
const ALLOW: i8 = 3;
const TOPIC_RESOURCE: i8 = 2;
const LITERAL: i8 = 3;

async fn grant(client: &Client) -> bool {
    use create_acls_request::AclCreation;
    let request = CreateAclsRequest::default().with_creations(vec![
        AclCreation::default()
            .with_resource_type(TOPIC_RESOURCE)
            .with_resource_name(StrBytes::from_static_str(TOPIC))
            .with_resource_pattern_type(LITERAL)
            .with_principal(StrBytes::from_static_str("User:alice"))
            .with_host(StrBytes::from_static_str("*"))
            .with_operation(WRITE)
            .with_permission_type(ALLOW),
    ]);
    let answer: Result<CreateAclsResponse, _> = client.call(ApiKey::CreateAcls, 3, &request).await;
    answer.is_ok_and(|r| r.results.iter().all(|c| c.error_code == 0))
}

async fn revoke(client: &Client) -> bool {
    use delete_acls_request::DeleteAclsFilter;
    let request = DeleteAclsRequest::default().with_filters(vec![
        DeleteAclsFilter::default()
            .with_resource_type_filter(TOPIC_RESOURCE)
            .with_resource_name_filter(Some(StrBytes::from_static_str(TOPIC)))
            .with_pattern_type_filter(LITERAL)
            .with_principal_filter(Some(StrBytes::from_static_str("User:alice")))
            .with_host_filter(Some(StrBytes::from_static_str("*")))
            .with_operation(WRITE)
            .with_permission_type(ALLOW),
    ]);
    let answer: Result<DeleteAclsResponse, _> = client.call(ApiKey::DeleteAcls, 3, &request).await;
    answer.is_ok_and(|r| r.filter_results.iter().all(|f| f.error_code == 0))
}
