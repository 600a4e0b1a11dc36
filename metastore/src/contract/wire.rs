//! The metastore's frames: what a client and a node say to each other over
//! TCP. Messages are postcard in length-prefixed frames; each connection
//! carries one request at a time. A client's request is an [`Envelope`]
//! after a tag and the [`WIRE_VERSION`]; its answer is the operation's own
//! `Result<Output, MetaError>`, read as the type the client asked for. Raft
//! messages between nodes (the node's `PeerRequest`) share the port under
//! their own tag.

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio_util::codec::LengthDelimitedCodec;

use crate::contract::api::Request;
use crate::contract::quorum::NodeId;
use crate::contract::types::MetaError;

/// Largest message either side accepts (snapshots travel in pieces, see
/// the node's `raft::network::SNAPSHOT_CHUNK_BYTES`). Small in tests, so a state larger
/// than one frame is easy to build.
#[cfg(not(test))]
pub(crate) const MAX_FRAME: usize = 256 * 1024 * 1024;
#[cfg(test)]
pub(crate) const MAX_FRAME: usize = 4 * 1024 * 1024;
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
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// TCP keepalive on every connection, so a dead peer is found on idle ones.
pub(crate) const KEEPALIVE: Duration = Duration::from_secs(10);

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
pub(crate) const PEER: u8 = 32;
/// A client's frame: `CALL`, [`WIRE_VERSION`], then an [`Envelope`].
pub(crate) const CALL: u8 = 33;
/// `SUBSCRIBE`, [`WIRE_VERSION`]: the connection becomes a subscription
/// (see [`crate::contract::push`]). The node answers
/// `Result<(), MetaError>`; after `Ok`, each side sends its messages
/// (`ToLeader`, `FromLeader`) one a frame until either closes.
pub(crate) const SUBSCRIBE: u8 = 34;
/// Longest a subscription's frame may take to send before the stream is
/// taken for cut.
pub(crate) const STREAM_SEND_TIMEOUT: Duration = Duration::from_secs(3);
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
/// 9: AddToTxn answers the transaction's identity (`began`), and a
///    transaction's view shows it.
/// 10: a share acquisition answers the lock and isolation it was taken
///    under (`ShareAcquisition`); a node's status names its backend (a
///    trailing field of `ClusterStatus`). Both before any release.
pub const WIRE_VERSION: u8 = 10;

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
pub enum NodeRequest {
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
    /// A backup of the group's state, under a GC hold of `hold_ms` (the
    /// leader answers; see `raft::backup`).
    Backup {
        hold_ms: i64,
    },
}

impl Envelope {
    /// Its name, for metrics.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Envelope::Op(request) => request.name(),
            Envelope::Node(_) => "Node",
        }
    }

    /// The frame that carries it.
    pub(crate) fn frame(&self) -> Result<Bytes, MetaError> {
        let frame = postcard::to_extend(self, vec![CALL, WIRE_VERSION])
            .map_err(|e| MetaError::Storage(format!("encoding a request: {e}")))?;
        Ok(Bytes::from(frame))
    }
}

/// The frames' codec, bounded by [`MAX_FRAME`].
pub(crate) fn codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(MAX_FRAME)
        .new_codec()
}
