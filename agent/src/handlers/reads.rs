//! Reading stored batches back: byte ranges of objects through the cache, with
//! base offsets patched in (a window at a time, through a segment's offset
//! index: `extent_reader.rs`). Batches are never decompressed here; their
//! CRCs are checked, since the cache's bytes come from memory, disk or a peer.

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use floe_cache::Reading;
use floe_metastore::ExtentRef;
use floe_protocol::batch::skip_batches_before;

use crate::broker::Broker;
use crate::read::extent_reader::{
    ByteRanges, ExtentReader, LAND_ABOVE, LANDING_SLACK, MIN_WINDOW, Source,
};

/// About how many bytes of a partition follow offset `from`, up to
/// `high_watermark`, at `extent`'s bytes per record.
pub fn bytes_behind(extent: &ExtentRef, from: i64, high_watermark: i64) -> u64 {
    let records = (extent.last_offset.saturating_sub(extent.base_offset))
        .saturating_add(1)
        .max(1) as u128;
    let behind = high_watermark.saturating_sub(from).max(0) as u128;
    (behind * extent.length as u128 / records).min(u64::MAX as u128) as u64
}

/// An extent of a shared object smaller than this share of a block is read
/// by whole blocks when it catches up (at most this many extents' GETs a
/// block, two for one across a boundary).
pub const SMALL_EXTENT_SHARE: u64 = 16;

/// What places a fetch's reads in the cache (see [`reading_for`]).
#[derive(Debug, Clone, Copy)]
pub struct Placing {
    /// `cache_catch_up_lag`.
    pub lag_bytes: u64,
    /// `cache_block_bytes`.
    pub block_bytes: u64,
    /// Partitions the fetch reads at once.
    pub partitions: usize,
}

/// Whether reading `extent` of a partition that ends at `high_watermark`
/// catches up: the bytes after it, times the partitions the fetch reads,
/// make more than the lag. Partitions written together share ingest files,
/// so a consumer behind by that much in each of them reads that far back in
/// the files, further than the cache's main pool holds, though each
/// partition alone lags little; one partition reset to its start does not
/// make the fetch's others catch up.
///
/// Such reads use the cache's catch-up pool. An extent of a shared object
/// (an ingest or merged file) smaller than a block reads only its own bytes
/// of a block no pool holds ([`Reading::CatchUpShared`]); a segment (one
/// partition's) or a larger extent fills its blocks itself, and reads them
/// whole. So does an extent smaller than [`SMALL_EXTENT_SHARE`] of a block:
/// a GET costs more than the bytes it brings, and thousands of small
/// partitions would make a block thousands of GETs.
pub fn reading_for(extent: &ExtentRef, high_watermark: i64, placing: Placing) -> Reading {
    let after = bytes_behind(extent, extent.last_offset.saturating_add(1), high_watermark);
    let fetch_wide = after.saturating_mul(placing.partitions.max(1) as u64);
    let shared = !extent
        .object_key
        .starts_with(floe_storage::keys::SEGMENT_PREFIX)
        && extent.length < placing.block_bytes
        && extent.length.saturating_mul(SMALL_EXTENT_SHARE) >= placing.block_bytes;
    if fetch_wide <= placing.lag_bytes {
        Reading::Tail
    } else if shared {
        Reading::CatchUpShared
    } else {
        Reading::CatchUp
    }
}

/// The batches of `extents` from the one holding `from` on, with offsets
/// set, until about `max_bytes` of batches at or past `from` are read (whole
/// batches; the first one whole however long). `high_watermark`, with the
/// number of `partitions` the fetch reads, places each extent in the tail
/// or not (see [`reading_for`]); `i64::MAX` reads them all as catch-up
/// reads.
///
/// A large extent (a segment) is not read whole: a read starting inside it
/// lands through the segment's offset index, and reads go window by window
/// (see [`ExtentReader`]), so what is read and held is about `max_bytes`
/// plus [`LANDING_SLACK`], however large the segment: at most
/// [`charge`]`(extents, from, max_bytes)`.
pub async fn read_extents(
    broker: &Broker,
    extents: &[ExtentRef],
    from: i64,
    high_watermark: i64,
    max_bytes: usize,
    partitions: usize,
) -> Result<Bytes, floe_cache::CacheError> {
    let placing = Placing {
        lag_bytes: broker.config.cache_catch_up_lag.as_u64(),
        block_bytes: broker.config.cache_block_bytes.as_u64(),
        partitions,
    };
    let mut out = BytesMut::new();
    for extent in extents {
        if out.len() >= max_bytes {
            break;
        }
        let ranges = CacheRanges {
            broker,
            reading: reading_for(extent, high_watermark, placing),
        };
        let mut reader = ExtentReader::new(&ranges, extent);
        reader.land_at_offset(from).await?;
        while out.len() < max_bytes {
            let want = (max_bytes - out.len()) as u64;
            let Some(mut window) = reader.next(want).await? else {
                break;
            };
            let skip = skip_batches_before(&window, from);
            let window = window.split_off(skip);
            if out.is_empty() && window.len() as u64 >= want {
                // No copy when one window is the whole answer (a read
                // after landing, mostly); a buffer shared with the skipped
                // bytes is never grown.
                out = window;
            } else {
                out.extend_from_slice(&window);
            }
        }
        if reader.missed {
            broker.metrics.index_misses.inc();
        }
    }
    Ok(out.freeze())
}

/// What [`read_extents`] may hold at once reading `extents` from `from` for
/// `max_bytes` (beside one batch larger than that, which KIP-74 lets
/// through): small extents whole (bytes before the fetch offset included),
/// large ones by window, until `max_bytes` are covered, and for a read
/// landing inside a segment its landing slack and its index (raw and
/// parsed: about twice what follows the segment's chunk in its object).
/// Fetch takes this from the agent's response budget before reading.
pub fn charge(extents: &[ExtentRef], from: i64, max_bytes: usize) -> usize {
    let mut charged = 0u64;
    let max_bytes = max_bytes as u64;
    for (n, extent) in extents.iter().enumerate() {
        if charged >= max_bytes {
            break;
        }
        if extent.length <= LAND_ABOVE {
            charged += extent.length;
            continue;
        }
        let window = max_bytes.saturating_sub(charged).max(MIN_WINDOW);
        charged += extent.length.min(window);
        let lands = n == 0
            && from > extent.base_offset
            && extent
                .object_key
                .starts_with(floe_storage::keys::SEGMENT_PREFIX);
        if lands {
            let index = extent
                .object_size
                .saturating_sub(extent.position.saturating_add(extent.length));
            charged = charged
                .saturating_add(LANDING_SLACK)
                .saturating_add(index.saturating_mul(2));
        }
    }
    charged.min(usize::MAX as u64) as usize
}

/// Ranges of objects through the agent's block cache.
pub struct CacheRanges<'a> {
    pub broker: &'a Broker,
    pub reading: Reading,
}

impl ByteRanges for CacheRanges<'_> {
    async fn read(
        &self,
        key: &str,
        object_size: u64,
        range: Range<u64>,
        source: Source,
    ) -> Result<BytesMut, floe_cache::CacheError> {
        let mut out = BytesMut::with_capacity((range.end - range.start) as usize);
        let cache = &self.broker.cache;
        match source {
            Source::Cache => {
                cache
                    .read_into(key, object_size, range, &mut out, self.reading)
                    .await?
            }
            // Blocks found wrong are dropped from every pool and read from
            // the object store, not asked of a peer.
            Source::Store => {
                cache
                    .reread_into(key, object_size, range, &mut out, self.reading)
                    .await?
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_far_behind_the_end_catch_up() {
        // 100 records of 10 bytes each, in an ingest file.
        let extent = ExtentRef {
            base_offset: 0,
            last_offset: 99,
            max_timestamp: 0,
            object_key: "ingest/o".into(),
            object_size: 4000,
            position: 0,
            length: 1000,
            appended_ms: 0,
        };
        let placing = |lag_bytes, partitions| Placing {
            lag_bytes,
            block_bytes: 4096,
            partitions,
        };
        let alone = |lag| placing(lag, 1);
        assert_eq!(reading_for(&extent, 100, alone(0)), Reading::Tail);
        assert_eq!(reading_for(&extent, 200, alone(1000)), Reading::Tail);
        assert_eq!(
            reading_for(&extent, 201, alone(1000)),
            Reading::CatchUpShared
        );
        assert_eq!(
            reading_for(&extent, i64::MAX, placing(u64::MAX - 1, usize::MAX)),
            Reading::CatchUpShared
        );
        // A high watermark behind the extent (a stale view) is the tail.
        assert_eq!(reading_for(&extent, 50, alone(0)), Reading::Tail);
        // A segment is one partition's: its blocks are read whole; so are
        // those of an extent as large as a block.
        let segment = ExtentRef {
            object_key: format!("{}t/0/0", floe_storage::keys::SEGMENT_PREFIX),
            ..extent.clone()
        };
        assert_eq!(reading_for(&segment, 201, alone(1000)), Reading::CatchUp);
        assert_eq!(reading_for(&segment, 200, alone(1000)), Reading::Tail);
        let large = ExtentRef {
            length: 4096,
            ..extent.clone()
        };
        assert_eq!(reading_for(&large, 130, alone(1000)), Reading::CatchUp);
        let small = ExtentRef {
            length: 4096 / SMALL_EXTENT_SHARE - 1,
            ..extent.clone()
        };
        assert_eq!(reading_for(&small, i64::MAX, alone(1000)), Reading::CatchUp);
        // Behind by 500 bytes in each of a fetch's 3 partitions: 1,500.
        assert_eq!(reading_for(&extent, 150, placing(1000, 2)), Reading::Tail);
        assert_eq!(
            reading_for(&extent, 150, placing(1000, 3)),
            Reading::CatchUpShared
        );
        // A partition at its end stays the tail, whatever the others lag.
        assert_eq!(
            reading_for(&extent, 100, placing(1000, 1000)),
            Reading::Tail
        );
        assert_eq!(bytes_behind(&extent, 40, 100), 600);
    }

    #[test]
    fn a_fetch_is_charged_what_it_may_hold() {
        const MIB: u64 = 1024 * 1024;
        let extent = |key: &str, base: i64, length: u64, object_size: u64| ExtentRef {
            base_offset: base,
            last_offset: base + 999,
            max_timestamp: 0,
            object_key: key.into(),
            object_size,
            position: 0,
            length,
            appended_ms: 0,
        };
        // Small extents whole, until the fetch's bytes are covered.
        let small: Vec<_> = (0..4)
            .map(|n| extent("ingest/a", n * 1000, MIB, 8 * MIB))
            .collect();
        assert_eq!(charge(&small, 500, 2 * MIB as usize), 2 * MIB as usize);
        assert_eq!(charge(&small, 500, 1), MIB as usize);
        // A read landing inside a segment: its window, the landing slack,
        // and its index twice (what follows the chunk: 100 KiB here).
        let segment = extent("segment/s", 0, 200 * MIB, 200 * MIB + 100 * 1024);
        let landing = charge(std::slice::from_ref(&segment), 500, MIB as usize);
        assert_eq!(landing as u64, MIB + LANDING_SLACK + 200 * 1024);
        // From the segment's start nothing lands; a window is at least
        // MIN_WINDOW; an ingest file's long extent has no index to charge.
        assert_eq!(
            charge(std::slice::from_ref(&segment), 0, MIB as usize) as u64,
            MIB
        );
        assert_eq!(
            charge(std::slice::from_ref(&segment), 0, 1) as u64,
            MIN_WINDOW
        );
        let ingest = extent("ingest/b", 0, 6 * MIB, 8 * MIB);
        assert_eq!(
            charge(std::slice::from_ref(&ingest), 500, MIB as usize) as u64,
            MIB
        );
    }
}
