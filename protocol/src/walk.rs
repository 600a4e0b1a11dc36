//! Walking the records of a batch one at a time, each borrowed from the
//! batch's records section: nothing is allocated per record, however many
//! records a batch holds, so the work a batch costs is bounded by its bytes
//! (at most [`crate::compression::MAX_DECOMPRESSED_BATCH_BYTES`] once
//! decompressed), never by the count its header claims.
//!
//! A walk checks the records' framing as Kafka's `DefaultRecord.readFrom`
//! does: every length within its record, the record's fields filling it,
//! exactly the header's count of records and no byte after the last. Its
//! errors are `INVALID_RECORD`, as Kafka's `InvalidRecordException`.
//!
//! ```text
//! record:  length (varint), attributes (i8), timestamp delta (varlong),
//!          offset delta (varint), key length (varint, -1: null), key,
//!          value length (varint, -1: null), value, header count (varint),
//!          headers: key length (varint), key, value length (varint), value
//! ```

use std::ops::Range;

use bytes::Bytes;

use crate::batch::{BatchError, HEADER_LEN, RecordBatch};
use crate::compression::{decompress, decompressed_limit};

/// A batch's records section, decompressed within the codec's bounds (the
/// batch's own bytes, without a copy, when it is not compressed).
pub fn section(batch: &RecordBatch) -> Result<Bytes, BatchError> {
    let payload = batch.bytes().slice(HEADER_LEN..);
    match batch.codec() {
        crate::batch::Codec::None => Ok(payload),
        codec => decompress(codec, &payload, decompressed_limit(codec, payload.len())),
    }
}

/// One record, borrowed from its section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// Its place in the batch, from 0.
    pub index: i32,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// Its headers, as they lie (see [`RecordView::headers`]).
    headers: &'a [u8],
    header_count: i32,
    /// Where the record's bytes lie in the section, after its length.
    pub body: Range<usize>,
    /// Where its offset delta lies in the section.
    pub offset_delta_span: Range<usize>,
}

impl<'a> RecordView<'a> {
    /// Its headers, key and value, in order (keys are strings on the wire;
    /// given as they lie, UTF-8 or not).
    pub fn headers(&self) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a {
        let (bytes, count) = (self.headers, self.header_count);
        let mut at = 0;
        // Checked when the record was walked: every header is whole.
        (0..count).map_while(move |_| {
            let key = bytes_field(bytes, &mut at)?.unwrap_or_default();
            let value = bytes_field(bytes, &mut at)?;
            Some((key, value))
        })
    }

    pub fn header_count(&self) -> i32 {
        self.header_count
    }
}

/// The records of a section, as many as the batch counts; [`Walk::finish`]
/// then checks nothing is left over. After an error it yields nothing more.
pub struct Walk<'a> {
    section: &'a [u8],
    at: usize,
    next: i32,
    count: i32,
    failed: bool,
}

impl<'a> Walk<'a> {
    pub fn new(section: &'a [u8], count: i32) -> Walk<'a> {
        Walk {
            section,
            at: 0,
            next: 0,
            count: count.max(0),
            failed: false,
        }
    }

    /// Whether the walk read exactly the batch's records: all of them, and
    /// no byte after the last.
    pub fn finish(mut self) -> Result<(), BatchError> {
        for record in self.by_ref() {
            record?;
        }
        match self.at == self.section.len() {
            true => Ok(()),
            false => Err(BatchError::Invalid(
                "incorrect declared batch size: records remain past the count",
            )),
        }
    }

    fn read(&mut self) -> Result<RecordView<'a>, BatchError> {
        let bad = |why| BatchError::Invalid(why);
        let length = varint(self.section, &mut self.at).ok_or(bad(
            "incorrect declared batch size: premature end of the records",
        ))?;
        let end = usize::try_from(length)
            .ok()
            .filter(|&l| l > 0)
            .and_then(|l| self.at.checked_add(l))
            .filter(|&end| end <= self.section.len())
            .ok_or(bad("invalid record size: past the end of the records"))?;
        // Every field is read within the record's own bytes.
        let record = &self.section[..end];
        let mut at = self.at + 1; // past the attributes
        let fields = || bad("invalid record: a field runs past the record");
        let timestamp_delta = varlong(record, &mut at).ok_or_else(fields)?;
        let delta_at = at;
        let offset_delta = varint(record, &mut at).ok_or_else(fields)?;
        let offset_delta_span = delta_at..at;
        let key = bytes_field(record, &mut at).ok_or_else(fields)?;
        let value = bytes_field(record, &mut at).ok_or_else(fields)?;
        let header_count = varint(record, &mut at)
            .filter(|&n| n >= 0)
            .ok_or(bad("invalid record: a negative number of headers"))?;
        let headers_at = at;
        for _ in 0..header_count {
            // A header's key is a string, never null; its value may be.
            bytes_field(record, &mut at)
                .flatten()
                .ok_or(bad("invalid record: a header runs past the record"))?;
            bytes_field(record, &mut at).ok_or_else(fields)?;
        }
        if at != end {
            return Err(bad("invalid record size: fields do not fill the record"));
        }
        let body = self.at..end;
        self.at = end;
        Ok(RecordView {
            index: self.next,
            timestamp_delta,
            offset_delta,
            key,
            value,
            headers: &record[headers_at..end],
            header_count,
            body,
            offset_delta_span,
        })
    }
}

impl<'a> Iterator for Walk<'a> {
    type Item = Result<RecordView<'a>, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.next >= self.count {
            return None;
        }
        let record = self.read();
        self.failed = record.is_err();
        self.next += 1;
        Some(record)
    }
}

/// Moves `at` past a length-prefixed field: `Some(None)` for null (-1),
/// `None` if it runs past `buf` or its length is below -1. (Kafka's Java
/// reader takes any negative length for null; other clients' decoders, as
/// the `kafka-protocol` crate's, refuse it: such a record is refused, so
/// that every client reads what floe stores.)
fn bytes_field<'a>(buf: &'a [u8], at: &mut usize) -> Option<Option<&'a [u8]>> {
    let length = varint(buf, at)?;
    if length == -1 {
        return Some(None);
    }
    let start = *at;
    let end = start.checked_add(usize::try_from(length).ok()?)?;
    (end <= buf.len()).then(|| {
        *at = end;
        Some(&buf[start..end])
    })
}

/// A zigzag varint that fits an `i32`, as Kafka reads record lengths and
/// offset deltas (at most five bytes).
pub(crate) fn varint(buf: &[u8], at: &mut usize) -> Option<i32> {
    let start = *at;
    let value = varlong(buf, at)?;
    if *at - start > 5 {
        return None;
    }
    i32::try_from(value).ok()
}

/// A zigzag varint at `at` (moved past it), as the record format writes
/// lengths and deltas; `None` if it runs past `buf` or over ten bytes.
pub(crate) fn varlong(buf: &[u8], at: &mut usize) -> Option<i64> {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *buf.get(*at)?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(((value >> 1) as i64) ^ -((value & 1) as i64));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::encode;
    use kafka_protocol::records::Compression;

    #[test]
    fn walks_every_record_of_every_codec_as_the_decoder_reads_it() {
        for compression in crate::testing::CODECS {
            let values: Vec<Vec<u8>> = (0..50).map(|i| vec![i as u8; 30 + i]).collect();
            let batch = RecordBatch::parse_all(&encode(&values, compression))
                .unwrap()
                .remove(0);
            let decoded = crate::records::decode(&batch).unwrap();
            let section = section(&batch).unwrap();
            let walked: Vec<_> = Walk::new(&section, batch.record_count())
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(walked.len(), decoded.len());
            for (view, record) in walked.iter().zip(&decoded) {
                assert_eq!(
                    batch.base_offset() + view.offset_delta as i64,
                    record.offset
                );
                assert_eq!(
                    batch.base_timestamp() + view.timestamp_delta,
                    record.timestamp
                );
                assert_eq!(view.key, record.key.as_deref());
                assert_eq!(view.value, record.value.as_deref());
                let headers: Vec<_> = view.headers().collect();
                assert_eq!(headers.len(), record.headers.len());
                assert_eq!(headers[0], (&b"h"[..], Some(&b"v"[..])));
            }
            Walk::new(&section, batch.record_count()).finish().unwrap();
        }
    }

    #[test]
    fn a_count_that_does_not_match_the_records_is_invalid() {
        let batch =
            RecordBatch::parse_all(&encode(&[b"a".to_vec(), b"b".to_vec()], Compression::None))
                .unwrap()
                .remove(0);
        let section = section(&batch).unwrap();
        assert!(Walk::new(&section, 2).finish().is_ok());
        assert!(matches!(
            Walk::new(&section, 1).finish(),
            Err(BatchError::Invalid(_))
        ));
        assert!(matches!(
            Walk::new(&section, 3).finish(),
            Err(BatchError::Invalid(_))
        ));
        // Truncated: the last record runs past the end.
        let cut = &section[..section.len() - 1];
        assert!(Walk::new(cut, 2).finish().is_err());
        // An error ends the walk.
        let mut walk = Walk::new(cut, 2);
        assert!(walk.next().unwrap().is_ok());
        assert!(walk.next().unwrap().is_err());
        assert!(walk.next().is_none());
    }

    /// Millions of records claimed by a few bytes cost a walk no memory:
    /// it stops at the first record that is not there.
    #[test]
    fn a_claimed_count_costs_nothing_past_the_bytes() {
        let walk = Walk::new(&[], i32::MAX);
        assert!(walk.finish().is_err());
    }
}
