//! ListConfigResources: the config resources there are. v0 is Kafka's
//! ListClientMetricsResources (subscriptions only); v1 (KIP-1142) names
//! the types it wants, none meaning every type, and lists them in Kafka
//! 4.1's order: groups that have configs set, client metrics
//! subscriptions, broker loggers (floe has none: an agent's log levels are
//! set with RUST_LOG), brokers (the agents this client is shown), topics
//! (every one).

use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::list_config_resources_response::ConfigResource;
use floe_protocol::kafka_protocol::messages::{
    ListConfigResourcesRequest, ListConfigResourcesResponse,
};

use super::{BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP, TOPIC};
use crate::broker::{Broker, kafka_error};
use crate::cluster::discovery;
use floe_protocol::str_bytes;

/// The types v1 lists, in the order Kafka lists them.
const SUPPORTED: [i8; 5] = [GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC];

pub async fn list(
    broker: &Broker,
    req: ListConfigResourcesRequest,
    version: i16,
    session: &crate::security::authorizer::Session,
    client_id: &str,
) -> ListConfigResourcesResponse {
    let wanted: Vec<i8> = match version {
        0 => vec![CLIENT_METRICS],
        _ if req.resource_types.is_empty() => SUPPORTED.to_vec(),
        _ => req.resource_types,
    };
    // One unsupported type refuses the whole request, as in Kafka.
    if wanted.iter().any(|t| !SUPPORTED.contains(t)) {
        return ListConfigResourcesResponse::default()
            .with_error_code(ResponseError::UnsupportedVersion.code());
    }
    let mut listed = Vec::new();
    for kind in SUPPORTED.into_iter().filter(|t| wanted.contains(t)) {
        let names = match names_of(broker, kind, session, client_id).await {
            Ok(names) => names,
            Err(e) => return ListConfigResourcesResponse::default().with_error_code(e.code()),
        };
        listed.extend(names.iter().map(|name| {
            ConfigResource::default()
                .with_resource_name(str_bytes(name))
                .with_resource_type(kind)
        }));
    }
    ListConfigResourcesResponse::default().with_config_resources(listed)
}

async fn names_of(
    broker: &Broker,
    kind: i8,
    session: &crate::security::authorizer::Session,
    client_id: &str,
) -> Result<Vec<String>, ResponseError> {
    let failed = |e: floe_metastore::MetaError| kafka_error(&e);
    Ok(match kind {
        GROUP => broker.meta.configured_groups().await.map_err(failed)?,
        CLIENT_METRICS => {
            let (_, subscriptions) = broker
                .meta
                .client_metrics_if_changed(None)
                .await
                .map_err(failed)?;
            subscriptions.unwrap_or_default().into_keys().collect()
        }
        BROKER => discovery::visible(&*broker.meta, &broker.config, &session.listener, client_id)
            .await
            .iter()
            .map(|a| a.node_id.to_string())
            .collect(),
        TOPIC => broker
            .meta
            .topics()
            .await
            .map_err(failed)?
            .into_iter()
            .map(|t| t.name)
            .collect(),
        _ => Vec::new(),
    })
}
