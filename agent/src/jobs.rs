//! Background jobs: under leases, compaction, retention, GC and transaction
//! timeouts; and, on every agent with the jobs role, groups' lag.

pub mod cache_first;
pub mod compaction;
pub mod group_lag;
pub mod txn_timeouts;
