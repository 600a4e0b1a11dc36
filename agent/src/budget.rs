//! One byte budget for responses across every connection.
//!
//! A fetch may carry up to `max_fetch_bytes`, and a client may pipeline
//! fetches and never read the answers. Each fetch therefore takes its planned
//! size from this budget before it reads anything, and gives it back only when
//! its response has been written to the socket. With the budget spent, new
//! fetches wait (or answer without records at their deadline); memory never
//! grows past it.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

pub struct ResponseBudget {
    bytes: Arc<Semaphore>,
    max: usize,
}

/// Bytes taken from the budget; given back when dropped.
pub type Held = OwnedSemaphorePermit;

impl ResponseBudget {
    pub fn new(max_bytes: usize) -> Self {
        ResponseBudget {
            bytes: Arc::new(Semaphore::new(max_bytes)),
            max: max_bytes,
        }
    }

    /// Takes `bytes` (at most the whole budget), waiting until `deadline`
    /// for them; `None` if they did not come free by then.
    pub async fn take(&self, bytes: usize, deadline: Instant) -> Option<Held> {
        let wanted = bytes.clamp(1, self.max) as u32;
        tokio::time::timeout_at(deadline, self.bytes.clone().acquire_many_owned(wanted))
            .await
            .ok()?
            .ok()
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
        let a = budget.take(70, soon()).await.unwrap();
        assert!(budget.take(40, soon()).await.is_none(), "only 30 left");
        let b = budget.take(1_000, Instant::now() + Duration::from_secs(5));
        drop(a);
        let b = b.await.expect("the whole budget, once free");
        assert_eq!(b.num_permits(), 100);
        assert_eq!(budget.available(), 0);
    }
}
