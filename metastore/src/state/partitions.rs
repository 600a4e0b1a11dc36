//! A partition's log: its extents (where each offset range lies), its high
//! watermark and log start, its ongoing and aborted transactions.

use super::*;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Extent {
    pub(super) base_offset: i64,
    pub(super) last_offset: i64,
    pub(super) max_timestamp: i64,
    pub(super) object: u64,
    pub(super) position: u64,
    pub(super) length: u64,
    pub(super) appended_ms: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Partition {
    pub(super) log_start_offset: i64,
    pub(super) high_watermark: i64,
    /// By base offset; contiguous and non-overlapping.
    pub(super) extents: BTreeMap<i64, Extent>,
    /// Idempotent producers that wrote here, by producer id.
    pub(super) producers: BTreeMap<i64, ProducerPartition>,
    // Fields below were added after format 4 (see `crate::format`).
    /// Ongoing transactions with data here: first offset -> producer id.
    /// The first one bounds the last stable offset (format 7).
    #[serde(default)]
    pub(super) ongoing: BTreeMap<i64, i64>,
    /// Aborted transactions with data here, in marker order (so sorted by
    /// `last_offset`); pruned with the log start (format 7).
    #[serde(default)]
    pub(super) aborted: VecDeque<AbortedTxn>,
    /// The state's count of extent changes at this partition's last one
    /// (see [`State::changing_partition`]). Derived, never stored: a
    /// compaction pass passes over a partition it found settled at this
    /// version (see [`backlog`]).
    #[serde(skip)]
    pub(super) extents_version: Derived<u64>,
    /// The newest object (the highest id) an extent of it was placed in
    /// since the state was loaded, or of those it holds at load. Derived,
    /// never stored: any change of its extents moves it, its high
    /// watermark, its log start or its count of extents (see
    /// [`crate::ops::LookMark`]).
    #[serde(skip)]
    pub(super) newest_object: Derived<u64>,
}

impl Partition {
    /// The last stable offset: the first offset of the oldest ongoing
    /// transaction, or the high watermark (Kafka's `firstUnstableOffset`).
    pub(super) fn last_stable(&self) -> i64 {
        self.ongoing
            .keys()
            .next()
            .copied()
            .unwrap_or(self.high_watermark)
            .clamp(self.log_start_offset, self.high_watermark)
    }

    /// The aborted transactions with data in `[from, to)`, as Kafka's
    /// `TransactionIndex.collectAbortedTxns` finds them: those whose marker
    /// is at or past `from` and that began before `to`. The walk stops at
    /// the first whose end left the last stable offset at `to` or past it:
    /// every transaction that ended later began at or after that offset.
    pub(super) fn aborted_between(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        let start = self.aborted.partition_point(|a| a.last_offset < from);
        let mut found = Vec::new();
        for a in self.aborted.range(start..) {
            if a.first_offset < to {
                found.push(*a);
            }
            if a.lso_after >= to {
                break;
            }
        }
        found
    }

    /// Gives `batch` the next offsets and stores where it lies: extending
    /// the last extent when it continues it in the same object. Answers its
    /// base offset and whether an extent was added.
    pub(super) fn place(&mut self, batch: &CommitBatch, object: u64, now_ms: i64) -> (i64, bool) {
        let base_offset = self.high_watermark;
        let last_offset = base_offset + batch.record_count as i64 - 1;
        self.high_watermark = last_offset + 1;
        let extends_last = self.extents.values_mut().next_back().filter(|e| {
            e.object == object
                && e.position + e.length == batch.position
                && e.last_offset + 1 == base_offset
        });
        match extends_last {
            Some(extent) => {
                extent.last_offset = last_offset;
                extent.length += batch.length as u64;
                extent.max_timestamp = extent.max_timestamp.max(batch.max_timestamp);
                extent.appended_ms = extent.appended_ms.max(now_ms);
                (base_offset, false)
            }
            None => {
                self.newest_object.0 = self.newest_object.0.max(object);
                self.extents.insert(
                    base_offset,
                    Extent {
                        base_offset,
                        last_offset,
                        max_timestamp: batch.max_timestamp,
                        object,
                        position: batch.position,
                        length: batch.length as u64,
                        appended_ms: now_ms,
                    },
                );
                (base_offset, true)
            }
        }
    }
}
