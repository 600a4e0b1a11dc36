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
    /// CPU seconds floe's agents spent over the span, by their own count.
    pub cpu_seconds: Option<f64>,
    /// How long the span was, when known.
    pub seconds: Option<f64>,
    pub puts: Option<f64>,
    pub gets: Option<f64>,
}

fn number(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, key| v.get(key))?.as_f64()
}

impl Measured {
    /// From a `floe bench --json` report. CPU and requests come from the
    /// agent's own metrics (the run's `--metrics-url`): a run without them,
    /// or against another broker, gives neither.
    pub fn from_bench(path: &str, text: &str) -> anyhow::Result<Measured> {
        let v: Value = serde_json::from_str(text).with_context(|| format!("reading {path}"))?;
        let mib = |key: &str| number(&v, &[key, "bytes"]).map(|b| b / 1_048_576.0);
        let written_mib = mib("produce").context("the report has no produce.bytes")?;
        let read_mib = mib("consume").unwrap_or(0.0);
        Ok(Measured {
            source: format!("bench run {path}"),
            written_mib,
            read_mib,
            cpu_seconds: number(&v, &["agent", "cpu_seconds"]),
            seconds: number(&v, &["measured_seconds"]),
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
            // to f and scale both to fit it. A run that read nothing
            // measures p alone.
            let model = self.written_mib / f.produce_mib_s_per_core
                + self.read_mib / f.fetch_mib_s_per_core;
            let k = model / cpu;
            f.produce_mib_s_per_core *= k;
            let fetch = if self.read_mib > 0.0 {
                f.fetch_mib_s_per_core *= k;
                format!(
                    "{:.0} MiB/s fetched per core (keeping the model's ratio of produce to fetch cost)",
                    f.fetch_mib_s_per_core
                )
            } else {
                "fetch per core left to the model (nothing was read)".to_string()
            };
            notes.push(format!(
                "throughput per core from {}: {:.0} MiB written and {:.0} MiB read in {cpu:.1} CPU s: {:.0} MiB/s produced and {fetch}",
                self.source, self.written_mib, self.read_mib, f.produce_mib_s_per_core
            ));
            if let Some(busy) = self.seconds.map(|s| cpu / s).filter(|b| *b < 0.5) {
                notes.push(format!(
                    "that run kept {busy:.2} cores busy: fixed costs (timers, polling, compaction) weigh on so little traffic, so per-core figures from it understate a loaded core"
                ));
            }
        }
        match self.puts {
            None => {}
            Some(puts) if puts < 1.0 => notes.push(format!(
                "PUTs from {}: none in the run; the model's PUTs are kept",
                self.source
            )),
            Some(puts) => {
                f.puts_per_mib = puts / self.written_mib;
                notes.push(format!(
                "PUTs from {}: {puts:.0} for {:.0} MiB written, {:.3} per MiB (at that run's rate: an agent uploads once per flush interval however little it holds, so a slow run overstates PUTs per MiB)",
                self.source, self.written_mib, f.puts_per_mib
            ));
            }
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
        "measured_seconds": 10.0,
        "broker": {"cpu_seconds": 50.0},
        "agent": {"cpu_seconds": 10.0, "puts": 200.0, "gets": 40.0}
    }"#;

    #[test]
    fn a_bench_report_sets_throughput_per_core_and_requests() {
        let m = Measured::from_bench("run.json", REPORT).unwrap();
        assert_eq!(m.written_mib, 1000.0);
        assert_eq!(m.read_mib, 2000.0);
        assert_eq!(
            m.cpu_seconds,
            Some(10.0),
            "the agent's own count, not the pid's"
        );
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
    fn a_light_run_says_its_per_core_figures_understate() {
        let text = r#"{"produce": {"bytes": 104857600}, "consume": {"bytes": 0},
            "measured_seconds": 100.0, "agent": {"cpu_seconds": 10.0, "puts": 0.0}}"#;
        let mut i = Inputs::default();
        let notes = Measured::from_bench("r", text).unwrap().apply(&mut i);
        // 100 MiB written in 10 CPU s, nothing read: 10 MiB/s per core for
        // produce; fetch stays the model's.
        assert_eq!(i.floe.produce_mib_s_per_core, 10.0);
        assert_eq!(i.floe.fetch_mib_s_per_core, 200.0);
        assert_eq!(
            i.floe.puts_per_mib, 0.0,
            "no PUTs measured: the model's stand"
        );
        assert!(
            notes.iter().any(|n| n.contains("0.10 cores busy")),
            "{notes:?}"
        );
        assert!(
            notes.iter().any(|n| n.contains("model's PUTs are kept")),
            "{notes:?}"
        );
    }

    #[test]
    fn a_report_without_agent_metrics_keeps_the_model_requests() {
        let text = r#"{"produce": {"bytes": 1048576}, "consume": {"bytes": 0},
            "broker": {"cpu_seconds": 3.0}}"#;
        let m = Measured::from_bench("r", text).unwrap();
        let mut i = Inputs::default();
        assert!(m.apply(&mut i).is_empty());
        assert_eq!(i, Inputs::default());
    }
}
