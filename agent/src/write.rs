//! The write path below the handlers: record work off the runtime, the batcher that fills, uploads and commits ingest files, producer ids, the transaction coordinator's steps and what they saw of each transaction.

pub mod batcher;
pub mod pipelines;
pub mod producer_ids;
pub mod record_work;
pub mod txn_coordinator;
pub mod txn_sightings;
