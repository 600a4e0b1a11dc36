//! Inputs taken from a real run instead of the model's assumptions: a
//! `floe bench` report (`--from-bench`) or an agent's metrics
//! (`--from-metrics`). Each says where its numbers came from.

use anyhow::Context;
use serde_json::Value;

use crate::inputs::Inputs;

/// What a run measured: data written and read, the CPU it took, and the
/// object-store requests it made, over the same span.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// Where the figures come from, for the notes.
    pub source: String,
    pub written_mib: f64,
    pub read_mib: f64,
    /// CPU seconds the agents (or broker) spent over the span.
    pub cpu_seconds: Option<f64>,
    pub puts: Option<f64>,
    pub gets: Option<f64>,
}

fn number(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, key| v.get(key))?.as_f64()
}

impl Measured {
    /// From a `floe bench --json` report. CPU comes from the agent's own
    /// metrics when the run had them, else from `--broker-pid`.
    pub fn from_bench(path: &str, text: &str) -> anyhow::Result<Measured> {
        let v: Value = serde_json::from_str(text).with_context(|| format!("reading {path}"))?;
        let mib = |key: &str| number(&v, &[key, "bytes"]).map(|b| b / 1_048_576.0);
        let written_mib = mib("produce").context("the report has no produce.bytes")?;
        let read_mib = mib("consume").unwrap_or(0.0);
        let agent_cpu = number(&v, &["agent", "cpu_seconds"]).filter(|c| *c > 0.0);
        Ok(Measured {
            source: format!("bench run {path}"),
            written_mib,
            read_mib,
            cpu_seconds: agent_cpu.or_else(|| number(&v, &["broker", "cpu_seconds"])),
            puts: number(&v, &["agent", "puts"]),
            gets: number(&v, &["agent", "gets"]),
        })
    }

    /// Applies the measured figures to `inputs`; returns a note per figure
    /// saying what it was set to and from what.
    pub fn apply(&self, inputs: &mut Inputs) -> Vec<String> {
        let mut notes = Vec::new();
        let f = &mut inputs.floe;
        if self.written_mib <= 0.0 {
            notes.push(format!(
                "{}: nothing was written; nothing taken from it",
                self.source
            ));
            return notes;
        }
        if let Some(cpu) = self.cpu_seconds.filter(|c| *c > 0.0) {
            // One run mixes produce and fetch, so it measures one sum,
            // written/p + read/f = CPU seconds: keep the model's ratio of p
            // to f and scale both to fit it.
            let model = self.written_mib / f.produce_mib_s_per_core
                + self.read_mib / f.fetch_mib_s_per_core;
            let k = model / cpu;
            f.produce_mib_s_per_core *= k;
            f.fetch_mib_s_per_core *= k;
            notes.push(format!(
                "throughput per core from {}: {:.0} MiB written and {:.0} MiB read in {cpu:.1} CPU s; keeping the model's ratio of produce to fetch cost, {:.0} MiB/s produced and {:.0} MiB/s fetched per core",
                self.source,
                self.written_mib,
                self.read_mib,
                f.produce_mib_s_per_core,
                f.fetch_mib_s_per_core
            ));
        }
        if let Some(puts) = self.puts {
            f.puts_per_mib = puts / self.written_mib;
            notes.push(format!(
                "PUTs from {}: {puts:.0} for {:.0} MiB written, {:.3} per MiB (at that run's rate: an agent uploads once per flush interval however little it holds, so a slow run overstates PUTs per MiB)",
                self.source, self.written_mib, f.puts_per_mib
            ));
        }
        match self.gets {
            // Consumers at the tail read from the agents' caches, and a
            // short run may see no compaction: no GETs says nothing of a
            // month's, so the model's stand.
            Some(gets) if gets < 1.0 => notes.push(format!(
                "GETs from {}: none in the run (reads served from cache); the model's GETs are kept",
                self.source
            )),
            Some(gets) => {
            f.gets_per_mib = gets / self.written_mib;
            notes.push(format!(
                "GETs from {}: {gets:.0} for {:.0} MiB written, {:.3} per MiB written (with that run's zones and cache)",
                self.source, self.written_mib, f.gets_per_mib
            ));
            }
            None => {}
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"{
        "produce": {"bytes": 1048576000},
        "consume": {"bytes": 2097152000},
        "broker": {"cpu_seconds": 50.0},
        "agent": {"cpu_seconds": 10.0, "puts": 200.0, "gets": 40.0}
    }"#;

    #[test]
    fn a_bench_report_sets_throughput_per_core_and_requests() {
        let m = Measured::from_bench("run.json", REPORT).unwrap();
        assert_eq!(m.written_mib, 1000.0);
        assert_eq!(m.read_mib, 2000.0);
        assert_eq!(m.cpu_seconds, Some(10.0), "the agent's own count wins");
        let mut i = Inputs::default();
        let notes = m.apply(&mut i);
        // Defaults 100 and 200 MiB/s per core: 1000/100 + 2000/200 = 20
        // model seconds in 10 measured, so both double.
        assert_eq!(i.floe.produce_mib_s_per_core, 200.0);
        assert_eq!(i.floe.fetch_mib_s_per_core, 400.0);
        assert_eq!(i.floe.puts_per_mib, 0.2);
        assert_eq!(i.floe.gets_per_mib, 0.04);
        assert_eq!(notes.len(), 3);
        assert!(notes.iter().all(|n| n.contains("run.json")));
    }

    #[test]
    fn a_report_without_agent_metrics_keeps_the_model_requests() {
        let text = r#"{"produce": {"bytes": 1048576}, "consume": {"bytes": 0}}"#;
        let m = Measured::from_bench("r", text).unwrap();
        let mut i = Inputs::default();
        assert!(m.apply(&mut i).is_empty());
        assert_eq!(i, Inputs::default());
    }
}
