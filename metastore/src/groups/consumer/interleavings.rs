//! Many members heartbeating in any order, with answers lost and requests
//! delivered twice: what the members own is never shared. (Replaying an
//! old request after a newer one of the same member is not modelled: the
//! agent bounds how long a heartbeat may take, and drops a closed
//! connection's queued ones.)

use proptest::prelude::*;

use super::*;

struct Topics;

impl TopicLookup for Topics {
    fn find(&self, name: &str) -> Option<(TopicId, i32)> {
        (name == "t").then_some((TopicId::from_u128(7), 8))
    }
    fn names(&self) -> Vec<String> {
        vec!["t".into()]
    }
}

#[derive(Debug, Clone)]
enum Step {
    /// Member `n` heartbeats; its answer is lost if `lose`, its request
    /// delivered twice if `twice`.
    Beat {
        n: usize,
        lose: bool,
        twice: bool,
    },
    Leave(usize),
    /// Every member past a deadline is fenced.
    Tick,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0..4usize, proptest::bool::weighted(0.2), proptest::bool::weighted(0.1))
            .prop_map(|(n, lose, twice)| Step::Beat { n, lose, twice }),
        1 => (0..4usize).prop_map(Step::Leave),
        1 => Just(Step::Tick),
    ]
}

/// What a client believes: its epoch and the partitions it consumes.
#[derive(Debug, Clone, Default)]
struct Client {
    epoch: i32,
    owned: Partitions,
}

proptest! {
    #[test]
    fn no_partition_is_ever_owned_by_two_members(steps in proptest::collection::vec(step(), 1..120)) {
        let mut g = ConsumerGroup::default();
        let mut clients = vec![Client::default(); 4];
        let mut now_ms = 0;
        for step in steps {
            now_ms += 100;
            match step {
                Step::Tick => {
                    g.tick(now_ms + 60_000);
                    // A client past its rebalance timeout knows it (its
                    // own poll timer) and stops, as Kafka's clients do.
                    for (n, c) in clients.iter_mut().enumerate() {
                        if !g.members.contains_key(&format!("m{n}")) {
                            *c = Client::default();
                        }
                    }
                }
                Step::Leave(n) => {
                    let mut hb = request(n, &clients[n], now_ms);
                    hb.member_epoch = LEAVE_EPOCH;
                    let _ = g.heartbeat(hb, &Topics);
                    clients[n] = Client::default();
                }
                Step::Beat { n, lose, twice } => {
                    let hb = request(n, &clients[n], now_ms);
                    // The leader's unwritten answer is the one a write
                    // would give, and the write would change nothing
                    // but when the member was last seen.
                    if let Some(fast) = g.unchanged(&hb, &Topics) {
                        let mut written = g.clone();
                        prop_assert_eq!(written.heartbeat(hb.clone(), &Topics), fast);
                        if let Some(m) = written.members.get_mut(&hb.member_id) {
                            m.last_seen_ms = g.members[&hb.member_id].last_seen_ms;
                        }
                        prop_assert_eq!(&written, &g);
                    }
                    let mut answer = g.heartbeat(hb.clone(), &Topics);
                    if twice {
                        answer = g.heartbeat(hb, &Topics);
                    }
                    if lose {
                        continue;
                    }
                    match answer {
                        Ok(a) => {
                            clients[n].epoch = a.member_epoch;
                            if let Some(assigned) = a.assignment {
                                clients[n].owned = assigned
                                    .into_iter()
                                    .map(|(t, ps)| (t, ps.into_iter().collect()))
                                    .collect();
                            }
                        }
                        // Fenced or unknown: it drops everything and rejoins.
                        Err(_) => clients[n] = Client::default(),
                    }
                }
            }
            for i in 0..clients.len() {
                for j in i + 1..clients.len() {
                    let both = intersect(&clients[i].owned, &clients[j].owned);
                    prop_assert!(is_empty(&both), "members {i} and {j} both own {both:?}");
                }
            }
            // And the group never gives one partition to two members.
            let mut held = BTreeSet::new();
            for m in g.members.values() {
                for (t, ps) in m.assigned.iter().chain(&m.revoking) {
                    for p in ps {
                        prop_assert!(held.insert((*t, *p)), "{t}-{p} held twice");
                    }
                }
            }
        }
    }
}

fn request(n: usize, client: &Client, now_ms: i64) -> ConsumerHeartbeat {
    let joining = client.epoch == 0;
    ConsumerHeartbeat {
        group: "g".into(),
        member_id: format!("m{n}"),
        member_epoch: client.epoch,
        instance_id: None,
        rack_id: None,
        rebalance_timeout_ms: if joining { 30_000 } else { -1 },
        subscribed_topics: joining.then(|| vec!["t".to_string()]),
        subscribed_regex: None,
        assignor: None,
        // A client always says what it owns (as librdkafka does when it
        // changed; saying it each time only tells the group more).
        owned: Some(flatten(&client.owned)),
        client_id: "c".into(),
        client_host: String::new(),
        session_timeout_ms: 45_000,
        heartbeat_interval_ms: 5_000,
        now_ms,
        describer: None,
    }
}
