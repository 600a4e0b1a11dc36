//! Length-prefixed Kafka frames.
//!
//! Every Kafka request and response is a 4-byte big-endian size followed by that
//! many bytes. The size is checked against a configured limit *before* any buffer
//! is allocated for the body, so a hostile or broken peer cannot make the agent
//! reserve memory it never sends.

use bytes::{Buf, BufMut, BytesMut};
use tokio_util::codec::Decoder;

/// Default largest request accepted (Kafka's `socket.request.max.bytes`).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 100 * 1024 * 1024;

/// Splits a byte stream into Kafka request frames (without the length
/// prefix) and refuses frames larger than `max_frame_bytes`.
///
/// Unlike `LengthDelimitedCodec`, it never reserves the announced size: the
/// read buffer grows only as bytes arrive, so a peer that announces 100 MiB
/// and sends ten bytes (or trickles, slowloris-style) costs what it sent.
#[derive(Debug, Clone, Copy)]
pub struct FrameCodec {
    max_frame_bytes: usize,
}

pub fn codec(max_frame_bytes: usize) -> FrameCodec {
    FrameCodec { max_frame_bytes }
}

impl Decoder for FrameCodec {
    type Item = BytesMut;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, std::io::Error> {
        let Some(len) = frame_size(src, self.max_frame_bytes)? else {
            return Ok(None);
        };
        if src.len() - 4 < len {
            return Ok(None);
        }
        src.advance(4);
        Ok(Some(src.split_to(len)))
    }
}

/// The size the frame starting `buf` announces, once its 4 bytes are in
/// (`None` before), refused outside `0..=max_frame_bytes`.
pub fn frame_size(buf: &[u8], max_frame_bytes: usize) -> Result<Option<usize>, std::io::Error> {
    let Some(head) = buf.get(..4) else {
        return Ok(None);
    };
    let len = i32::from_be_bytes(head.try_into().expect("4 bytes"));
    if len < 0 || len as usize > max_frame_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "frame of {len} bytes is outside 0..={max_frame_bytes} (socket.request.max.bytes)"
            ),
        ));
    }
    Ok(Some(len as usize))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announced_size_reserves_nothing() {
        let mut codec = codec(DEFAULT_MAX_FRAME_BYTES);
        let mut src = BytesMut::with_capacity(64);
        src.put_i32(50 * 1024 * 1024);
        src.put_slice(b"0123456789");
        assert!(codec.decode(&mut src).unwrap().is_none());
        assert!(src.capacity() < 1024, "reserved {} bytes", src.capacity());
    }

    #[test]
    fn frames_split_and_limits_hold() {
        let mut codec = codec(8);
        let mut src = BytesMut::new();
        src.put_i32(3);
        src.put_slice(b"abc");
        src.put_i32(0);
        src.put_i32(2);
        src.put_slice(b"x");
        assert_eq!(&codec.decode(&mut src).unwrap().unwrap()[..], b"abc");
        assert!(codec.decode(&mut src).unwrap().unwrap().is_empty());
        assert!(codec.decode(&mut src).unwrap().is_none(), "half a frame");
        let mut big = BytesMut::new();
        big.put_i32(9);
        assert!(codec.decode(&mut big).is_err());
        let mut negative = BytesMut::new();
        negative.put_i32(-1);
        assert!(codec.decode(&mut negative).is_err());
    }
}
