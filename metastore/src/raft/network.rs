//! Raft messages between metastore nodes. They travel on the same port and
//! framing as client requests ([`crate::rpc`]), as [`PeerRequest`]s.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use openraft::error::{
    Fatal, InstallSnapshotError, NetworkError, RPCError, RaftError, ReplicationClosed,
    StreamingError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    SnapshotResponse, VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

use super::{NodeAddress, NodeId, Raft, SnapshotMeta, TypeConfig, Vote};
use crate::rpc::{self, Request, Response};

/// A Raft message from one node to another.
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerRequest {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    /// A whole snapshot, in one message.
    Snapshot {
        vote: Vote,
        meta: SnapshotMeta,
        data: Vec<u8>,
    },
}

/// The answer to a [`PeerRequest`]; `Err` when the receiving node's Raft has stopped.
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerResponse {
    Append(Result<AppendEntriesResponse<NodeId>, String>),
    Vote(Result<VoteResponse<NodeId>, String>),
    Snapshot(Result<SnapshotResponse<NodeId>, String>),
}

/// Hands a peer's message to this node's Raft.
pub async fn handle(raft: &Raft, request: PeerRequest) -> PeerResponse {
    match request {
        PeerRequest::Append(rpc) => {
            PeerResponse::Append(raft.append_entries(rpc).await.map_err(|e| e.to_string()))
        }
        PeerRequest::Vote(rpc) => {
            PeerResponse::Vote(raft.vote(rpc).await.map_err(|e| e.to_string()))
        }
        PeerRequest::Snapshot { vote, meta, data } => {
            let snapshot = openraft::Snapshot {
                meta,
                snapshot: Box::new(data),
            };
            PeerResponse::Snapshot(
                raft.install_full_snapshot(vote, snapshot)
                    .await
                    .map_err(|e| e.to_string()),
            )
        }
    }
}

/// Makes a [`Peer`] for each node this one replicates to or asks for votes.
pub struct Network;

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &NodeAddress) -> Peer {
        Peer {
            target,
            address: node.address.clone(),
            connection: None,
        }
    }
}

/// One connection to one other node, reopened after any failure.
pub struct Peer {
    target: NodeId,
    address: String,
    connection: Option<Framed<TcpStream, tokio_util::codec::LengthDelimitedCodec>>,
}

/// Why a message to a peer got no answer.
#[derive(Debug, thiserror::Error)]
#[error("metastore node {target} at {address}: {why}")]
struct PeerError {
    target: NodeId,
    address: String,
    why: String,
}

impl Peer {
    fn error(&self, why: impl ToString) -> PeerError {
        PeerError {
            target: self.target,
            address: self.address.clone(),
            why: why.to_string(),
        }
    }

    /// Sends `request` and waits for its answer for at most `ttl`.
    async fn send(
        &mut self,
        request: PeerRequest,
        ttl: Duration,
    ) -> Result<PeerResponse, PeerError> {
        let frame = postcard::to_stdvec(&Request::Peer(request)).map_err(|e| self.error(e))?;
        match tokio::time::timeout(ttl, self.exchange(frame.into())).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(why)) => {
                self.connection = None;
                Err(self.error(why))
            }
            Err(_) => {
                // An answer may still arrive on this connection; never read it as the next one's.
                self.connection = None;
                Err(self.error(format!("no answer within {ttl:?}")))
            }
        }
    }

    async fn exchange(&mut self, frame: bytes::Bytes) -> Result<PeerResponse, String> {
        if self.connection.is_none() {
            let stream = rpc::connect(&self.address).await?;
            self.connection = Some(Framed::new(stream, rpc::codec()));
        }
        let connection = self.connection.as_mut().expect("connected above");
        connection.send(frame).await.map_err(|e| e.to_string())?;
        let bytes = match connection.next().await {
            Some(Ok(bytes)) => bytes,
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("connection closed".into()),
        };
        match postcard::from_bytes::<Result<Response, crate::MetaError>>(&bytes) {
            Ok(Ok(Response::Peer(response))) => Ok(response),
            Ok(other) => Err(format!("unexpected answer {other:?}")),
            Err(e) => Err(format!("undecodable answer: {e}")),
        }
    }
}

fn unreachable<E: std::error::Error>(e: PeerError) -> RPCError<NodeId, NodeAddress, E> {
    RPCError::Unreachable(Unreachable::new(&e))
}

fn stopped<E: std::error::Error>(peer: &Peer, why: String) -> RPCError<NodeId, NodeAddress, E> {
    RPCError::Network(NetworkError::new(
        &peer.error(format!("its Raft stopped: {why}")),
    ))
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeAddress, RaftError<NodeId>>>
    {
        match self.send(PeerRequest::Append(rpc), option.hard_ttl()).await {
            Ok(PeerResponse::Append(Ok(response))) => Ok(response),
            Ok(PeerResponse::Append(Err(why))) => Err(stopped(self, why)),
            Ok(other) => Err(stopped(self, format!("unexpected answer {other:?}"))),
            Err(e) => Err(unreachable(e)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeAddress, RaftError<NodeId>>> {
        match self.send(PeerRequest::Vote(rpc), option.hard_ttl()).await {
            Ok(PeerResponse::Vote(Ok(response))) => Ok(response),
            Ok(PeerResponse::Vote(Err(why))) => Err(stopped(self, why)),
            Ok(other) => Err(stopped(self, format!("unexpected answer {other:?}"))),
            Err(e) => Err(unreachable(e)),
        }
    }

    // Snapshots go whole through `full_snapshot`; openraft calls this only for
    // chunked transfer, which this network does not use.
    #[allow(deprecated)]
    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, NodeAddress, RaftError<NodeId, InstallSnapshotError>>,
    > {
        Err(stopped(self, "chunked snapshots are not used".into()))
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: openraft::Snapshot<TypeConfig>,
        cancel: impl std::future::Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<NodeId>, StreamingError<TypeConfig, Fatal<NodeId>>> {
        let request = PeerRequest::Snapshot {
            vote,
            meta: snapshot.meta,
            data: *snapshot.snapshot,
        };
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            sent = self.send(request, option.hard_ttl()) => match sent {
                Ok(PeerResponse::Snapshot(Ok(response))) => Ok(response),
                Ok(PeerResponse::Snapshot(Err(why))) => Err(StreamingError::Network(NetworkError::new(&self.error(why)))),
                Ok(other) => Err(StreamingError::Network(NetworkError::new(&self.error(format!("unexpected answer {other:?}"))))),
                Err(e) => Err(StreamingError::Unreachable(Unreachable::new(&e))),
            }
        }
    }
}
