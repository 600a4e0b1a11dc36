//! The agents' network in the simulation: in-memory pipes, no sockets.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Mutex;

use floe_agent::world::{Accepted, Listening, Network};
use tokio::sync::mpsc;

/// The agents' network: listeners bound to addresses in a table, each
/// connection a pair of in-memory pipes.
#[derive(Default)]
pub(super) struct SimNetwork {
    listeners: Mutex<BTreeMap<SocketAddr, mpsc::Sender<Accepted>>>,
    next_client: Mutex<u32>,
}

impl SimNetwork {
    /// A connection to whoever listens at `address` now.
    pub(super) async fn connect(&self, address: SocketAddr) -> io::Result<tokio::io::DuplexStream> {
        let refused = || io::Error::from(io::ErrorKind::ConnectionRefused);
        let listener = self
            .listeners
            .lock()
            .expect("net lock")
            .get(&address)
            .cloned();
        let listener = listener.ok_or_else(refused)?;
        let peer = {
            let mut next = self.next_client.lock().expect("net lock");
            *next += 1;
            SocketAddr::from((
                [10, 9, (*next >> 16) as u8, (*next >> 8) as u8],
                40_000 + (*next as u16 & 0xff),
            ))
        };
        let (client, server) = tokio::io::duplex(1 << 16);
        listener
            .send((Box::new(server), peer))
            .await
            .map_err(|_| refused())?;
        Ok(client)
    }
}

impl Network for SimNetwork {
    fn bind(
        &self,
        address: SocketAddr,
    ) -> futures::future::BoxFuture<'_, io::Result<Box<dyn Listening>>> {
        let (accepted, incoming) = mpsc::channel(64);
        // A restarted agent takes its address back from its dead self.
        self.listeners
            .lock()
            .expect("net lock")
            .insert(address, accepted);
        Box::pin(
            async move { Ok(Box::new(SimListening { address, incoming }) as Box<dyn Listening>) },
        )
    }
}

struct SimListening {
    address: SocketAddr,
    incoming: mpsc::Receiver<Accepted>,
}

impl Listening for SimListening {
    fn accept(&mut self) -> futures::future::BoxFuture<'_, io::Result<Accepted>> {
        Box::pin(async move {
            match self.incoming.recv().await {
                Some(accepted) => Ok(accepted),
                // Its address was bound again: it is no longer reached.
                None => std::future::pending().await,
            }
        })
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.address)
    }
}
