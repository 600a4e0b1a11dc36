//! floe's metastore: the one place where offsets are decided.
//!
//! [`state`] is the deterministic state machine; [`raft`] replicates it with
//! openraft and keeps its log in an embedded `redb` file. [`RaftMetastore`] (a
//! node; [`LocalMetastore`] is the single-voter group an agent embeds) and
//! [`RemoteMetastore`] (a client of a served group) implement the
//! [`Metastore`] trait that agents use.

pub mod agents;
pub mod groups;
pub mod leases;
pub mod ledger;
pub mod local;
pub mod raft;
pub mod rpc;
pub mod sequencer;
pub mod state;
pub mod types;

#[cfg(test)]
mod conformance;
#[cfg(test)]
mod golden;

use async_trait::async_trait;

pub use agents::AgentInfo;
pub use groups::{Group, GroupCommand, GroupError, GroupReply, Phase};
pub use local::LocalMetastore;
pub use raft::{ClusterStatus, NodeOptions, RaftMetastore};
pub use rpc::RemoteMetastore;
pub use sequencer::Sequencer;
pub use types::*;

/// Wall-clock milliseconds since the Unix epoch: how callers date the
/// commands that carry a time (the state machine never reads a clock).
#[allow(clippy::disallowed_methods)]
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The clock a metastore node stamps its proposals with (and so the clock
/// of every decision about time). The real one is [`SystemClock`]; the
/// simulation gives each node its own, skewed.
pub trait Clock: std::fmt::Debug + Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The machine's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        now_ms()
    }
}

/// A fresh random id (topic ids, object names, lease holders). The one place
/// that draws one: the simulation injects seeded ids instead (see `clippy.toml`).
#[allow(clippy::disallowed_methods)]
pub fn random_id() -> uuid::Uuid {
    uuid::Uuid::new_v4()
}

/// Everything an agent or compactor asks of the metastore.
#[async_trait]
pub trait Metastore: Send + Sync + 'static {
    async fn create_topic(&self, topic: NewTopic) -> Result<TopicInfo, MetaError>;
    async fn delete_topic(&self, name: &str) -> Result<(), MetaError>;
    async fn topics(&self) -> Result<Vec<TopicInfo>, MetaError>;
    async fn topic(&self, name: &str) -> Result<Option<TopicInfo>, MetaError>;
    async fn topic_by_id(&self, id: TopicId) -> Result<Option<TopicInfo>, MetaError>;
    /// The metastore's time (a leader's stamp, never moving back): what an
    /// upload carries as `not_before_ms`, read before it starts.
    async fn clock(&self) -> Result<i64, MetaError>;
    /// Sequences the batches of an uploaded object. The outer error means
    /// nothing was committed; the inner ones are per batch.
    async fn commit(&self, commit: Commit) -> Result<Vec<Result<i64, MetaError>>, MetaError>;
    async fn offsets(&self, topic: TopicId, partition: i32) -> Result<PartitionOffsets, MetaError>;
    /// Many partitions' high watermarks in one request (`None`: no such
    /// partition), for agents watching what their waiting fetches wait on.
    async fn high_watermarks(
        &self,
        partitions: Vec<(TopicId, i32)>,
    ) -> Result<Vec<Option<i64>>, MetaError>;
    async fn read_plan(
        &self,
        topic: TopicId,
        partition: i32,
        from: i64,
        max_bytes: u64,
    ) -> Result<ReadPlan, MetaError>;
    async fn list_offsets(
        &self,
        topic: TopicId,
        partition: i32,
        query: OffsetQuery,
    ) -> Result<OffsetAnswer, MetaError>;
    /// Issues an idempotent producer id, or bumps `existing`'s epoch if current.
    async fn init_producer(
        &self,
        existing: Option<ProducerIdentity>,
    ) -> Result<ProducerIdentity, MetaError>;
    /// Registers a self-advertising agent at `host:port`; returns its node id.
    async fn register_agent(
        &self,
        host: String,
        port: i32,
        zone: Option<String>,
        now_ms: i64,
    ) -> Result<i32, MetaError>;
    /// Records that an agent is alive; false if it is not registered.
    async fn agent_heartbeat(&self, node_id: i32, now_ms: i64) -> Result<bool, MetaError>;
    /// Every registered agent with when it was last heard from.
    async fn agents(&self) -> Result<Vec<AgentInfo>, MetaError>;
    /// Applies a consumer-group operation.
    async fn group_command(&self, command: GroupCommand) -> Result<GroupReply, MetaError>;
    /// A consumer group's current state.
    async fn group(&self, name: &str) -> Result<Option<Group>, MetaError>;
    /// Sets and removes a topic's configs.
    async fn alter_topic_configs(
        &self,
        name: &str,
        set: std::collections::BTreeMap<String, String>,
        delete: Vec<String>,
    ) -> Result<(), MetaError>;
    /// Grows a topic to `count` partitions.
    async fn create_partitions(&self, name: &str, count: i32) -> Result<(), MetaError>;
    /// Every consumer group.
    async fn groups(&self) -> Result<Vec<(String, Group)>, MetaError>;
    /// Moves a partition's log start up to `offset`; returns the log start.
    async fn trim(&self, topic: TopicId, partition: i32, offset: i64) -> Result<i64, MetaError>;
    /// Compaction's compare-and-set swap of extents for a new object.
    async fn replace_extents(&self, replace: ReplaceExtents) -> Result<(), MetaError>;
    /// Keys of objects that nothing refers to any more.
    async fn garbage(&self) -> Result<Vec<String>, MetaError>;
    /// Adds objects that were (perhaps) uploaded but never committed to the garbage list.
    async fn record_orphans(&self, keys: Vec<String>) -> Result<(), MetaError>;
    /// Those of `keys` the metastore does not know: neither referenced nor garbage.
    async fn unknown_objects(&self, keys: Vec<String>) -> Result<Vec<String>, MetaError>;
    /// Drops deleted objects from the garbage list.
    async fn forget_garbage(&self, keys: Vec<String>) -> Result<(), MetaError>;
    /// Takes (or renews) the lease on background `job` for `holder` until
    /// `now_ms + ttl_ms`; false while someone else holds it.
    async fn acquire_lease(
        &self,
        job: String,
        holder: String,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<bool, MetaError>;
    /// Gives up `holder`'s lease on `job`.
    async fn release_lease(&self, job: String, holder: String) -> Result<(), MetaError>;
}
