//! Producers and transactions, as KafkaApis checks them: WRITE on the
//! transactional id; for idempotence, IDEMPOTENT_WRITE on the cluster or
//! WRITE on some topic (KIP-679); WRITE on the topics a transaction adds,
//! READ on the group whose offsets it commits.

use super::*;

pub(super) fn init_producer_id(who: &Who, req: InitProducerIdRequest) -> Gate {
    let (allowed, error) = match &req.transactional_id {
        Some(id) => (who.transactional_id(op::WRITE, id), TXN_DENIED),
        None => (
            who.cluster(op::IDEMPOTENT_WRITE) || who.any(op::WRITE, rt::TOPIC),
            CLUSTER_DENIED,
        ),
    };
    match allowed {
        true => Gate::Handle(RequestKind::InitProducerId(req), None),
        false => Gate::Answer(ResponseKind::InitProducerId(
            InitProducerIdResponse::default()
                .with_error_code(error)
                .with_producer_id((-1).into())
                .with_producer_epoch(-1),
        )),
    }
}

/// Nothing is added unless all is allowed: the denied get their error,
/// the others OPERATION_NOT_ATTEMPTED.
pub(super) fn add_partitions_to_txn(who: &Who, req: AddPartitionsToTxnRequest) -> Gate {
    let txn_ok = who.transactional_id(op::WRITE, &req.v3_and_below_transactional_id);
    let denied_topics: Vec<String> = req
        .v3_and_below_topics
        .iter()
        .filter(|t| !who.topic(op::WRITE, &t.name))
        .map(|t| t.name.to_string())
        .collect();
    if txn_ok && denied_topics.is_empty() {
        return Gate::Handle(RequestKind::AddPartitionsToTxn(req), None);
    }
    let code = |name: &str, _| match (txn_ok, denied_topics.iter().any(|d| d == name)) {
        (false, _) => TXN_DENIED,
        (true, true) => TOPIC_DENIED,
        (true, false) => ResponseError::OperationNotAttempted.code(),
    };
    Gate::Answer(ResponseKind::AddPartitionsToTxn(
        crate::handlers::txn::add_partitions_answer(&req.v3_and_below_topics, &code),
    ))
}

pub(super) fn add_offsets_to_txn(who: &Who, req: AddOffsetsToTxnRequest) -> Gate {
    let code = if !who.transactional_id(op::WRITE, &req.transactional_id) {
        TXN_DENIED
    } else if !who.group(op::READ, &req.group_id) {
        GROUP_DENIED
    } else {
        return Gate::Handle(RequestKind::AddOffsetsToTxn(req), None);
    };
    Gate::Answer(ResponseKind::AddOffsetsToTxn(
        AddOffsetsToTxnResponse::default().with_error_code(code),
    ))
}

/// WRITE on the transactional id and READ on the group, or nothing is
/// committed; then partitions of topics it may not read are answered so,
/// and the others committed.
pub(super) fn txn_offset_commit(who: &Who, mut req: TxnOffsetCommitRequest) -> Gate {
    use txn_offset_commit_response::*;
    let whole = if !who.transactional_id(op::WRITE, &req.transactional_id) {
        Some(TXN_DENIED)
    } else if !who.group(op::READ, &req.group_id) {
        Some(GROUP_DENIED)
    } else {
        None
    };
    let answer = |t: &txn_offset_commit_request::TxnOffsetCommitRequestTopic, code: i16| {
        let parts = t.partitions.iter().map(|p| {
            TxnOffsetCommitResponsePartition::default()
                .with_partition_index(p.partition_index)
                .with_error_code(code)
        });
        TxnOffsetCommitResponseTopic::default()
            .with_name(t.name.clone())
            .with_partitions(parts.collect())
    };
    if let Some(code) = whole {
        let topics = req.topics.iter().map(|t| answer(t, code)).collect();
        return Gate::Answer(ResponseKind::TxnOffsetCommit(
            TxnOffsetCommitResponse::default().with_topics(topics),
        ));
    }
    let denied = take_denied(&mut req.topics, |t| who.topic(op::READ, &t.name));
    let denied: Vec<_> = denied.iter().map(|t| answer(t, TOPIC_DENIED)).collect();
    let patch = patch!(TxnOffsetCommit, |r| {
        r.topics.extend(denied);
    });
    Gate::Handle(RequestKind::TxnOffsetCommit(req), patch)
}

/// DESCRIBE on each transactional id, decided on the answer.
pub(super) fn describe_transactions(who: &Who, req: DescribeTransactionsRequest) -> Gate {
    let who = who.clone();
    let patch = patch!(DescribeTransactions, |r| {
        for t in &mut r.transaction_states {
            if !who.transactional_id(op::DESCRIBE, &t.transactional_id) {
                *t = describe_transactions_response::TransactionState::default()
                    .with_transactional_id(t.transactional_id.clone())
                    .with_error_code(TXN_DENIED);
            }
        }
    });
    Gate::Handle(RequestKind::DescribeTransactions(req), patch)
}

/// Lists only what the principal may describe (`handleListTransactionsRequest`).
pub(super) fn list_transactions(who: &Who, req: ListTransactionsRequest) -> Gate {
    let who = who.clone();
    let patch = patch!(ListTransactions, |r| {
        r.transaction_states
            .retain(|t| who.transactional_id(op::DESCRIBE, &t.transactional_id));
    });
    Gate::Handle(RequestKind::ListTransactions(req), patch)
}

pub(super) fn end_txn(who: &Who, req: EndTxnRequest) -> Gate {
    match who.transactional_id(op::WRITE, &req.transactional_id) {
        true => Gate::Handle(RequestKind::EndTxn(req), None),
        false => Gate::Answer(ResponseKind::EndTxn(
            EndTxnResponse::default()
                .with_error_code(TXN_DENIED)
                .with_producer_id((-1).into())
                .with_producer_epoch(-1),
        )),
    }
}
