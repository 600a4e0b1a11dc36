//! A block cache over object storage.
//!
//! Reads of any byte range are served from whole aligned blocks (4 MiB by
//! default). Each block is loaded at most once at a time however many readers
//! want it (foyer's single-flight `get_or_fetch`), and objects an agent just
//! uploaded are put in the cache directly, so consumers tailing a topic never
//! wait on a GET.

use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use foyer::{Cache, CacheBuilder};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

/// Default block size: large enough that a GET costs little per byte.
pub const DEFAULT_BLOCK_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("range {start}..{end} is outside object `{key}` of {size} bytes")]
    OutOfBounds {
        key: String,
        start: u64,
        end: u64,
        size: u64,
    },
    #[error("loading `{key}` block {block} failed: {reason}")]
    Load {
        key: String,
        block: u64,
        reason: String,
    },
}

type BlockKey = (Arc<str>, u64);

pub struct BlockCache {
    store: Arc<dyn ObjectStore>,
    blocks: Cache<BlockKey, Bytes>,
    block_bytes: u64,
}

impl BlockCache {
    pub fn new(store: Arc<dyn ObjectStore>, capacity_bytes: usize, block_bytes: u64) -> Self {
        let blocks = CacheBuilder::new(capacity_bytes)
            .with_weighter(|key: &BlockKey, value: &Bytes| key.0.len() + value.len())
            .build();
        BlockCache {
            store,
            blocks,
            block_bytes,
        }
    }

    fn block_range(&self, block: u64, object_size: u64) -> Range<u64> {
        let start = block * self.block_bytes;
        start..(start + self.block_bytes).min(object_size)
    }

    /// Puts a whole object, just written, into the cache as its blocks.
    ///
    /// Each block is copied out of the object: a slice would keep the whole
    /// object's buffer alive while any one of its blocks stays cached, so the
    /// cache could hold several times `capacity_bytes` while counting less.
    /// One copy per upload is cheap next to the upload.
    pub fn insert_object(&self, key: &str, object: &Bytes) {
        let key: Arc<str> = Arc::from(key);
        let size = object.len() as u64;
        for block in 0..size.div_ceil(self.block_bytes) {
            let r = self.block_range(block, size);
            self.blocks.insert(
                (key.clone(), block),
                Bytes::copy_from_slice(&object[r.start as usize..r.end as usize]),
            );
        }
    }

    /// Appends bytes `range` of object `key` (of `object_size` bytes) to `out`.
    pub async fn read_into(
        &self,
        key: &str,
        object_size: u64,
        range: Range<u64>,
        out: &mut BytesMut,
    ) -> Result<(), CacheError> {
        if range.start > range.end || range.end > object_size {
            return Err(CacheError::OutOfBounds {
                key: key.to_string(),
                start: range.start,
                end: range.end,
                size: object_size,
            });
        }
        if range.is_empty() {
            return Ok(());
        }
        let shared_key: Arc<str> = Arc::from(key);
        let first = range.start / self.block_bytes;
        let last = (range.end - 1) / self.block_bytes;
        out.reserve((range.end - range.start) as usize);
        for block in first..=last {
            let block_range = self.block_range(block, object_size);
            let store = self.store.clone();
            let path = Path::from(key);
            let fetch_range = block_range.clone();
            let entry = self
                .blocks
                .get_or_fetch(&(shared_key.clone(), block), move || async move {
                    store.get_range(&path, fetch_range).await
                })
                .await
                .map_err(|e| CacheError::Load {
                    key: key.to_string(),
                    block,
                    reason: e.to_string(),
                })?;
            let bytes = entry.value();
            let from = range.start.max(block_range.start) - block_range.start;
            let to = range.end.min(block_range.end) - block_range.start;
            if to as usize > bytes.len() {
                return Err(CacheError::Load {
                    key: key.to_string(),
                    block,
                    reason: format!("store returned {} bytes, expected {}", bytes.len(), to),
                });
            }
            out.extend_from_slice(&bytes[from as usize..to as usize]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::PutPayload;
    use object_store::memory::InMemory;

    async fn store_with(key: &str, data: &[u8]) -> Arc<dyn ObjectStore> {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        store
            .put(&Path::from(key), PutPayload::from(data.to_vec()))
            .await
            .unwrap();
        store
    }

    #[tokio::test]
    async fn reads_across_block_boundaries() {
        let data: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let store = store_with("obj", &data).await;
        let cache = BlockCache::new(store, 1 << 20, 64);
        for (start, end) in [
            (0, 1000),
            (10, 20),
            (60, 70),
            (63, 64),
            (64, 128),
            (999, 1000),
            (5, 5),
        ] {
            let mut out = BytesMut::new();
            cache
                .read_into("obj", 1000, start..end, &mut out)
                .await
                .unwrap();
            assert_eq!(
                &out[..],
                &data[start as usize..end as usize],
                "{start}..{end}"
            );
        }
        let mut out = BytesMut::new();
        assert!(matches!(
            cache.read_into("obj", 1000, 990..1001, &mut out).await,
            Err(CacheError::OutOfBounds { .. })
        ));
    }

    #[tokio::test]
    async fn inserted_objects_are_served_without_the_store() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let cache = BlockCache::new(store, 1 << 20, 16);
        let data = Bytes::from((0..100u8).collect::<Vec<_>>());
        cache.insert_object("never-uploaded", &data);
        let mut out = BytesMut::new();
        cache
            .read_into("never-uploaded", 100, 10..90, &mut out)
            .await
            .unwrap();
        assert_eq!(&out[..], &data[10..90]);
    }

    #[tokio::test]
    async fn missing_object_is_an_error() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let cache = BlockCache::new(store, 1 << 20, 16);
        let mut out = BytesMut::new();
        assert!(matches!(
            cache.read_into("nope", 10, 0..5, &mut out).await,
            Err(CacheError::Load { .. })
        ));
    }
}
