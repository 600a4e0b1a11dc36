//! The times a node stamps its proposals with: its wall clock, but never
//! running ahead of the group's time faster than 1/[`CATCH_UP_DIVISOR`] of real time.
//!
//! The state's clock is the largest stamp ever applied and never moves back
//! (`State::clock_ms`), so one leader whose wall clock is far ahead (a bad
//! NTP step, a wrong hardware clock after boot) would drag the group's time
//! forward for good, and with it every decision made on it: retention would
//! delete records before their time, sessions and producer ids would expire
//! early. A clock running *behind* only delays those decisions, which is
//! safe. So each node remembers the latest group time it applied and when (on
//! its monotonic clock), and stamps at most that time plus the real time
//! since, plus 1/[`CATCH_UP_DIVISOR`] of it: a wrong clock moves the group's time
//! forward at most 1/16 faster than real time, and a group whose time fell
//! behind (all nodes down for a while) catches up at that rate.
//!
//! At start a node's reference is the time its log replays to, so after a
//! whole group was down its time lags by the downtime until caught up. A
//! single-voter group (the embedded default) has no other clock to prefer,
//! so it trusts its wall clock once at start, as a Kafka broker does.

use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use crate::Clock;

/// A stamp may move the group's time forward by the real time elapsed and
/// this share of it more (1/16).
pub const CATCH_UP_DIVISOR: i64 = 16;

/// Bounds a node's stamps by the group time it last applied.
#[derive(Debug)]
pub struct Stamps {
    wall: Arc<dyn Clock>,
    seen: Mutex<Seen>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    /// The latest group time this node applied (0: never stamped).
    clock_ms: i64,
    /// When it applied it.
    at: Instant,
    /// Whether the wall clock being ahead was already reported.
    warned: bool,
}

impl Stamps {
    /// `clock_ms`: the group time of the state this node starts from.
    pub fn new(wall: Arc<dyn Clock>, clock_ms: i64) -> Stamps {
        Stamps {
            wall,
            seen: Mutex::new(Seen {
                clock_ms,
                at: Instant::now(),
                warned: false,
            }),
        }
    }

    /// Takes this node's wall clock as the group's time, if it is ahead:
    /// for a group with no other clock to compare it with.
    pub fn trust_wall(&self) {
        let wall = self.wall.now_ms();
        self.observe(wall);
    }

    /// Records the group time this node just applied.
    pub fn observe(&self, clock_ms: i64) {
        let mut seen = self.seen.lock().expect("stamps lock poisoned");
        if clock_ms > seen.clock_ms {
            seen.clock_ms = clock_ms;
            seen.at = Instant::now();
        }
    }

    /// The time to stamp a proposal with: the wall clock, or the fastest
    /// the group's time may have moved since it was last seen, if less.
    pub fn now_ms(&self) -> i64 {
        let wall = self.wall.now_ms();
        let mut seen = self.seen.lock().expect("stamps lock poisoned");
        if seen.clock_ms == 0 {
            // A new group: there is no time to hold the clock to yet.
            return wall;
        }
        let elapsed = seen.at.elapsed().as_millis() as i64;
        let ceiling = seen
            .clock_ms
            .saturating_add(elapsed)
            .saturating_add(elapsed / CATCH_UP_DIVISOR);
        if wall <= ceiling {
            seen.warned = false;
            return wall;
        }
        if !seen.warned && wall - ceiling > 1_000 {
            seen.warned = true;
            tracing::warn!(
                ahead_ms = wall - ceiling,
                "this node's clock is ahead of the metastore group's time; \
                 stamping the group's time instead, catching up at 1/16 of real time"
            );
        }
        ceiling
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::time::Duration;

    #[derive(Debug, Default)]
    struct Wall(AtomicI64);

    impl Clock for Wall {
        fn now_ms(&self) -> i64 {
            self.0.load(Ordering::Relaxed)
        }
    }

    const DAY_MS: i64 = 86_400_000;

    #[tokio::test(start_paused = true)]
    async fn a_clock_far_ahead_moves_the_group_time_only_a_sixteenth_faster() {
        let wall = Arc::new(Wall(AtomicI64::new(DAY_MS + 1_000_000)));
        let stamps = Stamps::new(wall.clone(), 1_000_000);
        // A day ahead of the group's time: stamped with the group's time.
        assert_eq!(stamps.now_ms(), 1_000_000);
        for _ in 0..16 {
            tokio::time::advance(Duration::from_secs(1)).await;
            let stamp = stamps.now_ms();
            stamps.observe(stamp);
        }
        // 16 s of real time moved it at most 17 s, not a day.
        let moved = stamps.now_ms() - 1_000_000;
        assert!((16_900..=17_000).contains(&moved), "moved {moved} ms");
    }

    #[tokio::test(start_paused = true)]
    async fn a_clock_in_step_is_used_as_it_is() {
        let wall = Arc::new(Wall(AtomicI64::new(1_000_500)));
        let stamps = Stamps::new(wall.clone(), 1_000_000);
        tokio::time::advance(Duration::from_secs(1)).await;
        // Half a second ahead of the last stamp after a second: in step.
        assert_eq!(stamps.now_ms(), 1_000_500);
        // A clock behind is used as it is; the state keeps its time monotonic.
        wall.0.store(999_000, Ordering::Relaxed);
        assert_eq!(stamps.now_ms(), 999_000);
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_group_or_a_single_voter_takes_the_wall_clock() {
        let wall = Arc::new(Wall(AtomicI64::new(DAY_MS)));
        assert_eq!(Stamps::new(wall.clone(), 0).now_ms(), DAY_MS);
        let stamps = Stamps::new(wall.clone(), 1_000);
        assert_eq!(stamps.now_ms(), 1_000);
        stamps.trust_wall();
        assert_eq!(stamps.now_ms(), DAY_MS);
    }
}
