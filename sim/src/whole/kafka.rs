//! Stage 3 of the simulation: whole agents, through the Kafka protocol.
//! Each agent is the one `floe agent` runs ([`Agent::start_in`]: its
//! listeners, connection code, handlers, batcher, read path, watermarks,
//! background jobs), in this deterministic process: its clock is the
//! simulation's, skewed per agent; its ids are seeded; its listeners are on
//! an in-memory network ([`SimNetwork`]). The metastore and the store are
//! stage 2's, faults included.
//!
//! Clients speak Kafka to them as librdkafka's idempotent producer does,
//! in its essentials: one request in flight per producer, every failure
//! (an error code, no answer within the request timeout, a connection
//! dropped with the request unanswered) retried with the same producer id
//! and sequence through any agent, until the delivery timeout, after which
//! the producer gives the batch up and starts a new producer id. Readers
//! fetch from any agent. Agents crash (at once, as `kill -9`) and restart.
//!
//! Checked, during the run: a fetch never reports a high watermark below
//! an offset acknowledged before it began (read-your-writes across agents
//! and connections), and no offset ever holds two records; at the end,
//! read through every agent: every acknowledged record at its offset,
//! nothing twice, nothing nobody sent, each producer's records in the order
//! it sent them, and every agent reading the same log.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use floe_agent::agent::Agent;
use floe_agent::config::Config;
use floe_agent::world::{Accepted, Listening, Network, World as AgentWorld};
use floe_metastore::{Clock, Metastore, NewTopic};
use floe_protocol::client::Connection;
use floe_protocol::kafka_protocol::messages::*;
use floe_protocol::kafka_protocol::protocol::StrBytes;
use floe_protocol::kafka_protocol::records::{Compression, Record, TimestampType};
use floe_storage::ObjectStore;
use floe_storage::hooked::HookedStore;
use object_store::memory::InMemory;
use tokio::sync::mpsc;
use tokio::time::{Duration, Instant};

use super::meta::{MetaFaults, SimMetastore};
use super::store::{SimStoreFaults, StoreFaults};
use super::{SeededIds, Shared, Summary, encode_batch, seeded_runtime};

/// What one run through the Kafka protocol is made of.
#[derive(Debug, Clone, Copy)]
pub struct KafkaSettings {
    /// Simulated time producers run for (then everything settles and is audited).
    pub duration: Duration,
    pub agents: usize,
    pub producers: usize,
    pub partitions: i32,
}

impl Default for KafkaSettings {
    fn default() -> Self {
        KafkaSettings {
            duration: Duration::from_secs(300),
            agents: 3,
            producers: 3,
            partitions: 3,
        }
    }
}

const TOPIC: &str = "sim";
/// librdkafka's `request.timeout.ms` and `delivery.timeout.ms` (shorter:
/// runs are minutes long).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs one seed; `Ok` with the summary and trace when the checkers find nothing.
pub fn run(seed: u64, settings: KafkaSettings) -> Result<(Summary, Vec<String>), super::Failure> {
    let runtime = seeded_runtime(seed);
    let shared = runtime.block_on(async {
        let shared = Shared::new(seed);
        let limit = settings.duration + Duration::from_secs(3_600);
        shared
            .until_settled(limit, simulate(&shared, settings))
            .await;
        shared
    });
    drop(runtime);
    shared.outcome(seed)
}

/// What the checkers hold the agents to.
#[derive(Default)]
struct Ledger {
    /// Per partition, one past the highest offset acknowledged so far.
    acked_end: BTreeMap<i32, i64>,
    /// Every acknowledged batch: (partition, base offset) -> its values.
    acked: Vec<(i32, i64, Vec<String>)>,
    /// Every value sent, acknowledged or not.
    sent: BTreeSet<String>,
    /// What was read at each (partition, offset), by anyone, ever.
    read: BTreeMap<(i32, i64), String>,
    fetches_checked: u64,
}

type Books = Arc<Mutex<Ledger>>;

async fn simulate(shared: &Shared, settings: KafkaSettings) {
    shared.with(|w| {
        w.meta_faults = MetaFaults {
            unavailable: 0.01,
            lost_reply: 0.01,
            max_latency: Duration::from_millis(20),
            frozen_until: None,
        };
        w.store_faults = StoreFaults {
            put_error: 0.02,
            put_lost_reply: 0.01,
            get_error: 0.02,
            max_latency: Duration::from_millis(30),
        };
    });
    let meta: Arc<dyn Metastore> = Arc::new(SimMetastore::new(shared.clone()));
    let bucket: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let net = Arc::new(SimNetwork::default());
    create_topic(&meta, settings.partitions).await;
    let cluster = Arc::new(Cluster {
        shared: shared.clone(),
        meta: meta.clone(),
        bucket,
        net: net.clone(),
        agents: tokio::sync::Mutex::new((0..settings.agents).map(|_| None).collect()),
        dirs: (0..settings.agents)
            .map(|_| tempfile::tempdir().expect("a temporary folder"))
            .collect(),
    });
    for i in 0..settings.agents {
        cluster.start(i).await;
    }
    let books: Books = Arc::default();
    let end = Instant::now() + settings.duration;
    let mut producers = Vec::new();
    for p in 0..settings.producers {
        let client = Client::sticky(shared, &net, settings.agents, p);
        producers.push(tokio::spawn(produce(
            client,
            books.clone(),
            p,
            settings.partitions,
            end,
        )));
    }
    let reader = tokio::spawn(read_along(
        Client::new(shared, &net, settings.agents),
        books.clone(),
        settings.partitions,
        end,
    ));
    let chaos = tokio::spawn(crash_and_restart(cluster.clone(), end));
    for task in producers.into_iter().chain([reader, chaos]) {
        if let Err(e) = task.await {
            shared.with(|w| w.anomaly(format!("a client of the simulation failed: {e}")));
        }
    }
    // Calm: every agent up, no faults, then read everything through each.
    shared.with(|w| {
        w.meta_faults = MetaFaults::default();
        w.store_faults = StoreFaults::default();
        w.log("calm: auditing".into());
    });
    for i in 0..settings.agents {
        cluster.start(i).await;
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    audit(shared, &net, &books, settings).await;
    for agent in cluster.agents.lock().await.iter_mut() {
        if let Some(agent) = agent.take() {
            agent.abort().await;
        }
    }
    shared.with(|w| w.summary.simulated_ms = w.start.elapsed().as_millis() as u64);
}

async fn create_topic(meta: &Arc<dyn Metastore>, partitions: i32) {
    loop {
        let created = meta
            .create_topic(NewTopic {
                name: TOPIC.into(),
                partitions,
                configs: Default::default(),
            })
            .await;
        match created {
            Ok(_) => return,
            Err(e) if e.to_string().contains("exists") => return,
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The agents, by index: each at a fixed address, so a restarted one is
/// found where clients knew it.
struct Cluster {
    shared: Shared,
    meta: Arc<dyn Metastore>,
    bucket: Arc<dyn ObjectStore>,
    net: Arc<SimNetwork>,
    agents: tokio::sync::Mutex<Vec<Option<Agent>>>,
    dirs: Vec<tempfile::TempDir>,
}

fn kafka_address(i: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1 + i as u8], 9092))
}

impl Cluster {
    /// Starts agent `i` if it is down (retrying while the metastore fails it).
    async fn start(&self, i: usize) {
        let mut agents = self.agents.lock().await;
        if agents[i].is_some() {
            return;
        }
        let skew_ms = self.shared.with(|w| w.rng_below(10_001) as i64 - 5_000);
        let world = AgentWorld {
            clock: Arc::new(SkewedClock {
                shared: self.shared.clone(),
                skew_ms,
            }),
            ids: Arc::new(SeededIds(self.shared.clone())),
            network: self.net.clone(),
        };
        let store: Arc<dyn ObjectStore> = Arc::new(HookedStore::new(
            self.bucket.clone(),
            SimStoreFaults {
                shared: self.shared.clone(),
                agent: Some(i),
            },
        ));
        let flush_ms = self.shared.with(|w| 5 + w.rng_below(100));
        let config = Config {
            listen: kafka_address(i),
            admin_listen: SocketAddr::from(([10, 0, 1, 1 + i as u8], 9644)),
            data_dir: self.dirs[i].path().to_path_buf(),
            flush_interval: Duration::from_millis(flush_ms),
            cache_ring: false,
            cache_bytes: bytesize::ByteSize::mib(4),
            cache_block_bytes: bytesize::ByteSize::kib(64),
            cache_catch_up_bytes: bytesize::ByteSize::kib(256),
            compaction_interval: Duration::from_secs(20),
            compaction_min_extents: 2,
            compaction_max_age: Duration::from_secs(30),
            gc_grace: Duration::from_secs(30),
            ..Config::default()
        };
        loop {
            let metrics = Arc::new(floe_agent::metrics::Metrics::new());
            let started = Agent::start_in(
                world.clone(),
                config.clone(),
                self.meta.clone(),
                store.clone(),
                metrics,
            )
            .await;
            match started {
                Ok(agent) => {
                    self.shared
                        .with(|w| w.log(format!("agent {i} up, clock skew {skew_ms} ms")));
                    agents[i] = Some(agent);
                    return;
                }
                Err(e) => {
                    self.shared
                        .with(|w| w.log(format!("agent {i} did not start: {e}")));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Stops agent `i` at once, as a crash would.
    async fn crash(&self, i: usize) {
        let agent = self.agents.lock().await[i].take();
        if let Some(agent) = agent {
            self.shared.with(|w| {
                w.summary.crashes += 1;
                w.log(format!("agent {i} crashes"));
            });
            agent.abort().await;
        }
    }
}

async fn crash_and_restart(cluster: Arc<Cluster>, end: Instant) {
    let agents = cluster.dirs.len();
    while Instant::now() < end {
        let (wait, victim, down) = cluster.shared.with(|w| {
            (
                Duration::from_secs(10 + w.rng_below(50)),
                w.rng_below(agents as u64) as usize,
                Duration::from_millis(500 + w.rng_below(10_000)),
            )
        });
        tokio::time::sleep(wait).await;
        cluster.crash(victim).await;
        tokio::time::sleep(down).await;
        cluster.start(victim).await;
    }
}

/// An agent's clock: the simulation's, skewed.
#[derive(Debug)]
struct SkewedClock {
    shared: Shared,
    skew_ms: i64,
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> i64 {
        self.shared.with(|w| w.now_ms()) + self.skew_ms
    }
}

/// The agents' network: listeners bound to addresses in a table, each
/// connection a pair of in-memory pipes.
#[derive(Default)]
struct SimNetwork {
    listeners: Mutex<BTreeMap<SocketAddr, mpsc::Sender<Accepted>>>,
    next_client: Mutex<u32>,
}

impl SimNetwork {
    /// A connection to whoever listens at `address` now.
    async fn connect(&self, address: SocketAddr) -> io::Result<tokio::io::DuplexStream> {
        let refused = || io::Error::from(io::ErrorKind::ConnectionRefused);
        let listener = self
            .listeners
            .lock()
            .expect("net lock")
            .get(&address)
            .cloned();
        let listener = listener.ok_or_else(refused)?;
        let peer = {
            let mut next = self.next_client.lock().expect("net lock");
            *next += 1;
            SocketAddr::from((
                [10, 9, (*next >> 16) as u8, (*next >> 8) as u8],
                40_000 + (*next as u16 & 0xff),
            ))
        };
        let (client, server) = tokio::io::duplex(1 << 16);
        listener
            .send((Box::new(server), peer))
            .await
            .map_err(|_| refused())?;
        Ok(client)
    }
}

impl Network for SimNetwork {
    fn bind(
        &self,
        address: SocketAddr,
    ) -> futures::future::BoxFuture<'_, io::Result<Box<dyn Listening>>> {
        let (accepted, incoming) = mpsc::channel(64);
        // A restarted agent takes its address back from its dead self.
        self.listeners
            .lock()
            .expect("net lock")
            .insert(address, accepted);
        Box::pin(
            async move { Ok(Box::new(SimListening { address, incoming }) as Box<dyn Listening>) },
        )
    }
}

struct SimListening {
    address: SocketAddr,
    incoming: mpsc::Receiver<Accepted>,
}

impl Listening for SimListening {
    fn accept(&mut self) -> futures::future::BoxFuture<'_, io::Result<Accepted>> {
        Box::pin(async move {
            match self.incoming.recv().await {
                Some(accepted) => Ok(accepted),
                // Its address was bound again: it is no longer reached.
                None => std::future::pending().await,
            }
        })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.address)
    }
}

/// A Kafka client of the agents: a connection per request, as a client
/// that lost its connection opens another. It keeps to one agent (as a
/// client keeps to a partition's leader) until a request through it fails.
struct Client {
    shared: Shared,
    net: Arc<SimNetwork>,
    agents: usize,
    /// The agent it keeps to (`None`: a new one at random each request).
    sticky: Option<Mutex<usize>>,
}

/// Why a request got no answer.
#[derive(Debug)]
enum Unanswered {
    Refused,
    TimedOut,
    Dropped,
}

impl Client {
    fn new(shared: &Shared, net: &Arc<SimNetwork>, agents: usize) -> Client {
        Client {
            shared: shared.clone(),
            net: net.clone(),
            agents,
            sticky: None,
        }
    }

    /// A client that keeps to agent `first` while it answers.
    fn sticky(shared: &Shared, net: &Arc<SimNetwork>, agents: usize, first: usize) -> Client {
        Client {
            sticky: Some(Mutex::new(first % agents)),
            ..Client::new(shared, net, agents)
        }
    }

    /// The agent the next request goes to.
    fn agent(&self) -> usize {
        match &self.sticky {
            Some(agent) => *agent.lock().expect("client lock"),
            None => self
                .shared
                .with(|w| w.rng_below(self.agents as u64) as usize),
        }
    }

    /// After a failure through `agent`, a sticky client moves to another.
    fn failed(&self, agent: usize) {
        if let Some(sticky) = &self.sticky {
            let next = self
                .shared
                .with(|w| w.rng_below(self.agents as u64) as usize);
            let mut current = sticky.lock().expect("client lock");
            if *current == agent {
                *current = next;
            }
        }
    }

    /// One request through a random agent, answered within the request
    /// timeout; some the client abandons after sending (its connection
    /// drops), leaving the request running in the agent.
    async fn call<Req, Resp>(
        &self,
        api: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, Unanswered>
    where
        Req: floe_protocol::kafka_protocol::protocol::Encodable,
        Resp: floe_protocol::kafka_protocol::protocol::Decodable,
    {
        let agent = self.agent();
        let answer = self.call_on(agent, api, version, request).await;
        if answer.is_err() {
            self.failed(agent);
        }
        answer
    }

    async fn call_on<Req, Resp>(
        &self,
        agent: usize,
        api: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, Unanswered>
    where
        Req: floe_protocol::kafka_protocol::protocol::Encodable,
        Resp: floe_protocol::kafka_protocol::protocol::Decodable,
    {
        let abandon = self.shared.with(|w| w.chance(0.03));
        let stream = self
            .net
            .connect(kafka_address(agent))
            .await
            .map_err(|_| Unanswered::Refused)?;
        let mut conn = Connection::over(stream, "sim");
        let id = conn
            .send(api, version, request)
            .await
            .map_err(|_| Unanswered::Dropped)?;
        if abandon {
            // Give the agent a moment to take the request, then hang up.
            let pause = self
                .shared
                .with(|w| w.latency_up_to(Duration::from_millis(50)));
            tokio::time::sleep(pause).await;
            return Err(Unanswered::Dropped);
        }
        match tokio::time::timeout(REQUEST_TIMEOUT, conn.receive(api, version, id)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_)) => Err(Unanswered::Dropped),
            Err(_) => Err(Unanswered::TimedOut),
        }
    }
}

/// Error codes an idempotent producer retries (librdkafka's retriable ones).
fn retriable(code: i16) -> bool {
    use floe_protocol::ResponseError as E;
    [
        E::UnknownServerError,
        E::NotLeaderOrFollower,
        E::RequestTimedOut,
        E::NetworkException,
        E::NotEnoughReplicas,
        E::NotEnoughReplicasAfterAppend,
        E::KafkaStorageError,
        E::UnknownTopicOrPartition,
        E::CoordinatorLoadInProgress,
        E::CoordinatorNotAvailable,
        E::NotCoordinator,
        E::ConcurrentTransactions,
    ]
    .iter()
    .any(|e| e.code() == code)
}

/// One idempotent producer: batches of a few records to random partitions,
/// one in flight, until `end`.
async fn produce(client: Client, books: Books, me: usize, partitions: i32, end: Instant) {
    let mut identity = init_producer(&client).await;
    let mut sequences: BTreeMap<i32, i32> = BTreeMap::new();
    let mut batch = 0u64;
    while Instant::now() < end {
        batch += 1;
        let (partition, count, codec, pause) = client.shared.with(|w| {
            let codecs = [
                Compression::None,
                Compression::Gzip,
                Compression::Snappy,
                Compression::Lz4,
                Compression::Zstd,
            ];
            // Mostly its own partition, as a keyed workload's producer.
            let partition = match w.chance(0.8) {
                true => me as i32 % partitions,
                false => w.rng_below(partitions as u64) as i32,
            };
            (
                partition,
                1 + w.rng_below(5) as i32,
                codecs[w.rng_below(5) as usize],
                Duration::from_millis(w.rng_below(200)),
            )
        });
        let values: Vec<String> = (0..count)
            .map(|i| format!("p{me}-{}-{}-b{batch}-r{i}", identity.0, identity.1))
            .collect();
        let sequence = *sequences.entry(partition).or_default();
        let now_ms = client.shared.with(|w| w.now_ms());
        let records = encode(&values, identity, sequence, now_ms, codec);
        books
            .lock()
            .expect("books")
            .sent
            .extend(values.iter().cloned());
        match deliver(&client, partition, records).await {
            Some(offset) => {
                *sequences.entry(partition).or_default() += count;
                let mut books = books.lock().expect("books");
                let end_offset = books.acked_end.entry(partition).or_default();
                *end_offset = (*end_offset).max(offset + count as i64);
                books.acked.push((partition, offset, values));
                client.shared.with(|w| w.summary.acked_batches += 1);
            }
            None => {
                // Given up: librdkafka's idempotent producer starts a new
                // producer id rather than leave a gap in its sequences.
                client.shared.with(|w| {
                    w.summary.failed_produces += 1;
                    w.log(format!(
                        "producer {me} gave up batch {batch}; new producer id"
                    ));
                });
                identity = init_producer(&client).await;
                sequences.clear();
            }
        }
        tokio::time::sleep(pause).await;
    }
}

async fn init_producer(client: &Client) -> (i64, i16) {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    loop {
        let answer: Result<InitProducerIdResponse, _> =
            client.call(ApiKey::InitProducerId, 4, &request).await;
        match answer {
            Ok(r) if r.error_code == 0 => return (r.producer_id.0, r.producer_epoch),
            Ok(r) => client
                .shared
                .with(|w| w.log(format!("InitProducerId refused: {}", r.error_code))),
            Err(why) => client
                .shared
                .with(|w| w.log(format!("InitProducerId unanswered: {why:?}"))),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends one batch until it is acknowledged (its base offset) or the
/// delivery timeout passes (`None`: given up, fate unknown).
async fn deliver(client: &Client, partition: i32, records: Bytes) -> Option<i64> {
    use produce_request::*;
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(REQUEST_TIMEOUT.as_millis() as i32)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(records)),
                ]),
        ]);
    let deadline = Instant::now() + DELIVERY_TIMEOUT;
    let mut backoff = Duration::from_millis(100);
    while Instant::now() < deadline {
        let answer: Result<ProduceResponse, _> = client.call(ApiKey::Produce, 9, &request).await;
        match answer {
            Ok(r) => {
                let answered = r
                    .responses
                    .first()
                    .and_then(|t| t.partition_responses.first());
                let Some(p) = answered else {
                    client.shared.with(|w| {
                        w.anomaly(format!("a produce answered without its partition: {r:?}"))
                    });
                    return None;
                };
                match p.error_code {
                    0 => return Some(p.base_offset),
                    code if retriable(code) => {}
                    code => {
                        // An idempotent producer with one request in flight
                        // that resends the same sequence is never refused
                        // its order, nor anything else.
                        client.shared.with(|w| {
                            w.anomaly(format!(
                                "a produce to partition {partition} was refused with error {code}"
                            ))
                        });
                        return None;
                    }
                }
            }
            Err(why) => client
                .shared
                .with(|w| w.log(format!("produce to {partition} unanswered: {why:?}"))),
        }
        client.shared.with(|w| w.summary.retried_writes += 1);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
    None
}

/// One batch of `values` from producer `identity` at `sequence`.
fn encode(
    values: &[String],
    identity: (i64, i16),
    sequence: i32,
    timestamp: i64,
    compression: Compression,
) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, value)| Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            producer_id: identity.0,
            producer_epoch: identity.1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: sequence.wrapping_add(i as i32),
            timestamp,
            delete_horizon: false,
            key: None,
            value: Some(Bytes::from(value.clone())),
            headers: Default::default(),
        })
        .collect();
    encode_batch(&records, compression)
}

/// A Fetch of `partition` from `offset`, answered at once.
fn fetch_request(partition: i32, offset: i64) -> FetchRequest {
    use fetch_request::*;
    FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(partition)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(256 << 10),
                ]),
        ])
}

/// Records as read: (offset, value).
type Log = Vec<(i64, String)>;

/// What a fetch answered: its high watermark and records, or its
/// partition's error code.
type Fetched = Result<(i64, Log), i16>;

/// The partition's answer of a fetch. An answer without the partition, or
/// with records that do not decode, is an anomaly (and counts as the
/// unknown server error).
fn fetched(shared: &Shared, response: &FetchResponse) -> Fetched {
    let unknown = floe_protocol::ResponseError::UnknownServerError.code();
    let Some(data) = response
        .responses
        .first()
        .and_then(|t| t.partitions.first())
    else {
        shared.with(|w| w.anomaly("a fetch answered without its partition".into()));
        return Err(unknown);
    };
    if data.error_code != 0 {
        return Err(data.error_code);
    }
    let bytes = data.records.clone().unwrap_or_default();
    let decoded = floe_protocol::batch::RecordBatch::parse_all_stored(&bytes)
        .map_err(|e| e.to_string())
        .and_then(|batches| {
            floe_protocol::records::decode_all(&batches).map_err(|e| e.to_string())
        });
    let records = match decoded {
        Ok(records) => records,
        Err(e) => {
            shared.with(|w| w.anomaly(format!("a fetch's records do not decode: {e}")));
            return Err(unknown);
        }
    };
    let read = records
        .into_iter()
        .map(|r| {
            let value = r.value.map(|v| String::from_utf8_lossy(&v).into_owned());
            (r.offset, value.unwrap_or_default())
        })
        .collect();
    Ok((data.high_watermark, read))
}

/// One fetch through a random agent (`None`: unanswered).
async fn fetch(client: &Client, partition: i32, offset: i64) -> Option<Fetched> {
    let request = fetch_request(partition, offset);
    let response: FetchResponse = client.call(ApiKey::Fetch, 12, &request).await.ok()?;
    Some(fetched(&client.shared, &response))
}

/// Notes what a fetch read; an offset read twice must hold the same record.
fn note_read(shared: &Shared, books: &Books, partition: i32, read: &[(i64, String)]) {
    let mut books = books.lock().expect("books");
    for (offset, value) in read {
        match books.read.get(&(partition, *offset)) {
            Some(before) if before != value => shared.with(|w| {
                w.anomaly(format!(
                    "partition {partition} offset {offset} read as {before} and later as {value}"
                ))
            }),
            Some(_) => {}
            None => {
                books.read.insert((partition, *offset), value.clone());
            }
        }
    }
}

/// A reader along the run: fetches from anywhere below the acknowledged
/// end through any agent, and holds each answer's high watermark to every
/// acknowledgement that came before the fetch began.
async fn read_along(client: Client, books: Books, partitions: i32, end: Instant) {
    while Instant::now() < end {
        let (partition, pause, pick) = client.shared.with(|w| {
            (
                w.rng_below(partitions as u64) as i32,
                Duration::from_millis(w.rng_below(300)),
                w.rng_below(1 << 20) as i64,
            )
        });
        let floor = books
            .lock()
            .expect("books")
            .acked_end
            .get(&partition)
            .copied()
            .unwrap_or(0);
        let from = if floor == 0 { 0 } else { pick % floor };
        let answer = fetch(&client, partition, from).await;
        // Nothing is trimmed in this stage: an offset below one acknowledged
        // is in range, whoever answers.
        let out_of_range = floe_protocol::ResponseError::OffsetOutOfRange.code();
        if let Some(Err(code)) = answer
            && code == out_of_range
        {
            client.shared.with(|w| {
                w.anomaly(format!(
                    "a fetch of partition {partition} from {from} was out of range, \
                     below {floor} acknowledged before it began"
                ))
            });
        }
        if let Some(Ok((high_watermark, read))) = answer {
            if high_watermark < floor {
                client.shared.with(|w| {
                    w.anomaly(format!(
                        "a fetch of partition {partition} from {from} reported high watermark \
                         {high_watermark}, below {floor} acknowledged before it began"
                    ))
                });
            }
            note_read(&client.shared, &books, partition, &read);
            books.lock().expect("books").fetches_checked += 1;
        }
        tokio::time::sleep(pause).await;
    }
}

/// Reads every partition whole through each agent, and checks the log:
/// every agent serves the same dense log up to the same high watermark, at
/// least every acknowledged offset; then the records themselves.
async fn audit(shared: &Shared, net: &SimNetwork, books: &Books, settings: KafkaSettings) {
    for partition in 0..settings.partitions {
        let acked_end = books
            .lock()
            .expect("books")
            .acked_end
            .get(&partition)
            .copied()
            .unwrap_or(0);
        // The first agent's answer: who, its high watermark, its log.
        let mut first: Option<(usize, i64, Log)> = None;
        for agent in 0..settings.agents {
            let (high_watermark, log) = read_whole(shared, net, agent, partition).await;
            let dense = log
                .iter()
                .enumerate()
                .all(|(i, (offset, _))| *offset == i as i64);
            if !dense || log.len() as i64 != high_watermark || high_watermark < acked_end {
                shared.with(|w| {
                    w.anomaly(format!(
                        "agent {agent} serves partition {partition} as {} records up to high \
                         watermark {high_watermark} (dense: {dense}), {acked_end} acknowledged",
                        log.len()
                    ))
                });
            }
            note_read(shared, books, partition, &log);
            match &first {
                None => first = Some((agent, high_watermark, log)),
                Some((other, hw, seen)) if *hw != high_watermark || *seen != log => {
                    shared.with(|w| {
                        w.anomaly(format!(
                            "agents {other} and {agent} serve partition {partition} differently \
                             (high watermarks {hw} and {high_watermark})"
                        ))
                    });
                }
                Some(_) => {}
            }
        }
    }
    let books = books.lock().expect("books");
    let mut anomalies = Vec::new();
    for (partition, offset, values) in &books.acked {
        for (i, value) in values.iter().enumerate() {
            let at = offset + i as i64;
            match books.read.get(&(*partition, at)) {
                Some(read) if read == value => {}
                Some(read) => anomalies.push(format!(
                    "acknowledged {value} at partition {partition} offset {at}, which holds {read}"
                )),
                None => anomalies.push(format!(
                    "acknowledged {value} at partition {partition} offset {at}, which reads as nothing"
                )),
            }
        }
    }
    let mut seen: BTreeMap<&str, (i32, i64)> = BTreeMap::new();
    // Per producer session and partition, the last batch read, by offset.
    let mut order: BTreeMap<(String, i32), (u64, i64)> = BTreeMap::new();
    for ((partition, offset), value) in &books.read {
        if !books.sent.contains(value) {
            anomalies.push(format!(
                "partition {partition} offset {offset} holds {value}, never sent"
            ));
        }
        if let Some(first) = seen.insert(value, (*partition, *offset)) {
            anomalies.push(format!(
                "{value} stored twice: at {first:?} and {:?}",
                (*partition, *offset)
            ));
        }
        if let Some((session, batch)) = session_and_batch(value) {
            let last = order
                .entry((session, *partition))
                .or_insert((batch, *offset));
            if batch < last.0 {
                anomalies.push(format!(
                    "{value} at partition {partition} offset {offset} after batch {} of its producer",
                    last.0
                ));
            }
            *last = (batch.max(last.0), *offset);
        }
    }
    shared.with(|w| {
        w.summary.polled_records += books.read.len() as u64;
        w.log(format!(
            "audit: {} batches acknowledged, {} records read, {} fetches checked",
            books.acked.len(),
            books.read.len(),
            books.fetches_checked
        ));
        for anomaly in anomalies {
            w.anomaly(anomaly);
        }
    });
}

/// `p{producer}-{id}-{epoch}-b{batch}-r{record}`: the producer session and
/// the batch.
fn session_and_batch(value: &str) -> Option<(String, u64)> {
    let (session, rest) = value.split_once("-b")?;
    let (batch, _) = rest.split_once("-r")?;
    Some((session.to_string(), batch.parse().ok()?))
}

/// The partition from its start to its high watermark, as agent `agent`
/// serves it (retrying what fails), and that high watermark.
async fn read_whole(
    shared: &Shared,
    net: &SimNetwork,
    agent: usize,
    partition: i32,
) -> (i64, Vec<(i64, String)>) {
    let mut log = Vec::new();
    let mut offset = 0;
    for _ in 0..10_000 {
        let Ok(stream) = net.connect(kafka_address(agent)).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut conn = Connection::over(stream, "audit");
        let Some(Ok((high_watermark, read))) = fetch_on(shared, &mut conn, partition, offset).await
        else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        if let Some((last, _)) = read.last() {
            offset = last + 1;
        }
        log.extend(read);
        if offset >= high_watermark {
            return (high_watermark, log);
        }
    }
    shared.with(|w| {
        w.anomaly(format!(
            "agent {agent} never served partition {partition} past offset {offset}"
        ))
    });
    (offset, log)
}

async fn fetch_on(
    shared: &Shared,
    conn: &mut Connection,
    partition: i32,
    offset: i64,
) -> Option<Fetched> {
    let request = fetch_request(partition, offset);
    let call = conn.call(ApiKey::Fetch, 12, &request);
    let response: FetchResponse = tokio::time::timeout(REQUEST_TIMEOUT, call)
        .await
        .ok()?
        .ok()?;
    Some(fetched(shared, &response))
}
