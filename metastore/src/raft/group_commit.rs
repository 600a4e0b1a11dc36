//! Group commit: proposals that arrive while the log is busy share one entry.
//!
//! Every Raft entry costs an fsync on a quorum, so a node that proposed one
//! entry per command topped out at a few hundred commands a second on three
//! nodes however many agents were waiting. Here one task takes the commands
//! in the order they arrive, and every command waiting when it is ready to
//! propose goes into one [`Batch`] entry (up to [`MAX_COMMANDS`] and
//! [`MAX_WEIGHT`]); up to [`MAX_IN_FLIGHT`] entries are in the log at once,
//! so while one waits for its quorum the next fills. Under load each entry
//! carries many commands; alone, a command is proposed at once, as before.
//!
//! Senders come back: an agent commits its next file as soon as the last
//! is answered. Proposed the moment the log has room, an entry would leave
//! out the senders it just answered, still a network round trip away, and
//! they would split into two cohorts taking turns, each waiting out the
//! other's entry (16 committers on three nodes: 8 commands an entry, 5,500
//! commits/s). So an entry also waits for the senders answered since the
//! last entry (counted, not known by name), until [`LINGER`] after their
//! answer, and stops waiting for a while once they did not come; a lone
//! sender, already back, never waits.
//!
//! Order: commands are proposed in the order [`GroupCommit::propose`] was
//! called, and a batch's commands are applied in order within its entry, so
//! one caller's commands (an agent's commits, in file order) keep their order.
//! Outcome: every command of an entry shares its fate: all applied, all
//! certainly not (a node that no longer leads refuses the entry), or all
//! unknown (no quorum in time).

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::Raft;
use super::stamps::Stamps;
use crate::state::{Batch, Command, Proposal, Reply};
use crate::types::MetaError;

/// Commands in one entry at most.
pub const MAX_COMMANDS: usize = 256;
/// An entry's commands weigh at most this (see [`Command::weight`]): about
/// 1,024 committed batches, some 40 KiB, as large as one commit of a big
/// ingest file was alone, so an entry replicates within a heartbeat as
/// entries did before they were batched.
pub const MAX_WEIGHT: usize = 1_024;
/// Entries proposed and not yet answered at once.
pub const MAX_IN_FLIGHT: usize = 2;
/// How long after an answer a proposal still waits for the senders it
/// answered (on loopback, on this 2-core machine, most are back within half
/// of this; with 0.5 ms, enough missed it that 16 committers made 8,200 to
/// 9,100 commits/s instead of 9,500 to 9,800).
const LINGER: Duration = Duration::from_millis(1);
/// Proposals that do not wait after one waited in vain, so senders that do
/// not come back (or come back slower than [`LINGER`]) cost at most one
/// wait in this many entries.
const SKIP_AFTER_MISS: usize = 16;
/// Commands waiting for an entry at most; a proposer past it waits for room.
pub(crate) const QUEUE: usize = 8_192;

pub(crate) type Answer = Result<Reply, MetaError>;

pub(crate) struct Waiting {
    pub command: Command,
    pub answer: oneshot::Sender<Answer>,
}

/// The queue in front of a node's log.
pub struct GroupCommit {
    queue: mpsc::Sender<Waiting>,
    timeout: Duration,
}

impl GroupCommit {
    /// Starts the task that proposes batches to `raft`, stamped by `stamps`;
    /// it ends when this is dropped. `timeout` bounds each entry's wait for
    /// its quorum.
    pub fn start(raft: Raft, stamps: Arc<Stamps>, timeout: Duration) -> GroupCommit {
        let (queue, waiting) = mpsc::channel(QUEUE);
        tokio::spawn(propose_batches(raft, stamps, timeout, waiting));
        GroupCommit { queue, timeout }
    }

    /// Applies `command` through the log, in a batch with whatever else
    /// waits. Bounded: `timeout` to find room in the queue (then certainly
    /// not applied), and twice that for the answer (then unknown).
    pub async fn propose(&self, command: Command) -> Answer {
        let (answer, reply) = oneshot::channel();
        let queued = self.queue.send(Waiting { command, answer });
        match tokio::time::timeout(self.timeout, queued).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(MetaError::unavailable("the metastore node is stopping")),
            Err(_) => {
                return Err(MetaError::unavailable(format!(
                    "no room to propose within {:?}",
                    self.timeout
                )));
            }
        }
        match tokio::time::timeout(self.timeout * 2, reply).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(MetaError::maybe_applied("the metastore node stopped")),
            Err(_) => Err(MetaError::maybe_applied(format!(
                "no answer within {:?}",
                self.timeout * 2
            ))),
        }
    }
}

async fn propose_batches(
    raft: Raft,
    stamps: Arc<Stamps>,
    timeout: Duration,
    mut waiting: mpsc::Receiver<Waiting>,
) {
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let returning = Arc::new(Returning::default());
    let mut lingers_to_skip = 0;
    let mut next: Option<Waiting> = None;
    loop {
        // Room in the log first, so that what arrives meanwhile joins the batch.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let first = match next.take() {
            Some(first) => first,
            None => match waiting.recv().await {
                Some(first) => {
                    returning.arrived();
                    first
                }
                None => return,
            },
        };
        let mut forming = Forming::new(first);
        // Everything waiting now.
        while next.is_none() {
            let Ok(more) = waiting.try_recv() else { break };
            returning.arrived();
            next = forming.take(more);
        }
        // And the commands of senders just answered, which arrive a round
        // trip later. Proposed without them, the senders split into two
        // cohorts that alternate entries, each waiting out the other's.
        // Only briefly, and not again for a while once they did not come.
        if lingers_to_skip > 0 {
            lingers_to_skip -= 1;
        } else {
            while next.is_none() {
                let Some(deadline) = returning.due() else {
                    break;
                };
                match tokio::time::timeout_at(deadline, waiting.recv()).await {
                    Ok(Some(more)) => {
                        returning.arrived();
                        next = forming.take(more);
                    }
                    Ok(None) => break,
                    Err(_) => {
                        returning.given_up();
                        lingers_to_skip = SKIP_AFTER_MISS;
                        break;
                    }
                }
            }
        }
        let (command, answers, alone) = forming.into_entry();
        let proposal = Proposal {
            at_ms: stamps.now_ms(),
            command,
        };
        // Handed to the log in this order; answered whenever the quorum says.
        let sent = raft.client_write_ff(proposal).await;
        let returning = returning.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let answer = match sent {
                Err(fatal) => Err(MetaError::maybe_applied(fatal.to_string())),
                Ok(reply) => match tokio::time::timeout(timeout, reply).await {
                    Ok(Ok(Ok(written))) => written.data.ok_or_else(|| {
                        MetaError::Storage("a command applied without a reply".into())
                    }),
                    Ok(Ok(Err(refused))) => Err(super::node::write_error(RaftError::APIError(
                        refused as ClientWriteError<_, _>,
                    ))),
                    Ok(Err(dropped)) => Err(MetaError::maybe_applied(dropped.to_string())),
                    Err(_) => Err(MetaError::maybe_applied(format!(
                        "no quorum confirmed the write within {timeout:?}"
                    ))),
                },
            };
            returning.answered(answers.len());
            distribute(answer, answers, alone);
        });
    }
}

/// Senders answered and not yet back with their next command, as far as
/// can be told: entries add the commands they answer, each arrival takes one
/// off (not below zero: a new sender was never answered). Only senders
/// answered within [`LINGER`] are waited for: an agent that commits every
/// quarter second is not coming back now.
#[derive(Default)]
struct Returning(std::sync::Mutex<Counted>);

#[derive(Default)]
struct Counted {
    senders: usize,
    last_answer: Option<tokio::time::Instant>,
}

impl Returning {
    fn answered(&self, commands: usize) {
        let mut counted = self.0.lock().expect("returning lock");
        let now = tokio::time::Instant::now();
        if counted.last_answer.is_none_or(|at| now - at > LINGER) {
            // Those answered before are not coming back now.
            counted.senders = 0;
        }
        counted.senders += commands;
        counted.last_answer = Some(now);
    }

    fn arrived(&self) {
        let mut counted = self.0.lock().expect("returning lock");
        counted.senders = counted.senders.saturating_sub(1);
    }

    /// When the senders still on their way are due at the latest (a
    /// [`LINGER`] after the last answer), if any are.
    fn due(&self) -> Option<tokio::time::Instant> {
        let counted = self.0.lock().expect("returning lock");
        match counted.last_answer {
            Some(at) if counted.senders > 0 => Some(at + LINGER),
            _ => None,
        }
    }

    /// Those not back by now are not counted on again.
    fn given_up(&self) {
        self.0.lock().expect("returning lock").senders = 0;
    }
}

/// An entry's commands, as they are gathered.
pub(crate) struct Forming {
    batch: Vec<Waiting>,
    weight: usize,
}

impl Forming {
    pub fn new(first: Waiting) -> Forming {
        Forming {
            weight: first.command.weight(),
            batch: vec![first],
        }
    }

    /// The entry's command (the one command, or a batch of them), the
    /// callers to answer, and whether it is alone (answered with its own
    /// reply rather than a batch's).
    pub fn into_entry(self) -> (Command, Vec<oneshot::Sender<Answer>>, bool) {
        let (commands, answers): (Vec<Command>, Vec<oneshot::Sender<Answer>>) = self
            .batch
            .into_iter()
            .map(|w| (w.command, w.answer))
            .unzip();
        let alone = commands.len() == 1;
        let command = if alone {
            commands.into_iter().next().expect("one command")
        } else {
            Command::Batch(Batch(commands))
        };
        (command, answers, alone)
    }

    /// Adds `more`, or gives it back when the entry is full (it starts the next).
    pub fn take(&mut self, more: Waiting) -> Option<Waiting> {
        let weight = self.weight + more.command.weight();
        if self.batch.len() >= MAX_COMMANDS || weight > MAX_WEIGHT {
            return Some(more);
        }
        self.weight = weight;
        self.batch.push(more);
        None
    }
}

/// Gives each command of an entry its answer.
pub(crate) fn distribute(answer: Answer, answers: Vec<oneshot::Sender<Answer>>, alone: bool) {
    let replies = match answer {
        Ok(reply) if alone => vec![Ok(reply)],
        Ok(reply) => match reply.batch() {
            Ok(replies) if replies.len() == answers.len() => replies.into_iter().map(Ok).collect(),
            _ => vec![
                Err(MetaError::Storage(
                    "a batch applied with a reply of another shape".into()
                ));
                answers.len()
            ],
        },
        Err(e) => vec![Err(e); answers.len()],
    };
    for (answer, reply) in answers.into_iter().zip(replies) {
        // A caller that gave up does not mind.
        let _ = answer.send(reply);
    }
}
