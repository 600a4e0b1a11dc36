//! ApiVersions: which APIs and versions this agent serves.

use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::ApiVersionsResponse;
use floe_protocol::kafka_protocol::messages::api_versions_response::ApiVersion;
use floe_protocol::versions;

pub fn handle() -> ApiVersionsResponse {
    let api_keys = versions::all()
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
    handle().with_error_code(ResponseError::UnsupportedVersion.code())
}
