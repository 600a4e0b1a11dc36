//! Leader leases: letting the leader answer reads from its own state without
//! a heartbeat round to a quorum for each one.
//!
//! openraft's followers refuse to vote for anyone for `election_timeout_max`
//! after they last heard from the leader. So while the leader has been
//! acknowledged by a quorum less than that long ago, no other leader can
//! exist and its applied state is current. A lease here lasts a quarter of
//! that, leaving the rest as margin for the delay in observing acknowledgements
//! and for clock-rate differences between machines.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::ServerState;
use tokio::time::Instant;

use openraft::RaftMetrics;

use super::{NodeAddress, NodeId, Raft};

/// Until when this node may answer reads from its applied state, and what
/// it must have applied before it answers any.
#[derive(Clone, Default)]
pub struct Lease {
    valid_until: Arc<Mutex<Option<Instant>>>,
    /// While this node leads: the term, and the index of its last log entry
    /// when that leadership began.
    leading: Arc<Mutex<Option<(u64, u64)>>>,
    /// How long a quorum's acknowledgement makes the lease last.
    length: Duration,
}

impl Lease {
    /// Follows `raft`'s metrics for as long as it runs.
    pub fn follow(raft: &Raft, follower_lease: Duration) -> Lease {
        let lease = Lease {
            length: follower_lease / 4,
            ..Lease::default()
        };
        let mut metrics = raft.metrics();
        let follower = lease.clone();
        tokio::spawn(async move {
            loop {
                follower.observe(&metrics.borrow_and_update());
                if metrics.changed().await.is_err() {
                    break;
                }
            }
        });
        lease
    }

    /// Takes in what `m` says of this node: whether it leads and since
    /// which log index, and until when its lease holds. Returns the index it
    /// must have applied before it answers a read, `None` if it does not lead.
    pub fn observe(&self, m: &RaftMetrics<NodeId, NodeAddress>) -> Option<u64> {
        let observed = Instant::now();
        let mut leading = self.leading.lock().expect("lease lock poisoned");
        *leading = match (m.state, *leading) {
            (ServerState::Leader, Some((term, start))) if term == m.current_term => {
                Some((term, start))
            }
            (ServerState::Leader, _) => Some((m.current_term, m.last_log_index.unwrap_or(0))),
            _ => None,
        };
        // Everything committed before this node led is in its log, at or
        // below the index its log ended at then; only once it has applied
        // that far does its state hold it. (Not "an entry of its own term":
        // a leader that restarts resumes its term, with no new entry, and a
        // commit index read back from disk that may be behind.)
        let start = leading.map(|(_, start)| start);
        let caught_up = start.is_some_and(|start| m.last_applied.is_some_and(|a| a.index >= start));
        let until = match (m.state, m.millis_since_quorum_ack) {
            (ServerState::Leader, Some(ms)) if caught_up => observed
                .checked_sub(Duration::from_millis(ms))
                .map(|acked| acked + self.length),
            _ => None,
        };
        *self.valid_until.lock().expect("lease lock poisoned") = until;
        start
    }

    pub fn is_valid(&self) -> bool {
        self.valid_until
            .lock()
            .expect("lease lock poisoned")
            .is_some_and(|until| Instant::now() < until)
    }
}
