//! [`RaftMetastore`]: one metastore node. Writes go through the Raft log;
//! reads are answered by the leader from its applied state while it holds a
//! [`Lease`], or after confirming with a quorum that it still leads (so a
//! deposed leader never answers from stale state).
//! Followers answer everything with [`MetaError::NotLeader`] and the leader's
//! address, which [`RemoteMetastore`](crate::RemoteMetastore) follows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use openraft::error::{
    CheckIsLeaderError, ClientWriteError, ForwardToLeader, InitializeError, RaftError,
};
use openraft::{ChangeMembers, Config, SnapshotPolicy};
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableHandle};
use uuid::Uuid;

use super::group_commit::GroupCommit;
use super::group_watch::GroupWatch;
use super::lease::Lease;
use super::liveness::{GroupTimers, Liveness};
use super::log_store::{LOG, LogStore, META};
use super::network::{Network, PeerRequest, PeerResponse, PeerTransport};
use super::stamps::Stamps;
use super::state_machine::{SNAPSHOT, SNAPSHOT_DATA, StateMachine};
use super::{NodeAddress, NodeId, Raft};
use crate::contract::quorum::ClusterStatus;
use crate::format::{FORMAT_VERSION, OLDEST_READABLE_FORMAT, decode_snapshot_of, encode_snapshot};
use crate::groups::{AwaitGroup, Heard, MemberView};
use crate::read_leases::ReadLeases;
use crate::state::{Command, Reply, State};
use crate::types::*;
use crate::{Clock, Sequencer, SystemClock};

/// How long a write may wait for a quorum before the caller is told it is
/// unknown whether it was applied.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a new node may take to copy the log before it would become a voter.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a read may wait for the leader to confirm it still leads.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// How a node starts when its log is empty.
#[derive(Debug, Clone)]
pub enum Bootstrap {
    /// A group of one voter: itself.
    Single,
    /// A group of these voters (this node among them). Every node given the
    /// same list may bootstrap it; Raft makes them agree.
    Cluster(BTreeMap<NodeId, String>),
    /// Nothing: wait to be added to an existing group (`floe metastore add-node`).
    Join,
}

#[derive(Debug, Clone)]
pub struct NodeOptions {
    pub id: NodeId,
    /// Where other nodes and clients reach this node.
    pub address: String,
    /// The redb file for the log, vote and snapshot; `None` keeps them in memory.
    pub path: Option<PathBuf>,
    /// Log entries between snapshots.
    pub snapshot_every: u64,
    pub bootstrap: Bootstrap,
    /// Milliseconds between leader heartbeats; elections start after 3-6 of them.
    pub heartbeat_ms: u64,
    /// What this node stamps its proposals with.
    pub clock: Arc<dyn Clock>,
    /// How Raft messages reach other nodes; `None`: TCP to their addresses.
    pub transport: Option<Arc<dyn PeerTransport>>,
    /// With a secret, this node refuses connections that do not prove they
    /// hold it, and proves it to the nodes it connects to.
    pub secret: Option<crate::peer_auth::ClusterSecret>,
    /// An open database to use instead of `path`: the one a stopped node of
    /// this process used, so that it restarts from its log as after a crash
    /// (the simulation kills and restarts nodes so).
    pub database: Option<Arc<Database>>,
    /// How long a read lease lasts, if this node grants them to
    /// subscribers (see [`crate::contract::push`]); `None`: it does not,
    /// and answers writes without waiting on anyone.
    pub read_lease: Option<Duration>,
}

impl NodeOptions {
    pub fn new(id: NodeId, address: impl Into<String>) -> Self {
        NodeOptions {
            id,
            address: address.into(),
            path: None,
            snapshot_every: crate::local::DEFAULT_SNAPSHOT_EVERY,
            bootstrap: Bootstrap::Single,
            heartbeat_ms: 100,
            clock: Arc::new(SystemClock),
            transport: None,
            secret: None,
            database: None,
            read_lease: None,
        }
    }
}

pub struct RaftMetastore {
    id: NodeId,
    /// Stamps this node's proposals.
    stamps: Arc<Stamps>,
    raft: Raft,
    /// Applied state; the state machine writes it, reads take a read lock
    /// only for in-memory work.
    state: Arc<RwLock<State>>,
    db: Arc<Database>,
    /// Confirms leadership for reads.
    reader: Arc<Reader>,
    /// Subscriptions to pushed changes and their read leases, when this
    /// node grants them (see [`crate::read_leases`]).
    read_leases: Option<Arc<ReadLeases>>,
    incoming: super::network::Incoming,
    /// Where proposals wait to share an entry.
    group_commit: Arc<GroupCommit>,
    /// Group members' heartbeats heard while leading (never in the log).
    liveness: Arc<Liveness>,
    /// Requests waiting for a group to change.
    group_watch: Arc<GroupWatch>,
    /// Agents' cache addresses heard while leading (never in the log).
    peers: super::peer_book::PeerBook,
    /// What connections to this node must prove (see [`crate::peer_auth`]).
    secret: Option<crate::peer_auth::ClusterSecret>,
    /// Expire sessions and end rebalances while this node leads.
    _group_timers: GroupTimers,
    /// One membership change at a time from this node (see
    /// [`RaftMetastore::membership_change`]).
    changing_membership: tokio::sync::Mutex<()>,
}

fn storage<E: std::fmt::Display>(e: E) -> MetaError {
    MetaError::Storage(e.to_string())
}

pub(super) fn open_database(path: Option<&PathBuf>) -> Result<Database, MetaError> {
    let db = match path {
        Some(path) => {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(storage)?;
            }
            Database::create(path).map_err(|e| storage(format!("{}: {e}", path.display())))?
        }
        None => Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(storage)?,
    };
    prepare_database(db, path)
}

/// A node's database on `backend` (the simulation's disks, which lose what
/// was not synced when their node crashes), ready as [`NodeOptions::database`].
pub fn database_on(backend: impl redb::StorageBackend) -> Result<Database, MetaError> {
    let db = Database::builder()
        .create_with_backend(backend)
        .map_err(storage)?;
    prepare_database(db, None)
}

/// Checks the database holds this floe's format (or nothing yet) and makes
/// its tables.
fn prepare_database(db: Database, path: Option<&PathBuf>) -> Result<Database, MetaError> {
    // The command log of floe before Raft kept tables named "log" and
    // "snapshot"; starting empty over one would silently lose its topics.
    let read = db.begin_read().map_err(storage)?;
    let legacy = read
        .list_tables()
        .map_err(storage)?
        .any(|t| t.name() == "log" || t.name() == "snapshot");
    drop(read);
    if legacy {
        return Err(MetaError::Storage(format!(
            "{} holds a pre-Raft metastore log, which this floe cannot read; \
             move it away to start a new metastore",
            path.map(|p| p.display().to_string()).unwrap_or_default()
        )));
    }
    let where_ = || path.map(|p| p.display().to_string()).unwrap_or_default();
    let txn = db.begin_write().map_err(storage)?;
    txn.open_table(LOG).map_err(storage)?;
    txn.open_table(SNAPSHOT).map_err(storage)?;
    {
        let mut meta = txn.open_table(META).map_err(storage)?;
        let found = meta
            .get(FORMAT_KEY)
            .map_err(storage)?
            .map(|v| v.value().to_vec());
        match found.as_deref() {
            Some([FORMAT_VERSION]) => {}
            Some(&[old]) if (OLDEST_READABLE_FORMAT..FORMAT_VERSION).contains(&old) => {
                upgrade_snapshot(&txn, old).map_err(|e| {
                    MetaError::Storage(format!(
                        "{}: upgrading metastore format {old} to {FORMAT_VERSION}: {e}",
                        where_()
                    ))
                })?;
                meta.insert(FORMAT_KEY, [FORMAT_VERSION].as_slice())
                    .map_err(storage)?;
                tracing::info!(
                    file = %where_(),
                    "metastore upgraded from format {old} to {FORMAT_VERSION}"
                );
            }
            // A log written before formats were versioned, by a newer floe,
            // or by one too old to upgrade would be decoded as something
            // else: refuse it.
            Some(other) => {
                return Err(MetaError::Storage(format!(
                    "{} holds metastore format {other:?}; this floe reads formats \
                     {OLDEST_READABLE_FORMAT} to {FORMAT_VERSION}",
                    where_()
                )));
            }
            None if !meta.is_empty().map_err(storage)? => {
                return Err(MetaError::Storage(format!(
                    "{} holds a metastore log from before format versions (0); this floe \
                     reads format {FORMAT_VERSION}: move it away to start a new metastore",
                    where_()
                )));
            }
            None => {
                meta.insert(FORMAT_KEY, [FORMAT_VERSION].as_slice())
                    .map_err(storage)?;
            }
        }
    }
    txn.commit().map_err(storage)?;
    Ok(db)
}

/// Rewrites the stored snapshot, written in format `old`, in the current
/// encoding (inside the caller's transaction, which also records the new
/// format: a crash leaves either the old file or the upgraded one). Log
/// entries need no rewrite: every format this floe reads shares their
/// encoding (see [`crate::format`]).
fn upgrade_snapshot(txn: &redb::WriteTransaction, old: u8) -> Result<(), String> {
    let mut table = txn.open_table(SNAPSHOT).map_err(|e| e.to_string())?;
    let data = table
        .get(SNAPSHOT_DATA)
        .map_err(|e| e.to_string())?
        .map(|v| v.value().to_vec());
    if let Some(data) = data {
        let state = decode_snapshot_of(old, &data)?;
        let data = encode_snapshot(&state).map_err(|e| e.to_string())?;
        table
            .insert(SNAPSHOT_DATA, data.as_slice())
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Where the format of the log entries and snapshots in a metastore file is kept.
const FORMAT_KEY: &str = "format";

fn not_leader(forward: ForwardToLeader<NodeId, NodeAddress>) -> MetaError {
    MetaError::NotLeader(forward.leader_node.map(|n| n.address))
}

/// What a refused write (a command or a membership change) means to a client.
pub(crate) fn write_error(
    e: RaftError<NodeId, ClientWriteError<NodeId, NodeAddress>>,
) -> MetaError {
    match e {
        // Refused before it entered the log, or removed from it: not applied.
        RaftError::APIError(ClientWriteError::ForwardToLeader(forward)) => not_leader(forward),
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            Refusal::InvalidMembership(e.to_string()).into()
        }
        // The Raft stopped: the entry may be in the log.
        other => MetaError::maybe_applied(other.to_string()),
    }
}

impl RaftMetastore {
    /// Opens (or creates) a node's storage and starts its Raft.
    pub async fn start(options: NodeOptions) -> Result<RaftMetastore, MetaError> {
        let db = match &options.database {
            Some(db) => db.clone(),
            None => Arc::new(open_database(options.path.as_ref())?),
        };
        let log_store = LogStore::new(db.clone());
        let group_watch = Arc::new(GroupWatch::default());
        let read_leases = options.read_lease.map(|l| Arc::new(ReadLeases::new(l)));
        let (state_machine, state, stamps) = StateMachine::open(
            db.clone(),
            options.clock.clone(),
            group_watch.clone(),
            read_leases.clone(),
        )
        .await
        .map_err(storage)?;
        let heartbeat = options.heartbeat_ms.max(10);
        let config = Config {
            cluster_name: "floe-metastore".into(),
            heartbeat_interval: heartbeat,
            election_timeout_min: heartbeat * 3,
            election_timeout_max: heartbeat * 6,
            // A snapshot is the whole state in one message; give it time.
            install_snapshot_timeout: 30_000,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(options.snapshot_every.max(1)),
            // Keep a little log behind the snapshot so a briefly lagging
            // follower catches up from the log rather than a whole snapshot.
            max_in_snapshot_log_to_keep: (options.snapshot_every / 10).min(1000),
            // An append must be answered within one heartbeat interval, or it
            // is cancelled and resent; keep each one small enough (commits of
            // many batches are tens of KiB each) to make that easy.
            max_payload_entries: 64,
            ..Config::default()
        }
        .validate()
        .map_err(storage)?;
        let follower_lease = Duration::from_millis(config.election_timeout_max);
        let raft = Raft::new(
            options.id,
            Arc::new(config),
            Network::new(
                options.id,
                options.transport.clone(),
                options.secret.clone(),
            ),
            log_store,
            state_machine,
        )
        .await
        .map_err(storage)?;
        let lease = Lease::follow(&raft, follower_lease);
        if let Some(read_leases) = &read_leases {
            super::subscriptions::follow_leadership(&raft, read_leases.clone());
        }

        if !raft.is_initialized().await.map_err(storage)? {
            let voters = match &options.bootstrap {
                Bootstrap::Single => Some(BTreeMap::from([(options.id, options.address.clone())])),
                Bootstrap::Cluster(peers) => Some(peers.clone()),
                Bootstrap::Join => None,
            };
            if let Some(voters) = voters {
                let nodes: BTreeMap<NodeId, NodeAddress> = voters
                    .into_iter()
                    .map(|(id, address)| (id, NodeAddress { address }))
                    .collect();
                match raft.initialize(nodes).await {
                    Ok(()) => tracing::info!(id = options.id, "metastore group bootstrapped"),
                    // Another node bootstrapped the same group first and reached us.
                    Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                    Err(e) => return Err(storage(e)),
                }
            }
        }
        // A group of one voter has no other clock to hold its own to. (Not
        // `Bootstrap::Single`: a group grown from one node keeps it.) A new
        // node takes its wall clock anyway, and one waiting to join has no
        // membership to wait for.
        if !stamps.is_fresh() {
            let voters = raft
                .wait(Some(Duration::from_secs(1)))
                .metrics(
                    |m| m.membership_config.membership().voter_ids().count() > 0,
                    "membership loaded",
                )
                .await
                .map_or(0, |m| m.membership_config.membership().voter_ids().count());
            if voters == 1 {
                stamps.trust_wall();
            }
        }
        let group_commit = Arc::new(GroupCommit::start(
            raft.clone(),
            stamps.clone(),
            WRITE_TIMEOUT,
        ));
        let liveness = Arc::new(Liveness::default());
        let leading = {
            let (raft, lease, id) = (raft.clone(), lease.clone(), options.id);
            Box::new(move || {
                let metrics = raft.metrics();
                let m = metrics.borrow();
                (m.current_leader == Some(id) && lease.is_valid()).then_some(m.current_term)
            })
        };
        let propose = {
            let group_commit = group_commit.clone();
            Box::new(move |command| {
                let group_commit = group_commit.clone();
                Box::pin(async move { group_commit.propose(command).await }) as _
            })
        };
        let group_timers = GroupTimers::start(
            leading,
            state.clone(),
            stamps.clone(),
            propose,
            liveness.clone(),
        );
        Ok(RaftMetastore {
            id: options.id,
            stamps,
            reader: Arc::new(Reader {
                raft: raft.clone(),
                lease,
                state: state.clone(),
            }),
            raft,
            state,
            db,
            read_leases,
            incoming: Default::default(),
            group_commit,
            liveness,
            group_watch,
            peers: Default::default(),
            secret: options.secret.clone(),
            _group_timers: group_timers,
            changing_membership: Default::default(),
        })
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    pub(crate) fn raft(&self) -> &Raft {
        &self.raft
    }

    /// The database holding this node's log, vote and snapshot.
    pub fn database(&self) -> Arc<Database> {
        self.db.clone()
    }

    /// Hands a Raft message from another node to this one (what the
    /// metastore port does for a `PeerRequest`; the simulation's network
    /// calls it directly).
    pub async fn handle_peer(&self, request: PeerRequest) -> PeerResponse {
        super::network::handle(&self.raft, &self.incoming, request).await
    }

    /// Whether this node leads its group now, as far as it knows. (A
    /// leader removed from its group steps down to learner but may still
    /// name itself as the leader it last knew: its role decides.)
    pub fn leads(&self) -> bool {
        let watch = self.raft.metrics();
        let metrics = watch.borrow();
        metrics.state == openraft::ServerState::Leader && metrics.current_leader == Some(self.id)
    }

    /// The index of the last log entry this node applied.
    pub fn applied_index(&self) -> u64 {
        self.raft
            .metrics()
            .borrow()
            .last_applied
            .map_or(0, |l| l.index)
    }

    /// Reads this node's applied state as it is, leader or not (tests, and
    /// the simulation's check that replicas agree).
    pub fn local_state<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.state.read().expect("metastore state lock poisoned"))
    }

    /// The applied state itself, for copies made off the async workers.
    pub(super) fn shared_state(&self) -> Arc<RwLock<State>> {
        self.state.clone()
    }

    /// The snapshot this node is receiving from a leader, piece by piece.
    pub(crate) fn incoming(&self) -> &super::network::Incoming {
        &self.incoming
    }

    /// Waits until this node leads (a single-voter group elects itself at once).
    pub async fn wait_until_leader(&self, timeout: Duration) -> Result<(), MetaError> {
        self.raft
            .wait(Some(timeout))
            .current_leader(self.id, "waiting to lead")
            .await
            .map(|_| ())
            .map_err(|e| {
                MetaError::unavailable(format!(
                    "metastore node {} did not become leader: {e}",
                    self.id
                ))
            })
    }

    /// Stops this node's Raft (its storage stays as it is).
    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "metastore raft did not stop cleanly");
        }
    }

    /// Leave to change the group's membership, one change at a time from
    /// this node. A leader that is removing itself (the new half of a joint
    /// config, or the whole config, leaves it out) may not start another
    /// change: openraft's leader would then append a membership it is not a
    /// member of. It finishes its own removal instead (a caller may have given
    /// up between the two steps) and answers `NotLeader`: it steps down once
    /// the removal is applied, and the next leader takes the change.
    async fn membership_change(
        &self,
        removing_self: bool,
    ) -> Result<tokio::sync::MutexGuard<'_, ()>, MetaError> {
        let turn = self.changing_membership.lock().await;
        // Read in the Raft core, in order with the changes sent to it
        // (its published metrics may lag a change it has just appended).
        let id = self.id;
        let (leading, staying, member, leader) = self
            .raft
            .with_raft_state(move |st| {
                let membership = st.membership_state.effective().membership();
                let staying = membership
                    .get_joint_config()
                    .last()
                    .is_some_and(|config| config.contains(&id));
                let member = membership.nodes().any(|(node, _)| *node == id);
                let leader = st
                    .vote_ref()
                    .leader_id()
                    .voted_for()
                    .and_then(|l| membership.get_node(&l).map(|n| n.address.clone()));
                (
                    st.server_state == openraft::ServerState::Leader,
                    staying,
                    member,
                    leader,
                )
            })
            .await
            .map_err(|e| MetaError::unavailable(format!("metastore node {id}: {e}")))?;
        if staying || (removing_self && member) {
            return Ok(turn);
        }
        if leading && member {
            let finish = ChangeMembers::RemoveVoters(BTreeSet::from([self.id]));
            if let Err(e) = self.raft.change_membership(finish, false).await {
                tracing::warn!(error = %e, "finishing this node's removal from the group");
            }
        }
        Err(MetaError::NotLeader(leader.filter(|_| !leading)))
    }

    /// Adds a node to the group: first as a learner that copies the log, then
    /// as a voter. Must be asked of the leader.
    pub async fn add_node(&self, id: NodeId, address: String) -> Result<(), MetaError> {
        let _turn = self.membership_change(false).await?;
        let learning = self.raft.add_learner(
            id,
            NodeAddress {
                address: address.clone(),
            },
            true,
        );
        match tokio::time::timeout(CATCH_UP_TIMEOUT, learning).await {
            Ok(added) => added.map_err(write_error)?,
            Err(_) => {
                return Err(MetaError::maybe_applied(format!(
                    "node {id} at {address} did not catch up within {CATCH_UP_TIMEOUT:?}; \
                     it stays a learner until it does or is removed (remove-node)"
                )));
            }
        };
        self.raft
            .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
            .await
            // The learner is in the group by now, whatever this answer says.
            .map_err(|e| {
                MetaError::maybe_applied(format!(
                    "node {id} was added as a learner, but not as a voter: {}",
                    write_error(e)
                ))
            })?;
        tracing::info!(node = id, "metastore node added");
        Ok(())
    }

    /// Removes a node from the group (it stops receiving the log). Must be
    /// asked of the leader.
    pub async fn remove_node(&self, id: NodeId) -> Result<(), MetaError> {
        let _turn = self.membership_change(id == self.id).await?;
        let (leading, voters, members) = {
            let metrics = self.raft.metrics();
            let metrics = metrics.borrow();
            let membership = metrics.membership_config.membership();
            (
                metrics.current_leader == Some(self.id),
                membership.voter_ids().collect::<BTreeSet<NodeId>>(),
                membership
                    .nodes()
                    .map(|(id, _)| *id)
                    .collect::<BTreeSet<NodeId>>(),
            )
        };
        // Only the leader's view is current; a follower passes the request on.
        if leading {
            if !members.contains(&id) {
                return Err(Refusal::InvalidMembership(format!(
                    "node {id} is not a member (members: {members:?})"
                ))
                .into());
            }
            if voters.len() == 1 && voters.contains(&id) {
                return Err(Refusal::InvalidMembership(format!(
                    "node {id} is the group's last voter"
                ))
                .into());
            }
        }
        let change = if voters.contains(&id) {
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        };
        self.raft
            .change_membership(change, false)
            .await
            .map_err(write_error)?;
        tracing::info!(node = id, "metastore node removed");
        Ok(())
    }

    /// The secret connections to this node must prove, if any.
    pub fn secret(&self) -> Option<&crate::peer_auth::ClusterSecret> {
        self.secret.as_ref()
    }

    pub fn status(&self) -> ClusterStatus {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voter_ids: BTreeSet<NodeId> = membership.voter_ids().collect();
        let mut voters = BTreeMap::new();
        let mut learners = BTreeMap::new();
        for (id, node) in membership.nodes() {
            let list = if voter_ids.contains(id) {
                &mut voters
            } else {
                &mut learners
            };
            list.insert(*id, node.address.clone());
        }
        ClusterStatus {
            id: self.id,
            role: format!("{:?}", metrics.state),
            term: metrics.current_term,
            leader: metrics.current_leader,
            last_log_index: metrics.last_log_index,
            last_applied_index: metrics.last_applied.map(|l| l.index),
            snapshot_index: metrics.snapshot.map(|l| l.index),
            log_entries: super::log_store::log_entries(&self.db).unwrap_or(0),
            voters,
            learners,
            backend: "raft".into(),
        }
    }
}

/// What a linearizable read needs: the node's Raft handle, lease and
/// state (cloned into tasks that read, such as a subscription's).
#[derive(Clone)]
pub(super) struct Reader {
    raft: Raft,
    lease: Lease,
    state: Arc<RwLock<State>>,
}

impl Reader {
    /// Runs `f` on the state once this node has confirmed it leads and has
    /// applied everything committed before the read began.
    pub(super) async fn read<T: Send, F: FnOnce(&State) -> T + Clone + Send>(
        &self,
        f: F,
    ) -> Result<T, MetaError> {
        if self.lease.is_valid() {
            return Ok(f(&self
                .state
                .read()
                .expect("metastore state lock poisoned")));
        }
        // openraft confirms the leadership and waits for what it knows is
        // committed; a leader that restarted into its own term may know less
        // than was committed (its commit index is saved lazily), so the read
        // also waits until everything its log held when it began to lead is
        // applied (see `Lease`).
        let confirmed = async {
            self.raft.ensure_linearizable().await?;
            // Observed now, not through the lease's task, which may not have
            // seen this leadership yet (or already seen it end).
            let Some(start) = self.lease.observe(&self.raft.metrics().borrow()) else {
                return Ok(false);
            };
            let wait = self.raft.wait(None);
            let caught_up =
                wait.applied_index_at_least(Some(start), "a new leader applies its log");
            if caught_up.await.is_err() {
                return Err(RaftError::Fatal(openraft::error::Fatal::Stopped));
            }
            Ok(true)
        };
        match tokio::time::timeout(READ_TIMEOUT, confirmed).await {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => {
                return Err(MetaError::unavailable(
                    "this node stopped leading while it confirmed the read",
                ));
            }
            Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(forward)))) => {
                return Err(not_leader(forward));
            }
            Ok(Err(e)) => return Err(MetaError::unavailable(e.to_string())),
            Err(_) => {
                return Err(MetaError::unavailable(format!(
                    "no quorum confirmed the leader within {READ_TIMEOUT:?}"
                )));
            }
        }
        Ok(f(&self
            .state
            .read()
            .expect("metastore state lock poisoned")))
    }
}

impl Sequencer for RaftMetastore {
    /// Proposes `command`, stamped with this node's clock (bounded, see
    /// [`Stamps`]): only a leader's proposal is accepted, so stamps are
    /// always a leader's time.
    /// While this node grants read leases, every write is answered only
    /// once every lease holder has the notices sent so far (see
    /// [`ReadLeases::settled`]): whatever it changed, and whatever an
    /// earlier write it answers again from the ledger (a retried commit)
    /// changed.
    async fn propose(&self, command: Command) -> Result<Reply, MetaError> {
        let reply = self.group_commit.propose(command).await?;
        if let Some(read_leases) = &self.read_leases {
            read_leases.observe_leadership(super::subscriptions::leading_term(&self.raft));
            read_leases.settled().await;
        }
        Ok(reply)
    }

    /// Runs `f` on the state once this node has confirmed it leads and has
    /// applied everything committed before the read began.
    async fn read<T: Send, F: FnOnce(&State) -> T + Clone + Send>(
        &self,
        f: F,
    ) -> Result<T, MetaError> {
        self.reader.read(f).await
    }

    /// Reads are served by the leader: ages are on its clock, the one that
    /// stamped the heartbeats.
    fn now_ms(&self) -> i64 {
        self.stamps.now_ms()
    }

    fn new_id(&self) -> Uuid {
        crate::random_id()
    }

    async fn read_heard<T: Send, F: FnOnce(&State) -> (T, Option<Heard>) + Clone + Send>(
        &self,
        f: F,
    ) -> Result<T, MetaError> {
        let (answer, heard) = self.read(f).await?;
        if let Some(Heard { group, member }) = heard {
            let term = self.raft.metrics().borrow().current_term;
            self.liveness.heard(term, &group, &member, self.now_ms());
        }
        Ok(answer)
    }

    async fn cache_peers(
        &self,
        announce: Option<crate::peers::CachePeer>,
    ) -> Result<Vec<crate::peers::CachePeer>, MetaError> {
        // Only the leader answers: a follower's book would be empty.
        self.read(|_| ()).await?;
        Ok(self.peers.announce(announce, self.now_ms()))
    }

    async fn quorum(&self) -> Result<crate::quorum::Quorum, MetaError> {
        // Only the leader knows the others' progress: a follower answers
        // that it does not lead, and the client asks the leader.
        self.read(|_| ()).await?;
        let metrics = self.raft.metrics().borrow().clone();
        if metrics.current_leader != Some(self.id) {
            return Err(MetaError::unavailable(
                "this node stopped leading while it described the quorum",
            ));
        }
        let membership = metrics.membership_config.membership();
        let voter_ids: BTreeSet<NodeId> = membership.voter_ids().collect();
        let members = membership
            .nodes()
            .map(|(id, node)| (*id, (node.address.clone(), voter_ids.contains(id))))
            .collect();
        let matched = metrics
            .replication
            .iter()
            .flatten()
            .map(|(id, log_id)| (*id, log_id.map(|l| l.index)))
            .collect();
        Ok(crate::quorum::quorum_of(
            self.id,
            metrics.current_term,
            metrics.last_applied.map(|l| l.index),
            metrics.last_log_index,
            &members,
            &matched,
            self.now_ms(),
        ))
    }

    async fn await_group(&self, wait: AwaitGroup) -> Result<Option<MemberView>, MetaError> {
        super::group_watch::await_change(self, &self.group_watch, wait).await
    }

    async fn subscribe(&self) -> Result<crate::contract::push::Subscription, MetaError> {
        let Some(read_leases) = &self.read_leases else {
            return Err(MetaError::unavailable(
                "this metastore node grants no read leases",
            ));
        };
        super::subscriptions::open(&self.raft, &self.reader, read_leases).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Metastore;

    /// An in-memory node with one topic, and how to commit one batch to it
    /// in an object of a given key.
    async fn one_topic_node() -> (Arc<RaftMetastore>, impl Fn(String) -> Commit + Clone) {
        let node = Arc::new(RaftMetastore::in_memory().await.unwrap());
        let topic = node
            .create_topic(NewTopic {
                name: "t".into(),
                partitions: 1,
                configs: Default::default(),
            })
            .await
            .unwrap();
        let not_before_ms = node.clock().await.unwrap();
        let commit = move |object_key| Commit {
            object_key,
            object_size: 10,
            batches: vec![CommitBatch {
                topic_id: topic.id,
                partition: 0,
                position: 0,
                length: 10,
                record_count: 1,
                max_timestamp: 0,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            }],
            not_before_ms,
        };
        (node, commit)
    }

    /// Commands proposed together share entries, each answered as its own:
    /// here a hundred commits of three topics, in one go.
    #[tokio::test]
    async fn proposals_waiting_together_share_one_entry() {
        let (node, commit) = one_topic_node().await;
        let entries_before = node.status().last_log_index.unwrap();
        let commits: Vec<_> = (0..100)
            .map(|n| {
                let (node, commit) = (node.clone(), commit.clone());
                tokio::spawn(async move { node.commit(commit(format!("ingest/{n}"))).await })
            })
            .collect();
        let mut offsets = Vec::new();
        for commit in commits {
            offsets.push(commit.await.unwrap().unwrap()[0].clone().unwrap());
        }
        // Spawned in order and queued in order: applied in order.
        assert_eq!(offsets, (0..100).collect::<Vec<i64>>());
        let entries = node.status().last_log_index.unwrap() - entries_before;
        assert!(entries <= 10, "100 commits took {entries} entries");
    }

    /// Senders that send again as soon as they are answered (agents commit
    /// one file after another) keep sharing entries: the proposer waits for
    /// those it just answered rather than proposing without them, which
    /// splits them into two cohorts taking turns (twice the entries, each
    /// sender waiting out the other cohort's entry; here, where an entry
    /// takes no time, 152 entries for 320 commits). Paused time: the wait's
    /// deadline never passes while a sender is on its way.
    #[tokio::test(start_paused = true)]
    async fn answered_senders_come_back_into_one_entry() {
        const SENDERS: usize = 16;
        const EACH: usize = 20;
        let (node, commit) = one_topic_node().await;
        let entries_before = node.status().last_log_index.unwrap();
        let senders: Vec<_> = (0..SENDERS)
            .map(|s| {
                let (node, commit) = (node.clone(), commit.clone());
                tokio::spawn(async move {
                    for n in 0..EACH {
                        node.commit(commit(format!("ingest/{s}/{n}")))
                            .await
                            .unwrap();
                        // The way back to the sender and here again: a
                        // round trip, longer for some than for others
                        // (in turns of the scheduler: time stands still
                        // while any task can run).
                        for _ in 0..10 * s {
                            tokio::task::yield_now().await;
                        }
                    }
                })
            })
            .collect();
        for sender in senders {
            sender.await.unwrap();
        }
        let entries = node.status().last_log_index.unwrap() - entries_before;
        // One entry per round of all senders, and a few while they line up.
        assert!(
            entries as usize <= EACH + 4,
            "{} commits took {entries} entries",
            SENDERS * EACH
        );
    }

    /// A file written before log formats were versioned holds entries that
    /// would now decode as something else: it is refused, never replayed.
    #[tokio::test]
    async fn a_metastore_file_of_another_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.redb");
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(META)
                .unwrap()
                .insert("vote", b"old".as_slice())
                .unwrap();
            txn.commit().unwrap();
        }
        let err = crate::LocalMetastore::open(&path)
            .await
            .err()
            .expect("refused");
        assert!(err.to_string().contains("before format versions"), "{err}");

        // A new file is stamped with this format (reopening one is the
        // durable conformance test's part).
        let fresh = dir.path().join("fresh.redb");
        let m = crate::LocalMetastore::open(&fresh).await.unwrap();
        let format =
            m.db.begin_read()
                .unwrap()
                .open_table(META)
                .unwrap()
                .get(FORMAT_KEY)
                .unwrap();
        assert_eq!(format.unwrap().value(), [FORMAT_VERSION].as_slice());
    }
}
