//! The weather of a whole-path run: store and metastore faults that come
//! and go, agents that crash and restart, and the Raft group's nodes killed,
//! cut off and skewed.

use super::*;

/// The Raft group's weather: a node (often the leader) killed and restarted
/// from its log, or cut off for a while; one direction of a link cut;
/// messages lost and late; clocks skewed.
pub(super) async fn raft_weather(
    shared: &Shared,
    group: &Arc<raft::RaftGroup>,
    topics: &[TopicInfo],
) {
    // A power cut: every node dies at once and comes back together, so a
    // leader may resume its term from what its disk synced (its commit
    // index lags what it applied and answered before).
    let (power_cut, back_ms) = shared.with(|w| (w.chance(0.03), 200 + w.rng_below(3_000)));
    if power_cut {
        for i in 0..raft::NODES as usize {
            group.kill(i).await;
        }
        shared.with(|w| {
            w.summary.node_kills += raft::NODES;
            w.log(format!(
                "power cut: every metastore node killed; back in {back_ms} ms"
            ))
        });
        let (group, shared, topics) = (group.clone(), shared.clone(), topics.to_vec());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(back_ms)).await;
            // Together: one that cannot start yet (cut off from a database)
            // must not keep the others down.
            let restarts = (0..raft::NODES as usize).map(|i| group.restart(i));
            futures::future::join_all(restarts).await;
            // Read at once, while a leader that resumed its term may not
            // have applied all it had answered before the cut.
            let meta: Arc<dyn Metastore> = group.client.clone();
            audit::reads_are_current(&shared, &meta, &topics).await;
        });
        return;
    }
    // Now and then a node replaced under load (membership changes).
    let (replace, node) = shared.with(|w| (w.chance(0.05), w.rng_below(raft::NODES) as usize));
    if replace && !group.is_down(node) {
        shared.with(|w| {
            w.summary.replacements += 1;
            w.log(format!("metastore node {} being replaced", node + 1))
        });
        let (group, shared) = (group.clone(), shared.clone());
        tokio::spawn(async move {
            let replaced = group.replace(node).await;
            shared.with(|w| {
                w.log(format!(
                    "metastore node {} replaced: {replaced:?}",
                    node + 1
                ))
            });
        });
        return;
    }
    let (kill, node, down_ms) = shared.with(|w| {
        (
            w.chance(0.25),
            w.rng_below(raft::NODES) as usize,
            // Now and then back before anyone else times out and runs for
            // leader (a supervisor restarting it at once).
            if w.chance(0.2) {
                w.rng_below(100)
            } else {
                1_000 + w.rng_below(20_000)
            },
        )
    });
    if kill && !group.is_down(node) {
        group.kill(node).await;
        shared.with(|w| {
            w.summary.node_kills += 1;
            w.log(format!(
                "metastore node {} killed; back in {down_ms} ms",
                node + 1
            ))
        });
        let group = group.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(down_ms)).await;
            group.restart(node).await;
        });
        return;
    }
    let shared_log = group.kind() == raft::Kind::SharedLog;
    let leader = group.leader().map(|n| n.id());
    let isolated = shared.with(|w| {
        // The leader half the time: a deposed leader is what the checkers
        // of reads and writes after an isolation look for.
        let node = match leader {
            Some(leader) if w.chance(0.5) => leader,
            _ => 1 + w.rng_below(raft::NODES),
        };
        let mut isolated = None;
        match w.rng_below(4) {
            0 => {
                // Isolated: its leadership (if any) passes on; writes it
                // takes meanwhile never commit. (On a shared log: cut off
                // from the database.)
                let mut how = "";
                if shared_log {
                    // Cut off, or every call hanging (a paused leader).
                    if w.chance(0.5) {
                        w.database.cut.insert(node);
                        how = " (database calls fail)";
                    } else {
                        w.database.stalled.insert(node);
                        how = " (database calls unanswered)";
                    }
                }
                for other in (1..=raft::NODES).filter(|&o| o != node) {
                    w.net.cut.insert((node, other));
                    w.net.cut.insert((other, node));
                }
                w.summary.partitions += 1;
                let led = if leader == Some(node) {
                    ", the leader"
                } else {
                    ""
                };
                w.log(format!("node {node}{led} isolated{how}"));
                isolated = Some(node);
            }
            1 => {
                let other = 1 + (node % raft::NODES);
                w.net.cut.insert((node, other));
                w.summary.partitions += 1;
                w.log(format!("link {node} -> {other} cut"));
            }
            2 if shared_log => {
                // The database: calls that fail, that land and lose their
                // answer, and that run slow (longer than a lease, now and then).
                w.net.cut.clear();
                w.database = raft::DatabaseFaults {
                    fail: 0.05 * w.rng.random::<f64>(),
                    lose_answer: 0.05 * w.rng.random::<f64>(),
                    slow: 0.1 * w.rng.random::<f64>(),
                    max_latency: Duration::from_millis(w.rng_below(4_000)),
                    ..Default::default()
                };
                w.log(format!("network healed; database faults {:?}", w.database));
            }
            2 => {
                w.net.cut.clear();
                w.net.drop = 0.1 * w.rng.random::<f64>();
                w.net.max_latency = Duration::from_millis(w.rng_below(200));
                w.log(format!(
                    "network healed; drop {:.3}, latency up to {:?}",
                    w.net.drop, w.net.max_latency
                ));
            }
            _ => {
                // Mostly a few seconds either way; now and then a minute
                // ahead, or a day (a bad NTP step): the group's time must
                // not follow it (see `max_ahead_ms` in the auditor).
                let skew = if w.chance(0.1) {
                    86_400_000
                } else if w.chance(0.2) {
                    60_000
                } else {
                    w.rng_below(6_000) as i64 - 3_000
                };
                w.net.skew_ms.insert(node, skew);
                w.log(format!("node {node}'s clock is off by {skew} ms"));
            }
        }
        isolated
    });
    if let Some(node) = isolated
        && !topics.is_empty()
    {
        deposed_leader_reads(shared, group, node, topics);
    }
}

/// A client still talking to an isolated node, long after any lease it
/// held has run out (another node leads by then, and takes writes): every
/// read it gets answered must hold everything acknowledged before it began,
/// or be refused. A deposed leader that answers from its own state fails.
/// Each round first has the new leader (if another node leads) acknowledge
/// a write of its own, so that there is always something to miss.
fn deposed_leader_reads(
    shared: &Shared,
    group: &Arc<raft::RaftGroup>,
    node: u64,
    topics: &[TopicInfo],
) {
    let (group, shared, topics) = (group.clone(), shared.clone(), topics.to_vec());
    tokio::spawn(async move {
        // A lease on a shared log lets reads go on for half of it (1 s in
        // the simulation); another node leads about a lease later (2 s).
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        let mut answered = 0;
        for _ in 0..10 {
            let Some(deposed) = group.node(node as usize - 1) else {
                break;
            };
            let acknowledged = match group.leader_other_than(node) {
                Some(leader) => {
                    let held = leader.hold_garbage(1).await;
                    held.ok().map(|_| leader.applied_index())
                }
                _ => None,
            };
            let meta: Arc<dyn Metastore> = deposed.clone();
            answered += audit::reads_are_current(&shared, &meta, &topics).await;
            if let Some(index) = acknowledged
                && floe_metastore::Sequencer::read(deposed.as_ref(), |_| ())
                    .await
                    .is_ok()
            {
                answered += 1;
                // Read after the answer: what the answer came from is no newer.
                let seen = deposed.applied_index();
                if seen < index {
                    shared.with(|w| {
                        w.anomaly(format!(
                            "stale read: isolated node {node} answered from its state at \
                             index {seen}, behind index {index}, acknowledged before the read"
                        ))
                    });
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        shared.with(|w| w.log(format!("isolated node {node} answered {answered} reads")));
    });
}

/// Changes the weather: store and metastore faults come and go, agents
/// crash (mid-upload, mid-commit, mid-compaction) and restart, and the
/// metastore freezes for longer than the batcher's commit deadline.
pub(super) async fn chaos(
    shared: Shared,
    cluster: Arc<tokio::sync::Mutex<Cluster>>,
    stop: Instant,
    group: Option<Arc<raft::RaftGroup>>,
    topics: Vec<TopicInfo>,
) {
    while Instant::now() < stop {
        let (pause, event) = shared.with(|w| (w.rng_below(20_000), w.rng_below(10)));
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if let Some(group) = &group
            && (3..=6).contains(&event)
        {
            raft_weather(&shared, group, &topics).await;
            continue;
        }
        match event {
            0..=2 => shared.with(|w| {
                let stormy = w.chance(0.5);
                w.store_faults = if stormy {
                    StoreFaults {
                        put_error: 0.2 * w.rng.random::<f64>(),
                        put_lost_reply: 0.2 * w.rng.random::<f64>(),
                        get_error: 0.2 * w.rng.random::<f64>(),
                        max_latency: Duration::from_millis(w.rng_below(2_000)),
                        ..StoreFaults::default()
                    }
                } else {
                    StoreFaults::default()
                };
                w.log(format!("store faults {:?}", w.store_faults));
            }),
            3..=5 => shared.with(|w| {
                let stormy = w.chance(0.5);
                w.meta_faults = if stormy {
                    MetaFaults {
                        unavailable: 0.2 * w.rng.random::<f64>(),
                        lost_reply: 0.2 * w.rng.random::<f64>(),
                        max_latency: Duration::from_millis(w.rng_below(3_000)),
                        frozen_until: None,
                    }
                } else {
                    MetaFaults::default()
                };
                w.log(format!("metastore faults {:?}", w.meta_faults));
            }),
            6 => shared.with(|w| {
                // Longer than the batcher's 60 s commit deadline, sometimes.
                let for_ms = 5_000 + w.rng_below(90_000);
                w.meta_faults.frozen_until = Some(Instant::now() + Duration::from_millis(for_ms));
                w.log(format!("metastore frozen for {for_ms} ms"));
            }),
            _ => {
                let (i, down_ms) = {
                    let c = cluster.lock().await;
                    shared.with(|w| {
                        (
                            w.rng_below(c.agents.len() as u64) as usize,
                            w.rng_below(10_000),
                        )
                    })
                };
                let stalled =
                    shared.with(|w| w.stalled.get(&i).is_some_and(|&u| u > Instant::now()));
                if stalled {
                    continue;
                }
                cluster.lock().await.crash(i);
                shared.with(|w| {
                    w.summary.crashes += 1;
                    w.log(format!("agent {i} crashed; back in {down_ms} ms"));
                });
                let cluster = cluster.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(down_ms)).await;
                    let mut c = cluster.lock().await;
                    if c.agents[i].batcher.is_none() {
                        c.start_agent(i).await;
                    }
                });
            }
        }
    }
}
