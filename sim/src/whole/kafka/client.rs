//! A simulated Kafka client's requests: through an agent, each answered,
//! refused, timed out, dropped or abandoned.

use std::sync::{Arc, Mutex};

use floe_protocol::client::Connection;
use floe_protocol::kafka_protocol::messages::ApiKey;
use tokio::time::Duration;

use super::REQUEST_TIMEOUT;
use super::cluster::kafka_address;
use super::network::SimNetwork;
use crate::whole::Shared;

/// A Kafka client of the agents: a connection per request, as a client
/// that lost its connection opens another. It keeps to one agent (as a
/// client keeps to a partition's leader) until a request through it fails.
pub(super) struct Client {
    pub(super) shared: Shared,
    net: Arc<SimNetwork>,
    agents: usize,
    /// The agent it keeps to (`None`: a new one at random each request).
    sticky: Option<Mutex<usize>>,
    /// Who it authenticates as (SASL/PLAIN) on each connection.
    user: &'static str,
}

/// The user every client of the simulation is unless it says otherwise: a
/// super user (see `cluster::USERS`).
pub(super) const SIM_USER: &str = "sim";

/// A connection to agent `agent`, authenticated as `user` (`None`: refused,
/// dropped, or its authentication failed or went unanswered).
pub(super) async fn open(
    net: &SimNetwork,
    agent: usize,
    user: &str,
    client_id: &'static str,
) -> Option<Connection> {
    let stream = net.connect(kafka_address(agent)).await.ok()?;
    let mut conn = Connection::over(stream, client_id);
    let password = super::cluster::password_of(user);
    let authenticated = tokio::time::timeout(REQUEST_TIMEOUT, conn.authenticate(user, &password));
    authenticated.await.ok()?.ok()?;
    Some(conn)
}

/// The share of requests a client abandons after sending them.
const ABANDONED: f64 = 0.03;

/// The longest a connection its client abandoned silently stays open.
const LINGER: Duration = Duration::from_secs(60);

/// Why a request got no answer.
#[derive(Debug)]
pub(super) enum Unanswered {
    Refused,
    TimedOut,
    Dropped,
}

impl Client {
    pub(super) fn new(shared: &Shared, net: &Arc<SimNetwork>, agents: usize) -> Client {
        Client {
            shared: shared.clone(),
            net: net.clone(),
            agents,
            sticky: None,
            user: SIM_USER,
        }
    }

    /// The same client, authenticating as `user`.
    pub(super) fn authenticating_as(self, user: &'static str) -> Client {
        Client { user, ..self }
    }

    /// A client that keeps to agent `first` while it answers.
    pub(super) fn sticky(
        shared: &Shared,
        net: &Arc<SimNetwork>,
        agents: usize,
        first: usize,
    ) -> Client {
        Client {
            sticky: Some(Mutex::new(first % agents)),
            ..Client::new(shared, net, agents)
        }
    }

    /// The agent the next request goes to.
    fn agent(&self) -> usize {
        match &self.sticky {
            Some(agent) => *agent.lock().expect("client lock"),
            None => self
                .shared
                .with(|w| w.rng_below(self.agents as u64) as usize),
        }
    }

    /// After a failure through `agent`, a sticky client moves to another.
    fn failed(&self, agent: usize) {
        if let Some(sticky) = &self.sticky {
            let next = self
                .shared
                .with(|w| w.rng_below(self.agents as u64) as usize);
            let mut current = sticky.lock().expect("client lock");
            if *current == agent {
                *current = next;
            }
        }
    }

    /// One request through a random agent, answered within the request
    /// timeout; some the client abandons after sending (its connection
    /// drops), leaving the request running in the agent.
    pub(super) async fn call<Req, Resp>(
        &self,
        api: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, Unanswered>
    where
        Req: floe_protocol::kafka_protocol::protocol::Encodable,
        Resp: floe_protocol::kafka_protocol::protocol::Decodable,
    {
        self.call_abandoning(api, version, request, ABANDONED).await
    }

    /// [`Client::call`], abandoning a share `abandon` of requests.
    pub(super) async fn call_abandoning<Req, Resp>(
        &self,
        api: ApiKey,
        version: i16,
        request: &Req,
        abandon: f64,
    ) -> Result<Resp, Unanswered>
    where
        Req: floe_protocol::kafka_protocol::protocol::Encodable,
        Resp: floe_protocol::kafka_protocol::protocol::Decodable,
    {
        let agent = self.agent();
        let answer = self.call_on(agent, api, version, request, abandon).await;
        if answer.is_err() {
            self.failed(agent);
        }
        answer
    }

    async fn call_on<Req, Resp>(
        &self,
        agent: usize,
        api: ApiKey,
        version: i16,
        request: &Req,
        abandon: f64,
    ) -> Result<Resp, Unanswered>
    where
        Req: floe_protocol::kafka_protocol::protocol::Encodable,
        Resp: floe_protocol::kafka_protocol::protocol::Decodable,
    {
        let abandon = self.shared.with(|w| w.chance(abandon));
        let mut conn = open(&self.net, agent, self.user, "sim")
            .await
            .ok_or(Unanswered::Refused)?;
        let id = conn
            .send(api, version, request)
            .await
            .map_err(|_| Unanswered::Dropped)?;
        if abandon {
            // Give the agent a moment to take the request, then hang up,
            // or (half the time) go silent: the path to the agent is lost,
            // so the agent sees no close and runs the request on, for as
            // long as a dead TCP connection lingers.
            let (pause, silent, linger) = self.shared.with(|w| {
                let pause = w.latency_up_to(Duration::from_millis(50));
                (pause, w.chance(0.5), w.latency_up_to(LINGER))
            });
            tokio::time::sleep(pause).await;
            if silent {
                tokio::spawn(async move {
                    tokio::time::sleep(linger).await;
                    drop(conn);
                });
            }
            return Err(Unanswered::Dropped);
        }
        match tokio::time::timeout(REQUEST_TIMEOUT, conn.receive(api, version, id)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(_)) => Err(Unanswered::Dropped),
            Err(_) => Err(Unanswered::TimedOut),
        }
    }
}

/// Error codes an idempotent producer retries (librdkafka's retriable ones).
pub(super) fn retriable(code: i16) -> bool {
    use floe_protocol::ResponseError as E;
    [
        E::UnknownServerError,
        E::NotLeaderOrFollower,
        E::RequestTimedOut,
        E::NetworkException,
        E::NotEnoughReplicas,
        E::NotEnoughReplicasAfterAppend,
        E::KafkaStorageError,
        E::UnknownTopicOrPartition,
        E::CoordinatorLoadInProgress,
        E::CoordinatorNotAvailable,
        E::NotCoordinator,
        E::ConcurrentTransactions,
    ]
    .iter()
    .any(|e| e.code() == code)
}
