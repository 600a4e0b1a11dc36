//! Length-prefixed Kafka frames.
//!
//! Every Kafka request and response is a 4-byte big-endian size followed by that
//! many bytes. The size is checked against a configured limit *before* any buffer
//! is allocated for the body, so a hostile or broken peer cannot make the agent
//! reserve memory it never sends.

use bytes::{BufMut, BytesMut};
use tokio_util::codec::LengthDelimitedCodec;

/// Default largest request accepted (Kafka's `socket.request.max.bytes`).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 100 * 1024 * 1024;

/// A codec that splits a byte stream into Kafka request frames (without the
/// length prefix) and refuses frames larger than `max_frame_bytes`.
pub fn codec(max_frame_bytes: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .big_endian()
        .max_frame_length(max_frame_bytes)
        .new_codec()
}

/// Writes a frame: reserves the 4-byte size, lets `body` append, then fills the size in.
pub fn write_frame<E>(
    out: &mut BytesMut,
    body: impl FnOnce(&mut BytesMut) -> Result<(), E>,
) -> Result<(), E> {
    let start = out.len();
    out.put_i32(0);
    body(out)?;
    let len = (out.len() - start - 4) as i32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}
