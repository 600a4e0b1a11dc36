//! A group's configs (KIP-848's GROUP resource): the consumer-protocol
//! session timeout and heartbeat interval, the group's own where it sets
//! them, else the agents'. Kafka's share-group configs are not known here:
//! floe has no share groups (KIP-932), and setting one is refused.

use std::collections::BTreeMap;

use floe_metastore::dynamic_config::{CONSUMER_HEARTBEAT_INTERVAL_MS, CONSUMER_SESSION_TIMEOUT_MS};

use super::entry::{Entry, Synonym, Type, source};
use crate::config::Config;

/// Every group config with its value (`set`: what the group sets).
pub fn entries(config: &Config, set: &BTreeMap<String, String>) -> Vec<Entry> {
    [
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
    })
    .collect()
}
