//! Share groups (KIP-932): consumers that take records of the same
//! partitions cooperatively, each record delivered to one member at a time
//! under a lock, acknowledged record by record.

pub mod members;
pub mod partition;

pub use partition::{Ack, AckBatch, AckRefused, Acquired, Limits, LogBounds, SharePartition};
