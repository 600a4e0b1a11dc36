//! The metastore API, written once.
//!
//! Each operation is a struct ([`crate::contract::ops`]); the table at the end of this
//! file gives each one the type of its answer ([`Op::Output`]) and says
//! whether a client may send it again when it does not know whether the
//! first one applied. From the table come the [`Metastore`] trait agents
//! call and the wire's [`Request`] enum. Every metastore is a [`Transport`]
//! with one generic `call`: a node that sequences commands itself (see
//! `crate::sequencer`, which answers each operation from the state machine)
//! and the network client ([`crate::RemoteMetastore`]). The answer's type is
//! the operation's at both ends of every transport, so no reply can be of
//! the wrong kind.
//!
//! This file is part of the contract: it names no state machine. A node
//! answers the table's operations by expanding the same table
//! ([`metastore_ops`]) with its own callback.
//!
//! Adding an operation: its struct in `ops`; its line in the table here
//! (its answer, and `retry` or `once`); its `impl Query` or `impl Apply` in
//! `state` (a write also gets a variant at the end of `Command`, the log's
//! format); a sample in the golden tests, which refuse to pass without one.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;

use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::contract::agents::AgentInfo;
use crate::contract::groups::*;
use crate::contract::ops::*;
use crate::contract::peers::{CachePeer, CachePeers};
use crate::contract::quorum::DescribeQuorum;
use crate::contract::scram::{ScramCredential, ScramRefusal};
use crate::contract::txn::TxnView;
use crate::contract::types::*;

/// What every answer is: it crosses the network, and a write's crosses the log.
pub trait Answer: Serialize + DeserializeOwned + Debug + Send + 'static {}
impl<T: Serialize + DeserializeOwned + Debug + Send + 'static> Answer for T {}

/// One metastore operation: a request that knows the type of its answer.
pub trait Op:
    Serialize + DeserializeOwned + Debug + Clone + Send + Sync + Into<Request> + 'static
{
    type Output: Answer;
    /// Whether sending it again, when the first attempt's fate is unknown,
    /// has the effect of sending it once. (A request that was certainly not
    /// applied, see [`MetaError::certainly_not_applied`], may always be sent
    /// again.)
    fn retry_is_safe(&self) -> bool;
}

/// Something that answers metastore operations: the one call every
/// transport implements.
pub trait Transport: Send + Sync + 'static {
    fn call<O: Op>(&self, op: O) -> impl Future<Output = Result<O::Output, MetaError>> + Send;

    /// Opens a subscription to pushed changes under a read lease (see
    /// [`crate::contract::push`]). By default there is none: the caller
    /// asks for what it needs, as it always may.
    fn subscribe(
        &self,
    ) -> impl Future<Output = Result<crate::contract::push::Subscription, MetaError>> + Send {
        async { Err(MetaError::unavailable("this metastore pushes no changes")) }
    }
}

/// Whether a line of the table may be sent again: a read always may; a
/// write or a `custom` operation says `retry` or `once`.
macro_rules! retry_is_safe {
    (read) => {
        true
    };
    ($kind:ident retry) => {
        true
    };
    ($kind:ident once) => {
        false
    };
}

/// Everything the contract generates from the table (see [`metastore_ops`]):
/// each operation's [`Op`], the [`Metastore`] trait and [`Request`].
macro_rules! metastore_api {
    ($(
        $(#[$doc:meta])*
        $kind:ident $(($retry:ident))? fn $method:ident($($arg:ident: $ty:ty),*) -> $op:ident: $out:ty $build:block
    )*) => {
        $( impl Op for $op {
            type Output = $out;
            fn retry_is_safe(&self) -> bool {
                retry_is_safe!($kind $($retry)?)
            }
        } )*

        /// Everything an agent or compactor asks of the metastore.
        #[async_trait]
        pub trait Metastore: Send + Sync + 'static {
            $( $(#[$doc])* async fn $method(&self, $($arg: $ty),*) -> Result<<$op as Op>::Output, MetaError>; )*

            /// As [`Transport::subscribe`].
            async fn subscribe(&self) -> Result<crate::contract::push::Subscription, MetaError>;
        }

        // Each line's builder is a block, which lints as braces around an argument.
        #[allow(unused_braces)]
        #[async_trait]
        impl<T: Transport> Metastore for T {
            $( async fn $method(&self, $($arg: $ty),*) -> Result<<$op as Op>::Output, MetaError> {
                self.call($build).await
            } )*

            async fn subscribe(&self) -> Result<crate::contract::push::Subscription, MetaError> {
                Transport::subscribe(self).await
            }
        }

        /// One operation, as a client sends it.
        #[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
        pub enum Request {
            $( $op($op), )*
        }

        $( impl From<$op> for Request {
            fn from(op: $op) -> Request {
                Request::$op(op)
            }
        } )*

        impl Request {
            /// Every variant's name, in wire order (for the wire's golden test).
            #[cfg(test)]
            pub(crate) const NAMES: &[&str] = &[$(stringify!($op),)*];

            /// This request's variant name.
            pub fn name(&self) -> &'static str {
                match self {
                    $( Request::$op(_) => stringify!($op), )*
                }
            }

            /// Runs the request on `meta`; its answer as the operation's
            /// `Result<Output, MetaError>`, encoded.
            pub(crate) async fn answer_on<T: Transport>(self, meta: &T) -> Result<Vec<u8>, postcard::Error> {
                match self {
                    $( Request::$op(op) => postcard::to_stdvec(&meta.call(op).await), )*
                }
            }
        }
    };
}

/// The table: one line per operation: whether it reads, writes (through the
/// log) or is `custom` (a node answers it by hand), whether a write or a
/// custom operation may be sent again (`retry`) or not (`once`), the method
/// agents call, the operation it sends and the type of its answer. The
/// order of the lines is the order of [`Request`]'s variants on the wire
/// (see [`crate::contract::wire::WIRE_VERSION`]): append only.
///
/// `metastore_ops!(callback)` hands the table to `callback`: the contract's
/// [`metastore_api`] here, and the node's dispatch in `crate::sequencer`.
macro_rules! metastore_ops {
    ($callback:ident) => {
        $callback! {
            custom(once) fn create_topic(topic: NewTopic) -> NewTopic: TopicInfo { topic }
            /// A blind retry after another client re-created the topic would delete it.
            write(once) fn delete_topic(name: &str) -> DeleteTopic: () { DeleteTopic { name: name.to_string() } }
            read fn topics() -> ListTopics: Vec<TopicInfo> { ListTopics }
            read fn topic(name: &str) -> TopicNamed: Option<TopicInfo> { TopicNamed { name: name.to_string() } }
            read fn topic_by_id(id: TopicId) -> TopicById: Option<TopicInfo> { TopicById { id } }
            /// Sequences the batches of an uploaded object. The outer error means
            /// nothing was committed; the inner ones are per batch.
            /// A repeated commit of an object key is answered from the ledger.
            /// Per batch, in commit order: its base offset, or why it was refused.
            write(retry) fn commit(commit: Commit) -> Commit: Vec<Result<i64, Refusal>> { commit }
            read fn offsets(topic_id: TopicId, partition: i32) -> Offsets: PartitionOffsets {
                Offsets { partition: TopicPartition::new(topic_id, partition) }
            }
            read fn high_watermarks(partitions: Vec<TopicPartition>) -> HighWatermarks: Vec<Option<i64>> {
                HighWatermarks { partitions }
            }
            read fn read_plan(topic_id: TopicId, partition: i32, from: i64, max_bytes: u64) -> PlanRead: ReadPlan {
                PlanRead { partition: TopicPartition::new(topic_id, partition), from, max_bytes }
            }
            read fn list_offsets(topic_id: TopicId, partition: i32, query: OffsetQuery) -> FindOffset: OffsetAnswer {
                FindOffset { partition: TopicPartition::new(topic_id, partition), query }
            }
            /// A second one costs only a producer id or an epoch: the producer uses
            /// whichever answer reaches it.
            write(retry) fn init_producer(existing: Option<ProducerIdentity>) -> InitProducer: ProducerIdentity {
                InitProducer { existing }
            }
            write(once) fn join_group(join: JoinGroup) -> JoinGroup: Result<Joined, GroupError> { join }
            write(retry) fn sync_group(sync: SyncGroup) -> SyncGroup: Result<Synced, GroupError> { sync }
            /// Answered by the leader, not written (see [`crate::contract::groups`]).
            custom(retry) fn group_heartbeat(beat: GroupHeartbeat) -> GroupHeartbeat: Result<(), GroupError> { beat }
            /// Per member, in order.
            write(once) fn leave_group(leave: LeaveGroup) -> LeaveGroup: Vec<Result<(), GroupError>> { leave }
            write(once) fn commit_offsets(commit: CommitOffsets) -> CommitOffsets: Result<(), GroupError> { commit }
            read fn describe_group(name: &str) -> DescribeGroup: Option<GroupDescription> { DescribeGroup { name: name.to_string() } }
            /// A repeated swap is refused (its key is known), not re-applied; but
            /// the compactor must see the first answer, so it does not retry.
            write(once) fn replace_extents(replace: ReplaceExtents) -> ReplaceExtents: () { replace }
            read fn garbage() -> ListGarbage: Vec<String> { ListGarbage }
            /// The state skips keys it knows, so a second time changes nothing.
            write(retry) fn record_orphans(keys: Vec<String>) -> RecordOrphans: () { RecordOrphans { keys } }
            write(retry) fn forget_garbage(keys: Vec<String>) -> ForgetGarbage: () { ForgetGarbage { keys } }
            /// The log start only moves up: a second trim to the same offset is none.
            /// The partition's log start offset after the trim.
            write(retry) fn trim(topic_id: TopicId, partition: i32, offset: i64) -> Trim: i64 {
                Trim { partition: TopicPartition::new(topic_id, partition), offset }
            }
            read fn unknown_objects(keys: Vec<String>) -> UnknownObjects: Vec<String> { UnknownObjects { keys } }
            /// A blind retry landing after another client's change would undo it.
            write(once) fn alter_topic_configs(
                name: &str,
                set: std::collections::BTreeMap<String, String>,
                delete: Vec<String>
            ) -> AlterTopicConfigs: () {
                AlterTopicConfigs { name: name.to_string(), set, delete }
            }
            write(once) fn create_partitions(name: &str, count: i32) -> CreatePartitions: () {
                CreatePartitions { name: name.to_string(), count }
            }
            read fn groups() -> ListGroups: Vec<GroupListing> { ListGroups }
            write(retry) fn register_agent(host: String, port: i32, zone: Option<String>, now_ms: i64) -> RegisterAgent: i32 {
                RegisterAgent { host, port, zone, now_ms }
            }
            write(retry) fn agent_heartbeat(node_id: i32, now_ms: i64) -> AgentHeartbeat: bool {
                AgentHeartbeat { node_id, now_ms }
            }
            read fn agents() -> ListAgents: Vec<AgentInfo> { ListAgents }
            /// Whether `holder` holds the lease now.
            write(retry) fn acquire_lease(job: String, holder: String, now_ms: i64, ttl_ms: i64) -> AcquireLease: bool {
                AcquireLease { job, holder, now_ms, ttl_ms }
            }
            /// Releasing twice is releasing once.
            write(retry) fn release_lease(job: String, holder: String) -> ReleaseLease: () {
                ReleaseLease { job, holder }
            }
            /// The metastore's time (see [`Tick`]).
            /// The metastore's time once this entry applied.
            write(retry) fn clock() -> Tick: i64 { Tick }
            /// Compaction's work list: one request per pass.
            read fn compaction_work(work: CompactionWork) -> CompactionWork: Backlog { work }
            /// Swaps many partitions' runs for one merged file's chunks.
            /// As [`ReplaceExtents`]: a repeat is refused, its key being known.
            write(once) fn replace_runs(replace: ReplaceRuns) -> ReplaceRuns: Vec<Result<(), Refusal>> { replace }
            /// Read plans of many partitions in one request.
            read fn read_plans(partitions: Vec<(TopicPartition, i64)>, max_bytes: u64) -> PlanReads: Vec<Result<ReadPlan, Refusal>> {
                PlanReads { partitions, max_bytes }
            }
            /// Waits for a group to change (see [`AwaitGroup`]).
            custom(retry) fn await_group(wait: AwaitGroup) -> AwaitGroup: Option<MemberView> { wait }
            /// Each partition asked (or every one committed) with its offset, if any.
            read fn group_offsets(group: &str, partitions: Option<Vec<(String, i32)>>) -> GroupOffsets: Vec<((String, i32), Option<CommittedOffset>)> {
                GroupOffsets { group: group.to_string(), partitions }
            }
            /// A retry after a member joined a re-created group of the name would
            /// be refused (not empty), never delete a live group; but its answer
            /// would say "not found" for what the first attempt deleted.
            /// Per group, in order. A deleted group's offsets held by open
            /// transactions go with it.
            write(once) fn delete_groups(groups: Vec<String>) -> DeleteGroups: Vec<Result<(), GroupError>> { DeleteGroups { groups } }
            /// A blind retry landing after a new commit of the partition (to an
            /// empty group) would delete that commit.
            /// Deleted offsets held by open transactions go too.
            write(once) fn delete_offsets(group: &str, partitions: Vec<(String, i32)>) -> DeleteOffsets: Result<Vec<Result<(), GroupError>>, GroupError> {
                DeleteOffsets { group: group.to_string(), partitions }
            }
            /// A heartbeat of the consumer group protocol (KIP-848).
            custom(once) fn consumer_heartbeat(beat: ConsumerHeartbeat) -> ConsumerHeartbeat: Result<ConsumerAnswer, GroupError> { beat }
            read fn describe_consumer_group(name: &str) -> DescribeConsumerGroup: Option<ConsumerGroupDescription> {
                DescribeConsumerGroup { name: name.to_string() }
            }
            /// Sizes and producers of many partitions (DescribeLogDirs, DescribeProducers).
            read fn partition_states(partitions: Vec<TopicPartition>, with_producers: bool) -> PartitionStates: Vec<Option<PartitionState>> {
                PartitionStates { partitions, with_producers }
            }
            /// Announces this agent's cache address; the agents heard from lately
            /// (see [`crate::contract::peers`]).
            custom(retry) fn cache_peers(announce: Option<CachePeer>) -> CachePeers: Vec<CachePeer> {
                CachePeers { announce }
            }
            /// Sets and deletes SCRAM credentials; each user's outcome.
            /// A blind retry landing after another client's change would undo it.
            write(once) fn alter_scram_credentials(alterations: Vec<crate::contract::scram::ScramAlteration>) -> AlterScramCredentials: Vec<(String, Result<(), ScramRefusal>)> {
                AlterScramCredentials { alterations }
            }
            read fn scram_credential(user: &str, mechanism: crate::contract::scram::ScramMechanism) -> ScramCredentialOf: Option<ScramCredential> {
                ScramCredentialOf { user: user.to_string(), mechanism }
            }
            read fn describe_scram_credentials(users: Option<Vec<String>>) -> DescribeScramCredentials: Vec<crate::contract::scram::UserMechanisms> {
                DescribeScramCredentials { users }
            }
            /// A blind retry landing after another admin deleted the binding would
            /// bring it back.
            write(once) fn create_acls(bindings: Vec<crate::contract::acls::AclBinding>) -> CreateAcls: Vec<Result<(), String>> { CreateAcls { bindings } }
            /// A retry deletes what matches then (a binding created meanwhile too).
            write(once) fn delete_acls(filters: Vec<crate::contract::acls::AclFilter>) -> DeleteAcls: Vec<Vec<crate::contract::acls::AclBinding>> { DeleteAcls { filters } }
            read fn describe_acls(filter: crate::contract::acls::AclFilter) -> DescribeAcls: Vec<crate::contract::acls::AclBinding> { DescribeAcls { filter } }
            read fn acls_if_changed(known_version: Option<u64>) -> AclsIfChanged: (u64, Option<Vec<crate::contract::acls::AclBinding>>) { AclsIfChanged { known_version } }
            /// InitProducerId with a transactional id.
            /// Timeouts are looked for every `abort_check_interval_ms`.
            write(once) fn init_txn_producer(
                transactional_id: &str,
                timeout_ms: i32,
                expected: Option<ProducerIdentity>,
                abort_check_interval_ms: i32
            ) -> InitTxnProducerChecked: ProducerIdentity {
                InitTxnProducerChecked {
                    init: InitTxnProducer {
                        transactional_id: transactional_id.to_string(),
                        timeout_ms,
                        expected,
                    },
                    abort_check_interval_ms,
                }
            }
            /// The ongoing transaction's `began` (its identity, with the
            /// producer's id and epoch).
            write(retry) fn add_to_txn(add: AddToTxn) -> AddToTxn: u64 { add }
            /// A repeat is refused with `TxnEnded`, which answers a retried EndTxn.
            write(retry) fn end_txn(end: crate::contract::txn::TxnEnd) -> EndTxn: () { EndTxn { end } }
            /// Sequences an uploaded object's batches and ends the transactions
            /// whose markers it holds; per batch, as [`Metastore::commit`].
            /// A repeated commit of an object key is answered from the ledger.
            /// Per batch, where it was placed (wire 7; `Commit`'s base offsets
            /// before), or why it was refused.
            write(retry) fn ingest_commit(commit: IngestCommit) -> IngestCommit: Vec<Result<Placed, Refusal>> { commit }
            read fn describe_txns(ids: Vec<String>) -> DescribeTxns: Vec<Option<TxnView>> { DescribeTxns { ids } }
            read fn list_txns(list: ListTxns) -> ListTxns: Vec<TxnView> { list }
            read fn expired_txns(limit: u32) -> ExpiredTxns: Vec<TxnView> { ExpiredTxns { limit } }
            /// Read plans with last stable offsets and aborted transactions.
            read fn txn_read_plans(partitions: Vec<(TopicPartition, i64)>, max_bytes: u64) -> TxnReadPlans: Vec<Result<TxnReadPlan, Refusal>> {
                TxnReadPlans { partitions, max_bytes }
            }
            write(once) fn txn_commit_offsets(commit: TxnCommitOffsets) -> TxnCommitOffsets: Result<(), GroupError> { commit }
            read fn pending_txn_offsets(group: &str) -> PendingTxnOffsets: Vec<(String, i32)> {
                PendingTxnOffsets { group: group.to_string() }
            }
            /// Changes a topic's or a dynamic entity's configs (all or none).
            /// A blind retry landing after another admin's change would undo it.
            write(once) fn alter_configs(
                target: crate::contract::dynamic_config::ConfigTarget,
                ops: Vec<crate::contract::dynamic_config::ConfigOp>,
                replace: bool
            ) -> AlterConfigs: () {
                AlterConfigs { target, ops, replace }
            }
            read fn dynamic_configs_of(entity: crate::contract::dynamic_config::ConfigEntity) -> DynamicConfigsOf: std::collections::BTreeMap<String, String> {
                DynamicConfigsOf { entity }
            }
            read fn client_metrics_if_changed(known_version: Option<u64>) -> ClientMetricsIfChanged: (u64, Option<BTreeMap<String, BTreeMap<String, String>>>) {
                ClientMetricsIfChanged { known_version }
            }
            read fn client_quotas_if_changed(known_version: Option<u64>) -> ClientQuotasIfChanged: (u64, Option<BTreeMap<crate::contract::quotas::QuotaEntity, BTreeMap<String, String>>>) {
                ClientQuotasIfChanged { known_version }
            }
            /// As `register_agent`, with the agent's advertised listeners.
            write(retry) fn register_agent_listeners(
                host: String,
                port: i32,
                zone: Option<String>,
                listeners: Vec<crate::contract::agents::ListenerEndpoint>,
                now_ms: i64
            ) -> RegisterAgentListeners: i32 {
                RegisterAgentListeners { host, port, zone, listeners, now_ms }
            }
            read fn agents_on(listener: &str, protocol: &str) -> ListAgentsOn: Vec<AgentInfo> {
                ListAgentsOn { listener: listener.to_string(), protocol: protocol.to_string() }
            }
            /// Key compaction's look at many partitions (see [`PartitionLooks`]).
            read fn partition_looks(partitions: Vec<TopicPartition>) -> PartitionLooks: Vec<Result<PartitionLook, Refusal>> {
                PartitionLooks { partitions }
            }
            /// As `partition_looks`, answering only what changed since the marks
            /// given (see [`PartitionLooksSince`]).
            read fn partition_looks_since(partitions: Vec<(TopicPartition, Option<LookMark>)>) -> PartitionLooksSince: Vec<Result<LookSince, Refusal>> {
                PartitionLooksSince { partitions }
            }
            /// KIP-730: a block of `count` producer ids (answered with the first).
            /// A second block only wastes ids.
            /// The first id of the block (of `count` ids, 1 to
            /// `MAX_PRODUCER_ID_BLOCK`).
            write(retry) fn allocate_producer_ids(count: u32) -> AllocateProducerIds: i64 {
                AllocateProducerIds { count }
            }
            /// The Raft group as its leader sees it (DescribeQuorum).
            custom(retry) fn describe_quorum() -> DescribeQuorum: crate::contract::quorum::Quorum { DescribeQuorum }
            /// The groups that have configs set (ListConfigResources).
            read fn configured_groups() -> ConfiguredGroups: Vec<String> { ConfiguredGroups }
            /// The cluster's id, set by the first claim (see [`ClaimClusterId`]).
            write(retry) fn claim_cluster_id(proposed: String, store_marked: bool) -> ClaimClusterId: ClusterIdentity {
                ClaimClusterId { proposed, store_marked }
            }
            /// A second hold only holds longer.
            write(retry) fn hold_garbage(hold_ms: i64) -> HoldGarbage: GarbageHeld { HoldGarbage { hold_ms } }
            /// A heartbeat of a share group (KIP-932). A retried join is the
            /// same join; a retried leave is refused as unknown.
            write(once) fn share_heartbeat(beat: ShareHeartbeat) -> ShareHeartbeat: Result<ShareAnswer, GroupError> { beat }
            /// Acquired twice, records stay locked to the member until their
            /// lock ends: not sent again.
            write(once) fn acquire_share(acquire: AcquireShare) -> AcquireShare: Result<ShareAcquisition, GroupError> { acquire }
            /// Applied twice, the second finds the records done and is refused.
            write(once) fn acknowledge_share(acks: AcknowledgeShare) -> AcknowledgeShare: Result<Vec<Result<(), AckRefused>>, GroupError> { acks }
            write(retry) fn release_share(release: ReleaseShare) -> ReleaseShare: Result<(), GroupError> { release }
            write(retry) fn alter_share_offsets(alter: AlterShareOffsets) -> AlterShareOffsets: Result<(), GroupError> { alter }
            write(once) fn delete_share_offsets(delete: DeleteShareOffsets) -> DeleteShareOffsets: Result<Vec<bool>, GroupError> { delete }
            read fn describe_share_group(name: &str) -> DescribeShareGroup: Option<ShareGroupView> {
                DescribeShareGroup { name: name.to_string() }
            }
        }
    };
}
pub(crate) use metastore_ops;

metastore_ops!(metastore_api);
