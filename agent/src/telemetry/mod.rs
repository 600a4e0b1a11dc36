//! Client telemetry (KIP-714): clients ask which metrics to push
//! (GetTelemetrySubscriptions) and push them (PushTelemetry, an OTLP
//! `MetricsData` protobuf). Operators say what they want with
//! CLIENT_METRICS config resources (`kafka-client-metrics.sh`, or
//! `floe configs alter --client-metrics NAME`), kept in the metastore; each
//! agent keeps a copy, refreshed every [`REFRESH_EVERY`] at the latest (see
//! [`crate::refresher`]). Pushed values are
//! shown on the agent's admin port at `/client-metrics` as Prometheus text,
//! where Kafka hands them to a receiver plugin.
//!
//! As Kafka does (`ClientMetricsManager`), except:
//! - the two APIs are advertised while any subscription exists (Kafka:
//!   while a receiver plugin is configured), so without subscriptions
//!   clients never ask;
//! - GetTelemetrySubscriptions stores nothing and is never throttled: what
//!   a client is asked is computed from the subscriptions and the client's
//!   attributes, the same on every agent, and checked again at its push;
//! - clients are asked for cumulative values (`delta_temporality` false):
//!   only each series' latest value is kept, which is what a gauge and a
//!   counter need.
//!
//! A client pushes to one agent (its telemetry leader, KIP-714's choice):
//! each agent shows what its own clients pushed.

mod instances;
mod otlp;
mod subscriptions;

use std::fmt::Write;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use floe_metastore::Metastore;
use floe_metastore::dynamic_config::ALL_CLIENT_METRICS;
use floe_protocol::ResponseError;
use floe_protocol::batch::{BatchError, Codec};
use floe_protocol::kafka_protocol::messages::{
    GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse, PushTelemetryRequest,
    PushTelemetryResponse,
};
use uuid::Uuid;

use crate::refresher::Refreshed;

pub use instances::{Identity, LIMITS, Limits};
pub use subscriptions::{Asked, ClientAttributes, Subscriptions};

use floe_protocol::str_bytes;

/// How often the copy of the subscriptions is brought up to date.
pub const REFRESH_EVERY: Duration = Duration::from_secs(2);
/// Kafka's `telemetry.max.bytes` default: the largest push accepted.
pub const MAX_PUSH_BYTES: i32 = 1 << 20;
/// A push's metrics decompressed at most (answered TELEMETRY_TOO_LARGE
/// past it). Pushes are decompressed and read on the request's thread, so
/// at most one per runtime worker holds this much at once.
pub const MAX_DECOMPRESSED_BYTES: usize = 4 * MAX_PUSH_BYTES as usize;
/// Series read from one push at most.
const MAX_SERIES_PER_PUSH: usize = 2 * LIMITS.series_per_instance;
/// The compression types accepted, in Kafka's order (zstd, lz4, gzip,
/// snappy); uncompressed pushes are accepted too, as Kafka's.
const ACCEPTED_COMPRESSION: [i8; 4] = [4, 3, 1, 2];

pub struct Telemetry {
    subscriptions: RwLock<Arc<Subscriptions>>,
    instances: Mutex<instances::Instances>,
    /// The clock of throttling and expiry (this agent's own: they are
    /// decisions about its memory, not about data).
    started: tokio::time::Instant,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry::new(LIMITS)
    }
}

impl Telemetry {
    pub fn new(limits: Limits) -> Telemetry {
        Telemetry {
            subscriptions: RwLock::default(),
            instances: Mutex::new(instances::Instances::new(limits)),
            started: tokio::time::Instant::now(),
        }
    }

    fn now_ms(&self) -> i64 {
        self.started.elapsed().as_millis() as i64
    }

    fn current(&self) -> Arc<Subscriptions> {
        self.subscriptions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn instances(&self) -> std::sync::MutexGuard<'_, instances::Instances> {
        // Nothing under this lock can leave it half-changed for a panic to
        // matter more than losing telemetry would.
        self.instances.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether clients should be told about the telemetry APIs.
    pub fn advertised(&self) -> bool {
        self.current().any()
    }

    /// Takes the subscriptions as the metastore holds them (tests and the
    /// refresher).
    pub fn set_subscriptions(&self, subscriptions: Subscriptions) {
        let mut held = self
            .subscriptions
            .write()
            .unwrap_or_else(|p| p.into_inner());
        // Two refreshes may cross: never go back to an older copy.
        if held.version <= subscriptions.version {
            *held = Arc::new(subscriptions);
        }
    }
}

impl Refreshed for Telemetry {
    const WHAT: &str = "client metrics subscriptions";
    const EVERY: Duration = REFRESH_EVERY;

    fn held_version(&self) -> Option<u64> {
        self.current().version
    }

    fn pushed_version(versions: &floe_metastore::push::Versions) -> u64 {
        versions.configs
    }

    /// Reads the subscriptions if the metastore's configs changed.
    async fn refresh(&self, meta: &dyn Metastore) -> Result<(), floe_metastore::MetaError> {
        let known = self.current().version;
        let (version, configs) = meta.client_metrics_if_changed(known).await?;
        if let Some(configs) = configs {
            self.set_subscriptions(Subscriptions::compile(version, &configs));
        }
        Ok(())
    }
}

impl Telemetry {
    /// GetTelemetrySubscriptions: what the client is asked for, and its
    /// instance id (`fresh_id`'s when it sent none).
    pub fn subscribe(
        &self,
        req: &GetTelemetrySubscriptionsRequest,
        client: ClientAttributes,
        fresh_id: impl FnOnce() -> Uuid,
    ) -> GetTelemetrySubscriptionsResponse {
        let instance_id = match req.client_instance_id.is_nil() {
            true => fresh_id(),
            false => req.client_instance_id,
        };
        let asked = self.current().asked(&ClientAttributes {
            instance_id,
            ..client
        });
        self.instances().asked(instance_id, self.now_ms());
        GetTelemetrySubscriptionsResponse::default()
            .with_client_instance_id(instance_id)
            .with_subscription_id(asked.subscription_id)
            .with_accepted_compression_types(ACCEPTED_COMPRESSION.to_vec())
            .with_push_interval_ms(asked.interval_ms)
            .with_telemetry_max_bytes(MAX_PUSH_BYTES)
            .with_delta_temporality(false)
            .with_requested_metrics(asked.metrics.iter().map(|m| str_bytes(m)).collect())
    }

    /// PushTelemetry, checked as Kafka's `ClientMetricsManager` checks it
    /// (in its order), then its series kept.
    pub fn push(
        &self,
        req: &PushTelemetryRequest,
        client: ClientAttributes,
    ) -> PushTelemetryResponse {
        let answer = |e: Option<ResponseError>| {
            PushTelemetryResponse::default().with_error_code(e.map_or(0, |e| e.code()))
        };
        let id = req.client_instance_id;
        // Kafka's reserved ids: zero, and one (its metadata topic's).
        if id.is_nil() || id == Uuid::from_u128(1) {
            return answer(Some(ResponseError::InvalidRequest));
        }
        let asked = self.current().asked(&ClientAttributes {
            instance_id: id,
            ..client.clone()
        });
        let now_ms = self.now_ms();
        match self
            .instances()
            .admit_push(id, now_ms, asked.interval_ms, req.terminating)
        {
            Ok(()) => {}
            Err(instances::Refused::Terminated) => {
                return answer(Some(ResponseError::InvalidRequest));
            }
            // Kafka answers a throttled push with no throttle time: the
            // client waits its interval anyway.
            Err(instances::Refused::Throttled) => {
                return answer(Some(ResponseError::ThrottlingQuotaExceeded));
            }
        }
        if req.subscription_id != asked.subscription_id {
            return answer(Some(ResponseError::UnknownSubscriptionId));
        }
        let codec = match req.compression_type {
            0 => Codec::None,
            1 => Codec::Gzip,
            2 => Codec::Snappy,
            3 => Codec::Lz4,
            4 => Codec::Zstd,
            _ => return answer(Some(ResponseError::UnsupportedCompressionType)),
        };
        if req.metrics.len() > MAX_PUSH_BYTES as usize {
            return answer(Some(ResponseError::TelemetryTooLarge));
        }
        // Nothing asked (or nothing sent): nothing to read.
        let points = match asked.metrics.is_empty() || req.metrics.is_empty() {
            true => Vec::new(),
            false => match read_push(codec, &req.metrics, &asked.metrics) {
                Ok(points) => points,
                Err(e) => return answer(Some(e)),
            },
        };
        let identity = Identity::new(
            client.client_id,
            client.software_name.unwrap_or(""),
            client.software_version.unwrap_or(""),
        );
        self.instances().pushed(
            id,
            identity,
            now_ms,
            asked.interval_ms,
            req.terminating,
            points,
        );
        answer(None)
    }

    /// Every instance's latest values, as Prometheus text.
    pub fn render(&self) -> String {
        let snapshot = {
            let mut instances = self.instances();
            instances.expire(self.now_ms());
            instances.snapshot()
        };
        // Who each instance is, once; its series by instance id (bounded
        // as `instances` counts them).
        let mut out = String::from(
            "# HELP floe_client_info A client instance that pushed metrics (KIP-714).\n# TYPE floe_client_info gauge\n",
        );
        for (id, who, _) in &snapshot {
            let _ = writeln!(
                out,
                "floe_client_info{{client_instance_id=\"{id}\",client_id=\"{}\",client_software_name=\"{}\",client_software_version=\"{}\"}} 1",
                label(&who.client_id),
                label(&who.software_name),
                label(&who.software_version),
            );
        }
        out.push_str(
            "# HELP floe_client_metric The latest value a client instance pushed of a metric; `name` is the metric's, `attributes` its data point's.\n# TYPE floe_client_metric gauge\n",
        );
        for (id, _, series) in snapshot {
            for ((name, attributes), value) in series {
                let _ = writeln!(
                    out,
                    "floe_client_metric{{client_instance_id=\"{id}\",name=\"{}\",attributes=\"{}\"}} {value}",
                    label(&name),
                    label(&attributes),
                );
            }
        }
        out
    }
}

/// A push's series, or the error to answer: decompressed within
/// [`MAX_DECOMPRESSED_BYTES`] (TELEMETRY_TOO_LARGE past it, so the client
/// does not take it as a permanent failure), then read.
/// Only the metrics asked for are kept (a client may push more).
fn read_push(
    codec: Codec,
    metrics: &[u8],
    asked: &[String],
) -> Result<Vec<otlp::Point>, ResponseError> {
    let data = floe_protocol::compression::decompress(codec, metrics, MAX_DECOMPRESSED_BYTES)
        .map_err(|e| match e {
            BatchError::Corrupt(why) if why == floe_protocol::compression::PAST_THE_LIMIT => {
                ResponseError::TelemetryTooLarge
            }
            _ => ResponseError::InvalidRecord,
        })?;
    let all = asked.iter().any(|m| m == ALL_CLIENT_METRICS);
    let wanted = |name: &str| all || asked.iter().any(|prefix| name.starts_with(prefix.as_str()));
    otlp::points(&data, MAX_SERIES_PER_PUSH, &wanted).map_err(|_| ResponseError::InvalidRecord)
}

/// A Prometheus label value, escaped.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn client(id: Uuid) -> ClientAttributes<'static> {
        ClientAttributes {
            instance_id: id,
            client_id: "app",
            software_name: Some("librdkafka"),
            software_version: Some("2.16.0"),
            source_address: "10.0.0.1",
            source_port: 40000,
        }
    }

    fn telemetry(metrics: &str, interval_ms: &str) -> Telemetry {
        let t = Telemetry::default();
        let configs = BTreeMap::from([(
            "s".to_string(),
            BTreeMap::from([
                ("metrics".to_string(), metrics.to_string()),
                ("interval.ms".to_string(), interval_ms.to_string()),
            ]),
        )]);
        t.set_subscriptions(Subscriptions::compile(1, &configs));
        t
    }

    fn subscribe(t: &Telemetry, id: Uuid) -> GetTelemetrySubscriptionsResponse {
        let req = GetTelemetrySubscriptionsRequest::default().with_client_instance_id(id);
        t.subscribe(&req, client(Uuid::nil()), floe_metastore::random_id)
    }

    fn push(t: &Telemetry, id: Uuid, subscription: i32, codec: i8, metrics: Vec<u8>) -> i16 {
        let req = PushTelemetryRequest::default()
            .with_client_instance_id(id)
            .with_subscription_id(subscription)
            .with_compression_type(codec)
            .with_metrics(metrics.into());
        t.push(&req, client(Uuid::nil())).error_code
    }

    fn data() -> Vec<u8> {
        otlp::tests::metrics_data(&[("org.apache.kafka.producer.x", None, 2.5)])
    }

    #[test]
    fn a_client_keeps_its_instance_id_and_gets_one_if_it_has_none() {
        let t = telemetry("*", "60000");
        let first = subscribe(&t, Uuid::nil());
        assert!(!first.client_instance_id.is_nil());
        assert_eq!(first.requested_metrics, vec![str_bytes("*")]);
        assert_eq!(first.push_interval_ms, 60_000);
        let again = subscribe(&t, first.client_instance_id);
        assert_eq!(again.client_instance_id, first.client_instance_id);
        assert_eq!(again.subscription_id, first.subscription_id);
    }

    /// Each refusal Kafka gives, in Kafka's order, and an accepted push
    /// shown at /client-metrics.
    #[test]
    fn pushes_are_checked_as_kafka_checks_them() {
        let t = telemetry("org.apache.kafka.producer.", "60000");
        let id = subscribe(&t, Uuid::nil()).client_instance_id;
        let sub = subscribe(&t, id).subscription_id;
        let code = |e: ResponseError| e.code();
        assert_eq!(
            push(&t, Uuid::nil(), sub, 0, data()),
            code(ResponseError::InvalidRequest)
        );
        assert_eq!(
            push(&t, Uuid::from_u128(1), sub, 0, data()),
            code(ResponseError::InvalidRequest)
        );
        assert_eq!(
            push(&t, id, sub ^ 1, 0, data()),
            code(ResponseError::UnknownSubscriptionId)
        );
        assert_eq!(
            push(&t, id, sub, 9, data()),
            code(ResponseError::UnsupportedCompressionType)
        );
        let huge = vec![0u8; MAX_PUSH_BYTES as usize + 1];
        assert_eq!(
            push(&t, id, sub, 0, huge),
            code(ResponseError::TelemetryTooLarge)
        );
        assert_eq!(
            push(&t, id, sub, 0, vec![0xff]),
            code(ResponseError::InvalidRecord)
        );
        assert_eq!(push(&t, id, sub, 0, data()), 0);
        // Again at once: throttled, until the client asks again.
        assert_eq!(
            push(&t, id, sub, 0, data()),
            code(ResponseError::ThrottlingQuotaExceeded)
        );
        subscribe(&t, id);
        assert_eq!(push(&t, id, sub, 0, data()), 0);
        let shown = t.render();
        for line in [
            format!(
                "floe_client_info{{client_instance_id=\"{id}\",client_id=\"app\",client_software_name=\"librdkafka\",client_software_version=\"2.16.0\"}} 1"
            ),
            format!(
                "floe_client_metric{{client_instance_id=\"{id}\",name=\"org.apache.kafka.producer.x\",attributes=\"\"}} 2.5"
            ),
        ] {
            assert!(shown.lines().any(|l| l == line), "{line} in {shown}");
        }
    }

    /// A small push that decompresses past the bound is refused as too
    /// large (decompression stops one byte past the bound:
    /// `compression::decompress`).
    #[test]
    fn a_compression_bomb_is_too_large() {
        let t = telemetry("*", "60000");
        let id = subscribe(&t, Uuid::nil()).client_instance_id;
        let sub = subscribe(&t, id).subscription_id;
        let zeros = vec![0u8; MAX_DECOMPRESSED_BYTES + 1];
        let zstd =
            |b: &[u8]| floe_protocol::compression::compress(Codec::Zstd, Some(19), b).unwrap();
        let bomb = zstd(&zeros);
        assert!(bomb.len() < 4096);
        assert_eq!(
            push(&t, id, sub, 4, bomb),
            ResponseError::TelemetryTooLarge.code()
        );
        // Compressed, within the bound: read.
        let ok = zstd(&data());
        assert_eq!(push(&t, id, sub, 4, ok), 0);
        assert!(t.render().contains("org.apache.kafka.producer.x"));
    }

    /// A changed subscription changes the id: a push for the old one is
    /// told to ask again.
    #[test]
    fn a_changed_subscription_is_a_new_id() {
        let t = telemetry("a.", "60000");
        let id = subscribe(&t, Uuid::nil()).client_instance_id;
        let old = subscribe(&t, id).subscription_id;
        let configs = BTreeMap::from([(
            "s".to_string(),
            BTreeMap::from([("metrics".to_string(), "b.".to_string())]),
        )]);
        t.set_subscriptions(Subscriptions::compile(2, &configs));
        assert_eq!(
            push(&t, id, old, 0, data()),
            ResponseError::UnknownSubscriptionId.code()
        );
        let new = subscribe(&t, id).subscription_id;
        assert_ne!(new, old);
        assert_eq!(push(&t, id, new, 0, data()), 0);
        // An older copy never replaces a newer one.
        t.set_subscriptions(Subscriptions::compile(1, &BTreeMap::new()));
        assert!(t.advertised());
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
