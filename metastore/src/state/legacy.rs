//! Commands as older formats logged them, applied with those formats' rules
//! so that a replica replaying an old entry decides as the one that wrote it.

use super::*;

/// A ConsumerGroupHeartbeat as format 8 logged it: the same fields, applied
/// with format 8's rules (no group with members changes protocol), so a
/// replica replaying it decides as the one whose snapshot holds it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerHeartbeatV8(pub ConsumerHeartbeatV10);

/// A ConsumerGroupHeartbeat as the log held it up to format 10, before it
/// said whose DESCRIBE filters regular expressions (see [`JoinGroupV8`]):
/// applied as one that says nobody's (no filter).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsumerHeartbeatV10 {
    pub group: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed_topics: Option<Vec<String>>,
    pub subscribed_regex: Option<String>,
    pub assignor: Option<String>,
    pub owned: Option<Vec<(TopicId, Vec<i32>)>>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    pub now_ms: i64,
}

impl From<ConsumerHeartbeatV10> for ConsumerHeartbeat {
    fn from(c: ConsumerHeartbeatV10) -> ConsumerHeartbeat {
        ConsumerHeartbeat {
            group: c.group,
            member_id: c.member_id,
            member_epoch: c.member_epoch,
            instance_id: c.instance_id,
            rack_id: c.rack_id,
            rebalance_timeout_ms: c.rebalance_timeout_ms,
            subscribed_topics: c.subscribed_topics,
            subscribed_regex: c.subscribed_regex,
            assignor: c.assignor,
            owned: c.owned,
            client_id: c.client_id,
            client_host: c.client_host,
            session_timeout_ms: c.session_timeout_ms,
            heartbeat_interval_ms: c.heartbeat_interval_ms,
            now_ms: c.now_ms,
            describer: None,
        }
    }
}

/// A JoinGroup as the log held it up to format 8 (postcard keeps no field
/// names, so a command that gains fields is a new variant; entries written
/// before are read as this and applied as the new one, with format 8's
/// rules: see [`Rules`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinGroupV8 {
    pub group: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Vec<u8>)>,
    pub subscribed_topics: Option<Vec<String>>,
    pub require_known_member_id: bool,
    pub fresh_id: String,
    pub now_ms: i64,
}

impl From<JoinGroupV8> for JoinGroup {
    fn from(j: JoinGroupV8) -> JoinGroup {
        JoinGroupV10 {
            group: j.group,
            member_id: j.member_id,
            instance_id: j.instance_id,
            client_id: j.client_id,
            client_host: j.client_host,
            session_timeout_ms: j.session_timeout_ms,
            rebalance_timeout_ms: j.rebalance_timeout_ms,
            protocol_type: j.protocol_type,
            protocols: j.protocols,
            subscribed_topics: j.subscribed_topics,
            require_known_member_id: j.require_known_member_id,
            fresh_id: j.fresh_id,
            now_ms: j.now_ms,
            owned: None,
        }
        .into()
    }
}

/// A JoinGroup as the log held it in formats 9 and 10, before it carried
/// the agent's [`JoinRules`] (see [`JoinGroupV8`]): applied with the rules
/// of then, Kafka's session bounds and no initial rebalance delay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinGroupV10 {
    pub group: String,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Vec<u8>)>,
    pub subscribed_topics: Option<Vec<String>>,
    pub require_known_member_id: bool,
    pub fresh_id: String,
    pub now_ms: i64,
    pub owned: Option<TopicPartitions>,
}

impl From<JoinGroupV10> for JoinGroup {
    fn from(j: JoinGroupV10) -> JoinGroup {
        JoinGroup {
            group: j.group,
            member_id: j.member_id,
            instance_id: j.instance_id,
            client_id: j.client_id,
            client_host: j.client_host,
            session_timeout_ms: j.session_timeout_ms,
            rebalance_timeout_ms: j.rebalance_timeout_ms,
            protocol_type: j.protocol_type,
            protocols: j.protocols,
            subscribed_topics: j.subscribed_topics,
            require_known_member_id: j.require_known_member_id,
            fresh_id: j.fresh_id,
            now_ms: j.now_ms,
            owned: j.owned,
            rules: JoinRules::BEFORE_FORMAT_11,
        }
    }
}

/// A SyncGroup as the log held it up to format 8 (see [`JoinGroupV8`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncGroupV8 {
    pub group: String,
    pub generation: i32,
    pub member_id: String,
    pub instance_id: Option<String>,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub assignments: Vec<(String, Vec<u8>)>,
    pub now_ms: i64,
}

impl From<SyncGroupV8> for SyncGroup {
    fn from(s: SyncGroupV8) -> SyncGroup {
        SyncGroup {
            group: s.group,
            generation: s.generation,
            member_id: s.member_id,
            instance_id: s.instance_id,
            protocol_type: s.protocol_type,
            protocol: s.protocol,
            assignments: s.assignments,
            now_ms: s.now_ms,
            decoded: Vec::new(),
            decodes: false,
        }
    }
}
