//! Consumer groups (Kafka's classic protocol). Every decision is the
//! metastore's (see `floe_metastore::groups`); an agent turns requests into
//! its operations and waits for the group where Kafka's coordinator would.
//!
//! - [`membership`]: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.
//! - [`offsets`]: OffsetCommit, OffsetFetch, OffsetDelete.
//! - [`admin`]: FindCoordinator, ListGroups, DescribeGroups, DeleteGroups.

pub mod admin;
pub mod commit_runs;
pub mod consumer;
pub mod membership;
pub mod offsets;

use floe_metastore::{GroupError, MetaError};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::RequestKind;
use tokio::sync::oneshot;

pub use admin::{delete, describe, find_coordinator, list};
pub use membership::{heartbeat, join, leave, sync};
pub use offsets::{delete_offsets, fetch_offsets, txn_commit_offsets};

pub(crate) fn group_error(e: GroupError) -> ResponseError {
    match e {
        GroupError::UnknownMemberId => ResponseError::UnknownMemberId,
        GroupError::IllegalGeneration => ResponseError::IllegalGeneration,
        GroupError::RebalanceInProgress => ResponseError::RebalanceInProgress,
        GroupError::InconsistentGroupProtocol => ResponseError::InconsistentGroupProtocol,
        GroupError::InvalidSessionTimeout => ResponseError::InvalidSessionTimeout,
        GroupError::FencedInstanceId => ResponseError::FencedInstanceId,
        GroupError::GroupMaxSizeReached => ResponseError::GroupMaxSizeReached,
        GroupError::NonEmptyGroup => ResponseError::NonEmptyGroup,
        GroupError::GroupIdNotFound => ResponseError::GroupIdNotFound,
        GroupError::GroupSubscribedToTopic => ResponseError::GroupSubscribedToTopic,
        GroupError::UnsupportedAssignor => ResponseError::UnsupportedAssignor,
        GroupError::UnreleasedInstanceId => ResponseError::UnreleasedInstanceId,
        GroupError::FencedMemberEpoch => ResponseError::FencedMemberEpoch,
        GroupError::StaleMemberEpoch => ResponseError::StaleMemberEpoch,
        GroupError::InvalidRegularExpression => ResponseError::InvalidRegularExpression,
        GroupError::CoordinatorLoadInProgress => ResponseError::CoordinatorLoadInProgress,
    }
}

/// Whether a request is one Kafka's group coordinator serves: those of one
/// connection must take effect in the order they were sent.
pub fn is_coordinator_request(body: &RequestKind) -> bool {
    matches!(
        body,
        RequestKind::JoinGroup(_)
            | RequestKind::SyncGroup(_)
            | RequestKind::Heartbeat(_)
            | RequestKind::LeaveGroup(_)
            | RequestKind::OffsetCommit(_)
            | RequestKind::OffsetFetch(_)
            | RequestKind::OffsetDelete(_)
            | RequestKind::DeleteGroups(_)
            | RequestKind::ConsumerGroupHeartbeat(_)
            | RequestKind::TxnOffsetCommit(_)
            | RequestKind::ShareGroupHeartbeat(_)
            | RequestKind::ShareFetch(_)
            | RequestKind::ShareAcknowledge(_)
            | RequestKind::AlterShareGroupOffsets(_)
            | RequestKind::DeleteShareGroupOffsets(_)
    )
}

/// Runs a connection's group requests one after another, in the order they
/// came, while its other requests (fetches) go on beside them. Kafka's
/// broker takes a connection's requests one at a time, and clients rely on
/// it: librdkafka sends its asynchronous offset commits, then a last
/// synchronous one in the revoke callback, then LeaveGroup, on one
/// connection; run together, an older commit could land last and move the
/// offset back, or the leave could overtake the last commit.
#[derive(Default)]
pub struct Lane {
    /// The connection's number, unique in this process (share sessions
    /// end with the connection that opened them).
    id: ConnectionId,
    last: std::sync::Mutex<Option<oneshot::Receiver<()>>>,
    /// The client is gone: group requests not yet started are dropped (a
    /// heartbeat saying what a member owned must not land after that
    /// member, reconnected, said something newer).
    closed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Offset commits admitted in a row, written together.
    runs: commit_runs::Runs,
}

/// A group request's place in its connection's [`Lane`].
pub struct Ticket {
    before: Option<oneshot::Receiver<()>>,
    closed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Dropped when this request is done (or abandoned): the next may go.
    _done: oneshot::Sender<()>,
}

/// A connection's number.
pub struct ConnectionId(u64);

impl Default for ConnectionId {
    fn default() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        ConnectionId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl Lane {
    /// The connection's number.
    pub fn connection(&self) -> u64 {
        self.id.0
    }

    /// Taken at admission, which runs in request order.
    pub fn ticket(&self) -> Ticket {
        self.runs.seal();
        self.next_ticket()
    }

    /// An OffsetCommit's ticket, and its place in a run of commits (see
    /// [`commit_runs`]). Taken at admission.
    pub fn commit(
        &self,
        req: floe_protocol::kafka_protocol::messages::OffsetCommitRequest,
        version: i16,
    ) -> (Ticket, commit_runs::Joined) {
        let joined = self.runs.join(req, version);
        (self.next_ticket(), joined)
    }

    fn next_ticket(&self) -> Ticket {
        let (done, after) = oneshot::channel();
        let before = self.last.lock().expect("lane lock").replace(after);
        Ticket {
            before,
            closed: self.closed.clone(),
            _done: done,
        }
    }

    /// The connection stopped reading: what waits in the lane is dropped.
    pub fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Ticket {
    /// Waits until the connection's previous group request is done; false
    /// if the connection closed meanwhile (the request is then not run).
    pub async fn wait(&mut self) -> bool {
        if let Some(before) = self.before.take() {
            // An error is the previous request's end too (its sender dropped).
            let _ = before.await;
        }
        !self.closed.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A metastore that cannot answer is, to a group's members, a coordinator
/// that is not available: they find it again and retry (Kafka's answer while
/// its coordinator loads or moves). A refusal keeps its own code.
pub(crate) fn meta_error(e: MetaError) -> ResponseError {
    tracing::warn!(error = %e, "group operation failed in the metastore");
    match e {
        MetaError::Refused(refusal) => crate::broker::refusal_error(&refusal),
        _ => ResponseError::CoordinatorNotAvailable,
    }
}

/// A group operation's answer: the metastore's failure or the group's refusal.
fn answer<T>(result: Result<Result<T, GroupError>, MetaError>) -> Result<T, ResponseError> {
    result.map_err(meta_error)?.map_err(group_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three group requests of one connection, admitted in order, run in
    /// that order however their tasks are scheduled; an abandoned one
    /// (its future dropped) does not hold up the next.
    #[tokio::test]
    async fn a_connection_s_group_requests_run_in_the_order_they_came() {
        let lane = Lane::default();
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tickets: Vec<Ticket> = (0..3).map(|_| lane.ticket()).collect();
        let abandoned = lane.ticket();
        let mut last = lane.ticket();
        drop(abandoned);
        let mut tasks = Vec::new();
        for (n, mut ticket) in tickets.drain(..).enumerate().rev() {
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                assert!(ticket.wait().await);
                tokio::task::yield_now().await;
                order.lock().unwrap().push(n);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        let open = tokio::time::timeout(std::time::Duration::from_secs(1), last.wait())
            .await
            .expect("an abandoned request does not block the lane");
        assert!(open);
        drop(last);
        let mut after_close = lane.ticket();
        lane.close();
        assert!(
            !after_close.wait().await,
            "a closed connection's requests are dropped"
        );
    }
}
