//! The node's server: `floe metastore` serves a node (a [`RaftMetastore`],
//! or a [`LogNode`](crate::LogNode) on a shared log) to
//! clients (the contract's `RemoteMetastore`) and to its peers with
//! [`serve`], on one port. Frames are the contract's (`crate::contract::wire`);
//! Raft messages between nodes ([`PeerRequest`]) come under their own tag,
//! with the sender's log format.

use std::sync::Arc;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio_util::codec::Framed;

use crate::api::Transport;
use crate::contract::wire::{CALL, Envelope, NodeRequest, PEER, SUBSCRIBE, WIRE_VERSION};
use crate::format::FORMAT_VERSION;
use crate::raft::RaftMetastore;
use crate::raft::network::{self, PeerRequest, PeerResponse};
use crate::types::*;

#[cfg(test)]
pub(crate) use crate::contract::wire::MAX_FRAME_FOR_TESTS;
pub(crate) use crate::contract::wire::{codec, connect};

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

/// A node [`serve`] can serve: it answers the contract's operations as
/// any [`Transport`] does, and the requests about the node itself as its
/// kind of node can.
pub trait Served: Transport {
    /// What connections to this node must prove, if anything.
    fn secret(&self) -> Option<&crate::peer_auth::ClusterSecret>;
    /// The answer to a request about the node (status, membership, backup).
    fn node_request(
        &self,
        request: NodeRequest,
    ) -> impl Future<Output = Result<Vec<u8>, postcard::Error>> + Send;
    /// A Raft message from a peer; `None` for a node that has no peers.
    fn peer_request(
        &self,
        request: PeerRequest,
    ) -> impl Future<Output = Option<PeerResponse>> + Send;
}

impl Served for RaftMetastore {
    fn secret(&self) -> Option<&crate::peer_auth::ClusterSecret> {
        RaftMetastore::secret(self)
    }

    async fn node_request(&self, request: NodeRequest) -> Result<Vec<u8>, postcard::Error> {
        match request {
            NodeRequest::Status => postcard::to_stdvec(&Ok::<_, MetaError>(self.status())),
            NodeRequest::AddNode { id, address } => {
                postcard::to_stdvec(&self.add_node(id, address).await)
            }
            NodeRequest::RemoveNode { id } => postcard::to_stdvec(&self.remove_node(id).await),
            NodeRequest::Backup { hold_ms } => postcard::to_stdvec(&self.backup(hold_ms).await),
        }
    }

    async fn peer_request(&self, request: PeerRequest) -> Option<PeerResponse> {
        Some(network::handle(self.raft(), self.incoming(), request).await)
    }
}

impl Served for crate::LogNode {
    fn secret(&self) -> Option<&crate::peer_auth::ClusterSecret> {
        crate::LogNode::secret(self)
    }

    async fn node_request(&self, request: NodeRequest) -> Result<Vec<u8>, postcard::Error> {
        let no_membership = || {
            MetaError::from(Refusal::InvalidMembership(format!(
                "a metastore on {} has no membership: a node joins by starting \
                 and leaves by stopping",
                self.backend()
            )))
        };
        match request {
            NodeRequest::Status => postcard::to_stdvec(&Ok::<_, MetaError>(self.status().await)),
            NodeRequest::AddNode { .. } | NodeRequest::RemoveNode { .. } => {
                postcard::to_stdvec(&Err::<(), _>(no_membership()))
            }
            NodeRequest::Backup { hold_ms } => postcard::to_stdvec(&self.backup(hold_ms).await),
        }
    }

    async fn peer_request(&self, _: PeerRequest) -> Option<PeerResponse> {
        None
    }
}

/// The answer to one frame, or `None` to close the connection.
async fn answer<N: Served>(meta: &N, frame: &[u8]) -> Option<Result<Vec<u8>, postcard::Error>> {
    match frame {
        [PEER, rest @ ..] => {
            let (format, request) = postcard::from_bytes::<(u8, PeerRequest)>(rest).ok()?;
            Some(peer_reply(if format == FORMAT_VERSION {
                meta.peer_request(request)
                    .await
                    .ok_or_else(|| "this metastore node has no Raft peers".to_string())
            } else {
                Err(format!(
                    "a peer of metastore format {format}; this node is of format {FORMAT_VERSION}"
                ))
            }))
        }
        [CALL, WIRE_VERSION, rest @ ..] => match postcard::from_bytes::<Envelope>(rest).ok()? {
            Envelope::Op(request) => Some(request.answer_on(meta).await),
            Envelope::Node(request) => Some(meta.node_request(request).await),
        },
        _ => None,
    }
}

/// Makes a connection a subscription on `meta` (see [`crate::contract::push`]),
/// or says why not, and carries its messages until either side ends it.
async fn serve_subscription<N: Served>(
    meta: &N,
    mut framed: Framed<tokio::net::TcpStream, tokio_util::codec::LengthDelimitedCodec>,
) {
    let opened = Transport::subscribe(meta).await;
    let answer = opened.as_ref().map(|_| ()).map_err(Clone::clone);
    let Ok(bytes) = postcard::to_stdvec(&answer) else {
        return;
    };
    if framed.send(Bytes::from(bytes)).await.is_err() {
        return;
    }
    if let Ok(subscription) = opened {
        let (from_leader, to_leader) = (subscription.from_leader, subscription.to_leader);
        crate::contract::push::bridge(framed, from_leader, to_leader, None).await;
    }
}

/// Serves the node `meta` to agents and its peers on `listener` until the
/// listener fails. Dropping the future closes every connection it accepted.
pub async fn serve<N: Served>(listener: TcpListener, meta: Arc<N>) -> std::io::Result<()> {
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
                if frame.as_ref() == [SUBSCRIBE, WIRE_VERSION] {
                    serve_subscription(&*meta, framed).await;
                    return;
                }
                let bytes = match answer(&*meta, &frame).await {
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
