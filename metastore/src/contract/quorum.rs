//! The metastore's Raft group as Kafka's DescribeQuorum shows a KRaft
//! quorum: floe's metastore nodes are its controllers, their log its
//! `__cluster_metadata`. Only the leader answers (a follower's view of the
//! others' logs would be a guess), from what it knows now.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A metastore node's id in its Raft group.
pub type NodeId = u64;

/// DescribeQuorum, asked of the leader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescribeQuorum;

/// The quorum as its leader sees it. Offsets are Kafka's: one past the last
/// entry, so a log holding entries 1..=9 has a log end offset of 10.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quorum {
    pub leader_id: NodeId,
    /// The Raft term (Kafka's leader epoch).
    pub term: u64,
    /// One past the last entry the leader applied (so committed).
    pub high_watermark: i64,
    pub voters: Vec<QuorumReplica>,
    /// Nodes that replicate the log but do not vote (learners catching up).
    pub observers: Vec<QuorumReplica>,
    /// Each node's address, as the group's membership has it.
    pub addresses: BTreeMap<NodeId, String>,
}

/// One node's progress, as the leader knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuorumReplica {
    pub id: NodeId,
    /// One past the last entry known to be in its log; -1 if unknown.
    pub log_end_offset: i64,
    /// When (metastore time) it was last known to hold everything the
    /// leader's log holds: now if it does, else -1 (unknown: the leader
    /// keeps no history of it).
    pub last_caught_up_ms: i64,
}

/// What a node knows of its group, for `floe metastore status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    pub id: NodeId,
    /// Leader, Follower, Candidate or Learner (Raft); Leader or Standby
    /// (a shared log).
    pub role: String,
    pub term: u64,
    pub leader: Option<NodeId>,
    pub last_log_index: Option<u64>,
    pub last_applied_index: Option<u64>,
    /// Index of the last entry covered by the node's snapshot.
    pub snapshot_index: Option<u64>,
    /// Entries still in the node's log (purged ones excluded).
    pub log_entries: u64,
    pub voters: BTreeMap<NodeId, String>,
    pub learners: BTreeMap<NodeId, String>,
    /// Where the log is kept: `raft` (the nodes' own files), or the shared
    /// store a node of a [`LogNode`](crate::LogNode) uses (`postgres://...`).
    pub backend: String,
}

impl ClusterStatus {
    /// Entries in the log this node has not applied yet.
    pub fn lag(&self) -> Option<u64> {
        let (last, applied) = (self.last_log_index?, self.last_applied_index?);
        Some(last.saturating_sub(applied))
    }
}

/// One line of `key=value` words, easy to read and to parse.
impl std::fmt::Display for ClusterStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        let list = |m: &BTreeMap<NodeId, String>| {
            m.iter()
                .map(|(id, a)| format!("{id}@{a}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        write!(
            f,
            "id={} role={} term={} leader={} last_log={} applied={} lag={} snapshot={} log_entries={} voters={} learners={} backend={}",
            self.id,
            self.role,
            self.term,
            show(self.leader),
            show(self.last_log_index),
            show(self.last_applied_index),
            show(self.lag()),
            show(self.snapshot_index),
            self.log_entries,
            list(&self.voters),
            list(&self.learners),
            self.backend,
        )
    }
}

/// A log end offset (Kafka's, one past an index) of a Raft index.
pub fn end_offset(index: Option<u64>) -> i64 {
    index.map_or(0, |i| i.saturating_add(1).min(i64::MAX as u64) as i64)
}

/// The leader's view, from what Raft reports: the membership's voters and
/// learners, the log index each is known to have (`matched`, by node; the
/// leader's own is its last log index), caught up now if that is the
/// leader's last index.
pub fn quorum_of(
    leader_id: NodeId,
    term: u64,
    applied_index: Option<u64>,
    last_log_index: Option<u64>,
    members: &BTreeMap<NodeId, (String, bool)>,
    matched: &BTreeMap<NodeId, Option<u64>>,
    now_ms: i64,
) -> Quorum {
    let replica = |id: NodeId| {
        let known = match id == leader_id {
            true => Some(last_log_index),
            false => matched.get(&id).copied(),
        };
        let caught_up = known.is_some_and(|index| index >= last_log_index);
        QuorumReplica {
            id,
            log_end_offset: known.map_or(-1, end_offset),
            last_caught_up_ms: if caught_up { now_ms } else { -1 },
        }
    };
    let of = |voting: bool| {
        members
            .iter()
            .filter(|(_, (_, votes))| *votes == voting)
            .map(|(id, _)| replica(*id))
            .collect()
    };
    Quorum {
        leader_id,
        term,
        high_watermark: end_offset(applied_index),
        voters: of(true),
        observers: of(false),
        addresses: members
            .iter()
            .map(|(id, (address, _))| (*id, address.clone()))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_reports_what_each_node_is_known_to_hold() {
        let members = BTreeMap::from([
            (1, ("10.0.0.1:7000".to_string(), true)),
            (2, ("10.0.0.2:7000".to_string(), true)),
            (3, ("10.0.0.3:7000".to_string(), true)),
            (4, ("10.0.0.4:7000".to_string(), false)),
        ]);
        // 2 holds everything, 3 lags, 4 (a learner) has nothing yet.
        let matched = BTreeMap::from([(2, Some(41)), (3, Some(30)), (4, None)]);
        let q = quorum_of(1, 7, Some(40), Some(41), &members, &matched, 5_000);
        assert_eq!((q.leader_id, q.term, q.high_watermark), (1, 7, 41));
        let rows: Vec<(NodeId, i64, i64)> = q
            .voters
            .iter()
            .map(|r| (r.id, r.log_end_offset, r.last_caught_up_ms))
            .collect();
        assert_eq!(rows, vec![(1, 42, 5_000), (2, 42, 5_000), (3, 31, -1)]);
        assert_eq!(
            q.observers,
            vec![QuorumReplica {
                id: 4,
                log_end_offset: 0,
                last_caught_up_ms: -1
            }]
        );
        assert_eq!(q.addresses[&4], "10.0.0.4:7000");
    }

    #[test]
    fn a_node_the_leader_has_no_progress_of_is_unknown() {
        let members = BTreeMap::from([
            (1, ("a:1".to_string(), true)),
            (2, ("b:1".to_string(), true)),
        ]);
        let q = quorum_of(1, 1, None, None, &members, &BTreeMap::new(), 9);
        assert_eq!(q.high_watermark, 0);
        assert_eq!(q.voters[0].log_end_offset, 0);
        assert_eq!(q.voters[1].log_end_offset, -1);
        assert_eq!(q.voters[1].last_caught_up_ms, -1);
    }
}
