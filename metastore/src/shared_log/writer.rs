//! The writer of a [`LogNode`](super::LogNode): commands proposed while an
//! entry is being appended wait together and go into the next entry (up to
//! the group commit's limits), one entry at a time. One at a time keeps the
//! log free of holes: an entry is appended only once the one before it is
//! known committed, so the store never holds index `n + 1` without `n`.
//! Order: commands are appended in the order they were proposed.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::node::{Node, WRITE_TIMEOUT};
use crate::raft::group_commit::{Answer, Forming, QUEUE, Waiting, distribute};
use crate::state::Command;
use crate::types::MetaError;

/// The queue in front of a node's appends. Clones share it.
#[derive(Clone)]
pub(super) struct Writer {
    queue: mpsc::Sender<Waiting>,
}

impl Writer {
    /// Starts the task that appends for `node`; it ends when every clone
    /// of the writer is dropped.
    pub fn start(node: Arc<Node>) -> Writer {
        let (queue, waiting) = mpsc::channel(QUEUE);
        tokio::spawn(write_entries(node, waiting));
        Writer { queue }
    }

    /// Appends `command`, with whatever else waits, and answers its reply.
    /// Bounded: [`WRITE_TIMEOUT`] to find room in the queue (then certainly
    /// not applied), and twice that for the answer (then unknown).
    pub async fn propose(&self, command: Command) -> Answer {
        let (answer, reply) = oneshot::channel();
        let queued = self.queue.send(Waiting { command, answer });
        match tokio::time::timeout(WRITE_TIMEOUT, queued).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(MetaError::unavailable("the metastore node is stopping")),
            Err(_) => {
                return Err(MetaError::unavailable(format!(
                    "no room to propose within {WRITE_TIMEOUT:?}"
                )));
            }
        }
        match tokio::time::timeout(WRITE_TIMEOUT * 2, reply).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(MetaError::maybe_applied("the metastore node stopped")),
            Err(_) => Err(MetaError::maybe_applied(format!(
                "no answer within {:?}",
                WRITE_TIMEOUT * 2
            ))),
        }
    }
}

async fn write_entries(node: Arc<Node>, mut waiting: mpsc::Receiver<Waiting>) {
    let mut next: Option<Waiting> = None;
    loop {
        let first = match next.take() {
            Some(first) => first,
            None => match waiting.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        let mut forming = Forming::new(first);
        while next.is_none() {
            let Ok(more) = waiting.try_recv() else { break };
            next = forming.take(more);
        }
        let (command, answers, alone) = forming.into_entry();
        distribute(node.append(command).await, answers, alone);
    }
}
