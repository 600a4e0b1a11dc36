//! The Kafka wire protocol as floe speaks it.
//!
//! Message structs come from the `kafka-protocol` crate; this crate adds what a
//! broker needs around them: framing with a size limit checked before allocation,
//! request decoding that never panics on garbage, the table of API versions floe
//! serves, and a zero-copy view of v2 record batches (header parse, CRC32C check,
//! base-offset patch) so that batches are validated and forwarded without being
//! decompressed.

pub mod batch;
#[cfg(feature = "client")]
pub mod client;
pub mod compression;
pub mod frame;
pub mod records;
pub mod request;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod versions;

pub use kafka_protocol;
pub use kafka_protocol::ResponseError;

/// A Kafka error code as it goes on the wire (0 = none).
pub type ErrorCode = i16;

/// Shorthand for the wire code of a Kafka error.
pub const fn code(err: ResponseError) -> ErrorCode {
    err.code()
}
