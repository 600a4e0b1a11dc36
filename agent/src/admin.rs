//! The admin HTTP port: `/metrics` (Prometheus), `/healthz`, `/readyz`,
//! `/client-metrics` (what clients pushed, see `crate::telemetry`), and
//! cached blocks for the other agents of the zone (`floe_cache::server`).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

use crate::broker::Broker;

/// Serves the admin port; with `blocks`, cached blocks to the zone's agents too.
pub async fn serve(
    listener: TcpListener,
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
    axum::serve(listener, app).await
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
