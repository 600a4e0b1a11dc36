//! The order in which a connection's requests take effect.
//!
//! A Kafka broker takes one request of a connection at a time: it reads the
//! next only once the last is answered. Clients rely on it: an admin client
//! that deletes records and then lists the earliest offset, a consumer that
//! commits and then fetches its offsets, a producer without idempotence
//! whose pipelined batches must land in order. floe keeps that promise while
//! letting through the concurrency no client can see:
//!
//! - produces pipeline behind produces: their batches are enqueued in
//!   request order (admission runs before the next request is read), and an
//!   agent commits its ingest files in order, so they take offsets in the
//!   order sent however many wait for a flush at once;
//! - offset commits pipeline behind offset commits: they run one after
//!   another in the connection's group lane, and commits in a row are
//!   written together, as running them in order would have left them
//!   (`handlers::groups::commit_runs`);
//! - requests that change nothing (fetches, metadata, descriptions, lists)
//!   run beside each other.
//!
//! Anything else waits for every request before it to be done, and every
//! request waits for the changes before it: so each request sees the
//! effects of all requests sent before it, and none of those sent after.
//! A request is done when its handler is, which for a produce (even with
//! `acks=0`) is when its batches are committed or refused.

use floe_protocol::kafka_protocol::messages::RequestKind;
use floe_protocol::request::Decoded;

/// What a request does to the state other requests see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Changes nothing.
    Reads,
    /// A Produce: ordered among produces by the batcher.
    Produces,
    /// An OffsetCommit: ordered among commits by the group lane.
    Commits,
    /// Any other change.
    Writes,
}

impl Effect {
    pub fn of(decoded: &Decoded) -> Effect {
        match decoded {
            Decoded::ApiVersionsTooNew { .. } => Effect::Reads,
            Decoded::Request { body, .. } => Effect::of_request(body),
        }
    }

    /// The effect of a request of the API `key` before its body is read:
    /// [`Effect::of_request`]'s, but Metadata's is taken as a read (it may
    /// turn out to create topics, known once its body is read).
    pub fn of_api_key(key: i16) -> Effect {
        use floe_protocol::kafka_protocol::messages::ApiKey;
        let Ok(api) = ApiKey::try_from(key) else {
            return Effect::Writes;
        };
        match api {
            ApiKey::Produce => Effect::Produces,
            ApiKey::OffsetCommit => Effect::Commits,
            ApiKey::Metadata
            | ApiKey::ApiVersions
            | ApiKey::ConsumerGroupDescribe
            | ApiKey::DescribeAcls
            | ApiKey::DescribeClientQuotas
            | ApiKey::DescribeCluster
            | ApiKey::DescribeConfigs
            | ApiKey::DescribeGroups
            | ApiKey::DescribeLogDirs
            | ApiKey::DescribeProducers
            | ApiKey::DescribeQuorum
            | ApiKey::DescribeTopicPartitions
            | ApiKey::DescribeTransactions
            | ApiKey::DescribeUserScramCredentials
            | ApiKey::Fetch
            | ApiKey::FindCoordinator
            | ApiKey::GetTelemetrySubscriptions
            | ApiKey::ListConfigResources
            | ApiKey::ListGroups
            | ApiKey::ListOffsets
            | ApiKey::ListPartitionReassignments
            | ApiKey::ListTransactions
            | ApiKey::OffsetFetch
            | ApiKey::OffsetForLeaderEpoch => Effect::Reads,
            _ => Effect::Writes,
        }
    }

    pub fn of_request(body: &RequestKind) -> Effect {
        match body {
            RequestKind::Produce(_) => Effect::Produces,
            RequestKind::OffsetCommit(_) => Effect::Commits,
            // Metadata may create the topics it names (auto-creation).
            RequestKind::Metadata(req) => match req.allow_auto_topic_creation
                && req.topics.as_ref().is_some_and(|t| !t.is_empty())
            {
                true => Effect::Writes,
                false => Effect::Reads,
            },
            RequestKind::ApiVersions(_)
            | RequestKind::ConsumerGroupDescribe(_)
            | RequestKind::DescribeAcls(_)
            | RequestKind::DescribeClientQuotas(_)
            | RequestKind::DescribeCluster(_)
            | RequestKind::DescribeConfigs(_)
            | RequestKind::DescribeGroups(_)
            | RequestKind::DescribeLogDirs(_)
            | RequestKind::DescribeProducers(_)
            | RequestKind::DescribeQuorum(_)
            | RequestKind::DescribeTopicPartitions(_)
            | RequestKind::DescribeTransactions(_)
            | RequestKind::DescribeUserScramCredentials(_)
            | RequestKind::Fetch(_)
            | RequestKind::FindCoordinator(_)
            | RequestKind::GetTelemetrySubscriptions(_)
            | RequestKind::ListConfigResources(_)
            | RequestKind::ListGroups(_)
            | RequestKind::ListOffsets(_)
            | RequestKind::ListPartitionReassignments(_)
            | RequestKind::ListTransactions(_)
            | RequestKind::OffsetFetch(_)
            | RequestKind::OffsetForLeaderEpoch(_) => Effect::Reads,
            _ => Effect::Writes,
        }
    }

    /// Whether a request of this kind may start while one of `earlier`,
    /// sent before it, is not done.
    fn passes(self, earlier: Effect) -> bool {
        matches!(
            (self, earlier),
            (Effect::Reads, Effect::Reads)
                | (Effect::Produces, Effect::Produces)
                | (Effect::Commits, Effect::Commits)
        )
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How many requests of each [`Effect`] a connection has started and not
/// finished.
#[derive(Debug, Default)]
pub struct Running([usize; 4]);

impl Running {
    pub fn start(&mut self, effect: Effect) {
        self.0[effect.index()] += 1;
    }

    pub fn finish(&mut self, effect: Effect) {
        self.0[effect.index()] -= 1;
    }

    /// Whether a request of `effect` must wait for some running one.
    pub fn holds_back(&self, effect: Effect) -> bool {
        [
            Effect::Reads,
            Effect::Produces,
            Effect::Commits,
            Effect::Writes,
        ]
        .into_iter()
        .any(|earlier| self.0[earlier.index()] > 0 && !effect.passes(earlier))
    }

    /// Requests running that are neither produces nor offset commits.
    pub fn others(&self) -> usize {
        self.0[Effect::Reads.index()] + self.0[Effect::Writes.index()]
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&n| n == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_protocol::kafka_protocol::messages::*;

    #[test]
    fn only_requests_of_a_kind_that_commutes_run_together() {
        use Effect::*;
        let all = [Reads, Produces, Commits, Writes];
        for effect in all {
            assert!(!Running::default().holds_back(effect), "nothing running");
            for earlier in all {
                let mut running = Running::default();
                running.start(earlier);
                let together = effect == earlier && effect != Writes;
                assert_eq!(
                    !running.holds_back(effect),
                    together,
                    "{effect:?} after {earlier:?}"
                );
                running.finish(earlier);
                assert!(running.is_empty());
            }
        }
        // A read behind reads and a produce: it waits for the produce.
        let mut running = Running::default();
        running.start(Reads);
        running.start(Produces);
        assert!(running.holds_back(Reads));
        assert_eq!(running.others(), 1);
    }

    /// A request's key says as much as its body, but for Metadata, which
    /// creates topics only when its body says so.
    #[test]
    fn the_api_key_tells_the_effect_before_the_body() {
        use floe_protocol::kafka_protocol::messages::ApiKey;
        let bodies = [
            (
                ApiKey::Produce,
                RequestKind::Produce(ProduceRequest::default()),
            ),
            (
                ApiKey::OffsetCommit,
                RequestKind::OffsetCommit(OffsetCommitRequest::default()),
            ),
            (ApiKey::Fetch, RequestKind::Fetch(FetchRequest::default())),
            (
                ApiKey::ListOffsets,
                RequestKind::ListOffsets(ListOffsetsRequest::default()),
            ),
            (
                ApiKey::OffsetFetch,
                RequestKind::OffsetFetch(OffsetFetchRequest::default()),
            ),
            (
                ApiKey::DeleteRecords,
                RequestKind::DeleteRecords(DeleteRecordsRequest::default()),
            ),
            (
                ApiKey::EndTxn,
                RequestKind::EndTxn(EndTxnRequest::default()),
            ),
            (
                ApiKey::JoinGroup,
                RequestKind::JoinGroup(JoinGroupRequest::default()),
            ),
            (
                ApiKey::DescribeConfigs,
                RequestKind::DescribeConfigs(DescribeConfigsRequest::default()),
            ),
            (
                ApiKey::IncrementalAlterConfigs,
                RequestKind::IncrementalAlterConfigs(IncrementalAlterConfigsRequest::default()),
            ),
        ];
        for (key, body) in bodies {
            assert_eq!(
                Effect::of_api_key(key as i16),
                Effect::of_request(&body),
                "{key:?}"
            );
        }
        assert_eq!(Effect::of_api_key(ApiKey::Metadata as i16), Effect::Reads);
        assert_eq!(Effect::of_api_key(-7), Effect::Writes, "unknown");
    }

    #[test]
    fn what_changes_state_is_a_write() {
        let of = |body: RequestKind| Effect::of_request(&body);
        assert_eq!(
            of(RequestKind::Fetch(FetchRequest::default())),
            Effect::Reads
        );
        assert_eq!(
            of(RequestKind::ListOffsets(ListOffsetsRequest::default())),
            Effect::Reads
        );
        assert_eq!(
            of(RequestKind::DeleteRecords(DeleteRecordsRequest::default())),
            Effect::Writes
        );
        assert_eq!(
            of(RequestKind::Heartbeat(HeartbeatRequest::default())),
            Effect::Writes
        );
        assert_eq!(
            of(RequestKind::EndTxn(EndTxnRequest::default())),
            Effect::Writes
        );
        let metadata = MetadataRequest::default().with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default()
                .with_name(Some(TopicName(floe_protocol::str_bytes("t")))),
        ]));
        assert_eq!(
            of(RequestKind::Metadata(
                metadata.clone().with_allow_auto_topic_creation(false)
            )),
            Effect::Reads
        );
        assert_eq!(
            of(RequestKind::Metadata(
                metadata.with_allow_auto_topic_creation(true)
            )),
            Effect::Writes,
            "it may create the topic"
        );
    }
}
