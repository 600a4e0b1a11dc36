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

use super::Raft;

/// Until when this node may answer reads from its applied state.
#[derive(Clone, Default)]
pub struct Lease {
    valid_until: Arc<Mutex<Option<Instant>>>,
}

impl Lease {
    /// Follows `raft`'s metrics for as long as it runs.
    pub fn follow(raft: &Raft, follower_lease: Duration) -> Lease {
        let lease = Lease::default();
        let length = follower_lease / 4;
        let mut metrics = raft.metrics();
        let valid_until = lease.valid_until.clone();
        tokio::spawn(async move {
            loop {
                let until = {
                    let m = metrics.borrow_and_update();
                    let observed = Instant::now();
                    // Only once this leader has applied an entry of its own
                    // term (the blank one it starts with) does its state hold
                    // everything committed before it led.
                    let applied_own_term = m
                        .last_applied
                        .is_some_and(|applied| applied.leader_id.term == m.current_term);
                    match (m.state, m.millis_since_quorum_ack) {
                        (ServerState::Leader, Some(ms)) if applied_own_term => observed
                            .checked_sub(Duration::from_millis(ms))
                            .map(|acked| acked + length),
                        _ => None,
                    }
                };
                *valid_until.lock().expect("lease lock poisoned") = until;
                if metrics.changed().await.is_err() {
                    break;
                }
            }
        });
        lease
    }

    pub fn is_valid(&self) -> bool {
        self.valid_until
            .lock()
            .expect("lease lock poisoned")
            .is_some_and(|until| Instant::now() < until)
    }
}
