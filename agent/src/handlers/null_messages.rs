//! Kafka answers a result without a message with a null `error_message`;
//! the `kafka-protocol` crate's defaults are empty strings, which clients
//! compare with null and take for a message (a success with `""` reads as
//! an error to some). Every response floe sends goes through [`nulled`].

use floe_protocol::kafka_protocol::messages::ResponseKind;
use floe_protocol::kafka_protocol::protocol::StrBytes;

/// `message` as Kafka sends it: null rather than empty.
fn null_if_empty(message: &mut Option<StrBytes>) {
    if message.as_ref().is_some_and(|m| m.is_empty()) {
        *message = None;
    }
}

/// `response` with every empty `error_message` made null.
pub fn nulled(mut response: ResponseKind) -> ResponseKind {
    use ResponseKind::*;
    match &mut response {
        CreateTopics(r) => r
            .topics
            .iter_mut()
            .for_each(|t| null_if_empty(&mut t.error_message)),
        CreateAcls(r) => r
            .results
            .iter_mut()
            .for_each(|a| null_if_empty(&mut a.error_message)),
        DeleteAcls(r) => r.filter_results.iter_mut().for_each(|f| {
            null_if_empty(&mut f.error_message);
            f.matching_acls
                .iter_mut()
                .for_each(|a| null_if_empty(&mut a.error_message));
        }),
        DescribeAcls(r) => null_if_empty(&mut r.error_message),
        AlterConfigs(r) => r
            .responses
            .iter_mut()
            .for_each(|c| null_if_empty(&mut c.error_message)),
        IncrementalAlterConfigs(r) => r
            .responses
            .iter_mut()
            .for_each(|c| null_if_empty(&mut c.error_message)),
        DescribeConfigs(r) => r
            .results
            .iter_mut()
            .for_each(|c| null_if_empty(&mut c.error_message)),
        FindCoordinator(r) => {
            null_if_empty(&mut r.error_message);
            r.coordinators
                .iter_mut()
                .for_each(|c| null_if_empty(&mut c.error_message));
        }
        AlterClientQuotas(r) => r
            .entries
            .iter_mut()
            .for_each(|e| null_if_empty(&mut e.error_message)),
        DescribeClientQuotas(r) => null_if_empty(&mut r.error_message),
        AlterUserScramCredentials(r) => r
            .results
            .iter_mut()
            .for_each(|u| null_if_empty(&mut u.error_message)),
        DescribeUserScramCredentials(r) => {
            null_if_empty(&mut r.error_message);
            r.results
                .iter_mut()
                .for_each(|u| null_if_empty(&mut u.error_message));
        }
        SaslAuthenticate(r) => null_if_empty(&mut r.error_message),
        ElectLeaders(r) => r
            .replica_election_results
            .iter_mut()
            .flat_map(|t| t.partition_result.iter_mut())
            .for_each(|p| null_if_empty(&mut p.error_message)),
        AlterPartitionReassignments(r) => {
            null_if_empty(&mut r.error_message);
            r.responses
                .iter_mut()
                .flat_map(|t| t.partitions.iter_mut())
                .for_each(|p| null_if_empty(&mut p.error_message));
        }
        ListPartitionReassignments(r) => null_if_empty(&mut r.error_message),
        DescribeQuorum(r) => {
            null_if_empty(&mut r.error_message);
            r.topics
                .iter_mut()
                .flat_map(|t| t.partitions.iter_mut())
                .for_each(|p| null_if_empty(&mut p.error_message));
        }
        _ => {}
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_protocol::kafka_protocol::messages::*;

    #[test]
    fn an_empty_message_goes_out_null_and_a_message_stays() {
        let ok = create_topics_response::CreatableTopicResult::default();
        assert_eq!(ok.error_message.as_deref(), Some(""), "the crate's default");
        let refused = create_topics_response::CreatableTopicResult::default()
            .with_error_code(36)
            .with_error_message(Some(floe_protocol::str_bytes("exists")));
        let response = nulled(ResponseKind::CreateTopics(
            CreateTopicsResponse::default().with_topics(vec![ok, refused]),
        ));
        let ResponseKind::CreateTopics(r) = response else {
            unreachable!()
        };
        assert_eq!(r.topics[0].error_message, None);
        assert_eq!(r.topics[1].error_message.as_deref(), Some("exists"));
        let ResponseKind::FindCoordinator(r) = nulled(ResponseKind::FindCoordinator(
            FindCoordinatorResponse::default(),
        )) else {
            unreachable!()
        };
        assert_eq!(r.error_message, None);
    }
}
