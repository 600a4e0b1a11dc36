//! The admin HTTP port: `/metrics` (Prometheus), `/healthz`, `/readyz`,
//! `/client-metrics` (what clients pushed, see `crate::telemetry`), and
//! cached blocks for the other agents of the zone (`floe_cache::server`).
//!
//! It is bound first and answers at once, also while the agent starts (it
//! may wait long for its metastore): live, not ready, and why.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tower::ServiceExt;

use crate::broker::Broker;
use crate::world::{Listening, Stream};

/// What the admin port answers with: why the agent is not serving yet
/// (and its metrics so far), until [`AdminPort::serving`] hands it the
/// agent's routes.
pub struct AdminPort {
    routes: OnceLock<Router>,
    starting: Mutex<String>,
    metrics: Arc<crate::metrics::Metrics>,
}

impl AdminPort {
    pub fn new(metrics: Arc<crate::metrics::Metrics>) -> AdminPort {
        AdminPort {
            routes: OnceLock::new(),
            starting: Mutex::new("starting".into()),
            metrics,
        }
    }

    /// Says what the starting agent waits for (answered by `/readyz`).
    pub fn starting(&self, what: impl Into<String>) {
        *self.starting.lock().expect("admin port") = what.into();
    }

    /// The agent serves: from now on the port answers for `broker`; with
    /// `blocks`, cached blocks to the zone's agents too.
    pub fn serving(&self, broker: Arc<Broker>, blocks: bool) {
        let mut routes = Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(|| async { "ok\n" }))
            .route("/readyz", get(ready))
            .route("/client-metrics", get(client_metrics))
            .with_state(broker.clone());
        if blocks {
            routes = routes.merge(floe_cache::server::routes(broker.cache.clone()));
        }
        let _ = self.routes.set(routes);
    }
}

/// Serves the admin port: see [`AdminPort`].
pub async fn serve(listener: Box<dyn Listening>, port: Arc<AdminPort>) -> std::io::Result<()> {
    let app = Router::new().fallback(answer).with_state(port);
    axum::serve(Socket(listener), app).await
}

async fn answer(State(port): State<Arc<AdminPort>>, request: Request) -> Response {
    if let Some(routes) = port.routes.get() {
        return match routes.clone().oneshot(request).await {
            Ok(answer) => answer,
            Err(never) => match never {},
        };
    }
    let starting = port.starting.lock().expect("admin port").clone();
    match request.uri().path() {
        // Alive: a liveness probe must not restart an agent that waits for
        // its metastore, which restarting would not bring.
        "/healthz" => (StatusCode::OK, format!("ok (starting: {starting})\n")).into_response(),
        // What it counted so far (its metastore requests, above all).
        "/metrics" => {
            ([(header::CONTENT_TYPE, OPENMETRICS)], port.metrics.render()).into_response()
        }
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("starting: {starting}\n"),
        )
            .into_response(),
    }
}

/// The admin endpoint's listener, on the agent's network (see
/// [`crate::world::Network`]).
struct Socket(Box<dyn Listening>);

impl axum::serve::Listener for Socket {
    type Io = Box<dyn Stream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok(accepted) => return accepted,
                // E.g. out of file descriptors: try again shortly.
                Err(e) => {
                    tracing::warn!(error = %e, "accepting an admin connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

async fn metrics(State(broker): State<Arc<Broker>>) -> impl IntoResponse {
    let m = &broker.metrics;
    m.response_budget_free
        .set(broker.responses.available() as i64);
    m.request_budget_free
        .set(broker.requests.available() as i64);
    m.read_cache(&broker.cache);
    let heard = broker.batcher.metastore_contact().heard_ago;
    m.metastore_heard_seconds
        .set(heard.map_or(-1.0, |ago| ago.as_secs_f64()));
    (
        [(header::CONTENT_TYPE, OPENMETRICS)],
        broker.metrics.render(),
    )
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What clients pushed (KIP-714; see [`crate::telemetry`]).
async fn client_metrics(State(broker): State<Arc<Broker>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        broker.telemetry.render(),
    )
}

/// How long an agent stays ready without hearing from the metastore: longer
/// than an election (a few seconds), so that a load balancer keeps every
/// agent that can still serve while the metastore elects a leader (their
/// produces wait for it, within the commit deadline); short enough that an
/// agent cut off from the metastore leaves the pool.
pub const READY_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

/// Ready while the metastore was heard from within [`READY_GRACE`]: without
/// it nothing can be produced or fetched for long. Answered from what the
/// agent already holds (its steady clock readings), never by asking the
/// metastore, so a probe with a short timeout is answered at once.
async fn ready(State(broker): State<Arc<Broker>>) -> impl IntoResponse {
    match readiness(&broker.batcher.metastore_contact()) {
        Ok(()) => (StatusCode::OK, "ready\n".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

fn readiness(contact: &crate::write::batcher::MetastoreContact) -> Result<(), String> {
    let failing = match &contact.failing {
        Some(why) => format!(" (last: {why})"),
        None => String::new(),
    };
    match contact.heard_ago {
        Some(ago) if ago <= READY_GRACE => Ok(()),
        Some(ago) => Err(format!(
            "metastore: not heard from for {} s{failing}",
            ago.as_secs()
        )),
        None => Err(format!(
            "metastore: not heard from since the agent started{failing}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::write::batcher::MetastoreContact;

    fn heard(ago: Option<u64>, failing: Option<&str>) -> MetastoreContact {
        MetastoreContact {
            heard_ago: ago.map(Duration::from_secs),
            failing: failing.map(str::to_string),
        }
    }

    #[test]
    fn an_agent_stays_ready_through_an_election() {
        assert_eq!(readiness(&heard(Some(0), None)), Ok(()));
        // Failing now, but heard from seconds ago: a leader being elected.
        assert_eq!(readiness(&heard(Some(3), Some("no leader"))), Ok(()));
        assert_eq!(
            readiness(&heard(Some(20), Some("no leader"))),
            Err("metastore: not heard from for 20 s (last: no leader)".into())
        );
        assert_eq!(
            readiness(&heard(None, None)),
            Err("metastore: not heard from since the agent started".into())
        );
    }
}
