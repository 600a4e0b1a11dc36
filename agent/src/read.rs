//! Reading stored batches back: byte ranges of objects through the cache, with
//! base offsets patched in. Batches are never decompressed here; their CRCs
//! are checked, since the cache's bytes come from memory, disk or a peer.

use bytes::{Bytes, BytesMut};
use floe_cache::Reading;
use floe_metastore::ExtentRef;
use floe_protocol::batch::{batches_hold, patch_base_offsets, skip_batches_before};

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

/// The batches of `extents` from the one holding `from` on, with offsets
/// set. `high_watermark` places each extent in the tail or not (see
/// [`reading_for`]); `i64::MAX` reads them all as catch-up reads.
pub async fn read_extents(
    broker: &Broker,
    extents: &[ExtentRef],
    from: i64,
    high_watermark: i64,
) -> Result<Bytes, floe_cache::CacheError> {
    let lag = broker.config.cache_catch_up_lag.as_u64();
    let mut out = BytesMut::with_capacity(extents.iter().map(|e| e.length as usize).sum());
    for extent in extents {
        let start = out.len();
        let range = extent.position..extent.position + extent.length;
        let reading = reading_for(extent, high_watermark, lag);
        let cache = &broker.cache;
        cache
            .read_into(
                &extent.object_key,
                extent.object_size,
                range.clone(),
                &mut out,
                reading,
            )
            .await?;
        // Blocks came from memory, disk or a peer: what reaches a consumer
        // must be what was stored. An extent that is not whole batches with
        // their CRCs is read again from the object store; if the store's
        // bytes fail too, the read fails (the metastore's ranges always hold
        // whole batches: never hand out a torn one).
        if !batches_hold(&out[start..]) {
            tracing::error!(object = %extent.object_key, ?range,
                "cached bytes are not the batches stored; reading them from the object store");
            out.truncate(start);
            cache
                .reread_into(
                    &extent.object_key,
                    extent.object_size,
                    range.clone(),
                    &mut out,
                    reading,
                )
                .await?;
            if !batches_hold(&out[start..]) {
                return Err(floe_cache::CacheError::Load {
                    key: extent.object_key.clone(),
                    block: range.start / cache.block_bytes(),
                    reason: "the cached and the stored bytes both fail their batches' checks"
                        .into(),
                });
            }
        }
        patch_base_offsets(&mut out[start..], extent.base_offset);
    }
    let skip = skip_batches_before(&out, from);
    let mut bytes = out.freeze();
    Ok(bytes.split_off(skip))
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
