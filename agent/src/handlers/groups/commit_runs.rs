//! Offset commits that queue up behind one another on a connection are
//! written to the metastore together.
//!
//! A consumer that commits after every record (librdkafka's
//! `commit(message, asynchronous=True)`, a common pattern) sends its commits
//! faster than one metastore write each can keep up with (about 2.5 ms on
//! the embedded metastore, an fsync). They ran one after another in the
//! connection's [`Lane`](super::Lane), so the backlog grew, the member's
//! heartbeats waited behind it until librdkafka timed them out, and the
//! last commit of a revoke callback timed out too: the next owner of the
//! partition processed those records again.
//!
//! Commits admitted one right after another on a connection, with no other
//! group request between them, for the same group, member, generation and
//! instance, form a [`Run`]. The first of them to get its turn in the lane
//! writes the whole run in one command: one after another, each commit's
//! offsets replace the previous ones' for the same partition, so the run
//! stores the last offset each partition was given, which is what running
//! them in order would have left. Each commit is still checked on its own
//! (a partition it names that does not exist, metadata too large) and gets
//! its own answer; a refusal of the group (an unknown member, a stale
//! generation) is the same for all, as it would have been for each, since
//! committing does not change membership.

use std::sync::{Arc, Mutex};

use floe_protocol::kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};
use tokio::sync::oneshot;

use crate::broker::Broker;

/// What commits must share to be written together.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RunKey {
    group: String,
    generation: i32,
    member_id: String,
    instance_id: Option<String>,
}

impl RunKey {
    fn of(req: &OffsetCommitRequest) -> RunKey {
        RunKey {
            group: req.group_id.0.to_string(),
            generation: req.generation_id_or_member_epoch,
            member_id: req.member_id.to_string(),
            instance_id: req.group_instance_id.as_ref().map(|i| i.to_string()),
        }
    }
}

/// One commit waiting in a run, and where its answer goes.
struct Entry {
    req: OffsetCommitRequest,
    version: i16,
    answer: oneshot::Sender<OffsetCommitResponse>,
}

/// Commits written together. `entries` is taken (left `None`) by the
/// first of them to run; a commit admitted after that starts a new run.
pub struct Run {
    key: RunKey,
    entries: Mutex<Option<Vec<Entry>>>,
}

/// A connection's open run: the commits admitted since its last other
/// group request, not yet started. Bounded by the connection's requests in
/// flight (see `crate::server`).
#[derive(Default)]
pub struct Runs {
    open: Mutex<Option<Arc<Run>>>,
}

/// A commit's place in a run.
pub struct Joined {
    run: Arc<Run>,
    answer: oneshot::Receiver<OffsetCommitResponse>,
    /// The answer if its run's writer is dropped mid-write (its connection
    /// closed): nothing is known of the write, the client retries.
    unknown: OffsetCommitResponse,
}

impl Runs {
    /// Adds a commit to the open run, or starts one. Called at admission,
    /// which runs in request order.
    pub fn join(&self, req: OffsetCommitRequest, version: i16) -> Joined {
        let (answer, receiver) = oneshot::channel();
        let key = RunKey::of(&req);
        let unknown =
            super::offsets::refuse_all(&req, floe_protocol::ResponseError::CoordinatorNotAvailable);
        let mut entry = Some(Entry {
            req,
            version,
            answer,
        });
        let mut open = self.open.lock().expect("runs lock");
        if let Some(run) = open.as_ref().filter(|run| run.key == key) {
            let mut entries = run.entries.lock().expect("run lock");
            if let Some(entries) = entries.as_mut() {
                entries.push(entry.take().expect("not yet added"));
            }
        }
        let run = match entry {
            None => open.clone().expect("joined an open run"),
            Some(entry) => {
                let run = Arc::new(Run {
                    key,
                    entries: Mutex::new(Some(vec![entry])),
                });
                *open = Some(run.clone());
                run
            }
        };
        Joined {
            run,
            answer: receiver,
            unknown,
        }
    }

    /// Another group request was admitted: later commits must not be
    /// written before it, so they start a new run.
    pub fn seal(&self) {
        self.open.lock().expect("runs lock").take();
    }
}

impl Joined {
    /// Runs when the commit's turn in the lane came: the run's first commit
    /// to get here writes them all; every one then has its answer.
    pub async fn respond(self, broker: &Broker) -> OffsetCommitResponse {
        let entries = self.run.entries.lock().expect("run lock").take();
        if let Some(entries) = entries {
            let (commits, answers): (Vec<_>, Vec<_>) = entries
                .into_iter()
                .map(|e| ((e.req, e.version), e.answer))
                .unzip();
            let responses = super::offsets::commit_offsets_together(broker, commits).await;
            for (answer, response) in answers.into_iter().zip(responses) {
                // A commit whose connection closed no longer waits.
                let _ = answer.send(response);
            }
        }
        self.answer.await.unwrap_or(self.unknown)
    }

    /// The answer, if the run was already written (the connection closed
    /// before this commit's turn: it was stored all the same, and says so).
    pub fn written(mut self) -> Option<OffsetCommitResponse> {
        self.answer.try_recv().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_protocol::kafka_protocol::messages::GroupId;
    use floe_protocol::kafka_protocol::protocol::StrBytes;

    fn commit(group: &str, member: &str, generation: i32) -> OffsetCommitRequest {
        OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.into())))
            .with_member_id(StrBytes::from_string(member.into()))
            .with_generation_id_or_member_epoch(generation)
    }

    fn size(joined: &Joined) -> Option<usize> {
        joined.run.entries.lock().unwrap().as_ref().map(Vec::len)
    }

    #[test]
    fn commits_of_one_member_in_a_row_share_a_run_and_others_start_their_own() {
        let runs = Runs::default();
        let a = runs.join(commit("g", "m", 3), 8);
        let b = runs.join(commit("g", "m", 3), 8);
        assert!(Arc::ptr_eq(&a.run, &b.run));
        assert_eq!(size(&a), Some(2));
        // Another generation, member or group starts a run of its own.
        let c = runs.join(commit("g", "m", 4), 8);
        assert!(!Arc::ptr_eq(&b.run, &c.run));
        let d = runs.join(commit("g", "m", 4), 8);
        assert!(Arc::ptr_eq(&c.run, &d.run));
        // Another group request between two commits keeps them apart.
        runs.seal();
        let e = runs.join(commit("g", "m", 4), 8);
        assert!(!Arc::ptr_eq(&d.run, &e.run));
        // A run already being written takes no more.
        e.run.entries.lock().unwrap().take();
        let f = runs.join(commit("g", "m", 4), 8);
        assert!(!Arc::ptr_eq(&e.run, &f.run));
        assert_eq!(size(&f), Some(1));
    }

    #[test]
    fn a_connection_s_other_group_request_ends_the_run_of_commits_before_it() {
        let lane = super::super::Lane::default();
        let (_t1, a) = lane.commit(commit("g", "m", 1), 8);
        let (_t2, b) = lane.commit(commit("g", "m", 1), 8);
        let _heartbeat = lane.ticket();
        let (_t3, c) = lane.commit(commit("g", "m", 1), 8);
        assert!(Arc::ptr_eq(&a.run, &b.run));
        assert!(!Arc::ptr_eq(&b.run, &c.run));
    }
}
