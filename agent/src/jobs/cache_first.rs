//! Compaction's reads through the agent's block cache.
//!
//! The agent that uploads an ingest file keeps its blocks in the cache for
//! the consumers tailing it ([`floe_cache::BlockCache::insert_object`]), and
//! compaction reads the same file seconds later. Answered from the cache,
//! that read costs no GET and no bytes from the store: in a one-agent zone
//! compaction reads each ingest byte from memory. Only reads that name their
//! object's size ([`floe_storage::sized`]) can be answered; a range not held
//! whole goes to the store, and nothing compaction reads enters the cache.

use std::sync::Arc;

use floe_cache::BlockCache;
use floe_storage::ObjectStore;
use floe_storage::hooked::{HookedStore, Hooks};
use floe_storage::sized::{self, ObjectSize};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, GetResult};

/// `store` with GETs that name their object's size answered from `cache`
/// when it holds their whole range.
pub fn cache_first(store: Arc<dyn ObjectStore>, cache: Arc<BlockCache>) -> Arc<dyn ObjectStore> {
    Arc::new(HookedStore::new(store, CacheFirst { cache }))
}

struct CacheFirst {
    cache: Arc<BlockCache>,
}

#[async_trait::async_trait]
impl Hooks for CacheFirst {
    async fn serve_get(&self, location: &Path, options: &GetOptions) -> Option<GetResult> {
        let ObjectSize(size) = *options.extensions.get::<ObjectSize>()?;
        let Some(GetRange::Bounded(range)) = options.range.clone() else {
            return None;
        };
        let conditional = options.if_match.is_some()
            || options.if_none_match.is_some()
            || options.if_modified_since.is_some()
            || options.if_unmodified_since.is_some()
            || options.version.is_some()
            || options.head;
        if conditional {
            return None;
        }
        let bytes = self
            .cache
            .cached_range(location.as_ref(), size, range.clone())
            .await?;
        Some(sized::answer(location, size, range, bytes))
    }
}
