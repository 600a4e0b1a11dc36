//! Bounded decompression of record batch payloads.
//!
//! floe forwards compressed batches as they came, but a few background jobs
//! (ListOffsets by timestamp, key compaction) must read the records inside.
//! The codecs in `kafka-protocol` grow their output as long as the input says,
//! so a few hostile bytes could ask for gigabytes. Here every codec writes
//! into a buffer that stops at a limit, and the limit is never more than what
//! the compressed bytes could honestly expand to ([`max_expansion`]).

use std::io::Read;

use bytes::Bytes;

use crate::batch::{BatchError, Codec};

/// The largest payload floe decompresses for one batch, whatever the codec
/// could produce. Producers build batches of kilobytes to a few megabytes
/// (`batch.size`, `message.max.bytes`), so this only refuses the absurd.
pub const MAX_DECOMPRESSED_BATCH_BYTES: usize = 64 * 1024 * 1024;

/// How many times larger than its compressed form a payload can be, at most,
/// for each codec: the format's own ceiling, so no honest batch exceeds it.
///
/// - zstd: an RLE block of 4 bytes stands for up to 128 KiB (32,768 : 1).
/// - gzip (deflate): at most 258 bytes per 2 bits, about 1,032 : 1.
/// - lz4 frames: each extra 255 bytes of a match cost one length byte.
/// - snappy: a copy of 64 bytes takes 3 bytes (about 21 : 1).
pub fn max_expansion(codec: Codec) -> usize {
    match codec {
        Codec::None => 1,
        Codec::Gzip => 1_100,
        Codec::Snappy => 32,
        Codec::Lz4 => 256,
        Codec::Zstd => 33_000,
    }
}

/// The bytes a compressed payload of `compressed_len` bytes may decompress to.
pub fn decompressed_limit(codec: Codec, compressed_len: usize) -> usize {
    compressed_len
        .saturating_mul(max_expansion(codec))
        .min(MAX_DECOMPRESSED_BATCH_BYTES)
}

/// Compresses a batch's records payload in `codec` at `level`, or at the
/// codec's default as Kafka's (KIP-390): gzip 6, lz4 9, zstd 3. Snappy has
/// no levels. LZ4 is written as Kafka reads it, a frame of independent
/// blocks, and as Kafka compresses it: its default level 9 is LZ4's fast
/// compressor, any other level the high-compression one (liblz4 treats
/// levels 1 and 2 as fast, and those above 12 as 12). zstd is told the
/// input's size, so a high level's tables fit the batch (and the frame
/// says its size, which spares a reader a window sized for any input).
pub fn compress(codec: Codec, level: Option<i32>, input: &[u8]) -> Result<Vec<u8>, BatchError> {
    let mut compressing = Compressing::new(codec, level, Some(input.len()), usize::MAX)?;
    compressing.write(input)?;
    compressing.finish()
}

/// A batch's records payload compressed as it is written (as [`compress`]
/// compresses it), given up as soon as the compressed bytes pass a limit:
/// rebuilding a batch that cannot fit costs the work of filling the limit,
/// not of compressing everything it holds.
pub struct Compressing {
    encoder: Encoder,
    max_out: usize,
}

enum Encoder {
    None(Vec<u8>),
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Lz4(lz4::Encoder<Vec<u8>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
    /// Snappy compresses a whole block at once (fast enough not to stop early).
    Snappy(Vec<u8>),
}

/// How much input goes into an encoder between two looks at its output.
const CHUNK: usize = 64 * 1024;

impl Compressing {
    /// `size` is the input's exact size, if known (zstd is told it, so a
    /// high level's tables fit the batch and the frame says its size);
    /// `max_out` the most compressed bytes wanted.
    pub fn new(
        codec: Codec,
        level: Option<i32>,
        size: Option<usize>,
        max_out: usize,
    ) -> Result<Compressing, BatchError> {
        let failed = |_| BatchError::Invalid("records do not compress");
        let known = size.is_some();
        let size = size.unwrap_or(CHUNK);
        let capacity = (size / 2).min(max_out.saturating_add(CHUNK));
        let encoder = match codec {
            Codec::None => Encoder::None(Vec::with_capacity(size.min(max_out))),
            Codec::Gzip => {
                let level = level.filter(|l| (1..=9).contains(l)).unwrap_or(6) as u32;
                Encoder::Gzip(flate2::write::GzEncoder::new(
                    Vec::with_capacity(capacity),
                    flate2::Compression::new(level),
                ))
            }
            Codec::Lz4 => {
                let level = match level.filter(|l| (1..=17).contains(l)).unwrap_or(9) {
                    9 => 0, // liblz4's fast compressor, as Kafka's default
                    other => other as u32,
                };
                Encoder::Lz4(
                    lz4::EncoderBuilder::new()
                        .level(level)
                        .block_mode(lz4::BlockMode::Independent)
                        .build(Vec::with_capacity(capacity))
                        .map_err(failed)?,
                )
            }
            Codec::Zstd => {
                let mut encoder = zstd::stream::write::Encoder::new(
                    Vec::with_capacity(capacity),
                    level.unwrap_or(3),
                )
                .map_err(failed)?;
                if known {
                    encoder
                        .set_pledged_src_size(Some(size as u64))
                        .map_err(failed)?;
                    encoder.include_contentsize(true).map_err(failed)?;
                }
                Encoder::Zstd(encoder)
            }
            Codec::Snappy => Encoder::Snappy(Vec::with_capacity(size.min(CHUNK))),
        };
        Ok(Compressing { encoder, max_out })
    }

    /// Compresses `input` after what was written before; `TooLarge` once
    /// the compressed bytes pass the limit.
    pub fn write(&mut self, input: &[u8]) -> Result<(), BatchError> {
        use std::io::Write;
        let failed = |_| BatchError::Invalid("records do not compress");
        for chunk in input.chunks(CHUNK) {
            let out = match &mut self.encoder {
                Encoder::None(out) | Encoder::Snappy(out) => {
                    out.extend_from_slice(chunk);
                    out.len()
                }
                Encoder::Gzip(e) => {
                    e.write_all(chunk).map_err(failed)?;
                    e.get_ref().len()
                }
                Encoder::Lz4(e) => {
                    e.write_all(chunk).map_err(failed)?;
                    e.writer().len()
                }
                Encoder::Zstd(e) => {
                    e.write_all(chunk).map_err(failed)?;
                    e.get_ref().len()
                }
            };
            // Snappy's output is known only at the end (its input is
            // bounded by the batch's decompressed bound).
            let too_large = match &self.encoder {
                Encoder::Snappy(_) => false,
                Encoder::None(_) => out > self.max_out,
                _ => out > self.max_out.saturating_add(CHUNK),
            };
            if too_large {
                return Err(BatchError::TooLarge);
            }
        }
        Ok(())
    }

    /// The compressed bytes; `TooLarge` if they pass the limit.
    pub fn finish(self) -> Result<Vec<u8>, BatchError> {
        let failed = |_| BatchError::Invalid("records do not compress");
        let out = match self.encoder {
            Encoder::None(out) => out,
            Encoder::Gzip(e) => e.finish().map_err(failed)?,
            Encoder::Lz4(e) => {
                let (out, finished) = e.finish();
                finished.map_err(failed)?;
                out
            }
            Encoder::Zstd(e) => e.finish().map_err(failed)?,
            Encoder::Snappy(input) => {
                use kafka_protocol::compression::{Compressor, Snappy};
                let mut out = bytes::BytesMut::new();
                Snappy::compress(
                    &mut out,
                    |buf: &mut bytes::BytesMut| -> anyhow::Result<()> {
                        buf.extend_from_slice(&input);
                        Ok(())
                    },
                )
                .map_err(|_| BatchError::Invalid("records do not compress"))?;
                out.to_vec()
            }
        };
        match out.len() > self.max_out {
            true => Err(BatchError::TooLarge),
            false => Ok(out),
        }
    }
}

/// Decompresses a batch's records payload, refusing output past `limit` bytes.
pub fn decompress(codec: Codec, input: &[u8], limit: usize) -> Result<Bytes, BatchError> {
    let out = match codec {
        Codec::None => {
            if input.len() > limit {
                return Err(too_large());
            }
            return Ok(Bytes::copy_from_slice(input));
        }
        Codec::Gzip => read_bounded(flate2::read::MultiGzDecoder::new(input), limit)?,
        Codec::Zstd => {
            let decoder = zstd::stream::read::Decoder::new(input).map_err(|_| corrupt())?;
            read_bounded(decoder, limit)?
        }
        Codec::Lz4 => {
            let decoder = lz4::Decoder::new(input).map_err(|_| corrupt())?;
            read_bounded(decoder, limit)?
        }
        Codec::Snappy => snappy(input, limit)?,
    };
    Ok(Bytes::from(out))
}

fn corrupt() -> BatchError {
    BatchError::Corrupt("compressed records do not decompress")
}

/// Why [`decompress`] refused output past its limit (as
/// `BatchError::Corrupt`'s text).
pub const PAST_THE_LIMIT: &str = "compressed records decompress past the limit";

fn too_large() -> BatchError {
    BatchError::Corrupt(PAST_THE_LIMIT)
}

/// Reads a decoder to its end, refusing more than `limit` bytes. The buffer
/// grows as bytes come out, not from any size the input announces, by
/// doubling but never past `limit`: a payload that decompresses without end
/// costs `limit` bytes at most (`read_to_end` doubles to twice the limit to
/// find the byte past it: a 20 KB zstd bomb cost 128 MiB).
fn read_bounded(mut decoder: impl Read, limit: usize) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let n = match decoder.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(corrupt()),
        };
        let len = out.len() + n;
        if len > limit {
            return Err(too_large());
        }
        if len > out.capacity() {
            let grown = out.capacity().saturating_mul(2).clamp(len, limit);
            out.reserve_exact(grown - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// The xerial framing Kafka clients use: an 8-byte magic and two version
/// ints, then blocks of `[u32 length][raw snappy]`. Without the magic the
/// payload is one raw snappy block (as the Java client accepts).
fn snappy(input: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
    const MAGIC: &[u8] = b"\x82SNAPPY\x00";
    const HEADER: usize = 16;
    let mut out = Vec::new();
    if !input.starts_with(MAGIC) {
        snappy_block(input, &mut out, limit)?;
        return Ok(out);
    }
    let mut rest = input.get(HEADER..).ok_or_else(corrupt)?;
    while !rest.is_empty() {
        let len_bytes: [u8; 4] = rest.get(..4).ok_or_else(corrupt)?.try_into().unwrap();
        let len = u32::from_be_bytes(len_bytes) as usize;
        let block = rest.get(4..4 + len).ok_or_else(corrupt)?;
        snappy_block(block, &mut out, limit)?;
        rest = &rest[4 + len..];
    }
    Ok(out)
}

fn snappy_block(block: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), BatchError> {
    // The block announces its decompressed size: check it before allocating.
    let len = snap::raw::decompress_len(block).map_err(|_| corrupt())?;
    if out.len().saturating_add(len) > limit {
        return Err(too_large());
    }
    let start = out.len();
    out.resize(start + len, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|_| corrupt())?;
    out.truncate(start + written);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zstd_of(data: &[u8]) -> Vec<u8> {
        zstd::encode_all(data, 3).unwrap()
    }

    #[test]
    fn every_codec_round_trips_within_its_expansion() {
        let data = vec![7u8; 1 << 20];
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&data).unwrap();
        let gz = gz.finish().unwrap();
        let mut lz = lz4::EncoderBuilder::new().build(Vec::new()).unwrap();
        lz.write_all(&data).unwrap();
        let (lz, _) = lz.finish();
        let raw_snappy = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        for (codec, compressed) in [
            (Codec::Gzip, gz),
            (Codec::Zstd, zstd_of(&data)),
            (Codec::Lz4, lz),
            (Codec::Snappy, raw_snappy),
        ] {
            let limit = decompressed_limit(codec, compressed.len());
            assert!(
                limit >= data.len(),
                "{codec:?}: limit {limit} below honest output"
            );
            let out = decompress(codec, &compressed, limit).unwrap();
            assert_eq!(out.len(), data.len(), "{codec:?}");
            // One byte less than the output is refused, never truncated.
            assert!(decompress(codec, &compressed, data.len() - 1).is_err());
        }
    }

    #[test]
    fn a_snappy_block_announcing_gigabytes_is_refused_before_allocating() {
        // Varint 0xFFFFFFFF as the block's decompressed length, then nothing.
        let block = [0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(decompress(Codec::Snappy, &block, 1 << 20).is_err());
        let mut framed = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
        framed.extend_from_slice(&(block.len() as u32).to_be_bytes());
        framed.extend_from_slice(&block);
        assert!(decompress(Codec::Snappy, &framed, 1 << 20).is_err());
    }

    #[test]
    fn reading_never_reserves_past_the_limit() {
        use std::io::Read;
        let limit = (3 << 20) + 5;
        let out = read_bounded(std::io::repeat(1).take(limit as u64), limit).unwrap();
        assert_eq!(out.len(), limit);
        assert!(out.capacity() <= limit, "{} reserved", out.capacity());
        let endless = std::io::repeat(0).take(1 << 30);
        assert_eq!(read_bounded(endless, limit).unwrap_err(), too_large());
    }

    #[test]
    fn a_zstd_bomb_stops_at_the_limit() {
        let bomb = zstd_of(&vec![0u8; 32 << 20]);
        assert!(bomb.len() < 4096);
        assert_eq!(
            decompress(Codec::Zstd, &bomb, 1 << 20).unwrap_err(),
            too_large()
        );
    }

    #[test]
    fn garbage_is_corrupt_for_every_codec() {
        for codec in [Codec::Gzip, Codec::Zstd, Codec::Lz4, Codec::Snappy] {
            assert!(decompress(codec, b"definitely not compressed", 1 << 20).is_err());
        }
    }
}
