//! Backup holds on garbage collection.
//!
//! A backup of the metastore refers to the objects live when it was taken.
//! Compaction, retention and topic deletion free some of them soon after,
//! and GC would delete them `gc_grace` later: the backup would then name
//! objects that are gone. A backup therefore first takes a hold (format 14):
//! every object freed after the hold was taken stays out of GC's list until
//! the hold expires on the metastore's clock. Objects already garbage when
//! the hold was taken are not in the backup's live set and are collected as
//! before.
//!
//! Invariant: while a hold is unexpired, no key appended to the garbage list
//! after it was taken is listed to GC, nor forgotten.

use serde::{Deserialize, Serialize};

use super::*;

/// The most holds kept at once (each backup takes one).
pub const MAX_GARBAGE_HOLDS: usize = 64;
/// The longest a hold lasts (Kafka users keep backups for days or weeks).
pub const MAX_HOLD_MS: i64 = 90 * 24 * 3_600_000;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GarbageHolds(Vec<GarbageHold>);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct GarbageHold {
    /// The garbage list's length when the hold was taken: keys at this
    /// position and after were freed since.
    from: usize,
    /// When it expires, on the metastore's clock.
    until_ms: i64,
}

impl GarbageHolds {
    /// How many keys at the head of the garbage list GC may have at
    /// `now_ms`: all of them, unless a hold is in force.
    pub(super) fn listable(&self, garbage_len: usize, now_ms: i64) -> usize {
        self.0
            .iter()
            .filter(|h| h.until_ms > now_ms)
            .map(|h| h.from)
            .min()
            .unwrap_or(garbage_len)
            .min(garbage_len)
    }

    /// Keeps the holds' positions true after the keys at `removed`
    /// (ascending positions) left the garbage list.
    fn removed(&mut self, removed: &[usize]) {
        for hold in &mut self.0 {
            hold.from -= removed.partition_point(|&p| p < hold.from);
        }
    }

    /// Every hold points into a garbage list of `garbage_len` keys.
    pub(super) fn check(&self, garbage_len: usize) -> Result<(), String> {
        match self.0.iter().find(|h| h.from > garbage_len) {
            Some(h) => Err(format!(
                "a hold from {} past the list's {garbage_len} keys",
                h.from
            )),
            None => Ok(()),
        }
    }

    fn forget_expired(&mut self, now_ms: i64) {
        self.0.retain(|h| h.until_ms > now_ms);
    }
}

impl State {
    /// The garbage GC may delete at `now_ms` (the metastore's time). A
    /// hold is judged expired by the state's own clock too, never earlier:
    /// so what is listed here, [`ForgetGarbage`] (applied later, at a clock
    /// at least this one) also finds expired, whichever node answers.
    pub fn collectable_garbage(&self, now_ms: i64) -> &[String] {
        let garbage = &self.log.garbage;
        let now_ms = now_ms.min(self.clock_ms);
        &garbage[..self.log.garbage_holds.listable(garbage.len(), now_ms)]
    }

    /// Forgets deleted garbage `keys` and notes them collected. Keys under
    /// a hold stay (GC was never given them: see the invariant above).
    pub(super) fn forget_garbage(&mut self, keys: Vec<String>) {
        let mut keys: std::collections::HashSet<String> = keys.into_iter().collect();
        let listable = self
            .log
            .garbage_holds
            .listable(self.log.garbage.len(), self.clock_ms);
        let mut removed = Vec::new();
        for (position, key) in self.log.garbage.iter().enumerate() {
            if position >= listable && keys.remove(key) {
                tracing::error!(%key, "GC forgot an object under a backup hold; kept");
            } else if keys.contains(key) {
                removed.push(position);
            }
        }
        let (mut position, mut next) = (0, removed.iter().peekable());
        self.log.garbage.retain(|_| {
            let gone = next.next_if_eq(&&position).is_some();
            position += 1;
            !gone
        });
        self.log.garbage_holds.removed(&removed);
        for key in &keys {
            self.log.ledger.collected(key, self.clock_ms);
        }
    }
}

impl Apply for HoldGarbage {
    as_in_contract!();
    fn apply(self, state: &mut State) -> Result<GarbageHeld, Refusal> {
        if !(1..=MAX_HOLD_MS).contains(&self.hold_ms) {
            return Err(Refusal::InvalidConfig(format!(
                "a garbage hold lasts 1 ms to {} days",
                MAX_HOLD_MS / 86_400_000
            )));
        }
        let now_ms = state.clock_ms;
        let holds = &mut state.log.garbage_holds;
        holds.forget_expired(now_ms);
        if holds.0.len() >= MAX_GARBAGE_HOLDS {
            return Err(Refusal::InvalidConfig(format!(
                "{MAX_GARBAGE_HOLDS} garbage holds are in force; let one expire first"
            )));
        }
        let until_ms = now_ms.saturating_add(self.hold_ms);
        holds.0.push(GarbageHold {
            from: state.log.garbage.len(),
            until_ms,
        });
        Ok(GarbageHeld { until_ms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    /// A topic of one partition whose objects `o0`, `o1`, ... hold five
    /// records each, in order.
    fn topic_of_objects(s: &mut State, objects: usize) -> TopicPartition {
        let topic_id = Uuid::from_u128(1);
        let topic = NewTopic {
            name: "t".into(),
            partitions: 1,
            configs: Default::default(),
        };
        s.apply(CreateTopic {
            id: topic_id,
            topic,
        })
        .unwrap();
        for n in 0..objects {
            let batch = CommitBatch {
                topic_id,
                partition: 0,
                position: 0,
                length: 100,
                record_count: 5,
                max_timestamp: 1_000,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            };
            let commit = Commit {
                object_key: format!("o{n}"),
                object_size: 100,
                batches: vec![batch],
                not_before_ms: s.clock_ms,
            };
            s.apply(commit).unwrap();
        }
        TopicPartition::new(topic_id, 0)
    }

    fn at<C: Apply>(s: &mut State, at_ms: i64, command: C) -> Result<C::Output, Refusal> {
        let reply = s.apply_proposal(Proposal {
            at_ms,
            command: command.into(),
        });
        reply.answer::<C>().unwrap()
    }

    /// Frees the objects below offset `offset` (five records an object).
    fn trim(s: &mut State, at_ms: i64, partition: TopicPartition, offset: i64) {
        at(s, at_ms, Trim { partition, offset }).unwrap();
    }

    /// Moves the state's clock to `at_ms` (any write does).
    fn tick(s: &mut State, at_ms: i64) {
        at(s, at_ms, ForgetGarbage { keys: vec![] }).unwrap();
    }

    fn keys(list: &[String]) -> Vec<&str> {
        list.iter().map(String::as_str).collect()
    }

    #[test]
    fn objects_freed_after_a_hold_wait_for_it_to_expire() {
        let mut s = State::default();
        let tp = topic_of_objects(&mut s, 4);
        trim(&mut s, 1_000, tp, 5);
        let held = at(&mut s, 1_000, HoldGarbage { hold_ms: 10_000 }).unwrap();
        assert_eq!(held.until_ms, 11_000);
        trim(&mut s, 2_000, tp, 15);
        assert_eq!(keys(s.garbage()), ["o0", "o1", "o2"]);
        // Freed before the hold: collectable; after it: not until it expires.
        assert_eq!(keys(s.collectable_garbage(2_000)), ["o0"]);
        // A GC that asks to forget a held key (it was never given one) keeps it.
        at(
            &mut s,
            3_000,
            ForgetGarbage {
                keys: vec!["o0".into(), "o1".into()],
            },
        )
        .unwrap();
        assert_eq!(keys(s.garbage()), ["o1", "o2"]);
        assert_eq!(s.collectable_garbage(3_000), [] as [String; 0]);
        s.check_invariants().unwrap();
        // The hold's position moved with the list. A reader's clock past
        // the hold's end does not end it before the state's clock does.
        assert_eq!(keys(s.collectable_garbage(20_000)), [] as [&str; 0]);
        tick(&mut s, 10_999);
        assert_eq!(keys(s.collectable_garbage(20_000)), [] as [&str; 0]);
        tick(&mut s, 11_000);
        assert_eq!(keys(s.collectable_garbage(10_999)), [] as [&str; 0]);
        assert_eq!(keys(s.collectable_garbage(11_000)), ["o1", "o2"]);
    }

    #[test]
    fn the_earliest_hold_in_force_decides() {
        let mut s = State::default();
        let tp = topic_of_objects(&mut s, 4);
        at(&mut s, 1_000, HoldGarbage { hold_ms: 5_000 }).unwrap();
        trim(&mut s, 1_000, tp, 5);
        at(&mut s, 2_000, HoldGarbage { hold_ms: 60_000 }).unwrap();
        trim(&mut s, 2_000, tp, 10);
        tick(&mut s, 6_000);
        assert_eq!(keys(s.collectable_garbage(5_999)), [] as [&str; 0]);
        // The first expired: what it alone held is collectable now.
        assert_eq!(keys(s.collectable_garbage(6_000)), ["o0"]);
        at(
            &mut s,
            7_000,
            ForgetGarbage {
                keys: vec!["o0".into()],
            },
        )
        .unwrap();
        trim(&mut s, 7_000, tp, 15);
        assert_eq!(keys(s.collectable_garbage(7_000)), [] as [&str; 0]);
        tick(&mut s, 62_000);
        assert_eq!(keys(s.collectable_garbage(62_000)), ["o1", "o2"]);
        s.check_invariants().unwrap();
    }

    #[test]
    fn holds_are_bounded_in_length_and_number() {
        let mut s = State::default();
        for bad in [0, -1, MAX_HOLD_MS + 1] {
            assert!(matches!(
                at(&mut s, 1_000, HoldGarbage { hold_ms: bad }),
                Err(Refusal::InvalidConfig(_))
            ));
        }
        for _ in 0..MAX_GARBAGE_HOLDS {
            at(&mut s, 1_000, HoldGarbage { hold_ms: 1_000 }).unwrap();
        }
        assert!(at(&mut s, 1_500, HoldGarbage { hold_ms: 1_000 }).is_err());
        // Expired ones make room.
        at(&mut s, 2_000, HoldGarbage { hold_ms: 1_000 }).unwrap();
        assert_eq!(s.log.garbage_holds.0.len(), 1);
    }

    #[test]
    fn holds_survive_a_snapshot() {
        let mut s = State::default();
        let tp = topic_of_objects(&mut s, 2);
        at(&mut s, 1_000, HoldGarbage { hold_ms: 10_000 }).unwrap();
        trim(&mut s, 1_000, tp, 5);
        let read =
            crate::format::decode_snapshot(&crate::format::encode_snapshot(&s).unwrap()).unwrap();
        assert_eq!(read.log.garbage_holds, s.log.garbage_holds);
        assert_eq!(read.collectable_garbage(2_000), [] as [String; 0]);
    }
}
