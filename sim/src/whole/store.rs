//! The simulation's object store: `object_store`'s in-memory store behind
//! seeded faults, as S3 shows them on a bad day: a PUT refused before it
//! stores anything, a PUT that stored the object and then failed (the caller
//! cannot tell), 503 SlowDown on reads, listings and deletes, a delete that
//! happened and then failed, and latency.

use async_trait::async_trait;
use floe_storage::hooked::{Hooks, Op};
use object_store::Result;
use tokio::time::Duration;

use super::Shared;

/// How the store misbehaves right now (the chaos actor changes it).
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreFaults {
    pub put_error: f64,
    pub put_lost_reply: f64,
    pub get_error: f64,
    pub max_latency: Duration,
}

pub struct SimStoreFaults(pub Shared);

fn injected(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "sim",
        source: format!("simulated {what}").into(),
    }
}

#[async_trait]
impl Hooks for SimStoreFaults {
    async fn before(&self, op: Op) -> Result<()> {
        let (latency, fail) = self.0.with(|w| {
            let f = w.store_faults;
            let latency = w.latency_up_to(f.max_latency);
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

    fn after(&self, op: Op, _bytes: u64, ok: bool) -> Result<()> {
        if !ok || !matches!(op, Op::Put | Op::Delete) {
            return Ok(());
        }
        let lost = self.0.with(|w| {
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
