//! Compaction's work list ([`CompactionWork`] answered as a [`Backlog`]),
//! found at a cost that follows what changed rather than what is stored.
//! Every agent asks once per compaction pass, on the metastore leader,
//! under the state's read lock (which commits wait on), so a pass must not
//! read every extent of every partition:
//!
//! - the ingest files come from the ledger's live keys under their prefix,
//!   not from every object (most objects are segments);
//! - the runs to move out of the files taken come from the partitions
//!   holding extents in them (each object knows its [`Holders`]), not from
//!   every partition;
//! - a partition found not worth merging is passed over until its extents
//!   change, its topic's `segment.ms` does, or its merged chunks are old
//!   enough to merge by age (see [`Settled`]).
//!
//! So a pass costs a little per partition (a hash lookup and insert, and
//! its topic's configs once) plus the extents of the partitions that
//! changed, or whose merged chunks have come of age.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex};

use super::{Partition, State};
use crate::merge_policy::{Chunk, ChunkKind};
use crate::ops::CompactionWork;
use crate::topic_config::TopicConfig;
use crate::types::{Backlog, BacklogFile, ExtentRun, TopicPartition};

/// What one pass read: what tests count (the cost of a pass).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Visited {
    /// Extents read, for runs and for merges.
    pub extents: u64,
    /// Partitions whose merges were weighed (their extents read).
    pub weighed: u64,
}

impl State {
    /// See [`CompactionWork`] and this module.
    pub fn backlog(&self, work: &CompactionWork, now_ms: i64) -> Backlog {
        self.backlog_visiting(work, now_ms).0
    }

    pub(crate) fn backlog_visiting(
        &self,
        work: &CompactionWork,
        now_ms: i64,
    ) -> (Backlog, Visited) {
        let mut backlog = Backlog::default();
        let mut visited = Visited::default();
        let chosen = self.choose_ingest_files(work, &mut backlog);
        self.find_runs(&chosen, &mut backlog, &mut visited);
        self.find_merges(work, now_ms, &mut backlog, &mut visited);
        (backlog, visited)
    }

    /// The oldest ingest files, up to the work's limits (the first whatever
    /// its size): object id -> its place in `backlog.files`.
    fn choose_ingest_files(
        &self,
        work: &CompactionWork,
        backlog: &mut Backlog,
    ) -> BTreeMap<u64, usize> {
        let prefix = work.ingest_prefix.as_str();
        // Object ids grow with each commit: the oldest first.
        let ingest: BTreeSet<u64> = self
            .log
            .ledger
            .live()
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix))
            .map(|(_, id)| *id)
            .collect();
        let mut chosen = BTreeMap::new();
        let (mut bytes, mut extents) = (0u64, 0u64);
        // Once a file does not fit, none after it is taken.
        let mut full = false;
        for (id, object) in ingest
            .iter()
            .filter_map(|id| Some((*id, self.log.objects.get(id)?)))
        {
            backlog.ingest_files += 1;
            full = full
                || backlog.files.len() >= work.max_files as usize
                || !backlog.files.is_empty()
                    && (bytes + object.size > work.max_bytes
                        || extents + object.live_extents > work.max_extents);
            if !full {
                chosen.insert(id, backlog.files.len());
                bytes += object.size;
                extents += object.live_extents;
                backlog.files.push(BacklogFile {
                    key: object.key.clone(),
                    size: object.size,
                    oldest_appended_ms: i64::MAX,
                });
            }
        }
        chosen
    }

    /// Every run of consecutive extents lying in the `chosen` files, by
    /// partition (topics by name, then partitions), in offset order; and
    /// each file's oldest append still stored in it.
    fn find_runs(
        &self,
        chosen: &BTreeMap<u64, usize>,
        backlog: &mut Backlog,
        visited: &mut Visited,
    ) {
        let objects = || chosen.keys().filter_map(|id| self.log.objects.get(id));
        // A file whose holders do not add up would keep its missing
        // partitions' runs, and itself, forever: walk every partition then.
        let trusted = objects().all(|o| o.holders.total() == o.live_extents);
        let holders: BTreeSet<(&str, usize)> = if trusted {
            objects()
                .flat_map(|object| object.holders.partitions())
                .filter_map(|tp| {
                    let name = self.log.names_by_id.get(&tp.topic_id)?;
                    Some((name.as_str(), usize::try_from(tp.partition).ok()?))
                })
                .collect()
        } else {
            let wrong = objects().find(|o| o.holders.total() != o.live_extents);
            tracing::error!(
                key = wrong.map(|o| o.key.as_str()),
                "an ingest file's holders do not count its extents: reading every partition"
            );
            self.log
                .topics
                .iter()
                .flat_map(|(name, t)| (0..t.partitions.len()).map(move |n| (name.as_str(), n)))
                .collect()
        };
        for (name, n) in holders {
            let Some(topic) = self.log.topics.get(name) else {
                continue;
            };
            let Some(p) = topic.partitions.get(n) else {
                continue;
            };
            let tp = TopicPartition::new(topic.info.id, n as i32);
            let mut run = Vec::new();
            for e in p.extents.values() {
                visited.extents += 1;
                match chosen.get(&e.object) {
                    Some(&file) => {
                        let f = &mut backlog.files[file];
                        f.oldest_appended_ms = f.oldest_appended_ms.min(e.appended_ms);
                        run.push(self.extent_ref(e));
                    }
                    None if !run.is_empty() => backlog.runs.push(ExtentRun {
                        partition: tp,
                        extents: std::mem::take(&mut run),
                    }),
                    None => {}
                }
            }
            if !run.is_empty() {
                backlog.runs.push(ExtentRun {
                    partition: tp,
                    extents: run,
                });
            }
        }
    }

    /// The partitions (of topics without key compaction) holding a run
    /// worth merging ([`CompactionWork::merge_run`]), weighing only those
    /// not [`Settled`] under the same rules.
    fn find_merges(
        &self,
        work: &CompactionWork,
        now_ms: i64,
        backlog: &mut Backlog,
        visited: &mut Visited,
    ) {
        let rules = WorkRules::of(work);
        let before = self.log.settled.get(&rules);
        let mut settled = HashMap::with_capacity(before.len());
        let inherited = self.configs.topic_defaults();
        for topic in self.log.topics.values() {
            let config = TopicConfig::over(&inherited, &topic.info.configs);
            if config.compact {
                // Key compaction rewrites these partitions its own way.
                continue;
            }
            for (n, p) in topic.partitions.iter().enumerate() {
                let tp = TopicPartition::new(topic.info.id, n as i32);
                let at = (p.extents_version.0, config.segment_ms);
                if let Some(known) = before.get(&tp)
                    && (known.extents_version, known.max_span_ms) == at
                    && now_ms < known.until_ms
                {
                    settled.insert(tp, *known);
                    continue;
                }
                visited.weighed += 1;
                visited.extents += p.extents.len() as u64;
                let chunks = self.chunks(work, p);
                if work.merge_run(&chunks, now_ms, config.segment_ms).is_some() {
                    backlog.merge.push(tp);
                    continue;
                }
                // Only merged chunks make a verdict change with time: their
                // runs merge once `merge_max_age_ms` old (rule 1).
                let until_ms = chunks
                    .iter()
                    .filter(|c| c.kind == ChunkKind::Merged)
                    .map(|c| c.oldest_appended_ms.saturating_add(work.merge_max_age_ms))
                    .min()
                    .unwrap_or(i64::MAX);
                let (extents_version, max_span_ms) = at;
                settled.insert(
                    tp,
                    SettledAt {
                        extents_version,
                        max_span_ms,
                        until_ms,
                    },
                );
            }
        }
        self.log.settled.put(rules, settled);
    }

    /// A partition's extents as chunks: consecutive extents in one object.
    fn chunks(&self, work: &CompactionWork, p: &Partition) -> Vec<Chunk> {
        let mut chunks: Vec<(u64, Chunk)> = Vec::new();
        for e in p.extents.values() {
            match chunks.last_mut() {
                Some((object, chunk)) if *object == e.object => {
                    chunk.add(e.length, e.appended_ms);
                }
                _ => {
                    let key = self
                        .log
                        .objects
                        .get(&e.object)
                        .map_or("", |o| o.key.as_str());
                    let first = std::iter::once((e.length, e.appended_ms));
                    chunks.push((e.object, Chunk::of(work, key, first)));
                }
            }
        }
        chunks.into_iter().map(|(_, c)| c).collect()
    }
}

/// The partitions with extents in an object, and how many each, by
/// partition. Derived, never stored (rebuilt on load). A boxed slice of
/// exactly its size, since most objects are segments of one partition; a
/// count goes down to 0 as extents leave and stays there (the object goes
/// when every count is 0).
#[derive(Debug, Clone, Default)]
pub(super) struct Holders(Box<[(TopicPartition, u32)]>);

impl Holders {
    pub(super) fn of(counts: BTreeMap<TopicPartition, u64>) -> Holders {
        Holders(
            counts
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(tp, n)| (tp, u32::try_from(n).unwrap_or(u32::MAX)))
                .collect(),
        )
    }

    /// One extent of `tp` left; false if `tp` held none.
    pub(super) fn release(&mut self, tp: TopicPartition) -> bool {
        match self.0.binary_search_by_key(&tp, |(held, _)| *held) {
            Ok(at) if self.0[at].1 > 0 => {
                self.0[at].1 -= 1;
                true
            }
            _ => false,
        }
    }

    /// The partitions holding extents, and how many each.
    pub(super) fn counts(&self) -> impl Iterator<Item = (TopicPartition, u64)> + '_ {
        self.0
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(tp, n)| (*tp, u64::from(*n)))
    }

    pub(super) fn partitions(&self) -> impl Iterator<Item = TopicPartition> + '_ {
        self.counts().map(|(tp, _)| tp)
    }

    pub(super) fn total(&self) -> u64 {
        self.counts().map(|(_, n)| n).sum()
    }
}

/// Equal when they count the same extents (a count at 0 is no holder).
impl PartialEq for Holders {
    fn eq(&self, other: &Holders) -> bool {
        self.counts().eq(other.counts())
    }
}

impl Eq for Holders {}

/// What in a [`CompactionWork`] decides a partition's merges (which
/// objects are which kind, segment size, tiers, age).
#[derive(Debug, Clone, PartialEq, Eq)]
struct WorkRules {
    ingest_prefix: String,
    merged_prefix: String,
    segment_bytes: u64,
    merge_max_chunks: u32,
    merge_max_age_ms: i64,
}

impl WorkRules {
    fn of(work: &CompactionWork) -> WorkRules {
        WorkRules {
            ingest_prefix: work.ingest_prefix.clone(),
            merged_prefix: work.merged_prefix.clone(),
            segment_bytes: work.segment_bytes,
            merge_max_chunks: work.merge_max_chunks,
            merge_max_age_ms: work.merge_max_age_ms,
        }
    }
}

/// A partition found not worth merging: so it stays while its extents and
/// its topic's `segment.ms` are the same, until `until_ms` (when a run of
/// its merged chunks could be old enough to merge; never without them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SettledAt {
    extents_version: u64,
    max_span_ms: i64,
    until_ms: i64,
}

/// Most sets of rules whose settled partitions are kept: agents asking
/// with different rules (a configuration being rolled out) do not undo
/// each other's.
const RULES_KEPT: usize = 4;

/// The partitions passes found not worth merging, under each of the last
/// few rules asked with (see [`SettledAt`]). A cache of what the state
/// implies, not state: never stored, empty in a clone, equal to any other,
/// and rebuilt by each pass (so it holds only partitions that exist).
/// Passes at once each start from what the last one left, which is never
/// taken from them.
#[derive(Default)]
pub(super) struct Settled(Mutex<Vec<(WorkRules, Arc<SettledUnder>)>>);

/// The partitions settled under one set of rules.
type SettledUnder = HashMap<TopicPartition, SettledAt>;

impl Settled {
    fn get(&self, rules: &WorkRules) -> Arc<SettledUnder> {
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.iter()
            .find(|(r, _)| r == rules)
            .map(|(_, settled)| settled.clone())
            .unwrap_or_default()
    }

    fn put(&self, rules: WorkRules, settled: SettledUnder) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        kept.retain(|(r, _)| *r != rules);
        kept.insert(0, (rules, Arc::new(settled)));
        kept.truncate(RULES_KEPT);
    }
}

impl Clone for Settled {
    fn clone(&self) -> Settled {
        Settled::default()
    }
}

impl PartialEq for Settled {
    fn eq(&self, _: &Settled) -> bool {
        true
    }
}

impl Eq for Settled {}

impl std::fmt::Debug for Settled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Settled")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{
        AlterTopicConfigs, CreateTopic, DeleteTopic, LookSince, PartitionLooks,
        PartitionLooksSince, Trim,
    };
    use crate::state::Query;
    use crate::types::{
        Commit, CommitBatch, ExtentPiece, ExtentRef, NewTopic, ReplaceExtents, ReplaceRuns,
        RunSwap, TopicId,
    };

    fn work() -> CompactionWork {
        CompactionWork {
            ingest_prefix: "ingest/".into(),
            max_files: 3,
            max_bytes: u64::MAX,
            max_extents: u64::MAX,
            merged_prefix: "merged/".into(),
            segment_bytes: 4_000,
            merge_max_chunks: 3,
            merge_max_age_ms: 1_000,
        }
    }

    /// Another agent's rules: other sizes, tiers, age and limits.
    fn other_work() -> CompactionWork {
        CompactionWork {
            max_files: 5,
            max_bytes: 700,
            max_extents: 9,
            segment_bytes: 2_500,
            merge_max_chunks: 4,
            merge_max_age_ms: 3_000,
            ..work()
        }
    }

    /// The work list by walking every extent of every partition: what
    /// `backlog` answered before it followed changes, and must still.
    fn full_walk(state: &State, work: &CompactionWork, now_ms: i64) -> Backlog {
        let is_ingest = |key: &str| key.starts_with(&work.ingest_prefix);
        let mut chosen: BTreeMap<u64, usize> = BTreeMap::new();
        let mut backlog = Backlog::default();
        let (mut bytes, mut extents) = (0u64, 0u64);
        let mut full = false;
        for (id, object) in state.log.objects.iter().filter(|(_, o)| is_ingest(&o.key)) {
            backlog.ingest_files += 1;
            full = full
                || backlog.files.len() >= work.max_files as usize
                || !backlog.files.is_empty()
                    && (bytes + object.size > work.max_bytes
                        || extents + object.live_extents > work.max_extents);
            if !full {
                chosen.insert(*id, backlog.files.len());
                bytes += object.size;
                extents += object.live_extents;
                backlog.files.push(BacklogFile {
                    key: object.key.clone(),
                    size: object.size,
                    oldest_appended_ms: i64::MAX,
                });
            }
        }
        let inherited = state.configs.topic_defaults();
        for topic in state.log.topics.values() {
            let config = TopicConfig::over(&inherited, &topic.info.configs);
            for (n, p) in topic.partitions.iter().enumerate() {
                let tp = TopicPartition::new(topic.info.id, n as i32);
                let mut run: Vec<ExtentRef> = Vec::new();
                for e in p.extents.values() {
                    match chosen.get(&e.object) {
                        Some(&file) => {
                            let f = &mut backlog.files[file];
                            f.oldest_appended_ms = f.oldest_appended_ms.min(e.appended_ms);
                            run.push(state.extent_ref(e));
                        }
                        None if !run.is_empty() => backlog.runs.push(ExtentRun {
                            partition: tp,
                            extents: std::mem::take(&mut run),
                        }),
                        None => {}
                    }
                }
                if !run.is_empty() {
                    backlog.runs.push(ExtentRun {
                        partition: tp,
                        extents: run,
                    });
                }
                let mut chunks: Vec<(u64, Chunk)> = Vec::new();
                for e in p.extents.values() {
                    match chunks.last_mut() {
                        Some((object, chunk)) if *object == e.object => {
                            chunk.add(e.length, e.appended_ms);
                        }
                        _ => chunks.push((
                            e.object,
                            Chunk::of(
                                work,
                                &state.log.objects[&e.object].key,
                                std::iter::once((e.length, e.appended_ms)),
                            ),
                        )),
                    }
                }
                let chunks: Vec<Chunk> = chunks.into_iter().map(|(_, c)| c).collect();
                if work.merge_run(&chunks, now_ms, config.segment_ms).is_some() && !config.compact {
                    backlog.merge.push(tp);
                }
            }
        }
        backlog
    }

    /// A small deterministic generator (the test needs no more).
    struct Dice(u64);

    impl Dice {
        fn roll(&mut self, below: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % below.max(1)
        }
    }

    fn create(state: &mut State, name: &str, partitions: i32, id: u128) -> TopicId {
        let id = TopicId::from_u128(id);
        state
            .apply(CreateTopic {
                id,
                topic: NewTopic {
                    name: name.into(),
                    partitions,
                    configs: Default::default(),
                },
            })
            .unwrap();
        id
    }

    fn commit(state: &mut State, key: &str, partitions: &[TopicPartition]) {
        let batches = partitions
            .iter()
            .enumerate()
            .map(|(n, tp)| CommitBatch {
                topic_id: tp.topic_id,
                partition: tp.partition,
                position: n as u64 * 100,
                length: 100,
                record_count: 2,
                max_timestamp: 0,
                producer_id: -1,
                producer_epoch: -1,
                base_sequence: -1,
            })
            .collect();
        state
            .apply(Commit {
                object_key: key.into(),
                object_size: 100 * partitions.len() as u64,
                batches,
                not_before_ms: state.clock_ms,
            })
            .unwrap();
    }

    /// `replaced` as one piece of `bytes` at the start of the new object.
    fn one_piece(replaced: &[ExtentRef], bytes: u64) -> Vec<ExtentPiece> {
        vec![ExtentPiece {
            base_offset: replaced[0].base_offset,
            last_offset: replaced[replaced.len() - 1].last_offset,
            max_timestamp: 0,
            position: 0,
            length: bytes,
            appended_ms: replaced.iter().map(|e| e.appended_ms).max().unwrap_or(0),
        }]
    }

    /// Swaps a partition's extents from `from` on (up to `count`) for one
    /// segment of `bytes`.
    fn segment(
        state: &mut State,
        tp: TopicPartition,
        (from, count): (usize, usize),
        bytes: u64,
        key: &str,
    ) {
        let start = state
            .offsets(tp.topic_id, tp.partition)
            .unwrap()
            .log_start_offset;
        let plan = state
            .read_plan(tp.topic_id, tp.partition, start, u64::MAX)
            .unwrap();
        let replaced: Vec<ExtentRef> = plan.extents.into_iter().skip(from).take(count).collect();
        if replaced.is_empty() {
            return;
        }
        state
            .apply(ReplaceExtents {
                topic_id: tp.topic_id,
                partition: tp.partition,
                pieces: one_piece(&replaced, bytes),
                replaced,
                object_key: key.into(),
                object_size: bytes,
                not_before_ms: state.clock_ms,
            })
            .unwrap();
    }

    fn partitions_of(state: &State, topics: &[TopicId]) -> Vec<TopicPartition> {
        topics
            .iter()
            .flat_map(|t| {
                let p = &state.log.topics[&state.log.names_by_id[t]].partitions;
                (0..p.len() as i32).map(|n| TopicPartition::new(*t, n))
            })
            .collect()
    }

    #[test]
    fn the_backlog_is_what_walking_every_extent_finds() {
        let works = [work(), other_work()];
        let work = &works[0];
        let mut dice = Dice(7);
        let mut state = State::default();
        let mut topics = vec![create(&mut state, "a", 4, 1), create(&mut state, "b", 3, 2)];
        let mut next = 0u32;
        let mut answers = 0;
        let (mut looks, mut marks) = (BTreeMap::new(), BTreeMap::new());
        let mut unchanged = 0;
        for step in 0..3_000 {
            next += 1;
            let tps = partitions_of(&state, &topics);
            let tp = tps[dice.roll(tps.len() as u64) as usize];
            match dice.roll(14) {
                0..=3 => {
                    let some: Vec<TopicPartition> =
                        tps.iter().copied().filter(|_| dice.roll(2) == 0).collect();
                    commit(&mut state, &format!("ingest/{next:06}"), &some);
                }
                4 | 5 => {
                    // Move the first files' runs into a merged file.
                    let backlog = state.backlog(work, state.clock_ms);
                    let runs: Vec<RunSwap> = backlog
                        .runs
                        .iter()
                        .filter(|_| dice.roll(3) > 0)
                        .map(|run| RunSwap {
                            partition: run.partition,
                            pieces: one_piece(&run.extents, 150),
                            replaced: run.extents.clone(),
                        })
                        .collect();
                    if !runs.is_empty() {
                        let _ = state.apply(ReplaceRuns {
                            object_key: format!("merged/{next}"),
                            object_size: 1_000,
                            runs,
                            not_before_ms: state.clock_ms,
                        });
                    }
                }
                6 | 7 => {
                    let from = dice.roll(4) as usize;
                    let count = 1 + dice.roll(3) as usize;
                    let oldest = state.clock_ms - dice.roll(5_000) as i64;
                    let key = format!("segment/{step}-a{oldest}-{next}");
                    segment(
                        &mut state,
                        tp,
                        (from, count),
                        100 * (1 + dice.roll(30)),
                        &key,
                    );
                }
                8 => {
                    let offsets = state.offsets(tp.topic_id, tp.partition).unwrap();
                    let span = (offsets.high_watermark - offsets.log_start_offset) as u64;
                    let to = offsets.log_start_offset + dice.roll(span + 1) as i64;
                    state
                        .apply(Trim {
                            partition: tp,
                            offset: to,
                        })
                        .unwrap();
                }
                9 => {
                    // `segment.ms` and `cleanup.policy` come and go.
                    let name = state.log.names_by_id[&tp.topic_id].clone();
                    let (key, value) = match dice.roll(4) {
                        0 => ("segment.ms", "2000"),
                        1 => ("segment.ms", "20000"),
                        2 => ("cleanup.policy", "compact"),
                        _ => ("cleanup.policy", "delete"),
                    };
                    let mut alter = AlterTopicConfigs {
                        name,
                        set: BTreeMap::new(),
                        delete: Vec::new(),
                    };
                    if dice.roll(3) == 0 {
                        alter.delete.push(key.into());
                    } else {
                        alter.set.insert(key.into(), value.into());
                    }
                    state.apply(alter).unwrap();
                }
                10 | 11 => state.clock_ms += dice.roll(1_500) as i64,
                12 if dice.roll(4) == 0 => {
                    // A topic goes, another comes.
                    let gone = topics.remove(0);
                    let name = state.log.names_by_id[&gone].clone();
                    state.apply(DeleteTopic { name }).unwrap();
                    let id = 10 + step as u128;
                    topics.push(create(&mut state, &format!("t{step}"), 2, id));
                }
                _ => {
                    // A snapshot and back: what is derived is rebuilt.
                    let bytes = crate::format::encode_snapshot(&state).unwrap();
                    state = crate::format::decode_snapshot(&bytes).unwrap();
                    state.check_invariants().unwrap();
                }
            }
            // A compactor that keeps its looks sees every partition as it is.
            let tps = partitions_of(&state, &topics);
            let asked = PartitionLooksSince {
                partitions: tps.iter().map(|tp| (*tp, marks.get(tp).copied())).collect(),
            };
            let fresh = PartitionLooks {
                partitions: tps.clone(),
            }
            .query(&state, 0)
            .unwrap();
            let since = asked.query(&state, 0).unwrap();
            for ((tp, fresh), since) in tps.iter().zip(fresh).zip(since) {
                let fresh = fresh.unwrap();
                match since.unwrap() {
                    LookSince::Unchanged => {
                        assert_eq!(looks[tp], fresh, "step {step}");
                        unchanged += 1;
                    }
                    LookSince::Changed { look, mark } => {
                        assert_eq!(look, fresh);
                        looks.insert(*tp, look);
                        marks.insert(*tp, mark);
                    }
                }
            }
            // Agents ask with their own rules, at the leader's time.
            let work = &works[dice.roll(4).min(1) as usize];
            let now_ms = state.clock_ms + dice.roll(3_000) as i64;
            let (found, _) = state.backlog_visiting(work, now_ms);
            assert_eq!(found, full_walk(&state, work, now_ms), "step {step}");
            answers += !(found.runs.is_empty() && found.merge.is_empty()) as u32;
        }
        // The walk met work of both kinds, not only empty lists; and most
        // looks were unchanged.
        assert!(answers > 500, "{answers}");
        assert!(unchanged > 5_000, "{unchanged}");
    }

    #[test]
    fn a_pass_reads_only_the_partitions_that_changed() {
        let work = work();
        let mut state = State::default();
        let topics: Vec<TopicId> = (0..20)
            .map(|t| create(&mut state, &format!("t{t}"), 10, 1 + t as u128))
            .collect();
        let all: Vec<TopicPartition> = topics
            .iter()
            .flat_map(|t| (0..10).map(|n| TopicPartition::new(*t, n)))
            .collect();
        // Every partition: 8 files' worth of data, moved into 8 settled
        // segments (each its own tier of one, so none merges).
        for round in 0..8 {
            commit(&mut state, &format!("ingest/{round}"), &all);
        }
        for (n, tp) in all.iter().enumerate() {
            for s in 0..8 {
                let key = format!("segment/{n}/{s}-a{}-x", s * 10_000);
                segment(&mut state, *tp, (s, 1), work.segment_bytes / 2, &key);
            }
        }
        let stored: u64 = all.len() as u64 * 8;

        let (first, cold) = state.backlog_visiting(&work, 0);
        assert!(first.runs.is_empty() && first.merge.is_empty(), "{first:?}");
        assert_eq!(cold.weighed, all.len() as u64);
        assert_eq!(cold.extents, stored);

        // Nothing changed: the pass reads nothing.
        let (_, idle) = state.backlog_visiting(&work, 5_000);
        assert_eq!(idle, Visited::default());

        // Two partitions get new data: the pass reads those two.
        commit(&mut state, "ingest/new", &all[3..5]);
        let (next, warm) = state.backlog_visiting(&work, 5_000);
        assert_eq!(next.files.len(), 1);
        assert_eq!(next.runs.len(), 2);
        assert_eq!(warm.weighed, 2);
        // Each has 9 extents: read once for its run, once for merges.
        assert_eq!(warm.extents, 2 * 2 * 9);
        assert_eq!(next, full_walk(&state, &work, 5_000));
    }

    #[test]
    fn a_settled_partition_is_weighed_again_when_its_rules_change() {
        let work = work();
        let mut state = State::default();
        let t = create(&mut state, "t", 1, 1);
        let tp = TopicPartition::new(t, 0);
        let segment_ms = |state: &mut State, ms: &str| {
            state
                .apply(AlterTopicConfigs {
                    name: "t".into(),
                    set: BTreeMap::from([("segment.ms".to_string(), ms.to_string())]),
                    delete: Vec::new(),
                })
                .unwrap()
        };
        segment_ms(&mut state, "5000");
        // Three small segments of one tier, appended 10 s apart: they would
        // merge (three of a tier) but for `segment.ms`.
        for n in 0..3 {
            state.clock_ms = n * 10_000;
            commit(&mut state, &format!("ingest/{n}"), &[tp]);
            let key = format!("segment/{n}-a{}-x", state.clock_ms);
            segment(&mut state, tp, (n as usize, 1), 100, &key);
        }
        let now_ms = state.clock_ms;
        let (settled, _) = state.backlog_visiting(&work, now_ms);
        assert!(settled.merge.is_empty());
        let (_, again) = state.backlog_visiting(&work, now_ms);
        assert_eq!(again.weighed, 0, "settled");

        segment_ms(&mut state, "60000");
        let (found, visited) = state.backlog_visiting(&work, now_ms);
        assert_eq!(visited.weighed, 1);
        assert_eq!(found.merge, [tp]);
        assert_eq!(found, full_walk(&state, &work, now_ms));
    }

    #[test]
    fn a_merged_chunk_is_weighed_again_when_it_could_merge_by_age() {
        let work = work();
        let mut state = State::default();
        let t = create(&mut state, "t", 1, 1);
        let tp = TopicPartition::new(t, 0);
        state.clock_ms = 5_000;
        commit(&mut state, "ingest/0", &[tp]);
        let runs = state.backlog(&work, 5_000).runs;
        let swaps = runs
            .iter()
            .map(|run| RunSwap {
                partition: run.partition,
                pieces: one_piece(&run.extents, 100),
                replaced: run.extents.clone(),
            })
            .collect();
        state
            .apply(ReplaceRuns {
                object_key: "merged/0".into(),
                object_size: 100,
                runs: swaps,
                not_before_ms: state.clock_ms,
            })
            .unwrap();
        // One small merged chunk, appended at 5,000: it merges at 6,000.
        let due = 5_000 + work.merge_max_age_ms;
        let (young, _) = state.backlog_visiting(&work, due - 500);
        assert!(young.merge.is_empty());
        let (_, before) = state.backlog_visiting(&work, due - 1);
        assert_eq!(before.weighed, 0);
        let (old, at) = state.backlog_visiting(&work, due);
        assert_eq!(at.weighed, 1);
        assert_eq!(old.merge, [tp]);
    }

    #[test]
    fn holders_that_do_not_add_up_make_the_pass_read_every_partition() {
        let work = work();
        let mut state = State::default();
        let t = create(&mut state, "t", 3, 1);
        let tps: Vec<TopicPartition> = (0..3).map(|n| TopicPartition::new(t, n)).collect();
        commit(&mut state, "ingest/0", &tps);
        let id = state.log.ledger.live()["ingest/0"];
        let object = state.log.objects.get_mut(&id).unwrap();
        object.holders = Holders::of(BTreeMap::from([(tps[0], 1)]));
        let (found, _) = state.backlog_visiting(&work, 0);
        assert_eq!(found.runs.len(), 3);
        assert_eq!(found, full_walk(&state, &work, 0));
    }
}
