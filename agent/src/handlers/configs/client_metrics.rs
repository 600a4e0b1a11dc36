//! A client metrics subscription's configs (KIP-714's CLIENT_METRICS
//! resource): as Kafka describes them, only the keys the subscription sets
//! (each its own only synonym, where Kafka lists none).

use std::collections::BTreeMap;

use floe_metastore::dynamic_config::{
    CLIENT_METRICS_INTERVAL_MS, CLIENT_METRICS_MATCH, CLIENT_METRICS_METRICS,
};

use super::entry::{Entry, Synonym, Type, source};

/// The subscription's configs as set.
pub fn entries(set: &BTreeMap<String, String>) -> Vec<Entry> {
    set.iter()
        .map(|(name, value)| {
            let (kind, doc) = match name.as_str() {
                CLIENT_METRICS_METRICS => (
                    Type::List,
                    "Prefixes of the metric names matching clients push (`*`: every metric).",
                ),
                CLIENT_METRICS_INTERVAL_MS => {
                    (Type::Int, "How often matching clients push their metrics.")
                }
                CLIENT_METRICS_MATCH => (
                    Type::List,
                    "`selector=regex` items a client must all match (none: every client).",
                ),
                _ => (Type::String, ""),
            };
            let set = Synonym::new(name, Some(value.clone()), source::CLIENT_METRICS);
            Entry::alterable(name, kind, doc, vec![set])
        })
        .collect()
}
