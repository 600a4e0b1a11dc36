//! The flush interval's trade-off: a shorter interval answers producers
//! sooner and costs more PUTs. Each agent uploads an ingest file per
//! interval while it has data, so at a light load per agent the PUTs grow as
//! the interval shrinks; a record waits at most one interval for its file
//! (then the file's PUT and its commit). When every producer with batches
//! in the open file waits on it with its pipeline full, the file is sealed
//! early, at most once per `min_flush_interval` (half the interval by
//! default): up to twice the ingest PUTs.

use std::fmt::Write;

use crate::{Inputs, model};

/// One flush interval's row.
#[derive(Debug, Clone, PartialEq)]
pub struct FlushOption {
    pub interval_ms: f64,
    /// Ingest, merged-file and segment PUTs a month, $.
    pub puts_usd: f64,
    /// The same with every file sealed early (producers always waiting).
    pub puts_usd_sealed_early: f64,
    /// floe's whole bill a month, $.
    pub total_usd: f64,
}

/// floe's bill at each of `intervals_ms`, the rest of `inputs` as given.
/// PUTs are computed from the settings, not from measured PUTs per MiB
/// (those were measured at one interval).
pub fn tradeoff(inputs: &Inputs, intervals_ms: &[f64]) -> Vec<FlushOption> {
    let at = |interval_ms: f64| {
        let mut inputs = inputs.clone();
        inputs.floe.flush_interval_ms = interval_ms;
        inputs.floe.puts_per_mib = 0.0;
        model::floe(&inputs)
    };
    let puts = |bill: &model::Bill| {
        bill.lines
            .iter()
            .filter(|l| l.item == model::PUTS_LINE)
            .map(|l| l.monthly_usd)
            .sum::<f64>()
    };
    intervals_ms
        .iter()
        .map(|&interval_ms| {
            let bill = at(interval_ms);
            FlushOption {
                interval_ms,
                puts_usd: puts(&bill),
                puts_usd_sealed_early: puts(&at(interval_ms / 2.0)),
                total_usd: bill.total(),
            }
        })
        .collect()
}

/// The rows as a terminal table.
pub fn table(rows: &[FlushOption]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "flush interval: PUTs against the wait for a file (floe, this workload)"
    );
    let _ = writeln!(
        out,
        "  {:>9} {:>16} {:>16} {:>14} {:>16}",
        "interval", "wait, at most", "PUTs a month", "sealed early", "floe a month"
    );
    for row in rows {
        let _ = writeln!(
            out,
            "  {:>7} ms {:>13} ms {:>16} {:>14} {:>16}",
            row.interval_ms,
            row.interval_ms,
            crate::money(row.puts_usd),
            crate::money(row.puts_usd_sealed_early),
            crate::money(row.total_usd)
        );
    }
    let _ = writeln!(
        out,
        "  A record the agent has received waits at most the interval for its file, then the\n  \
         file's PUT and its commit.\n  \
         \"sealed early\": every file sealed at half the interval (producers always waiting on it\n  \
         with their pipelines full), the most min_flush_interval allows by default."
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At a light load per agent, halving the interval doubles the ingest
    /// PUTs; the early-sealed column is the next shorter interval's.
    #[test]
    fn a_shorter_interval_costs_more_puts() {
        let mut inputs = Inputs::default();
        inputs.workload.write_mib_s = 1.0;
        let rows = tradeoff(&inputs, &[125.0, 250.0, 500.0]);
        assert!(rows[0].puts_usd > rows[1].puts_usd && rows[1].puts_usd > rows[2].puts_usd);
        assert_eq!(rows[1].puts_usd_sealed_early, rows[0].puts_usd);
        assert!(rows[0].total_usd > rows[2].total_usd);
        // Ingest PUTs double at half the interval; merged files and
        // segments stay as they are.
        let ratio = rows[1].puts_usd / rows[2].puts_usd;
        assert!((1.5..2.0).contains(&ratio), "{ratio}");
        let printed = table(&rows);
        assert!(printed.contains("250 ms"), "{printed}");
    }

    /// Measured PUTs per MiB (from a bench at one interval) do not hide the
    /// trade-off.
    #[test]
    fn measured_puts_do_not_flatten_the_tradeoff() {
        let mut inputs = Inputs::default();
        inputs.workload.write_mib_s = 1.0;
        inputs.floe.puts_per_mib = 0.5;
        let rows = tradeoff(&inputs, &[50.0, 1000.0]);
        assert!(rows[0].puts_usd > 5.0 * rows[1].puts_usd);
    }
}
