//! Stage 2 of the simulation: the real write path. Real batchers
//! (`floe_agent::write::batcher`) and the real background loop
//! (`floe_agent::jobs::compaction::Background`: retention, compaction with leases,
//! the orphan sweep, GC) run on a single-threaded tokio runtime with paused
//! time, over an in-memory object store with seeded faults ([`store`]) and
//! the real state machine behind a faulty metastore ([`meta`]). Agents crash
//! mid-upload and mid-commit and restart; producers, idempotent and plain,
//! retry as Kafka clients do (tombstones among them); an operator deletes
//! records, and deletes, re-creates and grows a topic; a poller reads as a
//! consumer does; then the [`audit`] checks Jepsen's Kafka anomalies.
//!
//! Everything random comes from one seeded generator (ChaCha8), ids too
//! (`floe_storage::ids::Ids`), time is tokio's paused clock, and the tasks
//! run on one thread, so a seed replays the same run.

pub mod audit;
pub mod disk;
pub mod kafka;
pub mod meta;
pub mod raft;
pub mod store;
pub mod txns;
mod weather;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use floe_agent::jobs::compaction::Background;
use floe_agent::metrics::Metrics;
use floe_agent::write::batcher::{AppendError, Batcher, BatcherConfig};
use floe_cache::{BlockCache, CacheOptions};
use floe_compactor::{CompactionPolicy, Counters, Gc};
use floe_metastore::{Metastore, NewTopic, ProducerIdentity, TopicId, TopicInfo};
use floe_protocol::batch::RecordBatch;
use floe_protocol::kafka_protocol::protocol::StrBytes;
use floe_protocol::kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use floe_storage::ObjectStore;
use floe_storage::hooked::HookedStore;
use floe_storage::ids::Ids;
use object_store::ObjectStoreExt;
use object_store::memory::InMemory;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};
use uuid::Uuid;

use meta::{MetaFaults, SimMetastore};
use store::{SimStoreFaults, StoreFaults};

/// What one whole-path run is made of.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Simulated time producers run for (then everything settles and is audited).
    pub duration: Duration,
    pub agents: usize,
    pub producers: usize,
    pub partitions: i32,
    /// The metastore as a three-node Raft group over a faulty network
    /// ([`raft`]) rather than one state behind injected faults ([`meta`]).
    pub raft: bool,
    /// With `raft`: the group's nodes keep their log in one simulated
    /// database (the PostgreSQL design) instead of Raft.
    pub shared_log: bool,
    /// Transactional producers ([`txns`]), each with its transactional id.
    pub txn_producers: usize,
}

impl Settings {
    fn group_kind(&self) -> raft::Kind {
        match self.shared_log {
            true => raft::Kind::SharedLog,
            false => raft::Kind::Raft,
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            duration: Duration::from_secs(600),
            agents: 3,
            producers: 4,
            partitions: 3,
            raft: false,
            shared_log: false,
            txn_producers: 2,
        }
    }
}

/// What a run did, for the summary line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub acked_batches: u64,
    pub failed_produces: u64,
    pub crashes: u64,
    pub retried_writes: u64,
    /// Segments (compaction's output) referenced at the end.
    pub segments_live: u64,
    /// Objects in the bucket at the end (referenced, or garbage within its grace).
    pub objects_left: u64,
    pub polled_records: u64,
    /// Live segments at the end carrying an offset index (all were checked).
    pub segments_indexed: u64,
    /// Times a metastore client moved to another node (Raft runs).
    pub redirects: u64,
    /// Network partitions between metastore nodes (Raft runs).
    pub partitions: u64,
    /// Metastore nodes killed and restarted from their logs (Raft runs).
    pub node_kills: u64,
    /// Metastore nodes replaced under load: removed, wiped, added back.
    pub replacements: u64,
    /// Object-store requests failed on purpose (before or after they acted).
    pub store_faults: u64,
    /// Agents stalled for minutes between storing an object and going on.
    pub stalls: u64,
    /// Transactions as their producers were told they ended.
    pub committed_txns: u64,
    pub aborted_txns: u64,
    pub unknown_txns: u64,
    /// Transactions whose application restarted elsewhere while they went on.
    pub zombies: u64,
    /// Transactional records whose fate and visibility the audit checked.
    pub txn_records_audited: u64,
    /// Connections pipelining requests (stage 3).
    pub pipelined_connections: u64,
    /// Assignments consumer group members received (stage 3).
    pub group_rebalances: u64,
    /// Consume-transform-produce transactions run, and input records the
    /// audit found transformed exactly once (stage 3).
    pub eos_transactions: u64,
    pub eos_records: u64,
    /// Produces refused for want of an ACL (stage 3's alice).
    pub refused_for_rights: u64,
    /// Records handed to share-group members, and of them those handed
    /// out before (stage 3).
    pub share_deliveries: u64,
    pub share_redeliveries: u64,
    /// Agents' subscriptions to pushed changes opened, notices they were
    /// carried, and streams the weather cut (Raft runs).
    pub subscriptions: u64,
    pub notices: u64,
    pub cut_streams: u64,
    pub simulated_ms: u64,
}

/// Runs' summaries add up, field by field (for a line over many seeds).
impl std::ops::AddAssign for Summary {
    fn add_assign(&mut self, run: Summary) {
        self.acked_batches += run.acked_batches;
        self.failed_produces += run.failed_produces;
        self.crashes += run.crashes;
        self.retried_writes += run.retried_writes;
        self.segments_live += run.segments_live;
        self.objects_left += run.objects_left;
        self.polled_records += run.polled_records;
        self.segments_indexed += run.segments_indexed;
        self.redirects += run.redirects;
        self.subscriptions += run.subscriptions;
        self.notices += run.notices;
        self.cut_streams += run.cut_streams;
        self.partitions += run.partitions;
        self.node_kills += run.node_kills;
        self.store_faults += run.store_faults;
        self.stalls += run.stalls;
        self.committed_txns += run.committed_txns;
        self.aborted_txns += run.aborted_txns;
        self.unknown_txns += run.unknown_txns;
        self.zombies += run.zombies;
        self.txn_records_audited += run.txn_records_audited;
        self.pipelined_connections += run.pipelined_connections;
        self.group_rebalances += run.group_rebalances;
        self.replacements += run.replacements;
        self.eos_transactions += run.eos_transactions;
        self.eos_records += run.eos_records;
        self.refused_for_rights += run.refused_for_rights;
        self.share_deliveries += run.share_deliveries;
        self.share_redeliveries += run.share_redeliveries;
        self.simulated_ms += run.simulated_ms;
    }
}

/// A failed run: the seed, what the auditor found, and the trace.
#[derive(Debug)]
pub struct Failure {
    pub seed: u64,
    pub why: String,
    pub trace: Vec<String>,
}

/// An acknowledged produce: what the auditor holds the system to.
#[derive(Debug, Clone)]
pub struct Ack {
    /// Index into the run's topics: 0 is retained (`cleanup.policy=delete`),
    /// 1 key-compacted (`cleanup.policy=compact`), 2 the scratch topic that
    /// is deleted and re-created.
    pub topic: usize,
    /// The topic's id when it was acknowledged (the scratch topic changes it).
    pub topic_id: TopicId,
    pub partition: i32,
    pub offset: i64,
    pub batch: u64,
    pub records: i32,
    /// Each record's key (compacted topic only).
    pub keys: Vec<Option<u8>>,
    /// Which records are tombstones (a key with a null value).
    pub tombstones: Vec<bool>,
    pub idempotent: bool,
    /// Simulated time before the batch was handed to an agent (its commit,
    /// hence its append time, came later).
    pub sent_ms: i64,
}

/// Everything the actors share: one generator, the current faults, what was
/// acknowledged, and the trace.
pub struct World {
    rng: ChaCha8Rng,
    pub store_faults: StoreFaults,
    pub meta_faults: MetaFaults,
    pub net: raft::NetFaults,
    /// The database of a group on a shared log.
    pub database: raft::DatabaseFaults,
    pub acks: Vec<Ack>,
    /// Every transaction, as its producer saw it end.
    pub txns: Vec<txns::TxnRecord>,
    /// The retained topic's (partition, log start, last stable offset, high
    /// watermark) as the poller read them along the way.
    pub stable_seen: Vec<(i32, i64, i64, i64)>,
    pub summary: Summary,
    pub trace: Vec<String>,
    pub anomalies: Vec<String>,
    /// What the poller read, by (topic, partition, offset).
    pub polled: BTreeMap<(usize, i32, i64), String>,
    /// What it read of the retained topic, whole (transactions are judged
    /// on records retention removed before the end too).
    pub polled_retained: BTreeMap<(i32, i64), audit::Stored>,
    /// Per (topic, partition), the highest DeleteRecords offset asked for:
    /// records below it may be gone (the call may apply, its answer lost).
    pub deleted_before: BTreeMap<(usize, i32), i64>,
    /// (partition, key) of every tombstone sent to the compacted topic in a
    /// batch given up on (it may have landed, unacknowledged).
    pub unacked_tombstones: BTreeSet<(i32, u8)>,
    /// The scratch topic as last read (deleted and re-created as the run goes).
    pub scratch: Option<TopicInfo>,
    /// Per agent, when its latest stall after a PUT ends: a paused process
    /// is not crashed, and the audit waits for every stall to end.
    pub stalled: BTreeMap<usize, Instant>,
    /// When (simulated) each object was stored, for listings.
    pub put_ms: BTreeMap<String, i64>,
    start: Instant,
    /// Woken at the first anomaly.
    failed: Arc<tokio::sync::Notify>,
}

impl World {
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.random::<f64>() < p
    }

    pub fn rng_below(&mut self, n: u64) -> u64 {
        self.rng.random_range(0..n.max(1))
    }

    /// A latency between zero and `max`, whole milliseconds (no draw when
    /// `max` is zero).
    pub fn latency_up_to(&mut self, max: Duration) -> Duration {
        let ms = max.as_millis() as u64;
        Duration::from_millis(if ms == 0 { 0 } else { self.rng_below(ms + 1) })
    }

    pub fn next_uuid(&mut self) -> Uuid {
        uuid::Builder::from_random_bytes(self.rng.random()).into_uuid()
    }

    /// Records what the auditor found; the run stops at the first.
    pub fn anomaly(&mut self, what: String) {
        self.log(format!("ANOMALY {what}"));
        self.anomalies.push(what);
        self.failed.notify_one();
    }

    /// The simulation's wall clock: tokio's paused time from [`meta::EPOCH_MS`].
    /// Every simulated wall time (metastore stamps, node clocks, batch
    /// timestamps, the auditor's "now") is read here.
    pub fn now_ms(&self) -> i64 {
        meta::EPOCH_MS + self.start.elapsed().as_millis() as i64
    }

    pub fn log(&mut self, line: String) {
        let at = self.start.elapsed().as_millis();
        self.trace.push(format!("{at:>9} {line}"));
    }
}

/// The shared world, behind one lock (there is one thread; the lock only
/// satisfies the `Send + Sync` bounds of the code under test).
#[derive(Clone)]
pub struct Shared(Arc<Mutex<World>>);

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shared")
    }
}

impl Shared {
    pub fn with<T>(&self, f: impl FnOnce(&mut World) -> T) -> T {
        f(&mut self.0.lock().expect("sim world lock"))
    }
}

/// Seeded ids for object keys and lease holders.
struct SeededIds(Shared);

impl Ids for SeededIds {
    fn next_id(&self) -> Uuid {
        self.0.with(|w| w.next_uuid())
    }
}

/// Runs one seed; `Ok` with the summary and trace when the auditor finds nothing.
/// A single-threaded runtime on paused time whose random draws are
/// seeded: a seed replays the same schedule.
pub(crate) fn seeded_runtime(seed: u64) -> tokio::runtime::Runtime {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    // Which ready branch an unbiased `select!` takes (openraft has some) is
    // tokio's random draw: seeded where tokio lets it be (`tokio_unstable`).
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    builder.build().expect("a tokio runtime")
}

impl Shared {
    /// A fresh world of `seed`, its clock starting now (call it on the
    /// run's runtime).
    pub(crate) fn new(seed: u64) -> Shared {
        Shared(Arc::new(Mutex::new(World {
            rng: ChaCha8Rng::seed_from_u64(seed),
            store_faults: StoreFaults::default(),
            meta_faults: MetaFaults::default(),
            net: raft::NetFaults::default(),
            database: raft::DatabaseFaults::default(),
            acks: Vec::new(),
            txns: Vec::new(),
            stable_seen: Vec::new(),
            summary: Summary::default(),
            trace: Vec::new(),
            anomalies: Vec::new(),
            polled: BTreeMap::new(),
            polled_retained: BTreeMap::new(),
            deleted_before: BTreeMap::new(),
            unacked_tombstones: BTreeSet::new(),
            scratch: None,
            stalled: BTreeMap::new(),
            put_ms: BTreeMap::new(),
            start: Instant::now(),
            failed: Arc::new(tokio::sync::Notify::new()),
        })))
    }

    /// The run's result: its summary and trace, or its first anomaly.
    pub(crate) fn outcome(&self, seed: u64) -> Result<(Summary, Vec<String>), Failure> {
        let (summary, trace, anomalies) = self.with(|w| {
            (
                w.summary.clone(),
                std::mem::take(&mut w.trace),
                std::mem::take(&mut w.anomalies),
            )
        });
        match anomalies.first() {
            None => Ok((summary, trace)),
            Some(why) => Err(Failure {
                seed,
                why: format!("{why} ({} anomalies in all)", anomalies.len()),
                trace,
            }),
        }
    }

    /// Runs `simulation` until it ends, its first anomaly, or `limit` of
    /// simulated time (then a liveness failure: the run is stuck).
    pub(crate) async fn until_settled(
        &self,
        limit: Duration,
        simulation: impl Future<Output = ()>,
    ) {
        let failed = self.with(|w| w.failed.clone());
        tokio::select! {
            biased;
            () = failed.notified() => {}
            panic = a_task_panicked() => self.with(|w| w.anomaly(format!("a task panicked: {panic}"))),
            () = simulation => {}
            () = tokio::time::sleep(limit) => self.with(|w| {
                w.anomaly(format!("the run did not settle within {limit:?} of simulated time"))
            }),
        }
    }
}

pub fn run(seed: u64, settings: Settings) -> Result<(Summary, Vec<String>), Failure> {
    // FLOE_SIM_PROGRESS=1: a line per simulated minute on stderr, to tell
    // a slow run from a stuck one.
    let progress = std::env::var_os("FLOE_SIM_PROGRESS").is_some();
    // Producing, five minutes of calm and the audit fit well within this;
    // a run still going then is stuck (a liveness failure). (Plus the
    // longest stall: see `store::SimStoreFaults::after_put`.)
    let limit = settings.duration + Duration::from_secs(2 * 3_600);
    run_seeded(seed, limit, |shared| async move {
        if progress {
            tokio::spawn(async {
                let start = Instant::now();
                loop {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    eprintln!("simulated {:?}", start.elapsed());
                }
            });
        }
        simulate(&shared, settings).await
    })
}

/// Runs `simulate` for `seed` on a seeded runtime until it settles (at
/// most `limit` of simulated time); the summary and trace, or the failure.
pub(crate) fn run_seeded<F, Fut>(
    seed: u64,
    limit: Duration,
    simulate: F,
) -> Result<(Summary, Vec<String>), Failure>
where
    F: FnOnce(Shared) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    watch_for_panics();
    let runtime = seeded_runtime(seed);
    let shared = runtime.block_on(async {
        let shared = Shared::new(seed);
        shared.until_settled(limit, simulate(shared.clone())).await;
        shared
    });
    // Tasks still parked (agents' loops, the metastore's delayed writes) end here.
    drop(runtime);
    floe_metastore::raft::runtime::seed_this_thread(None);
    shared.outcome(seed)
}

thread_local! {
    /// The first panic on this thread since the run began (the simulation
    /// runs on one thread; tokio catches a task's panic, and the run would
    /// go on without the task).
    static PANICKED: std::cell::Cell<Option<String>> = const { std::cell::Cell::new(None) };
}

/// Notes every panic on the simulation's thread (then does what the hook
/// before did), and forgets any from an earlier run.
fn watch_for_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let seen = PANICKED.take().unwrap_or_else(|| info.to_string());
            PANICKED.set(Some(seen));
            previous(info);
        }));
    });
    PANICKED.take();
}

/// Resolves to the first panic's message once a task has panicked.
async fn a_task_panicked() -> String {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Some(panic) = PANICKED.take() {
            return panic;
        }
    }
}

/// One agent: its batcher, background loop and transaction timeout job,
/// which a crash stops mid-step.
struct Agent {
    batcher: Option<Batcher>,
    background: Option<JoinHandle<()>>,
    txn_timeouts: Option<JoinHandle<()>>,
}

struct Cluster {
    shared: Shared,
    /// The bucket; each agent reaches it through its own faults.
    bucket: Arc<dyn ObjectStore>,
    meta: Arc<dyn Metastore>,
    agents: Vec<Agent>,
    /// Per agent, fixed for the run (so a restarted agent takes up its leases).
    gc_grace: Duration,
    /// How old an unknown object must be before the sweep takes it: 0 (the
    /// most hostile sweep), or an age below or past the commit window.
    orphan_age: Duration,
    interval: Duration,
    policy: CompactionPolicy,
}

impl Cluster {
    async fn start_agent(&mut self, i: usize) {
        let shared = &self.shared;
        let ids: Arc<dyn Ids> = Arc::new(SeededIds(shared.clone()));
        let (flush_ms, inflight) = shared.with(|w| (5 + w.rng_below(100), 1 + w.rng_below(4)));
        let store: Arc<dyn ObjectStore> = Arc::new(HookedStore::new(
            self.bucket.clone(),
            SimStoreFaults {
                shared: shared.clone(),
                agent: Some(i),
            },
        ));
        let cache = Arc::new(
            BlockCache::new(store.clone(), CacheOptions::memory(1 << 20, 64 << 10))
                .await
                .expect("a memory cache builds"),
        );
        let batcher = Batcher::start(
            &floe_agent::tasks::Tasks::default(),
            BatcherConfig {
                flush_interval: Duration::from_millis(flush_ms),
                // The simulated producers' batches say nothing of their
                // pipelines, so files are never sealed early here (the
                // Kafka stage's clients go through the handlers that do).
                min_flush_interval: Duration::from_millis(flush_ms),
                flush_bytes: 16 << 10,
                max_buffered_bytes: 8 << 20,
                max_inflight_uploads: inflight as usize,
            },
            store.clone(),
            self.meta.clone(),
            cache.clone(),
            tokio::sync::watch::channel(0).0,
            Arc::new(Metrics::new()),
            ids.clone(),
        );
        let background = Background {
            interval: self.interval,
            policy: self.policy,
            gc: Gc::new(self.gc_grace),
            orphan_age: self.orphan_age,
            holder: format!("agent-{i}"),
            counters: Counters::default(),
            ids,
        };
        // As an agent's: reading the ingest files it uploaded from its cache.
        let store = floe_agent::jobs::cache_first::cache_first(store, cache);
        let background = tokio::spawn(background.run(store, self.meta.clone()));
        let txn_timeouts = tokio::spawn({
            let (meta, batcher) = (self.meta.clone(), batcher.clone());
            async move {
                floe_agent::jobs::txn_timeouts::run_on(
                    meta.as_ref(),
                    &batcher,
                    &format!("agent-{i}"),
                )
                .await
            }
        });
        self.agents[i] = Agent {
            batcher: Some(batcher),
            background: Some(background),
            txn_timeouts: Some(txn_timeouts),
        };
    }

    fn crash(&mut self, i: usize) {
        if let Some(b) = self.agents[i].batcher.take() {
            b.abort();
        }
        if let Some(bg) = self.agents[i].background.take() {
            bg.abort();
        }
        if let Some(job) = self.agents[i].txn_timeouts.take() {
            job.abort();
        }
    }

    fn live_batcher(&self, pick: u64) -> Option<Batcher> {
        let live: Vec<&Batcher> = self
            .agents
            .iter()
            .filter_map(|a| a.batcher.as_ref())
            .collect();
        (!live.is_empty()).then(|| live[pick as usize % live.len()].clone())
    }
}

async fn simulate(shared: &Shared, settings: Settings) {
    let (single, group) = if settings.raft {
        (
            None,
            Some(Arc::new(raft::start(shared, settings.group_kind()).await)),
        )
    } else {
        (Some(Arc::new(SimMetastore::new(shared.clone()))), None)
    };
    let meta: Arc<dyn Metastore> = match (&single, &group) {
        (Some(single), _) => single.clone(),
        (_, Some(group)) => group.client.clone(),
        _ => unreachable!("one metastore or the other"),
    };
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    // The poller's view of the bucket (agents get their own, see `start_agent`).
    let store: Arc<dyn ObjectStore> = Arc::new(HookedStore::new(
        inner.clone(),
        SimStoreFaults {
            shared: shared.clone(),
            agent: None,
        },
    ));
    // Short enough that retention runs while faults are on, long enough
    // that the final audit still finds unexpired records to hold the log to.
    let retention_ms = shared.with(|w| 60_000 * (2 + w.rng_below(18) as i64));
    // Half the runs keep tombstones longer than the run (every key's latest
    // record must stay), half drop them within a minute or two (a key whose
    // tombstone went must not come back).
    let delete_retention_ms = shared.with(|w| {
        if w.chance(0.5) {
            DAY_MS
        } else {
            10_000 + w.rng_below(110_000) as i64
        }
    });
    let mut topics = Vec::new();
    for (name, policy) in [("events", "delete"), ("table", "compact")] {
        let configs = BTreeMap::from([
            ("retention.ms".to_string(), retention_ms.to_string()),
            ("cleanup.policy".to_string(), policy.to_string()),
            (
                "delete.retention.ms".to_string(),
                delete_retention_ms.to_string(),
            ),
        ]);
        let topic = meta
            .create_topic(NewTopic {
                name: name.into(),
                partitions: settings.partitions,
                configs,
            })
            .await
            .expect("topics are created before faults begin");
        topics.push(topic);
    }
    let scratch = meta
        .create_topic(scratch_topic(1 + settings.partitions / 2, retention_ms))
        .await
        .expect("topics are created before faults begin");
    shared.with(|w| w.scratch = Some(scratch));
    let (interval, gc_grace, min_extents) = shared.with(|w| {
        (
            Duration::from_millis(500 + w.rng_below(5_000)),
            Duration::from_millis(w.rng_below(30_000)),
            2 + w.rng_below(6) as usize,
        )
    });
    let orphan_age = shared.with(|w| match w.rng_below(4) {
        0 => Duration::ZERO,
        1 => Duration::from_secs(30),
        2 => Duration::from_secs(3 * 60),
        _ => Duration::from_secs(11 * 60),
    });
    shared.with(|w| {
        w.log(format!(
            "retention {retention_ms} ms, tombstones kept {delete_retention_ms} ms, passes every {interval:?}, gc grace {gc_grace:?}, orphans from {orphan_age:?}, compaction from {min_extents} extents"
        ))
    });
    let cluster = Arc::new(tokio::sync::Mutex::new(Cluster {
        shared: shared.clone(),
        bucket: inner.clone(),
        meta: meta.clone(),
        agents: (0..settings.agents)
            .map(|_| Agent {
                batcher: None,
                background: None,
                txn_timeouts: None,
            })
            .collect(),
        gc_grace,
        orphan_age,
        interval,
        policy: CompactionPolicy {
            min_extents,
            max_segment_bytes: 64 << 10,
            extent_bytes: 4 << 10,
            // Small, so segments carry many index entries (the audit reads
            // each live segment through its index from inside).
            index_interval: 512,
            job_bytes: 256 << 10,
            max_age: Duration::from_secs(2),
            max_chunks: 4,
            // Few keys and small groups, so key compaction cleans in
            // several passes and groups.
            max_cleaner_keys: 6,
            keyed_group_bytes: 1 << 10,
        },
    }));
    for i in 0..settings.agents {
        cluster.lock().await.start_agent(i).await;
    }

    let stop = Instant::now() + settings.duration;
    let mut actors = Vec::new();
    for p in 0..settings.producers {
        let idempotent = p % 2 == 0;
        actors.push(tokio::spawn(produce(
            shared.clone(),
            cluster.clone(),
            meta.clone(),
            topics.clone(),
            p,
            idempotent,
            stop,
        )));
    }
    for me in 0..settings.txn_producers {
        actors.push(tokio::spawn(txns::transact(
            shared.clone(),
            cluster.clone(),
            meta.clone(),
            topics[0].clone(),
            me,
            stop,
        )));
    }
    actors.push(tokio::spawn(admin(
        shared.clone(),
        meta.clone(),
        inner.clone(),
        topics[0].clone(),
        retention_ms,
        stop,
    )));
    actors.push(tokio::spawn(weather::chaos(
        shared.clone(),
        cluster.clone(),
        stop,
        group.clone(),
        topics.clone(),
    )));
    let poller = tokio::spawn(audit::poll(
        shared.clone(),
        meta.clone(),
        store.clone(),
        topics.clone(),
        stop,
        retention_ms,
    ));
    for actor in actors {
        actor.await.expect("actors do not panic");
    }
    poller.await.expect("the poller does not panic");

    // Calm: no faults, every agent up. Commits in flight finish or time out
    // (the batcher's deadline), leases expire, compaction and GC catch up.
    shared.with(|w| {
        w.store_faults = StoreFaults::default();
        w.meta_faults = MetaFaults::default();
        w.net = raft::NetFaults::default();
        w.database = raft::DatabaseFaults::default();
        w.log("calm: faults off, every agent up".into());
    });
    {
        let mut c = cluster.lock().await;
        for i in 0..settings.agents {
            if c.agents[i].batcher.is_none() {
                c.start_agent(i).await;
            }
        }
    }
    if let Some(group) = &group {
        for i in 0..raft::NODES as usize {
            group.restart(i).await;
        }
        // A replacement the weather left halfway is finished.
        if let Err(why) = group.all_voters().await {
            shared.with(|w| w.anomaly(why));
        }
    }
    // Long enough for every commit in flight to finish or time out (the
    // batcher's 60 s deadline, the client's 15 s of retries) and for GC to
    // act on what the last passes made garbage.
    tokio::time::sleep(Duration::from_secs(5 * 60)).await;
    // And for an agent stalled after a PUT to come back, try its commit
    // (past the commit window: it must be refused) and have it settle.
    if let Some(until) = shared.with(|w| w.stalled.values().max().copied()) {
        tokio::time::sleep_until(until + Duration::from_secs(3 * 60)).await;
    }
    {
        let mut c = cluster.lock().await;
        for i in 0..settings.agents {
            c.crash(i);
        }
    }
    // The scratch topic as it ended (its acknowledgements of earlier
    // incarnations went with them).
    let mut audited = topics.clone();
    let scratch = loop {
        match meta.topic(SCRATCH).await {
            Ok(t) => break t,
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    };
    audited.extend(scratch);
    let rules = audit::Rules {
        retention_ms,
        tombstones_kept: delete_retention_ms == DAY_MS,
    };
    match (&single, &group) {
        (Some(single), _) => {
            audit::settle_and_check(shared, single.as_ref(), &inner, &audited, rules).await
        }
        (_, Some(group)) => {
            if let Err(why) = raft::replicas_agree(group).await {
                shared.with(|w| w.anomaly(why));
            }
            audit::settle_and_check(shared, group.client.as_ref(), &inner, &audited, rules).await;
        }
        _ => unreachable!("one metastore or the other"),
    }
}

/// A Kafka producer: batches of a few records to a random partition through
/// a random agent, retried on retriable errors. An idempotent one keeps its
/// sequence and retries the same batch; a plain one resends the same bytes
/// (a duplicate is allowed, a loss is not).
async fn produce(
    shared: Shared,
    cluster: Arc<tokio::sync::Mutex<Cluster>>,
    meta: Arc<dyn Metastore>,
    topics: Vec<TopicInfo>,
    me: usize,
    idempotent: bool,
    stop: Instant,
) {
    let mut identity: Option<ProducerIdentity> = None;
    let mut sequences: BTreeMap<(usize, i32), i32> = BTreeMap::new();
    let mut n: u64 = 0;
    while Instant::now() < stop {
        let (pause, t, topic) = shared.with(|w| {
            // The scratch topic less often: it comes and goes.
            let t = w.rng_below(topics.len() as u64 + 1) as usize;
            let topic = if t < topics.len() {
                Some(topics[t].clone())
            } else {
                w.scratch.clone()
            };
            (Duration::from_millis(w.rng_below(400)), t, topic)
        });
        let Some(topic) = topic else {
            tokio::time::sleep(pause).await;
            continue;
        };
        let (partition, records) = shared.with(|w| {
            (
                w.rng_below(topic.partitions as u64) as i32,
                1 + w.rng_below(4) as i32,
            )
        });
        // Few keys, so that key compaction has much to drop; now and then a
        // tombstone.
        let (keys, tombstones): (Vec<Option<u8>>, Vec<bool>) = if t == 1 {
            (0..records)
                .map(|_| shared.with(|w| (Some(w.rng_below(KEYS) as u8), w.chance(0.1))))
                .unzip()
        } else {
            (vec![None; records as usize], vec![false; records as usize])
        };
        tokio::time::sleep(pause).await;
        if idempotent && identity.is_none() {
            // As an agent hands ids out: one of a block (KIP-730), epoch 0.
            match meta.allocate_producer_ids(1).await {
                Ok(producer_id) => {
                    identity = Some(ProducerIdentity {
                        producer_id,
                        epoch: 0,
                    });
                    sequences.clear();
                }
                Err(_) => continue,
            }
        }
        n += 1;
        let batch_id = (me as u64) << 40 | n;
        let sequence = if idempotent {
            *sequences.get(&(t, partition)).unwrap_or(&0)
        } else {
            0
        };
        let sent_ms = shared.with(|w| w.now_ms());
        let bytes = encode(
            batch_id,
            &keys,
            &tombstones,
            sent_ms,
            identity.filter(|_| idempotent),
            sequence,
            false,
        );
        let mut attempts = 0;
        loop {
            attempts += 1;
            let Some(answer) = deliver(
                &shared,
                &cluster,
                topic.id,
                partition,
                &bytes,
                floe_metastore::BatchKind::Plain,
            )
            .await
            else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            match answer {
                Ok(offset) => {
                    shared.with(|w| {
                        w.summary.acked_batches += 1;
                        w.log(format!(
                            "ack b{batch_id:x} {}/{partition}@{offset} x{records}",
                            topic.name
                        ));
                        w.acks.push(Ack {
                            topic: t,
                            topic_id: topic.id,
                            partition,
                            offset,
                            batch: batch_id,
                            records,
                            keys: keys.clone(),
                            tombstones: tombstones.clone(),
                            idempotent,
                            sent_ms,
                        });
                    });
                    if idempotent {
                        sequences.insert((t, partition), sequence.wrapping_add(records));
                    }
                    break;
                }
                // What a Kafka client retries: the error the agent would
                // send it (KafkaStorageError for upload and commit failures,
                // a key swept or a commit too late) is retriable, and the
                // same batch goes again with the same sequence.
                Err(e) if retriable(&e) && attempts < 30 && Instant::now() < stop => {
                    // A failed attempt may still land (its commit in flight,
                    // or retried by its agent) and, without idempotence to
                    // drop it, land after this retry and after other
                    // producers' later writes: its tombstones may then be a
                    // key's last word, as Kafka allows for a producer without
                    // idempotence.
                    if !idempotent {
                        shared.with(|w| {
                            for (key, tombstone) in keys.iter().zip(&tombstones) {
                                if let (Some(key), true) = (key, tombstone) {
                                    w.unacked_tombstones.insert((partition, *key));
                                }
                            }
                        });
                    }
                    let backoff = shared.with(|w| w.rng_below(1_000));
                    tokio::time::sleep(Duration::from_millis(100 + backoff)).await;
                }
                Err(e) => {
                    shared.with(|w| {
                        for (key, tombstone) in keys.iter().zip(&tombstones) {
                            if let (Some(key), true) = (key, tombstone) {
                                w.unacked_tombstones.insert((partition, *key));
                            }
                        }
                        w.summary.failed_produces += 1;
                        w.log(format!(
                            "gave up b{batch_id:x} {}/{partition}: {e}",
                            topic.name
                        ));
                    });
                    // Whether the batch landed is unknown, so the next one
                    // cannot take its sequence: an idempotent producer
                    // starts over with a new epoch, as Kafka's does (KIP-360).
                    // (Reusing the sequence for other data would have it
                    // answered as a duplicate of the lost batch.)
                    if idempotent {
                        identity = None;
                    }
                    break;
                }
            }
        }
    }
}

/// A random live agent's batcher, as a client picks a broker; `None` when
/// every agent is down.
async fn any_live_batcher(
    shared: &Shared,
    cluster: &tokio::sync::Mutex<Cluster>,
) -> Option<Batcher> {
    let pick = shared.with(|w| w.rng_below(1 << 20));
    cluster.lock().await.live_batcher(pick)
}

/// One attempt to produce `bytes` (one batch) through a random live agent,
/// as a Kafka producer's request: its offset, or why not (`None` when no
/// agent is up).
async fn deliver(
    shared: &Shared,
    cluster: &tokio::sync::Mutex<Cluster>,
    topic_id: TopicId,
    partition: i32,
    bytes: &Bytes,
    kind: floe_metastore::BatchKind,
) -> Option<Result<i64, AppendError>> {
    let batcher = any_live_batcher(shared, cluster).await?;
    let mut batches = RecordBatch::parse_all(bytes).expect("the producer's batch parses");
    assert_eq!(batches.len(), 1, "one batch per produce");
    let batch = batches.remove(0);
    // Kafka's producer gives up on a batch after `delivery.timeout.ms`
    // (two minutes), whatever became of it.
    let delivery = async {
        match batcher
            .enqueue(topic_id, partition, batch, (false, None), kind)
            .await
        {
            Ok(committed) => committed.offset().await,
            Err(e) => Err(e),
        }
    };
    Some(
        tokio::time::timeout(DELIVERY_TIMEOUT, delivery)
            .await
            .unwrap_or_else(|_| Err(AppendError::Storage("delivery timed out".into()))),
    )
}

/// Whether a Kafka client would retry a produce that failed so.
fn retriable(e: &AppendError) -> bool {
    match e {
        AppendError::Storage(_) => true,
        AppendError::Refused(refusal) => {
            floe_agent::broker::refusal_error(refusal)
                == floe_protocol::ResponseError::KafkaStorageError
        }
    }
}

/// Kafka's `delivery.timeout.ms` default.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);

/// Keys on the compacted topic.
const KEYS: u64 = 12;

/// A batch of records with `keys`, whose values name the batch and the record.
fn encode(
    batch: u64,
    keys: &[Option<u8>],
    tombstones: &[bool],
    timestamp: i64,
    identity: Option<ProducerIdentity>,
    base_sequence: i32,
    transactional: bool,
) -> Bytes {
    let (producer_id, producer_epoch) = identity.map_or((-1, -1), |p| (p.producer_id, p.epoch));
    let records: Vec<Record> = (0..keys.len() as i32)
        .map(|i| Record {
            transactional,
            control: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // Consecutive even without a producer id: kafka-protocol's
            // encoder starts a new batch where sequences do not follow.
            sequence: base_sequence.wrapping_add(i),
            timestamp,
            delete_horizon: false,
            key: keys[i as usize].map(|k| Bytes::from(format!("k{k}"))),
            // A tombstone has no value: its name rides in a header.
            value: (!tombstones[i as usize]).then(|| Bytes::from(value(batch, i))),
            headers: [(
                StrBytes::from_static_str("sim"),
                Some(Bytes::from(value(batch, i))),
            )]
            .into_iter()
            .collect(),
        })
        .collect();
    encode_batch(&records, Compression::None)
}

/// `records` as one batch, as a producer sends it.
pub(crate) fn encode_batch(records: &[Record], compression: Compression) -> Bytes {
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .expect("the batch encodes");
    buf.freeze()
}

/// A day: tombstones kept longer than any run.
const DAY_MS: i64 = 86_400_000;

/// The topic an operator deletes, re-creates and grows during the run.
const SCRATCH: &str = "scratch";

fn scratch_topic(partitions: i32, retention_ms: i64) -> NewTopic {
    NewTopic {
        name: SCRATCH.into(),
        partitions,
        configs: BTreeMap::from([("retention.ms".to_string(), retention_ms.to_string())]),
    }
}

/// An operator at work while producers run: DeleteRecords on the retained
/// topic, and the scratch topic deleted and re-created (a new id, maybe
/// fewer partitions) or given more partitions. Its data shares ingest files
/// with the other topics, so deleting it must release only its own extents.
async fn admin(
    shared: Shared,
    meta: Arc<dyn Metastore>,
    bucket: Arc<dyn ObjectStore>,
    events: TopicInfo,
    retention_ms: i64,
    stop: Instant,
) {
    while Instant::now() < stop {
        let (pause, what) = shared.with(|w| (5_000 + w.rng_below(40_000), w.rng_below(5)));
        tokio::time::sleep(Duration::from_millis(pause)).await;
        match what {
            0 | 1 => delete_records(&shared, meta.as_ref(), &events).await,
            4 => backup(&shared, &meta, &bucket, &events).await,
            2 => {
                let deleted = meta.delete_topic(SCRATCH).await;
                let partitions = shared.with(|w| 1 + w.rng_below(4) as i32);
                let created = meta
                    .create_topic(scratch_topic(partitions, retention_ms))
                    .await;
                shared.with(|w| {
                    w.log(format!(
                        "admin: scratch deleted ({deleted:?}), re-created with {partitions} partitions ({:?})",
                        created.map(|t| t.id)
                    ))
                });
            }
            _ => {
                let now = shared.with(|w| w.scratch.as_ref().map_or(1, |t| t.partitions));
                let grown = meta.create_partitions(SCRATCH, (now + 1).min(8)).await;
                shared.with(|w| {
                    w.log(format!(
                        "admin: scratch grown to {} partitions ({grown:?})",
                        now + 1
                    ))
                });
            }
        }
        // Producers see the topic as the metastore has it now (or, if it
        // does not answer, keep the one they had, and get refusals).
        if let Ok(scratch) = meta.topic(SCRATCH).await {
            shared.with(|w| w.scratch = scratch);
        }
    }
}

/// A backup's hold on GC, then what the backup would name: every object
/// the topic's partitions refer to once the hold is in force. Each must stay
/// in the bucket until the hold expires, whatever compaction, retention and
/// DeleteRecords free meanwhile (checked near its end, by a task of its own).
async fn backup(
    shared: &Shared,
    meta: &Arc<dyn Metastore>,
    bucket: &Arc<dyn ObjectStore>,
    topic: &TopicInfo,
) {
    let hold_ms = shared.with(|w| 20_000 + w.rng_below(100_000) as i64);
    // The hold is taken at or after this instant, so it lasts at least
    // until `hold_ms` after it (less a margin for the leader's clock).
    let check_at = Instant::now() + Duration::from_millis(hold_ms as u64 - 2_000);
    let held = meta.hold_garbage(hold_ms).await;
    shared.with(|w| w.log(format!("admin: backup hold of {hold_ms} ms: {held:?}")));
    if held.is_err() {
        return;
    }
    let mut named = BTreeSet::new();
    for p in 0..topic.partitions {
        match meta.read_plan(topic.id, p, 0, u64::MAX).await {
            Ok(plan) => named.extend(plan.extents.into_iter().map(|e| e.object_key)),
            Err(_) => return, // the backup failed; it holds nothing to check
        }
    }
    if Instant::now() >= check_at {
        return; // the metastore was slow to answer: too late to check
    }
    let (shared, bucket) = (shared.clone(), bucket.clone());
    tokio::spawn(async move {
        tokio::time::sleep_until(check_at).await;
        for key in named {
            if let Err(object_store::Error::NotFound { .. }) = bucket
                .head(&floe_storage::ObjectPath::from(key.as_str()))
                .await
            {
                shared.with(|w| {
                    w.anomaly(format!(
                        "GC deleted {key}, named by a backup whose hold of {hold_ms} ms had not expired"
                    ))
                });
            }
        }
    });
}

/// DeleteRecords up to an offset at or below the high watermark.
async fn delete_records(shared: &Shared, meta: &dyn Metastore, topic: &TopicInfo) {
    let p = shared.with(|w| w.rng_below(topic.partitions as u64) as i32);
    let Ok(offsets) = meta.offsets(topic.id, p).await else {
        return;
    };
    let span = offsets.high_watermark - offsets.log_start_offset;
    let cut =
        offsets.log_start_offset + shared.with(|w| w.rng_below(span.max(0) as u64 + 1)) as i64;
    // Noted before the call: it may apply although its answer is lost.
    let excused = shared.with(|w| {
        let before = w.deleted_before.entry((0, p)).or_insert(0);
        std::mem::replace(before, (*before).max(cut))
    });
    let result = meta.trim(topic.id, p, cut).await;
    shared.with(|w| {
        // Refused for certain: nothing more is excused than before.
        if let Err(e) = &result
            && e.certainly_not_applied()
        {
            w.deleted_before.insert((0, p), excused);
        }
        w.log(format!(
            "admin: DeleteRecords {}/{p} before {cut}: {result:?}",
            topic.name
        ))
    });
}

/// The value of record `i` of batch `batch`: what the auditor looks for.
pub fn value(batch: u64, i: i32) -> String {
    format!("b{batch:x}-{i}")
}
