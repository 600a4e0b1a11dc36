//! The Kafka layer, tested through the protocol against agents started in
//! this process.

mod ordering;
mod support;
mod txn_end;
