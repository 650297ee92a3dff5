//! Master time: the runtime's clock, counted on from where the previous
//! master stopped, so that times in the recovered state keep their
//! meaning. The master reads it for each input; its connections read it
//! to stamp when each request arrived, so that the master can tell its
//! own delay from its clients'.

use tokio::time::Instant;

use crate::time::Millis;

/// A master's clock; copies read the same time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MasterClock {
    /// The runtime's instant when the master started...
    start: Instant,
    /// ...and master time then.
    offset: Millis,
    /// The rate the clock runs at, or `None` at true rate
    /// (`Config::clock_rate`).
    rate: Option<f64>,
}

impl MasterClock {
    /// A clock that reads `offset` at `start`, running at `rate`.
    pub(crate) fn new(start: Instant, offset: Millis, rate: f64) -> MasterClock {
        MasterClock {
            start,
            offset,
            rate: ((rate - 1.0).abs() > f64::EPSILON).then_some(rate),
        }
    }

    /// Master time now.
    pub(crate) fn read(&self) -> Millis {
        self.at(Instant::now())
    }

    /// Master time at the runtime's instant `at` (its start, if earlier).
    pub(crate) fn at(&self, at: Instant) -> Millis {
        let elapsed = at.saturating_duration_since(self.start);
        match self.rate {
            None => self.offset + elapsed,
            Some(rate) => self.offset + elapsed.mul_f64(rate),
        }
    }

    /// The runtime's instant at which the clock reads `at`, rounded up: a
    /// timer set for it never fires before `at`.
    pub(crate) fn instant(&self, at: Millis) -> Instant {
        let since = at.since(self.offset);
        match self.rate {
            None => self.start + since,
            Some(rate) => self.start + since.div_f64(rate) + std::time::Duration::from_micros(1),
        }
    }

    /// When the master started, by the runtime's clock.
    pub(crate) fn start(&self) -> Instant {
        self.start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_clock_counts_on_from_its_offset_at_its_rate() {
        let start = Instant::now();
        let offset = Millis::from_millis(5_000);
        let clock = MasterClock::new(start, offset, 2.0);
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(clock.read(), Millis::from_millis(5_200));
        assert_eq!(clock.at(start), offset);
        assert!(clock.instant(Millis::from_millis(5_200)) >= start + Duration::from_millis(100));
    }
}
