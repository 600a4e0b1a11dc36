//! Every metastore operation, one named struct each.
//!
//! Reads are answered from an up-to-date state; writes are the entries of
//! the replicated log, so their encoding is part of the log's format (see
//! `golden.rs`): postcard writes a struct as its fields in order, so a field
//! may not be moved, and a nested struct (a [`TopicPartition`]) encodes as
//! its fields would. What each returns is in the table of [`crate::contract::api`];
//! how the state machine answers it, in its `impl Query` or `impl Apply` in
//! `crate::state` (part of the node, not of this contract).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::contract::types::*;

// ---- reads ----

/// Every topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListTopics;

/// The topic of this name, if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicNamed {
    pub name: String,
}

/// The topic of this id, if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicById {
    pub id: TopicId,
}

/// A partition's log start offset and high watermark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offsets {
    pub partition: TopicPartition,
}

/// Many partitions' high watermarks at once (`None`: no such partition),
/// for agents watching what their waiting fetches wait on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HighWatermarks {
    pub partitions: Vec<TopicPartition>,
}

/// Many partitions' offsets, bytes held and idempotent producers (`None`:
/// no such partition), for the admin APIs that describe them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionStates {
    pub partitions: Vec<TopicPartition>,
    /// Whether to list each partition's producers (DescribeProducers), or
    /// leave them out (DescribeLogDirs, which asks for many partitions).
    pub with_producers: bool,
}

/// The extents holding a partition's records from offset `from` on, up to
/// about `max_bytes` (at least one extent if there is data at `from`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanRead {
    pub partition: TopicPartition,
    pub from: i64,
    pub max_bytes: u64,
}

/// Compaction's work list (a [`Backlog`]): the oldest ingest files still
/// referenced, up to `max_files` and, past the first, `max_bytes` and
/// `max_extents` in all, with
/// every run of extents in them; and the partitions holding small chunks of
/// merged files worth merging into a segment (see
/// [`CompactionWork::merge_run`]). One request per pass, however many
/// partitions there are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionWork {
    pub ingest_prefix: String,
    pub max_files: u32,
    pub max_bytes: u64,
    /// Past the first file, the files' extents at most (bounds the answer,
    /// and the entry that swaps them).
    pub max_extents: u64,
    /// Where merged files live.
    pub merged_prefix: String,
    /// The segments a partition's small chunks are merged into grow to this.
    pub segment_bytes: u64,
    /// Small chunks in a row that are merged whatever their size (so a
    /// partition's extents stay few).
    pub merge_max_chunks: u32,
    /// Small chunks this old (on the metastore's clock) are merged whatever
    /// their size.
    pub merge_max_age_ms: i64,
}

/// Read plans of many partitions at once, each from its own offset, each up
/// to about `max_bytes` (the read path's one request for a fetch's misses,
/// and its poll for what waiting fetches wait on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanReads {
    pub partitions: Vec<(TopicPartition, i64)>,
    pub max_bytes: u64,
}

/// ListOffsets: the offset (or the extent holding it) that `query` asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindOffset {
    pub partition: TopicPartition,
    pub query: OffsetQuery,
}

/// Keys of objects that nothing refers to any more, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListGarbage;

/// Those of `keys` the metastore does not know: neither referenced nor garbage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnknownObjects {
    pub keys: Vec<String>,
}

/// Every registered agent, with how long ago (on the leader's clock) it
/// was last heard from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListAgents;

/// The metastore's time: a leader's stamp, never moving back; what an
/// upload carries as `not_before_ms`. A write, not a read: the state's clock
/// moves only with proposals, so a quiet group's applied time could lag, and
/// a Tick brings it to now. (The log's `Tick` entry.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tick;

// ---- writes: the log's entries ----

/// Creates a topic under `id`, which the node that proposes it draws (the
/// state machine must be deterministic). Clients send a [`NewTopic`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateTopic {
    pub id: TopicId,
    pub topic: NewTopic,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteTopic {
    pub name: String,
}

/// A block of `count` producer ids (at most [`MAX_PRODUCER_ID_BLOCK`]) for
/// an agent to hand out to idempotent producers (KIP-730): answered with
/// the first. Nothing is kept of an id
/// until its producer writes (format 11; see [`InitProducer`] for before).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocateProducerIds {
    pub count: u32,
}

/// The most ids one [`AllocateProducerIds`] hands out.
pub const MAX_PRODUCER_ID_BLOCK: u32 = 1_000_000;

/// Issues an idempotent producer id, or bumps the epoch of `existing` if it
/// is current. (What agents asked before producer id blocks, format 10:
/// a log write and a day of state per call.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitProducer {
    pub existing: Option<ProducerIdentity>,
}

/// These garbage objects are deleted from the store; forget them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgetGarbage {
    pub keys: Vec<String>,
}

/// Registers a self-advertising agent at `host:port`; answers its node id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterAgent {
    pub host: String,
    pub port: i32,
    pub zone: Option<String>,
    /// Replaced by the leader's stamp when applied.
    pub now_ms: i64,
}

/// Registers an agent with its advertised listeners (Kafka's
/// `advertised.listeners`), the first at `host:port`; answers its node id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterAgentListeners {
    pub host: String,
    pub port: i32,
    pub zone: Option<String>,
    pub listeners: Vec<crate::contract::agents::ListenerEndpoint>,
    /// Replaced by the leader's stamp when applied.
    pub now_ms: i64,
}

/// Key compaction's look at many partitions: each one's extents from its
/// log start and its last stable offset (no aborted transactions, which it
/// does not need), so a pass costs a request per chunk of partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionLooks {
    pub partitions: Vec<TopicPartition>,
}

/// One partition as [`PartitionLooks`] answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionLook {
    pub extents: Vec<ExtentRef>,
    pub last_stable_offset: i64,
}

/// [`PartitionLooks`] for an asker that keeps its last looks: each
/// partition comes with the [`LookMark`] of the look it holds, and one
/// whose mark is the same is answered [`LookSince::Unchanged`], without its
/// extents. So key compaction's pass costs the leader and the wire a mark
/// per partition, and extents only for the partitions that changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionLooksSince {
    pub partitions: Vec<(TopicPartition, Option<LookMark>)>,
}

/// What tells a partition's look from any later one, on any metastore
/// node: every change of its extents moves its high watermark (a commit,
/// or an extent extended: batches hold at least one record), its log start
/// (a trim), or the newest object it holds (a swap's object is newer than
/// every object before it, and a swap keeps at least its last piece, which
/// only a later swap or a trim removes); the count of extents and the last
/// stable offset are belts to those braces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LookMark {
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub extents: u64,
    pub newest_object: u64,
    pub last_stable_offset: i64,
}

/// One partition as [`PartitionLooksSince`] answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LookSince {
    /// The asker's look is still the partition's.
    Unchanged,
    Changed {
        look: PartitionLook,
        mark: LookMark,
    },
}

/// The agents a client of one listener is told about, at their addresses
/// on it (see [`crate::contract::agents::Agents::list_on`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListAgentsOn {
    pub listener: String,
    pub protocol: String,
}

/// An agent is alive; answers false if it is not registered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentHeartbeat {
    pub node_id: i32,
    /// Replaced by the leader's stamp when applied.
    pub now_ms: i64,
}

/// Sets and removes a topic's configs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterTopicConfigs {
    pub name: String,
    pub set: BTreeMap<String, String>,
    pub delete: Vec<String>,
}

/// Grows a topic to `count` partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatePartitions {
    pub name: String,
    pub count: i32,
}

/// Moves a partition's log start up to `offset` (retention, DeleteRecords),
/// dropping the extents wholly below it; answers the log start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trim {
    pub partition: TopicPartition,
    pub offset: i64,
}

/// Objects that may have been uploaded but were never committed: to the
/// garbage list, unless the log knows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordOrphans {
    pub keys: Vec<String>,
}

/// Takes (or renews) the lease on background `job` for `holder` until
/// `now_ms + ttl_ms`; answers false while someone else holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcquireLease {
    pub job: String,
    pub holder: String,
    /// Replaced by the leader's stamp when applied.
    pub now_ms: i64,
    pub ttl_ms: i64,
}

/// Keeps every object freed from now on out of GC for `hold_ms` on the
/// metastore's clock: taken by a backup, so that the objects its state
/// refers to are still there when it is restored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldGarbage {
    pub hold_ms: i64,
}

/// When the hold taken expires (metastore clock).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GarbageHeld {
    pub until_ms: i64,
}

/// The cluster's id: the one set, or `proposed` if none is (the first
/// claim sets it for good). Agents check it against the id kept in the
/// object store, so an agent never serves one cluster's metastore over
/// another's objects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimClusterId {
    pub proposed: String,
    /// The object store now holds the id `proposed` (an agent checked):
    /// recorded when `proposed` is the cluster's id, so that from then on a
    /// store without it is known to be another store.
    pub store_marked: bool,
}

/// The cluster's id, and whether its object store is known to hold it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterIdentity {
    pub id: String,
    pub store_marked: bool,
    /// An object the metastore knows its store holds (the newest live
    /// one), if any: a store that lacks it is not this cluster's.
    pub known_object: Option<String>,
}

/// Gives up `holder`'s lease on `job`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseLease {
    pub job: String,
    pub holder: String,
}

/// Sets and deletes users' SCRAM credentials (AlterUserScramCredentials);
/// each user's outcome (see [`crate::contract::scram`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterScramCredentials {
    pub alterations: Vec<crate::contract::scram::ScramAlteration>,
}

/// One user's credential for one mechanism, to check a SCRAM client with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredentialOf {
    pub user: String,
    pub mechanism: crate::contract::scram::ScramMechanism,
}

/// Users' SCRAM mechanisms and iteration counts (DescribeUserScramCredentials):
/// every user's, or those named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescribeScramCredentials {
    pub users: Option<Vec<String>>,
}

/// Adds ACL bindings (CreateAcls); each one's outcome (why it is invalid).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateAcls {
    pub bindings: Vec<crate::contract::acls::AclBinding>,
}

/// Removes the bindings each filter matches (DeleteAcls); per filter, the
/// bindings removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteAcls {
    pub filters: Vec<crate::contract::acls::AclFilter>,
}

/// The bindings a filter matches (DescribeAcls).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescribeAcls {
    pub filter: crate::contract::acls::AclFilter,
}

/// Every binding with their version, unless the asker already holds that
/// version (then only the version): how agents keep their copy current
/// without copying it every time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclsIfChanged {
    pub known_version: Option<u64>,
}

/// Changes one resource's configs, all or none (AlterConfigs with
/// `replace`, IncrementalAlterConfigs without): the operations apply to the
/// configs as the state holds them then, and the result is checked whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlterConfigs {
    pub target: crate::contract::dynamic_config::ConfigTarget,
    pub ops: Vec<crate::contract::dynamic_config::ConfigOp>,
    pub replace: bool,
}

/// Every client metrics subscription with the configs' version, unless the
/// asker holds that version already (then only the version): how agents
/// keep their copy current (see [`AclsIfChanged`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientMetricsIfChanged {
    pub known_version: Option<u64>,
}

/// Every client quota entity's quotas with the configs' version, unless
/// the asker holds that version already (see [`AclsIfChanged`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientQuotasIfChanged {
    pub known_version: Option<u64>,
}

/// The names of the groups that have configs set (ListConfigResources).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfiguredGroups;

/// What one entity sets (DescribeConfigs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DynamicConfigsOf {
    pub entity: crate::contract::dynamic_config::ConfigEntity,
}

// ---- transactions (see `crate::contract::txn`) ----

/// InitProducerId with a transactional id: the id's producer id at a new
/// epoch (`expected`: the producer's current one, KIP-360), or
/// `ConcurrentTransactions` while a transaction of it must first be fenced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitTxnProducer {
    pub transactional_id: String,
    pub timeout_ms: i32,
    pub expected: Option<ProducerIdentity>,
}

/// InitTxnProducer from format 11, with the coordinator's abort check
/// interval (Kafka's
/// `transaction.abort.timed.out.transaction.cleanup.interval.ms`): the
/// id's transactions time out at the first check after their timeout, not
/// at once (see [`crate::contract::txn::Txn::expired`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitTxnProducerChecked {
    pub init: InitTxnProducer,
    pub abort_check_interval_ms: i32,
}

/// AddPartitionsToTxn and AddOffsetsToTxn: adds partitions and groups to
/// the producer's transaction, starting it if it was not ongoing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddToTxn {
    pub transactional_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub partitions: Vec<TopicPartition>,
    pub groups: Vec<String>,
}

/// Ends a transaction that wrote to no partition (one that did ends with
/// its markers, in an [`IngestCommit`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndTxn {
    pub end: crate::contract::txn::TxnEnd,
}

/// A [`Commit`] that knows transactions: each batch says what it is, and
/// `ends` are the transactions whose markers the object holds. Data batches
/// are sequenced first, in order; then each end is decided and, if
/// accepted, its markers sequenced and the transaction completed, all in
/// this one entry; a refused end refuses all its markers. Answered per
/// batch, and kept in the ledger, as a `Commit` is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngestCommit {
    pub object_key: String,
    pub object_size: u64,
    pub batches: Vec<IngestBatch>,
    pub ends: Vec<crate::contract::txn::TxnEnd>,
    pub not_before_ms: i64,
}

impl From<Commit> for IngestCommit {
    fn from(c: Commit) -> IngestCommit {
        IngestCommit {
            object_key: c.object_key,
            object_size: c.object_size,
            batches: c
                .batches
                .into_iter()
                .map(|batch| IngestBatch {
                    batch,
                    kind: BatchKind::Plain,
                })
                .collect(),
            ends: Vec::new(),
            not_before_ms: c.not_before_ms,
        }
    }
}

/// Transactional ids as DescribeTransactions shows them (`None`: unknown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescribeTxns {
    pub ids: Vec<String>,
}

/// Transactional ids as ListTransactions filters them: in one of `phases`
/// (all when empty), of one of `producer_ids` (all when empty), ongoing for
/// at least `min_duration_ms` on the metastore's clock (all when negative).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListTxns {
    pub phases: Vec<crate::contract::txn::TxnPhase>,
    pub producer_ids: Vec<i64>,
    pub min_duration_ms: i64,
}

/// Ongoing transactions past their timeout on the metastore's clock, at
/// most `limit`: what the timeout job aborts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpiredTxns {
    pub limit: u32,
}

/// [`PlanReads`] with each partition's last stable offset and aborted
/// transactions (what every fetch needs once transactions exist).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnReadPlans {
    pub partitions: Vec<(TopicPartition, i64)>,
    pub max_bytes: u64,
}

/// TxnOffsetCommit: offsets for a group, committed with the producer's
/// transaction (dropped if it aborts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnCommitOffsets {
    pub transactional_id: String,
    pub producer_id: i64,
    pub epoch: i16,
    pub commit: crate::contract::groups::CommitOffsets,
}

/// The partitions of a group with offsets in an ongoing transaction
/// (OffsetFetch's `require_stable` answers them UNSTABLE_OFFSET_COMMIT).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingTxnOffsets {
    pub group: String,
}
