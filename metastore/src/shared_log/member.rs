//! [`Member`]: a metastore node on a shared log embedded in an agent, and
//! the way to its leader. Every agent started with the same PostgreSQL URL
//! runs one node and serves it on its own port; the node that holds the
//! lease answers, and the others' agents send their calls on to it (a
//! refusal as `NotLeader` applied nothing, so passing the call on is safe
//! for every operation).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{LogNode, LogNodeOptions, SharedLog};
use crate::api::{Op, Transport};
use crate::contract::client::RemoteMetastore;
use crate::peer_auth::ClusterSecret;
use crate::types::MetaError;

/// A node in this process, and a client of the leader when it is another.
pub struct Member {
    node: Arc<LogNode>,
    address: String,
    secret: Option<ClusterSecret>,
    /// The client of the leader last named, by its address.
    leader: Mutex<Option<(String, Arc<RemoteMetastore>)>>,
    server: tokio::task::AbortHandle,
}

impl Drop for Member {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Member {
    /// Starts a node on `log`, served on `listener` (the other members
    /// reach it at `options.address`).
    pub async fn start(
        log: Arc<dyn SharedLog>,
        listener: tokio::net::TcpListener,
        options: LogNodeOptions,
    ) -> Result<Member, MetaError> {
        let (address, secret) = (options.address.clone(), options.secret.clone());
        let node = Arc::new(LogNode::start(log, options).await?);
        let server = tokio::spawn(crate::rpc::serve(listener, node.clone())).abort_handle();
        Ok(Member {
            node,
            address,
            secret,
            leader: Mutex::new(None),
            server,
        })
    }

    pub fn node(&self) -> &Arc<LogNode> {
        &self.node
    }

    /// Stops serving and gives the lease back.
    pub async fn shutdown(&self) {
        self.server.abort();
        self.node.shutdown().await;
    }

    /// A client of the node at `address`, kept while it stays the leader.
    fn client_of(&self, address: &str) -> Arc<RemoteMetastore> {
        let mut leader = self.leader.lock().expect("leader client lock");
        match &*leader {
            Some((known, client)) if known == address => client.clone(),
            _ => {
                let client =
                    Arc::new(RemoteMetastore::new(address).with_secret(self.secret.clone()));
                *leader = Some((address.to_string(), client.clone()));
                client
            }
        }
    }
}

/// How long a call waits for some node to lead (a lease to lapse after
/// its holder died, the database to come back), as a remote client does.
const RETRY_FOR: Duration = Duration::from_secs(15);

impl Transport for Member {
    /// Asks this agent's node, or the leader it names; while no node leads,
    /// or the leader cannot answer yet (its lease not renewed since the
    /// database came back), asks again until it can or [`RETRY_FOR`]
    /// passed. Only what certainly applied nothing is asked again.
    async fn call<O: Op>(&self, op: O) -> Result<O::Output, MetaError> {
        let deadline = tokio::time::Instant::now() + RETRY_FOR;
        loop {
            let answer = match self.node.call(op.clone()).await {
                Err(MetaError::NotLeader(Some(leader))) if leader != self.address => {
                    self.client_of(&leader).call(op.clone()).await
                }
                answer => answer,
            };
            match answer {
                Err(
                    MetaError::NotLeader(_)
                    | MetaError::Unavailable {
                        maybe_applied: false,
                        ..
                    },
                ) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                answer => return answer,
            }
        }
    }
}
