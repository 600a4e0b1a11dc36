//! One share-partition (KIP-932's `SharePartition`): which records of a
//! topic partition a share group has handed out, to whom, how often, and how
//! each ended. It lives in the metastore's state, so every agent serves any
//! share group, and an agent's death loses no lock: a lock ends on the
//! metastore's clock, whoever asks next.
//!
//! Records between the start offset (Kafka's SPSO) and `end` (one past its
//! SPEO) are in flight, as ranges of one state each:
//!
//! - `Available`: may be acquired (again);
//! - `Acquired`: handed to one member until its lock ends;
//! - `Acknowledged` / `Archived`: done (accepted; rejected, a gap, or
//!   delivered `delivery_limit` times).
//!
//! Invariants (checked by [`SharePartition::check`]): the ranges tile
//! `[start, end)` without gap or overlap; the first is not done (done ranges
//! at the head are passed by `start`); an acquired range names its holder
//! and lock, others neither; no delivery count exceeds the limit; at most
//! `max_in_flight` offsets are in flight when new ones are taken.
//!
//! The rules are Kafka 4.2's: a delivery is counted when a record is
//! acquired; a record at the limit that is released, or whose lock ends, is
//! archived instead of made available again; an acknowledgement is checked
//! whole (every offset acquired by the member, its lock not ended) before
//! any of it applies.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::contract::shares::{Ack, AckBatch, AckRefused, Acquired};

/// What became of an in-flight record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecordState {
    Available,
    Acquired,
    Acknowledged,
    Archived,
}

impl RecordState {
    fn done(self) -> bool {
        matches!(self, RecordState::Acknowledged | RecordState::Archived)
    }
}

/// A run of offsets in one state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct InFlight {
    last: i64,
    state: RecordState,
    deliveries: u16,
    /// Who holds an acquired range, and until when.
    holder: Option<Lock>,
}

/// A lock on acquired records: the member, the share session that took
/// them (its close releases only its own: a member may hold sessions with
/// several agents), and when it ends (metastore clock).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Lock {
    member: String,
    session: u64,
    until: i64,
}

impl Lock {
    /// Whether `member` holds it at `now_ms` (through any of its sessions:
    /// a member acknowledges through whichever it has, as in Kafka, where a
    /// session opened again keeps the records the old one acquired).
    fn held_by(&self, member: &str, now_ms: i64) -> bool {
        self.member == member && self.until > now_ms
    }
}

/// Who acquires or releases: a member through one share session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Who<'a> {
    pub member: &'a str,
    pub session: u64,
}

/// A member through its session 0 (tests, and callers with one session).
impl<'a> From<&'a str> for Who<'a> {
    fn from(member: &'a str) -> Self {
        Who { member, session: 0 }
    }
}

/// The limits a share-partition works under (the group's and the agent's configs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `group.share.delivery.count.limit`.
    pub delivery_limit: u16,
    /// `group.share.partition.max.record.locks`.
    pub max_in_flight: i64,
    /// `share.record.lock.duration.ms`.
    pub lock_ms: i64,
}

/// What an acquisition may take: the partition's offsets as the log has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogBounds {
    /// The log start offset: records below are gone.
    pub log_start: i64,
    /// One past the log's last record (the high watermark): offsets at or
    /// past it are not records (any more).
    pub log_end: i64,
    /// One past the last record a member may read (the high watermark, or
    /// the last stable offset for read_committed groups).
    pub readable_end: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharePartition {
    start: i64,
    end: i64,
    in_flight: BTreeMap<i64, InFlight>,
    /// Records archived so far (rejected, gaps, at the delivery limit).
    archived: u64,
}

impl SharePartition {
    /// A share-partition whose first record to deliver is `start`.
    pub fn starting_at(start: i64) -> SharePartition {
        SharePartition {
            start,
            end: start,
            in_flight: BTreeMap::new(),
            archived: 0,
        }
    }

    /// Records archived so far: rejected, acknowledged as gaps, or
    /// delivered as often as the limit allows.
    pub fn archived(&self) -> u64 {
        self.archived
    }

    /// Kafka's share-partition start offset (SPSO).
    pub fn start_offset(&self) -> i64 {
        self.start
    }

    /// Offsets acquired at least once run up to here (one past Kafka's SPEO).
    pub fn end_offset(&self) -> i64 {
        self.end
    }

    /// Records in flight and not done (for lag and metrics).
    pub fn undone(&self) -> i64 {
        self.in_flight
            .iter()
            .filter(|(_, r)| !r.state.done())
            .map(|(first, r)| r.last - first + 1)
            .sum()
    }

    /// Records above the start offset that are done (Kafka's
    /// `deliveryCompleteCount`).
    pub fn done_in_flight(&self) -> i64 {
        self.in_flight
            .iter()
            .filter(|(_, r)| r.state.done())
            .map(|(first, r)| r.last - first + 1)
            .sum()
    }

    /// Acquired records held by `member` (its lock not ended at `now_ms`).
    pub fn held_by(&self, member: &str, now_ms: i64) -> i64 {
        self.in_flight
            .iter()
            .filter(|(_, r)| r.holder.as_ref().is_some_and(|l| l.held_by(member, now_ms)))
            .map(|(first, r)| r.last - first + 1)
            .sum()
    }

    /// Hands `member` up to `max_records` records: first those available
    /// again, in offset order, then new ones from the end, as far as the log
    /// allows and while no more than `max_in_flight` are in flight. Locks
    /// that ended by `now_ms` end first.
    pub fn acquire<'a>(
        &mut self,
        who: impl Into<Who<'a>>,
        max_records: i64,
        log: LogBounds,
        limits: Limits,
        now_ms: i64,
    ) -> Vec<Acquired> {
        let who = who.into();
        self.end_locks(now_ms, limits.delivery_limit);
        self.follow_log_start(log.log_start);
        self.follow_log_end(log.log_end);
        let lock = Lock {
            member: who.member.to_string(),
            session: who.session,
            until: now_ms.saturating_add(limits.lock_ms),
        };
        let mut left = max_records.max(0);
        let mut taken = Vec::new();
        let available: Vec<i64> = self
            .in_flight
            .iter()
            .filter(|(_, r)| r.state == RecordState::Available)
            .map(|(first, _)| *first)
            .collect();
        for first in available {
            if left == 0 || first >= log.readable_end {
                break;
            }
            let range = &self.in_flight[&first];
            let take = left.min(range.last.min(log.readable_end - 1) - first + 1);
            let last = first + take - 1;
            self.split_at(last + 1);
            let range = self.in_flight.get_mut(&first).expect("just split");
            // A limit lowered since (another agent's config): no more.
            if range.deliveries >= limits.delivery_limit {
                range.state = RecordState::Archived;
                self.archived += (last - first + 1) as u64;
                continue;
            }
            range.state = RecordState::Acquired;
            range.deliveries += 1;
            range.holder = Some(lock.clone());
            taken.push(Acquired {
                first,
                last,
                deliveries: range.deliveries,
            });
            left -= take;
        }
        self.advance_start();
        // Offsets are the wire's (AlterShareGroupOffsets): no overflow.
        let room = (self.start.saturating_add(limits.max_in_flight) - self.end).max(0);
        let new_last = self
            .end
            .saturating_add(left.min(room))
            .min(log.readable_end)
            - 1;
        if new_last >= self.end {
            let first = self.end;
            self.in_flight.insert(
                first,
                InFlight {
                    last: new_last,
                    state: RecordState::Acquired,
                    deliveries: 1,
                    holder: Some(lock),
                },
            );
            self.end = new_last + 1;
            taken.push(Acquired {
                first,
                last: new_last,
                deliveries: 1,
            });
        }
        self.coalesce();
        taken
    }

    /// Applies `member`'s acknowledgements, all or none: each offset must
    /// be acquired by it with its lock not ended at `now_ms` (offsets below
    /// the start offset are done already and skipped, as Kafka skips them).
    pub fn acknowledge(
        &mut self,
        member: &str,
        batches: &[AckBatch],
        limits: Limits,
        now_ms: i64,
    ) -> Result<(), AckRefused> {
        let mut previous_last = i64::MIN;
        for b in batches {
            let span = i128::from(b.last) - i128::from(b.first) + 1;
            let fits = b.types.len() == 1 || b.types.len() as i128 == span;
            if b.first > b.last || b.first <= previous_last || b.types.is_empty() || !fits {
                return Err(AckRefused::InvalidRequest(format!(
                    "acknowledgement batches must be sorted, apart, and typed as a whole or per offset ({}..={})",
                    b.first, b.last
                )));
            }
            if b.last >= self.end {
                return Err(AckRefused::InvalidRequest(format!(
                    "offset {} was never acquired (records in flight end at {})",
                    b.last,
                    self.end - 1
                )));
            }
            previous_last = b.last;
        }
        for b in batches {
            let from = b.first.max(self.start);
            if from > b.last {
                continue;
            }
            for (first, r) in self.in_flight.range(..=b.last).rev() {
                if r.last < from {
                    break;
                }
                let held = r.holder.as_ref().is_some_and(|l| l.held_by(member, now_ms));
                if r.state != RecordState::Acquired || !held {
                    return Err(AckRefused::InvalidRecordState(format!(
                        "offsets {}..={} are not acquired by this member",
                        (*first).max(from),
                        r.last.min(b.last)
                    )));
                }
            }
        }
        for b in batches {
            let from = b.first.max(self.start);
            for offset_run in runs_of_one_ack(b, from) {
                let (first, last, ack) = offset_run;
                self.split_at(first);
                self.split_at(last + 1);
                let keys: Vec<i64> = self
                    .in_flight
                    .range(first..=last)
                    .map(|(k, _)| *k)
                    .collect();
                for key in keys {
                    let r = self.in_flight.get_mut(&key).expect("listed");
                    r.holder = None;
                    r.state = match ack {
                        Ack::Accept => RecordState::Acknowledged,
                        Ack::Gap | Ack::Reject => RecordState::Archived,
                        Ack::Release if r.deliveries >= limits.delivery_limit => {
                            RecordState::Archived
                        }
                        Ack::Release => RecordState::Available,
                        Ack::Undelivered => {
                            r.deliveries = r.deliveries.saturating_sub(1);
                            RecordState::Available
                        }
                    };
                    if r.state == RecordState::Archived {
                        self.archived += (r.last - key + 1) as u64;
                    }
                }
            }
        }
        self.advance_start();
        self.coalesce();
        Ok(())
    }

    /// Makes every record `who`'s session holds available again (archived
    /// at the delivery limit): the session closed.
    pub fn release<'a>(&mut self, who: impl Into<Who<'a>>, limits: Limits) {
        let who = who.into();
        for (first, r) in self.in_flight.iter_mut() {
            let taken_by = |l: &Lock| l.member == who.member && l.session == who.session;
            if r.holder.as_ref().is_some_and(taken_by) {
                self.archived += release(r, *first, limits.delivery_limit);
            }
        }
        self.advance_start();
        self.coalesce();
    }

    /// Ends the locks that ended by `now_ms`.
    pub fn end_locks(&mut self, now_ms: i64, delivery_limit: u16) {
        let mut ended = false;
        for (first, r) in self.in_flight.iter_mut() {
            if r.holder.as_ref().is_some_and(|l| l.until <= now_ms) {
                self.archived += release(r, *first, delivery_limit);
                ended = true;
            }
        }
        if ended {
            self.advance_start();
            self.coalesce();
        }
    }

    /// The log start moved past records in flight (retention,
    /// DeleteRecords): they are gone, whatever their state.
    fn follow_log_start(&mut self, log_start: i64) {
        if log_start <= self.start {
            return;
        }
        self.split_at(log_start);
        self.in_flight = self.in_flight.split_off(&log_start);
        self.start = log_start;
        self.end = self.end.max(log_start);
        self.advance_start();
    }

    /// The log ends below records in flight (it was truncated): those
    /// offsets are not records, and the log's next ones are new.
    fn follow_log_end(&mut self, log_end: i64) {
        if log_end >= self.end {
            return;
        }
        let end = log_end.max(self.start);
        self.split_at(end);
        self.in_flight.split_off(&end);
        self.end = end;
        self.advance_start();
    }

    /// Splits the range holding `offset` so that one begins there.
    fn split_at(&mut self, offset: i64) {
        let Some((&first, r)) = self.in_flight.range(..offset).next_back() else {
            return;
        };
        if r.last < offset {
            return;
        }
        let tail = r.clone();
        self.in_flight.get_mut(&first).expect("found").last = offset - 1;
        self.in_flight.insert(offset, tail);
    }

    /// Passes the done ranges at the head.
    fn advance_start(&mut self) {
        while let Some(entry) = self.in_flight.first_entry() {
            if !entry.get().state.done() {
                break;
            }
            self.start = entry.get().last + 1;
            entry.remove();
        }
        if self.in_flight.is_empty() {
            self.start = self.start.max(self.end);
            self.end = self.start;
        }
    }

    /// Joins neighbours alike in everything but their offsets.
    fn coalesce(&mut self) {
        let mut merged: BTreeMap<i64, InFlight> = BTreeMap::new();
        for (first, r) in std::mem::take(&mut self.in_flight) {
            if let Some((_, prev)) = merged.iter_mut().next_back()
                && prev.last + 1 == first
                && prev.state == r.state
                && prev.deliveries == r.deliveries
                && prev.holder == r.holder
            {
                prev.last = r.last;
                continue;
            }
            merged.insert(first, r);
        }
        self.in_flight = merged;
    }

    /// The invariants above, as a description of the first one broken.
    pub fn check(&self, delivery_limit: u16) -> Result<(), String> {
        let mut next = self.start;
        for (i, (first, r)) in self.in_flight.iter().enumerate() {
            if *first != next || r.last < *first {
                return Err(format!(
                    "ranges do not tile from {}: {first}..={}",
                    self.start, r.last
                ));
            }
            if i == 0 && r.state.done() {
                return Err(format!("a done range at the start, {first}..={}", r.last));
            }
            if (r.state == RecordState::Acquired) != r.holder.is_some() {
                return Err(format!(
                    "{first}..={}: {:?} with holder {:?}",
                    r.last, r.state, r.holder
                ));
            }
            if r.deliveries > delivery_limit {
                return Err(format!(
                    "{first}..={} delivered {} times",
                    r.last, r.deliveries
                ));
            }
            next = r.last + 1;
        }
        if next != self.end {
            return Err(format!(
                "ranges end at {next}, the partition at {}",
                self.end
            ));
        }
        Ok(())
    }
}

/// Ends the hold on the range beginning at `first`: available again, or
/// archived at the delivery limit. How many records it archived.
fn release(r: &mut InFlight, first: i64, delivery_limit: u16) -> u64 {
    r.holder = None;
    if r.deliveries >= delivery_limit {
        r.state = RecordState::Archived;
        (r.last - first + 1) as u64
    } else {
        r.state = RecordState::Available;
        0
    }
}

/// A batch's offsets from `from`, as runs of one acknowledge type.
fn runs_of_one_ack(b: &AckBatch, from: i64) -> Vec<(i64, i64, Ack)> {
    let mut runs: Vec<(i64, i64, Ack)> = Vec::new();
    for offset in from..=b.last {
        let ack = b.ack_of(offset);
        match runs.last_mut() {
            Some((_, last, a)) if *a == ack => *last = offset,
            _ => runs.push((offset, offset, ack)),
        }
    }
    runs
}

#[cfg(test)]
mod tests;
