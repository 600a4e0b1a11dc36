//! The server-side assignors of the consumer group protocol (KIP-848):
//! `uniform` (the default) and `range`, as Kafka names them. Both are pure
//! and deterministic (sorted iteration only): every replica computes the
//! same target from the same state.

use std::collections::{BTreeMap, BTreeSet};

use crate::types::TopicId;

/// Partitions by topic id.
pub type Partitions = BTreeMap<TopicId, BTreeSet<i32>>;

/// What an assignor knows of one member.
pub struct Subscriber<'a> {
    pub id: &'a str,
    pub instance_id: Option<&'a str>,
    /// The topics it subscribes to that exist.
    pub topics: BTreeSet<TopicId>,
    /// Its target before this assignment (for stickiness).
    pub previous: &'a Partitions,
}

pub const UNIFORM: &str = "uniform";
pub const RANGE: &str = "range";

pub fn is_known(assignor: &str) -> bool {
    assignor == UNIFORM || assignor == RANGE
}

/// Each member's target: every partition of a subscribed topic goes to
/// exactly one member subscribed to it.
pub fn assign(
    assignor: &str,
    members: &[Subscriber<'_>],
    partition_counts: &BTreeMap<TopicId, i32>,
) -> BTreeMap<String, Partitions> {
    if assignor == RANGE {
        range(members, partition_counts)
    } else {
        uniform(members, partition_counts)
    }
}

/// Kafka's `uniform`: balanced (for members of one subscription, counts
/// differ by at most one) and sticky: a partition stays with its previous
/// owner while that keeps the balance. Unassigned partitions go to the
/// least loaded eligible member; then partitions move from the most to the
/// least loaded member while one it may take narrows the gap (for members of
/// different subscriptions the balance is approximate, as in Kafka).
fn uniform(
    members: &[Subscriber<'_>],
    partition_counts: &BTreeMap<TopicId, i32>,
) -> BTreeMap<String, Partitions> {
    let mut owner: BTreeMap<(TopicId, i32), usize> = BTreeMap::new();
    let mut load = vec![0usize; members.len()];
    let all: Vec<(TopicId, i32)> = partition_counts
        .iter()
        .filter(|(topic, _)| members.iter().any(|m| m.topics.contains(topic)))
        .flat_map(|(topic, &count)| (0..count).map(move |p| (*topic, p)))
        .collect();
    let eligible = |i: usize, topic: &TopicId| members[i].topics.contains(topic);
    // The fair share of a member, were every member eligible for every
    // partition: sticky up to it.
    let quota = all.len().div_ceil(members.len().max(1));
    for (i, m) in members.iter().enumerate() {
        for (topic, partitions) in m.previous {
            for &p in partitions {
                let key = (*topic, p);
                if load[i] < quota
                    && eligible(i, topic)
                    && partition_counts.get(topic).is_some_and(|&c| p < c)
                    && !owner.contains_key(&key)
                {
                    owner.insert(key, i);
                    load[i] += 1;
                }
            }
        }
    }
    for key in &all {
        if owner.contains_key(key) {
            continue;
        }
        let least = (0..members.len())
            .filter(|&i| eligible(i, &key.0))
            .min_by_key(|&i| (load[i], i));
        if let Some(i) = least {
            owner.insert(*key, i);
            load[i] += 1;
        }
    }
    // Narrow the gaps: a member takes a partition it may consume from one
    // holding at least two more, the least loaded first, until no such
    // move is left (at most one move per partition; a move never widens
    // a gap, so this ends).
    let mut held: Vec<BTreeSet<(TopicId, i32)>> = vec![BTreeSet::new(); members.len()];
    for (key, &i) in &owner {
        held[i].insert(*key);
    }
    for _ in 0..all.len() {
        let mut by_load: Vec<usize> = (0..members.len()).collect();
        by_load.sort_by_key(|&i| (load[i], i));
        let moved = by_load.iter().find_map(|&to| {
            by_load.iter().rev().find_map(|&from| {
                if load[from] <= load[to] + 1 {
                    return None;
                }
                let key = held[from].iter().copied().find(|k| eligible(to, &k.0))?;
                Some((key, from, to))
            })
        });
        let Some((key, from, to)) = moved else { break };
        held[from].remove(&key);
        held[to].insert(key);
        owner.insert(key, to);
        load[from] -= 1;
        load[to] += 1;
    }
    collect(members, owner)
}

/// Kafka's `range`: per topic, its subscribers (static members by instance
/// id first, then the rest by member id) each take a contiguous range,
/// the first ones one more when the count does not divide.
fn range(
    members: &[Subscriber<'_>],
    partition_counts: &BTreeMap<TopicId, i32>,
) -> BTreeMap<String, Partitions> {
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by_key(|&i| {
        let m = &members[i];
        (m.instance_id.is_none(), m.instance_id.unwrap_or(m.id), m.id)
    });
    let mut owner = BTreeMap::new();
    for (topic, &count) in partition_counts {
        let subscribers: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&i| members[i].topics.contains(topic))
            .collect();
        if subscribers.is_empty() {
            continue;
        }
        let (each, extra) = (
            count as usize / subscribers.len(),
            count as usize % subscribers.len(),
        );
        let mut next = 0;
        for (n, &i) in subscribers.iter().enumerate() {
            let take = each + usize::from(n < extra);
            for p in next..next + take {
                owner.insert((*topic, p as i32), i);
            }
            next += take;
        }
    }
    collect(members, owner)
}

fn collect(
    members: &[Subscriber<'_>],
    owner: BTreeMap<(TopicId, i32), usize>,
) -> BTreeMap<String, Partitions> {
    let mut targets: BTreeMap<String, Partitions> = members
        .iter()
        .map(|m| (m.id.to_string(), Partitions::new()))
        .collect();
    for ((topic, p), i) in owner {
        targets
            .get_mut(members[i].id)
            .expect("every member has a target")
            .entry(topic)
            .or_default()
            .insert(p);
    }
    targets
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(n: u128) -> TopicId {
        TopicId::from_u128(n)
    }

    fn count(targets: &BTreeMap<String, Partitions>, member: &str) -> usize {
        targets[member].values().map(BTreeSet::len).sum()
    }

    fn member<'a>(id: &'a str, previous: &'a Partitions) -> Subscriber<'a> {
        Subscriber {
            id,
            instance_id: None,
            topics: BTreeSet::from([topic(1)]),
            previous,
        }
    }

    #[test]
    fn uniform_balances_and_keeps_what_it_can() {
        let counts = BTreeMap::from([(topic(1), 12)]);
        let empty = Partitions::new();
        let two = assign(
            UNIFORM,
            &[member("a", &empty), member("b", &empty)],
            &counts,
        );
        assert_eq!((count(&two, "a"), count(&two, "b")), (6, 6));
        // A third member: a and b each give up two, and keep four.
        let (a_had, b_had) = (two["a"].clone(), two["b"].clone());
        let three = assign(
            UNIFORM,
            &[
                member("a", &a_had),
                member("b", &b_had),
                member("c", &empty),
            ],
            &counts,
        );
        for m in ["a", "b", "c"] {
            assert_eq!(count(&three, m), 4, "{m}: {three:?}");
        }
        assert!(three["a"][&topic(1)].is_subset(&a_had[&topic(1)]));
        assert!(three["b"][&topic(1)].is_subset(&b_had[&topic(1)]));
        let all: BTreeSet<i32> = three
            .values()
            .flat_map(|t| t[&topic(1)].iter().copied())
            .collect();
        assert_eq!(all, (0..12).collect());
    }

    #[test]
    fn uniform_gives_each_topic_only_to_its_subscribers() {
        let counts = BTreeMap::from([(topic(1), 4), (topic(2), 2)]);
        let empty = Partitions::new();
        let members = vec![
            Subscriber {
                id: "a",
                instance_id: None,
                topics: BTreeSet::from([topic(1)]),
                previous: &empty,
            },
            Subscriber {
                id: "b",
                instance_id: None,
                topics: BTreeSet::from([topic(1), topic(2)]),
                previous: &empty,
            },
        ];
        let targets = assign(UNIFORM, &members, &counts);
        assert!(!targets["a"].contains_key(&topic(2)));
        assert_eq!(targets["b"][&topic(2)].len(), 2);
        assert_eq!(count(&targets, "a") + count(&targets, "b"), 6);
        assert_eq!((count(&targets, "a"), count(&targets, "b")), (3, 3));
    }

    /// A member's share is not held back by a member of another subscription
    /// that is more loaded: here b, subscribed to A only, gets half of A
    /// although c (subscribed to B only) holds more than anyone.
    #[test]
    fn uniform_balances_members_of_different_subscriptions() {
        let counts = BTreeMap::from([(topic(1), 12), (topic(2), 100)]);
        let empty = Partitions::new();
        let a_had = Partitions::from([(topic(1), (0..12).collect())]);
        let only = |id, t, previous| Subscriber {
            id,
            instance_id: None,
            topics: BTreeSet::from([t]),
            previous,
        };
        let targets = assign(
            UNIFORM,
            &[
                only("a", topic(1), &a_had),
                only("b", topic(1), &empty),
                only("c", topic(2), &empty),
            ],
            &counts,
        );
        assert_eq!((count(&targets, "a"), count(&targets, "b")), (6, 6));
        assert_eq!(count(&targets, "c"), 100);
    }

    #[test]
    fn range_gives_contiguous_ranges_static_members_first() {
        let counts = BTreeMap::from([(topic(1), 5)]);
        let empty = Partitions::new();
        let member = |id, instance_id| Subscriber {
            id,
            instance_id,
            topics: BTreeSet::from([topic(1)]),
            previous: &empty,
        };
        let targets = assign(
            RANGE,
            &[member("a", None), member("z", Some("i1"))],
            &counts,
        );
        assert_eq!(targets["z"][&topic(1)], BTreeSet::from([0, 1, 2]));
        assert_eq!(targets["a"][&topic(1)], BTreeSet::from([3, 4]));
    }
}
