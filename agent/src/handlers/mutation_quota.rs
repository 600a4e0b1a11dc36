//! Kafka's controller mutation quota (KIP-599) on CreateTopics,
//! CreatePartitions and DeleteTopics: before a request is handled, each of
//! its topics takes its partitions (created, added or deleted) from the
//! client's bucket (see [`crate::limits::quotas::Quotas::mutate`]), in order. From
//! CreateTopics v6, CreatePartitions v3 and DeleteTopics v5 on, a topic
//! asked for while the bucket is empty is left out of the request and
//! answered THROTTLING_QUOTA_EXCEEDED; older requests are done whole, and
//! their client throttled. The response carries the throttle time, and the
//! connection is muted for it, as Kafka's `sendResponseMaybeThrottleWithControllerQuota`.
//! Validate-only requests take from it too, as in Kafka.
//!
//! A topic takes only what it would mutate: nothing if it exists (create),
//! is unknown (delete), does not grow (create partitions), asks for a
//! partition count out of range, or is named twice (the handler refuses it,
//! as Kafka does before its quota is looked at). One difference is left: a
//! topic refused later for another reason (a bad config, say) has taken its
//! partitions, bounded by `MAX_PARTITIONS`.

use floe_protocol::kafka_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use floe_protocol::kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use floe_protocol::kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use floe_protocol::kafka_protocol::messages::{RequestKind, ResponseKind};
use floe_protocol::kafka_protocol::protocol::StrBytes;

use std::collections::HashMap;

use floe_metastore::state::MAX_PARTITIONS;

use crate::broker::Broker;
use crate::limits::quotas::{Client, Kind, Mutation};

/// Whether each key occurs more than once in `keys`.
fn repeated<K: std::hash::Hash + Eq>(keys: impl Iterator<Item = K>) -> HashMap<K, bool> {
    let mut seen = HashMap::new();
    for key in keys {
        seen.entry(key)
            .and_modify(|twice| *twice = true)
            .or_insert(false);
    }
    seen
}

/// What is added to the response once the request is handled: the topics
/// refused, and the throttle.
pub struct After {
    refused: Refused,
    throttle_ms: u32,
}

enum Refused {
    CreateTopics(Vec<CreatableTopicResult>),
    CreatePartitions(Vec<CreatePartitionsTopicResult>),
    DeleteTopics(Vec<DeletableTopicResult>),
}

fn message() -> Option<StrBytes> {
    Some(StrBytes::from_static_str(
        "The throttling quota has been exceeded.",
    ))
}

/// Takes the partitions `body` mutates from `quota` (when it is one of the
/// three requests and a controller mutation quota may apply): the request
/// left to handle, and what to add to its response.
pub async fn take(
    broker: &Broker,
    quota: Option<&Client>,
    body: RequestKind,
    version: i16,
) -> (RequestKind, Option<After>) {
    // Only a client with a quota of its own pays for the lookups below.
    let Some(quota) = quota.filter(|q| q.has_quota(Kind::ControllerMutation)) else {
        return (body, None);
    };
    let mut throttle_ms = 0;
    // A topic that mutates nothing (unknown, existing, not growing) is not
    // held: it gets its own error, before Kafka looks at the quota.
    let mut take_one = |permits: i32, strict: bool| match permits <= 0 {
        true => true,
        false => match quota.mutate(permits as f64, strict) {
            Mutation::Taken { throttle_ms: t } => {
                throttle_ms = throttle_ms.max(t);
                true
            }
            Mutation::Refused { throttle_ms: t } => {
                throttle_ms = throttle_ms.max(t);
                false
            }
        },
    };
    match body {
        RequestKind::CreateTopics(mut req) => {
            let strict = version >= 6;
            let default = broker.config.default_partitions;
            let twice = repeated(req.topics.iter().map(|t| t.name.clone()));
            let mut refused = Vec::new();
            let mut kept = Vec::with_capacity(req.topics.len());
            for t in std::mem::take(&mut req.topics) {
                let valid = |n: i32| (1..=MAX_PARTITIONS).contains(&n).then_some(n);
                let asked = match (t.num_partitions, t.assignments.len()) {
                    (-1, 0) => Some(default),
                    (n, 0) => valid(n),
                    (-1, assigned) => valid(assigned.min(i32::MAX as usize) as i32),
                    _ => None,
                };
                let partitions = match (asked, twice[&t.name]) {
                    (Some(n), false) => match broker.meta.topic(&t.name).await {
                        Ok(None) => n,
                        _ => 0,
                    },
                    _ => 0,
                };
                if take_one(partitions, strict) {
                    kept.push(t);
                } else {
                    refused.push(
                        CreatableTopicResult::default()
                            .with_name(t.name)
                            .with_error_code(ResponseError::ThrottlingQuotaExceeded.code())
                            .with_error_message(message())
                            .with_num_partitions(-1)
                            .with_replication_factor(-1),
                    );
                }
            }
            req.topics = kept;
            let after = After {
                refused: Refused::CreateTopics(refused),
                throttle_ms,
            };
            (RequestKind::CreateTopics(req), Some(after))
        }
        RequestKind::CreatePartitions(mut req) => {
            let strict = version >= 3;
            let twice = repeated(req.topics.iter().map(|t| t.name.clone()));
            let mut refused = Vec::new();
            let mut kept = Vec::with_capacity(req.topics.len());
            for t in std::mem::take(&mut req.topics) {
                // Partitions added; a topic unknown, named twice, not
                // growing or past the limit takes nothing.
                let added = match (twice[&t.name], t.count <= MAX_PARTITIONS) {
                    (false, true) => match broker.meta.topic(&t.name).await {
                        Ok(Some(topic)) => t.count.saturating_sub(topic.partitions),
                        _ => 0,
                    },
                    _ => 0,
                };
                if take_one(added, strict) {
                    kept.push(t);
                } else {
                    refused.push(
                        CreatePartitionsTopicResult::default()
                            .with_name(t.name)
                            .with_error_code(ResponseError::ThrottlingQuotaExceeded.code())
                            .with_error_message(message()),
                    );
                }
            }
            req.topics = kept;
            let after = After {
                refused: Refused::CreatePartitions(refused),
                throttle_ms,
            };
            (RequestKind::CreatePartitions(req), Some(after))
        }
        RequestKind::DeleteTopics(mut req) => {
            let strict = version >= 5;
            let mut refused = Vec::new();
            // Before v6 the topics are names; from v6 on, each a name or an
            // id. One named twice takes nothing (the handler refuses it).
            let names_twice = repeated(req.topic_names.iter().cloned());
            let states_twice = repeated(req.topics.iter().map(|s| (s.name.clone(), s.topic_id)));
            let mut kept_names = Vec::with_capacity(req.topic_names.len());
            for name in std::mem::take(&mut req.topic_names) {
                let partitions = match names_twice[&name] {
                    true => 0,
                    false => match broker.meta.topic(&name).await {
                        Ok(Some(topic)) => topic.partitions,
                        _ => 0,
                    },
                };
                if take_one(partitions, strict) {
                    kept_names.push(name);
                } else {
                    refused.push(
                        DeletableTopicResult::default()
                            .with_name(Some(name))
                            .with_error_code(ResponseError::ThrottlingQuotaExceeded.code())
                            .with_error_message(message()),
                    );
                }
            }
            req.topic_names = kept_names;
            let mut kept = Vec::with_capacity(req.topics.len());
            for state in std::mem::take(&mut req.topics) {
                let topic = match (
                    states_twice[&(state.name.clone(), state.topic_id)],
                    &state.name,
                ) {
                    (true, _) => Ok(None),
                    (false, Some(name)) => broker.meta.topic(name).await,
                    (false, None) => broker.meta.topic_by_id(state.topic_id).await,
                };
                let partitions = topic.ok().flatten().map_or(0, |t| t.partitions);
                if take_one(partitions, strict) {
                    kept.push(state);
                } else {
                    refused.push(
                        DeletableTopicResult::default()
                            .with_name(state.name)
                            .with_topic_id(state.topic_id)
                            .with_error_code(ResponseError::ThrottlingQuotaExceeded.code())
                            .with_error_message(message()),
                    );
                }
            }
            req.topics = kept;
            let after = After {
                refused: Refused::DeleteTopics(refused),
                throttle_ms,
            };
            (RequestKind::DeleteTopics(req), Some(after))
        }
        other => (other, None),
    }
}

impl After {
    /// Adds the refused topics and the throttle to `response`.
    pub fn apply(self, response: &mut ResponseKind) {
        match (self.refused, &mut *response) {
            (Refused::CreateTopics(refused), ResponseKind::CreateTopics(r)) => {
                r.topics.extend(refused)
            }
            (Refused::CreatePartitions(refused), ResponseKind::CreatePartitions(r)) => {
                r.results.extend(refused)
            }
            (Refused::DeleteTopics(refused), ResponseKind::DeleteTopics(r)) => {
                r.responses.extend(refused)
            }
            _ => {}
        }
        super::throttled(response, self.throttle_ms.min(i32::MAX as u32) as i32);
    }
}
