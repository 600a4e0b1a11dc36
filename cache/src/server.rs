//! Serving blocks to the other agents of the zone (the owner's side of
//! [`crate::peer`]), as routes an agent adds to its admin HTTP port.

use std::sync::Arc;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::peer::{AUTH_HEADER, BLOCK_PATH, parse_block_query, unhex};
use crate::{BlockCache, CacheError, Reading};

pub fn routes(cache: Arc<BlockCache>) -> Router {
    Router::new()
        .route(BLOCK_PATH, get(serve_block))
        .with_state(cache)
}

async fn serve_block(
    State(cache): State<Arc<BlockCache>>,
    RawQuery(query): RawQuery,
    headers: axum::http::HeaderMap,
) -> Response {
    // With a cluster secret, only a peer that signed the query is served.
    if let Some(auth) = cache.peer_auth() {
        let signed = headers
            .get(AUTH_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(unhex)
            .is_some_and(|tag| auth.verify(query.as_deref().unwrap_or("").as_bytes(), &tag));
        if !signed {
            tracing::debug!("cache: an unsigned block request refused");
            return (StatusCode::FORBIDDEN, "not a peer of this cluster\n").into_response();
        }
    }
    let Some((key, catch_up, within)) = query.as_deref().and_then(parse_block_query) else {
        return (StatusCode::BAD_REQUEST, "not a block query\n").into_response();
    };
    let reading = if catch_up {
        Reading::CatchUp
    } else {
        Reading::Tail
    };
    match cache.serve(&key, reading, within).await {
        Ok(bytes) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/octet-stream")],
            bytes,
        )
            .into_response(),
        Err(e) => {
            let status = match e {
                CacheError::Busy(_) | CacheError::Slow(_) => StatusCode::SERVICE_UNAVAILABLE,
                CacheError::BlockSize { .. } => StatusCode::CONFLICT,
                CacheError::OutOfBounds { .. } => StatusCode::BAD_REQUEST,
                CacheError::Load { .. } | CacheError::Disk { .. } => StatusCode::BAD_GATEWAY,
            };
            tracing::debug!(error = %e, "cache: a peer's block was not served");
            (status, format!("{e}\n")).into_response()
        }
    }
}
