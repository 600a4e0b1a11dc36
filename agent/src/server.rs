//! The Kafka listener and one task per connection.
//!
//! Clients pipeline requests (librdkafka keeps up to 5 in flight), and a
//! produce waits for the next flush, so some requests of one connection are
//! handled concurrently: only those whose effects no client can see the
//! order of (see [`crate::net::order`]); the rest wait for what came before them.
//! Responses are written strictly in request order.
//!
//! What connections can hold is bounded: the bytes of requests being read
//! come from the agent-wide request budget ([`crate::net::frames`]) until the
//! request is admitted, and a read buffer grows only with the bytes sent; at
//! most [`MAX_IN_FLIGHT_PER_CONNECTION`] requests are handled at once, of
//! which at most [`MAX_OTHER_IN_FLIGHT_PER_CONNECTION`] are neither produces
//! nor offset commits (commits in a row are written together, see
//! `handlers::groups::commit_runs`, so a consumer committing every record
//! keeps up);
//! fetched bytes come from the agent-wide response budget ([`crate::limits::budget`])
//! until written, one response per connection at a time; a connection idle
//! for `connections_max_idle` is closed, and so is one whose client stops
//! sending a request it began or stops reading a response for
//! `stalled_client_timeout`; `max_connections` / `max_connections_per_ip`
//! cap how many there are.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use floe_protocol::frame;
use floe_protocol::kafka_protocol::messages::{ApiKey, ResponseHeader, ResponseKind};
use floe_protocol::kafka_protocol::protocol::Encodable;
use floe_protocol::request::{self, Decoded};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::broker::Broker;
use crate::handlers;
use crate::limits::budget::{Held, Turn};
use crate::net::frames::FrameReader;
use crate::net::order::{Effect, Running};

/// Requests of one connection handled at once before reading pauses: enough
/// for producers that pipeline behind a flush.
pub const MAX_IN_FLIGHT_PER_CONNECTION: usize = 64;
/// Of those, requests other than produces and offset commits (reads that
/// run beside each other; anything else runs alone).
pub const MAX_OTHER_IN_FLIGHT_PER_CONNECTION: usize = 4;

/// Bytes of OffsetCommit requests a connection has in flight (until their
/// responses are written) before reading pauses; one is always let in.
/// Commits may wait in the connection's group lane behind a JoinGroup for a
/// whole rebalance, so they are bounded per connection rather than holding
/// the agent-wide request budget that every connection reads with.
pub const MAX_COMMIT_BYTES_IN_FLIGHT_PER_CONNECTION: usize = 4 << 20;

/// Whether `decoded` is a request of `api`.
fn is_api(decoded: &Decoded, api: ApiKey) -> bool {
    matches!(decoded, Decoded::Request { header, .. } if header.request_api_key == api as i16)
}

/// Open connections, in total and by client address.
#[derive(Default)]
pub struct Open {
    by_ip: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection; counted out when dropped.
struct Slot {
    open: Arc<Open>,
    ip: IpAddr,
    broker: Arc<Broker>,
}

impl Open {
    /// Counts a new connection in, unless a limit is reached.
    fn admit(self: &Arc<Self>, ip: IpAddr, broker: &Arc<Broker>) -> Option<Slot> {
        let mut by_ip = self.by_ip.lock().expect("connections lock");
        let total: usize = by_ip.values().sum();
        let from_ip = by_ip.get(&ip).copied().unwrap_or(0);
        if total >= broker.config.max_connections || from_ip >= broker.config.max_connections_per_ip
        {
            return None;
        }
        by_ip.insert(ip, from_ip + 1);
        broker.metrics.connections.inc();
        Some(Slot {
            open: self.clone(),
            ip,
            broker: broker.clone(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut by_ip = self.open.by_ip.lock().expect("connections lock");
        if let Some(n) = by_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                by_ip.remove(&self.ip);
            }
        }
        self.broker.metrics.connections.dec();
    }
}

/// Serves Kafka's `listener` on `socket`, over TLS when `tls` is given
/// (its protocol says whether clients authenticate with SASL). Connection
/// limits are counted over every listener in `open`. Each connection runs
/// on `connections`, so an agent that stops closes them.
pub async fn serve(
    mut socket: Box<dyn crate::world::Listening>,
    listener: Arc<crate::net::listeners::Listener>,
    broker: Arc<Broker>,
    tls: Option<Arc<crate::net::tls::Tls>>,
    open: Arc<Open>,
    connections: crate::tasks::Tasks,
) -> std::io::Result<()> {
    loop {
        let (stream, peer) = match socket.accept().await {
            Ok(accepted) => accepted,
            // E.g. out of file descriptors: keep serving the connections we
            // have and try again shortly, rather than stopping the agent.
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(slot) = open.admit(peer.ip(), &broker) else {
            // As Kafka does past max.connections(.per.ip): close at once.
            broker.metrics.connections_refused.inc();
            tracing::debug!(%peer, "connection limit reached; closing");
            drop(stream);
            continue;
        };
        let broker = broker.clone();
        let listener = listener.clone();
        let tls = tls.as_ref().map(|t| t.acceptor());
        connections.spawn(async move {
            let served = match tls {
                None => {
                    let (read, write) = stream.into_halves();
                    connection(read, write, peer, broker, listener, None).await
                }
                Some(acceptor) => {
                    let handshake = crate::net::tls::HANDSHAKE_WITHIN;
                    match tokio::time::timeout(handshake, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            // Mutual TLS: the certificate's principal, unless
                            // SASL names it (Kafka maps no certificate on a
                            // SASL_SSL listener).
                            let certificate = match listener.protocol.sasl() {
                                true => None,
                                false => stream.get_ref().1.peer_certificates(),
                            };
                            let certified = match certificate {
                                Some([cert, ..]) => match certificate_principal(&broker, cert) {
                                    Ok(principal) => Some(principal),
                                    Err(e) => {
                                        tracing::info!(%peer, error = %e, "closing connection: no principal for the client certificate");
                                        drop(slot);
                                        return;
                                    }
                                },
                                _ => None,
                            };
                            let (read, write) = tokio::io::split(stream);
                            connection(read, write, peer, broker, listener, certified).await
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                            Ok(())
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "no TLS handshake within {handshake:?}");
                            Ok(())
                        }
                    }
                }
            };
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "connection ended with an I/O error");
            }
            drop(slot);
        });
    }
}

/// The principal a verified client certificate maps to.
fn certificate_principal(
    broker: &Broker,
    cert: &rustls::pki_types::CertificateDer<'_>,
) -> anyhow::Result<crate::security::sasl::Principal> {
    let dn = crate::security::ssl_principal::subject_name(cert)?;
    match broker.ssl_principals.name(&dn) {
        Some(name) => Ok(crate::security::sasl::Principal(name)),
        None => anyhow::bail!("no ssl principal mapping rule applies to {dn:?}"),
    }
}

/// One connection, plain or TLS, as its two halves; `certified` is the
/// principal of a client certificate (mutual TLS), which SASL replaces.
async fn connection<R, W>(
    read: R,
    mut write: W,
    peer: SocketAddr,
    broker: Arc<Broker>,
    listener: Arc<crate::net::listeners::Listener>,
    certified: Option<crate::security::sasl::Principal>,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let max_frame = broker.config.max_frame_bytes.as_u64() as usize;
    let stall = broker.config.stalled_client_timeout;
    let mut frames = FrameReader::new(read, broker.requests.clone(), max_frame, stall);
    let mut software = None;
    // SASL on this listener's connections only.
    let sasl = broker.sasl.clone().filter(|_| listener.protocol.sasl());
    // Who the client is, for how long (zero: for ever), and by what
    // mechanism.
    let (principal, lifetime, mechanism) = match &sasl {
        None if listener.protocol.sasl() => {
            // Refused at start (`listeners::resolve`); never served open.
            tracing::error!(listener = %listener.name, "a SASL listener without SASL mechanisms; closing");
            return close(&mut write, stall).await;
        }
        None => (certified, Duration::ZERO, String::new()),
        Some(auth) => {
            let done =
                first_login(&mut frames, &mut write, auth, &broker, peer, &mut software).await?;
            match done {
                Some(done) => (Some(done.principal), done.lifetime, done.mechanism),
                None => return close(&mut write, stall).await,
            }
        }
    };
    let session =
        crate::security::authorizer::Session::new(principal.as_ref(), peer, software, listener);
    let lane = handlers::groups::Lane::default();
    let produces = Arc::new(crate::write::pipelines::Pipeline::new(lane.connection()));
    let mut conn = Conn {
        session_expires: (!lifetime.is_zero()).then(|| Instant::now() + lifetime),
        principal,
        mechanism,
        session,
        last_reauth: None,
        frames,
        write,
        peer,
        stall,
        sasl,
        turn: Turn::default(),
        lane,
        produces,
        mute: Arc::new(crate::limits::quotas::Mute::default()),
        in_flight: InFlight::default(),
        reading: true,
        turn_come: false,
        last_active: Instant::now(),
        broker,
    };
    let served = conn.serve().await;
    // Its share sessions end with it: what they held is released.
    crate::handlers::shares::connection_closed(&conn.broker, conn.lane.connection());
    served?;
    // Kafka closes the connection after a request it cannot parse; earlier
    // requests still got their responses. What is left in flight gives its
    // budget back now, and a close that cannot be written (a TLS close to a
    // client that stopped reading) is given up after `stall`.
    let Conn {
        mut write,
        in_flight,
        frames,
        ..
    } = conn;
    drop(in_flight);
    drop(frames);
    close(&mut write, stall).await
}

/// The exchange a SaslHandshake starts, if its mechanism is served: v0
/// would be followed by raw tokens (not served), and a re-authentication
/// keeps its mechanism (Kafka's REAUTH_BAD_MECHANISM).
fn start_exchange(
    auth: &crate::security::sasl::Authenticator,
    req: &floe_protocol::kafka_protocol::messages::SaslHandshakeRequest,
    version: i16,
    round: &Reauthentication<'_>,
) -> Option<crate::security::sasl::Exchange> {
    let same = round.mechanism.is_none_or(|m| m == req.mechanism.as_str());
    match version {
        0 => None,
        _ if !same => None,
        _ => auth.start(req.mechanism.as_str()),
    }
}

/// What a SaslAuthenticate step is answered, and how the exchange ended if
/// it did (`Some(None)`: failed); `None` when the connection is closed
/// unanswered (the credentials could not be checked: the client reconnects).
#[allow(clippy::type_complexity)]
fn step_answer(
    step: crate::security::sasl::Step,
    round: &Reauthentication<'_>,
    mechanism: &str,
    now_ms: i64,
) -> Option<(
    floe_protocol::kafka_protocol::messages::SaslAuthenticateResponse,
    Option<Option<Authenticated>>,
)> {
    use crate::security::sasl::Step;
    use floe_protocol::ResponseError;
    use floe_protocol::kafka_protocol::messages::SaslAuthenticateResponse;
    let failed = |why: &str| {
        SaslAuthenticateResponse::default()
            .with_error_code(ResponseError::SaslAuthenticationFailed.code())
            .with_error_message(Some(floe_protocol::str_bytes(why)))
    };
    Some(match step {
        Step::Challenge(bytes) => (
            SaslAuthenticateResponse::default().with_auth_bytes(bytes.into()),
            None,
        ),
        // Kafka's `SaslServerAuthenticator`: no other principal on a
        // re-authenticated connection.
        Step::Done(principal, _, _) if round.principal.is_some_and(|was| *was != principal) => (
            failed("Cannot change principals during re-authentication"),
            Some(None),
        ),
        Step::Done(principal, bytes, expires_at_ms) => {
            let lifetime = session_lifetime(round.lifetime, expires_at_ms, now_ms);
            let answer = SaslAuthenticateResponse::default()
                .with_auth_bytes(bytes.into())
                .with_session_lifetime_ms(lifetime.as_millis() as i64);
            let done = Authenticated {
                principal,
                lifetime,
                mechanism: mechanism.to_string(),
            };
            (answer, Some(Some(done)))
        }
        Step::Unavailable => return None,
        Step::Failed(why) => (failed(why), Some(None)),
    })
}

/// SASL before anything else, with small frames from a budget of their
/// own: a crowd of clients that never authenticate cannot take the memory
/// authenticated ones read their requests with. `None`: not authenticated
/// (the connection is closed, after Kafka's failed-authentication delay).
async fn first_login<R, W>(
    frames: &mut FrameReader<R>,
    write: &mut W,
    auth: &crate::security::sasl::Authenticator,
    broker: &Broker,
    peer: SocketAddr,
    software: &mut Option<Arc<crate::security::authorizer::ClientSoftware>>,
) -> std::io::Result<Option<Authenticated>>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let max_frame = broker.config.max_frame_bytes.as_u64() as usize;
    frames.set_budget(broker.unauthenticated.clone());
    frames.set_max_frame(max_frame.min(crate::security::sasl::MAX_UNAUTHENTICATED_FRAME));
    let done = authenticate(
        frames,
        write,
        auth,
        broker,
        broker.config.stalled_client_timeout,
        broker.telemetry.advertised(),
        software,
        Reauthentication::first(broker.config.connections_max_reauth),
    )
    .await?;
    let Some(done) = done else {
        // As Kafka's connection.failed.authentication.delay.ms: a guesser
        // waits before it learns and can try again. The connection closes
        // with what it read still on the unauthenticated budget.
        broker.metrics.authentication_failures.inc();
        tracing::info!(%peer, "closing connection: not authenticated");
        tokio::time::sleep(crate::security::sasl::FAILED_AUTHENTICATION_DELAY).await;
        return Ok(None);
    };
    tracing::debug!(%peer, principal = %done.principal, "authenticated");
    frames.set_max_frame(max_frame);
    frames.set_budget(broker.requests.clone());
    Ok(Some(done))
}

/// Whether a connection goes on serving after an event.
enum Flow {
    Go,
    Stop,
}

/// One authenticated connection serving its requests: read in order,
/// handled as [`crate::net::order`] allows, answered in order.
struct Conn<R, W> {
    frames: FrameReader<R>,
    write: W,
    peer: SocketAddr,
    broker: Arc<Broker>,
    /// How long a client may stall a request it began or a response.
    stall: Duration,
    /// The listener's SASL, for re-authentication (KIP-368).
    sasl: Option<Arc<crate::security::sasl::Authenticator>>,
    principal: Option<crate::security::sasl::Principal>,
    mechanism: String,
    session: crate::security::authorizer::Session,
    /// When the SASL session ends: the client re-authenticates before.
    session_expires: Option<Instant>,
    /// When the last re-authentication began (Kafka limits the second and
    /// later ones, not the first).
    last_reauth: Option<Instant>,
    turn: Turn,
    lane: handlers::groups::Lane,
    produces: Arc<crate::write::pipelines::Pipeline>,
    /// Set while the client is throttled (client quotas, `crate::limits::quotas`).
    mute: Arc<crate::limits::quotas::Mute>,
    in_flight: InFlight,
    /// False once the connection reads no more requests (it closes when
    /// what is in flight is answered).
    reading: bool,
    /// The API key of the next request was read and its turn has come: its
    /// body is read next (see `FrameReader::next_api_key`).
    turn_come: bool,
    last_active: Instant,
}

impl<R, W> Conn<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    async fn serve(&mut self) -> std::io::Result<()> {
        let idle_for = self.broker.config.connections_max_idle;
        while self.reading || !self.in_flight.is_empty() {
            let muted = self.mute.until();
            let can_read = self.reading && muted.is_none() && self.in_flight.has_room();
            let turn_come = self.turn_come;
            tokio::select! {
                // A request's API key, then its turn: what it may not pass
                // is done (and answered) before its bytes are read, so a
                // request waiting its turn holds none of the agent's
                // request budget.
                read = async {
                    match turn_come {
                        false => self.frames.next_api_key().await.map(|key| key.map(Read::Key)),
                        true => self.frames.next().await.map(|frame| frame.map(Read::Frame)),
                    }
                }, if can_read => {
                    self.last_active = Instant::now();
                    if let Flow::Stop = self.on_read(read).await? {
                        break;
                    }
                }
                Some(response) = self.in_flight.next() => {
                    if !write_response(&mut self.write, response, self.peer, self.stall).await? {
                        break;
                    }
                    self.last_active = Instant::now();
                }
                // A throttled client's next request is read when its mute
                // ends. (A future that makes no timer unless polled: it is
                // built on every turn, muted or not.)
                _ = async { if let Some(until) = muted { tokio::time::sleep_until(until).await } }, if muted.is_some() && self.reading => {}
                // Nothing in flight and no whole request for this long (a
                // client gone quiet, or one trickling half a frame): close.
                // (A mute longer than that closes it too, as in Kafka.)
                _ = tokio::time::sleep_until(self.last_active + idle_for), if self.in_flight.is_empty() => {
                    tracing::debug!(peer = %self.peer, "closing idle connection");
                    break;
                }
            }
        }
        Ok(())
    }

    /// What was read: a request's API key (its turn is awaited), its frame
    /// (decoded and admitted), a bad frame, or the end of the connection.
    async fn on_read(&mut self, read: Option<std::io::Result<Read>>) -> std::io::Result<Flow> {
        let frame = match read {
            Some(Ok(Read::Key(key))) => {
                let effect = key.map_or(Effect::Writes, Effect::of_api_key);
                if !self
                    .in_flight
                    .write_until_free(effect, &mut self.write, self.peer, self.stall)
                    .await?
                {
                    return Ok(Flow::Stop);
                }
                self.turn_come = true;
                return Ok(Flow::Go);
            }
            Some(Ok(Read::Frame(frame))) => {
                self.turn_come = false;
                frame
            }
            Some(Err(e)) => {
                tracing::warn!(peer = %self.peer, error = %e, "closing connection: bad frame");
                self.stop_reading();
                return Ok(Flow::Go);
            }
            // The client is gone: what it left in flight is dropped, so a
            // produced batch not yet in a sealed file is not stored (its
            // producer saw no answer and will retry, maybe through another
            // agent: storing both would read X Y X), and a request not yet
            // started never runs.
            None => {
                tracing::debug!(peer = %self.peer, "the client closed its connection");
                return Ok(Flow::Stop);
            }
        };
        let frame_len = frame.bytes.len();
        match request::decode(frame.bytes.freeze()) {
            // Admission runs before the next request is read, so produced
            // batches are enqueued in request order.
            Ok(decoded) => self.on_request(decoded, frame.held, frame_len).await,
            Err(e) => {
                tracing::warn!(peer = %self.peer, error = %e, "closing connection: undecodable request");
                self.stop_reading();
                Ok(Flow::Go)
            }
        }
    }

    /// Reads no more requests; what is in flight is still answered.
    fn stop_reading(&mut self) {
        self.reading = false;
        self.lane.close();
    }

    /// A decoded request: a re-authentication, or admitted in its turn.
    async fn on_request(
        &mut self,
        decoded: Decoded,
        held: tokio::sync::OwnedSemaphorePermit,
        frame_len: usize,
    ) -> std::io::Result<Flow> {
        let handshake = is_api(&decoded, ApiKey::SaslHandshake);
        if handshake && self.may_reauthenticate() {
            drop(held);
            return self.reauthenticate(decoded).await;
        }
        // Past its session, nothing but a new handshake (Kafka closes on
        // anything else).
        if self.session_expires.is_some_and(|at| Instant::now() >= at) && !handshake {
            tracing::info!(peer = %self.peer, "closing connection: its SASL session expired without re-authentication (connections_max_reauth)");
            self.stop_reading();
            return Ok(Flow::Go);
        }
        if let Decoded::Request { body, .. } = &decoded
            && let floe_protocol::kafka_protocol::messages::RequestKind::ApiVersions(req) = &**body
        {
            self.session.software = crate::security::authorizer::ClientSoftware::of(req);
        }
        // In the order sent: what this request may not pass is done (and
        // answered) before it starts (waited for by its API key, but for a
        // Metadata that turns out to create topics).
        let effect = Effect::of(&decoded);
        if !self
            .in_flight
            .write_until_free(effect, &mut self.write, self.peer, self.stall)
            .await?
        {
            return Ok(Flow::Stop);
        }
        // Commits wait in the connection's lane, maybe behind a long
        // JoinGroup: what they hold is counted here, not lent from the
        // agent's budget.
        let commit_bytes = if effect == Effect::Commits {
            frame_len
        } else {
            0
        };
        let pending = admit(
            self.broker.clone(),
            decoded,
            (&self.turn, &self.lane, &self.produces),
            &self.session,
            &self.mute,
        )
        .await;
        // Admitted: produced batches are now the produce buffer's to
        // count, the rest is small.
        drop(held);
        self.in_flight.push(effect, commit_bytes, pending);
        Ok(Flow::Go)
    }

    /// Re-authentication (KIP-368) is taken only while the session ends
    /// (else Kafka's handler refuses it), and not within a second of the
    /// last (Kafka's MIN_REAUTH_INTERVAL).
    fn may_reauthenticate(&self) -> bool {
        self.sasl.is_some()
            && self.principal.is_some()
            && self.session_expires.is_some()
            && self
                .last_reauth
                .is_none_or(|at| at.elapsed() >= MIN_REAUTH_INTERVAL)
    }

    /// Re-authenticates, once the responses before the handshake are
    /// written; a failure closes the connection.
    async fn reauthenticate(&mut self, handshake: Decoded) -> std::io::Result<Flow> {
        self.last_reauth = Some(Instant::now());
        if !self
            .in_flight
            .write_all(&mut self.write, self.peer, self.stall)
            .await?
        {
            return Ok(Flow::Stop);
        }
        let (Some(auth), Some(current)) = (&self.sasl, &self.principal) else {
            return Ok(Flow::Stop);
        };
        let lifetime = self.broker.config.connections_max_reauth;
        let again = authenticate(
            &mut self.frames,
            &mut self.write,
            auth,
            &self.broker,
            self.stall,
            self.broker.telemetry.advertised(),
            &mut self.session.software,
            Reauthentication::again(handshake, current, &self.mechanism, lifetime),
        )
        .await?;
        let peer = self.peer;
        match again {
            Some(done) => {
                tracing::debug!(%peer, principal = %current, "re-authenticated");
                self.broker.metrics.reauthentications.inc();
                self.session_expires =
                    (!done.lifetime.is_zero()).then(|| Instant::now() + done.lifetime);
                Ok(Flow::Go)
            }
            None => {
                self.broker.metrics.authentication_failures.inc();
                tracing::info!(%peer, "closing connection: re-authentication failed");
                tokio::time::sleep(crate::security::sasl::FAILED_AUTHENTICATION_DELAY).await;
                Ok(Flow::Stop)
            }
        }
    }
}

/// Shuts the connection's write side, waiting at most `stall`.
async fn close(
    write: &mut (impl AsyncWrite + Unpin),
    stall: std::time::Duration,
) -> std::io::Result<()> {
    tokio::time::timeout(stall, write.shutdown())
        .await
        .unwrap_or(Ok(()))
}

/// How long a session lasts: `max` (zero: for ever, KIP-368 off), and no
/// longer than its credential (an OAUTHBEARER token's expiry).
fn session_lifetime(
    max: std::time::Duration,
    expires_at_ms: Option<i64>,
    now_ms: i64,
) -> std::time::Duration {
    // Kafka's `SaslServerAuthenticator.calcCompletionTimesAndReturnSessionLifetimeMs`.
    let Some(at) = expires_at_ms else {
        return max;
    };
    let left = std::time::Duration::from_millis((at - now_ms).max(1) as u64);
    match max.is_zero() {
        true => left,
        false => max.min(left),
    }
}

/// A connection's authentication, done.
struct Authenticated {
    principal: crate::security::sasl::Principal,
    /// How long its session lasts (zero: for ever).
    lifetime: std::time::Duration,
    mechanism: String,
}

/// Re-authentications closer together than this are not taken (Kafka's
/// `MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS`).
const MIN_REAUTH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether an exchange is a connection's first or a re-authentication
/// (KIP-368), and how long the session it opens lasts.
struct Reauthentication<'a> {
    /// The SaslHandshake that began a re-authentication, already read.
    handshake: Option<Decoded>,
    /// Who the connection is, and with what mechanism it authenticated:
    /// re-authentication may change neither.
    principal: Option<&'a crate::security::sasl::Principal>,
    mechanism: Option<&'a str>,
    /// The session's lifetime (zero: for ever).
    lifetime: std::time::Duration,
}

impl<'a> Reauthentication<'a> {
    fn first(lifetime: std::time::Duration) -> Self {
        Reauthentication {
            handshake: None,
            principal: None,
            mechanism: None,
            lifetime,
        }
    }

    fn again(
        handshake: Decoded,
        principal: &'a crate::security::sasl::Principal,
        mechanism: &'a str,
        lifetime: std::time::Duration,
    ) -> Self {
        Reauthentication {
            handshake: Some(handshake),
            principal: Some(principal),
            mechanism: Some(mechanism),
            lifetime,
        }
    }
}

/// SASL before anything else (see [`crate::security::sasl`]), or again on an
/// authenticated connection (KIP-368): the principal the client
/// authenticated as and its session's lifetime (zero: for ever), or `None` when the connection is to close (a request
/// out of turn, a mechanism not served, wrong credentials, another
/// principal than before, or no authentication within
/// [`crate::security::sasl::AUTHENTICATE_WITHIN`]).
#[allow(clippy::too_many_arguments)]
async fn authenticate<R, W>(
    frames: &mut FrameReader<R>,
    write: &mut W,
    auth: &crate::security::sasl::Authenticator,
    broker: &Broker,
    stall: std::time::Duration,
    telemetry: bool,
    software: &mut Option<Arc<crate::security::authorizer::ClientSoftware>>,
    mut round: Reauthentication<'_>,
) -> std::io::Result<Option<Authenticated>>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    use crate::security::sasl::Step;
    use floe_protocol::ResponseError;
    use floe_protocol::kafka_protocol::messages::{RequestKind, SaslHandshakeResponse};
    let mechanisms: Vec<_> = auth
        .mechanisms()
        .into_iter()
        .map(floe_protocol::str_bytes)
        .collect();
    let deadline = Instant::now() + crate::security::sasl::AUTHENTICATE_WITHIN;
    let mut exchange: Option<crate::security::sasl::Exchange> = None;
    let mut mechanism = String::new();
    loop {
        let (decoded, held) = match round.handshake.take() {
            Some(handshake) => (handshake, None),
            None => {
                let frame = match tokio::time::timeout_at(deadline, frames.next()).await {
                    Ok(Some(frame)) => frame?,
                    Ok(None) | Err(_) => return Ok(None),
                };
                let Ok(decoded) = request::decode(frame.bytes.freeze()) else {
                    return Ok(None);
                };
                (decoded, Some(frame.held))
            }
        };
        let (api, version, correlation_id, response, outcome) = match decoded {
            // After a handshake only SaslAuthenticate is taken (Kafka's
            // AUTHENTICATE state); anything else closes the connection.
            Decoded::ApiVersionsTooNew { .. } if exchange.is_some() => return Ok(None),
            Decoded::ApiVersionsTooNew { correlation_id } => {
                let response = handlers::api_versions::unsupported();
                (
                    ApiKey::ApiVersions,
                    0,
                    correlation_id,
                    ResponseKind::ApiVersions(response),
                    None,
                )
            }
            Decoded::Request { header, body } => {
                let (version, correlation_id) = (header.request_api_version, header.correlation_id);
                match *body {
                    // Kafka takes no ApiVersions within a re-authentication.
                    RequestKind::ApiVersions(_)
                        if round.principal.is_some() || exchange.is_some() =>
                    {
                        return Ok(None);
                    }
                    RequestKind::ApiVersions(req) => {
                        *software = crate::security::authorizer::ClientSoftware::of(&req);
                        let response =
                            ResponseKind::ApiVersions(handlers::api_versions::handle(telemetry));
                        (ApiKey::ApiVersions, version, correlation_id, response, None)
                    }
                    RequestKind::SaslHandshake(req) if exchange.is_none() => {
                        mechanism = req.mechanism.to_string();
                        exchange = start_exchange(auth, &req, version, &round);
                        let served = exchange.is_some();
                        let response = SaslHandshakeResponse::default()
                            .with_mechanisms(mechanisms.clone())
                            .with_error_code(match served {
                                true => 0,
                                false => ResponseError::UnsupportedSaslMechanism.code(),
                            });
                        let outcome = (!served).then_some(None);
                        (
                            ApiKey::SaslHandshake,
                            version,
                            correlation_id,
                            ResponseKind::SaslHandshake(response),
                            outcome,
                        )
                    }
                    RequestKind::SaslAuthenticate(req) if exchange.is_some() => {
                        let step = match exchange.as_mut() {
                            Some(exchange) => tokio::time::timeout_at(
                                deadline,
                                exchange.step(
                                    auth,
                                    &req.auth_bytes,
                                    &*broker.meta,
                                    broker.world.now_ms(),
                                ),
                            )
                            .await
                            .unwrap_or(Step::Unavailable),
                            None => Step::Failed("Authentication failed"),
                        };

                        // Closed unanswered: the client reconnects.
                        let now_ms = broker.world.now_ms();
                        let Some((response, outcome)) =
                            step_answer(step, &round, &mechanism, now_ms)
                        else {
                            return Ok(None);
                        };
                        (
                            ApiKey::SaslAuthenticate,
                            version,
                            correlation_id,
                            ResponseKind::SaslAuthenticate(response),
                            outcome,
                        )
                    }
                    // Anything else before authentication: Kafka closes.
                    _ => return Ok(None),
                }
            }
        };
        drop(held);
        let response = handlers::null_messages::nulled(response);
        let Ok(Some(bytes)) = encode(api, version, correlation_id, Some(response)) else {
            return Ok(None);
        };
        if !write_progressing(write, &bytes, stall).await? {
            return Ok(None);
        }
        if let Some(principal) = outcome {
            return Ok(principal);
        }
    }
}

/// Writes `bytes`, unless the client accepts none of them for `stall`
/// (`Ok(false)`): a client that reads slowly keeps its connection, one that
/// stopped reading does not hold the response's memory for long.
async fn write_progressing(
    write: &mut (impl AsyncWrite + Unpin),
    mut bytes: &[u8],
    stall: std::time::Duration,
) -> std::io::Result<bool> {
    while !bytes.is_empty() {
        match tokio::time::timeout(stall, write.write(bytes)).await {
            Ok(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(Ok(n)) => bytes = &bytes[n..],
            Ok(Err(e)) => return Err(e),
            Err(_) => return Ok(false),
        }
    }
    // TLS takes bytes into its own buffer ahead of the socket: pushed out
    // now, or the end of a response would wait for the next one.
    match tokio::time::timeout(stall, write.flush()).await {
        Ok(Ok(())) => Ok(true),
        Ok(Err(e)) => Err(e),
        Err(_) => Ok(false),
    }
}

/// What a connection reads next: a request's API key, then (its turn
/// come) the whole request.
enum Read {
    Key(Option<i16>),
    Frame(crate::net::frames::Frame),
}

/// A connection's requests started and not yet answered, answered in the
/// order they came, and what they may let start beside them (see
/// [`crate::net::order`]).
#[derive(Default)]
struct InFlight {
    responses: FuturesOrdered<BoxFuture<'static, Finished>>,
    running: Running,
    /// Bytes of the OffsetCommit requests among them.
    commit_bytes: usize,
}

/// A request whose handling is done, and its response.
struct Finished {
    effect: Effect,
    commit_bytes: usize,
    response: Encoded,
}

impl InFlight {
    fn push(&mut self, effect: Effect, commit_bytes: usize, pending: Responding) {
        self.running.start(effect);
        self.commit_bytes += commit_bytes;
        self.responses.push_back(Box::pin(async move {
            Finished {
                effect,
                commit_bytes,
                response: pending.await,
            }
        }));
    }

    fn is_empty(&self) -> bool {
        self.responses.is_empty()
    }

    /// Whether another request may be read: produces and commits are
    /// pipelined (up to [`MAX_IN_FLIGHT_PER_CONNECTION`]), the rest bounded
    /// tighter, and commits by their bytes.
    fn has_room(&self) -> bool {
        self.responses.len() < MAX_IN_FLIGHT_PER_CONNECTION
            && self.running.others() < MAX_OTHER_IN_FLIGHT_PER_CONNECTION
            && self.commit_bytes < MAX_COMMIT_BYTES_IN_FLIGHT_PER_CONNECTION
    }

    /// The next request done, in request order.
    async fn next(&mut self) -> Option<Finished> {
        let finished = self.responses.next().await?;
        self.running.finish(finished.effect);
        self.commit_bytes -= finished.commit_bytes;
        Some(finished)
    }

    /// Writes responses, in order, until a request of `effect` may start;
    /// false if the connection is to close.
    async fn write_until_free(
        &mut self,
        effect: Effect,
        write: &mut (impl AsyncWrite + Unpin),
        peer: SocketAddr,
        stall: std::time::Duration,
    ) -> std::io::Result<bool> {
        while self.running.holds_back(effect) {
            let Some(finished) = self.next().await else {
                break;
            };
            if !write_response(write, finished, peer, stall).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Writes every response in flight; false if the connection is to close.
    async fn write_all(
        &mut self,
        write: &mut (impl AsyncWrite + Unpin),
        peer: SocketAddr,
        stall: std::time::Duration,
    ) -> std::io::Result<bool> {
        while let Some(finished) = self.next().await {
            if !write_response(write, finished, peer, stall).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Writes a finished request's response, if it has one; false if the
/// connection is to close (its client stopped reading, or the response
/// could not be encoded, which would leave the client waiting forever:
/// closing makes it retry elsewhere).
async fn write_response(
    write: &mut (impl AsyncWrite + Unpin),
    finished: Finished,
    peer: SocketAddr,
    stall: std::time::Duration,
) -> std::io::Result<bool> {
    match finished.response {
        Ok(Some((bytes, held))) => {
            // A client that does not read its responses holds their
            // memory (and budget) only this long.
            let written = write_progressing(write, &bytes, stall).await?;
            drop(held);
            if !written {
                tracing::warn!(%peer, "closing connection: the client stopped reading its response");
            }
            Ok(written)
        }
        Ok(None) => Ok(true),
        Err(()) => Ok(false),
    }
}

/// A response frame being prepared: `Ok(None)` means no response (as for
/// `acks=0` produces), `Err` that the response could not be encoded. The
/// frame comes with the response budget it holds until written.
type Responding = BoxFuture<'static, Encoded>;

/// A response frame with the budget it holds (`Ok(None)`: no response),
/// or `Err` when it could not be encoded.
type Encoded = Result<Option<(Bytes, Option<Held>)>, ()>;

/// Starts handling one request (see [`handlers::admit`]) and returns the future
/// that finishes it and encodes its response frame.
async fn admit(
    broker: Arc<Broker>,
    decoded: Decoded,
    connection: (
        &Turn,
        &handlers::groups::Lane,
        &Arc<crate::write::pipelines::Pipeline>,
    ),
    session: &crate::security::authorizer::Session,
    mute: &Arc<crate::limits::quotas::Mute>,
) -> Responding {
    match decoded {
        Decoded::ApiVersionsTooNew { correlation_id } => {
            let response = ResponseKind::ApiVersions(handlers::api_versions::unsupported());
            Box::pin(async move {
                encode(ApiKey::ApiVersions, 0, correlation_id, Some(response))
                    .map(|frame| frame.map(|b| (b, None)))
            })
        }
        Decoded::Request { header, body } => {
            let Ok(api) = ApiKey::try_from(header.request_api_key) else {
                return Box::pin(async { Err(()) });
            };
            tracing::trace!(?api, version = header.request_api_version,
                correlation_id = header.correlation_id, client_id = ?header.client_id, "request");
            let started = Instant::now();
            let metrics = broker.metrics.clone();
            // The request quota counts the time spent running the request's
            // handler, admission and the rest (timed only while quotas are set).
            let client_id = header.client_id.as_ref().map_or("", |c| c.as_str());
            let client = crate::limits::quotas::Client::of(
                &broker.quotas,
                &session.principal,
                client_id,
                mute,
            );
            let quota = client
                .as_ref()
                .filter(|q| q.enabled(crate::limits::quotas::Kind::Request))
                .cloned();
            let admitting = handlers::admit(broker, &header, *body, connection, session, client);
            let (pending, admitted_in) = match quota {
                Some(_) => crate::limits::quotas::Timed::new(std::pin::pin!(admitting)).await,
                None => (admitting.await, std::time::Duration::ZERO),
            };
            let (version, correlation_id) = (header.request_api_version, header.correlation_id);
            Box::pin(async move {
                let reply = match quota {
                    Some(quota) => {
                        let (mut reply, spent) = crate::limits::quotas::Timed::new(pending).await;
                        // Kafka leaves acks=0 produces (no response) out
                        // of the request quota.
                        let unanswered_produce = api == ApiKey::Produce && reply.is_none();
                        if !unanswered_produce {
                            let percent_seconds = (admitted_in + spent).as_secs_f64() * 100.0;
                            let throttle = quota.record(
                                crate::limits::quotas::Kind::Request,
                                percent_seconds,
                                false,
                            );
                            if let Some(r) = &mut reply {
                                handlers::throttled(&mut r.response, throttle as i32);
                            }
                        }
                        reply
                    }
                    None => pending.await,
                };
                metrics.request(&format!("{api:?}"), started.elapsed());
                let (response, held) = match reply {
                    Some(r) => (Some(r.response), r.held),
                    None => (None, None),
                };
                encode(api, version, correlation_id, response).map(|frame| frame.map(|b| (b, held)))
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
