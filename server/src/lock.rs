//! Locks: every node can be locked, exclusive or shared (SPEC "Locks").
//!
//! Lock state lives beside the namespace, keyed by key, so that lock-delay
//! outlives a node that its holder's session deleted. The lock generation
//! lives on the node. These are the data and their queries; what changes
//! them runs inside `State::apply` (`state/locks.rs`): waiters are granted
//! in the order their commands were applied, which makes the queue part of
//! the replicated state.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use leasehold_protocol::{LockMode, SessionId};

use crate::holding::Holding;
use crate::time::Millis;

/// One blocking acquire waiting its turn.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Waiter {
    /// The index of the command that queued it: unique, and names it.
    pub ticket: u64,
    pub session: SessionId,
    pub mode: LockMode,
    pub contents: Option<Vec<u8>>,
    /// Asked for a transient node (`LOCK-12`).
    pub transient: bool,
}

/// The lock of one key.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LockState {
    pub holders: BTreeMap<SessionId, Holding>,
    /// First in, first served (`LOCK-5`).
    pub waiters: VecDeque<Waiter>,
    /// Master time at which lock-delay ends (`LOCK-6`).
    pub delay_until: Option<Millis>,
}

impl LockState {
    pub(crate) fn admits(&self, mode: LockMode) -> bool {
        self.holders.is_empty()
            || (mode == LockMode::Shared
                && self.holders.values().all(|h| h.mode == LockMode::Shared))
    }

    pub(crate) fn delay_remaining(&self, now: Millis) -> Option<Duration> {
        self.delay_until
            .filter(|until| *until > now)
            .map(|until| until.since(now))
    }

    pub(crate) fn is_idle(&self, now: Millis) -> bool {
        self.holders.is_empty() && self.waiters.is_empty() && self.delay_remaining(now).is_none()
    }
}

/// Every lock that is held, awaited or delayed, with indexes by session.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Locks {
    pub(crate) locks: BTreeMap<String, LockState>,
    pub(crate) held_by: BTreeMap<SessionId, BTreeSet<String>>,
    pub(crate) waiting_by: BTreeMap<SessionId, BTreeSet<(String, u64)>>,
}

impl Locks {
    /// The lock of `key`, if it is held, awaited or delayed.
    pub fn get(&self, key: &str) -> Option<&LockState> {
        self.locks.get(key)
    }

    /// Every lock that is held, awaited or delayed, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &LockState)> {
        self.locks.iter()
    }

    /// The keys whose locks `session` holds.
    pub fn held_by(&self, session: SessionId) -> Vec<String> {
        self.held_by
            .get(&session)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The keys whose lines `session` waits in.
    pub fn waited_by(&self, session: SessionId) -> Vec<String> {
        self.waiting_by
            .get(&session)
            .map(|waits| waits.iter().map(|(key, _)| key.clone()).collect())
            .unwrap_or_default()
    }

    /// Locks with holders at `key`, and with `recursive` below it.
    pub(crate) fn held_at_or_below<'a>(
        &'a self,
        key: &'a str,
        recursive: bool,
    ) -> impl Iterator<Item = (&'a str, &'a LockState)> + 'a {
        self.locks
            .range::<str, _>((std::ops::Bound::Included(key), std::ops::Bound::Unbounded))
            .take_while(move |(k, _)| k.starts_with(key))
            .filter(move |(k, lock)| {
                let below = k.len() > key.len() && k.as_bytes()[key.len()] == b'/';
                (k.as_str() == key || (recursive && below)) && !lock.holders.is_empty()
            })
            .map(|(k, lock)| (k.as_str(), lock))
    }

    pub(crate) fn remove_holder(&mut self, key: &str, session: SessionId) -> Option<Holding> {
        let holding = self.locks.get_mut(key)?.holders.remove(&session)?;
        if let Some(keys) = self.held_by.get_mut(&session) {
            keys.remove(key);
            if keys.is_empty() {
                self.held_by.remove(&session);
            }
        }
        Some(holding)
    }

    pub(crate) fn forget_waiter(&mut self, session: SessionId, key: &str, ticket: u64) {
        if let Some(waits) = self.waiting_by.get_mut(&session) {
            waits.remove(&(key.to_string(), ticket));
            if waits.is_empty() {
                self.waiting_by.remove(&session);
            }
        }
    }

    pub(crate) fn tidy(&mut self, key: &str, now: Millis) {
        if self.locks.get(key).is_some_and(|l| l.is_idle(now)) {
            self.locks.remove(key);
        }
    }
}
