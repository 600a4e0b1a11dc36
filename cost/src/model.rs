//! The bills. Each line is a monthly cost with the formula that gave it,
//! written with its inputs' values so a reader can redo it by hand
//! (`docs/cost.md` explains each).

use serde::Serialize;

use crate::inputs::Inputs;

/// AWS bills a month as 730 hours.
pub const HOURS_PER_MONTH: f64 = 730.0;
const SECONDS_PER_MONTH: f64 = HOURS_PER_MONTH * 3600.0;
const MIB: f64 = 1_048_576.0;
/// AWS prices data per GB of 10^9 bytes.
const GB: f64 = 1e9;

/// One line of a bill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Line {
    pub item: String,
    pub formula: String,
    pub monthly_usd: f64,
}

/// The name of floe's bill line for object PUTs.
pub const PUTS_LINE: &str = "object PUTs";

/// One system's monthly bill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bill {
    pub system: String,
    pub lines: Vec<Line>,
    /// What the model leaves out or assumes, for this system.
    pub notes: Vec<String>,
}

impl Bill {
    pub fn total(&self) -> f64 {
        self.lines.iter().map(|l| l.monthly_usd).sum()
    }
}

/// GB a month of a steady `mib_s`.
fn gb_per_month(mib_s: f64) -> f64 {
    mib_s * MIB * SECONDS_PER_MONTH / GB
}

/// GB held by `hours` of a steady `mib_s`.
fn gb_held(mib_s: f64, hours: f64) -> f64 {
    mib_s * MIB * hours * 3600.0 / GB
}

/// `n` rounded up to a multiple of `m` (instances spread evenly over zones).
fn up_to_multiple(n: f64, m: f64) -> f64 {
    (n / m).ceil() * m
}

fn usd(x: f64) -> String {
    if x >= 100.0 {
        format!("${x:.0}")
    } else {
        format!("${x:.4}")
    }
}

fn line(item: &str, formula: String, monthly_usd: f64) -> Line {
    Line {
        item: item.to_string(),
        formula,
        monthly_usd,
    }
}

/// Data crossing zones at `mib_s`, described by `what`.
fn cross_zone(item: &str, what: String, mib_s: f64, price: f64) -> Line {
    let gb = gb_per_month(mib_s);
    line(
        item,
        format!(
            "{what} = {mib_s:.1} MiB/s = {gb:.0} GB/month x {}/GB",
            usd(price)
        ),
        gb * price,
    )
}

/// An object-store request line: `measured` (requests per MiB, what the
/// MiB are, the MiB/s) when a run measured it, else the model's `per_s`
/// with its `formula`; at `price` per 1,000.
fn requests(
    item: &str,
    measured: (f64, &str, f64),
    per_s: f64,
    formula: String,
    price: f64,
) -> Line {
    let (per_mib, of, mib_s) = measured;
    let (per_s, formula) = if per_mib > 0.0 {
        let per_s = mib_s * per_mib;
        (
            per_s,
            format!("measured {per_mib} per MiB{of} x write {mib_s} MiB/s = {per_s:.2}/s"),
        )
    } else {
        (per_s, formula)
    };
    line(
        item,
        format!("{formula} x {SECONDS_PER_MONTH} s x {}/1000", usd(price)),
        per_s * SECONDS_PER_MONTH * price / 1000.0,
    )
}

/// Which Kafka is billed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KafkaShape {
    /// Three zones, RF=3, consumers read from leaders.
    Classic,
    /// Consumers read from a replica in their zone (KIP-392).
    FetchFromFollower,
    /// Older data in S3, the last hours on disk (KIP-405).
    TieredStorage,
}

pub fn kafka(i: &Inputs, shape: KafkaShape) -> Bill {
    let (w, p, k) = (&i.workload, &i.prices, &i.kafka);
    let write = w.write_mib_s;
    let read = write * w.read_fanout;
    let zones = w.zones;
    let rf = k.replication_factor;
    let away = (zones - 1.0) / zones;
    let mut lines = vec![cross_zone(
        "cross-zone: producers to leaders",
        format!("write {write} MiB/s x (zones-1)/zones {away:.3}"),
        write * away,
        p.cross_zone_gb,
    )];
    let followers_away = (rf - 1.0).min(zones - 1.0);
    lines.push(cross_zone(
        "cross-zone: replication",
        format!("write {write} MiB/s x followers in other zones {followers_away}"),
        write * followers_away,
        p.cross_zone_gb,
    ));
    let fetch_from_follower = shape == KafkaShape::FetchFromFollower && rf >= zones;
    let consumers_away = if fetch_from_follower { 0.0 } else { away };
    lines.push(cross_zone(
        "cross-zone: leaders to consumers",
        format!("read {read} MiB/s x share read across zones {consumers_away:.3}"),
        read * consumers_away,
        p.cross_zone_gb,
    ));

    let disk_hours = match shape {
        KafkaShape::TieredStorage => k.tiered_local_hours.min(w.retention_hours),
        _ => w.retention_hours,
    };
    let stored = gb_held(write, disk_hours) * rf;
    let provisioned = stored * (1.0 + k.disk_headroom);
    lines.push(line(
        "disks",
        format!(
            "write {write} MiB/s x {disk_hours} h x RF {rf} = {stored:.0} GB x (1 + headroom {}) = {provisioned:.0} GB x {}/GB-month",
            k.disk_headroom,
            usd(p.disk_gb_month)
        ),
        provisioned * p.disk_gb_month,
    ));

    // Each direction of a broker's network: in, what producers send and
    // followers copy; out, what followers copy and consumers read.
    let inbound = write * rf;
    let outbound = write * (rf - 1.0) + read;
    let usable = p.instance_network_mib_s * k.network_utilization;
    let by_network = inbound.max(outbound) / usable;
    let brokers = up_to_multiple(by_network.max(rf).max(zones), zones);
    lines.push(line(
        "brokers",
        format!(
            "max(in {inbound:.0}, out {outbound:.0} MiB/s) / ({} MiB/s x {}) = {by_network:.2}, at least RF, in multiples of zones: {brokers} x {}/h x {HOURS_PER_MONTH} h",
            p.instance_network_mib_s,
            k.network_utilization,
            usd(p.instance_hour)
        ),
        brokers * p.instance_hour * HOURS_PER_MONTH,
    ));

    let mut notes = vec![format!(
        "brokers sized by network; {} cores each are assumed enough for the traffic",
        p.instance_cores
    )];
    if shape == KafkaShape::TieredStorage {
        let tiered = gb_held(write, w.retention_hours);
        lines.push(line(
            "object storage (tiered)",
            format!(
                "write {write} MiB/s x {} h = {tiered:.0} GB (one copy) x {}/GB-month",
                w.retention_hours,
                usd(p.s3_gb_month)
            ),
            tiered * p.s3_gb_month,
        ));
        let segments_s = write / k.segment_mib;
        lines.push(line(
            "object PUTs (tiered)",
            format!(
                "write {write} MiB/s / segment {} MiB = {segments_s:.3} segments/s x {SECONDS_PER_MONTH} s x {}/1000",
                k.segment_mib,
                usd(p.s3_put_per_1000)
            ),
            segments_s * SECONDS_PER_MONTH * p.s3_put_per_1000 / 1000.0,
        ));
        notes.push(
            "consumers at the tail read from local disks; GETs for old data are not counted".into(),
        );
    }
    Bill {
        system: match shape {
            KafkaShape::Classic => "Kafka, RF=3".into(),
            KafkaShape::FetchFromFollower => "Kafka, fetch from follower".into(),
            KafkaShape::TieredStorage => "Kafka, tiered storage".into(),
        },
        lines,
        notes,
    }
}

pub fn floe(i: &Inputs) -> Bill {
    let (w, p, f) = (&i.workload, &i.prices, &i.floe);
    let write = w.write_mib_s;
    let read = write * w.read_fanout;
    let zones = w.zones;
    let mut lines = Vec::new();
    let mut notes = Vec::new();

    // Agents: enough cores for the traffic and enough network for what
    // they move: in, from producers and the store; out, to the store and
    // consumers. At least `min_agents_per_zone` in every zone.
    let cores =
        (write / f.produce_mib_s_per_core + read / f.fetch_mib_s_per_core) / f.cpu_utilization;
    let by_cpu = cores / p.instance_cores;
    let get_mib_s = write * zones;
    let inbound = write + get_mib_s;
    let outbound = write + read;
    let by_network = inbound.max(outbound) / (p.instance_network_mib_s * 0.5);
    let agents = up_to_multiple(
        by_cpu.max(by_network).max(f.min_agents_per_zone * zones),
        zones,
    );
    lines.push(line(
        "agents",
        format!(
            "max(cores (write {write}/{} + read {read}/{} MiB/s per core) / {} = {cores:.1} / {} per instance = {by_cpu:.2}, network max(in {inbound:.0}, out {outbound:.0}) / ({} x 0.5) = {by_network:.2}, {} per zone): {agents} x {}/h x {HOURS_PER_MONTH} h",
            f.produce_mib_s_per_core,
            f.fetch_mib_s_per_core,
            f.cpu_utilization,
            p.instance_cores,
            p.instance_network_mib_s,
            f.min_agents_per_zone,
            usd(p.instance_hour)
        ),
        agents * p.instance_hour * HOURS_PER_MONTH,
    ));
    lines.push(line(
        "metastore nodes",
        format!(
            "{} nodes x {}/h x {HOURS_PER_MONTH} h",
            f.metastore_nodes,
            usd(p.metastore_instance_hour)
        ),
        f.metastore_nodes * p.metastore_instance_hour * HOURS_PER_MONTH,
    ));

    let (storage_price, put_price, get_price, class) = if f.s3_express {
        (
            p.s3_express_gb_month,
            p.s3_express_put_per_1000,
            p.s3_express_get_per_1000,
            "S3 Express One Zone",
        )
    } else {
        (
            p.s3_gb_month,
            p.s3_put_per_1000,
            p.s3_get_per_1000,
            "S3 Standard",
        )
    };
    let stored = gb_held(write, w.retention_hours);
    lines.push(line(
        "object storage",
        format!(
            "write {write} MiB/s x {} h = {stored:.0} GB (one copy; {class} replicates it) x {}/GB-month",
            w.retention_hours,
            usd(storage_price)
        ),
        stored * storage_price,
    ));

    // Each agent uploads a file every flush interval, or sooner when it
    // fills. Compaction jobs read each ingest file once (one GET) and write
    // one merged file (one PUT) per job_mib, at least one per pass; a
    // partition's chunks of merged files are read again (one GET each) when
    // they are merged into a segment: once they make half a segment, or once
    // per max age; a chunk of half a segment or more alone.
    let per_agent = write / agents;
    let files_per_agent_s = (1000.0 / f.flush_interval_ms).max(per_agent / f.flush_mib);
    let files_s = agents * files_per_agent_s;
    let jobs_s = (write / f.compaction_job_mib).max(1.0 / f.compaction_interval_s);
    let extents_per_file = f.partitions_per_ingest_file.min(w.partitions);
    let partitions_per_job = (extents_per_file * files_s / jobs_s).min(w.partitions);
    let chunk_mib = write / jobs_s / partitions_per_job;
    let small = chunk_mib < f.segment_mib / 2.0;
    let segments_s = if small {
        (write / (f.segment_mib / 2.0))
            .max(w.partitions / f.compaction_max_age_s)
            .min(w.partitions * jobs_s / 2.0)
    } else {
        partitions_per_job * jobs_s
    };
    let puts_s = files_s + jobs_s + segments_s;
    lines.push(requests(
        PUTS_LINE,
        (f.puts_per_mib, "", write),
        puts_s,
        format!(
            "ingest {agents} agents x max(1000/{} ms, {per_agent:.1}/{} MiB) = {files_s:.2}/s + merged files max(write {write}/{} MiB, 1/{} s) = {jobs_s:.2}/s + segments {segments_s:.2}/s (chunks of {chunk_mib:.3} MiB{}); {puts_s:.2}/s",
            f.flush_interval_ms,
            f.flush_mib,
            f.compaction_job_mib,
            f.compaction_interval_s,
            if small {
                format!(" wait: one segment per {} MiB / 2 of data, or per partition every {} s", f.segment_mib, f.compaction_max_age_s)
            } else {
                " are half a segment or more: one segment each".into()
            },
        ),
        put_price,
    ));

    // Every chunk of a merged file is read once, into its segment.
    let merge_gets_s = jobs_s * partitions_per_job;
    // Consumers in each zone read every byte from the store once into their
    // agents' caches.
    let fetch_gets_s = get_mib_s / f.cache_block_mib;
    let gets_s = files_s + merge_gets_s + fetch_gets_s;
    lines.push(requests(
        "object GETs",
        (f.gets_per_mib, " written", write),
        gets_s,
        format!(
            "compaction {files_s:.2} ingest files/s + {jobs_s:.2} merged files/s x {partitions_per_job:.0} chunks = {merge_gets_s:.1}/s + fetch write {write} MiB/s x {zones} zones / {} MiB blocks = {fetch_gets_s:.1}/s; {gets_s:.1}/s",
            f.cache_block_mib,
        ),
        get_price,
    ));
    if f.s3_express {
        let upload = gb_per_month(write * 2.0);
        let retrieval = gb_per_month(get_mib_s + write);
        lines.push(line(
            "S3 Express data charges",
            format!(
                "upload (ingest + compaction) {upload:.0} GB x {}/GB + retrieval (fetch + compaction) {retrieval:.0} GB x {}/GB",
                usd(p.s3_express_upload_gb),
                usd(p.s3_express_retrieval_gb)
            ),
            upload * p.s3_express_upload_gb + retrieval * p.s3_express_retrieval_gb,
        ));
        notes.push(
            "S3 Express One Zone keeps data in one zone: losing that zone loses the data".into(),
        );
    }

    let batches_s = files_s * extents_per_file;
    let metastore_mib_s = batches_s * f.metastore_bytes_per_batch / MIB;
    lines.push(cross_zone(
        "cross-zone: metastore",
        format!(
            "{batches_s:.1} batches/s x {} bytes (commit and Raft replication)",
            f.metastore_bytes_per_batch
        ),
        metastore_mib_s,
        p.cross_zone_gb,
    ));
    if !f.zone_aware_clients {
        let away = (zones - 1.0) / zones;
        lines.push(cross_zone(
            "cross-zone: clients to agents",
            format!("(write {write} + read {read}) MiB/s x (zones-1)/zones {away:.3}"),
            (write + read) * away,
            p.cross_zone_gb,
        ));
    } else {
        notes.push("clients name their zone, so no data crosses zones between clients and agents; the store is regional".into());
    }
    Bill {
        system: if f.s3_express {
            "floe, S3 Express".into()
        } else {
            "floe".into()
        },
        lines,
        notes,
    }
}

/// The four bills the issue asks for, side by side.
pub fn all(i: &Inputs) -> Vec<Bill> {
    vec![
        kafka(i, KafkaShape::Classic),
        kafka(i, KafkaShape::FetchFromFollower),
        kafka(i, KafkaShape::TieredStorage),
        floe(i),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item<'a>(bill: &'a Bill, name: &str) -> &'a Line {
        bill.lines
            .iter()
            .find(|l| l.item == name)
            .unwrap_or_else(|| panic!("no line {name} in {bill:?}"))
    }

    /// 1 MiB/s for a month is 2,755.66 GB; at $0.02/GB, $55.11.
    #[test]
    fn a_steady_mib_per_second_is_2756_gb_a_month() {
        assert!((gb_per_month(1.0) - 2_755.66).abs() < 0.01);
    }

    #[test]
    fn kafka_crosses_zones_for_producers_replication_and_consumers() {
        let mut i = Inputs::default();
        i.workload.write_mib_s = 3.0;
        i.workload.read_fanout = 1.0;
        let classic = kafka(&i, KafkaShape::Classic);
        let month = gb_per_month(1.0) * 0.02;
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6 * b.max(1.0);
        // Two thirds of 3 MiB/s cross to leaders, both follower copies
        // cross, and two thirds of what consumers read.
        assert!(close(
            item(&classic, "cross-zone: producers to leaders").monthly_usd,
            2.0 * month
        ));
        assert!(close(
            item(&classic, "cross-zone: replication").monthly_usd,
            6.0 * month
        ));
        assert!(close(
            item(&classic, "cross-zone: leaders to consumers").monthly_usd,
            2.0 * month
        ));
        let follower = kafka(&i, KafkaShape::FetchFromFollower);
        assert_eq!(
            item(&follower, "cross-zone: leaders to consumers").monthly_usd,
            0.0
        );
        let tiered = kafka(&i, KafkaShape::TieredStorage);
        assert!(item(&tiered, "disks").monthly_usd < item(&classic, "disks").monthly_usd / 10.0);
    }

    #[test]
    fn floe_sends_no_data_across_zones_when_clients_name_theirs() {
        let mut i = Inputs::default();
        let bill = floe(&i);
        assert!(
            bill.lines
                .iter()
                .all(|l| l.item != "cross-zone: clients to agents")
        );
        let metastore = item(&bill, "cross-zone: metastore").monthly_usd;
        assert!(
            metastore
                < item(&kafka(&i, KafkaShape::Classic), "cross-zone: replication").monthly_usd
                    / 20.0
        );
        i.floe.zone_aware_clients = false;
        assert!(
            floe(&i)
                .lines
                .iter()
                .any(|l| l.item == "cross-zone: clients to agents")
        );
    }

    #[test]
    fn every_line_shows_its_formula_with_numbers() {
        for bill in all(&Inputs::default()) {
            for l in &bill.lines {
                assert!(l.formula.chars().any(|c| c.is_ascii_digit()), "{l:?}");
                assert!(l.monthly_usd.is_finite() && l.monthly_usd >= 0.0, "{l:?}");
            }
        }
    }
}
