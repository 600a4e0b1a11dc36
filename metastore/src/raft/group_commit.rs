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
/// Commands waiting for an entry at most; a proposer past it waits for room.
const QUEUE: usize = 8_192;

type Answer = Result<Reply, MetaError>;

struct Waiting {
    command: Command,
    answer: oneshot::Sender<Answer>,
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
    let mut next: Option<Waiting> = None;
    loop {
        // Room in the log first, so that what arrives meanwhile joins the batch.
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let first = match next.take() {
            Some(first) => first,
            None => match waiting.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        let mut weight = first.command.weight();
        let mut batch = vec![first];
        while batch.len() < MAX_COMMANDS {
            let Ok(more) = waiting.try_recv() else { break };
            weight += more.command.weight();
            if weight > MAX_WEIGHT {
                next = Some(more);
                break;
            }
            batch.push(more);
        }
        let (commands, answers): (Vec<Command>, Vec<oneshot::Sender<Answer>>) =
            batch.into_iter().map(|w| (w.command, w.answer)).unzip();
        let alone = commands.len() == 1;
        let command = if alone {
            commands.into_iter().next().expect("one command")
        } else {
            Command::Batch(Batch(commands))
        };
        let proposal = Proposal {
            at_ms: stamps.now_ms(),
            command,
        };
        // Handed to the log in this order; answered whenever the quorum says.
        let sent = raft.client_write_ff(proposal).await;
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
            distribute(answer, answers, alone);
        });
    }
}

/// Gives each command of an entry its answer.
fn distribute(answer: Answer, answers: Vec<oneshot::Sender<Answer>>, alone: bool) {
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
