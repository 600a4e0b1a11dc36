//! Key compaction's looks at compacted partitions ([`PartitionLooks`]), and
//! the same for an asker that keeps its last looks ([`PartitionLooksSince`]):
//! an unchanged partition costs a [`LookMark`], not its extents.

use super::Query;
use super::{Partition, State};
use crate::ops::{LookMark, LookSince, PartitionLook, PartitionLooks, PartitionLooksSince};
use crate::types::Refusal;

impl State {
    fn look(&self, p: &Partition) -> PartitionLook {
        PartitionLook {
            extents: p.extents.values().map(|e| self.extent_ref(e)).collect(),
            last_stable_offset: p.last_stable(),
        }
    }
}

impl Partition {
    fn look_mark(&self) -> LookMark {
        LookMark {
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start_offset,
            extents: self.extents.len() as u64,
            newest_object: self.newest_object.0,
            last_stable_offset: self.last_stable(),
        }
    }
}

impl Query for PartitionLooks {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(self
            .partitions
            .into_iter()
            .map(|tp| Ok(state.look(state.partition(tp.topic_id, tp.partition)?)))
            .collect())
    }
}

impl Query for PartitionLooksSince {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(self
            .partitions
            .into_iter()
            .map(|(tp, known)| {
                let p = state.partition(tp.topic_id, tp.partition)?;
                let mark = p.look_mark();
                Ok(match known == Some(mark) {
                    true => LookSince::Unchanged,
                    false => LookSince::Changed {
                        look: state.look(p),
                        mark,
                    },
                })
            })
            .collect())
    }
}
