//! `floe metastore`: runs one metastore node (alone, bootstrapping a group
//! with `--peers`, waiting to be added with `--join`, or on PostgreSQL
//! with `--store`), the membership
//! commands `add-node`, `remove-node` and `status`, and `backup` and
//! `restore`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand};
use floe_metastore::raft::node::Bootstrap;
use floe_metastore::{LogNode, LogNodeOptions, NodeOptions, RaftMetastore, RemoteMetastore};

use crate::shutdown_signal;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct MetastoreArgs {
    #[command(subcommand)]
    admin: Option<MetastoreAdmin>,
    #[command(flatten)]
    node: MetastoreNodeArgs,
    /// A file holding the cluster's secret (16 bytes or more): connections
    /// to a node must prove it, and nodes prove it to each other.
    #[arg(long, global = true, env = "FLOE_METASTORE_SECRET_FILE")]
    secret_file: Option<PathBuf>,
    /// Serve on an address other hosts reach without a secret: the network
    /// is trusted (anyone on it may send the metastore any command)
    #[arg(long, env = "FLOE_METASTORE_TRUSTED_NETWORK")]
    trusted_network: bool,
}

/// The cluster secret in `path`, if one is given.
pub fn load_secret(
    path: Option<&std::path::Path>,
) -> anyhow::Result<Option<floe_metastore::peer_auth::ClusterSecret>> {
    path.map(|p| floe_metastore::peer_auth::ClusterSecret::load(p).map_err(anyhow::Error::msg))
        .transpose()
}

/// Runs one metastore node. Alone (no `--peers`) it is a group of one;
/// `--peers` bootstraps a replicated group; `--join` waits for `add-node`.
#[derive(Args)]
struct MetastoreNodeArgs {
    /// Address agents and the other nodes connect to.
    #[arg(long, env = "FLOE_METASTORE_LISTEN", default_value = "127.0.0.1:9093")]
    listen: SocketAddr,
    /// The node's Raft log, vote and snapshot (redb).
    #[arg(
        long,
        env = "FLOE_METASTORE_PATH",
        default_value = "./floe-meta/metastore.redb"
    )]
    path: PathBuf,
    /// This node's id in its group.
    #[arg(long, env = "FLOE_METASTORE_ID", default_value_t = 1)]
    id: u64,
    /// Every voter of a new group, this node included: `1=host:port,2=host:port,3=host:port`.
    /// Used only when the node's log is empty; start every node with the same list.
    #[arg(long, env = "FLOE_METASTORE_PEERS", value_delimiter = ',', value_parser = parse_peer, conflicts_with = "join")]
    peers: Vec<(u64, String)>,
    /// Start empty and wait to be added with `floe metastore add-node`.
    #[arg(long)]
    join: bool,
    /// Address the other nodes and agents reach this node at (default: --listen,
    /// or this node's entry in --peers).
    #[arg(long, env = "FLOE_METASTORE_ADVERTISE")]
    advertise: Option<String>,
    /// Log entries between snapshots (the log before a snapshot is purged).
    #[arg(long, default_value_t = floe_metastore::local::DEFAULT_SNAPSHOT_EVERY)]
    snapshot_every: u64,
    /// Keep the log in PostgreSQL instead of Raft: `postgres://USER:PASSWORD@HOST:PORT/DB`.
    /// Every node given the same URL serves the same metastore; one leads
    /// (holding a lease in the database), the others stand by.
    #[arg(long, env = "FLOE_METASTORE_STORE", conflicts_with_all = ["peers", "join"])]
    store: Option<String>,
    /// With --store: how long a leader's lease lasts; a dead leader is
    /// replaced within about this long.
    #[arg(long, default_value = "4s", value_parser = humantime::parse_duration)]
    lease: std::time::Duration,
    /// How long a read lease lasts: agents subscribe and are sent the
    /// changes of the partitions their fetches read, asking nothing while
    /// their lease holds; a write is answered once every lease holder has
    /// its change, and a new leader answers writes only a lease after it
    /// began to lead. 0s: no leases (agents ask with rounds). Raft nodes
    /// only.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    read_lease: std::time::Duration,
}

#[derive(Subcommand)]
enum MetastoreAdmin {
    /// Adds a started `--join` node to the group, as a voter once it has caught up.
    AddNode {
        /// Any nodes of the group (host:port, comma-separated); the leader is found.
        #[arg(long)]
        cluster: String,
        #[arg(long)]
        id: u64,
        /// Where the new node listens.
        #[arg(long)]
        address: String,
    },
    /// Removes a node from the group.
    RemoveNode {
        #[arg(long)]
        cluster: String,
        #[arg(long)]
        id: u64,
    },
    /// Prints what each node knows of the group.
    Status {
        #[arg(long)]
        cluster: String,
    },
    /// Writes a backup of the metastore's state to a file. The objects it
    /// refers to are kept in the object store for `--hold` (GC leaves
    /// everything freed from now on alone that long): restore within it.
    Backup {
        /// Any nodes of a running group (host:port, comma-separated).
        #[arg(long, conflicts_with = "path", required_unless_present = "path")]
        cluster: Option<String>,
        /// A stopped agent's embedded metastore file (`<data_dir>/metastore.redb`).
        #[arg(long)]
        path: Option<PathBuf>,
        /// The backup file to write.
        #[arg(long)]
        to: PathBuf,
        /// How long the objects the backup refers to are kept.
        #[arg(long, default_value = "7d", value_parser = humantime::parse_duration)]
        hold: std::time::Duration,
    },
    /// Restores a backup into a new node file, the only voter of a new
    /// group: start `floe metastore` on it, then add nodes with `add-node`.
    Restore {
        /// The backup file.
        #[arg(long)]
        from: PathBuf,
        /// The node file to create (it must not exist).
        #[arg(long)]
        path: PathBuf,
        /// The node's id in its new group.
        #[arg(long, default_value_t = 1)]
        id: u64,
        /// Where the node will be reached (its --advertise or --listen).
        #[arg(long, default_value = "127.0.0.1:9093")]
        address: String,
    },
}

fn parse_peer(s: &str) -> Result<(u64, String), String> {
    let (id, address) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not ID=HOST:PORT"))?;
    let id = id
        .trim()
        .parse()
        .map_err(|e| format!("node id `{id}` in `{s}`: {e}"))?;
    Ok((id, address.trim().to_string()))
}

pub fn run_metastore(args: MetastoreArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let secret = load_secret(args.secret_file.as_deref())?;
    match args.admin {
        Some(admin) => runtime.block_on(metastore_admin(admin, secret)),
        None => {
            if secret.is_none() && !args.node.listen.ip().is_loopback() && !args.trusted_network {
                anyhow::bail!(
                    "refusing to serve {} without a secret: anyone who reaches it could send any command (delete topics, trim partitions, change ACLs and credentials). Give --secret-file, or --trusted-network if the network is trusted",
                    args.node.listen
                );
            }
            runtime.block_on(run_metastore_node(args.node, secret))
        }
    }
}

async fn run_metastore_node(
    args: MetastoreNodeArgs,
    secret: Option<floe_metastore::peer_auth::ClusterSecret>,
) -> anyhow::Result<()> {
    let peers: std::collections::BTreeMap<u64, String> = args.peers.iter().cloned().collect();
    if !peers.is_empty() && !peers.contains_key(&args.id) {
        anyhow::bail!("--peers must list this node's own id {}", args.id);
    }
    let address = args
        .advertise
        .clone()
        .or_else(|| peers.get(&args.id).cloned())
        .unwrap_or_else(|| args.listen.to_string());
    let mut options = NodeOptions::new(args.id, address.clone());
    options.path = Some(args.path.clone());
    options.snapshot_every = args.snapshot_every;
    options.read_lease = Some(args.read_lease).filter(|l| !l.is_zero());
    if secret.is_none() {
        tracing::warn!(
            "no --secret-file: anyone who reaches this node's port may send it commands"
        );
    }
    options.secret = secret;
    options.bootstrap = if args.join {
        Bootstrap::Join
    } else if peers.is_empty() {
        Bootstrap::Single
    } else {
        Bootstrap::Cluster(peers)
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    if let Some(url) = &args.store {
        let mut log_options = LogNodeOptions::new(args.id, address.clone());
        log_options.snapshot_every = args.snapshot_every;
        log_options.lease = args.lease;
        log_options.secret = options.secret.clone();
        return run_log_node(listener, url, log_options).await;
    }
    let node = Arc::new(
        RaftMetastore::start(options)
            .await
            .map_err(|e| anyhow::anyhow!("opening metastore {}: {e}", args.path.display()))?,
    );
    tracing::info!(id = args.id, listen = %args.listen, %address, path = %args.path.display(), "floe metastore ready");
    tokio::select! {
        served = floe_metastore::rpc::serve(listener, node.clone()) => served?,
        _ = shutdown_signal() => tracing::info!("shutting down"),
    }
    node.shutdown().await;
    anyhow::Ok(())
}

/// Serves a node on the shared log at `url` until it is told to stop,
/// then gives its lease back.
async fn run_log_node(
    listener: tokio::net::TcpListener,
    url: &str,
    options: LogNodeOptions,
) -> anyhow::Result<()> {
    let log = floe_metastore::shared_log::postgres::PostgresLog::connect(url)
        .await
        .map_err(anyhow::Error::msg)?;
    let (id, address) = (options.id, options.address.clone());
    let node = Arc::new(
        LogNode::start(Arc::new(log), options)
            .await
            .map_err(anyhow::Error::msg)?,
    );
    tracing::info!(id, %address, store = %node.backend(), "floe metastore ready");
    tokio::select! {
        served = floe_metastore::rpc::serve(listener, node.clone()) => served?,
        _ = shutdown_signal() => tracing::info!("shutting down"),
    }
    node.shutdown().await;
    anyhow::Ok(())
}

async fn metastore_admin(
    admin: MetastoreAdmin,
    secret: Option<floe_metastore::peer_auth::ClusterSecret>,
) -> anyhow::Result<()> {
    match admin {
        MetastoreAdmin::AddNode {
            cluster,
            id,
            address,
        } => {
            RemoteMetastore::new(&cluster)
                .with_secret(secret)
                .add_node(id, address.clone())
                .await
                .map_err(|e| anyhow::anyhow!("adding node {id} at {address}: {e}"))?;
            println!("node {id} at {address} is a voter");
        }
        MetastoreAdmin::RemoveNode { cluster, id } => {
            RemoteMetastore::new(&cluster)
                .with_secret(secret)
                .remove_node(id)
                .await
                .map_err(|e| anyhow::anyhow!("removing node {id}: {e}"))?;
            println!("node {id} removed");
        }
        MetastoreAdmin::Status { cluster } => {
            let client = RemoteMetastore::new(&cluster).with_secret(secret);
            let mut reached = 0;
            for address in client.addresses() {
                match client.status_of(address).await {
                    Ok(status) => {
                        reached += 1;
                        println!("{address} {status}");
                    }
                    Err(e) => println!("{address} unreachable: {e}"),
                }
            }
            if reached == 0 {
                anyhow::bail!("no metastore node in `{cluster}` answered");
            }
        }
        MetastoreAdmin::Backup {
            cluster,
            path,
            to,
            hold,
        } => backup(cluster, path, &to, hold, secret).await?,
        MetastoreAdmin::Restore {
            from,
            path,
            id,
            address,
        } => restore(&from, &path, id, &address)?,
    }
    Ok(())
}

async fn backup(
    cluster: Option<String>,
    path: Option<PathBuf>,
    to: &std::path::Path,
    hold: std::time::Duration,
    secret: Option<floe_metastore::peer_auth::ClusterSecret>,
) -> anyhow::Result<()> {
    let hold_ms = i64::try_from(hold.as_millis()).unwrap_or(i64::MAX);
    let backup = match (cluster, path) {
        (Some(cluster), _) => RemoteMetastore::new(&cluster)
            .with_secret(secret)
            .backup(hold_ms)
            .await
            .map_err(|e| anyhow::anyhow!("backing up the metastore at {cluster}: {e}"))?,
        (None, Some(path)) => {
            if !path.exists() {
                anyhow::bail!("{} does not exist", path.display());
            }
            let node = floe_metastore::LocalMetastore::open(&path)
                .await
                .map_err(|e| {
                    anyhow::anyhow!("opening {} (is its agent stopped?): {e}", path.display())
                })?;
            let backup = node.backup(hold_ms).await;
            node.shutdown().await;
            backup.map_err(|e| anyhow::anyhow!("backing up {}: {e}", path.display()))?
        }
        (None, None) => anyhow::bail!("give --cluster or --path"),
    };
    let bytes = backup.to_bytes()?;
    // Written whole, then renamed: a backup file is never half of one.
    let partial = to.with_extension("partial");
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&partial)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", partial.display()))?;
        file.write_all(&bytes)?;
        file.sync_all()?;
    }
    std::fs::rename(&partial, to)?;
    println!(
        "backup of cluster {} written to {} ({} bytes); its objects are kept until {}",
        backup.cluster_id.as_deref().unwrap_or("(no id yet)"),
        to.display(),
        bytes.len(),
        humantime::format_rfc3339_seconds(millis_to_time(backup.held_until_ms)),
    );
    Ok(())
}

fn restore(
    from: &std::path::Path,
    path: &std::path::Path,
    id: u64,
    address: &str,
) -> anyhow::Result<()> {
    let bytes =
        std::fs::read(from).map_err(|e| anyhow::anyhow!("reading {}: {e}", from.display()))?;
    let backup = floe_metastore::raft::backup::Backup::from_bytes(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: {e}", from.display()))?;
    floe_metastore::raft::backup::restore(&backup, path, id, address)
        .map_err(|e| anyhow::anyhow!("restoring into {}: {e}", path.display()))?;
    let taken = humantime::format_rfc3339_seconds(millis_to_time(backup.taken_ms));
    let held = humantime::format_rfc3339_seconds(millis_to_time(backup.held_until_ms));
    println!(
        "restored cluster {} as of {taken} into {} (node {id} at {address}); its objects are kept until {held}",
        backup.cluster_id.as_deref().unwrap_or("(no id yet)"),
        path.display(),
    );
    if backup.held_until_ms < floe_metastore::now_ms() {
        eprintln!(
            "warning: the backup's hold on GC expired at {held}: objects it refers to may be gone"
        );
    }
    Ok(())
}

fn millis_to_time(ms: i64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64)
}
