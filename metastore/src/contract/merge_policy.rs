//! Compaction's merge policy: which runs of a partition's chunks are worth
//! merging into a segment, weighed from a [`CompactionWork`]'s settings.
//! Both ends use it: the state's backlog query lists the partitions worth a
//! merge, and the compactor picks the runs it merges.

use crate::contract::ops::CompactionWork;

/// One partition's bytes in one object (consecutive extents), as
/// [`CompactionWork::merge_run`] weighs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub kind: ChunkKind,
    pub bytes: u64,
    /// Extents describing it: a segment of more than one was written
    /// before segments had an offset index (version 1).
    pub extents: u32,
    /// When its oldest data was appended (for a segment, as its key says;
    /// see [`segment_first_appended_ms`]), and its newest.
    pub oldest_appended_ms: i64,
    pub newest_appended_ms: i64,
}

impl Chunk {
    /// The chunk of consecutive `extents` (`(length, appended_ms)`) of the
    /// object `key`.
    pub fn of(
        work: &CompactionWork,
        key: &str,
        extents: impl Iterator<Item = (u64, i64)>,
    ) -> Chunk {
        let mut chunk = Chunk {
            kind: work.kind_of(key),
            bytes: 0,
            extents: 0,
            oldest_appended_ms: i64::MAX,
            newest_appended_ms: i64::MIN,
        };
        for (length, appended_ms) in extents {
            chunk.add(length, appended_ms);
        }
        if let Some(first) = segment_first_appended_ms(key) {
            chunk.oldest_appended_ms = chunk.oldest_appended_ms.min(first);
        }
        chunk
    }

    /// One more extent of the chunk.
    pub fn add(&mut self, length: u64, appended_ms: i64) {
        self.bytes = self.bytes.saturating_add(length);
        self.extents = self.extents.saturating_add(1);
        self.oldest_appended_ms = self.oldest_appended_ms.min(appended_ms);
        self.newest_appended_ms = self.newest_appended_ms.max(appended_ms);
    }
}

/// Which kind of object a [`Chunk`] lies in, by its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkKind {
    Ingest,
    Merged,
    Segment,
}

/// When the oldest data of the segment `key` was appended, as compaction
/// names it (`.../<base offset>-a<ms>-<id>`, `floe_storage::keys`): a
/// segment's extent keeps only its newest append time, which retention
/// needs, and merging needs the oldest too (see
/// [`CompactionWork::merge_run`]). `None` for other keys, and for segments
/// named before.
pub fn segment_first_appended_ms(key: &str) -> Option<i64> {
    let name = key.rsplit('/').next()?;
    let mut parts = name.split('-');
    let (_base, stamp) = (parts.next()?, parts.next()?);
    stamp.strip_prefix('a')?.parse().ok()
}

impl CompactionWork {
    /// Merged chunks in a row holding less than this of a partition wait
    /// for more (within `merge_max_chunks` and `merge_max_age_ms`): half a
    /// segment, the size at which a segment is final (rule 2 of
    /// [`CompactionWork::merge_run`] merges only smaller ones). So a byte
    /// of a busy partition is written three times (ingest file, merged
    /// file, segment), not rewritten again by a size tier.
    pub fn small_below_bytes(&self) -> u64 {
        self.segment_bytes / 2
    }

    /// The kind of the object `key` names.
    pub fn kind_of(&self, key: &str) -> ChunkKind {
        if key.starts_with(&self.ingest_prefix) {
            ChunkKind::Ingest
        } else if key.starts_with(&self.merged_prefix) {
            ChunkKind::Merged
        } else {
            ChunkKind::Segment
        }
    }

    /// The first run of a partition's `chunks` (in offset order) worth
    /// merging into one segment, up to `segment_bytes` (its first chunk
    /// whatever its size):
    ///
    /// 1. Chunks of merged files in a row, when they make at least half a
    ///    segment ([`CompactionWork::small_below_bytes`]), are
    ///    `merge_max_chunks` many, the oldest is `merge_max_age_ms` old
    ///    (even alone, so no merged file stays pinned), or the run cannot
    ///    grow any more (the size or span limit, or a segment, ends it:
    ///    waiting would gain nothing). So each segment is written once per
    ///    `segment_bytes / 2` of a partition's data, or once per age, never
    ///    per merged file: the writes (PUTs) stay proportional to bytes, not
    ///    to partitions times files.
    /// 2. Else, small segments (under half a segment) of one extent by size
    ///    tiers: a
    ///    segment's tier is its size's logarithm in base `merge_max_chunks`
    ///    (`many`), and segments in a row of tier T or lower, holding `many`
    ///    of tier T, merge (into tier T + 1 or more); so do `many` in a row of
    ///    mixed tiers none of which outweighs the others together, and two or
    ///    more making half a segment. So a byte is rewritten when its segment
    ///    grows by a tier or at least doubles (a few times at the default
    ///    `many` of 64), and a partition's extents stay about its retained
    ///    bytes over half a segment, plus a few score small segments.
    ///    A run never spans more than `max_span_ms` from its oldest append
    ///    to its newest (the topic's `segment.ms`): retention drops a
    ///    segment when its newest record expires, so merged old data
    ///    outlives `retention.ms` by at most that, as in Kafka, whose
    ///    segments roll after `segment.ms`. Age alone never merges segments:
    ///    a quiet partition's lone small segment would be rewritten every
    ///    pass. (Segments written before the offset index, in extents of
    ///    about 1 MiB, are left to age out under retention: rewriting every
    ///    retained byte at once on upgrade would cost more than the extents.)
    pub fn merge_run(
        &self,
        chunks: &[Chunk],
        now_ms: i64,
        max_span_ms: i64,
    ) -> Option<std::ops::Range<usize>> {
        let many = self.merge_max_chunks.max(2) as usize;
        let small = self.small_below_bytes();
        let merged = self.first_run(
            chunks,
            max_span_ms,
            |c| c.kind == ChunkKind::Merged,
            |run| {
                let aged = now_ms.saturating_sub(run.oldest_appended_ms) >= self.merge_max_age_ms;
                aged || run.bytes >= small || run.chunks.len() >= many || run.closed
            },
        );
        if merged.is_some() {
            return merged;
        }
        let half = self.segment_bytes / 2;
        let tier = |c: &Chunk| c.bytes.max(1).ilog(many as u64);
        let eligible = |c: &Chunk| c.kind == ChunkKind::Segment && c.extents == 1 && c.bytes < half;
        let mut tiers: Vec<u32> = chunks.iter().filter(|c| eligible(c)).map(tier).collect();
        tiers.sort_unstable();
        tiers.dedup();
        tiers.into_iter().find_map(|top| {
            self.first_run(
                chunks,
                max_span_ms,
                |c| eligible(c) && tier(c) <= top,
                |run| {
                    let at_top = run.chunks.iter().filter(|c| tier(c) == top).count();
                    // `many` in a row of mixed tiers merge too, unless one of
                    // them outweighs the rest (it waits for its own tier).
                    let len = run.chunks.len();
                    let mixed = len >= many && run.largest.saturating_mul(2) <= run.bytes;
                    at_top >= many || mixed || (len >= 2 && run.bytes >= half)
                },
            )
        })
    }

    /// The first run of consecutive chunks that `fits` takes, each grown as
    /// far as `segment_bytes` (past its first chunk) and `max_span_ms` from
    /// its oldest append to its newest allow, that is `worth` merging.
    fn first_run(
        &self,
        chunks: &[Chunk],
        max_span_ms: i64,
        fits: impl Fn(&Chunk) -> bool,
        worth: impl Fn(&Run) -> bool,
    ) -> Option<std::ops::Range<usize>> {
        let mut start = 0;
        while start < chunks.len() {
            if !fits(&chunks[start]) {
                start += 1;
                continue;
            }
            let (mut end, mut bytes, mut largest) = (start, 0u64, 0u64);
            let (mut oldest, mut newest) = (i64::MAX, i64::MIN);
            let mut capped = false;
            while end < chunks.len() && fits(&chunks[end]) {
                let c = &chunks[end];
                let span = newest
                    .max(c.newest_appended_ms)
                    .saturating_sub(oldest.min(c.oldest_appended_ms));
                if end > start
                    && (bytes.saturating_add(c.bytes) > self.segment_bytes || span > max_span_ms)
                {
                    capped = true;
                    break;
                }
                bytes = bytes.saturating_add(c.bytes);
                largest = largest.max(c.bytes);
                oldest = oldest.min(c.oldest_appended_ms);
                newest = newest.max(c.newest_appended_ms);
                end += 1;
            }
            // Chunks of newer ingest files may still join the run; a size
            // or span limit, or a segment after it, ends it for good.
            let closed = capped
                || chunks
                    .get(end)
                    .is_some_and(|c| c.kind == ChunkKind::Segment);
            let run = Run {
                chunks: &chunks[start..end],
                bytes,
                largest,
                oldest_appended_ms: oldest,
                closed,
            };
            if worth(&run) {
                return Some(start..end);
            }
            start = end.max(start + 1);
        }
        None
    }
}

/// A run of consecutive chunks, as [`CompactionWork::merge_run`] weighs it.
struct Run<'a> {
    chunks: &'a [Chunk],
    bytes: u64,
    /// The largest chunk's bytes.
    largest: u64,
    oldest_appended_ms: i64,
    /// It cannot grow: a size or span limit, or a segment, ends it.
    closed: bool,
}
