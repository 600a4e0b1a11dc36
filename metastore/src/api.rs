//! The metastore API, written once.
//!
//! Each operation is a struct ([`crate::ops`]) that names the type of its
//! answer ([`Op::Output`]) and says whether a client may send it again when it
//! does not know whether the first one applied. The table at the end of this
//! file lists them; from it come the [`Metastore`] trait agents call, the
//! wire's [`Request`] enum and the server's dispatch. Every metastore is a
//! [`Transport`] with one generic `call`: a node that sequences commands
//! itself (any [`Sequencer`]) and the network client
//! ([`crate::RemoteMetastore`]). The answer's type is the operation's at both
//! ends of every transport, so no reply can be of the wrong kind.
//!
//! Adding an operation: its struct in `ops`; its `impl Query` or `impl Apply`
//! in `state` (a write also gets a variant at the end of [`Command`], the
//! log's format); its line in the table here; a sample in the golden tests,
//! which refuse to pass without one.

use std::fmt::Debug;
use std::future::Future;

use async_trait::async_trait;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::groups::*;
use crate::ops::*;
use crate::peers::{CachePeer, CachePeers};
use crate::quorum::DescribeQuorum;
use crate::sequencer::Sequencer;
use crate::state::{Command, State};
use crate::types::*;

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
    /// How a metastore that sequences commands itself answers it.
    fn run<S: Sequencer>(
        self,
        on: &S,
    ) -> impl Future<Output = Result<Self::Output, MetaError>> + Send;
}

/// A read: answered from a state that is up to date (linearizable).
pub trait Query: Clone + Send + Sync + 'static {
    type Output: Answer;
    /// `now_ms` is the leader's clock, for answers that report ages.
    fn query(self, state: &State, now_ms: i64) -> Result<Self::Output, Refusal>;
}

/// A write: an entry of the replicated log, applied by the state machine in
/// log order on every replica. [`Apply::apply`] must be deterministic: it
/// never reads a clock or draws a random number (times and ids come inside
/// the command).
pub trait Apply: Into<Command> + Clone + Debug + Send + Sync + 'static {
    type Output: Answer;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal>;
    /// As [`Op::retry_is_safe`].
    fn retry_is_safe(&self) -> bool;
    /// Replaces every time its sender put in it with the leader's `now_ms`.
    fn restamp(&mut self, _now_ms: i64) {}
}

/// Something that answers metastore operations: the one call every
/// transport implements.
pub trait Transport: Send + Sync + 'static {
    fn call<O: Op>(&self, op: O) -> impl Future<Output = Result<O::Output, MetaError>> + Send;
}

impl<S: Sequencer> Transport for S {
    fn call<O: Op>(&self, op: O) -> impl Future<Output = Result<O::Output, MetaError>> + Send {
        op.run(self)
    }
}

/// A read or a write is an operation as it is; an operation whose request is
/// not its command (`custom`) implements [`Op`] by hand.
macro_rules! op {
    (read $op:ty) => {
        impl Op for $op {
            type Output = <$op as Query>::Output;
            fn retry_is_safe(&self) -> bool {
                true
            }
            async fn run<S: Sequencer>(self, on: &S) -> Result<Self::Output, MetaError> {
                let now_ms = on.now_ms();
                Ok(on.read(move |state| self.query(state, now_ms)).await??)
            }
        }
    };
    (write $op:ty) => {
        impl Op for $op {
            type Output = <$op as Apply>::Output;
            fn retry_is_safe(&self) -> bool {
                Apply::retry_is_safe(self)
            }
            async fn run<S: Sequencer>(self, on: &S) -> Result<Self::Output, MetaError> {
                on.write(self).await
            }
        }
    };
    (custom $op:ty) => {};
}

/// A client asks for a topic by what it should be; the node that proposes
/// it draws its id (the state machine must be deterministic).
impl Op for NewTopic {
    type Output = TopicInfo;
    fn retry_is_safe(&self) -> bool {
        false
    }
    async fn run<S: Sequencer>(self, on: &S) -> Result<TopicInfo, MetaError> {
        let id = on.new_id();
        on.write(CreateTopic { id, topic: self }).await
    }
}

/// The table: one line per operation: whether it reads, writes (through the
/// log) or is `custom` (its `impl Op` is written by hand), the method agents
/// call, and the operation it sends. The order of the lines is the order of
/// [`Request`]'s variants on the wire (see `rpc::WIRE_VERSION`): append only.
macro_rules! metastore_api {
    ($( $(#[$doc:meta])* $kind:ident fn $method:ident($($arg:ident: $ty:ty),*) -> $op:ident $build:block )*) => {
        $( op!($kind $op); )*

        /// Everything an agent or compactor asks of the metastore.
        #[async_trait]
        pub trait Metastore: Send + Sync + 'static {
            $( $(#[$doc])* async fn $method(&self, $($arg: $ty),*) -> Result<<$op as Op>::Output, MetaError>; )*
        }

        // Each line's builder is a block, which lints as braces around an argument.
        #[allow(unused_braces)]
        #[async_trait]
        impl<T: Transport> Metastore for T {
            $( async fn $method(&self, $($arg: $ty),*) -> Result<<$op as Op>::Output, MetaError> {
                self.call($build).await
            } )*
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

metastore_api! {
    custom fn create_topic(topic: NewTopic) -> NewTopic { topic }
    write fn delete_topic(name: &str) -> DeleteTopic { DeleteTopic { name: name.to_string() } }
    read fn topics() -> ListTopics { ListTopics }
    read fn topic(name: &str) -> TopicNamed { TopicNamed { name: name.to_string() } }
    read fn topic_by_id(id: TopicId) -> TopicById { TopicById { id } }
    /// Sequences the batches of an uploaded object. The outer error means
    /// nothing was committed; the inner ones are per batch.
    write fn commit(commit: Commit) -> Commit { commit }
    read fn offsets(topic_id: TopicId, partition: i32) -> Offsets {
        Offsets { partition: TopicPartition::new(topic_id, partition) }
    }
    read fn high_watermarks(partitions: Vec<TopicPartition>) -> HighWatermarks {
        HighWatermarks { partitions }
    }
    read fn read_plan(topic_id: TopicId, partition: i32, from: i64, max_bytes: u64) -> PlanRead {
        PlanRead { partition: TopicPartition::new(topic_id, partition), from, max_bytes }
    }
    read fn list_offsets(topic_id: TopicId, partition: i32, query: OffsetQuery) -> FindOffset {
        FindOffset { partition: TopicPartition::new(topic_id, partition), query }
    }
    write fn init_producer(existing: Option<ProducerIdentity>) -> InitProducer {
        InitProducer { existing }
    }
    write fn join_group(join: JoinGroup) -> JoinGroup { join }
    write fn sync_group(sync: SyncGroup) -> SyncGroup { sync }
    /// Answered by the leader, not written (see [`crate::groups`]).
    custom fn group_heartbeat(beat: GroupHeartbeat) -> GroupHeartbeat { beat }
    write fn leave_group(leave: LeaveGroup) -> LeaveGroup { leave }
    write fn commit_offsets(commit: CommitOffsets) -> CommitOffsets { commit }
    read fn describe_group(name: &str) -> DescribeGroup { DescribeGroup { name: name.to_string() } }
    write fn replace_extents(replace: ReplaceExtents) -> ReplaceExtents { replace }
    read fn garbage() -> ListGarbage { ListGarbage }
    write fn record_orphans(keys: Vec<String>) -> RecordOrphans { RecordOrphans { keys } }
    write fn forget_garbage(keys: Vec<String>) -> ForgetGarbage { ForgetGarbage { keys } }
    write fn trim(topic_id: TopicId, partition: i32, offset: i64) -> Trim {
        Trim { partition: TopicPartition::new(topic_id, partition), offset }
    }
    read fn unknown_objects(keys: Vec<String>) -> UnknownObjects { UnknownObjects { keys } }
    write fn alter_topic_configs(
        name: &str,
        set: std::collections::BTreeMap<String, String>,
        delete: Vec<String>
    ) -> AlterTopicConfigs {
        AlterTopicConfigs { name: name.to_string(), set, delete }
    }
    write fn create_partitions(name: &str, count: i32) -> CreatePartitions {
        CreatePartitions { name: name.to_string(), count }
    }
    read fn groups() -> ListGroups { ListGroups }
    write fn register_agent(host: String, port: i32, zone: Option<String>, now_ms: i64) -> RegisterAgent {
        RegisterAgent { host, port, zone, now_ms }
    }
    write fn agent_heartbeat(node_id: i32, now_ms: i64) -> AgentHeartbeat {
        AgentHeartbeat { node_id, now_ms }
    }
    read fn agents() -> ListAgents { ListAgents }
    write fn acquire_lease(job: String, holder: String, now_ms: i64, ttl_ms: i64) -> AcquireLease {
        AcquireLease { job, holder, now_ms, ttl_ms }
    }
    write fn release_lease(job: String, holder: String) -> ReleaseLease {
        ReleaseLease { job, holder }
    }
    /// The metastore's time (see [`Tick`]).
    write fn clock() -> Tick { Tick }
    /// Compaction's work list: one request per pass.
    read fn compaction_work(work: CompactionWork) -> CompactionWork { work }
    /// Swaps many partitions' runs for one merged file's chunks.
    write fn replace_runs(replace: ReplaceRuns) -> ReplaceRuns { replace }
    /// Read plans of many partitions in one request.
    read fn read_plans(partitions: Vec<(TopicPartition, i64)>, max_bytes: u64) -> PlanReads {
        PlanReads { partitions, max_bytes }
    }
    /// Waits for a group to change (see [`AwaitGroup`]).
    custom fn await_group(wait: AwaitGroup) -> AwaitGroup { wait }
    read fn group_offsets(group: &str, partitions: Option<Vec<(String, i32)>>) -> GroupOffsets {
        GroupOffsets { group: group.to_string(), partitions }
    }
    write fn delete_groups(groups: Vec<String>) -> DeleteGroups { DeleteGroups { groups } }
    write fn delete_offsets(group: &str, partitions: Vec<(String, i32)>) -> DeleteOffsets {
        DeleteOffsets { group: group.to_string(), partitions }
    }
    /// A heartbeat of the consumer group protocol (KIP-848).
    custom fn consumer_heartbeat(beat: ConsumerHeartbeat) -> ConsumerHeartbeat { beat }
    read fn describe_consumer_group(name: &str) -> DescribeConsumerGroup {
        DescribeConsumerGroup { name: name.to_string() }
    }
    /// Sizes and producers of many partitions (DescribeLogDirs, DescribeProducers).
    read fn partition_states(partitions: Vec<TopicPartition>, with_producers: bool) -> PartitionStates {
        PartitionStates { partitions, with_producers }
    }
    /// Announces this agent's cache address; the agents heard from lately
    /// (see [`crate::peers`]).
    custom fn cache_peers(announce: Option<CachePeer>) -> CachePeers {
        CachePeers { announce }
    }
    /// Sets and deletes SCRAM credentials; each user's outcome.
    write fn alter_scram_credentials(alterations: Vec<crate::scram::ScramAlteration>) -> AlterScramCredentials {
        AlterScramCredentials { alterations }
    }
    read fn scram_credential(user: &str, mechanism: crate::scram::ScramMechanism) -> ScramCredentialOf {
        ScramCredentialOf { user: user.to_string(), mechanism }
    }
    read fn describe_scram_credentials(users: Option<Vec<String>>) -> DescribeScramCredentials {
        DescribeScramCredentials { users }
    }
    write fn create_acls(bindings: Vec<crate::acls::AclBinding>) -> CreateAcls { CreateAcls { bindings } }
    write fn delete_acls(filters: Vec<crate::acls::AclFilter>) -> DeleteAcls { DeleteAcls { filters } }
    read fn describe_acls(filter: crate::acls::AclFilter) -> DescribeAcls { DescribeAcls { filter } }
    read fn acls_if_changed(known_version: Option<u64>) -> AclsIfChanged { AclsIfChanged { known_version } }
    /// InitProducerId with a transactional id.
    /// Timeouts are looked for every `abort_check_interval_ms`.
    write fn init_txn_producer(
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<ProducerIdentity>,
        abort_check_interval_ms: i32
    ) -> InitTxnProducerChecked {
        InitTxnProducerChecked {
            init: InitTxnProducer {
                transactional_id: transactional_id.to_string(),
                timeout_ms,
                expected,
            },
            abort_check_interval_ms,
        }
    }
    write fn add_to_txn(add: AddToTxn) -> AddToTxn { add }
    write fn end_txn(end: crate::txn::TxnEnd) -> EndTxn { EndTxn { end } }
    /// Sequences an uploaded object's batches and ends the transactions
    /// whose markers it holds; per batch, as [`Metastore::commit`].
    write fn ingest_commit(commit: IngestCommit) -> IngestCommit { commit }
    read fn describe_txns(ids: Vec<String>) -> DescribeTxns { DescribeTxns { ids } }
    read fn list_txns(list: ListTxns) -> ListTxns { list }
    read fn expired_txns(limit: u32) -> ExpiredTxns { ExpiredTxns { limit } }
    /// Read plans with last stable offsets and aborted transactions.
    read fn txn_read_plans(partitions: Vec<(TopicPartition, i64)>, max_bytes: u64) -> TxnReadPlans {
        TxnReadPlans { partitions, max_bytes }
    }
    write fn txn_commit_offsets(commit: TxnCommitOffsets) -> TxnCommitOffsets { commit }
    read fn pending_txn_offsets(group: &str) -> PendingTxnOffsets {
        PendingTxnOffsets { group: group.to_string() }
    }
    /// Changes a topic's or a dynamic entity's configs (all or none).
    write fn alter_configs(
        target: crate::dynamic_config::ConfigTarget,
        ops: Vec<crate::dynamic_config::ConfigOp>,
        replace: bool
    ) -> AlterConfigs {
        AlterConfigs { target, ops, replace }
    }
    read fn dynamic_configs_of(entity: crate::dynamic_config::ConfigEntity) -> DynamicConfigsOf {
        DynamicConfigsOf { entity }
    }
    read fn client_metrics_if_changed(known_version: Option<u64>) -> ClientMetricsIfChanged {
        ClientMetricsIfChanged { known_version }
    }
    read fn client_quotas_if_changed(known_version: Option<u64>) -> ClientQuotasIfChanged {
        ClientQuotasIfChanged { known_version }
    }
    /// As `register_agent`, with the agent's advertised listeners.
    write fn register_agent_listeners(
        host: String,
        port: i32,
        zone: Option<String>,
        listeners: Vec<crate::agents::ListenerEndpoint>,
        now_ms: i64
    ) -> RegisterAgentListeners {
        RegisterAgentListeners { host, port, zone, listeners, now_ms }
    }
    read fn agents_on(listener: &str, protocol: &str) -> ListAgentsOn {
        ListAgentsOn { listener: listener.to_string(), protocol: protocol.to_string() }
    }
    /// Key compaction's look at many partitions (see [`PartitionLooks`]).
    read fn partition_looks(partitions: Vec<TopicPartition>) -> PartitionLooks {
        PartitionLooks { partitions }
    }
    /// As `partition_looks`, answering only what changed since the marks
    /// given (see [`PartitionLooksSince`]).
    read fn partition_looks_since(partitions: Vec<(TopicPartition, Option<LookMark>)>) -> PartitionLooksSince {
        PartitionLooksSince { partitions }
    }
    /// KIP-730: a block of `count` producer ids (answered with the first).
    write fn allocate_producer_ids(count: u32) -> AllocateProducerIds {
        AllocateProducerIds { count }
    }
    /// The Raft group as its leader sees it (DescribeQuorum).
    custom fn describe_quorum() -> DescribeQuorum { DescribeQuorum }
    /// The groups that have configs set (ListConfigResources).
    read fn configured_groups() -> ConfiguredGroups { ConfiguredGroups }
}

/// Raft's own view, held by the leader, not the state.
impl Op for DescribeQuorum {
    type Output = crate::quorum::Quorum;
    fn retry_is_safe(&self) -> bool {
        true
    }
    async fn run<S: Sequencer>(self, on: &S) -> Result<Self::Output, MetaError> {
        on.quorum().await
    }
}

/// Soft state on the leader, like a heartbeat.
impl Op for CachePeers {
    type Output = Vec<CachePeer>;
    fn retry_is_safe(&self) -> bool {
        true
    }
    async fn run<S: Sequencer>(self, on: &S) -> Result<Self::Output, MetaError> {
        on.cache_peers(self.announce).await
    }
}

/// A heartbeat is checked against the state by the leader and remembered
/// only in its memory.
impl Op for GroupHeartbeat {
    type Output = Result<(), GroupError>;
    fn retry_is_safe(&self) -> bool {
        true
    }
    async fn run<S: Sequencer>(self, on: &S) -> Result<Self::Output, MetaError> {
        on.read_heard(move |state| {
            let (answer, alive) = state.groups().check_heartbeat(&self);
            let heard = alive.then(|| Heard {
                group: self.group.clone(),
                member: self.member_id.clone(),
            });
            (answer, heard)
        })
        .await
    }
}

/// A consumer-protocol heartbeat that changes nothing is answered by the
/// leader from its state and remembered in its memory; any other is written.
impl Op for ConsumerHeartbeat {
    type Output = Result<ConsumerAnswer, GroupError>;
    fn retry_is_safe(&self) -> bool {
        Apply::retry_is_safe(self)
    }
    async fn run<S: Sequencer>(self, on: &S) -> Result<Self::Output, MetaError> {
        // Decided on the leader's clock (a regular expression's refresh).
        let mut probe = self.clone();
        probe.now_ms = on.now_ms();
        let unchanged = on
            .read_heard(move |state| {
                let answer = state.consumer_unchanged(&probe);
                // Only a member answered without an error was heard.
                let heard = matches!(answer, Some(Ok(_))).then(|| Heard {
                    group: probe.group.clone(),
                    member: probe.member_id.clone(),
                });
                (answer, heard)
            })
            .await?;
        match unchanged {
            Some(answer) => Ok(answer),
            None => on.write(self).await,
        }
    }
}

impl Op for AwaitGroup {
    type Output = Option<MemberView>;
    fn retry_is_safe(&self) -> bool {
        true
    }
    async fn run<S: Sequencer>(self, on: &S) -> Result<Self::Output, MetaError> {
        on.await_group(self).await
    }
}
