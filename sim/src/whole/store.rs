//! The simulation's object store: `object_store`'s in-memory store behind
//! seeded faults, as S3 shows them on a bad day: a PUT refused before it
//! stores anything, a PUT that stored the object and then failed (the caller
//! cannot tell), 503 SlowDown on reads, listings and deletes, a delete that
//! happened and then failed, and latency; and, rarely, the agent that stored
//! an object stalling for minutes before it goes on (a long GC pause, a
//! frozen VM), so that its commit arrives after the commit window and after
//! the orphan sweep took the object, or after the metastore forgot the key.
//! Listings fail partway now and then, and show each object stamped with
//! the simulated time it was stored at.

use async_trait::async_trait;
use floe_storage::hooked::{Hooks, Op};
use object_store::path::Path;
use object_store::{ObjectMeta, Result};
use tokio::time::{Duration, Instant};

use super::Shared;

/// How the store misbehaves right now (the chaos actor changes it).
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreFaults {
    pub put_error: f64,
    pub put_lost_reply: f64,
    pub get_error: f64,
    pub max_latency: Duration,
    /// The share of requests in the long tail, each taking up to
    /// `slow_latency` (S3's seconds-long PUTs and ranged GETs).
    pub slow: f64,
    pub slow_latency: Duration,
}

pub struct SimStoreFaults {
    pub shared: Shared,
    /// The agent whose requests these are (`None`: the auditor's, which
    /// never stalls).
    pub agent: Option<usize>,
}

/// The chance that an agent stalls for minutes after a PUT (about one run in
/// three stalls once).
const STALL_CHANCE: f64 = 0.0002;

fn injected(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "sim",
        source: format!("simulated {what}").into(),
    }
}

#[async_trait]
impl Hooks for SimStoreFaults {
    async fn before(&self, op: Op) -> Result<()> {
        let (latency, fail) = self.shared.with(|w| {
            let f = w.store_faults;
            let latency = match w.chance(f.slow) {
                true => w.latency_up_to(f.slow_latency),
                false => w.latency_up_to(f.max_latency),
            };
            let rate = match op {
                Op::Put | Op::PutMultipart => f.put_error,
                // SlowDown is per bucket prefix, whatever the request.
                Op::Get | Op::List | Op::Delete => f.get_error,
                _ => 0.0,
            };
            let fail = w.chance(rate);
            w.summary.store_faults += fail as u64;
            (latency, fail)
        });
        tokio::time::sleep(latency).await;
        if fail {
            return Err(injected(&format!("{} failure (503 SlowDown)", op.name())));
        }
        Ok(())
    }

    async fn after_put(&self, location: &Path) -> Result<()> {
        // Stamped on the simulation's clock (the in-memory store stamps the
        // real one), so the orphan sweep's ages are simulated ages.
        self.shared.with(|w| {
            let now_ms = w.now_ms();
            w.put_ms.insert(location.to_string(), now_ms);
        });
        let Some(agent) = self.agent else {
            return Ok(());
        };
        let stall = self.shared.with(|w| {
            if !w.chance(STALL_CHANCE) {
                return None;
            }
            // Past the 10-minute commit window; now and then past the hour
            // the metastore remembers a key for.
            let minutes = if w.chance(0.2) { 61 } else { 11 };
            let stall = Duration::from_secs(60 * (minutes + w.rng_below(10)));
            let until = Instant::now() + stall;
            let latest = w.stalled.entry(agent).or_insert(until);
            *latest = (*latest).max(until);
            w.summary.stalls += 1;
            w.log(format!(
                "agent {agent} stored {location} and stalls for {stall:?}"
            ));
            Some(stall)
        });
        if let Some(stall) = stall {
            tokio::time::sleep(stall).await;
            self.shared
                .with(|w| w.log(format!("agent {agent} goes on after {location}")));
        }
        Ok(())
    }

    /// A listing's entries with their simulated times; now and then a page
    /// fails partway (SlowDown on a later page), and the listing with it.
    fn listed(&self, mut entry: ObjectMeta) -> Result<ObjectMeta> {
        let (failed, put_ms) = self.shared.with(|w| {
            let rate = w.store_faults.get_error / 8.0;
            (
                w.chance(rate),
                w.put_ms.get(entry.location.as_ref()).copied(),
            )
        });
        if failed {
            return Err(injected("listing page failure (503 SlowDown)"));
        }
        if let Some(at) = put_ms.and_then(chrono::DateTime::from_timestamp_millis) {
            entry.last_modified = at;
        }
        Ok(entry)
    }

    fn after(&self, op: Op, _bytes: u64, ok: bool) -> Result<()> {
        if !ok || !matches!(op, Op::Put | Op::Delete) {
            return Ok(());
        }
        let lost = self.shared.with(|w| {
            let lost = w.chance(w.store_faults.put_lost_reply);
            w.summary.store_faults += lost as u64;
            lost
        });
        if lost {
            return Err(injected(&format!(
                "timeout after the {} happened",
                op.name()
            )));
        }
        Ok(())
    }
}
