//! The metastore replicated with Raft (`openraft`).
//!
//! Every mutation is a [`Command`] appended to the Raft log; once a quorum has
//! it, every node applies it to its [`State`](crate::state::State) in the same
//! order. The embedded default is a single-voter group of the same code.
//!
//! - [`log_store`]: the Raft log, vote and commit index in `redb`.
//! - [`state_machine`]: applies committed commands, snapshots the state (kept
//!   in the same `redb` file) so the log can be purged.
//! - [`network`]: Raft messages between nodes, over the metastore's own port.
//! - [`node`]: [`RaftMetastore`], the [`Metastore`](crate::Metastore) of a node.
//! - [`group_commit`]: commands waiting together go into one log entry.
//! - [`liveness`]: group members' heartbeats, kept by the leader off the log,
//!   and the timers that expire sessions and end rebalances.
//! - [`group_watch`]: wakes requests waiting for a group to change.
//! - [`lease`]: lets the leader answer reads without a quorum round each.
//! - `subscriptions`: agents' subscriptions to pushed changes, served by
//!   [`crate::read_leases`].
//! - [`runtime`]: tokio for openraft, with randomness a simulation can seed.
//! - [`stamps`]: the times a node stamps proposals with, bounded so that one
//!   clock far ahead cannot drag the group's time forward.

pub mod backup;
pub mod group_commit;
pub mod group_watch;
pub mod lease;
pub mod liveness;
pub mod log_store;
pub mod network;
pub mod node;
pub(crate) mod peer_book;
pub mod runtime;
pub mod stamps;
pub mod state_machine;
pub(crate) mod subscriptions;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::state::{Proposal, Reply};

pub use crate::contract::quorum::ClusterStatus;
pub use node::{NodeOptions, RaftMetastore};

/// A metastore node's id in its Raft group (the contract's: DescribeQuorum shows it).
pub use crate::contract::quorum::NodeId;

/// How other nodes and clients reach a node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddress {
    pub address: String,
}

impl fmt::Display for NodeAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.address)
    }
}

openraft::declare_raft_types!(
    /// The metastore's Raft types: leader-stamped commands in, replies out (blank and
    /// membership entries reply nothing); snapshots are the encoded state.
    pub TypeConfig:
        D = Proposal,
        R = Option<Reply>,
        NodeId = NodeId,
        Node = NodeAddress,
        SnapshotData = Vec<u8>,
        AsyncRuntime = runtime::FloeRuntime,
);

pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type StoredMembership = openraft::StoredMembership<NodeId, NodeAddress>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, NodeAddress>;
pub type Vote = openraft::Vote<NodeId>;

/// Runs blocking `redb` work off the async workers; in place on a
/// single-threaded runtime (tests, the simulation), where there is no other
/// worker to keep busy and a thread outside the runtime would finish at a
/// time the runtime's clock does not decide, so that a seed would not replay.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, openraft::AnyError> + Send + 'static,
) -> Result<T, openraft::AnyError> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    if Handle::current().runtime_flavor() == RuntimeFlavor::CurrentThread {
        return f();
    }
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(any(e)))
}

fn any<E: std::error::Error + 'static>(e: E) -> openraft::AnyError {
    openraft::AnyError::new(&e)
}
