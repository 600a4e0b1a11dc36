//! How a snapshot lays a [`State`] out: the parts' contents flat, in the
//! order of format 14 (`crate::format`), each field appended since format 4
//! with a default so older snapshots read. The parts are the memory's
//! grouping, not the format's: grouping them changed no byte (the golden
//! snapshot tests hold it to that).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::cluster::{Agents, Cluster};
use super::configs::DynamicConfigs;
use super::extents::Object;
use super::garbage_holds::GarbageHolds;
use super::log::Log;
use super::producers::{IssuedProducer, Producers};
use super::security::{ScramCredentials, Security};
use super::topics::Topic;
use super::{Derived, State};
use crate::acls::Acls;
use crate::groups::Groups;
use crate::leases::Leases;
use crate::ledger::Ledger;
use crate::txn::Txns;
use crate::types::TopicId;

/// The snapshot's fields, borrowed when written, owned when read.
#[derive(Serialize, Deserialize)]
struct Layout<'a> {
    topics: Cow<'a, BTreeMap<String, Topic>>,
    names_by_id: Cow<'a, BTreeMap<TopicId, String>>,
    objects: Cow<'a, BTreeMap<u64, Object>>,
    next_object: u64,
    producers: Cow<'a, BTreeMap<i64, IssuedProducer>>,
    next_producer_id: i64,
    garbage: Cow<'a, [String]>,
    groups: Cow<'a, Groups>,
    agents: Cow<'a, Agents>,
    ledger: Cow<'a, Ledger>,
    leases: Cow<'a, Leases>,
    clock_ms: i64,
    next_expiry_ms: i64,
    /// Format 5.
    #[serde(default)]
    scram: Cow<'a, ScramCredentials>,
    /// Format 6.
    #[serde(default)]
    acls: Cow<'a, Acls>,
    /// Format 7.
    #[serde(default)]
    txns: Cow<'a, Txns>,
    /// Format 8.
    #[serde(default)]
    configs: Cow<'a, DynamicConfigs>,
    /// Format 11.
    #[serde(default)]
    producer_id_blocks: bool,
    /// Format 13.
    #[serde(default)]
    cluster_id: Cow<'a, Option<String>>,
    /// Format 13.
    #[serde(default)]
    cluster_store_marked: bool,
    /// Format 14.
    #[serde(default)]
    garbage_holds: Cow<'a, GarbageHolds>,
}

impl Serialize for State {
    fn serialize<S: Serializer>(&self, to: S) -> Result<S::Ok, S::Error> {
        Layout {
            topics: Cow::Borrowed(&self.log.topics),
            names_by_id: Cow::Borrowed(&self.log.names_by_id),
            objects: Cow::Borrowed(&self.log.objects),
            next_object: self.log.next_object,
            producers: Cow::Borrowed(&self.producers.issued),
            next_producer_id: self.producers.next_id,
            garbage: Cow::Borrowed(self.log.garbage.as_slice()),
            groups: Cow::Borrowed(&self.groups),
            agents: Cow::Borrowed(&self.cluster.agents),
            ledger: Cow::Borrowed(&self.log.ledger),
            leases: Cow::Borrowed(&self.cluster.leases),
            clock_ms: self.clock_ms,
            next_expiry_ms: self.next_expiry_ms,
            scram: Cow::Borrowed(&self.security.scram),
            acls: Cow::Borrowed(&self.security.acls),
            txns: Cow::Borrowed(&self.txns),
            configs: Cow::Borrowed(&self.configs),
            producer_id_blocks: self.producers.blocks,
            cluster_id: Cow::Borrowed(&self.cluster.id),
            cluster_store_marked: self.cluster.store_marked,
            garbage_holds: Cow::Borrowed(&self.log.garbage_holds),
        }
        .serialize(to)
    }
}

impl<'de> Deserialize<'de> for State {
    /// What the state derives and never stores is rebuilt by the caller
    /// (see [`State::rebuild_derived`]).
    fn deserialize<D: Deserializer<'de>>(from: D) -> Result<State, D::Error> {
        let read = Layout::deserialize(from)?;
        Ok(State {
            log: Log {
                topics: read.topics.into_owned(),
                names_by_id: read.names_by_id.into_owned(),
                objects: read.objects.into_owned(),
                next_object: read.next_object,
                garbage: read.garbage.into_owned(),
                garbage_holds: read.garbage_holds.into_owned(),
                ledger: read.ledger.into_owned(),
                extent_changes: Derived::default(),
                settled: Default::default(),
                changed: Derived::default(),
            },
            producers: Producers {
                issued: read.producers.into_owned(),
                next_id: read.next_producer_id,
                blocks: read.producer_id_blocks,
            },
            groups: read.groups.into_owned(),
            txns: read.txns.into_owned(),
            security: Security {
                scram: read.scram.into_owned(),
                acls: read.acls.into_owned(),
            },
            configs: read.configs.into_owned(),
            cluster: Cluster {
                agents: read.agents.into_owned(),
                leases: read.leases.into_owned(),
                id: read.cluster_id.into_owned(),
                store_marked: read.cluster_store_marked,
            },
            clock_ms: read.clock_ms,
            next_expiry_ms: read.next_expiry_ms,
        })
    }
}
