//! Changes pushed to an agent, under a read lease (see
//! `docs/plans/metastore-push.md`).
//!
//! An agent that serves fetches must report each partition's current high
//! watermark: without a lease, a fetch asks the metastore after it began
//! (the agent's confirmation rounds). A subscription replaces those asks
//! while its lease holds:
//!
//! - the agent names the partitions it watches, and gets each one's read
//!   plan at once, then a notice with a fresh plan whenever an applied
//!   entry changes one of them (commit, transaction marker, trim, swap,
//!   deletion), in log order;
//! - it acknowledges notices once it has taken them in;
//! - the leader answers a write that changed a watched partition only once
//!   every lease holder watching it has acknowledged the notice, or its
//!   lease has expired by the leader's clock;
//! - the agent trusts its views without asking only while its lease holds
//!   by its own clock, counted from when it sent the renewal.
//!
//! So a fetch that begins after a producer's acknowledgement finds the
//! record in its agent's views, as it would after a round. Without a lease
//! (not granted yet, the stream cut, the leader changed) the agent asks
//! as before: the lease is an optimisation, never needed for safety.

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::contract::types::{Refusal, TopicPartition, TxnReadPlan};
use crate::contract::wire::STREAM_SEND_TIMEOUT;

/// Notices queued for one agent at most; an agent that falls this far
/// behind loses its subscription (and waits its lease out).
pub const MAX_QUEUED_NOTICES: usize = 1024;
/// Partitions one subscription may watch at most.
pub const MAX_WATCHED: usize = 100_000;
/// Bytes of extents a notice's plan holds per partition at most (as a
/// confirmation round's); a fetch asks for more when it needs them.
pub const NOTICE_PLAN_BYTES: u64 = 1024 * 1024;

/// What an agent must keep to, to trust its lease:
///
/// - take in every notice received before a `Renewed` before trusting the
///   lease it grants (a write noticed before the grant is not held for it);
/// - count the lease from when it sent the renewal, less a margin for
///   clock rates;
/// - trust it no more once the stream closes or says `Ended`, nor after
///   its goodbye (ignoring a `Renewed` still on the way);
/// - ask a round for an offset past its view's high watermark (a read may
///   have shown the client a write whose notice is still on its way);
/// - acknowledge only the latest notice taken in (an ack covers all
///   before it).
///
/// What an agent says on its subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToLeader {
    /// Grant or renew the lease. `ask` numbers the request, so that the
    /// agent counts the lease from when it sent this one.
    Renew { ask: u64 },
    /// Watch these partitions from these offsets (where the agent's view
    /// reaches), and no longer those. Answered by a notice naming `ask`
    /// that holds a plan of each added partition.
    Watch {
        ask: u64,
        add: Vec<(TopicPartition, i64)>,
        remove: Vec<TopicPartition>,
    },
    /// Every notice up to `seq` is taken in.
    Ack { seq: u64 },
    /// The agent trusts its lease no more: the leader forgets it at once.
    Goodbye,
}

/// What the leader says to a subscribed agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FromLeader {
    /// The lease holds for `lease_ms` from when the agent sent renewal
    /// `ask`; `versions` were read after it arrived.
    Renewed {
        ask: u64,
        lease_ms: u64,
        versions: Versions,
    },
    /// Plans of watched partitions that changed (or were just added, for
    /// the `Watch` numbered `answers`), as of one point of the log;
    /// acknowledged by `Ack { seq }`.
    Notice {
        seq: u64,
        answers: Option<u64>,
        plans: Vec<(TopicPartition, Result<TxnReadPlan, Refusal>)>,
    },
    /// Nothing more comes (the node stopped leading, the agent fell
    /// behind or watched too much): the lease is not renewed again.
    Ended { why: String },
}

/// The versions of the state agents keep copies of, as of a renewal: an
/// agent asks for a copy only once its version moved past the one it
/// holds, instead of asking every few seconds whether it did. Both only
/// ever grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versions {
    /// Dynamic configs: client quotas and client metrics subscriptions.
    pub configs: u64,
    /// ACL bindings.
    pub acls: u64,
}

/// An open subscription: what the agent sends, and what it is sent. A
/// closed receiver means the subscription ended.
pub struct Subscription {
    pub to_leader: mpsc::Sender<ToLeader>,
    pub from_leader: mpsc::Receiver<FromLeader>,
}

/// Told the name of every message a subscription's stream carries (for
/// the agent's metrics: they are not requests).
pub type StreamHook = std::sync::Arc<dyn Fn(&'static str) + Send + Sync>;

/// A message's name, for [`StreamHook`].
pub trait Named {
    fn name(&self) -> &'static str;
}

impl Named for ToLeader {
    fn name(&self) -> &'static str {
        match self {
            ToLeader::Renew { .. } => "Renew",
            ToLeader::Watch { .. } => "Watch",
            ToLeader::Ack { .. } => "Ack",
            ToLeader::Goodbye => "Goodbye",
        }
    }
}

impl Named for FromLeader {
    fn name(&self) -> &'static str {
        match self {
            FromLeader::Renewed { .. } => "Renewed",
            FromLeader::Notice { .. } => "Notice",
            FromLeader::Ended { .. } => "Ended",
        }
    }
}

impl Subscription {
    /// A subscription whose messages travel on `connection` (the client's
    /// side, once the node said yes), each told to `hook`.
    pub(crate) fn over(
        connection: Framed<TcpStream, LengthDelimitedCodec>,
        hook: Option<StreamHook>,
    ) -> Subscription {
        let (to_leader, outgoing) = mpsc::channel(MAX_QUEUED_NOTICES);
        let (incoming, from_leader) = mpsc::channel(MAX_QUEUED_NOTICES);
        tokio::spawn(bridge(connection, outgoing, incoming, hook));
        Subscription {
            to_leader,
            from_leader,
        }
    }
}

/// Carries messages between a subscription's channels and its connection
/// (either side's), one a frame, until either ends, telling `hook` of
/// each. Sending has a deadline; a reader that lets its channel fill ends
/// the stream rather than stop the other direction.
pub(crate) async fn bridge<Out: Serialize + Named, In: DeserializeOwned + Named>(
    mut connection: Framed<TcpStream, LengthDelimitedCodec>,
    mut outgoing: mpsc::Receiver<Out>,
    incoming: mpsc::Sender<In>,
    hook: Option<StreamHook>,
) {
    let tell = |name| {
        if let Some(hook) = &hook {
            hook(name);
        }
    };
    loop {
        tokio::select! {
            out = outgoing.recv() => {
                let Some(out) = out else { break };
                tell(out.name());
                let Ok(bytes) = postcard::to_stdvec(&out) else { break };
                let sent = tokio::time::timeout(STREAM_SEND_TIMEOUT, connection.send(Bytes::from(bytes)));
                if !matches!(sent.await, Ok(Ok(()))) {
                    break;
                }
            }
            frame = connection.next() => {
                let Some(Ok(frame)) = frame else { break };
                let Ok(message) = postcard::from_bytes::<In>(&frame) else { break };
                tell(message.name());
                if incoming.try_send(message).is_err() {
                    break;
                }
            }
        }
    }
}
