//! The simulation's object store: `object_store`'s in-memory store behind
//! seeded faults, as S3 shows them on a bad day: a PUT refused before it
//! stores anything, a PUT that stored the object and then failed (the caller
//! cannot tell), 503 SlowDown on reads, and latency.

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
                Op::Get => f.get_error,
                _ => 0.0,
            };
            (latency, w.chance(rate))
        });
        tokio::time::sleep(latency).await;
        if fail {
            return Err(injected(&format!("{} failure (503 SlowDown)", op.name())));
        }
        Ok(())
    }

    fn after(&self, op: Op, _bytes: u64, ok: bool) -> Result<()> {
        if ok && op == Op::Put && self.0.with(|w| w.chance(w.store_faults.put_lost_reply)) {
            return Err(injected("timeout after the PUT was stored"));
        }
        Ok(())
    }
}
