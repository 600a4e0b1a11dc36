//! Consumer groups (Kafka's classic protocol). Every decision is the
//! metastore's (see `floe_metastore::groups`); an agent turns requests into
//! its operations and waits for the group where Kafka's coordinator would.
//!
//! - [`membership`]: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.
//! - [`offsets`]: OffsetCommit, OffsetFetch, OffsetDelete.
//! - [`admin`]: FindCoordinator, ListGroups, DescribeGroups, DeleteGroups.

pub mod admin;
pub mod membership;
pub mod offsets;

use floe_metastore::{GroupError, MetaError};
use floe_protocol::ResponseError;

pub use admin::{delete, describe, find_coordinator, list};
pub use membership::{heartbeat, join, leave, sync};
pub use offsets::{commit_offsets, delete_offsets, fetch_offsets};

fn group_error(e: GroupError) -> ResponseError {
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
    }
}

/// A metastore that cannot answer is, to a group's members, a coordinator
/// that is not available: they find it again and retry (Kafka's answer while
/// its coordinator loads or moves). A refusal keeps its own code.
fn meta_error(e: MetaError) -> ResponseError {
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
