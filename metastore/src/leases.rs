//! Leases on background jobs (compacting a partition, the retention/GC pass),
//! so that of several agents one does each job instead of all of them racing
//! to upload the same segment. A lease is held by a named holder until it
//! expires or is released; times come inside commands, as everywhere in the
//! state machine.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Held {
    holder: String,
    expires_ms: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leases {
    by_job: BTreeMap<String, Held>,
}

impl Leases {
    /// Grants (or renews) `job` to `holder` until `now_ms + ttl_ms`, unless
    /// someone else holds it unexpired. Expired leases are dropped here, which
    /// bounds the map by the jobs in progress.
    pub fn acquire(&mut self, job: String, holder: String, now_ms: i64, ttl_ms: i64) -> bool {
        self.by_job.retain(|_, held| held.expires_ms > now_ms);
        match self.by_job.get(&job) {
            Some(held) if held.holder != holder => false,
            _ => {
                let expires_ms = now_ms.saturating_add(ttl_ms.max(0));
                self.by_job.insert(job, Held { holder, expires_ms });
                true
            }
        }
    }

    /// Ends `holder`'s lease on `job`, if it holds it.
    pub fn release(&mut self, job: &str, holder: &str) {
        if self
            .by_job
            .get(job)
            .is_some_and(|held| held.holder == holder)
        {
            self.by_job.remove(job);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_until_release_or_expiry() {
        let mut leases = Leases::default();
        assert!(leases.acquire("compact/t/0".into(), "a".into(), 1_000, 100));
        assert!(!leases.acquire("compact/t/0".into(), "b".into(), 1_050, 100));
        // Other jobs are independent; the holder renews its own.
        assert!(leases.acquire("compact/t/1".into(), "b".into(), 1_050, 100));
        assert!(leases.acquire("compact/t/0".into(), "a".into(), 1_090, 100));
        assert!(!leases.acquire("compact/t/0".into(), "b".into(), 1_150, 100));
        // Expired: anyone may take it.
        assert!(leases.acquire("compact/t/0".into(), "b".into(), 1_191, 100));
        // Only the holder releases.
        leases.release("compact/t/0", "a");
        assert!(!leases.acquire("compact/t/0".into(), "a".into(), 1_200, 100));
        leases.release("compact/t/0", "b");
        assert!(leases.acquire("compact/t/0".into(), "a".into(), 1_200, 100));
    }
}
