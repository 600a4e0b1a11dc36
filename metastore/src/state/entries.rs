//! The log's entries: [`Command`] (one variant per write, in the order of
//! their variant indices, part of the log's format), [`GroupCommand`], a
//! [`Batch`] of commands proposed together, the [`Proposal`] that stamps an
//! entry with the leader's clock and the [`Reply`] that carries its answer.

use super::*;

/// The log's entries, one variant per write in the order of their variant
/// indices, which are part of the log's encoding (see `golden.rs`): append
/// only. Each variant's answer and how it is applied are its [`Apply`] impl.
macro_rules! commands {
    ($($variant:ident($command:ty)),* $(,)?) => {
        /// A mutation of the metastore, as logged.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        pub enum Command {
            $($variant($command),)*
        }

        $(impl From<$command> for Command {
            fn from(command: $command) -> Command {
                Command::$variant(command)
            }
        })*

        impl Command {
            /// Whether a client may send this command again when it does
            /// not know whether the first one applied.
            pub fn retry_is_safe(&self) -> bool {
                match self {
                    $(Command::$variant(c) => Entry::retry_is_safe(c),)*
                }
            }

            /// Replaces every time the sender put in the command with `now_ms`.
            pub(super) fn restamp(&mut self, now_ms: i64) {
                match self {
                    $(Command::$variant(c) => Entry::restamp(c, now_ms),)*
                }
            }

            pub(super) fn apply_to(self, state: &mut State) -> Reply {
                match self {
                    $(Command::$variant(c) => Entry::apply_to(c, state),)*
                }
            }
        }
    };
}

/// What the log does with a variant's content: an [`Apply`], or an enum of
/// them kept as one variant for the log's format ([`GroupCommand`]).
pub(super) trait Entry {
    fn retry_is_safe(&self) -> bool;
    fn restamp(&mut self, now_ms: i64);
    fn apply_to(self, state: &mut State) -> Reply;
}

impl<C: Apply> Entry for C {
    fn retry_is_safe(&self) -> bool {
        Apply::retry_is_safe(self)
    }
    fn restamp(&mut self, now_ms: i64) {
        Apply::restamp(self, now_ms)
    }
    fn apply_to(self, state: &mut State) -> Reply {
        Reply::of::<C>(&self.apply(state))
    }
}

/// Each group operation is its own [`Apply`]; the log keeps them under one
/// variant, as it always has.
macro_rules! group_commands {
    ($($variant:ident($command:ty)),* $(,)?) => {
        /// A group operation as the log holds it (`Command::Group`): the
        /// order of the variants is part of the log's format (see
        /// `golden.rs`). Each is applied, and answered with its own type,
        /// through its `Apply` impl.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        pub enum GroupCommand {
            $($variant($command),)*
        }

        $(impl From<$command> for Command {
            fn from(command: $command) -> Command {
                Command::Group(GroupCommand::$variant(command))
            }
        })*

        impl Entry for GroupCommand {
            fn retry_is_safe(&self) -> bool {
                match self {
                    $(GroupCommand::$variant(c) => Entry::retry_is_safe(c),)*
                }
            }
            fn restamp(&mut self, now_ms: i64) {
                match self {
                    $(GroupCommand::$variant(c) => Entry::restamp(c, now_ms),)*
                }
            }
            fn apply_to(self, state: &mut State) -> Reply {
                match self {
                    $(GroupCommand::$variant(c) => Entry::apply_to(c, state),)*
                }
            }
        }
    };
}

group_commands! {
    Join(JoinGroupV8),
    Sync(SyncGroupV8),
    Leave(LeaveGroup),
    Tick(TickGroup),
    CommitOffsets(CommitOffsets),
    Expire(ExpireMembers),
    Delete(DeleteGroups),
    DeleteOffsets(DeleteOffsets),
    Consumer(ConsumerHeartbeatV8),
    JoinWithOwned(JoinGroupV10),
    SyncWithDecoded(SyncGroup),
    ConsumerMigrating(ConsumerHeartbeatV10),
    ConsumerDescribing(ConsumerHeartbeat),
    JoinRuled(JoinGroup),
}

impl GroupCommand {
    /// The group whose members, phase or assignments this may change (what
    /// waiters of [`crate::groups::AwaitGroup`] are woken for).
    fn changes_members_of(&self) -> Option<&str> {
        match self {
            GroupCommand::Join(c) => Some(&c.group),
            GroupCommand::Sync(c) => Some(&c.group),
            GroupCommand::JoinWithOwned(c) => Some(&c.group),
            GroupCommand::JoinRuled(c) => Some(&c.group),
            GroupCommand::SyncWithDecoded(c) => Some(&c.group),
            GroupCommand::Consumer(c) => Some(&c.0.group),
            // A join may upgrade a classic group, whose waiters must learn.
            GroupCommand::ConsumerMigrating(c) => Some(&c.group),
            GroupCommand::ConsumerDescribing(c) => Some(&c.group),
            GroupCommand::Leave(c) => Some(&c.group),
            GroupCommand::Tick(c) => Some(&c.group),
            GroupCommand::Expire(c) => Some(&c.group),
            GroupCommand::CommitOffsets(_)
            | GroupCommand::Delete(_)
            | GroupCommand::DeleteOffsets(_) => None,
        }
    }
}

commands! {
    CreateTopic(CreateTopic),
    DeleteTopic(DeleteTopic),
    Commit(Commit),
    ReplaceExtents(ReplaceExtents),
    InitProducer(InitProducer),
    ForgetGarbage(ForgetGarbage),
    RegisterAgent(RegisterAgent),
    AgentHeartbeat(AgentHeartbeat),
    AlterTopicConfigs(AlterTopicConfigs),
    CreatePartitions(CreatePartitions),
    Trim(Trim),
    RecordOrphans(RecordOrphans),
    Group(GroupCommand),
    AcquireLease(AcquireLease),
    ReleaseLease(ReleaseLease),
    Tick(Tick),
    ReplaceRuns(ReplaceRuns),
    Batch(Batch),
    AlterScramCredentials(AlterScramCredentials),
    CreateAcls(CreateAcls),
    DeleteAcls(DeleteAcls),
    InitTxnProducer(InitTxnProducer),
    AddToTxn(AddToTxn),
    EndTxn(EndTxn),
    IngestCommit(IngestCommit),
    TxnCommitOffsets(TxnCommitOffsets),
    AlterConfigs(AlterConfigs),
    RegisterAgentListeners(RegisterAgentListeners),
    AllocateProducerIds(AllocateProducerIds),
    InitTxnProducerChecked(InitTxnProducerChecked),
    ClaimClusterId(ClaimClusterId),
    HoldGarbage(HoldGarbage),
    ShareHeartbeat(ShareHeartbeat),
    AcquireShare(AcquireShare),
    AcknowledgeShare(AcknowledgeShare),
    ReleaseShare(ReleaseShare),
    AlterShareOffsets(AlterShareOffsets),
    DeleteShareOffsets(DeleteShareOffsets),
}

/// Commands proposed together in one entry (group commit, see
/// `raft::group_commit`): applied in order, at the entry's time, each
/// answered as if it had been alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch(pub Vec<Command>);

impl Entry for Batch {
    fn retry_is_safe(&self) -> bool {
        self.0.iter().all(Command::retry_is_safe)
    }
    fn restamp(&mut self, now_ms: i64) {
        self.0.iter_mut().for_each(|c| c.restamp(now_ms));
    }
    fn apply_to(self, state: &mut State) -> Reply {
        let replies: Vec<Reply> = self.0.into_iter().map(|c| c.apply_to(state)).collect();
        Reply(postcard::to_stdvec(&replies).unwrap_or_default())
    }
}

impl Command {
    /// Every group whose members, phase or assignments this command may change.
    pub fn groups_changed(&self, out: &mut Vec<String>) {
        match self {
            Command::Group(g) => out.extend(g.changes_members_of().map(str::to_string)),
            Command::Batch(b) => b.0.iter().for_each(|c| c.groups_changed(out)),
            _ => {}
        }
    }

    /// How much of an entry this command takes, roughly in committed
    /// batches (the bulk of a commit), so group commit keeps entries small.
    pub fn weight(&self) -> usize {
        match self {
            Command::Commit(c) => 1 + c.batches.len(),
            Command::IngestCommit(c) => 1 + c.batches.len() + c.ends.len(),
            Command::AddToTxn(a) => 1 + (a.partitions.len() + a.groups.len()) / 64,
            Command::TxnCommitOffsets(c) => 1 + c.commit.offsets.len(),
            Command::ReplaceRuns(r) => {
                1 + r
                    .runs
                    .iter()
                    .map(|run| run.replaced.len() + run.pieces.len())
                    .sum::<usize>()
            }
            Command::ReplaceExtents(r) => 1 + r.replaced.len() + r.pieces.len(),
            Command::Batch(b) => b.0.iter().map(Command::weight).sum(),
            Command::RecordOrphans(r) => 1 + r.keys.len(),
            Command::ForgetGarbage(f) => 1 + f.keys.len(),
            Command::CreateTopic(c) => 1 + c.topic.partitions.max(0) as usize / 16,
            Command::Group(GroupCommand::CommitOffsets(c)) => 1 + c.offsets.len(),
            Command::Group(GroupCommand::JoinWithOwned(JoinGroupV10 { protocols, .. }))
            | Command::Group(GroupCommand::JoinRuled(JoinGroup { protocols, .. })) => {
                1 + protocols.iter().map(|(_, m)| m.len()).sum::<usize>() / 64
            }
            Command::Group(GroupCommand::SyncWithDecoded(s)) => {
                1 + s.assignments.iter().map(|(_, a)| a.len()).sum::<usize>() / 64
            }
            _ => 1,
        }
    }
}

/// One entry of the replicated log: a command and the time the leader that
/// proposed it read from its clock. Every decision about time (sessions,
/// liveness, leases, expiry) is made on these stamps, through the state's
/// monotonic [`State::clock_ms`], never on a sender's clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    pub at_ms: i64,
    pub command: Command,
}

/// What applying a [`Command`] answered: the command's `Result<Output,
/// Refusal>`, encoded, so that one type carries every command's answer
/// through the log's machinery. [`Reply::answer`] reads it as the answer of
/// the same command's type; the node that proposed a command is the one
/// that applies it and reads its reply, so both ends are one binary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply(Vec<u8>);

impl Reply {
    fn of<C: Apply>(answer: &Result<C::Output, Refusal>) -> Reply {
        // Plain data always encodes; an empty reply would fail to decode.
        Reply(postcard::to_stdvec(answer).unwrap_or_default())
    }

    /// The refusal, if the command was refused (whatever its type: an
    /// answer is a `Result`, whose `Err` begins with 1).
    pub fn refusal(&self) -> Option<Refusal> {
        match self.0.as_slice() {
            [1, rest @ ..] => postcard::from_bytes(rest).ok(),
            _ => None,
        }
    }

    /// The replies of a [`Batch`]'s commands, in order.
    pub fn batch(&self) -> Result<Vec<Reply>, MetaError> {
        postcard::from_bytes(&self.0)
            .map_err(|e| MetaError::Storage(format!("a reply that is not a batch's: {e}")))
    }

    /// The answer of command type `C`.
    pub fn answer<C: Apply>(&self) -> Result<Result<C::Output, Refusal>, MetaError> {
        postcard::from_bytes(&self.0).map_err(|e| {
            MetaError::Storage(format!(
                "a reply that is not the answer of a {}: {e}",
                std::any::type_name::<C>()
            ))
        })
    }
}
