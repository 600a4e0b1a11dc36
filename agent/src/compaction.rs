//! The agent's background retention, compaction and garbage collection.
//!
//! Every agent runs this loop, sharing the work through leases in the
//! metastore: one agent at a time holds the `maintenance` lease (retention,
//! the orphan sweep and GC, which are cheap metastore work plus deletes), and
//! each partition's compaction job goes to whichever agent leases it first.

use std::sync::Arc;
use std::time::Duration;

use floe_compactor::sweep::sweep_orphans;
use floe_compactor::{CompactionPolicy, Gc, Worker, compact_all};
use floe_metastore::Metastore;
use floe_storage::ObjectStore;

use crate::config::Config;

/// The lease on retention, the orphan sweep and GC.
const MAINTENANCE: &str = "maintenance";
/// How long a partition's compaction job stays leased if its agent dies
/// mid-job (a finished job releases it at once).
const COMPACTION_LEASE: Duration = Duration::from_secs(600);

pub struct Background {
    interval: Duration,
    policy: CompactionPolicy,
    gc: Gc,
    orphan_age: Duration,
}

impl Background {
    /// `None` when compaction is turned off (`compaction_interval = "0s"`).
    pub fn from_config(config: &Config) -> Option<Background> {
        (!config.compaction_interval.is_zero()).then(|| Background {
            interval: config.compaction_interval,
            policy: CompactionPolicy {
                min_extents: config.compaction_min_extents,
                max_segment_bytes: config.segment_bytes.as_u64(),
                ..CompactionPolicy::default()
            },
            gc: Gc::new(config.gc_grace),
            orphan_age: config.orphan_age,
        })
    }

    pub async fn run(mut self, store: Arc<dyn ObjectStore>, meta: Arc<dyn Metastore>) {
        let holder = format!("agent-{}", uuid::Uuid::new_v4());
        let worker = Worker {
            holder: holder.clone(),
            lease: COMPACTION_LEASE,
        };
        // Held across passes by renewing it; lost if this agent misses a few.
        let maintenance_ttl_ms = (self.interval * 3).as_millis().min(i64::MAX as u128) as i64;
        let mut tick = tokio::time::interval(self.interval);
        // Listing the bucket costs requests: sweep for orphans a few times per orphan age.
        let mut next_sweep = tokio::time::Instant::now();
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let now_ms = crate::discovery::now_ms();
            let maintaining = match meta
                .acquire_lease(
                    MAINTENANCE.into(),
                    holder.clone(),
                    now_ms,
                    maintenance_ttl_ms,
                )
                .await
            {
                Ok(granted) => granted,
                Err(e) => {
                    tracing::warn!(error = %e, "could not lease the maintenance job");
                    false
                }
            };
            if maintaining && let Err(e) = floe_compactor::retention::enforce(&meta, now_ms).await {
                tracing::warn!(error = %e, "retention pass failed");
            }
            // A random first partition each pass, so agents do not queue for
            // the same leases in the same order.
            let start = uuid::Uuid::new_v4().as_u128() as usize;
            match compact_all(&store, &meta, &self.policy, Some(&worker), start).await {
                Ok(done) => {
                    for c in done {
                        tracing::info!(segment = %c.segment_key, extents = c.extents, bytes = c.bytes,
                            base_offset = c.base_offset, last_offset = c.last_offset, "compacted");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "compaction pass failed"),
            }
            if !maintaining {
                continue;
            }
            if tokio::time::Instant::now() >= next_sweep {
                next_sweep = tokio::time::Instant::now() + (self.orphan_age / 4).max(self.interval);
                if let Err(e) = sweep_orphans(&store, &meta, self.orphan_age).await {
                    tracing::warn!(error = %e, "orphan sweep failed");
                }
            }
            match self.gc.run_once(&store, &meta).await {
                Ok(deleted) if !deleted.is_empty() => {
                    tracing::info!(objects = deleted.len(), "gc deleted unreferenced objects")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "gc pass failed"),
            }
        }
    }
}
