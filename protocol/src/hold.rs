//! How long before a lease ends a master answers a KeepAlive it holds
//! (SPEC `KA-2`): both ends work it out the same way, the master to answer
//! and the client to know when an answer is overdue (`CS-9`).

use std::time::Duration;

/// The margin `m` a master keeps between answering a held KeepAlive and the
/// end of a lease of `lease`, given its configured `margin` (announced in
/// `Welcome`'s `limits.keepalive_margin_ms`): `min(max(margin, lease / 20),
/// lease / 4)`. It grows with long leases, so that a client's drift
/// allowance never eats it (`LEASE-5`), and shrinks for short ones, so that
/// they are still held.
///
/// ```
/// use std::time::Duration;
/// use leasehold_protocol::hold::hold_margin;
///
/// let s = Duration::from_secs;
/// assert_eq!(hold_margin(s(2), s(12)), s(2));
/// assert_eq!(hold_margin(s(2), s(60)), s(3));
/// assert_eq!(hold_margin(s(2), s(2)), Duration::from_millis(500));
/// ```
pub fn hold_margin(margin: Duration, lease: Duration) -> Duration {
    margin.max(lease / 20).min(lease / 4)
}
