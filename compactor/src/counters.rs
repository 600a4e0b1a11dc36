//! What background passes count instead of stopping: one bad partition or
//! batch must not disable retention or compaction for every other one.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

/// Shared with the agent's metrics registry; clones count into the same cells.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// Partitions whose compaction failed in a pass (the pass went on).
    pub compaction_failures: Counter,
    /// Partitions whose retention failed in a pass (the pass went on).
    pub retention_failures: Counter,
    /// Stored batches key compaction could not decode and kept as they were.
    pub undecodable_batches: Counter,
    /// Compacted partitions a pass judged from the look it kept (the
    /// metastore answered that nothing changed), and those whose look the
    /// metastore sent.
    pub looks_kept: Counter,
    pub looks_sent: Counter,
}

impl Counters {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "compaction_failures",
            "Partitions whose compaction failed in a background pass",
            self.compaction_failures.clone(),
        );
        registry.register(
            "retention_failures",
            "Partitions whose retention failed in a background pass",
            self.retention_failures.clone(),
        );
        registry.register(
            "undecodable_batches",
            "Stored record batches key compaction could not decode (kept as they were)",
            self.undecodable_batches.clone(),
        );
        registry.register(
            "compaction_looks_kept",
            "Compacted partitions key compaction judged from the look it kept (unchanged since)",
            self.looks_kept.clone(),
        );
        registry.register(
            "compaction_looks_sent",
            "Compacted partitions whose extents the metastore sent key compaction (new or changed)",
            self.looks_sent.clone(),
        );
    }
}
