//! InitProducerId for idempotent producers (a transactional id's is the
//! coordinator's, see [`super::txn`]).
//!
//! As Kafka's: a fresh producer id at epoch 0, whatever id and epoch the
//! producer had (KIP-360 asks for a bump; a new id is one), from the ids
//! the agent holds ([`crate::write::producer_ids`], KIP-730). Nothing is written
//! for it: the metastore keeps a producer's state once it writes, per
//! partition, so a producer may move between agents and survive restarts.

use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProducerId,
};

use crate::broker::Broker;

pub async fn handle(
    broker: &Broker,
    req: InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let refused = |error: ResponseError| {
        InitProducerIdResponse::default()
            .with_error_code(error.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    if let Some(id) = req.transactional_id.clone() {
        return super::txn::init_producer_id(broker, req, &id, version).await;
    }
    match broker.producer_ids.next().await {
        Ok(producer_id) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(0),
        Err(e) => {
            tracing::warn!(error = %e, "no producer id to give");
            // Kafka's answer while its next block has not arrived: the
            // producer retries.
            refused(ResponseError::CoordinatorLoadInProgress)
        }
    }
}
