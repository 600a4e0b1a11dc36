//! A Raft node's subscriptions to pushed changes: each one a task that
//! takes what its agent says and answers through [`ReadLeases`], and the
//! task that tells the leases whether this node leads.

use std::sync::Arc;

use openraft::ServerState;
use tokio::sync::mpsc;

use super::Raft;
use super::node::Reader;
use crate::contract::push::{Subscription, ToLeader};
use crate::read_leases::ReadLeases;
use crate::types::MetaError;

/// What the agent may have sent and not yet been taken, at most.
const TO_LEADER_QUEUE: usize = crate::contract::push::MAX_QUEUED_NOTICES;

/// The term this node leads in, if it leads.
pub(super) fn leading_term(raft: &Raft) -> Option<u64> {
    let m = raft.metrics();
    let m = m.borrow();
    (m.state == ServerState::Leader).then_some(m.current_term)
}

/// Tells `leases` of every change of leadership, for as long as `raft` runs.
pub(super) fn follow_leadership(raft: &Raft, leases: Arc<ReadLeases>) {
    let mut metrics = raft.metrics();
    tokio::spawn(async move {
        loop {
            let term = {
                let m = metrics.borrow_and_update();
                (m.state == ServerState::Leader).then_some(m.current_term)
            };
            leases.observe_leadership(term);
            if metrics.changed().await.is_err() {
                leases.observe_leadership(None);
                break;
            }
        }
    });
}

/// Opens a subscription on this node, which must lead.
pub(super) async fn open(
    raft: &Raft,
    reader: &Arc<Reader>,
    leases: &Arc<ReadLeases>,
) -> Result<Subscription, MetaError> {
    reader.read(|_| ()).await?;
    leases.observe_leadership(leading_term(raft));
    let (id, from_leader) = leases.open()?;
    let (to_leader, asks) = mpsc::channel(TO_LEADER_QUEUE);
    tokio::spawn(serve(
        id,
        raft.clone(),
        reader.clone(),
        leases.clone(),
        asks,
    ));
    Ok(Subscription {
        to_leader,
        from_leader,
    })
}

/// Takes what subscription `id`'s agent says until it says goodbye or its
/// side is dropped.
async fn serve(
    id: u64,
    raft: Raft,
    reader: Arc<Reader>,
    leases: Arc<ReadLeases>,
    mut asks: mpsc::Receiver<ToLeader>,
) {
    // One renewal confirmed at a time: one that arrives meanwhile is
    // dropped (the agent renews again at its next tick).
    let renewing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let goodbye = loop {
        let Some(ask) = asks.recv().await else {
            break false;
        };
        match ask {
            ToLeader::Ack { seq } => leases.ack(id, seq),
            ToLeader::Goodbye => break true,
            // Confirmed after the renewal arrived (see `crate::read_leases`),
            // apart: acks go on meanwhile, or a slow confirmation would make
            // the holder look behind.
            ToLeader::Renew { ask } => {
                if renewing.swap(true, std::sync::atomic::Ordering::AcqRel) {
                    continue;
                }
                let (raft, reader, leases) = (raft.clone(), reader.clone(), leases.clone());
                let renewing = renewing.clone();
                tokio::spawn(async move {
                    match reader.read(|state| state.versions()).await {
                        Ok(versions) => {
                            leases.observe_leadership(leading_term(&raft));
                            leases.renew(id, ask, versions);
                        }
                        Err(e) => tracing::debug!(error = %e, "a read lease was not renewed"),
                    }
                    renewing.store(false, std::sync::atomic::Ordering::Release);
                });
            }
            ToLeader::Watch { ask, add, remove } => {
                let leases = leases.clone();
                let watched = reader.read(move |state| leases.watch(id, ask, state, add, remove));
                if let Err(e) = watched.await {
                    tracing::debug!(error = %e, "a subscription's watch was not taken");
                    break false;
                }
            }
        }
    };
    leases.close(id, goodbye);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::conformance::next;
    use crate::contract::push::FromLeader;
    use crate::raft::node::Bootstrap;
    use crate::raft::{NodeOptions, RaftMetastore};
    use crate::types::*;
    use crate::{Metastore, Sequencer};

    /// A node granting leases of `lease`, leading, with a topic of two
    /// partitions.
    async fn new_leased_node(lease: Duration) -> (Arc<RaftMetastore>, TopicInfo) {
        let mut options = NodeOptions::new(1, "in-process");
        options.bootstrap = Bootstrap::Single;
        options.heartbeat_ms = 20;
        options.read_lease = Some(lease);
        let node = RaftMetastore::start(options).await.unwrap();
        node.wait_until_leader(Duration::from_secs(10))
            .await
            .unwrap();
        let topic = node
            .create_topic(NewTopic {
                name: "t".into(),
                partitions: 2,
                configs: Default::default(),
            })
            .await
            .unwrap();
        (Arc::new(node), topic)
    }

    /// The same, past its first lease (so it answers changes at once).
    async fn leased_node(lease: Duration) -> (Arc<RaftMetastore>, TopicInfo) {
        let (node, topic) = new_leased_node(lease).await;
        tokio::time::sleep(lease).await;
        (node, topic)
    }

    fn commit(topic: &TopicInfo, partition: i32, key: &str) -> Commit {
        Commit {
            object_key: key.into(),
            object_size: 10,
            batches: vec![crate::conformance::batch(topic, partition, 0, 1)],
            not_before_ms: crate::now_ms(),
        }
    }

    /// A subscription with its lease, watching partition 0 of `topic`.
    async fn watching(node: &RaftMetastore, topic: &TopicInfo) -> Subscription {
        let mut sub = Sequencer::subscribe(node).await.unwrap();
        sub.to_leader
            .send(ToLeader::Renew { ask: 1 })
            .await
            .unwrap();
        assert!(matches!(
            next(&mut sub).await,
            FromLeader::Renewed { ask: 1, .. }
        ));
        let tp = TopicPartition::new(topic.id, 0);
        let add = vec![(tp, 0)];
        let watch = ToLeader::Watch {
            ask: 2,
            add,
            remove: vec![],
        };
        sub.to_leader.send(watch).await.unwrap();
        match next(&mut sub).await {
            FromLeader::Notice {
                answers: Some(2),
                plans,
                ..
            } => {
                assert_eq!(plans.len(), 1);
                assert_eq!(plans[0].1.as_ref().unwrap().plan.high_watermark, 0);
            }
            other => panic!("not the watch's answer: {other:?}"),
        }
        sub
    }

    /// The notice of a commit, and its number.
    async fn notice_of_commit(sub: &mut Subscription, high_watermark: i64) -> u64 {
        match next(sub).await {
            FromLeader::Notice {
                seq,
                answers: None,
                plans,
            } => {
                let plan = plans[0].1.as_ref().unwrap();
                assert_eq!(plan.plan.high_watermark, high_watermark);
                assert_eq!(plan.plan.extents.len(), 1, "the new extent comes with it");
                seq
            }
            other => panic!("not a commit's notice: {other:?}"),
        }
    }

    /// A commit to a watched partition is answered only once the lease
    /// holder has its notice; one to a partition nobody watches at once.
    #[tokio::test]
    async fn a_commit_waits_for_the_watchers_ack() {
        let (node, topic) = leased_node(Duration::from_secs(3)).await;
        let mut sub = watching(&node, &topic).await;
        let committing = tokio::spawn({
            let (node, c) = (node.clone(), commit(&topic, 0, "a"));
            async move { node.commit(c).await }
        });
        let seq = notice_of_commit(&mut sub, 1).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !committing.is_finished(),
            "answered before the notice was taken in"
        );
        sub.to_leader.send(ToLeader::Ack { seq }).await.unwrap();
        let done = tokio::time::timeout(Duration::from_secs(5), committing).await;
        assert!(done.unwrap().unwrap().is_ok());
        // Nobody watches partition 1, and nothing is unacknowledged.
        let other =
            tokio::time::timeout(Duration::from_secs(5), node.commit(commit(&topic, 1, "b")));
        assert!(other.await.unwrap().is_ok());
    }

    /// A holder that never acknowledges holds a commit back until its lease
    /// expires, and not past it (a cut stream the same).
    #[tokio::test]
    async fn an_unacknowledged_notice_holds_a_commit_until_the_lease_ends() {
        let lease = Duration::from_millis(600);
        let (node, topic) = leased_node(lease).await;
        let mut sub = watching(&node, &topic).await;
        let renewed = Instant::now();
        let answered = tokio::spawn({
            let (node, c) = (node.clone(), commit(&topic, 0, "a"));
            async move {
                node.commit(c).await.unwrap();
                Instant::now()
            }
        });
        notice_of_commit(&mut sub, 1).await;
        drop(sub);
        let answered = tokio::time::timeout(Duration::from_secs(10), answered).await;
        let answered = answered.unwrap().unwrap();
        assert!(answered >= renewed + lease, "answered while the lease held");
    }

    /// An agent that says goodbye trusts its lease no more: what it held
    /// back is answered at once.
    #[tokio::test]
    async fn a_goodbye_lets_held_commits_go() {
        let (node, topic) = leased_node(Duration::from_secs(3)).await;
        let mut sub = watching(&node, &topic).await;
        let committing = tokio::spawn({
            let (node, c) = (node.clone(), commit(&topic, 0, "a"));
            async move { node.commit(c).await }
        });
        notice_of_commit(&mut sub, 1).await;
        sub.to_leader.send(ToLeader::Goodbye).await.unwrap();
        let done = tokio::time::timeout(Duration::from_secs(5), committing).await;
        assert!(done.unwrap().unwrap().is_ok());
    }

    /// A node that has just begun to lead answers a change only once a
    /// whole lease has passed: a lease the leader before it granted has
    /// then expired.
    #[tokio::test]
    async fn a_new_leader_answers_changes_after_a_lease() {
        let lease = Duration::from_millis(800);
        let began = Instant::now();
        let (node, topic) = new_leased_node(lease).await;
        node.commit(commit(&topic, 0, "a")).await.unwrap();
        assert!(
            Instant::now() >= began + lease,
            "a change answered within the first lease"
        );
    }

    /// A holder that leaves a notice unacknowledged for half a lease is not
    /// renewed: it is told it ended.
    #[tokio::test]
    async fn a_holder_that_does_not_ack_is_not_renewed() {
        let lease = Duration::from_millis(400);
        let (node, topic) = leased_node(lease).await;
        let mut sub = watching(&node, &topic).await;
        let committing = tokio::spawn({
            let (node, c) = (node.clone(), commit(&topic, 0, "a"));
            async move { node.commit(c).await }
        });
        notice_of_commit(&mut sub, 1).await;
        tokio::time::sleep(lease / 2 + Duration::from_millis(50)).await;
        sub.to_leader
            .send(ToLeader::Renew { ask: 3 })
            .await
            .unwrap();
        assert!(matches!(next(&mut sub).await, FromLeader::Ended { .. }));
        let done = tokio::time::timeout(Duration::from_secs(10), committing).await;
        assert!(done.unwrap().unwrap().is_ok());
    }

    /// A holder that goes silent (its stream open, nothing said) is
    /// forgotten a lease after its lease ended, and its stream closed: a
    /// vanished agent leaves no session or connection behind.
    #[tokio::test]
    async fn a_silent_holder_is_forgotten_and_its_stream_closed() {
        let lease = Duration::from_millis(300);
        let (node, topic) = leased_node(lease).await;
        let mut sub = watching(&node, &topic).await;
        tokio::time::sleep(lease * 2 + Duration::from_millis(100)).await;
        // Any write prunes.
        node.commit(commit(&topic, 1, "a")).await.unwrap();
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            while sub.from_leader.recv().await.is_some() {}
        });
        assert!(
            closed.await.is_ok(),
            "the silent holder's stream stayed open"
        );
    }

    /// Each renewal brings the versions of the configs and ACLs as the
    /// leader read them after it arrived: a change answered before the
    /// renewal was sent has moved them.
    #[tokio::test]
    async fn a_renewal_brings_the_versions_of_what_agents_copy() {
        use crate::contract::acls::AclBinding;
        use crate::contract::dynamic_config::{ConfigEntity, ConfigOp, ConfigTarget};
        let (node, _) = leased_node(Duration::from_millis(500)).await;
        let mut sub = Sequencer::subscribe(&*node).await.unwrap();
        let mut renew = async |ask| {
            sub.to_leader.send(ToLeader::Renew { ask }).await.unwrap();
            match next(&mut sub).await {
                FromLeader::Renewed {
                    ask: a, versions, ..
                } if a == ask => versions,
                other => panic!("not renewal {ask}'s answer: {other:?}"),
            }
        };
        let before = renew(1).await;
        assert_eq!(renew(2).await, before, "nothing changed");

        let metrics = ConfigEntity::ClientMetrics("app".into());
        let ops = vec![ConfigOp::Set("interval.ms".into(), "10000".into())];
        node.alter_configs(ConfigTarget::Dynamic(metrics), ops, false)
            .await
            .unwrap();
        let configs_moved = renew(3).await;
        assert!(configs_moved.configs > before.configs);
        assert_eq!(configs_moved.acls, before.acls);

        let binding = AclBinding {
            resource_type: 2,
            resource_name: "t".into(),
            pattern_type: 3,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: 3,
            permission: 3,
        };
        node.create_acls(vec![binding]).await.unwrap();
        let acls_moved = renew(4).await;
        assert!(acls_moved.acls > before.acls);
        assert_eq!(acls_moved.configs, configs_moved.configs);
    }
}
