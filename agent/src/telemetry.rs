//! Client telemetry (KIP-714): clients ask what metrics to push
//! (GetTelemetrySubscriptions) and push them (PushTelemetry, an OTLP
//! `MetricsData` protobuf); the agent keeps each client's latest value of
//! every metric and shows them on the admin port (`/client-metrics`, as
//! Prometheus text), where Kafka hands them to a receiver plugin.
//!
//! The subscription is the agent's (`--client-metrics` prefixes and
//! `--client-metrics-interval`), the same for every client; Kafka's
//! per-client `CLIENT_METRICS` config resources are not built (see
//! `docs/plans/telemetry.md`). With no prefixes, clients are told to push
//! nothing, so they never do.
//!
//! Everything is bounded: clients known (the least recently seen is
//! forgotten), metrics per client, a push's bytes compressed and not.

use std::collections::BTreeMap;
use std::sync::Mutex;

use floe_protocol::ResponseError;
use floe_protocol::batch::Codec;
use floe_protocol::kafka_protocol::messages::{
    GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse, PushTelemetryRequest,
    PushTelemetryResponse,
};
use prost::Message;
use uuid::Uuid;

use crate::handlers::str_bytes;

/// Kafka's `telemetry.max.bytes` default: the largest push accepted.
pub const MAX_PUSH_BYTES: i32 = 1 << 20;
/// A push's metrics decompressed at most.
const MAX_DECOMPRESSED_BYTES: usize = 4 * MAX_PUSH_BYTES as usize;
/// Clients remembered at once (the least recently seen is forgotten), the
/// bytes of metric names and values kept for them all, and of one name.
pub const MAX_CLIENTS: usize = 10_000;
pub const MAX_STORED_BYTES: usize = 16 << 20;
const MAX_NAME_BYTES: usize = 256;
/// The compression types accepted for pushes, in Kafka's order of
/// preference (zstd, lz4, gzip, snappy).
const ACCEPTED_COMPRESSION: [i8; 4] = [4, 3, 1, 2];

struct Client {
    client_id: String,
    seen_ms: i64,
    last_push_ms: Option<i64>,
    metrics: BTreeMap<String, f64>,
}

/// What one stored metric costs against [`MAX_STORED_BYTES`].
fn cost(name: &str) -> usize {
    name.len() + 16
}

#[derive(Default)]
struct Clients {
    by_id: BTreeMap<Uuid, Client>,
    /// The bytes of every client's metrics.
    stored: usize,
}

impl Clients {
    fn remove(&mut self, id: &Uuid) {
        if let Some(c) = self.by_id.remove(id) {
            self.stored -= c.metrics.keys().map(|n| cost(n)).sum::<usize>();
        }
    }
}

pub struct Telemetry {
    /// Metric name prefixes clients are asked for (`""`: every metric).
    requested: Vec<String>,
    interval_ms: i32,
    subscription_id: i32,
    clients: Mutex<Clients>,
}

impl Telemetry {
    /// `prefixes` as configured (`*` for every metric; none: no pushes).
    pub fn new(prefixes: &[String], interval: std::time::Duration) -> Telemetry {
        let requested: Vec<String> = match prefixes.iter().any(|p| p == "*") {
            true => vec![String::new()],
            false => prefixes.iter().filter(|p| !p.is_empty()).cloned().collect(),
        };
        let interval_ms = interval.as_millis().clamp(100, 3_600_000) as i32;
        // Changes whenever what is asked changes (Kafka's CRC of it), so a
        // client pushing for an older subscription is told to ask again.
        let subscription_id =
            crc32c::crc32c(format!("{requested:?}|{interval_ms}").as_bytes()) as i32;
        Telemetry {
            requested,
            interval_ms,
            subscription_id,
            clients: Mutex::new(Clients::default()),
        }
    }

    /// GetTelemetrySubscriptions: the subscription, and an instance id for a
    /// client that has none.
    pub fn subscribe(
        &self,
        req: &GetTelemetrySubscriptionsRequest,
        client_id: &str,
        now_ms: i64,
    ) -> GetTelemetrySubscriptionsResponse {
        let assigned = req
            .client_instance_id
            .is_nil()
            .then(floe_metastore::random_id);
        let id = assigned.unwrap_or(req.client_instance_id);
        self.remember(id, client_id, now_ms);
        GetTelemetrySubscriptionsResponse::default()
            .with_client_instance_id(assigned.unwrap_or(Uuid::nil()))
            .with_subscription_id(self.subscription_id)
            .with_accepted_compression_types(ACCEPTED_COMPRESSION.to_vec())
            .with_push_interval_ms(self.interval_ms)
            .with_telemetry_max_bytes(MAX_PUSH_BYTES)
            .with_delta_temporality(true)
            .with_requested_metrics(self.requested.iter().map(|m| str_bytes(m)).collect())
    }

    /// PushTelemetry: checked as Kafka's `ClientMetricsManager` checks it,
    /// then each metric's latest value kept.
    pub fn push(
        &self,
        req: &PushTelemetryRequest,
        client_id: &str,
        now_ms: i64,
    ) -> PushTelemetryResponse {
        let answer = |e: Option<ResponseError>| {
            PushTelemetryResponse::default().with_error_code(e.map_or(0, |e| e.code()))
        };
        if req.client_instance_id.is_nil() {
            return answer(Some(ResponseError::InvalidRequest));
        }
        if req.subscription_id != self.subscription_id {
            return answer(Some(ResponseError::UnknownSubscriptionId));
        }
        if req.metrics.len() > MAX_PUSH_BYTES as usize {
            return answer(Some(ResponseError::TelemetryTooLarge));
        }
        let codec = match req.compression_type {
            0 => Codec::None,
            1 => Codec::Gzip,
            2 => Codec::Snappy,
            3 => Codec::Lz4,
            4 => Codec::Zstd,
            _ => return answer(Some(ResponseError::UnsupportedCompressionType)),
        };
        {
            let mut clients = self.clients.lock().expect("telemetry lock");
            let last = clients
                .by_id
                .get(&req.client_instance_id)
                .and_then(|c| c.last_push_ms);
            // Sooner than half its interval (clients jitter their pushes
            // between 0.5 and 1.5 of it): throttled, unless it is the last.
            if !req.terminating
                && last.is_some_and(|at| now_ms - at < i64::from(self.interval_ms) / 2)
            {
                return answer(Some(ResponseError::ThrottlingQuotaExceeded))
                    .with_throttle_time_ms(self.interval_ms / 2);
            }
            if let Some(c) = clients.by_id.get_mut(&req.client_instance_id) {
                c.last_push_ms = Some(now_ms);
            }
        }
        let metrics = match floe_protocol::compression::decompress(
            codec,
            &req.metrics,
            MAX_DECOMPRESSED_BYTES,
        ) {
            Ok(bytes) => bytes,
            Err(_) => return answer(Some(ResponseError::InvalidRecord)),
        };
        let Ok(data) = MetricsData::decode(metrics) else {
            return answer(Some(ResponseError::InvalidRecord));
        };
        let mut clients = self.clients.lock().expect("telemetry lock");
        if req.terminating {
            clients.remove(&req.client_instance_id);
            return answer(None);
        }
        drop(clients);
        self.remember(req.client_instance_id, client_id, now_ms);
        let mut clients = self.clients.lock().expect("telemetry lock");
        let Clients { by_id, stored } = &mut *clients;
        let client = by_id
            .get_mut(&req.client_instance_id)
            .expect("just remembered");
        client.last_push_ms = Some(now_ms);
        for (name, value) in data.latest_values() {
            if let Some(kept) = client.metrics.get_mut(&name) {
                *kept = value;
            } else if name.len() <= MAX_NAME_BYTES && *stored + cost(&name) <= MAX_STORED_BYTES {
                *stored += cost(&name);
                client.metrics.insert(name, value);
            }
        }
        answer(None)
    }

    /// Notes a client as seen, forgetting the least recently seen one when
    /// there are too many.
    fn remember(&self, id: Uuid, client_id: &str, now_ms: i64) {
        let mut clients = self.clients.lock().expect("telemetry lock");
        if !clients.by_id.contains_key(&id) && clients.by_id.len() >= MAX_CLIENTS {
            let oldest = clients
                .by_id
                .iter()
                .min_by_key(|(_, c)| c.seen_ms)
                .map(|(id, _)| *id);
            if let Some(oldest) = oldest {
                clients.remove(&oldest);
            }
        }
        let client = clients.by_id.entry(id).or_insert_with(|| Client {
            client_id: String::new(),
            seen_ms: now_ms,
            last_push_ms: None,
            metrics: BTreeMap::new(),
        });
        client.client_id = client_id.to_string();
        client.seen_ms = now_ms;
    }

    /// Every client's metrics, as Prometheus text.
    pub fn render(&self) -> String {
        let mut out = String::from(
            "# HELP floe_client_metric The latest value a client pushed of a metric (KIP-714).\n# TYPE floe_client_metric gauge\n",
        );
        let clients = self.clients.lock().expect("telemetry lock");
        for (id, c) in clients.by_id.iter() {
            for (name, value) in &c.metrics {
                out.push_str(&format!(
                    "floe_client_metric{{client_instance_id=\"{id}\",client_id=\"{}\",name=\"{}\"}} {value}\n",
                    label(&c.client_id),
                    label(name)
                ));
            }
        }
        out
    }
}

/// A Prometheus label value, escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The part of OTLP's `MetricsData` (opentelemetry-proto, metrics/v1) that
/// floe reads: each metric's name and its number data points; the rest of
/// a push is skipped as unknown fields.
#[derive(Clone, PartialEq, Message)]
struct MetricsData {
    #[prost(message, repeated, tag = "1")]
    resource_metrics: Vec<ResourceMetrics>,
}

#[derive(Clone, PartialEq, Message)]
struct ResourceMetrics {
    #[prost(message, repeated, tag = "2")]
    scope_metrics: Vec<ScopeMetrics>,
}

#[derive(Clone, PartialEq, Message)]
struct ScopeMetrics {
    #[prost(message, repeated, tag = "2")]
    metrics: Vec<Metric>,
}

#[derive(Clone, PartialEq, Message)]
struct Metric {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, optional, tag = "5")]
    gauge: Option<NumberPoints>,
    #[prost(message, optional, tag = "7")]
    sum: Option<NumberPoints>,
}

/// A gauge's or a sum's data points (field 1 of both).
#[derive(Clone, PartialEq, Message)]
struct NumberPoints {
    #[prost(message, repeated, tag = "1")]
    data_points: Vec<NumberDataPoint>,
}

#[derive(Clone, PartialEq, Message)]
struct NumberDataPoint {
    #[prost(double, optional, tag = "4")]
    as_double: Option<f64>,
    #[prost(sfixed64, optional, tag = "6")]
    as_int: Option<i64>,
}

impl MetricsData {
    /// Each gauge's and sum's last data point, by metric name.
    fn latest_values(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for scope in self.resource_metrics.iter().flat_map(|r| &r.scope_metrics) {
            for m in &scope.metrics {
                let points = m.gauge.as_ref().or(m.sum.as_ref());
                let value = points
                    .and_then(|p| p.data_points.last())
                    .and_then(|p| p.as_double.or(p.as_int.map(|i| i as f64)));
                if let Some(value) = value {
                    out.push((m.name.clone(), value));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::time::Duration;

    fn payload(metrics: &[(&str, f64)]) -> Bytes {
        let data = MetricsData {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: metrics
                        .iter()
                        .map(|(name, v)| Metric {
                            name: name.to_string(),
                            gauge: Some(NumberPoints {
                                data_points: vec![NumberDataPoint {
                                    as_double: Some(*v),
                                    as_int: None,
                                }],
                            }),
                            sum: None,
                        })
                        .collect(),
                }],
            }],
        };
        Bytes::from(data.encode_to_vec())
    }

    #[test]
    fn a_client_is_subscribed_pushes_and_is_shown_and_refusals_are_kafka_s() {
        let t = Telemetry::new(
            &["org.apache.kafka.producer.".into()],
            Duration::from_secs(10),
        );
        let sub = t.subscribe(&GetTelemetrySubscriptionsRequest::default(), "p1", 0);
        assert!(!sub.client_instance_id.is_nil());
        assert_eq!(sub.requested_metrics.len(), 1);
        let push = |id: Uuid, subscription: i32, at: i64, metrics: Bytes| {
            t.push(
                &PushTelemetryRequest::default()
                    .with_client_instance_id(id)
                    .with_subscription_id(subscription)
                    .with_metrics(metrics),
                "p1",
                at,
            )
            .error_code
        };
        let id = sub.client_instance_id;
        let metrics = payload(&[("org.apache.kafka.producer.record.queue.time.avg", 1.5)]);
        assert_eq!(push(id, sub.subscription_id, 6_000, metrics.clone()), 0);
        assert!(t.render().contains(
            "client_id=\"p1\",name=\"org.apache.kafka.producer.record.queue.time.avg\"} 1.5"
        ));
        // Too soon, an old subscription, garbage, too large.
        assert_eq!(
            push(id, sub.subscription_id, 7_000, metrics.clone()),
            ResponseError::ThrottlingQuotaExceeded.code()
        );
        assert_eq!(
            push(id, sub.subscription_id + 1, 20_000, metrics.clone()),
            ResponseError::UnknownSubscriptionId.code()
        );
        assert_eq!(
            push(
                id,
                sub.subscription_id,
                40_000,
                Bytes::from_static(&[0xff; 9])
            ),
            ResponseError::InvalidRecord.code()
        );
        let huge = Bytes::from(vec![0u8; MAX_PUSH_BYTES as usize + 1]);
        assert_eq!(
            push(id, sub.subscription_id, 60_000, huge),
            ResponseError::TelemetryTooLarge.code()
        );
    }

    #[test]
    fn no_prefixes_ask_for_nothing_and_a_star_for_everything() {
        let none = Telemetry::new(&[], Duration::from_secs(300));
        let sub = none.subscribe(&GetTelemetrySubscriptionsRequest::default(), "c", 0);
        assert!(sub.requested_metrics.is_empty());
        let all = Telemetry::new(&["*".into()], Duration::from_secs(300));
        let sub = all.subscribe(&GetTelemetrySubscriptionsRequest::default(), "c", 0);
        assert_eq!(sub.requested_metrics, vec![str_bytes("")]);
        assert_ne!(
            Telemetry::new(&[], Duration::from_secs(300)).subscription_id,
            all.subscription_id
        );
    }

    #[test]
    fn clients_are_bounded() {
        let t = Telemetry::new(&["*".into()], Duration::from_secs(1));
        for n in 0..MAX_CLIENTS + 5 {
            t.subscribe(&GetTelemetrySubscriptionsRequest::default(), "c", n as i64);
        }
        assert_eq!(t.clients.lock().unwrap().by_id.len(), MAX_CLIENTS);
    }

    #[test]
    fn stored_metrics_are_bounded_in_bytes() {
        let t = Telemetry::new(&["*".into()], Duration::from_millis(100));
        let names: Vec<String> = (0..4_000).map(|n| format!("{n:0>200}")).collect();
        let metrics = payload(&names.iter().map(|n| (n.as_str(), 1.0)).collect::<Vec<_>>());
        assert!(metrics.len() < MAX_PUSH_BYTES as usize);
        for _ in 0..40 {
            let sub = t.subscribe(&GetTelemetrySubscriptionsRequest::default(), "c", 0);
            let req = PushTelemetryRequest::default()
                .with_client_instance_id(sub.client_instance_id)
                .with_subscription_id(sub.subscription_id)
                .with_metrics(metrics.clone());
            assert_eq!(t.push(&req, "c", 1_000).error_code, 0);
        }
        let clients = t.clients.lock().unwrap();
        let kept: usize = clients.by_id.values().map(|c| c.metrics.len()).sum();
        assert!(clients.stored <= MAX_STORED_BYTES);
        assert!(kept < 40 * 4_000 && kept > 0, "{kept}");
    }
}
