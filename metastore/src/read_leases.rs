//! The leader's side of pushed changes (see [`crate::contract::push`]):
//! who is subscribed, what each one watches and has not acknowledged, and
//! until when each one's read lease holds by this node's clock.
//!
//! The rule that makes a lease safe, checked by [`ReadLeases::settled`]
//! before any write is answered (one that changed nothing may report an
//! earlier change: a retried commit answered from the ledger):
//!
//! - every subscriber has acknowledged the notices sent so far (those of
//!   the partitions it watched when each entry was applied), or its lease
//!   has expired here;
//! - a node that has just begun to lead answers no write until a whole
//!   lease has passed since: a lease granted by the leader before it has
//!   then expired. (A lease is only granted or renewed once the node has
//!   confirmed it leads, after the request arrived; no other leader is
//!   elected until a quorum stops hearing from it, so the new leader's wait
//!   starts after that confirmation, and the agent counts its lease from
//!   before it.)
//!
//! A subscriber that falls behind (a full queue, a notice unacknowledged
//! for half a lease) or whose stream is cut is ended: it gets nothing more
//! and is not renewed, but holds writes back until its lease expires, as
//! it may still trust it until then. One that says goodbye is forgotten at
//! once: it trusts its lease no more.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use crate::contract::push::{
    FromLeader, MAX_QUEUED_NOTICES, MAX_WATCHED, NOTICE_PLAN_BYTES, Versions,
};
use crate::state::State;
use crate::types::{MetaError, Refusal, TopicPartition, TxnReadPlan};

/// Subscriptions one node serves at most (one per agent).
pub const MAX_SUBSCRIPTIONS: usize = 4096;

pub struct ReadLeases {
    length: Duration,
    inner: Mutex<Inner>,
    /// Wakes writes waiting in [`ReadLeases::settled`] when an ack or an
    /// end may have settled them.
    progress: Notify,
}

#[derive(Default)]
struct Inner {
    sessions: BTreeMap<u64, Session>,
    next_session: u64,
    /// The number the next notice gets.
    next_seq: u64,
    /// The term this node leads in; `None`: it does not.
    leading: Option<u64>,
    /// No write is answered before this: a lease after this node last
    /// began to lead. Never moves back (losing the leadership again does
    /// not end the wait).
    not_before: Option<Instant>,
}

struct Session {
    /// The term of the leadership it was opened under.
    term: u64,
    /// When it was opened.
    opened: Instant,
    /// Until when its lease holds here; `None`: never granted.
    expires: Option<Instant>,
    /// Watched partitions, and the offset the next notice's plan starts at.
    watched: BTreeMap<TopicPartition, i64>,
    /// Notices sent and not acknowledged: number, and when sent.
    unacked: VecDeque<(u64, Instant)>,
    /// Dropped when it ends, so its stream closes once drained.
    out: Option<mpsc::Sender<FromLeader>>,
    /// Sent nothing more and not renewed (still holding writes back until
    /// its lease expires).
    ended: bool,
}

impl Inner {
    /// Forgets the sessions that hold nothing back and never will again:
    /// ended ones whose lease expired (or that had none), and silent ones
    /// a lease past their lease's end (or their opening, if never granted).
    /// Dropping a session closes its stream: a connection whose agent
    /// vanished without a word does not stay open.
    fn prune(&mut self, now: Instant, length: Duration) {
        self.sessions.retain(|_, s| match (s.ended, s.expires) {
            (true, None) => false,
            (true, Some(expires)) => expires > now,
            (false, expires) => expires.unwrap_or(s.opened) + length > now,
        });
    }
}

impl Session {
    fn end(&mut self, why: &str) {
        if !self.ended {
            self.ended = true;
            if let Some(out) = self.out.take() {
                let _ = out.try_send(FromLeader::Ended { why: why.into() });
            }
        }
    }

    /// Sends `message`; false if it could not be (and the session ended).
    fn send(&mut self, message: FromLeader) -> bool {
        let sent = self
            .out
            .as_ref()
            .is_some_and(|out| out.try_send(message).is_ok());
        if !sent {
            self.end("the subscriber fell behind");
        }
        sent
    }

    /// Until when it holds back a write answered once notices below `mark`
    /// are acknowledged: while its lease holds, if it has one of them
    /// unacknowledged or was ended (it may have missed one).
    fn holds_back(&self, mark: u64, now: Instant) -> Option<Instant> {
        let behind = self.ended || self.unacked.front().is_some_and(|&(seq, _)| seq < mark);
        self.expires.filter(|&e| behind && e > now)
    }
}

impl ReadLeases {
    pub fn new(length: Duration) -> ReadLeases {
        ReadLeases {
            length,
            inner: Mutex::new(Inner::default()),
            progress: Notify::new(),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes in whether this node leads, and in which term. A new
    /// leadership starts the wait of a whole lease; one that ended (or a
    /// new term) ends every subscription opened under another.
    pub fn observe_leadership(&self, term: Option<u64>) {
        let mut inner = self.inner();
        if term == inner.leading {
            return;
        }
        inner.leading = term;
        if term.is_some() {
            let until = Instant::now() + self.length;
            inner.not_before = inner.not_before.max(Some(until));
        }
        for session in inner.sessions.values_mut() {
            if Some(session.term) != term {
                session.end("the metastore node stopped leading");
            }
        }
        drop(inner);
        self.progress.notify_waiters();
    }

    /// Opens a subscription on this leader: its number and what it is sent.
    pub fn open(&self) -> Result<(u64, mpsc::Receiver<FromLeader>), MetaError> {
        let mut inner = self.inner();
        let Some(term) = inner.leading else {
            return Err(MetaError::NotLeader(None));
        };
        let now = Instant::now();
        inner.prune(now, self.length);
        if inner.sessions.len() >= MAX_SUBSCRIPTIONS {
            return Err(MetaError::unavailable(
                "too many subscriptions to this node",
            ));
        }
        let id = inner.next_session;
        inner.next_session += 1;
        let (out, receiver) = mpsc::channel(MAX_QUEUED_NOTICES);
        inner.sessions.insert(
            id,
            Session {
                term,
                opened: now,
                expires: None,
                watched: BTreeMap::new(),
                unacked: VecDeque::new(),
                out: Some(out),
                ended: false,
            },
        );
        Ok((id, receiver))
    }

    /// Grants or renews subscription `id`'s lease, asked by renewal `ask`.
    /// The caller has confirmed this node leads since the request arrived,
    /// and read `versions` then.
    pub fn renew(&self, id: u64, ask: u64, versions: Versions) {
        let mut inner = self.inner();
        let leading = inner.leading;
        let length = self.length;
        let Some(session) = inner.sessions.get_mut(&id) else {
            return;
        };
        if session.ended {
            return;
        }
        if Some(session.term) != leading {
            session.end("the metastore node stopped leading");
            return;
        }
        let now = Instant::now();
        if session
            .unacked
            .front()
            .is_some_and(|&(_, sent)| now.duration_since(sent) > length / 2)
        {
            session.end("a notice went unacknowledged for half a lease");
            return;
        }
        session.expires = Some(now + length);
        let renewed = FromLeader::Renewed {
            ask,
            lease_ms: length.as_millis() as u64,
            versions,
        };
        session.send(renewed);
    }

    /// Changes what subscription `id` watches, as asked by `ask`, and sends
    /// the added partitions' plans from `state` (the caller holds it read,
    /// so no entry is applied meanwhile: each later one is noticed).
    pub fn watch(
        &self,
        id: u64,
        ask: u64,
        state: &State,
        add: Vec<(TopicPartition, i64)>,
        remove: Vec<TopicPartition>,
    ) {
        let mut inner = self.inner();
        let seq = inner.next_seq;
        let Some(session) = inner.sessions.get_mut(&id) else {
            return;
        };
        if session.ended {
            return;
        }
        for tp in &remove {
            session.watched.remove(tp);
        }
        if session.watched.len() + add.len() > MAX_WATCHED {
            session.end("it watched too many partitions");
            return;
        }
        let mut plans = Vec::with_capacity(add.len());
        for (tp, from) in add {
            let plan = plan_of(state, tp, from);
            session.watched.insert(tp, next_from(&plan, from));
            plans.push((tp, plan));
        }
        let sent = send(session, seq, Some(ask), plans);
        if sent {
            inner.next_seq += 1;
        }
    }

    /// Subscription `id` took in every notice up to `seq`.
    pub fn ack(&self, id: u64, seq: u64) {
        let mut inner = self.inner();
        if let Some(session) = inner.sessions.get_mut(&id) {
            while session.unacked.front().is_some_and(|&(s, _)| s <= seq) {
                session.unacked.pop_front();
            }
        }
        drop(inner);
        self.progress.notify_waiters();
    }

    /// Subscription `id`'s stream ended: with `goodbye` the agent trusts
    /// its lease no more and it is forgotten; otherwise (cut) it is ended
    /// and kept until its lease expires.
    pub fn close(&self, id: u64, goodbye: bool) {
        let mut inner = self.inner();
        if goodbye || inner.sessions.get(&id).is_some_and(|s| s.expires.is_none()) {
            inner.sessions.remove(&id);
        } else if let Some(session) = inner.sessions.get_mut(&id) {
            session.end("the subscription's stream was cut");
        }
        drop(inner);
        self.progress.notify_waiters();
    }

    /// After entries were applied that changed `changed` (the caller holds
    /// the state, so notices leave in log order): a notice to each
    /// subscriber watching some of them.
    pub fn applied(&self, state: &State, changed: &BTreeSet<TopicPartition>) {
        if changed.is_empty() {
            return;
        }
        let mut inner = self.inner();
        let Inner {
            sessions, next_seq, ..
        } = &mut *inner;
        // Subscribers that saw the same high watermark get the same plan.
        let mut planned = std::collections::HashMap::new();
        for session in sessions.values_mut().filter(|s| !s.ended) {
            let mut plans = Vec::new();
            for tp in changed {
                if let Some(from) = session.watched.get_mut(tp) {
                    let plan = planned
                        .entry((*tp, *from))
                        .or_insert_with(|| plan_of(state, *tp, *from))
                        .clone();
                    *from = next_from(&plan, *from);
                    plans.push((*tp, plan));
                }
            }
            if !plans.is_empty() && send(session, *next_seq, None, plans) {
                *next_seq += 1;
            }
        }
    }

    /// Waits until a write applied now may be answered: every notice sent
    /// so far is acknowledged by its subscriber or that one's lease has
    /// expired, and a lease has passed since this node last began to lead.
    /// At most about a lease and a half (a notice left unacknowledged for
    /// almost half a lease, then a renewal).
    pub async fn settled(&self) {
        let mark = self.inner().next_seq;
        loop {
            let notified = self.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let Some(until) = self.held_until(mark) else {
                return;
            };
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }

    /// Until when a write that must wait for notices below `mark` waits at
    /// most, as things stand; `None`: it need not.
    fn held_until(&self, mark: u64) -> Option<Instant> {
        let now = Instant::now();
        let mut inner = self.inner();
        inner.prune(now, self.length);
        let led_enough = inner.not_before.filter(|&until| until > now);
        inner
            .sessions
            .values()
            .filter_map(|s| s.holds_back(mark, now))
            .chain(led_enough)
            .max()
    }
}

fn plan_of(state: &State, tp: TopicPartition, from: i64) -> Result<TxnReadPlan, Refusal> {
    state.txn_read_plan(tp.topic_id, tp.partition, from, NOTICE_PLAN_BYTES)
}

/// Where the next notice's plan starts: the high watermark just sent (as a
/// confirmation round asks from the highest one seen).
fn next_from(plan: &Result<TxnReadPlan, Refusal>, from: i64) -> i64 {
    match plan {
        Ok(plan) => plan.plan.high_watermark,
        Err(Refusal::OffsetOutOfRange { high_watermark, .. }) => *high_watermark,
        Err(_) => from,
    }
}

/// Sends a notice numbered `seq`; false if the session was ended instead.
fn send(
    session: &mut Session,
    seq: u64,
    answers: Option<u64>,
    plans: Vec<(TopicPartition, Result<TxnReadPlan, Refusal>)>,
) -> bool {
    let notice = FromLeader::Notice {
        seq,
        answers,
        plans,
    };
    if !session.send(notice) {
        return false;
    }
    session.unacked.push_back((seq, Instant::now()));
    true
}
