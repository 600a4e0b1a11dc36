//! A fuzz harness, as property tests, for everything an agent decodes from
//! the network: frames, every request of every served API and version,
//! produced record batches, and (for the background jobs that read records)
//! compressed payloads.
//!
//! Inputs are valid requests mutated with structure in mind (bytes flipped,
//! cut short, lengths and counts overwritten with huge or negative values,
//! pieces spliced) plus arbitrary bytes. No input may panic, and none may
//! allocate more than a fixed multiple of its own size: a counting allocator
//! measures the peak of each decode.
//!
//! CI runs a few thousand cases of each; for a long run:
//! `PROPTEST_CASES=200000 cargo test --release -p floe-protocol --test fuzz`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::{BufMut, Bytes, BytesMut};
use floe_protocol::batch::{Codec, RecordBatch};
use floe_protocol::kafka_protocol::messages::*;
use floe_protocol::kafka_protocol::protocol::{Encodable, StrBytes};
use floe_protocol::kafka_protocol::records::Compression;
use floe_protocol::{compression, frame, records, request, testing, versions};
use proptest::prelude::*;
use tokio_util::codec::Decoder;

/// What a codec's compressor allocates for itself, whatever its input.
const COMPRESSOR_STATE: usize = 8 << 20;

/// Counts this thread's live heap bytes and their peak.
struct Counting;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LIVE.try_with(|live| {
            let now = live.get() + layout.size();
            live.set(now);
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
        });
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = LIVE.try_with(|live| live.set(live.get().saturating_sub(layout.size())));
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = LIVE.try_with(|live| {
            let now = live.get().saturating_sub(layout.size()) + new_size;
            live.set(now);
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
        });
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most heap `f` had live at once beyond what was live before it.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let out = f();
    (out, PEAK.with(Cell::get) - base)
}

/// Decoded messages are structs of vectors and strings, several times the
/// size of their wire form for small fields; never more than this.
const MAX_EXPANSION: usize = 64;
const SLACK: usize = 64 * 1024;

fn frame_of(api: ApiKey, version: i16, body: &RequestKind) -> Bytes {
    let mut buf = BytesMut::new();
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("fuzz")));
    let header_version = api.request_header_version(version);
    header.encode(&mut buf, header_version).unwrap();
    body.encode(&mut buf, version).unwrap();
    buf.freeze()
}

/// A request of `api` with some content, so that mutations reach nested
/// arrays, strings and record batches, not only empty defaults.
fn seed(api: ApiKey) -> RequestKind {
    let topic = || TopicName(StrBytes::from_static_str("fuzz-topic"));
    let batch = testing::encode(&[b"v".to_vec(), b"w".to_vec()], Compression::None);
    match api {
        ApiKey::Produce => RequestKind::Produce(
            ProduceRequest::default()
                .with_acks(-1)
                .with_topic_data(vec![
                    produce_request::TopicProduceData::default()
                        .with_name(topic())
                        .with_partition_data(vec![
                            produce_request::PartitionProduceData::default()
                                .with_records(Some(batch)),
                        ]),
                ]),
        ),
        ApiKey::Fetch => RequestKind::Fetch(
            FetchRequest::default()
                .with_max_bytes(1 << 20)
                .with_topics(vec![
                    fetch_request::FetchTopic::default()
                        .with_topic(topic())
                        .with_partitions(vec![fetch_request::FetchPartition::default()]),
                ]),
        ),
        ApiKey::Metadata => {
            RequestKind::Metadata(MetadataRequest::default().with_topics(Some(vec![
                metadata_request::MetadataRequestTopic::default().with_name(Some(topic())),
            ])))
        }
        ApiKey::JoinGroup => RequestKind::JoinGroup(
            JoinGroupRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("g")))
                .with_protocol_type(StrBytes::from_static_str("consumer"))
                .with_protocols(vec![
                    join_group_request::JoinGroupRequestProtocol::default()
                        .with_name(StrBytes::from_static_str("range"))
                        .with_metadata(Bytes::from_static(b"\x00\x01metadata")),
                ]),
        ),
        ApiKey::CreateTopics => {
            RequestKind::CreateTopics(CreateTopicsRequest::default().with_topics(vec![
            create_topics_request::CreatableTopic::default()
                .with_name(topic())
                .with_num_partitions(3)
                .with_configs(vec![
                    create_topics_request::CreatableTopicConfig::default()
                        .with_name(StrBytes::from_static_str("retention.ms"))
                        .with_value(Some(StrBytes::from_static_str("1000"))),
                ]),
        ]))
        }
        ApiKey::OffsetCommit => RequestKind::OffsetCommit(
            OffsetCommitRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("g")))
                .with_topics(vec![
                    offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![Default::default()]),
                ]),
        ),
        other => default_request(other),
    }
}

fn default_request(api: ApiKey) -> RequestKind {
    let topic = || TopicName(StrBytes::from_static_str("fuzz-topic"));
    match api {
        ApiKey::ListOffsets => RequestKind::ListOffsets(Default::default()),
        ApiKey::ApiVersions => RequestKind::ApiVersions(Default::default()),
        ApiKey::DeleteTopics => RequestKind::DeleteTopics(Default::default()),
        ApiKey::InitProducerId => RequestKind::InitProducerId(Default::default()),
        ApiKey::AddPartitionsToTxn => RequestKind::AddPartitionsToTxn(
            AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_static_str(
                    "tx",
                )))
                .with_v3_and_below_topics(vec![
                    add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![0, 1]),
                ]),
        ),
        ApiKey::AddOffsetsToTxn => RequestKind::AddOffsetsToTxn(
            AddOffsetsToTxnRequest::default()
                .with_transactional_id(TransactionalId(StrBytes::from_static_str("tx")))
                .with_group_id(GroupId(StrBytes::from_static_str("g"))),
        ),
        ApiKey::DescribeTransactions => RequestKind::DescribeTransactions(
            DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![TransactionalId(StrBytes::from_static_str("tx"))]),
        ),
        ApiKey::ListTransactions => RequestKind::ListTransactions(
            ListTransactionsRequest::default()
                .with_state_filters(vec![StrBytes::from_static_str("Ongoing")]),
        ),
        ApiKey::TxnOffsetCommit => RequestKind::TxnOffsetCommit(
            TxnOffsetCommitRequest::default()
                .with_transactional_id(TransactionalId(StrBytes::from_static_str("tx")))
                .with_group_id(GroupId(StrBytes::from_static_str("g")))
                .with_topics(vec![
                    txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                        .with_name(topic())
                        .with_partitions(vec![
                            txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                                .with_committed_offset(5),
                        ]),
                ]),
        ),
        ApiKey::EndTxn => RequestKind::EndTxn(
            EndTxnRequest::default()
                .with_transactional_id(TransactionalId(StrBytes::from_static_str("tx")))
                .with_committed(true),
        ),
        ApiKey::DeleteRecords => RequestKind::DeleteRecords(Default::default()),
        ApiKey::CreatePartitions => RequestKind::CreatePartitions(Default::default()),
        ApiKey::DescribeConfigs => RequestKind::DescribeConfigs(Default::default()),
        ApiKey::AlterConfigs => RequestKind::AlterConfigs(Default::default()),
        ApiKey::IncrementalAlterConfigs => RequestKind::IncrementalAlterConfigs(Default::default()),
        ApiKey::ListGroups => RequestKind::ListGroups(Default::default()),
        ApiKey::DescribeGroups => RequestKind::DescribeGroups(Default::default()),
        ApiKey::FindCoordinator => RequestKind::FindCoordinator(Default::default()),
        ApiKey::SyncGroup => RequestKind::SyncGroup(Default::default()),
        ApiKey::Heartbeat => RequestKind::Heartbeat(Default::default()),
        ApiKey::LeaveGroup => RequestKind::LeaveGroup(Default::default()),
        ApiKey::OffsetFetch => RequestKind::OffsetFetch(Default::default()),
        ApiKey::DeleteGroups => RequestKind::DeleteGroups(Default::default()),
        ApiKey::OffsetDelete => RequestKind::OffsetDelete(Default::default()),
        ApiKey::ConsumerGroupHeartbeat => RequestKind::ConsumerGroupHeartbeat(Default::default()),
        ApiKey::ConsumerGroupDescribe => RequestKind::ConsumerGroupDescribe(Default::default()),
        ApiKey::OffsetForLeaderEpoch => RequestKind::OffsetForLeaderEpoch(Default::default()),
        ApiKey::DescribeCluster => RequestKind::DescribeCluster(Default::default()),
        ApiKey::DescribeTopicPartitions => RequestKind::DescribeTopicPartitions(
            DescribeTopicPartitionsRequest::default()
                .with_topics(vec![
                    describe_topic_partitions_request::TopicRequest::default().with_name(topic()),
                ])
                .with_response_partition_limit(2000)
                .with_cursor(Some(
                    describe_topic_partitions_request::Cursor::default()
                        .with_topic_name(topic())
                        .with_partition_index(1),
                )),
        ),
        ApiKey::DescribeLogDirs => {
            RequestKind::DescribeLogDirs(DescribeLogDirsRequest::default().with_topics(Some(vec![
                describe_log_dirs_request::DescribableLogDirTopic::default()
                    .with_topic(topic())
                    .with_partitions(vec![0, 1]),
            ])))
        }
        ApiKey::DescribeProducers => {
            RequestKind::DescribeProducers(DescribeProducersRequest::default().with_topics(vec![
                describe_producers_request::TopicRequest::default()
                    .with_name(topic())
                    .with_partition_indexes(vec![0, 1]),
            ]))
        }
        ApiKey::GetTelemetrySubscriptions => RequestKind::GetTelemetrySubscriptions(
            GetTelemetrySubscriptionsRequest::default().with_client_instance_id(Default::default()),
        ),
        ApiKey::PushTelemetry => RequestKind::PushTelemetry(
            PushTelemetryRequest::default()
                .with_client_instance_id(Default::default())
                .with_subscription_id(3)
                .with_compression_type(4)
                .with_metrics(Bytes::from_static(&[10, 2, 18, 0])),
        ),
        ApiKey::DescribeClientQuotas => RequestKind::DescribeClientQuotas(
            kafka_protocol::messages::DescribeClientQuotasRequest::default().with_components(vec![
                kafka_protocol::messages::describe_client_quotas_request::ComponentData::default()
                    .with_entity_type(StrBytes::from_static_str("user"))
                    .with_match_type(0)
                    .with_match(Some(StrBytes::from_static_str("alice"))),
            ]),
        ),
        ApiKey::AlterClientQuotas => RequestKind::AlterClientQuotas(
            kafka_protocol::messages::AlterClientQuotasRequest::default().with_entries(vec![
                kafka_protocol::messages::alter_client_quotas_request::EntryData::default()
                    .with_entity(vec![
                        kafka_protocol::messages::alter_client_quotas_request::EntityData::default(
                        )
                        .with_entity_type(StrBytes::from_static_str("client-id"))
                        .with_entity_name(None),
                    ])
                    .with_ops(vec![
                        kafka_protocol::messages::alter_client_quotas_request::OpData::default()
                            .with_key(StrBytes::from_static_str("producer_byte_rate"))
                            .with_value(1024.0),
                    ]),
            ]),
        ),
        ApiKey::ListConfigResources => RequestKind::ListConfigResources(
            kafka_protocol::messages::ListConfigResourcesRequest::default(),
        ),
        ApiKey::SaslHandshake => RequestKind::SaslHandshake(
            kafka_protocol::messages::SaslHandshakeRequest::default()
                .with_mechanism(StrBytes::from_static_str("PLAIN")),
        ),
        ApiKey::SaslAuthenticate => RequestKind::SaslAuthenticate(
            kafka_protocol::messages::SaslAuthenticateRequest::default()
                .with_auth_bytes(bytes::Bytes::from_static(b"\0alice\0secret")),
        ),
        ApiKey::DescribeUserScramCredentials => RequestKind::DescribeUserScramCredentials(
            DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
                describe_user_scram_credentials_request::UserName::default()
                    .with_name(StrBytes::from_static_str("alice")),
            ])),
        ),
        ApiKey::AlterUserScramCredentials => RequestKind::AlterUserScramCredentials(
            AlterUserScramCredentialsRequest::default()
                .with_upsertions(vec![
                    alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                        .with_name(StrBytes::from_static_str("alice"))
                        .with_mechanism(1)
                        .with_iterations(4096)
                        .with_salt(Bytes::from_static(b"salt"))
                        .with_salted_password(Bytes::from_static(&[7; 32])),
                ])
                .with_deletions(vec![
                    alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                        .with_name(StrBytes::from_static_str("bob"))
                        .with_mechanism(2),
                ]),
        ),
        ApiKey::CreateAcls => {
            RequestKind::CreateAcls(CreateAclsRequest::default().with_creations(vec![
                create_acls_request::AclCreation::default()
                    .with_resource_type(2)
                    .with_resource_name(topic().into())
                    .with_resource_pattern_type(3)
                    .with_principal(StrBytes::from_static_str("User:alice"))
                    .with_host(StrBytes::from_static_str("*"))
                    .with_operation(3)
                    .with_permission_type(3),
            ]))
        }
        ApiKey::DescribeAcls => RequestKind::DescribeAcls(
            DescribeAclsRequest::default()
                .with_resource_type_filter(1)
                .with_pattern_type_filter(1)
                .with_operation(1)
                .with_permission_type(1),
        ),
        ApiKey::DeleteAcls => {
            RequestKind::DeleteAcls(DeleteAclsRequest::default().with_filters(vec![
                delete_acls_request::DeleteAclsFilter::default()
                    .with_resource_type_filter(1)
                    .with_pattern_type_filter(1)
                    .with_principal_filter(Some(StrBytes::from_static_str("User:bob")))
                    .with_operation(1)
                    .with_permission_type(1),
            ]))
        }
        ApiKey::ElectLeaders => RequestKind::ElectLeaders(
            ElectLeadersRequest::default().with_topic_partitions(Some(vec![
                elect_leaders_request::TopicPartitions::default()
                    .with_topic(topic())
                    .with_partitions(vec![0, 1]),
            ])),
        ),
        ApiKey::AlterPartitionReassignments => RequestKind::AlterPartitionReassignments(
            AlterPartitionReassignmentsRequest::default().with_topics(vec![
                alter_partition_reassignments_request::ReassignableTopic::default()
                    .with_name(topic())
                    .with_partitions(vec![
                        alter_partition_reassignments_request::ReassignablePartition::default()
                            .with_replicas(Some(vec![BrokerId(0)])),
                    ]),
            ]),
        ),
        ApiKey::ListPartitionReassignments => {
            RequestKind::ListPartitionReassignments(Default::default())
        }
        ApiKey::AlterReplicaLogDirs => {
            RequestKind::AlterReplicaLogDirs(AlterReplicaLogDirsRequest::default().with_dirs(vec![
                alter_replica_log_dirs_request::AlterReplicaLogDir::default()
                    .with_path(StrBytes::from_static_str("/data"))
                    .with_topics(vec![
                        alter_replica_log_dirs_request::AlterReplicaLogDirTopic::default()
                            .with_name(topic())
                            .with_partitions(vec![0]),
                    ]),
            ]))
        }
        ApiKey::DescribeQuorum => {
            RequestKind::DescribeQuorum(DescribeQuorumRequest::default().with_topics(vec![
                describe_quorum_request::TopicData::default()
                    .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
                    .with_partitions(vec![Default::default()]),
            ]))
        }
        ApiKey::ShareGroupHeartbeat => RequestKind::ShareGroupHeartbeat(
            ShareGroupHeartbeatRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("fuzz-group")))
                .with_member_id(StrBytes::from_static_str("fuzz-member"))
                .with_subscribed_topic_names(Some(vec![topic()])),
        ),
        ApiKey::ShareGroupDescribe => RequestKind::ShareGroupDescribe(
            ShareGroupDescribeRequest::default()
                .with_group_ids(vec![GroupId(StrBytes::from_static_str("fuzz-group"))]),
        ),
        ApiKey::ShareFetch => RequestKind::ShareFetch(
            ShareFetchRequest::default()
                .with_group_id(Some(GroupId(StrBytes::from_static_str("fuzz-group"))))
                .with_member_id(Some(StrBytes::from_static_str("fuzz-member")))
                .with_share_session_epoch(1)
                .with_max_records(500)
                .with_topics(vec![
                    share_fetch_request::FetchTopic::default()
                        .with_topic_id(Default::default())
                        .with_partitions(vec![
                            share_fetch_request::FetchPartition::default()
                                .with_acknowledgement_batches(vec![
                                    share_fetch_request::AcknowledgementBatch::default()
                                        .with_last_offset(3)
                                        .with_acknowledge_types(vec![1]),
                                ]),
                        ]),
                ]),
        ),
        ApiKey::ShareAcknowledge => RequestKind::ShareAcknowledge(
            ShareAcknowledgeRequest::default()
                .with_group_id(Some(GroupId(StrBytes::from_static_str("fuzz-group"))))
                .with_member_id(Some(StrBytes::from_static_str("fuzz-member")))
                .with_share_session_epoch(2)
                .with_topics(vec![
                    share_acknowledge_request::AcknowledgeTopic::default()
                        .with_topic_id(Default::default())
                        .with_partitions(vec![
                            share_acknowledge_request::AcknowledgePartition::default()
                                .with_acknowledgement_batches(vec![
                                    share_acknowledge_request::AcknowledgementBatch::default()
                                        .with_last_offset(3)
                                        .with_acknowledge_types(vec![1, 2, 3, 0]),
                                ]),
                        ]),
                ]),
        ),
        ApiKey::DescribeShareGroupOffsets => RequestKind::DescribeShareGroupOffsets(
            DescribeShareGroupOffsetsRequest::default().with_groups(vec![
                describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default()
                    .with_group_id(GroupId(StrBytes::from_static_str("fuzz-group")))
                    .with_topics(Some(vec![
                        describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestTopic::default()
                            .with_topic_name(topic())
                            .with_partitions(vec![0]),
                    ])),
            ]),
        ),
        ApiKey::AlterShareGroupOffsets => RequestKind::AlterShareGroupOffsets(
            AlterShareGroupOffsetsRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("fuzz-group")))
                .with_topics(vec![
                    alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(topic())
                        .with_partitions(vec![Default::default()]),
                ]),
        ),
        ApiKey::DeleteShareGroupOffsets => RequestKind::DeleteShareGroupOffsets(
            DeleteShareGroupOffsetsRequest::default()
                .with_group_id(GroupId(StrBytes::from_static_str("fuzz-group")))
                .with_topics(vec![
                    delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(topic()),
                ]),
        ),
        other => panic!("no seed for {other:?}"),
    }
}

/// Every (api, version) floe serves, with a valid frame of it.
fn seeds() -> Vec<(ApiKey, i16, Bytes)> {
    let mut all = Vec::new();
    for (api, range) in versions::all() {
        for version in range.min..=range.max {
            // Some defaults are not encodable at some versions (a field a
            // version lacks holds a non-default value); those seeds are skipped.
            let body = seed(api);
            if let Ok(frame) = std::panic::catch_unwind(|| frame_of(api, version, &body)) {
                all.push((api, version, frame));
            }
        }
    }
    all
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip {
        at: usize,
        bits: u8,
    },
    Truncate {
        at: usize,
    },
    /// Overwrite 4 bytes with a length or count a liar would send.
    Count {
        at: usize,
        value: i32,
    },
    /// An unsigned varint (compact arrays, strings) claiming a huge size.
    Varint {
        at: usize,
    },
    Splice {
        at: usize,
        bytes: Vec<u8>,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, bits)| Mutation::Flip { at, bits }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        (
            any::<usize>(),
            prop_oneof![
                Just(i32::MAX),
                Just(-1),
                Just(-2),
                Just(0x0100_0000),
                any::<i32>()
            ]
        )
            .prop_map(|(at, value)| Mutation::Count { at, value }),
        any::<usize>().prop_map(|at| Mutation::Varint { at }),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 0..16)
        )
            .prop_map(|(at, bytes)| Mutation::Splice { at, bytes }),
    ]
}

fn mutate(frame: &[u8], mutations: &[Mutation]) -> Bytes {
    let mut b = frame.to_vec();
    for m in mutations {
        // Leave the 4-byte api key and version mostly alone, so the mutated
        // frame reaches the body decoder of its API.
        let pos = |at: usize, len: usize| 4 + at % (len.saturating_sub(4).max(1));
        match m {
            Mutation::Flip { at, bits } if b.len() > 4 => {
                let p = pos(*at, b.len()).min(b.len() - 1);
                b[p] ^= bits;
            }
            Mutation::Truncate { at } => b.truncate(pos(*at, b.len())),
            Mutation::Count { at, value } if b.len() >= 8 => {
                let p = pos(*at, b.len() - 4);
                b[p..p + 4].copy_from_slice(&value.to_be_bytes());
            }
            Mutation::Varint { at } if b.len() >= 9 => {
                let p = pos(*at, b.len() - 5);
                b[p..p + 5].copy_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x07]);
            }
            Mutation::Splice { at, bytes } => {
                let p = pos(*at, b.len()).min(b.len());
                b.splice(p..p, bytes.iter().copied());
            }
            _ => {}
        }
    }
    Bytes::from(b)
}

/// Decodes a request frame as the agent does, and every produced batch in it.
fn decode_like_the_agent(frame: Bytes) {
    if let Ok(request::Decoded::Request { body, .. }) = request::decode(frame)
        && let RequestKind::Produce(produce) = *body
    {
        for topic in produce.topic_data {
            for partition in topic.partition_data {
                if let Some(records) = partition.records {
                    let _ = RecordBatch::parse_all(&records);
                }
            }
        }
    }
}

fn check_bounded(input_len: usize, peak: usize, what: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        peak <= MAX_EXPANSION * input_len + SLACK,
        "{what}: {peak} bytes allocated for {input_len} bytes of input"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3_000, ..ProptestConfig::default() })]

    #[test]
    fn mutated_requests_never_panic_or_balloon(
        pick in any::<prop::sample::Index>(),
        mutations in proptest::collection::vec(mutation(), 1..6),
    ) {
        let seeds = seeds();
        let (api, version, frame) = &seeds[pick.index(seeds.len())];
        let input = mutate(frame, &mutations);
        let len = input.len();
        let ((), peak) = peak_of(|| decode_like_the_agent(input));
        check_bounded(len, peak, &format!("{api:?} v{version}"))?;
    }

    #[test]
    fn arbitrary_frames_never_panic_or_balloon(
        key in 0i16..80,
        version in -1i16..20,
        body in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut buf = BytesMut::new();
        buf.put_i16(key);
        buf.put_i16(version);
        buf.put_i32(1);
        buf.put_slice(&body);
        let input = buf.freeze();
        let len = input.len();
        let ((), peak) = peak_of(|| decode_like_the_agent(input));
        check_bounded(len, peak, "arbitrary")?;
    }

    /// The frame splitter, fed a stream in arbitrary pieces.
    #[test]
    fn the_frame_codec_holds_only_what_arrived(
        stream in proptest::collection::vec(any::<u8>(), 0..2048),
        cuts in proptest::collection::vec(1usize..300, 1..20),
    ) {
        let mut codec = frame::codec(frame::DEFAULT_MAX_FRAME_BYTES);
        let mut buf = BytesMut::new();
        let mut rest = &stream[..];
        let ((), peak) = peak_of(|| {
            for cut in cuts.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let n = (*cut).min(rest.len());
                buf.extend_from_slice(&rest[..n]);
                rest = &rest[n..];
                loop {
                    match codec.decode(&mut buf) {
                        Ok(Some(_)) => continue,
                        Ok(None) => break,
                        Err(_) => return,
                    }
                }
            }
        });
        check_bounded(stream.len(), peak, "frames")?;
    }

    /// Produced batches, mutated: validation never panics nor allocates,
    /// and whatever passes it decodes (in the background jobs) within the
    /// decompression bound.
    #[test]
    fn mutated_batches_validate_and_decode_within_bounds(
        codec in 0usize..5,
        values in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..20),
        mutations in proptest::collection::vec(mutation(), 0..4),
        fix_crc: bool,
    ) {
        let honest = testing::encode(&values, testing::CODECS[codec]);
        let mut b = mutate(&honest, &mutations).to_vec();
        if fix_crc && b.len() >= 61 {
            let crc = crc32c::crc32c(&b[21..]);
            b[17..21].copy_from_slice(&crc.to_be_bytes());
        }
        let input = Bytes::from(b);
        let len = input.len();
        let (parsed, peak) = peak_of(|| RecordBatch::parse_all(&input));
        check_bounded(len, peak, "batch validation")?;
        for batch in parsed.into_iter().flatten().chain(RecordBatch::parse_all_stored(&input).into_iter().flatten()) {
            let limit = compression::decompressed_limit(batch.codec(), batch.len());
            let (_, peak) = peak_of(|| records::decode(&batch));
            prop_assert!(peak <= 8 * limit.max(batch.len()) + SLACK, "decode: {peak} bytes for {len}");
            // What a produce stores: only a batch whose records are all
            // there as counted, each readable by a consumer's decoder at its
            // offset, within the same bounds as a recompression.
            let rules = floe_protocol::validate::RecordRules {
                keys_required: false,
                timestamps: None,
                recompress: None,
                max_bytes: usize::MAX,
                max_record_errors: floe_protocol::validate::MAX_RECORD_ERRORS,
            };
            let (checked, peak) = peak_of(|| floe_protocol::validate::validate(batch.clone(), &rules));
            prop_assert!(
                peak <= 4 * limit.max(batch.len()) + SLACK + COMPRESSOR_STATE,
                "validate: {peak} bytes for {len}"
            );
            if let Ok(stored) = checked {
                // kafka-protocol's decoder also wants header keys in UTF-8
                // (Kafka's does not; a consumer reads them as bytes).
                let section = floe_protocol::walk::section(&stored).unwrap();
                let utf8 = floe_protocol::walk::Walk::new(&section, stored.record_count())
                    .map(Result::unwrap)
                    .all(|r| r.headers().all(|(key, _)| std::str::from_utf8(key).is_ok()));
                let decoded = records::decode(&stored);
                prop_assert!(decoded.is_ok() || !utf8, "stored but undecodable: {:?}", decoded);
                for (i, r) in decoded.into_iter().flatten().enumerate() {
                    prop_assert_eq!(r.offset, stored.base_offset() + i as i64);
                }
            }
            // A topic's compression.type recompresses produced batches:
            // the decompressed records and one compressed copy, and the
            // compressor's own state (fixed: a zstd context is a few MiB).
            let target = testing::CODECS[(codec + 1) % 5];
            let target = RecordBatch::parse_all(&testing::encode(&[vec![0]], target)).unwrap()[0].codec();
            let (again, peak) = peak_of(|| records::recompress(&batch, target, None, usize::MAX));
            prop_assert!(
                peak <= 4 * limit.max(batch.len()) + SLACK + COMPRESSOR_STATE,
                "recompress: {peak} bytes for {len}"
            );
            // The same records, numbered 0, 1, ... (renumbered as Kafka
            // rebuilds a batch whose offset deltas are not).
            if let Ok(again) = again {
                let content = |rs: Vec<floe_protocol::kafka_protocol::records::Record>| {
                    rs.into_iter().map(|r| (r.timestamp, r.key, r.value, r.headers)).collect::<Vec<_>>()
                };
                let rewritten = records::decode(&again).ok();
                prop_assert_eq!(rewritten.clone().map(content), records::decode(&batch).ok().map(content));
                for (i, r) in rewritten.into_iter().flatten().enumerate() {
                    prop_assert_eq!(r.offset, again.base_offset() + i as i64);
                }
            }
        }
    }

    #[test]
    fn arbitrary_compressed_payloads_stop_at_the_limit(
        codec in 1usize..5,
        data in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        let codec = [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd][codec];
        let limit = 1 << 16;
        let (out, peak) = peak_of(|| compression::decompress(codec, &data, limit));
        if let Ok(out) = out {
            prop_assert!(out.len() <= limit);
        }
        prop_assert!(peak <= 4 * limit + SLACK, "{codec:?}: {peak} bytes");
    }
}
