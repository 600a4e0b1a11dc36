//! A backup of the metastore, as a node answers `NodeRequest::Backup`
//! (how it is taken, written to a file and restored: `raft::backup`).

use serde::{Deserialize, Serialize};

/// The metastore's state at one moment, and what it takes to restore it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backup {
    /// The metastore format of `state`.
    pub format: u8,
    pub cluster_id: Option<String>,
    /// When the backup was taken, on the metastore's clock.
    pub taken_ms: i64,
    /// Until when the objects it refers to are kept (metastore clock): a
    /// restore after that may find some gone.
    pub held_until_ms: i64,
    /// The last log index the state includes: the restored log goes on from it.
    pub last_index: u64,
    /// The state, encoded as a snapshot.
    pub state: Vec<u8>,
}
