//! Kafka's controller mutation quota (KIP-599) on CreateTopics,
//! CreatePartitions and DeleteTopics: before a request is handled, each of
//! its topics takes its partitions (created, added or deleted) from the
//! client's bucket (see [`crate::quotas::Quotas::mutate`]), in order. From
//! CreateTopics v6, CreatePartitions v3 and DeleteTopics v5 on, a topic
//! asked for while the bucket is empty is left out of the request and
//! answered THROTTLING_QUOTA_EXCEEDED; older requests are done whole, and
//! their client throttled. The response carries the throttle time, and the
//! connection is muted for it, as Kafka's `sendResponseMaybeThrottleWithControllerQuota`.
//! A validate-only request takes nothing.

use floe_protocol::kafka_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use floe_protocol::kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use floe_protocol::kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use floe_protocol::kafka_protocol::messages::{RequestKind, ResponseKind};
use floe_protocol::kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;
use crate::quotas::{Client, Mutation};

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
    let Some(quota) = quota.filter(|q| q.enabled(crate::quotas::Kind::ControllerMutation)) else {
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
        RequestKind::CreateTopics(mut req) if !req.validate_only => {
            let strict = version >= 6;
            let default = broker.config.default_partitions;
            let mut refused = Vec::new();
            let mut kept = Vec::with_capacity(req.topics.len());
            for t in std::mem::take(&mut req.topics) {
                // A topic that exists takes nothing (it gets its own error,
                // as Kafka takes only topics it goes on to create).
                let exists = matches!(broker.meta.topic(&t.name).await, Ok(Some(_)));
                let partitions = match (exists, t.num_partitions, t.assignments.len()) {
                    (true, _, _) => 0,
                    (false, n, _) if n > 0 => n,
                    (false, _, 0) => default,
                    (false, _, assigned) => assigned as i32,
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
        RequestKind::CreatePartitions(mut req) if !req.validate_only => {
            let strict = version >= 3;
            let mut refused = Vec::new();
            let mut kept = Vec::with_capacity(req.topics.len());
            for t in std::mem::take(&mut req.topics) {
                // Partitions added; a topic unknown or not growing takes
                // nothing (it gets its own error).
                let now = match broker.meta.topic(&t.name).await {
                    Ok(Some(topic)) => topic.partitions,
                    _ => t.count,
                };
                if take_one(t.count - now, strict) {
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
            // Before v6 the topics are names; from v6 on, each a name or an id.
            let mut kept_names = Vec::with_capacity(req.topic_names.len());
            for name in std::mem::take(&mut req.topic_names) {
                let partitions = match broker.meta.topic(&name).await {
                    Ok(Some(topic)) => topic.partitions,
                    _ => 0,
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
                let topic = match &state.name {
                    Some(name) => broker.meta.topic(name).await,
                    None => broker.meta.topic_by_id(state.topic_id).await,
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
