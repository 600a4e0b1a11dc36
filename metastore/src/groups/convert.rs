//! Groups moving between the classic and the consumer protocol while they
//! have members (Kafka 4's online migration, KIP-848): a rolling restart
//! moves an application to `group.protocol=consumer` one member at a time,
//! and a rollback moves it back. The rules are those of Kafka's
//! `GroupMetadataManager` (`convertToConsumerGroup`,
//! `convertToClassicGroup`), `ConsumerGroup.fromClassicGroup` and
//! `ClassicGroup.fromConsumerGroup`; `docs/plans/group-conversion.md` lists
//! them.
//!
//! - **Upgrade**: a consumer-protocol member joining a classic group with
//!   members turns it into a consumer group. Each classic member becomes a
//!   member at the classic generation, owning (and targeted at) what the
//!   classic leader last assigned it; the joiner then bumps the epoch.
//! - **Classic members in a consumer group** keep using JoinGroup, SyncGroup
//!   and Heartbeat ([`ConsumerGroup::classic_join`] and its siblings).
//! - **Downgrade**: when the last consumer-protocol member goes and classic
//!   members remain, the group becomes a classic group again, at once in a
//!   rebalance, so the classic members reassign among themselves.
//!
//! Conversions keep the invariant that no partition is owned by two
//! members: an upgrade gives each partition to at most one member (the
//! first that the classic assignments name), and a downgrade owns nothing
//! until the next generation forms.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::assign::Partitions;
use super::consumer::{ConsumerMember, Reconciliation};
use super::*;

/// The rules a group command is applied with. A JoinGroup or
/// ConsumerGroupHeartbeat logged by format 8 (before groups with members
/// converted) is replayed as it was applied then, so replicas agree whatever
/// their snapshot's place in the log; one logged since migrates as the
/// cluster's policy says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rules {
    Format8,
    Migrating(MigrationPolicy),
}

/// What a member of a consumer group that speaks the classic protocol
/// brought with its JoinGroup (Kafka's `ClassicMemberMetadata`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassicMeta {
    /// Its assignors and their metadata, in its order of preference.
    pub protocols: Vec<(String, Vec<u8>)>,
}

impl ClassicMeta {
    /// The protocol its answers name (Kafka: the member's first).
    pub fn protocol(&self) -> &str {
        self.protocols.first().map_or("", |(name, _)| name)
    }

    /// Its metadata for its first protocol.
    pub fn subscription(&self) -> &[u8] {
        self.protocols.first().map_or(&[], |(_, meta)| meta)
    }
}

/// Partitions named by topic, as the state knows them now: unknown topics
/// and partitions past a topic's count are dropped.
pub(super) fn by_id(named: &TopicPartitions, topics: &dyn TopicLookup) -> Partitions {
    let mut out = Partitions::new();
    for (topic, partitions) in named {
        if let Some((id, count)) = topics.find(topic) {
            let valid = partitions.iter().filter(|p| (0..count).contains(*p));
            out.entry(id).or_default().extend(valid);
        }
    }
    out.retain(|_, ps| !ps.is_empty());
    out
}

/// Whether a classic group may become a consumer group now (Kafka's
/// `validateOnlineUpgrade`): the policy allows it, it is a `consumer` group,
/// and every member's subscription and last assignment could be read
/// (Kafka refuses a group whose embedded protocol does not decode).
pub(super) fn can_upgrade(group: &Group, policy: MigrationPolicy) -> bool {
    policy.upgrades()
        && group.protocol_type.as_deref() == Some("consumer")
        && group.members.len() < MAX_GROUP_SIZE
        && group
            .members
            .values()
            .all(|m| m.subscribed_topics.is_some())
        && !group.members.keys().any(|id| group.undecoded.contains(id))
}

/// Whether what each member was last assigned is known: its last sync was
/// read by a floe of format 9 (or there was none). A group last synced
/// before cannot be taken over yet: its members would be taken to own
/// nothing while they consume.
pub(super) fn ownership_known(group: &Group) -> bool {
    group.assignments_generation < 0
        || group.decoded_generation == Some(group.assignments_generation)
}

/// Kafka's `ConsumerGroup.fromClassicGroup`: the group at the classic
/// generation, each member owning (and targeted at) what the leader last
/// assigned it. A member with no readable assignment (it never synced, or
/// the leader's assignment was not the consumer protocol's) owns nothing; a
/// partition two assignments name goes to the first member only.
pub(super) fn to_consumer(
    classic: Group,
    topics: &dyn TopicLookup,
    heartbeat_interval_ms: i32,
    now_ms: i64,
) -> ConsumerGroup {
    let generation = classic.generation;
    let mut taken: BTreeSet<(crate::types::TopicId, i32)> = BTreeSet::new();
    let mut members = BTreeMap::new();
    // What members said they owned at their last JoinGroup and were not
    // assigned since: a cooperative member may still be giving it up.
    let mut giving_up: BTreeMap<String, Partitions> = BTreeMap::new();
    for (id, m) in &classic.members {
        if let Some(owned) = &m.owned {
            giving_up.insert(id.clone(), by_id(owned, topics));
        }
    }
    for (id, m) in classic.members {
        // What its last completed sync gave it, even if a rebalance began
        // since: a cooperative member still consumes it, and an eager one
        // that gave it up costs the newcomer only a wait.
        let mut assigned = classic
            .decoded
            .get(&id)
            .map_or_else(Partitions::new, |named| by_id(named, topics));
        for (topic, partitions) in &mut assigned {
            partitions.retain(|p| taken.insert((*topic, *p)));
        }
        assigned.retain(|_, ps| !ps.is_empty());
        let mut subscribed_topics = m.subscribed_topics.unwrap_or_default();
        subscribed_topics.sort();
        subscribed_topics.dedup();
        members.insert(
            id,
            ConsumerMember {
                epoch: generation,
                previous_epoch: generation,
                state: Reconciliation::Stable,
                instance_id: m.instance_id,
                rack_id: None,
                client_id: m.client_id,
                client_host: m.client_host,
                subscribed_topics,
                subscribed_regex: None,
                assignor: None,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                session_timeout_ms: m.session_timeout_ms,
                heartbeat_interval_ms,
                target: assigned.clone(),
                assigned,
                revoking: Partitions::new(),
                // A new session from now, as Kafka schedules one for each
                // converted member (one waiting in a JoinGroup sent no
                // heartbeats, which the classic group did not need).
                last_seen_ms: now_ms,
                revoke_deadline_ms: None,
                classic: Some(ClassicMeta {
                    protocols: m.protocols,
                }),
            },
        );
    }
    // Then what they may still be giving up, where no assignment (which
    // comes first) names it: never a partition twice.
    for (id, owned) in giving_up {
        let Some(m) = members.get_mut(&id) else {
            continue;
        };
        let mut revoking = consumer::minus(&owned, &m.assigned);
        for (topic, partitions) in &mut revoking {
            partitions.retain(|p| taken.insert((*topic, *p)));
        }
        revoking.retain(|_, ps| !ps.is_empty());
        if !revoking.is_empty() {
            m.revoking = revoking;
            m.state = Reconciliation::UnrevokedPartitions;
            m.revoke_deadline_ms = Some(now_ms + m.grace_ms());
        }
    }
    let mut group = ConsumerGroup {
        epoch: generation,
        assignment_epoch: generation,
        members,
        instances: classic.instances,
        offsets: classic.offsets,
        empty_since_ms: classic.empty_since_ms,
        ..ConsumerGroup::default()
    };
    group.refresh_subscriptions(topics, now_ms);
    group
}

/// Whether a consumer group has only classic members left and may become
/// a classic group (Kafka's `validateOnlineDowngrade`), and they are all
/// reconciled at the group's epoch. Kafka downgrades at once; floe waits
/// until the members agree on one epoch (they rejoin when told, as for any
/// new epoch), so the classic generation is every member's: none is told
/// ILLEGAL_GENERATION, and a cooperative assignor never sees owned
/// partitions of an older generation (which it would take as unowned and
/// give to another member while their owner still consumes them).
pub(super) fn can_downgrade(group: &ConsumerGroup, policy: MigrationPolicy) -> bool {
    policy.downgrades()
        && !group.members.is_empty()
        && group.epoch == group.assignment_epoch
        && group.members.values().all(|m| {
            m.classic.is_some() && m.epoch == group.epoch && m.state == Reconciliation::Stable
        })
}

/// Kafka's `ClassicGroup.fromConsumerGroup` followed by its rebalance: a
/// classic group at the members' epoch (see [`can_downgrade`]), already
/// preparing the next generation, so the classic members rejoin and their
/// leader assigns. Nothing is assigned until then (Kafka keeps the consumer
/// group's targets as the stable generation's assignments, which only a
/// member that does not rejoin would read); what each member holds is kept
/// readable for a later upgrade.
pub(super) fn to_classic(consumer: ConsumerGroup, topics: &dyn TopicLookup, now_ms: i64) -> Group {
    let generation = consumer.epoch;
    // Every topic a member holds partitions of, subscribed or not.
    let names: BTreeMap<crate::types::TopicId, String> = topics
        .names()
        .into_iter()
        .filter_map(|name| Some((topics.find(&name)?.0, name)))
        .collect();
    let mut group = Group {
        generation,
        protocol_type: Some("consumer".into()),
        instances: consumer.instances,
        offsets: consumer.offsets,
        empty_since_ms: consumer.empty_since_ms,
        ..Group::default()
    };
    for (id, m) in consumer.members {
        let mut held = m.assigned.clone();
        for (t, ps) in &m.revoking {
            held.entry(*t).or_default().extend(ps);
        }
        let named: TopicPartitions = held
            .iter()
            .filter_map(|(t, ps)| Some((names.get(t)?.clone(), ps.iter().copied().collect())))
            .collect();
        group.decoded.insert(id.clone(), named.clone());
        group.members.insert(
            id,
            Member {
                instance_id: m.instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                session_timeout_ms: m.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                protocols: m.classic.map(|c| c.protocols).unwrap_or_default(),
                subscribed_topics: Some(m.subscribed_topics),
                last_seen_ms: now_ms,
                joined: false,
                awaiting_sync: false,
                owned: Some(named.clone()),
            },
        );
    }
    group.leader = group.members.keys().next().cloned();
    group.protocol = group.select_protocol();
    group.start_rebalance(now_ms);
    group
}

impl Groups {
    /// A consumer-protocol member joins a classic group that has members:
    /// the group is upgraded if the policy and its members allow, and the
    /// member joins it; else GROUP_ID_NOT_FOUND (Kafka's answer). Nothing
    /// changes if the join is refused.
    pub(super) fn upgrade_and_join(
        &mut self,
        hb: ConsumerHeartbeat,
        topics: &dyn TopicLookup,
        policy: MigrationPolicy,
    ) -> Result<ConsumerAnswer, GroupError> {
        // Refused before anything is converted.
        ConsumerGroup::default().check(&hb)?;
        let classic = self.groups.get(&hb.group).expect("checked by the caller");
        if !can_upgrade(classic, policy) {
            return Err(GroupError::GroupIdNotFound);
        }
        if !ownership_known(classic) {
            // Synced before format 9: a rebalance makes the leader sync
            // again, read this time; the newcomer retries meanwhile.
            let classic = self.groups.get_mut(&hb.group).expect("just seen");
            if matches!(classic.phase, Phase::Stable | Phase::Syncing) {
                classic.start_rebalance(hb.now_ms);
                classic.version += 1;
            }
            return Err(GroupError::CoordinatorLoadInProgress);
        }
        let mut upgraded =
            to_consumer(classic.clone(), topics, hb.heartbeat_interval_ms, hb.now_ms);
        let group = hb.group.clone();
        let answer = upgraded.heartbeat(hb, topics)?;
        self.groups.remove(&group);
        self.consumer.insert(group, upgraded);
        Ok(answer)
    }

    /// After members left a consumer group: classic members alone remain
    /// and the policy allows it, the group becomes a classic group.
    pub(super) fn maybe_downgrade(
        &mut self,
        group: &str,
        topics: &dyn TopicLookup,
        now_ms: i64,
        policy: MigrationPolicy,
    ) {
        if !self
            .consumer
            .get(group)
            .is_some_and(|g| can_downgrade(g, policy))
        {
            return;
        }
        let consumer = self.consumer.remove(group).expect("just seen");
        self.groups
            .insert(group.to_string(), to_classic(consumer, topics, now_ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::TopicId;

    struct Topics;

    const T: TopicId = TopicId::from_u128(7);

    impl TopicLookup for Topics {
        fn find(&self, name: &str) -> Option<(TopicId, i32)> {
            (name == "t").then_some((T, 6))
        }
        fn names(&self) -> Vec<String> {
            vec!["t".into()]
        }
    }

    const COOPERATIVE: &str = "cooperative-sticky";

    /// A classic member's JoinGroup, `owned` as its subscription says.
    fn join(member: &str, fresh: &str, owned: Option<&[i32]>, now_ms: i64) -> JoinGroup {
        JoinGroup {
            group: "g".into(),
            member_id: member.into(),
            instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 5_000,
            protocol_type: "consumer".into(),
            protocols: vec![(COOPERATIVE.into(), b"sub".to_vec())],
            subscribed_topics: Some(vec!["t".into()]),
            require_known_member_id: false,
            fresh_id: fresh.into(),
            now_ms,
            owned: owned.map(|ps| vec![("t".to_string(), ps.to_vec())]),
            rules: JoinRules::BEFORE_FORMAT_11,
        }
    }

    fn sync(member: &str, generation: i32, given: &[(&str, &[i32])], now_ms: i64) -> SyncGroup {
        SyncGroup {
            group: "g".into(),
            generation,
            member_id: member.into(),
            instance_id: None,
            protocol_type: Some("consumer".into()),
            protocol: Some(COOPERATIVE.into()),
            assignments: given
                .iter()
                .map(|(m, _)| (m.to_string(), b"bytes".to_vec()))
                .collect(),
            decoded: given
                .iter()
                .map(|(m, ps)| (m.to_string(), vec![("t".to_string(), ps.to_vec())]))
                .collect(),
            now_ms,
            decodes: true,
        }
    }

    fn beat(member: &str, generation: i32) -> GroupHeartbeat {
        GroupHeartbeat {
            group: "g".into(),
            generation,
            member_id: member.into(),
            instance_id: None,
        }
    }

    fn consumer_join(now_ms: i64) -> ConsumerHeartbeat {
        ConsumerHeartbeat {
            group: "g".into(),
            member_id: "new".into(),
            member_epoch: JOIN_EPOCH,
            instance_id: None,
            rack_id: None,
            rebalance_timeout_ms: 5_000,
            subscribed_topics: Some(vec!["t".into()]),
            subscribed_regex: None,
            assignor: None,
            owned: Some(vec![]),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            now_ms,
            describer: None,
        }
    }

    /// A classic group of two members, a and b, stable at generation 2
    /// with 0-2 and 3-5 (the first generation formed with a alone).
    fn classic_pair() -> Groups {
        let mut gs = Groups::default();
        for fresh in ["a", "b"] {
            assert!(matches!(
                gs.join(join("", fresh, None, 0), &Topics, TEST_RULES),
                Ok(Joined::Member(_))
            ));
        }
        let _ = gs.join(join("c-a", "x", None, 0), &Topics, TEST_RULES);
        assert_eq!(gs.get("g").unwrap().generation, 2);
        let both: &[(&str, &[i32])] = &[("c-a", &[0, 1, 2]), ("c-b", &[3, 4, 5])];
        assert_eq!(gs.sync(sync("c-a", 2, both, 1)), Ok(None));
        assert_eq!(gs.sync(sync("c-b", 2, &[], 1)), Ok(None));
        assert_eq!(gs.get("g").unwrap().phase, Phase::Stable);
        gs
    }

    fn owners(gs: &Groups) -> BTreeMap<i32, Vec<String>> {
        let mut owners: BTreeMap<i32, Vec<String>> = BTreeMap::new();
        for (id, m) in &gs.consumer_group("g").unwrap().members {
            for p in m.assigned.values().chain(m.revoking.values()).flatten() {
                owners.entry(*p).or_default().push(id.clone());
            }
        }
        owners
    }

    fn no_partition_owned_twice(gs: &Groups) {
        for (p, who) in owners(gs) {
            assert!(who.len() <= 1, "partition {p} owned by {who:?}");
        }
    }

    #[test]
    fn a_consumer_member_upgrades_a_classic_group_and_cooperative_members_hand_over() {
        let mut gs = classic_pair();
        let policy = MigrationPolicy::Bidirectional;
        // The consumer-protocol member joins: the group is upgraded at
        // generation 1, a and b keep what they own, the newcomer waits.
        let new = gs
            .consumer_heartbeat(consumer_join(10), &Topics, Rules::Migrating(policy))
            .unwrap();
        assert!(gs.get("g").is_none(), "no longer a classic group");
        let g = gs.consumer_group("g").unwrap();
        assert_eq!(g.epoch, 3);
        assert_eq!(g.members["c-a"].epoch, 2);
        assert_eq!(new.assignment, Some(vec![]), "all six are still owned");
        no_partition_owned_twice(&gs);
        assert_eq!(gs.list()[0].group_type, "consumer");
        // Classic members learn of it from their heartbeat.
        assert_eq!(
            gs.check_heartbeat(&beat("c-a", 2)),
            (Err(GroupError::RebalanceInProgress), true)
        );
        assert_eq!(
            gs.check_heartbeat(&beat("c-a", 1)),
            (Err(GroupError::IllegalGeneration), false)
        );
        // a rejoins owning 0-2 (cooperative): it keeps its share, must give
        // up the rest, and stays at its epoch meanwhile.
        let Ok(Joined::InConsumerGroup {
            generation,
            protocol,
            ..
        }) = gs.join(join("c-a", "x", Some(&[0, 1, 2]), 20), &Topics, TEST_RULES)
        else {
            panic!()
        };
        assert_eq!((generation, protocol.as_str()), (2, COOPERATIVE));
        let kept = gs.sync(sync("c-a", 2, &[], 21)).unwrap().unwrap();
        assert_eq!(kept.subscription, b"sub".to_vec());
        let kept: Vec<i32> = kept.partitions[0].1.clone();
        assert_eq!(kept.len(), 2, "a keeps two of six for three members");
        // Its commit in the revoke callback, at its generation, is taken.
        let commit = CommitOffsets {
            group: "g".into(),
            generation: 2,
            member_id: "c-a".into(),
            instance_id: None,
            offsets: vec![],
            now_ms: 22,
        };
        assert_eq!(gs.commit_offsets(commit.clone()), Ok(()));
        no_partition_owned_twice(&gs);
        // a rejoins without the revoked one: it moves to epoch 3.
        let Ok(Joined::InConsumerGroup { generation, .. }) =
            gs.join(join("c-a", "x", Some(&kept), 30), &Topics, TEST_RULES)
        else {
            panic!()
        };
        assert_eq!(generation, 3);
        assert_eq!(gs.check_heartbeat(&beat("c-a", 3)), (Ok(()), true));
        // An old generation's commit is refused as the classic client knows.
        assert_eq!(
            gs.commit_offsets(commit),
            Err(GroupError::IllegalGeneration)
        );
        // b does the same; then the newcomer receives what they gave up.
        let _ = gs.join(join("c-b", "x", Some(&[3, 4, 5]), 40), &Topics, TEST_RULES);
        let b_kept = gs
            .sync(sync("c-b", 2, &[], 41))
            .unwrap()
            .unwrap()
            .partitions[0]
            .1
            .clone();
        let _ = gs.join(join("c-b", "x", Some(&b_kept), 42), &Topics, TEST_RULES);
        let mut hb = consumer_join(50);
        hb.member_epoch = 3;
        hb.owned = None;
        hb.subscribed_topics = None;
        hb.rebalance_timeout_ms = -1;
        let got = gs
            .consumer_heartbeat(hb, &Topics, Rules::Migrating(policy))
            .unwrap();
        assert_eq!(got.assignment.map(|a| a[0].1.len()), Some(2));
        no_partition_owned_twice(&gs);
        assert_eq!(owners(&gs).len(), 6, "every partition owned");
        assert_eq!(gs.consumer_group("g").unwrap().state_name(), "Stable");
    }

    #[test]
    fn an_eager_member_gives_up_at_once_and_the_last_consumer_member_leaving_downgrades() {
        let mut gs = classic_pair();
        let policy = MigrationPolicy::Bidirectional;
        gs.consumer_heartbeat(consumer_join(10), &Topics, Rules::Migrating(policy))
            .unwrap();
        // Eager: a rejoins owning nothing; its share moves on at once.
        let Ok(Joined::InConsumerGroup { generation, .. }) =
            gs.join(join("c-a", "x", None, 20), &Topics, TEST_RULES)
        else {
            panic!()
        };
        assert_eq!(generation, 3);
        no_partition_owned_twice(&gs);
        // The consumer member leaves: a and b are classic members alone,
        // but at different epochs (b never rejoined): the group stays a
        // consumer group until they agree, as any new epoch has them rejoin.
        let mut leave = consumer_join(30);
        leave.member_epoch = LEAVE_EPOCH;
        gs.consumer_heartbeat(leave, &Topics, Rules::Migrating(policy))
            .unwrap();
        assert_eq!(gs.consumer_group("g").unwrap().epoch, 4);
        assert_eq!(
            gs.check_heartbeat(&beat("c-b", 2)),
            (Err(GroupError::RebalanceInProgress), true)
        );
        let _ = gs.join(join("c-a", "x", None, 31), &Topics, TEST_RULES);
        assert!(gs.consumer_group("g").is_some(), "b is still at epoch 2");
        // b rejoins: both are at epoch 4, and the group is classic again,
        // at that generation, preparing the next.
        let _ = gs.join(join("c-b", "x", Some(&[3, 4, 5]), 32), &Topics, TEST_RULES);
        assert!(gs.consumer_group("g").is_none());
        let g = gs.get("g").unwrap();
        assert_eq!(g.state_name(), "PreparingRebalance");
        assert_eq!(g.generation, 4);
        assert_eq!(g.protocol.as_deref(), Some(COOPERATIVE));
        for member in ["c-a", "c-b"] {
            assert_eq!(
                gs.check_heartbeat(&beat(member, 4)),
                (Err(GroupError::RebalanceInProgress), true)
            );
        }
        // Both rejoin: generation 5 forms, with a leader to assign.
        let _ = gs.join(join("c-a", "x", None, 40), &Topics, TEST_RULES);
        let _ = gs.join(join("c-b", "x", None, 41), &Topics, TEST_RULES);
        let g = gs.get("g").unwrap();
        assert_eq!((g.generation, g.state_name()), (5, "CompletingRebalance"));
        assert!(g.leader.is_some());
    }

    #[test]
    fn an_upgrade_while_a_generation_forms_keeps_what_members_last_synced() {
        let mut gs = classic_pair();
        // A third classic member: a generation forms (its assignments not
        // yet made) while a and b still consume what they synced.
        let _ = gs.join(join("", "c", None, 5), &Topics, TEST_RULES);
        let _ = gs.join(join("c-a", "x", None, 5), &Topics, TEST_RULES);
        let _ = gs.join(join("c-b", "x", None, 5), &Topics, TEST_RULES);
        assert_eq!(gs.get("g").unwrap().state_name(), "CompletingRebalance");
        let new = gs
            .consumer_heartbeat(
                consumer_join(10),
                &Topics,
                Rules::Migrating(MigrationPolicy::Bidirectional),
            )
            .unwrap();
        assert_eq!(new.assignment, Some(vec![]), "nothing is free");
        let g = gs.consumer_group("g").unwrap();
        let held =
            |m: &str| -> Vec<i32> { g.members[m].assigned.values().flatten().copied().collect() };
        assert_eq!(
            (held("c-a"), held("c-b"), held("c-c")),
            (vec![0, 1, 2], vec![3, 4, 5], vec![])
        );
        no_partition_owned_twice(&gs);
    }

    #[test]
    fn an_upgrade_keeps_what_a_cooperative_member_is_still_giving_up() {
        // a joined owning 0-5, its sync gave it 0-2 only: until it rejoins
        // it may still be consuming 3-5 (in its revoke callback).
        let mut gs = Groups::default();
        let Ok(Joined::Member(a)) = gs.join(
            join("", "a", Some(&[0, 1, 2, 3, 4, 5]), 0),
            &Topics,
            TEST_RULES,
        ) else {
            panic!()
        };
        assert_eq!(gs.sync(sync(&a, 1, &[(&a, &[0, 1, 2])], 1)), Ok(None));
        let new = gs
            .consumer_heartbeat(consumer_join(10), &Topics, TEST_RULES)
            .unwrap();
        assert_eq!(new.assignment, Some(vec![]), "3-5 are still a's");
        let m = &gs.consumer_group("g").unwrap().members[&a];
        assert_eq!(m.state, Reconciliation::UnrevokedPartitions);
        assert!(m.revoke_deadline_ms.is_some());
        no_partition_owned_twice(&gs);
    }

    #[test]
    fn the_policy_decides_which_conversions_happen() {
        // Disabled: the consumer member is refused and nothing changes.
        let mut gs = classic_pair();
        let before = gs.clone();
        assert_eq!(
            gs.consumer_heartbeat(
                consumer_join(10),
                &Topics,
                Rules::Migrating(MigrationPolicy::Disabled)
            ),
            Err(GroupError::GroupIdNotFound)
        );
        assert_eq!(gs, before);
        assert_eq!(
            gs.consumer_heartbeat(
                consumer_join(10),
                &Topics,
                Rules::Migrating(MigrationPolicy::Downgrade)
            ),
            Err(GroupError::GroupIdNotFound)
        );
        // Upgrade only: the group stays a consumer group when the consumer
        // member leaves, and still serves its classic members.
        let policy = MigrationPolicy::Upgrade;
        gs.consumer_heartbeat(consumer_join(10), &Topics, Rules::Migrating(policy))
            .unwrap();
        let mut leave = consumer_join(30);
        leave.member_epoch = LEAVE_EPOCH;
        gs.consumer_heartbeat(leave, &Topics, Rules::Migrating(policy))
            .unwrap();
        assert!(gs.consumer_group("g").is_some());
        assert!(matches!(
            gs.join(join("c-a", "x", None, 40), &Topics, TEST_RULES),
            Ok(Joined::InConsumerGroup { .. })
        ));
        // A classic group whose members' subscriptions are unknown cannot
        // be upgraded.
        let mut gs = classic_pair();
        gs.groups
            .get_mut("g")
            .unwrap()
            .members
            .get_mut("c-a")
            .unwrap()
            .subscribed_topics = None;
        assert_eq!(
            gs.consumer_heartbeat(
                consumer_join(10),
                &Topics,
                Rules::Migrating(MigrationPolicy::Bidirectional)
            ),
            Err(GroupError::GroupIdNotFound)
        );
    }

    #[test]
    fn unread_assignments_and_format_8_commands_convert_nothing() {
        let bidirectional = Rules::Migrating(MigrationPolicy::Bidirectional);
        // A current assignment that did not read as the consumer protocol's.
        let mut gs = classic_pair();
        gs.groups
            .get_mut("g")
            .unwrap()
            .undecoded
            .insert("c-b".into());
        assert_eq!(
            gs.consumer_heartbeat(consumer_join(10), &Topics, bidirectional),
            Err(GroupError::GroupIdNotFound)
        );
        // A group last synced before format 9 (what its members hold is
        // unknown): the newcomer retries while the group rebalances, and its
        // leader's next sync is read.
        let mut gs = classic_pair();
        gs.groups.get_mut("g").unwrap().decoded_generation = None;
        assert_eq!(
            gs.consumer_heartbeat(consumer_join(10), &Topics, bidirectional),
            Err(GroupError::CoordinatorLoadInProgress)
        );
        assert_eq!(gs.get("g").unwrap().state_name(), "PreparingRebalance");
        // A heartbeat logged by format 8 is applied as format 8 did.
        let mut gs = classic_pair();
        assert_eq!(
            gs.consumer_heartbeat(consumer_join(10), &Topics, Rules::Format8),
            Err(GroupError::GroupIdNotFound)
        );
        gs.consumer_heartbeat(consumer_join(10), &Topics, bidirectional)
            .unwrap();
        // And a JoinGroup of format 8 to a consumer group with members.
        assert_eq!(
            gs.join(join("", "z", None, 20), &Topics, Rules::Format8),
            Err(GroupError::InconsistentGroupProtocol)
        );
    }

    #[test]
    fn members_keep_to_their_protocol_and_the_group_to_its_size() {
        let mut gs = classic_pair();
        let rules = Rules::Migrating(MigrationPolicy::Bidirectional);
        gs.consumer_heartbeat(consumer_join(10), &Topics, rules)
            .unwrap();
        // A classic member's id is not the consumer protocol's to use...
        let mut as_consumer = consumer_join(20);
        as_consumer.member_id = "c-a".into();
        assert_eq!(
            gs.consumer_heartbeat(as_consumer, &Topics, rules),
            Err(GroupError::UnknownMemberId)
        );
        // ...nor the other way round.
        assert_eq!(
            gs.join(join("new", "x", None, 20), &Topics, rules),
            Err(GroupError::UnknownMemberId)
        );
        // LeaveGroup removes classic members only.
        let left = gs.leave(
            LeaveGroup {
                group: "g".into(),
                members: vec![Leaving {
                    member_id: "new".into(),
                    instance_id: None,
                }],
                now_ms: 21,
            },
            &Topics,
            MigrationPolicy::Bidirectional,
        );
        assert_eq!(left, vec![Err(GroupError::UnknownMemberId)]);
        // Unknown ids join as members (Kafka's rule) up to the group's size.
        let g = gs.consumer.get_mut("g").unwrap();
        let filler = g.members["c-a"].clone();
        for n in g.members.len()..MAX_GROUP_SIZE {
            g.members.insert(format!("filler-{n}"), filler.clone());
        }
        assert_eq!(
            gs.join(join("random-id", "x", None, 30), &Topics, rules),
            Err(GroupError::GroupMaxSizeReached)
        );
    }

    #[test]
    fn a_static_member_restarted_with_the_consumer_protocol_takes_its_place() {
        let mut gs = Groups::default();
        let rules = Rules::Migrating(MigrationPolicy::Bidirectional);
        let mut static_join = join("", "1", None, 0);
        static_join.instance_id = Some("i".into());
        let Ok(Joined::Member(id)) = gs.join(static_join, &Topics, rules) else {
            panic!()
        };
        assert_eq!(
            gs.sync(sync(&id, 1, &[(&id, &[0, 1, 2, 3, 4, 5])], 1)),
            Ok(None)
        );
        // The same instance comes back speaking the consumer protocol.
        let mut hb = consumer_join(10);
        hb.instance_id = Some("i".into());
        let answer = gs.consumer_heartbeat(hb, &Topics, rules).unwrap();
        let g = gs.consumer_group("g").unwrap();
        assert_eq!(g.members.keys().collect::<Vec<_>>(), vec!["new"]);
        assert_eq!(answer.assignment.map(|a| a[0].1.len()), Some(6));
    }

    #[test]
    fn a_group_with_only_ids_handed_out_is_empty_to_a_consumer_member() {
        let mut gs = Groups::default();
        let mut pending = join("", "p", None, 0);
        pending.require_known_member_id = true;
        assert!(matches!(
            gs.join(pending, &Topics, TEST_RULES),
            Ok(Joined::MemberIdRequired(_))
        ));
        let answer = gs
            .consumer_heartbeat(consumer_join(10), &Topics, TEST_RULES)
            .unwrap();
        assert_eq!(answer.assignment.map(|a| a[0].1.len()), Some(6));
    }

    #[test]
    fn a_classic_member_that_does_not_rejoin_in_time_is_fenced() {
        let mut gs = classic_pair();
        let policy = MigrationPolicy::Upgrade;
        gs.consumer_heartbeat(consumer_join(10), &Topics, Rules::Migrating(policy))
            .unwrap();
        let deadline = gs.consumer_group("g").unwrap().next_deadline_ms();
        // Its rebalance timeout, and its session to hear of it.
        assert_eq!(deadline, Some(10 + 5_000 + 10_000), "its join timeout");
        gs.tick(
            TickGroup {
                group: "g".into(),
                now_ms: 15_010,
            },
            &Topics,
            policy,
        );
        let g = gs.consumer_group("g").unwrap();
        assert_eq!(g.members.len(), 1, "a and b are gone");
        assert_eq!(
            gs.check_heartbeat(&beat("c-a", 2)),
            (Err(GroupError::UnknownMemberId), false)
        );
    }

    #[test]
    fn a_waiting_classic_request_learns_the_group_was_upgraded() {
        let mut gs = classic_pair();
        gs.consumer_heartbeat(
            consumer_join(10),
            &Topics,
            Rules::Migrating(MigrationPolicy::Bidirectional),
        )
        .unwrap();
        let view = gs.view("g", "c-a", None).unwrap();
        assert!(view.converted);
        assert_eq!(view.member, Some(false));
    }

    mod mixed {
        //! Classic cooperative clients and consumer-protocol clients in one
        //! upgraded group, requests in any order, answers sometimes lost:
        //! no two clients ever consume one partition.
        use proptest::prelude::*;

        use super::*;

        #[derive(Debug, Clone)]
        enum Step {
            /// Classic client `n` takes its next step (heartbeat, join or
            /// sync, as its state calls for); `lose` drops the answer.
            Classic {
                n: usize,
                lose: bool,
            },
            /// Consumer-protocol client `n` heartbeats (joining if out).
            Consumer {
                n: usize,
                lose: bool,
            },
            ConsumerLeaves(usize),
            Tick,
        }

        fn step() -> impl Strategy<Value = Step> {
            prop_oneof![
                6 => (0..2usize, proptest::bool::weighted(0.1))
                    .prop_map(|(n, lose)| Step::Classic { n, lose }),
                4 => (0..2usize, proptest::bool::weighted(0.1))
                    .prop_map(|(n, lose)| Step::Consumer { n, lose }),
                1 => (0..2usize).prop_map(Step::ConsumerLeaves),
                1 => Just(Step::Tick),
            ]
        }

        #[derive(Debug, Clone, Copy, PartialEq)]
        enum Phase {
            Beating,
            Joining,
            Syncing,
            Waiting,
        }

        #[derive(Debug, Clone)]
        struct ClassicClient {
            id: String,
            generation: i32,
            phase: Phase,
            owned: BTreeSet<i32>,
        }

        #[derive(Debug, Clone, Default)]
        struct ConsumerClient {
            epoch: i32,
            owned: BTreeSet<i32>,
        }

        proptest! {
            #[test]
            fn no_partition_is_consumed_by_two_clients(
                steps in proptest::collection::vec(step(), 1..150),
                policy in prop_oneof![
                    Just(MigrationPolicy::Bidirectional),
                    Just(MigrationPolicy::Upgrade),
                    Just(MigrationPolicy::Downgrade),
                ],
            ) {
                let rules = Rules::Migrating(policy);
                let mut fresh = 0u32;
                let mut gs = classic_pair();
                let mut classic = vec![
                    ClassicClient { id: "c-a".into(), generation: 2, phase: Phase::Beating, owned: [0, 1, 2].into() },
                    ClassicClient { id: "c-b".into(), generation: 2, phase: Phase::Beating, owned: [3, 4, 5].into() },
                ];
                let mut consumers = vec![ConsumerClient::default(); 2];
                let mut now_ms = 100;
                for step in steps {
                    now_ms += 100;
                    match step {
                        Step::Tick => {
                            gs.tick(TickGroup { group: "g".into(), now_ms: now_ms + 20_000 }, &Topics, policy);
                            // A client dropped past its timeouts knows it (its
                            // own poll timer) and stops, as Kafka's clients do.
                            let member = |gs: &Groups, id: &str| {
                                gs.consumer_group("g").is_some_and(|g| g.members.contains_key(id))
                                    || gs.get("g").is_some_and(|g| g.members.contains_key(id))
                            };
                            for c in &mut classic {
                                if !member(&gs, &c.id) {
                                    c.owned.clear();
                                    c.id.clear();
                                    c.phase = Phase::Joining;
                                }
                            }
                            for (n, c) in consumers.iter_mut().enumerate() {
                                if !member(&gs, &format!("k{n}")) {
                                    *c = ConsumerClient::default();
                                }
                            }
                        }
                        Step::ConsumerLeaves(n) => {
                            let mut hb = consumer_join(now_ms);
                            hb.member_id = format!("k{n}");
                            hb.member_epoch = LEAVE_EPOCH;
                            let _ = gs.consumer_heartbeat(hb, &Topics, rules);
                            consumers[n] = ConsumerClient::default();
                        }
                        Step::Consumer { n, lose } => {
                            let c = &consumers[n];
                            let mut hb = consumer_join(now_ms);
                            hb.member_id = format!("k{n}");
                            hb.member_epoch = c.epoch;
                            hb.owned = Some(match c.owned.is_empty() {
                                true => vec![],
                                false => vec![(T, c.owned.iter().copied().collect())],
                            });
                            let answer = gs.consumer_heartbeat(hb, &Topics, rules);
                            if lose {
                                continue;
                            }
                            match answer {
                                Ok(a) => {
                                    consumers[n].epoch = a.member_epoch;
                                    if let Some(assigned) = a.assignment {
                                        consumers[n].owned = assigned.into_iter().flat_map(|(_, ps)| ps).collect();
                                    }
                                }
                                Err(_) => consumers[n] = ConsumerClient::default(),
                            }
                        }
                        Step::Classic { n, lose } => {
                            let c = classic[n].clone();
                            // Dropped from the group: it stops consuming and
                            // joins again as a new member.
                            let lost = |c: &mut ClassicClient, fresh: &mut u32| {
                                c.owned.clear();
                                c.phase = Phase::Joining;
                                c.id.clear();
                                *fresh += 1;
                            };
                            match c.phase {
                                Phase::Beating => match gs.check_heartbeat(&beat(&c.id, c.generation)).0 {
                                    Ok(()) => {}
                                    Err(GroupError::RebalanceInProgress) => classic[n].phase = Phase::Joining,
                                    Err(_) => lost(&mut classic[n], &mut fresh),
                                },
                                Phase::Joining => {
                                    let owned: Vec<i32> = c.owned.iter().copied().collect();
                                    let fresh_id = format!("{n}f{fresh}");
                                    let answer = gs.join(join(&c.id, &fresh_id, Some(&owned), now_ms), &Topics, rules);
                                    if lose {
                                        continue;
                                    }
                                    match answer {
                                        Ok(Joined::InConsumerGroup { member_id, generation, .. }) => {
                                            classic[n].id = member_id;
                                            classic[n].generation = generation;
                                            classic[n].phase = Phase::Syncing;
                                        }
                                        // A classic rebalance: it keeps consuming (a
                                        // cooperative member) while the generation forms.
                                        Ok(Joined::Member(member_id)) => {
                                            classic[n].id = member_id;
                                            classic[n].phase = Phase::Waiting;
                                        }
                                        Err(GroupError::RebalanceInProgress) => {}
                                        _ => lost(&mut classic[n], &mut fresh),
                                    }
                                }
                                Phase::Syncing => {
                                    let answer = gs.sync(sync(&c.id, c.generation, &[], now_ms));
                                    if lose {
                                        continue;
                                    }
                                    match answer {
                                        Ok(Some(assigned)) => {
                                            let given: BTreeSet<i32> = assigned.partitions.into_iter().flat_map(|(_, ps)| ps).collect();
                                            let revoked = c.owned.difference(&given).count() > 0;
                                            classic[n].owned = given;
                                            classic[n].phase = if revoked { Phase::Joining } else { Phase::Beating };
                                        }
                                        // A classic group's sync waits for its leader.
                                        Ok(None) => classic[n].phase = Phase::Waiting,
                                        Err(GroupError::RebalanceInProgress) => classic[n].phase = Phase::Joining,
                                        _ => lost(&mut classic[n], &mut fresh),
                                    }
                                }
                                // Waiting in a classic JoinGroup or SyncGroup (no
                                // leader assigns in this model): told to rejoin if
                                // the group was upgraded, dropped if removed.
                                Phase::Waiting => match gs.view("g", &c.id, None) {
                                    Some(view) if view.converted => classic[n].phase = Phase::Joining,
                                    Some(view) if view.member.is_some() => {}
                                    _ => lost(&mut classic[n], &mut fresh),
                                },
                            }
                        }
                    }
                    let mut seen: BTreeMap<i32, String> = BTreeMap::new();
                    let all = classic.iter().map(|c| (c.id.clone(), &c.owned))
                        .chain(consumers.iter().enumerate().map(|(n, c)| (format!("k{n}"), &c.owned)));
                    for (who, owned) in all {
                        for p in owned {
                            if let Some(other) = seen.insert(*p, who.clone()) {
                                prop_assert!(false, "partition {} consumed by {} and {}", p, other, who);
                            }
                        }
                    }
                    if gs.consumer_group("g").is_some() {
                        no_partition_owned_twice(&gs);
                    }
                }
            }
        }
    }
}
