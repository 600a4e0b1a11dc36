//! [`Sequencer`]: what a metastore that applies [`Command`]s to a [`State`]
//! provides (a write through its log, a read, a clock, fresh ids). The Raft
//! node and the simulation's metastores implement it, and so answer every
//! operation of the contract the same way: each is a [`Transport`] that
//! runs the operation's `impl Query` or `impl Apply` (see [`Run`]).

use std::any::Any;
use std::future::Future;

use uuid::Uuid;

use crate::api::{Op, Request, Transport};
use crate::groups::*;
use crate::ops::*;
use crate::peers::CachePeers;
use crate::quorum::DescribeQuorum;
use crate::state::{Apply, Command, Query, Reply, State};
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

    /// A subscription to pushed changes under a read lease (see
    /// [`crate::contract::push`]). By default there is none.
    fn subscribe(
        &self,
    ) -> impl Future<Output = Result<crate::contract::push::Subscription, MetaError>> + Send {
        async { Err(MetaError::unavailable("this metastore pushes no changes")) }
    }

    /// Applies `command` through the log; its answer, of its type.
    fn write<C: Apply>(
        &self,
        command: C,
    ) -> impl Future<Output = Result<C::Output, MetaError>> + Send {
        async move { Ok(self.propose(command.into()).await?.answer::<C>()??) }
    }
}

/// How a [`Sequencer`] answers one operation of the contract: a read from
/// its state, a write through its log, a `custom` one as its impl below says.
trait Run: Op {
    fn run<S: Sequencer>(
        self,
        on: &S,
    ) -> impl Future<Output = Result<Self::Output, MetaError>> + Send;
}

/// The node's side of the table (see [`crate::api::metastore_ops`]): each
/// read and write's [`Run`], and the dispatch of a [`Request`].
macro_rules! sequenced {
    ($(
        $(#[$doc:meta])*
        $kind:ident $(($retry:ident))? fn $method:ident($($arg:ident: $ty:ty),*) -> $op:ident: $out:ty $build:block
    )*) => {
        $( run_by_kind!($kind $op); )*

        /// Answers `request` on `on`, its answer boxed: [`Transport::call`]
        /// unboxes it as the type its operation names.
        async fn run_request<S: Sequencer>(on: &S, request: Request) -> Result<Box<dyn Any + Send>, MetaError> {
            Ok(match request {
                $( Request::$op(op) => Box::new(Run::run(op, on).await?), )*
            })
        }
    };
}

macro_rules! run_by_kind {
    (read $op:ty) => {
        impl Run for $op {
            async fn run<S: Sequencer>(self, on: &S) -> Result<Self::Output, MetaError> {
                let now_ms = on.now_ms();
                Ok(on.read(move |state| self.query(state, now_ms)).await??)
            }
        }
    };
    (write $op:ty) => {
        impl Run for $op {
            async fn run<S: Sequencer>(self, on: &S) -> Result<Self::Output, MetaError> {
                on.write(self).await
            }
        }
    };
    (custom $op:ty) => {};
}

crate::api::metastore_ops!(sequenced);

impl<S: Sequencer> Transport for S {
    async fn call<O: Op>(&self, op: O) -> Result<O::Output, MetaError> {
        let answer = run_request(self, op.into()).await?;
        // The table gives each operation one answer type, at both ends.
        Ok(*answer
            .downcast::<O::Output>()
            .expect("a request is answered with its operation's type"))
    }

    async fn subscribe(&self) -> Result<crate::contract::push::Subscription, MetaError> {
        Sequencer::subscribe(self).await
    }
}

/// A client asks for a topic by what it should be; the node that proposes
/// it draws its id (the state machine must be deterministic).
impl Run for NewTopic {
    async fn run<S: Sequencer>(self, on: &S) -> Result<TopicInfo, MetaError> {
        let id = on.new_id();
        on.write(CreateTopic { id, topic: self }).await
    }
}

/// Raft's own view, held by the leader, not the state.
impl Run for DescribeQuorum {
    async fn run<S: Sequencer>(self, on: &S) -> Result<Self::Output, MetaError> {
        on.quorum().await
    }
}

/// Soft state on the leader, like a heartbeat.
impl Run for CachePeers {
    async fn run<S: Sequencer>(self, on: &S) -> Result<Self::Output, MetaError> {
        on.cache_peers(self.announce).await
    }
}

/// A heartbeat is checked against the state by the leader and remembered
/// only in its memory.
impl Run for GroupHeartbeat {
    async fn run<S: Sequencer>(self, on: &S) -> Result<Self::Output, MetaError> {
        on.read_heard(move |state| {
            let (answer, alive) = state.groups().check_heartbeat(&self);
            let heard = alive.then(|| Heard {
                group: self.group.clone(),
                member: self.member_id.clone(),
            });
            (answer, heard)
        })
        .await
    }
}

/// A consumer-protocol heartbeat that changes nothing is answered by the
/// leader from its state and remembered in its memory; any other is written.
impl Run for ConsumerHeartbeat {
    async fn run<S: Sequencer>(self, on: &S) -> Result<Self::Output, MetaError> {
        // Decided on the leader's clock (a regular expression's refresh).
        let mut probe = self.clone();
        probe.now_ms = on.now_ms();
        let unchanged = on
            .read_heard(move |state| {
                let answer = state.consumer_unchanged(&probe);
                // Only a member answered without an error was heard.
                let heard = matches!(answer, Some(Ok(_))).then(|| Heard {
                    group: probe.group.clone(),
                    member: probe.member_id.clone(),
                });
                (answer, heard)
            })
            .await?;
        match unchanged {
            Some(answer) => Ok(answer),
            None => on.write(self).await,
        }
    }
}

impl Run for AwaitGroup {
    async fn run<S: Sequencer>(self, on: &S) -> Result<Self::Output, MetaError> {
        on.await_group(self).await
    }
}
