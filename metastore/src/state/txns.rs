//! Transactions: the coordinator's steps as commands, and the markers that
//! end a transaction in each of its partitions.

use super::*;

impl State {
    /// Ends a transaction with its markers (`batches[markers]`), if
    /// [`Txns::check_end`] accepts it: each marker takes the next offset of
    /// its partition, which leaves the transaction's ongoing entry (and, on
    /// abort, enters the aborted index); then the transaction completes.
    /// Answers the markers' offsets and the partitions given an extent.
    pub(super) fn sequence_end(
        &mut self,
        end: &TxnEnd,
        markers: &[usize],
        batches: &[IngestBatch],
        object: u64,
        now_ms: i64,
    ) -> Result<(Vec<i64>, Vec<TopicPartition>), Refusal> {
        let tps: BTreeSet<TopicPartition> = markers
            .iter()
            .map(|&at| batches[at].batch.partition_of())
            .collect();
        if tps.len() != markers.len() {
            return Err(Refusal::InvalidTxnState(
                "two markers of one transaction in one partition".into(),
            ));
        }
        self.txns.check_end(end, &tps, now_ms)?;
        let malformed = markers.iter().any(|&at| {
            let b = &batches[at].batch;
            b.producer_id != end.producer_id
                || b.producer_epoch != end.marker_epoch()
                || b.record_count != 1
        });
        if malformed {
            return Err(Refusal::InvalidTxnState(
                "a marker of another producer, epoch or size".into(),
            ));
        }
        let firsts = self
            .txns
            .get(&end.transactional_id)
            .map(|t| t.partitions.clone())
            .unwrap_or_default();
        let mut offsets = Vec::with_capacity(markers.len());
        let mut added = Vec::new();
        for &at in markers {
            let batch = &batches[at].batch;
            let tp = batch.partition_of();
            let partition = self
                .changing_partition(tp)
                .expect("a transaction's partitions exist (deleted topics leave it)");
            let (offset, new_extent) = partition.place(batch, object, now_ms);
            if new_extent {
                added.push(tp);
            }
            // A fence's markers carry the bumped epoch: the producer's
            // sequence state starts over at it, as Kafka's marker append does.
            if let Some(state) = partition.producers.get_mut(&end.producer_id)
                && state.epoch < batch.producer_epoch
            {
                state.epoch = batch.producer_epoch;
                state.batches.clear();
            }
            if let Some(Some(first)) = firsts.get(&tp) {
                partition.ongoing.remove(first);
                if !end.commit {
                    let lso_after = partition.last_stable();
                    partition.aborted.push_back(AbortedTxn {
                        producer_id: end.producer_id,
                        first_offset: *first,
                        last_offset: offset,
                        lso_after,
                    });
                }
            }
            offsets.push(offset);
        }
        self.finish_end(end, now_ms);
        Ok((offsets, added))
    }

    /// Completes an accepted end; the producer id is issued at its epoch
    /// from now on (a fenced producer's batches then fail the epoch check).
    pub(super) fn finish_end(&mut self, end: &TxnEnd, now_ms: i64) {
        let (now, pending) = self.txns.finish_end(
            end,
            now_ms,
            &mut NextProducerId(&mut self.producers.next_id),
        );
        if end.commit {
            for (group, offsets) in pending {
                self.groups
                    .store_txn_offsets(&group, offsets.into_values().collect(), now_ms);
            }
        }
        self.producers.issued.insert(
            now.producer_id,
            IssuedProducer {
                epoch: now.epoch,
                last_ms: now_ms,
            },
        );
    }

    /// InitProducerId with a transactional id (see [`Txns::init_checked`]).
    pub(super) fn init_txn_producer(
        &mut self,
        c: InitTxnProducer,
        abort_check_interval_ms: i32,
    ) -> Result<ProducerIdentity, Refusal> {
        let now_ms = self.clock_ms;
        let answer = self.txns.init_checked(
            &c.transactional_id,
            c.timeout_ms,
            c.expected,
            now_ms,
            &mut NextProducerId(&mut self.producers.next_id),
            abort_check_interval_ms,
        );
        // Whatever it answered (a fence also bumps), the id's producer is
        // issued at its current epoch.
        if let Some(t) = self.txns.get(&c.transactional_id) {
            self.producers.issued.insert(
                t.producer_id,
                IssuedProducer {
                    epoch: t.epoch,
                    last_ms: now_ms,
                },
            );
        }
        answer
    }

    pub(super) fn add_to_txn(&mut self, a: AddToTxn) -> Result<u64, Refusal> {
        if a.partitions
            .iter()
            .any(|tp| self.partition(tp.topic_id, tp.partition).is_err())
        {
            return Err(Refusal::UnknownTopicOrPartition);
        }
        self.txns.add(
            &a.transactional_id,
            a.producer_id,
            a.epoch,
            &a.partitions,
            &a.groups,
            self.clock_ms,
        )
    }

    /// TxnOffsetCommit: the transaction's checks, then the group's, then
    /// the offsets wait in the transaction for its end.
    pub(super) fn txn_commit_offsets(
        &mut self,
        c: TxnCommitOffsets,
    ) -> Result<Result<(), GroupError>, Refusal> {
        let now_ms = self.clock_ms;
        // Nothing is stored unless both checks pass.
        self.txns.check_offsets(
            &c.transactional_id,
            c.producer_id,
            c.epoch,
            &c.commit.group,
            c.commit.offsets.len(),
            now_ms,
        )?;
        if let Err(e) = self.groups.check_txn_commit(&c.commit) {
            return Ok(Err(e));
        }
        self.txns.add_offsets(
            &c.transactional_id,
            c.producer_id,
            c.epoch,
            &c.commit.group,
            c.commit.offsets,
            now_ms,
        )?;
        Ok(Ok(()))
    }

    /// Ends a transaction that needs no marker.
    pub(super) fn end_txn(&mut self, end: TxnEnd) -> Result<(), Refusal> {
        let now_ms = self.clock_ms;
        self.txns.check_end(&end, &BTreeSet::new(), now_ms)?;
        self.finish_end(&end, now_ms);
        Ok(())
    }
}

/// As logged before format 11: its transactions time out at once.
impl Apply for InitTxnProducer {
    type Output = ProducerIdentity;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        state.init_txn_producer(self, 0)
    }
    /// A blind repeat bumps the epoch twice (the producer retries itself).
    fn retry_is_safe(&self) -> bool {
        false
    }
}

impl Apply for InitTxnProducerChecked {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        state.init_txn_producer(self.init, self.abort_check_interval_ms)
    }
}

impl Apply for AddToTxn {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        state.add_to_txn(self)
    }
}

impl Apply for EndTxn {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        state.end_txn(self.end)
    }
}

impl Apply for TxnCommitOffsets {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        state.txn_commit_offsets(self)
    }
    /// A blind repeat could land in the producer's next transaction (TV1
    /// keeps the epoch), moving its offsets back: the client retries.
    fn restamp(&mut self, now_ms: i64) {
        self.commit.now_ms = now_ms;
    }
}

impl Query for PendingTxnOffsets {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state
            .txns
            .pending_partitions(&self.group)
            .into_iter()
            .collect())
    }
}

impl Query for DescribeTxns {
    fn query(self, state: &State, _now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(self.ids.iter().map(|id| state.txns.view(id)).collect())
    }
}

impl Query for ListTxns {
    fn query(self, state: &State, now_ms: i64) -> Result<Self::Output, Refusal> {
        let now_ms = now_ms.max(state.clock_ms);
        Ok(state
            .txns
            .iter()
            .filter(|(_, t)| self.phases.is_empty() || self.phases.contains(&t.phase))
            .filter(|(_, t)| {
                self.producer_ids.is_empty() || self.producer_ids.contains(&t.producer_id)
            })
            .filter(|(_, t)| {
                self.min_duration_ms < 0
                    || (t.phase == TxnPhase::Ongoing
                        && now_ms.saturating_sub(t.start_ms) >= self.min_duration_ms)
            })
            .filter_map(|(id, _)| state.txns.view(id))
            .collect())
    }
}

impl Query for ExpiredTxns {
    fn query(self, state: &State, now_ms: i64) -> Result<Self::Output, Refusal> {
        Ok(state
            .txns
            .expired(now_ms.max(state.clock_ms), self.limit as usize))
    }
}
