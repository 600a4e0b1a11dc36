//! The `floe` command.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytesize::ByteSize;
use clap::{Args, Parser, Subcommand};
use floe_agent::agent::Agent;
use floe_agent::cluster::discovery::Discovery;
use floe_agent::config::Config;
use floe_agent::config::Role;
use floe_agent::metrics::{Metrics, OpLabel, metered};
use floe_metastore::{LocalMetastore, Metastore, RemoteMetastore};

// The `floe metastore` subcommand: running a node and changing its group.
mod metastore_cli;
// The admin tools (`floe topics`, `floe groups`, ...), Kafka clients of a
// running agent.
mod tools;
use metastore_cli::{MetastoreArgs, run_metastore};

#[derive(Parser)]
#[command(
    name = "floe",
    version,
    about = "A diskless, Kafka-compatible streaming broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run an agent: a Kafka broker that keeps its data in object storage.
    Agent(Box<AgentArgs>),
    /// Run an agent with only the jobs role (compaction, retention, GC): `floe agent --roles jobs`.
    Compactor(Box<AgentArgs>),
    /// Run a metastore node (Raft) that agents share (`floe agent --metastore HOST:PORT,...`), or change its group.
    Metastore(MetastoreArgs),
    /// A workload's monthly bill on Apache Kafka and on floe, line by line (docs/cost.md).
    Cost(CostArgs),
    /// Drive a Kafka broker (floe or another) with an OpenMessaging-Benchmark-shaped workload: throughput, produce and end-to-end latency, JSON and a plot.
    Bench(Box<floe_bench::BenchArgs>),
    /// Create, list, describe, alter and delete topics (as kafka-topics.sh).
    Topics(ToolArgs<tools::topics::TopicsCommand>),
    /// List, describe, reset the offsets of and delete consumer groups (as kafka-consumer-groups.sh).
    Groups(ToolArgs<tools::groups::GroupsCommand>),
    /// Describe and alter the configs of a topic, a group, a broker or the cluster (as kafka-configs.sh).
    Configs(ToolArgs<tools::configs::ConfigsCommand>),
    /// List, set and delete users' SCRAM credentials (as kafka-configs.sh --entity-type users).
    Users(ToolArgs<tools::users::UsersCommand>),
    /// Describe and alter client quotas (as kafka-configs.sh --entity-type users|clients).
    Quotas(ToolArgs<tools::quotas::QuotasCommand>),
    /// Add, list and remove ACLs (as kafka-acls.sh).
    Acls(ToolArgs<tools::acls::AclsCommand>),
    /// Try every call floe makes of an object store (PUT, ranged GET, LIST, bulk DELETE, errors) against s3://BUCKET[/PREFIX][?OPTIONS] or file://PATH.
    CheckStore {
        /// The store, as --object-store takes it.
        url: String,
    },
}

/// What the administration tools share: where the broker is, how to print.
#[derive(Args)]
struct ToolArgs<C: clap::Subcommand> {
    /// A broker (or load balancer) to ask, HOST:PORT.
    #[arg(
        long,
        global = true,
        env = "FLOE_BOOTSTRAP_SERVER",
        default_value = "localhost:9092"
    )]
    bootstrap_server: String,
    #[arg(long, global = true, value_enum, default_value = "table")]
    output: tools::Output,
    /// PEM CA certificates to trust: speak TLS to the broker
    #[arg(long, global = true, env = "FLOE_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// Authenticate with SASL/PLAIN as this user (the password from FLOE_SASL_PASSWORD)
    #[arg(long, global = true, env = "FLOE_SASL_USER")]
    sasl_user: Option<String>,
    #[arg(
        long,
        global = true,
        env = "FLOE_SASL_PASSWORD",
        hide_env_values = true
    )]
    sasl_password: Option<String>,
    #[command(subcommand)]
    command: C,
}

impl<C: clap::Subcommand> ToolArgs<C> {
    /// How to reach the broker: TLS and SASL as the flags say.
    fn security(&self) -> anyhow::Result<floe_protocol::client::Security> {
        let sasl_plain = match (&self.sasl_user, &self.sasl_password) {
            (Some(user), Some(password)) => Some((user.clone(), password.clone())),
            (None, None) => None,
            _ => anyhow::bail!("--sasl-user and a password (FLOE_SASL_PASSWORD) go together"),
        };
        Ok(floe_protocol::client::Security {
            tls_ca: self.tls_ca.clone(),
            sasl_plain,
        })
    }
}

fn run_tool<T, F: std::future::Future<Output = anyhow::Result<T>>>(tool: F) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(tool)
}

/// Defaults, then the TOML file, then each `--set`, in order.
#[derive(Args)]
struct CostArgs {
    /// A TOML file of inputs: [workload], [prices], [kafka], [floe] (any subset).
    #[arg(long)]
    config: Option<PathBuf>,
    /// One input, e.g. --set workload.write_mib_s=1024 (repeatable).
    #[arg(long = "set", value_name = "SECTION.FIELD=VALUE")]
    set: Vec<String>,
    /// Print the inputs and bills as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Leave out each line's formula.
    #[arg(long)]
    brief: bool,
    /// Take floe's throughput per core and object-store requests per MiB
    /// from a `floe bench --json` report (applied after --config and --set).
    #[arg(long, value_name = "RUN.json")]
    from_bench: Option<PathBuf>,
    /// Take them from a running agent's metrics (http://HOST:PORT/metrics),
    /// counted since it started.
    #[arg(long, value_name = "URL")]
    from_metrics: Option<String>,
    /// Also draw the bills as a stacked bar chart (SVG) here.
    #[arg(long, value_name = "FILE.svg")]
    chart: Option<PathBuf>,
}

fn run_cost(args: CostArgs) -> anyhow::Result<()> {
    let mut inputs = match &args.config {
        Some(path) => floe_cost::Inputs::from_toml(&std::fs::read_to_string(path)?)?,
        None => floe_cost::Inputs::default(),
    };
    for assignment in &args.set {
        inputs.set(assignment)?;
    }
    let mut measured = Vec::new();
    if let Some(path) = &args.from_bench {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        measured.push(floe_cost::Measured::from_bench(
            &path.display().to_string(),
            &text,
        )?);
    }
    if let Some(url) = &args.from_metrics {
        let metrics = run_tool(floe_bench::probe::scrape(url))?;
        measured.push(floe_bench::probe::measured_by_agent(url, &metrics));
    }
    let notes: Vec<String> = measured.iter().flat_map(|m| m.apply(&mut inputs)).collect();
    let mut bills = floe_cost::model::all(&inputs);
    if let Some(floe) = bills.last_mut() {
        floe.notes.extend(notes);
    }
    if args.json {
        println!("{}", floe_cost::json(&inputs, &bills));
    } else {
        print!("{}", floe_cost::table(&bills, !args.brief));
    }
    if let Some(path) = &args.chart {
        let w = &inputs.workload;
        let title = format!(
            "a month: {} MiB/s in, {}x read, {} h retention, {} zones",
            w.write_mib_s, w.read_fanout, w.retention_hours, w.zones
        );
        floe_cost::chart::write(&bills, &title, path)?;
        eprintln!("chart: {}", path.display());
    }
    Ok(())
}

/// Every flag overrides the same key of the config file; `FLOE_<KEY>` env vars too.
/// A flag given twice takes its last value.
#[derive(Args)]
#[command(args_override_self = true)]
struct AgentArgs {
    /// A floe.toml to read settings from.
    #[arg(long, env = "FLOE_CONFIG")]
    config: Option<PathBuf>,
    #[arg(long, env = "FLOE_LISTEN")]
    listen: Option<SocketAddr>,
    /// e.g. INTERNAL://10.0.0.1:9092,EXTERNAL://0.0.0.0:9094: several listeners, replacing --listen (Kafka's listeners)
    #[arg(long, env = "FLOE_LISTENERS", value_delimiter = ',')]
    listeners: Option<Vec<String>>,
    /// e.g. EXTERNAL://kafka-1.example.com:9094: what clients of each listener are told (Kafka's advertised.listeners)
    #[arg(long, env = "FLOE_ADVERTISED_LISTENERS", value_delimiter = ',')]
    advertised_listeners: Option<Vec<String>>,
    /// e.g. INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL (Kafka's listener.security.protocol.map)
    #[arg(
        long,
        env = "FLOE_LISTENER_SECURITY_PROTOCOL_MAP",
        value_delimiter = ','
    )]
    listener_security_protocol_map: Option<Vec<String>>,
    /// Admin HTTP address: /metrics, /healthz, /readyz
    #[arg(long, env = "FLOE_ADMIN_LISTEN")]
    admin_listen: Option<SocketAddr>,
    /// PEM certificate chain: the Kafka listener speaks TLS (with --tls-key)
    #[arg(long, env = "FLOE_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert
    #[arg(long, env = "FLOE_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// PEM CA certificates: clients must present a certificate they signed (mutual TLS)
    #[arg(long, env = "FLOE_TLS_CLIENT_CA")]
    tls_client_ca: Option<PathBuf>,
    /// e.g. RULE:^CN=(.*?),OU=.*$/$1/L,DEFAULT: how a client certificate's subject becomes its principal (Kafka's ssl.principal.mapping.rules)
    #[arg(long, env = "FLOE_SSL_PRINCIPAL_MAPPING_RULES")]
    ssl_principal_mapping_rules: Option<String>,
    /// A file of user:password lines: clients must authenticate with SASL/PLAIN
    #[arg(long, env = "FLOE_SASL_PLAIN_USERS")]
    sasl_plain_users: Option<PathBuf>,
    /// e.g. PLAIN,SCRAM-SHA-512: SASL mechanisms clients must authenticate with
    /// (default: PLAIN with --sasl-plain-users, else none)
    #[arg(long, env = "FLOE_SASL_MECHANISMS", value_delimiter = ',')]
    sasl_mechanisms: Option<Vec<String>>,
    /// OAUTHBEARER: the JSON Web Key Set signed tokens are checked against: an https:// endpoint or a file
    #[arg(long, env = "FLOE_SASL_OAUTHBEARER_JWKS")]
    sasl_oauthbearer_jwks: Option<String>,
    /// e.g. 1h: how often a key set endpoint is fetched again
    #[arg(long, env = "FLOE_SASL_OAUTHBEARER_JWKS_REFRESH", value_parser = humantime::parse_duration)]
    sasl_oauthbearer_jwks_refresh: Option<Duration>,
    /// OAUTHBEARER: take unsecured (alg none) tokens, for tests
    #[arg(long, env = "FLOE_SASL_OAUTHBEARER_UNSECURED", num_args = 0..=1, default_missing_value = "true")]
    sasl_oauthbearer_unsecured: Option<bool>,
    /// OAUTHBEARER: the issuer (iss) tokens must name
    #[arg(long, env = "FLOE_SASL_OAUTHBEARER_EXPECTED_ISSUER")]
    sasl_oauthbearer_expected_issuer: Option<String>,
    /// OAUTHBEARER: audiences (aud), one of which tokens must name
    #[arg(
        long,
        env = "FLOE_SASL_OAUTHBEARER_EXPECTED_AUDIENCE",
        value_delimiter = ','
    )]
    sasl_oauthbearer_expected_audience: Option<Vec<String>>,
    /// Check every request against the ACLs (floe acls, or any admin client's CreateAcls)
    #[arg(long, env = "FLOE_ACLS", num_args = 0..=1, default_missing_value = "true")]
    acls: Option<bool>,
    /// A file holding the metastore cluster's secret (floe metastore --secret-file)
    #[arg(long, env = "FLOE_METASTORE_SECRET_FILE")]
    metastore_secret_file: Option<PathBuf>,
    /// The network to the metastore is trusted: with SASL or ACLs on, talk to a metastore on another host without its secret
    #[arg(long, env = "FLOE_METASTORE_TRUSTED_NETWORK", num_args = 0..=1, default_missing_value = "true")]
    metastore_trusted_network: Option<bool>,
    /// e.g. User:admin;User:ops: principals allowed everything (separated by ';', as Kafka's super.users, since certificate principals hold commas)
    #[arg(long, env = "FLOE_SUPER_USERS", value_delimiter = ';')]
    super_users: Option<Vec<String>>,
    /// Allow what no ACL names (Kafka's allow.everyone.if.no.acl.found)
    #[arg(
        long,
        env = "FLOE_ALLOW_EVERYONE_IF_NO_ACL_FOUND",
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    allow_everyone_if_no_acl_found: Option<bool>,
    /// e.g. kafka,jobs (the default): serve clients, run background jobs, or both
    #[arg(long, env = "FLOE_ROLES", value_enum, value_delimiter = ',')]
    roles: Option<Vec<Role>>,
    /// host:port clients should connect to (default: the listen address).
    #[arg(long, env = "FLOE_ADVERTISE")]
    advertise: Option<String>,
    /// How clients find agents: self (each agent a broker) or load-balancer
    #[arg(long, env = "FLOE_DISCOVERY", value_enum)]
    discovery: Option<Discovery>,
    /// This agent's zone, matched against floe_az=<zone> in client ids
    #[arg(long, env = "FLOE_ZONE")]
    zone: Option<String>,
    /// e.g. 10s: agents silent for longer are left out of Metadata
    #[arg(long, env = "FLOE_AGENT_TTL", value_parser = humantime::parse_duration)]
    agent_ttl: Option<Duration>,
    /// Broker id in load-balancer mode
    #[arg(long, env = "FLOE_NODE_ID")]
    node_id: Option<i32>,
    #[arg(long, env = "FLOE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// file://PATH or memory://
    #[arg(long, env = "FLOE_OBJECT_STORE")]
    object_store: Option<String>,
    #[arg(long, env = "FLOE_METASTORE_PATH")]
    metastore_path: Option<PathBuf>,
    /// `floe metastore` nodes, host:port comma-separated; the leader is found (default: one in-process)
    #[arg(long, env = "FLOE_METASTORE")]
    metastore: Option<String>,
    /// e.g. 250ms
    #[arg(long, env = "FLOE_FLUSH_INTERVAL", value_parser = humantime::parse_duration)]
    flush_interval: Option<Duration>,
    /// e.g. 8MiB
    #[arg(long, env = "FLOE_FLUSH_BYTES")]
    flush_bytes: Option<ByteSize>,
    #[arg(long, env = "FLOE_MAX_BUFFERED_BYTES")]
    max_buffered_bytes: Option<ByteSize>,
    #[arg(long, env = "FLOE_MAX_INFLIGHT_UPLOADS")]
    max_inflight_uploads: Option<usize>,
    #[arg(long, env = "FLOE_MAX_FRAME_BYTES")]
    max_frame_bytes: Option<ByteSize>,
    /// Memory for requests being read across all connections (Kafka's queued.max.request.bytes)
    #[arg(long, env = "FLOE_QUEUED_MAX_REQUEST_BYTES")]
    queued_max_request_bytes: Option<ByteSize>,
    #[arg(long, env = "FLOE_MAX_FETCH_BYTES")]
    max_fetch_bytes: Option<ByteSize>,
    /// Largest batch a producer may send (Kafka's message.max.bytes)
    #[arg(long, env = "FLOE_MESSAGE_MAX_BYTES")]
    message_max_bytes: Option<ByteSize>,
    /// Memory for responses in flight across all connections
    #[arg(long, env = "FLOE_MAX_RESPONSE_BYTES")]
    max_response_bytes: Option<ByteSize>,
    #[arg(long, env = "FLOE_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    #[arg(long, env = "FLOE_MAX_CONNECTIONS_PER_IP")]
    max_connections_per_ip: Option<usize>,
    /// e.g. 10m: connections idle this long are closed
    #[arg(long, env = "FLOE_CONNECTIONS_MAX_IDLE", value_parser = humantime::parse_duration)]
    connections_max_idle: Option<Duration>,
    /// e.g. 1h: SASL clients re-authenticate this often or are disconnected (KIP-368; default never)
    #[arg(long, env = "FLOE_CONNECTIONS_MAX_REAUTH", value_parser = humantime::parse_duration)]
    connections_max_reauth: Option<Duration>,
    /// e.g. 30s: a client sending none of a begun request, or reading none of a response, this long is disconnected
    #[arg(long, env = "FLOE_STALLED_CLIENT_TIMEOUT", value_parser = humantime::parse_duration)]
    stalled_client_timeout: Option<Duration>,
    /// e.g. 45s: consumer-protocol (KIP-848) members not heard from this long are removed
    #[arg(long, env = "FLOE_CONSUMER_SESSION_TIMEOUT", value_parser = humantime::parse_duration)]
    consumer_session_timeout: Option<Duration>,
    /// e.g. 5s: how often consumer-protocol members heartbeat
    #[arg(long, env = "FLOE_CONSUMER_HEARTBEAT_INTERVAL", value_parser = humantime::parse_duration)]
    consumer_heartbeat_interval: Option<Duration>,
    /// e.g. 6s: the shortest session timeout a classic group member may ask for
    #[arg(long, env = "FLOE_GROUP_MIN_SESSION_TIMEOUT", value_parser = humantime::parse_duration)]
    group_min_session_timeout: Option<Duration>,
    /// e.g. 30m: the longest session timeout a classic group member may ask for
    #[arg(long, env = "FLOE_GROUP_MAX_SESSION_TIMEOUT", value_parser = humantime::parse_duration)]
    group_max_session_timeout: Option<Duration>,
    /// e.g. 3s: how long the first rebalance of an empty classic group waits for more members
    #[arg(long, env = "FLOE_GROUP_INITIAL_REBALANCE_DELAY", value_parser = humantime::parse_duration)]
    group_initial_rebalance_delay: Option<Duration>,
    /// e.g. 15m: the longest transaction timeout a producer may ask for
    #[arg(long, env = "FLOE_TRANSACTION_MAX_TIMEOUT", value_parser = humantime::parse_duration)]
    transaction_max_timeout: Option<Duration>,
    /// e.g. 10s: how often transactions past their timeout are looked for (0s: at once)
    #[arg(long, env = "FLOE_TRANSACTION_ABORT_CHECK_INTERVAL", value_parser = humantime::parse_duration)]
    transaction_abort_check_interval: Option<Duration>,
    #[arg(long, env = "FLOE_CACHE_BYTES")]
    cache_bytes: Option<ByteSize>,
    #[arg(long, env = "FLOE_CACHE_BLOCK_BYTES")]
    cache_block_bytes: Option<ByteSize>,
    /// A directory for the block cache's disk tier (default: memory only)
    #[arg(long, env = "FLOE_CACHE_DISK_DIR")]
    cache_disk_dir: Option<PathBuf>,
    #[arg(long, env = "FLOE_CACHE_DISK_BYTES")]
    cache_disk_bytes: Option<ByteSize>,
    /// Memory for blocks of reads far behind the tail
    #[arg(long, env = "FLOE_CACHE_CATCH_UP_BYTES")]
    cache_catch_up_bytes: Option<ByteSize>,
    /// Reads further behind their partition's end than this are catch-up reads
    #[arg(long, env = "FLOE_CACHE_CATCH_UP_LAG")]
    cache_catch_up_lag: Option<ByteSize>,
    /// Ask the zone's owner of a block before the object store (default true)
    #[arg(long, env = "FLOE_CACHE_RING")]
    cache_ring: Option<bool>,
    /// e.g. 1s: an owner slower than this is read around
    #[arg(long, env = "FLOE_CACHE_PEER_TIMEOUT", value_parser = humantime::parse_duration)]
    cache_peer_timeout: Option<Duration>,
    /// host:port other agents reach this one's admin port at (default: advertised host, admin port)
    #[arg(long, env = "FLOE_CACHE_ADVERTISE")]
    cache_advertise: Option<String>,
    #[arg(long, env = "FLOE_AUTO_CREATE_TOPICS")]
    auto_create_topics: Option<bool>,
    #[arg(long, env = "FLOE_DEFAULT_PARTITIONS")]
    default_partitions: Option<i32>,
    /// e.g. 30s; 0s turns compaction off
    #[arg(long, env = "FLOE_COMPACTION_INTERVAL", value_parser = humantime::parse_duration)]
    compaction_interval: Option<Duration>,
    #[arg(long, env = "FLOE_COMPACTION_MIN_EXTENTS")]
    compaction_min_extents: Option<usize>,
    /// e.g. 5m: ingest files are compacted once the oldest append in them is this old
    #[arg(long, env = "FLOE_COMPACTION_MAX_AGE", value_parser = humantime::parse_duration)]
    compaction_max_age: Option<Duration>,
    #[arg(long, env = "FLOE_COMPACTION_JOB_BYTES")]
    compaction_job_bytes: Option<ByteSize>,
    #[arg(long, env = "FLOE_SEGMENT_BYTES")]
    segment_bytes: Option<ByteSize>,
    #[arg(long, env = "FLOE_GC_GRACE", value_parser = humantime::parse_duration)]
    gc_grace: Option<Duration>,
    /// e.g. 1h: unknown objects older than this are deleted
    #[arg(long, env = "FLOE_ORPHAN_AGE", value_parser = humantime::parse_duration)]
    orphan_age: Option<Duration>,
    /// For tests: inject object-store faults, e.g. put_error_rate=0.3,latency=20ms
    #[arg(long, env = "FLOE_INJECT_FAULTS")]
    inject_faults: Option<String>,
}

impl AgentArgs {
    fn into_config(self) -> anyhow::Result<Config> {
        let mut c = match &self.config {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        macro_rules! set {
            ($($field:ident),*) => { $( if let Some(v) = self.$field { c.$field = v; } )* };
        }
        set!(
            sasl_oauthbearer_jwks_refresh,
            ssl_principal_mapping_rules,
            sasl_oauthbearer_unsecured,
            sasl_oauthbearer_expected_audience,
            roles,
            sasl_mechanisms,
            acls,
            metastore_trusted_network,
            super_users,
            allow_everyone_if_no_acl_found,
            listen,
            listeners,
            advertised_listeners,
            listener_security_protocol_map,
            admin_listen,
            discovery,
            agent_ttl,
            node_id,
            data_dir,
            object_store,
            flush_interval,
            flush_bytes,
            max_buffered_bytes,
            max_inflight_uploads,
            max_frame_bytes,
            queued_max_request_bytes,
            max_fetch_bytes,
            message_max_bytes,
            max_response_bytes,
            max_connections,
            max_connections_per_ip,
            connections_max_idle,
            connections_max_reauth,
            stalled_client_timeout,
            consumer_session_timeout,
            consumer_heartbeat_interval,
            group_min_session_timeout,
            group_max_session_timeout,
            group_initial_rebalance_delay,
            transaction_max_timeout,
            transaction_abort_check_interval,
            cache_bytes,
            cache_block_bytes,
            cache_disk_bytes,
            cache_catch_up_bytes,
            cache_catch_up_lag,
            cache_ring,
            cache_peer_timeout,
            auto_create_topics,
            default_partitions,
            compaction_interval,
            compaction_min_extents,
            compaction_max_age,
            compaction_job_bytes,
            segment_bytes,
            gc_grace,
            orphan_age
        );
        if self.advertise.is_some() {
            c.advertise = self.advertise;
        }
        if self.metastore_path.is_some() {
            c.metastore_path = self.metastore_path;
        }
        if self.inject_faults.is_some() {
            c.inject_faults = self.inject_faults;
        }
        if self.metastore.is_some() {
            c.metastore = self.metastore;
        }
        if self.sasl_oauthbearer_expected_issuer.is_some() {
            c.sasl_oauthbearer_expected_issuer = self.sasl_oauthbearer_expected_issuer;
        }
        if self.zone.is_some() {
            c.zone = self.zone;
        }
        if self.sasl_oauthbearer_jwks.is_some() {
            c.sasl_oauthbearer_jwks = self.sasl_oauthbearer_jwks;
        }
        if self.cache_disk_dir.is_some() {
            c.cache_disk_dir = self.cache_disk_dir;
        }
        for (flag, field) in [
            (self.tls_cert, &mut c.tls_cert),
            (self.tls_key, &mut c.tls_key),
            (self.tls_client_ca, &mut c.tls_client_ca),
            (self.sasl_plain_users, &mut c.sasl_plain_users),
            (self.metastore_secret_file, &mut c.metastore_secret_file),
        ] {
            if flag.is_some() {
                *field = flag;
            }
        }
        if self.cache_advertise.is_some() {
            c.cache_advertise = self.cache_advertise;
        }
        floe_agent::agent::check(&c)?;
        Ok(c)
    }
}

/// glibc gives each thread that allocates under contention an arena of its
/// own (up to 8 per core) and keeps what is freed in each: with tokio's
/// blocking pool doing every local-file read and write, an agent whose
/// budgets add up to about 1.1 GiB held 1.66 GiB under `floe-bench`, and
/// 0.92 GiB with two arenas (and no slower). Set before any thread starts.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only tunes the allocator; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

fn main() -> std::process::ExitCode {
    limit_malloc_arenas();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FLOE_LOG")
                // openraft narrates every election and membership step at info.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn")),
        )
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Agent(args) => args.into_config().and_then(run_agent),
        Command::Compactor(args) => args.into_config().and_then(|mut config| {
            config.roles = vec![Role::Jobs];
            run_agent(config)
        }),
        Command::Metastore(args) => run_metastore(args),
        Command::Cost(args) => run_cost(args),
        // Producers and consumers spread over every core, as real clients would.
        Command::Bench(args) => tokio::runtime::Runtime::new()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(floe_bench::main(*args))),
        Command::Topics(args) => args.security().and_then(|security| {
            run_tool(tools::topics::run(
                &args.bootstrap_server,
                &security,
                args.output,
                args.command,
            ))
        }),
        Command::Groups(args) => args.security().and_then(|security| {
            run_tool(tools::groups::run(
                &args.bootstrap_server,
                &security,
                args.output,
                args.command,
            ))
        }),
        Command::Configs(args) => args.security().and_then(|security| {
            run_tool(tools::configs::run(
                &args.bootstrap_server,
                &security,
                args.output,
                args.command,
            ))
        }),
        Command::Quotas(args) => args.security().and_then(|security| {
            run_tool(tools::quotas::run(
                &args.bootstrap_server,
                &security,
                args.output,
                args.command,
            ))
        }),
        Command::Users(args) => args.security().and_then(|security| {
            run_tool(tools::users::run(
                &args.bootstrap_server,
                &security,
                args.output,
                args.command,
            ))
        }),
        Command::Acls(args) => args.security().and_then(|security| {
            run_tool(tools::acls::run(
                &args.bootstrap_server,
                &security,
                args.output,
                args.command,
            ))
        }),
        Command::CheckStore { url } => run_tool(tools::check_store::run(&url)),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("floe: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run_agent(config: Config) -> anyhow::Result<()> {
    config.check_metastore_trust()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let metrics = Arc::new(Metrics::new().reading_process(process_use));
        let faults: Option<floe_storage::faults::Faults> = config
            .inject_faults
            .as_deref()
            .map(str::parse)
            .transpose()?;
        let connector = faults.filter(|f| f.in_http()).map(|f| {
            // Each process draws its own faults.
            let seed = floe_metastore::random_id().as_u64_pair().0;
            floe_storage::http_faults::FaultyConnector::new(
                f,
                metrics.injected_faults.clone(),
                seed,
            )
        });
        let options = floe_storage::store::OpenOptions {
            connector,
            keys: None,
        };
        let mut store = floe_storage::store::open_with(&config.object_store, options)?;
        // Wrong credentials, a missing bucket or an unreachable endpoint:
        // said in one line at start, not retried in a loop behind it.
        let probe = floe_storage::ObjectPath::from(format!(
            "{}{}",
            floe_storage::check::PROBE_PREFIX,
            floe_metastore::random_id().simple()
        ));
        floe_storage::check::check(
            store.as_ref(),
            &config.object_store,
            &probe,
            floe_storage::check::CHECK_WITHIN,
        )
        .await?;
        if let Some(faults) = faults {
            tracing::warn!(?faults, "injecting object-store faults (a testing aid)");
            store = Arc::new(floe_storage::faults::faulty(store, faults));
        }
        let meta_path = config.metastore_path();
        let (meta, meta_name): (Arc<dyn Metastore>, String) = match &config.metastore {
            Some(address) => {
                let requests = metrics.metastore_requests.clone();
                let secret = metastore_cli::load_secret(config.metastore_secret_file.as_deref())?;
                let client = RemoteMetastore::new(address)
                    .with_secret(secret)
                    .with_request_hook(Arc::new(move |op| {
                        requests.get_or_create(&OpLabel { op }).inc();
                    }));
                (Arc::new(client), address.clone())
            }
            None => (
                Arc::new(LocalMetastore::open(&meta_path).await.map_err(|e| {
                    anyhow::anyhow!("opening metastore {}: {e}", meta_path.display())
                })?),
                meta_path.display().to_string(),
            ),
        };
        let object_store = config.object_store.clone();
        let store: Arc<dyn floe_storage::ObjectStore> = Arc::new(metered(store, metrics.clone()));
        let mut agent = Agent::start(config, meta, store, metrics).await?;
        let roles = &agent.broker().config.roles;
        tracing::info!(%object_store, metastore = %meta_name, ?roles, "floe agent ready");
        tokio::select! {
            failed = agent.failed() => return Err(failed),
            _ = shutdown_signal() => agent.stop().await,
        }
        anyhow::Ok(())
    })
}

/// This process's CPU time and peak memory, from /proc.
fn process_use() -> Option<floe_agent::metrics::ProcessUse> {
    let me = floe_bench::probe::process("self").ok()?;
    Some(floe_agent::metrics::ProcessUse {
        cpu_seconds: me.cpu_seconds,
        peak_rss_bytes: me.peak_rss_bytes,
    })
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_overrides_its_key() {
        let cli = Cli::try_parse_from([
            "floe",
            "agent",
            "--listen",
            "127.0.0.1:1",
            "--roles",
            "jobs",
            "--admin-listen",
            "127.0.0.1:3",
            "--advertise",
            "lb:2",
            "--node-id",
            "3",
            "--discovery",
            "load-balancer",
            "--zone",
            "z9",
            "--agent-ttl",
            "16s",
            "--data-dir",
            "/d",
            "--object-store",
            "memory://",
            "--metastore-path",
            "/m",
            "--flush-interval",
            "5ms",
            "--flush-bytes",
            "1MiB",
            "--max-buffered-bytes",
            "2MiB",
            "--max-inflight-uploads",
            "6",
            "--max-frame-bytes",
            "7MiB",
            "--max-fetch-bytes",
            "15MiB",
            "--cache-bytes",
            "8MiB",
            "--cache-block-bytes",
            "9KiB",
            "--auto-create-topics",
            "false",
            "--default-partitions",
            "10",
            "--compaction-interval",
            "11s",
            "--compaction-min-extents",
            "12",
            "--segment-bytes",
            "13MiB",
            "--gc-grace",
            "14s",
            "--orphan-age",
            "17s",
            "--group-min-session-timeout",
            "1s",
            "--group-max-session-timeout",
            "18s",
            "--group-initial-rebalance-delay",
            "0s",
            "--transaction-max-timeout",
            "19s",
            "--transaction-abort-check-interval",
            "2s",
            "--inject-faults",
            "latency=1ms",
            "--metastore",
            "meta:1",
        ])
        .unwrap();
        let Command::Agent(args) = cli.command else {
            panic!("parsed as agent")
        };
        let c = args.into_config().unwrap();
        let debug = format!("{c:?}");
        let defaults = format!("{:?}", Config::default());
        assert_eq!(c.roles, vec![Role::Jobs]);
        assert_eq!(c.listen.to_string(), "127.0.0.1:1");
        assert_eq!(c.admin_listen.to_string(), "127.0.0.1:3");
        assert_eq!(c.advertise.as_deref(), Some("lb:2"));
        assert_eq!(c.node_id, 3);
        assert_eq!(c.discovery, Discovery::LoadBalancer);
        assert_eq!(c.zone.as_deref(), Some("z9"));
        assert_eq!(c.agent_ttl, Duration::from_secs(16));
        assert_eq!(c.data_dir, PathBuf::from("/d"));
        assert_eq!(c.object_store, "memory://");
        assert_eq!(c.metastore_path, Some(PathBuf::from("/m")));
        assert_eq!(c.flush_interval, Duration::from_millis(5));
        assert_eq!(c.flush_bytes, ByteSize::mib(1));
        assert_eq!(c.max_buffered_bytes, ByteSize::mib(2));
        assert_eq!(c.max_inflight_uploads, 6);
        assert_eq!(c.max_frame_bytes, ByteSize::mib(7));
        assert_eq!(c.max_fetch_bytes, ByteSize::mib(15));
        assert_eq!(c.cache_bytes, ByteSize::mib(8));
        assert_eq!(c.cache_block_bytes, ByteSize::kib(9));
        assert!(!c.auto_create_topics);
        assert_eq!(c.default_partitions, 10);
        assert_eq!(c.compaction_interval, Duration::from_secs(11));
        assert_eq!(c.compaction_min_extents, 12);
        assert_eq!(c.segment_bytes, ByteSize::mib(13));
        assert_eq!(c.gc_grace, Duration::from_secs(14));
        assert_eq!(c.orphan_age, Duration::from_secs(17));
        assert_eq!(c.group_min_session_timeout, Duration::from_secs(1));
        assert_eq!(c.group_max_session_timeout, Duration::from_secs(18));
        assert_eq!(c.group_initial_rebalance_delay, Duration::ZERO);
        assert_eq!(c.transaction_max_timeout, Duration::from_secs(19));
        assert_eq!(c.transaction_abort_check_interval, Duration::from_secs(2));
        assert_eq!(c.inject_faults.as_deref(), Some("latency=1ms"));
        assert_eq!(c.metastore.as_deref(), Some("meta:1"));
        assert_ne!(debug, defaults);
    }

    #[test]
    fn roles_default_to_both_and_take_a_list() {
        let roles = |args: &[&str]| {
            let cli = Cli::try_parse_from(args).unwrap();
            let (Command::Agent(args) | Command::Compactor(args)) = cli.command else {
                panic!("parsed as an agent")
            };
            args.into_config().unwrap().roles
        };
        assert_eq!(roles(&["floe", "agent"]), vec![Role::Kafka, Role::Jobs]);
        assert_eq!(
            roles(&["floe", "agent", "--roles", "kafka", "--metastore", "m:1"]),
            vec![Role::Kafka]
        );
        assert_eq!(
            roles(&["floe", "agent", "--roles", "jobs,kafka"]),
            vec![Role::Jobs, Role::Kafka]
        );
        assert!(Cli::try_parse_from(["floe", "agent", "--roles", "broker"]).is_err());
        // Without the jobs role nor a shared metastore, nothing would ever
        // compact, enforce retention or collect garbage.
        let cli = Cli::try_parse_from(["floe", "agent", "--roles", "kafka"]).unwrap();
        let Command::Agent(args) = cli.command else {
            panic!("parsed as agent")
        };
        let err = args.into_config().unwrap_err().to_string();
        assert!(err.contains("jobs role"), "{err}");
    }

    #[test]
    fn a_repeated_flag_takes_its_last_value() {
        let cli =
            Cli::try_parse_from(["floe", "agent", "--node-id", "1", "--node-id", "2"]).unwrap();
        let Command::Agent(args) = cli.command else {
            panic!("parsed as agent")
        };
        assert_eq!(args.into_config().unwrap().node_id, 2);
    }

    #[test]
    fn bad_settings_are_refused_with_a_reason() {
        let cli = Cli::try_parse_from(["floe", "agent", "--flush-bytes", "0"]).unwrap();
        let Command::Agent(args) = cli.command else {
            panic!("parsed as agent")
        };
        let err = args.into_config().unwrap_err().to_string();
        assert!(err.contains("flush_bytes"), "{err}");
        assert!(Cli::try_parse_from(["floe", "agent", "--flush-interval", "soon"]).is_err());
    }
}
