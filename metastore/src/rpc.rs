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
//! Retries: a request that never left the client, or that a node refused
//! without applying it, is retried freely. One that was sent but got no
//! answer may have been applied, so only operations that are safe to repeat
//! ([`Op::retry_is_safe`]) are resent; anything else then fails with
//! [`MetaError::Unavailable`] saying it may have been applied.
//!
//! Frames: a client's request is an [`Envelope`] after a tag and the
//! [`WIRE_VERSION`]; its answer is the operation's own
//! `Result<Output, MetaError>`, read as the type the client asked for.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::api::{Answer, Op, Request, Transport};
use crate::format::FORMAT_VERSION;
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

/// Requests that began with their variant index before frames were tagged
/// (0..=31, one byte each) are of an older client: the connection is closed,
/// so they are refused, never misread. A peer's frame begins with `PEER`
/// (the old `Request::PeerOfFormat`, variant 32), as it always has: nodes of
/// one log format talk across binary versions.
const PEER: u8 = 32;
/// A client's frame: `CALL`, [`WIRE_VERSION`], then an [`Envelope`].
const CALL: u8 = 33;
/// The encoding of [`Envelope`], every operation, its answer and
/// [`MetaError`] (see the wire golden test). Bump it when any changes: a node
/// closes the connection of a client of another version. Appending an
/// operation (or a refusal) is the exception, as for log entries: old bytes
/// decode as before, and an old node fails to decode the new operation (the
/// client's call fails, as the metastore is unavailable to it); upgrade the
/// metastore nodes before the agents.
/// 7: an ingest commit answers each batch's partition's log start too.
/// 8: a consumer heartbeat names whose DESCRIBE filters regexes, a classic
///    join carries the agent's group settings, a transactional
///    InitProducerId the abort check interval (requests changed in place).
pub const WIRE_VERSION: u8 = 8;

/// What a client sends: an operation on the metastore's state, or a request
/// about the serving node itself.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Envelope {
    /// Boxed: an operation is large (a JoinGroup's protocols) beside a node
    /// request; postcard encodes a box as what it holds.
    Op(Box<Request>),
    Node(NodeRequest),
}

/// Requests about the serving node and its group's membership.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum NodeRequest {
    /// What the receiving node knows of its group (answered by any node).
    Status,
    /// Adds node `id` at `address` as a learner, then as a voter.
    AddNode {
        id: NodeId,
        address: String,
    },
    RemoveNode {
        id: NodeId,
    },
}

impl Envelope {
    /// Its name, for metrics.
    fn name(&self) -> &'static str {
        match self {
            Envelope::Op(request) => request.name(),
            Envelope::Node(_) => "Node",
        }
    }

    /// The frame that carries it.
    fn frame(&self) -> Result<Bytes, MetaError> {
        let frame = postcard::to_extend(self, vec![CALL, WIRE_VERSION])
            .map_err(|e| MetaError::Storage(format!("encoding a request: {e}")))?;
        Ok(Bytes::from(frame))
    }
}

/// A peer's frame: its log format and the Raft message.
pub(crate) fn peer_frame(request: &PeerRequest) -> Result<Bytes, String> {
    postcard::to_extend(&(FORMAT_VERSION, request), vec![PEER])
        .map(Bytes::from)
        .map_err(|e| e.to_string())
}

/// The answer to a peer, in the layout nodes have always read:
/// `Result<Response, MetaError>` of before, whose `Response::Peer` was
/// variant 17 and `MetaError::Storage` variant 10.
fn peer_reply(answer: Result<PeerResponse, String>) -> Result<Vec<u8>, postcard::Error> {
    match answer {
        Ok(response) => postcard::to_extend(&response, vec![0, 17]),
        Err(why) => postcard::to_extend(&why, vec![1, 10]),
    }
}

/// Reads a peer's answer (see [`peer_reply`]).
pub(crate) fn read_peer_reply(bytes: &[u8]) -> Result<PeerResponse, String> {
    match bytes {
        [0, 17, rest @ ..] => {
            postcard::from_bytes(rest).map_err(|e| format!("undecodable answer: {e}"))
        }
        [1, 10, rest @ ..] => Err(postcard::from_bytes::<String>(rest)
            .unwrap_or_else(|e| format!("an undecodable refusal: {e}"))),
        _ => Err("an answer of an unknown layout".into()),
    }
}

/// The answer to one frame, or `None` to close the connection.
async fn answer(meta: &RaftMetastore, frame: &[u8]) -> Option<Result<Vec<u8>, postcard::Error>> {
    match frame {
        [PEER, rest @ ..] => {
            let (format, request) = postcard::from_bytes::<(u8, PeerRequest)>(rest).ok()?;
            Some(peer_reply(if format == FORMAT_VERSION {
                Ok(network::handle(meta.raft(), meta.incoming(), request).await)
            } else {
                Err(format!(
                    "a peer of metastore format {format}; this node is of format {FORMAT_VERSION}"
                ))
            }))
        }
        [CALL, WIRE_VERSION, rest @ ..] => match postcard::from_bytes::<Envelope>(rest).ok()? {
            Envelope::Op(request) => Some(request.answer_on(meta).await),
            Envelope::Node(request) => Some(match request {
                NodeRequest::Status => postcard::to_stdvec(&Ok::<_, MetaError>(meta.status())),
                NodeRequest::AddNode { id, address } => {
                    postcard::to_stdvec(&meta.add_node(id, address).await)
                }
                NodeRequest::RemoveNode { id } => postcard::to_stdvec(&meta.remove_node(id).await),
            }),
        },
        _ => None,
    }
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
            if let Some(secret) = meta.secret()
                && let Err(why) = crate::peer_auth::server(&mut framed, secret).await
            {
                tracing::warn!(%peer, why, "refused a metastore connection");
                return;
            }
            while let Some(frame) = framed.next().await {
                let frame = match frame {
                    Ok(frame) => frame,
                    Err(e) => {
                        tracing::warn!(%peer, error = %e, "bad metastore frame; closing");
                        break;
                    }
                };
                let bytes = match answer(&meta, &frame).await {
                    Some(Ok(bytes)) => bytes,
                    Some(Err(e)) => {
                        tracing::error!(%peer, error = %e, "could not encode a metastore reply");
                        break;
                    }
                    None => {
                        tracing::warn!(
                            %peer,
                            "a metastore request of another version, or undecodable; closing"
                        );
                        break;
                    }
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
    /// Called once per request sent, with its operation's name (for the
    /// agent's metrics).
    on_request: Option<Arc<dyn Fn(&'static str) + Send + Sync>>,
    /// Proved to every node connected to.
    secret: Option<crate::peer_auth::ClusterSecret>,
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
            secret: None,
        }
    }

    /// Proves `secret` to every node (see [`crate::peer_auth`]).
    pub fn with_secret(mut self, secret: Option<crate::peer_auth::ClusterSecret>) -> Self {
        self.secret = secret;
        self
    }

    /// Calls `hook` once for every request sent to a node (retries
    /// included), with the request's name (`"Node"` for a node request).
    pub fn with_request_hook(mut self, hook: Arc<dyn Fn(&'static str) + Send + Sync>) -> Self {
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
    async fn once<T: Answer>(
        &self,
        address: &str,
        frame: &Bytes,
        name: &'static str,
    ) -> Result<Result<T, MetaError>, Attempt> {
        match tokio::time::timeout(self.attempt_timeout, self.attempt(address, frame, name)).await {
            Ok(result) => result,
            // The connection is dropped with the future: a late answer can
            // never be read as the next request's.
            Err(_) => Err(Attempt::Unanswered(format!(
                "{address} did not answer within {:?}",
                self.attempt_timeout
            ))),
        }
    }

    async fn attempt<T: Answer>(
        &self,
        address: &str,
        frame: &Bytes,
        name: &'static str,
    ) -> Result<Result<T, MetaError>, Attempt> {
        let pooled = {
            let mut idle = self.idle.lock().expect("pool lock");
            idle.iter()
                .rposition(|(a, _)| a == address)
                .map(|at| idle.swap_remove(at).1)
        };
        let mut conn = match pooled {
            Some(conn) => conn,
            None => {
                let mut conn =
                    Framed::new(connect(address).await.map_err(Attempt::NotSent)?, codec());
                if let Some(secret) = &self.secret {
                    crate::peer_auth::client(&mut conn, secret)
                        .await
                        .map_err(|why| Attempt::NotSent(format!("{address}: {why}")))?;
                }
                conn
            }
        };
        if let Some(hook) = &self.on_request {
            hook(name);
        }
        if let Err(e) = conn.send(frame.clone()).await {
            // A pooled connection the server closed fails here; nothing was applied.
            return Err(Attempt::NotSent(e.to_string()));
        }
        let reply = match conn.next().await {
            Some(Ok(bytes)) => postcard::from_bytes(&bytes)
                .map_err(|e| Attempt::Unanswered(format!("an undecodable answer: {e}")))?,
            Some(Err(e)) => return Err(Attempt::Unanswered(e.to_string())),
            None => return Err(Attempt::Unanswered("connection closed".into())),
        };
        self.idle
            .lock()
            .expect("pool lock")
            .push((address.to_string(), conn));
        Ok(reply)
    }

    /// Sends `envelope` to the leader, following hints and retrying what
    /// may be retried (see [`MetaError::worth_retrying`]) for `retry_for`.
    async fn send<T: Answer>(
        &self,
        envelope: Envelope,
        retry_is_safe: bool,
    ) -> Result<T, MetaError> {
        let frame = envelope.frame()?;
        let name = envelope.name();
        let deadline = tokio::time::Instant::now() + self.retry_for;
        let mut backoff = Duration::from_millis(20);
        let mut redirects = 0;
        // Whether an attempt so far may have been applied.
        let mut maybe_applied = false;
        loop {
            let address = self.leader();
            let why = match self.once::<T>(&address, &frame, name).await {
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
                Ok(Err(e)) if e.worth_retrying(retry_is_safe) => {
                    maybe_applied |= !e.certainly_not_applied();
                    format!("{address}: {e}")
                }
                Ok(Err(MetaError::Refused(refusal))) => {
                    return Err(refusal.after_retries(maybe_applied));
                }
                Ok(answer) => return answer,
                Err(Attempt::NotSent(why)) => why,
                Err(Attempt::Unanswered(why)) if retry_is_safe => {
                    maybe_applied = true;
                    why
                }
                Err(Attempt::Unanswered(why)) => {
                    self.move_on(&address, None);
                    return Err(MetaError::maybe_applied(format!("{address}: {why}")));
                }
            };
            self.move_on(&address, None);
            if tokio::time::Instant::now() >= deadline {
                return Err(MetaError::Unavailable { why, maybe_applied });
            }
            tracing::debug!(%address, %why, "metastore call failed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }

    /// Adds node `id` at `address` to the group (as a learner until it has
    /// caught up, then as a voter).
    pub async fn add_node(&self, id: NodeId, address: String) -> Result<(), MetaError> {
        self.send(Envelope::Node(NodeRequest::AddNode { id, address }), false)
            .await
    }

    /// Removes node `id` from the group.
    pub async fn remove_node(&self, id: NodeId) -> Result<(), MetaError> {
        self.send(Envelope::Node(NodeRequest::RemoveNode { id }), false)
            .await
    }

    /// What the node at `address` knows of its group.
    pub async fn status_of(&self, address: &str) -> Result<ClusterStatus, MetaError> {
        let frame = Envelope::Node(NodeRequest::Status).frame()?;
        match self.once(address, &frame, "Node").await {
            Ok(answer) => answer,
            Err(Attempt::NotSent(why) | Attempt::Unanswered(why)) => {
                Err(MetaError::unavailable(format!("{address}: {why}")))
            }
        }
    }

    /// Every address this client was given.
    pub fn addresses(&self) -> &[String] {
        &self.addresses
    }
}

impl Transport for RemoteMetastore {
    async fn call<O: Op>(&self, op: O) -> Result<O::Output, MetaError> {
        let retry_is_safe = op.retry_is_safe();
        self.send(Envelope::Op(Box::new(op.into())), retry_is_safe)
            .await
    }
}
