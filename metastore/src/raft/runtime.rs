//! openraft's async runtime: tokio, as openraft's own [`TokioRuntime`], but
//! with its random draws (election timeouts) taken from a generator a
//! simulation can seed, so that a seed replays the same elections.

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use openraft::{AsyncRuntime, OptionalSend, TokioRuntime};
use rand08::rngs::{StdRng, ThreadRng};
use rand08::{RngCore, SeedableRng};

type Tokio = TokioRuntime;

thread_local! {
    /// Set by [`seed_this_thread`]; `None`: the operating system's randomness.
    static SEEDED: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// Makes openraft's draws on this thread come from `seed` (a simulation on
/// a single-threaded runtime), or from the OS again with `None`.
pub fn seed_this_thread(seed: Option<u64>) {
    SEEDED.with(|s| *s.borrow_mut() = seed.map(StdRng::seed_from_u64));
}

/// openraft's generator: the seeded one if this thread has it.
pub enum Draws {
    Seeded,
    Os(ThreadRng),
}

impl Draws {
    fn with<T>(&mut self, f: impl FnOnce(&mut dyn RngCore) -> T) -> T {
        match self {
            Draws::Seeded => SEEDED.with(|s| {
                let mut seeded = s.borrow_mut();
                match seeded.as_mut() {
                    Some(rng) => f(rng),
                    // Unseeded since this was handed out.
                    None => f(&mut rand08::thread_rng()),
                }
            }),
            Draws::Os(rng) => f(rng),
        }
    }
}

impl RngCore for Draws {
    fn next_u32(&mut self) -> u32 {
        self.with(|r| r.next_u32())
    }
    fn next_u64(&mut self) -> u64 {
        self.with(|r| r.next_u64())
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.with(|r| r.fill_bytes(dest))
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand08::Error> {
        self.with(|r| r.try_fill_bytes(dest))
    }
}

/// Tokio, with [`Draws`] for randomness.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FloeRuntime;

impl AsyncRuntime for FloeRuntime {
    type JoinError = <Tokio as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <Tokio as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <Tokio as AsyncRuntime>::Sleep;
    type Instant = <Tokio as AsyncRuntime>::Instant;
    type TimeoutError = <Tokio as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = <Tokio as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = Draws;
    type OneshotSender<T: OptionalSend> = <Tokio as AsyncRuntime>::OneshotSender<T>;
    type OneshotReceiverError = <Tokio as AsyncRuntime>::OneshotReceiverError;
    type OneshotReceiver<T: OptionalSend> = <Tokio as AsyncRuntime>::OneshotReceiver<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        Tokio::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        Tokio::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        Tokio::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        Tokio::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        Tokio::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        Tokio::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        if SEEDED.with(|s| s.borrow().is_some()) {
            Draws::Seeded
        } else {
            Draws::Os(rand08::thread_rng())
        }
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        Tokio::oneshot()
    }
}
