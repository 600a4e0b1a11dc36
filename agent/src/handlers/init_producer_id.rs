//! InitProducerId for idempotent producers (a transactional id's is the
//! coordinator's, see [`super::txn`]).
//!
//! Producer ids, epochs and the per-partition sequence state all live in the
//! metastore, so a producer may move between agents and survive restarts.

use floe_metastore::ProducerIdentity;
use floe_protocol::ResponseError;
use floe_protocol::kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProducerId,
};

use crate::broker::{Broker, kafka_error};

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
    // v3+: a producer that already has an id asks for an epoch bump (KIP-360).
    let existing = (req.producer_id.0 >= 0).then_some(ProducerIdentity {
        producer_id: req.producer_id.0,
        epoch: req.producer_epoch,
    });
    match broker.meta.init_producer(existing).await {
        Ok(p) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(p.producer_id))
            .with_producer_epoch(p.epoch),
        Err(e) => {
            tracing::warn!(error = %e, "init producer id failed");
            refused(kafka_error(&e))
        }
    }
}
