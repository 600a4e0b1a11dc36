//! A minimal pipelining Kafka client over the `kafka-protocol` message
//! types: the benchmark's load generator and the `floe topics` / `floe
//! groups` tools speak to brokers through it. Every wait has a deadline.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use anyhow::{Context, bail};
use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes, encode_request_header_into_buffer};
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::frame;

/// How long a connection may take to open, and a response to arrive.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Connection {
    framed: Framed<TcpStream, LengthDelimitedCodec>,
    next_correlation: i32,
    client_id: StrBytes,
}

impl Connection {
    pub async fn connect(address: &str, client_id: &'static str) -> anyhow::Result<Connection> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address))
            .await
            .with_context(|| format!("connecting to {address}: no answer in {CONNECT_TIMEOUT:?}"))?
            .with_context(|| format!("connecting to {address}"))?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            // Frames are checked against the broker's own frame limit;
            // tokio's codec also writes the length prefix of requests.
            framed: Framed::new(
                stream,
                LengthDelimitedCodec::builder()
                    .length_field_length(4)
                    .max_frame_length(frame::DEFAULT_MAX_FRAME_BYTES)
                    .new_codec(),
            ),
            next_correlation: 1,
            client_id: StrBytes::from_static_str(client_id),
        })
    }

    /// Sends one request without waiting for its response; returns its
    /// correlation id, for [`Connection::receive`].
    pub async fn send<Req: Encodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &Req,
    ) -> anyhow::Result<i32> {
        let correlation_id = self.next_correlation;
        self.next_correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(api as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let mut buf = BytesMut::new();
        encode_request_header_into_buffer(&mut buf, &header)?;
        request.encode(&mut buf, version)?;
        self.framed.send(buf.freeze()).await?;
        Ok(correlation_id)
    }

    /// The next response, which must answer request `expected`. Safe to
    /// cancel (in a `select!`) while it waits: a frame half read stays
    /// buffered for the next call.
    pub async fn receive<Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        expected: i32,
    ) -> anyhow::Result<Resp> {
        let frame = tokio::time::timeout(RESPONSE_TIMEOUT, self.framed.next())
            .await
            .with_context(|| format!("no response to {api:?} in {RESPONSE_TIMEOUT:?}"))?
            .context("connection closed")??;
        let mut bytes = frame.freeze();
        let header = ResponseHeader::decode(&mut bytes, api.response_header_version(version))?;
        if header.correlation_id != expected {
            bail!(
                "response {} arrived for request {expected}",
                header.correlation_id
            );
        }
        Resp::decode(&mut bytes, version)
    }

    pub async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &Req,
    ) -> anyhow::Result<Resp> {
        let id = self.send(api, version, request).await?;
        self.receive(api, version, id).await
    }

    /// Sends `request` `count` times keeping `in_flight` outstanding; checks each
    /// response and returns every request's latency.
    pub async fn pipeline<Req: Encodable, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &Req,
        count: usize,
        in_flight: usize,
        check: impl Fn(&Resp) -> anyhow::Result<()>,
    ) -> anyhow::Result<Vec<Duration>> {
        let mut outstanding = VecDeque::new();
        let mut latencies = Vec::with_capacity(count);
        let mut sent = 0;
        while latencies.len() < count {
            while sent < count && outstanding.len() < in_flight.max(1) {
                let id = self.send(api, version, request).await?;
                outstanding.push_back((id, Instant::now()));
                sent += 1;
            }
            let (id, at) = outstanding.pop_front().expect("one is outstanding");
            let response: Resp = self.receive(api, version, id).await?;
            latencies.push(at.elapsed());
            check(&response)?;
        }
        Ok(latencies)
    }
}
