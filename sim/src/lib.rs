//! A deterministic simulation of what decides whether acknowledged data
//! survives: the sequencer state machine, driven through the interleavings
//! that agents, compactors, retention, the orphan sweep and GC produce, with
//! the faults they meet (PUTs that fail before or after writing, commit
//! replies lost, retries long after, clocks that jump and leaders whose clock
//! is behind), checked after every step by an auditor.
//!
//! One seed drives everything (ChaCha8), there are no threads and no real
//! clock, so a seed replays the same trace. This first stage models the
//! agents and the object store; the real batcher, compactor and Raft group
//! over a simulated network are the next stage (see the issue on never
//! losing acknowledged data).
//!
//! The auditor checks Jepsen's Kafka anomaly classes that apply here:
//! - lost write: an acknowledged batch at or past its partition's log start
//!   must be readable at its offsets, from an object that still exists and
//!   holds that very batch there;
//! - duplicates: an idempotent batch acknowledged twice has one offset;
//! - offsets unique: two acknowledged batches never share an offset;
//! - the state machine's own invariants after every step.

pub mod memory;
pub mod whole;

use std::collections::{BTreeMap, BTreeSet};

use floe_metastore::ops::*;
use floe_metastore::state::Apply;
use floe_metastore::state::{Proposal, State};
use floe_metastore::{
    Commit, CommitBatch, ExtentPiece, NewTopic, Refusal, ReplaceExtents, ReplaceRuns, RunSwap,
    TopicPartition,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use uuid::Uuid;

const PARTITIONS: i32 = 3;
const PRODUCERS: usize = 3;
/// As the agents' defaults, in simulated milliseconds.
const ORPHAN_AGE_MS: i64 = 3_600_000;
const GC_GRACE_MS: i64 = 60_000;
/// An agent gives up on a commit after this (the batcher's deadline).
const COMMIT_DEADLINE_MS: i64 = 60_000;

/// One batch as the model knows it: which produce it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Batch {
    id: u64,
    partition: i32,
    count: i32,
    /// (producer, epoch, first sequence) for idempotent batches, fixed when
    /// the batch is made, as a producer's record batch carries them.
    idempotent: Option<(usize, i16, i32)>,
}

/// An object in the simulated bucket: its batches by position.
#[derive(Debug, Clone)]
struct Object {
    written_ms: i64,
    batches: BTreeMap<u64, (Batch, u64)>, // position -> (batch, length)
}

#[derive(Debug, Clone)]
struct Upload {
    key: String,
    batches: Vec<(Batch, u64)>, // (batch, position)
    started_ms: i64,
    /// The metastore's time read before the upload (a Tick).
    not_before_ms: i64,
    attempts: u32,
}

#[derive(Debug, Clone)]
struct Compaction {
    /// One partition's run (a segment), or runs of many (a merged file).
    runs: Vec<RunSwap>,
    merged: bool,
    key: String,
    not_before_ms: i64,
}

/// Why a run failed, at which step, with the trace that led there.
#[derive(Debug)]
pub struct Failure {
    pub seed: u64,
    pub step: usize,
    pub why: String,
    pub trace: Vec<String>,
}

/// What a run did, for the summary line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub acked_batches: usize,
    pub commits: usize,
    pub refused_retries: usize,
    pub compactions: usize,
    pub collected: usize,
    pub simulated_ms: i64,
}

struct World {
    rng: ChaCha8Rng,
    clock: i64,
    state: State,
    topic: Uuid,
    store: BTreeMap<String, Object>,
    next_id: u64,
    uploads: Vec<Upload>,
    compactions: Vec<Compaction>,
    sweep: Option<Vec<String>>,
    gc_seen: BTreeMap<String, i64>,
    /// Next sequence of each idempotent producer, and its id and epoch.
    producers: Vec<(i64, i16, i32)>,
    /// Batches waiting to be produced again after an error (idempotent
    /// producers retry the same sequences).
    retry: Vec<Batch>,
    /// Acknowledged batches: id -> (partition, base offset).
    acked: BTreeMap<u64, (Batch, i64)>,
    /// Anomalies seen when acknowledging (a batch acknowledged at two offsets).
    anomalies: Vec<String>,
    /// Every proposal applied: replaying them must rebuild the same state.
    log: Vec<Proposal>,
    trace: Vec<String>,
    summary: Summary,
}

/// Runs one seed for `steps` steps.
pub fn run(seed: u64, steps: usize) -> Result<(Summary, Vec<String>), Failure> {
    let mut w = World::new(seed);
    for step in 0..steps {
        w.step();
        let replay = if step % 500 == 499 || step + 1 == steps {
            w.replay()
        } else {
            Ok(())
        };
        if let Err(why) = replay.and_then(|()| w.audit()) {
            return Err(Failure {
                seed,
                step,
                why,
                trace: w.trace,
            });
        }
    }
    w.summary.simulated_ms = w.clock;
    Ok((w.summary, w.trace))
}

impl World {
    fn new(seed: u64) -> World {
        let mut w = World {
            rng: ChaCha8Rng::seed_from_u64(seed),
            clock: 1_700_000_000_000,
            state: State::default(),
            topic: Uuid::from_u128(seed as u128 + 1),
            store: BTreeMap::new(),
            next_id: 0,
            uploads: Vec::new(),
            compactions: Vec::new(),
            sweep: None,
            gc_seen: BTreeMap::new(),
            producers: Vec::new(),
            retry: Vec::new(),
            acked: BTreeMap::new(),
            anomalies: Vec::new(),
            log: Vec::new(),
            trace: Vec::new(),
            summary: Summary::default(),
        };
        w.apply(CreateTopic {
            id: w.topic,
            topic: NewTopic {
                name: "sim".into(),
                partitions: PARTITIONS,
                configs: Default::default(),
            },
        })
        .expect("the simulation's topic is created");
        for _ in 0..PRODUCERS {
            match w.apply(InitProducer { existing: None }) {
                Ok(p) => w.producers.push((p.producer_id, p.epoch, 0)),
                other => panic!("{other:?}"),
            }
        }
        w
    }

    /// Applies a command as the leader would propose it now; sometimes the
    /// leader is a new one whose clock is behind.
    fn apply<C: Apply>(&mut self, command: C) -> Result<C::Output, Refusal> {
        // Now and then a leader whose clock is off, behind or ahead.
        let skew = if self.rng.random_bool(0.05) {
            self.rng.random_range(-120_000..120_000)
        } else {
            0
        };
        let proposal = Proposal {
            at_ms: self.clock + skew,
            command: command.into(),
        };
        self.log.push(proposal.clone());
        let reply = self.state.apply_proposal(proposal);
        reply
            .answer::<C>()
            .expect("the reply of the command applied")
    }

    /// Replays the log into a fresh state, as a restarted node would, and
    /// round-trips the state as a snapshot: both must equal the live state.
    fn replay(&self) -> Result<(), String> {
        let mut replayed = State::default();
        for p in &self.log {
            replayed.apply_proposal(p.clone());
        }
        if replayed != self.state {
            return Err("replaying the log gives another state (divergence)".into());
        }
        let bytes =
            floe_metastore::format::encode_snapshot(&self.state).map_err(|e| e.to_string())?;
        let restored: State =
            floe_metastore::format::decode_snapshot(&bytes).map_err(|e| e.to_string())?;
        if restored != self.state {
            return Err("the snapshot does not restore the state".into());
        }
        Ok(())
    }

    /// The metastore's time, as an agent reads it before an upload.
    fn metastore_clock(&mut self) -> i64 {
        match self.apply(Tick) {
            Ok(ms) => ms,
            other => panic!("{other:?}"),
        }
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn log(&mut self, line: String) {
        self.trace.push(format!("t={} {line}", self.clock));
    }

    fn step(&mut self) {
        self.clock += match self.rng.random_range(0..100) {
            0 => self.rng.random_range(600_000..7_200_000), // a long pause
            1..=5 => self.rng.random_range(10_000..120_000),
            _ => self.rng.random_range(0..2_000),
        };
        match self.rng.random_range(0..100) {
            0 => self.bump_epoch(),
            1..=29 => self.produce(),
            30..=59 => self.commit(),
            60..=69 => self.compact_start(),
            70..=76 => self.compact_finish(),
            77..=79 => self.trim(),
            80..=86 => self.sweep_step(),
            _ => self.gc(),
        }
    }

    /// An agent gathers batches into a new object and PUTs it.
    fn produce(&mut self) {
        let not_before_ms = self.metastore_clock();
        let key = format!("ingest/{:02x}/{}", self.rng.random::<u8>(), self.id());
        let mut batches = Vec::new();
        let mut position = 0u64;
        for _ in 0..self.rng.random_range(1..4) {
            let batch = match self.retry.pop() {
                Some(b) if self.rng.random_bool(0.8) => b,
                other => {
                    if let Some(b) = other {
                        self.retry.push(b);
                    }
                    let partition = self.rng.random_range(0..PARTITIONS);
                    let count = self.rng.random_range(1..5);
                    let idempotent = self.rng.random_bool(0.5).then(|| {
                        let p = self.rng.random_range(0..PRODUCERS);
                        let seq = self.producers[p].2;
                        self.producers[p].2 += count;
                        (p, self.producers[p].1, seq)
                    });
                    Batch {
                        id: self.id(),
                        partition,
                        count,
                        idempotent,
                    }
                }
            };
            let length = 61 + 10 * batch.count as u64;
            batches.push((batch, position));
            position += length;
        }
        let object = Object {
            written_ms: self.clock,
            batches: batches
                .iter()
                .map(|(b, pos)| (*pos, (*b, 61 + 10 * b.count as u64)))
                .collect(),
        };
        match self.rng.random_range(0..100) {
            // The PUT failed before writing: the producers hear an error.
            0..=7 => {
                self.log(format!("put {key} failed"));
                self.fail(batches.iter().map(|(b, _)| *b).collect(), &key);
            }
            // Written, but the reply was lost: an error, and an object stays.
            8..=15 => {
                self.log(format!("put {key} stored, reply lost"));
                self.store.insert(key.clone(), object);
                self.fail(batches.iter().map(|(b, _)| *b).collect(), &key);
            }
            _ => {
                self.log(format!("put {key} ({} batches)", batches.len()));
                self.store.insert(key.clone(), object);
                self.uploads.push(Upload {
                    key,
                    batches,
                    started_ms: self.clock,
                    not_before_ms,
                    attempts: 0,
                });
            }
        }
    }

    /// Producers of `batches` got an error; the agent declares the file an
    /// orphan (as the batcher does), which may itself fail.
    fn fail(&mut self, batches: Vec<Batch>, key: &str) {
        for b in batches {
            if b.idempotent.is_some() {
                // The same sequences again: a copy that landed must be
                // recognised, never stored twice.
                self.retry.push(b);
            } else if self.rng.random_bool(0.5) {
                // A plain producer's retry is a new copy (at least once).
                let id = self.id();
                self.retry.push(Batch { id, ..b });
            }
        }
        if self.rng.random_bool(0.7) {
            let _ = self.apply(RecordOrphans {
                keys: vec![key.to_string()],
            });
        }
    }

    /// An agent sends (or resends) one upload's commit.
    fn commit(&mut self) {
        if self.uploads.is_empty() {
            return;
        }
        let at = self.rng.random_range(0..self.uploads.len());
        let mut upload = self.uploads.swap_remove(at);
        // Agents give up on old commits, but one paused between its check
        // and the send delivers late: the sequencer must refuse it.
        if self.clock - upload.started_ms > COMMIT_DEADLINE_MS && self.rng.random_bool(0.7) {
            self.log(format!("commit {} given up", upload.key));
            let batches = upload.batches.iter().map(|(b, _)| *b).collect();
            let key = upload.key.clone();
            self.fail(batches, &key);
            return;
        }
        upload.attempts += 1;
        let lost_before = self.rng.random_bool(0.1);
        if lost_before {
            self.log(format!("commit {} lost on the way", upload.key));
            self.uploads.push(upload);
            return;
        }
        let commit = Commit {
            object_key: upload.key.clone(),
            object_size: 10_000,
            batches: upload
                .batches
                .iter()
                .map(|(b, position)| {
                    let (producer_id, producer_epoch, base_sequence) = match b.idempotent {
                        Some((p, epoch, seq)) => (self.producers[p].0, epoch, seq),
                        None => (-1, -1, -1),
                    };
                    CommitBatch {
                        topic_id: self.topic,
                        partition: b.partition,
                        position: *position,
                        length: (61 + 10 * b.count) as u32,
                        record_count: b.count,
                        max_timestamp: self.clock,
                        producer_id,
                        producer_epoch,
                        base_sequence,
                    }
                })
                .collect(),
            not_before_ms: upload.not_before_ms,
        };
        let results = match self.apply(commit) {
            Ok(r) => r,
            other => panic!("{other:?}"),
        };
        self.summary.commits += 1;
        if self.rng.random_bool(0.15) {
            // Applied, but the reply was lost: the agent will retry.
            self.log(format!("commit {} applied, reply lost", upload.key));
            self.uploads.push(upload);
            return;
        }
        self.log(format!("commit {} -> {results:?}", upload.key));
        for ((batch, _), result) in upload.batches.iter().zip(results) {
            match result {
                Ok(offset) => self.ack(*batch, offset),
                Err(Refusal::ObjectKeyUsed(_) | Refusal::CommitTooLate(_)) => {
                    self.summary.refused_retries += 1;
                    self.retry.push(*batch);
                }
                Err(_) => {}
            }
        }
    }

    fn ack(&mut self, batch: Batch, offset: i64) {
        if let Some((_, first)) = self.acked.get(&batch.id)
            && *first != offset
        {
            self.anomalies.push(format!(
                "batch {} ({:?}) acknowledged at {first} and at {offset}",
                batch.id, batch.idempotent
            ));
        }
        self.acked.insert(batch.id, (batch, offset));
        self.summary.acked_batches = self.acked.len();
        self.retry.retain(|b| b.id != batch.id);
    }

    /// A compactor reads a run of extents and uploads their segment, or
    /// reads the oldest ingest files and uploads a merged file of every run
    /// in them.
    fn compact_start(&mut self) {
        let not_before_ms = self.metastore_clock();
        let (runs, merged) = if self.rng.random_bool(0.5) {
            let backlog = self.state.backlog(
                &CompactionWork {
                    ingest_prefix: "ingest/".into(),
                    max_files: self.rng.random_range(1..4),
                    max_bytes: u64::MAX,
                    max_extents: self.rng.random_range(1..20),
                    merged_prefix: "merged/".into(),
                    segment_bytes: u64::MAX,
                    merge_max_chunks: 2,
                    merge_max_age_ms: 0,
                },
                self.clock,
            );
            let runs: Vec<_> = backlog
                .runs
                .into_iter()
                .map(|r| (r.partition.partition, r.extents))
                .collect();
            (runs, true)
        } else {
            let partition = self.rng.random_range(0..PARTITIONS);
            let Ok(offsets) = self.state.offsets(self.topic, partition) else {
                return;
            };
            let Ok(plan) =
                self.state
                    .read_plan(self.topic, partition, offsets.log_start_offset, u64::MAX)
            else {
                return;
            };
            if plan.extents.len() < 2 {
                return;
            }
            let take = self.rng.random_range(2..=plan.extents.len().min(6));
            let start = self.rng.random_range(0..=plan.extents.len() - take);
            (
                vec![(partition, plan.extents[start..start + take].to_vec())],
                false,
            )
        };
        if runs.is_empty() {
            return;
        }
        let key = if merged {
            format!("merged/{:02x}/{}", self.rng.random::<u8>(), self.id())
        } else {
            format!("segment/{:02x}/{}", runs[0].0, self.id())
        };
        let mut object = Object {
            written_ms: self.clock,
            batches: BTreeMap::new(),
        };
        let mut position = 0u64;
        let mut swaps = Vec::new();
        for (partition, replaced) in runs {
            let mut pieces = Vec::new();
            for extent in &replaced {
                let Some(source) = self.store.get(&extent.object_key) else {
                    // A live extent without its object: the auditor reports it.
                    return;
                };
                let piece_start = position;
                for (_, (batch, length)) in source
                    .batches
                    .range(extent.position..extent.position + extent.length)
                {
                    object.batches.insert(position, (*batch, *length));
                    position += length;
                }
                pieces.push(ExtentPiece {
                    base_offset: extent.base_offset,
                    last_offset: extent.last_offset,
                    max_timestamp: extent.max_timestamp,
                    position: piece_start,
                    length: position - piece_start,
                    appended_ms: extent.appended_ms,
                });
            }
            swaps.push(RunSwap {
                partition: TopicPartition::new(self.topic, partition),
                replaced,
                pieces,
            });
        }
        self.log(format!(
            "compaction {key} of {} runs ({:?})",
            swaps.len(),
            swaps
                .iter()
                .map(|r| (r.partition.partition, r.replaced.len()))
                .collect::<Vec<_>>()
        ));
        self.store.insert(key.clone(), object);
        self.compactions.push(Compaction {
            runs: swaps,
            merged,
            key,
            not_before_ms,
        });
    }

    /// A producer restarts (InitProducerId with its id): a new epoch whose
    /// sequences start at 0; its old batches still in flight are fenced.
    fn bump_epoch(&mut self) {
        let p = self.rng.random_range(0..PRODUCERS);
        let (producer_id, epoch, _) = self.producers[p];
        let existing = floe_metastore::ProducerIdentity { producer_id, epoch };
        match self.apply(InitProducer {
            existing: Some(existing),
        }) {
            Ok(next) => {
                self.log(format!("producer {p} now {next:?}"));
                self.producers[p] = (next.producer_id, next.epoch, 0);
            }
            other => panic!("{other:?}"),
        }
    }

    fn compact_finish(&mut self) {
        let Some(c) = self.compactions.pop() else {
            return;
        };
        let reply_lost = self.rng.random_bool(0.1);
        if c.merged {
            let swap = ReplaceRuns {
                object_key: c.key.clone(),
                object_size: 10_000,
                runs: c.runs,
                not_before_ms: c.not_before_ms,
            };
            if reply_lost && self.rng.random_bool(0.3) {
                // Lost on the way: never applied; its file is an orphan
                // the sweep finds.
                self.log(format!("merge of {} lost before the metastore", c.key));
                return;
            }
            let again = self.rng.random_bool(0.05).then(|| swap.clone());
            let reply = self.apply(swap);
            if let Some(again) = again {
                // Delivered twice: the second is refused whole, changing nothing.
                let second = self.apply(again);
                if second != Err(Refusal::ObjectKeyUsed(c.key.clone())) {
                    self.anomalies
                        .push(format!("merge of {} applied twice: {second:?}", c.key));
                }
            }
            // The compactor never deletes a merged file: the metastore hands
            // it to GC when none of its runs went in.
            match reply {
                _ if reply_lost => self.log(format!("merge of {} sent, reply lost", c.key)),
                Ok(runs) => {
                    let swapped = runs.iter().filter(|r| r.is_ok()).count();
                    self.summary.compactions += swapped;
                    self.log(format!(
                        "merged {}: {swapped} of {} runs",
                        c.key,
                        runs.len()
                    ));
                }
                Err(e) => self.log(format!("merge of {} refused: {e}", c.key)),
            }
            return;
        }
        let run = c.runs.into_iter().next().expect("a segment has its run");
        let reply = self.apply(ReplaceExtents {
            topic_id: self.topic,
            partition: run.partition.partition,
            replaced: run.replaced,
            object_key: c.key.clone(),
            object_size: 10_000,
            pieces: run.pieces,
            not_before_ms: c.not_before_ms,
        });
        match reply {
            // The compactor cannot tell what happened: like the real one, it
            // keeps its segment (the orphan sweep collects it if unused).
            _ if reply_lost => self.log(format!("swap of {} sent, reply lost", c.key)),
            Ok(()) => {
                self.summary.compactions += 1;
                self.log(format!("swapped in {}", c.key));
            }
            Err(e) => {
                self.log(format!("swap of {} refused: {e}; segment deleted", c.key));
                self.store.remove(&c.key);
            }
        }
    }

    /// DeleteRecords (or retention) moves a partition's log start.
    fn trim(&mut self) {
        let partition = self.rng.random_range(0..PARTITIONS);
        let Ok(o) = self.state.offsets(self.topic, partition) else {
            return;
        };
        if o.high_watermark <= o.log_start_offset {
            return;
        }
        let to = self.rng.random_range(o.log_start_offset..=o.high_watermark);
        self.log(format!("trim partition {partition} to {to}"));
        // Within the log, so never refused.
        let _ = self.apply(Trim {
            partition: TopicPartition::new(self.topic, partition),
            offset: to,
        });
    }

    /// The orphan sweep: one step lists old objects and asks which are
    /// unknown; a later step records them (commits may land in between).
    fn sweep_step(&mut self) {
        match self.sweep.take() {
            None => {
                let old: Vec<String> = self
                    .store
                    .iter()
                    .filter(|(_, o)| self.clock - o.written_ms > ORPHAN_AGE_MS)
                    .map(|(k, _)| k.clone())
                    .collect();
                let unknown = self.state.unknown_objects(&old);
                if !unknown.is_empty() {
                    self.log(format!("sweep finds {} unknown", unknown.len()));
                    self.sweep = Some(unknown);
                }
            }
            Some(keys) => {
                self.log(format!("sweep records {} orphans", keys.len()));
                let _ = self.apply(RecordOrphans { keys });
            }
        }
    }

    /// GC deletes garbage after the grace period, then tells the metastore.
    fn gc(&mut self) {
        let garbage: Vec<String> = self.state.garbage().to_vec();
        self.gc_seen.retain(|k, _| garbage.contains(k));
        let mut due = Vec::new();
        for key in garbage {
            let seen = *self.gc_seen.entry(key.clone()).or_insert(self.clock);
            if self.clock - seen >= GC_GRACE_MS {
                due.push(key);
            }
        }
        if due.is_empty() {
            return;
        }
        for key in &due {
            self.store.remove(key);
        }
        self.summary.collected += due.len();
        self.log(format!("gc deleted {}", due.len()));
        let _ = self.apply(ForgetGarbage { keys: due });
    }

    fn audit(&self) -> Result<(), String> {
        self.state.check_invariants()?;
        if let Some(anomaly) = self.anomalies.first() {
            return Err(anomaly.clone());
        }
        self.stored_once()?;
        let mut owner: BTreeMap<(i32, i64), u64> = BTreeMap::new();
        let mut idempotent: BTreeSet<(usize, i16, i32)> = BTreeSet::new();
        for (id, (batch, offset)) in &self.acked {
            if let Some(key) = batch.idempotent
                && !idempotent.insert(key)
            {
                return Err(format!("idempotent batch {key:?} stored as two batches"));
            }
            for o in *offset..*offset + batch.count as i64 {
                if let Some(other) = owner.insert((batch.partition, o), *id) {
                    return Err(format!(
                        "offset {o} of partition {} acknowledged to batches {other} and {id}",
                        batch.partition
                    ));
                }
            }
            let log_start = self
                .state
                .offsets(self.topic, batch.partition)
                .map_err(|e| e.to_string())?
                .log_start_offset;
            if offset + batch.count as i64 <= log_start {
                continue; // trimmed: allowed to go
            }
            self.readable(batch, (*offset).max(log_start))
                .map_err(|why| format!("acknowledged batch {id} at {offset}: {why}"))?;
        }
        Ok(())
    }

    /// Every idempotent batch is stored at most once in the readable log,
    /// acknowledged or not.
    fn stored_once(&self) -> Result<(), String> {
        for partition in 0..PARTITIONS {
            let o = self
                .state
                .offsets(self.topic, partition)
                .map_err(|e| e.to_string())?;
            let plan = self
                .state
                .read_plan(self.topic, partition, o.log_start_offset, u64::MAX)
                .map_err(|e| e.to_string())?;
            let mut seen = BTreeSet::new();
            for extent in &plan.extents {
                let Some(object) = self.store.get(&extent.object_key) else {
                    return Err(format!(
                        "live extent on deleted object {}",
                        extent.object_key
                    ));
                };
                let mut at = extent.base_offset;
                for (_, (batch, _)) in object
                    .batches
                    .range(extent.position..extent.position + extent.length)
                {
                    let end = at + batch.count as i64;
                    if end > o.log_start_offset
                        && let Some(key) = batch.idempotent
                        && !seen.insert(key)
                    {
                        return Err(format!(
                            "idempotent batch {key:?} stored twice in partition {partition}"
                        ));
                    }
                    at = end;
                }
            }
        }
        Ok(())
    }

    /// Reads `offset` (within the batch) of the batch's partition as a fetch
    /// would, and checks it finds this batch there.
    fn readable(&self, batch: &Batch, offset: i64) -> Result<(), String> {
        let plan = self
            .state
            .read_plan(self.topic, batch.partition, offset, 1)
            .map_err(|e| e.to_string())?;
        let extent = plan.extents.first().ok_or("no extent")?;
        let object = self
            .store
            .get(&extent.object_key)
            .ok_or_else(|| format!("object {} was deleted", extent.object_key))?;
        let mut at = extent.base_offset;
        for (_, (stored, _)) in object
            .batches
            .range(extent.position..extent.position + extent.length)
        {
            if (at..at + stored.count as i64).contains(&offset) {
                return if stored.id == batch.id {
                    Ok(())
                } else {
                    Err(format!("found batch {} there", stored.id))
                };
            }
            at += stored.count as i64;
        }
        Err(format!("extent of {} does not reach it", extent.object_key))
    }
}
