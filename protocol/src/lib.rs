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
pub mod validate;
pub mod versions;
pub mod walk;

pub use kafka_protocol;
pub use kafka_protocol::ResponseError;

/// A Kafka string of `s` (the protocol's `StrBytes`).
pub fn str_bytes(s: &str) -> kafka_protocol::protocol::StrBytes {
    kafka_protocol::protocol::StrBytes::from_string(s.to_string())
}

/// A Kafka error code as it goes on the wire (0 = none).
pub type ErrorCode = i16;

/// Shorthand for the wire code of a Kafka error.
pub const fn code(err: ResponseError) -> ErrorCode {
    err.code()
}

/// A message of the `consumer` group protocol (a member's subscription or
/// assignment, opaque bytes to the group coordinator): its version, then
/// the message at that version. A version newer than the codec knows is
/// read as the newest it does (later versions only add fields at the end).
/// `None` if the bytes do not decode (decoding allocates no more than the
/// bytes present, as everywhere: see the vendored codec's patch).
pub fn decode_consumer_protocol<T>(bytes: &[u8]) -> Option<T>
where
    T: kafka_protocol::protocol::Decodable + kafka_protocol::protocol::Message,
{
    let (version, rest) = bytes.split_first_chunk::<2>()?;
    let version = i16::from_be_bytes(*version).clamp(T::VERSIONS.min, T::VERSIONS.max);
    let mut buf = bytes::Bytes::copy_from_slice(rest);
    T::decode(&mut buf, version).ok()
}

/// A message of the `consumer` group protocol as bytes: its version (the
/// newest the codec knows at most), then the message at that version.
pub fn encode_consumer_protocol<T>(message: &T, version: i16) -> bytes::Bytes
where
    T: kafka_protocol::protocol::Encodable + kafka_protocol::protocol::Message,
{
    use bytes::BufMut;
    let version = version.clamp(T::VERSIONS.min, T::VERSIONS.max);
    let mut buf = bytes::BytesMut::new();
    buf.put_i16(version);
    // Every field of these messages encodes at every version they have.
    if message.encode(&mut buf, version).is_err() {
        buf.truncate(2);
    }
    buf.freeze()
}
