//! The client's local lease: a conservative bound on the master's (SPEC
//! `LEASE-4`).
//!
//! The master extended the lease no earlier than it received the request, and
//! it received the request no earlier than the client sent it. The reply says
//! how long the master held the request and how much lease was left when it
//! replied, both on the master's clock. So the master's lease ends no earlier
//! than `sent + held + remaining` master-time after `sent`; shrinking that by
//! the allowed clock-rate difference turns it into a bound on the client's
//! clock:
//!
//! `local_expiry = sent + (held + remaining) × (1 − drift)`

use std::time::Duration;

pub use crate::config::{DEFAULT_CLOCK_DRIFT, MAX_GRANT};
use leasehold_protocol::LeaseGrant;
use tokio::time::Instant;

/// When the lease granted in a reply to a request sent at `sent` ends, by the
/// client's clock, at the latest it can safely assume. A drift outside
/// `0..=1`, or not a number, is taken as the most conservative value that
/// makes sense (0 lease for NaN).
pub fn local_expiry(sent: Instant, grant: LeaseGrant, drift: f64) -> Instant {
    let granted = Duration::from_millis(grant.held_ms.saturating_add(grant.remaining_ms));
    let factor = if drift.is_nan() {
        0.0
    } else {
        1.0 - drift.clamp(0.0, 1.0)
    };
    sent + granted.min(MAX_GRANT).mul_f64(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    // LEASE-4
    #[test]
    fn the_local_lease_counts_from_the_send_and_allows_for_drift() {
        let sent = Instant::now();
        let grant = LeaseGrant {
            remaining_ms: 12_000,
            held_ms: 8_000,
        };
        assert_eq!(
            local_expiry(sent, grant, 0.01),
            sent + Duration::from_millis(19_800)
        );
    }

    // LEASE-4
    #[test]
    fn a_hostile_grant_or_drift_cannot_overflow_or_lengthen_the_lease() {
        let sent = Instant::now();
        let huge = LeaseGrant {
            remaining_ms: u64::MAX,
            held_ms: u64::MAX,
        };
        assert_eq!(local_expiry(sent, huge, 0.0), sent + MAX_GRANT);
        let grant = LeaseGrant {
            remaining_ms: 1_000,
            held_ms: 0,
        };
        assert_eq!(local_expiry(sent, grant, f64::NAN), sent);
        assert_eq!(
            local_expiry(sent, grant, -0.5),
            sent + Duration::from_millis(1_000)
        );
    }

    // LEASE-4
    #[test]
    fn the_local_lease_is_never_longer_than_the_master_could_have_granted() {
        let sent = Instant::now();
        let grant = LeaseGrant {
            remaining_ms: 1_000,
            held_ms: 0,
        };
        assert!(local_expiry(sent, grant, 0.0) <= sent + Duration::from_millis(1_000));
        assert!(local_expiry(sent, grant, 0.05) < sent + Duration::from_millis(1_000));
    }
}
