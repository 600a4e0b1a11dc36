//! Stage 3 of the simulation: whole agents, through the Kafka protocol.
//! Each agent is the one `floe agent` runs ([`Agent::start_in`]: its
//! listeners, connection code, handlers, batcher, read path, watermarks,
//! background jobs), in this deterministic process: its clock is the
//! simulation's, skewed per agent; its ids are seeded; its listeners are on
//! an in-memory network ([`SimNetwork`]). The metastore and the store are
//! stage 2's, faults included.
//!
//! Every client authenticates (SASL/PLAIN, as a super user but for the
//! `intruders`) and every request is held to the ACLs.
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

mod admin;
mod audit;
mod client;
mod cluster;
mod eos;
mod groups;
mod intruders;
mod kip848;
mod network;
mod pipeline;
mod produce;
mod read;
mod shares;
mod txns;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use floe_metastore::{Metastore, NewTopic};
use floe_storage::ObjectStore;
use object_store::memory::InMemory;
use tokio::time::{Duration, Instant};

use super::meta::{MetaFaults, SimMetastore};
use super::store::StoreFaults;
use super::{Shared, Summary, raft, run_seeded};
use audit::audit;
use client::Client;
use cluster::{Cluster, crash_and_restart};
use eos::{EOS_TOPIC, audit_eos, transform};
use groups::{audit_group, consume, drain};
use network::SimNetwork;
use pipeline::{PIPE_TOPIC, pipeline};
use produce::produce;
use read::read_along;
use txns::{TXN_TOPIC, audit_txns, read_committed_along, transact};

/// What one run through the Kafka protocol is made of.
#[derive(Debug, Clone, Copy)]
pub struct KafkaSettings {
    /// Simulated time producers run for (then everything settles and is audited).
    pub duration: Duration,
    pub agents: usize,
    pub producers: usize,
    /// Transactional producers (each its own transactional id).
    pub transactional: usize,
    /// Clients pipelining requests on one connection (each its own partition).
    pub pipelines: usize,
    /// Consume-transform-produce with transactions: one transformer per
    /// partition of the producers' topic when set.
    pub exactly_once: bool,
    /// Members of one consumer group reading the producers' topic (Raft
    /// runs only: the plain metastore has no group timers, so a member
    /// that goes silent is never expired).
    pub consumers: usize,
    /// Members of one share group (KIP-932) reading the producers' topic.
    pub share_members: usize,
    /// The metastore as a three-node Raft group, with its own weather
    /// (nodes killed, links cut, clocks skewed), instead of the plain one.
    pub raft: bool,
    /// With `raft`: the group's nodes keep their log in one simulated
    /// database (the PostgreSQL design) instead of Raft.
    pub shared_log: bool,
    pub partitions: i32,
}

impl Default for KafkaSettings {
    fn default() -> Self {
        KafkaSettings {
            duration: Duration::from_secs(300),
            agents: 3,
            producers: 3,
            transactional: 2,
            pipelines: 2,
            exactly_once: true,
            consumers: 3,
            share_members: 2,
            raft: false,
            shared_log: false,
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
    let limit = settings.duration + Duration::from_secs(3_600);
    run_seeded(seed, limit, |shared| async move {
        simulate(&shared, settings).await
    })
}

/// What the checkers hold the agents to.
#[derive(Default)]
pub(super) struct Ledger {
    /// Per partition, one past the highest offset acknowledged so far.
    acked_end: BTreeMap<i32, i64>,
    /// Every acknowledged batch: (partition, base offset) -> its values.
    acked: Vec<(i32, i64, Vec<String>)>,
    /// Every value sent, acknowledged or not.
    sent: BTreeSet<String>,
    /// What was read at each (partition, offset), by anyone, ever.
    read: BTreeMap<(i32, i64), String>,
    fetches_checked: u64,
    txns: txns::TxnLedger,
    eos: eos::EosLedger,
    /// Per consumer group.
    groups: BTreeMap<&'static str, groups::GroupLedger>,
    /// The share group's deliveries.
    shares: shares::ShareLedger,
}

impl Ledger {
    fn group(&mut self, group: &'static str) -> &mut groups::GroupLedger {
        self.groups.entry(group).or_default()
    }
}

type Books = Arc<Mutex<Ledger>>;

async fn simulate(shared: &Shared, settings: KafkaSettings) {
    crate::memory::reset();
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
            slow: 0.01,
            slow_latency: Duration::from_secs(5),
        };
    });
    let group = match settings.raft {
        true => {
            let kind = match settings.shared_log {
                true => raft::Kind::SharedLog,
                false => raft::Kind::Raft,
            };
            Some(Arc::new(raft::start(shared, kind).await))
        }
        false => None,
    };
    let meta: Arc<dyn Metastore> = match &group {
        Some(group) => group.client.clone(),
        None => Arc::new(SimMetastore::new(shared.clone())),
    };
    let bucket: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let net = Arc::new(SimNetwork::default());
    for topic in [TOPIC, TXN_TOPIC, EOS_TOPIC] {
        create_topic(&meta, topic, settings.partitions).await;
    }
    create_topic(&meta, PIPE_TOPIC, settings.pipelines as i32).await;
    shares::configure(&meta).await;
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
    for t in 0..settings.transactional {
        let client = Client::sticky(shared, &net, settings.agents, t);
        let task = transact(client, books.clone(), t, settings.partitions, end);
        producers.push(tokio::spawn(task));
    }
    let client = || Client::new(shared, &net, settings.agents);
    producers.push(tokio::spawn(intruders::mallory(
        client(),
        settings.partitions,
        end,
    )));
    let alice = intruders::alice(client(), books.clone(), settings.partitions, end);
    producers.push(tokio::spawn(alice));
    producers.push(tokio::spawn(intruders::grant_and_revoke(client(), end)));
    for p in 0..settings.pipelines {
        let task = pipeline(shared.clone(), net.clone(), p as i32, settings.agents, end);
        producers.push(tokio::spawn(task));
    }
    for partition in (0..settings.partitions).filter(|_| settings.exactly_once) {
        let client = Client::sticky(shared, &net, settings.agents, partition as usize);
        producers.push(tokio::spawn(transform(
            client,
            books.clone(),
            partition,
            end,
        )));
    }
    let consumers = if group.is_some() {
        settings.consumers
    } else {
        0
    };
    let topic_id = topic_id(&meta).await;
    for _ in 0..consumers {
        let client = Client::new(shared, &net, settings.agents);
        let task = consume(client, books.clone(), settings.partitions, end);
        producers.push(tokio::spawn(task));
        let client = Client::new(shared, &net, settings.agents);
        let task = kip848::consume_848(client, books.clone(), topic_id, end, None);
        producers.push(tokio::spawn(task));
    }
    for _ in 0..settings.share_members {
        let client = Client::new(shared, &net, settings.agents);
        let task = shares::share_consume(
            client,
            net.clone(),
            settings.agents,
            books.clone(),
            topic_id,
            end,
            None,
        );
        producers.push(tokio::spawn(task));
    }
    for group in [groups::GROUP, kip848::GROUP]
        .into_iter()
        .filter(|_| consumers > 0)
    {
        let client = Client::new(shared, &net, settings.agents);
        let task = admin::meddle(client, books.clone(), group, settings.partitions, end);
        producers.push(tokio::spawn(task));
    }
    producers.push(tokio::spawn(read_committed_along(
        Client::new(shared, &net, settings.agents),
        books.clone(),
        settings.partitions,
        end,
    )));
    let reader = tokio::spawn(read_along(
        Client::new(shared, &net, settings.agents),
        books.clone(),
        settings.partitions,
        end,
    ));
    let chaos = tokio::spawn(crash_and_restart(cluster.clone(), end));
    let freezes = match &group {
        Some(group) => tokio::spawn(raft_weather_until(shared.clone(), group.clone(), end)),
        None => tokio::spawn(freeze_now_and_then(shared.clone(), end)),
    };
    for task in producers.into_iter().chain([reader, chaos, freezes]) {
        if let Err(e) = task.await {
            shared.with(|w| w.anomaly(format!("a client of the simulation failed: {e}")));
        }
    }
    // Calm: every agent up, no faults, then read everything through each.
    shared.with(|w| {
        w.meta_faults = MetaFaults::default();
        w.store_faults = StoreFaults::default();
        w.net = raft::NetFaults::default();
        w.database = raft::DatabaseFaults::default();
        w.log("calm: auditing".into());
    });
    if let Some(group) = &group {
        for i in 0..raft::NODES as usize {
            group.restart(i).await;
        }
        // A replacement the weather left halfway is finished.
        if let Err(why) = group.all_voters().await {
            shared.with(|w| w.anomaly(why));
        }
    }
    for i in 0..settings.agents {
        cluster.start(i).await;
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    audit(shared, &net, &books, settings).await;
    audit_txns(shared, &net, &books, settings).await;
    if settings.exactly_once {
        let client = Client::new(shared, &net, settings.agents);
        audit_eos(&client, &net, &books, settings).await;
    }
    if consumers > 0 {
        let acked_end = books.lock().expect("books").acked_end.clone();
        let ends: BTreeMap<i32, i64> = (0..settings.partitions)
            .map(|p| (p, acked_end.get(&p).copied().unwrap_or(0)))
            .collect();
        let client = || Client::new(shared, &net, settings.agents);
        // An administrator resets or deletes the group's offsets (its
        // members are gone), then a last member drains it.
        admin::reset_empty(&client(), &books, groups::GROUP, settings.partitions).await;
        drain(client(), books.clone(), settings.partitions, ends.clone()).await;
        audit_group(&client(), &books, groups::GROUP);
        admin::reset_empty(&client(), &books, kip848::GROUP, settings.partitions).await;
        kip848::consume_848(client(), books.clone(), topic_id, end, Some(ends)).await;
        audit_group(&client(), &books, kip848::GROUP);
    }
    if settings.share_members > 0 {
        // A last member drains the share group: every record ends.
        let acked_end = books.lock().expect("books").acked_end.clone();
        let client = Client::new(shared, &net, settings.agents);
        let task = shares::share_consume(
            client,
            net.clone(),
            settings.agents,
            books.clone(),
            topic_id,
            end,
            Some(acked_end),
        );
        task.await;
        shares::audit_shares(&Client::new(shared, &net, settings.agents), &books);
    }
    check_memory(shared);
    if let Some(largest) = crate::memory::largest() {
        shared.with(|w| {
            w.log(format!(
                "memory: the largest allocation took {largest} bytes"
            ))
        });
    }
    if let Some(group) = &group
        && let Err(why) = raft::replicas_agree(group).await
    {
        shared.with(|w| w.anomaly(why));
    }
    for agent in cluster.agents.lock().await.iter_mut() {
        if let Some(agent) = agent.take() {
            agent.abort().await;
        }
    }
    shared.with(|w| w.summary.simulated_ms = w.start.elapsed().as_millis() as u64);
}

/// Now and then the metastore stops answering writes for a while (a leader
/// that froze), sometimes past the producers' delivery timeout, so they
/// give batches up and start over.
async fn freeze_now_and_then(shared: Shared, end: Instant) {
    while Instant::now() < end {
        let (wait, frozen) = shared.with(|w| {
            let frozen = match w.chance(0.3) {
                true => DELIVERY_TIMEOUT + Duration::from_secs(w.rng_below(60)),
                false => Duration::from_millis(w.rng_below(20_000)),
            };
            (Duration::from_secs(30 + w.rng_below(120)), frozen)
        });
        tokio::time::sleep(wait).await;
        shared.with(|w| {
            w.meta_faults.frozen_until = Some(Instant::now() + frozen);
            w.log(format!("metastore frozen for {frozen:?}"));
        });
    }
}

/// The Raft group's weather, now and then, until `end`; then it clears
/// (clients still finishing what they began need a metastore).
async fn raft_weather_until(shared: Shared, group: Arc<raft::RaftGroup>, end: Instant) {
    while Instant::now() < end {
        let pause = shared.with(|w| Duration::from_millis(w.rng_below(30_000)));
        tokio::time::sleep(pause).await;
        super::weather::raft_weather(&shared, &group, &[]).await;
    }
    shared.with(|w| {
        w.net = raft::NetFaults::default();
        w.database = raft::DatabaseFaults::default();
    });
    for i in 0..raft::NODES as usize {
        group.restart(i).await;
    }
}

/// The producers' topic's id (the consumer protocol names topics by id).
async fn topic_id(meta: &Arc<dyn Metastore>) -> uuid::Uuid {
    loop {
        if let Ok(Some(info)) = meta.topic(TOPIC).await {
            return info.id;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn create_topic(meta: &Arc<dyn Metastore>, topic: &str, partitions: i32) {
    loop {
        let created = meta
            .create_topic(NewTopic {
                name: topic.into(),
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

/// The most any one allocation may take: what an agent decompresses of one
/// batch at most, and room for the simulation's own largest tables.
const LARGEST_ALLOCATION: usize =
    floe_protocol::compression::MAX_DECOMPRESSED_BATCH_BYTES + (16 << 20);

/// Memory: whatever clients sent (bombs, lying counts), no allocation in
/// the process passed [`LARGEST_ALLOCATION`] (when it counts them, see
/// [`crate::memory`]).
pub(super) fn check_memory(shared: &Shared) {
    let Some(largest) = crate::memory::largest() else {
        return;
    };
    shared.with(|w| {
        if largest > LARGEST_ALLOCATION {
            w.anomaly(format!(
                "one allocation took {largest} bytes, past the {LARGEST_ALLOCATION} any input may cost"
            ));
        }
    });
}
