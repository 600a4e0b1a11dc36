//! A group's configs (Kafka's GROUP resource): the consumer-protocol
//! session timeout and heartbeat interval (KIP-848), the group's own where
//! it sets them, else the agents'; and a share group's (KIP-932), the
//! group's own, else the cluster's `group.share.*`, else Kafka's defaults.

use std::collections::BTreeMap;

use floe_metastore::dynamic_config::{CONSUMER_HEARTBEAT_INTERVAL_MS, CONSUMER_SESSION_TIMEOUT_MS};
use floe_metastore::share_config::*;

use super::entry::{Entry, Synonym, Type, source};
use crate::config::Config;

/// Every group config with its value (`set`: what the group sets;
/// `cluster`: what the cluster sets).
pub fn entries(
    config: &Config,
    set: &BTreeMap<String, String>,
    cluster: &BTreeMap<String, String>,
) -> Vec<Entry> {
    let consumer = [
        (
            CONSUMER_HEARTBEAT_INTERVAL_MS,
            config.consumer_heartbeat_interval,
            "How often members of this consumer-protocol group heartbeat; overrides the agents' `group.consumer.heartbeat.interval.ms` from each member's next heartbeat.",
        ),
        (
            CONSUMER_SESSION_TIMEOUT_MS,
            config.consumer_session_timeout,
            "A member of this consumer-protocol group not heard from for this long is removed; overrides the agents' `group.consumer.session.timeout.ms` from each member's next heartbeat.",
        ),
    ]
    .into_iter()
    .map(|(name, agents, doc)| {
        let synonym = match set.get(name) {
            Some(v) => Synonym::new(name, Some(v.clone()), source::GROUP),
            None => Synonym::new(name, Some(agents.as_millis().to_string()), source::DEFAULT),
        };
        Entry::alterable(name, Type::Int, doc, vec![synonym])
    });
    consumer.chain(share_entries(set, cluster)).collect()
}

/// A share group's configs: its own, else the cluster's, else Kafka's.
fn share_entries<'a>(
    set: &'a BTreeMap<String, String>,
    cluster: &'a BTreeMap<String, String>,
) -> impl Iterator<Item = Entry> + 'a {
    let ints = GROUP_INTS.iter().map(move |&(name, _, _, cluster_key)| {
        let doc = match name {
            SHARE_SESSION_TIMEOUT_MS => "A member of this share group not heard from for this long is removed.",
            SHARE_HEARTBEAT_INTERVAL_MS => "How often members of this share group heartbeat.",
            _ => "How long a member of this share group holds the records it acquired (within the cluster's group.share.min/max.record.lock.duration.ms).",
        };
        let fallback = match cluster.get(cluster_key) {
            Some(v) => Synonym::new(cluster_key, Some(v.clone()), source::DYNAMIC_DEFAULT_BROKER),
            None => Synonym::new(
                cluster_key,
                cluster_default(cluster_key).map(|d| d.to_string()),
                source::DEFAULT,
            ),
        };
        entry(name, Type::Int, doc, set, fallback)
    });
    let strings = [
        (
            SHARE_AUTO_OFFSET_RESET,
            "latest",
            "Where this share group starts reading a partition it has not read: earliest, latest or by_duration:<ISO-8601 duration>.",
        ),
        (
            SHARE_ISOLATION_LEVEL,
            "read_uncommitted",
            "read_committed: this share group gets only committed records and never aborted transactions' (read_uncommitted: every record).",
        ),
    ]
    .into_iter()
    .map(move |(name, default, doc)| {
        let fallback = Synonym::new(name, Some(default.to_string()), source::DEFAULT);
        entry(name, Type::String, doc, set, fallback)
    });
    ints.chain(strings)
}

/// An entry: the group's value where it sets one, before `fallback`.
fn entry(
    name: &str,
    kind: Type,
    doc: &'static str,
    set: &BTreeMap<String, String>,
    fallback: Synonym,
) -> Entry {
    let mut synonyms = Vec::with_capacity(2);
    if let Some(v) = set.get(name) {
        synonyms.push(Synonym::new(name, Some(v.clone()), source::GROUP));
    }
    synonyms.push(fallback);
    Entry::alterable(name, kind, doc, synonyms)
}
