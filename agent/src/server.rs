//! The Kafka listener and one task per connection.
//!
//! Clients pipeline requests (librdkafka keeps up to 5 in flight), and a
//! produce waits for the next flush, so requests of one connection are handled
//! concurrently while their responses are written strictly in request order.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use floe_protocol::frame;
use floe_protocol::kafka_protocol::messages::{ApiKey, ResponseHeader, ResponseKind};
use floe_protocol::kafka_protocol::protocol::Encodable;
use floe_protocol::request::{self, Decoded};
use futures::StreamExt;
use futures::stream::FuturesOrdered;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::FramedRead;

use crate::broker::Broker;
use crate::handlers;

/// Requests of one connection handled at once before reading pauses.
const MAX_IN_FLIGHT_PER_CONNECTION: usize = 64;

pub async fn serve(listener: TcpListener, broker: Arc<Broker>) -> std::io::Result<()> {
    loop {
        let (stream, peer) = listener.accept().await?;
        let broker = broker.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(stream, peer, broker).await {
                tracing::debug!(%peer, error = %e, "connection ended with an I/O error");
            }
        });
    }
}

async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    broker: Arc<Broker>,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let (read, mut write) = stream.into_split();
    let max_frame = broker.config.max_frame_bytes.as_u64() as usize;
    let mut frames = FramedRead::new(read, frame::codec(max_frame));
    let mut in_flight = FuturesOrdered::new();
    let mut reading = true;
    loop {
        tokio::select! {
            next = frames.next(), if reading && in_flight.len() < MAX_IN_FLIGHT_PER_CONNECTION => {
                match next {
                    Some(Ok(frame)) => match request::decode(frame.freeze()) {
                        Ok(decoded) => in_flight.push_back(respond(broker.clone(), decoded)),
                        Err(e) => {
                            tracing::warn!(%peer, error = %e, "closing connection: undecodable request");
                            reading = false;
                        }
                    },
                    Some(Err(e)) => {
                        tracing::warn!(%peer, error = %e, "closing connection: bad frame");
                        reading = false;
                    }
                    None => reading = false,
                }
            }
            Some(response) = in_flight.next() => match response {
                Ok(Some(bytes)) => write.write_all(&bytes).await?,
                Ok(None) => {}
                // A response that cannot be encoded would leave the client
                // waiting forever; closing makes it retry elsewhere.
                Err(()) => break,
            },
            else => break,
        }
        if !reading && in_flight.is_empty() {
            break;
        }
    }
    // Kafka closes the connection after a request it cannot parse; earlier
    // requests still got their responses above.
    write.shutdown().await
}

/// Handles one request and encodes its response frame (`None`: no response,
/// as for `acks=0` produces; `Err`: the response could not be encoded).
async fn respond(broker: Arc<Broker>, decoded: Decoded) -> Result<Option<Bytes>, ()> {
    let (api, version, correlation_id, response) = match decoded {
        Decoded::ApiVersionsTooNew { correlation_id } => (
            ApiKey::ApiVersions,
            0,
            correlation_id,
            ResponseKind::ApiVersions(handlers::api_versions::unsupported()),
        ),
        Decoded::Request { header, body } => {
            let api = ApiKey::try_from(header.request_api_key).map_err(|_| ())?;
            let version = header.request_api_version;
            let Some(response) = handlers::handle(&broker, &header, *body).await else {
                return Ok(None);
            };
            (api, version, header.correlation_id, response)
        }
    };
    let mut out = BytesMut::new();
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let encoded = frame::write_frame(&mut out, |buf| {
        header.encode(buf, api.response_header_version(version))?;
        response.encode(buf, version)
    });
    match encoded {
        Ok(()) => Ok(Some(out.freeze())),
        Err(e) => {
            tracing::error!(?api, version, error = %e, "could not encode response; closing connection");
            Err(())
        }
    }
}
