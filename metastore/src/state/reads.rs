//! How reads are answered: offsets, high watermarks, read plans (with
//! transactions' aborted ranges) and ListOffsets.

use super::*;

impl State {
    /// `tp`'s log start offset, if it is a partition.
    pub(super) fn log_start_of(&self, tp: TopicPartition) -> Option<i64> {
        self.partition(tp.topic_id, tp.partition)
            .ok()
            .map(|p| p.log_start_offset)
    }

    pub fn offsets(&self, id: TopicId, partition: i32) -> Result<PartitionOffsets, Refusal> {
        let p = self.partition(id, partition)?;
        Ok(PartitionOffsets {
            log_start_offset: p.log_start_offset,
            high_watermark: p.high_watermark,
        })
    }

    /// Each partition's high watermark; `None` for one that does not exist.
    pub fn high_watermarks(&self, partitions: &[TopicPartition]) -> Vec<Option<i64>> {
        partitions
            .iter()
            .map(|tp| {
                self.partition(tp.topic_id, tp.partition)
                    .ok()
                    .map(|p| p.high_watermark)
            })
            .collect()
    }

    /// Each partition's offsets, bytes held and idempotent producers
    /// (`None`: no such partition), for DescribeLogDirs and
    /// DescribeProducers. Walks the partitions' extents: an admin request,
    /// bounded by the partitions asked for.
    pub fn partition_states(
        &self,
        partitions: &[TopicPartition],
        with_producers: bool,
    ) -> Vec<Option<PartitionState>> {
        partitions
            .iter()
            .map(|tp| {
                let p = self.partition(tp.topic_id, tp.partition).ok()?;
                Some(PartitionState {
                    log_start_offset: p.log_start_offset,
                    high_watermark: p.high_watermark,
                    size_bytes: p.extents.values().map(|e| e.length).sum(),
                    producers: p
                        .producers
                        .iter()
                        .filter(|_| with_producers)
                        .filter_map(|(&producer_id, state)| {
                            let &(_, last_sequence, _) = state.batches.back()?;
                            Some(ProducerState {
                                producer_id,
                                epoch: state.epoch,
                                last_sequence,
                                last_append_ms: state.last_ms,
                            })
                        })
                        .collect(),
                })
            })
            .collect()
    }

    /// Extents holding `[from, ...)`, adding extents until `max_bytes` is reached
    /// (always at least one if there is data at `from`).
    pub fn read_plan(
        &self,
        id: TopicId,
        partition: i32,
        from: i64,
        max_bytes: u64,
    ) -> Result<ReadPlan, Refusal> {
        let p = self.partition(id, partition)?;
        if from < p.log_start_offset || from > p.high_watermark {
            return Err(Refusal::OffsetOutOfRange {
                offset: from,
                log_start_offset: p.log_start_offset,
                high_watermark: p.high_watermark,
            });
        }
        let mut extents = Vec::new();
        let mut bytes = 0u64;
        let first = p
            .extents
            .range(..=from)
            .next_back()
            .map(|(base, _)| *base)
            .unwrap_or(from);
        for extent in p.extents.range(first..).map(|(_, e)| e) {
            if extent.last_offset < from {
                continue;
            }
            if !extents.is_empty() && bytes >= max_bytes {
                break;
            }
            bytes += extent.length;
            extents.push(self.extent_ref(extent));
        }
        Ok(ReadPlan {
            log_start_offset: p.log_start_offset,
            high_watermark: p.high_watermark,
            extents,
        })
    }

    /// [`State::read_plan`] with the last stable offset and the aborted
    /// transactions with data in the planned extents' offsets.
    pub fn txn_read_plan(
        &self,
        id: TopicId,
        partition: i32,
        from: i64,
        max_bytes: u64,
    ) -> Result<TxnReadPlan, Refusal> {
        let plan = self.read_plan(id, partition, from, max_bytes)?;
        let p = self.partition(id, partition)?;
        let start = plan.extents.first().map_or(from, |e| e.base_offset);
        let end = plan.extents.last().map_or(from, |e| e.last_offset + 1);
        Ok(TxnReadPlan {
            last_stable_offset: p.last_stable(),
            aborted: p.aborted_between(start, end),
            plan,
        })
    }

    pub fn list_offsets(
        &self,
        id: TopicId,
        partition: i32,
        query: OffsetQuery,
    ) -> Result<OffsetAnswer, Refusal> {
        let p = self.partition(id, partition)?;
        Ok(match query {
            OffsetQuery::Earliest => OffsetAnswer::Offset(p.log_start_offset),
            OffsetQuery::Latest => OffsetAnswer::Offset(p.high_watermark),
            OffsetQuery::LastStable => OffsetAnswer::Offset(p.last_stable()),
            OffsetQuery::Timestamp(ts) => p
                .extents
                .values()
                .find(|e| e.max_timestamp >= ts)
                .map(|e| OffsetAnswer::InExtent(self.extent_ref(e)))
                .unwrap_or(OffsetAnswer::NotFound),
            // The first extent holding the largest timestamp (a later equal
            // one does not replace it, as Kafka keeps the first such record).
            OffsetQuery::MaxTimestamp => p
                .extents
                .values()
                .filter(|e| e.max_timestamp >= 0)
                .fold(None::<&Extent>, |best, e| match best {
                    Some(b) if b.max_timestamp >= e.max_timestamp => Some(b),
                    _ => Some(e),
                })
                .map(|e| OffsetAnswer::InExtent(self.extent_ref(e)))
                .unwrap_or(OffsetAnswer::NotFound),
        })
    }
}

impl Query for Offsets {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        state.offsets(self.partition.topic_id, self.partition.partition)
    }
}

impl Query for HighWatermarks {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.high_watermarks(&self.partitions))
    }
}

impl Query for PartitionStates {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state.partition_states(&self.partitions, self.with_producers))
    }
}

impl Query for PlanRead {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        let p = self.partition;
        state.read_plan(p.topic_id, p.partition, self.from, self.max_bytes)
    }
}

impl Query for PlanReads {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(self
            .partitions
            .into_iter()
            .map(|(p, from)| state.read_plan(p.topic_id, p.partition, from, self.max_bytes))
            .collect())
    }
}

impl Query for FindOffset {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        let p = self.partition;
        state.list_offsets(p.topic_id, p.partition, self.query)
    }
}

impl Query for TxnReadPlans {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(self
            .partitions
            .into_iter()
            .map(|(p, from)| state.txn_read_plan(p.topic_id, p.partition, from, self.max_bytes))
            .collect())
    }
}
