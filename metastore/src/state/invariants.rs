//! What must hold after every command (checked after each one in debug
//! builds, tests and every simulation step).

use super::*;

impl State {
    /// What must hold after every command; checked after each one in debug
    /// builds and tests (a violation is a bug that could lose data).
    ///
    /// - A partition's extents are contiguous, end at its high watermark, and
    ///   the first holds its log start (or there are none and the log is empty).
    /// - Each object's live count is the number of extents pointing into it,
    ///   and its holders count them by partition; a partition's newest
    ///   object is at least each of its extents' objects.
    /// - Live objects and the ledger's live keys are the same, one key each.
    /// - No live key is on the GC list; every key on it awaits collection.
    /// - Idempotent producers' windows stay bounded.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut pointing: BTreeMap<u64, BTreeMap<TopicPartition, u64>> = BTreeMap::new();
        for topic in self.log.topics.values() {
            for (n, p) in topic.partitions.iter().enumerate() {
                let at = format!("{}/{n}", topic.info.name);
                let tp = TopicPartition::new(topic.info.id, n as i32);
                if p.log_start_offset > p.high_watermark {
                    return Err(format!(
                        "{at}: log start {} past the high watermark {}",
                        p.log_start_offset, p.high_watermark
                    ));
                }
                let mut next: Option<i64> = None;
                for (base, e) in &p.extents {
                    if *base != e.base_offset || e.last_offset < e.base_offset {
                        return Err(format!("{at}: malformed extent at {base}"));
                    }
                    if next.is_some_and(|n| n != e.base_offset) {
                        return Err(format!("{at}: gap or overlap before {}", e.base_offset));
                    }
                    next = Some(e.last_offset + 1);
                    if e.object > p.newest_object.0 || p.newest_object.0 >= self.log.next_object {
                        return Err(format!(
                            "{at}: extent at {base} newer than its newest object, or that never issued"
                        ));
                    }
                    *pointing.entry(e.object).or_default().entry(tp).or_default() += 1;
                    if !self.log.objects.contains_key(&e.object) {
                        return Err(format!("{at}: extent at {base} points at no object"));
                    }
                }
                match (p.extents.values().next(), next) {
                    (Some(first), Some(end)) => {
                        if end != p.high_watermark {
                            return Err(format!(
                                "{at}: extents end at {end}, high watermark {}",
                                p.high_watermark
                            ));
                        }
                        if first.base_offset > p.log_start_offset
                            || first.last_offset < p.log_start_offset
                        {
                            return Err(format!(
                                "{at}: log start {} outside the first extent",
                                p.log_start_offset
                            ));
                        }
                    }
                    _ if p.log_start_offset != p.high_watermark => {
                        return Err(format!(
                            "{at}: no extents for [{}, {})",
                            p.log_start_offset, p.high_watermark
                        ));
                    }
                    _ => {}
                }
                for (id, producer) in &p.producers {
                    if producer.batches.len() > PRODUCER_BATCHES_REMEMBERED {
                        return Err(format!(
                            "{at}: producer {id} remembers {} batches",
                            producer.batches.len()
                        ));
                    }
                }
                self.check_partition_txns(&at, tp, p)?;
            }
        }
        self.check_txns()?;
        for (id, object) in &self.log.objects {
            let holders = pointing.remove(id).unwrap_or_default();
            let count: u64 = holders.values().sum();
            if object.live_extents != count || count == 0 {
                return Err(format!(
                    "object {} counts {} extents, {count} point into it",
                    object.key, object.live_extents
                ));
            }
            if !object
                .holders
                .counts()
                .eq(holders.iter().map(|(tp, n)| (*tp, *n)))
            {
                return Err(format!(
                    "object {} names holders {:?}, its extents are of {holders:?}",
                    object.key, object.holders
                ));
            }
            if self.log.ledger.live().get(&object.key) != Some(id) {
                return Err(format!("object {} is not live in the ledger", object.key));
            }
        }
        if self.log.ledger.live().len() != self.log.objects.len() {
            return Err("the ledger's live keys and the objects differ".into());
        }
        for key in &self.log.garbage {
            if self.log.ledger.is_live(key) {
                return Err(format!("live key {key} is on the GC list"));
            }
            if !self.log.ledger.awaiting_collection(key) {
                return Err(format!("key {key} is on the GC list but not retired"));
            }
        }
        self.log
            .garbage_holds
            .check(self.log.garbage.len())
            .map_err(|e| format!("garbage holds: {e}"))?;
        for (name, group) in self.groups.share_groups() {
            group
                .check(crate::groups::share::MAX_DELIVERY_COUNT_LIMIT)
                .map_err(|e| format!("share group {name}: {e}"))?;
        }
        Ok(())
    }

    /// A partition's transactions: each ongoing entry is the first batch of
    /// an ongoing transaction that holds this partition, below the high
    /// watermark; the aborted index is in marker order, each range below
    /// the high watermark.
    pub(super) fn check_partition_txns(
        &self,
        at: &str,
        tp: TopicPartition,
        p: &Partition,
    ) -> Result<(), String> {
        for (&first, &producer_id) in &p.ongoing {
            let holds = self.txns.of_producer(producer_id).is_some_and(|(_, t)| {
                t.phase == TxnPhase::Ongoing && t.partitions.get(&tp) == Some(&Some(first))
            });
            if !holds || first >= p.high_watermark {
                return Err(format!(
                    "{at}: ongoing entry {first} of producer {producer_id} has no transaction"
                ));
            }
        }
        let mut last = i64::MIN;
        for a in &p.aborted {
            if a.last_offset < last
                || a.first_offset > a.last_offset
                || a.last_offset >= p.high_watermark
            {
                return Err(format!("{at}: aborted index out of order at {a:?}"));
            }
            last = a.last_offset;
        }
        Ok(())
    }

    /// Transactions: [`Txns::check`]; each partition a transaction has data
    /// in has its ongoing entry; its producer id is issued at its epoch.
    pub(super) fn check_txns(&self) -> Result<(), String> {
        self.txns.check()?;
        for (id, t) in self.txns.iter() {
            if self.producers.issued.get(&t.producer_id).map(|p| p.epoch) != Some(t.epoch) {
                return Err(format!(
                    "transactional id {id}: producer not issued at its epoch"
                ));
            }
            for (tp, first) in &t.partitions {
                let Ok(p) = self.partition(tp.topic_id, tp.partition) else {
                    return Err(format!(
                        "transactional id {id} holds a partition that is gone"
                    ));
                };
                if let Some(first) = first
                    && p.ongoing.get(first) != Some(&t.producer_id)
                {
                    return Err(format!(
                        "transactional id {id}: no ongoing entry at {first}"
                    ));
                }
            }
        }
        Ok(())
    }
}
