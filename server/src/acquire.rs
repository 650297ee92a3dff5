//! Blocking acquires (SPEC `LOCK-3`): the master holds the reply while the
//! acquire waits in line, as it holds a KeepAlive, until the lock is granted,
//! the session ends, or the wait times out. This is the bookkeeping of the
//! waits; the master's handling of them is `master/acquire.rs`.

use std::collections::BTreeMap;

use crate::reply::ReplyTx;
use crate::timers::TimerKey;

/// Acquires waiting in line, by ticket.
#[derive(Debug, Default)]
pub(crate) struct Acquires {
    pub(crate) waiting: BTreeMap<u64, Waiting>,
}

#[derive(Debug)]
pub(crate) struct Waiting {
    pub(crate) key: String,
    pub(crate) reply: ReplyTx,
    pub(crate) timer: TimerKey,
}

impl Acquires {
    /// The key a waiter waits for, if it still waits.
    pub(crate) fn waiting_key(&self, ticket: u64) -> Option<&str> {
        self.waiting.get(&ticket).map(|w| w.key.as_str())
    }
}
