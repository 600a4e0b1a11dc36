//! What the benchmark reads beside the protocol: a process's CPU time and
//! memory from /proc, and a floe agent's Prometheus metrics over HTTP.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A process's CPU time so far and its memory.
#[derive(Debug, Clone, Copy)]
pub struct ProcessSample {
    pub cpu_seconds: f64,
    /// Resident memory now (VmRSS).
    pub rss_bytes: u64,
    /// The most resident memory it has had since it started (VmHWM).
    pub peak_rss_bytes: u64,
}

/// Reads `/proc/<pid>` (`self` for this process). Linux only.
pub fn process(pid: &str) -> anyhow::Result<ProcessSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces; fields after it are plain.
    let after_name = &stat[stat.rfind(')').context("no ) in stat")? + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    let ticks: u64 = fields
        .get(11..13)
        .context("short stat")?
        .iter()
        .map(|f| f.parse::<u64>())
        .sum::<Result<u64, _>>()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(ProcessSample {
        cpu_seconds: ticks as f64 / per_second,
        rss_bytes: kib("VmRSS:") * 1024,
        peak_rss_bytes: kib("VmHWM:") * 1024,
    })
}

/// Every sample of a Prometheus text exposition, by its name and labels as
/// written (`floe_object_store_requests_total{op="put"}`).
pub type Metrics = BTreeMap<String, f64>;

/// GETs `url` (http://HOST:PORT/PATH) and parses the exposition.
pub async fn scrape(url: &str) -> anyhow::Result<Metrics> {
    let rest = url
        .strip_prefix("http://")
        .context("metrics URL must start with http://")?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/metrics"),
    };
    let body = tokio::time::timeout(Duration::from_secs(10), async {
        let mut stream = TcpStream::connect(host).await?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        // A metrics page is small; refuse one that is not.
        (&mut stream)
            .take(64 * 1024 * 1024)
            .read_to_end(&mut response)
            .await?;
        anyhow::Ok(String::from_utf8_lossy(&response).into_owned())
    })
    .await
    .with_context(|| format!("no answer from {url} in 10 s"))??;
    let (head, body) = body
        .split_once("\r\n\r\n")
        .context("not an HTTP response")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!("{url} answered {}", head.lines().next().unwrap_or_default());
    }
    Ok(parse(body))
}

/// The samples of an exposition; comments and lines that are not
/// `name value` are skipped.
pub fn parse(text: &str) -> Metrics {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.trim().to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// The sum of every sample of `name` whose labels include `label` (or all,
/// when `label` is empty).
pub fn sum(metrics: &Metrics, name: &str, label: &str) -> f64 {
    metrics
        .iter()
        .filter(|(k, _)| {
            let (n, labels) = k.split_once('{').unwrap_or((k, ""));
            n == name && labels.contains(label)
        })
        .map(|(_, v)| v)
        // Not `sum()`: a float sum of nothing is -0.0.
        .fold(0.0, |a, b| a + b)
}

/// What `floe cost --from-metrics` takes from an agent's metrics: its
/// counts since it started.
pub fn measured_by_agent(url: &str, m: &Metrics) -> floe_cost::Measured {
    let requests = "floe_object_store_requests_total";
    let present = |name: &str| m.keys().any(|k| k.starts_with(name));
    floe_cost::Measured {
        source: format!("metrics of {url} (since the agent started)"),
        written_mib: sum(m, "floe_produced_bytes_total", "") / 1_048_576.0,
        read_mib: sum(m, "floe_fetched_bytes_total", "") / 1_048_576.0,
        cpu_seconds: present("floe_process_cpu_seconds_total")
            .then(|| sum(m, "floe_process_cpu_seconds_total", "")),
        seconds: None,
        puts: present(requests)
            .then(|| sum(m, requests, "op=\"put\"") + sum(m, requests, "op=\"put_multipart\"")),
        gets: present(requests).then(|| sum(m, requests, "op=\"get\"")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_read_by_name_and_label() {
        let m = parse(
            "# HELP x\n# TYPE floe_object_store_requests counter\n\
             floe_object_store_requests_total{op=\"put\"} 12\n\
             floe_object_store_requests_total{op=\"get\"} 30\n\
             floe_object_store_requests_total{op=\"put_multipart\"} 3\n\
             floe_process_cpu_seconds_total 4.5\n# EOF\n",
        );
        assert_eq!(
            sum(&m, "floe_object_store_requests_total", "op=\"get\""),
            30.0
        );
        assert_eq!(sum(&m, "floe_object_store_requests_total", ""), 45.0);
        assert_eq!(sum(&m, "floe_process_cpu_seconds_total", ""), 4.5);
        assert_eq!(sum(&m, "missing", ""), 0.0);
    }

    #[test]
    fn this_process_has_spent_some_cpu() {
        let before = process("self").unwrap();
        // Spin until the kernel's tick-granular count moves.
        let mut x = 0u64;
        while process("self").unwrap().cpu_seconds <= before.cpu_seconds {
            for i in 0..1_000_000u64 {
                x = x.wrapping_add(std::hint::black_box(i));
            }
        }
        std::hint::black_box(x);
        let after = process("self").unwrap();
        assert!(after.rss_bytes > 0 && after.peak_rss_bytes >= after.rss_bytes);
    }
}
