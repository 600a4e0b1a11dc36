//! Transactions (KIP-98): the coordinator's state of every transactional id,
//! and the rules that move it, as Kafka's `TransactionCoordinator` and
//! `TransactionMetadata` (TV1) apply them.
//!
//! All of it lives in the metastore, so any agent coordinates any
//! transaction and an agent's death loses nothing. What touches partitions
//! (a transactional batch's check, the markers that end a transaction, the
//! last stable offset and the aborted index) is sequenced in
//! [`crate::state`]; this module decides, for one transactional id, whether
//! a request may move it and where to.
//!
//! Two simplifications of Kafka's state machine, both invisible to clients:
//! no `PrepareCommit`/`PrepareAbort` is ever stored, because a transaction's
//! end and its markers are applied in one log entry (see
//! [`crate::ops::IngestCommit`]); and no `Dead` state: an id unused for
//! [`TRANSACTIONAL_ID_EXPIRATION_MS`] is forgotten.
//!
//! Invariants (checked by [`Txns::check`]): the producer-id index is exactly
//! the inverse of the transactions; a transaction that is not `Ongoing` has
//! no partitions or groups; `start_ms` is set exactly while `Ongoing`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub use crate::contract::txn::*;
use crate::groups::OffsetToCommit;
use crate::types::{ProducerIdentity, Refusal, TopicPartition};

/// Kafka's `transactional.id.expiration.ms` default: a transactional id
/// not in a transaction and unused this long is forgotten.
pub const TRANSACTIONAL_ID_EXPIRATION_MS: i64 = 7 * 24 * 3600 * 1000;
/// Most transactional ids kept at once (a bound on the state, safety rule 4 of docs/architecture.md).
pub const MAX_TRANSACTIONAL_IDS: usize = 100_000;
/// One transactional id's coordinator state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    pub producer_id: i64,
    pub epoch: i16,
    /// The producer id and epoch before the last bump, so that a retried
    /// InitProducerId (KIP-360) is recognised; epoch -1 after a fence.
    pub last_producer_id: i64,
    pub last_epoch: i16,
    pub phase: TxnPhase,
    pub timeout_ms: i32,
    /// When (metastore clock) the ongoing transaction began; -1 otherwise.
    pub start_ms: i64,
    /// When (metastore clock) this id last changed.
    pub last_update_ms: i64,
    /// Partitions added to the ongoing transaction, each with the offset of
    /// its first batch once one was sequenced there.
    pub partitions: BTreeMap<TopicPartition, Option<i64>>,
    /// Groups added to the ongoing transaction (AddOffsetsToTxn).
    pub groups: BTreeSet<String>,
    /// Bumped on every change: an end names the version it was built for,
    /// so markers built for an older set of partitions are refused.
    pub version: u64,
    /// An InitProducerId found it ongoing and bumped its epoch (fencing
    /// its producer at once, as Kafka's `PrepareEpochFence`); it now waits
    /// only for its abort markers (a [`EndReason::Fence`] end).
    #[serde(default)]
    pub fencing: bool,
    /// Offsets sent with TxnOffsetCommit, by group and partition, each with
    /// when (metastore clock) it was sent: stored for the group when the
    /// transaction commits, unless the group committed that partition
    /// since (Kafka keeps the most recent commit), dropped when it aborts.
    #[serde(default)]
    pub pending_offsets: PendingOffsets,
    /// How often the coordinator looks for timed-out transactions, as its
    /// producer's last InitProducerId said (format 11); 0 for an id last
    /// initialised before, whose transactions time out at once.
    #[serde(default)]
    pub abort_check_interval_ms: i64,
    /// The [`Txn::version`] at which the ongoing transaction began (format
    /// 12): with the producer id and epoch, the transaction's identity. A
    /// transactions-v1 EndTxn names none of it, so an agent acts on an
    /// ongoing transaction only if it saw that identity before the request
    /// came (see the agent's `write::txn_coordinator::end`). 0 for one
    /// ongoing through an upgrade from an older format, on a node that read
    /// it from an older snapshot (a node replaying the older log entries
    /// gives it its version): an identity no agent saw, so its EndTxn is
    /// answered CONCURRENT_TRANSACTIONS once, never applied to another.
    #[serde(default)]
    pub began: u64,
}

impl Txn {
    /// Whether the ongoing transaction has timed out at `now_ms`. Kafka's
    /// coordinator looks every `abort_check_interval_ms` for transactions
    /// past their timeout (`abortTimedOutTransactions`, from their start as
    /// `TransactionStateManager.timedOutTransactions`), so a producer may
    /// still commit for up to an interval after its timeout. Here the looks
    /// are at the multiples of the interval on the metastore's clock: the
    /// transaction times out at the first one after its deadline, the same
    /// instant on every replica.
    pub fn expired(&self, now_ms: i64) -> bool {
        if self.phase != TxnPhase::Ongoing {
            return false;
        }
        let deadline = self.start_ms.saturating_add(self.timeout_ms as i64);
        match self.abort_check_interval_ms {
            0 => deadline < now_ms,
            every => now_ms >= first_look_after(deadline, every),
        }
    }

    fn touch(&mut self, now_ms: i64) {
        self.version += 1;
        self.last_update_ms = now_ms;
    }
}

/// The first multiple of `every` (positive) strictly after `deadline`.
fn first_look_after(deadline: i64, every: i64) -> i64 {
    deadline
        .div_euclid(every)
        .saturating_add(1)
        .saturating_mul(every)
}

/// Every transactional id, and the index from producer id to it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txns {
    by_id: BTreeMap<String, Txn>,
    by_producer: BTreeMap<i64, String>,
    /// Group -> the transactions holding offsets for it (OffsetFetch's
    /// `require_stable` asks).
    #[serde(default)]
    pending_groups: BTreeMap<String, BTreeSet<String>>,
}

/// Offsets a transaction holds for its groups: by group and partition, the
/// offset and when it was sent.
pub type PendingOffsets = BTreeMap<String, BTreeMap<(String, i32), (OffsetToCommit, i64)>>;

/// What InitProducerId needs from the state outside this module: a fresh
/// producer id when one must be issued.
pub trait IssueProducerId {
    fn issue(&mut self) -> i64;
}

impl Txns {
    pub fn get(&self, id: &str) -> Option<&Txn> {
        self.by_id.get(id)
    }

    /// The transaction a producer id belongs to.
    pub fn of_producer(&self, producer_id: i64) -> Option<(&str, &Txn)> {
        let id = self.by_producer.get(&producer_id)?;
        Some((id.as_str(), &self.by_id[id]))
    }

    pub fn of_producer_mut(&mut self, producer_id: i64) -> Option<&mut Txn> {
        let id = self.by_producer.get(&producer_id)?;
        self.by_id.get_mut(id)
    }

    #[cfg(test)]
    pub(crate) fn forget_identities(&mut self) {
        self.by_id.values_mut().for_each(|t| t.began = 0);
    }

    pub fn is_transactional(&self, producer_id: i64) -> bool {
        self.by_producer.contains_key(&producer_id)
    }

    pub fn view(&self, id: &str) -> Option<TxnView> {
        let t = self.by_id.get(id)?;
        Some(TxnView {
            transactional_id: id.to_string(),
            producer_id: t.producer_id,
            epoch: t.epoch,
            phase: t.phase,
            timeout_ms: t.timeout_ms,
            start_ms: t.start_ms,
            last_update_ms: t.last_update_ms,
            partitions: t.partitions.keys().copied().collect(),
            groups: t.groups.iter().cloned().collect(),
            version: t.version,
            fencing: t.fencing,
            began: t.began,
        })
    }

    /// InitProducerId with a transactional id (`handleInitProducerId`):
    /// issues a producer id to a new id, or bumps the epoch of a known one.
    /// An ongoing transaction is first fenced: its epoch is bumped here, so
    /// its producer (a zombie) is refused from now on; with no partition it
    /// is aborted here too, with partitions its abort markers must then be
    /// written (a [`EndReason::Fence`] end at the bumped epoch). Either way
    /// the answer is `ConcurrentTransactions` and the producer asks again.
    pub fn init(
        &mut self,
        id: &str,
        timeout_ms: i32,
        expected: Option<ProducerIdentity>,
        now_ms: i64,
        ids: &mut impl IssueProducerId,
    ) -> Result<ProducerIdentity, Refusal> {
        self.init_checked(id, timeout_ms, expected, now_ms, ids, 0)
    }

    /// [`Txns::init`], recording how often timeouts are looked for
    /// (`abort_check_interval_ms`, 0: at once) when it succeeds.
    pub fn init_checked(
        &mut self,
        id: &str,
        timeout_ms: i32,
        expected: Option<ProducerIdentity>,
        now_ms: i64,
        ids: &mut impl IssueProducerId,
        abort_check_interval_ms: i32,
    ) -> Result<ProducerIdentity, Refusal> {
        let answer = self.init_inner(id, timeout_ms, expected, now_ms, ids);
        if answer.is_ok()
            && let Some(txn) = self.by_id.get_mut(id)
        {
            txn.abort_check_interval_ms = abort_check_interval_ms.max(0) as i64;
        }
        answer
    }

    fn init_inner(
        &mut self,
        id: &str,
        timeout_ms: i32,
        expected: Option<ProducerIdentity>,
        now_ms: i64,
        ids: &mut impl IssueProducerId,
    ) -> Result<ProducerIdentity, Refusal> {
        if id.is_empty() || id.len() > MAX_TRANSACTIONAL_ID_BYTES {
            return Err(Refusal::InvalidTxnState(
                "a transactional id is 1 to 32767 bytes".into(),
            ));
        }
        if timeout_ms <= 0 {
            return Err(Refusal::InvalidTxnTimeout(timeout_ms));
        }
        if expected.is_some_and(|e| e.producer_id < 0 || e.epoch < 0) {
            return Err(Refusal::InvalidTxnState(
                "an expected producer needs an id and an epoch".into(),
            ));
        }
        if !self.by_id.contains_key(id) && self.by_id.len() >= MAX_TRANSACTIONAL_IDS {
            self.evict_oldest_idle()?;
        }
        let Some(txn) = self.by_id.get_mut(id) else {
            let producer_id = ids.issue();
            self.by_id.insert(
                id.to_string(),
                Txn {
                    producer_id,
                    epoch: 0,
                    last_producer_id: -1,
                    last_epoch: -1,
                    phase: TxnPhase::Empty,
                    timeout_ms,
                    start_ms: -1,
                    last_update_ms: now_ms,
                    partitions: BTreeMap::new(),
                    groups: BTreeSet::new(),
                    version: 0,
                    fencing: false,
                    pending_offsets: BTreeMap::new(),
                    abort_check_interval_ms: 0,
                    began: 0,
                },
            );
            self.by_producer.insert(producer_id, id.to_string());
            return Ok(ProducerIdentity {
                producer_id,
                epoch: 0,
            });
        };
        // `isValidProducerId`: the expected producer is this id's, or its
        // previous one when that one's epochs ran out.
        if let Some(e) = expected
            && e.producer_id != txn.producer_id
            && !(e.producer_id == txn.last_producer_id && epoch_exhausted(e.epoch))
        {
            return Err(Refusal::ProducerFenced {
                producer_id: e.producer_id,
                epoch: e.epoch,
            });
        }
        if txn.phase == TxnPhase::Ongoing {
            if txn.partitions.is_empty() {
                fence(txn, now_ms);
                self.take_pending(id);
            } else if !txn.fencing {
                txn.epoch = txn.epoch.saturating_add(1);
                txn.last_epoch = -1;
                txn.fencing = true;
                txn.touch(now_ms);
            }
            return Err(Refusal::ConcurrentTransactions);
        }
        let old = ProducerIdentity {
            producer_id: txn.producer_id,
            epoch: txn.epoch,
        };
        if epoch_exhausted(txn.epoch) && expected.is_none_or(|e| e.epoch == txn.epoch) {
            // `prepareProducerIdRotation`: a new producer id at epoch 0.
            txn.last_producer_id = txn.producer_id;
            txn.last_epoch = if expected.is_some() { txn.epoch } else { -1 };
            txn.producer_id = ids.issue();
            txn.epoch = 0;
            self.by_producer.remove(&old.producer_id);
            self.by_producer.insert(txn.producer_id, id.to_string());
        } else {
            // `prepareIncrementProducerEpoch`.
            match expected {
                None => {
                    txn.last_epoch = -1;
                    txn.epoch += 1;
                }
                Some(e) if e.epoch == txn.epoch => {
                    txn.last_epoch = txn.epoch;
                    txn.epoch += 1;
                }
                // A retry of the bump that made the current epoch.
                Some(e) if txn.last_epoch >= 0 && e.epoch == txn.last_epoch => {}
                Some(e) => {
                    return Err(Refusal::ProducerFenced {
                        producer_id: e.producer_id,
                        epoch: e.epoch,
                    });
                }
            }
        }
        txn.phase = TxnPhase::Empty;
        txn.timeout_ms = timeout_ms;
        txn.start_ms = -1;
        txn.touch(now_ms);
        Ok(ProducerIdentity {
            producer_id: txn.producer_id,
            epoch: txn.epoch,
        })
    }

    /// The transaction `id` as the producer `(producer_id, epoch)` may
    /// change it, or the error Kafka sends.
    fn owned_by(
        &mut self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        now_ms: i64,
    ) -> Result<&mut Txn, Refusal> {
        self.check_owner(id, producer_id, epoch, now_ms)?;
        Ok(self.by_id.get_mut(id).expect("checked"))
    }

    fn check_owner(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        now_ms: i64,
    ) -> Result<&Txn, Refusal> {
        let txn = self
            .by_id
            .get(id)
            .filter(|t| t.producer_id == producer_id)
            .ok_or(Refusal::InvalidProducerIdMapping)?;
        // A transaction past its timeout is as good as fenced: it can
        // only be aborted (by its producer, or by the timeout job).
        if txn.epoch != epoch || txn.expired(now_ms) {
            return Err(Refusal::ProducerFenced { producer_id, epoch });
        }
        if txn.fencing {
            return Err(Refusal::ConcurrentTransactions);
        }
        Ok(txn)
    }

    /// AddPartitionsToTxn and AddOffsetsToTxn (`prepareAddPartitions`):
    /// starts the transaction if it was not ongoing. The ongoing
    /// transaction's [`Txn::began`].
    pub fn add(
        &mut self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[TopicPartition],
        groups: &[String],
        now_ms: i64,
    ) -> Result<u64, Refusal> {
        let txn = self.owned_by(id, producer_id, epoch, now_ms)?;
        let new_partitions: BTreeSet<TopicPartition> = partitions
            .iter()
            .filter(|tp| !txn.partitions.contains_key(tp))
            .copied()
            .collect();
        let new_groups: BTreeSet<&String> =
            groups.iter().filter(|g| !txn.groups.contains(*g)).collect();
        if txn.phase == TxnPhase::Ongoing && new_partitions.is_empty() && new_groups.is_empty() {
            return Ok(txn.began);
        }
        if txn.partitions.len() + new_partitions.len() > MAX_TXN_PARTITIONS {
            return Err(Refusal::TxnLimit(format!(
                "a transaction writes to at most {MAX_TXN_PARTITIONS} partitions"
            )));
        }
        if txn.groups.len() + new_groups.len() > MAX_TXN_GROUPS {
            return Err(Refusal::TxnLimit(format!(
                "a transaction commits offsets for at most {MAX_TXN_GROUPS} groups"
            )));
        }
        let begins = txn.phase != TxnPhase::Ongoing;
        if begins {
            txn.phase = TxnPhase::Ongoing;
            txn.start_ms = now_ms;
        }
        txn.partitions
            .extend(new_partitions.into_iter().map(|tp| (tp, None)));
        txn.groups.extend(new_groups.into_iter().cloned());
        txn.touch(now_ms);
        if begins {
            txn.began = txn.version;
        }
        Ok(txn.began)
    }

    /// TxnOffsetCommit: offsets `group` gets if the transaction commits. The
    /// group must have been added (AddOffsetsToTxn); later offsets of a
    /// partition replace earlier ones.
    pub fn add_offsets(
        &mut self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
        offsets: Vec<OffsetToCommit>,
        now_ms: i64,
    ) -> Result<(), Refusal> {
        self.check_offsets(id, producer_id, epoch, group, offsets.len(), now_ms)?;
        let txn = self.by_id.get_mut(id).expect("checked");
        let pending = txn.pending_offsets.entry(group.to_string()).or_default();
        for o in offsets {
            pending.insert((o.topic.clone(), o.partition), (o, now_ms));
        }
        txn.touch(now_ms);
        self.pending_groups
            .entry(group.to_string())
            .or_default()
            .insert(id.to_string());
        Ok(())
    }

    /// Whether [`Txns::add_offsets`] of `count` offsets would be accepted.
    pub fn check_offsets(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
        count: usize,
        now_ms: i64,
    ) -> Result<(), Refusal> {
        let txn = self.check_owner(id, producer_id, epoch, now_ms)?;
        if txn.phase != TxnPhase::Ongoing || !txn.groups.contains(group) {
            return Err(Refusal::NotInTransaction);
        }
        let held: usize = txn.pending_offsets.values().map(BTreeMap::len).sum();
        if held + count > MAX_TXN_OFFSETS {
            return Err(Refusal::TxnLimit(format!(
                "a transaction commits at most {MAX_TXN_OFFSETS} offsets"
            )));
        }
        Ok(())
    }

    /// The partitions of `group` with offsets in an ongoing transaction.
    pub fn pending_partitions(&self, group: &str) -> BTreeSet<(String, i32)> {
        let Some(ids) = self.pending_groups.get(group) else {
            return BTreeSet::new();
        };
        ids.iter()
            .filter_map(|id| self.by_id.get(id)?.pending_offsets.get(group))
            .flat_map(|offsets| offsets.keys().cloned())
            .collect()
    }

    /// A group deleted (`partitions` is `None`) or offsets of it deleted:
    /// what transactions hold for them goes too, so that a transaction
    /// committing later does not bring them back (Kafka's offset tombstones
    /// remove pending transactional offsets as well).
    pub fn forget_group_offsets(
        &mut self,
        group: &str,
        partitions: Option<&BTreeSet<(String, i32)>>,
    ) {
        let Some(ids) = self.pending_groups.get(group).cloned() else {
            return;
        };
        for id in ids {
            let Some(txn) = self.by_id.get_mut(&id) else {
                continue;
            };
            let Some(offsets) = txn.pending_offsets.get_mut(group) else {
                continue;
            };
            match partitions {
                None => offsets.clear(),
                Some(gone) => offsets.retain(|at, _| !gone.contains(at)),
            }
            if offsets.is_empty() {
                txn.pending_offsets.remove(group);
                if let Some(holders) = self.pending_groups.get_mut(group) {
                    holders.remove(&id);
                    if holders.is_empty() {
                        self.pending_groups.remove(group);
                    }
                }
            }
        }
    }

    /// Takes a transaction's pending offsets out (it is ending).
    fn take_pending(&mut self, id: &str) -> PendingOffsets {
        let Some(txn) = self.by_id.get_mut(id) else {
            return PendingOffsets::new();
        };
        let pending = std::mem::take(&mut txn.pending_offsets);
        for group in pending.keys() {
            if let Some(ids) = self.pending_groups.get_mut(group) {
                ids.remove(id);
                if ids.is_empty() {
                    self.pending_groups.remove(group);
                }
            }
        }
        pending
    }

    /// Whether `end` may be applied now, with markers for exactly
    /// `markers` (`endTransaction`'s checks); the refusal Kafka's errors
    /// come from otherwise.
    pub fn check_end(
        &self,
        end: &TxnEnd,
        markers: &BTreeSet<TopicPartition>,
        now_ms: i64,
    ) -> Result<(), Refusal> {
        let found = self.by_id.get(&end.transactional_id);
        if end.reason == EndReason::ClientBumping
            && let Some(txn) = found
            && let Some(committed) = bumped_by(txn, end)
        {
            // A retry of the end that bumped the epoch (Kafka's
            // `retryOnEpochBump` and `retryOnOverflow`).
            return match committed == end.commit {
                true => Err(Refusal::TxnEnded { committed }),
                false => Err(Refusal::InvalidTxnState(
                    "the transaction ended the other way".into(),
                )),
            };
        }
        let txn = found
            .filter(|t| t.producer_id == end.producer_id)
            .ok_or(Refusal::InvalidProducerIdMapping)?;
        if txn.epoch != end.epoch {
            return Err(Refusal::ProducerFenced {
                producer_id: end.producer_id,
                epoch: end.epoch,
            });
        }
        match (txn.phase, end.reason) {
            (TxnPhase::CompleteCommit, EndReason::Client) if end.commit => {
                return Err(Refusal::TxnEnded { committed: true });
            }
            (TxnPhase::CompleteAbort, EndReason::Client) if !end.commit => {
                return Err(Refusal::TxnEnded { committed: false });
            }
            (TxnPhase::Ongoing, _) => {}
            // Transactions v2: an abort with nothing ongoing is an empty
            // one, and bumps the epoch all the same (Kafka's table).
            (_, EndReason::ClientBumping) if !end.commit && !txn.fencing => {}
            (phase, _) => {
                return Err(Refusal::InvalidTxnState(format!(
                    "the transaction is {} and cannot {}",
                    phase.kafka_name(),
                    if end.commit { "commit" } else { "abort" }
                )));
            }
        }
        let expired = txn.expired(now_ms);
        // While fenced, only the fence's abort may end it (or the timeout).
        if txn.fencing && end.by_client() {
            return Err(Refusal::ConcurrentTransactions);
        }
        if end.reason == EndReason::Fence && !txn.fencing {
            return Err(Refusal::InvalidTxnState(
                "the transaction is not being fenced".into(),
            ));
        }
        match end.reason {
            EndReason::Client | EndReason::ClientBumping if end.commit && expired => {
                return Err(Refusal::ProducerFenced {
                    producer_id: end.producer_id,
                    epoch: end.epoch,
                });
            }
            EndReason::Timeout if !expired => {
                return Err(Refusal::InvalidTxnState(
                    "the transaction has not timed out".into(),
                ));
            }
            EndReason::Fence | EndReason::Timeout if end.commit => {
                return Err(Refusal::InvalidTxnState("a fence only aborts".into()));
            }
            _ => {}
        }
        if end.version != txn.version || !txn.partitions.keys().eq(markers.iter()) {
            return Err(Refusal::ConcurrentTransactions);
        }
        Ok(())
    }

    /// Completes an end that [`Txns::check_end`] accepted, once its markers
    /// are sequenced: the new phase, and for a fence the bumped epoch (what
    /// the producer id is issued at from now on).
    /// Answers the offsets it held for its groups (to store if it committed).
    pub fn finish_end(
        &mut self,
        end: &TxnEnd,
        now_ms: i64,
        ids: &mut impl IssueProducerId,
    ) -> (ProducerIdentity, PendingOffsets) {
        let pending = self.take_pending(&end.transactional_id);
        let txn = self
            .by_id
            .get_mut(&end.transactional_id)
            .expect("checked by check_end");
        txn.partitions.clear();
        txn.groups.clear();
        txn.start_ms = -1;
        let phase = match end.commit {
            true => TxnPhase::CompleteCommit,
            false => TxnPhase::CompleteAbort,
        };
        match end.reason {
            EndReason::Client => {
                txn.phase = phase;
                txn.touch(now_ms);
            }
            // Kafka's `prepareAbortOrCommit` with transactions v2, then
            // `prepareComplete`: the next epoch, or a new producer id.
            EndReason::ClientBumping => {
                txn.phase = phase;
                txn.last_epoch = txn.epoch;
                if epoch_exhausted(txn.epoch) {
                    let old = txn.producer_id;
                    txn.last_producer_id = old;
                    txn.producer_id = ids.issue();
                    txn.epoch = 0;
                    self.by_producer.remove(&old);
                    self.by_producer
                        .insert(txn.producer_id, end.transactional_id.clone());
                } else {
                    txn.last_producer_id = txn.producer_id;
                    txn.epoch += 1;
                }
                txn.touch(now_ms);
            }
            // Its epoch was bumped when the fence began.
            EndReason::Fence => {
                txn.phase = TxnPhase::CompleteAbort;
                txn.fencing = false;
                txn.touch(now_ms);
            }
            EndReason::Timeout => fence(txn, now_ms),
        }
        let now = ProducerIdentity {
            producer_id: txn.producer_id,
            epoch: txn.epoch,
        };
        (now, pending)
    }

    /// A deleted topic's partitions, and offsets of it, leave every
    /// transaction (a topic re-created under its name starts afresh).
    pub fn forget_topic(&mut self, topic_id: crate::types::TopicId, name: &str, now_ms: i64) {
        for txn in self.by_id.values_mut() {
            let before = txn.partitions.len();
            txn.partitions.retain(|tp, _| tp.topic_id != topic_id);
            for offsets in txn.pending_offsets.values_mut() {
                offsets.retain(|(topic, _), _| topic != name);
            }
            if txn.partitions.len() != before {
                txn.touch(now_ms);
            }
        }
    }

    /// Forgets ids unused for [`TRANSACTIONAL_ID_EXPIRATION_MS`] and not in
    /// a transaction; answers their producer ids, which may then expire.
    pub fn expire(&mut self, now_ms: i64) {
        let horizon = now_ms.saturating_sub(TRANSACTIONAL_ID_EXPIRATION_MS);
        let by_producer = &mut self.by_producer;
        self.by_id.retain(|_, t| {
            let keep = t.phase == TxnPhase::Ongoing || t.last_update_ms > horizon;
            if !keep {
                by_producer.remove(&t.producer_id);
            }
            keep
        });
    }

    /// Ongoing transactions past their timeout at `now_ms`, at most `limit`.
    pub fn expired(&self, now_ms: i64, limit: usize) -> Vec<TxnView> {
        self.by_id
            .iter()
            .filter(|(_, t)| t.expired(now_ms))
            .take(limit)
            .filter_map(|(id, _)| self.view(id))
            .collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Txn)> {
        self.by_id.iter()
    }

    /// This module's invariants (see the module doc).
    pub fn check(&self) -> Result<(), String> {
        for (group, ids) in &self.pending_groups {
            let holds = |id: &String| {
                self.by_id
                    .get(id)
                    .is_some_and(|t| t.pending_offsets.contains_key(group))
            };
            if ids.is_empty() || !ids.iter().all(holds) {
                return Err(format!("group {group}'s pending offsets are misindexed"));
            }
        }
        if self.by_producer.len() != self.by_id.len() {
            return Err(format!(
                "{} transactional ids, {} in the producer index",
                self.by_id.len(),
                self.by_producer.len()
            ));
        }
        for (id, t) in &self.by_id {
            if self.by_producer.get(&t.producer_id) != Some(id) {
                return Err(format!(
                    "transactional id {id} is not indexed by its producer"
                ));
            }
            let ongoing = t.phase == TxnPhase::Ongoing;
            if !ongoing && (!t.partitions.is_empty() || !t.groups.is_empty()) {
                return Err(format!(
                    "transactional id {id} holds partitions while {:?}",
                    t.phase
                ));
            }
            if !ongoing && !t.pending_offsets.is_empty() {
                return Err(format!(
                    "transactional id {id} holds offsets while {:?}",
                    t.phase
                ));
            }
            for group in t.pending_offsets.keys() {
                if !self
                    .pending_groups
                    .get(group)
                    .is_some_and(|ids| ids.contains(id))
                {
                    return Err(format!(
                        "transactional id {id}'s offsets for {group} are not indexed"
                    ));
                }
            }
            if t.fencing && !ongoing {
                return Err(format!(
                    "transactional id {id} is fencing while {:?}",
                    t.phase
                ));
            }
            if t.began > t.version {
                return Err(format!(
                    "transactional id {id} began at version {} past its version {}",
                    t.began, t.version
                ));
            }
            if ongoing != (t.start_ms >= 0) {
                return Err(format!(
                    "transactional id {id}: start {} while {:?}",
                    t.start_ms, t.phase
                ));
            }
        }
        Ok(())
    }
}

/// Kafka rotates the producer id when its epoch is about to overflow.
fn epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// If `end` (a transactions-v2 end) is a retry of the one that last ended
/// `txn`, bumping its epoch or giving it a new producer id: whether that
/// end committed.
fn bumped_by(txn: &Txn, end: &TxnEnd) -> Option<bool> {
    let committed = match txn.phase {
        TxnPhase::CompleteCommit => true,
        TxnPhase::CompleteAbort => false,
        _ => return None,
    };
    let bumped = txn.producer_id == end.producer_id
        && end.epoch.checked_add(1) == Some(txn.epoch)
        && txn.last_epoch == end.epoch;
    let rotated = txn.last_producer_id == end.producer_id
        && txn.producer_id != end.producer_id
        && txn.epoch == 0
        && epoch_exhausted(end.epoch)
        && txn.last_epoch == end.epoch;
    (bumped || rotated).then_some(committed)
}

impl Txns {
    /// Makes room for a new transactional id: forgets the one unused
    /// longest that is not in a transaction (as expiry would, early).
    fn evict_oldest_idle(&mut self) -> Result<(), Refusal> {
        let oldest = self
            .by_id
            .iter()
            .filter(|(_, t)| t.phase != TxnPhase::Ongoing)
            .min_by_key(|(_, t)| t.last_update_ms)
            .map(|(id, t)| (id.clone(), t.producer_id));
        let Some((id, producer_id)) = oldest else {
            return Err(Refusal::TxnLimit(format!(
                "{MAX_TRANSACTIONAL_IDS} transactions are ongoing"
            )));
        };
        self.by_id.remove(&id);
        self.by_producer.remove(&producer_id);
        Ok(())
    }
}

/// Aborts (the caller has written any markers) and bumps the epoch, so the
/// producer that held it is fenced (`prepareFenceProducerEpoch`).
fn fence(txn: &mut Txn, now_ms: i64) {
    txn.partitions.clear();
    txn.groups.clear();
    txn.start_ms = -1;
    txn.phase = TxnPhase::CompleteAbort;
    txn.epoch = txn.epoch.saturating_add(1);
    txn.last_epoch = -1;
    txn.fencing = false;
    txn.touch(now_ms);
}
