//! Agent configuration: `floe.toml`, overridden by flags and `FLOE_*` env vars.
//!
//! A leaf: it names what an agent is configured with and checks what can
//! be checked of the values alone; the rooms that use a setting read it
//! from here (see [`crate::agent::check`] for the checks that need them).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytesize::ByteSize;
use clap::ArgAction;
use serde::{Deserialize, Serialize};

/// How clients find agents (see [`crate::cluster::discovery`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Discovery {
    #[serde(rename = "self")]
    #[value(name = "self")]
    SelfAdvertise,
    LoadBalancer,
}

/// Kafka's default `message.max.bytes` (1 MiB plus the batch overhead).
pub const DEFAULT_MESSAGE_MAX_BYTES: u64 = 1_048_588;

/// Where a listener's certificate, key and (for mutual TLS) client CA are.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

/// What an agent does (`floe agent --roles kafka,jobs`), so background work
/// can be sized and placed apart from client traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Serves Kafka clients (and is advertised to them).
    Kafka,
    /// Runs compaction, retention, the orphan sweep and GC, sharing them with
    /// other agents of the role through leases.
    Jobs,
}

/// Everything an agent is configured with: each field is a key of
/// `floe.toml`, a flag (`--flush-interval`) and a variable
/// (`FLOE_FLUSH_INTERVAL`); a flag or variable overrides the file. Its doc
/// comment is its help and its line in `docs/configuration.md`; its default
/// is [`Config::default`]'s (see [`Config::command`]).
#[derive(Debug, Clone, Deserialize, Serialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// What this agent does: `kafka` (serves clients) and `jobs` (compaction,
    /// retention, the orphan sweep, GC); both by default.
    #[arg(long, value_delimiter = ',')]
    pub roles: Vec<Role>,
    /// Address the Kafka listener binds (with `listeners` unset): an
    /// address or a host name and port (`localhost:9092`).
    #[arg(long, value_parser = resolve_address)]
    #[serde(deserialize_with = "deserialize_address")]
    pub listen: SocketAddr,
    /// Kafka's `listeners`: `NAME://host:port` each, replacing `listen`
    /// and `advertise`.
    #[arg(long, value_delimiter = ',')]
    pub listeners: Vec<String>,
    /// Kafka's `advertised.listeners`: `NAME://host:port` clients of the
    /// listener NAME are told (default: the listener's own address).
    #[arg(long, value_delimiter = ',')]
    pub advertised_listeners: Vec<String>,
    /// Kafka's `listener.security.protocol.map`: `NAME:PROTOCOL` each
    /// (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); a listener named as a
    /// protocol speaks it.
    #[arg(long, value_delimiter = ',')]
    pub listener_security_protocol_map: Vec<String>,
    /// Address of the admin HTTP port (`/metrics`, `/healthz`, `/readyz`).
    #[arg(long, value_parser = resolve_address)]
    #[serde(deserialize_with = "deserialize_address")]
    pub admin_listen: SocketAddr,
    /// A PEM certificate chain: with `tls_key`, the Kafka listener speaks
    /// TLS (Kafka's `SSL`), reloading them when they change.
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of `tls_cert`.
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates: clients must present a certificate they signed
    /// (mutual TLS, Kafka's `ssl.client.auth=required`).
    #[arg(long)]
    pub tls_client_ca: Option<PathBuf>,
    /// How a client certificate's subject becomes its principal (Kafka's
    /// `ssl.principal.mapping.rules`).
    #[arg(long)]
    pub ssl_principal_mapping_rules: String,
    /// A file of `user:password` lines: clients authenticate with SASL/PLAIN
    /// before anything else (with TLS: Kafka's `SASL_SSL`).
    #[arg(long)]
    pub sasl_plain_users: Option<PathBuf>,
    /// SASL mechanisms clients must authenticate with (Kafka's
    /// `sasl.enabled.mechanisms`): `PLAIN` (with `sasl_plain_users`),
    /// `SCRAM-SHA-256`, `SCRAM-SHA-512` (credentials in the metastore, set
    /// with AlterUserScramCredentials). Empty: PLAIN if `sasl_plain_users`
    /// is set, else no SASL.
    #[arg(long, value_delimiter = ',')]
    pub sasl_mechanisms: Vec<String>,
    /// OAUTHBEARER: the JSON Web Key Set signed tokens are checked against
    /// (Kafka's `sasl.oauthbearer.jwks.endpoint.url`): an `https://` (or
    /// `http://`) endpoint, or a file.
    #[arg(long)]
    pub sasl_oauthbearer_jwks: Option<String>,
    /// OAUTHBEARER: how often an endpoint's key set is fetched again
    /// (Kafka's `sasl.oauthbearer.jwks.endpoint.refresh.ms`); it is also
    /// fetched soon after a token names a key it does not hold.
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub sasl_oauthbearer_jwks_refresh: Duration,
    /// OAUTHBEARER: take unsecured (`alg: none`) tokens, for tests (Kafka's
    /// unsecured validator, which it uses unless configured otherwise).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub sasl_oauthbearer_unsecured: bool,
    /// OAUTHBEARER: the `iss` tokens must have (Kafka's
    /// `sasl.oauthbearer.expected.issuer`).
    #[arg(long)]
    pub sasl_oauthbearer_expected_issuer: Option<String>,
    /// OAUTHBEARER: an `aud` tokens must have one of (Kafka's
    /// `sasl.oauthbearer.expected.audience`).
    #[arg(long, value_delimiter = ',')]
    pub sasl_oauthbearer_expected_audience: Vec<String>,
    /// Check every request against the ACLs kept in the metastore (Kafka's
    /// `StandardAuthorizer`); off, everything is allowed.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub acls: bool,
    /// A file holding the metastore cluster's secret (`floe metastore
    /// --secret-file`): proved to the metastore on every connection.
    #[arg(long)]
    pub metastore_secret_file: Option<PathBuf>,
    /// The network to the metastore is trusted. Otherwise an agent with
    /// SASL or ACLs on refuses to talk to a metastore on another host
    /// without its secret: whoever reaches that metastore could change
    /// every ACL and credential, and read every record's location.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub metastore_trusted_network: bool,
    /// Principals allowed everything (`User:admin`; Kafka's `super.users`).
    #[arg(long, value_delimiter = ';')]
    pub super_users: Vec<String>,
    /// Allow what no ACL names (Kafka's `allow.everyone.if.no.acl.found`).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_everyone_if_no_acl_found: bool,
    /// `host:port` clients are told to connect to; defaults to `listen`.
    #[arg(long)]
    pub advertise: Option<String>,
    /// How clients find agents: `self` (each agent a broker in Metadata) or
    /// `load-balancer` (every agent advertises the balancer's one address).
    #[arg(long)]
    pub discovery: Discovery,
    /// This agent's zone, matched against `floe_az=<zone>` in client ids.
    #[arg(long)]
    pub zone: Option<String>,
    /// An agent not heard from for this long is left out of Metadata.
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub agent_ttl: Duration,
    /// This agent's broker id in Metadata in `load-balancer` mode; in `self`
    /// mode the metastore assigns one per advertised address.
    #[arg(long)]
    pub node_id: i32,
    /// Folder for local state (the embedded metastore's log).
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Where objects go: `s3://BUCKET[/PREFIX][?OPTIONS]`, `file://PATH` or
    /// `memory://`; by default the folder `objects` in `data_dir`.
    #[arg(long)]
    pub object_store: String,
    /// The embedded metastore's redb file; defaults to `<data_dir>/metastore.redb`.
    #[arg(long)]
    pub metastore_path: Option<PathBuf>,
    /// `host:port` of `floe metastore` nodes shared with other agents, or a
    /// `postgres://` URL (each agent given it runs a node of the metastore
    /// kept in that database); unset, the agent runs its own in-process.
    #[arg(long)]
    pub metastore: Option<String>,
    /// With a PostgreSQL `metastore`: where this agent serves its metastore
    /// node, which the other agents' calls reach while it leads. The
    /// default, a free loopback port, serves agents on this host only.
    #[arg(long)]
    pub metastore_listen: Option<String>,
    /// With a PostgreSQL `metastore`: where the other agents reach this
    /// agent's metastore node (default: `metastore_listen` as bound).
    #[arg(long)]
    pub metastore_advertise: Option<String>,
    /// Longest a produced batch waits before its ingest file is uploaded.
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub flush_interval: Duration,
    /// Shortest time between two ingest files when every producer with
    /// batches in the open one waits on it with its pipeline full (its
    /// requests in flight at their most): the file is uploaded then instead
    /// of at `flush_interval` (default: half of `flush_interval`; at least
    /// 1ms; equal to it turns early uploads off).
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub min_flush_interval: Option<Duration>,
    /// An ingest file is uploaded as soon as it holds this much.
    #[arg(long)]
    #[serde(with = "exact_size")]
    pub flush_bytes: ByteSize,
    /// Produced bytes held in memory awaiting upload; producers wait beyond it.
    #[arg(long)]
    #[serde(with = "exact_size")]
    pub max_buffered_bytes: ByteSize,
    /// Ingest files being uploaded at once (commits still go in file order).
    #[arg(long)]
    pub max_inflight_uploads: usize,
    /// Largest request frame accepted (Kafka's `socket.request.max.bytes`).
    #[arg(long)]
    #[serde(with = "exact_size")]
    pub max_frame_bytes: ByteSize,
    /// Memory for requests being read and not yet admitted, across all
    /// connections (Kafka's `queued.max.request.bytes`); connections stop
    /// reading beyond it.
    #[arg(long)]
    #[serde(with = "exact_size")]
    pub queued_max_request_bytes: ByteSize,
    /// Largest record batch a producer may send (Kafka's `message.max.bytes`;
    /// a topic's `max.message.bytes` overrides it).
    #[arg(long)]
    #[serde(with = "exact_size")]
    pub message_max_bytes: ByteSize,
    /// Most bytes one Fetch response carries, whatever the client asks
    /// (Kafka's `fetch.max.bytes`); one batch is returned even if larger.
    #[arg(long)]
    #[serde(with = "exact_size")]
    pub max_fetch_bytes: ByteSize,
    /// Memory for responses being prepared or waiting for their client to
    /// read them, across all connections; fetches wait beyond it.
    #[arg(long)]
    #[serde(with = "exact_size")]
    pub max_response_bytes: ByteSize,
    /// Connections open at once (Kafka's `max.connections`); more are closed
    /// as they arrive.
    #[arg(long)]
    pub max_connections: usize,
    /// Connections open at once from one address (`max.connections.per.ip`).
    /// Behind a load balancer every client shares its address: keep it high.
    #[arg(long)]
    pub max_connections_per_ip: usize,
    /// A connection with no request in flight and none arriving for this
    /// long is closed (Kafka's `connections.max.idle.ms`).
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub connections_max_idle: Duration,
    /// A SASL session lasts this long; the client must re-authenticate on
    /// its connection before then, or the connection is closed at its next
    /// request (Kafka's `connections.max.reauth.ms`, KIP-368). Zero: for
    /// ever.
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub connections_max_reauth: Duration,
    /// A connection whose client sends none of a request it began, or reads
    /// none of a response, for this long is closed, giving back the memory
    /// it held. (A Kafka client gives up on a request after its
    /// `request.timeout.ms`, 30 s by default, and reconnects.)
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub stalled_client_timeout: Duration,
    /// A member of a consumer-protocol group (KIP-848) not heard from for
    /// this long is removed (Kafka's `group.consumer.session.timeout.ms`).
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub consumer_session_timeout: Duration,
    /// How often such members are told to heartbeat
    /// (`group.consumer.heartbeat.interval.ms`).
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub consumer_heartbeat_interval: Duration,
    /// The shortest session timeout a classic group member may ask for
    /// (Kafka's `group.min.session.timeout.ms`); shorter ones are refused
    /// with INVALID_SESSION_TIMEOUT.
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub group_min_session_timeout: Duration,
    /// The longest session timeout a classic group member may ask for
    /// (Kafka's `group.max.session.timeout.ms`); longer ones are refused.
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub group_max_session_timeout: Duration,
    /// How long the first rebalance of an empty classic group waits for
    /// more members, and waits again while new ones come, within the
    /// rebalance timeout (Kafka's `group.initial.rebalance.delay.ms`).
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub group_initial_rebalance_delay: Duration,
    /// The longest transaction timeout a producer may ask for (Kafka's
    /// `transaction.max.timeout.ms`); longer ones get INVALID_TRANSACTION_TIMEOUT.
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub transaction_max_timeout: Duration,
    /// How often the coordinator looks for transactions past their timeout
    /// (Kafka's `transaction.abort.timed.out.transaction.cleanup.interval.ms`):
    /// a transaction times out at the first look after its timeout, so its
    /// producer may still commit until then, as with Kafka.
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub transaction_abort_check_interval: Duration,
    /// Memory for cached object blocks.
    #[arg(long)]
    #[serde(with = "exact_size")]
    pub cache_bytes: ByteSize,
    /// Size of one cached block; reads fetch whole aligned blocks.
    #[arg(long)]
    #[serde(with = "exact_size")]
    pub cache_block_bytes: ByteSize,
    /// A directory for the cache's disk tier (none by default: memory only).
    #[arg(long)]
    pub cache_disk_dir: Option<PathBuf>,
    /// Disk for cached blocks in `cache_disk_dir`.
    #[arg(long)]
    #[serde(with = "exact_size")]
    pub cache_disk_bytes: ByteSize,
    /// Memory for blocks of catch-up reads, kept apart so that a consumer
    /// replaying old data does not evict the blocks tailing consumers read.
    #[arg(long)]
    #[serde(with = "exact_size")]
    pub cache_catch_up_bytes: ByteSize,
    /// A read is a catch-up read when its fetch lags more than this
    /// (estimated, over all its partitions) behind their ends.
    #[arg(long)]
    #[serde(with = "exact_size")]
    pub cache_catch_up_lag: ByteSize,
    /// Ask the agent of this zone that owns a block for it before reading
    /// the object store (the per-zone cache ring).
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub cache_ring: bool,
    /// How long an owner may take to send a block before this agent reads
    /// the object store itself.
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub cache_peer_timeout: Duration,
    /// `host:port` where the other agents reach this one's admin port for
    /// blocks (default: the advertised host and the admin port).
    #[arg(long)]
    pub cache_advertise: Option<String>,
    /// Create unknown topics on Metadata/Produce, as `auto.create.topics.enable`.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub auto_create_topics: bool,
    /// Partitions of auto-created topics and of CreateTopics with -1.
    #[arg(long)]
    pub default_partitions: i32,
    /// How often this agent compacts ingest files and collects garbage; `0s`
    /// turns the compactor off.
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub compaction_interval: Duration,
    /// How often an agent with the jobs role reads every consumer group's
    /// lag into its metrics (`floe_group_lag`); `0s` turns it off.
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub group_lag_interval: Duration,
    /// Ingest files waiting before a compaction job reads them.
    #[arg(long)]
    pub compaction_min_extents: usize,
    /// However few ingest files wait, they are compacted once the oldest
    /// append in them is this old.
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub compaction_max_age: Duration,
    /// Most bytes of ingest files one compaction job reads and holds (its
    /// agent's memory holds about twice this while the job runs).
    #[arg(long)]
    #[serde(with = "exact_size")]
    pub compaction_job_bytes: ByteSize,
    /// Largest segment the compactor writes.
    #[arg(long)]
    #[serde(with = "exact_size")]
    pub segment_bytes: ByteSize,
    /// Objects in the bucket the metastore does not know are deleted once
    /// older than this (uploads whose commit never happened).
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub orphan_age: Duration,
    /// For tests: errors and latency to inject into object-store requests,
    /// e.g. `put_error_rate=0.3,get_error_rate=0.1,latency=20ms`.
    #[arg(long)]
    pub inject_faults: Option<String>,
    /// How long an unreferenced object is kept before deletion, so reads that
    /// planned with it can finish.
    #[arg(long, value_parser = humantime::parse_duration)]
    #[serde(with = "humantime_serde")]
    pub gc_grace: Duration,
}

impl Config {
    /// The listener's TLS files, if it speaks TLS.
    /// The SASL mechanisms offered (none: no SASL).
    pub fn sasl_mechanisms(&self) -> Vec<String> {
        match (self.sasl_mechanisms.is_empty(), &self.sasl_plain_users) {
            // A PLAIN users file alone turns PLAIN on.
            (true, Some(_)) => vec!["PLAIN".to_string()],
            _ => self.sasl_mechanisms.clone(),
        }
    }

    pub fn tls_files(&self) -> Option<TlsFiles> {
        Some(TlsFiles {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            client_ca: self.tls_client_ca.clone(),
        })
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:9092".parse().expect("valid address"),
            listeners: Vec::new(),
            advertised_listeners: Vec::new(),
            listener_security_protocol_map: Vec::new(),
            admin_listen: "127.0.0.1:9644".parse().expect("valid address"),
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            ssl_principal_mapping_rules: "DEFAULT".into(),
            sasl_plain_users: None,
            sasl_mechanisms: Vec::new(),
            sasl_oauthbearer_jwks: None,
            sasl_oauthbearer_jwks_refresh: Duration::from_secs(3600),
            sasl_oauthbearer_unsecured: false,
            sasl_oauthbearer_expected_issuer: None,
            sasl_oauthbearer_expected_audience: Vec::new(),
            acls: false,
            metastore_secret_file: None,
            metastore_trusted_network: false,
            super_users: Vec::new(),
            allow_everyone_if_no_acl_found: false,
            advertise: None,
            roles: vec![Role::Kafka, Role::Jobs],
            discovery: Discovery::SelfAdvertise,
            zone: None,
            agent_ttl: Duration::from_secs(10),
            node_id: 0,
            data_dir: PathBuf::from("./floe-data"),
            object_store: "file://./floe-data/objects".to_string(),
            metastore_path: None,
            metastore: None,
            metastore_listen: None,
            metastore_advertise: None,
            flush_interval: Duration::from_millis(250),
            min_flush_interval: None,
            flush_bytes: ByteSize::mib(8),
            max_buffered_bytes: ByteSize::mib(256),
            max_inflight_uploads: 4,
            max_frame_bytes: ByteSize::mib(100),
            queued_max_request_bytes: ByteSize::mib(128),
            max_fetch_bytes: ByteSize::mib(55),
            message_max_bytes: ByteSize::b(DEFAULT_MESSAGE_MAX_BYTES),
            max_response_bytes: ByteSize::mib(256),
            max_connections: 4096,
            max_connections_per_ip: 4096,
            connections_max_idle: Duration::from_secs(600),
            connections_max_reauth: Duration::ZERO,
            stalled_client_timeout: Duration::from_secs(30),
            consumer_session_timeout: Duration::from_secs(45),
            consumer_heartbeat_interval: Duration::from_secs(5),
            group_min_session_timeout: Duration::from_secs(6),
            group_max_session_timeout: Duration::from_secs(1800),
            group_initial_rebalance_delay: Duration::from_secs(3),
            transaction_max_timeout: Duration::from_secs(900),
            transaction_abort_check_interval: Duration::from_secs(10),
            cache_bytes: ByteSize::mib(512),
            cache_block_bytes: ByteSize::mib(4),
            cache_disk_dir: None,
            cache_disk_bytes: ByteSize::gib(4),
            cache_catch_up_bytes: ByteSize::mib(64),
            cache_catch_up_lag: ByteSize::mib(64),
            cache_ring: true,
            cache_peer_timeout: Duration::from_secs(1),
            cache_advertise: None,
            auto_create_topics: true,
            default_partitions: 1,
            compaction_interval: Duration::from_secs(30),
            group_lag_interval: Duration::from_secs(30),
            compaction_min_extents: 8,
            compaction_max_age: Duration::from_secs(300),
            compaction_job_bytes: ByteSize::mib(128),
            segment_bytes: ByteSize::mib(256),
            gc_grace: Duration::from_secs(60),
            inject_faults: None,
            orphan_age: Duration::from_secs(3600),
        }
    }
}

impl Config {
    /// `command` with every setting's flag, its `FLOE_<KEY>` variable and
    /// its default (shown in `--help`): the flags of `floe agent`.
    pub fn command(command: clap::Command) -> clap::Command {
        Config::with_defaults(<Config as clap::Args>::augment_args(command))
    }

    /// `command`, whose settings' flags are derived from this type, with
    /// each one's `FLOE_<KEY>` variable and default.
    pub fn with_defaults(command: clap::Command) -> clap::Command {
        let defaults = serde_json::to_value(Config::default()).unwrap_or_default();
        command.mut_args(|arg| {
            let key = arg.get_id().as_str().to_string();
            if defaults.get(&key).is_none() {
                return arg;
            }
            let arg = arg.env(format!("FLOE_{}", key.to_uppercase()));
            match default_of(&defaults[&key], arg.get_value_delimiter()) {
                Some(default) => arg.default_value(default).required(false),
                None => arg,
            }
        })
    }

    /// The settings of `file` (the defaults without one), with every
    /// setting given as a flag or a variable in `matches` over them.
    /// (`given` is what `matches` parsed to.)
    pub fn layered(
        file: Option<&Path>,
        given: Config,
        matches: &clap::ArgMatches,
    ) -> anyhow::Result<Config> {
        use clap::parser::ValueSource;
        let (base, store_in_file) = match file {
            Some(path) => {
                let text = Config::read(path)?;
                let keys = text.parse::<toml::Table>().unwrap_or_default();
                (
                    Config::parse(path, &text)?,
                    keys.contains_key("object_store"),
                )
            }
            None => (Config::default(), false),
        };
        let store_given = store_in_file
            || matches!(
                matches.value_source("object_store"),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            );
        let given = serde_json::to_value(given)?;
        let mut merged = serde_json::to_value(base)?;
        for id in matches.ids() {
            let key = id.as_str();
            let explicit = matches!(
                matches.value_source(key),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            );
            if let (true, Some(value)) = (explicit, given.get(key)) {
                merged[key] = value.clone();
            }
        }
        let mut config: Config = serde_json::from_value(merged)?;
        // Unless given, the object store is a folder in the data folder,
        // wherever that is (not in the working directory's `floe-data`).
        if !store_given {
            config.object_store = format!("file://{}", config.data_dir.join("objects").display());
        }
        Ok(config)
    }

    /// The configuration reference (`docs/configuration.md`): each setting's
    /// key, flag, variable, default and meaning, from the same doc comments
    /// and defaults as `--help`.
    pub fn reference() -> String {
        let command = Config::command(clap::Command::new("agent"));
        let mut out = String::from(REFERENCE_HEAD);
        for arg in command.get_arguments() {
            let key = arg.get_id().as_str();
            let default = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(&arg.get_value_delimiter().unwrap_or(',').to_string());
            let meaning = arg
                .get_long_help()
                .or(arg.get_help())
                .map(|h| h.to_string().replace('\n', " "))
                .unwrap_or_default();
            out.push_str(&format!(
                "| `{key}` | `--{}` | `{}` | {} | {meaning} |\n",
                arg.get_long().unwrap_or(key),
                arg.get_env()
                    .map(|e| e.to_string_lossy())
                    .unwrap_or_default(),
                if default.is_empty() {
                    "(none)".to_string()
                } else {
                    format!("`{default}`")
                },
            ));
        }
        out
    }
}

const REFERENCE_HEAD: &str = "# Agent configuration reference

Generated from the agent's configuration type (`agent/src/config.rs`) by
`FLOE_BLESS=1 cargo test -p floe-agent configuration_reference`; a test
fails when this file is not current. Every setting is a key of
`floe.toml` (`floe agent --config floe.toml`), a flag of `floe agent` and
`floe compactor`, and an environment variable; a flag or a variable
overrides the file. Durations are written `250ms`, `30s`, `1h`; sizes
`8MiB`, `4 GiB`.

| key | flag | variable | default | meaning |
|---|---|---|---|---|
";

/// A size as a key's, flag's or variable's value, exactly: `8MiB` for a
/// whole number of MiB (KiB, GiB), else bytes (`ByteSize`'s own text rounds
/// to a tenth of its unit). Read as `ByteSize` reads one.
mod exact_size {
    use bytesize::ByteSize;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(size: &ByteSize, to: S) -> Result<S::Ok, S::Error> {
        let bytes = size.as_u64();
        let text = [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
            .iter()
            .find(|(_, unit)| bytes > 0 && bytes.is_multiple_of(*unit))
            .map_or(bytes.to_string(), |(name, unit)| {
                format!("{}{name}", bytes / unit)
            });
        to.serialize_str(&text)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<ByteSize, D::Error> {
        ByteSize::deserialize(from)
    }
}

/// A default as a flag's value: lists joined by the flag's delimiter;
/// `None` for no value (an unset option, an empty list).
fn default_of(value: &serde_json::Value, delimiter: Option<char>) -> Option<String> {
    use serde_json::Value;
    match value {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Array(items) if items.is_empty() => None,
        Value::Array(items) => {
            let items: Option<Vec<String>> =
                items.iter().map(|item| default_of(item, None)).collect();
            Some(items?.join(&delimiter.unwrap_or(',').to_string()))
        }
        other => Some(other.to_string()),
    }
}

/// Whether `address` (`host:port`) names this host.
pub fn is_loopback(address: &str) -> bool {
    let host = address
        .rsplit_once(':')
        .map_or(address, |(host, _)| host)
        .trim_start_matches('[')
        .trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `host:port`: an address, or a host name resolved now (an IPv4 address
/// first, as `localhost` is expected to bind 127.0.0.1).
pub fn resolve_address(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(address) = text.parse() {
        return Ok(address);
    }
    let found: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|e| format!("`{text}` is not an address or a host:port that resolves ({e})"))?
        .collect();
    let first_v4 = found.iter().find(|a| a.is_ipv4());
    first_v4
        .or(found.first())
        .copied()
        .ok_or_else(|| format!("`{text}` resolves to no address"))
}

fn deserialize_address<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(d)?;
    resolve_address(&text).map_err(serde::de::Error::custom)
}

impl Config {
    /// `min_flush_interval` as it applies: half of `flush_interval` unless
    /// set, and never more than it.
    pub fn min_flush_interval(&self) -> Duration {
        self.min_flush_interval
            .unwrap_or(self.flush_interval / 2)
            .min(self.flush_interval)
    }

    pub fn load(path: &Path) -> anyhow::Result<Config> {
        Config::parse(path, &Config::read(path)?)
    }

    fn read(path: &Path) -> anyhow::Result<String> {
        std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read config {}: {e}", path.display()))
    }

    fn parse(path: &Path, text: &str) -> anyhow::Result<Config> {
        toml::from_str(text).map_err(|e| anyhow::anyhow!("invalid config {}: {e}", path.display()))
    }

    pub fn metastore_path(&self) -> PathBuf {
        self.metastore_path
            .clone()
            .unwrap_or_else(|| self.data_dir.join("metastore.redb"))
    }

    /// The host and port clients are sent to. Never the unspecified
    /// address (`0.0.0.0`, `::`): clients cannot connect to it, and Kafka
    /// refuses to advertise it too.
    pub fn advertised(&self) -> anyhow::Result<(String, i32)> {
        let Some(advertise) = &self.advertise else {
            anyhow::ensure!(
                !self.listen.ip().is_unspecified(),
                "listen {} binds every address, which clients cannot be sent to: set advertise \
                 to the host:port clients reach this agent at",
                self.listen
            );
            return Ok((self.listen.ip().to_string(), self.listen.port() as i32));
        };
        let (host, port) = advertise
            .rsplit_once(':')
            .ok_or_else(|| anyhow::anyhow!("advertise `{advertise}` is not host:port"))?;
        let port = port
            .parse::<u16>()
            .map_err(|_| anyhow::anyhow!("advertise `{advertise}` has a bad port"))?;
        let unspecified = host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified());
        anyhow::ensure!(
            !unspecified,
            "advertise `{advertise}`: clients cannot connect to the unspecified address"
        );
        Ok((host.to_string(), port as i32))
    }

    /// The `metastore` setting when it names a PostgreSQL database.
    pub fn metastore_postgres(&self) -> Option<&str> {
        self.metastore
            .as_deref()
            .filter(|m| m.starts_with("postgres://") || m.starts_with("postgresql://"))
    }

    /// The `metastore` setting's addresses (`None`: the embedded one, or
    /// one in PostgreSQL).
    fn metastore_addresses(&self) -> Option<Vec<&str>> {
        if self.metastore_postgres().is_some() {
            return None;
        }
        let metastore = self.metastore.as_ref()?;
        let listed = metastore.split(',').map(str::trim);
        Some(listed.filter(|a| !a.is_empty()).collect())
    }

    /// Refuses a `metastore` that is not a list of `host:port` (a URL such
    /// as `postgres://...` would otherwise be dialled as a host name).
    fn check_metastore_addresses(&self) -> anyhow::Result<()> {
        let Some(addresses) = self.metastore_addresses() else {
            return Ok(());
        };
        anyhow::ensure!(
            !addresses.is_empty(),
            "metastore is empty: give host:port of its nodes"
        );
        for address in addresses {
            let port = address.rsplit_once(':').map(|(_, port)| port);
            anyhow::ensure!(
                !address.contains("://") && port.is_some_and(|p| p.parse::<u16>().is_ok()),
                "metastore `{address}` is neither host:port of `floe metastore` nodes nor a \
                 postgres:// URL"
            );
        }
        Ok(())
    }

    /// Refuses an agent that would guard its clients with SASL or ACLs
    /// while anyone who reaches its metastore, on another host, could send
    /// it commands: a secret, or the operator's word that the network is
    /// trusted, is needed then.
    pub fn check_metastore_trust(&self) -> anyhow::Result<()> {
        let Some(addresses) = self.metastore_addresses() else {
            return Ok(());
        };
        let secured = self.acls || !self.sasl_mechanisms().is_empty();
        if !secured || self.metastore_secret_file.is_some() || self.metastore_trusted_network {
            return Ok(());
        }
        let remote = addresses.into_iter().find(|address| !is_loopback(address));
        match remote {
            None => Ok(()),
            Some(address) => anyhow::bail!(
                "this agent has SASL or ACLs on, but its metastore {address} is on another host and no metastore_secret_file is given: anyone who reaches the metastore could change every ACL and credential. Give the metastore cluster's secret (--metastore-secret-file), or say the network is trusted (--metastore-trusted-network)"
            ),
        }
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        self.check_metastore_addresses()?;
        self.check_metastore_trust()?;
        // Without the balancer's address, each agent would tell clients its
        // own, and they would go round the balancer.
        anyhow::ensure!(
            self.discovery != Discovery::LoadBalancer
                || self.advertise.is_some()
                || !self.advertised_listeners.is_empty(),
            "discovery load-balancer tells clients the balancer's address: set advertise \
             (or advertised_listeners) to it"
        );
        anyhow::ensure!(
            self.flush_bytes.as_u64() > 0,
            "flush_bytes must be positive"
        );
        anyhow::ensure!(
            self.min_flush_interval
                .is_none_or(|m| m >= Duration::from_millis(1)),
            "min_flush_interval must be at least 1ms"
        );
        anyhow::ensure!(
            self.max_buffered_bytes >= self.flush_bytes,
            "max_buffered_bytes must be at least flush_bytes"
        );
        anyhow::ensure!(
            self.max_inflight_uploads > 0,
            "max_inflight_uploads must be positive"
        );
        anyhow::ensure!(
            (1..=floe_metastore::state::MAX_PARTITIONS).contains(&self.default_partitions),
            "default_partitions must be in 1..={}",
            floe_metastore::state::MAX_PARTITIONS
        );
        anyhow::ensure!(
            self.tls_cert.is_some() == self.tls_key.is_some(),
            "tls_cert and tls_key go together"
        );
        anyhow::ensure!(
            self.tls_client_ca.is_none() || self.tls_cert.is_some(),
            "tls_client_ca needs tls_cert and tls_key"
        );
        let block = self.cache_block_bytes.as_u64();
        anyhow::ensure!(
            (4096..=self.cache_bytes.as_u64() / 4).contains(&block),
            "cache_block_bytes must be at least 4KiB and at most a quarter of cache_bytes"
        );
        anyhow::ensure!(
            self.cache_catch_up_bytes.as_u64() >= 2 * block,
            "cache_catch_up_bytes must hold at least two blocks of cache_block_bytes"
        );
        anyhow::ensure!(
            self.cache_disk_dir.is_none()
                || self.cache_disk_bytes.as_u64()
                    >= floe_cache::min_disk_bytes(self.cache_block_bytes.as_u64()),
            "cache_disk_bytes must be at least {} for blocks of {}",
            ByteSize::b(floe_cache::min_disk_bytes(self.cache_block_bytes.as_u64())),
            self.cache_block_bytes
        );
        anyhow::ensure!(
            !self.cache_peer_timeout.is_zero()
                && self.cache_peer_timeout <= Duration::from_secs(30),
            "cache_peer_timeout must be positive and at most 30s"
        );
        anyhow::ensure!(
            self.max_response_bytes >= self.max_fetch_bytes,
            "max_response_bytes must be at least max_fetch_bytes"
        );
        anyhow::ensure!(
            self.max_response_bytes.as_u64() <= u32::MAX as u64,
            "max_response_bytes must be below 4 GiB"
        );
        anyhow::ensure!(
            self.max_connections > 0 && self.max_connections_per_ip > 0,
            "max_connections and max_connections_per_ip must be positive"
        );
        anyhow::ensure!(
            !self.connections_max_idle.is_zero() && !self.stalled_client_timeout.is_zero(),
            "connections_max_idle and stalled_client_timeout must be positive"
        );
        anyhow::ensure!(
            self.consumer_heartbeat_interval < self.consumer_session_timeout
                && self.consumer_session_timeout <= Duration::from_secs(1800),
            "consumer_heartbeat_interval must be shorter than consumer_session_timeout, itself at most 30m"
        );
        let max_millis = Duration::from_millis(i32::MAX as u64);
        anyhow::ensure!(
            self.transaction_abort_check_interval <= Duration::from_secs(3600),
            "transaction_abort_check_interval must be at most 1h (0: at once)"
        );
        anyhow::ensure!(
            self.group_min_session_timeout <= self.group_max_session_timeout
                && self.group_max_session_timeout <= max_millis
                && self.group_initial_rebalance_delay <= max_millis,
            "group_min_session_timeout must not exceed group_max_session_timeout; both, and group_initial_rebalance_delay, at most 24d"
        );
        anyhow::ensure!(
            self.queued_max_request_bytes.as_u64() >= self.max_frame_bytes.as_u64() + 4,
            "queued_max_request_bytes must exceed max_frame_bytes (by a frame's 4-byte size)"
        );
        anyhow::ensure!(
            self.queued_max_request_bytes.as_u64() <= u32::MAX as u64 / 2,
            "queued_max_request_bytes must be below 2 GiB"
        );
        anyhow::ensure!(
            !self.roles.is_empty(),
            "roles must name kafka, jobs or both"
        );
        // Compaction, retention and GC run only in agents with the jobs role,
        // and only agents sharing a metastore can do them for this one.
        anyhow::ensure!(
            self.roles.contains(&Role::Jobs) || self.metastore.is_some(),
            "an agent without the jobs role needs a shared metastore (--metastore), and an agent \
             with the jobs role on it, or nothing compacts, enforces retention or collects garbage"
        );
        // A segment, or one partition's run in a merged file, is one chunk
        // of the file format, whose length is a u32.
        anyhow::ensure!(
            self.segment_bytes.as_u64() < u32::MAX as u64
                && self.compaction_job_bytes.as_u64() < u32::MAX as u64,
            "segment_bytes and compaction_job_bytes must be below 4 GiB"
        );
        anyhow::ensure!(
            self.compaction_min_extents > 0,
            "compaction_min_extents must be positive"
        );
        self.advertised()?;
        anyhow::ensure!(
            self.sasl_oauthbearer_jwks_refresh >= Duration::from_secs(10),
            "sasl_oauthbearer_jwks_refresh must be at least 10s"
        );
        if let Some(spec) = &self.inject_faults {
            spec.parse::<floe_storage::faults::Faults>()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_readable_sizes_and_durations() {
        let c: Config = toml::from_str(
            "flush_interval = \"50ms\"\nflush_bytes = \"2 MiB\"\nlisten = \"127.0.0.1:19092\"",
        )
        .unwrap();
        assert_eq!(c.flush_interval, Duration::from_millis(50));
        assert_eq!(c.flush_bytes.as_u64(), 2 * 1024 * 1024);
        assert_eq!(c.advertised().unwrap(), ("127.0.0.1".to_string(), 19092));
        c.validate().unwrap();
    }

    #[test]
    fn a_host_name_listens_and_every_address_is_not_advertised() {
        let c: Config = toml::from_str("listen = \"localhost:19092\"").unwrap();
        assert_eq!(c.listen, "127.0.0.1:19092".parse().unwrap());
        assert!(resolve_address("no such host:9092").is_err());
        let every: Config = toml::from_str("listen = \"0.0.0.0:9092\"").unwrap();
        let refused = every.advertised().unwrap_err().to_string();
        assert!(refused.contains("set advertise"), "{refused}");
        let told: Config =
            toml::from_str("listen = \"0.0.0.0:9092\"\nadvertise = \"kafka.example:9092\"")
                .unwrap();
        assert_eq!(told.advertised().unwrap(), ("kafka.example".into(), 9092));
        let lying: Config = toml::from_str("advertise = \"0.0.0.0:9092\"").unwrap();
        assert!(lying.advertised().is_err());
    }

    #[test]
    fn a_load_balancer_is_advertised_by_its_address() {
        let bare: Config = toml::from_str("discovery = \"load-balancer\"").unwrap();
        let refused = bare.validate().unwrap_err().to_string();
        assert!(refused.contains("set advertise"), "{refused}");
        let told: Config =
            toml::from_str("discovery = \"load-balancer\"\nadvertise = \"lb.example:9092\"")
                .unwrap();
        told.validate().unwrap();
    }

    #[test]
    fn a_metastore_is_host_and_port_or_postgres() {
        let nodes: Config = toml::from_str("metastore = \"m1:7070, m2:7070\"").unwrap();
        nodes.validate().unwrap();
        let postgres: Config =
            toml::from_str("metastore = \"postgres://floe@db.example/floe\"").unwrap();
        postgres.validate().unwrap();
        for wrong in ["mysql://db.example/floe", "m1", "m1:http"] {
            let c: Config = toml::from_str(&format!("metastore = \"{wrong}\"")).unwrap();
            let refused = c.validate().unwrap_err().to_string();
            assert!(
                refused.contains("is neither host:port"),
                "{wrong}: {refused}"
            );
        }
    }

    #[test]
    fn the_docs_example_is_a_valid_config() {
        let page = include_str!("../../docs/configuring.md");
        let example = page
            .split("```toml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("docs/configuring.md has a toml example");
        let c: Config = toml::from_str(example).unwrap();
        crate::agent::check(&c).unwrap();
        assert_eq!(c.zone.as_deref(), Some("eu-west-1a"));
    }

    /// `docs/configuration.md` is the reference generated from this type;
    /// `FLOE_BLESS=1` writes it again.
    #[test]
    fn configuration_reference_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");
        let generated = Config::reference();
        if std::env::var_os("FLOE_BLESS").is_some() {
            std::fs::write(path, &generated).unwrap();
        }
        let checked_in = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            checked_in == generated,
            "docs/configuration.md is not current: FLOE_BLESS=1 cargo test -p floe-agent configuration_reference"
        );
        let command = Config::command(clap::Command::new("agent"));
        for arg in command.get_arguments() {
            assert!(
                arg.get_help().is_some(),
                "{} has no doc comment",
                arg.get_id()
            );
        }
    }

    #[test]
    fn sizes_are_written_exactly() {
        let c = Config {
            flush_bytes: ByteSize::b(1_536_000),
            ..Config::default()
        };
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["flush_bytes"], "1500KiB");
        assert_eq!(
            json["message_max_bytes"],
            DEFAULT_MESSAGE_MAX_BYTES.to_string()
        );
        let back: Config = serde_json::from_value(json).unwrap();
        assert_eq!(back.flush_bytes, c.flush_bytes);
        assert_eq!(back.message_max_bytes.as_u64(), DEFAULT_MESSAGE_MAX_BYTES);
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(toml::from_str::<Config>("flush_intervall = \"1s\"").is_err());
    }
}
