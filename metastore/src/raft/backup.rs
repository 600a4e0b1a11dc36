//! Backups of the metastore, and restoring one into a new group.
//!
//! A backup is the state at one moment, taken after a hold on garbage
//! collection (see `state::garbage_holds`): every object the state refers to
//! is either still referenced in the running cluster or was freed after the
//! hold, and so stays in the object store until the hold expires. Restoring
//! within that time gives a metastore whose every extent can be read.
//!
//! Restoring writes a new node file: the backup's state as the node's
//! snapshot, with a membership of that one node as its only voter and the
//! log purged up to the snapshot, so the node elects itself at start
//! without `--peers` (other nodes join it with `add-node`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use openraft::{CommittedLeaderId, Membership};

use super::{LogId, NodeAddress, NodeId, RaftMetastore, SnapshotMeta, StoredMembership};
use crate::api::Metastore;
pub use crate::contract::backup::Backup;
use crate::format::{FORMAT_VERSION, OLDEST_READABLE_FORMAT, decode_snapshot_of, encode_snapshot};
use crate::state::State;
use crate::types::MetaError;

/// What a backup file begins with.
const MAGIC: &[u8] = b"floe metastore backup\n";

impl Backup {
    /// The file's bytes: the magic line, the backup, and a CRC-32C of both.
    pub fn to_bytes(&self) -> Result<Vec<u8>, MetaError> {
        let mut bytes = MAGIC.to_vec();
        let body = postcard::to_stdvec(self).map_err(|e| MetaError::Storage(e.to_string()))?;
        bytes.extend_from_slice(&body);
        let crc = crc32c::crc32c(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        Ok(bytes)
    }

    /// Reads a backup file's bytes, refusing anything damaged or of a format
    /// this floe cannot read.
    pub fn from_bytes(bytes: &[u8]) -> Result<Backup, String> {
        let body = bytes
            .strip_prefix(MAGIC)
            .ok_or("not a floe metastore backup")?;
        let (body, crc) = body
            .split_last_chunk::<4>()
            .ok_or("the backup is cut short")?;
        if crc32c::crc32c(&bytes[..bytes.len() - 4]) != u32::from_le_bytes(*crc) {
            return Err("the backup is damaged (its checksum does not match)".into());
        }
        let backup: Backup =
            postcard::from_bytes(body).map_err(|e| format!("the backup is unreadable: {e}"))?;
        if !(OLDEST_READABLE_FORMAT..=FORMAT_VERSION).contains(&backup.format) {
            return Err(format!(
                "the backup is of metastore format {}; this floe reads {OLDEST_READABLE_FORMAT} to {FORMAT_VERSION}",
                backup.format
            ));
        }
        Ok(backup)
    }

    /// The state it holds.
    pub fn state(&self) -> Result<State, String> {
        decode_snapshot_of(self.format, &self.state)
    }
}

impl RaftMetastore {
    /// Takes a hold on GC for `hold_ms`, then copies the state (which then
    /// includes the hold). The leader's answer: a follower's state may lag.
    pub async fn backup(&self, hold_ms: i64) -> Result<Backup, MetaError> {
        let held = self.hold_garbage(hold_ms).await?;
        // The hold is applied here (a leader applies before it answers), so
        // the copy's state includes it. The index is read before the copy:
        // the state holds at least that much of the log.
        copy_state(self.shared_state(), self.applied_index(), held.until_ms).await
    }
}

/// A backup of `shared`, which holds the log up to `last_index` at least
/// and a hold on GC until `held_until_ms`: copied and encoded off the async
/// workers (a large state takes a while), as snapshots are.
pub(crate) async fn copy_state(
    shared: std::sync::Arc<std::sync::RwLock<State>>,
    last_index: u64,
    held_until_ms: i64,
) -> Result<Backup, MetaError> {
    let copied = tokio::task::spawn_blocking(move || {
        let state = shared
            .read()
            .expect("metastore state lock poisoned")
            .clone();
        let encoded = encode_snapshot(&state);
        (
            state.clock_ms(),
            state.cluster_id().map(str::to_string),
            encoded,
        )
    });
    let (taken_ms, cluster_id, encoded) = copied
        .await
        .map_err(|e| MetaError::Storage(e.to_string()))?;
    let encoded = encoded.map_err(|e| MetaError::Storage(e.to_string()))?;
    // The answer is one message: say so rather than fail to send it.
    let room = crate::contract::wire::MAX_FRAME - (1 << 20);
    if encoded.len() > room {
        return Err(MetaError::Storage(format!(
            "the state is {} bytes, more than a backup answer carries ({room})",
            encoded.len()
        )));
    }
    Ok(Backup {
        format: FORMAT_VERSION,
        cluster_id,
        taken_ms,
        held_until_ms,
        last_index,
        state: encoded,
    })
}

/// Writes a new node file at `path` holding `backup`'s state, with node
/// `id` at `address` the only voter of its group. Refuses an existing file.
pub fn restore(backup: &Backup, path: &Path, id: NodeId, address: &str) -> Result<(), MetaError> {
    // Decoded once here so a backup that cannot be read is refused before
    // anything is written; the snapshot is stored in the current encoding.
    let mut state = backup.state().map_err(MetaError::Storage)?;
    state.prepare_for_restore();
    let data = encode_snapshot(&state).map_err(|e| MetaError::Storage(e.to_string()))?;
    let storage = |e: openraft::AnyError| MetaError::Storage(e.to_string());
    let io = |e: std::io::Error| MetaError::Storage(format!("{}: {e}", path.display()));
    if path.exists() {
        return Err(MetaError::Storage(format!(
            "{} exists: restore into a new file",
            path.display()
        )));
    }
    // Written whole beside it, then linked into place, which fails if the
    // path was taken meanwhile: the file is all of a restore or nothing.
    let partial = path.with_extension("restoring");
    let _ = std::fs::remove_file(&partial);
    let db = super::node::open_database(Some(&partial))?;
    // Term 0 is below any this node will vote in: its first election's
    // term (1) and every later entry sort after the snapshot's.
    let last = LogId::new(CommittedLeaderId::new(0, id), backup.last_index.max(1));
    let voters = BTreeSet::from([id]);
    let nodes = BTreeMap::from([(
        id,
        NodeAddress {
            address: address.to_string(),
        },
    )]);
    let membership = Membership::new(vec![voters], nodes);
    let meta = SnapshotMeta {
        last_log_id: Some(last),
        last_membership: StoredMembership::new(Some(last), membership),
        snapshot_id: format!("restored-{}", backup.taken_ms),
    };
    let txn = db
        .begin_write()
        .map_err(|e| MetaError::Storage(e.to_string()))?;
    super::state_machine::save_snapshot_in(&txn, &meta, &data).map_err(storage)?;
    super::log_store::write_purged_in(&txn, &last).map_err(storage)?;
    txn.commit()
        .map_err(|e| MetaError::Storage(e.to_string()))?;
    drop(db);
    std::fs::hard_link(&partial, path).map_err(io)?;
    std::fs::remove_file(&partial).map_err(io)
}
