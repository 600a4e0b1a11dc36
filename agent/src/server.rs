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
use futures::future::BoxFuture;
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
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            // E.g. out of file descriptors: keep serving the connections we
            // have and try again shortly, rather than stopping the agent.
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
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
                        // Admission runs before the next request is read, so
                        // produced batches are enqueued in request order.
                        Ok(decoded) => in_flight.push_back(admit(broker.clone(), decoded).await),
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

/// A response frame being prepared: `Ok(None)` means no response (as for
/// `acks=0` produces), `Err` that the response could not be encoded.
type Responding = BoxFuture<'static, Result<Option<Bytes>, ()>>;

/// Starts handling one request (see [`handlers::admit`]) and returns the future
/// that finishes it and encodes its response frame.
async fn admit(broker: Arc<Broker>, decoded: Decoded) -> Responding {
    match decoded {
        Decoded::ApiVersionsTooNew { correlation_id } => {
            let response = ResponseKind::ApiVersions(handlers::api_versions::unsupported());
            Box::pin(async move { encode(ApiKey::ApiVersions, 0, correlation_id, Some(response)) })
        }
        Decoded::Request { header, body } => {
            let Ok(api) = ApiKey::try_from(header.request_api_key) else {
                return Box::pin(async { Err(()) });
            };
            tracing::trace!(?api, version = header.request_api_version,
                correlation_id = header.correlation_id, client_id = ?header.client_id, "request");
            let started = std::time::Instant::now();
            let metrics = broker.metrics.clone();
            let pending = handlers::admit(broker, &header, *body).await;
            let (version, correlation_id) = (header.request_api_version, header.correlation_id);
            Box::pin(async move {
                let response = pending.await;
                metrics.request(&format!("{api:?}"), started.elapsed());
                encode(api, version, correlation_id, response)
            })
        }
    }
}

fn encode(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    response: Option<ResponseKind>,
) -> Result<Option<Bytes>, ()> {
    let Some(response) = response else {
        return Ok(None);
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
