//! Producer ids for idempotent producers, handed out from blocks the
//! metastore allocates (KIP-730), as a Kafka broker hands them out from
//! blocks its controller allocates: an InitProducerId without a
//! transactional id costs no metastore write and leaves no state; the
//! metastore keeps a producer's state only once it writes (per partition,
//! expired after `producer.id.expiration.ms`).
//!
//! The next block is asked for when the current one is nine tenths used, so
//! producers starting at once rarely wait for one.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use floe_metastore::{MetaError, Metastore};
use tokio::sync::Notify;

/// Ids in one block (Kafka's `PRODUCER_ID_BLOCK_SIZE`).
pub const BLOCK: u32 = 1_000;

/// Longest an InitProducerId waits for a block; then the producer is told
/// to come back (`COORDINATOR_LOAD_IN_PROGRESS`, as Kafka answers while its
/// next block has not arrived).
const BLOCK_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

pub struct ProducerIds {
    meta: Arc<dyn Metastore>,
    blocks: Mutex<Blocks>,
    /// Woken when a block arrives (or its request fails).
    arrived: Notify,
}

#[derive(Default)]
struct Blocks {
    current: Range<i64>,
    next: Option<Range<i64>>,
    /// A block is being asked for.
    asking: bool,
}

impl ProducerIds {
    pub fn new(meta: Arc<dyn Metastore>) -> Arc<ProducerIds> {
        Arc::new(ProducerIds {
            meta,
            blocks: Mutex::new(Blocks::default()),
            arrived: Notify::new(),
        })
    }

    /// A fresh producer id; `Err` if no block came within [`BLOCK_WITHIN`].
    pub async fn next(self: &Arc<Self>) -> Result<i64, MetaError> {
        let deadline = tokio::time::Instant::now() + BLOCK_WITHIN;
        loop {
            let arrived = self.arrived.notified();
            {
                let mut blocks = self.blocks.lock().expect("producer ids lock");
                if blocks.current.is_empty()
                    && let Some(next) = blocks.next.take()
                {
                    blocks.current = next;
                }
                if let Some(id) = blocks.current.next() {
                    let left = blocks.current.end - blocks.current.start;
                    if left <= (BLOCK / 10) as i64 && blocks.next.is_none() {
                        self.ask(&mut blocks);
                    }
                    return Ok(id);
                }
                self.ask(&mut blocks);
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return Err(MetaError::unavailable(
                    "no producer id block arrived in time",
                ));
            }
        }
    }

    /// Asks for the next block, unless a request is under way.
    fn ask(self: &Arc<Self>, blocks: &mut Blocks) {
        if blocks.asking {
            return;
        }
        blocks.asking = true;
        let ids = self.clone();
        tokio::spawn(async move {
            let allocated = ids.meta.allocate_producer_ids(BLOCK).await;
            {
                let mut blocks = ids.blocks.lock().expect("producer ids lock");
                blocks.asking = false;
                match allocated {
                    Ok(first) => blocks.next = Some(first..first + BLOCK as i64),
                    Err(e) => tracing::warn!(error = %e, "allocating producer ids failed"),
                }
            }
            ids.arrived.notify_waiters();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_metastore::LocalMetastore;

    /// Ids come from blocks, each id once, and a block costs the metastore
    /// one write however many ids it gives.
    #[tokio::test]
    async fn ids_are_unique_across_blocks_and_agents() {
        let meta: Arc<dyn Metastore> = Arc::new(LocalMetastore::in_memory().await.unwrap());
        let (a, b) = (
            ProducerIds::new(meta.clone()),
            ProducerIds::new(meta.clone()),
        );
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..2_500 {
            assert!(seen.insert(a.next().await.unwrap()));
            assert!(seen.insert(b.next().await.unwrap()));
        }
        assert_eq!(seen.len(), 5_000);
        // Each agent asked for three blocks (the third early, at 90 %).
        let issued = meta.allocate_producer_ids(1).await.unwrap();
        assert!(issued <= 6 * BLOCK as i64, "{issued}");
    }
}
