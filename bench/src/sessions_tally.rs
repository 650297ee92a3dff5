//! What the `sessions` scenario tells the tasks that hold its sessions,
//! Leasehold's and the peers' alike, and what they count for it. Kept
//! apart from the scenario, which calls the peers' adapters, so that the
//! adapters need nothing of it in return.

use std::sync::atomic::AtomicU64;

/// Where a run is; connection tasks count renewals only while measuring
/// and end their sessions when closing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Creating,
    Measuring,
    Closing,
}

/// Counters the connection tasks share.
#[derive(Default)]
pub struct Tally {
    pub created: AtomicU64,
    /// KeepAlive replies (lease renewals) received while measuring.
    pub renewals: AtomicU64,
    /// Sessions the master ended although their KeepAlives kept coming.
    pub expired: AtomicU64,
    /// The longest a `KeepAliveAll` waited for its reply, in
    /// microseconds, over the whole run (creation included): with the
    /// lateness below, it tells whether a session that ran out waited for
    /// the master or for its holder.
    pub worst_round_trip_us: AtomicU64,
    /// The latest a connection started a round of renewals after it was
    /// due, in microseconds: the holders' own delay.
    pub worst_round_late_us: AtomicU64,
}
