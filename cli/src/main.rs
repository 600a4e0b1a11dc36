//! The `floe` command.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use floe_agent::agent::Agent;
use floe_agent::config::Config;
use floe_agent::config::Role;
use floe_agent::metrics::{Metrics, metered};
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
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("FLOE_COMMIT"), ")"),
    about = "A diskless, Kafka-compatible streaming broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How log lines are written: `text` for people (coloured only on a
    /// terminal), `json` for a log pipeline (one object per line).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "FLOE_LOG_FORMAT")]
    log_format: LogFormat,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Logs to standard output, filtered by `FLOE_LOG` (as `RUST_LOG`).
fn start_logging(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("FLOE_LOG")
        // openraft narrates every election and membership step at info.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn"));
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => logs.with_ansi(std::io::stdout().is_terminal()).init(),
        LogFormat::Json => logs.json().flatten_event(true).init(),
    }
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
    /// The cluster at a glance: its id and agents, and (when told where) the metastore group, each agent's health and the object store.
    Status(Box<StatusArgs>),
    /// Try every call floe makes of an object store (PUT, ranged GET, LIST, bulk DELETE, errors) against s3://BUCKET[/PREFIX][?OPTIONS] or file://PATH.
    CheckStore {
        /// The store, as --object-store takes it.
        url: String,
    },
}

/// What the administration tools share: where the broker is, how to print.
#[derive(Args)]
struct ToolArgs<C: clap::Subcommand> {
    #[command(flatten)]
    broker: BrokerArgs,
    #[command(subcommand)]
    command: C,
}

/// Where the broker is, how to reach it, how to print.
#[derive(Args)]
struct BrokerArgs {
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
}

impl BrokerArgs {
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

/// `floe status`: what to look at besides the broker.
#[derive(Args)]
struct StatusArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// Metastore nodes, HOST:PORT,...: each node's role and how far behind its leader it is.
    #[arg(long, env = "FLOE_METASTORE")]
    metastore: Option<String>,
    /// A file holding the metastore's secret, if it has one.
    #[arg(long, env = "FLOE_METASTORE_SECRET_FILE")]
    metastore_secret_file: Option<PathBuf>,
    /// Agents' admin ports, HOST:PORT,...: each agent's readiness, version and health.
    #[arg(long, value_delimiter = ',')]
    admin: Vec<String>,
    /// The object store, as --object-store takes it: whether it takes floe's calls.
    #[arg(long, env = "FLOE_OBJECT_STORE")]
    object_store: Option<String>,
}

impl StatusArgs {
    fn run(self) -> anyhow::Result<()> {
        let security = self.broker.security()?;
        let metastore = match self.metastore {
            Some(addresses) => Some((
                addresses,
                metastore_cli::load_secret(self.metastore_secret_file.as_deref())?,
            )),
            None => None,
        };
        let targets = tools::status::Targets {
            metastore,
            admins: self.admin,
            object_store: self.object_store,
        };
        run_tool(tools::status::run(
            &self.broker.bootstrap_server,
            &security,
            self.broker.output,
            targets,
        ))
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
    /// The flush intervals whose PUTs and waits are shown side by side
    /// (none: no such table).
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = humantime::parse_duration,
        default_value = "50ms,100ms,250ms,500ms,1s"
    )]
    flush_intervals: Vec<std::time::Duration>,
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
        if !args.flush_intervals.is_empty() {
            let intervals: Vec<f64> = args
                .flush_intervals
                .iter()
                .map(|d| d.as_secs_f64() * 1000.0)
                .collect();
            let rows = floe_cost::flush::tradeoff(&inputs, &intervals);
            print!("\n{}", floe_cost::flush::table(&rows));
        }
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

/// The agent's settings: a config file, under its flags and variables
/// (every one derived from [`Config`]). A flag given twice takes its last
/// value.
#[derive(Args)]
#[command(args_override_self = true)]
struct AgentArgs {
    /// A floe.toml to read settings from; flags and variables override it.
    #[arg(long, env = "FLOE_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    settings: Config,
}

impl AgentArgs {
    /// The settings, checked: the file's, with those given as flags or
    /// variables (`matches`, the subcommand's) over them.
    fn into_config(self, matches: &clap::ArgMatches) -> anyhow::Result<Config> {
        let c = Config::layered(self.config.as_deref(), self.settings, matches)?;
        floe_agent::agent::check(&c)?;
        Ok(c)
    }
}

/// The whole command line: the derived one, with each agent setting's
/// default and `FLOE_<KEY>` variable (see [`Config::with_defaults`]).
fn command() -> clap::Command {
    Cli::command()
        .mut_subcommand("agent", Config::with_defaults)
        .mut_subcommand("compactor", Config::with_defaults)
}

/// Parses `args` as the command line.
fn parse<I: IntoIterator<Item = T>, T: Into<std::ffi::OsString> + Clone>(
    args: I,
) -> Result<(Cli, clap::ArgMatches), clap::Error> {
    let matches = command().try_get_matches_from(args)?;
    Ok((Cli::from_arg_matches(&matches)?, matches))
}

/// The matches of the subcommand the command line ran.
fn subcommand_matches(matches: &clap::ArgMatches) -> &clap::ArgMatches {
    matches.subcommand().map_or(matches, |(_, sub)| sub)
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
    let (cli, matches) = parse(std::env::args_os()).unwrap_or_else(|e| e.exit());
    start_logging(cli.log_format);
    let settings = subcommand_matches(&matches);
    let result = match cli.command {
        Command::Agent(args) => args.into_config(settings).and_then(run_agent),
        Command::Compactor(args) => args.into_config(settings).and_then(|mut config| {
            config.roles = vec![Role::Jobs];
            run_agent(config)
        }),
        Command::Metastore(args) => run_metastore(args),
        Command::Cost(args) => run_cost(args),
        // Producers and consumers spread over every core, as real clients would.
        Command::Bench(args) => tokio::runtime::Runtime::new()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(floe_bench::main(*args))),
        Command::Topics(args) => args.broker.security().and_then(|security| {
            run_tool(tools::topics::run(
                &args.broker.bootstrap_server,
                &security,
                args.broker.output,
                args.command,
            ))
        }),
        Command::Groups(args) => args.broker.security().and_then(|security| {
            run_tool(tools::groups::run(
                &args.broker.bootstrap_server,
                &security,
                args.broker.output,
                args.command,
            ))
        }),
        Command::Configs(args) => args.broker.security().and_then(|security| {
            run_tool(tools::configs::run(
                &args.broker.bootstrap_server,
                &security,
                args.broker.output,
                args.command,
            ))
        }),
        Command::Quotas(args) => args.broker.security().and_then(|security| {
            run_tool(tools::quotas::run(
                &args.broker.bootstrap_server,
                &security,
                args.broker.output,
                args.command,
            ))
        }),
        Command::Users(args) => args.broker.security().and_then(|security| {
            run_tool(tools::users::run(
                &args.broker.bootstrap_server,
                &security,
                args.broker.output,
                args.command,
            ))
        }),
        Command::Acls(args) => args.broker.security().and_then(|security| {
            run_tool(tools::acls::run(
                &args.broker.bootstrap_server,
                &security,
                args.broker.output,
                args.command,
            ))
        }),
        Command::CheckStore { url } => run_tool(tools::check_store::run(&url)),
        Command::Status(args) => args.run(),
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
        let metrics = Arc::new(
            Metrics::new()
                .reading_process(process_use)
                .built(env!("CARGO_PKG_VERSION"), env!("FLOE_COMMIT")),
        );
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
        let mut member = None;
        let (meta, meta_name): (Arc<dyn Metastore>, String) = match &config.metastore {
            Some(url) if config.metastore_postgres().is_some() => {
                let joined = Arc::new(join_postgres_metastore(&config, url, &metrics).await?);
                let name = joined.node().backend();
                member = Some(joined.clone());
                (joined, name)
            }
            Some(address) => {
                let secret = metastore_cli::load_secret(config.metastore_secret_file.as_deref())?;
                let (counted, streamed) = (metrics.clone(), metrics.clone());
                let client = RemoteMetastore::new(address)
                    .with_secret(secret)
                    .with_request_hook(Arc::new(move |op, answered| {
                        counted.metastore_request(op, answered);
                    }))
                    .with_stream_hook(Arc::new(move |kind| {
                        streamed.metastore_stream_message(kind);
                    }));
                let client: Arc<dyn Metastore> = Arc::new(client);
                tokio::spawn(say_while_unreachable(client.clone(), address.clone()));
                (client, address.clone())
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
        let roles = &agent.broker().config().roles;
        tracing::info!(%object_store, metastore = %meta_name, ?roles, "floe agent ready");
        tokio::select! {
            failed = agent.failed() => return Err(failed),
            _ = shutdown_signal() => agent.stop().await,
        }
        // The next agent leads the metastore at once, not a lease later.
        if let Some(member) = member {
            member.shutdown().await;
        }
        anyhow::Ok(())
    })
}

/// Starts this agent's node of the metastore in PostgreSQL at `url`, served
/// where the other agents reach it while it leads.
async fn join_postgres_metastore(
    config: &floe_agent::config::Config,
    url: &str,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<floe_metastore::shared_log::member::Member> {
    let secret = metastore_cli::load_secret(config.metastore_secret_file.as_deref())?;
    let listen = config.metastore_listen.as_deref().unwrap_or("127.0.0.1:0");
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("metastore_listen {listen}: {e}"))?;
    let bound = listener.local_addr()?;
    if !bound.ip().is_loopback() && secret.is_none() && !config.metastore_trusted_network {
        anyhow::bail!(
            "refusing to serve the metastore on {bound} without a secret: anyone who reaches it could send any command. Give --metastore-secret-file, or --metastore-trusted-network if the network is trusted"
        );
    }
    let address = match &config.metastore_advertise {
        Some(address) => address.clone(),
        None if bound.ip().is_unspecified() => anyhow::bail!(
            "metastore_listen {bound} is every interface: set metastore_advertise to the host:port other agents reach"
        ),
        None => bound.to_string(),
    };
    let counted = metrics.clone();
    let log = floe_metastore::shared_log::postgres::PostgresLog::connect(url)
        .await
        .map_err(anyhow::Error::msg)?
        .with_call_hook(Arc::new(move |call, answered| {
            counted.database_call(call, answered)
        }));
    // Only shown in `floe metastore status`: agents behind a load
    // balancer may share one broker id, so the node takes its own.
    let id = u64::from(floe_metastore::random_id().as_fields().0);
    let mut options = floe_metastore::LogNodeOptions::new(id, address);
    options.secret = secret;
    floe_metastore::shared_log::member::Member::start(Arc::new(log), listener, options)
        .await
        .map_err(anyhow::Error::msg)
}

/// Says at once, in one line naming its addresses, that the metastore does
/// not answer, and again every [`UNREACHABLE_EVERY`] while that lasts (an
/// agent waits for its metastore and serves nothing meanwhile); once it
/// answers, says so and stops.
async fn say_while_unreachable(meta: Arc<dyn Metastore>, addresses: String) {
    let mut said: Option<tokio::time::Instant> = None;
    loop {
        let answered = tokio::time::timeout(UNREACHABLE_WITHIN, meta.clock()).await;
        let why = match answered {
            Ok(Ok(_)) => {
                if said.is_some() {
                    tracing::info!(metastore = %addresses, "the metastore answers");
                }
                return;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {UNREACHABLE_WITHIN:?}"),
        };
        if said.is_none_or(|at| at.elapsed() >= UNREACHABLE_EVERY) {
            tracing::warn!(metastore = %addresses, error = %why,
                "the metastore does not answer; the agent waits for it");
            said = Some(tokio::time::Instant::now());
        }
        tokio::time::sleep(UNREACHABLE_LOOK_EVERY).await;
    }
}

/// How long each look at the metastore waits, how often it is looked at,
/// and how often an agent says again that it does not answer.
const UNREACHABLE_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);
const UNREACHABLE_LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
const UNREACHABLE_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

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
    use std::time::Duration;

    use bytesize::ByteSize;
    use floe_agent::cluster::discovery::Discovery;

    use super::*;

    /// The checked settings of the command line `args`.
    fn config_of(args: &[&str]) -> anyhow::Result<Config> {
        let (cli, matches) = parse(args)?;
        let (Command::Agent(agent) | Command::Compactor(agent)) = cli.command else {
            panic!("parsed as an agent")
        };
        agent.into_config(subcommand_matches(&matches))
    }

    #[test]
    fn every_flag_overrides_its_key() {
        let c = config_of(&[
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
        let roles = |args: &[&str]| config_of(args).unwrap().roles;
        assert_eq!(roles(&["floe", "agent"]), vec![Role::Kafka, Role::Jobs]);
        assert_eq!(
            roles(&["floe", "agent", "--roles", "kafka", "--metastore", "m:1"]),
            vec![Role::Kafka]
        );
        assert_eq!(
            roles(&["floe", "agent", "--roles", "jobs,kafka"]),
            vec![Role::Jobs, Role::Kafka]
        );
        assert!(parse(["floe", "agent", "--roles", "broker"]).is_err());
        // Without the jobs role nor a shared metastore, nothing would ever
        // compact, enforce retention or collect garbage.
        let err = config_of(&["floe", "agent", "--roles", "kafka"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("jobs role"), "{err}");
    }

    #[test]
    fn objects_default_to_the_data_folder() {
        let store = |args: &[&str]| config_of(args).unwrap().object_store;
        assert_eq!(store(&["floe", "agent"]), "file://./floe-data/objects");
        assert_eq!(
            store(&["floe", "agent", "--data-dir", "/var/lib/floe"]),
            "file:///var/lib/floe/objects"
        );
        // Given, it stays: even in the old default's own words.
        for given in ["memory://", "file://./floe-data/objects"] {
            let args = ["floe", "agent", "--data-dir", "/d", "--object-store", given];
            assert_eq!(store(&args), given);
        }
    }

    #[test]
    fn a_repeated_flag_takes_its_last_value() {
        let c = config_of(&["floe", "agent", "--node-id", "1", "--node-id", "2"]).unwrap();
        assert_eq!(c.node_id, 2);
    }

    #[test]
    fn bad_settings_are_refused_with_a_reason() {
        let err = config_of(&["floe", "agent", "--flush-bytes", "0"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("flush_bytes"), "{err}");
        assert!(parse(["floe", "agent", "--flush-interval", "soon"]).is_err());
    }

    #[test]
    fn no_flags_give_the_defaults() {
        let c = config_of(&["floe", "agent"]).unwrap();
        assert_eq!(format!("{c:?}"), format!("{:?}", Config::default()));
        let c = config_of(&["floe", "compactor"]).unwrap();
        assert_eq!(format!("{c:?}"), format!("{:?}", Config::default()));
    }

    #[test]
    fn flags_override_the_file_and_only_those_given() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("floe.toml");
        std::fs::write(
            &file,
            "flush_interval = \"50ms\"\nzone = \"z1\"\nnode_id = 7\n",
        )
        .unwrap();
        let path = file.to_str().unwrap();
        let c = config_of(&["floe", "agent", "--config", path, "--zone", "z2"]).unwrap();
        assert_eq!(c.flush_interval, Duration::from_millis(50));
        assert_eq!(c.node_id, 7);
        assert_eq!(c.zone.as_deref(), Some("z2"));
        // A flag given its default still overrides the file.
        let c = config_of(&[
            "floe",
            "agent",
            "--config",
            path,
            "--flush-interval",
            "250ms",
        ])
        .unwrap();
        assert_eq!(c.flush_interval, Duration::from_millis(250));
    }

    #[test]
    fn help_shows_each_setting_s_default_and_variable() {
        let mut agent = command().find_subcommand_mut("agent").unwrap().clone();
        let help = agent.render_long_help().to_string();
        assert!(help.contains("--flush-interval"), "{help}");
        assert!(help.contains("[default: 250ms]"), "{help}");
        assert!(help.contains("[env: FLOE_FLUSH_INTERVAL="), "{help}");
        assert!(help.contains("[default: kafka,jobs]"), "{help}");
    }
}
