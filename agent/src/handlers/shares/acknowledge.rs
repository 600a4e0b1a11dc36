//! ShareAcknowledge, and the acknowledgement batches it and ShareFetch
//! carry: checked as Kafka's `validateAcknowledgementBatches` checks them,
//! then applied by the metastore, each partition's all or none.

use std::collections::BTreeMap;

use floe_metastore::TopicId;
use floe_metastore::groups::share::{
    Ack, AckBatch, AckRefused, AcknowledgeShare, PartitionAcks, ReleaseShare,
};
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::share_acknowledge_response::{
    PartitionData, ShareAcknowledgeTopicResponse,
};
use floe_protocol::kafka_protocol::messages::{ShareAcknowledgeRequest, ShareAcknowledgeResponse};
use floe_protocol::kafka_protocol::protocol::StrBytes;
use floe_protocol::str_bytes;

use super::{FINAL_EPOCH, KAFKA_RULES};
use crate::broker::Broker;

/// Acknowledgement batches one partition may carry, and one request: each
/// is at least one offset, so a request holds no more than its bytes
/// allow, but the metastore is asked to apply a bounded number.
const MAX_BATCHES: usize = 10_000;
pub const MAX_REQUEST_BATCHES: usize = 20_000;

/// How an acknowledgement of one partition ended: Kafka's error code and
/// message (`None`: applied).
pub type Outcome = Option<(ResponseError, String)>;

/// One partition's acknowledgement batches as a request carries them:
/// first offset, last offset, types.
pub type WireBatches<'a> = Vec<(i64, i64, &'a [i8])>;

/// The batches of one partition, checked: the metastore's, or why the
/// partition is refused (INVALID_REQUEST).
pub fn checked(batches: &WireBatches<'_>) -> Result<Vec<AckBatch>, String> {
    if batches.len() > MAX_BATCHES {
        return Err(format!(
            "more than {MAX_BATCHES} acknowledgement batches for one partition"
        ));
    }
    let mut out = Vec::with_capacity(batches.len());
    let mut previous_end = i64::MIN;
    for &(first, last, types) in batches {
        if first > last {
            return Err(format!("first offset {first} is past last offset {last}"));
        }
        if first < previous_end {
            return Err("acknowledgement batches overlap or are not sorted".into());
        }
        previous_end = last.saturating_add(1);
        let span = i128::from(last) - i128::from(first) + 1;
        if types.is_empty() || (types.len() > 1 && types.len() as i128 != span) {
            return Err(format!(
                "{} acknowledge types for offsets {first}..={last}",
                types.len()
            ));
        }
        let types = types
            .iter()
            .map(|t| Ack::from_wire(*t).ok_or_else(|| format!("unknown acknowledge type {t}")))
            .collect::<Result<Vec<_>, _>>()?;
        out.push(AckBatch { first, last, types });
    }
    Ok(out)
}

/// Merges entries naming one partition twice (a client may repeat a
/// topic), keeping their order.
pub fn merged<'a>(
    entries: impl IntoIterator<Item = ((TopicId, i32), WireBatches<'a>)>,
) -> Vec<((TopicId, i32), WireBatches<'a>)> {
    let mut order = Vec::new();
    let mut by_partition: BTreeMap<(TopicId, i32), WireBatches<'a>> = BTreeMap::new();
    for (key, batches) in entries {
        let slot = by_partition.entry(key).or_insert_with(|| {
            order.push(key);
            Vec::new()
        });
        slot.extend(batches);
    }
    order
        .into_iter()
        .map(|key| {
            let batches = by_partition.remove(&key).unwrap_or_default();
            (key, batches)
        })
        .collect()
}

/// Checks and applies `member`'s acknowledgements of `partitions` (none
/// empty), answering each partition's outcome in their order.
pub async fn apply(
    broker: &Broker,
    group: &str,
    member: &str,
    partitions: Vec<((TopicId, i32), WireBatches<'_>)>,
) -> Vec<((TopicId, i32), Outcome)> {
    let mut outcomes: Vec<((TopicId, i32), Outcome)> = Vec::with_capacity(partitions.len());
    let mut acks = Vec::new();
    for ((topic, partition), batches) in partitions {
        match checked(&batches) {
            Ok(batches) if batches.is_empty() => outcomes.push(((topic, partition), None)),
            Ok(batches) => {
                acks.push(PartitionAcks {
                    topic,
                    partition,
                    batches,
                });
                outcomes.push(((topic, partition), None));
            }
            Err(why) => outcomes.push((
                (topic, partition),
                Some((ResponseError::InvalidRequest, why)),
            )),
        }
    }
    if acks.is_empty() {
        return outcomes;
    }
    let asked: Vec<(TopicId, i32)> = acks.iter().map(|a| (a.topic, a.partition)).collect();
    let counts: Vec<[u64; 4]> = acks.iter().map(|a| counts_by_type(&a.batches)).collect();
    let answer = broker
        .meta
        .acknowledge_share(AcknowledgeShare {
            group: group.to_string(),
            member: member.to_string(),
            acks,
            delivery_limit: KAFKA_RULES.delivery_limit,
            now_ms: broker.world.now_ms(),
        })
        .await;
    let results: Vec<Outcome> = match answer {
        Ok(Ok(results)) => results
            .into_iter()
            .map(|r| {
                r.err().map(|refused| match refused {
                    AckRefused::InvalidRecordState(why) => (ResponseError::InvalidRecordState, why),
                    AckRefused::InvalidRequest(why) => (ResponseError::InvalidRequest, why),
                })
            })
            .collect(),
        Ok(Err(e)) => vec![Some((super::share_error(e), String::new())); asked.len()],
        Err(e) => vec![Some((super::meta_error(e), String::new())); asked.len()],
    };
    for ((key, result), counts) in asked.into_iter().zip(results).zip(counts) {
        if result.is_none() {
            for (n, name) in counts.iter().zip(["gap", "accept", "release", "reject"]) {
                if *n > 0 {
                    let label = crate::metrics::OpLabel { op: name };
                    broker
                        .metrics
                        .share_acknowledged
                        .get_or_create(&label)
                        .inc_by(*n);
                }
            }
        }
        if let Some(slot) = outcomes.iter_mut().find(|(k, o)| *k == key && o.is_none()) {
            slot.1 = result;
        }
    }
    outcomes
}

/// Records acknowledged in `batches`, by type: gap, accept, release,
/// reject.
fn counts_by_type(batches: &[AckBatch]) -> [u64; 4] {
    let slot = |ack: Ack| match ack {
        Ack::Gap => 0,
        Ack::Accept => 1,
        Ack::Release | Ack::Undelivered => 2,
        Ack::Reject => 3,
    };
    let mut counts = [0u64; 4];
    for b in batches {
        match b.types.as_slice() {
            // One type for the range: counted, not walked (the range is
            // the client's).
            [one] => {
                let span = i128::from(b.last) - i128::from(b.first) + 1;
                let n = u64::try_from(span).unwrap_or(u64::MAX);
                counts[slot(*one)] = counts[slot(*one)].saturating_add(n);
            }
            per_offset => per_offset.iter().for_each(|t| counts[slot(*t)] += 1),
        }
    }
    counts
}

/// Releases what `member`'s session acquired, of every partition (of
/// those it forgot too): it closed.
pub async fn release(
    broker: &Broker,
    group: String,
    member: String,
    (session, partitions): super::sessions::Found,
) {
    if partitions.is_empty() {
        // It fetched nothing: it holds nothing.
        return;
    }
    let released = broker
        .meta
        .release_share(ReleaseShare {
            group,
            member,
            session,
            partitions: Vec::new(),
            delivery_limit: KAFKA_RULES.delivery_limit,
        })
        .await;
    match released {
        Ok(Ok(())) | Ok(Err(_)) => {}
        // Its locks end on their own: nothing is lost, only delayed.
        Err(e) => tracing::warn!(error = %e, "share session closed: releasing its records failed"),
    }
}

pub async fn handle(broker: &Broker, req: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse {
    let failed = |e: ResponseError, why: Option<&str>| {
        ShareAcknowledgeResponse::default()
            .with_error_code(e.code())
            .with_error_message(why.map(str_bytes))
    };
    let (group, member) = match super::member_of(req.group_id.as_ref(), req.member_id.as_ref()) {
        Ok(named) => named,
        Err(why) => return failed(ResponseError::InvalidRequest, Some(why)),
    };
    let batches = req.topics.iter().flat_map(|t| &t.partitions);
    if !super::within_request_limits(batches.map(|p| p.acknowledgement_batches.len())) {
        return failed(
            ResponseError::InvalidRequest,
            Some("more than one request may carry"),
        );
    }
    let key = (group.clone(), member.clone());
    if let Err(e) = broker
        .share_sessions
        .acknowledging(&key, req.share_session_epoch)
    {
        return failed(e, None);
    }
    let entries = merged(req.topics.iter().flat_map(|t| {
        t.partitions.iter().map(move |p| {
            let batches = p
                .acknowledgement_batches
                .iter()
                .map(|b| {
                    (
                        b.first_offset,
                        b.last_offset,
                        b.acknowledge_types.as_slice(),
                    )
                })
                .collect();
            ((t.topic_id, p.partition_index), batches)
        })
    }));
    let (known, unknown) = super::fetch::known_topics(broker, entries).await;
    let mut outcomes = apply(broker, &group, &member, known).await;
    outcomes.extend(
        unknown
            .into_iter()
            .map(|(key, error)| (key, Some((error, String::new())))),
    );
    if req.share_session_epoch == FINAL_EPOCH
        && let Some(partitions) = broker.share_sessions.close(&key)
    {
        broker
            .metrics
            .share_sessions
            .set(broker.share_sessions.count() as i64);
        release(broker, group, member, partitions).await;
    }
    let responses = by_topic(outcomes)
        .into_iter()
        .map(|(topic, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(partition, outcome)| {
                    let (code, message) = error_fields(outcome);
                    PartitionData::default()
                        .with_partition_index(partition)
                        .with_error_code(code)
                        .with_error_message(message)
                })
                .collect();
            ShareAcknowledgeTopicResponse::default()
                .with_topic_id(topic)
                .with_partitions(partitions)
        })
        .collect();
    ShareAcknowledgeResponse::default().with_responses(responses)
}

/// An outcome as a response's error code and message.
pub fn error_fields(outcome: Outcome) -> (i16, Option<StrBytes>) {
    outcome.map_or((0, None), |(e, why)| {
        (e.code(), (!why.is_empty()).then(|| str_bytes(&why)))
    })
}

/// Partitions' answers grouped by topic, topics in the order they first
/// appear.
pub fn by_topic<T>(items: Vec<((TopicId, i32), T)>) -> Vec<(TopicId, Vec<(i32, T)>)> {
    let mut topics: Vec<(TopicId, Vec<(i32, T)>)> = Vec::new();
    let mut at: std::collections::HashMap<TopicId, usize> = Default::default();
    for ((topic, partition), item) in items {
        let i = *at.entry(topic).or_insert_with(|| {
            topics.push((topic, Vec::new()));
            topics.len() - 1
        });
        topics[i].1.push((partition, item));
    }
    topics
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_checked_as_kafka_checks_them() {
        let ok: WireBatches = vec![(0, 3, &[1]), (4, 5, &[1, 2])];
        assert_eq!(checked(&ok).unwrap().len(), 2);
        let refused: [WireBatches; 6] = [
            vec![(3, 2, &[1])],
            vec![(0, 3, &[1]), (3, 4, &[1])],
            vec![(4, 5, &[1]), (0, 1, &[1])],
            vec![(0, 3, &[])],
            vec![(0, 3, &[1, 1])],
            vec![(0, 0, &[4])],
        ];
        for batches in refused {
            assert!(checked(&batches).is_err(), "{batches:?}");
        }
        // No batch of Undelivered: only an agent hands records back so.
        assert!(checked(&vec![(0, 0, &[5][..])]).is_err());
        let many: WireBatches = (0..=MAX_BATCHES as i64).map(|o| (o, o, &[1][..])).collect();
        assert!(checked(&many).is_err());
    }

    #[test]
    fn a_partition_named_twice_is_merged() {
        let t = TopicId::from_u128(1);
        let merged = merged([
            ((t, 0), vec![(0, 0, &[1][..])]),
            ((t, 1), vec![]),
            ((t, 0), vec![(1, 1, &[1][..])]),
        ]);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].1.len(), 2);
    }
}
