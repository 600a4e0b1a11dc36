//! One module per Kafka API.

pub mod acls;
pub mod api_versions;
pub mod authorize;
pub mod client_quotas;
pub mod cluster;
pub mod configs;
pub mod delete_records;
pub mod describe_topic_partitions;
pub mod fetch;
pub mod groups;
pub mod init_producer_id;
pub mod list_offsets;
pub mod log_dirs;
pub mod metadata;
pub mod mutation_quota;
pub mod null_messages;
pub mod produce;
pub mod produce_rules;
pub mod quorum;
pub mod reads;
pub mod replicas;
pub mod scram_credentials;
pub mod shares;
pub mod topics;
pub mod txn;

use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::{
    RequestHeader, RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use floe_protocol::str_bytes;
use futures::future::BoxFuture;
use std::ops::ControlFlow;
use std::sync::Arc;

use crate::broker::Broker;
use crate::limits::budget::{Held, Turn};
use crate::limits::quotas;
use crate::security::authorizer::Session;
use crate::write::pipelines::Pipeline;

/// A response, with the response budget it holds until written (fetches).
pub struct Reply {
    pub response: ResponseKind,
    pub held: Option<Held>,
}

impl From<ResponseKind> for Reply {
    fn from(response: ResponseKind) -> Self {
        Reply {
            response,
            held: None,
        }
    }
}

/// The rest of a request's handling, run concurrently with later requests.
pub type Pending = BoxFuture<'static, Option<Reply>>;

/// Starts handling a request. What must happen in request order (enqueueing
/// produced batches) is done before this returns; the rest is left in the
/// returned future. It resolves to `None` when the client expects no response.
/// `turn` is the connection's, for the response budget (see [`crate::limits::budget`]).
/// `peer` is the client's address (which agent Metadata names depends on it).
/// `lane` is the connection's, for group requests (see [`groups::Lane`]), and
/// `produces` its produce requests in flight (see [`crate::write::pipelines`]).
/// `quota` is the request's client while quotas are set (see [`quotas`]).
pub async fn admit(
    broker: Arc<Broker>,
    header: &RequestHeader,
    body: RequestKind,
    (turn, lane, produces): (&Turn, &groups::Lane, &Arc<Pipeline>),
    session: &Session,
    quota: Option<quotas::Client>,
) -> Pending {
    let version = header.request_api_version;
    let mut body = body;
    if let RequestKind::Produce(req) = &mut body
        && version >= 13
    {
        produce::name_topics_by_id(&broker, req).await;
    }
    let (body, patch) = match authorize::gate(&broker, session, body, version).await {
        authorize::Gate::Handle(body, patch) => (body, patch),
        authorize::Gate::Answer(response) => {
            let response = null_messages::nulled(response);
            return Box::pin(async move { Some(Reply::from(response)) });
        }
        authorize::Gate::Close => return Box::pin(async { None }),
    };
    let patched = move |mut response: ResponseKind| {
        if let Some(patch) = patch {
            patch(&mut response);
        }
        null_messages::nulled(response)
    };
    if let RequestKind::Produce(req) = body {
        // Kafka counts a produce request's bytes against the producer's
        // quota as it answers it (acks=0 included: it is only muted).
        let bytes: usize = req
            .topic_data
            .iter()
            .flat_map(|t| &t.partition_data)
            .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
            .sum();
        let (outstanding, producer) = produces.begin();
        let admitted = produce::admit(&broker, req, version, session, producer).await;
        return Box::pin(async move {
            let response = admitted.respond().await;
            drop(outstanding);
            let throttle =
                quota.map_or(0, |q| q.record(quotas::Kind::Produce, bytes as f64, false));
            response.map(|mut r| {
                r.throttle_time_ms = r.throttle_time_ms.max(throttle as i32);
                Reply::from(patched(ResponseKind::Produce(r)))
            })
        });
    }
    if let RequestKind::Fetch(mut req) = body {
        let turn = turn.clone();
        if let Some(cap) = quota
            .as_ref()
            .and_then(|q| q.max_in_window(quotas::Kind::Fetch))
        {
            req.max_bytes = req.max_bytes.min(cap.min(i32::MAX as f64) as i32);
            req.min_bytes = req.min_bytes.min(req.max_bytes);
        }
        return Box::pin(async move {
            let (mut response, mut held) = fetch::handle(&broker, req, version, &turn).await;
            if let Some(q) = quota {
                // Kafka's throttled fetch: answered empty, its bytes not
                // counted, and the consumer muted.
                let bytes: usize = response
                    .responses
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
                    .sum();
                let throttle = q.record(quotas::Kind::Fetch, bytes as f64, true);
                if throttle > 0 {
                    response = floe_protocol::kafka_protocol::messages::FetchResponse::default()
                        .with_throttle_time_ms(throttle as i32);
                    held = None;
                }
            }
            Some(Reply {
                response: patched(ResponseKind::Fetch(response)),
                held,
            })
        });
    }
    if let RequestKind::ShareFetch(req) = body {
        let turn = turn.clone();
        let mut ticket = lane.ticket();
        let connection = lane.connection();
        let auth = session.clone();
        return Box::pin(async move {
            if !ticket.wait().await {
                return None;
            }
            let (mut response, held) =
                shares::fetch::handle(&broker, req, connection, &auth, &turn).await;
            drop(ticket);
            if let Some(q) = quota {
                // Records are handed out already: the answer keeps them, and
                // the consumer is muted for what it took.
                let bytes: usize = response
                    .responses
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
                    .sum();
                let throttle = q.record(quotas::Kind::Fetch, bytes as f64, false);
                response.throttle_time_ms = response.throttle_time_ms.max(throttle as i32);
            }
            Some(Reply {
                response: patched(ResponseKind::ShareFetch(response)),
                held,
            })
        });
    }
    let client_id = header
        .client_id
        .as_ref()
        .map(|c| c.to_string())
        .unwrap_or_default();
    // Group requests run one after another, in the order they came; offset
    // commits in a row are written together.
    if let RequestKind::OffsetCommit(req) = body {
        let (mut ticket, joined) = lane.commit(req, version);
        return Box::pin(async move {
            if !ticket.wait().await {
                return joined
                    .written()
                    .map(|r| Reply::from(patched(ResponseKind::OffsetCommit(r))));
            }
            let response = joined.respond(&broker).await;
            drop(ticket);
            Some(Reply::from(patched(ResponseKind::OffsetCommit(response))))
        });
    }
    let mut ticket = groups::is_coordinator_request(&body).then(|| lane.ticket());
    let session = session.clone();
    Box::pin(async move {
        if let Some(ticket) = &mut ticket
            && !ticket.wait().await
        {
            return None;
        }
        // Topics created, grown or deleted take from the client's
        // controller mutation quota first (KIP-599).
        let (body, mutated) = mutation_quota::take(&broker, quota.as_ref(), body, version).await;
        let reply = handle(&broker, body, version, client_id, &session)
            .await
            .map(|mut r| {
                if let Some(mutated) = mutated {
                    mutated.apply(&mut r);
                }
                Reply::from(patched(r))
            });
        drop(ticket);
        reply
    })
}

/// A client as KIP-714's `match` selectors name it (the instance id is the
/// request's).
fn client_attributes<'a>(
    client_id: &'a str,
    session: &'a Session,
) -> crate::telemetry::ClientAttributes<'a> {
    crate::telemetry::ClientAttributes {
        instance_id: uuid::Uuid::nil(),
        client_id,
        software_name: session.software.as_ref().map(|s| s.name.as_str()),
        software_version: session.software.as_ref().map(|s| s.version.as_str()),
        source_address: &session.host,
        source_port: session.port,
    }
}

/// Sets a response's `throttle_time_ms` to at least `ms` (a field every
/// response of a served API has; versions without it do not send it).
pub fn throttled(response: &mut ResponseKind, ms: i32) {
    macro_rules! each {
        ($($kind:ident),* $(,)?) => {
            match response {
                $(ResponseKind::$kind(r) => r.throttle_time_ms = r.throttle_time_ms.max(ms),)*
                _ => {}
            }
        };
    }
    each!(
        AddOffsetsToTxn,
        AddPartitionsToTxn,
        AlterConfigs,
        AlterUserScramCredentials,
        ApiVersions,
        ConsumerGroupDescribe,
        ConsumerGroupHeartbeat,
        CreateAcls,
        CreatePartitions,
        CreateTopics,
        DeleteAcls,
        DeleteGroups,
        DeleteRecords,
        DeleteTopics,
        DescribeAcls,
        DescribeCluster,
        DescribeConfigs,
        DescribeGroups,
        DescribeLogDirs,
        DescribeProducers,
        DescribeTopicPartitions,
        DescribeTransactions,
        DescribeUserScramCredentials,
        EndTxn,
        Fetch,
        FindCoordinator,
        GetTelemetrySubscriptions,
        Heartbeat,
        IncrementalAlterConfigs,
        InitProducerId,
        JoinGroup,
        LeaveGroup,
        ListConfigResources,
        ListGroups,
        ListOffsets,
        ListTransactions,
        Metadata,
        OffsetCommit,
        OffsetDelete,
        OffsetFetch,
        OffsetForLeaderEpoch,
        Produce,
        PushTelemetry,
        SyncGroup,
        TxnOffsetCommit,
        DescribeClientQuotas,
        AlterClientQuotas,
        ElectLeaders,
        AlterPartitionReassignments,
        ListPartitionReassignments,
        AlterReplicaLogDirs,
        ShareGroupHeartbeat,
        ShareGroupDescribe,
        ShareFetch,
        ShareAcknowledge,
        DescribeShareGroupOffsets,
        AlterShareGroupOffsets,
        DeleteShareGroupOffsets
    );
}

/// Answers a request the gate let through (`None`: an API without a
/// handler, which `request::decode` never lets through), by family.
async fn handle(
    broker: &Broker,
    body: RequestKind,
    version: i16,
    client_id: String,
    session: &Session,
) -> Option<ResponseKind> {
    let asked = Asked {
        broker,
        version,
        client_id: &client_id,
        session,
    };
    match by_family(&asked, body).await {
        ControlFlow::Break(answer) => Some(answer),
        ControlFlow::Continue(other) => {
            tracing::error!(?other, "request of an API with no handler");
            None
        }
    }
}

/// Offers the request to each family in turn; the first that answers it
/// stops the round (`?` on [`Answered`]).
async fn by_family(asked: &Asked<'_>, body: RequestKind) -> Answered {
    let body = topic_requests(asked, body).await?;
    let body = group_requests(asked, body).await?;
    let body = transaction_requests(asked, body).await?;
    cluster_requests(asked, body).await
}

/// What every handler may need of a request besides its body.
struct Asked<'a> {
    broker: &'a Broker,
    version: i16,
    client_id: &'a str,
    session: &'a Session,
}

/// A family's answer (`Break`), or the request given back when it is not
/// of the family (`Continue`, on to the next).
type Answered = ControlFlow<ResponseKind, RequestKind>;

/// Topics, their configs and data's offsets.
async fn topic_requests(
    &Asked {
        broker,
        version,
        client_id,
        session,
    }: &Asked<'_>,
    body: RequestKind,
) -> Answered {
    ControlFlow::Break(match body {
        RequestKind::ListConfigResources(req) => ResponseKind::ListConfigResources(
            configs::list_resources(broker, req, version, session, client_id).await,
        ),
        RequestKind::Metadata(req) => {
            ResponseKind::Metadata(metadata::handle(broker, req, version, client_id, session).await)
        }
        RequestKind::CreateTopics(req) => {
            ResponseKind::CreateTopics(topics::create(broker, req, version).await)
        }
        RequestKind::DeleteTopics(req) => {
            ResponseKind::DeleteTopics(topics::delete(broker, req, version).await)
        }
        RequestKind::CreatePartitions(req) => {
            ResponseKind::CreatePartitions(topics::create_partitions(broker, req).await)
        }
        RequestKind::DescribeConfigs(req) => {
            ResponseKind::DescribeConfigs(configs::describe(broker, req).await)
        }
        RequestKind::AlterConfigs(req) => {
            ResponseKind::AlterConfigs(configs::alter_configs(broker, req).await)
        }
        RequestKind::IncrementalAlterConfigs(req) => ResponseKind::IncrementalAlterConfigs(
            configs::incremental_alter_configs(broker, req).await,
        ),
        RequestKind::DescribeTopicPartitions(req) => {
            let (_, leader) = metadata::leader(broker, session, client_id).await;
            ResponseKind::DescribeTopicPartitions(
                describe_topic_partitions::handle(broker, req, leader).await,
            )
        }
        RequestKind::DescribeLogDirs(req) => {
            let leads = metadata::leads(broker, session, client_id).await;
            ResponseKind::DescribeLogDirs(log_dirs::describe_log_dirs(broker, req, leads).await)
        }
        RequestKind::DescribeProducers(req) => {
            let leads = metadata::leads(broker, session, client_id).await;
            ResponseKind::DescribeProducers(log_dirs::describe_producers(broker, req, leads).await)
        }
        RequestKind::OffsetForLeaderEpoch(req) => {
            ResponseKind::OffsetForLeaderEpoch(cluster::offset_for_leader_epoch(broker, req).await)
        }
        RequestKind::DeleteRecords(req) => {
            ResponseKind::DeleteRecords(delete_records::handle(broker, req).await)
        }
        RequestKind::ListOffsets(req) => {
            ResponseKind::ListOffsets(list_offsets::handle(broker, req, version).await)
        }
        other => return ControlFlow::Continue(other),
    })
}

/// Consumer groups, classic and KIP-848, and share groups (KIP-932).
async fn group_requests(
    &Asked {
        broker,
        version,
        client_id,
        session,
    }: &Asked<'_>,
    body: RequestKind,
) -> Answered {
    ControlFlow::Break(match body {
        RequestKind::FindCoordinator(req) => ResponseKind::FindCoordinator(
            groups::find_coordinator(broker, req, version, session, client_id).await,
        ),
        RequestKind::JoinGroup(req) => ResponseKind::JoinGroup(
            groups::join(broker, req, version, client_id.to_string(), session.ip).await,
        ),
        RequestKind::SyncGroup(req) => ResponseKind::SyncGroup(groups::sync(broker, req).await),
        RequestKind::Heartbeat(req) => {
            ResponseKind::Heartbeat(groups::heartbeat(broker, req).await)
        }
        RequestKind::LeaveGroup(req) => {
            ResponseKind::LeaveGroup(groups::leave(broker, req, version).await)
        }
        RequestKind::OffsetFetch(req) => {
            ResponseKind::OffsetFetch(groups::fetch_offsets(broker, req, version).await)
        }
        RequestKind::ListGroups(req) => {
            ResponseKind::ListGroups(groups::list(broker, req, version, session, client_id).await)
        }
        RequestKind::DescribeGroups(req) => {
            ResponseKind::DescribeGroups(groups::describe(broker, req, version).await)
        }
        RequestKind::DeleteGroups(req) => {
            ResponseKind::DeleteGroups(groups::delete(broker, req).await)
        }
        RequestKind::OffsetDelete(req) => {
            ResponseKind::OffsetDelete(groups::delete_offsets(broker, req).await)
        }
        RequestKind::ConsumerGroupHeartbeat(req) => ResponseKind::ConsumerGroupHeartbeat(
            groups::consumer::heartbeat(broker, req, version, client_id.to_string(), session).await,
        ),
        RequestKind::ConsumerGroupDescribe(req) => {
            ResponseKind::ConsumerGroupDescribe(groups::consumer::describe(broker, req).await)
        }
        RequestKind::ShareGroupHeartbeat(req) => ResponseKind::ShareGroupHeartbeat(
            shares::heartbeat::heartbeat(broker, req, client_id.to_string(), session).await,
        ),
        RequestKind::ShareGroupDescribe(req) => {
            ResponseKind::ShareGroupDescribe(shares::heartbeat::describe(broker, req).await)
        }
        RequestKind::ShareAcknowledge(req) => {
            ResponseKind::ShareAcknowledge(shares::acknowledge::handle(broker, req).await)
        }
        RequestKind::DescribeShareGroupOffsets(req) => {
            ResponseKind::DescribeShareGroupOffsets(shares::offsets::describe(broker, req).await)
        }
        RequestKind::AlterShareGroupOffsets(req) => {
            ResponseKind::AlterShareGroupOffsets(shares::offsets::alter(broker, req).await)
        }
        RequestKind::DeleteShareGroupOffsets(req) => {
            ResponseKind::DeleteShareGroupOffsets(shares::offsets::delete(broker, req).await)
        }
        other => return ControlFlow::Continue(other),
    })
}

/// Producer ids and transactions.
async fn transaction_requests(
    &Asked {
        broker,
        version,
        client_id,
        session,
    }: &Asked<'_>,
    body: RequestKind,
) -> Answered {
    ControlFlow::Break(match body {
        RequestKind::InitProducerId(req) => {
            ResponseKind::InitProducerId(init_producer_id::handle(broker, req, version).await)
        }
        RequestKind::AddPartitionsToTxn(req) => {
            ResponseKind::AddPartitionsToTxn(txn::add_partitions(broker, req, version).await)
        }
        RequestKind::AddOffsetsToTxn(req) => {
            ResponseKind::AddOffsetsToTxn(txn::add_offsets(broker, req, version).await)
        }
        RequestKind::EndTxn(req) => ResponseKind::EndTxn(txn::end_txn(broker, req, version).await),
        RequestKind::DescribeTransactions(req) => {
            ResponseKind::DescribeTransactions(txn::describe_transactions(broker, req).await)
        }
        RequestKind::ListTransactions(req) => ResponseKind::ListTransactions(
            txn::list_transactions(broker, req, session, client_id).await,
        ),
        RequestKind::TxnOffsetCommit(req) => {
            ResponseKind::TxnOffsetCommit(groups::txn_commit_offsets(broker, req, version).await)
        }
        other => return ControlFlow::Continue(other),
    })
}

/// The cluster, its security and quotas, client telemetry, and SASL out of turn.
async fn cluster_requests(asked: &Asked<'_>, body: RequestKind) -> Answered {
    let Asked {
        broker,
        client_id,
        session,
        ..
    } = *asked;
    ControlFlow::Break(match body {
        RequestKind::ApiVersions(_) => {
            ResponseKind::ApiVersions(api_versions::handle(broker.telemetry.advertised()))
        }
        RequestKind::GetTelemetrySubscriptions(req) => {
            ResponseKind::GetTelemetrySubscriptions(broker.telemetry.subscribe(
                &req,
                client_attributes(client_id, session),
                || broker.world.new_id(),
            ))
        }
        RequestKind::PushTelemetry(req) => ResponseKind::PushTelemetry(
            broker
                .telemetry
                .push(&req, client_attributes(client_id, session)),
        ),
        RequestKind::DescribeClientQuotas(req) => {
            ResponseKind::DescribeClientQuotas(client_quotas::describe(broker, req).await)
        }
        RequestKind::AlterClientQuotas(req) => {
            ResponseKind::AlterClientQuotas(client_quotas::alter(broker, req).await)
        }
        RequestKind::DescribeQuorum(req) => {
            ResponseKind::DescribeQuorum(quorum::describe(broker, req).await)
        }
        RequestKind::DescribeCluster(req) => ResponseKind::DescribeCluster(
            cluster::describe_cluster(broker, req, session, client_id).await,
        ),
        RequestKind::CreateAcls(req) => ResponseKind::CreateAcls(acls::create(broker, req).await),
        RequestKind::DescribeAcls(req) => {
            ResponseKind::DescribeAcls(acls::describe(broker, req).await)
        }
        RequestKind::DeleteAcls(req) => ResponseKind::DeleteAcls(acls::delete(broker, req).await),
        RequestKind::DescribeUserScramCredentials(req) => {
            ResponseKind::DescribeUserScramCredentials(
                scram_credentials::describe(broker, req).await,
            )
        }
        RequestKind::AlterUserScramCredentials(req) => {
            ResponseKind::AlterUserScramCredentials(scram_credentials::alter(broker, req).await)
        }
        RequestKind::ElectLeaders(req) => {
            ResponseKind::ElectLeaders(replicas::elect_leaders(broker, req).await)
        }
        RequestKind::AlterPartitionReassignments(req) => ResponseKind::AlterPartitionReassignments(
            replicas::alter_partition_reassignments(broker, req).await,
        ),
        RequestKind::ListPartitionReassignments(_) => {
            ResponseKind::ListPartitionReassignments(replicas::list_partition_reassignments())
        }
        RequestKind::AlterReplicaLogDirs(req) => {
            ResponseKind::AlterReplicaLogDirs(replicas::alter_replica_log_dirs(broker, req).await)
        }
        // Authentication happens before any request reaches here (see
        // `server::authenticate`): a handshake now is out of turn, and on a
        // listener without SASL no mechanism is served.
        RequestKind::SaslHandshake(_) => ResponseKind::SaslHandshake(
            match broker
                .sasl
                .as_ref()
                .filter(|_| session.listener.protocol.sasl())
            {
                Some(auth) => SaslHandshakeResponse::default()
                    .with_error_code(ResponseError::IllegalSaslState.code())
                    .with_mechanisms(auth.mechanisms().into_iter().map(str_bytes).collect()),
                None => SaslHandshakeResponse::default()
                    .with_error_code(ResponseError::UnsupportedSaslMechanism.code()),
            },
        ),
        RequestKind::SaslAuthenticate(_) => ResponseKind::SaslAuthenticate(
            SaslAuthenticateResponse::default()
                .with_error_code(ResponseError::IllegalSaslState.code()),
        ),
        other => return ControlFlow::Continue(other),
    })
}
