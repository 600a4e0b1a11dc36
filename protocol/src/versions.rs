//! The APIs floe serves and the version ranges it answers for each.
//!
//! A range is never wider than what the `kafka-protocol` crate can encode and
//! decode; it is narrower where floe does not (yet) implement a later version's
//! semantics. The highest versions are Kafka 4.1's, so that clients that
//! infer a broker's version from them (kafka-python) take floe for Kafka 4.1.

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::VersionRange;

/// (api, lowest version, highest version) served by floe.
const SERVED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 13),
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::InitProducerId, 0, 5),
    // Transactions v1 and v2 (KIP-890): v4+ of AddPartitionsToTxn are
    // between brokers; Produce v12+ adds its partition to the transaction,
    // TxnOffsetCommit v5 its group, EndTxn v5 bumps the epoch; v4 of
    // AddOffsetsToTxn and TxnOffsetCommit only add TRANSACTION_ABORTABLE.
    (ApiKey::AddPartitionsToTxn, 0, 3),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::DescribeTransactions, 0, 0),
    // v2 filters by a transactional-id pattern (KIP-1152).
    (ApiKey::ListTransactions, 0, 2),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::DescribeProducers, 0, 0),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    // librdkafka looks for v0 before it will authenticate at all; a v0
    // handshake (raw SASL tokens after it) is refused, v1 with
    // SaslAuthenticate is what current clients send.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    // KIP-714, advertised only while a subscription exists (see the
    // agent's `telemetry`).
    (ApiKey::GetTelemetrySubscriptions, 0, 0),
    (ApiKey::PushTelemetry, 0, 0),
    // v0 is ListClientMetricsResources; v1 (KIP-1142) lists other
    // resource types too.
    (ApiKey::ListConfigResources, 0, 1),
    // The metastore's Raft group, shown as a KRaft quorum (see the agent's
    // `handlers::quorum`).
    (ApiKey::DescribeQuorum, 0, 2),
    // Answered as a cluster with nothing to move (see the agent's
    // `handlers::replicas`).
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::AlterReplicaLogDirs, 1, 2),
    // Share groups (KIP-932) as Kafka 4.2 has them; v2 of ShareFetch and
    // ShareAcknowledge (acquire modes, lock renewal) and v1 of
    // DescribeShareGroupOffsets (lag) are not in the protocol crate yet.
    (ApiKey::ShareGroupHeartbeat, 1, 1),
    (ApiKey::ShareGroupDescribe, 1, 1),
    (ApiKey::ShareFetch, 1, 1),
    (ApiKey::ShareAcknowledge, 1, 1),
    (ApiKey::DescribeShareGroupOffsets, 0, 0),
    (ApiKey::AlterShareGroupOffsets, 0, 0),
    (ApiKey::DeleteShareGroupOffsets, 0, 0),
];

/// The APIs advertised only while client telemetry is asked for.
pub const TELEMETRY: [ApiKey; 2] = [ApiKey::GetTelemetrySubscriptions, ApiKey::PushTelemetry];

/// The versions of `api` floe serves, or `None` if it does not serve `api`.
pub fn served(api: ApiKey) -> Option<VersionRange> {
    SERVED
        .iter()
        .find(|(key, _, _)| *key == api)
        .map(|&(_, min, max)| VersionRange { min, max }.intersect(&api.valid_versions()))
}

/// Every served API with its range, for the ApiVersions response.
pub fn all() -> impl Iterator<Item = (ApiKey, VersionRange)> {
    SERVED
        .iter()
        .filter_map(|&(api, _, _)| served(api).map(|range| (api, range)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_range_is_within_the_codec() {
        for (api, range) in all() {
            let codec = api.valid_versions();
            assert!(!range.is_empty(), "{api:?}");
            assert!(range.min >= codec.min && range.max <= codec.max, "{api:?}");
        }
    }

    #[test]
    fn unserved_api_has_no_range() {
        assert!(served(ApiKey::Vote).is_none());
    }
}
