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
    /// A group time this node applied (0: none yet)...
    clock_ms: i64,
    /// ...and when it applied it: together, the anchor of the ceiling.
    at: Instant,
    /// Whether the group has never stamped anything (a new group, whose
    /// first leader has no time to hold its clock to).
    fresh: bool,
    /// Whether the wall clock being ahead was already reported.
    warned: bool,
}

impl Seen {
    /// The latest time the group's clock may show now.
    fn ceiling(&self) -> i64 {
        let elapsed = self.at.elapsed().as_millis() as i64;
        self.clock_ms
            .saturating_add(elapsed)
            .saturating_add(elapsed / CATCH_UP_DIVISOR)
    }
}

impl Stamps {
    /// `clock_ms`: the group time of the state this node starts from;
    /// `fresh`: whether its log is empty too (a new group, or a node not yet
    /// added to one). A node whose state is at 0 but whose log is not, stamps
    /// 0 (no advance) until it has applied something.
    pub fn new(wall: Arc<dyn Clock>, clock_ms: i64, fresh: bool) -> Stamps {
        Stamps {
            wall,
            seen: Mutex::new(Seen {
                clock_ms,
                at: Instant::now(),
                fresh: fresh && clock_ms == 0,
                warned: false,
            }),
        }
    }

    /// Whether the group has never stamped anything (its first stamp is the wall clock).
    pub fn is_fresh(&self) -> bool {
        self.seen.lock().expect("stamps lock poisoned").fresh
    }

    /// Takes this node's wall clock as the group's time, if it is ahead:
    /// for a group with no other clock to compare it with.
    pub fn trust_wall(&self) {
        let wall = self.wall.now_ms();
        self.observe(wall);
    }

    /// Records the group time this node just applied. The anchor moves
    /// only when that time is past the ceiling it gives: a stamp is applied a
    /// commit latency after it was taken, so re-anchoring on every apply
    /// would pull the ceiling back each time, and under load the group's
    /// time would fall ever further behind real time.
    pub fn observe(&self, clock_ms: i64) {
        let mut seen = self.seen.lock().expect("stamps lock poisoned");
        if clock_ms > 0 {
            seen.fresh = false;
        }
        if clock_ms > seen.ceiling() {
            seen.clock_ms = clock_ms;
            seen.at = Instant::now();
        }
    }

    /// The time to stamp a proposal with: the wall clock, or the fastest
    /// the group's time may have moved since it was last seen, if less.
    pub fn now_ms(&self) -> i64 {
        let wall = self.wall.now_ms();
        let mut seen = self.seen.lock().expect("stamps lock poisoned");
        if seen.fresh {
            // A new group: there is no time to hold the clock to yet.
            return wall;
        }
        if seen.clock_ms == 0 {
            // The group's time is not known here yet: no advance.
            return 0;
        }
        let ceiling = seen.ceiling();
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
        let stamps = Stamps::new(wall.clone(), 1_000_000, false);
        // A day ahead of the group's time: stamped with the group's time.
        assert_eq!(stamps.now_ms(), 1_000_000);
        for _ in 0..16 {
            tokio::time::advance(Duration::from_secs(1)).await;
            let stamp = stamps.now_ms();
            stamps.observe(stamp);
        }
        // 16 s of real time moved it 17 s, not a day.
        assert_eq!(stamps.now_ms(), 1_017_000);
    }

    #[tokio::test(start_paused = true)]
    async fn a_clock_in_step_is_used_as_it_is() {
        let wall = Arc::new(Wall(AtomicI64::new(1_000_500)));
        let stamps = Stamps::new(wall.clone(), 1_000_000, false);
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
        assert_eq!(Stamps::new(wall.clone(), 0, true).now_ms(), DAY_MS);
        // A log to replay first: no stamp of its own until it has.
        assert_eq!(Stamps::new(wall.clone(), 0, false).now_ms(), 0);
        let stamps = Stamps::new(wall.clone(), 1_000, false);
        assert_eq!(stamps.now_ms(), 1_000);
        stamps.trust_wall();
        assert_eq!(stamps.now_ms(), DAY_MS);
    }

    /// Each stamp is applied a commit latency after it was taken; the
    /// group's time must still keep pace with real time under load.
    #[tokio::test(start_paused = true)]
    async fn applying_stamps_late_does_not_slow_the_group_time() {
        let wall = Arc::new(Wall(AtomicI64::new(1_000_000)));
        let stamps = Stamps::new(wall.clone(), 1_000_000, false);
        for _ in 0..1_000 {
            let stamp = stamps.now_ms();
            // 5 ms to commit, then applied; the next write comes 1 ms later.
            tokio::time::advance(Duration::from_millis(5)).await;
            wall.0.fetch_add(5, Ordering::Relaxed);
            stamps.observe(stamp);
            tokio::time::advance(Duration::from_millis(1)).await;
            wall.0.fetch_add(1, Ordering::Relaxed);
        }
        // 6 s of real time: the last stamp is the wall clock.
        assert_eq!(stamps.now_ms(), 1_006_000);
    }
}
