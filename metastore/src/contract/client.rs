//! [`RemoteMetastore`]: the metastore over the network, so several agents
//! share one. It implements the same [`Transport`] (so the same
//! `Metastore` trait) as a node does, and keeps a pool of connections.
//!
//! Leader finding: the client is given every node's address. A follower
//! answers [`MetaError::NotLeader`] with the leader's address (nothing was
//! applied), and the client moves there; an unreachable node sends it on to
//! the next address.
//!
//! Retries: a request that never left the client, or that a node refused
//! without applying it, is retried freely. One that was sent but got no
//! answer may have been applied, so only operations that are safe to repeat
//! ([`Op::retry_is_safe`]) are resent; anything else then fails with
//! [`MetaError::Unavailable`] saying it may have been applied.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::contract::api::{Answer, Op, Transport};
use crate::contract::quorum::{ClusterStatus, NodeId};
use crate::contract::types::*;
use crate::contract::wire::{
    DEFAULT_ATTEMPT_TIMEOUT, DEFAULT_RETRY_FOR, Envelope, NodeRequest, SUBSCRIBE, WIRE_VERSION,
    codec, connect,
};

type Connection = Framed<TcpStream, LengthDelimitedCodec>;

/// Why one attempt failed: before anything was sent, or after.
enum Attempt {
    NotSent(String),
    Unanswered(String),
}

/// A [`Metastore`] reached over the network: one node, or a Raft group.
pub struct RemoteMetastore {
    /// Every node's address; requests go to the one believed to lead.
    addresses: Vec<String>,
    leader: Mutex<String>,
    /// Idle connections, with the address each goes to.
    idle: Mutex<Vec<(String, Connection)>>,
    retry_for: Duration,
    attempt_timeout: Duration,
    /// Called once per request sent, with its operation's name and its
    /// round trip if it was answered (for the agent's metrics).
    on_request: Option<RequestHook>,
    /// Proved to every node connected to.
    secret: Option<crate::contract::peer_auth::ClusterSecret>,
    /// Told of every message of a subscription's stream.
    on_stream: Option<crate::contract::push::StreamHook>,
}

/// See [`RemoteMetastore::with_request_hook`].
pub type RequestHook = Arc<dyn Fn(&'static str, Option<Duration>) + Send + Sync>;

/// One request sent, told to the hook when dropped.
struct RoundTrip<'a> {
    hook: Option<&'a RequestHook>,
    name: &'static str,
    sent: tokio::time::Instant,
    answered: Option<Duration>,
}

impl Drop for RoundTrip<'_> {
    fn drop(&mut self) {
        if let Some(hook) = self.hook {
            hook(self.name, self.answered);
        }
    }
}

/// Nodes one round remembers having asked (hints may name any address).
const MAX_ASKED: usize = 64;

/// The nodes a call asked in its current round. A hint to one of them is
/// not followed: two nodes may point at each other during an election,
/// and a node removed from the group goes on naming the leader it last
/// knew, so a call that always followed hints could shuttle between two
/// nodes that do not lead and never ask the one that does. Once every
/// configured node was asked, a new round begins.
#[derive(Debug, Default)]
pub struct Round {
    asked: Vec<String>,
}

impl Round {
    /// Notes that the call asks `address` now.
    pub fn ask(&mut self, address: &str) {
        if !self.asked.iter().any(|a| a == address) && self.asked.len() < MAX_ASKED {
            self.asked.push(address.to_string());
        }
    }

    /// Where the call goes after `failed` did not serve it: the node `hint`
    /// names unless this round asked it; else the first of `addresses`
    /// after `failed` this round has not asked; else (the round is over,
    /// and a new one begins) the hinted node, or the next after `failed`.
    pub fn next(&mut self, addresses: &[String], failed: &str, hint: Option<String>) -> String {
        let asked = |a: &String| self.asked.contains(a);
        if let Some(hint) = &hint
            && !asked(hint)
        {
            return hint.clone();
        }
        let count = addresses.len();
        let after = addresses
            .iter()
            .position(|a| a == failed)
            .map_or(0, |at| at + 1);
        let mut ring = (0..count).map(|k| &addresses[(after + k) % count]);
        if let Some(untried) = ring.clone().find(|a| !asked(a)) {
            return untried.clone();
        }
        self.asked.clear();
        hint.or_else(|| ring.next().cloned())
            .unwrap_or_else(|| failed.to_string())
    }
}

impl RemoteMetastore {
    /// `addresses`: `host:port` of one node, or of several separated by commas.
    pub fn new(addresses: impl AsRef<str>) -> Self {
        let addresses: Vec<String> = addresses
            .as_ref()
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(String::from)
            .collect();
        RemoteMetastore {
            leader: Mutex::new(addresses.first().cloned().unwrap_or_default()),
            addresses,
            idle: Mutex::new(Vec::new()),
            retry_for: DEFAULT_RETRY_FOR,
            attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
            on_request: None,
            secret: None,
            on_stream: None,
        }
    }

    /// Proves `secret` to every node (see [`crate::contract::peer_auth`]).
    pub fn with_secret(
        mut self,
        secret: Option<crate::contract::peer_auth::ClusterSecret>,
    ) -> Self {
        self.secret = secret;
        self
    }

    /// Calls `hook` once for every request sent to a node (retries
    /// included), with the request's name (`"Node"` for a node request) and
    /// how long the node took to answer (none: it did not).
    pub fn with_request_hook(mut self, hook: RequestHook) -> Self {
        self.on_request = Some(hook);
        self
    }

    /// Calls `hook` with the name of every message a subscription's stream
    /// carries, either way (they are not requests: see
    /// [`crate::contract::push`]).
    pub fn with_stream_hook(mut self, hook: crate::contract::push::StreamHook) -> Self {
        self.on_stream = Some(hook);
        self
    }

    /// How long requests that are safe to repeat are retried while the
    /// metastore cannot be reached or has no leader.
    pub fn with_retry_for(mut self, retry_for: Duration) -> Self {
        self.retry_for = retry_for;
        self
    }

    /// How long one attempt at one node may take (see [`DEFAULT_ATTEMPT_TIMEOUT`]).
    pub fn with_attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    fn leader(&self) -> String {
        self.leader.lock().expect("leader lock").clone()
    }

    /// Sends later requests where `round` says, after `failed` answered
    /// with `hint` (unless another call moved them already).
    fn move_on(&self, failed: &str, hint: Option<String>, round: &mut Round) {
        let mut leader = self.leader.lock().expect("leader lock");
        if *leader != failed {
            return;
        }
        let next = round.next(&self.addresses, failed, hint);
        if next != failed {
            tracing::debug!(from = failed, to = %next, "metastore client moves to another node");
            *leader = next;
        }
    }

    /// One attempt at one node, within the attempt timeout. A timed-out
    /// attempt counts as unanswered: the request may have been applied.
    async fn once<T: Answer>(
        &self,
        address: &str,
        frame: &Bytes,
        name: &'static str,
    ) -> Result<Result<T, MetaError>, Attempt> {
        match tokio::time::timeout(self.attempt_timeout, self.attempt(address, frame, name)).await {
            Ok(result) => result,
            // The connection is dropped with the future: a late answer can
            // never be read as the next request's.
            Err(_) => Err(Attempt::Unanswered(format!(
                "{address} did not answer within {:?}",
                self.attempt_timeout
            ))),
        }
    }

    async fn attempt<T: Answer>(
        &self,
        address: &str,
        frame: &Bytes,
        name: &'static str,
    ) -> Result<Result<T, MetaError>, Attempt> {
        let pooled = {
            let mut idle = self.idle.lock().expect("pool lock");
            idle.iter()
                .rposition(|(a, _)| a == address)
                .map(|at| idle.swap_remove(at).1)
        };
        let mut conn = match pooled {
            Some(conn) => conn,
            None => {
                let mut conn =
                    Framed::new(connect(address).await.map_err(Attempt::NotSent)?, codec());
                if let Some(secret) = &self.secret {
                    crate::contract::peer_auth::client(&mut conn, secret)
                        .await
                        .map_err(|why| Attempt::NotSent(format!("{address}: {why}")))?;
                }
                conn
            }
        };
        // Reported however the attempt ends, its deadline's cancellation included.
        let mut round_trip = RoundTrip {
            hook: self.on_request.as_ref(),
            name,
            sent: tokio::time::Instant::now(),
            answered: None,
        };
        if let Err(e) = conn.send(frame.clone()).await {
            // A pooled connection the server closed fails here; nothing was applied.
            return Err(Attempt::NotSent(e.to_string()));
        }
        let answer = conn.next().await;
        if let Some(Ok(_)) = &answer {
            round_trip.answered = Some(round_trip.sent.elapsed());
        }
        let reply = match answer {
            Some(Ok(bytes)) => postcard::from_bytes(&bytes)
                .map_err(|e| Attempt::Unanswered(format!("an undecodable answer: {e}")))?,
            Some(Err(e)) => return Err(Attempt::Unanswered(e.to_string())),
            None => return Err(Attempt::Unanswered("connection closed".into())),
        };
        self.idle
            .lock()
            .expect("pool lock")
            .push((address.to_string(), conn));
        Ok(reply)
    }

    /// Sends `envelope` to the leader, following hints and retrying what
    /// may be retried (see [`MetaError::worth_retrying`]) for `retry_for`.
    async fn send<T: Answer>(
        &self,
        envelope: Envelope,
        retry_is_safe: bool,
    ) -> Result<T, MetaError> {
        let frame = envelope.frame()?;
        let name = envelope.name();
        let deadline = tokio::time::Instant::now() + self.retry_for;
        let mut backoff = Duration::from_millis(20);
        let mut redirects = 0;
        // Whether an attempt so far may have been applied.
        let mut maybe_applied = false;
        let mut round = Round::default();
        loop {
            let address = self.leader();
            round.ask(&address);
            let mut hint = None;
            let why = match self.once::<T>(&address, &frame, name).await {
                // Not applied: the node does not lead. Go where it points.
                Ok(Err(MetaError::NotLeader(named))) => {
                    let known = named.is_some();
                    redirects += 1;
                    // Follow a hint at once, but not round in circles: during
                    // an election two nodes may point at each other.
                    if known && redirects <= self.addresses.len() + 1 {
                        self.move_on(&address, named, &mut round);
                        continue;
                    }
                    hint = named;
                    format!("{address} knows no leader yet")
                }
                // The node could not confirm it leads or could not reach a
                // quorum; another node may be able to.
                Ok(Err(e)) if e.worth_retrying(retry_is_safe) => {
                    maybe_applied |= !e.certainly_not_applied();
                    format!("{address}: {e}")
                }
                Ok(Err(MetaError::Refused(refusal))) => {
                    return Err(refusal.after_retries(maybe_applied));
                }
                Ok(answer) => return answer,
                Err(Attempt::NotSent(why)) => why,
                Err(Attempt::Unanswered(why)) if retry_is_safe => {
                    maybe_applied = true;
                    why
                }
                Err(Attempt::Unanswered(why)) => {
                    self.move_on(&address, None, &mut round);
                    return Err(MetaError::maybe_applied(format!("{address}: {why}")));
                }
            };
            self.move_on(&address, hint, &mut round);
            if tokio::time::Instant::now() >= deadline {
                return Err(MetaError::Unavailable { why, maybe_applied });
            }
            tracing::debug!(%address, %why, "metastore call failed; retrying");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }

    /// Opens a subscription on the leader (following its hints), within
    /// the attempt timeout each.
    async fn open_subscription(&self) -> Result<crate::contract::push::Subscription, MetaError> {
        let mut redirects = 0;
        let mut round = Round::default();
        loop {
            let address = self.leader();
            round.ask(&address);
            let opened = tokio::time::timeout(self.attempt_timeout, self.subscribe_at(&address));
            let why = match opened.await {
                Ok(Ok(Ok(connection))) => {
                    let hook = self.on_stream.clone();
                    return Ok(crate::contract::push::Subscription::over(connection, hook));
                }
                Ok(Ok(Err(MetaError::NotLeader(Some(hint)))))
                    if redirects <= self.addresses.len() =>
                {
                    self.move_on(&address, Some(hint), &mut round);
                    redirects += 1;
                    continue;
                }
                Ok(Ok(Err(e))) => return Err(e),
                Ok(Err(why)) => why,
                Err(_) => format!("{address} did not answer within {:?}", self.attempt_timeout),
            };
            self.move_on(&address, None, &mut round);
            return Err(MetaError::unavailable(why));
        }
    }

    /// Asks `address` to make a new connection a subscription: the
    /// connection once it said yes, or its refusal.
    async fn subscribe_at(&self, address: &str) -> Result<Result<Connection, MetaError>, String> {
        let mut conn = Framed::new(connect(address).await?, codec());
        if let Some(secret) = &self.secret {
            crate::contract::peer_auth::client(&mut conn, secret)
                .await
                .map_err(|why| format!("{address}: {why}"))?;
        }
        let mut round_trip = RoundTrip {
            hook: self.on_request.as_ref(),
            name: "Subscribe",
            sent: tokio::time::Instant::now(),
            answered: None,
        };
        let frame = Bytes::from_static(&[SUBSCRIBE, WIRE_VERSION]);
        conn.send(frame).await.map_err(|e| e.to_string())?;
        let answer = match conn.next().await {
            Some(Ok(bytes)) => postcard::from_bytes::<Result<(), MetaError>>(&bytes)
                .map_err(|e| format!("an undecodable answer: {e}"))?,
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("connection closed".into()),
        };
        round_trip.answered = Some(round_trip.sent.elapsed());
        Ok(answer.map(|()| conn))
    }

    /// Adds node `id` at `address` to the group (as a learner until it has
    /// caught up, then as a voter).
    pub async fn add_node(&self, id: NodeId, address: String) -> Result<(), MetaError> {
        self.send(Envelope::Node(NodeRequest::AddNode { id, address }), false)
            .await
    }

    /// Removes node `id` from the group.
    pub async fn remove_node(&self, id: NodeId) -> Result<(), MetaError> {
        self.send(Envelope::Node(NodeRequest::RemoveNode { id }), false)
            .await
    }

    /// A backup of the group's state, taken by its leader under a GC hold
    /// of `hold_ms` (a retry takes another hold, which only holds longer).
    pub async fn backup(&self, hold_ms: i64) -> Result<crate::contract::backup::Backup, MetaError> {
        self.send(Envelope::Node(NodeRequest::Backup { hold_ms }), true)
            .await
    }

    /// What the node at `address` knows of its group.
    pub async fn status_of(&self, address: &str) -> Result<ClusterStatus, MetaError> {
        let frame = Envelope::Node(NodeRequest::Status).frame()?;
        match self.once(address, &frame, "Node").await {
            Ok(answer) => answer,
            Err(Attempt::NotSent(why) | Attempt::Unanswered(why)) => {
                Err(MetaError::unavailable(format!("{address}: {why}")))
            }
        }
    }

    /// Every address this client was given.
    pub fn addresses(&self) -> &[String] {
        &self.addresses
    }
}

impl Transport for RemoteMetastore {
    async fn call<O: Op>(&self, op: O) -> Result<O::Output, MetaError> {
        let retry_is_safe = op.retry_is_safe();
        self.send(Envelope::Op(Box::new(op.into())), retry_is_safe)
            .await
    }

    async fn subscribe(&self) -> Result<crate::contract::push::Subscription, MetaError> {
        self.open_subscription().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> Vec<String> {
        ["n1", "n2", "n3"].map(String::from).to_vec()
    }

    /// Where a call that starts at `first` goes over `addresses`, each node
    /// answering as `answers` says (`Err(hint)`: not served), until one
    /// serves it.
    fn walk_over(
        addresses: &[String],
        first: &str,
        answers: impl Fn(&str) -> Result<(), Option<&'static str>>,
    ) -> Vec<String> {
        let mut round = Round::default();
        let mut at = first.to_string();
        let mut path = vec![at.clone()];
        for _ in 0..12 {
            round.ask(&at);
            let Err(hint) = answers(&at) else {
                return path;
            };
            at = round.next(addresses, &at, hint.map(String::from));
            path.push(at.clone());
        }
        panic!("never served: {path:?}");
    }

    fn walk(
        first: &str,
        answers: impl Fn(&str) -> Result<(), Option<&'static str>>,
    ) -> Vec<String> {
        walk_over(&nodes(), first, answers)
    }

    /// A node removed from the group names the leader it last knew (n3, a
    /// node just wiped that knows none); the leader is the third node.
    #[test]
    fn a_stale_hint_does_not_keep_a_call_from_the_leader() {
        let answers = |node: &str| match node {
            "n1" => Err(Some("n3")),
            "n3" => Err(None),
            _ => Ok(()),
        };
        assert_eq!(walk("n1", answers), ["n1", "n3", "n2"]);
        assert_eq!(walk("n3", answers), ["n3", "n1", "n2"]);
    }

    #[test]
    fn hints_are_followed_once_a_round_and_every_node_asked_each_round() {
        // Two nodes pointing at each other during an election.
        let answers = |node: &str| match node {
            "n1" => Err(Some("n2")),
            "n2" => Err(Some("n1")),
            _ => Ok(()),
        };
        assert_eq!(walk("n1", answers), ["n1", "n2", "n3"]);
        // A hint to an address not configured is followed.
        let answers = |node: &str| match node {
            "n1" => Err(Some("elsewhere")),
            "elsewhere" => Ok(()),
            _ => Err(None),
        };
        assert_eq!(walk("n1", answers), ["n1", "elsewhere"]);
        // Once every node was asked, a hint is followed again.
        let mut round = Round::default();
        for node in nodes() {
            round.ask(&node);
        }
        assert_eq!(round.next(&nodes(), "n3", Some("n2".into())), "n2");
        assert_eq!(round.next(&nodes(), "n2", None), "n3");
    }

    /// One seed address, and a leader it names that failed once: the call
    /// goes back to the leader, not round the seed alone.
    #[test]
    fn a_leader_known_only_by_its_hint_is_asked_again() {
        let seed = vec!["seed".to_string()];
        let failed_once = std::sync::atomic::AtomicBool::new(false);
        let answers = |node: &str| match node {
            "seed" => Err(Some("leader")),
            _ if !failed_once.swap(true, std::sync::atomic::Ordering::SeqCst) => Err(None),
            _ => Ok(()),
        };
        assert_eq!(
            walk_over(&seed, "seed", answers),
            ["seed", "leader", "seed", "leader"]
        );
    }
}
