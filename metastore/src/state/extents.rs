//! Extents that change after a commit, and the objects they free:
//! compaction's swaps, retention's trims, the orphan sweep and GC.

use super::*;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Object {
    pub(super) key: String,
    pub(super) size: u64,
    /// Extents that still point into this object; at zero it is garbage.
    pub(super) live_extents: u64,
    /// The partitions those extents belong to, and how many each. Derived,
    /// never stored (rebuilt on load by [`State::rebuild_derived`]): a
    /// compaction pass visits only the partitions in the files it takes.
    #[serde(skip)]
    pub(super) holders: backlog::Holders,
}

impl State {
    /// Drops one extent's hold (an extent of `tp`) on an object; the last
    /// one makes it garbage.
    pub(super) fn release(&mut self, object: u64, tp: TopicPartition) {
        let Some(entry) = self.log.objects.get_mut(&object) else {
            return;
        };
        entry.live_extents -= 1;
        let held = entry.holders.release(tp);
        debug_assert!(held, "object {} released by {tp:?}, no holder", entry.key);
        if entry.live_extents == 0 {
            let gone = self.log.objects.remove(&object).expect("just seen");
            self.log.ledger.retire(&gone.key, self.clock_ms);
            self.log.garbage.push(gone.key);
        }
    }

    pub(super) fn replace_extents(&mut self, r: ReplaceExtents) -> Result<(), Refusal> {
        // First: a key seen before is never swapped in again (and a swap
        // applied twice must not read as "changed", which would make its
        // compactor delete the segment now live).
        if self.log.ledger.is_known(&r.object_key) {
            return Err(Refusal::ObjectKeyUsed(r.object_key));
        }
        let tp = TopicPartition::new(r.topic_id, r.partition);
        self.check_run(tp, &r.replaced, &r.pieces)?;
        if self.too_late(r.not_before_ms) {
            return Err(Refusal::CommitTooLate(r.object_key));
        }
        let object = self.log.next_object;
        self.log.next_object += 1;
        let kept = self.swap_run(object, tp, &r.replaced, r.pieces);
        self.went_live(
            object,
            r.object_key,
            r.object_size,
            BTreeMap::from([(tp, kept)]),
        );
        Ok(())
    }

    /// A merged file's swap: each run on its own terms (see [`ReplaceRuns`]).
    pub(super) fn replace_runs(
        &mut self,
        r: ReplaceRuns,
    ) -> Result<Vec<Result<(), Refusal>>, Refusal> {
        if self.log.ledger.is_known(&r.object_key) {
            return Err(Refusal::ObjectKeyUsed(r.object_key));
        }
        if self.too_late(r.not_before_ms) {
            // Never to be swapped in: to GC now rather than after the sweep.
            self.log.ledger.retire(&r.object_key, self.clock_ms);
            self.log.garbage.push(r.object_key.clone());
            return Err(Refusal::CommitTooLate(r.object_key));
        }
        let object = self.log.next_object;
        self.log.next_object += 1;
        let mut holders: BTreeMap<TopicPartition, u64> = BTreeMap::new();
        let mut results = Vec::with_capacity(r.runs.len());
        for run in r.runs {
            let checked = self.check_run(run.partition, &run.replaced, &run.pieces);
            if checked.is_ok() {
                let kept = self.swap_run(object, run.partition, &run.replaced, run.pieces);
                *holders.entry(run.partition).or_default() += kept;
            }
            results.push(checked);
        }
        self.went_live(object, r.object_key, r.object_size, holders);
        Ok(results)
    }

    /// Whether `pieces` may replace `replaced`: the pieces tile exactly the
    /// offsets replaced, and the partition holds exactly `replaced` over them.
    pub(super) fn check_run(
        &self,
        tp: TopicPartition,
        replaced: &[ExtentRef],
        pieces: &[ExtentPiece],
    ) -> Result<(), Refusal> {
        let (Some(first), Some(last)) = (replaced.first(), replaced.last()) else {
            return Err(Refusal::ExtentsChanged);
        };
        let (base_offset, last_offset) = (first.base_offset, last.last_offset);
        let mut next = base_offset;
        for piece in pieces {
            if piece.base_offset != next || piece.last_offset < piece.base_offset {
                return Err(Refusal::ExtentsChanged);
            }
            next = piece.last_offset + 1;
        }
        if pieces.is_empty() || next != last_offset + 1 {
            return Err(Refusal::ExtentsChanged);
        }
        let partition = self.partition(tp.topic_id, tp.partition)?;
        let mut current = partition.extents.range(base_offset..=last_offset);
        let unchanged = replaced.len() == current.clone().count()
            && replaced.iter().all(|want| {
                let (_, have) = current.next().expect("counted");
                have.base_offset == want.base_offset
                    && have.last_offset == want.last_offset
                    && have.position == want.position
                    && have.length == want.length
                    && self
                        .log
                        .objects
                        .get(&have.object)
                        .is_some_and(|o| o.key == want.object_key)
            });
        if unchanged {
            Ok(())
        } else {
            Err(Refusal::ExtentsChanged)
        }
    }

    /// Swaps a checked run for `pieces` of `object`, releasing the objects
    /// it leaves; returns how many pieces now point into `object`.
    pub(super) fn swap_run(
        &mut self,
        object: u64,
        tp: TopicPartition,
        replaced: &[ExtentRef],
        mut pieces: Vec<ExtentPiece>,
    ) -> u64 {
        let partition = self.changing_partition(tp).expect("checked");
        // Pieces wholly below the log start (DeleteRecords cut into the
        // first replaced extent after the compactor read it) hold nothing
        // readable: they are not swapped in.
        let log_start = partition.log_start_offset;
        pieces.retain(|p| p.last_offset >= log_start);
        let old: Vec<u64> = replaced
            .iter()
            .filter_map(|e| partition.extents.remove(&e.base_offset))
            .map(|e| e.object)
            .collect();
        let kept = pieces.len() as u64;
        if kept > 0 {
            partition.newest_object.0 = partition.newest_object.0.max(object);
        }
        for piece in pieces {
            partition.extents.insert(
                piece.base_offset,
                Extent {
                    base_offset: piece.base_offset,
                    last_offset: piece.last_offset,
                    max_timestamp: piece.max_timestamp,
                    object,
                    position: piece.position,
                    length: piece.length,
                    appended_ms: piece.appended_ms,
                },
            );
        }
        for old in old {
            self.release(old, tp);
        }
        kept
    }

    /// Records the object committed or compacted under `object` (its id,
    /// drawn before its extents were placed), with the extents each
    /// partition placed in it: live if any extent points into it, and
    /// otherwise garbage at once.
    pub(super) fn went_live(
        &mut self,
        object: u64,
        key: String,
        size: u64,
        holders: BTreeMap<TopicPartition, u64>,
    ) {
        let live_extents: u64 = holders.values().sum();
        let holders = backlog::Holders::of(holders);
        if live_extents == 0 {
            self.log.ledger.retire(&key, self.clock_ms);
            self.log.garbage.push(key);
            return;
        }
        self.log.ledger.went_live(&key, object);
        self.log.objects.insert(
            object,
            Object {
                key,
                size,
                live_extents,
                holders,
            },
        );
    }

    pub(super) fn trim(
        &mut self,
        topic_id: TopicId,
        partition: i32,
        offset: i64,
    ) -> Result<i64, Refusal> {
        let tp = TopicPartition::new(topic_id, partition);
        let p = self
            .changing_partition(tp)
            .ok_or(Refusal::UnknownTopicOrPartition)?;
        if offset > p.high_watermark || offset < 0 {
            return Err(Refusal::OffsetOutOfRange {
                offset,
                log_start_offset: p.log_start_offset,
                high_watermark: p.high_watermark,
            });
        }
        if offset <= p.log_start_offset {
            return Ok(p.log_start_offset);
        }
        p.log_start_offset = offset;
        // Kafka drops a segment's transaction index with the segment.
        while p.aborted.front().is_some_and(|a| a.last_offset < offset) {
            p.aborted.pop_front();
        }
        let below: Vec<i64> = p
            .extents
            .values()
            .take_while(|e| e.last_offset < offset)
            .map(|e| e.base_offset)
            .collect();
        let objects: Vec<u64> = below
            .iter()
            .filter_map(|base| p.extents.remove(base))
            .map(|e| e.object)
            .collect();
        for object in objects {
            self.release(object, tp);
        }
        Ok(offset)
    }

    /// Object keys no extent points to any more.
    pub fn garbage(&self) -> &[String] {
        &self.log.garbage
    }

    /// Those of `keys` that no extent points to and that are not awaiting GC:
    /// objects the metastore has never heard of (or has forgotten).
    pub fn unknown_objects(&self, keys: &[String]) -> Vec<String> {
        keys.iter()
            .filter(|k| !self.log.ledger.is_known(k))
            .cloned()
            .collect()
    }
}

impl Apply for ReplaceExtents {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        state.replace_extents(self)
    }
}

impl Apply for ReplaceRuns {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        state.replace_runs(self)
    }
}

impl Apply for ForgetGarbage {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        state.forget_garbage(self.keys);
        Ok(())
    }
}

impl Apply for Trim {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<i64, Refusal> {
        state.trim(
            self.partition.topic_id,
            self.partition.partition,
            self.offset,
        )
    }
}

impl Apply for RecordOrphans {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<(), Refusal> {
        // Decided here, in log order: a key committed since the sweep
        // looked is live (or remembered) and stays; the others are
        // retired, so their commits are refused from now on.
        for key in self.keys {
            if !state.log.ledger.is_known(&key) {
                state.log.ledger.retire(&key, state.clock_ms);
                state.log.garbage.push(key);
            }
        }
        Ok(())
    }
}

impl Query for CompactionWork {
    fn query(self, state: &State, now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.backlog(&self, now_ms))
    }
}

impl Query for ListGarbage {
    fn query(self, state: &State, now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.collectable_garbage(now_ms).to_vec())
    }
}

impl Query for UnknownObjects {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.unknown_objects(&self.keys))
    }
}
