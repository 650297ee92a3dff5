//! Latency histograms (HdrHistogram, microsecond resolution), one per
//! client task and merged at the end, so recording never contends.

use std::time::Duration;

use hdrhistogram::Histogram;

pub struct Latency(Histogram<u64>);

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    pub fn new() -> Latency {
        // 1 us to 10 minutes at 3 significant figures.
        Latency(Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds"))
    }

    pub fn record(&mut self, d: Duration) {
        let us = (d.as_micros() as u64).clamp(1, 600_000_000);
        self.0.saturating_record(us);
    }

    pub fn merge(&mut self, other: &Latency) {
        let _ = self.0.add(&other.0);
    }

    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// The `q` quantile (0..=1) in microseconds.
    pub fn us(&self, q: f64) -> f64 {
        self.0.value_at_quantile(q) as f64
    }

    /// The `q` quantile (0..=1) in milliseconds.
    pub fn ms(&self, q: f64) -> f64 {
        self.0.value_at_quantile(q) as f64 / 1000.0
    }
}
