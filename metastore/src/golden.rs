//! Golden tests of the persisted formats: one sample of every command as a
//! Raft log entry ([`Proposal`]), and a snapshot ([`State`]) holding a bit of
//! everything, encoded and compared byte for byte with `golden/format-N.txt`;
//! and of the wire between clients and metastore nodes: one sample of every
//! request and of every error, compared with `golden/wire-N.txt` (when it
//! fails, bump [`crate::contract::wire::WIRE_VERSION`] instead of `FORMAT_VERSION`).
//!
//! postcard is not self-describing: a reordered enum variant or a field moved
//! would make a node replay old log entries as something else during a rolling
//! upgrade. When this test fails, the encoding changed: bump
//! [`FORMAT_VERSION`] (an old file is then refused, not misread) and write the
//! new golden file with `FLOE_BLESS=1 cargo test -p floe-metastore golden`.
//!
//! Appending a command or request variant (with its sample) is the one change
//! that needs no bump: old bytes decode as before, and a node too old to know
//! the variant fails to decode it rather than misreading it. (Such a node
//! cannot follow a leader that writes the new variant: upgrade every
//! metastore node before the agents, and before a new node leads.) The golden file then
//! gains the sample's lines, and lines that show state (the snapshot, answers
//! of queries) change with what the new sample did; re-bless, and check in
//! the diff that no other line changed.

use std::collections::BTreeMap;
use std::fmt::Write;

use uuid::Uuid;

use crate::dynamic_config::{ConfigOp, ConfigTarget};
use crate::format::FORMAT_VERSION;
use crate::groups::*;
use crate::ops::*;
use crate::state::{
    Batch, Command, ConsumerHeartbeatV8, ConsumerHeartbeatV10, JoinGroupV8, JoinGroupV10, Proposal,
    State, SyncGroupV8,
};
use crate::types::*;

/// Every command variant's name; exhaustive, so a new variant must get a sample.
fn variant(command: &Command) -> &'static str {
    match command {
        Command::CreateTopic(_) => "create_topic",
        Command::DeleteTopic(_) => "delete_topic",
        Command::Commit(_) => "commit",
        Command::ReplaceExtents(_) => "replace_extents",
        Command::InitProducer(_) => "init_producer",
        Command::ForgetGarbage(_) => "forget_garbage",
        Command::RegisterAgent(_) => "register_agent",
        Command::AgentHeartbeat(_) => "agent_heartbeat",
        Command::AlterTopicConfigs(_) => "alter_topic_configs",
        Command::CreatePartitions(_) => "create_partitions",
        Command::Trim(_) => "trim",
        Command::RecordOrphans(_) => "record_orphans",
        Command::Group(g) => match g {
            GroupCommand::Join(_) => "group_join",
            GroupCommand::Sync(_) => "group_sync",
            GroupCommand::Leave(_) => "group_leave",
            GroupCommand::Tick(_) => "group_tick",
            GroupCommand::CommitOffsets(_) => "group_commit_offsets",
            GroupCommand::Expire(_) => "group_expire",
            GroupCommand::Delete(_) => "group_delete",
            GroupCommand::DeleteOffsets(_) => "group_delete_offsets",
            GroupCommand::Consumer(_) => "group_consumer_heartbeat",
            GroupCommand::JoinWithOwned(_) => "group_join_with_owned",
            GroupCommand::SyncWithDecoded(_) => "group_sync_with_decoded",
            GroupCommand::ConsumerMigrating(_) => "group_consumer_heartbeat_migrating",
            GroupCommand::ConsumerDescribing(_) => "group_consumer_heartbeat_describing",
            GroupCommand::JoinRuled(_) => "group_join_ruled",
        },
        Command::AcquireLease(_) => "acquire_lease",
        Command::ReleaseLease(_) => "release_lease",
        Command::Tick(_) => "tick",
        Command::ReplaceRuns(_) => "replace_runs",
        Command::Batch(_) => "batch",
        Command::AlterScramCredentials(_) => "alter_scram_credentials",
        Command::CreateAcls(_) => "create_acls",
        Command::DeleteAcls(_) => "delete_acls",
        Command::InitTxnProducer(_) => "init_txn_producer",
        Command::AddToTxn(_) => "add_to_txn",
        Command::EndTxn(_) => "end_txn",
        Command::IngestCommit(_) => "ingest_commit",
        Command::TxnCommitOffsets(_) => "txn_commit_offsets",
        Command::AlterConfigs(_) => "alter_configs",
        Command::RegisterAgentListeners(_) => "register_agent_listeners",
        Command::AllocateProducerIds(_) => "allocate_producer_ids",
        Command::InitTxnProducerChecked(_) => "init_txn_producer_checked",
        Command::ClaimClusterId(_) => "claim_cluster_id",
        Command::HoldGarbage(_) => "hold_garbage",
        Command::ShareHeartbeat(_) => "share_heartbeat",
        Command::AcquireShare(_) => "acquire_share",
        Command::AcknowledgeShare(_) => "acknowledge_share",
        Command::ReleaseShare(_) => "release_share",
        Command::AlterShareOffsets(_) => "alter_share_offsets",
        Command::DeleteShareOffsets(_) => "delete_share_offsets",
    }
}

/// A consumer-protocol heartbeat subscribing to `t` by name and regex.
fn consumer_heartbeat(group: &str, member_epoch: i32) -> ConsumerHeartbeatV10 {
    ConsumerHeartbeatV10 {
        group: group.into(),
        member_id: "m-1".into(),
        member_epoch,
        instance_id: None,
        rack_id: Some("rack-a".into()),
        rebalance_timeout_ms: 30_000,
        subscribed_topics: Some(vec!["t".into()]),
        subscribed_regex: Some("t.*".into()),
        assignor: Some("uniform".into()),
        owned: Some(vec![]),
        client_id: "c".into(),
        client_host: "/10.0.0.7".into(),
        session_timeout_ms: 45_000,
        heartbeat_interval_ms: 5_000,
        now_ms: 15,
    }
}

const TOPIC: Uuid = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);

fn batch(position: u64, producer_id: i64) -> CommitBatch {
    CommitBatch {
        topic_id: TOPIC,
        partition: 0,
        position,
        length: 100,
        record_count: 3,
        max_timestamp: 1_700_000_000_000,
        producer_id,
        producer_epoch: if producer_id < 0 { -1 } else { 0 },
        base_sequence: if producer_id < 0 { -1 } else { 0 },
    }
}

/// One of every command up to format 6, in an order that applies cleanly.
fn wire_state_samples() -> Vec<Command> {
    let group = || "g".to_string();
    vec![
        Command::CreateTopic(CreateTopic {
            id: TOPIC,
            topic: NewTopic {
                name: "t".into(),
                partitions: 2,
                configs: BTreeMap::from([("retention.ms".into(), "1000".into())]),
            },
        }),
        Command::InitProducer(InitProducer { existing: None }),
        Command::Commit(Commit {
            object_key: "ingest/01/a".into(),
            object_size: 1_000,
            batches: vec![batch(0, -1), batch(100, 0)],
            not_before_ms: 1_700_000_000_000,
        }),
        Command::Commit(Commit {
            object_key: "ingest/02/b".into(),
            object_size: 1_000,
            batches: vec![batch(0, -1)],
            not_before_ms: 1_700_000_001_000,
        }),
        Command::ReplaceExtents(ReplaceExtents {
            topic_id: TOPIC,
            partition: 0,
            replaced: vec![ExtentRef {
                base_offset: 0,
                last_offset: 5,
                max_timestamp: 1_700_000_000_000,
                object_key: "ingest/01/a".into(),
                object_size: 1_000,
                position: 0,
                length: 200,
                appended_ms: 5,
            }],
            object_key: "segment/01/s".into(),
            object_size: 300,
            pieces: vec![ExtentPiece {
                base_offset: 0,
                last_offset: 5,
                max_timestamp: 1_700_000_000_000,
                position: 0,
                length: 200,
                appended_ms: 5,
            }],
            not_before_ms: 1_700_000_002_000,
        }),
        Command::RecordOrphans(RecordOrphans {
            keys: vec!["ingest/03/orphan".into()],
        }),
        Command::ForgetGarbage(ForgetGarbage {
            keys: vec!["ingest/03/orphan".into()],
        }),
        Command::RegisterAgent(RegisterAgent {
            host: "10.0.0.1".into(),
            port: 9092,
            zone: Some("a".into()),
            now_ms: 7,
        }),
        Command::AgentHeartbeat(AgentHeartbeat {
            node_id: 0,
            now_ms: 8,
        }),
        Command::AlterTopicConfigs(AlterTopicConfigs {
            name: "t".into(),
            set: BTreeMap::from([("cleanup.policy".into(), "compact".into())]),
            delete: vec!["retention.ms".into()],
        }),
        Command::CreatePartitions(CreatePartitions {
            name: "t".into(),
            count: 3,
        }),
        Command::Trim(Trim {
            partition: TopicPartition::new(TOPIC, 0),
            offset: 2,
        }),
        Command::Group(GroupCommand::Join(JoinGroupV8 {
            group: group(),
            member_id: String::new(),
            instance_id: Some("instance-1".into()),
            client_id: "c".into(),
            client_host: "/10.0.0.9".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 20_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), vec![1, 2, 3])],
            subscribed_topics: Some(vec!["t".into()]),
            require_known_member_id: true,
            fresh_id: "1".into(),
            now_ms: 9,
        })),
        Command::Group(GroupCommand::Sync(SyncGroupV8 {
            group: group(),
            generation: 1,
            member_id: "instance-1-1".into(),
            instance_id: Some("instance-1".into()),
            protocol_type: Some("consumer".into()),
            protocol: Some("range".into()),
            assignments: vec![("instance-1-1".into(), vec![4, 5])],
            now_ms: 10,
        })),
        Command::Group(GroupCommand::CommitOffsets(CommitOffsets {
            group: "standalone".into(),
            generation: -1,
            member_id: String::new(),
            instance_id: None,
            offsets: vec![OffsetToCommit {
                topic: "t".into(),
                partition: 0,
                offset: 4,
                leader_epoch: 3,
                metadata: Some("meta".into()),
            }],
            now_ms: 12,
        })),
        Command::Group(GroupCommand::Expire(ExpireMembers {
            group: group(),
            members: vec![("nobody".into(), 11)],
            now_ms: 12,
        })),
        Command::Group(GroupCommand::Tick(TickGroup {
            group: group(),
            now_ms: 13,
        })),
        Command::Group(GroupCommand::DeleteOffsets(DeleteOffsets {
            group: "standalone".into(),
            partitions: vec![("u".into(), 1)],
        })),
        Command::Group(GroupCommand::Leave(LeaveGroup {
            group: group(),
            members: vec![Leaving {
                member_id: "instance-1-1".into(),
                instance_id: Some("instance-1".into()),
            }],
            now_ms: 14,
        })),
        Command::Group(GroupCommand::Delete(DeleteGroups {
            groups: vec!["nothing".into()],
        })),
        Command::Group(GroupCommand::Consumer(ConsumerHeartbeatV8(
            consumer_heartbeat("cg", 0),
        ))),
        Command::Group(GroupCommand::ConsumerMigrating(consumer_heartbeat(
            "cg2", 0,
        ))),
        // Format 11: the member's DESCRIBE filters its regex's matches.
        Command::Group(GroupCommand::ConsumerDescribing(ConsumerHeartbeat {
            describer: Some(Describer {
                principal: "User:alice".into(),
                host: "10.0.0.7".into(),
                allow_if_no_acl: false,
            }),
            ..consumer_heartbeat("cg3", 0).into()
        })),
        // Format 11: a classic join carries its agent's group settings.
        Command::Group(GroupCommand::JoinRuled(JoinGroup {
            group: "g4".into(),
            member_id: String::new(),
            instance_id: None,
            client_id: "c".into(),
            client_host: "/10.0.0.9".into(),
            session_timeout_ms: 1_000,
            rebalance_timeout_ms: 20_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), vec![1])],
            subscribed_topics: Some(vec!["t".into()]),
            require_known_member_id: true,
            fresh_id: "3".into(),
            now_ms: 16,
            owned: None,
            rules: JoinRules {
                min_session_timeout_ms: 1_000,
                max_session_timeout_ms: 600_000,
                initial_rebalance_delay_ms: 3_000,
            },
        })),
        Command::Group(GroupCommand::JoinWithOwned(JoinGroupV10 {
            group: group(),
            member_id: "instance-2-1".into(),
            instance_id: Some("instance-2".into()),
            client_id: "c".into(),
            client_host: "/10.0.0.9".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 20_000,
            protocol_type: "consumer".into(),
            protocols: vec![("cooperative-sticky".into(), vec![1, 2, 3])],
            subscribed_topics: Some(vec!["t".into()]),
            require_known_member_id: true,
            fresh_id: "2".into(),
            now_ms: 15,
            owned: Some(vec![("t".into(), vec![0, 2])]),
        })),
        Command::Group(GroupCommand::SyncWithDecoded(SyncGroup {
            group: group(),
            generation: 2,
            member_id: "instance-2-1".into(),
            instance_id: Some("instance-2".into()),
            protocol_type: Some("consumer".into()),
            protocol: Some("cooperative-sticky".into()),
            assignments: vec![("instance-2-1".into(), vec![6, 7])],
            now_ms: 15,
            decoded: vec![("instance-2-1".into(), vec![("t".into(), vec![0, 2])])],
            decodes: true,
        })),
        Command::AcquireLease(AcquireLease {
            job: "maintenance".into(),
            holder: "agent-1".into(),
            now_ms: 15,
            ttl_ms: 30_000,
        }),
        Command::ReleaseLease(ReleaseLease {
            job: "maintenance".into(),
            holder: "agent-1".into(),
        }),
        Command::CreateTopic(CreateTopic {
            id: Uuid::from_u128(7),
            topic: NewTopic {
                name: "gone".into(),
                partitions: 1,
                configs: BTreeMap::new(),
            },
        }),
        Command::DeleteTopic(DeleteTopic {
            name: "gone".into(),
        }),
        Command::Tick(Tick),
        Command::ReplaceRuns(replace_runs(1_700_000_020_000)),
        Command::Batch(Batch(vec![
            Command::Tick(Tick),
            Command::Trim(Trim {
                partition: TopicPartition::new(TOPIC, 1),
                offset: 0,
            }),
        ])),
        Command::AlterScramCredentials(AlterScramCredentials {
            alterations: vec![
                scram_upsert("alice"),
                scram_upsert("bob"),
                crate::scram::ScramAlteration::Delete {
                    user: "bob".into(),
                    mechanism: 1,
                },
            ],
        }),
        Command::CreateAcls(CreateAcls {
            bindings: vec![acl("User:alice"), acl("User:bob")],
        }),
        Command::DeleteAcls(DeleteAcls {
            filters: vec![acl_filter("User:bob")],
        }),
    ]
}

/// Every sample: those of the wire's answers first (the wire's golden
/// answers are read from the state they build), then the transactions'.
fn samples() -> Vec<Command> {
    let mut all = wire_state_samples();
    all.extend(txn_samples());
    all
}

/// Offsets of "t"/0 for group "g", sent outside the group protocol.
fn txn_offsets() -> CommitOffsets {
    CommitOffsets {
        group: "g".into(),
        generation: -1,
        member_id: String::new(),
        instance_id: None,
        offsets: vec![OffsetToCommit {
            topic: "t".into(),
            partition: 0,
            offset: 2,
            leader_epoch: 0,
            metadata: Some("txn".into()),
        }],
        now_ms: 1_700_000_040_000,
    }
}

/// Transactions' commands (format 7).
fn txn_samples() -> Vec<Command> {
    let group = || "g".to_string();
    vec![
        // Transaction "tx" (producer 1) writes three records to t/1 and aborts.
        Command::InitTxnProducer(InitTxnProducer {
            transactional_id: "tx".into(),
            timeout_ms: 60_000,
            expected: None,
        }),
        Command::AddToTxn(AddToTxn {
            transactional_id: "tx".into(),
            producer_id: 1,
            epoch: 0,
            partitions: vec![TopicPartition::new(TOPIC, 1)],
            groups: vec![group()],
        }),
        Command::IngestCommit(IngestCommit {
            object_key: "ingest/05/e".into(),
            object_size: 1_000,
            batches: vec![IngestBatch {
                batch: CommitBatch {
                    partition: 1,
                    producer_epoch: 0,
                    ..batch(0, 1)
                },
                kind: BatchKind::Transactional,
            }],
            ends: vec![],
            not_before_ms: 1_700_000_030_000,
        }),
        Command::IngestCommit(IngestCommit {
            object_key: "ingest/06/f".into(),
            object_size: 1_000,
            batches: vec![IngestBatch {
                batch: CommitBatch {
                    partition: 1,
                    length: 78,
                    record_count: 1,
                    base_sequence: -1,
                    ..batch(0, 1)
                },
                kind: BatchKind::Marker { end: 0 },
            }],
            ends: vec![crate::txn::TxnEnd {
                transactional_id: "tx".into(),
                producer_id: 1,
                epoch: 0,
                commit: false,
                reason: crate::txn::EndReason::Client,
                version: 1,
            }],
            not_before_ms: 1_700_000_030_000,
        }),
        // Transaction "tx2" (producer 2) only commits offsets.
        Command::InitTxnProducer(InitTxnProducer {
            transactional_id: "tx2".into(),
            timeout_ms: 60_000,
            expected: None,
        }),
        Command::AddToTxn(AddToTxn {
            transactional_id: "tx2".into(),
            producer_id: 2,
            epoch: 0,
            partitions: vec![],
            groups: vec![group()],
        }),
        Command::TxnCommitOffsets(TxnCommitOffsets {
            transactional_id: "tx2".into(),
            producer_id: 2,
            epoch: 0,
            commit: txn_offsets(),
        }),
        Command::EndTxn(EndTxn {
            end: crate::txn::TxnEnd {
                transactional_id: "tx2".into(),
                producer_id: 2,
                epoch: 0,
                commit: true,
                reason: crate::txn::EndReason::Client,
                version: 1,
            },
        }),
        Command::AlterConfigs(AlterConfigs {
            target: ConfigTarget::Dynamic(crate::ConfigEntity::Group("g".into())),
            ops: vec![
                ConfigOp::Set("consumer.session.timeout.ms".into(), "50000".into()),
                ConfigOp::Delete("consumer.heartbeat.interval.ms".into()),
            ],
            replace: false,
        }),
        Command::AlterConfigs(AlterConfigs {
            target: ConfigTarget::Topic("t".into()),
            ops: vec![ConfigOp::Append("cleanup.policy".into(), "compact".into())],
            replace: false,
        }),
        Command::AlterConfigs(AlterConfigs {
            target: ConfigTarget::Dynamic(crate::ConfigEntity::ClientMetrics("producers".into())),
            ops: vec![
                ConfigOp::Set("metrics".into(), "org.apache.kafka.producer.".into()),
                ConfigOp::Set("interval.ms".into(), "60000".into()),
                ConfigOp::Set("match".into(), "client_software_name=librdkafka".into()),
            ],
            replace: false,
        }),
        Command::AlterConfigs(AlterConfigs {
            target: ConfigTarget::Dynamic(crate::ConfigEntity::ClientQuota(
                crate::quotas::QuotaEntity {
                    user: Some(crate::quotas::QuotaName::Named("alice".into())),
                    client_id: Some(crate::quotas::QuotaName::Default),
                },
            )),
            ops: vec![ConfigOp::Set("producer_byte_rate".into(), "1048576".into())],
            replace: false,
        }),
        Command::RegisterAgentListeners(RegisterAgentListeners {
            host: "10.0.0.5".into(),
            port: 9092,
            zone: Some("b".into()),
            listeners: listeners_sample(),
            now_ms: 9,
        }),
        Command::AllocateProducerIds(AllocateProducerIds { count: 1_000 }),
        // Transactions v2 (format 11): "tx4" (producer 1003) produces to
        // t/0, its batch adding the partition, and commits, bumping its epoch.
        Command::InitTxnProducerChecked(InitTxnProducerChecked {
            init: InitTxnProducer {
                transactional_id: "tx4".into(),
                timeout_ms: 60_000,
                expected: None,
            },
            abort_check_interval_ms: 10_000,
        }),
        Command::IngestCommit(IngestCommit {
            object_key: "ingest/08/h".into(),
            object_size: 1_000,
            batches: vec![IngestBatch {
                batch: batch(0, 1_003),
                kind: BatchKind::TransactionalAdding,
            }],
            ends: vec![],
            not_before_ms: 1_700_000_030_000,
        }),
        Command::IngestCommit(IngestCommit {
            object_key: "ingest/09/i".into(),
            object_size: 1_000,
            batches: vec![IngestBatch {
                batch: CommitBatch {
                    length: 78,
                    record_count: 1,
                    producer_epoch: 1,
                    base_sequence: -1,
                    ..batch(0, 1_003)
                },
                kind: BatchKind::Marker { end: 0 },
            }],
            ends: vec![crate::txn::TxnEnd {
                transactional_id: "tx4".into(),
                producer_id: 1_003,
                epoch: 0,
                commit: true,
                reason: crate::txn::EndReason::ClientBumping,
                version: 1,
            }],
            not_before_ms: 1_700_000_030_000,
        }),
        // The cluster's id (format 13).
        Command::ClaimClusterId(ClaimClusterId {
            proposed: "MkU3OEVBNTcwNTJENDM2Qk".into(),
            store_marked: true,
        }),
        // A backup's hold on GC (format 14).
        Command::HoldGarbage(HoldGarbage {
            hold_ms: 7 * 86_400_000,
        }),
    ]
    .into_iter()
    .chain(share_samples())
    .collect()
}

/// Share groups' commands (format 15), in an order that applies cleanly:
/// "q" is altered before it has members, a member joins, takes records,
/// acknowledges some and closes its share session.
fn share_samples() -> Vec<Command> {
    let group = || "q".to_string();
    let member = || "share-member-1".to_string();
    vec![
        Command::AlterShareOffsets(AlterShareOffsets {
            group: group(),
            starts: vec![(TOPIC, 1, 0)],
        }),
        Command::ShareHeartbeat(ShareHeartbeat {
            group: group(),
            member_id: member(),
            member_epoch: 0,
            rack: Some("rack-a".into()),
            subscribed: Some(vec!["t".into()]),
            client_id: "share-client".into(),
            client_host: "/10.0.0.9".into(),
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            max_size: 200,
            now_ms: 1_700_000_050_000,
        }),
        Command::AcquireShare(AcquireShare {
            group: group(),
            member: member(),
            session: 7,
            partitions: vec![(TOPIC, 0), (TOPIC, 1)],
            max_records: 500,
            rules: AcquireRules {
                delivery_limit: 5,
                max_in_flight: 2_000,
                lock_ms: 30_000,
                start_from: StartFrom::Earliest,
                read_committed: false,
            },
            now_ms: 1_700_000_050_100,
        }),
        Command::AcknowledgeShare(AcknowledgeShare {
            group: group(),
            member: member(),
            acks: vec![PartitionAcks {
                topic: TOPIC,
                partition: 0,
                batches: vec![AckBatch {
                    first: 2,
                    last: 4,
                    types: vec![Ack::Accept, Ack::Release, Ack::Gap],
                }],
            }],
            delivery_limit: 5,
            now_ms: 1_700_000_050_200,
        }),
        Command::ReleaseShare(ReleaseShare {
            group: group(),
            member: member(),
            session: 7,
            partitions: vec![(TOPIC, 0)],
            delivery_limit: 5,
        }),
        Command::DeleteShareOffsets(DeleteShareOffsets {
            group: "empty-share-group".into(),
            topics: vec![TOPIC],
        }),
    ]
}

fn listeners_sample() -> Vec<crate::agents::ListenerEndpoint> {
    vec![
        crate::agents::ListenerEndpoint {
            name: "INTERNAL".into(),
            host: "10.0.0.5".into(),
            port: 9092,
            protocol: "PLAINTEXT".into(),
        },
        crate::agents::ListenerEndpoint {
            name: "EXTERNAL".into(),
            host: "kafka-5.example.com".into(),
            port: 9094,
            protocol: "SASL_SSL".into(),
        },
    ]
}

fn acl(principal: &str) -> crate::acls::AclBinding {
    crate::acls::AclBinding {
        resource_type: crate::acls::resource::TOPIC,
        resource_name: "orders-".into(),
        pattern_type: crate::acls::pattern::PREFIXED,
        principal: principal.into(),
        host: "*".into(),
        operation: crate::acls::operation::WRITE,
        permission: crate::acls::permission::ALLOW,
    }
}

fn acl_filter(principal: &str) -> crate::acls::AclFilter {
    crate::acls::AclFilter {
        resource_type: crate::acls::resource::ANY,
        resource_name: None,
        pattern_type: crate::acls::pattern::ANY,
        principal: Some(principal.into()),
        host: None,
        operation: crate::acls::operation::ANY,
        permission: crate::acls::permission::ANY,
    }
}

fn scram_upsert(user: &str) -> crate::scram::ScramAlteration {
    crate::scram::ScramAlteration::Upsert {
        user: user.into(),
        mechanism: 1,
        credential: crate::scram::ScramCredential {
            salt: vec![1, 2, 3],
            stored_key: vec![4, 5, 6],
            server_key: vec![7, 8, 9],
            iterations: 4096,
        },
    }
}

/// A merged file's swap of one run of partition 0 (`ingest/02/b`'s extent).
fn replace_runs(not_before_ms: i64) -> ReplaceRuns {
    ReplaceRuns {
        object_key: "segment/02/merged/m".into(),
        object_size: 500,
        runs: vec![RunSwap {
            partition: TopicPartition::new(TOPIC, 0),
            replaced: vec![ExtentRef {
                base_offset: 6,
                last_offset: 8,
                max_timestamp: 1_700_000_000_000,
                object_key: "ingest/02/b".into(),
                object_size: 1_000,
                position: 0,
                length: 100,
                appended_ms: 1_700_000_003_000,
            }],
            pieces: vec![ExtentPiece {
                base_offset: 6,
                last_offset: 8,
                max_timestamp: 1_700_000_000_000,
                position: 0,
                length: 100,
                appended_ms: 1_700_000_003_000,
            }],
        }],
        not_before_ms,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// `name hex` lines: every sample as a log entry, then the state they build.
fn encode_all() -> String {
    let mut state = State::default();
    let mut out = String::new();
    for (n, command) in samples().into_iter().enumerate() {
        let proposal = Proposal {
            at_ms: 1_700_000_000_000 + n as i64 * 1_000,
            command,
        };
        let bytes = postcard::to_stdvec(&proposal).unwrap();
        let back: Proposal = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, proposal, "round trip");
        let _ = writeln!(out, "{} {}", variant(&proposal.command), hex(&bytes));
        state.apply_proposal(proposal);
    }
    let snapshot = crate::format::encode_snapshot(&state).unwrap();
    let back: State = crate::format::decode_snapshot(&snapshot).unwrap();
    assert_eq!(back, state, "snapshot round trip");
    let _ = writeln!(out, "snapshot {}", hex(&snapshot));
    out
}

#[test]
fn golden_log_entries_and_snapshot_are_unchanged() {
    // Every variant has a sample.
    let named: std::collections::BTreeSet<&str> = samples().iter().map(variant).collect();
    // 38 commands, one of them with 14 group commands: `variant` is exhaustive,
    // so a new one must be named there, and counted here.
    assert_eq!(
        named.len(),
        51,
        "a command without a golden sample: {named:?}"
    );

    compare_with_golden(
        &format!("format-{FORMAT_VERSION}.txt"),
        &encode_all(),
        "the persisted encoding changed: bump FORMAT_VERSION (see this module's doc)",
    );
}

/// Every format this floe opens still reads: each older golden file's log
/// entries decode as today's commands, and replayed build the state its
/// snapshot (decoded as an upgrade would) holds.
#[test]
fn older_formats_still_read() {
    use crate::format::{OLDEST_READABLE_FORMAT, decode_snapshot_of};
    for format in OLDEST_READABLE_FORMAT..=FORMAT_VERSION {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("golden")
            .join(format!("format-{format}.txt"));
        let golden =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut state = State::default();
        let mut snapshot = None;
        for line in golden.lines() {
            let (name, hex) = line.split_once(' ').unwrap();
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            if name == "snapshot" {
                snapshot = Some(bytes);
                continue;
            }
            let proposal: Proposal = postcard::from_bytes(&bytes)
                .unwrap_or_else(|e| panic!("format {format}: {name} no longer decodes: {e}"));
            assert_eq!(variant(&proposal.command), name, "format {format}");
            state.apply_proposal(proposal);
        }
        let decoded = decode_snapshot_of(format, &snapshot.expect("a snapshot line"))
            .unwrap_or_else(|e| {
                panic!(
                    "format {format}'s snapshot no longer reads ({e}): keep a copy of its \
                     types in crate::format, or raise OLDEST_READABLE_FORMAT"
                )
            });
        // A transaction's identity is not in snapshots before format 12:
        // replayed, its old log entries give it one (see `Txn::began`).
        if format < 12 {
            state.forget_txn_identities();
        }
        assert_eq!(
            decoded, state,
            "format {format}: snapshot and replayed log differ"
        );
    }
}

/// Compares `encoded` line by line with `golden/{file}` (or writes it there
/// under `FLOE_BLESS=1`).
fn compare_with_golden(file: &str, encoded: &str, changed: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(file);
    if std::env::var_os("FLOE_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, encoded).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; write it with FLOE_BLESS=1", path.display()));
    for (want, got) in golden.lines().zip(encoded.lines()) {
        assert_eq!(got, want, "{changed}");
    }
    assert_eq!(golden.lines().count(), encoded.lines().count());
}

/// One of every request a client sends, and of every error it can get back.
fn wire_samples() -> (Vec<crate::api::Request>, Vec<MetaError>) {
    use crate::api::Request;
    let tp = TopicPartition::new(TOPIC, 1);
    let mut requests: Vec<Request> = vec![
        NewTopic {
            name: "u".into(),
            partitions: 2,
            configs: BTreeMap::from([("cleanup.policy".into(), "compact".into())]),
        }
        .into(),
        DeleteTopic { name: "t".into() }.into(),
        ListTopics.into(),
        TopicNamed { name: "t".into() }.into(),
        TopicById { id: TOPIC }.into(),
        Commit {
            object_key: "ingest/01/a".into(),
            object_size: 1000,
            batches: vec![batch(0, -1), batch(100, 7)],
            not_before_ms: 1_700_000_000_000,
        }
        .into(),
        Offsets { partition: tp }.into(),
        HighWatermarks {
            partitions: vec![tp, TopicPartition::new(TOPIC, 0)],
        }
        .into(),
        PlanRead {
            partition: tp,
            from: 5,
            max_bytes: 1 << 20,
        }
        .into(),
        FindOffset {
            partition: tp,
            query: OffsetQuery::Timestamp(1_700_000_000_000),
        }
        .into(),
        InitProducer {
            existing: Some(ProducerIdentity {
                producer_id: 7,
                epoch: 2,
            }),
        }
        .into(),
        GroupHeartbeat {
            group: "g".into(),
            generation: 3,
            member_id: "m".into(),
            instance_id: None,
        }
        .into(),
        DescribeGroup { name: "g".into() }.into(),
        JoinGroup {
            group: "g".into(),
            member_id: String::new(),
            instance_id: None,
            client_id: "c".into(),
            client_host: "/10.0.0.8".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 20_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), vec![1])],
            subscribed_topics: None,
            require_known_member_id: false,
            fresh_id: "2".into(),
            now_ms: 9,
            owned: Some(vec![("t".into(), vec![1])]),
            rules: JoinRules::KAFKA,
        }
        .into(),
        SyncGroup {
            group: "g".into(),
            generation: 1,
            member_id: "c-2".into(),
            instance_id: None,
            protocol_type: None,
            protocol: None,
            assignments: vec![("c-2".into(), vec![2])],
            now_ms: 9,
            decoded: vec![("c-2".into(), vec![("t".into(), vec![1])])],
            decodes: true,
        }
        .into(),
        CommitOffsets {
            group: "g".into(),
            generation: 1,
            member_id: "c-2".into(),
            instance_id: None,
            offsets: vec![OffsetToCommit {
                topic: "t".into(),
                partition: 1,
                offset: 5,
                leader_epoch: -1,
                metadata: None,
            }],
            now_ms: 9,
        }
        .into(),
        LeaveGroup {
            group: "g".into(),
            members: vec![
                Leaving {
                    member_id: "c-2".into(),
                    instance_id: None,
                },
                Leaving {
                    member_id: "x".into(),
                    instance_id: None,
                },
            ],
            now_ms: 9,
        }
        .into(),
        ReplaceExtents {
            topic_id: TOPIC,
            partition: 1,
            replaced: vec![],
            object_key: "segment/01/s".into(),
            object_size: 300,
            pieces: vec![],
            not_before_ms: 1_700_000_000_000,
        }
        .into(),
        ListGarbage.into(),
        RecordOrphans {
            keys: vec!["ingest/01/z".into()],
        }
        .into(),
        ForgetGarbage {
            keys: vec!["ingest/01/y".into()],
        }
        .into(),
        Trim {
            partition: tp,
            offset: 4,
        }
        .into(),
        UnknownObjects {
            keys: vec!["ingest/01/x".into()],
        }
        .into(),
        AlterTopicConfigs {
            name: "t".into(),
            set: BTreeMap::from([("retention.ms".into(), "5".into())]),
            delete: vec!["segment.ms".into()],
        }
        .into(),
        CreatePartitions {
            name: "t".into(),
            count: 4,
        }
        .into(),
        ListGroups.into(),
        RegisterAgent {
            host: "10.0.0.1".into(),
            port: 9092,
            zone: Some("us-east-1a".into()),
            now_ms: 1,
        }
        .into(),
        AgentHeartbeat {
            node_id: 3,
            now_ms: 2,
        }
        .into(),
        ListAgents.into(),
        AcquireLease {
            job: "compact/t/1".into(),
            holder: "agent-1".into(),
            now_ms: 3,
            ttl_ms: 30_000,
        }
        .into(),
        ReleaseLease {
            job: "compact/t/1".into(),
            holder: "agent-1".into(),
        }
        .into(),
        Tick.into(),
        CompactionWork {
            ingest_prefix: "ingest/".into(),
            max_files: 10,
            max_bytes: 1 << 20,
            max_extents: 1000,
            merged_prefix: "segment/02/merged/".into(),
            segment_bytes: 1 << 20,
            merge_max_chunks: 2,
            merge_max_age_ms: 60_000,
        }
        .into(),
        replace_runs(GoldenNode::NOW_MS).into(),
        PlanReads {
            partitions: vec![(tp, 0), (TopicPartition::new(TOPIC, 0), 7)],
            max_bytes: 1 << 20,
        }
        .into(),
        AwaitGroup {
            group: "g".into(),
            member_id: "c-2".into(),
            instance_id: None,
            seen: Some(3),
            wait_ms: 500,
        }
        .into(),
        GroupOffsets {
            group: "standalone".into(),
            partitions: Some(vec![("t".into(), 0), ("t".into(), 9)]),
        }
        .into(),
        DeleteGroups {
            groups: vec!["g".into(), "none".into()],
        }
        .into(),
        DeleteOffsets {
            group: "standalone".into(),
            partitions: vec![("t".into(), 0)],
        }
        .into(),
        ConsumerHeartbeat::from(consumer_heartbeat("cg", 1)).into(),
        DescribeConsumerGroup { name: "cg".into() }.into(),
        PartitionStates {
            partitions: vec![tp],
            with_producers: true,
        }
        .into(),
        crate::peers::CachePeers {
            announce: Some(crate::peers::CachePeer {
                node_id: 3,
                zone: Some("us-east-1a".into()),
                address: "10.0.0.3:9644".into(),
            }),
        }
        .into(),
        AlterScramCredentials {
            alterations: vec![scram_upsert("alice")],
        }
        .into(),
        ScramCredentialOf {
            user: "alice".into(),
            mechanism: crate::scram::ScramMechanism::Sha512,
        }
        .into(),
        DescribeScramCredentials {
            users: Some(vec!["alice".into()]),
        }
        .into(),
        CreateAcls {
            bindings: vec![acl("User:carol")],
        }
        .into(),
        DeleteAcls {
            filters: vec![acl_filter("User:carol")],
        }
        .into(),
        DescribeAcls {
            filter: acl_filter("User:alice"),
        }
        .into(),
        AclsIfChanged {
            known_version: Some(1),
        }
        .into(),
        // Transactions: answered once `txn_samples` are applied.
        InitTxnProducerChecked {
            init: InitTxnProducer {
                transactional_id: "tx3".into(),
                timeout_ms: 60_000,
                expected: None,
            },
            abort_check_interval_ms: 10_000,
        }
        .into(),
        AddToTxn {
            transactional_id: "tx3".into(),
            // After the block of 1,000 ids the log samples allocate, and tx4's.
            producer_id: 1_004,
            epoch: 0,
            partitions: vec![tp],
            groups: vec![],
        }
        .into(),
        EndTxn {
            end: crate::txn::TxnEnd {
                transactional_id: "tx".into(),
                producer_id: 1,
                epoch: 0,
                commit: false,
                reason: crate::txn::EndReason::Client,
                version: 2,
            },
        }
        .into(),
        IngestCommit {
            object_key: "ingest/07/g".into(),
            object_size: 1_000,
            batches: vec![IngestBatch {
                batch: batch(0, -1),
                kind: BatchKind::Plain,
            }],
            ends: vec![],
            not_before_ms: GoldenNode::NOW_MS,
        }
        .into(),
        DescribeTxns {
            ids: vec!["tx".into(), "nope".into()],
        }
        .into(),
        ListTxns {
            phases: vec![crate::txn::TxnPhase::CompleteAbort],
            producer_ids: vec![],
            min_duration_ms: -1,
        }
        .into(),
        ExpiredTxns { limit: 10 }.into(),
        TxnReadPlans {
            partitions: vec![(tp, 0)],
            max_bytes: 1 << 20,
        }
        .into(),
        TxnCommitOffsets {
            transactional_id: "tx3".into(),
            producer_id: 1_004,
            epoch: 0,
            commit: txn_offsets(),
        }
        .into(),
        PendingTxnOffsets { group: "g".into() }.into(),
        AlterConfigs {
            target: ConfigTarget::Dynamic(crate::ConfigEntity::Cluster),
            ops: vec![ConfigOp::Set(
                "offsets.retention.minutes".into(),
                "1440".into(),
            )],
            replace: true,
        }
        .into(),
        DynamicConfigsOf {
            entity: crate::ConfigEntity::Group("g".into()),
        }
        .into(),
        ClientMetricsIfChanged {
            known_version: None,
        }
        .into(),
        ClientQuotasIfChanged {
            known_version: None,
        }
        .into(),
        RegisterAgentListeners {
            host: "10.0.0.6".into(),
            port: 9092,
            zone: None,
            listeners: vec![crate::agents::ListenerEndpoint {
                name: "INTERNAL".into(),
                host: "10.0.0.6".into(),
                port: 9092,
                protocol: "PLAINTEXT".into(),
            }],
            now_ms: 10,
        }
        .into(),
        ListAgentsOn {
            listener: "EXTERNAL".into(),
            protocol: "SASL_SSL".into(),
        }
        .into(),
        PartitionLooks {
            partitions: vec![
                TopicPartition::new(TOPIC, 0),
                TopicPartition::new(TOPIC, 99),
            ],
        }
        .into(),
        PartitionLooksSince {
            partitions: vec![
                (TopicPartition::new(TOPIC, 0), None),
                (
                    TopicPartition::new(TOPIC, 1),
                    Some(LookMark {
                        high_watermark: 0,
                        log_start_offset: 0,
                        extents: 0,
                        newest_object: 0,
                        last_stable_offset: 0,
                    }),
                ),
                (TopicPartition::new(TOPIC, 99), None),
                // The sample partition as it is: unchanged.
                (
                    TopicPartition::new(TOPIC, 0),
                    Some(LookMark {
                        high_watermark: 12,
                        log_start_offset: 2,
                        extents: 3,
                        newest_object: 6,
                        last_stable_offset: 12,
                    }),
                ),
            ],
        }
        .into(),
    ];
    requests.push(AllocateProducerIds { count: 1_000 }.into());
    requests.push(crate::quorum::DescribeQuorum.into());
    requests.push(ConfiguredGroups.into());
    requests.push(
        ClaimClusterId {
            proposed: "MkU3OEVBNTcwNTJENDM2Qk".into(),
            store_marked: false,
        }
        .into(),
    );
    requests.push(HoldGarbage { hold_ms: 3_600_000 }.into());
    for command in share_samples() {
        match command {
            Command::ShareHeartbeat(c) => requests.push(c.into()),
            Command::AcquireShare(c) => requests.push(c.into()),
            Command::AcknowledgeShare(c) => requests.push(c.into()),
            Command::ReleaseShare(c) => requests.push(c.into()),
            Command::AlterShareOffsets(c) => requests.push(c.into()),
            Command::DeleteShareOffsets(c) => requests.push(c.into()),
            _ => unreachable!("share samples are share commands"),
        }
    }
    requests.push(DescribeShareGroup { name: "q".into() }.into());
    let errors = vec![
        MetaError::Refused(Refusal::OutOfOrderSequence {
            producer_id: 7,
            last: 4,
            got: 9,
        }),
        MetaError::Refused(Refusal::CommitTooLate("ingest/01/a".into())),
        MetaError::NotLeader(Some("10.0.0.2:7000".into())),
        MetaError::maybe_applied("no quorum"),
        MetaError::Storage("disk".into()),
    ];
    (requests, errors)
}

/// The requests added with transactions (format 7) and since: answered
/// from the state the log samples build.
const TXN_REQUESTS: &[&str] = &[
    "AlterConfigs",
    "DynamicConfigsOf",
    "ClientMetricsIfChanged",
    "ClientQuotasIfChanged",
    "RegisterAgentListeners",
    "ListAgentsOn",
    "PartitionLooks",
    "PartitionLooksSince",
    "AllocateProducerIds",
    "ConfiguredGroups",
    "InitTxnProducerChecked",
    "AddToTxn",
    "EndTxn",
    "IngestCommit",
    "DescribeTxns",
    "ListTxns",
    "ExpiredTxns",
    "TxnReadPlans",
    "TxnCommitOffsets",
    "PendingTxnOffsets",
];

#[test]
fn golden_wire_requests_and_errors_are_unchanged() {
    let (requests, errors) = wire_samples();
    let named: std::collections::BTreeSet<&str> = requests.iter().map(|r| r.name()).collect();
    let all: std::collections::BTreeSet<&str> =
        crate::api::Request::NAMES.iter().copied().collect();
    assert_eq!(named, all, "every request needs a golden sample");

    let mut encoded = String::new();
    for request in &requests {
        let bytes = postcard::to_stdvec(request).unwrap();
        let _ = writeln!(encoded, "{} {}", request.name(), hex(&bytes));
    }
    // Each answer as a node sends it, from the state the log samples build:
    // this pins every operation's `Output` (and the refusals it gives).
    let built_of = |commands: Vec<Command>| {
        let node = GoldenNode::default();
        for command in commands {
            node.state.lock().unwrap().apply_proposal(Proposal {
                at_ms: GoldenNode::NOW_MS,
                command,
            });
        }
        node
    };
    // Requests older than transactions are answered as they always were;
    // the transactions' from a state that holds some.
    let node = built_of(wire_state_samples());
    let txn_node = built_of(samples());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // DeleteTopic last, so that the others find its topic.
    let (deletes, others): (Vec<_>, Vec<_>) = requests
        .iter()
        .cloned()
        .partition(|r| r.name() == "DeleteTopic");
    for request in others.into_iter().chain(deletes) {
        let name = request.name();
        let on = if TXN_REQUESTS.contains(&name) {
            &txn_node
        } else {
            &node
        };
        let bytes = runtime.block_on(request.answer_on(on)).unwrap();
        let _ = writeln!(encoded, "answer {name} {}", hex(&bytes));
    }
    for error in &errors {
        let bytes = postcard::to_stdvec(&Err::<(), _>(error.clone())).unwrap();
        let back: Result<(), MetaError> = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, Err(error.clone()), "round trip");
        let _ = writeln!(encoded, "error {}", hex(&bytes));
    }
    compare_with_golden(
        &format!("wire-{}.txt", crate::contract::wire::WIRE_VERSION),
        &encoded,
        "the wire encoding changed: bump wire::WIRE_VERSION (see this module's doc)",
    );
}

/// A metastore of one deterministic state, for the golden answers: a fixed
/// clock, ids counted up.
#[derive(Default)]
struct GoldenNode {
    state: std::sync::Mutex<State>,
    ids: std::sync::atomic::AtomicU64,
}

impl GoldenNode {
    const NOW_MS: i64 = 1_700_000_100_000;
}

impl crate::sequencer::Sequencer for GoldenNode {
    async fn propose(&self, command: Command) -> Result<crate::state::Reply, MetaError> {
        let proposal = Proposal {
            at_ms: Self::NOW_MS,
            command,
        };
        Ok(self.state.lock().unwrap().apply_proposal(proposal))
    }
    async fn read<T: Send, F: FnOnce(&State) -> T + Clone + Send>(
        &self,
        f: F,
    ) -> Result<T, MetaError> {
        Ok(f(&self.state.lock().unwrap()))
    }
    fn now_ms(&self) -> i64 {
        Self::NOW_MS
    }
    fn new_id(&self) -> Uuid {
        let n = self.ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Uuid::from_u128(1_000 + n as u128)
    }
}
