//! What the bill is computed from: the workload, the prices, and how Kafka
//! and floe are run. Every field has a default (see `docs/cost.md` for where
//! each comes from) and can be set from a TOML file or `--set key=value`.

use serde::{Deserialize, Serialize};

/// The workload, as producers and consumers see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Workload {
    /// Bytes produced, as sent (after client compression), MiB/s.
    pub write_mib_s: f64,
    /// How many times consumers read each byte (3: three consumer groups).
    pub read_fanout: f64,
    /// How long records are kept.
    pub retention_hours: f64,
    /// Partitions across all topics.
    pub partitions: f64,
    /// Availability zones clients and brokers are spread over, evenly.
    pub zones: f64,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            write_mib_s: 100.0,
            read_fanout: 3.0,
            retention_hours: 168.0,
            partitions: 1_000.0,
            zones: 3.0,
        }
    }
}

/// Prices: AWS us-east-1 on-demand list prices (see `docs/cost.md` for the
/// pages and the date they were read). AWS bills data per GB (10^9 bytes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Prices {
    /// S3 Standard storage, $/GB-month (first 50 TB).
    pub s3_gb_month: f64,
    /// S3 Standard PUT, COPY, POST, LIST, $ per 1,000 requests.
    pub s3_put_per_1000: f64,
    /// S3 Standard GET, $ per 1,000 requests.
    pub s3_get_per_1000: f64,
    /// S3 Express One Zone storage, $/GB-month.
    pub s3_express_gb_month: f64,
    /// S3 Express One Zone PUT, $ per 1,000 requests.
    pub s3_express_put_per_1000: f64,
    /// S3 Express One Zone GET, $ per 1,000 requests.
    pub s3_express_get_per_1000: f64,
    /// S3 Express One Zone data uploaded, $/GB (the part of each request over 512 KB).
    pub s3_express_upload_gb: f64,
    /// S3 Express One Zone data retrieved, $/GB (likewise).
    pub s3_express_retrieval_gb: f64,
    /// Data crossing zones, $/GB counting both sides ($0.01 out + $0.01 in).
    pub cross_zone_gb: f64,
    /// Block storage (EBS gp3), $/GB-month.
    pub disk_gb_month: f64,
    /// One broker or agent instance, $/hour.
    pub instance_hour: f64,
    /// Its sustained network bandwidth, MiB/s each way.
    pub instance_network_mib_s: f64,
    /// Its cores (vCPUs).
    pub instance_cores: f64,
    /// One metastore node (a small instance), $/hour.
    pub metastore_instance_hour: f64,
}

impl Default for Prices {
    fn default() -> Self {
        Prices {
            s3_gb_month: 0.023,
            s3_put_per_1000: 0.005,
            s3_get_per_1000: 0.0004,
            s3_express_gb_month: 0.11,
            s3_express_put_per_1000: 0.00113,
            s3_express_get_per_1000: 0.00003,
            s3_express_upload_gb: 0.0032,
            s3_express_retrieval_gb: 0.0006,
            cross_zone_gb: 0.02,
            disk_gb_month: 0.08,
            // m6i.2xlarge: 8 vCPU, 32 GiB, 3.125 Gbit/s baseline bandwidth.
            instance_hour: 0.384,
            instance_network_mib_s: 372.5,
            instance_cores: 8.0,
            // m6i.large.
            metastore_instance_hour: 0.096,
        }
    }
}

/// How Kafka is run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Kafka {
    pub replication_factor: f64,
    /// Disks are provisioned this much larger than the data (0.5: 50% free).
    pub disk_headroom: f64,
    /// Share of an instance's bandwidth brokers are sized to use.
    pub network_utilization: f64,
    /// With tiered storage (KIP-405): hours kept on the brokers' disks.
    pub tiered_local_hours: f64,
    /// With tiered storage: bytes per uploaded segment, MiB (`segment.bytes`).
    pub segment_mib: f64,
}

impl Default for Kafka {
    fn default() -> Self {
        Kafka {
            replication_factor: 3.0,
            disk_headroom: 0.5,
            network_utilization: 0.5,
            tiered_local_hours: 12.0,
            segment_mib: 1024.0,
        }
    }
}

/// How floe is run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Floe {
    /// Agents per zone, at least (more are added for throughput).
    pub min_agents_per_zone: f64,
    /// Each agent uploads an ingest file at least this often while it has data.
    pub flush_interval_ms: f64,
    /// ... or as soon as it holds this much, MiB.
    pub flush_mib: f64,
    /// Compaction passes run this often; a pass runs at least one job over
    /// the ingest files waiting.
    pub compaction_interval_s: f64,
    /// A compaction job reads at most this much of ingest files, MiB, and
    /// writes it as one merged file.
    pub compaction_job_mib: f64,
    /// A partition's small chunks of merged files are merged into a segment
    /// at least this often, seconds (`compaction_max_age`).
    pub compaction_max_age_s: f64,
    /// Compacted segments are cut at this size, MiB.
    pub segment_mib: f64,
    /// Partitions in one ingest file; at most `workload.partitions`.
    pub partitions_per_ingest_file: f64,
    /// Blocks read from the store at once by an agent's cache, MiB.
    pub cache_block_mib: f64,
    /// Produced MiB/s one core sustains (measured: see docs/cost.md).
    pub produce_mib_s_per_core: f64,
    /// Fetched MiB/s one core sustains.
    pub fetch_mib_s_per_core: f64,
    /// Share of agents' cores the sizing plans to use.
    pub cpu_utilization: f64,
    /// Metastore bytes per batch committed (request, answer and Raft
    /// replication to two followers in other zones), bytes.
    pub metastore_bytes_per_batch: f64,
    /// Metastore nodes (one per zone).
    pub metastore_nodes: f64,
    /// Clients name their zone (`client.id` with `floe_az=`), so none
    /// crosses zones to reach an agent.
    pub zone_aware_clients: bool,
    /// Keep data in S3 Express One Zone instead of S3 Standard.
    pub s3_express: bool,
    /// Object PUTs per MiB written, as measured (`--from-bench`,
    /// `--from-metrics`); 0 computes them from the settings above.
    pub puts_per_mib: f64,
    /// Object GETs per MiB written, as measured; 0 computes them.
    pub gets_per_mib: f64,
}

impl Default for Floe {
    fn default() -> Self {
        Floe {
            min_agents_per_zone: 1.0,
            flush_interval_ms: 250.0,
            flush_mib: 8.0,
            compaction_interval_s: 30.0,
            compaction_job_mib: 128.0,
            compaction_max_age_s: 300.0,
            segment_mib: 256.0,
            partitions_per_ingest_file: 1_000.0,
            cache_block_mib: 4.0,
            produce_mib_s_per_core: 100.0,
            fetch_mib_s_per_core: 200.0,
            cpu_utilization: 0.5,
            metastore_bytes_per_batch: 300.0,
            metastore_nodes: 3.0,
            zone_aware_clients: true,
            s3_express: false,
            puts_per_mib: 0.0,
            gets_per_mib: 0.0,
        }
    }
}

/// Everything the bill depends on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Inputs {
    pub workload: Workload,
    pub prices: Prices,
    pub kafka: Kafka,
    pub floe: Floe,
}

impl Inputs {
    /// Reads a TOML file of overrides (any subset of the fields).
    pub fn from_toml(text: &str) -> anyhow::Result<Inputs> {
        Ok(toml::from_str(text)?)
    }

    /// Applies one `section.field=value` override, as the TOML file would.
    pub fn set(&mut self, assignment: &str) -> anyhow::Result<()> {
        let (path, value) = assignment
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("`{assignment}` is not section.field=value"))?;
        let (section, field) = path
            .trim()
            .split_once('.')
            .ok_or_else(|| anyhow::anyhow!("`{path}` is not section.field"))?;
        let mut tree = toml::Value::try_from(&*self)?;
        let table = tree
            .get_mut(section)
            .and_then(toml::Value::as_table_mut)
            .ok_or_else(|| anyhow::anyhow!("no section `{section}`"))?;
        let old = table
            .get(field)
            .ok_or_else(|| anyhow::anyhow!("no field `{field}` in [{section}]"))?;
        let value = value.trim();
        let new = match old {
            toml::Value::Boolean(_) => toml::Value::Boolean(value.parse()?),
            _ => toml::Value::Float(value.parse()?),
        };
        table.insert(field.to_string(), new);
        *self = tree.try_into()?;
        Ok(())
    }
}
