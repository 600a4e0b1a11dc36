//! Turning one request frame into a typed request, without ever panicking.

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use kafka_protocol::protocol::decode_request_header_from_buffer;

use crate::versions;

/// What a request frame turned out to be.
#[derive(Debug)]
pub enum Decoded {
    /// A request of an API and version floe serves.
    Request {
        header: RequestHeader,
        body: Box<RequestKind>,
    },
    /// An ApiVersions request of a version newer than floe knows. Kafka answers
    /// these with a v0 response carrying UNSUPPORTED_VERSION and the supported
    /// ranges, so that the client can retry with a version both sides know.
    ApiVersionsTooNew { correlation_id: i32 },
}

/// Why a frame could not be decoded. Kafka closes the connection in all of these cases.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("frame of {0} bytes is too short for a request header")]
    TooShort(usize),
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    #[error("{api:?} v{version} is not supported (floe serves v{min}..=v{max})")]
    UnsupportedVersion {
        api: ApiKey,
        version: i16,
        min: i16,
        max: i16,
    },
    #[error("{api:?} is not served by floe")]
    UnsupportedApi { api: ApiKey },
    #[error("malformed {api:?} v{version} request: {reason}")]
    Malformed {
        api: ApiKey,
        version: i16,
        reason: String,
    },
}

/// The api key, version and correlation id at the start of every request frame.
/// Only fails when the frame is shorter than those 8 bytes.
pub fn peek_header(frame: &[u8]) -> Result<(i16, i16, i32), DecodeError> {
    let mut buf = frame;
    if buf.len() < 8 {
        return Err(DecodeError::TooShort(frame.len()));
    }
    Ok((buf.get_i16(), buf.get_i16(), buf.get_i32()))
}

/// Decodes a request frame (without its length prefix). The record batches of a
/// Produce request stay slices of `frame`: nothing is copied.
pub fn decode(mut frame: Bytes) -> Result<Decoded, DecodeError> {
    let (key, version, correlation_id) = peek_header(&frame)?;
    let api = ApiKey::try_from(key).map_err(|_| DecodeError::UnknownApiKey(key))?;
    let Some(range) = versions::served(api) else {
        return Err(DecodeError::UnsupportedApi { api });
    };
    if version < range.min || version > range.max {
        if api == ApiKey::ApiVersions && version > range.max {
            return Ok(Decoded::ApiVersionsTooNew { correlation_id });
        }
        return Err(DecodeError::UnsupportedVersion {
            api,
            version,
            min: range.min,
            max: range.max,
        });
    }
    let malformed = |e: anyhow::Error| DecodeError::Malformed {
        api,
        version,
        reason: e.to_string(),
    };
    let header = decode_request_header_from_buffer(&mut frame).map_err(malformed)?;
    let body = RequestKind::decode(api, &mut frame, version).map_err(malformed)?;
    Ok(Decoded::Request {
        header,
        body: Box::new(body),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::{MetadataRequest, RequestHeader};
    use kafka_protocol::protocol::{Encodable, StrBytes, encode_request_header_into_buffer};
    use proptest::prelude::*;

    fn encode_metadata(version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Metadata as i16)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .with_client_id(Some(StrBytes::from_static_str("t")));
        encode_request_header_into_buffer(&mut buf, &header).unwrap();
        MetadataRequest::default()
            .with_topics(None)
            .encode(&mut buf, version)
            .unwrap();
        buf.freeze()
    }

    #[test]
    fn decodes_a_metadata_request() {
        for version in [1, 9, 12] {
            match decode(encode_metadata(version)).unwrap() {
                Decoded::Request { header, body } => {
                    assert_eq!(header.correlation_id, 7);
                    assert!(matches!(*body, RequestKind::Metadata(_)));
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn short_and_unknown_frames_are_errors() {
        assert!(matches!(
            decode(Bytes::from_static(&[0, 3])),
            Err(DecodeError::TooShort(2))
        ));
        assert!(matches!(
            decode(Bytes::from_static(&[0x7f, 0, 0, 0, 0, 0, 0, 1])),
            Err(DecodeError::UnknownApiKey(0x7f00))
        ));
    }

    #[test]
    fn truncated_request_is_malformed() {
        let full = encode_metadata(9);
        let cut = full.slice(..full.len() - 1);
        assert!(matches!(decode(cut), Err(DecodeError::Malformed { .. })));
    }

    #[test]
    fn huge_array_count_does_not_allocate() {
        // Metadata v1: header, then a topics array claiming i32::MAX entries.
        let mut buf = BytesMut::new();
        buf.put_i16(ApiKey::Metadata as i16);
        buf.put_i16(1);
        buf.put_i32(1);
        buf.put_i16(-1); // null client id
        buf.put_i32(i32::MAX);
        assert!(matches!(
            decode(buf.freeze()),
            Err(DecodeError::Malformed { .. })
        ));
    }

    proptest! {
        #[test]
        fn garbage_never_panics(key in 0i16..80, version in 0i16..20, body in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut buf = BytesMut::new();
            buf.put_i16(key);
            buf.put_i16(version);
            buf.put_i32(1);
            buf.put_slice(&body);
            let _ = decode(buf.freeze());
        }
    }
}
