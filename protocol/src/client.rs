//! A minimal pipelining Kafka client over the `kafka-protocol` message
//! types: the benchmark's load generator and the `floe topics` / `floe
//! groups` tools speak to brokers through it, in plaintext or over TLS,
//! authenticating with SASL/PLAIN when asked. Every wait has a deadline.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use anyhow::{Context, bail};
use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes, encode_request_header_into_buffer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use crate::frame;

/// How long a connection may take to open, and a response to arrive.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

/// A byte stream to a broker: a TCP connection, or TLS over one.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// How to reach a broker that asks for more than plaintext.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// PEM CA certificates to trust: the connection speaks TLS.
    pub tls_ca: Option<std::path::PathBuf>,
    /// A user and password to authenticate with (SASL/PLAIN).
    pub sasl_plain: Option<(String, String)>,
}

pub struct Connection {
    framed: Framed<Box<dyn Stream>, LengthDelimitedCodec>,
    next_correlation: i32,
    client_id: StrBytes,
}

impl Connection {
    /// A plaintext connection.
    pub async fn connect(address: &str, client_id: &'static str) -> anyhow::Result<Connection> {
        Self::connect_with(address, client_id, &Security::default()).await
    }

    /// A connection over TLS and/or authenticated, as `security` says.
    pub async fn connect_with(
        address: &str,
        client_id: &'static str,
        security: &Security,
    ) -> anyhow::Result<Connection> {
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address))
            .await
            .with_context(|| format!("connecting to {address}: no answer in {CONNECT_TIMEOUT:?}"))?
            .with_context(|| format!("connecting to {address}"))?;
        tcp.set_nodelay(true)?;
        let mut connection = match &security.tls_ca {
            None => Connection::over(tcp, client_id),
            Some(ca) => Connection::over(tls(tcp, address, ca).await?, client_id),
        };
        if let Some((user, password)) = &security.sasl_plain {
            connection.authenticate(user, password).await?;
        }
        Ok(connection)
    }

    /// A plaintext connection over `stream`, already open (the
    /// simulation's in-memory network).
    pub fn over(
        stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
        client_id: &'static str,
    ) -> Connection {
        Connection {
            // Frames are checked against the broker's own frame limit;
            // tokio's codec also writes the length prefix of requests.
            framed: Framed::new(
                Box::new(stream),
                LengthDelimitedCodec::builder()
                    .length_field_length(4)
                    .max_frame_length(frame::DEFAULT_MAX_FRAME_BYTES)
                    .new_codec(),
            ),
            next_correlation: 1,
            client_id: StrBytes::from_static_str(client_id),
        }
    }

    /// SASL/PLAIN: SaslHandshake v1, then SaslAuthenticate.
    pub async fn authenticate(&mut self, user: &str, password: &str) -> anyhow::Result<()> {
        use kafka_protocol::messages::{
            SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
            SaslHandshakeResponse,
        };
        let handshake: SaslHandshakeResponse = self
            .call(
                ApiKey::SaslHandshake,
                1,
                &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
            )
            .await?;
        if handshake.error_code != 0 {
            bail!(
                "the broker does not take SASL/PLAIN (error {})",
                handshake.error_code
            );
        }
        let token = format!("\0{user}\0{password}");
        let answer: SaslAuthenticateResponse = self
            .call(
                ApiKey::SaslAuthenticate,
                0,
                &SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::from(token)),
            )
            .await?;
        if answer.error_code != 0 {
            bail!(
                "SASL/PLAIN authentication failed: {}",
                answer.error_message.as_deref().unwrap_or("no reason given")
            );
        }
        Ok(())
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

    /// One request and its response.
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

/// TLS over `tcp`, trusting the CAs in `ca`, checking the name in `address`.
async fn tls(
    tcp: TcpStream,
    address: &str,
    ca: &std::path::Path,
) -> anyhow::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for cert in
        CertificateDer::pem_file_iter(ca).with_context(|| format!("reading {}", ca.display()))?
    {
        roots.add(cert.with_context(|| format!("reading {}", ca.display()))?)?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(host.to_string())
        .with_context(|| format!("{host} is not a name TLS can check"))?;
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(name, tcp))
        .await
        .with_context(|| format!("TLS with {address}: no handshake in {CONNECT_TIMEOUT:?}"))?
        .with_context(|| format!("TLS with {address}"))
}
