//! [`Sequencer`]: what a metastore that applies [`Command`]s to a [`State`]
//! provides (a write through its log, a read, a clock, fresh ids). The Raft
//! node and the simulation's metastores implement it, and so answer every
//! operation the same way (see [`crate::api::Op::run`]).

use std::future::Future;

use uuid::Uuid;

use crate::api::Apply;
use crate::groups::{AwaitGroup, Heard, MemberView};
use crate::state::{Command, Reply, State};
use crate::types::*;

/// A metastore that sequences commands itself (not a client of one).
pub trait Sequencer: Send + Sync + 'static {
    /// Applies `command` through the log and returns the state machine's reply.
    fn propose(&self, command: Command) -> impl Future<Output = Result<Reply, MetaError>> + Send;
    /// Runs `f` on an up-to-date (linearizable) state. (`Clone`, so that a
    /// client may run it again on another node.)
    fn read<T: Send, F: FnOnce(&State) -> T + Clone + Send>(
        &self,
        f: F,
    ) -> impl Future<Output = Result<T, MetaError>> + Send;
    /// The leader's time, for reads that report ages.
    fn now_ms(&self) -> i64;
    /// A fresh id (drawn outside the state machine, which must be deterministic).
    fn new_id(&self) -> Uuid;
    /// Runs `f` as [`Sequencer::read`] does; the group member `f` names, if
    /// any, was heard from (a heartbeat that changes nothing), which a
    /// leader remembers in its memory only (see [`crate::groups`]). By
    /// default nothing is remembered: right for a sequencer with no
    /// leader's memory and no group timers (test doubles, the simulation's
    /// plain metastore), which never expire a member.
    fn read_heard<T: Send, F: FnOnce(&State) -> (T, Option<Heard>) + Clone + Send>(
        &self,
        f: F,
    ) -> impl Future<Output = Result<T, MetaError>> + Send {
        async move { Ok(self.read(f).await?.0) }
    }
    /// Waits until the group changes from the version the waiter saw (or
    /// at most [`crate::groups::MAX_GROUP_WAIT_MS`]); what the member sees.
    /// By default it answers at once (the waiter asks again).
    fn await_group(
        &self,
        wait: AwaitGroup,
    ) -> impl Future<Output = Result<Option<MemberView>, MetaError>> + Send {
        self.read(move |state| {
            state
                .groups()
                .view(&wait.group, &wait.member_id, wait.instance_id.as_deref())
        })
    }

    /// Remembers an agent's cache address in the leader's memory and lists
    /// the agents heard from lately (see [`crate::peers`]). By default
    /// nothing is remembered: only the announcing agent is listed.
    fn cache_peers(
        &self,
        announce: Option<crate::peers::CachePeer>,
    ) -> impl Future<Output = Result<Vec<crate::peers::CachePeer>, MetaError>> + Send {
        async move { Ok(announce.into_iter().collect()) }
    }

    /// The Raft group as its leader sees it (DescribeQuorum). A sequencer
    /// with no group (test doubles, the simulation's plain metastore) has
    /// none to describe.
    fn quorum(&self) -> impl Future<Output = Result<crate::quorum::Quorum, MetaError>> + Send {
        async { Err(MetaError::unavailable("this metastore has no Raft group")) }
    }

    /// Applies `command` through the log; its answer, of its type.
    fn write<C: Apply>(
        &self,
        command: C,
    ) -> impl Future<Output = Result<C::Output, MetaError>> + Send {
        async move { Ok(self.propose(command.into()).await?.answer::<C>()??) }
    }
}
