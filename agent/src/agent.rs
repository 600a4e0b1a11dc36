//! An agent's life: [`Agent::start`] binds its listeners, registers it,
//! starts its background work and serves; [`Agent::stop`] finishes what
//! producers were promised and ends every task it started. The `floe agent`
//! command and the in-process tests start agents this one way (the
//! simulation still builds the write path's parts itself).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use floe_metastore::{MetaError, Metastore};
use floe_storage::ObjectStore;
use tokio::sync::mpsc;

use crate::broker::Broker;
use crate::cluster::discovery::{self, Discovery};
use crate::cluster::identity;
use crate::config::{Config, Role};
use crate::metrics::Metrics;
use crate::net::listeners::Listener;
use crate::refresher;
use crate::tasks::Tasks;
use crate::world::{Listening, World};

/// A running agent. Dropping it stops it at once, as a crash would
/// (nothing is drained, batches not yet committed are dropped);
/// [`Agent::stop`] stops it in order.
pub struct Agent {
    broker: Arc<Broker>,
    kafka: Vec<(Arc<Listener>, SocketAddr)>,
    admin: SocketAddr,
    /// Every task of the agent, connections included.
    tasks: Tasks,
    /// The listeners' accept loops and the admin endpoint: stopped first,
    /// so no new client comes (and a load balancer's readiness check
    /// fails) while accepted produces are finished.
    accepting: Tasks,
    /// Why a listener or the admin endpoint stopped serving.
    failures: mpsc::Receiver<anyhow::Error>,
}

/// How long a stopping agent waits for its tasks to end once cancelled.
const TASKS_END_WITHIN: Duration = Duration::from_secs(5);

impl Agent {
    /// Starts an agent over `meta` and `store` (which should already count
    /// its requests in `metrics`, see [`crate::metrics::MeteredStore`]):
    /// every listener bound and its TLS loaded before the agent is
    /// registered, so clients never learn an address nobody answers.
    /// Listeners and the admin endpoint may ask for port 0; their bound
    /// addresses are [`Agent::kafka_addresses`] and [`Agent::admin_address`].
    pub async fn start(
        config: Config,
        meta: Arc<dyn Metastore>,
        store: Arc<dyn ObjectStore>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Agent> {
        Self::start_in(World::default(), config, meta, store, metrics).await
    }

    /// As [`Agent::start`], in `world`: its clock, ids and network (the
    /// simulation's own).
    pub async fn start_in(
        world: World,
        config: Config,
        meta: Arc<dyn Metastore>,
        store: Arc<dyn ObjectStore>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Agent> {
        check(&config)?;
        let tasks = Tasks::default();
        let started = Self::start_on(&tasks, world, config, meta, store, metrics).await;
        if started.is_err() {
            // What started before the failure (a heartbeat, file watchers)
            // must not outlive it.
            tasks.stop(TASKS_END_WITHIN).await;
        }
        started
    }

    async fn start_on(
        tasks: &Tasks,
        world: World,
        mut config: Config,
        meta: Arc<dyn Metastore>,
        store: Arc<dyn ObjectStore>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Agent> {
        let tasks = tasks.clone();
        let serves_kafka = config.roles.contains(&Role::Kafka);
        let mut listeners = resolve(&config)?;
        let mut bound = match serves_kafka {
            true => bind_listeners(&world, &config, &listeners, &tasks).await?,
            false => Vec::new(),
        };
        // One listener on port 0 (tests): the port bound is the one
        // advertised.
        if let [(_, socket, _)] = bound.as_slice()
            && config.listeners.is_empty()
            && config.listen.port() == 0
        {
            config.listen = socket.local_addr()?;
            listeners = resolve(&config)?;
            bound[0].0 = listeners[0].clone();
        }
        warn_if_anonymous_is_super(&config, &listeners);
        // The admin port answers from now on (live, not ready, and why),
        // however long the metastore takes to answer.
        let admin_listen = config.admin_listen;
        let admin = world
            .network
            .bind(admin_listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {admin_listen} (admin): {e}"))?;
        let admin_address = admin.local_addr()?;
        let admin_port = Arc::new(crate::admin::AdminPort::new(metrics.clone()));
        let (failed, failures) = mpsc::channel(4);
        let accepting = tasks.child();
        let serving = crate::admin::serve(admin, admin_port.clone());
        accepting.spawn(report(serving, failed.clone(), "the admin endpoint"));
        let cluster_id =
            join_cluster(meta.as_ref(), store.as_ref(), &world, &config, &admin_port).await?;
        if serves_kafka && config.discovery == Discovery::SelfAdvertise {
            let endpoints: Vec<_> = listeners.iter().map(|l| l.endpoint()).collect();
            config.node_id =
                register(meta.as_ref(), &world, &endpoints, &config, &admin_port).await?;
            tasks.spawn(discovery::heartbeat(
                meta.clone(),
                world.clone(),
                config.node_id,
                endpoints,
                config.zone.clone(),
                config.agent_ttl,
            ));
        }
        let compaction = config
            .roles
            .contains(&Role::Jobs)
            .then(|| {
                crate::jobs::compaction::Background::from_config(
                    &config,
                    &world,
                    metrics.background.clone(),
                )
            })
            .flatten();
        if config.roles == [Role::Jobs] && compaction.is_none() {
            tracing::warn!(
                "an agent with only the jobs role and compaction_interval = 0s does nothing"
            );
        }
        admin_port.starting("loading the agent's state from the metastore");
        let broker = Arc::new(
            Broker::new(
                &tasks,
                world,
                config,
                cluster_id,
                meta.clone(),
                store.clone(),
                metrics,
            )
            .await?,
        );
        start_refreshers(&broker, &tasks);
        let serves_blocks = serves_kafka && start_cache_ring(&broker, admin_address.port(), &tasks);
        if let Some(compaction) = compaction {
            // Reading the ingest files this agent uploaded from its cache.
            let store = crate::jobs::cache_first::cache_first(store, broker.cache.clone());
            tasks.spawn(compaction.run(store, meta));
        }
        if broker.config.roles.contains(&Role::Jobs) {
            tasks.spawn(crate::jobs::txn_timeouts::run(broker.clone()));
            let every = broker.config.group_lag_interval;
            if !every.is_zero() {
                let (meta, metrics) = (broker.meta.clone(), broker.metrics.clone());
                tasks.spawn(crate::jobs::group_lag::run(meta, metrics, every));
            }
        }
        let mut kafka = Vec::new();
        // Connection limits hold per listener (as Kafka's
        // listener.name.<name>.max.connections), so a crowd on a public
        // listener does not lock clients out of an internal one.
        for (listener, socket, tls) in bound {
            let address = socket.local_addr()?;
            tracing::info!(listener = %listener.name, protocol = listener.protocol.name(), listen = %address,
                advertised = %format!("{}:{}", listener.advertised_host, listener.advertised_port), "Kafka listener");
            kafka.push((listener.clone(), address));
            let open = Arc::new(crate::server::Open::default());
            let serving =
                crate::server::serve(socket, listener, broker.clone(), tls, open, tasks.clone());
            accepting.spawn(report(serving, failed.clone(), "a Kafka listener"));
        }
        admin_port.serving(broker.clone(), serves_blocks);
        tracing::info!(admin = %admin_address, "admin endpoint ready: /metrics /healthz /readyz");
        Ok(Agent {
            broker,
            kafka,
            admin: admin_address,
            tasks,
            accepting,
            failures,
        })
    }

    /// What its requests share: configuration, metastore, caches, batcher.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// Each Kafka listener's name and the address it is bound to.
    pub fn kafka_addresses(&self) -> impl Iterator<Item = (&str, SocketAddr)> {
        self.kafka.iter().map(|(l, a)| (l.name.as_str(), *a))
    }

    /// The admin endpoint's bound address (`/metrics`, `/healthz`, `/readyz`).
    pub fn admin_address(&self) -> SocketAddr {
        self.admin
    }

    /// Waits until a listener or the admin endpoint stops serving, and
    /// answers why. An agent that serves normally never gets here.
    pub async fn failed(&mut self) -> anyhow::Error {
        match self.failures.recv().await {
            Some(e) => e,
            None => anyhow::anyhow!("the agent's servers ended"),
        }
    }

    /// Stops in order: new connections are refused and the admin endpoint
    /// closes; batches already accepted are uploaded, committed and
    /// answered (for at most two flush intervals and 5 s more); then
    /// whatever is left is dropped and every task ends.
    pub async fn stop(self) {
        self.accepting.cancel();
        let drain = self.broker.config.flush_interval * 2 + Duration::from_secs(5);
        tracing::info!(?drain, "stopping: finishing accepted produce requests");
        if !self.broker.batcher.wait_idle(drain).await {
            tracing::warn!(
                "stopping: some produce requests were not finished; their producers will retry"
            );
        }
        // Let the answers reach the sockets.
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.broker.batcher.abort();
        self.end_tasks().await;
    }

    /// Stops at once, wherever it is (mid-upload, mid-commit), as a crash
    /// would: waiting producers get an error or nothing, and retry.
    pub async fn abort(self) {
        self.broker.batcher.abort();
        self.end_tasks().await;
    }

    async fn end_tasks(&self) {
        if !self.tasks.stop(TASKS_END_WITHIN).await {
            tracing::warn!(
                running = self.tasks.running(),
                "stopping: some tasks did not end"
            );
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.broker.batcher.abort();
        self.tasks.cancel();
    }
}

/// Whether `config` makes an agent: its values (see [`Config::validate`]),
/// its listeners, and its principal mapping rules.
pub fn check(config: &Config) -> anyhow::Result<()> {
    config.validate()?;
    let listeners = crate::net::listeners::resolve(config)?;
    // Port 0 asks for a free port, which only the one `listen` learns and
    // advertises (tests).
    anyhow::ensure!(
        config.listeners.is_empty() || listeners.iter().all(|l| l.bind.port() != 0),
        "port 0 (any free port) is for `listen` alone, not for named listeners"
    );
    crate::security::ssl_principal::PrincipalMapper::parse(&config.ssl_principal_mapping_rules)?;
    Ok(())
}

fn resolve(config: &Config) -> anyhow::Result<Vec<Arc<Listener>>> {
    let listeners = crate::net::listeners::resolve(config)?;
    Ok(listeners.into_iter().map(Arc::new).collect())
}

/// Keeps the copies of metastore state the agent holds current (ACLs,
/// client quotas and metrics subscriptions), and what SASL reads from
/// files and endpoints.
fn start_refreshers(broker: &Arc<Broker>, tasks: &Tasks) {
    let (meta, pushed) = (&broker.meta, broker.watermarks.pushed());
    refresher::spawn(tasks, &broker.authorizer, meta.clone(), pushed.clone());
    refresher::spawn(tasks, &broker.telemetry, meta.clone(), pushed.clone());
    refresher::spawn(tasks, &broker.quotas, meta.clone(), pushed.clone());
    if let Some(sasl) = &broker.sasl {
        sasl.spawn_watchers(tasks);
    }
}

/// Joins the zone's cache ring when configured; answers whether the agent
/// serves blocks to its peers (on its admin port).
fn start_cache_ring(broker: &Arc<Broker>, admin_port: u16, tasks: &Tasks) -> bool {
    if !broker.config.cache_ring {
        return false;
    }
    let listen_ip = broker.listeners[0].bind.ip();
    let address = crate::cluster::cache_ring::address(
        &broker.config,
        &broker.listeners[0].advertised_host,
        listen_ip,
        admin_port,
    );
    let Some(address) = address else {
        return false;
    };
    let me = floe_metastore::CachePeer {
        node_id: broker.config.node_id,
        zone: broker.config.zone.clone(),
        address,
    };
    tracing::info!(address = %me.address, zone = ?me.zone, "serving cached blocks to the zone's agents");
    let (meta, cache) = (broker.meta.clone(), broker.cache.clone());
    tasks.spawn(crate::cluster::cache_ring::run(meta, cache, me));
    true
}

/// Learns the cluster's id from the metastore (claiming a fresh one in a
/// new cluster) and checks it against the object store's (see
/// [`identity`]): an agent never serves one cluster's metastore over
/// another's objects.
async fn join_cluster(
    meta: &dyn Metastore,
    store: &dyn ObjectStore,
    world: &World,
    config: &Config,
    admin: &crate::admin::AdminPort,
) -> anyhow::Result<String> {
    admin.starting("checking the cluster's id in the metastore and the object store");
    let claim = |id: String, marked| {
        until_answered(admin, "claim_cluster_id", move || {
            meta.claim_cluster_id(id.clone(), marked)
        })
    };
    // A memory store starts empty each time: there is nothing to check it
    // against (and a metastore on disk would refuse it from its second run).
    if config.object_store.starts_with("memory://") {
        return Ok(claim(identity::fresh(world), false).await?.id);
    }
    // Without its query, which may hold an endpoint's options.
    let store_name = config.object_store.split('?').next().unwrap_or_default();
    let id = identity::check(store, meta, store_name, identity::fresh(world), claim).await?;
    tracing::info!(cluster = %id, "the metastore and the object store agree on the cluster");
    Ok(id)
}

/// Registers the agent's listeners; answers its node id.
async fn register(
    meta: &dyn Metastore,
    world: &World,
    endpoints: &[floe_metastore::agents::ListenerEndpoint],
    config: &Config,
    admin: &crate::admin::AdminPort,
) -> anyhow::Result<i32> {
    admin.starting("registering with the metastore");
    until_answered(admin, "register_agent_listeners", || {
        discovery::register(meta, world, endpoints.to_vec(), config.zone.clone())
    })
    .await
    .map_err(|e| anyhow::anyhow!("registering with the metastore: {e}"))
}

/// Calls the metastore until it answers: a starting agent waits for a
/// metastore that does not answer (the command line says so meanwhile, and
/// `/readyz` answers why), as a Kafka broker waits for its controllers.
/// Says so every [`SAY_WAITING_EVERY`]: the command line's own look at the
/// metastore stops once it answers its clock, and a metastore older than
/// the agent answers that yet closes the connection on a request it does
/// not know, which the client reports as unavailable too.
async fn until_answered<T, F: Future<Output = Result<T, MetaError>>>(
    admin: &crate::admin::AdminPort,
    what: &str,
    mut call: impl FnMut() -> F,
) -> Result<T, MetaError> {
    let started = tokio::time::Instant::now();
    let mut said = Duration::ZERO;
    loop {
        match call().await {
            Err(e @ MetaError::Unavailable { .. }) => {
                admin.starting(format!("waiting for the metastore: {e}"));
                let waited = started.elapsed();
                if waited >= said + SAY_WAITING_EVERY {
                    said = waited;
                    tracing::warn!(call = what, waited = ?Duration::from_secs(waited.as_secs()), error = %e,
                        "the metastore does not answer this agent's call; waiting (a metastore older than the agent closes the connection on calls it does not know: upgrade metastore nodes first)");
                }
                tokio::time::sleep(CALL_AGAIN_AFTER).await;
            }
            answered => return answered,
        }
    }
}

/// How often a starting agent says it still waits for its metastore.
const SAY_WAITING_EVERY: Duration = Duration::from_secs(10);

/// How long a starting agent waits before calling again a metastore that
/// did not answer.
const CALL_AGAIN_AFTER: Duration = Duration::from_secs(1);

/// Runs a server, and reports why it stopped.
async fn report(
    serving: impl std::future::Future<Output = std::io::Result<()>>,
    failed: mpsc::Sender<anyhow::Error>,
    what: &'static str,
) {
    let error = match serving.await {
        Ok(()) => anyhow::anyhow!("{what} stopped serving"),
        Err(e) => anyhow::anyhow!("{what} failed: {e}"),
    };
    let _ = failed.send(error).await;
}

/// A Kafka listener, bound, with its TLS if it speaks TLS (reloaded when
/// its files change).
type Bound = (
    Arc<Listener>,
    Box<dyn Listening>,
    Option<Arc<crate::net::tls::Tls>>,
);

/// Binds every Kafka listener, with its TLS when its protocol speaks it:
/// with the client CA when it asks for client certificates (see
/// `Listener::client_auth`).
async fn bind_listeners(
    world: &World,
    config: &Config,
    listeners: &[Arc<Listener>],
    tasks: &Tasks,
) -> anyhow::Result<Vec<Bound>> {
    let mut tls_of = std::collections::HashMap::new();
    let mut bound = Vec::new();
    for listener in listeners {
        let tls = match (listener.protocol.tls(), config.tls_files()) {
            (false, _) => None,
            // Refused by `listeners::resolve`; never served in plaintext.
            (true, None) => anyhow::bail!("listener {} speaks TLS without tls_cert", listener.name),
            (true, Some(mut files)) => {
                if !listener.client_auth {
                    files.client_ca = None;
                }
                match tls_of.get(&listener.client_auth) {
                    Some(tls) => Some(Arc::clone(tls)),
                    None => {
                        let tls = crate::net::tls::Tls::load(files).map_err(|e| {
                            anyhow::anyhow!("TLS for the Kafka listener {}: {e:#}", listener.name)
                        })?;
                        tasks.spawn(tls.clone().watch());
                        tls_of.insert(listener.client_auth, tls.clone());
                        Some(tls)
                    }
                }
            }
        };
        let socket = world.network.bind(listener.bind).await.map_err(|e| {
            anyhow::anyhow!(
                "cannot listen on {} (listener {}): {e}",
                listener.bind,
                listener.name
            )
        })?;
        bound.push((listener.clone(), socket, tls));
    }
    Ok(bound)
}

/// `User:ANONYMOUS` as a super user is meant for a trusted plaintext
/// listener; on an agent where clients of another listener are anonymous
/// too (an SSL one without client certificates, a second plaintext one),
/// they would be super users as well.
fn warn_if_anonymous_is_super(config: &Config, listeners: &[Arc<Listener>]) {
    let anonymous: Vec<_> = listeners.iter().filter(|l| l.anonymous()).collect();
    let risky = anonymous.len() > 1 || anonymous.iter().any(|l| l.protocol.tls());
    if config.acls
        && risky
        && config
            .super_users
            .iter()
            .any(|u| u == crate::security::authorizer::ANONYMOUS)
    {
        let names: Vec<_> = anonymous.iter().map(|l| l.name.as_str()).collect();
        tracing::warn!(listeners = ?names, "User:ANONYMOUS is a super user, and the clients of each of these listeners are anonymous: all of them may do anything");
    }
}
