//! The transaction coordinator's steps that write, on a metastore and a
//! batcher alone: the Kafka handlers (`handlers::txn`), the timeout job
//! (`txn_timeouts`) and the deterministic simulation all run these.
//!
//! Every decision is the metastore's (`floe_metastore::txn`). An end that
//! needs markers is written through the given batcher: one control batch per
//! partition of the transaction, all in one ingest file, whose commit
//! decides the end and sequences the markers in one step ([`write_end`]).

use floe_metastore::ops::AddToTxn;
use floe_metastore::txn::{EndReason, TxnEnd, TxnPhase, TxnView};
use floe_metastore::{MetaError, Metastore, ProducerIdentity, Refusal, TopicPartition};
use floe_protocol::batch::RecordBatch;

use crate::write::batcher::{AppendError, Batcher};
use crate::write::txn_sightings::{TxnIdentity, TxnSightings};

/// The transactional id's state.
pub async fn describe(meta: &dyn Metastore, id: &str) -> Result<Option<TxnView>, MetaError> {
    Ok(meta
        .describe_txns(vec![id.to_string()])
        .await?
        .pop()
        .flatten())
}

/// InitProducerId with a transactional id (`handleInitProducerId`). A
/// transaction of the id still ongoing is a zombie's, fenced by this call
/// (its epoch bumped): its abort markers are written here, as Kafka does
/// before answering CONCURRENT_TRANSACTIONS, and the producer asks again.
pub async fn init_producer(
    meta: &dyn Metastore,
    batcher: &Batcher,
    id: &str,
    timeout_ms: i32,
    expected: Option<ProducerIdentity>,
    now_ms: i64,
    abort_check_interval_ms: i32,
) -> Result<ProducerIdentity, MetaError> {
    let asked = meta.init_txn_producer(id, timeout_ms, expected, abort_check_interval_ms);
    let refused = match asked.await {
        Err(MetaError::Refused(Refusal::ConcurrentTransactions)) => {
            MetaError::Refused(Refusal::ConcurrentTransactions)
        }
        other => return other,
    };
    if let Ok(Some(txn)) = describe(meta, id).await
        && txn.phase == TxnPhase::Ongoing
        && txn.fencing
    {
        let end = TxnEnd {
            transactional_id: id.to_string(),
            producer_id: txn.producer_id,
            epoch: txn.epoch,
            commit: false,
            reason: EndReason::Fence,
            version: txn.version,
        };
        if let Err(e) = write_end(meta, batcher, end, &txn.partitions, now_ms).await {
            tracing::info!(transactional_id = id, error = %e, "fencing an ongoing transaction did not complete; the producer retries");
        }
    }
    Err(refused)
}

/// AddPartitionsToTxn and AddOffsetsToTxn: adds to the producer's
/// transaction (beginning it if none is ongoing), and notes which
/// transaction that is for its EndTxn (see [`crate::write::txn_sightings`]).
pub async fn add(
    meta: &dyn Metastore,
    sightings: &TxnSightings,
    add: AddToTxn,
) -> Result<(), MetaError> {
    let (id, producer_id, epoch) = (add.transactional_id.clone(), add.producer_id, add.epoch);
    let began = meta.add_to_txn(add).await?;
    let identity = TxnIdentity {
        producer_id,
        epoch,
        began,
    };
    sightings.note(&id, identity);
    Ok(())
}

/// EndTxn (`endTransaction`): commit or abort the producer's transaction,
/// with a marker in every partition of it. A retried end whose first
/// attempt completed is answered `Ok`.
///
/// An end acts once, on the transaction it was processed against, as
/// Kafka's coordinator processes it: its markers are built for the state
/// read here, and the metastore applies them only if that state is still
/// the transaction's (its version). If it changed meanwhile (a partition
/// added, or the transaction ended through another agent and the producer
/// began its next one), the answer is CONCURRENT_TRANSACTIONS and nothing
/// changes: a client still waiting sends its end again, against the state
/// it will then find, and one that gave up (its retry through another
/// agent answered) never ends a transaction it did not ask to end.
///
/// A transactions-v1 end names no transaction, only its producer; so it
/// acts on an ongoing one only if this agent knew it before the request
/// came (see [`crate::write::txn_sightings`]): a request still running
/// after its client went on to its next transaction (its describe held up
/// by a slow metastore) cannot end that one. Otherwise the answer is
/// CONCURRENT_TRANSACTIONS, and the client's retry acts.
///
/// With `bumping` (EndTxn v5, transactions v2) the end bumps the producer's
/// epoch, or gives it a new producer id with its epochs spent (see
/// [`EndReason::ClientBumping`]); a retry of such an end, whose producer
/// id and epoch are the transaction's last, is answered `Ok` as Kafka
/// answers it.
pub async fn end(
    meta: &dyn Metastore,
    (batcher, sightings): (&Batcher, &TxnSightings),
    id: &str,
    producer: ProducerIdentity,
    (commit, bumping): (bool, bool),
    now_ms: i64,
) -> Result<(), MetaError> {
    let arrival = sightings.arrival(id, batcher.metastore_time());
    let reason = match bumping {
        true => EndReason::ClientBumping,
        false => EndReason::Client,
    };
    let txn = match describe(meta, id).await? {
        Some(txn) if txn.producer_id == producer.producer_id && txn.epoch == producer.epoch => txn,
        // Not the producer's current identity: a retry of a bumping end,
        // which the metastore recognises (no markers), or a refusal.
        Some(txn) if bumping => {
            let end = TxnEnd {
                transactional_id: id.to_string(),
                producer_id: producer.producer_id,
                epoch: producer.epoch,
                commit,
                reason,
                version: txn.version,
            };
            return match meta.end_txn(end).await {
                Err(MetaError::Refused(Refusal::TxnEnded { committed })) if committed == commit => {
                    Ok(())
                }
                other => other,
            };
        }
        Some(txn) if txn.producer_id == producer.producer_id => txn,
        _ => return Err(MetaError::Refused(Refusal::InvalidProducerIdMapping)),
    };
    // A fenced producer's end costs no file: refused before markers.
    if txn.epoch != producer.epoch {
        return Err(MetaError::Refused(Refusal::ProducerFenced {
            producer_id: txn.producer_id,
            epoch: producer.epoch,
        }));
    }
    // (A bumping end's transaction is its epoch's only one.)
    if !bumping && txn.phase == TxnPhase::Ongoing && !arrival.knew(&txn) {
        sightings.note(id, TxnIdentity::of(&txn));
        return Err(MetaError::Refused(Refusal::ConcurrentTransactions));
    }
    let end = TxnEnd {
        transactional_id: id.to_string(),
        producer_id: producer.producer_id,
        epoch: producer.epoch,
        commit,
        reason,
        version: txn.version,
    };
    match write_end(meta, batcher, end, &txn.partitions, now_ms).await {
        Err(MetaError::Refused(Refusal::TxnEnded { committed })) if committed == commit => Ok(()),
        other => other,
    }
}

/// Writes a transaction's end: alone when no partition needs a marker, or
/// with one marker per partition through `batcher`, committed with the end
/// in one metastore entry. `Ok` once the end is applied; a refusal is the
/// metastore's decision, anything else leaves the outcome unknown (a retry
/// finds it). `now_ms` stamps the markers (it decides nothing).
pub async fn write_end(
    meta: &dyn Metastore,
    batcher: &Batcher,
    end: TxnEnd,
    partitions: &[TopicPartition],
    now_ms: i64,
) -> Result<(), MetaError> {
    if partitions.is_empty() {
        return meta.end_txn(end).await;
    }
    let markers = partitions
        .iter()
        .map(|tp| {
            let marker = RecordBatch::end_txn_marker(
                end.producer_id,
                end.marker_epoch(),
                end.commit,
                now_ms,
            );
            (tp.topic_id, tp.partition, marker)
        })
        .collect();
    let committed = batcher
        .enqueue_end(end, markers)
        .await
        .map_err(append_error)?;
    // One commit answers them all: the first answer is the end's outcome.
    let mut outcome = Ok(());
    for marker in committed {
        if let Err(e) = marker.offset().await
            && outcome.is_ok()
        {
            outcome = Err(append_error(e));
        }
    }
    outcome
}

fn append_error(e: AppendError) -> MetaError {
    match e {
        AppendError::Refused(refusal) => MetaError::Refused(refusal),
        AppendError::Storage(why) => MetaError::maybe_applied(why),
    }
}
