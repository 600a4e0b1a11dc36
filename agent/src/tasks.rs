//! The agent's background tasks, tracked and cancelled together: an agent
//! that stops leaves nothing running (see [`crate::agent::Agent`]).

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Where an agent's tasks are spawned. Cheap to clone; a child (see
/// [`Tasks::child`]) is cancelled with its parent, or alone.
#[derive(Clone, Default)]
pub struct Tasks {
    tracker: TaskTracker,
    stop: CancellationToken,
}

impl Tasks {
    /// Runs `task` until it ends or these tasks are cancelled, whichever
    /// comes first: a cancelled task is dropped at its next await.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let stop = self.stop.clone();
        self.tracker.spawn(async move {
            // Biased: no random draw per wake-up (the simulation seeds
            // tokio's generator, and every draw shifts its schedule).
            tokio::select! {
                biased;
                _ = stop.cancelled() => {}
                _ = task => {}
            }
        });
    }

    /// Tasks tracked with these ones, cancelled with them or on their own.
    pub fn child(&self) -> Tasks {
        Tasks {
            tracker: self.tracker.clone(),
            stop: self.stop.child_token(),
        }
    }

    /// Cancels every task spawned here (and in children).
    pub fn cancel(&self) {
        self.stop.cancel();
    }

    /// Whether [`Tasks::cancel`] was called (here or on a parent).
    pub fn is_cancelled(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Cancels every task and waits, for at most `within`, until all have
    /// ended (a task stuck off the runtime, e.g. in a blocking call, may
    /// outlive it). Answers whether all ended.
    pub async fn stop(&self, within: Duration) -> bool {
        self.stop.cancel();
        self.tracker.close();
        tokio::time::timeout(within, self.tracker.wait())
            .await
            .is_ok()
    }

    /// How many tasks are still running.
    pub fn running(&self) -> usize {
        self.tracker.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stop_ends_every_task_a_child_s_included() {
        let tasks = Tasks::default();
        let child = tasks.child();
        tasks.spawn(std::future::pending());
        child.spawn(std::future::pending());
        tasks.spawn(async {});
        assert!(tasks.stop(Duration::from_secs(5)).await);
        assert_eq!(tasks.running(), 0);
        assert!(child.is_cancelled());
    }

    #[tokio::test]
    async fn a_child_is_cancelled_alone() {
        let tasks = Tasks::default();
        let child = tasks.child();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tasks.spawn(async move {
            let _ = rx.await;
        });
        child.spawn(std::future::pending());
        child.cancel();
        tokio::time::timeout(Duration::from_secs(5), async {
            while tasks.running() > 1 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the child's task ended");
        assert!(!tasks.is_cancelled());
        drop(tx);
        assert!(tasks.stop(Duration::from_secs(5)).await);
    }
}
