//! The backstop of garbage collection: objects in the bucket that the
//! metastore has never heard of — uploads whose commit never happened, or
//! whose outcome the agent could not learn, and segments whose swap failed —
//! are handed to GC once they are older than any commit could take.

use std::sync::Arc;
use std::time::Duration;

use floe_metastore::Metastore;
use floe_storage::{ObjectPath, ObjectStore};
use futures::TryStreamExt;

use crate::CompactError;

/// Keys asked about in one metastore call.
const CHUNK: usize = 1000;

/// Lists `ingest/`, `segment/` and `merged/` and records unknown objects older than
/// `min_age` as orphans for [`crate::Gc`]. Returns how many it found.
///
/// An object's age is the store's `last_modified` against `now_ms`, the
/// metastore's time. Safety does not rest on either clock: the metastore
/// refuses, from then on, the commit of any key declared an orphan, and skips
/// a key it already sequenced. The age only keeps the sweep from making
/// young uploads fail their commit.
pub async fn sweep_orphans(
    store: &Arc<dyn ObjectStore>,
    meta: &Arc<dyn Metastore>,
    min_age: Duration,
    now_ms: i64,
) -> Result<usize, CompactError> {
    let cutoff_ms = now_ms.saturating_sub(crate::millis(min_age));
    let mut found = 0;
    for prefix in ["ingest", "segment", "merged"] {
        let mut old = Vec::new();
        let mut listing = store.list(Some(&ObjectPath::from(prefix)));
        while let Some(meta_entry) = listing.try_next().await? {
            if meta_entry.last_modified.timestamp_millis() <= cutoff_ms {
                old.push(meta_entry.location.to_string());
            }
        }
        for chunk in old.chunks(CHUNK) {
            let orphans = meta.unknown_objects(chunk.to_vec()).await?;
            if !orphans.is_empty() {
                found += orphans.len();
                tracing::info!(
                    count = orphans.len(),
                    "found orphaned objects; handing them to gc"
                );
                meta.record_orphans(orphans).await?;
            }
        }
    }
    Ok(found)
}
