//! The metastore over the network, so several agents share one.
//!
//! `floe metastore` serves a [`RaftMetastore`] node with [`serve`]; agents use
//! [`RemoteMetastore`], which implements the same trait. Messages are postcard
//! in length-prefixed frames; each connection carries one request at a time
//! and the client keeps a pool of them. Raft messages between nodes
//! ([`PeerRequest`]) and membership changes share the port.
//!
//! Leader finding: the client is given every node's address. A follower
//! answers [`MetaError::NotLeader`] with the leader's address (nothing was
//! applied), and the client moves there; an unreachable node sends it on to
//! the next address.
//!
//! Retries: a request that never left the client is retried freely. One that
//! was sent but got no answer may have been applied, so only requests that are
//! safe to repeat are resent: reads, and commits (the state machine answers a
//! repeated commit of the same object key from memory instead of sequencing it
//! twice). Anything else then fails with [`MetaError::Unavailable`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::Metastore;
use crate::agents::AgentInfo;
use crate::groups::{Group, GroupCommand, GroupReply};
use crate::raft::network::{self, PeerRequest, PeerResponse};
use crate::raft::{ClusterStatus, NodeId, RaftMetastore};
use crate::types::*;

/// Largest message either side accepts (snapshots travel in pieces, see
/// [`network::SNAPSHOT_CHUNK_BYTES`]). Small in tests, so a state larger
/// than one frame is easy to build.
#[cfg(not(test))]
const MAX_FRAME: usize = 256 * 1024 * 1024;
#[cfg(test)]
const MAX_FRAME: usize = 4 * 1024 * 1024;
#[cfg(test)]
pub(crate) const MAX_FRAME_FOR_TESTS: usize = MAX_FRAME;
/// How long a safe request keeps being retried while the metastore is away.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(15);
/// How long one attempt (connect, send, answer) may take before the client
/// gives up on that node. A node that is frozen (SIGSTOP, a stalled VM, a
/// partition without RST) accepts bytes into its socket and never answers;
/// without this, every agent would wait on it while the others have long
/// elected a new leader (about 3 s).
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);
/// Connecting takes one round trip; a node that does not answer in this is down.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// TCP keepalive on every connection, so a dead peer is found on idle ones.
const KEEPALIVE: Duration = Duration::from_secs(10);

/// Connects to `address` within [`CONNECT_TIMEOUT`], with keepalive and no delay.
pub(crate) async fn connect(address: &str) -> Result<TcpStream, String> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address))
        .await
        .map_err(|_| format!("connecting to {address}: no answer within {CONNECT_TIMEOUT:?}"))?
        .map_err(|e| format!("connecting to {address}: {e}"))?;
    stream.set_nodelay(true).ok();
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE)
        .with_interval(KEEPALIVE);
    if let Err(e) = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive) {
        tracing::debug!(%address, error = %e, "could not turn on TCP keepalive");
    }
    Ok(stream)
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Request {
    CreateTopic(NewTopic),
    DeleteTopic(String),
    Topics,
    Topic(String),
    TopicById(TopicId),
    Commit(Commit),
    Offsets(TopicId, i32),
    HighWatermarks(Vec<(TopicId, i32)>),
    ReadPlan(TopicId, i32, i64, u64),
    ListOffsets(TopicId, i32, OffsetQuery),
    InitProducer(Option<ProducerIdentity>),
    GroupCommand(GroupCommand),
    Group(String),
    ReplaceExtents(ReplaceExtents),
    Garbage,
    RecordOrphans(Vec<String>),
    ForgetGarbage(Vec<String>),
    Trim(TopicId, i32, i64),
    UnknownObjects(Vec<String>),
    AlterTopicConfigs(
        String,
        std::collections::BTreeMap<String, String>,
        Vec<String>,
    ),
    CreatePartitions(String, i32),
    Groups,
    RegisterAgent(String, i32, Option<String>, i64),
    AgentHeartbeat(i32, i64),
    Agents,
    /// From another metastore node of before format versions: refused (see
    /// [`Request::PeerOfFormat`]).
    Peer(PeerRequest),
    AddNode(NodeId, String),
    RemoveNode(NodeId),
    /// What the receiving node knows of its group (answered by any node).
    Status,
    AcquireLease(String, String, i64, i64),
    ReleaseLease(String, String),
    Clock,
    /// From another metastore node, with the format of the log entries and
    /// snapshots it carries. A node of another format refuses it rather than
    /// replaying entries as something else; a node from before formats were
    /// versioned cannot even decode this variant, and closes the connection.
    PeerOfFormat(u8, PeerRequest),
}

impl Request {
    /// The request as one frame's payload.
    fn frame(&self) -> Result<Bytes, MetaError> {
        postcard::to_stdvec(self)
            .map(Bytes::from)
            .map_err(|e| MetaError::Storage(e.to_string()))
    }

    /// Whether sending it twice has the effect of sending it once.
    fn repeatable(&self) -> bool {
        match self {
            Request::Topics
            | Request::Topic(_)
            | Request::TopicById(_)
            | Request::Commit(_)
            | Request::Offsets(..)
            | Request::HighWatermarks(_)
            | Request::ReadPlan(..)
            | Request::ListOffsets(..)
            | Request::Group(_)
            | Request::Garbage
            | Request::ForgetGarbage(_)
            | Request::Trim(..)
            | Request::UnknownObjects(_)
            | Request::Groups
            | Request::RegisterAgent(..)
            | Request::AgentHeartbeat(..)
            | Request::Agents
            | Request::Status
            | Request::Peer(_)
            | Request::PeerOfFormat(..)
            // A holder re-acquiring its own lease renews it; releasing twice
            // is releasing once.
            | Request::AcquireLease(..)
            | Request::ReleaseLease(..)
            | Request::Clock => true,
            // A second InitProducerId only costs a producer id (or an epoch):
            // the producer uses whichever answer reaches it.
            Request::InitProducer(_) => true,
            // Not CommitOffsets: a blind retry landing after a later commit
            // of the same group would move its offset backwards.
            Request::GroupCommand(c) => {
                matches!(c, GroupCommand::Tick { .. } | GroupCommand::Heartbeat { .. })
            }
            // The state skips keys it knows, so a second time changes nothing.
            Request::RecordOrphans(_) => true,
            // A blind retry landing after another client's change would undo it.
            Request::AlterTopicConfigs(..)
            | Request::CreateTopic(_)
            | Request::DeleteTopic(_)
            | Request::AddNode(..)
            | Request::RemoveNode(_)
            | Request::ReplaceExtents(_)
            | Request::CreatePartitions(..) => false,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Response {
    Unit,
    Topic(TopicInfo),
    Topics(Vec<TopicInfo>),
    MaybeTopic(Option<TopicInfo>),
    Committed(Vec<Result<i64, MetaError>>),
    Offsets(PartitionOffsets),
    ReadPlan(ReadPlan),
    OffsetAnswer(OffsetAnswer),
    Producer(ProducerIdentity),
    GroupReply(GroupReply),
    MaybeGroup(Option<Group>),
    Keys(Vec<String>),
    NodeId(i32),
    Offset(i64),
    Groups(Vec<(String, Group)>),
    Alive(bool),
    Agents(Vec<AgentInfo>),
    Peer(PeerResponse),
    HighWatermarks(Vec<Option<i64>>),
    Status(ClusterStatus),
    Leased(bool),
    Clock(i64),
}

async fn dispatch(meta: &RaftMetastore, request: Request) -> Result<Response, MetaError> {
    Ok(match request {
        Request::PeerOfFormat(format, p) if format == crate::raft::node::FORMAT_VERSION => {
            Response::Peer(network::handle(meta.raft(), meta.incoming(), p).await)
        }
        Request::PeerOfFormat(format, _) => {
            return Err(MetaError::Storage(format!(
                "a peer of metastore format {format}; this node is of format {}",
                crate::raft::node::FORMAT_VERSION
            )));
        }
        Request::Peer(_) => {
            return Err(MetaError::Storage(
                "a peer from before metastore formats were versioned".into(),
            ));
        }
        Request::AddNode(id, address) => {
            meta.add_node(id, address).await.map(|_| Response::Unit)?
        }
        Request::RemoveNode(id) => meta.remove_node(id).await.map(|_| Response::Unit)?,
        Request::Status => Response::Status(meta.status()),
        Request::AcquireLease(job, holder, now, ttl) => {
            Response::Leased(meta.acquire_lease(job, holder, now, ttl).await?)
        }
        Request::Clock => Response::Clock(meta.clock().await?),
        Request::ReleaseLease(job, holder) => meta
            .release_lease(job, holder)
            .await
            .map(|_| Response::Unit)?,
        Request::CreateTopic(t) => Response::Topic(meta.create_topic(t).await?),
        Request::DeleteTopic(name) => meta.delete_topic(&name).await.map(|_| Response::Unit)?,
        Request::Topics => Response::Topics(meta.topics().await?),
        Request::Topic(name) => Response::MaybeTopic(meta.topic(&name).await?),
        Request::TopicById(id) => Response::MaybeTopic(meta.topic_by_id(id).await?),
        Request::Commit(c) => Response::Committed(meta.commit(c).await?),
        Request::Offsets(t, p) => Response::Offsets(meta.offsets(t, p).await?),
        Request::HighWatermarks(partitions) => {
            Response::HighWatermarks(meta.high_watermarks(partitions).await?)
        }
        Request::ReadPlan(t, p, from, max) => {
            Response::ReadPlan(meta.read_plan(t, p, from, max).await?)
        }
        Request::ListOffsets(t, p, q) => Response::OffsetAnswer(meta.list_offsets(t, p, q).await?),
        Request::InitProducer(existing) => Response::Producer(meta.init_producer(existing).await?),
        Request::GroupCommand(c) => Response::GroupReply(meta.group_command(c).await?),
        Request::Group(name) => Response::MaybeGroup(meta.group(&name).await?),
        Request::ReplaceExtents(r) => meta.replace_extents(r).await.map(|_| Response::Unit)?,
        Request::Garbage => Response::Keys(meta.garbage().await?),
        Request::RecordOrphans(keys) => meta.record_orphans(keys).await.map(|_| Response::Unit)?,
        Request::ForgetGarbage(keys) => meta.forget_garbage(keys).await.map(|_| Response::Unit)?,
        Request::AlterTopicConfigs(name, set, delete) => meta
            .alter_topic_configs(&name, set, delete)
            .await
            .map(|_| Response::Unit)?,
        Request::CreatePartitions(name, count) => meta
            .create_partitions(&name, count)
            .await
            .map(|_| Response::Unit)?,
        Request::Groups => Response::Groups(meta.groups().await?),
        Request::UnknownObjects(keys) => Response::Keys(meta.unknown_objects(keys).await?),
        Request::Trim(t, p, offset) => Response::Offset(meta.trim(t, p, offset).await?),
        Request::RegisterAgent(host, port, zone, now) => {
            Response::NodeId(meta.register_agent(host, port, zone, now).await?)
        }
        Request::AgentHeartbeat(node, now) => {
            Response::Alive(meta.agent_heartbeat(node, now).await?)
        }
        Request::Agents => Response::Agents(meta.agents().await?),
    })
}

pub(crate) fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(MAX_FRAME)
        .new_codec()
}

/// Serves the node `meta` to agents and its peers on `listener` until the
/// listener fails. Dropping the future closes every connection it accepted.
pub async fn serve(listener: TcpListener, meta: Arc<RaftMetastore>) -> std::io::Result<()> {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = listener.accept().await?;
        while connections.try_join_next().is_some() {}
        let meta = meta.clone();
        connections.spawn(async move {
            stream.set_nodelay(true).ok();
            let mut framed = Framed::new(stream, codec());
            while let Some(frame) = framed.next().await {
                let reply: Result<Response, MetaError> = match frame {
                    Ok(bytes) => match postcard::from_bytes::<Request>(&bytes) {
                        Ok(request) => dispatch(&meta, request).await,
                        Err(e) => {
                            tracing::warn!(%peer, error = %e, "undecodable metastore request; closing");
                            break;
                        }
                    },
                    Err(e) => {
                        tracing::warn!(%peer, error = %e, "bad metastore frame; closing");
                        break;
                    }
                };
                let Ok(bytes) = postcard::to_stdvec(&reply) else {
                    tracing::error!(%peer, "could not encode a metastore reply");
                    break;
                };
                if framed.send(Bytes::from(bytes)).await.is_err() {
                    break;
                }
            }
        });
    }
}

type Connection = Framed<TcpStream, LengthDelimitedCodec>;

/// Why one attempt failed: before anything was sent, or after.
enum Attempt {
    NotSent(String),
    Unanswered(String),
}

/// A [`Metastore`] reached over the network: one node, or a Raft group.
pub struct RemoteMetastore {
    /// Every node's address; requests go to the one believed to lead.
    addresses: Vec<String>,
    leader: Mutex<String>,
    /// Idle connections, with the address each goes to.
    idle: Mutex<Vec<(String, Connection)>>,
    retry_for: Duration,
    attempt_timeout: Duration,
    /// Called once per request sent (for the agent's metrics).
    on_request: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl RemoteMetastore {
    /// `addresses`: `host:port` of one node, or of several separated by commas.
    pub fn new(addresses: impl AsRef<str>) -> Self {
        let addresses: Vec<String> = addresses
            .as_ref()
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(String::from)
            .collect();
        RemoteMetastore {
            leader: Mutex::new(addresses.first().cloned().unwrap_or_default()),
            addresses,
            idle: Mutex::new(Vec::new()),
            retry_for: DEFAULT_RETRY_FOR,
            attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
            on_request: None,
        }
    }

    /// Calls `hook` once for every request sent to a node (retries included).
    pub fn with_request_hook(mut self, hook: Arc<dyn Fn() + Send + Sync>) -> Self {
        self.on_request = Some(hook);
        self
    }

    /// How long requests that are safe to repeat are retried while the
    /// metastore cannot be reached or has no leader.
    pub fn with_retry_for(mut self, retry_for: Duration) -> Self {
        self.retry_for = retry_for;
        self
    }

    /// How long one attempt at one node may take (see [`DEFAULT_ATTEMPT_TIMEOUT`]).
    pub fn with_attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    fn leader(&self) -> String {
        self.leader.lock().expect("leader lock").clone()
    }

    /// Sends later requests to `hint`, or else to the address after `failed`.
    fn move_on(&self, failed: &str, hint: Option<String>) {
        let next = hint.unwrap_or_else(|| {
            let at = self.addresses.iter().position(|a| a == failed).unwrap_or(0);
            self.addresses[(at + 1) % self.addresses.len().max(1)].clone()
        });
        let mut leader = self.leader.lock().expect("leader lock");
        if *leader == failed && next != failed {
            tracing::debug!(from = failed, to = %next, "metastore client moves to another node");
            *leader = next;
        }
    }

    /// One attempt at one node, within the attempt timeout. A timed-out
    /// attempt counts as unanswered: the request may have been applied.
    async fn once(
        &self,
        address: &str,
        frame: &Bytes,
    ) -> Result<Result<Response, MetaError>, Attempt> {
        match tokio::time::timeout(self.attempt_timeout, self.attempt(address, frame)).await {
            Ok(result) => result,
            // The connection is dropped with the future: a late answer can
            // never be read as the next request's.
            Err(_) => Err(Attempt::Unanswered(format!(
                "{address} did not answer within {:?}",
                self.attempt_timeout
            ))),
        }
    }

    async fn attempt(
        &self,
        address: &str,
        frame: &Bytes,
    ) -> Result<Result<Response, MetaError>, Attempt> {
        let pooled = {
            let mut idle = self.idle.lock().expect("pool lock");
            idle.iter()
                .rposition(|(a, _)| a == address)
                .map(|at| idle.swap_remove(at).1)
        };
        let mut conn = match pooled {
            Some(conn) => conn,
            None => Framed::new(connect(address).await.map_err(Attempt::NotSent)?, codec()),
        };
        if let Some(hook) = &self.on_request {
            hook();
        }
        if let Err(e) = conn.send(frame.clone()).await {
            // A pooled connection the server closed fails here; nothing was applied.
            return Err(Attempt::NotSent(e.to_string()));
        }
        let reply = match conn.next().await {
            Some(Ok(bytes)) => {
                postcard::from_bytes(&bytes).map_err(|e| Attempt::Unanswered(e.to_string()))?
            }
            Some(Err(e)) => return Err(Attempt::Unanswered(e.to_string())),
            None => return Err(Attempt::Unanswered("connection closed".into())),
        };
        self.idle
            .lock()
            .expect("pool lock")
            .push((address.to_string(), conn));
        Ok(reply)
    }

    async fn call(&self, request: Request) -> Result<Response, MetaError> {
        let frame = request.frame()?;
        let repeatable = request.repeatable();
        let deadline = tokio::time::Instant::now() + self.retry_for;
        let mut backoff = Duration::from_millis(20);
        let mut redirects = 0;
        loop {
            let address = self.leader();
            let why = match self.once(&address, &frame).await {
                // Not applied: the node does not lead. Go where it points.
                Ok(Err(MetaError::NotLeader(hint))) => {
                    let known = hint.is_some();
                    self.move_on(&address, hint);
                    redirects += 1;
                    // Follow a hint at once, but not round in circles: during
                    // an election two nodes may point at each other.
                    if known && redirects <= self.addresses.len() + 1 {
                        continue;
                    }
                    format!("{address} knows no leader yet")
                }
                // The node could not confirm it leads or could not reach a
                // quorum; another node may be able to.
                Ok(Err(MetaError::Unavailable(why))) if repeatable => format!("{address}: {why}"),
                Ok(reply) => return reply,
                Err(Attempt::NotSent(why)) => why,
                Err(Attempt::Unanswered(why)) if repeatable => why,
                Err(Attempt::Unanswered(why)) => {
                    self.move_on(&address, None);
                    return Err(MetaError::Unavailable(format!(
                        "{address}: {why}; the request may have been applied"
                    )));
                }
            };
            self.move_on(&address, None);
            if tokio::time::Instant::now() >= deadline {
                return Err(MetaError::Unavailable(why));
            }
            tracing::debug!(%address, %why, "metastore call failed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }

    /// Adds node `id` at `address` to the group (as a learner until it has
    /// caught up, then as a voter).
    pub async fn add_node(&self, id: NodeId, address: String) -> Result<(), MetaError> {
        match self.call(Request::AddNode(id, address)).await? {
            Response::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Removes node `id` from the group.
    pub async fn remove_node(&self, id: NodeId) -> Result<(), MetaError> {
        match self.call(Request::RemoveNode(id)).await? {
            Response::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// What the node at `address` knows of its group.
    pub async fn status_of(&self, address: &str) -> Result<ClusterStatus, MetaError> {
        let frame = Request::Status.frame()?;
        match self.once(address, &frame).await {
            Ok(Ok(Response::Status(status))) => Ok(status),
            Ok(Ok(other)) => Err(unexpected(other)),
            Ok(Err(e)) => Err(e),
            Err(Attempt::NotSent(why) | Attempt::Unanswered(why)) => {
                Err(MetaError::Unavailable(format!("{address}: {why}")))
            }
        }
    }

    /// Every address this client was given.
    pub fn addresses(&self) -> &[String] {
        &self.addresses
    }
}

fn unexpected(r: Response) -> MetaError {
    MetaError::Storage(format!("unexpected metastore response {r:?}"))
}

#[async_trait]
impl Metastore for RemoteMetastore {
    async fn create_topic(&self, topic: NewTopic) -> Result<TopicInfo, MetaError> {
        match self.call(Request::CreateTopic(topic)).await? {
            Response::Topic(t) => Ok(t),
            other => Err(unexpected(other)),
        }
    }
    async fn delete_topic(&self, name: &str) -> Result<(), MetaError> {
        match self.call(Request::DeleteTopic(name.to_string())).await? {
            Response::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
    }
    async fn topics(&self) -> Result<Vec<TopicInfo>, MetaError> {
        match self.call(Request::Topics).await? {
            Response::Topics(t) => Ok(t),
            other => Err(unexpected(other)),
        }
    }
    async fn topic(&self, name: &str) -> Result<Option<TopicInfo>, MetaError> {
        match self.call(Request::Topic(name.to_string())).await? {
            Response::MaybeTopic(t) => Ok(t),
            other => Err(unexpected(other)),
        }
    }
    async fn topic_by_id(&self, id: TopicId) -> Result<Option<TopicInfo>, MetaError> {
        match self.call(Request::TopicById(id)).await? {
            Response::MaybeTopic(t) => Ok(t),
            other => Err(unexpected(other)),
        }
    }
    async fn commit(&self, commit: Commit) -> Result<Vec<Result<i64, MetaError>>, MetaError> {
        match self.call(Request::Commit(commit)).await? {
            Response::Committed(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }
    async fn offsets(&self, topic: TopicId, partition: i32) -> Result<PartitionOffsets, MetaError> {
        match self.call(Request::Offsets(topic, partition)).await? {
            Response::Offsets(o) => Ok(o),
            other => Err(unexpected(other)),
        }
    }
    async fn high_watermarks(
        &self,
        partitions: Vec<(TopicId, i32)>,
    ) -> Result<Vec<Option<i64>>, MetaError> {
        match self.call(Request::HighWatermarks(partitions)).await? {
            Response::HighWatermarks(hw) => Ok(hw),
            other => Err(unexpected(other)),
        }
    }
    async fn read_plan(
        &self,
        topic: TopicId,
        partition: i32,
        from: i64,
        max_bytes: u64,
    ) -> Result<ReadPlan, MetaError> {
        match self
            .call(Request::ReadPlan(topic, partition, from, max_bytes))
            .await?
        {
            Response::ReadPlan(p) => Ok(p),
            other => Err(unexpected(other)),
        }
    }
    async fn list_offsets(
        &self,
        topic: TopicId,
        partition: i32,
        query: OffsetQuery,
    ) -> Result<OffsetAnswer, MetaError> {
        match self
            .call(Request::ListOffsets(topic, partition, query))
            .await?
        {
            Response::OffsetAnswer(a) => Ok(a),
            other => Err(unexpected(other)),
        }
    }
    async fn init_producer(
        &self,
        existing: Option<ProducerIdentity>,
    ) -> Result<ProducerIdentity, MetaError> {
        match self.call(Request::InitProducer(existing)).await? {
            Response::Producer(p) => Ok(p),
            other => Err(unexpected(other)),
        }
    }
    async fn group_command(&self, command: GroupCommand) -> Result<GroupReply, MetaError> {
        match self.call(Request::GroupCommand(command)).await? {
            Response::GroupReply(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }
    async fn group(&self, name: &str) -> Result<Option<Group>, MetaError> {
        match self.call(Request::Group(name.to_string())).await? {
            Response::MaybeGroup(g) => Ok(g),
            other => Err(unexpected(other)),
        }
    }
    async fn replace_extents(&self, replace: ReplaceExtents) -> Result<(), MetaError> {
        match self.call(Request::ReplaceExtents(replace)).await? {
            Response::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
    }
    async fn garbage(&self) -> Result<Vec<String>, MetaError> {
        match self.call(Request::Garbage).await? {
            Response::Keys(k) => Ok(k),
            other => Err(unexpected(other)),
        }
    }
    async fn record_orphans(&self, keys: Vec<String>) -> Result<(), MetaError> {
        match self.call(Request::RecordOrphans(keys)).await? {
            Response::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
    }
    async fn acquire_lease(
        &self,
        job: String,
        holder: String,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<bool, MetaError> {
        match self
            .call(Request::AcquireLease(job, holder, now_ms, ttl_ms))
            .await?
        {
            Response::Leased(granted) => Ok(granted),
            other => Err(unexpected(other)),
        }
    }
    async fn clock(&self) -> Result<i64, MetaError> {
        match self.call(Request::Clock).await? {
            Response::Clock(ms) => Ok(ms),
            other => Err(unexpected(other)),
        }
    }
    async fn release_lease(&self, job: String, holder: String) -> Result<(), MetaError> {
        match self.call(Request::ReleaseLease(job, holder)).await? {
            Response::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
    }
    async fn forget_garbage(&self, keys: Vec<String>) -> Result<(), MetaError> {
        match self.call(Request::ForgetGarbage(keys)).await? {
            Response::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
    }
    async fn alter_topic_configs(
        &self,
        name: &str,
        set: std::collections::BTreeMap<String, String>,
        delete: Vec<String>,
    ) -> Result<(), MetaError> {
        match self
            .call(Request::AlterTopicConfigs(name.to_string(), set, delete))
            .await?
        {
            Response::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
    }
    async fn create_partitions(&self, name: &str, count: i32) -> Result<(), MetaError> {
        match self
            .call(Request::CreatePartitions(name.to_string(), count))
            .await?
        {
            Response::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
    }
    async fn groups(&self) -> Result<Vec<(String, Group)>, MetaError> {
        match self.call(Request::Groups).await? {
            Response::Groups(g) => Ok(g),
            other => Err(unexpected(other)),
        }
    }
    async fn unknown_objects(&self, keys: Vec<String>) -> Result<Vec<String>, MetaError> {
        match self.call(Request::UnknownObjects(keys)).await? {
            Response::Keys(k) => Ok(k),
            other => Err(unexpected(other)),
        }
    }
    async fn trim(&self, topic: TopicId, partition: i32, offset: i64) -> Result<i64, MetaError> {
        match self.call(Request::Trim(topic, partition, offset)).await? {
            Response::Offset(o) => Ok(o),
            other => Err(unexpected(other)),
        }
    }
    async fn register_agent(
        &self,
        host: String,
        port: i32,
        zone: Option<String>,
        now_ms: i64,
    ) -> Result<i32, MetaError> {
        match self
            .call(Request::RegisterAgent(host, port, zone, now_ms))
            .await?
        {
            Response::NodeId(id) => Ok(id),
            other => Err(unexpected(other)),
        }
    }
    async fn agent_heartbeat(&self, node_id: i32, now_ms: i64) -> Result<bool, MetaError> {
        match self.call(Request::AgentHeartbeat(node_id, now_ms)).await? {
            Response::Alive(alive) => Ok(alive),
            other => Err(unexpected(other)),
        }
    }
    async fn agents(&self) -> Result<Vec<AgentInfo>, MetaError> {
        match self.call(Request::Agents).await? {
            Response::Agents(a) => Ok(a),
            other => Err(unexpected(other)),
        }
    }
}
