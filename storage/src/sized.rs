//! Ranged reads that name their object's size.
//!
//! The block cache keys blocks by object and size (the last block's length
//! depends on it), and a GET names neither. A reader that knows the size
//! (compaction has it from the metastore's extents) says so in the request's
//! extensions, so a cache in front of the store ([`crate::hooked::Hooks::serve_get`])
//! can answer from blocks it holds; every other store ignores it.

use std::ops::Range;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    Attributes, GetOptions, GetResult, GetResultPayload, ObjectMeta, ObjectStore, Result,
};

/// The size of the object a GET reads, in its options' extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectSize(pub u64);

/// Bytes `range` of `key`, an object of `size` bytes.
pub async fn get_range(
    store: &dyn ObjectStore,
    key: &str,
    size: u64,
    range: Range<u64>,
) -> Result<Bytes> {
    let mut options = GetOptions::default().with_range(Some(range));
    options.extensions.insert(ObjectSize(size));
    store
        .get_opts(&Path::from(key), options)
        .await?
        .bytes()
        .await
}

/// The GET of bytes `range` of `location` (an object of `size` bytes),
/// answered with `bytes` without asking the store.
pub fn answer(location: &Path, size: u64, range: Range<u64>, bytes: Bytes) -> GetResult {
    GetResult {
        payload: GetResultPayload::Stream(futures::stream::once(async { Ok(bytes) }).boxed()),
        meta: ObjectMeta {
            location: location.clone(),
            last_modified: Default::default(),
            size,
            e_tag: None,
            version: None,
        },
        range,
        attributes: Attributes::default(),
        extensions: Default::default(),
    }
}
