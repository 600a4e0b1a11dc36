//! The admin HTTP port: `/metrics` (Prometheus), `/healthz`, `/readyz`,
//! `/client-metrics` (what clients pushed, see `crate::telemetry`), and
//! cached blocks for the other agents of the zone (`floe_cache::server`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::broker::Broker;
use crate::world::{Listening, Stream};

/// Serves the admin port; with `blocks`, cached blocks to the zone's agents too.
pub async fn serve(
    listener: Box<dyn Listening>,
    broker: Arc<Broker>,
    blocks: bool,
) -> std::io::Result<()> {
    let mut app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/client-metrics", get(client_metrics))
        .with_state(broker.clone());
    if blocks {
        app = app.merge(floe_cache::server::routes(broker.cache.clone()));
    }
    axum::serve(Socket(listener), app).await
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
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        broker.metrics.render(),
    )
}

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

/// Ready when the metastore answers: without it nothing can be produced or fetched.
async fn ready(State(broker): State<Arc<Broker>>) -> impl IntoResponse {
    match broker.meta.topic("__floe_readiness_probe").await {
        Ok(_) => (StatusCode::OK, "ready\n".to_string()),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("metastore: {e}\n")),
    }
}
