//! The agent's copy of the cluster's client metrics subscriptions (KIP-714
//! CLIENT_METRICS configs, kept in the metastore), and what they ask of one
//! client.

use std::collections::BTreeMap;

use floe_metastore::dynamic_config::{
    self, ALL_CLIENT_METRICS, CLIENT_METRICS_INTERVAL_MS, CLIENT_METRICS_MATCH,
    CLIENT_METRICS_METRICS, DEFAULT_PUSH_INTERVAL_MS,
};
use uuid::Uuid;

/// One subscription, ready to match clients.
#[derive(Debug)]
struct Subscription {
    metrics: Vec<String>,
    interval_ms: i32,
    /// (selector, regex) pairs a client must all match (none: every client).
    matches: Vec<(String, regex::Regex)>,
}

/// Every subscription as last read, with the configs' version.
#[derive(Debug, Default)]
pub struct Subscriptions {
    pub version: Option<u64>,
    list: Vec<Subscription>,
}

/// What a client is, as `match` selectors name it.
#[derive(Debug, Clone)]
pub struct ClientAttributes<'a> {
    pub instance_id: Uuid,
    pub client_id: &'a str,
    pub software_name: Option<&'a str>,
    pub software_version: Option<&'a str>,
    pub source_address: &'a str,
    pub source_port: u16,
}

const UNKNOWN: &str = "unknown";

impl ClientAttributes<'_> {
    fn get(&self, selector: &str) -> Option<String> {
        Some(match selector {
            "client_instance_id" => self.instance_id.to_string(),
            "client_id" => self.client_id.to_string(),
            // Kafka's `ClientInformation.UNKNOWN_NAME_OR_VERSION` for a
            // client that sent no ApiVersions v3.
            "client_software_name" => self.software_name.unwrap_or(UNKNOWN).to_string(),
            "client_software_version" => self.software_version.unwrap_or(UNKNOWN).to_string(),
            "client_source_address" => self.source_address.to_string(),
            "client_source_port" => self.source_port.to_string(),
            _ => return None,
        })
    }
}

/// What one client is asked for: the union of the metrics of the
/// subscriptions it matches (or `*` alone), the shortest of their
/// intervals, and an id that changes when either does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub metrics: Vec<String>,
    pub interval_ms: i32,
    pub subscription_id: i32,
}

impl Subscriptions {
    /// The subscriptions of the metastore's configs. A subscription whose
    /// configs no longer parse (the metastore checked them) is skipped.
    pub fn compile(version: u64, configs: &BTreeMap<String, BTreeMap<String, String>>) -> Self {
        let list = configs
            .iter()
            .filter_map(|(name, set)| {
                let items = |key: &str| -> Vec<String> {
                    set.get(key)
                        .map(|l| {
                            l.split(',')
                                .map(str::trim)
                                .filter(|i| !i.is_empty())
                                .map(str::to_string)
                                .collect()
                        })
                        .unwrap_or_default()
                };
                let interval_ms = match set.get(CLIENT_METRICS_INTERVAL_MS) {
                    Some(v) => match v.trim().parse() {
                        Ok(ms) => ms,
                        Err(_) => {
                            tracing::warn!(subscription = %name, interval = %v, "skipping a client metrics subscription");
                            return None;
                        }
                    },
                    None => DEFAULT_PUSH_INTERVAL_MS,
                };
                let matches =
                    match dynamic_config::parse_match(set.get(CLIENT_METRICS_MATCH).map_or("", |m| m)) {
                        Ok(m) => m,
                        Err(e) => {
                            tracing::warn!(subscription = %name, error = %e, "skipping a client metrics subscription");
                            return None;
                        }
                    };
                Some(Subscription {
                    metrics: items(CLIENT_METRICS_METRICS),
                    interval_ms,
                    matches,
                })
            })
            .collect();
        Subscriptions {
            version: Some(version),
            list,
        }
    }

    /// Whether any subscription exists: the agent advertises the telemetry
    /// APIs only then, as Kafka advertises them only with a receiver.
    pub fn any(&self) -> bool {
        !self.list.is_empty()
    }

    /// What `client` is asked for (Kafka's `createClientInstance`): without
    /// a matching subscription, nothing at the default interval.
    pub fn asked(&self, client: &ClientAttributes) -> Asked {
        let mut metrics = std::collections::BTreeSet::new();
        let mut interval_ms = DEFAULT_PUSH_INTERVAL_MS;
        for s in &self.list {
            let matched = s.matches.iter().all(|(selector, regex)| {
                client
                    .get(selector)
                    .is_some_and(|value| regex.is_match(&value))
            });
            if matched {
                metrics.extend(s.metrics.iter().cloned());
                interval_ms = interval_ms.min(s.interval_ms);
            }
        }
        let metrics: Vec<String> = match metrics.contains(ALL_CLIENT_METRICS) {
            true => vec![ALL_CLIENT_METRICS.to_string()],
            false => metrics.into_iter().collect(),
        };
        let subscription_id = subscription_id(&metrics, interval_ms, client.instance_id);
        Asked {
            metrics,
            interval_ms,
            subscription_id,
        }
    }
}

/// Kafka's `computeSubscriptionId`: a CRC32C of what is asked, XORed with
/// the client instance id's hash, so two clients asked the same get
/// different ids and one asked something else gets a new one. Computed the
/// same by every agent, so a client may push to another agent than the one
/// it asked.
fn subscription_id(metrics: &[String], interval_ms: i32, instance: Uuid) -> i32 {
    let asked = format!("[{}]{interval_ms}", metrics.join(", "));
    let crc = crc32c::crc32c(asked.as_bytes()) as i32;
    // Java's `Uuid.hashCode`.
    let (msb, lsb) = instance.as_u64_pair();
    let h = msb ^ lsb;
    crc ^ (((h >> 32) as i32) ^ (h as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscriptions(list: &[(&str, &[(&str, &str)])]) -> Subscriptions {
        let configs = list
            .iter()
            .map(|(name, set)| {
                (
                    name.to_string(),
                    set.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                )
            })
            .collect();
        Subscriptions::compile(1, &configs)
    }

    fn client(client_id: &str) -> ClientAttributes<'_> {
        ClientAttributes {
            instance_id: Uuid::from_u128(7),
            client_id,
            software_name: Some("librdkafka"),
            software_version: Some("2.16.0"),
            source_address: "10.0.0.1",
            source_port: 40000,
        }
    }

    #[test]
    fn a_client_gets_the_union_of_what_it_matches() {
        let subs = subscriptions(&[
            (
                "producers",
                &[
                    ("metrics", "org.apache.kafka.producer."),
                    ("interval.ms", "10000"),
                    ("match", "client_id=app-.*"),
                ],
            ),
            (
                "everyone",
                &[
                    ("metrics", "org.apache.kafka.consumer."),
                    ("interval.ms", "20000"),
                ],
            ),
            (
                "java",
                &[
                    ("metrics", "*"),
                    ("match", "client_software_name=apache-kafka-java"),
                ],
            ),
        ]);
        let app = subs.asked(&client("app-1"));
        assert_eq!(
            app.metrics,
            vec!["org.apache.kafka.consumer.", "org.apache.kafka.producer."]
        );
        assert_eq!(app.interval_ms, 10_000);
        let other = subs.asked(&client("other"));
        assert_eq!(other.metrics, vec!["org.apache.kafka.consumer."]);
        assert_eq!(other.interval_ms, 20_000);
        assert_ne!(app.subscription_id, other.subscription_id);
        // The same question, the same answer: any agent computes it.
        assert_eq!(subs.asked(&client("app-1")), app);

        // Nothing matched: nothing asked, at Kafka's default interval.
        let none = subscriptions(&[("s", &[("metrics", "x"), ("match", "client_id=zzz")])]);
        let asked = none.asked(&client("app-1"));
        assert!(asked.metrics.is_empty());
        assert_eq!(asked.interval_ms, DEFAULT_PUSH_INTERVAL_MS);
        assert!(none.any());
        assert!(!Subscriptions::default().any());
    }

    #[test]
    fn every_metric_is_asked_as_a_star() {
        let subs = subscriptions(&[("a", &[("metrics", "x.")]), ("b", &[("metrics", "*")])]);
        assert_eq!(subs.asked(&client("c")).metrics, vec!["*"]);
    }

    /// A client that did not name its software is `unknown`, as in Kafka.
    #[test]
    fn unnamed_software_is_unknown() {
        let named = |pattern: &str| {
            let m = format!("client_software_name={pattern}");
            subscriptions(&[("s", &[("metrics", "*"), ("match", m.as_str())])])
        };
        let mut c = client("c");
        c.software_name = None;
        assert!(named("librdkafka").asked(&c).metrics.is_empty());
        assert_eq!(named("unknown").asked(&c).metrics, vec!["*"]);
    }
}
