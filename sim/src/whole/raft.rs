//! The metastore as a three-node Raft group (the real `RaftMetastore`, its
//! log in in-memory redb) over a simulated network that delays, drops and
//! partitions messages, with each node's clock skewed its own way. Agents
//! reach it through a client that follows the leader and retries as
//! `RemoteMetastore` does; an isolated leader keeps taking writes it cannot
//! commit, as a frozen or partitioned leader does.
//!
//! Runs with Raft are seeded but do not replay exactly: openraft draws its
//! election timeouts from its own thread-local generator and its core loop
//! selects at random between ready events (both outside the seed).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use floe_metastore::raft::NodeId;
use floe_metastore::raft::network::{PeerRequest, PeerResponse, PeerTransport};
use floe_metastore::raft::node::Bootstrap;
use floe_metastore::state::{Command, Reply, State};
use floe_metastore::{Clock, MetaError, NodeOptions, RaftMetastore, Sequencer};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::{Duration, Instant};
use uuid::Uuid;

use super::Shared;
use super::meta::EPOCH_MS;

/// The metastore group's size.
pub const NODES: u64 = 3;

/// How the simulated network between metastore nodes misbehaves now.
#[derive(Debug, Clone, Default)]
pub struct NetFaults {
    /// Links that carry nothing, as (from, to).
    pub cut: BTreeSet<(NodeId, NodeId)>,
    /// Share of messages lost.
    pub drop: f64,
    pub max_latency: Duration,
    /// Each node's clock, ahead (or behind) the simulation's by this much.
    pub skew_ms: BTreeMap<NodeId, i64>,
}

/// A node's wall clock: the simulation's, skewed.
#[derive(Debug)]
struct SkewedClock {
    node: NodeId,
    start: Instant,
    shared: Shared,
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> i64 {
        let skew = self
            .shared
            .with(|w| w.net.skew_ms.get(&self.node).copied().unwrap_or(0));
        EPOCH_MS + self.start.elapsed().as_millis() as i64 + skew
    }
}

/// Carries Raft messages between the nodes, through postcard as on the
/// wire, subject to [`NetFaults`].
#[derive(Debug)]
pub struct SimNet {
    nodes: Mutex<BTreeMap<NodeId, Weak<RaftMetastore>>>,
    shared: Shared,
}

fn wire<T: Serialize + DeserializeOwned>(message: &T) -> Result<T, String> {
    let bytes = postcard::to_stdvec(message).map_err(|e| e.to_string())?;
    postcard::from_bytes(&bytes).map_err(|e| e.to_string())
}

impl SimNet {
    /// Whether a message from `from` to `to` is lost, and its latency.
    fn hop(&self, from: NodeId, to: NodeId) -> (bool, Duration) {
        self.shared.with(|w| {
            let ms = w.net.max_latency.as_millis() as u64;
            let latency = Duration::from_millis(if ms == 0 { 0 } else { w.rng_below(ms + 1) });
            let drop = w.net.drop;
            (w.net.cut.contains(&(from, to)) || w.chance(drop), latency)
        })
    }
}

#[async_trait::async_trait]
impl PeerTransport for SimNet {
    async fn send(
        &self,
        from: NodeId,
        target: NodeId,
        request: PeerRequest,
    ) -> Result<PeerResponse, String> {
        let (lost, latency) = self.hop(from, target);
        tokio::time::sleep(latency).await;
        if lost {
            // The sender hears nothing: its own deadline ends the wait.
            std::future::pending::<()>().await;
        }
        let request = wire(&request)?;
        let node = self
            .nodes
            .lock()
            .expect("sim net lock")
            .get(&target)
            .and_then(Weak::upgrade)
            .ok_or_else(|| format!("node {target} is down"))?;
        // Handled whether or not the sender still waits: a message that
        // arrives after its sender gave up is still acted on.
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let _ = tx.send(node.handle_peer(request).await);
        });
        let response = rx.await.map_err(|_| "the receiver stopped".to_string())?;
        let (lost, latency) = self.hop(target, from);
        tokio::time::sleep(latency).await;
        if lost {
            std::future::pending::<()>().await;
        }
        wire(&response)
    }
}

/// The three nodes, and the client agents use.
pub struct RaftGroup {
    pub nodes: Vec<Arc<RaftMetastore>>,
    pub client: Arc<RaftClient>,
}

/// Starts the group and waits for its first leader.
pub async fn start(shared: &Shared) -> RaftGroup {
    let net = Arc::new(SimNet {
        nodes: Mutex::new(BTreeMap::new()),
        shared: shared.clone(),
    });
    let peers: BTreeMap<NodeId, String> = (1..=NODES).map(|id| (id, address(id))).collect();
    let start = Instant::now();
    let mut nodes = Vec::new();
    for id in 1..=NODES {
        let mut options = NodeOptions::new(id, address(id));
        options.bootstrap = Bootstrap::Cluster(peers.clone());
        options.heartbeat_ms = 50;
        // Small, so that followers catch up from snapshots too.
        options.snapshot_every = 300;
        options.clock = Arc::new(SkewedClock {
            node: id,
            start,
            shared: shared.clone(),
        });
        let transport: Arc<dyn PeerTransport> = net.clone();
        options.transport = Some(transport);
        let node = Arc::new(
            RaftMetastore::start(options)
                .await
                .expect("a metastore node starts"),
        );
        net.nodes
            .lock()
            .expect("sim net lock")
            .insert(id, Arc::downgrade(&node));
        nodes.push(node);
    }
    while !nodes.iter().any(|n| n.leads()) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    RaftGroup {
        client: Arc::new(RaftClient {
            nodes: nodes.clone(),
            leader: AtomicUsize::new(0),
            shared: shared.clone(),
        }),
        nodes,
    }
}

fn address(id: NodeId) -> String {
    format!("node-{id}")
}

/// Agents' way to the group: sends to the node it believes leads, follows
/// `NotLeader` hints, and retries what is safe to retry for up to 15 s, as
/// `RemoteMetastore` does.
pub struct RaftClient {
    nodes: Vec<Arc<RaftMetastore>>,
    leader: AtomicUsize,
    shared: Shared,
}

/// How long a call keeps trying (`RemoteMetastore`'s default).
const RETRY_FOR: Duration = Duration::from_secs(15);

impl RaftClient {
    /// Moves on after a failure at node index `at`: to the hinted leader, or
    /// the next node.
    fn move_on(&self, at: usize, hint: Option<&str>) {
        let next = hint
            .and_then(|a| a.strip_prefix("node-"))
            .and_then(|id| id.parse::<usize>().ok())
            .map_or((at + 1) % self.nodes.len(), |id| id - 1);
        self.leader.store(next, Ordering::Relaxed);
        self.shared.with(|w| w.summary.redirects += 1);
    }
}

impl Sequencer for RaftClient {
    async fn write(&self, command: Command) -> Result<Reply, MetaError> {
        let deadline = Instant::now() + RETRY_FOR;
        let safe = command.retry_is_safe();
        loop {
            let at = self.leader.load(Ordering::Relaxed);
            let why = match Sequencer::write(self.nodes[at].as_ref(), command.clone()).await {
                Err(MetaError::NotLeader(hint)) => {
                    self.move_on(at, hint.as_deref());
                    "not the leader".to_string()
                }
                Err(MetaError::Unavailable(why)) if safe => {
                    self.move_on(at, None);
                    why
                }
                other => return other,
            };
            if Instant::now() >= deadline {
                return Err(MetaError::Unavailable(why));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn read<T: Send, F: FnOnce(&State) -> T + Clone + Send>(
        &self,
        f: F,
    ) -> Result<T, MetaError> {
        let deadline = Instant::now() + RETRY_FOR;
        loop {
            let at = self.leader.load(Ordering::Relaxed);
            let why = match Sequencer::read(self.nodes[at].as_ref(), f.clone()).await {
                Err(MetaError::NotLeader(hint)) => {
                    self.move_on(at, hint.as_deref());
                    "not the leader".to_string()
                }
                Err(MetaError::Unavailable(why)) => {
                    self.move_on(at, None);
                    why
                }
                other => return other,
            };
            if Instant::now() >= deadline {
                return Err(MetaError::Unavailable(why));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn now_ms(&self) -> i64 {
        self.nodes[self.leader.load(Ordering::Relaxed)].now_ms()
    }

    fn new_id(&self) -> Uuid {
        self.shared.with(|w| w.next_uuid())
    }
}

/// After the calm: every node has applied the same log and holds the same
/// state, byte for byte.
pub async fn replicas_agree(group: &RaftGroup) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let applied: Vec<u64> = group.nodes.iter().map(|n| n.applied_index()).collect();
        if applied.iter().all(|&a| a == applied[0]) {
            break;
        }
        if Instant::now() >= deadline {
            return Err(format!("replicas did not converge: applied {applied:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let encoded: Vec<Vec<u8>> = group
        .nodes
        .iter()
        .map(|n| n.local_state(|s| postcard::to_stdvec(s).expect("the state encodes")))
        .collect();
    match encoded.iter().position(|e| *e != encoded[0]) {
        None => Ok(()),
        Some(i) => Err(format!(
            "node {} applied the same log as node 1 but holds another state",
            i + 1
        )),
    }
}
