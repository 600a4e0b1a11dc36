//! Authorization of each request, as Kafka's `KafkaApis` does it, in one
//! place: before a request is handled, the parts its principal may not
//! touch are taken out of it, and after, they are added back to the
//! response with Kafka's error (`TOPIC_AUTHORIZATION_FAILED`,
//! `GROUP_AUTHORIZATION_FAILED`, `CLUSTER_AUTHORIZATION_FAILED`). Lists
//! (Metadata of all topics, ListGroups, OffsetFetch of all offsets) leave
//! out what the principal may not describe. A request naming nothing it
//! may touch is answered without being handled.
//!
//! [`gate`] sends each API to its rules, one function per API, by family:
//! [`topics`], [`configs`], [`groups`], [`txns`] and [`cluster`]. An API
//! not listed there needs ALL on the cluster: a new API stays closed until
//! its rules are written.

use std::sync::Arc;

use floe_metastore::acls::{operation as op, resource as rt};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::*;

use crate::broker::Broker;
use crate::security::authorizer::{Authorizer, Session};

mod cluster;
mod configs;
mod groups;
mod shares;
mod topics;
mod txns;

/// Adds what was taken out of a request back to its response.
pub type Patch = Box<dyn FnOnce(&mut ResponseKind) + Send>;

/// What to do with a request.
pub enum Gate {
    /// Handle it (perhaps narrowed), then apply the patch to the response.
    Handle(RequestKind, Option<Patch>),
    /// Answer this without handling it.
    Answer(ResponseKind),
    /// Close the connection (an API without rules, for a principal not
    /// allowed everything).
    Close,
}

const TOPIC_DENIED: i16 = ResponseError::TopicAuthorizationFailed.code();
const GROUP_DENIED: i16 = ResponseError::GroupAuthorizationFailed.code();
const CLUSTER_DENIED: i16 = ResponseError::ClusterAuthorizationFailed.code();
const TXN_DENIED: i16 = ResponseError::TransactionalIdAuthorizationFailed.code();

/// A patch of the response of one kind (`$variant`), given the response.
macro_rules! patch {
    ($variant:ident, |$r:ident| $body:block) => {
        Some(Box::new(move |k: &mut ResponseKind| {
            if let ResponseKind::$variant($r) = k $body
        }) as Patch)
    };
}
use patch;

/// Who asks, with the ACLs that decide for them. Cheap to clone: a patch
/// takes a copy to decide on the response.
#[derive(Clone)]
struct Who {
    authz: Arc<Authorizer>,
    session: Session,
}

impl Who {
    fn allows(&self, o: i8, resource: i8, name: &str) -> bool {
        self.authz.allows(&self.session, o, resource, name)
    }

    fn topic(&self, o: i8, name: &str) -> bool {
        self.allows(o, rt::TOPIC, name)
    }

    fn group(&self, o: i8, name: &str) -> bool {
        self.allows(o, rt::GROUP, name)
    }

    fn transactional_id(&self, o: i8, id: &str) -> bool {
        self.allows(o, rt::TRANSACTIONAL_ID, id)
    }

    fn cluster(&self, o: i8) -> bool {
        self.authz.allows_cluster(&self.session, o)
    }

    /// Whether `o` is allowed on some resource of the type.
    fn any(&self, o: i8, resource: i8) -> bool {
        self.authz.allows_any(&self.session, o, resource)
    }

    /// The operations of `ops` allowed on the resource, as Kafka's
    /// `authorized_operations` bit field.
    fn operations(&self, resource: i8, name: &str, ops: &[i8]) -> i32 {
        self.authz.operations(&self.session, resource, name, ops)
    }
}

/// Decides what of `body` the session may do.
pub async fn gate(broker: &Broker, session: &Session, body: RequestKind, version: i16) -> Gate {
    if !broker.authorizer.enabled() {
        return Gate::Handle(body, None);
    }
    let who = &Who {
        authz: broker.authorizer.clone(),
        session: session.clone(),
    };
    use RequestKind as K;
    match body {
        // Before and around authentication: open. Client telemetry too:
        // Kafka checks no ACL for it (KIP-714), a client pushes what it is
        // asked.
        K::ApiVersions(_)
        | K::SaslHandshake(_)
        | K::SaslAuthenticate(_)
        | K::GetTelemetrySubscriptions(_)
        | K::PushTelemetry(_) => Gate::Handle(body, None),
        // Topics: data.
        K::Produce(req) => topics::produce(who, req, version),
        K::Fetch(req) => topics::fetch(who, broker, req, version).await,
        K::ListOffsets(req) => topics::list_offsets(who, req),
        K::OffsetForLeaderEpoch(req) => topics::offset_for_leader_epoch(who, req),
        K::DescribeProducers(req) => topics::describe_producers(who, req),
        // Topics: metadata.
        K::Metadata(req) => topics::metadata(who, req, version),
        K::DescribeTopicPartitions(req) => topics::describe_topic_partitions(who, req),
        K::CreateTopics(req) => topics::create_topics(who, req),
        K::DeleteTopics(req) => topics::delete_topics(who, broker, req).await,
        K::CreatePartitions(req) => topics::create_partitions(who, req),
        K::DeleteRecords(req) => topics::delete_records(who, req),
        // Configs: of topics, groups, or the brokers (the cluster).
        K::DescribeConfigs(req) => configs::describe_configs(who, req),
        K::AlterConfigs(req) => configs::alter_configs(who, req),
        K::IncrementalAlterConfigs(req) => configs::incremental_alter_configs(who, req),
        // Groups.
        K::FindCoordinator(req) => groups::find_coordinator(who, req, version),
        K::JoinGroup(req) => groups::join_group(who, req),
        K::SyncGroup(req) => groups::sync_group(who, req),
        K::Heartbeat(req) => groups::heartbeat(who, req),
        K::LeaveGroup(req) => groups::leave_group(who, req),
        K::ConsumerGroupHeartbeat(req) => groups::consumer_group_heartbeat(who, req),
        K::OffsetCommit(req) => groups::offset_commit(who, req),
        K::OffsetFetch(req) => groups::offset_fetch(who, req, version),
        K::DescribeGroups(req) => groups::describe_groups(who, req),
        K::ConsumerGroupDescribe(req) => groups::consumer_group_describe(who, req),
        K::ListGroups(req) => groups::list_groups(who, req),
        K::DeleteGroups(req) => groups::delete_groups(who, req),
        K::OffsetDelete(req) => groups::offset_delete(who, req),
        // Share groups.
        K::ShareGroupHeartbeat(req) => shares::share_group_heartbeat(who, req),
        K::ShareGroupDescribe(req) => shares::share_group_describe(who, req),
        K::ShareFetch(req) => shares::share_fetch(who, broker, req).await,
        K::ShareAcknowledge(req) => shares::share_acknowledge(who, broker, req).await,
        K::DescribeShareGroupOffsets(req) => shares::describe_share_group_offsets(who, req),
        K::AlterShareGroupOffsets(req) => shares::alter_share_group_offsets(who, req),
        K::DeleteShareGroupOffsets(req) => shares::delete_share_group_offsets(who, req),
        // Producers and transactions.
        K::InitProducerId(req) => txns::init_producer_id(who, req),
        K::AddPartitionsToTxn(req) => txns::add_partitions_to_txn(who, req),
        K::AddOffsetsToTxn(req) => txns::add_offsets_to_txn(who, req),
        K::TxnOffsetCommit(req) => txns::txn_offset_commit(who, req),
        K::DescribeTransactions(req) => txns::describe_transactions(who, req),
        K::ListTransactions(req) => txns::list_transactions(who, req),
        K::EndTxn(req) => txns::end_txn(who, req),
        // The cluster.
        K::DescribeCluster(req) => cluster::describe_cluster(who, req),
        K::DescribeLogDirs(req) => cluster::describe_log_dirs(who, req),
        K::DescribeUserScramCredentials(req) => cluster::describe_user_scram_credentials(who, req),
        K::AlterUserScramCredentials(req) => cluster::alter_user_scram_credentials(who, req),
        K::DescribeClientQuotas(req) => cluster::describe_client_quotas(who, req),
        K::AlterClientQuotas(req) => cluster::alter_client_quotas(who, req),
        K::ListConfigResources(req) => cluster::list_config_resources(who, req),
        K::ElectLeaders(req) => cluster::elect_leaders(who, req),
        K::AlterPartitionReassignments(req) => cluster::alter_partition_reassignments(who, req),
        K::ListPartitionReassignments(req) => cluster::list_partition_reassignments(who, req),
        K::AlterReplicaLogDirs(req) => cluster::alter_replica_log_dirs(who, req),
        K::DescribeQuorum(req) => cluster::describe_quorum(who, req),
        K::DescribeAcls(req) => cluster::describe_acls(who, req),
        K::CreateAcls(req) => cluster::create_acls(who, req),
        K::DeleteAcls(req) => cluster::delete_acls(who, req),
        other => cluster::without_rules(who, other),
    }
}

/// Takes out of `items` those `allowed` refuses, keeping the others in
/// their order, and answers the refused (for the patch to answer).
fn take_denied<T>(items: &mut Vec<T>, mut allowed: impl FnMut(&T) -> bool) -> Vec<T> {
    let (kept, denied) = std::mem::take(items).into_iter().partition(|t| allowed(t));
    *items = kept;
    denied
}

/// The name of the topic of this id: `Ok(None)` if there is none, `Err`
/// when the metastore cannot say (then the request is not authorized).
async fn name_of(broker: &Broker, id: uuid::Uuid) -> Result<Option<String>, ()> {
    if let Some(info) = broker.topics.get_by_id(id, 0) {
        return Ok(Some(info.name));
    }
    match broker.meta.topic_by_id(id).await {
        Ok(found) => Ok(found.map(|info| info.name)),
        Err(e) => {
            tracing::debug!(error = %e, "authorizing by topic id: the metastore did not answer");
            Err(())
        }
    }
}

#[cfg(test)]
mod tests;
