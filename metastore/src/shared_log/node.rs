//! [`LogNode`]: a metastore node whose log is a [`SharedLog`].
//!
//! Three tasks share one [`Node`]: the *lease keeper* claims or renews the
//! lease every [`LogNodeOptions::lease`]/8 and, when it begins to lead (or
//! stands by), reads the log to its end; the *writer* appends the commands
//! proposed, a batch per entry, one entry at a time; the group timers
//! expire sessions while this node leads. Whoever changes the state holds
//! the pen: the writer from its append to its apply, a catch-up throughout,
//! so entries are applied once each, in index order.
//!
//! Invariants, checked where they are kept:
//! - the state is the log's entries up to `applied`, applied in order
//!   ([`Node::apply_read`] refuses a gap; an own entry is applied only at
//!   `applied + 1`, after the store committed it there);
//! - reads are answered only while the lease is known held, from a time
//!   measured before the claim that renewed it, for half the lease: another
//!   node can take it only once it lapsed on the store's clock;
//! - an append whose fate is unknown (an error, no answer in time) makes
//!   this node stop leading until it has read the log again.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{MutexGuard, Notify};
use tokio::time::Instant;
use uuid::Uuid;

use super::writer::Writer;
use super::*;
use crate::contract::quorum::ClusterStatus;
use crate::format::{FORMAT_VERSION, OLDEST_READABLE_FORMAT, decode_snapshot_of, encode_snapshot};
use crate::groups::{AwaitGroup, Heard, MemberView};
use crate::raft::group_watch::GroupWatch;
use crate::raft::liveness::{GroupTimers, Liveness};
use crate::raft::peer_book::PeerBook;
use crate::raft::stamps::Stamps;
use crate::state::{Command, Proposal, Reply, State};
use crate::types::MetaError;
use crate::{Clock, Sequencer, SystemClock};

/// Entries read from the store in one call while catching up.
const READ_PAGE: usize = 1_000;
/// How long an append may take before its fate is called unknown.
pub(super) const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long any other call to the store may take: a link that drops
/// everything must not hold the pen (or a shutdown) for good. Above the
/// store's own deadline (PostgreSQL's is 10 s), so that the store can
/// close a connection whose statement did not answer before this drops it.
const CALL_TIMEOUT: Duration = Duration::from_secs(12);
/// How often a failing store is reported (it is retried far more often).
const WARN_EVERY: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub struct LogNodeOptions {
    pub id: NodeId,
    /// Where clients reach this node (forwarded to by the others).
    pub address: String,
    /// How long a claim of the lease lasts on the store's clock: a dead
    /// leader is replaced within about this long.
    pub lease: Duration,
    /// Entries between snapshots.
    pub snapshot_every: u64,
    /// This machine's wall clock, until the store first tells its own.
    pub clock: Arc<dyn Clock>,
    /// What connections to this node's port must prove, if it serves one.
    pub secret: Option<crate::peer_auth::ClusterSecret>,
}

impl LogNodeOptions {
    pub fn new(id: NodeId, address: impl Into<String>) -> Self {
        LogNodeOptions {
            id,
            address: address.into(),
            lease: Duration::from_secs(4),
            snapshot_every: crate::local::DEFAULT_SNAPSHOT_EVERY,
            clock: Arc::new(SystemClock),
            secret: None,
        }
    }
}

/// The store's clock, as this node reads it: the store's time in the last
/// claim's answer, moved on by this node's monotonic clock since that
/// answer arrived. Never ahead of the store's (its time was read before
/// the answer came back), and the node's wall clock plays no part once a
/// claim was answered: a step in it (a bad NTP step) cannot move the
/// group's time, which decides retention and expiries.
#[derive(Debug)]
struct StoreClock {
    /// Until a claim is answered: this machine's wall clock.
    wall: Arc<dyn Clock>,
    /// When the last claim's answer arrived, and the store's time in it.
    anchor: Mutex<Option<(Instant, i64)>>,
}

impl StoreClock {
    fn observe(&self, received: Instant, store_ms: i64) {
        *self.anchor.lock().expect("store clock lock") = Some((received, store_ms));
    }
}

impl Clock for StoreClock {
    fn now_ms(&self) -> i64 {
        match *self.anchor.lock().expect("store clock lock") {
            Some((received, store_ms)) => {
                store_ms.saturating_add(received.elapsed().as_millis() as i64)
            }
            None => self.wall.now_ms(),
        }
    }
}

/// This node leads in `term`, and may answer reads until `until`.
#[derive(Debug, Clone, Copy)]
struct Leading {
    term: u64,
    until: Instant,
}

pub(super) struct Node {
    id: NodeId,
    me: Candidate,
    log: Arc<dyn SharedLog>,
    state: Arc<RwLock<State>>,
    /// The index of the last entry applied to `state`.
    applied: AtomicU64,
    /// Held by whoever changes `state` (see the module's doc).
    pen: tokio::sync::Mutex<()>,
    leading: Mutex<Option<Leading>>,
    /// The last other holder of the lease heard of: where to send clients.
    leader: Mutex<Option<(NodeId, String)>>,
    /// The last term the store named.
    term_seen: AtomicU64,
    stamps: Arc<Stamps>,
    store_clock: Arc<StoreClock>,
    lease: Duration,
    snapshot_every: u64,
    /// The index of the latest snapshot stored or loaded.
    snapshot_at: AtomicU64,
    snapshotting: AtomicBool,
    group_watch: GroupWatch,
    liveness: Arc<Liveness>,
    peers: PeerBook,
    /// Wakes the lease keeper (after the writer stepped down).
    wake: Notify,
    secret: Option<crate::peer_auth::ClusterSecret>,
}

/// A metastore node on a shared log: it leads while it holds the lease,
/// and answers other nodes' clients with the leader's address.
pub struct LogNode {
    node: Arc<Node>,
    writer: Writer,
    tasks: Vec<tokio::task::AbortHandle>,
    _timers: GroupTimers,
}

impl Drop for LogNode {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}

impl LogNode {
    /// Reads what `log` holds and starts keeping the lease; answers once
    /// the store has answered (the node may not lead yet).
    pub async fn start(
        log: Arc<dyn SharedLog>,
        options: LogNodeOptions,
    ) -> Result<LogNode, MetaError> {
        let store_clock = Arc::new(StoreClock {
            wall: options.clock.clone(),
            anchor: Mutex::new(None),
        });
        let stamps = Arc::new(Stamps::new(store_clock.clone(), 0, false));
        let node = Arc::new(Node {
            id: options.id,
            me: Candidate {
                holder: crate::random_id(),
                node: options.id,
                address: options.address.clone(),
            },
            log,
            state: Default::default(),
            applied: AtomicU64::new(0),
            pen: Default::default(),
            leading: Mutex::new(None),
            leader: Mutex::new(None),
            term_seen: AtomicU64::new(0),
            stamps: stamps.clone(),
            store_clock,
            lease: options.lease.max(Duration::from_millis(100)),
            snapshot_every: options.snapshot_every.max(1),
            snapshot_at: AtomicU64::new(0),
            snapshotting: AtomicBool::new(false),
            group_watch: GroupWatch::default(),
            liveness: Default::default(),
            peers: Default::default(),
            wake: Notify::new(),
            secret: options.secret.clone(),
        });
        // What the store holds now, before anything is served: a store that
        // cannot be read is said at start, in one line.
        {
            let pen = node.pen.lock().await;
            node.catch_up(&pen).await.map_err(|e| {
                MetaError::Storage(format!(
                    "reading the metastore log in {}: {e}",
                    node.log.describe()
                ))
            })?;
        }
        // A first claim before answering: a node alone leads at once.
        if let Err(e) = node.take_turn().await {
            tracing::warn!(node = node.id, error = %e, "the first claim of the metastore lease failed");
        }
        let writer = Writer::start(node.clone());
        let keeper = tokio::spawn(keep_lease(node.clone())).abort_handle();
        let leading = {
            let node = node.clone();
            Box::new(move || node.leading_term(true))
        };
        let propose = {
            let writer = writer.clone();
            Box::new(move |command| {
                let writer = writer.clone();
                Box::pin(async move { writer.propose(command).await }) as _
            })
        };
        let timers = GroupTimers::start(
            leading,
            node.state.clone(),
            stamps,
            propose,
            node.liveness.clone(),
        );
        Ok(LogNode {
            node,
            writer,
            tasks: vec![keeper],
            _timers: timers,
        })
    }

    pub fn id(&self) -> NodeId {
        self.node.id
    }

    /// Whether this node leads now, with a lease it may read under.
    pub fn leads(&self) -> bool {
        self.node.leading_term(true).is_some()
    }

    /// Waits until this node leads.
    pub async fn wait_until_leader(&self, timeout: Duration) -> Result<(), MetaError> {
        let deadline = Instant::now() + timeout;
        while !self.leads() {
            if Instant::now() >= deadline {
                return Err(MetaError::unavailable(format!(
                    "metastore node {} did not lead within {timeout:?}",
                    self.node.id
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// The secret connections to this node must prove, if any.
    pub fn secret(&self) -> Option<&crate::peer_auth::ClusterSecret> {
        self.node.secret.as_ref()
    }

    /// Reads this node's applied state as it is, leader or not (tests).
    pub fn local_state<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self
            .node
            .state
            .read()
            .expect("metastore state lock poisoned"))
    }

    /// The index of the last entry this node applied.
    pub fn applied_index(&self) -> u64 {
        self.node.applied()
    }

    /// The store, in words (never a password).
    pub fn backend(&self) -> String {
        self.node.log.describe()
    }

    /// This node as `floe metastore status` shows it.
    pub async fn status(&self) -> ClusterStatus {
        let node = &self.node;
        let sizes = within("a count", node.log.sizes())
            .await
            .unwrap_or_default();
        let leads = self.leads();
        let leader = match leads {
            true => Some((node.id, node.me.address.clone())),
            false => node.leader.lock().expect("leader lock").clone(),
        };
        ClusterStatus {
            id: node.id,
            role: if leads { "Leader" } else { "Standby" }.into(),
            term: node.term_seen.load(Ordering::Relaxed),
            leader: leader.as_ref().map(|(id, _)| *id),
            last_log_index: sizes.last_index,
            last_applied_index: Some(node.applied()),
            snapshot_index: sizes.snapshot_index,
            log_entries: sizes.entries,
            voters: leader.into_iter().collect(),
            learners: Default::default(),
            backend: node.log.describe(),
        }
    }

    /// Takes a hold on GC for `hold_ms`, then copies the state (which then
    /// includes the hold), as a Raft node's backup does.
    pub async fn backup(&self, hold_ms: i64) -> Result<crate::contract::backup::Backup, MetaError> {
        use crate::Metastore;
        let held = self.hold_garbage(hold_ms).await?;
        let index = self.node.applied();
        crate::raft::backup::copy_state(self.node.state.clone(), index, held.until_ms).await
    }

    /// Stops where it stands, as a process that dies: no more claims, no
    /// more appends sent, the lease left to lapse (an append already sent
    /// may still land, as a statement on the wire would).
    pub async fn halt(&self) {
        self.tasks.iter().for_each(|t| t.abort());
        // After a turn of the lease keeper that may be under way elsewhere.
        let _pen = self.node.pen.lock().await;
        self.node.step_down("halted");
    }

    /// Stops leading and gives the lease back, so that another node takes
    /// over at once rather than after the lease (a rolling restart).
    pub async fn shutdown(&self) {
        self.tasks.iter().for_each(|t| t.abort());
        let node = &self.node;
        // After any append in flight: none starts once the lease is gone.
        let _pen = node.pen.lock().await;
        node.step_down("shutting down");
        if let Err(e) = within("a release", node.log.release(&node.me)).await {
            tracing::warn!(error = %e, "could not give the metastore lease back");
        }
    }
}

impl Node {
    fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    /// The term this node leads in; with `reading`, only while its lease
    /// lets it answer reads.
    fn leading_term(&self, reading: bool) -> Option<u64> {
        let leading = *self.leading.lock().expect("leading lock");
        leading
            .filter(|l| !reading || Instant::now() < l.until)
            .map(|l| l.term)
    }

    /// Stops leading (until the lease keeper has read the log again).
    /// A node that was leading wakes its lease keeper, to read the log and
    /// lead again at once if the lease is still its own. (Only then: a
    /// standby that woke itself would claim in a loop.)
    pub(super) fn step_down(&self, why: &str) {
        if self.leading.lock().expect("leading lock").take().is_some() {
            tracing::info!(node = self.id, why, "metastore node stopped leading");
            self.wake.notify_one();
        }
    }

    /// The error for a client of a node that does not lead.
    pub(super) fn not_leader(&self) -> MetaError {
        if self.leading_term(false).is_some() {
            return MetaError::unavailable("this node's metastore lease was not renewed lately");
        }
        MetaError::NotLeader(
            self.leader
                .lock()
                .expect("leader lock")
                .clone()
                .map(|(_, a)| a),
        )
    }

    /// Reads the log from `applied` to its end (from the latest snapshot,
    /// when the entries after `applied` are gone) and applies it.
    async fn catch_up(&self, _pen: &MutexGuard<'_, ()>) -> Result<(), LogError> {
        loop {
            let applied = self.applied();
            let entries = within("a read", self.log.read(applied, READ_PAGE)).await?;
            if entries.first().is_some_and(|e| e.index != applied + 1) {
                // Deleted behind a snapshot: start from the snapshot.
                let Some(snapshot) = within("a snapshot's read", self.log.snapshot()).await? else {
                    return Err(LogError(format!(
                        "the log continues at {} after {applied}, with no snapshot",
                        entries[0].index
                    )));
                };
                if snapshot.index <= applied {
                    return Err(LogError(format!(
                        "the log continues at {} after {applied}; its snapshot is at {}",
                        entries[0].index, snapshot.index
                    )));
                }
                self.install(snapshot).await?;
                continue;
            }
            if entries.is_empty() {
                return Ok(());
            }
            self.apply_read(entries)?;
        }
    }

    /// Replaces the state with a stored snapshot's.
    async fn install(&self, snapshot: StoredSnapshot) -> Result<(), LogError> {
        let index = snapshot.index;
        let state = crate::raft::blocking(move || {
            decode_snapshot_of(snapshot.format, &snapshot.state).map_err(openraft::AnyError::error)
        })
        .await
        .map_err(|e| LogError(format!("snapshot at {index}: {e}")))?;
        self.stamps.observe(state.clock_ms());
        // The index moves under the state's write lock, as everywhere: a
        // snapshot copied between the two would pair this state with the
        // index before it, and a node loading it would apply entries twice.
        let mut current = self.state.write().expect("metastore state lock poisoned");
        *current = state;
        self.applied.store(index, Ordering::Release);
        drop(current);
        self.snapshot_at.store(index, Ordering::Relaxed);
        tracing::info!(node = self.id, index, "metastore snapshot loaded");
        Ok(())
    }

    /// Applies entries read from the log, which must follow `applied`.
    fn apply_read(&self, entries: Vec<StoredEntry>) -> Result<(), LogError> {
        let mut changed = Vec::new();
        let mut state = self.state.write().expect("metastore state lock poisoned");
        for stored in entries {
            let expected = self.applied() + 1;
            if stored.index != expected {
                return Err(LogError(format!(
                    "entry {} read where {expected} was due",
                    stored.index
                )));
            }
            let proposal = decode_entry(&stored)?;
            proposal.command.groups_changed(&mut changed);
            state.apply_proposal(proposal);
            self.applied.store(stored.index, Ordering::Release);
        }
        self.stamps.observe(state.clock_ms());
        drop(state);
        changed.iter().for_each(|g| self.group_watch.changed(g));
        Ok(())
    }

    /// Applies this node's own entry, just committed at `index`.
    pub(super) fn apply_own(
        &self,
        _pen: &MutexGuard<'_, ()>,
        index: u64,
        proposal: Proposal,
    ) -> Reply {
        let mut changed = Vec::new();
        proposal.command.groups_changed(&mut changed);
        let mut state = self.state.write().expect("metastore state lock poisoned");
        assert_eq!(
            index,
            self.applied() + 1,
            "an own entry applied out of order"
        );
        let reply = state.apply_proposal(proposal);
        self.applied.store(index, Ordering::Release);
        self.stamps.observe(state.clock_ms());
        drop(state);
        changed.iter().for_each(|g| self.group_watch.changed(g));
        reply
    }

    /// Appends `command` as the next entry and applies it: the writer's
    /// one step (see [`Writer`]).
    pub(super) async fn append(self: &Arc<Node>, command: Command) -> Result<Reply, MetaError> {
        // A standby answers at once, not after the catch-up that holds the
        // pen (it may chase a growing log for a while).
        if self.leading_term(false).is_none() {
            return Err(self.not_leader());
        }
        let pen = self.pen.lock().await;
        let Some(term) = self.leading_term(false) else {
            return Err(self.not_leader());
        };
        let index = self.applied() + 1;
        let proposal = Proposal {
            at_ms: self.stamps.now_ms(),
            command,
        };
        let entry = postcard::to_stdvec(&proposal)
            .map_err(|e| MetaError::unavailable(format!("encoding an entry: {e}")))?;
        let stored = StoredEntry {
            index,
            format: FORMAT_VERSION,
            entry,
        };
        let appended = tokio::time::timeout(WRITE_TIMEOUT, self.log.append(term, stored)).await;
        match appended {
            Ok(Ok(Appended::Done)) => {
                let reply = self.apply_own(&pen, index, proposal);
                drop(pen);
                self.snapshot_if_due();
                Ok(reply)
            }
            Ok(Ok(Appended::Fenced)) => {
                self.step_down("another node holds the lease");
                Err(MetaError::NotLeader(None))
            }
            Ok(Ok(Appended::Taken)) => {
                self.step_down("another entry is at the index this node appended at");
                Err(MetaError::NotLeader(None))
            }
            Ok(Err(e)) => {
                self.step_down("an append failed");
                Err(MetaError::maybe_applied(format!(
                    "appending to {}: {e}",
                    self.log.describe()
                )))
            }
            Err(_) => {
                self.step_down("an append was not answered");
                Err(MetaError::maybe_applied(format!(
                    "{} did not answer an append within {WRITE_TIMEOUT:?}",
                    self.log.describe()
                )))
            }
        }
    }

    /// Stores a snapshot once `snapshot_every` entries were applied since
    /// the last, off the async workers, one at a time.
    fn snapshot_if_due(self: &Arc<Node>) {
        let applied = self.applied();
        if applied < self.snapshot_at.load(Ordering::Relaxed) + self.snapshot_every
            || self.snapshotting.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let node = self.clone();
        tokio::spawn(async move {
            match node.snapshot().await {
                Ok(index) => {
                    node.snapshot_at.fetch_max(index, Ordering::Relaxed);
                    tracing::info!(node = node.id, index, "metastore snapshot stored");
                }
                Err(e) => {
                    tracing::warn!(node = node.id, error = %e, "metastore snapshot not stored")
                }
            }
            node.snapshotting.store(false, Ordering::Release);
        });
    }

    /// Copies and encodes the state with the index it is at (`applied`
    /// moves only under the state's write lock, so under its read lock the
    /// two agree), stores it, and deletes the log it covers but a tenth.
    async fn snapshot(self: &Arc<Node>) -> Result<u64, LogError> {
        let node = self.clone();
        let snapshot = crate::raft::blocking(move || {
            let (state, index) = {
                let state = node.state.read().expect("metastore state lock poisoned");
                (state.clone(), node.applied())
            };
            let state =
                encode_snapshot(&state).map_err(|e| openraft::AnyError::error(e.to_string()))?;
            Ok(StoredSnapshot {
                index,
                format: FORMAT_VERSION,
                state,
            })
        })
        .await
        .map_err(|e| LogError(format!("encoding a snapshot: {e}")))?;
        let index = snapshot.index;
        let keep = (self.snapshot_every / 10).clamp(1, 1_000);
        within("a snapshot's write", self.log.save_snapshot(snapshot, keep)).await?;
        Ok(index)
    }
}

/// `call` to the store, failed if it does not answer in [`CALL_TIMEOUT`].
async fn within<T>(
    what: &str,
    call: impl Future<Output = Result<T, LogError>>,
) -> Result<T, LogError> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| LogError(format!("no answer to {what} within {CALL_TIMEOUT:?}")))?
}

/// Decodes a stored entry of a format this floe reads.
fn decode_entry(stored: &StoredEntry) -> Result<Proposal, LogError> {
    if !(OLDEST_READABLE_FORMAT..=FORMAT_VERSION).contains(&stored.format) {
        return Err(LogError(format!(
            "entry {} is of metastore format {}; this floe reads formats \
             {OLDEST_READABLE_FORMAT} to {FORMAT_VERSION}",
            stored.index, stored.format
        )));
    }
    postcard::from_bytes(&stored.entry)
        .map_err(|e| LogError(format!("entry {} does not decode: {e}", stored.index)))
}

/// The lease keeper: claims (or renews) the lease every eighth of it; on
/// taking it, reads the log to its end before leading; while another node
/// holds it, follows the log to be ready.
async fn keep_lease(node: Arc<Node>) {
    let mut warned: Option<Instant> = None;
    loop {
        if let Err(e) = node.take_turn().await
            && warned.is_none_or(|at| at.elapsed() >= WARN_EVERY)
        {
            tracing::warn!(node = node.id, store = %node.log.describe(), error = %e,
                "the metastore's store does not answer the lease keeper");
            warned = Some(Instant::now());
        }
        tokio::select! {
            _ = tokio::time::sleep(node.lease / 8) => {}
            _ = node.wake.notified() => {}
        }
    }
}

impl Node {
    /// One claim of the lease, and what follows from its answer.
    async fn take_turn(&self) -> Result<(), LogError> {
        let lease_ms = self.lease.as_millis() as i64;
        let sent = Instant::now();
        let tenure = tokio::time::timeout(self.lease / 2, self.log.claim(&self.me, lease_ms))
            .await
            .map_err(|_| LogError(format!("no answer to a claim within {:?}", self.lease / 2)))??;
        self.store_clock
            .observe(Instant::now(), tenure.store_now_ms);
        self.term_seen.store(tenure.term, Ordering::Relaxed);
        // A lease of this node's that already ran out is no lease: another
        // node may hold the row by now (or soon), whatever this answer says.
        let held = tenure.expires_ms > tenure.store_now_ms;
        if tenure.holder != self.me.holder || !held {
            self.step_down("this node does not hold the lease");
            let other = tenure.holder != self.me.holder;
            *self.leader.lock().expect("leader lock") =
                (held && other).then(|| (tenure.node, tenure.address.clone()));
            // Standing by: keep up with the log, to lead soon if it passes
            // here. To its end: each read has a deadline, and while the
            // log grows faster than this node reads it, another node leads.
            let pen = self.pen.lock().await;
            return self.catch_up(&pen).await;
        }
        *self.leader.lock().expect("leader lock") = None;
        // Another node may take the lease only once it lapsed on the store's
        // clock, no sooner than `lease` after `sent`: reads stop at half that.
        let until = sent + self.lease / 2;
        let current = self.leading_term(false);
        if current == Some(tenure.term) {
            if let Some(leading) = self.leading.lock().expect("leading lock").as_mut() {
                leading.until = leading.until.max(until);
            }
            return Ok(());
        }
        // A new term: everything committed before it must be applied first.
        let pen = self.pen.lock().await;
        self.catch_up(&pen).await?;
        // The store's clock is every node's: the group's time follows it.
        self.stamps.trust_wall();
        *self.leading.lock().expect("leading lock") = Some(Leading {
            term: tenure.term,
            until,
        });
        tracing::info!(node = self.id, term = tenure.term, applied = self.applied(),
            store = %self.log.describe(), "metastore node leads");
        Ok(())
    }
}

impl Sequencer for LogNode {
    async fn propose(&self, command: Command) -> Result<Reply, MetaError> {
        self.writer.propose(command).await
    }

    /// Answered from this node's state while its lease lets it read.
    async fn read<T: Send, F: FnOnce(&State) -> T + Clone + Send>(
        &self,
        f: F,
    ) -> Result<T, MetaError> {
        if self.node.leading_term(true).is_none() {
            return Err(self.node.not_leader());
        }
        Ok(f(&self
            .node
            .state
            .read()
            .expect("metastore state lock poisoned")))
    }

    fn now_ms(&self) -> i64 {
        self.node.stamps.now_ms()
    }

    fn new_id(&self) -> Uuid {
        crate::random_id()
    }

    async fn read_heard<T: Send, F: FnOnce(&State) -> (T, Option<Heard>) + Clone + Send>(
        &self,
        f: F,
    ) -> Result<T, MetaError> {
        let (answer, heard) = self.read(f).await?;
        if let (Some(Heard { group, member }), Some(term)) = (heard, self.node.leading_term(true)) {
            self.node
                .liveness
                .heard(term, &group, &member, self.now_ms());
        }
        Ok(answer)
    }

    async fn cache_peers(
        &self,
        announce: Option<crate::peers::CachePeer>,
    ) -> Result<Vec<crate::peers::CachePeer>, MetaError> {
        self.read(|_| ()).await?;
        Ok(self.node.peers.announce(announce, self.now_ms()))
    }

    /// A group of one voter: the leader, whose log the store keeps.
    async fn quorum(&self) -> Result<crate::quorum::Quorum, MetaError> {
        self.read(|_| ()).await?;
        let node = &self.node;
        let term = node.leading_term(true).ok_or_else(|| node.not_leader())?;
        let applied = Some(node.applied());
        let members = [(node.id, (node.me.address.clone(), true))].into();
        Ok(crate::quorum::quorum_of(
            node.id,
            term,
            applied,
            applied,
            &members,
            &Default::default(),
            self.now_ms(),
        ))
    }

    async fn await_group(&self, wait: AwaitGroup) -> Result<Option<MemberView>, MetaError> {
        crate::raft::group_watch::await_change(self, &self.node.group_watch, wait).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared_log::memory::{Call, Fault, MemoryLog};
    use crate::{Metastore, NewTopic, TopicInfo};

    const LEASE: Duration = Duration::from_millis(400);

    async fn node_on(log: &MemoryLog, id: NodeId) -> LogNode {
        let mut options = LogNodeOptions::new(id, format!("node-{id}"));
        options.lease = LEASE;
        options.snapshot_every = 5;
        LogNode::start(Arc::new(log.clone()), options)
            .await
            .unwrap()
    }

    async fn leader_on(log: &MemoryLog, id: NodeId) -> LogNode {
        let node = node_on(log, id).await;
        node.wait_until_leader(Duration::from_secs(10))
            .await
            .unwrap();
        node
    }

    async fn topic(m: &impl Metastore) -> TopicInfo {
        m.create_topic(NewTopic {
            name: "t".into(),
            partitions: 1,
            configs: Default::default(),
        })
        .await
        .unwrap()
    }

    /// Commits one batch of one record; its offset.
    async fn commit(m: &impl Metastore, t: &TopicInfo, key: &str) -> Result<i64, MetaError> {
        let not_before_ms = m.clock().await?;
        let commit = crate::Commit {
            object_key: key.into(),
            object_size: 10,
            batches: vec![crate::CommitBatch {
                topic_id: t.id,
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
        Ok(m.commit(commit).await?[0].clone().unwrap())
    }

    /// A node that stops gives the lease back; another leads at once from
    /// the same log (snapshot and entries), and offsets go on from there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_standby_takes_over_with_everything_committed() {
        let log = MemoryLog::default();
        let a = leader_on(&log, 1).await;
        let b = node_on(&log, 2).await;
        let t = topic(&a).await;
        for n in 0..12 {
            assert_eq!(commit(&a, &t, &format!("a{n}")).await.unwrap(), n);
        }
        // The standby refuses, naming the leader.
        let refused = b.topics().await.unwrap_err();
        assert_eq!(refused, MetaError::NotLeader(Some("node-1".into())));
        a.shutdown().await;
        b.wait_until_leader(Duration::from_secs(10)).await.unwrap();
        assert_eq!(commit(&b, &t, "b").await.unwrap(), 12);
        // Snapshots bounded the log behind it.
        let stored = log.entries();
        assert!(stored.len() < 10, "{} entries kept", stored.len());
        // A node started now loads the snapshot and the rest, and agrees.
        let c = node_on(&log, 3).await;
        let state = |n: &LogNode| n.local_state(|s| s.clone());
        tokio::time::timeout(Duration::from_secs(5), async {
            while c.applied_index() < b.applied_index() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap();
        assert_eq!(state(&c), state(&b));
    }

    /// A leader whose lease lapsed (paused, cut off) is fenced: once
    /// another node holds the lease, its appends are refused, and nothing
    /// it sends reaches the log.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_leader_whose_lease_lapsed_cannot_append() {
        let log = MemoryLog::default();
        // The first node's store calls hang while `paused` holds.
        let paused = Arc::new(AtomicBool::new(false));
        let weather = {
            let paused = paused.clone();
            Arc::new(move |_| match paused.load(Ordering::Relaxed) {
                true => Fault::Slow(LEASE * 4),
                false => Fault::None,
            })
        };
        let a = {
            let mut options = LogNodeOptions::new(1, "node-1");
            options.lease = LEASE;
            let a = LogNode::start(Arc::new(log.with_weather(weather)), options)
                .await
                .unwrap();
            a.wait_until_leader(Duration::from_secs(10)).await.unwrap();
            Arc::new(a)
        };
        let t = topic(&*a).await;
        assert_eq!(commit(&*a, &t, "before").await.unwrap(), 0);
        let b = node_on(&log, 2).await;
        // A's commit waits in a slow call while B takes the lease over.
        paused.store(true, Ordering::Relaxed);
        let stale = {
            let (a, t) = (a.clone(), t.clone());
            tokio::spawn(async move { commit(&*a, &t, "stale").await })
        };
        b.wait_until_leader(Duration::from_secs(10)).await.unwrap();
        assert_eq!(commit(&b, &t, "after").await.unwrap(), 1);
        let refused = stale.await.unwrap().unwrap_err();
        assert!(refused.certainly_not_applied(), "{refused}");
        assert!(!a.leads());
        paused.store(false, Ordering::Relaxed);
        // The stale commit never reached the log: the next offset is 2.
        assert_eq!(commit(&b, &t, "next").await.unwrap(), 2);
    }

    /// A standby claims once a turn, an eighth of the lease apart, not in
    /// a loop (paused time: 8 s of it are 16 leases of 0.5 s).
    #[tokio::test(start_paused = true)]
    async fn a_standby_claims_once_a_turn() {
        let log = MemoryLog::default();
        let claims = Arc::new(AtomicU64::new(0));
        let counted = {
            let claims = claims.clone();
            log.with_weather(Arc::new(move |call| {
                if call == Call::Claim {
                    claims.fetch_add(1, Ordering::Relaxed);
                }
                Fault::None
            }))
        };
        let mut options = LogNodeOptions::new(1, "node-1");
        options.lease = Duration::from_secs(3600);
        let _leader = LogNode::start(Arc::new(log.clone()), options)
            .await
            .unwrap();
        let mut options = LogNodeOptions::new(2, "node-2");
        options.lease = Duration::from_millis(500);
        let standby = LogNode::start(Arc::new(counted), options).await.unwrap();
        tokio::time::sleep(Duration::from_secs(8)).await;
        assert!(!standby.leads());
        let claimed = claims.load(Ordering::Relaxed);
        assert!(
            (100..=140).contains(&claimed),
            "{claimed} claims in 128 turns"
        );
    }

    /// An append whose answer was lost was committed: the leader steps
    /// down, reads it back, applies it once, and leads on after it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_append_whose_answer_was_lost_is_applied_once() {
        let log = MemoryLog::default();
        let lose_next = Arc::new(AtomicBool::new(false));
        let weather = {
            let lose_next = lose_next.clone();
            Arc::new(move |call| match call {
                Call::Append if lose_next.swap(false, Ordering::Relaxed) => Fault::LoseAnswer,
                _ => Fault::None,
            })
        };
        let mut options = LogNodeOptions::new(1, "node-1");
        options.lease = LEASE;
        let a = LogNode::start(Arc::new(log.with_weather(weather)), options)
            .await
            .unwrap();
        a.wait_until_leader(Duration::from_secs(10)).await.unwrap();
        let t = topic(&a).await;
        assert_eq!(commit(&a, &t, "first").await.unwrap(), 0);
        lose_next.store(true, Ordering::Relaxed);
        let lost = commit(&a, &t, "lost").await.unwrap_err();
        assert!(!lost.certainly_not_applied(), "{lost}");
        a.wait_until_leader(Duration::from_secs(10)).await.unwrap();
        // Sent again, the commit is recognised (its object is known), and
        // the next one gets the offset after it.
        assert_eq!(commit(&a, &t, "lost").await.unwrap(), 1);
        assert_eq!(commit(&a, &t, "next").await.unwrap(), 2);
    }

    /// A wall clock that can be stepped, as NTP steps a bad one.
    #[derive(Debug, Default)]
    struct SteppedClock(std::sync::atomic::AtomicI64);

    impl Clock for SteppedClock {
        fn now_ms(&self) -> i64 {
            SystemClock.now_ms() + self.0.load(Ordering::Relaxed)
        }
    }

    /// The group's time is the database's: a node's wall clock stepped a
    /// day ahead while a claim is on its way, and the node leading anew
    /// after it (when it takes the store's time as the group's), moves
    /// nothing. (Reading the store's time as an offset from the wall clock
    /// put it half a day ahead here, and retention would have run on it.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wall_clock_step_does_not_move_the_group_time() {
        const DAY_MS: i64 = 86_400_000;
        let log = MemoryLog::default();
        let wall = Arc::new(SteppedClock::default());
        let lose_next = Arc::new(AtomicBool::new(false));
        let step_next = Arc::new(AtomicBool::new(false));
        let weather = {
            let (wall, lose_next, step_next) = (wall.clone(), lose_next.clone(), step_next.clone());
            Arc::new(move |call| match call {
                Call::Append if lose_next.swap(false, Ordering::Relaxed) => {
                    step_next.store(true, Ordering::Relaxed);
                    Fault::LoseAnswer
                }
                Call::Claim if step_next.swap(false, Ordering::Relaxed) => {
                    wall.0.fetch_add(DAY_MS, Ordering::Relaxed);
                    Fault::None
                }
                _ => Fault::None,
            })
        };
        let mut options = LogNodeOptions::new(1, "node-1");
        options.lease = LEASE;
        options.clock = wall.clone();
        let a = LogNode::start(Arc::new(log.with_weather(weather)), options)
            .await
            .unwrap();
        a.wait_until_leader(Duration::from_secs(10)).await.unwrap();
        let t = topic(&a).await;
        commit(&a, &t, "before").await.unwrap();
        // The answer lost: the node steps down, and its next claim is
        // under way when the wall clock steps.
        lose_next.store(true, Ordering::Relaxed);
        commit(&a, &t, "lost").await.unwrap_err();
        a.wait_until_leader(Duration::from_secs(10)).await.unwrap();
        commit(&a, &t, "after").await.unwrap();
        assert_eq!(
            wall.0.load(Ordering::Relaxed),
            DAY_MS,
            "the wall clock was stepped"
        );
        let ahead_ms = a.now_ms() - SystemClock.now_ms();
        assert!(ahead_ms < 5_000, "the group's time is {ahead_ms} ms ahead");
    }
}
