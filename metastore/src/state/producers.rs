//! Producer ids and idempotent producers' sequences: ids issued one at a
//! time or in blocks (KIP-730), and each producer's recent batches per
//! partition, which recognise retries and refuse gaps.

use super::*;

/// The producers part of the state: every producer id issued, with its
/// current epoch and when it was last issued or used (expired after
/// [`PRODUCER_ID_EXPIRATION_MS`]), and the next id to hand out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Producers {
    pub(super) issued: BTreeMap<i64, IssuedProducer>,
    pub(super) next_id: i64,
    /// Producer ids are handed out in blocks (format 11, KIP-730): set by
    /// the first [`AllocateProducerIds`], after which a batch of a producer
    /// id the state keeps nothing of is sequenced as Kafka sequences it (its
    /// partition's state decides, created by its first write), not refused
    /// as an unknown producer. Entries logged before keep the old rule.
    pub(super) blocks: bool,
}

/// Batches Kafka remembers per producer and partition to recognise retries.
pub const PRODUCER_BATCHES_REMEMBERED: usize = 5;

/// One producer's recent batches in one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct ProducerPartition {
    pub(super) epoch: i16,
    /// (first sequence, last sequence, base offset), oldest first.
    pub(super) batches: std::collections::VecDeque<(i32, i32, i64)>,
    /// The metastore's time of its latest append here: the state expires
    /// after [`PRODUCER_ID_EXPIRATION_MS`] without one.
    pub(super) last_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct IssuedProducer {
    pub(super) epoch: i16,
    pub(super) last_ms: i64,
}

/// Kafka's `producer.id.expiration.ms` default: a producer id (and its
/// sequence state in each partition) unused this long is forgotten. The
/// producer then gets UNKNOWN_PRODUCER_ID and starts over, as on Kafka.
pub const PRODUCER_ID_EXPIRATION_MS: i64 = 24 * 3600 * 1000;
/// How often (on the metastore's clock) expired state is swept.
pub const EXPIRY_SWEEP_EVERY_MS: i64 = 60_000;

/// What the sequence check decided for one idempotent batch.
pub(super) enum SequenceCheck {
    Append,
    /// A retry of a batch already sequenced at this base offset.
    Duplicate(i64),
}

impl ProducerPartition {
    pub(super) fn check(
        &self,
        producer_id: i64,
        epoch: i16,
        first: i32,
        last: i32,
    ) -> Result<SequenceCheck, Refusal> {
        if epoch < self.epoch {
            return Err(Refusal::InvalidProducerEpoch {
                producer_id,
                got: epoch,
                current: self.epoch,
            });
        }
        if self.epoch < 0 {
            // No state here (new, or expired): any sequence starts it, as in
            // Kafka since KIP-360.
            return Ok(SequenceCheck::Append);
        }
        if epoch > self.epoch {
            // A new epoch starts its sequences again at 0.
            return if first == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err(Refusal::OutOfOrderSequence {
                    producer_id,
                    last: -1,
                    got: first,
                })
            };
        }
        if let Some(&(_, _, base)) = self
            .batches
            .iter()
            .find(|(f, l, _)| *f == first && *l == last)
        {
            return Ok(SequenceCheck::Duplicate(base));
        }
        let last_seq = self.batches.back().map_or(-1, |&(_, l, _)| l);
        let follows = first == last_seq.wrapping_add(1) || (first == 0 && last_seq == i32::MAX);
        if follows {
            Ok(SequenceCheck::Append)
        } else {
            Err(Refusal::OutOfOrderSequence {
                producer_id,
                last: last_seq,
                got: first,
            })
        }
    }

    pub(super) fn record(
        &mut self,
        epoch: i16,
        first: i32,
        last: i32,
        base_offset: i64,
        now_ms: i64,
    ) {
        self.last_ms = now_ms;
        if epoch != self.epoch {
            self.epoch = epoch;
            self.batches.clear();
        }
        if self.batches.len() == PRODUCER_BATCHES_REMEMBERED {
            self.batches.pop_front();
        }
        self.batches.push_back((first, last, base_offset));
    }
}

/// Issues producer ids from the state's counter (for [`Txns::init`]).
pub(super) struct NextProducerId<'a>(pub(super) &'a mut i64);

/// How far a restored state moves its next producer id on: past any the
/// cluster may have handed out after the backup was taken (2^40, over a
/// hundred thousand a second for the longest hold), so that no two
/// producers share an id. A million restores fit in the ids.
pub const RESTORE_PRODUCER_ID_GAP: i64 = 1 << 40;

impl State {
    /// Makes a backup's state the state of a restored cluster: producer ids
    /// issued after the backup are never issued again.
    pub fn prepare_for_restore(&mut self) {
        self.producers.next_id = self
            .producers
            .next_id
            .saturating_add(RESTORE_PRODUCER_ID_GAP);
    }
}

impl IssueProducerId for NextProducerId<'_> {
    fn issue(&mut self) -> i64 {
        let id = *self.0;
        *self.0 += 1;
        id
    }
}

impl State {
    pub(super) fn init_producer(&mut self, existing: Option<ProducerIdentity>) -> ProducerIdentity {
        let last_ms = self.clock_ms;
        // A transactional id's producer is bumped through its id only.
        if let Some(known) = existing.filter(|k| !self.txns.is_transactional(k.producer_id)) {
            let current = self
                .producers
                .issued
                .get(&known.producer_id)
                .map(|p| p.epoch);
            if current == Some(known.epoch) && known.epoch < i16::MAX {
                let epoch = known.epoch + 1;
                self.producers
                    .issued
                    .insert(known.producer_id, IssuedProducer { epoch, last_ms });
                return ProducerIdentity {
                    producer_id: known.producer_id,
                    epoch,
                };
            }
        }
        let producer_id = self.producers.next_id;
        self.producers.next_id += 1;
        self.producers
            .issued
            .insert(producer_id, IssuedProducer { epoch: 0, last_ms });
        ProducerIdentity {
            producer_id,
            epoch: 0,
        }
    }
}

impl Apply for InitProducer {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<ProducerIdentity, Refusal> {
        Ok(state.init_producer(self.existing))
    }
}

impl Apply for AllocateProducerIds {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<i64, Refusal> {
        let count = self.count.clamp(1, MAX_PRODUCER_ID_BLOCK);
        let first = state.producers.next_id;
        state.producers.next_id = first.saturating_add(count as i64);
        state.producers.blocks = true;
        Ok(first)
    }
}
