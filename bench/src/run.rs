//! One run: create the topics, start consumers at the log ends, start
//! producers, warm up, measure, stop producers, let consumers catch up.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use floe_protocol::client::Connection;
use floe_protocol::kafka_protocol::messages::create_topics_request::CreatableTopic;
use floe_protocol::kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, TopicName,
};
use floe_protocol::kafka_protocol::protocol::StrBytes;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::args::BenchArgs;
use crate::consumer::Consumer;
use crate::probe::{self, Metrics};
use crate::producer::{self, Producer};
use crate::report::{
    AgentCounts, Lag, MIB, Machine, Percentiles, Point, Process, Report, Throughput,
};
use crate::stats::{Sample, Stats};

const TOPIC_ALREADY_EXISTS: i16 = 36;
/// How long consumers get to catch up once producers stop.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

pub async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    if args.partitions() == 0 || args.producers == 0 {
        bail!("a run needs at least one partition and one producer");
    }
    let codec = producer::compression(&args.compression)?;
    let partitions = create_topics(args).await?;
    let stats = Arc::new(Stats::new(args.subscriptions as usize));
    let stop_producers = Arc::new(AtomicBool::new(false));
    let stop_consumers = Arc::new(AtomicBool::new(false));

    let mut consumers = JoinSet::new();
    let mut ready = Vec::new();
    for subscription in 0..args.subscriptions as usize {
        let n = args.consumers_per_subscription.max(1) as usize;
        for c in 0..n {
            let share: Vec<_> = partitions.iter().skip(c).step_by(n).cloned().collect();
            if share.is_empty() {
                continue;
            }
            let (tx, rx) = oneshot::channel();
            ready.push(rx);
            let consumer = Consumer {
                bootstrap: args.bootstrap.clone(),
                subscription,
                partitions: share,
                stats: stats.clone(),
                stop: stop_consumers.clone(),
                max_wait: args.fetch_max_wait,
            };
            consumers.spawn(consumer.run(tx));
        }
    }
    for rx in ready {
        if rx.await.is_err() {
            // A consumer ended before it was ready: its error says why.
            while let Some(done) = consumers.join_next().await {
                done.context("a consumer")?
                    .context("a consumer stopped before it began")?;
            }
            bail!("a consumer stopped before it began");
        }
    }

    let mut producers = JoinSet::new();
    let filler = producer::filler(args.record_size);
    for _ in 0..args.producers {
        producers.spawn(
            Producer {
                args: args.clone(),
                codec,
                partitions: partitions.clone(),
                rate: args.rate as f64 / args.producers as f64,
                filler: filler.clone(),
                stats: stats.clone(),
                stop: stop_producers.clone(),
            }
            .run(),
        );
    }

    let started = Instant::now();
    let measure_from = started + args.warmup;
    let measure_until = measure_from + args.duration;
    let mut series = Vec::new();
    let mut max_lag = 0u64;
    let mut at_start: Option<(Instant, Probes)> = None;
    let mut next_progress = started + args.progress;
    let mut tick =
        tokio::time::interval_at(started + Duration::from_secs(1), Duration::from_secs(1));
    // A late tick makes a longer window (each point divides by its own
    // length), not a burst of short ones.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_tick = started;
    let mut peak_rss = 0u64;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            done = producers.join_next(), if !producers.is_empty() => {
                done.context("a producer")???;
                bail!("a producer stopped early");
            }
            done = consumers.join_next(), if !consumers.is_empty() => {
                done.context("a consumer")???;
                bail!("a consumer stopped early");
            }
        }
        let now = Instant::now();
        let window = stats.take_window();
        let lag = stats.lag();
        if at_start.is_some() {
            max_lag = max_lag.max(lag);
            // VmHWM would be the broker's peak since it started, earlier
            // runs included: the run's own peak is sampled here.
            if let Some(pid) = args.broker_pid {
                peak_rss = peak_rss.max(probe::process(&pid.to_string())?.rss_bytes);
            }
        }
        let point = point(
            &window,
            (now - last_tick).as_secs_f64(),
            lag,
            now,
            measure_from,
        );
        last_tick = now;
        if !args.progress.is_zero() && now >= next_progress {
            eprintln!(
                "{:>6.0} s {}  produce {:.1} MiB/s p99 {:.1} ms  consume {:.1} MiB/s e2e p99 {:.1} ms  lag {} records",
                (now - started).as_secs_f64(),
                if now < measure_from {
                    "warm-up  "
                } else {
                    "measuring"
                },
                point.produce_mib_s,
                point.produce_p99_ms,
                point.consume_mib_s,
                point.e2e_p99_ms,
                lag
            );
            next_progress += args.progress;
        }
        series.push(point);
        if at_start.is_none() && now >= measure_from {
            // The agent's counters are read just outside the measured span
            // (they take a round trip), so they cover it.
            let probes = Probes::read(args).await?;
            stats.start_measuring();
            at_start = Some((Instant::now(), probes));
        }
        if now >= measure_until {
            break;
        }
    }
    let (measure_start, start_probes) = at_start.expect("measuring started before it ended");
    let total = stats.stop_measuring();
    let seconds = (Instant::now() - measure_start).as_secs_f64();
    let end_probes = Probes::read(args).await?;

    stop_producers.store(true, Ordering::Relaxed);
    while let Some(done) = producers.join_next().await {
        done.context("a producer")??;
    }
    let at_end_records = stats.lag();
    let drain_started = Instant::now();
    while stats.lag() > 0 && drain_started.elapsed() < DRAIN_LIMIT {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let drain_seconds = drain_started.elapsed().as_secs_f64();
    let left_behind = stats.lag();
    stop_consumers.store(true, Ordering::Relaxed);
    while let Some(done) = consumers.join_next().await {
        done.context("a consumer")??;
    }

    Ok(Report {
        label: args.label.clone(),
        workload: args.clone(),
        machine: Machine::this(),
        measured_seconds: seconds,
        produce: Throughput::new(
            total.produced_records,
            total.produced_bytes,
            total.produce_errors,
            seconds,
        ),
        consume: Throughput::new(total.consumed_records, total.consumed_bytes, 0, seconds),
        produce_latency_ms: Percentiles::of(&total.produce_latency),
        end_to_end_latency_ms: Percentiles::of(&total.end_to_end_latency),
        lag: Lag {
            max_records: max_lag,
            at_end_records,
            drain_seconds,
            left_behind_records: left_behind,
        },
        broker: start_probes.broker.zip(end_probes.broker).map(|(a, b)| {
            Process::new(
                b.cpu_seconds - a.cpu_seconds,
                peak_rss.max(b.rss_bytes),
                total.produced_bytes,
                seconds,
            )
        }),
        client: Process::new(
            end_probes.client.cpu_seconds - start_probes.client.cpu_seconds,
            end_probes.client.peak_rss_bytes,
            total.produced_bytes,
            seconds,
        ),
        agent: start_probes
            .metrics
            .zip(end_probes.metrics)
            .map(|(a, b)| agent_counts(&a, &b, &total)),
        series,
    })
}

/// Creates the run's topics (named for the run unless `--reuse-topics`) and
/// returns every partition.
async fn create_topics(args: &BenchArgs) -> anyhow::Result<Vec<(TopicName, i32)>> {
    let run_id = floe_metastore::now_ms() % 1_000_000_000;
    let names: Vec<String> = (0..args.topics)
        .map(|t| {
            if args.reuse_topics {
                format!("{}-{t}", args.topic_prefix)
            } else {
                format!("{}-{run_id}-{t}", args.topic_prefix)
            }
        })
        .collect();
    let mut admin = Connection::connect(&args.bootstrap, "floe-bench").await?;
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(
            names
                .iter()
                .map(|n| {
                    CreatableTopic::default()
                        .with_name(TopicName(StrBytes::from_string(n.clone())))
                        .with_num_partitions(args.partitions_per_topic as i32)
                        .with_replication_factor(-1)
                })
                .collect(),
        );
    let created: CreateTopicsResponse = admin.call(ApiKey::CreateTopics, 5, &request).await?;
    for t in &created.topics {
        if t.error_code != 0 && !(args.reuse_topics && t.error_code == TOPIC_ALREADY_EXISTS) {
            bail!(
                "creating topic {} failed with error {}: {}",
                t.name.as_str(),
                t.error_code,
                t.error_message.as_deref().unwrap_or("")
            );
        }
    }
    Ok(names
        .iter()
        .flat_map(|n| {
            (0..args.partitions_per_topic as i32)
                .map(move |p| (TopicName(StrBytes::from_string(n.clone())), p))
        })
        .collect())
}

/// A window of `seconds` as a point of the time series.
fn point(window: &Sample, seconds: f64, lag: u64, now: Instant, measure_from: Instant) -> Point {
    let ms = |micros: u64| micros as f64 / 1000.0;
    let t = if now >= measure_from {
        (now - measure_from).as_secs_f64()
    } else {
        -(measure_from - now).as_secs_f64()
    };
    Point {
        t,
        produce_mib_s: window.produced_bytes as f64 / MIB / seconds,
        consume_mib_s: window.consumed_bytes as f64 / MIB / seconds,
        produce_p50_ms: ms(window.produce_latency.value_at_quantile(0.5)),
        produce_p99_ms: ms(window.produce_latency.value_at_quantile(0.99)),
        e2e_p50_ms: ms(window.end_to_end_latency.value_at_quantile(0.5)),
        e2e_p99_ms: ms(window.end_to_end_latency.value_at_quantile(0.99)),
        lag_records: lag,
    }
}

/// What is read beside the protocol at each end of the measured span.
struct Probes {
    broker: Option<probe::ProcessSample>,
    client: probe::ProcessSample,
    metrics: Option<Metrics>,
}

impl Probes {
    async fn read(args: &BenchArgs) -> anyhow::Result<Probes> {
        Ok(Probes {
            broker: args
                .broker_pid
                .map(|pid| probe::process(&pid.to_string()))
                .transpose()?,
            client: probe::process("self")?,
            metrics: match &args.metrics_url {
                Some(url) => Some(probe::scrape(url).await?),
                None => None,
            },
        })
    }
}

fn agent_counts(before: &Metrics, after: &Metrics, total: &Sample) -> AgentCounts {
    let delta =
        |name: &str, label: &str| probe::sum(after, name, label) - probe::sum(before, name, label);
    let requests = "floe_object_store_requests_total";
    let bytes = "floe_object_store_bytes_total";
    let written = (total.produced_bytes as f64 / MIB).max(1e-9);
    let read = (total.consumed_bytes as f64 / MIB).max(1e-9);
    let puts = delta(requests, "op=\"put\"") + delta(requests, "op=\"put_multipart\"");
    let gets = delta(requests, "op=\"get\"");
    let get_bytes = delta(bytes, "op=\"get\"");
    AgentCounts {
        puts,
        gets,
        deletes: delta(requests, "op=\"delete\""),
        lists: delta(requests, "op=\"list\""),
        put_bytes: delta(bytes, "op=\"put\"") + delta(bytes, "op=\"put_multipart\""),
        get_bytes,
        puts_per_mib_written: puts / written,
        gets_per_mib_read: gets / read,
        get_bytes_per_byte_read: get_bytes / MIB / read,
        metastore_requests_per_mib_written: delta("floe_metastore_requests_total", "") / written,
        cpu_seconds: delta("floe_process_cpu_seconds_total", ""),
    }
}
