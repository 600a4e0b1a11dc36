//! The gate's table: every API it has rules for, asked by a principal the
//! ACLs allow (handled whole, its answer untouched), by one they do not
//! (refused with Kafka's error, or what it may not see left out), and by a
//! super user (handled whole).

use std::sync::Arc;

use floe_metastore::acls::{AclBinding, CLUSTER_NAME, pattern, permission};
use floe_metastore::{LocalMetastore, Metastore};
use floe_protocol::kafka_protocol::messages::*;
use floe_protocol::kafka_protocol::protocol::StrBytes;

use super::*;
use crate::config::Config;

const TOPIC: &str = "tpc";
const GROUP: &str = "grp";
const TXN: &str = "txid";
const ALICE: &str = "User:alice";
const ROOT: &str = "User:root";

/// An ACL: resource type, name, operation (allowed to alice, literal).
type Acl = (i8, &'static str, i8);

/// What the denied principal is told.
enum Denied {
    /// This error code, in the answer or in the patched answer.
    Code(i16),
    /// Nothing: the resource is left out of the patched answer.
    Hidden(&'static str),
    /// The connection is closed.
    Close,
    /// Nothing is denied (an open API).
    Never,
}

struct Case {
    request: RequestKind,
    version: i16,
    /// What the handler answers when the request is handled: the patch
    /// works on it.
    answer: ResponseKind,
    /// ACLs that allow the request whole.
    allow: Vec<Acl>,
    /// ACLs present when it is denied: a part of what `allow` gives, or an
    /// operation the one needed implies (READ implies DESCRIBE, so a rule
    /// asking DESCRIBE instead of READ would pass with none).
    partial: Vec<Acl>,
    denied: Denied,
    /// A resource a denied request is handled without.
    removes: Option<&'static str>,
}

fn case(request: RequestKind, answer: ResponseKind, allow: Vec<Acl>, denied: Denied) -> Case {
    Case {
        request,
        version: 9,
        answer,
        allow,
        partial: Vec::new(),
        denied,
        removes: None,
    }
}

impl Case {
    fn version(mut self, version: i16) -> Case {
        self.version = version;
        self
    }

    fn partial(mut self, partial: Vec<Acl>) -> Case {
        self.partial = partial;
        self
    }

    fn removes(mut self, name: &'static str) -> Case {
        self.removes = Some(name);
        self
    }
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn topic_name() -> TopicName {
    TopicName(s(TOPIC))
}

fn group_id() -> GroupId {
    GroupId(s(GROUP))
}

fn txn_id() -> TransactionalId {
    TransactionalId(s(TXN))
}

/// An agent's shared state with ACLs on: `acls` allowed to alice, root a
/// super user.
async fn broker(acls: &[Acl]) -> Broker {
    let meta: Arc<dyn Metastore> = Arc::new(LocalMetastore::in_memory().await.unwrap());
    let bindings: Vec<AclBinding> = acls
        .iter()
        .map(|&(resource_type, name, operation)| AclBinding {
            resource_type,
            resource_name: name.to_string(),
            pattern_type: pattern::LITERAL,
            principal: ALICE.to_string(),
            host: "*".to_string(),
            operation,
            permission: permission::ALLOW,
        })
        .collect();
    if !bindings.is_empty() {
        meta.create_acls(bindings).await.unwrap();
    }
    let config = Config {
        acls: true,
        super_users: vec![ROOT.to_string()],
        allow_everyone_if_no_acl_found: false,
        cache_bytes: bytesize::ByteSize::mib(4),
        cache_block_bytes: bytesize::ByteSize::mib(1),
        cache_ring: false,
        ..Config::default()
    };
    let store: Arc<dyn floe_storage::ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let metrics = Arc::new(crate::metrics::Metrics::new());
    Broker::new(
        &crate::tasks::Tasks::default(),
        crate::world::World::default(),
        config,
        "test-cluster".into(),
        meta,
        store,
        metrics,
    )
    .await
    .unwrap()
}

fn session(broker: &Broker, principal: &str) -> Session {
    let name = principal.strip_prefix("User:").expect("a user");
    let principal = crate::security::sasl::Principal(name.to_string());
    let peer = "127.0.0.1:50000".parse().unwrap();
    Session::new(Some(&principal), peer, None, broker.listeners[0].clone())
}

/// What the gate makes of the case's request for `principal`: the request
/// handled (if it is) and the answer sent.
#[allow(clippy::large_enum_variant)]
enum Outcome {
    Handled(RequestKind, ResponseKind),
    Answered(ResponseKind),
    Closed,
}

async fn outcome(case: &Case, acls: &[Acl], principal: &str) -> Outcome {
    let broker = broker(acls).await;
    let session = session(&broker, principal);
    match gate(&broker, &session, case.request.clone(), case.version).await {
        Gate::Handle(request, patch) => {
            let mut answer = case.answer.clone();
            if let Some(patch) = patch {
                patch(&mut answer);
            }
            Outcome::Handled(request, answer)
        }
        Gate::Answer(answer) => Outcome::Answered(answer),
        Gate::Close => Outcome::Closed,
    }
}

fn has_code(answer: &ResponseKind, code: i16) -> bool {
    let seen = format!("{answer:?}");
    seen.contains(&format!("error_code: {code},"))
        || seen.contains(&format!("error_code: {code} }}"))
}

/// Allowed: handled whole, its answer left as the handler made it.
fn assert_whole(case: &Case, outcome: Outcome, who: &str) {
    let Outcome::Handled(request, answer) = outcome else {
        panic!("{who}: not handled");
    };
    assert_eq!(request, case.request, "{who}: the request was narrowed");
    if let Denied::Code(code) = case.denied {
        assert!(!has_code(&answer, code), "{who}: denied in {answer:?}");
    }
    if let Denied::Hidden(name) = case.denied {
        assert!(format!("{answer:?}").contains(name), "{who}: {name} hidden");
    }
}

async fn check(case: Case) {
    assert_whole(&case, outcome(&case, &case.allow, ALICE).await, "allowed");
    assert_whole(&case, outcome(&case, &[], ROOT).await, "a super user");
    let denied = outcome(&case, &case.partial, ALICE).await;
    let answer = match (&case.denied, denied) {
        (Denied::Never, outcome) => return assert_whole(&case, outcome, "anyone"),
        (Denied::Close, Outcome::Closed) => return,
        (_, Outcome::Closed) => panic!("closed"),
        (Denied::Close, _) => panic!("not closed"),
        (_, Outcome::Answered(answer)) => answer,
        (_, Outcome::Handled(request, answer)) => {
            if let Some(name) = case.removes {
                let handled = format!("{request:?}");
                assert!(!handled.contains(name), "{name} handled: {handled}");
            }
            answer
        }
    };
    let seen = format!("{answer:?}");
    match case.denied {
        Denied::Code(code) => assert!(has_code(&answer, code), "no error {code} in {seen}"),
        Denied::Hidden(name) => assert!(!seen.contains(name), "{name} seen in {seen}"),
        Denied::Never | Denied::Close => unreachable!(),
    }
}

macro_rules! table {
    ($($name:ident => $case:expr;)*) => {
        $(
            #[tokio::test]
            async fn $name() {
                check($case).await;
            }
        )*
    };
}

// ---- requests and answers naming the one topic, group or transactional id ----

fn produce(transactional: bool, acks: i16) -> RequestKind {
    use produce_request::*;
    RequestKind::Produce(
        ProduceRequest::default()
            .with_acks(acks)
            .with_transactional_id(transactional.then(txn_id))
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(topic_name())
                    .with_partition_data(vec![PartitionProduceData::default().with_index(0)]),
            ]),
    )
}

fn fetch() -> RequestKind {
    use fetch_request::*;
    RequestKind::Fetch(FetchRequest::default().with_topics(vec![
            FetchTopic::default()
                .with_topic(topic_name())
                .with_partitions(vec![FetchPartition::default()]),
        ]))
}

/// A Fetch (v13) of a topic by an id no topic has.
fn fetch_by_id() -> RequestKind {
    use fetch_request::*;
    RequestKind::Fetch(FetchRequest::default().with_topics(vec![
            FetchTopic::default()
                .with_topic_id(uuid::Uuid::from_u128(7))
                .with_partitions(vec![FetchPartition::default()]),
        ]))
}

fn list_offsets_answer() -> ResponseKind {
    use list_offsets_response::*;
    ResponseKind::ListOffsets(ListOffsetsResponse::default().with_topics(vec![
            ListOffsetsTopicResponse::default()
                .with_name(topic_name())
                .with_partitions(vec![ListOffsetsPartitionResponse::default()]),
        ]))
}

fn leader_epoch_answer() -> ResponseKind {
    use offset_for_leader_epoch_response::*;
    ResponseKind::OffsetForLeaderEpoch(OffsetForLeaderEpochResponse::default().with_topics(vec![
            OffsetForLeaderTopicResult::default()
                .with_topic(topic_name())
                .with_partitions(vec![EpochEndOffset::default()]),
        ]))
}

fn producers_answer() -> ResponseKind {
    use describe_producers_response::*;
    ResponseKind::DescribeProducers(DescribeProducersResponse::default().with_topics(vec![
            TopicResponse::default()
                .with_name(topic_name())
                .with_partitions(vec![PartitionResponse::default()]),
        ]))
}

fn metadata() -> RequestKind {
    use metadata_request::*;
    RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(topic_name())),
    ])))
}

fn metadata_answer() -> ResponseKind {
    use metadata_response::*;
    ResponseKind::Metadata(MetadataResponse::default().with_topics(vec![
        MetadataResponseTopic::default().with_name(Some(topic_name())),
    ]))
}

fn topic_partitions() -> RequestKind {
    use describe_topic_partitions_request::*;
    RequestKind::DescribeTopicPartitions(
        DescribeTopicPartitionsRequest::default()
            .with_topics(vec![TopicRequest::default().with_name(topic_name())]),
    )
}

fn topic_partitions_answer() -> ResponseKind {
    use describe_topic_partitions_response::*;
    ResponseKind::DescribeTopicPartitions(DescribeTopicPartitionsResponse::default().with_topics(
        vec![DescribeTopicPartitionsResponseTopic::default().with_name(Some(topic_name()))],
    ))
}

fn create_topics() -> RequestKind {
    use create_topics_request::*;
    RequestKind::CreateTopics(
        CreateTopicsRequest::default()
            .with_topics(vec![CreatableTopic::default().with_name(topic_name())]),
    )
}

fn delete_topics() -> RequestKind {
    use delete_topics_request::*;
    RequestKind::DeleteTopics(DeleteTopicsRequest::default().with_topics(vec![
        DeleteTopicState::default().with_name(Some(topic_name())),
    ]))
}

fn create_partitions() -> RequestKind {
    use create_partitions_request::*;
    RequestKind::CreatePartitions(CreatePartitionsRequest::default().with_topics(vec![
        CreatePartitionsTopic::default().with_name(topic_name()),
    ]))
}

fn delete_records() -> RequestKind {
    use delete_records_request::*;
    RequestKind::DeleteRecords(DeleteRecordsRequest::default().with_topics(vec![
            DeleteRecordsTopic::default()
                .with_name(topic_name())
                .with_partitions(vec![DeleteRecordsPartition::default()]),
        ]))
}

/// The ConfigResource types of a topic, a broker and a group.
const TOPIC_RESOURCE: i8 = 2;
const BROKER_RESOURCE: i8 = 4;
const GROUP_RESOURCE: i8 = 32;

fn describe_configs(kind: i8, name: &str) -> RequestKind {
    use describe_configs_request::*;
    RequestKind::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(kind)
            .with_resource_name(s(name)),
    ]))
}

fn alter_configs() -> RequestKind {
    use alter_configs_request::*;
    RequestKind::AlterConfigs(AlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(TOPIC_RESOURCE)
            .with_resource_name(s(TOPIC)),
    ]))
}

fn incremental_alter_configs() -> RequestKind {
    use incremental_alter_configs_request::*;
    RequestKind::IncrementalAlterConfigs(IncrementalAlterConfigsRequest::default().with_resources(
        vec![
            AlterConfigsResource::default()
                .with_resource_type(TOPIC_RESOURCE)
                .with_resource_name(s(TOPIC)),
        ],
    ))
}

fn find_coordinator(key_type: i8, key: &str) -> RequestKind {
    RequestKind::FindCoordinator(
        FindCoordinatorRequest::default()
            .with_key_type(key_type)
            .with_key(s(key))
            .with_coordinator_keys(vec![s(key)]),
    )
}

fn coordinators_answer(key: &str) -> ResponseKind {
    use find_coordinator_response::*;
    ResponseKind::FindCoordinator(
        FindCoordinatorResponse::default()
            .with_coordinators(vec![Coordinator::default().with_key(s(key))]),
    )
}

fn consumer_heartbeat() -> RequestKind {
    RequestKind::ConsumerGroupHeartbeat(
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(group_id())
            .with_subscribed_topic_names(Some(vec![topic_name()])),
    )
}

fn offset_commit() -> RequestKind {
    use offset_commit_request::*;
    RequestKind::OffsetCommit(
        OffsetCommitRequest::default()
            .with_group_id(group_id())
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(topic_name())
                    .with_partitions(vec![OffsetCommitRequestPartition::default()]),
            ]),
    )
}

fn offset_fetch_v7() -> RequestKind {
    use offset_fetch_request::*;
    RequestKind::OffsetFetch(
        OffsetFetchRequest::default()
            .with_group_id(group_id())
            .with_topics(Some(vec![
                OffsetFetchRequestTopic::default()
                    .with_name(topic_name())
                    .with_partition_indexes(vec![0]),
            ])),
    )
}

fn offset_fetch_v7_answer() -> ResponseKind {
    use offset_fetch_response::*;
    ResponseKind::OffsetFetch(OffsetFetchResponse::default().with_topics(vec![
            OffsetFetchResponseTopic::default()
                .with_name(topic_name())
                .with_partitions(vec![OffsetFetchResponsePartition::default()]),
        ]))
}

fn offset_fetch_v8() -> RequestKind {
    use offset_fetch_request::*;
    RequestKind::OffsetFetch(OffsetFetchRequest::default().with_groups(vec![
            OffsetFetchRequestGroup::default()
                .with_group_id(group_id())
                .with_topics(Some(vec![
                    OffsetFetchRequestTopics::default()
                        .with_name(topic_name())
                        .with_partition_indexes(vec![0]),
                ])),
        ]))
}

fn offset_fetch_v8_answer() -> ResponseKind {
    use offset_fetch_response::*;
    ResponseKind::OffsetFetch(OffsetFetchResponse::default().with_groups(vec![
            OffsetFetchResponseGroup::default()
                .with_group_id(group_id())
                .with_topics(vec![
                    OffsetFetchResponseTopics::default()
                        .with_name(topic_name())
                        .with_partitions(vec![OffsetFetchResponsePartitions::default()]),
                ]),
        ]))
}

fn describe_groups_answer() -> ResponseKind {
    ResponseKind::DescribeGroups(DescribeGroupsResponse::default().with_groups(vec![
        describe_groups_response::DescribedGroup::default().with_group_id(group_id()),
    ]))
}

fn consumer_describe_answer() -> ResponseKind {
    ResponseKind::ConsumerGroupDescribe(ConsumerGroupDescribeResponse::default().with_groups(vec![
        consumer_group_describe_response::DescribedGroup::default().with_group_id(group_id()),
    ]))
}

fn share_heartbeat() -> RequestKind {
    RequestKind::ShareGroupHeartbeat(
        ShareGroupHeartbeatRequest::default()
            .with_group_id(group_id())
            .with_subscribed_topic_names(Some(vec![topic_name()])),
    )
}

fn share_describe_answer() -> ResponseKind {
    ResponseKind::ShareGroupDescribe(ShareGroupDescribeResponse::default().with_groups(vec![
        share_group_describe_response::DescribedGroup::default().with_group_id(group_id()),
    ]))
}

/// A ShareFetch of the group, naming a topic id no topic has (the gate
/// leaves unknown ids to the handler).
fn share_fetch() -> RequestKind {
    use share_fetch_request::*;
    RequestKind::ShareFetch(
        ShareFetchRequest::default()
            .with_group_id(Some(group_id()))
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic_id(uuid::Uuid::from_u128(7))
                    .with_partitions(vec![FetchPartition::default()]),
            ]),
    )
}

fn share_acknowledge() -> RequestKind {
    RequestKind::ShareAcknowledge(
        ShareAcknowledgeRequest::default().with_group_id(Some(group_id())),
    )
}

fn share_offsets_answer() -> ResponseKind {
    use describe_share_group_offsets_response::*;
    ResponseKind::DescribeShareGroupOffsets(
        DescribeShareGroupOffsetsResponse::default().with_groups(vec![
            DescribeShareGroupOffsetsResponseGroup::default().with_group_id(group_id()),
        ]),
    )
}

fn alter_share_offsets() -> RequestKind {
    use alter_share_group_offsets_request::*;
    RequestKind::AlterShareGroupOffsets(
        AlterShareGroupOffsetsRequest::default()
            .with_group_id(group_id())
            .with_topics(vec![
                AlterShareGroupOffsetsRequestTopic::default()
                    .with_topic_name(topic_name())
                    .with_partitions(vec![AlterShareGroupOffsetsRequestPartition::default()]),
            ]),
    )
}

fn delete_share_offsets() -> RequestKind {
    use delete_share_group_offsets_request::*;
    RequestKind::DeleteShareGroupOffsets(
        DeleteShareGroupOffsetsRequest::default()
            .with_group_id(group_id())
            .with_topics(vec![
                DeleteShareGroupOffsetsRequestTopic::default().with_topic_name(topic_name()),
            ]),
    )
}

fn list_groups_answer() -> ResponseKind {
    ResponseKind::ListGroups(ListGroupsResponse::default().with_groups(vec![
        list_groups_response::ListedGroup::default().with_group_id(group_id()),
    ]))
}

fn offset_delete() -> RequestKind {
    use offset_delete_request::*;
    RequestKind::OffsetDelete(
        OffsetDeleteRequest::default()
            .with_group_id(group_id())
            .with_topics(vec![
                OffsetDeleteRequestTopic::default()
                    .with_name(topic_name())
                    .with_partitions(vec![OffsetDeleteRequestPartition::default()]),
            ]),
    )
}

fn add_partitions() -> RequestKind {
    use add_partitions_to_txn_request::*;
    RequestKind::AddPartitionsToTxn(
        AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(txn_id())
            .with_v3_and_below_topics(vec![
                AddPartitionsToTxnTopic::default()
                    .with_name(topic_name())
                    .with_partitions(vec![0]),
            ]),
    )
}

fn txn_offset_commit() -> RequestKind {
    use txn_offset_commit_request::*;
    RequestKind::TxnOffsetCommit(
        TxnOffsetCommitRequest::default()
            .with_transactional_id(txn_id())
            .with_group_id(group_id())
            .with_topics(vec![
                TxnOffsetCommitRequestTopic::default()
                    .with_name(topic_name())
                    .with_partitions(vec![TxnOffsetCommitRequestPartition::default()]),
            ]),
    )
}

fn transactions_answer() -> ResponseKind {
    ResponseKind::DescribeTransactions(
        DescribeTransactionsResponse::default().with_transaction_states(vec![
            describe_transactions_response::TransactionState::default()
                .with_transactional_id(txn_id()),
        ]),
    )
}

fn list_transactions_answer() -> ResponseKind {
    ResponseKind::ListTransactions(ListTransactionsResponse::default().with_transaction_states(
        vec![
            list_transactions_response::TransactionState::default().with_transactional_id(txn_id()),
        ],
    ))
}

fn scram_alteration() -> RequestKind {
    use alter_user_scram_credentials_request::*;
    RequestKind::AlterUserScramCredentials(
        AlterUserScramCredentialsRequest::default()
            .with_deletions(vec![ScramCredentialDeletion::default().with_name(s("bob"))]),
    )
}

fn quota_alteration() -> RequestKind {
    use alter_client_quotas_request::*;
    RequestKind::AlterClientQuotas(
        AlterClientQuotasRequest::default().with_entries(vec![EntryData::default()]),
    )
}

fn log_dir_alteration() -> RequestKind {
    use alter_replica_log_dirs_request::*;
    RequestKind::AlterReplicaLogDirs(AlterReplicaLogDirsRequest::default().with_dirs(vec![
        AlterReplicaLogDir::default().with_topics(vec![
                AlterReplicaLogDirTopic::default()
                    .with_name(topic_name())
                    .with_partitions(vec![0]),
            ]),
    ]))
}

fn acl_creation() -> RequestKind {
    RequestKind::CreateAcls(
        CreateAclsRequest::default()
            .with_creations(vec![create_acls_request::AclCreation::default()]),
    )
}

fn acl_deletion() -> RequestKind {
    RequestKind::DeleteAcls(
        DeleteAclsRequest::default()
            .with_filters(vec![delete_acls_request::DeleteAclsFilter::default()]),
    )
}

const T: i8 = rt::TOPIC;
const G: i8 = rt::GROUP;
const X: i8 = rt::TRANSACTIONAL_ID;
const C: i8 = rt::CLUSTER;
use Denied::*;

/// An ACL on the cluster.
fn on_cluster(o: i8) -> Vec<Acl> {
    vec![(C, CLUSTER_NAME, o)]
}

fn a<R: Default>(kind: fn(R) -> RequestKind) -> RequestKind {
    kind(R::default())
}

fn r<R: Default>(kind: fn(R) -> ResponseKind) -> ResponseKind {
    kind(R::default())
}

table! {
    // Open before and around authentication.
    api_versions_is_open => case(a(RequestKind::ApiVersions), r(ResponseKind::ApiVersions), vec![], Never);
    sasl_handshake_is_open => case(a(RequestKind::SaslHandshake), r(ResponseKind::SaslHandshake), vec![], Never);
    telemetry_is_open => case(a(RequestKind::GetTelemetrySubscriptions), r(ResponseKind::GetTelemetrySubscriptions), vec![], Never);
    describe_cluster_is_open => case(a(RequestKind::DescribeCluster), r(ResponseKind::DescribeCluster), vec![], Never);

    // Topics: data.
    produce_needs_write_on_the_topic =>
        case(produce(false, -1), r(ResponseKind::Produce), vec![(T, TOPIC, op::WRITE)], Code(TOPIC_DENIED))
            .partial(vec![(T, TOPIC, op::DESCRIBE)]).removes(TOPIC);
    a_transactional_produce_needs_write_on_its_id =>
        case(produce(true, -1), r(ResponseKind::Produce), vec![(X, TXN, op::WRITE), (T, TOPIC, op::WRITE)], Code(TXN_DENIED))
            .partial(vec![(T, TOPIC, op::WRITE)]);
    a_transactional_produce_without_acks_is_closed =>
        case(produce(true, 0), r(ResponseKind::Produce), vec![(X, TXN, op::WRITE), (T, TOPIC, op::WRITE)], Close);
    fetch_needs_read =>
        case(fetch(), r(ResponseKind::Fetch), vec![(T, TOPIC, op::READ)], Code(TOPIC_DENIED)).version(12)
            .partial(vec![(T, TOPIC, op::DESCRIBE)]).removes(TOPIC);
    list_offsets_needs_describe =>
        case(a(RequestKind::ListOffsets), list_offsets_answer(), vec![(T, TOPIC, op::DESCRIBE)], Code(TOPIC_DENIED));
    offset_for_leader_epoch_needs_describe =>
        case(a(RequestKind::OffsetForLeaderEpoch), leader_epoch_answer(), vec![(T, TOPIC, op::DESCRIBE)], Code(TOPIC_DENIED));
    describe_producers_needs_read =>
        case(a(RequestKind::DescribeProducers), producers_answer(), vec![(T, TOPIC, op::READ)], Code(TOPIC_DENIED))
            .partial(vec![(T, TOPIC, op::DESCRIBE)]);

    // Topics: metadata.
    metadata_by_name_needs_describe =>
        case(metadata(), metadata_answer(), vec![(T, TOPIC, op::DESCRIBE)], Code(TOPIC_DENIED));
    metadata_of_all_topics_lists_only_the_described =>
        case(RequestKind::Metadata(MetadataRequest::default().with_topics(None)), metadata_answer(), vec![(T, TOPIC, op::DESCRIBE)], Hidden(TOPIC));
    metadata_v0_of_all_topics_lists_only_the_described =>
        case(RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![]))), metadata_answer(), vec![(T, TOPIC, op::DESCRIBE)], Hidden(TOPIC))
            .version(0);
    a_fetch_by_an_unknown_topic_id_is_the_handler_s_to_answer =>
        case(fetch_by_id(), r(ResponseKind::Fetch), vec![], Never).version(13);
    delete_topics_by_name_needs_delete =>
        case(RequestKind::DeleteTopics(DeleteTopicsRequest::default().with_topic_names(vec![topic_name()])), r(ResponseKind::DeleteTopics), vec![(T, TOPIC, op::DELETE)], Code(TOPIC_DENIED))
            .version(5).partial(vec![(T, TOPIC, op::DESCRIBE)]).removes(TOPIC);
    find_coordinator_v3_needs_describe_on_the_transactional_id =>
        case(find_coordinator(1, TXN), r(ResponseKind::FindCoordinator), vec![(X, TXN, op::DESCRIBE)], Code(TXN_DENIED)).version(3);
    offset_fetch_of_all_offsets_lists_only_the_described_topics =>
        case(RequestKind::OffsetFetch(OffsetFetchRequest::default().with_group_id(group_id()).with_topics(None)), offset_fetch_v7_answer(), vec![(G, GROUP, op::DESCRIBE), (T, TOPIC, op::DESCRIBE)], Hidden(TOPIC))
            .version(7).partial(vec![(G, GROUP, op::DESCRIBE)]);
    describe_topic_partitions_needs_describe =>
        case(topic_partitions(), topic_partitions_answer(), vec![(T, TOPIC, op::DESCRIBE)], Code(TOPIC_DENIED));
    create_topics_needs_create_on_the_topic =>
        case(create_topics(), r(ResponseKind::CreateTopics), vec![(T, TOPIC, op::CREATE)], Code(TOPIC_DENIED))
            .partial(vec![(T, TOPIC, op::DESCRIBE)]).removes(TOPIC);
    create_topics_with_create_on_the_cluster =>
        case(create_topics(), r(ResponseKind::CreateTopics), on_cluster(op::CREATE), Code(TOPIC_DENIED));
    delete_topics_needs_delete =>
        case(delete_topics(), r(ResponseKind::DeleteTopics), vec![(T, TOPIC, op::DELETE)], Code(TOPIC_DENIED)).version(6)
            .partial(vec![(T, TOPIC, op::DESCRIBE)]).removes(TOPIC);
    create_partitions_needs_alter =>
        case(create_partitions(), r(ResponseKind::CreatePartitions), vec![(T, TOPIC, op::ALTER)], Code(TOPIC_DENIED))
            .partial(vec![(T, TOPIC, op::DESCRIBE)]).removes(TOPIC);
    delete_records_needs_delete =>
        case(delete_records(), r(ResponseKind::DeleteRecords), vec![(T, TOPIC, op::DELETE)], Code(TOPIC_DENIED))
            .partial(vec![(T, TOPIC, op::DESCRIBE)]).removes(TOPIC);

    // Configs.
    topic_configs_need_describe_configs_on_the_topic =>
        case(describe_configs(TOPIC_RESOURCE, TOPIC), r(ResponseKind::DescribeConfigs), vec![(T, TOPIC, op::DESCRIBE_CONFIGS)], Code(TOPIC_DENIED))
            .partial(vec![(T, TOPIC, op::DESCRIBE)]).removes(TOPIC);
    broker_configs_need_describe_configs_on_the_cluster =>
        case(describe_configs(BROKER_RESOURCE, "0"), r(ResponseKind::DescribeConfigs), on_cluster(op::DESCRIBE_CONFIGS), Code(CLUSTER_DENIED));
    group_configs_need_describe_configs_on_the_group =>
        case(describe_configs(GROUP_RESOURCE, GROUP), r(ResponseKind::DescribeConfigs), vec![(G, GROUP, op::DESCRIBE_CONFIGS)], Code(GROUP_DENIED))
            .partial(vec![(G, GROUP, op::DESCRIBE)]).removes(GROUP);
    alter_configs_needs_alter_configs =>
        case(alter_configs(), r(ResponseKind::AlterConfigs), vec![(T, TOPIC, op::ALTER_CONFIGS)], Code(TOPIC_DENIED))
            .partial(vec![(T, TOPIC, op::DESCRIBE_CONFIGS)]).removes(TOPIC);
    incremental_alter_configs_needs_alter_configs =>
        case(incremental_alter_configs(), r(ResponseKind::IncrementalAlterConfigs), vec![(T, TOPIC, op::ALTER_CONFIGS)], Code(TOPIC_DENIED))
            .partial(vec![(T, TOPIC, op::DESCRIBE_CONFIGS)]).removes(TOPIC);

    // Groups.
    find_coordinator_v3_needs_describe_on_the_group =>
        case(find_coordinator(0, GROUP), r(ResponseKind::FindCoordinator), vec![(G, GROUP, op::DESCRIBE)], Code(GROUP_DENIED)).version(3);
    find_coordinator_needs_describe_on_each_group =>
        case(find_coordinator(0, GROUP), coordinators_answer(GROUP), vec![(G, GROUP, op::DESCRIBE)], Code(GROUP_DENIED)).version(4);
    find_coordinator_needs_describe_on_each_transactional_id =>
        case(find_coordinator(1, TXN), coordinators_answer(TXN), vec![(X, TXN, op::DESCRIBE)], Code(TXN_DENIED)).version(4);
    join_group_needs_read =>
        case(RequestKind::JoinGroup(JoinGroupRequest::default().with_group_id(group_id())), r(ResponseKind::JoinGroup), vec![(G, GROUP, op::READ)], Code(GROUP_DENIED))
            .partial(vec![(G, GROUP, op::DESCRIBE)]);
    sync_group_needs_read =>
        case(RequestKind::SyncGroup(SyncGroupRequest::default().with_group_id(group_id())), r(ResponseKind::SyncGroup), vec![(G, GROUP, op::READ)], Code(GROUP_DENIED))
            .partial(vec![(G, GROUP, op::DESCRIBE)]);
    heartbeat_needs_read =>
        case(RequestKind::Heartbeat(HeartbeatRequest::default().with_group_id(group_id())), r(ResponseKind::Heartbeat), vec![(G, GROUP, op::READ)], Code(GROUP_DENIED))
            .partial(vec![(G, GROUP, op::DESCRIBE)]);
    leave_group_needs_read =>
        case(RequestKind::LeaveGroup(LeaveGroupRequest::default().with_group_id(group_id())), r(ResponseKind::LeaveGroup), vec![(G, GROUP, op::READ)], Code(GROUP_DENIED))
            .partial(vec![(G, GROUP, op::DESCRIBE)]);
    consumer_heartbeat_needs_read_on_the_group =>
        case(consumer_heartbeat(), r(ResponseKind::ConsumerGroupHeartbeat), vec![(G, GROUP, op::READ), (T, TOPIC, op::DESCRIBE)], Code(GROUP_DENIED));
    consumer_heartbeat_needs_describe_on_subscribed_topics =>
        case(consumer_heartbeat(), r(ResponseKind::ConsumerGroupHeartbeat), vec![(G, GROUP, op::READ), (T, TOPIC, op::DESCRIBE)], Code(TOPIC_DENIED))
            .partial(vec![(G, GROUP, op::READ)]);
    offset_commit_needs_read_on_the_group =>
        case(offset_commit(), r(ResponseKind::OffsetCommit), vec![(G, GROUP, op::READ), (T, TOPIC, op::READ)], Code(GROUP_DENIED));
    offset_commit_needs_read_on_each_topic =>
        case(offset_commit(), r(ResponseKind::OffsetCommit), vec![(G, GROUP, op::READ), (T, TOPIC, op::READ)], Code(TOPIC_DENIED))
            .partial(vec![(G, GROUP, op::READ)]).removes(TOPIC);
    offset_fetch_v7_needs_describe_on_the_group =>
        case(offset_fetch_v7(), offset_fetch_v7_answer(), vec![(G, GROUP, op::DESCRIBE), (T, TOPIC, op::DESCRIBE)], Code(GROUP_DENIED)).version(7);
    offset_fetch_v7_needs_describe_on_each_topic =>
        case(offset_fetch_v7(), offset_fetch_v7_answer(), vec![(G, GROUP, op::DESCRIBE), (T, TOPIC, op::DESCRIBE)], Code(TOPIC_DENIED))
            .version(7).partial(vec![(G, GROUP, op::DESCRIBE)]);
    offset_fetch_v8_needs_describe_on_each_group =>
        case(offset_fetch_v8(), offset_fetch_v8_answer(), vec![(G, GROUP, op::DESCRIBE), (T, TOPIC, op::DESCRIBE)], Code(GROUP_DENIED)).version(8);
    offset_fetch_v8_needs_describe_on_each_topic =>
        case(offset_fetch_v8(), offset_fetch_v8_answer(), vec![(G, GROUP, op::DESCRIBE), (T, TOPIC, op::DESCRIBE)], Code(TOPIC_DENIED))
            .version(8).partial(vec![(G, GROUP, op::DESCRIBE)]);
    describe_groups_needs_describe =>
        case(a(RequestKind::DescribeGroups), describe_groups_answer(), vec![(G, GROUP, op::DESCRIBE)], Code(GROUP_DENIED));
    consumer_group_describe_needs_describe =>
        case(a(RequestKind::ConsumerGroupDescribe), consumer_describe_answer(), vec![(G, GROUP, op::DESCRIBE)], Code(GROUP_DENIED));
    list_groups_lists_only_the_described =>
        case(a(RequestKind::ListGroups), list_groups_answer(), vec![(G, GROUP, op::DESCRIBE)], Hidden(GROUP));
    list_groups_lists_all_with_describe_on_the_cluster =>
        case(a(RequestKind::ListGroups), list_groups_answer(), on_cluster(op::DESCRIBE), Hidden(GROUP));
    delete_groups_needs_delete =>
        case(RequestKind::DeleteGroups(DeleteGroupsRequest::default().with_groups_names(vec![group_id()])), r(ResponseKind::DeleteGroups), vec![(G, GROUP, op::DELETE)], Code(GROUP_DENIED))
            .partial(vec![(G, GROUP, op::DESCRIBE)]).removes(GROUP);
    offset_delete_needs_delete_on_the_group =>
        case(offset_delete(), r(ResponseKind::OffsetDelete), vec![(G, GROUP, op::DELETE), (T, TOPIC, op::READ)], Code(GROUP_DENIED));
    offset_delete_needs_read_on_each_topic =>
        case(offset_delete(), r(ResponseKind::OffsetDelete), vec![(G, GROUP, op::DELETE), (T, TOPIC, op::READ)], Code(TOPIC_DENIED))
            .partial(vec![(G, GROUP, op::DELETE)]).removes(TOPIC);

    // Share groups (KIP-932).
    share_heartbeat_needs_read_on_the_group =>
        case(share_heartbeat(), r(ResponseKind::ShareGroupHeartbeat), vec![(G, GROUP, op::READ), (T, TOPIC, op::DESCRIBE)], Code(GROUP_DENIED))
            .version(1).partial(vec![(G, GROUP, op::DESCRIBE), (T, TOPIC, op::DESCRIBE)]);
    share_heartbeat_needs_describe_on_subscribed_topics =>
        case(share_heartbeat(), r(ResponseKind::ShareGroupHeartbeat), vec![(G, GROUP, op::READ), (T, TOPIC, op::DESCRIBE)], Code(TOPIC_DENIED))
            .version(1).partial(vec![(G, GROUP, op::READ)]);
    share_group_describe_needs_describe =>
        case(a(RequestKind::ShareGroupDescribe), share_describe_answer(), vec![(G, GROUP, op::DESCRIBE)], Code(GROUP_DENIED)).version(1);
    share_fetch_needs_read_on_the_group =>
        case(share_fetch(), r(ResponseKind::ShareFetch), vec![(G, GROUP, op::READ)], Code(GROUP_DENIED))
            .version(1).partial(vec![(G, GROUP, op::DESCRIBE)]);
    share_acknowledge_needs_read_on_the_group =>
        case(share_acknowledge(), r(ResponseKind::ShareAcknowledge), vec![(G, GROUP, op::READ)], Code(GROUP_DENIED))
            .version(1).partial(vec![(G, GROUP, op::DESCRIBE)]);
    describe_share_offsets_needs_describe =>
        case(a(RequestKind::DescribeShareGroupOffsets), share_offsets_answer(), vec![(G, GROUP, op::DESCRIBE)], Code(GROUP_DENIED)).version(0);
    alter_share_offsets_needs_read_on_the_group =>
        case(alter_share_offsets(), r(ResponseKind::AlterShareGroupOffsets), vec![(G, GROUP, op::READ), (T, TOPIC, op::READ)], Code(GROUP_DENIED))
            .version(0).partial(vec![(G, GROUP, op::DESCRIBE), (T, TOPIC, op::READ)]);
    alter_share_offsets_needs_read_on_each_topic =>
        case(alter_share_offsets(), r(ResponseKind::AlterShareGroupOffsets), vec![(G, GROUP, op::READ), (T, TOPIC, op::READ)], Code(TOPIC_DENIED))
            .version(0).partial(vec![(G, GROUP, op::READ), (T, TOPIC, op::DESCRIBE)]).removes(TOPIC);
    delete_share_offsets_needs_delete_on_the_group =>
        case(delete_share_offsets(), r(ResponseKind::DeleteShareGroupOffsets), vec![(G, GROUP, op::DELETE), (T, TOPIC, op::READ)], Code(GROUP_DENIED))
            .version(0).partial(vec![(G, GROUP, op::READ), (T, TOPIC, op::READ)]);
    delete_share_offsets_needs_read_on_each_topic =>
        case(delete_share_offsets(), r(ResponseKind::DeleteShareGroupOffsets), vec![(G, GROUP, op::DELETE), (T, TOPIC, op::READ)], Code(TOPIC_DENIED))
            .version(0).partial(vec![(G, GROUP, op::DELETE)]).removes(TOPIC);

    // Producers and transactions.
    init_producer_id_needs_write_on_its_transactional_id =>
        case(RequestKind::InitProducerId(InitProducerIdRequest::default().with_transactional_id(Some(txn_id()))), r(ResponseKind::InitProducerId), vec![(X, TXN, op::WRITE)], Code(TXN_DENIED))
            .partial(vec![(X, TXN, op::DESCRIBE)]);
    idempotence_needs_idempotent_write_on_the_cluster =>
        case(RequestKind::InitProducerId(InitProducerIdRequest::default().with_transactional_id(None)), r(ResponseKind::InitProducerId), on_cluster(op::IDEMPOTENT_WRITE), Code(CLUSTER_DENIED))
            .partial(on_cluster(op::ALTER));
    idempotence_with_write_on_some_topic =>
        case(RequestKind::InitProducerId(InitProducerIdRequest::default().with_transactional_id(None)), r(ResponseKind::InitProducerId), vec![(T, TOPIC, op::WRITE)], Code(CLUSTER_DENIED));
    add_partitions_needs_write_on_the_transactional_id =>
        case(add_partitions(), r(ResponseKind::AddPartitionsToTxn), vec![(X, TXN, op::WRITE), (T, TOPIC, op::WRITE)], Code(TXN_DENIED))
            .version(3).partial(vec![(X, TXN, op::DESCRIBE), (T, TOPIC, op::WRITE)]);
    add_partitions_needs_write_on_each_topic =>
        case(add_partitions(), r(ResponseKind::AddPartitionsToTxn), vec![(X, TXN, op::WRITE), (T, TOPIC, op::WRITE)], Code(TOPIC_DENIED))
            .version(3).partial(vec![(X, TXN, op::WRITE), (T, TOPIC, op::DESCRIBE)]);
    add_offsets_needs_write_on_the_transactional_id =>
        case(RequestKind::AddOffsetsToTxn(AddOffsetsToTxnRequest::default().with_transactional_id(txn_id()).with_group_id(group_id())), r(ResponseKind::AddOffsetsToTxn), vec![(X, TXN, op::WRITE), (G, GROUP, op::READ)], Code(TXN_DENIED));
    add_offsets_needs_read_on_the_group =>
        case(RequestKind::AddOffsetsToTxn(AddOffsetsToTxnRequest::default().with_transactional_id(txn_id()).with_group_id(group_id())), r(ResponseKind::AddOffsetsToTxn), vec![(X, TXN, op::WRITE), (G, GROUP, op::READ)], Code(GROUP_DENIED))
            .partial(vec![(X, TXN, op::WRITE)]);
    txn_offset_commit_needs_write_on_the_transactional_id =>
        case(txn_offset_commit(), r(ResponseKind::TxnOffsetCommit), vec![(X, TXN, op::WRITE), (G, GROUP, op::READ), (T, TOPIC, op::READ)], Code(TXN_DENIED));
    txn_offset_commit_needs_read_on_the_group =>
        case(txn_offset_commit(), r(ResponseKind::TxnOffsetCommit), vec![(X, TXN, op::WRITE), (G, GROUP, op::READ), (T, TOPIC, op::READ)], Code(GROUP_DENIED))
            .partial(vec![(X, TXN, op::WRITE), (T, TOPIC, op::READ)]);
    txn_offset_commit_needs_read_on_each_topic =>
        case(txn_offset_commit(), r(ResponseKind::TxnOffsetCommit), vec![(X, TXN, op::WRITE), (G, GROUP, op::READ), (T, TOPIC, op::READ)], Code(TOPIC_DENIED))
            .partial(vec![(X, TXN, op::WRITE), (G, GROUP, op::READ)]).removes(TOPIC);
    describe_transactions_needs_describe =>
        case(a(RequestKind::DescribeTransactions), transactions_answer(), vec![(X, TXN, op::DESCRIBE)], Code(TXN_DENIED));
    list_transactions_lists_only_the_described =>
        case(a(RequestKind::ListTransactions), list_transactions_answer(), vec![(X, TXN, op::DESCRIBE)], Hidden(TXN));
    end_txn_needs_write =>
        case(RequestKind::EndTxn(EndTxnRequest::default().with_transactional_id(txn_id())), r(ResponseKind::EndTxn), vec![(X, TXN, op::WRITE)], Code(TXN_DENIED))
            .partial(vec![(X, TXN, op::DESCRIBE)]);

    // The cluster.
    describe_log_dirs_needs_describe =>
        case(a(RequestKind::DescribeLogDirs), r(ResponseKind::DescribeLogDirs), on_cluster(op::DESCRIBE), Code(CLUSTER_DENIED));
    describe_scram_users_needs_describe =>
        case(a(RequestKind::DescribeUserScramCredentials), r(ResponseKind::DescribeUserScramCredentials), on_cluster(op::DESCRIBE), Code(CLUSTER_DENIED));
    alter_scram_users_needs_alter =>
        case(scram_alteration(), r(ResponseKind::AlterUserScramCredentials), on_cluster(op::ALTER), Code(CLUSTER_DENIED))
            .partial(on_cluster(op::DESCRIBE));
    describe_client_quotas_needs_describe_configs =>
        case(a(RequestKind::DescribeClientQuotas), r(ResponseKind::DescribeClientQuotas), on_cluster(op::DESCRIBE_CONFIGS), Code(CLUSTER_DENIED));
    alter_client_quotas_needs_alter_configs =>
        case(quota_alteration(), r(ResponseKind::AlterClientQuotas), on_cluster(op::ALTER_CONFIGS), Code(CLUSTER_DENIED))
            .partial(on_cluster(op::DESCRIBE_CONFIGS));
    list_config_resources_needs_describe_configs =>
        case(a(RequestKind::ListConfigResources), r(ResponseKind::ListConfigResources), on_cluster(op::DESCRIBE_CONFIGS), Code(CLUSTER_DENIED));
    elect_leaders_needs_alter =>
        case(a(RequestKind::ElectLeaders), r(ResponseKind::ElectLeaders), on_cluster(op::ALTER), Code(CLUSTER_DENIED))
            .partial(on_cluster(op::DESCRIBE));
    alter_reassignments_needs_alter =>
        case(a(RequestKind::AlterPartitionReassignments), r(ResponseKind::AlterPartitionReassignments), on_cluster(op::ALTER), Code(CLUSTER_DENIED))
            .partial(on_cluster(op::DESCRIBE));
    list_reassignments_needs_describe =>
        case(a(RequestKind::ListPartitionReassignments), r(ResponseKind::ListPartitionReassignments), on_cluster(op::DESCRIBE), Code(CLUSTER_DENIED));
    alter_replica_log_dirs_needs_alter =>
        case(log_dir_alteration(), r(ResponseKind::AlterReplicaLogDirs), on_cluster(op::ALTER), Code(CLUSTER_DENIED))
            .partial(on_cluster(op::DESCRIBE));
    describe_quorum_needs_describe =>
        case(a(RequestKind::DescribeQuorum), r(ResponseKind::DescribeQuorum), on_cluster(op::DESCRIBE), Code(CLUSTER_DENIED));
    describe_acls_needs_describe =>
        case(a(RequestKind::DescribeAcls), r(ResponseKind::DescribeAcls), on_cluster(op::DESCRIBE), Code(CLUSTER_DENIED));
    create_acls_needs_alter =>
        case(acl_creation(), r(ResponseKind::CreateAcls), on_cluster(op::ALTER), Code(CLUSTER_DENIED))
            .partial(on_cluster(op::DESCRIBE));
    delete_acls_needs_alter =>
        case(acl_deletion(), r(ResponseKind::DeleteAcls), on_cluster(op::ALTER), Code(CLUSTER_DENIED))
            .partial(on_cluster(op::DESCRIBE));
    an_api_without_rules_needs_all_on_the_cluster =>
        case(a(RequestKind::WriteTxnMarkers), r(ResponseKind::WriteTxnMarkers), on_cluster(op::ALL), Close)
            .partial(on_cluster(op::ALTER));
}

/// DescribeCluster is open; the operations it reports are those allowed.
#[tokio::test]
async fn describe_cluster_reports_the_cluster_operations_allowed() {
    let request = RequestKind::DescribeCluster(
        DescribeClusterRequest::default().with_include_cluster_authorized_operations(true),
    );
    let asked = case(request, r(ResponseKind::DescribeCluster), vec![], Never);
    for (acls, expected) in [(vec![], 0), (on_cluster(op::DESCRIBE), 1 << op::DESCRIBE)] {
        let Outcome::Handled(_, ResponseKind::DescribeCluster(answer)) =
            outcome(&asked, &acls, ALICE).await
        else {
            panic!("not handled");
        };
        assert_eq!(answer.cluster_authorized_operations, expected);
    }
}

/// Metadata reports the operations allowed on each topic and on the
/// cluster, when asked.
#[tokio::test]
async fn metadata_reports_the_operations_allowed() {
    let MetadataRequest { topics, .. } = match metadata() {
        RequestKind::Metadata(m) => m,
        _ => unreachable!(),
    };
    let request = RequestKind::Metadata(
        MetadataRequest::default()
            .with_topics(topics)
            .with_include_topic_authorized_operations(true)
            .with_include_cluster_authorized_operations(true),
    );
    let asked = case(request, metadata_answer(), vec![], Never);
    let acls = [
        (T, TOPIC, op::DESCRIBE),
        (T, TOPIC, op::READ),
        (C, CLUSTER_NAME, op::ALTER),
    ];
    let Outcome::Handled(_, ResponseKind::Metadata(answer)) = outcome(&asked, &acls, ALICE).await
    else {
        panic!("not handled");
    };
    assert_eq!(
        answer.topics[0].topic_authorized_operations,
        (1 << op::DESCRIBE) | (1 << op::READ)
    );
    // ALTER implies DESCRIBE, as in Kafka.
    assert_eq!(
        answer.cluster_authorized_operations,
        (1 << op::ALTER) | (1 << op::DESCRIBE)
    );
}
