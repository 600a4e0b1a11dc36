//! ApiVersions: which APIs and versions this agent serves.

use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::ApiVersionsResponse;
use floe_protocol::kafka_protocol::messages::api_versions_response::ApiVersion;
use floe_protocol::versions;

/// The feature a Kafka 4 client reads to use transactions v2 (KIP-890):
/// floe finalizes its level 2.
const TRANSACTION_VERSION: &str = "transaction.version";
const TRANSACTION_VERSION_LEVEL: i16 = 2;
/// The epoch of floe's finalized features: they never change while it
/// runs (a client takes features only from an epoch past -1).
const FEATURES_EPOCH: i64 = 1;

/// Every served API; the telemetry ones only when `telemetry` (while
/// clients are asked for metrics, as Kafka advertises them only with a
/// receiver: clients ask only brokers that advertise them). From v3, the
/// features: transactions v2.
pub fn handle(telemetry: bool) -> ApiVersionsResponse {
    use floe_protocol::kafka_protocol::messages::api_versions_response::{
        FinalizedFeatureKey, SupportedFeatureKey,
    };
    let api_keys = versions::all()
        .filter(|(api, _)| telemetry || !versions::TELEMETRY.contains(api))
        .map(|(api, range)| {
            ApiVersion::default()
                .with_api_key(api as i16)
                .with_min_version(range.min)
                .with_max_version(range.max)
        })
        .collect();
    let name = || floe_protocol::str_bytes(TRANSACTION_VERSION);
    ApiVersionsResponse::default()
        .with_api_keys(api_keys)
        .with_supported_features(vec![
            SupportedFeatureKey::default()
                .with_name(name())
                .with_min_version(0)
                .with_max_version(TRANSACTION_VERSION_LEVEL),
        ])
        .with_finalized_features_epoch(FEATURES_EPOCH)
        .with_finalized_features(vec![
            FinalizedFeatureKey::default()
                .with_name(name())
                .with_min_version_level(TRANSACTION_VERSION_LEVEL)
                .with_max_version_level(TRANSACTION_VERSION_LEVEL),
        ])
}

/// The v0 answer to an ApiVersions request newer than floe knows.
pub fn unsupported() -> ApiVersionsResponse {
    handle(false).with_error_code(ResponseError::UnsupportedVersion.code())
}
