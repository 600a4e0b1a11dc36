//! Wakes requests waiting for a consumer group to change (a JoinGroup
//! waiting for the generation to form, a SyncGroup for the leader's
//! assignments) the moment an applied entry changes that group, instead of
//! each polling the metastore.
//!
//! Only groups with a waiter have an entry, so the map is bounded by the
//! requests in flight; the last waiter of a group removes it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::Sequencer;
use crate::groups::{AwaitGroup, MAX_GROUP_WAIT_MS, MemberView};
use crate::types::MetaError;

#[derive(Default)]
pub struct GroupWatch {
    waiting: Mutex<HashMap<String, Arc<Notify>>>,
}

/// One waiter's registration: [`Watcher::notify`] fires whenever the group
/// changes; dropping it unregisters.
pub struct Watcher<'a> {
    watch: &'a GroupWatch,
    group: String,
    notify: Arc<Notify>,
}

impl Watcher<'_> {
    pub fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Drop for Watcher<'_> {
    fn drop(&mut self) {
        let mut waiting = self.watch.waiting.lock().expect("group watch lock");
        // Two references left: the map's and this one's.
        if Arc::strong_count(&self.notify) <= 2 {
            waiting.remove(&self.group);
        }
    }
}

impl GroupWatch {
    pub fn watch(&self, group: &str) -> Watcher<'_> {
        let notify = self
            .waiting
            .lock()
            .expect("group watch lock")
            .entry(group.to_string())
            .or_default()
            .clone();
        Watcher {
            watch: self,
            group: group.to_string(),
            notify,
        }
    }

    /// Wakes every waiter of `group` (called after an entry that changed it
    /// is applied).
    pub fn changed(&self, group: &str) {
        if let Some(notify) = self.waiting.lock().expect("group watch lock").get(group) {
            notify.notify_waiters();
        }
    }

    #[cfg(test)]
    pub fn watched(&self) -> usize {
        self.waiting.lock().expect("group watch lock").len()
    }
}

/// Answers an [`AwaitGroup`] on a node whose applied entries `watch` hears
/// of: the member's view once the group moved from the version the waiter
/// saw, or as it is when the wait (at most [`MAX_GROUP_WAIT_MS`]) is over.
pub async fn await_change<S: Sequencer>(
    on: &S,
    watch: &GroupWatch,
    wait: AwaitGroup,
) -> Result<Option<MemberView>, MetaError> {
    let wait_for = Duration::from_millis(wait.wait_ms.min(MAX_GROUP_WAIT_MS) as u64);
    let deadline = tokio::time::Instant::now() + wait_for;
    let watcher = watch.watch(&wait.group);
    loop {
        // Armed before the state is read, so a change applied in
        // between still wakes this waiter.
        let changed = watcher.notify().notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let (group, member, instance) = (
            wait.group.clone(),
            wait.member_id.clone(),
            wait.instance_id.clone(),
        );
        let view = on
            .read(move |state| state.groups().view(&group, &member, instance.as_deref()))
            .await?;
        let moved = match (&view, wait.seen) {
            (Some(v), Some(seen)) => v.version != seen,
            _ => true,
        };
        if moved || tokio::time::Instant::now() >= deadline {
            return Ok(view);
        }
        tokio::select! {
            _ = &mut changed => {}
            _ = tokio::time::sleep_until(deadline) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_change_wakes_its_group_s_waiters_and_the_last_one_cleans_up() {
        let watch = GroupWatch::default();
        let a = watch.watch("g");
        let b = watch.watch("g");
        {
            let woken_a = a.notify().notified();
            let woken_b = b.notify().notified();
            tokio::pin!(woken_a, woken_b);
            woken_a.as_mut().enable();
            woken_b.as_mut().enable();
            watch.changed("other");
            watch.changed("g");
            woken_a.await;
            woken_b.await;
        }
        drop(a);
        assert_eq!(watch.watched(), 1);
        drop(b);
        assert_eq!(watch.watched(), 0);
    }
}
