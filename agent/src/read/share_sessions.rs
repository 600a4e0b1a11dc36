//! Share sessions (KIP-932's `ShareSessionCache`): for each member of a
//! share group fetching through this agent, the partitions its session
//! fetches and the epoch its next request must carry.
//!
//! A session lives in the agent's memory, as in Kafka's broker: what it
//! holds is the client's to send again. The records a member acquired are
//! the metastore's, under locks on the metastore's clock, so an agent that
//! dies loses no record: its members' locks run out, and the members open
//! new sessions (SHARE_SESSION_NOT_FOUND) wherever they reconnect. A
//! session ends when its member closes it (epoch -1) or when the
//! connection that opened it closes; either way the records it holds are
//! released at once.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use floe_metastore::TopicId;
use floe_protocol::ResponseError;

/// The epoch that closes a share session.
pub const FINAL_EPOCH: i32 = -1;

/// Kafka's `group.share.max.share.sessions` default: sessions one agent
/// keeps at most; a member opening one more is refused
/// (SHARE_SESSION_LIMIT_REACHED) until one closes.
pub const MAX_SESSIONS: usize = 2_000;
/// Partitions one session fetches at most; a request adding more is
/// refused (INVALID_REQUEST). Bounds the session's memory and the
/// acquisition it asks of the metastore.
pub const MAX_PARTITIONS: usize = 2_000;

/// A member of a group.
pub type Key = (String, String);

/// A session as a request finds it: its number and the partitions it
/// fetches.
pub type Found = (u64, Vec<(TopicId, i32)>);

struct Session {
    /// Its number: the metastore's locks name it, so its close releases
    /// only what it acquired.
    id: u64,
    /// The epoch the next request must carry.
    next_epoch: i32,
    /// The partitions fetched, in the order they were added.
    partitions: Vec<(TopicId, i32)>,
    /// The connection that opened it: its close ends the session.
    connection: u64,
}

/// The share sessions of this agent's members.
#[derive(Default)]
pub struct Sessions {
    sessions: Mutex<BTreeMap<Key, Session>>,
}

/// Kafka's `ShareRequestMetadata.nextEpoch`: after `i32::MAX` comes 1.
fn next(epoch: i32) -> i32 {
    if epoch == i32::MAX { 1 } else { epoch + 1 }
}

impl Sessions {
    /// Opens `key`'s session (epoch 0) on `connection`, replacing any it
    /// had (as Kafka does: its records stay acquired until acknowledged or
    /// their locks end), fetching `partitions`.
    pub fn open(
        &self,
        key: Key,
        connection: u64,
        id: u64,
        partitions: Vec<(TopicId, i32)>,
    ) -> Result<Found, ResponseError> {
        let mut sessions = self.sessions.lock().expect("share sessions lock");
        if !sessions.contains_key(&key) && sessions.len() >= MAX_SESSIONS {
            return Err(ResponseError::ShareSessionLimitReached);
        }
        let mut session = Session {
            id,
            next_epoch: next(0),
            partitions: Vec::new(),
            connection,
        };
        add(&mut session.partitions, partitions)?;
        let found = (id, session.partitions.clone());
        sessions.insert(key, session);
        Ok(found)
    }

    /// A request of an open session carrying `epoch`: adds `added`, drops
    /// `forgotten`, and moves the epoch on. The partitions it fetches now.
    pub fn advance(
        &self,
        key: &Key,
        epoch: i32,
        added: Vec<(TopicId, i32)>,
        forgotten: &[(TopicId, i32)],
    ) -> Result<Found, ResponseError> {
        let mut sessions = self.sessions.lock().expect("share sessions lock");
        let session = sessions
            .get_mut(key)
            .ok_or(ResponseError::ShareSessionNotFound)?;
        if session.next_epoch != epoch {
            return Err(ResponseError::InvalidShareSessionEpoch);
        }
        let forgotten: HashSet<&(TopicId, i32)> = forgotten.iter().collect();
        let mut partitions = session.partitions.clone();
        partitions.retain(|p| !forgotten.contains(p));
        add(&mut partitions, added)?;
        session.partitions = partitions;
        session.next_epoch = next(epoch);
        Ok((session.id, session.partitions.clone()))
    }

    /// Checks a ShareAcknowledge's `epoch` against `key`'s session, moving
    /// it on (Kafka's `acknowledgeSessionUpdate`): a final one (-1) is let
    /// through as it is.
    pub fn acknowledging(&self, key: &Key, epoch: i32) -> Result<(), ResponseError> {
        if epoch == 0 {
            return Err(ResponseError::InvalidShareSessionEpoch);
        }
        let mut sessions = self.sessions.lock().expect("share sessions lock");
        let session = sessions
            .get_mut(key)
            .ok_or(ResponseError::ShareSessionNotFound)?;
        if epoch == FINAL_EPOCH {
            return Ok(());
        }
        if session.next_epoch != epoch {
            return Err(ResponseError::InvalidShareSessionEpoch);
        }
        session.next_epoch = next(epoch);
        Ok(())
    }

    /// Whether `key` has a session (a final request needs one).
    pub fn exists(&self, key: &Key) -> bool {
        self.sessions
            .lock()
            .expect("share sessions lock")
            .contains_key(key)
    }

    /// Ends `key`'s session: the session, with the partitions whose
    /// records it held.
    pub fn close(&self, key: &Key) -> Option<Found> {
        let mut sessions = self.sessions.lock().expect("share sessions lock");
        sessions.remove(key).map(|s| (s.id, s.partitions))
    }

    /// Ends the sessions `connection` opened: each member, and the
    /// partitions whose records it held.
    pub fn close_connection(&self, connection: u64) -> Vec<(Key, Found)> {
        let mut sessions = self.sessions.lock().expect("share sessions lock");
        let keys: Vec<Key> = sessions
            .iter()
            .filter(|(_, s)| s.connection == connection)
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| sessions.remove(&k).map(|s| (k, (s.id, s.partitions))))
            .collect()
    }

    /// Sessions open now.
    pub fn count(&self) -> usize {
        self.sessions.lock().expect("share sessions lock").len()
    }
}

/// Adds `added` to `partitions`, each once, within [`MAX_PARTITIONS`].
fn add(
    partitions: &mut Vec<(TopicId, i32)>,
    added: Vec<(TopicId, i32)>,
) -> Result<(), ResponseError> {
    let mut present: HashSet<(TopicId, i32)> = partitions.iter().copied().collect();
    for p in added {
        if present.insert(p) {
            if partitions.len() >= MAX_PARTITIONS {
                return Err(ResponseError::InvalidRequest);
            }
            partitions.push(p);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        ("g".into(), "m".into())
    }

    #[test]
    fn a_session_s_epochs_run_in_order_and_it_ends_with_its_connection() {
        let sessions = Sessions::default();
        let t = TopicId::from_u128(7);
        assert_eq!(
            sessions.advance(&key(), 1, vec![], &[]),
            Err(ResponseError::ShareSessionNotFound)
        );
        assert_eq!(
            sessions.open(key(), 9, 5, vec![(t, 0)]),
            Ok((5, vec![(t, 0)]))
        );
        assert_eq!(
            sessions.advance(&key(), 2, vec![], &[]),
            Err(ResponseError::InvalidShareSessionEpoch)
        );
        assert_eq!(
            sessions.advance(&key(), 1, vec![(t, 1), (t, 0)], &[]),
            Ok((5, vec![(t, 0), (t, 1)]))
        );
        assert_eq!(sessions.acknowledging(&key(), 2), Ok(()));
        assert_eq!(
            sessions.acknowledging(&key(), 0),
            Err(ResponseError::InvalidShareSessionEpoch)
        );
        assert_eq!(
            sessions.advance(&key(), 3, vec![], &[(t, 0)]),
            Ok((5, vec![(t, 1)]))
        );
        assert_eq!(sessions.close_connection(8), vec![]);
        assert_eq!(
            sessions.close_connection(9),
            vec![(key(), (5, vec![(t, 1)]))]
        );
        assert_eq!(sessions.count(), 0);
    }

    #[test]
    fn sessions_and_their_partitions_are_bounded() {
        let sessions = Sessions::default();
        let t = TopicId::from_u128(7);
        for n in 0..MAX_SESSIONS {
            sessions
                .open(("g".into(), n.to_string()), 1, n as u64, vec![])
                .unwrap();
        }
        assert_eq!(
            sessions.open(key(), 1, 0, vec![]),
            Err(ResponseError::ShareSessionLimitReached)
        );
        // An open session may be opened again.
        assert!(
            sessions
                .open(("g".into(), "0".into()), 1, 0, vec![])
                .is_ok()
        );
        let many: Vec<_> = (0..=MAX_PARTITIONS as i32).map(|p| (t, p)).collect();
        assert_eq!(
            sessions.open(("g".into(), "1".into()), 1, 1, many),
            Err(ResponseError::InvalidRequest)
        );
        assert_eq!(next(i32::MAX), 1);
    }
}
