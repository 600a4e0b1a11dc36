//! Prometheus metrics, and the object-store hooks that count requests and
//! bytes by operation (what the cost model multiplies by S3's prices).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use floe_storage::ObjectStore;
use floe_storage::hooked::{HookedStore, Hooks, Op};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabel {
    pub op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabel {
    pub api: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabel {
    pub topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LagLabel {
    pub group: String,
    pub topic: String,
    pub partition: i32,
}

/// A share group's figures: its members and the records in flight (acquired
/// at least once and not yet done).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareFigures {
    pub group: String,
    pub members: i64,
    pub in_flight: i64,
    /// Records archived so far (rejected, gaps, at the delivery limit).
    pub archived: i64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabel {
    pub group: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabel {
    version: String,
    commit: String,
}

/// The most topics counted under their own names (the first an agent
/// sees; names are kept until it restarts); the others' counts go to
/// [`OTHER_TOPICS`], so that a cluster of many topics cannot grow an
/// agent's metrics without bound.
pub const MAX_TOPIC_LABELS: usize = 2_000;
/// Not a legal topic name (Kafka allows letters, digits, `.`, `_`, `-`).
pub const OTHER_TOPICS: &str = "<other>";

/// One topic's counters, looked up once and then shared.
#[derive(Clone)]
struct TopicCounters {
    produced_bytes: Counter,
    produced_records: Counter,
    fetched_bytes: Counter,
}

/// A process's CPU time so far and the most memory it has had.
#[derive(Debug, Clone, Copy)]
pub struct ProcessUse {
    pub cpu_seconds: f64,
    pub peak_rss_bytes: u64,
}

pub struct Metrics {
    registry: Registry,
    object_requests: Family<OpLabel, Counter>,
    object_bytes: Family<OpLabel, Counter>,
    object_errors: Family<OpLabel, Counter>,
    requests: Family<ApiLabel, Counter>,
    request_seconds: Family<ApiLabel, Histogram>,
    flush_bytes: Histogram,
    flush_batches: Histogram,
    /// Requests to a remote metastore, by operation (none when it is in-process).
    metastore_requests: Family<OpLabel, Counter>,
    /// Their round trips, when answered.
    metastore_seconds: Family<OpLabel, Histogram>,
    /// Messages of the subscription to the metastore's pushed changes,
    /// either way, by kind (not requests: one stream carries them).
    metastore_stream_messages: Family<OpLabel, Counter>,
    /// Calls to the metastore's PostgreSQL database, by call, and the
    /// round trips of those answered.
    database_calls: Family<OpLabel, Counter>,
    database_seconds: Family<OpLabel, Histogram>,
    /// How long the object store took to answer, by operation.
    object_seconds: Family<OpLabel, Histogram>,
    /// Per topic: record-batch bytes and records produced, bytes fetched.
    topic_produced_bytes: Family<TopicLabel, Counter>,
    topic_produced_records: Family<TopicLabel, Counter>,
    topic_fetched_bytes: Family<TopicLabel, Counter>,
    /// Each group's lag by partition, as last read (see `jobs::group_lag`),
    /// and the labels it holds (to drop those gone without emptying it).
    group_lag: Family<LagLabel, Gauge>,
    group_lag_labels: std::sync::Mutex<std::collections::HashSet<LagLabel>>,
    share_group_members: Family<GroupLabel, Gauge>,
    share_group_in_flight: Family<GroupLabel, Gauge>,
    share_group_archived: Family<GroupLabel, Gauge>,
    share_group_labels: std::sync::Mutex<std::collections::HashSet<GroupLabel>>,
    /// The counters of the topics past [`MAX_TOPIC_LABELS`].
    other_topics: std::sync::OnceLock<TopicCounters>,
    /// The counters of each topic counted under its own name (at most
    /// [`MAX_TOPIC_LABELS`]), read-mostly: a batch takes a read lock.
    topics_named: std::sync::RwLock<std::collections::HashMap<String, TopicCounters>>,
    /// What background passes step over (failed partitions, bad batches).
    pub background: floe_compactor::Counters,
    /// Kafka connections open now.
    pub connections: Gauge,
    /// Record-batch bytes producers sent that were committed (as on the wire).
    pub produced_bytes: Counter,
    /// Record-batch bytes sent to consumers in Fetch responses.
    pub fetched_bytes: Counter,
    /// Records handed to share-group members, each delivery counted, and
    /// those of them delivered before (KIP-932).
    pub share_acquired: Counter,
    pub share_redelivered: Counter,
    /// Share acknowledgements applied, by type (accept, release, reject,
    /// gap), in records.
    pub share_acknowledged: Family<OpLabel, Counter>,
    /// Share sessions open on this agent.
    pub share_sessions: Gauge,
    /// Held while counters totalled elsewhere are brought up to date, so
    /// two scrapes at once do not both add the same difference.
    syncing: std::sync::Mutex<()>,
    /// How the process's CPU time and peak memory are read (see
    /// [`Metrics::reading_process`]); not reported without.
    process: Option<fn() -> Option<ProcessUse>>,
    process_cpu_seconds: Counter<f64, AtomicU64>,
    process_peak_rss: Gauge,
    /// Connections closed on arrival by max_connections(_per_ip).
    pub connections_refused: Counter,
    /// Connections closed because they did not authenticate (SASL).
    pub authentication_failures: Counter,
    pub reauthentications: Counter,
    /// Reads a segment's offset index sent to a batch other than the one it
    /// names (read again from the extent's start).
    pub index_misses: Counter,
    /// What the block cache did, by event (brought up to date when scraped).
    cache_blocks: Family<OpLabel, Counter>,
    /// Agents in this one's cache ring, itself included (set when scraped).
    cache_ring_members: Gauge,
    /// Faults injected in S3's HTTP exchanges (`--inject-faults`, tests only).
    pub injected_faults: Arc<floe_storage::http_faults::Injected>,
    injected_faults_seen: Family<OpLabel, Counter>,
    /// Seconds since the metastore last answered, -1 if not since the agent
    /// started (set when scraped; /readyz fails past 15 s).
    pub metastore_heard_seconds: Gauge<f64, AtomicU64>,
    /// Bytes of the response and request budgets not taken (set when scraped).
    pub response_budget_free: Gauge,
    pub request_budget_free: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Reports the process's CPU time and peak memory as `read` finds them
    /// when scraped (what `floe cost --from-metrics` divides by: CPU per
    /// byte moved). The binary reads them from the operating system.
    pub fn reading_process(mut self, read: fn() -> Option<ProcessUse>) -> Self {
        self.registry.register(
            "process_cpu_seconds",
            "User and system CPU time this process has spent, in seconds",
            self.process_cpu_seconds.clone(),
        );
        self.registry.register(
            "process_resident_memory_peak_bytes",
            "The most resident memory this process has had (VmHWM)",
            self.process_peak_rss.clone(),
        );
        self.process = Some(read);
        self
    }

    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("floe");
        let object_requests = Family::<OpLabel, Counter>::default();
        let object_bytes = Family::<OpLabel, Counter>::default();
        let object_errors = Family::<OpLabel, Counter>::default();
        let requests = Family::<ApiLabel, Counter>::default();
        let request_seconds = Family::<ApiLabel, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.0005, 2.0, 18))) as fn() -> Histogram,
        );
        let flush_bytes = Histogram::new(exponential_buckets(1024.0, 4.0, 10));
        let flush_batches = Histogram::new(exponential_buckets(1.0, 4.0, 8));
        registry.register(
            "object_store_requests",
            "Object-store requests by operation",
            object_requests.clone(),
        );
        registry.register(
            "object_store_bytes",
            "Object-store bytes moved by operation",
            object_bytes.clone(),
        );
        registry.register(
            "object_store_errors",
            "Failed object-store requests by operation",
            object_errors.clone(),
        );
        registry.register(
            "kafka_requests",
            "Kafka requests handled, by API",
            requests.clone(),
        );
        registry.register(
            "kafka_request_duration_seconds",
            "Time from reading a Kafka request to its response, by API",
            request_seconds.clone(),
        );
        registry.register(
            "ingest_flush_bytes",
            "Size of each uploaded ingest file",
            flush_bytes.clone(),
        );
        registry.register(
            "ingest_flush_batches",
            "Record batches in each ingest file",
            flush_batches.clone(),
        );
        let metastore_requests = Family::<OpLabel, Counter>::default();
        registry.register(
            "metastore_requests",
            "Requests sent to a remote metastore by operation, retries included",
            metastore_requests.clone(),
        );
        let metastore_seconds = Family::<OpLabel, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.0002, 2.0, 16))) as fn() -> Histogram,
        );
        registry.register(
            "metastore_request_duration_seconds",
            "Round trips of answered requests to a remote metastore, by operation",
            metastore_seconds.clone(),
        );
        let metastore_stream_messages = Family::<OpLabel, Counter>::default();
        registry.register(
            "metastore_stream_messages",
            "Messages of this agent's subscription to the metastore's pushed changes, \
             either way, by kind",
            metastore_stream_messages.clone(),
        );
        let database_calls = Family::<OpLabel, Counter>::default();
        registry.register(
            "metastore_database_calls",
            "Calls this agent's metastore node made to its PostgreSQL database, by call",
            database_calls.clone(),
        );
        let database_seconds = Family::<OpLabel, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.0002, 2.0, 16))) as fn() -> Histogram,
        );
        registry.register(
            "metastore_database_call_duration_seconds",
            "Round trips of answered calls to the metastore's PostgreSQL database, by call",
            database_seconds.clone(),
        );
        let object_seconds = Family::<OpLabel, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.001, 2.0, 15))) as fn() -> Histogram,
        );
        registry.register(
            "object_store_request_duration_seconds",
            "How long the object store took to answer, by operation (a GET: until its body begins)",
            object_seconds.clone(),
        );
        let topic_produced_bytes = Family::<TopicLabel, Counter>::default();
        registry.register(
            "topic_produced_bytes",
            "Record-batch bytes produced and committed, by topic (as producers sent them)",
            topic_produced_bytes.clone(),
        );
        let topic_produced_records = Family::<TopicLabel, Counter>::default();
        registry.register(
            "topic_produced_records",
            "Records produced and committed, by topic",
            topic_produced_records.clone(),
        );
        let group_lag = Family::<LagLabel, Gauge>::default();
        registry.register(
            "group_lag",
            "Records a consumer group has yet to read, by partition: the log end offset less \
             its committed offset (read by agents with the jobs role, every group_lag_interval)",
            group_lag.clone(),
        );
        let topic_fetched_bytes = Family::<TopicLabel, Counter>::default();
        registry.register(
            "topic_fetched_bytes",
            "Record-batch bytes answered to Fetch requests, by topic",
            topic_fetched_bytes.clone(),
        );
        let connections = Gauge::default();
        registry.register(
            "connections",
            "Kafka connections open now",
            connections.clone(),
        );
        let connections_refused = Counter::default();
        registry.register(
            "connections_refused",
            "Connections closed on arrival by max_connections or max_connections_per_ip",
            connections_refused.clone(),
        );
        let authentication_failures = Counter::default();
        registry.register(
            "authentication_failures",
            "Connections closed because they did not authenticate (SASL): wrong credentials, a request out of turn, or too slow",
            authentication_failures.clone(),
        );
        let index_misses = Counter::default();
        registry.register(
            "segment_index_misses",
            "Reads a segment's offset index sent to a batch other than the one it names (then read from the segment's start)",
            index_misses.clone(),
        );
        let reauthentications = Counter::default();
        registry.register(
            "sasl_reauthentications",
            "SASL sessions renewed on their connection (KIP-368)",
            reauthentications.clone(),
        );
        let metastore_heard_seconds = Gauge::<f64, AtomicU64>::default();
        metastore_heard_seconds.set(-1.0);
        registry.register(
            "metastore_last_heard_seconds",
            "Seconds since the metastore last answered this agent (-1: not since it started); \
             the agent is not ready past 15",
            metastore_heard_seconds.clone(),
        );
        let response_budget_free = Gauge::default();
        registry.register(
            "response_budget_free_bytes",
            "Bytes of max_response_bytes not held by responses being prepared or written",
            response_budget_free.clone(),
        );
        let request_budget_free = Gauge::default();
        registry.register(
            "request_budget_free_bytes",
            "Bytes of queued_max_request_bytes not held by requests being read",
            request_budget_free.clone(),
        );
        let produced_bytes = Counter::default();
        registry.register(
            "produced_bytes",
            "Record-batch bytes of Produce requests committed (as producers sent them)",
            produced_bytes.clone(),
        );
        let fetched_bytes = Counter::default();
        registry.register(
            "fetched_bytes",
            "Record-batch bytes answered to Fetch requests",
            fetched_bytes.clone(),
        );
        let share_acquired = Counter::default();
        registry.register(
            "share_records_acquired",
            "Records handed to share-group members (KIP-932), each delivery counted",
            share_acquired.clone(),
        );
        let share_redelivered = Counter::default();
        registry.register(
            "share_records_redelivered",
            "Records handed to share-group members that had been delivered before",
            share_redelivered.clone(),
        );
        let share_acknowledged = Family::<OpLabel, Counter>::default();
        registry.register(
            "share_records_acknowledged",
            "Records share-group members acknowledged, by type: accept, release, reject, gap",
            share_acknowledged.clone(),
        );
        let share_group_members = Family::<GroupLabel, Gauge>::default();
        registry.register(
            "share_group_members",
            "Members of each share group (KIP-932)",
            share_group_members.clone(),
        );
        let share_group_in_flight = Family::<GroupLabel, Gauge>::default();
        registry.register(
            "share_group_in_flight_records",
            "Records of each share group acquired at least once and not yet acknowledged or archived",
            share_group_in_flight.clone(),
        );
        let share_group_archived = Family::<GroupLabel, Gauge>::default();
        registry.register(
            "share_group_archived_records",
            "Records each share group archived so far: rejected, acknowledged as gaps, or delivered as often as group.share.delivery.count.limit allows",
            share_group_archived.clone(),
        );
        let share_sessions = Gauge::default();
        registry.register(
            "share_sessions",
            "Share sessions open on this agent",
            share_sessions.clone(),
        );
        let cache_blocks = Family::<OpLabel, Counter>::default();
        registry.register(
            "cache_blocks",
            "Cached blocks by event: store_get (read from the object store), peer_hit (sent by \
             the zone's owner), peer_fallback (the owner failed, was slow or refused: read from the \
             store), peer_skip (the owner failed lately: not asked), served and refused (to peers), \
             catch_up (read for a catch-up read), catch_up_part (a part of a block read from \
             the store for a catch-up read of a shared object), reloaded (found wrong, read from the store), \
             compaction_hit (read by compaction from this agent's cache), compaction_miss (in a \
             range compaction read from the store)",
            cache_blocks.clone(),
        );
        let cache_ring_members = Gauge::default();
        registry.register(
            "cache_ring_members",
            "Agents of this zone whose caches share blocks, this one included (0: the ring is off)",
            cache_ring_members.clone(),
        );
        let injected_faults_seen = Family::<OpLabel, Counter>::default();
        registry.register(
            "object_store_injected_faults",
            "Faults injected in S3's HTTP exchanges by --inject-faults (a testing aid), by kind",
            injected_faults_seen.clone(),
        );
        let background = floe_compactor::Counters::default();
        background.register(&mut registry);
        Metrics {
            authentication_failures,
            index_misses,
            reauthentications,
            syncing: Default::default(),
            injected_faults: Default::default(),
            injected_faults_seen,
            cache_blocks,
            cache_ring_members,
            metastore_heard_seconds,
            response_budget_free,
            request_budget_free,
            metastore_requests,
            metastore_seconds,
            metastore_stream_messages,
            database_calls,
            database_seconds,
            object_seconds,
            topic_produced_bytes,
            topic_produced_records,
            topic_fetched_bytes,
            topics_named: Default::default(),
            group_lag,
            group_lag_labels: Default::default(),
            share_group_members,
            share_group_in_flight,
            share_group_archived,
            share_group_labels: Default::default(),
            other_topics: Default::default(),
            background,
            connections,
            connections_refused,
            produced_bytes,
            fetched_bytes,
            share_acquired,
            share_redelivered,
            share_acknowledged,
            share_sessions,
            process: None,
            process_cpu_seconds: Default::default(),
            process_peak_rss: Default::default(),
            registry,
            object_requests,
            object_bytes,
            object_errors,
            requests,
            request_seconds,
            flush_bytes,
            flush_batches,
        }
    }

    /// Reports the build serving (`floe_build_info{version, commit} 1`).
    pub fn built(mut self, version: &str, commit: &str) -> Self {
        let info = Family::<BuildLabel, Gauge>::default();
        info.get_or_create(&BuildLabel {
            version: version.to_string(),
            commit: commit.to_string(),
        })
        .set(1);
        self.registry.register(
            "build_info",
            "The floe build serving: its version and commit",
            info,
        );
        self
    }

    /// A request sent to a remote metastore, and its round trip if answered.
    /// A call of the metastore node to its PostgreSQL database: `answered`
    /// within that long, or not (failed, or no answer in time).
    pub fn database_call(&self, call: &'static str, answered: Option<Duration>) {
        let label = OpLabel { op: call };
        self.database_calls.get_or_create(&label).inc();
        if let Some(took) = answered {
            self.database_seconds
                .get_or_create(&label)
                .observe(took.as_secs_f64());
        }
    }

    pub fn metastore_stream_message(&self, kind: &'static str) {
        let label = OpLabel { op: kind };
        self.metastore_stream_messages.get_or_create(&label).inc();
    }

    pub fn metastore_request(&self, op: &'static str, answered: Option<Duration>) {
        let label = OpLabel { op };
        self.metastore_requests.get_or_create(&label).inc();
        if let Some(took) = answered {
            self.metastore_seconds
                .get_or_create(&label)
                .observe(took.as_secs_f64());
        }
    }

    /// Replaces every group's lag with `lags`: new values first, then the
    /// series gone removed, so a scrape never sees the family emptied.
    pub fn set_group_lags(&self, lags: impl IntoIterator<Item = (LagLabel, i64)>) {
        let mut held = self.group_lag_labels.lock().expect("metrics lock poisoned");
        let mut now = std::collections::HashSet::new();
        for (label, lag) in lags {
            self.group_lag.get_or_create(&label).set(lag);
            now.insert(label);
        }
        for gone in held.difference(&now) {
            self.group_lag.remove(gone);
        }
        *held = now;
    }

    /// Each share group's members and records in flight; groups gone are
    /// no longer reported.
    pub fn set_share_groups(&self, groups: Vec<ShareFigures>) {
        let mut held = self
            .share_group_labels
            .lock()
            .expect("metrics lock poisoned");
        let mut now = std::collections::HashSet::new();
        for g in groups {
            let label = GroupLabel { group: g.group };
            self.share_group_members
                .get_or_create(&label)
                .set(g.members);
            self.share_group_in_flight
                .get_or_create(&label)
                .set(g.in_flight);
            now.insert(label);
        }
        for gone in held.difference(&now) {
            self.share_group_members.remove(gone);
            self.share_group_in_flight.remove(gone);
            self.share_group_archived.remove(gone);
        }
        *held = now;
    }

    /// Bytes and records of `topic` committed for producers.
    pub fn topic_produced(&self, topic: &str, bytes: u64, records: u64) {
        let counters = self.topic_counters(topic);
        counters.produced_bytes.inc_by(bytes);
        counters.produced_records.inc_by(records);
    }

    /// Bytes of `topic` answered to a fetch.
    pub fn topic_fetched(&self, topic: &str, bytes: u64) {
        self.topic_counters(topic).fetched_bytes.inc_by(bytes);
    }

    fn topic_counters(&self, topic: &str) -> TopicCounters {
        let named = &self.topics_named;
        {
            let read = named.read().expect("metrics lock poisoned");
            if let Some(counters) = read.get(topic) {
                return counters.clone();
            }
            if read.len() >= MAX_TOPIC_LABELS {
                return self.other_topic_counters();
            }
        }
        let mut named = named.write().expect("metrics lock poisoned");
        if let Some(counters) = named.get(topic) {
            return counters.clone();
        }
        if named.len() >= MAX_TOPIC_LABELS {
            return self.other_topic_counters();
        }
        let counters = self.counters_of(topic);
        named.insert(topic.to_string(), counters.clone());
        counters
    }

    fn other_topic_counters(&self) -> TopicCounters {
        self.other_topics
            .get_or_init(|| self.counters_of(OTHER_TOPICS))
            .clone()
    }

    fn counters_of(&self, topic: &str) -> TopicCounters {
        let label = TopicLabel {
            topic: topic.to_string(),
        };
        TopicCounters {
            produced_bytes: self.topic_produced_bytes.get_or_create(&label).clone(),
            produced_records: self.topic_produced_records.get_or_create(&label).clone(),
            fetched_bytes: self.topic_fetched_bytes.get_or_create(&label).clone(),
        }
    }

    pub fn request(&self, api: &str, took: Duration) {
        let label = ApiLabel {
            api: api.to_string(),
        };
        self.requests.get_or_create(&label).inc();
        self.request_seconds
            .get_or_create(&label)
            .observe(took.as_secs_f64());
    }

    pub fn flush(&self, bytes: usize, batches: usize) {
        self.flush_bytes.observe(bytes as f64);
        self.flush_batches.observe(batches as f64);
    }

    fn object(&self, op: &'static str, bytes: u64, ok: bool) {
        let label = OpLabel { op };
        self.object_requests.get_or_create(&label).inc();
        self.object_bytes.get_or_create(&label).inc_by(bytes);
        if !ok {
            self.object_errors.get_or_create(&label).inc();
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        {
            let _one_at_a_time = self.syncing.lock().expect("metrics lock poisoned");
            self.read_process();
            self.read_injected();
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String");
        out
    }

    /// Brings the counts of injected faults up to date.
    fn read_injected(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let injected = &self.injected_faults;
        for (op, count) in [
            ("slowdown", &injected.slowdowns),
            ("reset_before", &injected.resets_before),
            ("reset_after_put", &injected.resets_after_put),
            ("reset_after_other", &injected.resets_after_other),
        ] {
            raise_to(
                &self.injected_faults_seen.get_or_create(&OpLabel { op }),
                count.load(Relaxed),
            );
        }
    }

    /// Brings the block cache's counts up to date (the cache counts them).
    pub fn read_cache(&self, cache: &floe_cache::BlockCache) {
        use std::sync::atomic::Ordering::Relaxed;
        let _one_at_a_time = self.syncing.lock().expect("metrics lock poisoned");
        self.cache_ring_members
            .set(cache.ring().members().len() as i64);
        let cache = cache.counters();
        for (op, count) in [
            ("store_get", &cache.store_gets),
            ("peer_hit", &cache.peer_hits),
            ("peer_fallback", &cache.peer_fallbacks),
            ("peer_skip", &cache.peer_skips),
            ("reloaded", &cache.reloaded),
            ("served", &cache.served),
            ("refused", &cache.refused),
            ("catch_up", &cache.catch_up_blocks),
            ("catch_up_part", &cache.part_gets),
            ("compaction_hit", &cache.background_hits),
            ("compaction_miss", &cache.background_misses),
        ] {
            raise_to(
                &self.cache_blocks.get_or_create(&OpLabel { op }),
                count.load(Relaxed),
            );
        }
    }

    /// Brings the process's CPU time and peak memory up to date (they are
    /// read from /proc when scraped, not counted as they happen).
    fn read_process(&self) {
        if let Some(me) = self.process.and_then(|read| read()) {
            let counted = self.process_cpu_seconds.get();
            if me.cpu_seconds > counted {
                self.process_cpu_seconds.inc_by(me.cpu_seconds - counted);
            }
            self.process_peak_rss.set(me.peak_rss_bytes as i64);
        }
    }
}

/// Raises `counter` to `count`, a total counted elsewhere (counters only go up).
fn raise_to(counter: &Counter, count: u64) {
    let counted = counter.get();
    if count > counted {
        counter.inc_by(count - counted);
    }
}

/// Counts each object-store request and its bytes in [`Metrics`].
pub struct ObjectStoreMetrics(Arc<Metrics>);

impl Hooks for ObjectStoreMetrics {
    fn after(&self, op: Op, bytes: u64, ok: bool) -> object_store::Result<()> {
        self.0.object(op.name(), bytes, ok);
        Ok(())
    }

    fn answered(&self, op: Op, took: Duration) {
        self.0
            .object_seconds
            .get_or_create(&OpLabel { op: op.name() })
            .observe(took.as_secs_f64());
    }
}

/// An object store whose requests are counted in `metrics`.
pub type MeteredStore = HookedStore<ObjectStoreMetrics>;

pub fn metered(inner: Arc<dyn ObjectStore>, metrics: Arc<Metrics>) -> MeteredStore {
    HookedStore::new(inner, ObjectStoreMetrics(metrics))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_past_the_limit_are_counted_together() {
        let metrics = Metrics::new();
        for n in 0..MAX_TOPIC_LABELS + 3 {
            metrics.topic_produced(&format!("t{n}"), 10, 1);
        }
        metrics.topic_produced("t0", 5, 2);
        let text = metrics.render();
        assert!(
            text.contains("floe_topic_produced_bytes_total{topic=\"t0\"} 15\n"),
            "{text}"
        );
        assert!(text.contains("floe_topic_produced_records_total{topic=\"<other>\"} 3\n"));
        let named = text.matches("floe_topic_produced_bytes_total{").count();
        assert_eq!(named, MAX_TOPIC_LABELS + 1);
    }

    #[test]
    fn a_group_gone_drops_out_of_the_lags() {
        let metrics = Metrics::new();
        let lag = |group: &str, lag| {
            let label = LagLabel {
                group: group.into(),
                topic: "t".into(),
                partition: 0,
            };
            (label, lag)
        };
        metrics.set_group_lags([lag("a", 1), lag("b", 2)]);
        metrics.set_group_lags([lag("b", 5)]);
        let text = metrics.render();
        assert!(!text.contains("group=\"a\""), "{text}");
        assert!(
            text.contains("floe_group_lag{group=\"b\",topic=\"t\",partition=\"0\"} 5"),
            "{text}"
        );
    }
}
