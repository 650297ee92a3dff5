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
}
