//! What an agent takes from the world it runs in: the wall clock it stamps
//! requests with, the ids it draws, and the network its Kafka listeners
//! accept connections from. The `floe agent` command runs in the real one
//! ([`World::default`]); the simulation gives each agent its own, seeded
//! and skewed, over an in-memory network, so a seed replays the same run
//! through the same handlers and connection code.
//!
//! Decisions about time are the metastore's (its clock stamps every
//! proposal); an agent's clock only dates what it sends (a heartbeat, a
//! member's join) and checks what clients send (token expiry), which is
//! why a skewed one is worth simulating.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use floe_metastore::{Clock, SystemClock};
use floe_storage::ids::{Ids, RandomIds};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;

/// The clock, ids and network an agent runs with.
#[derive(Clone)]
pub struct World {
    pub clock: Arc<dyn Clock>,
    pub ids: Arc<dyn Ids>,
    pub network: Arc<dyn Network>,
}

impl Default for World {
    /// The machine's clock, random ids, TCP.
    fn default() -> World {
        World {
            clock: Arc::new(SystemClock),
            ids: Arc::new(RandomIds),
            network: Arc::new(Tcp),
        }
    }
}

impl World {
    /// Milliseconds since the Unix epoch on this agent's clock.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// A fresh id.
    pub fn new_id(&self) -> uuid::Uuid {
        self.ids.next_id()
    }
}

/// The reading half of a connection.
pub type ReadHalf = Box<dyn AsyncRead + Unpin + Send>;
/// The writing half of a connection.
pub type WriteHalf = Box<dyn AsyncWrite + Unpin + Send>;

/// A connection's bytes, both ways.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// Its two halves, to read requests while answers are written.
    fn into_halves(self: Box<Self>) -> (ReadHalf, WriteHalf);
}

/// A TCP connection splits without a lock between its halves.
impl Stream for tokio::net::TcpStream {
    fn into_halves(self: Box<Self>) -> (ReadHalf, WriteHalf) {
        let (read, write) = self.into_split();
        (Box::new(read), Box::new(write))
    }
}

/// An in-memory connection (the simulation's network).
impl Stream for tokio::io::DuplexStream {
    fn into_halves(self: Box<Self>) -> (ReadHalf, WriteHalf) {
        let (read, write) = tokio::io::split(*self);
        (Box::new(read), Box::new(write))
    }
}

/// A connection accepted, and its peer's address.
pub type Accepted = (Box<dyn Stream>, SocketAddr);

/// Where a Kafka listener binds and accepts connections.
pub trait Network: Send + Sync + 'static {
    fn bind(
        &self,
        address: SocketAddr,
    ) -> futures::future::BoxFuture<'_, io::Result<Box<dyn Listening>>>;
}

/// A bound listener.
pub trait Listening: Send + 'static {
    /// The next connection.
    fn accept(&mut self) -> futures::future::BoxFuture<'_, io::Result<Accepted>>;
    /// The address it is bound to (a port asked as 0 is the one chosen).
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

/// The machine's network.
pub struct Tcp;

impl Network for Tcp {
    fn bind(
        &self,
        address: SocketAddr,
    ) -> futures::future::BoxFuture<'_, io::Result<Box<dyn Listening>>> {
        Box::pin(async move {
            let listener = TcpListener::bind(address).await?;
            Ok(Box::new(listener) as Box<dyn Listening>)
        })
    }
}

impl Listening for TcpListener {
    fn accept(&mut self) -> futures::future::BoxFuture<'_, io::Result<Accepted>> {
        Box::pin(async move {
            let (stream, peer) = TcpListener::accept(self).await?;
            let _ = stream.set_nodelay(true);
            Ok((Box::new(stream) as Box<dyn Stream>, peer))
        })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        TcpListener::local_addr(self)
    }
}
