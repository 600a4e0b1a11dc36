//! ApiVersions: which APIs and versions this agent serves.

use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::ApiVersionsResponse;
use floe_protocol::kafka_protocol::messages::api_versions_response::ApiVersion;
use floe_protocol::versions;

/// Every served API; the telemetry ones only when `telemetry` (while
/// clients are asked for metrics, as Kafka advertises them only with a
/// receiver: clients ask only brokers that advertise them).
pub fn handle(telemetry: bool) -> ApiVersionsResponse {
    let api_keys = versions::all()
        .filter(|(api, _)| telemetry || !versions::TELEMETRY.contains(api))
        .map(|(api, range)| {
            ApiVersion::default()
                .with_api_key(api as i16)
                .with_min_version(range.min)
                .with_max_version(range.max)
        })
        .collect();
    ApiVersionsResponse::default().with_api_keys(api_keys)
}

/// The v0 answer to an ApiVersions request newer than floe knows.
pub fn unsupported() -> ApiVersionsResponse {
    handle(false).with_error_code(ResponseError::UnsupportedVersion.code())
}
