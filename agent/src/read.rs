//! Reading stored batches back: byte ranges of objects through the cache, with
//! base offsets patched in. Batches are never decompressed here; their CRCs
//! are checked, since the cache's bytes come from memory, disk or a peer.

use std::ops::Range;

use bytes::{Bytes, BytesMut};
use floe_cache::Reading;
use floe_metastore::ExtentRef;
use floe_protocol::batch::{
    LOG_OVERHEAD, batches_hold, last_offset_of, patch_base_offsets, skip_batches_before,
    whole_batches_within,
};
use floe_storage::ingest::{FOOTER_LEN, Footer};
use floe_storage::segment_index::{IndexEntry, OffsetIndex, TRAILER_LEN};

use crate::broker::Broker;

/// Whether reading `extent` of a partition that ends at `high_watermark`
/// catches up: the records after it, at its own bytes per record, make
/// more than `lag_bytes`. Such reads use the cache's catch-up pool.
pub fn reading_for(extent: &ExtentRef, high_watermark: i64, lag_bytes: u64) -> Reading {
    let records = (extent.last_offset.saturating_sub(extent.base_offset))
        .saturating_add(1)
        .max(1) as u64;
    let behind = high_watermark
        .saturating_sub(extent.last_offset.saturating_add(1))
        .max(0) as u64;
    let bytes_behind = behind as u128 * extent.length as u128 / records as u128;
    if bytes_behind > lag_bytes as u128 {
        Reading::CatchUp
    } else {
        Reading::Tail
    }
}

/// An extent longer than this, read from inside, is entered through its
/// object's offset index (segments have one); a shorter one is read from
/// its start. Extents of ingest and merged files, and of segments written
/// before the index, are at most about this long.
const LAND_ABOVE: u64 = 1024 * 1024;
/// What a read of a large extent takes at a time, beside what it still
/// wants: enough to cross the gap between index entries.
const WINDOW: u64 = 256 * 1024;

/// The batches of `extents` from the one holding `from` on, with offsets
/// set, until about `max_bytes` of batches at or past `from` are read (whole
/// batches; the first one whole however long). `high_watermark` places
/// each extent in the tail or not (see [`reading_for`]); `i64::MAX` reads
/// them all as catch-up reads.
///
/// A large extent (a segment) is not read whole: a read starting inside it
/// lands through the segment's offset index, and reads go window by window,
/// so what is read and held is about `max_bytes` plus an index interval,
/// however large the segment.
pub async fn read_extents(
    broker: &Broker,
    extents: &[ExtentRef],
    from: i64,
    high_watermark: i64,
    max_bytes: usize,
) -> Result<Bytes, floe_cache::CacheError> {
    let lag = broker.config.cache_catch_up_lag.as_u64();
    let mut out = BytesMut::new();
    for extent in extents {
        if out.len() >= max_bytes {
            break;
        }
        let reading = reading_for(extent, high_watermark, lag);
        let mut reader = ExtentReader::new(broker, extent, reading);
        if from > extent.base_offset {
            reader.land_at_offset(from).await;
        }
        while out.len() < max_bytes {
            let want = (max_bytes - out.len()) as u64;
            let Some(window) = reader.next(want).await? else {
                break;
            };
            let skip = skip_batches_before(&window, from);
            out.extend_from_slice(&window[skip..]);
        }
    }
    Ok(out.freeze())
}

/// Reads one extent's batches, checked and with their offsets set, a window
/// at a time from where it starts or from where its object's offset index
/// lands it.
pub struct ExtentReader<'a> {
    broker: &'a Broker,
    extent: &'a ExtentRef,
    reading: Reading,
    /// The next byte to read, at a batch boundary.
    position: u64,
    /// The offset of the batch at `position`.
    next_offset: i64,
    /// An offset the batch at `position` must carry: set after landing
    /// through the index, which is checked, never trusted.
    landed: Option<i64>,
}

impl<'a> ExtentReader<'a> {
    pub fn new(broker: &'a Broker, extent: &'a ExtentRef, reading: Reading) -> Self {
        ExtentReader {
            broker,
            extent,
            reading,
            position: extent.position,
            next_offset: extent.base_offset,
            landed: None,
        }
    }

    fn end(&self) -> u64 {
        self.extent.position + self.extent.length
    }

    /// Moves to the last index entry at or before `offset`, if the extent is
    /// large and its object has an index.
    pub async fn land_at_offset(&mut self, offset: i64) {
        if self.extent.length <= LAND_ABOVE {
            return;
        }
        let range = self.position..self.end();
        if let Some(entry) = self
            .index()
            .await
            .and_then(|index| index.by_offset(range, offset))
        {
            self.land(entry);
        }
    }

    /// Moves to the index entry before which every batch is below
    /// `timestamp` or, if `from` lies further, to the last entry at or
    /// before `from` (if the extent is large and its object has an index).
    pub async fn land_at_timestamp(&mut self, timestamp: i64, from: i64) {
        if self.extent.length <= LAND_ABOVE {
            return;
        }
        let Some(index) = self.index().await else {
            return;
        };
        let range = self.position..self.end();
        let by_time = index.by_timestamp(range.clone(), timestamp);
        let by_offset = index.by_offset(range.clone(), from);
        let entry = match (by_time, by_offset) {
            (Some(a), Some(b)) => Some(if a.position >= b.position { a } else { b }),
            (a, b) => a.or(b),
        };
        if let Some(entry) = entry {
            self.land(entry);
        }
    }

    fn land(&mut self, entry: IndexEntry) {
        self.position = entry.position;
        self.next_offset = entry.offset;
        self.landed = Some(entry.offset);
    }

    /// The offset index of the extent's object: its footer, then the index,
    /// both through the cache. `None` for objects without one (version 1),
    /// or one that cannot be read or fails its checks (logged): the reader
    /// then reads from the extent's start.
    async fn index(&self) -> Option<OffsetIndex> {
        let (key, size) = (&self.extent.object_key, self.extent.object_size);
        let tail_len = (FOOTER_LEN + TRAILER_LEN) as u64;
        let cache = &self.broker.cache;
        let mut tail = BytesMut::new();
        let read = cache
            .read_into(
                key,
                size,
                size.saturating_sub(tail_len)..size,
                &mut tail,
                self.reading,
            )
            .await;
        let unusable = |reason: String| {
            tracing::warn!(object = %key, %reason, "a segment's offset index cannot be used; reading from the extent's start");
            None
        };
        if let Err(e) = read {
            return unusable(e.to_string());
        }
        let footer = match Footer::parse(&tail) {
            Ok(footer) => footer,
            Err(e) => return unusable(e.to_string()),
        };
        let location = footer.offset_index(&tail)?;
        let index_end = location.offset.checked_add(location.len());
        if index_end != Some(size.saturating_sub(tail_len)) {
            return unusable("the index does not end at the footer".into());
        }
        let mut bytes = BytesMut::new();
        let range = location.offset..location.offset + location.len();
        if let Err(e) = cache
            .read_into(key, size, range, &mut bytes, self.reading)
            .await
        {
            return unusable(e.to_string());
        }
        match OffsetIndex::parse(&bytes, &location) {
            Ok(index) => Some(index),
            Err(e) => unusable(e.to_string()),
        }
    }

    /// The next whole batches, about `want` bytes of them (one at least, however
    /// long), checked and with offsets set; `None` at the extent's end.
    pub async fn next(&mut self, want: u64) -> Result<Option<BytesMut>, floe_cache::CacheError> {
        let end = self.end();
        if self.position >= end {
            return Ok(None);
        }
        // An extent no longer than LAND_ABOVE is read whole, as it always was.
        let size = if self.extent.length <= LAND_ABOVE {
            end - self.position
        } else {
            want.saturating_add(WINDOW).min(end - self.position)
        };
        // Blocks come from memory, disk or a peer: what reaches a consumer
        // must be what was stored. Bytes that are not whole batches with
        // their CRCs are read again from the object store; if the store's
        // bytes fail too, the read fails (the metastore's ranges always hold
        // whole batches: never hand out a torn one).
        let mut window = match self.window(size, Source::Cache).await? {
            Some(window) => window,
            None => {
                tracing::error!(object = %self.extent.object_key, position = self.position,
                    "cached bytes are not the batches stored; reading them from the object store");
                self.window(size, Source::Store)
                    .await?
                    .ok_or_else(|| self.torn())?
            }
        };
        if let Some(offset) = self.landed.take()
            && stored_base_offset(&window) != Some(offset)
        {
            // The index sent us to a batch that is not the one it names: it
            // cannot be trusted; read the extent from its start instead.
            tracing::error!(object = %self.extent.object_key, landed = offset, position = self.position,
                "a segment's offset index points at the wrong batch; reading from the extent's start");
            self.broker.metrics.index_misses.inc();
            self.position = self.extent.position;
            self.next_offset = self.extent.base_offset;
            return Box::pin(self.next(want)).await;
        }
        patch_base_offsets(&mut window, self.next_offset);
        self.position += window.len() as u64;
        self.next_offset = last_offset_of(&window).map_or(self.next_offset, |last| last + 1);
        Ok(Some(window))
    }

    /// The whole batches of about `size` bytes from `position` (the first
    /// batch whole, however long), if they hold their CRCs.
    async fn window(
        &self,
        size: u64,
        source: Source,
    ) -> Result<Option<BytesMut>, floe_cache::CacheError> {
        let end = self.end();
        let range = self.position..self.position + size;
        let at_end = range.end == end;
        let mut window = self.read(range, source).await?;
        let whole = match at_end {
            true => window.len(),
            false => whole_batches_within(&window, window.len(), false),
        };
        if whole == 0 && !at_end {
            // One batch longer than the window: read to its end.
            let Some(length) = first_batch_len(&window).filter(|&l| l <= end - self.position)
            else {
                return Ok(None);
            };
            window = self
                .read(self.position..self.position + length, source)
                .await?;
        } else {
            window.truncate(whole);
        }
        Ok(batches_hold(&window).then_some(window))
    }

    async fn read(
        &self,
        range: Range<u64>,
        source: Source,
    ) -> Result<BytesMut, floe_cache::CacheError> {
        let (key, size) = (&self.extent.object_key, self.extent.object_size);
        let mut out = BytesMut::with_capacity((range.end - range.start) as usize);
        let cache = &self.broker.cache;
        match source {
            Source::Cache => {
                cache
                    .read_into(key, size, range, &mut out, self.reading)
                    .await?
            }
            Source::Store => {
                cache
                    .reread_into(key, size, range, &mut out, self.reading)
                    .await?
            }
        }
        Ok(out)
    }

    fn torn(&self) -> floe_cache::CacheError {
        floe_cache::CacheError::Load {
            key: self.extent.object_key.clone(),
            block: self.position / self.broker.cache.block_bytes(),
            reason: "the cached and the stored bytes both fail their batches' checks".into(),
        }
    }
}

#[derive(Clone, Copy)]
enum Source {
    Cache,
    Store,
}

/// The length of the batch `window` starts with, from its header.
fn first_batch_len(window: &[u8]) -> Option<u64> {
    let length = i32::from_be_bytes(window.get(8..12)?.try_into().ok()?);
    (length > 0).then(|| LOG_OVERHEAD as u64 + length as u64)
}

/// The base offset the first batch of `window` was stored with (a segment's
/// batches carry their real ones).
fn stored_base_offset(window: &[u8]) -> Option<i64> {
    Some(i64::from_be_bytes(window.get(..8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_far_behind_the_end_catch_up() {
        // 100 records of 10 bytes each.
        let extent = ExtentRef {
            base_offset: 0,
            last_offset: 99,
            max_timestamp: 0,
            object_key: "o".into(),
            object_size: 1000,
            position: 0,
            length: 1000,
            appended_ms: 0,
        };
        assert_eq!(reading_for(&extent, 100, 0), Reading::Tail);
        assert_eq!(reading_for(&extent, 200, 1000), Reading::Tail);
        assert_eq!(reading_for(&extent, 201, 1000), Reading::CatchUp);
        assert_eq!(
            reading_for(&extent, i64::MAX, u64::MAX - 1),
            Reading::CatchUp
        );
        // A high watermark behind the extent (a stale view) is the tail.
        assert_eq!(reading_for(&extent, 50, 0), Reading::Tail);
    }
}
