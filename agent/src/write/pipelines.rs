//! Which producers wait on the open ingest file with their pipelines full.
//!
//! A producer keeps at most so many produce requests in flight on a
//! connection (five in the Java client, and in librdkafka with
//! idempotence). Answered once per ingest file, a producer whose requests
//! in flight reach that limit sends nothing more until a file is answered:
//! records it gathers meanwhile go into the file after, and wait up to two
//! flush intervals. When every producer with batches in the open file is in
//! that state, holding the file open gains nothing, so the batcher seals it
//! early, but not sooner than `min_flush_interval` after the file before it,
//! which bounds the PUTs a second.
//!
//! The limit is not on the wire: a connection's is taken to be the most
//! produce requests it has had in flight at once. A request that reaches it
//! says its producer is blocked; the producer's next request, sent once an
//! earlier file is answered, says whether it still is.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// A connection's produce requests in flight.
pub struct Pipeline {
    connection: u64,
    in_flight: AtomicU32,
    deepest: AtomicU32,
}

impl Pipeline {
    /// The pipeline of the connection numbered `connection` (unique in this
    /// process: the number its group lane has).
    pub fn new(connection: u64) -> Pipeline {
        Pipeline {
            connection,
            in_flight: AtomicU32::new(0),
            deepest: AtomicU32::new(0),
        }
    }

    /// A produce request of this connection begins: it is in flight until
    /// the returned guard is dropped (when it is answered). The [`Producer`]
    /// goes with its batches.
    pub fn begin(self: &Arc<Self>) -> (Outstanding, Producer) {
        let in_flight = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        let deepest = self.deepest.fetch_max(in_flight, Ordering::Relaxed);
        let producer = Producer {
            connection: self.connection,
            blocked: in_flight >= deepest,
        };
        (Outstanding(self.clone()), producer)
    }
}

/// One produce request in flight (see [`Pipeline::begin`]).
pub struct Outstanding(Arc<Pipeline>);

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a batch says of the producer that sent it.
#[derive(Debug, Clone, Copy)]
pub struct Producer {
    pub connection: u64,
    /// Its request filled the producer's pipeline: it sends nothing more
    /// until an ingest file is answered.
    pub blocked: bool,
}

/// The producers with batches in one ingest file, by their latest request
/// (at most one entry per connection with a batch in the file).
#[derive(Default)]
pub(super) struct Producers {
    blocked: HashMap<u64, bool>,
    not_blocked: usize,
}

impl Producers {
    pub(super) fn saw(&mut self, producer: Producer) {
        let before = self.blocked.insert(producer.connection, producer.blocked);
        match (before, producer.blocked) {
            (None | Some(true), false) => self.not_blocked += 1,
            (Some(false), true) => self.not_blocked -= 1,
            (Some(false), false) | (None | Some(true), true) => {}
        }
    }

    /// Every producer with batches in the file waits on it.
    pub(super) fn all_blocked(&self) -> bool {
        !self.blocked.is_empty() && self.not_blocked == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_that_reaches_the_deepest_pipeline_yet_is_blocked() {
        let pipeline = Arc::new(Pipeline::new(1));
        let mut answered_later = Vec::new();
        // A producer with five in flight: each request deepens the pipeline.
        for _ in 0..5 {
            let (outstanding, producer) = pipeline.begin();
            assert!(producer.blocked);
            answered_later.push(outstanding);
        }
        // Three answered: it sends again, not blocked until the fifth.
        answered_later.truncate(2);
        let flags: Vec<bool> = (0..3)
            .map(|_| {
                let (outstanding, producer) = pipeline.begin();
                answered_later.push(outstanding);
                producer.blocked
            })
            .collect();
        assert_eq!(flags, [false, false, true]);
    }

    #[test]
    fn a_file_waits_on_its_producers_when_each_latest_request_is_blocked() {
        let producer = |connection, blocked| Producer {
            connection,
            blocked,
        };
        let mut producers = Producers::default();
        assert!(!producers.all_blocked(), "a file without producers");
        producers.saw(producer(1, false));
        producers.saw(producer(2, true));
        assert!(!producers.all_blocked());
        producers.saw(producer(1, true));
        assert!(producers.all_blocked());
        // Producer 2 was answered by an earlier file and sent again.
        producers.saw(producer(2, false));
        assert!(!producers.all_blocked());
        producers.saw(producer(2, false));
        producers.saw(producer(2, true));
        assert!(producers.all_blocked());
    }
}
