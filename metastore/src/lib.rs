//! floe's metastore: the one place where offsets are decided.
//!
//! [`contract`] is what every metastore answers and every client asks (the
//! operations, their types, the remote client), naming no state machine.
//! The node: [`state`] is the deterministic state machine; [`raft`] replicates it with
//! openraft and keeps its log in an embedded `redb` file. [`RaftMetastore`] (a
//! node; [`LocalMetastore`] is the single-voter group an agent embeds) and
//! [`RemoteMetastore`] (a client of a served group) implement the
//! [`Metastore`] trait that agents use.

pub mod contract;
pub mod format;
pub mod groups;
pub mod leases;
pub mod ledger;
pub mod local;
pub mod raft;
pub mod read_leases;
pub mod rpc;
pub mod sequencer;
pub mod shared_log;
pub mod state;
pub mod txn;

// The contract's modules, where callers have always found them.
pub use contract::{
    acls, agents, api, dynamic_config, merge_policy, ops, peer_auth, peers, push, quorum, quotas,
    scram, share_config, topic_config, types,
};

#[cfg(test)]
mod conformance;
#[cfg(test)]
mod golden;
#[cfg(test)]
mod txn_tests;

pub use agents::AgentInfo;
pub use api::{Metastore, Op, Transport};
pub use contract::client::RemoteMetastore;
pub use dynamic_config::ConfigEntity;
pub use groups::{
    AwaitGroup, CommitOffsets, CommittedOffset, ConsumerAnswer, ConsumerGroupDescription,
    ConsumerHeartbeat, ConsumerMemberDescription, Describer, GroupCommand, GroupDescription,
    GroupError, GroupHeartbeat, GroupListing, JoinGroup, JoinRules, Joined, LeaveGroup, Leaving,
    MemberDescription, MemberView, OffsetToCommit, Phase, SyncGroup,
};
pub use local::LocalMetastore;
pub use peers::{CachePeer, CachePeers};
pub use raft::{ClusterStatus, NodeOptions, RaftMetastore};
pub use sequencer::Sequencer;
pub use shared_log::{LogNode, LogNodeOptions};
pub use topic_config::{TimestampType, TopicCompression, TopicConfig};
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
