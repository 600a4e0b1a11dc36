//! What the benchmark reads of fetched records: the whole batches, and the
//! offset after each.

use bytes::{Buf, Bytes};

/// The whole batches in `records`, in order; a batch cut short at the end
/// (a broker may fill its byte limit with part of one) is left out.
pub fn whole_batches(records: &Bytes) -> Vec<Bytes> {
    let mut batches = Vec::new();
    let mut at = 0;
    while records.len() - at >= floe_protocol::batch::HEADER_LEN {
        let length = (&records[at + 8..at + 12]).get_i32();
        let end = at + 12 + length.max(0) as usize;
        if length < 0 || end > records.len() {
            break;
        }
        batches.push(records.slice(at..end));
        at = end;
    }
    batches
}

/// The offset after `batch`'s last record.
pub fn batch_next_offset(batch: &[u8]) -> i64 {
    let base = (&batch[0..8]).get_i64();
    let last_delta = (&batch[23..27]).get_i32() as i64;
    base + last_delta + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base: i64, last_delta: i32, body: usize) -> Vec<u8> {
        let mut b = vec![0u8; floe_protocol::batch::HEADER_LEN + body];
        b[0..8].copy_from_slice(&base.to_be_bytes());
        let length = (b.len() - 12) as i32;
        b[8..12].copy_from_slice(&length.to_be_bytes());
        b[23..27].copy_from_slice(&last_delta.to_be_bytes());
        b
    }

    #[test]
    fn a_batch_cut_short_is_left_for_the_next_fetch() {
        let mut bytes = batch(0, 9, 5);
        bytes.extend(batch(10, 4, 3));
        let whole = bytes.len();
        bytes.extend(&batch(15, 0, 40)[..30]);
        let bytes = Bytes::from(bytes);
        let batches = whole_batches(&bytes);
        assert_eq!(batches.len(), 2);
        assert_eq!(batches.iter().map(Bytes::len).sum::<usize>(), whole);
        assert_eq!(batch_next_offset(&batches[0]), 10);
        assert_eq!(batch_next_offset(&batches[1]), 15);
    }
}
