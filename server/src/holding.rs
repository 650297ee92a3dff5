//! One session's hold on a lock, and how holdings begin and end (SPEC
//! "Locks"): what the state machine keeps of each holder, and what it
//! tells the master, and the master its observer, when a holding changes.

use leasehold_protocol::LockMode;

/// One session's hold on a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Holding {
    pub mode: LockMode,
    /// The index of the latest acquire answered with this holding: its
    /// grant, or the holder asking again (`LOCK-2`). A release that names
    /// an earlier one was sent before its client heard of this one, and
    /// changes nothing (`LOCK-4`). 0 for a holding recovered from a format
    /// that did not keep it: any release names it.
    pub acquired: u64,
    /// The master time the session began to hold it, kept through its
    /// asking again (`LOCK-15`). `None` for a holding recovered from a
    /// format that did not keep it (format 6 and earlier).
    pub since: Option<crate::time::Millis>,
}

/// How a session came to hold a lock (for observers: the trace of a
/// simulation says why each holding began).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HowGranted {
    /// The acquire found the lock free for its mode (`LOCK-2`).
    AtOnce,
    /// The session already held it in that mode and asked again (`LOCK-2`).
    Again,
    /// It waited in line and its turn came (`LOCK-5`).
    FromLine,
}

/// Why a session stopped holding a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LetGo {
    /// Its client released it (`LOCK-4`).
    Released,
    /// The master gave back a grant nobody was there to hear (`LOCK-9`).
    GivenBack,
    /// Its session ended (`LOCK-6`).
    SessionEnded,
    /// Its node was deleted (`LOCK-8`).
    Deleted,
}
