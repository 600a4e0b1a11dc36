//! The metastore as a three-node Raft group (the real `RaftMetastore`, its
//! log in in-memory redb) over a simulated network that delays, drops and
//! partitions messages, with each node's clock skewed its own way. Nodes are
//! killed where they stand and restarted from their logs (the same database,
//! as a crashed process finds its disk). Agents
//! reach it through a client that follows the leader and retries as
//! `RemoteMetastore` does; an isolated leader keeps taking writes it cannot
//! commit, as a frozen or partitioned leader does.
//!
//! Runs with Raft are seeded but do not replay exactly: openraft draws its
//! election timeouts from its own thread-local generator and its core loop
//! selects at random between ready events (both outside the seed).
//!
//! The same group can be three nodes of the metastore on a shared log (the
//! PostgreSQL design, `floe_metastore::shared_log`) instead: `LogNode`s on
//! one `MemoryLog` whose calls fail, lose their answers after taking
//! effect and run slow as the weather says (an isolated node is cut off
//! from the database), each node's clock skewed its own way,
//! nodes killed mid-append and restarted from the log.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use floe_metastore::contract::client::Round;
use floe_metastore::groups::Heard;
use floe_metastore::push::{MAX_QUEUED_NOTICES, Named, Subscription};
use floe_metastore::raft::NodeId;
use floe_metastore::raft::network::{PeerRequest, PeerResponse, PeerTransport};
use floe_metastore::raft::node::{Bootstrap, database_on};
use floe_metastore::shared_log::memory::{Call, Fault, MemoryLog};
use floe_metastore::state::{Command, Reply, State};
use floe_metastore::{
    AwaitGroup, Clock, LogNode, LogNodeOptions, MemberView, MetaError, NodeOptions, RaftMetastore,
    Refusal, Sequencer,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::time::{Duration, Instant};
use uuid::Uuid;

use super::Shared;
use super::disk::Disk;
use super::meta::EPOCH_MS;

/// The metastore group's size.
pub const NODES: u64 = 3;

/// How the simulated database of a group on a shared log misbehaves now:
/// shares of its calls that fail, that take effect and lose their answer,
/// and that are slow (up to `max_latency`).
#[derive(Debug, Clone, Default)]
pub struct DatabaseFaults {
    pub fail: f64,
    pub lose_answer: f64,
    pub slow: f64,
    pub max_latency: Duration,
    /// Nodes cut off from the database: every call of theirs fails.
    pub cut: BTreeSet<NodeId>,
    /// Nodes whose calls all go unanswered, each for longer than a lease,
    /// and never arrive (a link that drops everything): a leader among
    /// them must stop reading once its lease is gone.
    pub stalled: BTreeSet<NodeId>,
}

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
    shared: Shared,
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> i64 {
        self.shared
            .with(|w| w.now_ms() + w.net.skew_ms.get(&self.node).copied().unwrap_or(0))
    }
}

/// Carries Raft messages between the nodes, through postcard as on the
/// wire, subject to [`NetFaults`].
#[derive(Debug)]
pub struct SimNet {
    nodes: Mutex<BTreeMap<NodeId, Weak<SimNode>>>,
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
            let latency = w.latency_up_to(w.net.max_latency);
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
        let SimNode::Raft(_) = node.as_ref() else {
            return Err(format!("node {target} has no Raft peers"));
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            if let SimNode::Raft(node) = node.as_ref() {
                let _ = tx.send(node.handle_peer(request).await);
            }
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

/// What kind of metastore group a run simulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Three Raft voters, each with its log on its own disk.
    Raft,
    /// Three nodes of the metastore on a shared log (PostgreSQL's design),
    /// the log in one simulated database.
    SharedLog,
}

/// A metastore node of either kind.
pub enum SimNode {
    Raft(RaftMetastore),
    Log(LogNode),
}

impl SimNode {
    pub fn id(&self) -> NodeId {
        match self {
            SimNode::Raft(n) => n.id(),
            SimNode::Log(n) => n.id(),
        }
    }

    pub fn leads(&self) -> bool {
        match self {
            SimNode::Raft(n) => n.leads(),
            SimNode::Log(n) => n.leads(),
        }
    }

    pub fn applied_index(&self) -> u64 {
        match self {
            SimNode::Raft(n) => n.applied_index(),
            SimNode::Log(n) => n.applied_index(),
        }
    }

    pub fn local_state<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        match self {
            SimNode::Raft(n) => n.local_state(f),
            SimNode::Log(n) => n.local_state(f),
        }
    }
}

impl Sequencer for SimNode {
    async fn propose(&self, command: Command) -> Result<Reply, MetaError> {
        match self {
            SimNode::Raft(n) => n.propose(command).await,
            SimNode::Log(n) => n.propose(command).await,
        }
    }

    async fn read<T: Send, F: FnOnce(&State) -> T + Clone + Send>(
        &self,
        f: F,
    ) -> Result<T, MetaError> {
        match self {
            SimNode::Raft(n) => n.read(f).await,
            SimNode::Log(n) => n.read(f).await,
        }
    }

    fn now_ms(&self) -> i64 {
        match self {
            SimNode::Raft(n) => n.now_ms(),
            SimNode::Log(n) => n.now_ms(),
        }
    }

    async fn subscribe(&self) -> Result<Subscription, MetaError> {
        match self {
            SimNode::Raft(n) => Sequencer::subscribe(n).await,
            SimNode::Log(n) => Sequencer::subscribe(n).await,
        }
    }

    fn new_id(&self) -> Uuid {
        match self {
            SimNode::Raft(n) => n.new_id(),
            SimNode::Log(n) => n.new_id(),
        }
    }

    async fn read_heard<T: Send, F: FnOnce(&State) -> (T, Option<Heard>) + Clone + Send>(
        &self,
        f: F,
    ) -> Result<T, MetaError> {
        match self {
            SimNode::Raft(n) => n.read_heard(f).await,
            SimNode::Log(n) => n.read_heard(f).await,
        }
    }

    async fn await_group(&self, wait: AwaitGroup) -> Result<Option<MemberView>, MetaError> {
        match self {
            SimNode::Raft(n) => n.await_group(wait).await,
            SimNode::Log(n) => n.await_group(wait).await,
        }
    }
}

/// How each node is (re)started.
enum Starts {
    /// Each node's options, to restart it with (a replaced node's say
    /// `Bootstrap::Join`), and its disk, which loses its unsynced writes
    /// when the node is killed.
    Raft(Vec<NodeOptions>, Vec<Disk>),
    /// Each node's options and the database they share.
    Log(Vec<LogNodeOptions>, MemoryLog),
}

/// The three nodes (`None` while one is down), and the client agents use.
pub struct RaftGroup {
    nodes: Nodes,
    kind: Kind,
    starts: Mutex<Starts>,
    net: Arc<SimNet>,
    pub client: Arc<RaftClient>,
    /// Kills, restarts and replacements one at a time: a restart that ran
    /// while a kill waited for its node to stop would start a process on
    /// the disk the kill then crashes (or a replacement wipes).
    lifecycle: tokio::sync::Mutex<()>,
}

type Nodes = Arc<Mutex<Vec<Option<Arc<SimNode>>>>>;

/// Starts the group and waits for its first leader.
pub async fn start(shared: &Shared, kind: Kind) -> RaftGroup {
    // openraft's election timeouts from the run's seed (the runtime is this
    // thread; `run` clears it afterwards).
    let draws = shared.with(|w| w.rng_below(u64::MAX));
    floe_metastore::raft::runtime::seed_this_thread(Some(draws));
    let net = Arc::new(SimNet {
        nodes: Mutex::new(BTreeMap::new()),
        shared: shared.clone(),
    });
    let clock = |id| -> Arc<dyn Clock> {
        Arc::new(SkewedClock {
            node: id,
            shared: shared.clone(),
        })
    };
    let starts = match kind {
        Kind::Raft => {
            let peers: BTreeMap<NodeId, String> = (1..=NODES).map(|id| (id, address(id))).collect();
            let transport: Arc<dyn PeerTransport> = net.clone();
            let options = (1..=NODES)
                .map(|id| {
                    let mut o = NodeOptions::new(id, address(id));
                    o.bootstrap = Bootstrap::Cluster(peers.clone());
                    o.heartbeat_ms = 50;
                    // Small, so that followers catch up from snapshots too.
                    o.snapshot_every = 300;
                    o.clock = clock(id);
                    o.transport = Some(transport.clone());
                    // Agents subscribe under read leases (a node's default).
                    o.read_lease = Some(Duration::from_secs(2));
                    o
                })
                .collect();
            Starts::Raft(options, (1..=NODES).map(|_| Disk::default()).collect())
        }
        Kind::SharedLog => {
            let options = (1..=NODES)
                .map(|id| {
                    let mut o = LogNodeOptions::new(id, address(id));
                    o.lease = Duration::from_secs(2);
                    // Small, so that standbys load snapshots too.
                    o.snapshot_every = 300;
                    o.clock = clock(id);
                    o
                })
                .collect();
            let database = Arc::new(DatabaseClock(shared.clone()));
            Starts::Log(options, MemoryLog::new(database))
        }
    };
    let kind_of = match &starts {
        Starts::Raft(..) => Kind::Raft,
        Starts::Log(..) => Kind::SharedLog,
    };
    let nodes: Nodes = Arc::new(Mutex::new(vec![None; NODES as usize]));
    let group = RaftGroup {
        client: Arc::new(RaftClient {
            nodes: nodes.clone(),
            leader: AtomicUsize::new(0),
            shared: shared.clone(),
        }),
        nodes,
        kind: kind_of,
        starts: Mutex::new(starts),
        net,
        lifecycle: tokio::sync::Mutex::new(()),
    };
    for i in 0..NODES as usize {
        let started = group.restart_now(i, shared).await;
        started.unwrap_or_else(|e| panic!("metastore node {} does not start: {e}", i + 1));
    }
    while group.leader().is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    group
}

/// The simulated database's clock: the simulation's own, unskewed (one
/// server's clock, which every node reads its lease by).
#[derive(Debug)]
struct DatabaseClock(Shared);

impl Clock for DatabaseClock {
    fn now_ms(&self) -> i64 {
        self.0.with(|w| w.now_ms())
    }
}

/// What the weather does to node `node`'s calls to the database: fails
/// them all while the node is cut off from the others, and otherwise fails
/// some, loses the answers of some after they took effect and slows some.
fn database_weather(shared: Shared, node: NodeId) -> floe_metastore::shared_log::memory::Weather {
    Arc::new(move |_: Call| {
        shared.with(|w| {
            if w.database.cut.contains(&node) {
                return Fault::Fail;
            }
            if w.database.stalled.contains(&node) {
                return Fault::Unanswered(Duration::from_secs(6));
            }
            let faults = w.database.clone();
            if w.chance(faults.fail) {
                Fault::Fail
            } else if w.chance(faults.lose_answer) {
                Fault::LoseAnswer
            } else if w.chance(faults.slow) {
                let late = w.latency_up_to(faults.max_latency);
                // Late to take effect, or late to say it did.
                match w.chance(0.5) {
                    true => Fault::Slow(late),
                    false => Fault::SlowAnswer(late),
                }
            } else {
                Fault::None
            }
        })
    })
}

/// `options` with a database on `disk` (as a restarted process opens its file).
fn on_disk(options: &NodeOptions, disk: &Disk) -> NodeOptions {
    let database = database_on(disk.handle()).expect("a database opens on the sim disk");
    NodeOptions {
        database: Some(Arc::new(database)),
        ..options.clone()
    }
}

impl RaftGroup {
    /// Node `i` (0-based), if it is up.
    pub fn node(&self, i: usize) -> Option<Arc<SimNode>> {
        self.nodes.lock().expect("sim nodes lock")[i].clone()
    }

    /// Stops node `i` where it is, as a crash does: its disk keeps what it
    /// synced (a node on a shared log leaves its lease to lapse, and an
    /// append it had sent may still land).
    pub async fn kill(&self, i: usize) {
        let _one_at_a_time = self.lifecycle.lock().await;
        self.kill_now(i).await;
    }

    async fn kill_now(&self, i: usize) {
        let node = self.nodes.lock().expect("sim nodes lock")[i].take();
        let Some(node) = node else { return };
        self.net
            .nodes
            .lock()
            .expect("sim net lock")
            .remove(&(i as NodeId + 1));
        match node.as_ref() {
            SimNode::Raft(raft) => {
                raft.shutdown().await;
                if let Starts::Raft(_, disks) = &*self.starts.lock().expect("sim starts lock") {
                    disks[i].crash();
                }
            }
            SimNode::Log(log_node) => log_node.halt().await,
        }
    }

    /// Starts node `i` again from its log, if it is down. A start that
    /// fails (a node on a shared log reads the log first, and the database
    /// may fail that) is tried again every half second until it succeeds,
    /// as a supervisor does.
    pub async fn restart(&self, i: usize) {
        let shared = self.client.shared.clone();
        for attempt in 0.. {
            let failed = {
                let _one_at_a_time = self.lifecycle.lock().await;
                match self.restart_now(i, &shared).await {
                    Ok(()) => return,
                    Err(e) => e,
                }
            };
            // The first failure and every hundredth, so that one that
            // never goes away shows in the trace.
            if attempt % 100 == 0 {
                shared.with(|w| w.log(format!("metastore node {} did not start: {failed}", i + 1)));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// One start of node `i`, if it is down; why it is not up after it.
    async fn restart_now(&self, i: usize, shared: &Shared) -> Result<(), String> {
        if self.node(i).is_some() {
            return Ok(());
        }
        enum Start {
            Raft(NodeOptions),
            Log(LogNodeOptions, MemoryLog),
        }
        let start = match &*self.starts.lock().expect("sim starts lock") {
            Starts::Raft(options, disks) => Start::Raft(on_disk(&options[i], &disks[i])),
            Starts::Log(options, log) => Start::Log(options[i].clone(), log.clone()),
        };
        let node = match start {
            Start::Raft(options) => SimNode::Raft(
                RaftMetastore::start(options)
                    .await
                    .expect("a metastore node restarts from its log"),
            ),
            Start::Log(options, log) => {
                let log = log.with_weather(database_weather(shared.clone(), options.id));
                match LogNode::start(Arc::new(log), options).await {
                    Ok(node) => SimNode::Log(node),
                    Err(e) => return Err(e.to_string()),
                }
            }
        };
        let node = Arc::new(node);
        self.net
            .nodes
            .lock()
            .expect("sim net lock")
            .insert(i as NodeId + 1, Arc::downgrade(&node));
        self.nodes.lock().expect("sim nodes lock")[i] = Some(node);
        Ok(())
    }

    pub fn is_down(&self, i: usize) -> bool {
        self.node(i).is_none()
    }

    /// Node `i` itself, as a client that talks to it alone sees it.
    pub fn node_as_metastore(&self, i: usize) -> Option<Arc<dyn floe_metastore::Metastore>> {
        self.node(i)
            .map(|n| n as Arc<dyn floe_metastore::Metastore>)
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// A node other than `id` that leads now, if one is up and knows it
    /// (an isolated Raft leader goes on thinking it leads).
    pub fn leader_other_than(&self, id: NodeId) -> Option<Arc<SimNode>> {
        let nodes = self.nodes.lock().expect("sim nodes lock");
        nodes
            .iter()
            .flatten()
            .find(|n| n.id() != id && n.leads())
            .cloned()
    }

    /// The node that leads now, if one is up and knows it.
    pub fn leader(&self) -> Option<Arc<SimNode>> {
        let nodes = self.nodes.lock().expect("sim nodes lock");
        nodes.iter().flatten().find(|n| n.leads()).cloned()
    }

    fn raft_leader(&self) -> Result<Arc<SimNode>, String> {
        self.leader().ok_or_else(|| "no leader".to_string())
    }

    /// Replaces node `i` under load, as an operator replaces a failed
    /// machine: removed from the group (asked of the leader), its disk
    /// wiped, started empty (`Bootstrap::Join`) and added back, a learner
    /// that catches up from a snapshot and then a voter. A step refused or
    /// timed out leaves the rest to [`RaftGroup::all_voters`]. (A node on a
    /// shared log has no membership and no disk: it is started afresh.)
    pub async fn replace(&self, i: usize) -> Result<(), String> {
        let id = i as NodeId + 1;
        let leader = self.raft_leader()?;
        let SimNode::Raft(leader) = leader.as_ref() else {
            {
                let _one_at_a_time = self.lifecycle.lock().await;
                self.kill_now(i).await;
            }
            self.restart(i).await;
            return Ok(());
        };
        let removed = tokio::time::timeout(Duration::from_secs(30), leader.remove_node(id)).await;
        removed
            .map_err(|_| "removal timed out".to_string())?
            .map_err(|e| format!("removal refused: {e}"))?;
        {
            let _one_at_a_time = self.lifecycle.lock().await;
            self.kill_now(i).await;
            if let Starts::Raft(options, disks) = &mut *self.starts.lock().expect("sim starts lock")
            {
                disks[i].wipe();
                options[i].bootstrap = Bootstrap::Join;
            }
            let shared = self.client.shared.clone();
            let started = self.restart_now(i, &shared).await;
            started.unwrap_or_else(|e| panic!("a Raft node does not start from its disk: {e}"));
        }
        self.add_back(id).await
    }

    /// Asks the leader to add node `id` (a learner, then a voter).
    async fn add_back(&self, id: NodeId) -> Result<(), String> {
        let leader = self.raft_leader()?;
        let SimNode::Raft(leader) = leader.as_ref() else {
            return Ok(());
        };
        let added =
            tokio::time::timeout(Duration::from_secs(120), leader.add_node(id, address(id))).await;
        added
            .map_err(|_| "adding timed out".to_string())?
            .map_err(|e| format!("adding refused: {e}"))
    }

    /// Every node a voter again (after the weather: a replacement may have
    /// stopped halfway). A group on a shared log has no voters: it needs a
    /// leader only.
    pub async fn all_voters(&self) -> Result<(), String> {
        let mut last = "no leader".to_string();
        for _ in 0..60 {
            let Some(leader) = self.leader() else {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            };
            let SimNode::Raft(raft) = leader.as_ref() else {
                return Ok(());
            };
            let status = raft.status();
            let missing = (1..=NODES).find(|id| !status.voters.contains_key(id));
            let Some(id) = missing else {
                return Ok(());
            };
            if let Err(why) = self.add_back(id).await {
                last = format!("adding node {id} back: {why} (the leader's view: {status})");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        Err(format!(
            "the group never had all its nodes as voters again; last: {last}"
        ))
    }
}

fn address(id: NodeId) -> String {
    format!("node-{id}")
}

/// Agents' way to the group: sends to the node it believes leads, follows
/// `NotLeader` hints, and retries what is safe to retry for up to 15 s, as
/// `RemoteMetastore` does. A node that is down does not answer.
pub struct RaftClient {
    nodes: Nodes,
    leader: AtomicUsize,
    shared: Shared,
}

/// How long a call keeps trying (`RemoteMetastore`'s default).
const RETRY_FOR: Duration = Duration::from_secs(15);

/// What one attempt at one node came to.
enum Attempt<T> {
    Done(Result<T, MetaError>),
    /// Not applied there, or unknown and safe to send again: try elsewhere.
    /// (Why, whether it may have been applied, and the leader it named.)
    Again(String, bool, Option<String>),
}

impl RaftClient {
    /// Moves on after a failure at node index `at`, as `RemoteMetastore`
    /// does (see [`Round`]).
    fn move_on(&self, at: usize, hint: Option<String>, round: &mut Round) {
        let count = self.nodes.lock().expect("sim nodes lock").len();
        let addresses: Vec<String> = (1..=count as NodeId).map(address).collect();
        let next = round.next(&addresses, &addresses[at], hint);
        let next = next
            .strip_prefix("node-")
            .and_then(|id| id.parse::<usize>().ok())
            .filter(|id| (1..=count).contains(id))
            .map_or((at + 1) % count, |id| id - 1);
        self.leader.store(next, Ordering::Relaxed);
        self.shared.with(|w| w.summary.redirects += 1);
    }

    /// Runs `attempt` on the node believed to lead, moving on and retrying
    /// until it is done or `RETRY_FOR` has passed.
    /// `refusal`: the refusal an answer holds, if any (a write's [`Reply`]
    /// may hold one), which after an attempt that may have applied says
    /// nothing of that attempt.
    async fn call<T, Fut>(
        &self,
        attempt: impl Fn(Arc<SimNode>) -> Fut,
        refusal: impl Fn(&T) -> Option<Refusal>,
    ) -> Result<T, MetaError>
    where
        Fut: std::future::Future<Output = Attempt<T>>,
    {
        let deadline = Instant::now() + RETRY_FOR;
        let mut maybe_applied = false;
        let mut round = Round::default();
        loop {
            let at = self.leader.load(Ordering::Relaxed);
            round.ask(&address(at as NodeId + 1));
            let node = self.nodes.lock().expect("sim nodes lock")[at].clone();
            let why = match node {
                None => {
                    self.move_on(at, None, &mut round);
                    format!("node {} is down", at + 1)
                }
                Some(node) => match attempt(node).await {
                    Attempt::Done(Ok(answer)) => {
                        return match refusal(&answer) {
                            Some(refused) if maybe_applied => Err(refused.after_retries(true)),
                            _ => Ok(answer),
                        };
                    }
                    Attempt::Done(result) => return result,
                    Attempt::Again(why, maybe, hint) => {
                        maybe_applied |= maybe;
                        self.move_on(at, hint, &mut round);
                        why
                    }
                },
            };
            if Instant::now() >= deadline {
                return Err(MetaError::Unavailable { why, maybe_applied });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn classify<T>(&self, result: Result<T, MetaError>, safe: bool) -> Attempt<T> {
        match result {
            Err(MetaError::NotLeader(hint)) => Attempt::Again("not the leader".into(), false, hint),
            Err(e) if e.worth_retrying(safe) => {
                Attempt::Again(e.to_string(), !e.certainly_not_applied(), None)
            }
            other => Attempt::Done(other),
        }
    }
}

impl RaftClient {
    /// A request that changes nothing, asked of the node believed to lead
    /// (and of the next, as [`RaftClient::call`] moves on).
    async fn ask<T, Fut>(&self, ask: impl Fn(Arc<SimNode>) -> Fut) -> Result<T, MetaError>
    where
        Fut: std::future::Future<Output = Result<T, MetaError>>,
    {
        self.call(
            move |node| {
                let asked = ask(node);
                async move { self.classify(asked.await, true) }
            },
            |_| None,
        )
        .await
    }
}

impl Sequencer for RaftClient {
    async fn propose(&self, command: Command) -> Result<Reply, MetaError> {
        let safe = command.retry_is_safe();
        self.call(
            move |node| {
                let command = command.clone();
                async move { self.classify(Sequencer::propose(node.as_ref(), command).await, safe) }
            },
            |reply: &Reply| reply.refusal(),
        )
        .await
    }

    async fn read<T: Send, F: FnOnce(&State) -> T + Clone + Send>(
        &self,
        f: F,
    ) -> Result<T, MetaError> {
        self.ask(move |node| {
            let f = f.clone();
            async move { Sequencer::read(node.as_ref(), f).await }
        })
        .await
    }

    fn now_ms(&self) -> i64 {
        let nodes = self.nodes.lock().expect("sim nodes lock");
        nodes
            .iter()
            .flatten()
            .next()
            .map_or(EPOCH_MS, |n| n.now_ms())
    }

    fn new_id(&self) -> Uuid {
        self.shared.with(|w| w.next_uuid())
    }

    /// What a heartbeat showed is remembered by the node that read it.
    async fn read_heard<T: Send, F: FnOnce(&State) -> (T, Option<Heard>) + Clone + Send>(
        &self,
        f: F,
    ) -> Result<T, MetaError> {
        self.ask(move |node| {
            let f = f.clone();
            async move { Sequencer::read_heard(node.as_ref(), f).await }
        })
        .await
    }

    async fn await_group(&self, wait: AwaitGroup) -> Result<Option<MemberView>, MetaError> {
        self.ask(move |node| {
            let wait = wait.clone();
            async move { Sequencer::await_group(node.as_ref(), wait).await }
        })
        .await
    }

    /// A subscription on the leader, its stream through the weather: each
    /// message late by up to the network's latency (in order), and the
    /// stream cut as often as the network drops a message.
    async fn subscribe(&self) -> Result<Subscription, MetaError> {
        let opened = self
            .ask(|node| async move { Sequencer::subscribe(node.as_ref()).await })
            .await?;
        self.shared.with(|w| w.summary.subscriptions += 1);
        let (to_leader, agent_side) = mpsc::channel(MAX_QUEUED_NOTICES);
        let (leader_side, from_leader) = mpsc::channel(MAX_QUEUED_NOTICES);
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let to = weathered(shared.clone(), agent_side, opened.to_leader);
            let from = weathered(shared, opened.from_leader, leader_side);
            // Either direction cut ends both.
            tokio::select! {
                _ = to => {}
                _ = from => {}
            }
        });
        Ok(Subscription {
            to_leader,
            from_leader,
        })
    }
}

/// Carries a stream's messages through the network's weather until either
/// end closes or a message is lost (which cuts the stream: a connection
/// does not skip messages).
async fn weathered<T: Named>(shared: Shared, mut from: mpsc::Receiver<T>, to: mpsc::Sender<T>) {
    while let Some(message) = from.recv().await {
        let notice = message.name() == "Notice";
        let (lost, latency) = shared.with(|w| {
            let latency = w.latency_up_to(w.net.max_latency);
            let drop = w.net.drop;
            let lost = w.chance(drop);
            w.summary.notices += u64::from(notice && !lost);
            w.summary.cut_streams += u64::from(lost);
            (lost, latency)
        });
        tokio::time::sleep(latency).await;
        if lost || to.send(message).await.is_err() {
            return;
        }
    }
}

/// After the calm: every node has applied the same log and holds the same
/// state, byte for byte. Agents still write (leases, clock ticks), and a
/// node's applied index is published just after its state changes, so a
/// comparison can catch one node an entry ahead: a difference counts only if
/// it is still there at every one of several looks. A real divergence never
/// heals.
pub async fn replicas_agree(group: &RaftGroup) -> Result<(), String> {
    let nodes: Vec<Arc<SimNode>> = (0..NODES as usize)
        .map(|i| group.node(i).expect("every node is up after the calm"))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut differing = None;
    for _ in 0..20 {
        loop {
            let applied: Vec<u64> = nodes.iter().map(|n| n.applied_index()).collect();
            if applied.iter().all(|&a| a == applied[0]) {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!("replicas did not converge: applied {applied:?}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let encoded: Vec<Vec<u8>> = nodes
            .iter()
            .map(|n| {
                n.local_state(|s| {
                    floe_metastore::format::encode_snapshot(s).expect("the state encodes")
                })
            })
            .collect();
        differing = encoded.iter().position(|e| *e != encoded[0]);
        if differing.is_none() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    match differing {
        None => Ok(()),
        Some(i) => Err(format!(
            "node {} applied the same log as node 1 but holds another state",
            i + 1
        )),
    }
}
