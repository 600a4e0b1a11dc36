//! Background jobs under leases: compaction, retention, GC, transaction timeouts.

pub mod compaction;
pub mod txn_timeouts;
