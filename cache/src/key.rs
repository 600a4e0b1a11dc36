//! What names a cached block, and its encoding in foyer's disk tier.

use std::io::{Read, Write};
use std::sync::Arc;

use foyer::{Code, Error, ErrorKind};

/// Longest object key a block may name (floe's keys are under 100 bytes).
pub const MAX_OBJECT_KEY_BYTES: usize = 1024;

/// Written first in each key on disk: a key of another layout does not
/// decode. (Such a key hashes elsewhere than any key of this layout, so a
/// lookup never meets it.)
const KEY_FORMAT: u8 = 1;

/// One block of one object. Objects are immutable and their keys are never
/// reused (safety rule 2), so an object's key and size, with the block size
/// and index, name the block's bytes for ever: a cached block is never
/// stale, and the disk tier may be recovered after a restart, even one that
/// changed `cache_block_bytes`. The size is part of the name so that a
/// reader that got it wrong (a peer asking with a bad size) cannot plant a
/// short block under the name correct readers use.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlockKey {
    pub object: Arc<str>,
    pub object_size: u64,
    pub block_bytes: u64,
    pub block: u64,
}

impl BlockKey {
    /// The bytes of the object this block holds.
    pub fn range(&self) -> std::ops::Range<u64> {
        let start = self.block.saturating_mul(self.block_bytes);
        start..start.saturating_add(self.block_bytes).min(self.object_size)
    }

    /// Where the bytes of the object's `range` that this block holds lie in
    /// the block (an empty range if none do).
    pub fn part_of(&self, range: &std::ops::Range<u64>) -> std::ops::Range<usize> {
        let block = self.range();
        let from = range.start.clamp(block.start, block.end) - block.start;
        let to = range.end.clamp(block.start, block.end) - block.start;
        from as usize..to.max(from) as usize
    }

    /// How many bytes the block holds.
    pub fn length(&self) -> usize {
        let range = self.range();
        range.end.saturating_sub(range.start) as usize
    }

    /// Whether the block lies inside its object (a block past the end names nothing).
    pub fn is_within(&self) -> bool {
        self.block_bytes > 0 && self.block < self.object_size.div_ceil(self.block_bytes)
    }
}

impl Code for BlockKey {
    fn encode(&self, writer: &mut impl Write) -> foyer::Result<()> {
        let object = self.object.as_bytes();
        writer
            .write_all(&[KEY_FORMAT])
            .and_then(|()| writer.write_all(&(object.len() as u32).to_le_bytes()))
            .and_then(|()| writer.write_all(object))
            .and_then(|()| writer.write_all(&self.object_size.to_le_bytes()))
            .and_then(|()| writer.write_all(&self.block_bytes.to_le_bytes()))
            .and_then(|()| writer.write_all(&self.block.to_le_bytes()))
            .map_err(Error::io_error)
    }

    fn decode(reader: &mut impl Read) -> foyer::Result<Self> {
        let mut format = [0u8; 1];
        reader.read_exact(&mut format).map_err(Error::io_error)?;
        if format[0] != KEY_FORMAT {
            return Err(Error::new(
                ErrorKind::Parse,
                "cached block key of another format",
            ));
        }
        let mut word = [0u8; 4];
        reader.read_exact(&mut word).map_err(Error::io_error)?;
        let len = u32::from_le_bytes(word) as usize;
        if len > MAX_OBJECT_KEY_BYTES {
            return Err(Error::new(ErrorKind::Parse, "cached block key too long"));
        }
        let mut object = vec![0u8; len];
        reader.read_exact(&mut object).map_err(Error::io_error)?;
        let object = String::from_utf8(object)
            .map_err(|_| Error::new(ErrorKind::Parse, "cached block key is not UTF-8"))?;
        let mut long = [0u8; 8];
        reader.read_exact(&mut long).map_err(Error::io_error)?;
        let object_size = u64::from_le_bytes(long);
        reader.read_exact(&mut long).map_err(Error::io_error)?;
        let block_bytes = u64::from_le_bytes(long);
        reader.read_exact(&mut long).map_err(Error::io_error)?;
        Ok(BlockKey {
            object: Arc::from(object),
            object_size,
            block_bytes,
            block: u64::from_le_bytes(long),
        })
    }

    fn estimated_size(&self) -> usize {
        1 + 4 + self.object.len() + 24
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_survive_the_disk_encoding() {
        let key = BlockKey {
            object: Arc::from("merged/ab/0193-xyz"),
            object_size: 9_000_000,
            block_bytes: 1 << 20,
            block: 2,
        };
        let mut bytes = Vec::new();
        key.encode(&mut bytes).unwrap();
        assert_eq!(bytes.len(), key.estimated_size());
        assert_eq!(BlockKey::decode(&mut bytes.as_slice()).unwrap(), key);
        let mut long = vec![KEY_FORMAT];
        long.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(BlockKey::decode(&mut long.as_slice()).is_err());
        bytes[0] = KEY_FORMAT + 1;
        assert!(BlockKey::decode(&mut bytes.as_slice()).is_err());
    }

    #[test]
    fn ranges_end_at_the_object() {
        let key = |block_bytes, block| BlockKey {
            object: Arc::from("o"),
            object_size: 10,
            block_bytes,
            block,
        };
        assert_eq!(key(4, 0).range(), 0..4);
        assert_eq!(key(4, 2).range(), 8..10);
        assert_eq!(key(4, 2).length(), 2);
        assert!(key(4, 2).is_within());
        assert!(!key(4, 3).is_within());
        assert!(!key(0, 0).is_within());
    }
}
