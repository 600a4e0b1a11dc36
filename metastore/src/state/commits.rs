//! The sequencer: a committed ingest file's batches get their offsets, once
//! per object key, with idempotent producers' sequences checked.

use super::*;

impl State {
    /// Sequences a commit exactly once per object key (see [`crate::ledger`]).
    pub(super) fn commit(&mut self, commit: IngestCommit) -> Vec<Result<i64, Refusal>> {
        let refuse = |e: Refusal| vec![Err(e); commit.batches.len()];
        match self.log.ledger.seen(&commit.object_key) {
            Seen::Answered(answer) => answer,
            Seen::Used => refuse(Refusal::ObjectKeyUsed(commit.object_key.clone())),
            Seen::New if self.too_late(commit.not_before_ms) => {
                // Its object will never be committed: to GC with it now
                // rather than after the bucket sweep finds it.
                let refused = refuse(Refusal::CommitTooLate(commit.object_key.clone()));
                self.log.ledger.retire(&commit.object_key, self.clock_ms);
                self.log.garbage.push(commit.object_key);
                refused
            }
            Seen::New => {
                let key = commit.object_key.clone();
                let results = self.sequence(commit);
                self.log
                    .ledger
                    .answered(&key, results.clone(), self.clock_ms);
                results
            }
        }
    }

    /// Sequences an object's batches: data first, in the order listed, then
    /// each transaction's end with its markers (see [`IngestCommit`]).
    pub(super) fn sequence(&mut self, commit: IngestCommit) -> Vec<Result<i64, Refusal>> {
        // Appends are dated by the metastore's clock, never the agent's.
        let now_ms = self.clock_ms;
        let object = self.log.next_object;
        self.log.next_object += 1;
        // The extents added, by partition.
        let mut holders: BTreeMap<TopicPartition, u64> = BTreeMap::new();
        let mut results: Vec<Option<Result<i64, Refusal>>> = vec![None; commit.batches.len()];
        for (at, b) in commit.batches.iter().enumerate() {
            let transactional = match b.kind {
                BatchKind::Marker { .. } => continue,
                BatchKind::Transactional => true,
                BatchKind::TransactionalAdding => {
                    if let Err(refused) = self.add_to_producers_txn(&b.batch, now_ms) {
                        results[at] = Some(Err(refused));
                        continue;
                    }
                    true
                }
                BatchKind::Plain => false,
            };
            let result = self.sequence_data(&b.batch, transactional, object, now_ms);
            if let Ok((_, true)) = result {
                *holders.entry(b.batch.partition_of()).or_default() += 1;
            }
            results[at] = Some(result.map(|(offset, _)| offset));
        }
        let mut markers_of: Vec<Vec<usize>> = vec![Vec::new(); commit.ends.len()];
        for (at, b) in commit.batches.iter().enumerate() {
            if let BatchKind::Marker { end } = b.kind
                && let Some(markers) = markers_of.get_mut(end as usize)
            {
                markers.push(at);
            }
        }
        for (end, markers) in commit.ends.iter().zip(markers_of) {
            match self.sequence_end(end, &markers, &commit.batches, object, now_ms) {
                Ok((offsets, added)) => {
                    for tp in added {
                        *holders.entry(tp).or_default() += 1;
                    }
                    for (at, offset) in markers.into_iter().zip(offsets) {
                        results[at] = Some(Ok(offset));
                    }
                }
                Err(refusal) => {
                    for at in markers {
                        results[at] = Some(Err(refusal.clone()));
                    }
                }
            }
        }
        self.went_live(object, commit.object_key, commit.object_size, holders);
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(Refusal::InvalidTxnState("a marker of no end".into())))
            })
            .collect()
    }

    /// Adds `batch`'s partition to its producer's transaction, beginning
    /// one if none is ongoing (Produce v12+, see
    /// [`BatchKind::TransactionalAdding`]): refused as AddPartitionsToTxn
    /// would be (a fenced producer, one ending its transaction).
    pub(super) fn add_to_producers_txn(
        &mut self,
        batch: &CommitBatch,
        now_ms: i64,
    ) -> Result<(), Refusal> {
        let Some((id, _)) = self.txns.of_producer(batch.producer_id) else {
            return Err(Refusal::InvalidProducerIdMapping);
        };
        let id = id.to_string();
        self.txns
            .add(
                &id,
                batch.producer_id,
                batch.producer_epoch,
                &[batch.partition_of()],
                &[],
                now_ms,
            )
            .map(|_began| ())
    }

    /// Sequences one data batch: the transaction check (a transactional
    /// batch goes only into a partition of an ongoing transaction of its
    /// producer, at its epoch: the KIP-890 check), the idempotence check,
    /// then its offsets. Answers its base offset (a retry's original one)
    /// and whether it added an extent.
    pub(super) fn sequence_data(
        &mut self,
        batch: &CommitBatch,
        transactional: bool,
        object: u64,
        now_ms: i64,
    ) -> Result<(i64, bool), Refusal> {
        let tp = batch.partition_of();
        if batch.record_count < 1 {
            // It would leave an extent ending before it begins, or move the
            // high watermark back over offsets already given.
            return Err(Refusal::InvalidBatch(format!(
                "{} records",
                batch.record_count
            )));
        }
        let producer_id = batch.producer_id;
        // For a transactional batch: whether its transaction has data here yet.
        let mut first_of_txn = false;
        if transactional {
            let Some((_, txn)) = self.txns.of_producer(producer_id) else {
                return Err(Refusal::InvalidProducerIdMapping);
            };
            if batch.producer_epoch != txn.epoch || txn.expired(now_ms) {
                // Past its timeout, the transaction is as good as aborted
                // with its epoch bumped (what the timeout's markers carry).
                let current = if txn.expired(now_ms) {
                    txn.epoch.saturating_add(1)
                } else {
                    txn.epoch
                };
                return Err(Refusal::InvalidProducerEpoch {
                    producer_id,
                    got: batch.producer_epoch,
                    current,
                });
            }
            match (txn.phase, txn.partitions.get(&tp)) {
                (TxnPhase::Ongoing, Some(first)) => first_of_txn = first.is_none(),
                _ => return Err(Refusal::NotInTransaction),
            }
        } else if producer_id >= 0
            && let Some((_, txn)) = self.txns.of_producer(producer_id)
            && matches!(txn.partitions.get(&tp), Some(Some(_)))
        {
            // ProducerAppendInfo: no plain batch in the middle of its own
            // transaction.
            return Err(Refusal::InvalidTxnState(
                "a non-transactional batch from a producer with an open transaction here".into(),
            ));
        }
        let issued_epoch = self.producers.issued.get_mut(&producer_id).map(|p| {
            p.last_ms = now_ms;
            p.epoch
        });
        let blocks = self.producers.blocks;
        let partition = self
            .changing_partition(tp)
            .ok_or(Refusal::UnknownTopicOrPartition)?;
        if producer_id >= 0 {
            let last_sequence = batch.base_sequence.wrapping_add(batch.record_count - 1);
            let check = match issued_epoch {
                None if !blocks => Err(Refusal::UnknownProducerId(producer_id)),
                Some(current) if batch.producer_epoch < current => {
                    Err(Refusal::InvalidProducerEpoch {
                        producer_id,
                        got: batch.producer_epoch,
                        current,
                    })
                }
                Some(_) | None => {
                    let state =
                        partition
                            .producers
                            .entry(producer_id)
                            .or_insert(ProducerPartition {
                                epoch: -1,
                                batches: Default::default(),
                                last_ms: now_ms,
                            });
                    state.check(
                        producer_id,
                        batch.producer_epoch,
                        batch.base_sequence,
                        last_sequence,
                    )
                }
            };
            match check? {
                SequenceCheck::Append => partition
                    .producers
                    .get_mut(&producer_id)
                    .expect("inserted above")
                    .record(
                        batch.producer_epoch,
                        batch.base_sequence,
                        last_sequence,
                        partition.high_watermark,
                        now_ms,
                    ),
                SequenceCheck::Duplicate(original) => return Ok((original, false)),
            }
        }
        let (base_offset, added) = partition.place(batch, object, now_ms);
        if first_of_txn {
            partition.ongoing.insert(base_offset, producer_id);
            let txn = self
                .txns
                .of_producer_mut(producer_id)
                .expect("checked above");
            txn.partitions.insert(tp, Some(base_offset));
        }
        Ok((base_offset, added))
    }
}

impl Apply for Commit {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        Ok(state.commit(self.into()))
    }
}

impl Apply for IngestCommit {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal> {
        let partitions: Vec<TopicPartition> = self
            .batches
            .iter()
            .map(|b| b.batch.partition_of())
            .collect();
        let results = state.commit(self);
        // Log starts as this commit leaves them (a retried commit answered
        // from the ledger gets them as they are now).
        Ok(results
            .into_iter()
            .zip(partitions)
            .map(|(result, tp)| {
                result.map(|base_offset| Placed {
                    base_offset,
                    log_start_offset: state.log_start_of(tp).unwrap_or(-1),
                })
            })
            .collect())
    }
}
