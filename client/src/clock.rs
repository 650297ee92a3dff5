//! This client's clock: where the session's timers read the time and
//! sleep. A real machine's clock runs at its own rate, near enough to true
//! time that a session's drift allowance covers the difference
//! (`LEASE-4`); a simulation gives each host a rate of its own, within the
//! allowance and beyond it, to show that a local lease stays inside the
//! master's only while the allowance holds.

use std::time::Duration;

use crate::config::{MAX_RATE, MIN_RATE};
use tokio::time::{Instant, Sleep};

/// A clock running at `rate` times true time from `origin`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: Instant,
    /// `None` for a clock at true rate, which reads the runtime's clock
    /// unchanged.
    rate: Option<f64>,
}

impl Clock {
    /// A clock at `rate` times true time; 1.0 is the runtime's own clock.
    /// A rate outside half to twice true time is taken as the nearest of
    /// those, and one that is not a number as 1.0: further apart than
    /// that, no drift allowance means anything.
    pub(crate) fn new(rate: f64) -> Clock {
        let rate = if rate.is_nan() {
            1.0
        } else {
            rate.clamp(MIN_RATE, MAX_RATE)
        };
        Clock {
            origin: Instant::now(),
            rate: ((rate - 1.0).abs() > f64::EPSILON).then_some(rate),
        }
    }

    /// The time by this clock.
    pub(crate) fn now(&self) -> Instant {
        let now = Instant::now();
        match self.rate {
            None => now,
            Some(rate) => self.origin + now.duration_since(self.origin).mul_f64(rate),
        }
    }

    /// Sleeps until this clock reads `deadline`.
    pub(crate) fn sleep_until(&self, deadline: Instant) -> Sleep {
        tokio::time::sleep_until(self.runtime_instant(deadline))
    }

    /// The runtime's instant at which this clock reads `local`, rounded up
    /// a microsecond: a timer set for it never fires before this clock has
    /// reached `local`, so a deadline is never found still in the future.
    fn runtime_instant(&self, local: Instant) -> Instant {
        match self.rate {
            None => local,
            Some(rate) => {
                let since = local.saturating_duration_since(self.origin);
                self.origin + since.div_f64(rate) + Duration::from_micros(1)
            }
        }
    }

    /// The runtime's instant at which this clock reads `local`, rounded
    /// down a microsecond: an expiry reported by it is never later than
    /// the one this clock keeps.
    pub(crate) fn runtime_instant_before(&self, local: Instant) -> Instant {
        match self.rate {
            None => local,
            Some(rate) => {
                let since = local.saturating_duration_since(self.origin);
                let at = self.origin + since.div_f64(rate);
                at.checked_sub(Duration::from_micros(1)).unwrap_or(at)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_clock_at_true_rate_reads_the_runtimes_clock() {
        let clock = Clock::new(1.0);
        tokio::time::sleep(Duration::from_millis(1_234)).await;
        assert_eq!(clock.now(), Instant::now());
    }

    #[tokio::test(start_paused = true)]
    async fn a_fast_clock_reads_ahead_of_true_time_by_its_rate() {
        let clock = Clock::new(1.01);
        let start = clock.now();
        tokio::time::sleep(Duration::from_secs(100)).await;
        assert_eq!(clock.now() - start, Duration::from_secs(101));
    }

    #[tokio::test(start_paused = true)]
    async fn a_sleep_on_a_slow_clock_ends_once_that_clock_reaches_the_deadline() {
        let clock = Clock::new(0.98);
        let deadline = clock.now() + Duration::from_secs(49);
        let began = Instant::now();
        clock.sleep_until(deadline).await;
        assert!(clock.now() >= deadline);
        // 49 s at 0.98 take 50 s of true time, to the millisecond.
        let took = Instant::now() - began;
        assert!(took >= Duration::from_secs(50) && took <= Duration::from_millis(50_001));
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_beyond_twice_true_time_is_taken_as_twice_and_nan_as_true() {
        let (fast, slow, nan) = (
            Clock::new(f64::INFINITY),
            Clock::new(-3.0),
            Clock::new(f64::NAN),
        );
        let start = (fast.now(), slow.now(), nan.now());
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(fast.now() - start.0, Duration::from_secs(20));
        assert_eq!(slow.now() - start.1, Duration::from_secs(5));
        assert_eq!(nan.now() - start.2, Duration::from_secs(10));
    }
}
