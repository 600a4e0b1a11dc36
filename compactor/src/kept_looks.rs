//! Compacted partitions' last looks, kept from one pass to the next, so a
//! pass asks the metastore only for the partitions that changed
//! (`PartitionLooksSince`): an unchanged partition costs its mark, not its
//! extents, and key compaction judges it again (times move) from the look
//! kept.

use std::collections::HashMap;
use std::sync::Mutex;

use floe_metastore::ops::{LookMark, PartitionLook};
use floe_metastore::{ExtentRef, TopicPartition};

/// Most extents kept in all: past it, a look is not kept, and its
/// partition is looked at whole every pass, as without the cache.
pub const MAX_KEPT_EXTENTS: usize = 65_536;

pub struct KeptLooks(Mutex<Kept>);

struct Kept {
    looks: HashMap<TopicPartition, (LookMark, PartitionLook)>,
    extents: usize,
    limit: usize,
}

impl Default for KeptLooks {
    fn default() -> KeptLooks {
        KeptLooks::with_limit(MAX_KEPT_EXTENTS)
    }
}

impl KeptLooks {
    /// Keeping at most `limit` extents (tests; [`MAX_KEPT_EXTENTS`] otherwise).
    pub fn with_limit(limit: usize) -> KeptLooks {
        KeptLooks(Mutex::new(Kept {
            looks: HashMap::new(),
            extents: 0,
            limit,
        }))
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The mark of the look kept for `tp`, to ask what changed since.
    pub fn mark(&self, tp: &TopicPartition) -> Option<LookMark> {
        self.kept().looks.get(tp).map(|(mark, _)| *mark)
    }

    /// The look kept for `tp`: its extents and last stable offset.
    pub fn look(&self, tp: &TopicPartition) -> Option<(Vec<ExtentRef>, i64)> {
        self.kept()
            .looks
            .get(tp)
            .map(|(_, look)| (look.extents.clone(), look.last_stable_offset))
    }

    /// Keeps `look` (seen at `mark`) for `tp`, in place of any before, if
    /// it fits.
    pub fn keep(&self, tp: TopicPartition, mark: LookMark, look: &PartitionLook) {
        let mut kept = self.kept();
        kept.forget(&tp);
        if kept.extents + look.extents.len() <= kept.limit {
            kept.extents += look.extents.len();
            kept.looks.insert(tp, (mark, look.clone()));
        }
    }

    /// Forgets every partition but those `keep` says to.
    pub fn retain(&self, keep: impl Fn(&TopicPartition) -> bool) {
        let mut kept = self.kept();
        let gone: Vec<TopicPartition> = kept.looks.keys().filter(|tp| !keep(tp)).copied().collect();
        for tp in gone {
            kept.forget(&tp);
        }
    }

    pub fn forget(&self, tp: &TopicPartition) {
        self.kept().forget(tp);
    }

    /// Partitions and extents kept.
    pub fn size(&self) -> (usize, usize) {
        let kept = self.kept();
        (kept.looks.len(), kept.extents)
    }
}

impl Kept {
    fn forget(&mut self, tp: &TopicPartition) {
        if let Some((_, look)) = self.looks.remove(tp) {
            self.extents -= look.extents.len();
        }
    }
}
