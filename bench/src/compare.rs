//! Two runs of one workload side by side: each figure and the ratio of the
//! second to the first.

use std::fmt::Write;

use crate::report::Report;

/// One compared figure: its name, its value in each run, and whether more
/// is better (for the verdict column).
struct Row {
    name: &'static str,
    base: f64,
    other: f64,
    more_is_better: bool,
}

fn rows(a: &Report, b: &Report) -> Vec<Row> {
    let row = |name, base, other, more_is_better| Row {
        name,
        base,
        other,
        more_is_better,
    };
    let mut rows = vec![
        row(
            "produce MiB/s",
            a.produce.mib_per_s,
            b.produce.mib_per_s,
            true,
        ),
        row(
            "consume MiB/s",
            a.consume.mib_per_s,
            b.consume.mib_per_s,
            true,
        ),
        row(
            "produce p50 ms",
            a.produce_latency_ms.p50,
            b.produce_latency_ms.p50,
            false,
        ),
        row(
            "produce p99 ms",
            a.produce_latency_ms.p99,
            b.produce_latency_ms.p99,
            false,
        ),
        row(
            "end-to-end p50 ms",
            a.end_to_end_latency_ms.p50,
            b.end_to_end_latency_ms.p50,
            false,
        ),
        row(
            "end-to-end p99 ms",
            a.end_to_end_latency_ms.p99,
            b.end_to_end_latency_ms.p99,
            false,
        ),
    ];
    if let (Some(x), Some(y)) = (&a.broker, &b.broker) {
        rows.push(row(
            "broker CPU s per GiB",
            x.cpu_seconds_per_gib_written,
            y.cpu_seconds_per_gib_written,
            false,
        ));
        rows.push(row(
            "broker peak RSS MiB",
            x.peak_rss_mib,
            y.peak_rss_mib,
            false,
        ));
    }
    rows
}

/// The table `floe bench --compare` prints.
pub fn table(a: &Report, b: &Report) -> String {
    let mut out = String::new();
    if a.workload.rate != b.workload.rate
        || a.workload.record_size != b.workload.record_size
        || a.workload.partitions() != b.workload.partitions()
    {
        let _ = writeln!(out, "warning: the two runs had different workloads");
    }
    let _ = writeln!(
        out,
        "{:<22} {:>14} {:>14} {:>10}",
        "", a.label, b.label, "ratio"
    );
    for r in rows(a, b) {
        let ratio = r.other / r.base;
        let better = if (ratio > 1.0) == r.more_is_better {
            b.label.as_str()
        } else {
            a.label.as_str()
        };
        let _ = writeln!(
            out,
            "{:<22} {:>14.2} {:>14.2} {:>9.2}x  ({better} better)",
            r.name, r.base, r.other, ratio
        );
    }
    out
}
