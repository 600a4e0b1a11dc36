//! One module per Kafka API.

pub mod api_versions;
pub mod fetch;
pub mod list_offsets;
pub mod metadata;
pub mod produce;
pub mod topics;

use floe_protocol::kafka_protocol::messages::{RequestHeader, RequestKind, ResponseKind};
use floe_protocol::kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;

/// Dispatches a decoded request. `None` means the client expects no response.
pub async fn handle(
    broker: &Broker,
    header: &RequestHeader,
    body: RequestKind,
) -> Option<ResponseKind> {
    let version = header.request_api_version;
    Some(match body {
        RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(api_versions::handle()),
        RequestKind::Metadata(req) => {
            ResponseKind::Metadata(metadata::handle(broker, req, version).await)
        }
        RequestKind::CreateTopics(req) => {
            ResponseKind::CreateTopics(topics::create(broker, req, version).await)
        }
        RequestKind::DeleteTopics(req) => {
            ResponseKind::DeleteTopics(topics::delete(broker, req, version).await)
        }
        RequestKind::Produce(req) => {
            ResponseKind::Produce(produce::handle(broker, req, version).await?)
        }
        RequestKind::Fetch(req) => ResponseKind::Fetch(fetch::handle(broker, req, version).await),
        RequestKind::ListOffsets(req) => {
            ResponseKind::ListOffsets(list_offsets::handle(broker, req, version).await)
        }
        other => {
            // `request::decode` only lets served APIs through.
            tracing::error!(?other, "request of an API with no handler");
            return None;
        }
    })
}

pub fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}
