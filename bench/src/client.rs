//! What the benchmark reads of fetched records.

use bytes::Buf;

/// The offset after the last whole batch in `records`.
pub fn next_offset(records: &[u8]) -> Option<i64> {
    let mut buf = records;
    let mut next = None;
    while buf.len() >= floe_protocol::batch::HEADER_LEN {
        let base = (&buf[0..8]).get_i64();
        let length = (&buf[8..12]).get_i32() as usize;
        let last_delta = (&buf[23..27]).get_i32() as i64;
        if buf.len() < 12 + length {
            break;
        }
        next = Some(base + last_delta + 1);
        buf = &buf[12 + length..];
    }
    next
}
