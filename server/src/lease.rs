//! Leases: the master's soft state. They are never stored or replicated; a
//! new master rebuilds them from the sessions it recovers (SPEC "Leases").
//!
//! Times are milliseconds on the master's monotonic clock, passed in by the
//! caller, so this table is deterministic and needs no runtime.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_protocol::SessionId;

/// Milliseconds on the master's monotonic clock.
pub type Millis = u64;

#[derive(Debug, Clone, Copy)]
struct Lease {
    expires_at: Millis,
    duration: Millis,
}

/// The lease of every live session.
#[derive(Debug, Default)]
pub struct Leases {
    leases: BTreeMap<SessionId, Lease>,
}

impl Leases {
    /// Starts the lease of a new session at `now` (`LEASE-1`).
    pub fn start(&mut self, id: SessionId, duration: Duration, now: Millis) -> Millis {
        let duration = duration.as_millis() as Millis;
        let expires_at = now + duration;
        self.leases.insert(
            id,
            Lease {
                expires_at,
                duration,
            },
        );
        expires_at
    }

    /// Extends a lease to a full lease from `now`; it never moves backward
    /// (`LEASE-2`). Returns the new expiry, or `None` for an unknown session.
    pub fn extend(&mut self, id: SessionId, now: Millis) -> Option<Millis> {
        let lease = self.leases.get_mut(&id)?;
        lease.expires_at = lease.expires_at.max(now + lease.duration);
        Some(lease.expires_at)
    }

    /// When the lease of `id` ends.
    pub fn expires_at(&self, id: SessionId) -> Option<Millis> {
        self.leases.get(&id).map(|l| l.expires_at)
    }

    /// Lease left at `now`.
    pub fn remaining(&self, id: SessionId, now: Millis) -> Option<Millis> {
        self.expires_at(id).map(|e| e.saturating_sub(now))
    }

    /// When a held KeepAlive for `id` is to be answered: a margin before the
    /// lease ends (`KA-2`). The margin is the configured one, but at least a
    /// twentieth of the lease (so a client's drift allowance never eats it:
    /// `LEASE-5`) and at most a quarter (so short leases are still held).
    pub fn answer_held_at(&self, id: SessionId, margin: Duration) -> Option<Millis> {
        let lease = self.leases.get(&id)?;
        let margin = (margin.as_millis() as Millis)
            .max(lease.duration / 20)
            .min(lease.duration / 4);
        Some(lease.expires_at.saturating_sub(margin))
    }

    /// Forgets the lease of an ended session.
    pub fn remove(&mut self, id: SessionId) {
        self.leases.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> SessionId {
        SessionId::from_u128(1)
    }

    // LEASE-1
    #[test]
    fn a_new_lease_runs_one_duration_from_its_start() {
        let mut leases = Leases::default();
        assert_eq!(leases.start(id(), Duration::from_secs(12), 1_000), 13_000);
        assert_eq!(leases.remaining(id(), 4_000), Some(9_000));
    }

    // LEASE-2
    #[test]
    fn extending_never_moves_a_lease_backward() {
        let mut leases = Leases::default();
        leases.start(id(), Duration::from_secs(10), 5_000);
        assert_eq!(leases.extend(id(), 1_000), Some(15_000));
        assert_eq!(leases.extend(id(), 8_000), Some(18_000));
    }

    // KA-2
    #[test]
    fn a_held_keepalive_is_answered_a_margin_before_expiry() {
        let mut leases = Leases::default();
        leases.start(id(), Duration::from_secs(12), 0);
        assert_eq!(
            leases.answer_held_at(id(), Duration::from_secs(2)),
            Some(10_000)
        );
    }

    // KA-2, LEASE-5
    #[test]
    fn the_margin_is_at_least_a_twentieth_of_a_long_lease() {
        let mut leases = Leases::default();
        leases.start(id(), Duration::from_secs(60), 0);
        assert_eq!(
            leases.answer_held_at(id(), Duration::from_millis(100)),
            Some(57_000)
        );
    }

    // KA-2
    #[test]
    fn the_margin_is_at_most_a_quarter_of_a_short_lease() {
        let mut leases = Leases::default();
        leases.start(id(), Duration::from_millis(1_000), 0);
        assert_eq!(
            leases.answer_held_at(id(), Duration::from_secs(2)),
            Some(750)
        );
    }
}
