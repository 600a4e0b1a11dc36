//! The agent's background retention, compaction and garbage collection.
//!
//! Every agent with the jobs role runs this loop, sharing the work through leases in the
//! metastore: one agent at a time holds the `maintenance` lease (retention,
//! the orphan sweep and GC, which are cheap metastore work plus deletes), one
//! at a time holds `compact/ingest` (jobs over ingest files, each read once),
//! and each partition's merge or key compaction goes to whichever agent
//! leases it first.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use floe_compactor::sweep::sweep_orphans;
use floe_compactor::{CompactionPolicy, Counters, Gc, KeptLooks, Worker, compact_all};
use floe_metastore::Metastore;
use floe_storage::ObjectStore;
use floe_storage::ids::Ids;

use crate::world::World;

use crate::config::Config;

/// The lease on retention, the orphan sweep and GC.
const MAINTENANCE: &str = "maintenance";
/// The shortest maintenance lease, so that a slow pass does not hand the job
/// to another agent while the holder is still at it.
const MIN_MAINTENANCE_LEASE: Duration = Duration::from_secs(30);
/// How long a partition's compaction job stays leased if its agent dies
/// mid-job (a finished job releases it at once).
const COMPACTION_LEASE: Duration = Duration::from_secs(600);

/// The loop's settings; built from the agent's config, or by the simulation.
pub struct Background {
    pub interval: Duration,
    pub policy: CompactionPolicy,
    pub gc: Gc,
    pub orphan_age: Duration,
    /// Names this agent in the leases it holds.
    pub holder: String,
    /// Failures a pass counts and steps over (exported as metrics).
    pub counters: Counters,
    /// Names new segments, and picks where each pass starts.
    pub ids: Arc<dyn Ids>,
}

/// This agent's name in leases: kept in `data_dir` so a restarted agent
/// takes up the leases it held at once instead of waiting for them to expire,
/// and told apart by its admin address, which no two processes share, so a
/// compactor started in an agent's folder does not hold the agent's leases.
/// Without a writable data dir, a fresh name each start.
pub fn lease_holder(data_dir: &Path, world: &World) -> String {
    let file = data_dir.join("agent-id");
    if let Ok(id) = std::fs::read_to_string(&file)
        && !id.trim().is_empty()
    {
        return id.trim().to_string();
    }
    let id = format!("agent-{}", world.new_id());
    let written = std::fs::create_dir_all(data_dir).and_then(|()| std::fs::write(&file, &id));
    if let Err(e) = written {
        tracing::warn!(file = %file.display(), error = %e, "could not keep this agent's lease name");
    }
    id
}

impl Background {
    /// `None` when compaction is turned off (`compaction_interval = "0s"`).
    pub fn from_config(config: &Config, world: &World, counters: Counters) -> Option<Background> {
        let window = Duration::from_millis(floe_metastore::ledger::COMMIT_WINDOW_MS as u64);
        if config.orphan_age < window {
            // Safe (the metastore refuses the commit of a key it retired),
            // but slow commits of young uploads will fail and be retried.
            tracing::warn!(orphan_age = ?config.orphan_age, commit_window = ?window,
                "orphan_age is shorter than the commit window: uploads whose commit is slow may be swept and their commits refused");
        }
        (!config.compaction_interval.is_zero()).then(|| Background {
            interval: config.compaction_interval,
            policy: CompactionPolicy {
                min_extents: config.compaction_min_extents,
                max_segment_bytes: config.segment_bytes.as_u64(),
                max_age: config.compaction_max_age,
                job_bytes: config.compaction_job_bytes.as_u64(),
                // Key compaction holds a job's worth at once too.
                keyed_group_bytes: config.compaction_job_bytes.as_u64(),
                ..CompactionPolicy::default()
            },
            gc: Gc::new(config.gc_grace),
            orphan_age: config.orphan_age,
            holder: format!(
                "{}@{}",
                lease_holder(&config.data_dir, world),
                config.admin_listen
            ),
            counters,
            ids: world.ids.clone(),
        })
    }

    pub async fn run(mut self, store: Arc<dyn ObjectStore>, meta: Arc<dyn Metastore>) {
        let holder = self.holder.clone();
        let worker = Worker {
            holder: holder.clone(),
            lease: COMPACTION_LEASE,
        };
        // Compacted partitions' looks, kept from pass to pass.
        let looks = KeptLooks::default();
        // Held across passes by renewing it; another agent takes over only
        // after the holder has missed a few passes (or at least half a minute).
        let maintenance_ttl_ms = (self.interval * 3)
            .max(MIN_MAINTENANCE_LEASE)
            .as_millis()
            .min(i64::MAX as u128) as i64;
        let lease_maintenance = |now_ms: i64| {
            meta.acquire_lease(
                MAINTENANCE.into(),
                holder.clone(),
                now_ms,
                maintenance_ttl_ms,
            )
        };
        let mut tick = tokio::time::interval(self.interval);
        // Listing the bucket costs requests: sweep for orphans a few times per orphan age.
        let mut next_sweep = tokio::time::Instant::now();
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // Retention and tombstones compare with times the metastore
            // stamped: its clock decides, never this agent's.
            let now_ms = match meta.clock().await {
                Ok(ms) => ms,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the metastore's time failed; skipping this pass");
                    continue;
                }
            };
            let maintaining = match lease_maintenance(now_ms).await {
                Ok(granted) => granted,
                Err(e) => {
                    tracing::warn!(error = %e, "could not lease the maintenance job");
                    false
                }
            };
            if maintaining
                && let Err(e) =
                    floe_compactor::retention::enforce(&meta, now_ms, &self.counters).await
            {
                tracing::warn!(error = %e, "retention pass failed");
            }
            // A random first partition each pass, so agents do not queue for
            // the same leases in the same order.
            let start = self.ids.next_id().as_u128() as usize;
            match compact_all(
                &store,
                &meta,
                &self.policy,
                Some(&worker),
                start,
                &self.counters,
                now_ms,
                self.ids.as_ref(),
                &looks,
            )
            .await
            {
                Ok(pass) => {
                    for m in pass.merged {
                        tracing::info!(merged = %m.key, files = m.files, runs = m.runs,
                            swapped = m.swapped, bytes = m.bytes, "compacted ingest files");
                    }
                    for c in pass.compacted {
                        tracing::info!(segment = %c.segment_key, extents = c.extents, bytes = c.bytes,
                            base_offset = c.base_offset, last_offset = c.last_offset, "compacted");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "compaction pass failed"),
            }
            // Compaction may have taken long: renew (or learn we lost) the
            // lease before the sweep and GC.
            let maintaining = maintaining && lease_maintenance(now_ms).await.unwrap_or(false);
            if !maintaining {
                continue;
            }
            if tokio::time::Instant::now() >= next_sweep {
                next_sweep = tokio::time::Instant::now() + (self.orphan_age / 4).max(self.interval);
                if let Err(e) = sweep_orphans(&store, &meta, self.orphan_age, now_ms).await {
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
