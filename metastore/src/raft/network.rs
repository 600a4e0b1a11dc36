//! Raft messages between metastore nodes. They travel on the same port and
//! framing as client requests ([`crate::rpc`]), as [`PeerRequest`]s.

use std::sync::Arc;
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
use crate::rpc;

/// Snapshots travel in pieces of this size, so a state of any size fits the
/// frame limit and no message holds the whole state twice.
#[cfg(not(test))]
pub const SNAPSHOT_CHUNK_BYTES: usize = 4 * 1024 * 1024;
#[cfg(test)]
pub const SNAPSHOT_CHUNK_BYTES: usize = 64 * 1024;
/// The largest snapshot a node accepts from a leader.
const MAX_SNAPSHOT_BYTES: usize = 16 * 1024 * 1024 * 1024;

/// A Raft message from one node to another.
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerRequest {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    /// One piece of snapshot `snapshot_id`, starting at byte `offset`;
    /// pieces come in order, and a piece at 0 starts the snapshot afresh.
    SnapshotChunk {
        snapshot_id: String,
        offset: u64,
        bytes: Vec<u8>,
    },
    /// Install the snapshot whose pieces came before.
    Snapshot {
        vote: Vote,
        meta: SnapshotMeta,
    },
}

/// The answer to a [`PeerRequest`]; `Err` when the receiving node's Raft has stopped.
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerResponse {
    Append(Result<AppendEntriesResponse<NodeId>, String>),
    Vote(Result<VoteResponse<NodeId>, String>),
    SnapshotChunk(Result<(), String>),
    Snapshot(Result<SnapshotResponse<NodeId>, String>),
}

/// The snapshot a node is receiving, piece by piece.
#[derive(Default)]
pub struct Incoming {
    snapshot: std::sync::Mutex<Option<(String, Vec<u8>)>>,
}

impl Incoming {
    fn chunk(&self, snapshot_id: String, offset: u64, bytes: Vec<u8>) -> Result<(), String> {
        let mut incoming = self.snapshot.lock().expect("snapshot lock");
        if offset == 0 {
            *incoming = Some((snapshot_id.clone(), Vec::new()));
        }
        let Some((id, data)) = incoming.as_mut() else {
            return Err(format!(
                "piece at {offset} of snapshot {snapshot_id} without its start"
            ));
        };
        if *id != snapshot_id || data.len() as u64 != offset {
            let had = (id.clone(), data.len());
            *incoming = None;
            return Err(format!(
                "piece at {offset} of snapshot {snapshot_id}, expected {} of {}",
                had.1, had.0
            ));
        }
        if data.len() + bytes.len() > MAX_SNAPSHOT_BYTES {
            *incoming = None;
            return Err(format!(
                "snapshot {snapshot_id} exceeds {MAX_SNAPSHOT_BYTES} bytes"
            ));
        }
        data.extend_from_slice(&bytes);
        Ok(())
    }

    fn take(&self, snapshot_id: &str) -> Option<Vec<u8>> {
        let mut incoming = self.snapshot.lock().expect("snapshot lock");
        match incoming.take() {
            Some((id, data)) if id == snapshot_id => Some(data),
            other => {
                *incoming = other;
                None
            }
        }
    }
}

/// Hands a peer's message to this node's Raft (`incoming` collects
/// snapshot pieces until the whole snapshot is there).
pub async fn handle(raft: &Raft, incoming: &Incoming, request: PeerRequest) -> PeerResponse {
    match request {
        PeerRequest::Append(rpc) => {
            PeerResponse::Append(raft.append_entries(rpc).await.map_err(|e| e.to_string()))
        }
        PeerRequest::Vote(rpc) => {
            PeerResponse::Vote(raft.vote(rpc).await.map_err(|e| e.to_string()))
        }
        PeerRequest::SnapshotChunk {
            snapshot_id,
            offset,
            bytes,
        } => PeerResponse::SnapshotChunk(incoming.chunk(snapshot_id, offset, bytes)),
        PeerRequest::Snapshot { vote, meta } => {
            let Some(data) = incoming.take(&meta.snapshot_id) else {
                return PeerResponse::Snapshot(Err(format!(
                    "no pieces of snapshot {} arrived",
                    meta.snapshot_id
                )));
            };
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

/// How Raft messages travel other than over TCP: the simulation's network,
/// which can delay, drop and partition them.
#[async_trait::async_trait]
pub trait PeerTransport: std::fmt::Debug + Send + Sync + 'static {
    /// Delivers `request` from node `from` to node `target` and returns its
    /// answer, or why there is none.
    async fn send(
        &self,
        from: NodeId,
        target: NodeId,
        request: PeerRequest,
    ) -> Result<PeerResponse, String>;
}

/// Makes a [`Peer`] for each node this one replicates to or asks for votes.
pub struct Network {
    from: NodeId,
    transport: Option<Arc<dyn PeerTransport>>,
    /// Proved to every node connected to (see [`crate::peer_auth`]).
    secret: Option<crate::peer_auth::ClusterSecret>,
}

impl Network {
    /// Node `from`'s network: TCP, unless `transport` is given.
    pub fn new(
        from: NodeId,
        transport: Option<Arc<dyn PeerTransport>>,
        secret: Option<crate::peer_auth::ClusterSecret>,
    ) -> Network {
        Network {
            from,
            transport,
            secret,
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &NodeAddress) -> Peer {
        Peer {
            from: self.from,
            target,
            address: node.address.clone(),
            connection: None,
            transport: self.transport.clone(),
            secret: self.secret.clone(),
        }
    }
}

/// One connection to one other node, reopened after any failure.
pub struct Peer {
    from: NodeId,
    target: NodeId,
    address: String,
    connection: Option<Framed<TcpStream, tokio_util::codec::LengthDelimitedCodec>>,
    transport: Option<Arc<dyn PeerTransport>>,
    secret: Option<crate::peer_auth::ClusterSecret>,
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
        if let Some(transport) = self.transport.clone() {
            return match tokio::time::timeout(ttl, transport.send(self.from, self.target, request))
                .await
            {
                Ok(Ok(response)) => Ok(response),
                Ok(Err(why)) => Err(self.error(why)),
                Err(_) => Err(self.error(format!("no answer within {ttl:?}"))),
            };
        }
        let frame = rpc::peer_frame(&request).map_err(|e| self.error(e))?;
        match tokio::time::timeout(ttl, self.exchange(frame)).await {
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
            let mut framed = Framed::new(stream, rpc::codec());
            if let Some(secret) = &self.secret {
                crate::peer_auth::client(&mut framed, secret).await?;
            }
            self.connection = Some(framed);
        }
        let connection = self.connection.as_mut().expect("connected above");
        connection.send(frame).await.map_err(|e| e.to_string())?;
        let bytes = match connection.next().await {
            Some(Ok(bytes)) => bytes,
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("connection closed".into()),
        };
        rpc::read_peer_reply(&bytes)
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
        // Biased: a closed replication wins, and no random draw decides
        // (the simulation replays seeds).
        tokio::select! {
            biased;
            closed = cancel => Err(StreamingError::Closed(closed)),
            sent = self.send_snapshot(vote, snapshot, option.hard_ttl()) => sent,
        }
    }
}

impl Peer {
    /// Sends the snapshot in [`SNAPSHOT_CHUNK_BYTES`] pieces, each with its
    /// own deadline, then asks the peer to install it.
    async fn send_snapshot(
        &mut self,
        vote: Vote,
        snapshot: openraft::Snapshot<TypeConfig>,
        ttl: Duration,
    ) -> Result<SnapshotResponse<NodeId>, StreamingError<TypeConfig, Fatal<NodeId>>> {
        let network =
            |peer: &Peer, why: String| StreamingError::Network(NetworkError::new(&peer.error(why)));
        let data = snapshot.snapshot;
        let id = snapshot.meta.snapshot_id.clone();
        // An empty snapshot still sends one (empty) piece to start it.
        let pieces = data.chunks(SNAPSHOT_CHUNK_BYTES).map(<[u8]>::to_vec);
        let pieces: Box<dyn Iterator<Item = Vec<u8>> + Send> = if data.is_empty() {
            Box::new(std::iter::once(Vec::new()))
        } else {
            Box::new(pieces)
        };
        let mut offset = 0u64;
        for bytes in pieces {
            let len = bytes.len() as u64;
            let request = PeerRequest::SnapshotChunk {
                snapshot_id: id.clone(),
                offset,
                bytes,
            };
            match self.send(request, ttl).await {
                Ok(PeerResponse::SnapshotChunk(Ok(()))) => offset += len,
                Ok(PeerResponse::SnapshotChunk(Err(why))) => return Err(network(self, why)),
                Ok(other) => return Err(network(self, format!("unexpected answer {other:?}"))),
                Err(e) => return Err(StreamingError::Unreachable(Unreachable::new(&e))),
            }
        }
        let request = PeerRequest::Snapshot {
            vote,
            meta: snapshot.meta,
        };
        match self.send(request, ttl).await {
            Ok(PeerResponse::Snapshot(Ok(response))) => Ok(response),
            Ok(PeerResponse::Snapshot(Err(why))) => Err(network(self, why)),
            Ok(other) => Err(network(self, format!("unexpected answer {other:?}"))),
            Err(e) => Err(StreamingError::Unreachable(Unreachable::new(&e))),
        }
    }
}
