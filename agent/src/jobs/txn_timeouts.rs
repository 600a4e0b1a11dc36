//! Aborts transactions that ran past their timeout (Kafka's
//! `transaction.timeout.ms`, enforced as `TransactionCoordinator`'s
//! `abortTimedOutTransactions` does, every second here).
//!
//! Expiry is the metastore's decision, on its clock: a transaction times
//! out at the first look after its timeout (looks every
//! `transaction_abort_check_interval`, see `Txn::expired`), and from then
//! on its producer's batches, adds and commit are refused there. This job writes the abort that follows (its markers
//! carry the epoch bumped, which fences the producer for good), so that the
//! last stable offset moves on. One agent with the jobs role runs it at a
//! time, under a lease; one that dies loses nothing: the next holder finds
//! the transaction still ongoing, and the metastore checks the expiry again
//! when it applies the abort.

use std::sync::Arc;
use std::time::Duration;

use floe_metastore::txn::{EndReason, TxnEnd};
use floe_metastore::{MetaError, Metastore};

use crate::broker::Broker;
use crate::write::batcher::Batcher;
use crate::write::txn_coordinator::write_end;

const LEASE: &str = "txn-timeouts";
/// How often the lease's holder runs a pass.
const EVERY: Duration = Duration::from_secs(1);
const LEASE_TTL: Duration = Duration::from_secs(10);
/// How often an agent that does not hold the lease asks for it: within
/// half the lease after its holder stops renewing it (two metastore
/// requests a look, so not every second from every agent).
const OTHERS_EVERY: Duration = Duration::from_secs(5);
/// Transactions aborted per pass at most.
const PER_PASS: u32 = 100;

pub async fn run(broker: Arc<Broker>) {
    let holder = format!(
        "{}@{}",
        crate::jobs::compaction::lease_holder(&broker.config.data_dir, &broker.world),
        broker.config.admin_listen
    );
    run_on(broker.meta.as_ref(), &broker.batcher, &holder).await
}

/// A pass every [`EVERY`] while `holder` holds the lease, else every
/// [`OTHERS_EVERY`], writing through `batcher`.
pub async fn run_on(meta: &dyn Metastore, batcher: &Batcher, holder: &str) {
    let mut wait = Duration::ZERO;
    loop {
        tokio::time::sleep(wait).await;
        wait = match pass(meta, batcher, holder).await {
            Ok(true) => EVERY,
            Ok(false) => OTHERS_EVERY,
            Err(e) => {
                tracing::debug!(error = %e, "transaction timeouts: pass skipped");
                EVERY
            }
        };
    }
}

/// One pass: with the lease, abort every expired transaction found, its
/// markers written through `batcher` and stamped with the metastore's time.
/// Whether it held the lease.
async fn pass(meta: &dyn Metastore, batcher: &Batcher, holder: &str) -> Result<bool, MetaError> {
    let now_ms = meta.clock().await?;
    let ttl_ms = LEASE_TTL.as_millis() as i64;
    if !meta
        .acquire_lease(LEASE.into(), holder.to_string(), now_ms, ttl_ms)
        .await?
    {
        return Ok(false);
    }
    for txn in meta.expired_txns(PER_PASS).await? {
        // Each end takes a flush, a PUT and a commit: the lease is renewed
        // before each, so no other agent writes the same aborts meanwhile.
        let now_ms = meta.clock().await?;
        if !meta
            .acquire_lease(LEASE.into(), holder.to_string(), now_ms, ttl_ms)
            .await?
        {
            return Ok(false);
        }
        let end = TxnEnd {
            transactional_id: txn.transactional_id.clone(),
            producer_id: txn.producer_id,
            epoch: txn.epoch,
            commit: false,
            reason: EndReason::Timeout,
            version: txn.version,
        };
        match write_end(meta, batcher, end, &txn.partitions, now_ms).await {
            Ok(()) => tracing::info!(transactional_id = %txn.transactional_id,
                producer_id = txn.producer_id, "aborted a transaction past its timeout"),
            Err(e) => tracing::info!(transactional_id = %txn.transactional_id, error = %e,
                "aborting a transaction past its timeout did not complete; the next pass retries"),
        }
    }
    Ok(true)
}
