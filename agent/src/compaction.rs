//! The agent's background retention, compaction and garbage collection.

use std::sync::Arc;
use std::time::Duration;

use floe_compactor::sweep::sweep_orphans;
use floe_compactor::{CompactionPolicy, Gc, compact_all};
use floe_metastore::Metastore;
use floe_storage::ObjectStore;

use crate::config::Config;

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
        let mut tick = tokio::time::interval(self.interval);
        // Listing the bucket costs requests: sweep for orphans a few times per orphan age.
        let mut next_sweep = tokio::time::Instant::now();
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) =
                floe_compactor::retention::enforce(&meta, crate::discovery::now_ms()).await
            {
                tracing::warn!(error = %e, "retention pass failed");
            }
            match compact_all(&store, &meta, &self.policy).await {
                Ok(done) => {
                    for c in done {
                        tracing::info!(segment = %c.segment_key, extents = c.extents, bytes = c.bytes,
                            base_offset = c.base_offset, last_offset = c.last_offset, "compacted");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "compaction pass failed"),
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
