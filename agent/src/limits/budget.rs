//! One byte budget for responses across every connection.
//!
//! A fetch may carry up to `max_fetch_bytes`, and a client may pipeline
//! fetches and never read the answers. Each fetch therefore takes its planned
//! size from this budget before it reads anything, and gives it back only when
//! its response has been written to the socket. With the budget spent, new
//! fetches wait (or answer without records at their deadline); memory never
//! grows past it.
//!
//! One connection holds budget for one response at a time (its [`Turn`]), as
//! a Kafka broker handles one request per connection at a time: a client
//! that pipelines fetches and reads none holds at most one fetch's bytes, and
//! only until the server gives up writing to it (`stalled_client_timeout`).
//! Its other fetches answer without records.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

pub struct ResponseBudget {
    bytes: Arc<Semaphore>,
    max: usize,
}

/// Bytes taken from the budget, and the connection's turn; both given back
/// when dropped (once the response is written).
pub struct Held {
    _bytes: OwnedSemaphorePermit,
    _turn: OwnedSemaphorePermit,
}

/// A connection's right to hold response budget: one response at a time.
#[derive(Clone)]
pub struct Turn(Arc<Semaphore>);

impl Default for Turn {
    fn default() -> Self {
        Turn(Arc::new(Semaphore::new(1)))
    }
}

impl ResponseBudget {
    pub fn new(max_bytes: usize) -> Self {
        ResponseBudget {
            bytes: Arc::new(Semaphore::new(max_bytes)),
            max: max_bytes,
        }
    }

    /// Takes `bytes` (at most the whole budget) for a response of the
    /// connection whose turn it is, waiting until `deadline` for the turn
    /// and then the bytes; `None` if they did not come free by then.
    pub async fn take(&self, bytes: usize, turn: &Turn, deadline: Instant) -> Option<Held> {
        let wanted = bytes.clamp(1, self.max) as u32;
        tokio::time::timeout_at(deadline, async {
            let turn = turn.0.clone().acquire_owned().await.ok()?;
            let bytes = self.bytes.clone().acquire_many_owned(wanted).await.ok()?;
            Some(Held {
                _bytes: bytes,
                _turn: turn,
            })
        })
        .await
        .ok()?
    }

    /// Bytes not taken right now.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn takers_wait_for_bytes_given_back() {
        let budget = ResponseBudget::new(100);
        let soon = || Instant::now() + Duration::from_millis(50);
        let a = budget.take(70, &Turn::default(), soon()).await.unwrap();
        let other = Turn::default();
        assert!(
            budget.take(40, &other, soon()).await.is_none(),
            "only 30 left"
        );
        let b = budget.take(1_000, &other, Instant::now() + Duration::from_secs(5));
        drop(a);
        let _b = b.await.expect("the whole budget, once free");
        assert_eq!(budget.available(), 0);
    }

    #[tokio::test]
    async fn a_connection_holds_one_response_at_a_time() {
        let budget = ResponseBudget::new(100);
        let soon = || Instant::now() + Duration::from_millis(50);
        let turn = Turn::default();
        let first = budget.take(10, &turn, soon()).await.unwrap();
        assert!(
            budget.take(10, &turn, soon()).await.is_none(),
            "its next response waits for the first to be written"
        );
        assert!(budget.take(10, &Turn::default(), soon()).await.is_some());
        drop(first);
        assert!(budget.take(10, &turn, soon()).await.is_some());
    }
}
