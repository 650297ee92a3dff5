//! The master's timers other than sessions' own: watch timeouts, waits in a
//! lock's line, lock-delay ends.
//!
//! An ordered set of (due, sequence) entries, as the lease table keeps its
//! session timers (`lease.rs`): setting, cancelling and taking the earliest
//! are O(log n), nothing is scanned, and times are master time passed in
//! by the caller, so the set needs no runtime and runs the same in a
//! simulation. The master task sleeps until [`Timers::next_due`] and then
//! takes what [`Timers::pop_due`] gives it.

use std::collections::BTreeMap;

use crate::time::Millis;

/// The master's timers other than sessions' own.
#[derive(Debug, Clone)]
pub(crate) enum Timer {
    WatchTimeout(u64),
    AcquireTimeout(u64),
    LockDelayEnd(String),
    /// A waiter left the line of this key: those behind it may have the
    /// lock now (`LOCK-5`).
    LineLeft(String),
    /// A cacher told of a change may stop counting now (`CACHE-3`).
    CacheDeadline,
}

/// Names one set timer, to cancel it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimerKey {
    due: Millis,
    seq: u64,
}

/// Timers carrying a `T` each, taken earliest first; timers due at the
/// same instant are taken in the order they were set.
#[derive(Debug)]
pub(crate) struct Timers<T> {
    set: BTreeMap<(Millis, u64), T>,
    next_seq: u64,
}

impl<T> Default for Timers<T> {
    fn default() -> Self {
        Timers {
            set: BTreeMap::new(),
            next_seq: 0,
        }
    }
}

impl<T> Timers<T> {
    /// Sets a timer for `due`.
    pub(crate) fn insert(&mut self, due: Millis, timer: T) -> TimerKey {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.set.insert((due, seq), timer);
        TimerKey { due, seq }
    }

    /// Cancels a timer; returns what it carried, if it had not fired.
    pub(crate) fn remove(&mut self, key: TimerKey) -> Option<T> {
        self.set.remove(&(key.due, key.seq))
    }

    /// When the earliest timer is due.
    pub(crate) fn next_due(&self) -> Option<Millis> {
        self.set.first_key_value().map(|((due, _), _)| *due)
    }

    /// Takes the earliest timer if it is due at `now`.
    pub(crate) fn pop_due(&mut self, now: Millis) -> Option<T> {
        match self.next_due() {
            Some(due) if due <= now => self.set.pop_first().map(|(_, timer)| timer),
            _ => None,
        }
    }

    /// How many timers are set.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::at;

    #[test]
    fn timers_come_due_earliest_first_and_only_once_their_time_has_come() {
        let mut timers = Timers::default();
        timers.insert(at(30), "c");
        timers.insert(at(10), "a");
        timers.insert(at(20), "b");
        assert_eq!(timers.next_due(), Some(at(10)));
        assert_eq!(timers.pop_due(at(9)), None);
        assert_eq!(timers.pop_due(at(25)), Some("a"));
        assert_eq!(timers.pop_due(at(25)), Some("b"));
        assert_eq!(timers.pop_due(at(25)), None);
        assert_eq!(timers.next_due(), Some(at(30)));
    }

    #[test]
    fn timers_due_at_the_same_instant_fire_in_the_order_they_were_set() {
        let mut timers = Timers::default();
        for name in ["first", "second", "third"] {
            timers.insert(at(5), name);
        }
        let fired: Vec<_> = std::iter::from_fn(|| timers.pop_due(at(5))).collect();
        assert_eq!(fired, ["first", "second", "third"]);
    }

    #[test]
    fn a_cancelled_timer_never_fires_and_its_neighbours_still_do() {
        let mut timers = Timers::default();
        let a = timers.insert(at(5), "a");
        timers.insert(at(5), "b");
        assert_eq!(timers.remove(a), Some("a"));
        assert_eq!(timers.remove(a), None);
        assert_eq!(timers.pop_due(at(100)), Some("b"));
        assert_eq!(timers.pop_due(at(100)), None);
        assert_eq!(timers.len(), 0);
    }

    #[test]
    fn cancelling_a_timer_that_fired_changes_nothing() {
        let mut timers = Timers::default();
        let a = timers.insert(at(5), "a");
        timers.insert(at(6), "b");
        assert_eq!(timers.pop_due(at(5)), Some("a"));
        assert_eq!(timers.remove(a), None);
        assert_eq!(timers.len(), 1);
    }
}
