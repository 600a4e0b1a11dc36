//! Share groups (KIP-932, queues for Kafka): the seven APIs of Kafka 4.2.
//! Every decision about a record (who holds it, until when, how often it
//! was delivered, how it ended) is the metastore's
//! (`floe_metastore::groups::share`); an agent keeps its members' share
//! sessions ([`sessions`]), reads the records it hands out, and checks
//! requests as Kafka's `KafkaApis` does before its share coordinator.
//!
//! - [`heartbeat`]: ShareGroupHeartbeat and ShareGroupDescribe.
//! - [`fetch`]: ShareFetch, with its piggybacked acknowledgements.
//! - [`acknowledge`]: ShareAcknowledge, and the acknowledgement batches
//!   both carry.
//! - [`offsets`]: DescribeShareGroupOffsets, AlterShareGroupOffsets and
//!   DeleteShareGroupOffsets.
//!
//! Members' share sessions are the read path's
//! ([`crate::read::share_sessions`]): the agent holds them.

pub mod acknowledge;
pub mod fetch;
pub mod heartbeat;
pub mod offsets;

pub use crate::read::share_sessions as sessions;

use floe_metastore::groups::share::{AcquireRules, StartFrom};
use floe_metastore::{GroupError, MetaError};
use floe_protocol::ResponseError;

use crate::broker::Broker;

pub use sessions::FINAL_EPOCH;

/// What an agent asks the metastore with: Kafka's defaults. The cluster's
/// `group.share.*` and the group's `share.*` configs win, as the state
/// resolves them, so every agent works under the same rules.
pub const KAFKA_RULES: AcquireRules = AcquireRules {
    delivery_limit: 5,
    max_in_flight: 2_000,
    lock_ms: 30_000,
    start_from: StartFrom::Latest,
    read_committed: false,
};
/// Kafka's `group.share.session.timeout.ms`, `group.share.heartbeat.interval.ms`
/// and `group.share.max.size` defaults (configs win, as for [`KAFKA_RULES`]).
pub const KAFKA_SESSION_TIMEOUT_MS: i32 = 45_000;
pub const KAFKA_HEARTBEAT_INTERVAL_MS: i32 = 5_000;
pub const KAFKA_MAX_SIZE: usize = 200;

/// Kafka's `isMemberIdValid`: a member id the client made, at most 36
/// characters (a UUID's).
pub fn member_id_is_valid(member_id: &str) -> bool {
    !member_id.is_empty() && member_id.chars().count() <= 36
}

/// The (group, member) a ShareFetch or ShareAcknowledge names, or Kafka's
/// INVALID_REQUEST message when it names none.
pub fn member_of(
    group: Option<&floe_protocol::kafka_protocol::messages::GroupId>,
    member: Option<&floe_protocol::kafka_protocol::protocol::StrBytes>,
) -> Result<sessions::Key, &'static str> {
    let group = group.map(|g| g.0.to_string()).unwrap_or_default();
    let member = member.map(|m| m.to_string()).unwrap_or_default();
    match !group.is_empty() && member_id_is_valid(&member) {
        true => Ok((group, member)),
        false => Err("invalid group or member id"),
    }
}

/// Whether a request's partitions and acknowledgement batches (each
/// partition's count) stay within what one request may carry.
pub fn within_request_limits(partition_batches: impl Iterator<Item = usize>) -> bool {
    let (mut partitions, mut batches) = (0usize, 0usize);
    for n in partition_batches {
        partitions += 1;
        batches = batches.saturating_add(n);
    }
    partitions <= sessions::MAX_PARTITIONS && batches <= acknowledge::MAX_REQUEST_BATCHES
}

/// A share operation's failure as its client is told it.
fn share_error(e: GroupError) -> ResponseError {
    super::groups::group_error(e)
}

/// A metastore that cannot answer is a coordinator that is not available:
/// the member finds it again and retries.
fn meta_error(e: MetaError) -> ResponseError {
    super::groups::meta_error(e)
}

/// Releases the records each closed session held, after the connection
/// that opened them closed (Kafka's disconnect listener). Off the
/// connection's task: its close does not wait on the metastore.
pub fn connection_closed(broker: &std::sync::Arc<Broker>, connection: u64) {
    let closed = broker.share_sessions.close_connection(connection);
    if closed.is_empty() {
        return;
    }
    broker
        .metrics
        .share_sessions
        .set(broker.share_sessions.count() as i64);
    let tasks = broker.tasks.clone();
    let broker = broker.clone();
    tasks.spawn(async move {
        for ((group, member), session) in closed {
            acknowledge::release(&broker, group, member, session).await;
        }
    });
}
