//! The in-process metastore the agent embeds by default: a single-voter Raft
//! group of the same code a replicated metastore runs, whose log is in a local
//! redb file (or only in memory, for tests).

use std::path::Path;
use std::time::Duration;

use crate::raft::node::Bootstrap;
use crate::raft::{NodeOptions, RaftMetastore};
use crate::types::MetaError;

/// Log entries between snapshots.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 10_000;

/// A metastore in this process: a Raft group of one.
pub type LocalMetastore = RaftMetastore;

impl RaftMetastore {
    /// A metastore whose state lives only in memory.
    pub async fn in_memory() -> Result<Self, MetaError> {
        Self::single(None, DEFAULT_SNAPSHOT_EVERY).await
    }

    /// A metastore made durable in a redb file at `path`, restored from it if present.
    pub async fn open(path: &Path) -> Result<Self, MetaError> {
        Self::open_with(path, DEFAULT_SNAPSHOT_EVERY).await
    }

    pub async fn open_with(path: &Path, snapshot_every: u64) -> Result<Self, MetaError> {
        Self::single(Some(path), snapshot_every).await
    }

    async fn single(path: Option<&Path>, snapshot_every: u64) -> Result<Self, MetaError> {
        let mut options = NodeOptions::new(1, "in-process");
        options.path = path.map(Path::to_path_buf);
        options.snapshot_every = snapshot_every;
        options.bootstrap = Bootstrap::Single;
        // Nothing else votes, so nothing needs heartbeats; a short election
        // timeout only shortens the wait to lead after a restart.
        options.heartbeat_ms = 20;
        let node = RaftMetastore::start(options).await?;
        node.wait_until_leader(Duration::from_secs(10)).await?;
        Ok(node)
    }
}
