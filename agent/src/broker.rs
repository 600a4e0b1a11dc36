//! What every request handler shares: configuration, metastore, object store,
//! cache, the produce batcher and the commit signal that wakes fetches.

use std::sync::Arc;

use floe_cache::BlockCache;
use floe_metastore::{MetaError, Metastore, NewTopic, Refusal, TopicInfo};
use floe_protocol::ResponseError;
use floe_storage::ObjectStore;
use tokio::sync::watch;

use crate::config::Config;
use crate::limits::budget::ResponseBudget;
use crate::metrics::Metrics;
use crate::net::frames::RequestBudget;
use crate::read::extent_cache::ExtentCache;
use crate::read::topic_cache::TopicCache;
use crate::read::watermarks::Watermarks;
use crate::refresher::Refreshed;
use crate::tasks::Tasks;
use crate::world::World;
use crate::write::batcher::{Batcher, BatcherConfig};

/// How long produce and fetch trust a topic they looked up (see [`TopicCache`]).
const TOPIC_TTL: std::time::Duration = std::time::Duration::from_secs(10);
/// The longest the read path trusts where a partition's offsets are stored.
const MAX_EXTENT_TTL: std::time::Duration = std::time::Duration::from_secs(15);

/// What every connection and handler of an agent shares: its settings, its
/// metastore and store, the write path (batcher, producer ids), the read
/// path (block cache, extents, watermarks), budgets, security and quotas.
/// Its fields are the agent's own (`pub(crate)`); built by [`Broker::new`]
/// on the agent's tasks, so that stopping the agent stops its work.
pub struct Broker {
    pub(crate) config: Config,
    /// The cluster's id (see [`crate::cluster::identity`]), as Metadata
    /// and DescribeCluster answer it.
    pub(crate) cluster_id: String,
    /// The clock, ids and network it runs with.
    pub(crate) world: World,
    /// Its Kafka listeners (see [`crate::net::listeners`]); never empty.
    pub(crate) listeners: Vec<Arc<crate::net::listeners::Listener>>,
    pub(crate) meta: Arc<dyn Metastore>,
    pub(crate) cache: Arc<BlockCache>,
    pub(crate) batcher: Batcher,
    pub(crate) metrics: Arc<Metrics>,
    /// Topics produce and fetch looked up recently.
    pub(crate) topics: Arc<TopicCache>,
    /// What waiting fetches wait on, polled from the metastore for them all.
    pub(crate) watermarks: Arc<Watermarks>,
    /// Where partitions' offsets are stored, as last learnt (the read path).
    pub(crate) extents: Arc<ExtentCache>,
    /// Memory for responses in flight, across every connection.
    pub(crate) responses: ResponseBudget,
    /// Memory for requests being read, across every connection.
    pub(crate) requests: RequestBudget,
    /// How clients authenticate on SASL listeners (none without one).
    pub(crate) sasl: Option<Arc<crate::security::sasl::Authenticator>>,
    /// Decides each request against the ACLs (see [`crate::security::authorizer`]).
    pub(crate) authorizer: Arc<crate::security::authorizer::Authorizer>,
    /// Memory for requests of connections not yet authenticated.
    pub(crate) unauthenticated: RequestBudget,
    /// Client metrics subscriptions and what clients pushed (KIP-714).
    pub(crate) telemetry: Arc<crate::telemetry::Telemetry>,
    /// Client quotas and the rates they limit.
    pub(crate) quotas: Arc<crate::limits::quotas::Quotas>,
    /// How a client certificate's subject becomes its principal.
    pub(crate) ssl_principals: crate::security::ssl_principal::PrincipalMapper,
    /// Idempotent producers' ids, from blocks the metastore allocates.
    pub(crate) producer_ids: Arc<crate::write::producer_ids::ProducerIds>,
    /// The transaction each transactional id had ongoing, as last seen here
    /// (what a transactions-v1 EndTxn may end).
    pub(crate) txn_sightings: crate::write::txn_sightings::TxnSightings,
    /// Share-group members' sessions with this agent (KIP-932).
    pub(crate) share_sessions: crate::read::share_sessions::Sessions,
    /// Where work outliving a request runs (released share sessions).
    pub(crate) tasks: Tasks,
}

/// How long a starting agent waits for its first copy of client metrics
/// subscriptions and of client quotas (their refreshers go on after).
const FIRST_READ_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// How often waiting fetches' partitions are checked for commits made
/// through other agents.
pub const WATERMARK_POLL: std::time::Duration = std::time::Duration::from_millis(100);

impl Broker {
    /// What the agent was started with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// `store` should already count its requests in `metrics` (see
    /// [`crate::metrics::MeteredStore`]). Its background work (the
    /// batcher, the watermarks' poll) runs on `tasks`.
    pub async fn new(
        tasks: &Tasks,
        world: World,
        config: Config,
        cluster_id: String,
        meta: Arc<dyn Metastore>,
        store: Arc<dyn ObjectStore>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Broker> {
        config.validate()?;
        let listeners: Vec<Arc<crate::net::listeners::Listener>> =
            crate::net::listeners::resolve(&config)?
                .into_iter()
                .map(Arc::new)
                .collect();
        let cache = Arc::new(
            BlockCache::new(store.clone(), crate::cluster::cache_ring::options(&config)?).await?,
        );
        let (commit_tx, commits) = watch::channel(0);
        // Trusted for a quarter of the time GC leaves garbage readable (see
        // `ExtentCache`), and never long.
        let extents = Arc::new(ExtentCache::new((config.gc_grace / 4).min(MAX_EXTENT_TTL)));
        let watermarks = Watermarks::start(
            tasks,
            meta.clone(),
            extents.clone(),
            WATERMARK_POLL,
            commits,
        );
        let batcher = Batcher::start(
            tasks,
            BatcherConfig {
                flush_interval: config.flush_interval,
                min_flush_interval: config.min_flush_interval(),
                flush_bytes: config.flush_bytes.as_u64(),
                max_buffered_bytes: config.max_buffered_bytes.as_u64(),
                max_inflight_uploads: config.max_inflight_uploads,
            },
            store.clone(),
            meta.clone(),
            cache.clone(),
            commit_tx,
            metrics.clone(),
            world.ids.clone(),
        );
        let sasl = sasl_of(&config, &listeners).await?;
        let authorizer = Arc::new(crate::security::authorizer::Authorizer::new(
            config.acls,
            config.super_users.clone(),
            config.allow_everyone_if_no_acl_found,
        ));
        // Clients take an authorization error as final: read the ACLs
        // before serving anyone (for a while; then serve, refusing all but
        // super users until they are read).
        if authorizer.enabled() {
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
            while let Err(e) = authorizer.refresh(&*meta).await {
                if tokio::time::Instant::now() >= deadline {
                    tracing::warn!(error = %e, "ACLs not read yet: refusing all but super users");
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
        let telemetry = Arc::new(crate::telemetry::Telemetry::default());
        // Read once before serving, so a client's first ApiVersions
        // already tells it to push when asked (not waited for: telemetry
        // is never worth delaying clients).
        match tokio::time::timeout(FIRST_READ_WITHIN, telemetry.refresh(&*meta)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "client metrics subscriptions not read yet"),
            Err(_) => tracing::debug!("client metrics subscriptions not read yet"),
        }
        let quotas = Arc::new(crate::limits::quotas::Quotas::default());
        // Quotas are read before serving, for a while, so a restarted agent
        // does not let clients run unthrottled at first.
        match tokio::time::timeout(FIRST_READ_WITHIN, quotas.refresh(&*meta)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "client quotas not read yet"),
            Err(_) => tracing::warn!("client quotas not read yet"),
        }
        let ssl_principals = crate::security::ssl_principal::PrincipalMapper::parse(
            &config.ssl_principal_mapping_rules,
        )?;
        let responses = ResponseBudget::new(config.max_response_bytes.as_u64() as usize);
        let requests = RequestBudget::new(config.queued_max_request_bytes.as_u64() as usize);
        let producer_ids = crate::write::producer_ids::ProducerIds::new(meta.clone());
        Ok(Broker {
            config,
            cluster_id,
            world,
            listeners,
            meta,
            cache,
            batcher,
            metrics,
            topics: Arc::new(TopicCache::new(TOPIC_TTL)),
            watermarks,
            extents,
            responses,
            requests,
            sasl,
            authorizer,
            unauthenticated: RequestBudget::new(crate::security::sasl::UNAUTHENTICATED_BUDGET),
            telemetry,
            quotas,
            ssl_principals,
            producer_ids,
            txn_sightings: Default::default(),
            share_sessions: Default::default(),
            tasks: tasks.clone(),
        })
    }

    /// The topic a produce request writes to, from the cache when it is
    /// known to have partition `max_partition`; created if missing when
    /// `may_create` (auto-creation, and the principal's CREATE).
    pub async fn produce_topic(
        &self,
        name: &str,
        max_partition: i32,
        may_create: bool,
    ) -> Result<TopicInfo, MetaError> {
        if let Some(topic) = self.topics.get(name, max_partition) {
            return Ok(topic);
        }
        let topic = self.topic_or_create(name, may_create).await?;
        self.topics.insert(&topic);
        Ok(topic)
    }

    /// The topic a fetch reads (named, or by id from version 13), from the
    /// cache when it is known to have partition `max_partition`; `None` if
    /// there is no such topic (or the metastore cannot say).
    pub async fn fetch_topic(
        &self,
        name: &str,
        id: Option<uuid::Uuid>,
        max_partition: i32,
    ) -> Option<TopicInfo> {
        let cached = match id {
            Some(id) => self.topics.get_by_id(id, max_partition),
            None => self.topics.get(name, max_partition),
        };
        if cached.is_some() {
            return cached;
        }
        let found = match id {
            Some(id) => self.meta.topic_by_id(id).await,
            None => self.meta.topic(name).await,
        };
        let topic = found.ok().flatten()?;
        self.topics.insert(&topic);
        Some(topic)
    }

    /// Forgets what the caches hold of the topic of this id (it went away).
    pub fn forget_topic(&self, id: uuid::Uuid) {
        self.topics.invalidate_id(id);
    }

    /// Looks a topic up, creating it with the default partition count when
    /// `auto_create` allows (Kafka's `auto.create.topics.enable`).
    pub async fn topic_or_create(
        &self,
        name: &str,
        auto_create: bool,
    ) -> Result<TopicInfo, MetaError> {
        if let Some(topic) = self.meta.topic(name).await? {
            return Ok(topic);
        }
        if !(auto_create && self.config.auto_create_topics) {
            return Err(MetaError::Refused(Refusal::UnknownTopicOrPartition));
        }
        let created = self
            .meta
            .create_topic(NewTopic {
                name: name.to_string(),
                partitions: self.config.default_partitions,
                configs: Default::default(),
            })
            .await;
        match created {
            Ok(topic) => {
                tracing::info!(
                    topic = name,
                    partitions = topic.partitions,
                    "auto-created topic"
                );
                Ok(topic)
            }
            // Another request created it first.
            Err(MetaError::Refused(Refusal::TopicExists(_))) => self
                .meta
                .topic(name)
                .await?
                .ok_or(MetaError::Refused(Refusal::UnknownTopicOrPartition)),
            Err(e) => Err(e),
        }
    }
}

/// How clients of SASL listeners authenticate (none without one): the
/// mechanisms configured, PLAIN's users file, OAUTHBEARER's keys (fetched
/// once before serving when they come from an endpoint).
async fn sasl_of(
    config: &Config,
    listeners: &[Arc<crate::net::listeners::Listener>],
) -> anyhow::Result<Option<Arc<crate::security::sasl::Authenticator>>> {
    let mechanisms = config.sasl_mechanisms();
    let sasl_plaintext = listeners
        .iter()
        .any(|l| l.protocol == crate::net::listeners::SecurityProtocol::SaslPlaintext);
    if mechanisms.iter().any(|m| m == crate::security::sasl::PLAIN) && sasl_plaintext {
        tracing::warn!(
            "SASL/PLAIN on a SASL_PLAINTEXT listener: passwords cross the network as they are"
        );
    }
    let serves_sasl = listeners.iter().any(|l| l.protocol.sasl());
    let sasl = match mechanisms.is_empty() || !serves_sasl {
        true => None,
        false => {
            let plain = match &config.sasl_plain_users {
                Some(path) => Some(
                    crate::security::sasl::PlainUsersFile::load(path)
                        .map_err(|e| anyhow::anyhow!("SASL/PLAIN users: {e:#}"))?,
                ),
                None => None,
            };
            let oauth = match mechanisms
                .iter()
                .any(|m| m == crate::security::oauthbearer::OAUTHBEARER)
            {
                false => None,
                true => Some(Arc::new(crate::security::oauthbearer::Validator::new(
                    config
                        .sasl_oauthbearer_jwks
                        .as_deref()
                        .map(crate::security::oauthbearer::KeySource::parse),
                    config.sasl_oauthbearer_unsecured,
                    config.sasl_oauthbearer_expected_issuer.clone(),
                    config.sasl_oauthbearer_expected_audience.clone(),
                    config.sasl_oauthbearer_jwks_refresh,
                )?)),
            };
            if let Some(validator) = &oauth {
                // An endpoint's keys are fetched before serving (if the
                // provider is down, tokens are refused until a fetch,
                // tried again every 10 s, succeeds).
                if validator.from_endpoint() && !validator.refresh().await {
                    tracing::error!(
                        "the OAUTHBEARER key set could not be fetched: signed tokens are refused until it is"
                    );
                }
            }
            Some(Arc::new(crate::security::sasl::Authenticator::new(
                &mechanisms,
                plain,
                oauth,
            )?))
        }
    };
    Ok(sasl)
}

/// The Kafka error a broker sends for a metastore error: a call that failed
/// is the storage's failure, which clients retry.
pub fn kafka_error(e: &MetaError) -> ResponseError {
    match e {
        MetaError::Refused(refusal) => refusal_error(refusal),
        MetaError::Storage(_) | MetaError::Unavailable { .. } | MetaError::NotLeader(_) => {
            ResponseError::KafkaStorageError
        }
    }
}

/// The Kafka error a broker sends for what the metastore refused.
pub fn refusal_error(refusal: &Refusal) -> ResponseError {
    match refusal {
        Refusal::TopicExists(_) => ResponseError::TopicAlreadyExists,
        Refusal::UnknownTopicOrPartition => ResponseError::UnknownTopicOrPartition,
        Refusal::InvalidTopicName(..) => ResponseError::InvalidTopicException,
        Refusal::InvalidPartitions(_) => ResponseError::InvalidPartitions,
        Refusal::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        // A new upload gets a new key: the producer's retry succeeds.
        Refusal::ObjectKeyUsed(_) | Refusal::CommitTooLate(_) => ResponseError::KafkaStorageError,
        Refusal::ExtentsChanged | Refusal::InvalidMembership(_) => {
            ResponseError::UnknownServerError
        }
        Refusal::OutOfOrderSequence { .. } => ResponseError::OutOfOrderSequenceNumber,
        Refusal::InvalidProducerEpoch { .. } => ResponseError::InvalidProducerEpoch,
        Refusal::UnknownProducerId(_) => ResponseError::UnknownProducerId,
        // Each transactional API translates these as Kafka does for its
        // version (see `handlers::txn`); these are their plain meanings.
        Refusal::InvalidTxnState(_) | Refusal::NotInTransaction | Refusal::TxnEnded { .. } => {
            ResponseError::InvalidTxnState
        }
        Refusal::ProducerFenced { .. } => ResponseError::ProducerFenced,
        Refusal::InvalidProducerIdMapping => ResponseError::InvalidProducerIdMapping,
        Refusal::ConcurrentTransactions => ResponseError::ConcurrentTransactions,
        Refusal::InvalidTxnTimeout(_) => ResponseError::InvalidTransactionTimeout,
        Refusal::TxnLimit(_) => ResponseError::InvalidRequest,
        Refusal::InvalidConfig(_) => ResponseError::InvalidConfig,
        Refusal::InvalidBatch(_) => ResponseError::CorruptMessage,
    }
}
