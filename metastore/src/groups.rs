//! Consumer groups (Kafka's classic group protocol), as part of the
//! deterministic state machine: membership, generations, assignments and
//! committed offsets all live in the metastore, so any agent can coordinate
//! any group and an agent's death loses nothing.
//!
//! Time comes in with every command (`now_ms`): the state machine never reads
//! a clock. Agents waiting in JoinGroup/SyncGroup send [`TickGroup`]
//! when a deadline they can see has passed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Why a group operation was refused; each is one Kafka error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum GroupError {
    #[error("unknown member id")]
    UnknownMemberId,
    #[error("illegal generation")]
    IllegalGeneration,
    #[error("rebalance in progress")]
    RebalanceInProgress,
    #[error("inconsistent group protocol")]
    InconsistentGroupProtocol,
    #[error("invalid session timeout")]
    InvalidSessionTimeout,
}

/// Shortest and longest session timeout accepted (Kafka's group.min/max.session.timeout.ms).
pub const MIN_SESSION_TIMEOUT_MS: i32 = 6_000;
pub const MAX_SESSION_TIMEOUT_MS: i32 = 1_800_000;

/// JoinGroup: a member (re)joins; answers the member id it now has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinGroup {
    pub group: String,
    /// Empty for a new member.
    pub member_id: String,
    pub client_id: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Vec<u8>)>,
    pub now_ms: i64,
}

/// SyncGroup: the leader's assignments for the generation (none from a follower).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncGroup {
    pub group: String,
    pub generation: i32,
    pub member_id: String,
    pub assignments: Vec<(String, Vec<u8>)>,
    pub now_ms: i64,
}

/// Heartbeat: a member says it is alive, and learns of a rebalance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupHeartbeat {
    pub group: String,
    pub generation: i32,
    pub member_id: String,
    pub now_ms: i64,
}

/// LeaveGroup of one or more members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaveGroup {
    pub group: String,
    pub member_ids: Vec<String>,
    pub now_ms: i64,
}

/// Expire silent members and finish a rebalance whose deadline passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickGroup {
    pub group: String,
    pub now_ms: i64,
}

/// OffsetCommit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitOffsets {
    pub group: String,
    /// -1 with an empty member id: a commit from outside the group protocol.
    pub generation: i32,
    pub member_id: String,
    pub offsets: Vec<OffsetToCommit>,
    pub now_ms: i64,
}

/// One partition's offset in a [`CommitOffsets`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetToCommit {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub metadata: Option<String>,
}

/// A group operation as the log holds it (defined with the log's commands).
pub use crate::state::GroupCommand;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    Empty,
    /// Waiting for members to (re)join until the deadline.
    Joining {
        deadline_ms: i64,
    },
    /// Generation formed; waiting for the leader's assignments.
    Syncing,
    Stable,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub client_id: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocols: Vec<(String, Vec<u8>)>,
    pub last_seen_ms: i64,
    /// Has joined the rebalance in progress (or the current generation).
    pub joined: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedOffset {
    pub offset: i64,
    pub metadata: Option<String>,
    /// The metastore's time of the commit.
    pub commit_ms: i64,
}

/// Kafka's `offsets.retention.minutes` default (7 days): committed offsets
/// of a group that has had no members for this long (and that were not
/// committed since) are forgotten, and the group with them.
pub const OFFSETS_RETENTION_MS: i64 = 7 * 24 * 3600 * 1000;
/// Kafka's `offset.metadata.max.bytes` default: longer commit metadata is
/// refused (OFFSET_METADATA_TOO_LARGE).
pub const OFFSET_METADATA_MAX_BYTES: usize = 4096;

/// One group, as stored and as agents see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub generation: i32,
    pub phase: Phase,
    pub protocol_type: Option<String>,
    /// The assignor every member supports, chosen when a generation forms.
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// The leader's assignments for the current generation.
    pub assignments: BTreeMap<String, Vec<u8>>,
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
    /// When (metastore time) the group last had no members; offsets expire
    /// [`OFFSETS_RETENTION_MS`] after this or their commit, whichever is later.
    pub empty_since_ms: i64,
}

impl Default for Group {
    fn default() -> Self {
        Group {
            generation: 0,
            phase: Phase::Empty,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            assignments: BTreeMap::new(),
            offsets: BTreeMap::new(),
            empty_since_ms: 0,
        }
    }
}

impl Group {
    /// The earliest time at which a Tick would change something, if any.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        let sessions = self
            .members
            .values()
            .map(|m| m.last_seen_ms + m.session_timeout_ms as i64);
        let rebalance = match self.phase {
            Phase::Joining { deadline_ms } => Some(deadline_ms),
            _ => None,
        };
        sessions.chain(rebalance).min()
    }

    /// The chosen protocol's metadata of every member (for the leader).
    pub fn member_metadata(&self) -> Vec<(String, Vec<u8>)> {
        let Some(protocol) = &self.protocol else {
            return Vec::new();
        };
        self.members
            .iter()
            .map(|(id, m)| {
                let metadata = m
                    .protocols
                    .iter()
                    .find(|(name, _)| name == protocol)
                    .map(|(_, meta)| meta.clone())
                    .unwrap_or_default();
                (id.clone(), metadata)
            })
            .collect()
    }

    fn start_rebalance(&mut self, now_ms: i64) {
        let timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms as i64)
            .max()
            .unwrap_or(0);
        for m in self.members.values_mut() {
            m.joined = false;
        }
        self.assignments.clear();
        self.phase = Phase::Joining {
            deadline_ms: now_ms + timeout,
        };
    }

    /// Drops members whose session ran out; a rebalance follows if any did.
    fn expire(&mut self, now_ms: i64) {
        let before = self.members.len();
        self.members
            .retain(|_, m| m.last_seen_ms + m.session_timeout_ms as i64 > now_ms);
        if self.members.len() != before {
            self.after_membership_change(now_ms);
        }
    }

    fn after_membership_change(&mut self, now_ms: i64) {
        if self.members.is_empty() {
            self.become_empty(now_ms);
        } else if !matches!(self.phase, Phase::Joining { .. }) {
            self.start_rebalance(now_ms);
        }
    }

    fn become_empty(&mut self, now_ms: i64) {
        self.empty_since_ms = now_ms;
        self.phase = Phase::Empty;
        self.leader = None;
        self.protocol = None;
        self.protocol_type = None;
        self.assignments.clear();
    }

    /// Forms the next generation once every member rejoined or the deadline passed.
    fn try_complete(&mut self, now_ms: i64) {
        let Phase::Joining { deadline_ms } = self.phase else {
            return;
        };
        let all_joined = self.members.values().all(|m| m.joined);
        if !all_joined && now_ms < deadline_ms {
            return;
        }
        self.members.retain(|_, m| m.joined);
        self.generation += 1;
        if self.members.is_empty() {
            self.become_empty(now_ms);
            return;
        }
        if !self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        let leader = &self.members[self.leader.as_ref().expect("set above")];
        self.protocol = leader
            .protocols
            .iter()
            .map(|(name, _)| name)
            .find(|name| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == *name))
            })
            .cloned();
        self.phase = Phase::Syncing;
    }

    /// Checks that `member_id` is in the current, formed `generation`, and
    /// records that it was seen. The order of the checks is Kafka's.
    fn check_member(
        &mut self,
        member_id: &str,
        generation: i32,
        now_ms: i64,
    ) -> Result<(), GroupError> {
        let member = self
            .members
            .get_mut(member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        member.last_seen_ms = now_ms;
        if matches!(self.phase, Phase::Joining { .. }) {
            return Err(GroupError::RebalanceInProgress);
        }
        if generation != self.generation {
            return Err(GroupError::IllegalGeneration);
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Groups {
    groups: BTreeMap<String, Group>,
    next_member: u64,
}

impl Groups {
    /// Forgets offsets past retention in groups without members, and then
    /// groups left with neither members nor offsets.
    pub fn expire_offsets(&mut self, now_ms: i64) {
        let horizon = now_ms.saturating_sub(OFFSETS_RETENTION_MS);
        self.groups.retain(|_, g| {
            if !g.members.is_empty() {
                return true;
            }
            let empty_since = g.empty_since_ms;
            g.offsets
                .retain(|_, o| o.commit_ms.max(empty_since) > horizon);
            !g.offsets.is_empty() || matches!(g.phase, Phase::Joining { .. })
        });
    }

    pub fn get(&self, group: &str) -> Option<&Group> {
        self.groups.get(group)
    }

    pub fn all(&self) -> Vec<(String, Group)> {
        self.groups
            .iter()
            .map(|(n, g)| (n.clone(), g.clone()))
            .collect()
    }

    /// Answers the member id the joiner now has.
    pub fn join(&mut self, join: JoinGroup) -> Result<String, GroupError> {
        let JoinGroup {
            group,
            member_id,
            client_id,
            session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type,
            protocols,
            now_ms,
        } = join;
        if !(MIN_SESSION_TIMEOUT_MS..=MAX_SESSION_TIMEOUT_MS).contains(&session_timeout_ms) {
            return Err(GroupError::InvalidSessionTimeout);
        }
        let next_member = &mut self.next_member;
        let g = self.groups.entry(group).or_default();
        g.expire(now_ms);
        if protocols.is_empty()
            || g.protocol_type
                .as_ref()
                .is_some_and(|t| *t != protocol_type)
            || (!g.members.is_empty()
                && !protocols.iter().any(|(name, _)| {
                    g.members
                        .values()
                        .all(|m| m.protocols.iter().any(|(n, _)| n == name))
                }))
        {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        let member_id = if member_id.is_empty() {
            *next_member += 1;
            format!("{client_id}-{next_member}")
        } else if g.members.contains_key(&member_id) {
            member_id
        } else {
            return Err(GroupError::UnknownMemberId);
        };
        let changed = g
            .members
            .get(&member_id)
            .is_none_or(|m| m.protocols != protocols);
        g.members.insert(
            member_id.clone(),
            Member {
                client_id,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocols,
                last_seen_ms: now_ms,
                joined: true,
            },
        );
        g.protocol_type = Some(protocol_type);
        // A join while stable means the member lost its assignment or
        // changed its subscription: everyone rejoins.
        if !matches!(g.phase, Phase::Joining { .. }) && (changed || g.phase != Phase::Syncing) {
            g.start_rebalance(now_ms);
            g.members.get_mut(&member_id).expect("inserted").joined = true;
        }
        g.try_complete(now_ms);
        Ok(member_id)
    }

    pub fn sync(&mut self, sync: SyncGroup) -> Result<(), GroupError> {
        let SyncGroup {
            group,
            generation,
            member_id,
            assignments,
            now_ms,
        } = sync;
        // Only JoinGroup and standalone offset commits create groups:
        // any name in a Sync, Heartbeat or Leave would otherwise
        // leave a group behind.
        let Some(g) = self.groups.get_mut(&group) else {
            return Err(GroupError::UnknownMemberId);
        };
        g.expire(now_ms);
        let result = g.check_member(&member_id, generation, now_ms);
        if result.is_ok()
            && g.phase == Phase::Syncing
            && g.leader.as_deref() == Some(member_id.as_str())
        {
            g.assignments = assignments
                .into_iter()
                .filter(|(m, _)| g.members.contains_key(m))
                .collect();
            g.phase = Phase::Stable;
        }
        result
    }

    pub fn heartbeat(&mut self, beat: GroupHeartbeat) -> Result<(), GroupError> {
        let GroupHeartbeat {
            group,
            generation,
            member_id,
            now_ms,
        } = beat;
        let Some(g) = self.groups.get_mut(&group) else {
            return Err(GroupError::UnknownMemberId);
        };
        g.expire(now_ms);
        let result = g.check_member(&member_id, generation, now_ms);
        g.try_complete(now_ms);
        result
    }

    /// Answers per member, in order.
    pub fn leave(&mut self, leave: LeaveGroup) -> Vec<Result<(), GroupError>> {
        let LeaveGroup {
            group,
            member_ids,
            now_ms,
        } = leave;
        let Some(g) = self.groups.get_mut(&group) else {
            return member_ids
                .iter()
                .map(|_| Err(GroupError::UnknownMemberId))
                .collect();
        };
        let results = member_ids
            .iter()
            .map(|id| {
                g.members
                    .remove(id)
                    .map(|_| ())
                    .ok_or(GroupError::UnknownMemberId)
            })
            .collect::<Vec<_>>();
        if results.iter().any(Result::is_ok) {
            g.after_membership_change(now_ms);
            g.try_complete(now_ms);
        }
        results
    }

    pub fn tick(&mut self, tick: TickGroup) {
        let TickGroup { group, now_ms } = tick;
        if let Some(g) = self.groups.get_mut(&group) {
            g.expire(now_ms);
            g.try_complete(now_ms);
        }
    }

    pub fn commit_offsets(&mut self, commit: CommitOffsets) -> Result<(), GroupError> {
        let CommitOffsets {
            group,
            generation,
            member_id,
            offsets,
            now_ms,
        } = commit;
        let simple = generation < 0 && member_id.is_empty();
        // As Kafka: a standalone commit (no generation) creates the
        // group to hold its offsets; any other names a generation
        // that cannot exist.
        let g = match self.groups.get_mut(&group) {
            Some(g) => g,
            None if simple => self.groups.entry(group).or_insert_with(|| Group {
                empty_since_ms: now_ms,
                ..Group::default()
            }),
            None => return Err(GroupError::IllegalGeneration),
        };
        g.expire(now_ms);
        let result = if simple && g.members.is_empty() {
            Ok(())
        } else {
            g.check_member(&member_id, generation, now_ms)
        };
        if result.is_ok() {
            for OffsetToCommit {
                topic,
                partition,
                offset,
                metadata,
            } in offsets
            {
                // The agent answers these OFFSET_METADATA_TOO_LARGE;
                // the state never stores them.
                if metadata
                    .as_ref()
                    .is_some_and(|m| m.len() > OFFSET_METADATA_MAX_BYTES)
                {
                    continue;
                }
                g.offsets.insert(
                    (topic, partition),
                    CommittedOffset {
                        offset,
                        metadata,
                        commit_ms: now_ms,
                    },
                );
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(gs: &mut Groups, member: &str, now_ms: i64) -> Result<String, GroupError> {
        gs.join(JoinGroup {
            group: "g".into(),
            member_id: member.into(),
            client_id: "c".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 5_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), member.as_bytes().to_vec())],
            now_ms,
        })
    }

    fn heartbeat(
        gs: &mut Groups,
        member: &str,
        generation: i32,
        now_ms: i64,
    ) -> Result<(), GroupError> {
        gs.heartbeat(GroupHeartbeat {
            group: "g".into(),
            generation,
            member_id: member.into(),
            now_ms,
        })
    }

    fn sync(gs: &mut Groups, member: &str, generation: i32, now_ms: i64) -> Result<(), GroupError> {
        gs.sync(SyncGroup {
            group: "g".into(),
            generation,
            member_id: member.into(),
            assignments: vec![(member.into(), b"all".to_vec())],
            now_ms,
        })
    }

    #[test]
    fn a_lone_member_forms_a_generation_at_once() {
        let mut gs = Groups::default();
        let m = join(&mut gs, "", 0).unwrap();
        let g = gs.get("g").unwrap();
        assert_eq!(
            (g.generation, g.phase, g.leader.as_deref()),
            (1, Phase::Syncing, Some(m.as_str()))
        );
        assert_eq!(g.protocol.as_deref(), Some("range"));
        sync(&mut gs, &m, 1, 10).unwrap();
        let g = gs.get("g").unwrap();
        assert_eq!(g.phase, Phase::Stable);
        assert_eq!(g.assignments[&m], b"all".to_vec());
        heartbeat(&mut gs, &m, 1, 20).unwrap();
        assert_eq!(
            heartbeat(&mut gs, &m, 0, 20),
            Err(GroupError::IllegalGeneration)
        );
        assert_eq!(
            heartbeat(&mut gs, "nobody", 1, 20),
            Err(GroupError::UnknownMemberId)
        );
    }

    #[test]
    fn a_second_member_triggers_a_rebalance_everyone_joins() {
        let mut gs = Groups::default();
        let a = join(&mut gs, "", 0).unwrap();
        sync(&mut gs, &a, 1, 0).unwrap();
        let b = join(&mut gs, "", 100).unwrap();
        assert!(matches!(gs.get("g").unwrap().phase, Phase::Joining { .. }));
        // `a` learns of the rebalance through its heartbeat, then rejoins.
        assert_eq!(
            heartbeat(&mut gs, &a, 1, 200),
            Err(GroupError::RebalanceInProgress)
        );
        join(&mut gs, &a, 300).unwrap();
        let g = gs.get("g").unwrap();
        assert_eq!((g.generation, g.phase), (2, Phase::Syncing));
        assert_eq!(g.member_metadata().len(), 2);
        assert_eq!(
            g.leader.as_deref(),
            Some(a.as_str()),
            "the leader stays the leader"
        );
        sync(&mut gs, &b, 2, 400).unwrap();
        assert_eq!(
            gs.get("g").unwrap().phase,
            Phase::Syncing,
            "a follower's sync does not finish it"
        );
        sync(&mut gs, &a, 2, 400).unwrap();
        assert_eq!(gs.get("g").unwrap().phase, Phase::Stable);
    }

    #[test]
    fn members_that_do_not_rejoin_are_dropped_at_the_deadline() {
        let mut gs = Groups::default();
        let a = join(&mut gs, "", 0).unwrap();
        sync(&mut gs, &a, 1, 0).unwrap();
        let b = join(&mut gs, "", 0).unwrap();
        join(&mut gs, &a, 0).unwrap();
        sync(&mut gs, &a, 2, 0).unwrap();
        assert_eq!(gs.get("g").unwrap().phase, Phase::Stable);
        // A third member joins; a rejoins, b never does.
        let c = join(&mut gs, "", 1_000).unwrap();
        join(&mut gs, &a, 1_100).unwrap();
        assert_eq!(
            gs.get("g").unwrap().phase,
            Phase::Joining { deadline_ms: 6_000 }
        );
        gs.tick(TickGroup {
            group: "g".into(),
            now_ms: 5_999,
        });
        assert_eq!(gs.get("g").unwrap().generation, 2);
        gs.tick(TickGroup {
            group: "g".into(),
            now_ms: 6_000,
        });
        let g = gs.get("g").unwrap();
        assert_eq!((g.generation, g.phase), (3, Phase::Syncing));
        assert!(
            g.members.contains_key(&a) && g.members.contains_key(&c) && !g.members.contains_key(&b)
        );
    }

    #[test]
    fn silent_members_expire_and_leaving_empties_the_group() {
        let mut gs = Groups::default();
        let a = join(&mut gs, "", 0).unwrap();
        sync(&mut gs, &a, 1, 0).unwrap();
        gs.tick(TickGroup {
            group: "g".into(),
            now_ms: 10_001,
        });
        assert_eq!(gs.get("g").unwrap().phase, Phase::Empty);
        let b = join(&mut gs, "", 20_000).unwrap();
        let left = gs.leave(LeaveGroup {
            group: "g".into(),
            member_ids: vec![b, "x".into()],
            now_ms: 20_001,
        });
        assert_eq!(left, vec![Ok(()), Err(GroupError::UnknownMemberId)]);
        assert_eq!(gs.get("g").unwrap().phase, Phase::Empty);
    }

    #[test]
    fn offset_commits_check_membership_unless_simple() {
        let mut gs = Groups::default();
        let commit = |gs: &mut Groups, generation: i32, member: &str| {
            gs.commit_offsets(CommitOffsets {
                group: "g".into(),
                generation,
                member_id: member.into(),
                offsets: vec![OffsetToCommit {
                    topic: "t".into(),
                    partition: 0,
                    offset: 42,
                    metadata: None,
                }],
                now_ms: 0,
            })
        };
        commit(&mut gs, -1, "").unwrap();
        assert_eq!(
            gs.get("g").unwrap().offsets[&("t".to_string(), 0)].offset,
            42
        );
        let a = join(&mut gs, "", 0).unwrap();
        assert_eq!(commit(&mut gs, -1, ""), Err(GroupError::UnknownMemberId));
        assert_eq!(commit(&mut gs, 7, &a), Err(GroupError::IllegalGeneration));
        commit(&mut gs, 1, &a).unwrap();
    }

    #[test]
    fn protocols_must_be_shared() {
        let mut gs = Groups::default();
        join(&mut gs, "", 0).unwrap();
        let reply = gs.join(JoinGroup {
            group: "g".into(),
            member_id: String::new(),
            client_id: "c".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 5_000,
            protocol_type: "consumer".into(),
            protocols: vec![("roundrobin".into(), vec![])],
            now_ms: 0,
        });
        assert_eq!(reply, Err(GroupError::InconsistentGroupProtocol));
    }
}
