//! The agents of a run: started in the simulation's world, crashed and
//! restarted at random.

use std::net::SocketAddr;
use std::sync::Arc;

use floe_agent::agent::Agent;
use floe_agent::config::Config;
use floe_agent::world::World as AgentWorld;
use floe_metastore::{Clock, Metastore};
use floe_storage::ObjectStore;
use floe_storage::hooked::HookedStore;
use tokio::time::{Duration, Instant};

use super::client;
use super::network::SimNetwork;
use crate::whole::store::SimStoreFaults;
use crate::whole::{SeededIds, Shared};

/// The agents, by index: each at a fixed address, so a restarted one is
/// found where clients knew it.
pub(super) struct Cluster {
    pub(super) shared: Shared,
    pub(super) meta: Arc<dyn Metastore>,
    pub(super) bucket: Arc<dyn ObjectStore>,
    pub(super) net: Arc<SimNetwork>,
    pub(super) agents: tokio::sync::Mutex<Vec<Option<Agent>>>,
    pub(super) dirs: Vec<tempfile::TempDir>,
}

/// The users of the agents' SASL/PLAIN listeners: the simulation's own
/// clients (a super user), and two whose rights are only what the ACLs
/// grant (see `intruders`).
pub(super) const USERS: [&str; 3] = ["sim", "alice", "mallory"];

pub(super) fn password_of(user: &str) -> String {
    format!("{user}-secret")
}

pub(super) fn kafka_address(i: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1 + i as u8], 9092))
}

impl Cluster {
    /// Starts agent `i` if it is down (retrying while the metastore fails it).
    pub(super) async fn start(&self, i: usize) {
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
        let users = self.dirs[i].path().join("users.txt");
        let lines: Vec<String> = USERS
            .iter()
            .map(|u| format!("{u}:{}", password_of(u)))
            .collect();
        std::fs::write(&users, lines.join("\n")).expect("the users file is written");
        let config = Config {
            // Every client authenticates (SASL/PLAIN) and every request is
            // held to the ACLs; the simulation's own clients are super users.
            sasl_plain_users: Some(users),
            acls: true,
            super_users: vec![format!("User:{}", client::SIM_USER)],
            listen: kafka_address(i),
            admin_listen: SocketAddr::from(([10, 0, 1, 1 + i as u8], 9644)),
            data_dir: self.dirs[i].path().to_path_buf(),
            flush_interval: Duration::from_millis(flush_ms),
            cache_ring: false,
            cache_bytes: bytesize::ByteSize::mib(4),
            cache_block_bytes: bytesize::ByteSize::kib(64),
            cache_catch_up_bytes: bytesize::ByteSize::kib(256),
            // Half the agents take reads a few records behind for catch-up
            // reads (pieces of shared files, whole blocks of segments).
            cache_catch_up_lag: bytesize::ByteSize::kib(if i.is_multiple_of(2) { 2 } else { 64 }),
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

pub(super) async fn crash_and_restart(cluster: Arc<Cluster>, end: Instant) {
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
