//! Reading stored batches back: byte ranges of objects through the cache, with
//! base offsets patched in. Batches are never decompressed here.

use bytes::{Bytes, BytesMut};
use floe_metastore::ExtentRef;
use floe_protocol::batch::{patch_base_offsets, skip_batches_before};

use crate::broker::Broker;

/// The batches of `extents` from the one holding `from` on, with offsets set.
pub async fn read_extents(
    broker: &Broker,
    extents: &[ExtentRef],
    from: i64,
) -> Result<Bytes, floe_cache::CacheError> {
    let mut out = BytesMut::with_capacity(extents.iter().map(|e| e.length as usize).sum());
    for extent in extents {
        let start = out.len();
        broker
            .cache
            .read_into(
                &extent.object_key,
                extent.object_size,
                extent.position..extent.position + extent.length,
                &mut out,
            )
            .await?;
        let whole = patch_base_offsets(&mut out[start..], extent.base_offset);
        if whole != out.len() - start {
            // The metastore's ranges always hold whole batches; never hand out a torn one.
            tracing::error!(object = %extent.object_key, "extent does not end on a batch boundary");
            out.truncate(start + whole);
            break;
        }
    }
    let skip = skip_batches_before(&out, from);
    let mut bytes = out.freeze();
    Ok(bytes.split_off(skip))
}
