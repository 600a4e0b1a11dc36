//! The `floe` command.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytesize::ByteSize;
use clap::{Args, Parser, Subcommand};
use floe_agent::broker::Broker;
use floe_agent::config::Config;
use floe_metastore::{LocalMetastore, Metastore};

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
    Agent(AgentArgs),
}

/// Every flag overrides the same key of the config file; `FLOE_<KEY>` env vars too.
#[derive(Args)]
struct AgentArgs {
    /// A floe.toml to read settings from.
    #[arg(long, env = "FLOE_CONFIG")]
    config: Option<PathBuf>,
    #[arg(long, env = "FLOE_LISTEN")]
    listen: Option<SocketAddr>,
    /// host:port clients should connect to (default: the listen address).
    #[arg(long, env = "FLOE_ADVERTISE")]
    advertise: Option<String>,
    #[arg(long, env = "FLOE_NODE_ID")]
    node_id: Option<i32>,
    #[arg(long, env = "FLOE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// file://PATH or memory://
    #[arg(long, env = "FLOE_OBJECT_STORE")]
    object_store: Option<String>,
    #[arg(long, env = "FLOE_METASTORE_PATH")]
    metastore_path: Option<PathBuf>,
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
    #[arg(long, env = "FLOE_CACHE_BYTES")]
    cache_bytes: Option<ByteSize>,
    #[arg(long, env = "FLOE_CACHE_BLOCK_BYTES")]
    cache_block_bytes: Option<ByteSize>,
    #[arg(long, env = "FLOE_AUTO_CREATE_TOPICS")]
    auto_create_topics: Option<bool>,
    #[arg(long, env = "FLOE_DEFAULT_PARTITIONS")]
    default_partitions: Option<i32>,
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
            listen,
            node_id,
            data_dir,
            object_store,
            flush_interval,
            flush_bytes,
            max_buffered_bytes,
            max_inflight_uploads,
            max_frame_bytes,
            cache_bytes,
            cache_block_bytes,
            auto_create_topics,
            default_partitions
        );
        if self.advertise.is_some() {
            c.advertise = self.advertise;
        }
        if self.metastore_path.is_some() {
            c.metastore_path = self.metastore_path;
        }
        c.validate()?;
        Ok(c)
    }
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FLOE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Agent(args) => args.into_config().and_then(run_agent),
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let store = floe_storage::store::open(&config.object_store)?;
        let meta_path = config.metastore_path();
        let meta: Arc<dyn Metastore> = Arc::new(
            LocalMetastore::open(&meta_path)
                .map_err(|e| anyhow::anyhow!("opening metastore {}: {e}", meta_path.display()))?,
        );
        let listen = config.listen;
        let object_store = config.object_store.clone();
        let broker = Arc::new(Broker::new(config, meta, store)?);
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}"))?;
        tracing::info!(%listen, advertised = %format!("{}:{}", broker.advertised_host, broker.advertised_port),
            %object_store, metastore = %meta_path.display(), "floe agent ready");
        tokio::select! {
            served = floe_agent::server::serve(listener, broker) => served?,
            _ = shutdown_signal() => tracing::info!("shutting down"),
        }
        anyhow::Ok(())
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
