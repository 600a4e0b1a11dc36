//! `floe status`: the cluster at a glance, as an operator checks it first
//! (in the spirit of `bufstream admin status`): its id and agents (asked of
//! a broker, so through a load balancer too), the metastore group (each
//! node's role and how far behind its leader it is), each agent's health
//! from its admin port (ready or why not, version, metastore contact,
//! object-store errors, how many bytes the store served per byte fetched),
//! and whether the object store takes floe's calls. Each part is shown when
//! asked for; the exit status says whether anything is wrong.

use std::time::Duration;

use floe_metastore::RemoteMetastore;
use floe_protocol::client::Security;
use floe_protocol::kafka_protocol::messages::{
    ApiKey, DescribeClusterRequest, DescribeClusterResponse,
};

use super::{Broker, Output, Table, check, print};

/// Where to look besides the broker.
pub struct Targets {
    /// Metastore nodes, `host:port,...`, and the secret they ask for.
    pub metastore: Option<(String, Option<floe_metastore::peer_auth::ClusterSecret>)>,
    /// Agents' admin ports, `host:port` each.
    pub admins: Vec<String>,
    /// The object store, as `--object-store` takes it.
    pub object_store: Option<String>,
}

/// How long one look at an agent's admin port may take.
const LOOK_WITHIN: Duration = Duration::from_secs(5);

pub async fn run(
    bootstrap: &str,
    security: &Security,
    output: Output,
    targets: Targets,
) -> anyhow::Result<()> {
    let mut problems = Vec::new();
    // A broker that does not answer is one problem among others: the
    // metastore, agents and store are still looked at.
    let mut tables = match cluster(bootstrap, security).await {
        Ok((cluster, agents)) => vec![("cluster", cluster), ("agents", agents)],
        Err(e) => {
            problems.push(format!("the broker at {bootstrap} does not answer: {e:#}"));
            Vec::new()
        }
    };
    if let Some((addresses, secret)) = &targets.metastore {
        tables.push((
            "metastore",
            metastore(addresses, secret, &mut problems).await,
        ));
    }
    if !targets.admins.is_empty() {
        tables.push(("health", health(&targets.admins, &mut problems).await));
    }
    if let Some(url) = &targets.object_store {
        tables.push(("object_store", object_store(url, &mut problems).await));
    }
    let named: Vec<(&str, &Table)> = tables.iter().map(|(n, t)| (*n, t)).collect();
    print(output, &named);
    anyhow::ensure!(problems.is_empty(), "{}", problems.join("; "));
    Ok(())
}

/// The cluster's id and its agents, as DescribeCluster answers.
async fn cluster(bootstrap: &str, security: &Security) -> anyhow::Result<(Table, Table)> {
    let mut broker = Broker::connect(bootstrap, security).await?;
    let described: DescribeClusterResponse = broker
        .call(
            ApiKey::DescribeCluster,
            0,
            &DescribeClusterRequest::default(),
        )
        .await?;
    check(
        described.error_code,
        "describing the cluster",
        described.error_message.as_ref(),
    )?;
    let mut cluster = Table::new(&["CLUSTER-ID", "AGENTS", "CONTROLLER"]);
    cluster.push(vec![
        described.cluster_id.to_string().into(),
        described.brokers.len().into(),
        described.controller_id.0.into(),
    ]);
    // Behind a load balancer every agent advertises its one address, so
    // this lists the balancer; --admin lists the agents themselves.
    let mut agents = Table::new(&["ID", "ADDRESS", "ZONE"]);
    for b in &described.brokers {
        agents.push(vec![
            b.broker_id.0.into(),
            format!("{}:{}", b.host, b.port).into(),
            b.rack.as_ref().map(|r| r.to_string()).into(),
        ]);
    }
    Ok((cluster, agents))
}

/// Each node's view of the group; how far each is behind the leader.
async fn metastore(
    addresses: &str,
    secret: &Option<floe_metastore::peer_auth::ClusterSecret>,
    problems: &mut Vec<String>,
) -> Table {
    let client = RemoteMetastore::new(addresses).with_secret(secret.clone());
    let mut seen = Vec::new();
    for address in client.addresses() {
        seen.push((address.clone(), client.status_of(address).await));
    }
    let leader_applied = seen
        .iter()
        .filter_map(|(_, s)| s.as_ref().ok())
        .find(|s| s.role == "Leader")
        .and_then(|s| s.last_applied_index);
    if leader_applied.is_none() {
        problems.push("no metastore node leads".into());
    }
    let mut table = Table::new(&[
        "NODE",
        "ID",
        "ROLE",
        "TERM",
        "LEADER",
        "APPLIED",
        "BEHIND",
        "LOG-ENTRIES",
    ]);
    for (address, status) in seen {
        match status {
            Ok(s) => {
                let behind = leader_applied
                    .zip(s.last_applied_index)
                    .map(|(l, a)| l.saturating_sub(a) as i64);
                table.push(vec![
                    address.into(),
                    (s.id as i64).into(),
                    s.role.into(),
                    (s.term as i64).into(),
                    s.leader.map(|l| l as i64).into(),
                    s.last_applied_index.map(|a| a as i64).into(),
                    behind.into(),
                    (s.log_entries as i64).into(),
                ]);
            }
            Err(e) => {
                problems.push(format!("metastore node {address} does not answer"));
                table.push(vec![
                    address.into(),
                    super::Cell::Nothing,
                    format!("unreachable: {e}").into(),
                    super::Cell::Nothing,
                    super::Cell::Nothing,
                    super::Cell::Nothing,
                    super::Cell::Nothing,
                    super::Cell::Nothing,
                ]);
            }
        }
    }
    table
}

/// Each agent's health, from its admin port.
async fn health(admins: &[String], problems: &mut Vec<String>) -> Table {
    let mut table = Table::new(&[
        "ADMIN",
        "READY",
        "VERSION",
        "METASTORE-HEARD-S",
        "STORE-ERRORS",
        "STORE-READ-PER-FETCHED",
        "CONNECTIONS",
    ]);
    // Admin ports are reached directly, never through a proxy.
    let http = reqwest::Client::builder()
        .timeout(LOOK_WITHIN)
        .no_proxy()
        .build();
    for admin in admins {
        let looked = match &http {
            Ok(http) => look_at(http, admin).await,
            Err(e) => Err(e.to_string()),
        };
        match looked {
            Ok(agent) => {
                if agent.ready != "ready" {
                    problems.push(format!("agent {admin} is not ready: {}", agent.ready));
                }
                table.push(agent.row(admin));
            }
            Err(why) => {
                problems.push(format!("agent {admin} does not answer"));
                let mut row = vec![admin.as_str().into(), format!("unreachable: {why}").into()];
                row.resize(7, super::Cell::Nothing);
                table.push(row);
            }
        }
    }
    table
}

/// What an agent's admin port says.
struct AgentHealth {
    ready: String,
    metrics: String,
}

impl AgentHealth {
    fn row(&self, admin: &str) -> Vec<super::Cell> {
        let m = |name: &str, labels: &str| sample(&self.metrics, name, labels);
        let version = self
            .metrics
            .lines()
            .find_map(|l| l.strip_prefix("floe_build_info{"))
            .and_then(|l| l.split('}').next())
            .map(|labels| labels.replace('"', ""));
        let requests: f64 = m("floe_object_store_requests_total", "");
        let errors: f64 = m("floe_object_store_errors_total", "");
        let fetched = m("floe_fetched_bytes_total", "");
        let read = m("floe_object_store_bytes_total", "op=\"get\"");
        vec![
            admin.into(),
            self.ready.as_str().into(),
            version.into(),
            format!("{:.1}", m("floe_metastore_last_heard_seconds", "")).into(),
            percent(errors, requests).into(),
            (fetched > 0.0)
                .then(|| format!("{:.2}", read / fetched))
                .into(),
            (m("floe_connections", "") as i64).into(),
        ]
    }
}

async fn look_at(http: &reqwest::Client, admin: &str) -> Result<AgentHealth, String> {
    let get = |path: &str| {
        let url = format!("http://{admin}{path}");
        async move {
            let answer = http.get(url).send().await.map_err(|e| e.to_string())?;
            answer.text().await.map_err(|e| e.to_string())
        }
    };
    Ok(AgentHealth {
        ready: get("/readyz").await?.trim().to_string(),
        metrics: get("/metrics").await?,
    })
}

/// The sum of `name`'s samples whose labels contain `labels` (all: "").
fn sample(metrics: &str, name: &str, labels: &str) -> f64 {
    metrics
        .lines()
        .filter_map(|line| line.strip_prefix(name))
        .filter(|rest| rest.starts_with(' ') || (rest.starts_with('{') && rest.contains(labels)))
        .filter_map(|rest| rest.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn percent(part: f64, whole: f64) -> String {
    match whole > 0.0 {
        true => format!("{:.2}%", 100.0 * part / whole),
        false => "-".into(),
    }
}

/// Whether the store takes a listing, a PUT and a DELETE (as an agent
/// checks it at start).
async fn object_store(url: &str, problems: &mut Vec<String>) -> Table {
    let mut table = Table::new(&["OBJECT-STORE", "RESULT"]);
    let shown = url.split('?').next().unwrap_or(url);
    let checked = match floe_storage::store::open(url) {
        Ok(store) => {
            let probe = floe_storage::ObjectPath::from(format!(
                "{}{}",
                floe_storage::check::PROBE_PREFIX,
                floe_metastore::random_id().simple()
            ));
            // As long as an agent gives it at start.
            let within = floe_storage::check::CHECK_WITHIN;
            floe_storage::check::check(store.as_ref(), url, &probe, within)
                .await
                .map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    };
    let result = match checked {
        Ok(()) => "ok: lists, writes and deletes".to_string(),
        Err(why) => {
            problems.push(format!("the object store {shown} fails"));
            why
        }
    };
    table.push(vec![shown.into(), result.into()]);
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_summed_by_name_and_labels() {
        let metrics = "floe_object_store_requests_total{op=\"put\"} 3\n\
                       floe_object_store_requests_total{op=\"get\"} 5\n\
                       floe_object_store_requests_total_other 100\n\
                       floe_connections 2\n";
        assert_eq!(sample(metrics, "floe_object_store_requests_total", ""), 8.0);
        assert_eq!(
            sample(metrics, "floe_object_store_requests_total", "op=\"get\""),
            5.0
        );
        assert_eq!(sample(metrics, "floe_connections", ""), 2.0);
        assert_eq!(percent(1.0, 8.0), "12.50%");
        assert_eq!(percent(0.0, 0.0), "-");
    }
}
