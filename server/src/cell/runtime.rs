//! openraft's runtime for the cell: tokio's, except that election timeouts
//! can be drawn from a seeded generator, so a simulation of a cell runs the
//! same way every time for the same seed.

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use openraft::{AsyncRuntime, OptionalSend, TokioRuntime};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

thread_local! {
    static SEEDED: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// Seeds the election timeouts drawn on this thread from now on: every
/// member running on it (a simulation runs them all on one) draws from one
/// generator seeded with `seed`. `None` draws from entropy again, as a
/// member does unless told otherwise.
pub fn seed_elections(seed: Option<u64>) {
    SEEDED.with(|seeded| *seeded.borrow_mut() = seed.map(StdRng::seed_from_u64));
}

/// Draws from this thread's seeded generator, or from entropy.
#[derive(Debug, Clone, Copy, Default)]
pub struct ElectionRng;

impl ElectionRng {
    fn with<T>(f: impl FnOnce(&mut dyn RngCore) -> T) -> T {
        SEEDED.with(|seeded| match seeded.borrow_mut().as_mut() {
            Some(rng) => f(rng),
            None => f(&mut rand::thread_rng()),
        })
    }
}

impl RngCore for ElectionRng {
    fn next_u32(&mut self) -> u32 {
        Self::with(|rng| rng.next_u32())
    }

    fn next_u64(&mut self) -> u64 {
        Self::with(|rng| rng.next_u64())
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        Self::with(|rng| rng.fill_bytes(dest))
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        Self::with(|rng| rng.try_fill_bytes(dest))
    }
}

/// tokio, with `ElectionRng`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CellRuntime;

type Tokio = TokioRuntime;

impl AsyncRuntime for CellRuntime {
    type JoinError = <Tokio as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <Tokio as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <Tokio as AsyncRuntime>::Sleep;
    type Instant = <Tokio as AsyncRuntime>::Instant;
    type TimeoutError = <Tokio as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = <Tokio as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = ElectionRng;
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
        ElectionRng
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        Tokio::oneshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn a_seeded_thread_draws_the_same_timeouts_every_time() {
        let draw = || -> Vec<u64> {
            (0..8)
                .map(|_| CellRuntime::thread_rng().gen_range(150..300))
                .collect()
        };
        seed_elections(Some(7));
        let first = draw();
        seed_elections(Some(7));
        let again = draw();
        seed_elections(None);
        assert_eq!(first, again);
        assert!(first.iter().all(|t| (150..300).contains(t)));
    }
}
