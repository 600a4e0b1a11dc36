//! The Kafka layer, tested through the protocol against agents started in
//! this process.

mod abandoned;
mod compaction;
mod fetch_watermarks;
mod lifecycle;
mod long_poll;
mod offsets;
mod ordering;
mod produce_checks;
mod producer_ids;
mod readiness;
mod shares;
mod support;
mod txn_end;
mod txn_v2;
