//! The persisted formats of a metastore file, and the upgrade from older ones.
//!
//! A file holds Raft log entries ([`Proposal`](crate::state::Proposal)s,
//! postcard) and one snapshot of the [`State`]. Their format is a number kept
//! in the file, and sent with every message between metastore nodes: nodes
//! of different formats never exchange bytes (see `rpc`), so a rolling
//! upgrade moves one node at a time while a quorum of one format remains.
//!
//! Log entries are postcard, which is not self-describing: only appending a
//! command variant keeps old entries readable (see `golden`). Snapshots,
//! since format 4, are MessagePack with structs as arrays: a field appended
//! at the end of a persisted struct with `#[serde(default)]` reads an older
//! snapshot (the array is shorter; serde fills the default), so a new floe
//! reads every older format without a copy of the old types. The format is
//! still bumped for such a change: an older floe refuses the longer arrays,
//! and nodes of different formats must not exchange them. A node opening an
//! older file it can read rewrites the snapshot in the current encoding and
//! records the current format, in one transaction, before anything else
//! touches the file. There is no way back: an older floe refuses an upgraded
//! file, so a rollback means restoring the file from a backup.

use crate::state::State;

/// The format of log entries and snapshots this floe writes. Bump it when
/// either changes, even compatibly, so that a node too old to read the new
/// bytes refuses them instead of misreading them.
/// 1: commands stamped with the leader's clock.
/// 2: consumer groups as Kafka's classic protocol has them (static members,
///    KIP-394 ids, sync deadlines, leader epochs of offsets); heartbeats no
///    longer in the log. (Only on main between 1db030d and 9549d57.)
/// 3: and consumer-protocol groups (KIP-848).
/// 4: snapshots in MessagePack (structs as arrays), so the state can gain
///    trailing defaulted fields; log entries as in 3.
/// 5: SCRAM credentials in the state (and their command).
/// 6: ACLs in the state (and their commands).
/// 7: transactions: coordinator state, each partition's ongoing
///    transactions and aborted index (and their commands).
/// 8: dynamic cluster and group configs (and their command).
/// 9: groups moving between the classic and the consumer protocol: JoinGroup
///    with owned partitions and SyncGroup with decoded assignments (new
///    variants), classic groups keep decoded assignments, consumer members
///    may be classic ones.
/// 10: agents' advertised listeners in the state (a trailing field of
///    `Agents`), registered by a new command.
/// 11: producer ids handed out in blocks (KIP-730): a new command, and a
///    trailing field of the state that changes how unknown producer ids
///    are sequenced from the first block on. Also transactions v2 (two
///    appended enum variants), consumer heartbeats naming the principal
///    whose DESCRIBE filters regexes, and classic joins carrying the agent's
///    group settings (new commands; trailing group fields).
/// 12: a transaction's identity, the version at which it began (a trailing
///    field of `Txn`).
/// 13: the cluster's id (a trailing field of the state) and the command that
///    sets it.
/// 14: backup holds on garbage collection (a trailing field of the state)
///    and the command that takes one.
/// 15: share groups (a trailing field of `Groups`) and their commands
///     (changed in place before any release: `ReleaseShare` gained its
///     partitions and session, `AcquireShare` its session, a lock its session,
///     a share-partition its count of archived records).
pub const FORMAT_VERSION: u8 = 15;

/// The oldest format this floe opens (upgrading it to [`FORMAT_VERSION`]).
pub const OLDEST_READABLE_FORMAT: u8 = 4;

/// A snapshot in the current encoding.
pub fn encode_snapshot(state: &State) -> Result<Vec<u8>, rmp_serde::encode::Error> {
    rmp_serde::to_vec(state)
}

/// A snapshot written by this floe or by a node of the same format.
pub fn decode_snapshot(bytes: &[u8]) -> Result<State, rmp_serde::decode::Error> {
    let mut state: State = rmp_serde::from_slice(bytes)?;
    state.rebuild_derived();
    Ok(state)
}

/// A snapshot written in `format` (at least [`OLDEST_READABLE_FORMAT`]), as
/// the current [`State`]: MessagePack since format 4, so fields added
/// since read as their defaults.
pub fn decode_snapshot_of(format: u8, bytes: &[u8]) -> Result<State, String> {
    match format {
        OLDEST_READABLE_FORMAT..=FORMAT_VERSION => {
            decode_snapshot(bytes).map_err(|e| format!("snapshot: {e}"))
        }
        other => Err(format!("no reader for metastore format {other}")),
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    /// What makes a defaulted trailing field free: a state written before
    /// the field existed reads back with its default.
    #[test]
    fn a_trailing_defaulted_field_reads_older_snapshots() {
        #[derive(Serialize)]
        struct Before {
            a: u32,
            inner: Vec<InnerBefore>,
        }
        #[derive(Serialize)]
        struct InnerBefore {
            x: String,
        }
        #[derive(Deserialize, Debug, PartialEq)]
        struct After {
            a: u32,
            inner: Vec<InnerAfter>,
            #[serde(default)]
            added: Vec<u8>,
        }
        #[derive(Deserialize, Debug, PartialEq)]
        struct InnerAfter {
            x: String,
            #[serde(default)]
            y: Option<i64>,
        }
        let old = rmp_serde::to_vec(&Before {
            a: 7,
            inner: vec![InnerBefore { x: "k".into() }],
        })
        .unwrap();
        let new: After = rmp_serde::from_slice(&old).unwrap();
        assert_eq!(
            new,
            After {
                a: 7,
                inner: vec![InnerAfter {
                    x: "k".into(),
                    y: None
                }],
                added: vec![],
            }
        );
    }
}
