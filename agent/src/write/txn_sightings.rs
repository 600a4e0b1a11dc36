//! Which transaction each transactional id had ongoing, as this agent last
//! learnt it from the metastore: what a transactions-v1 EndTxn is held to.
//!
//! Such an EndTxn names its producer's id and epoch, which every
//! transaction of that producer shares. A request whose client has gone
//! (it timed out, ended the transaction through another agent and began
//! its next one) could otherwise find the next transaction when it is
//! finally processed, and commit or abort it. So an agent ends an ongoing
//! transaction only if it knew that transaction before the EndTxn came:
//! its identity (the metastore's `TxnView::began` with the producer id and
//! epoch) was seen here before, or it began before a reading of the
//! metastore's time taken before ([`Arrival::knew`]). Otherwise the answer
//! is CONCURRENT_TRANSACTIONS, which every client retries, and the identity
//! found is noted: the retry came after it, so it may act.
//!
//! The identities come from the answers of AddPartitionsToTxn and
//! AddOffsetsToTxn, which the transaction's coordinator (this agent, while
//! the client's FindCoordinator answer holds) serves, so a producer's
//! first EndTxn usually acts. Losing an entry (the bound, a restart) costs
//! one retry, never a wrong end.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use floe_metastore::txn::{TxnPhase, TxnView};

/// Most transactional ids remembered at once; the oldest goes first.
pub const MAX_SIGHTINGS: usize = 20_000;

/// One transaction: the same producer id, epoch and `began` can name no
/// other (versions of a transactional id only grow while it is known, and a
/// forgotten id comes back with another producer id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnIdentity {
    pub producer_id: i64,
    pub epoch: i16,
    pub began: u64,
}

impl TxnIdentity {
    pub fn of(view: &TxnView) -> TxnIdentity {
        TxnIdentity {
            producer_id: view.producer_id,
            epoch: view.epoch,
            began: view.began,
        }
    }
}

/// The last transaction seen ongoing per transactional id, bounded.
#[derive(Default)]
pub struct TxnSightings {
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    by_id: HashMap<String, TxnIdentity>,
    /// Ids in the order they were first noted: the eviction order.
    order: VecDeque<String>,
}

impl TxnSightings {
    /// `id`'s transaction `identity` is (or was a moment ago) ongoing.
    pub fn note(&self, id: &str, identity: TxnIdentity) {
        let mut seen = self.seen.lock().expect("sightings lock");
        if let Some(known) = seen.by_id.get_mut(id) {
            *known = identity;
            return;
        }
        if seen.by_id.len() >= MAX_SIGHTINGS
            && let Some(oldest) = seen.order.pop_front()
        {
            seen.by_id.remove(&oldest);
        }
        seen.by_id.insert(id.to_string(), identity);
        seen.order.push_back(id.to_string());
    }

    /// What an EndTxn of `id` may act on, taken when it comes:
    /// `metastore_ms` is the latest reading of the metastore's time.
    pub fn arrival(&self, id: &str, metastore_ms: Option<i64>) -> Arrival {
        let seen = self.seen.lock().expect("sightings lock");
        Arrival {
            seen: seen.by_id.get(id).copied(),
            metastore_ms,
        }
    }
}

/// What an agent knew of a transactional id when an EndTxn of it came.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    seen: Option<TxnIdentity>,
    metastore_ms: Option<i64>,
}

impl Arrival {
    /// Whether `txn`, ongoing now, was ongoing before the request came: its
    /// identity was seen, or it began before a time the metastore had
    /// reached (stamps only grow along its log, so an entry stamped before
    /// a reading was applied before it).
    pub fn knew(&self, txn: &TxnView) -> bool {
        debug_assert_eq!(txn.phase, TxnPhase::Ongoing);
        self.seen == Some(TxnIdentity::of(txn))
            || self.metastore_ms.is_some_and(|ms| txn.start_ms < ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ongoing(began: u64, start_ms: i64) -> TxnView {
        TxnView {
            transactional_id: "t".into(),
            producer_id: 7,
            epoch: 2,
            phase: TxnPhase::Ongoing,
            timeout_ms: 60_000,
            start_ms,
            last_update_ms: start_ms,
            partitions: vec![],
            groups: vec![],
            version: began + 3,
            fencing: false,
            began,
        }
    }

    #[test]
    fn an_end_acts_only_on_a_transaction_known_before_it_came() {
        let sightings = TxnSightings::default();
        let first = ongoing(4, 1_000);
        sightings.note("t", TxnIdentity::of(&first));
        let came = sightings.arrival("t", Some(1_000));
        assert!(came.knew(&first));
        // The next transaction, begun after the request came: unknown to
        // it even once noted, and not before the time read.
        let next = ongoing(9, 1_000);
        sightings.note("t", TxnIdentity::of(&next));
        assert!(!came.knew(&next));
        assert!(sightings.arrival("t", None).knew(&next));
        // Begun strictly before a reading of the metastore's time.
        assert!(sightings.arrival("u", Some(1_001)).knew(&next));
        assert!(!sightings.arrival("u", Some(1_000)).knew(&next));
    }

    #[test]
    fn the_oldest_id_goes_first_at_the_bound() {
        let sightings = TxnSightings::default();
        let txn = ongoing(1, 0);
        for i in 0..=MAX_SIGHTINGS {
            sightings.note(&format!("id-{i}"), TxnIdentity::of(&txn));
        }
        let seen = sightings.seen.lock().unwrap();
        assert_eq!(seen.by_id.len(), MAX_SIGHTINGS);
        assert!(!seen.by_id.contains_key("id-0"));
        assert!(seen.by_id.contains_key(&format!("id-{MAX_SIGHTINGS}")));
    }
}
