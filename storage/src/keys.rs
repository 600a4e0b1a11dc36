//! Where objects live in the bucket.
//!
//! Every key starts with a kind, then random or hashed characters early, so an
//! S3 bucket can split its key space into partitions and scale request rates.

use object_store::path::Path;
use uuid::Uuid;

/// A fresh, never-reused key for an ingest file, named by the fresh `id`.
///
/// `ingest/<2 hex>/<uuid>`: the two hex digits spread writes over 256 prefixes.
pub fn new_ingest_key(id: Uuid) -> Path {
    Path::from(format!("ingest/{:02x}/{}", id.as_bytes()[0], id.simple()))
}

/// Where ingest files live.
pub const INGEST_PREFIX: &str = "ingest/";
/// Where compaction's merged files (many partitions' runs) live.
pub const MERGED_PREFIX: &str = "merged/";

/// Where compacted segments (one partition's) live.
pub const SEGMENT_PREFIX: &str = "segment/";

/// Whether `key` names an object holding record batches (ingest files,
/// merged files, segments): what agents may read for each other.
pub fn holds_records(key: &str) -> bool {
    [INGEST_PREFIX, MERGED_PREFIX, SEGMENT_PREFIX]
        .iter()
        .any(|prefix| key.starts_with(prefix))
}

/// A fresh key for a merged file, named by the fresh `id`: `merged/<2 hex>/<uuid>`.
pub fn new_merged_key(id: Uuid) -> Path {
    Path::from(format!("merged/{:02x}/{}", id.as_bytes()[0], id.simple()))
}

/// A fresh key for a compacted segment of one partition, starting at
/// `base_offset`, whose oldest data was appended at `first_appended_ms`.
///
/// `segment/<2 hex>/<topic id>/<partition>/<base offset>-a<ms>-<uuid>`: the
/// leading digits come from the topic and partition, so one partition's
/// segments share a prefix while different partitions spread out. The
/// metastore reads the append time back
/// (`floe_metastore::merge_policy::segment_first_appended_ms`) to bound the time a
/// merged segment spans.
pub fn new_segment_key(
    topic_id: Uuid,
    partition: i32,
    base_offset: i64,
    first_appended_ms: i64,
    id: Uuid,
) -> Path {
    let mark = format!("a{}-", first_appended_ms.max(0));
    segment_key(topic_id, partition, base_offset, &mark, id)
}

/// A fresh key for a key-compacted segment (`cleanup.policy=compact`): a
/// segment whose name says it holds only the latest record of each key, and
/// the earliest delete horizon of the tombstones it keeps (KIP-534), so the
/// cleaner knows when to run again without reading it.
pub fn new_keyed_segment_key(
    topic_id: Uuid,
    partition: i32,
    base_offset: i64,
    delete_horizon: Option<i64>,
    id: Uuid,
) -> Path {
    let mark = match delete_horizon {
        Some(h) => format!("{KEYED_MARK}h{h}-"),
        None => KEYED_MARK.to_string(),
    };
    segment_key(topic_id, partition, base_offset, &mark, id)
}

const KEYED_MARK: &str = "keyed-";

/// Whether `key` names a key-compacted segment.
pub fn is_keyed_segment(key: &str) -> bool {
    key.starts_with(SEGMENT_PREFIX) && key.contains(KEYED_MARK)
}

/// The earliest delete horizon of the tombstones in a key-compacted segment.
pub fn keyed_segment_horizon(key: &str) -> Option<i64> {
    let (_, rest) = key.split_once(KEYED_MARK)?;
    let (horizon, _) = rest.strip_prefix('h')?.split_once('-')?;
    horizon.parse().ok()
}

fn segment_key(topic_id: Uuid, partition: i32, base_offset: i64, mark: &str, id: Uuid) -> Path {
    let spread = topic_id.as_bytes()[0] ^ (partition as u8);
    Path::from(format!(
        "segment/{spread:02x}/{}/{partition}/{base_offset:020}-{mark}{}",
        topic_id.simple(),
        id.simple()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{Ids, RandomIds};

    fn id() -> Uuid {
        RandomIds.next_id()
    }

    #[test]
    fn keys_are_unique_and_spread() {
        let a = new_ingest_key(id());
        let b = new_ingest_key(id());
        assert_ne!(a, b);
        assert!(a.as_ref().starts_with("ingest/"));
        let prefixes: std::collections::HashSet<String> = (0..200)
            .map(|_| new_ingest_key(id()).as_ref()[7..9].to_string())
            .collect();
        assert!(prefixes.len() > 50, "only {} prefixes", prefixes.len());
        let s = new_segment_key(id(), 3, 42, 1_700_000_000_999, id());
        assert!(
            s.as_ref()
                .contains("/3/00000000000000000042-a1700000000999-")
        );
        let keyed = new_keyed_segment_key(id(), 3, 42, Some(1_700_000_000_123), id());
        assert!(is_keyed_segment(keyed.as_ref()));
        assert_eq!(
            keyed_segment_horizon(keyed.as_ref()),
            Some(1_700_000_000_123)
        );
        let plain = new_keyed_segment_key(id(), 3, 42, None, id());
        assert!(is_keyed_segment(plain.as_ref()));
        assert_eq!(keyed_segment_horizon(plain.as_ref()), None);
        assert_eq!(keyed_segment_horizon(s.as_ref()), None);
    }
}
