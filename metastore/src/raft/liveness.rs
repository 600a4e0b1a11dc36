//! Group members' liveness, kept by the leader off the log.
//!
//! A consumer heartbeats every few seconds; written through Raft, each beat
//! was a quorum fsync (about 830 a second on three nodes here), so a few
//! thousand consumers saturated the sequencer and queued produce commits
//! behind them. Here the leader answers a heartbeat from its state and notes
//! it in [`Liveness`] (memory only), and [`GroupTimers`] proposes what the
//! heartbeats decide: [`ExpireMembers`] for members not heard from within
//! their session (carrying when the leader last heard them, so every replica
//! decides the same), and [`TickGroup`] when a rebalance, sync or handed-out
//! id's deadline passes.
//!
//! A node that begins to lead has heard nobody: it counts every member as
//! heard when its term began, so a failover delays a dead member's expiry by
//! at most one session and never expires a live one. What the leader heard
//! is bounded by the members that exist: it notes only beats of members,
//! and each pass forgets those that left.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;

use super::stamps::Stamps;
use crate::groups::{ExpireMembers, TickGroup};
use crate::state::{Command, Reply, State};
use crate::types::MetaError;

/// How often the leader looks for sessions and deadlines that ran out: the
/// lateness of an expiry or of a rebalance that waits for its deadline.
pub const TIMER_EVERY: Duration = Duration::from_millis(200);

#[derive(Default)]
pub struct Liveness {
    heard: Mutex<HeardBeats>,
}

#[derive(Default)]
struct HeardBeats {
    /// The term these were heard in; a later term starts afresh.
    term: u64,
    /// When this node began to lead in `term`: every member counts as
    /// heard then.
    since_ms: i64,
    last: HashMap<(String, String), i64>,
}

impl HeardBeats {
    fn begin(&mut self, term: u64, now_ms: i64) {
        if term > self.term {
            self.term = term;
            self.since_ms = now_ms;
            self.last.clear();
        }
    }
}

impl Liveness {
    /// Notes a member's heartbeat, heard at `now_ms` while leading in `term`.
    pub fn heard(&self, term: u64, group: &str, member: &str, now_ms: i64) {
        let mut heard = self.heard.lock().expect("liveness lock");
        heard.begin(term, now_ms);
        if heard.term == term {
            let at = heard
                .last
                .entry((group.to_string(), member.to_string()))
                .or_default();
            *at = (*at).max(now_ms);
        }
    }

    /// What the timers must propose now, as leader in `term` at `now_ms`;
    /// forgets members that are gone.
    fn due(&self, state: &State, term: u64, now_ms: i64) -> Vec<Command> {
        let mut heard = self.heard.lock().expect("liveness lock");
        heard.begin(term, now_ms);
        let groups = state.groups();
        heard.last.retain(|(g, m), _| {
            groups
                .get(g)
                .is_some_and(|group| group.members.contains_key(m))
                || groups
                    .consumer_group(g)
                    .is_some_and(|group| group.members.contains_key(m))
        });
        let by_member: HashMap<(&str, &str), i64> = heard
            .last
            .iter()
            .map(|((g, m), at)| ((g.as_str(), m.as_str()), *at))
            .collect();
        let heard_ms = |group: &str, member: &str| {
            by_member
                .get(&(group, member))
                .copied()
                .unwrap_or(heard.since_ms)
                .max(heard.since_ms)
        };
        // (group, each member: last seen by a command, session, kept alive
        // whatever its heartbeats) and the group's next deadline.
        let classic = groups.iter().map(|(name, g)| {
            let members: Vec<_> = g
                .members
                .iter()
                .map(|(id, m)| (id, m.last_seen_ms, m.session_timeout_ms, g.keeps_alive(m)))
                .collect();
            (name, members, g.next_deadline_ms())
        });
        let consumer = groups.consumer_groups().map(|(name, g)| {
            let members: Vec<_> = g
                .members
                .iter()
                .map(|(id, m)| (id, m.last_seen_ms, m.session_timeout_ms, false))
                .collect();
            (name, members, g.next_deadline_ms())
        });
        let mut due = Vec::new();
        for (name, members, deadline) in classic.chain(consumer) {
            let expired: Vec<(String, i64)> = members
                .into_iter()
                .filter(|(_, _, _, kept)| !kept)
                .filter_map(|(id, last_seen_ms, session_ms, _)| {
                    let heard = heard_ms(name, id);
                    (last_seen_ms.max(heard) + session_ms as i64 <= now_ms)
                        .then(|| (id.clone(), heard))
                })
                .collect();
            if !expired.is_empty() {
                due.push(
                    ExpireMembers {
                        group: name.clone(),
                        members: expired,
                        now_ms,
                    }
                    .into(),
                );
            }
            if deadline.is_some_and(|d| d <= now_ms) {
                due.push(
                    TickGroup {
                        group: name.clone(),
                        now_ms,
                    }
                    .into(),
                );
            }
        }
        due
    }

    #[cfg(test)]
    fn last_heard(&self, group: &str, member: &str) -> i64 {
        let heard = self.heard.lock().expect("liveness lock");
        heard
            .last
            .get(&(group.to_string(), member.to_string()))
            .map_or(heard.since_ms, |at| (*at).max(heard.since_ms))
    }
}

/// The leader's timers for groups: a task that ends when dropped.
pub struct GroupTimers {
    task: tokio::task::AbortHandle,
}

impl Drop for GroupTimers {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether this node may decide now: the term it leads in, once it has
/// applied everything committed before it led and while its lease holds.
pub type Leading = Box<dyn Fn() -> Option<u64> + Send + Sync>;

/// How the timers propose a command (through the node's log).
pub type Propose =
    Box<dyn Fn(Command) -> BoxFuture<'static, Result<Reply, MetaError>> + Send + Sync>;

impl GroupTimers {
    pub fn start(
        leading: Leading,
        state: Arc<RwLock<State>>,
        stamps: Arc<Stamps>,
        propose: Propose,
        liveness: Arc<Liveness>,
    ) -> GroupTimers {
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(TIMER_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                // Only a leader that has applied everything committed before
                // it led (and still holds its lease) decides: one that is
                // behind would count members as heard from too early.
                let Some(term) = leading() else {
                    continue;
                };
                let now_ms = stamps.now_ms();
                let due = liveness.due(
                    &state.read().expect("metastore state lock poisoned"),
                    term,
                    now_ms,
                );
                // Proposed together (they share entries); a refusal (this
                // node no longer leads) is the next leader's to redo.
                let proposed = due.into_iter().map(&propose);
                for outcome in futures::future::join_all(proposed).await {
                    if let Err(e) = outcome {
                        tracing::debug!(error = %e, "group timers: a proposal failed");
                    }
                }
            }
        });
        GroupTimers {
            task: task.abort_handle(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::{JoinGroup, Joined};

    fn with_member(session_ms: i32) -> (State, String) {
        let mut state = State::default();
        let join = JoinGroup {
            group: "g".into(),
            member_id: String::new(),
            instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: session_ms,
            rebalance_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), vec![])],
            subscribed_topics: None,
            require_known_member_id: false,
            fresh_id: "1".into(),
            now_ms: 0,
            owned: None,
            rules: crate::JoinRules::BEFORE_FORMAT_11,
        };
        let reply = state.apply_proposal(crate::state::Proposal {
            at_ms: 0,
            command: join.into(),
        });
        let Ok(Ok(Ok(Joined::Member(id)))) = reply.answer::<JoinGroup>() else {
            panic!("join failed");
        };
        // Formed and synced: the member must now heartbeat.
        let sync = crate::groups::SyncGroup {
            group: "g".into(),
            generation: 1,
            member_id: id.clone(),
            instance_id: None,
            protocol_type: None,
            protocol: None,
            assignments: vec![],
            now_ms: 0,
            decoded: vec![],
            decodes: true,
        };
        state.apply_proposal(crate::state::Proposal {
            at_ms: 0,
            command: sync.into(),
        });
        (state, id)
    }

    #[test]
    fn a_member_heard_within_its_session_stays_and_a_silent_one_goes() {
        let (state, id) = with_member(6_000);
        let live = Liveness::default();
        // Leading since 0: nothing is due before the session ends.
        assert!(live.due(&state, 1, 0).is_empty());
        live.heard(1, "g", &id, 5_000);
        assert!(live.due(&state, 1, 10_000).is_empty(), "heard at 5 s");
        let due = live.due(&state, 1, 11_000);
        assert_eq!(
            due,
            vec![
                ExpireMembers {
                    group: "g".into(),
                    members: vec![(id.clone(), 5_000)],
                    now_ms: 11_000,
                }
                .into()
            ]
        );
    }

    #[test]
    fn a_new_leader_counts_everyone_as_heard_when_it_began() {
        let (state, id) = with_member(6_000);
        let live = Liveness::default();
        live.heard(1, "g", &id, 1_000);
        // Term 2 begins at 50 s: the beat of term 1 is forgotten, and the
        // member counts as heard at 50 s.
        assert!(live.due(&state, 2, 50_000).is_empty());
        assert_eq!(live.last_heard("g", &id), 50_000);
        assert!(live.due(&state, 2, 55_999).is_empty());
        assert_eq!(live.due(&state, 2, 56_000).len(), 1);
        // A beat of an older term is not taken.
        live.heard(1, "g", &id, 56_000);
        assert_eq!(live.last_heard("g", &id), 50_000);
    }

    #[test]
    fn beats_of_members_that_left_are_forgotten() {
        let (state, id) = with_member(6_000);
        let live = Liveness::default();
        live.heard(1, "g", &id, 1_000);
        live.heard(1, "g", "gone", 1_000);
        live.due(&state, 1, 2_000);
        assert_eq!(live.heard.lock().unwrap().last.len(), 1);
    }
}
