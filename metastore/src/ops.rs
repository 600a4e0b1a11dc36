//! Every metastore operation, one named struct each.
//!
//! Reads ([`crate::api::Query`]) are answered from an up-to-date state;
//! writes ([`crate::api::Apply`]) are the entries of the replicated log, so
//! their encoding is part of the log's format (see `golden.rs`): postcard
//! writes a struct as its fields in order, so a field may not be moved,
//! and a nested struct (a [`TopicPartition`]) encodes as its fields would.
//! What each returns, and how the state machine answers it, is in its
//! `impl Query` or `impl Apply` in [`crate::state`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::types::*;

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

/// The extents holding a partition's records from offset `from` on, up to
/// about `max_bytes` (at least one extent if there is data at `from`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanRead {
    pub partition: TopicPartition,
    pub from: i64,
    pub max_bytes: u64,
}

/// ListOffsets: the offset (or the extent holding it) that `query` asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindOffset {
    pub partition: TopicPartition,
    pub query: OffsetQuery,
}

/// A consumer group's current state, if it exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupNamed {
    pub name: String,
}

/// Every consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListGroups;

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

/// Issues an idempotent producer id, or bumps the epoch of `existing` if it
/// is current.
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

/// Gives up `holder`'s lease on `job`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseLease {
    pub job: String,
    pub holder: String,
}
