//! The recovered sessions a new master keeps track of.
//!
//! [`Recovering`]: those that have not acknowledged the fail-over event
//! (`FO-5`), and those no KeepAlive has named yet (`FO-2`). Every session
//! is in both when the master takes over, and leaves each on its first
//! KeepAlives: at a million sessions that is two million removals in the
//! first seconds, where a B-tree's few cache misses per level showed in
//! every KeepAlive's cost. A hash set takes one, and is given back whole
//! once empty. Its hasher has fixed keys, so a simulation runs the same
//! way every time; nothing depends on its order.
//!
//! [`Recovered`]: every session the master took over, in order, for the
//! one thing a session that acknowledged its fail-over event and has no
//! queue still needs: that its next event is numbered 2 (`EV-1`). Kept as
//! a sorted list with a bit for each that ended, it costs 16 bytes a
//! session and is read only when such a session gets an event or ends,
//! where a table of every session's next number took an insertion into
//! a million-entry B-tree on every acknowledgement.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, DefaultHasher};

use leasehold_protocol::SessionId;

/// A set of sessions, emptied as they come back.
#[derive(Debug, Default)]
pub(crate) struct Recovering(HashSet<SessionId, BuildHasherDefault<DefaultHasher>>);

impl Recovering {
    pub(crate) fn contains(&self, id: &SessionId) -> bool {
        self.0.contains(id)
    }

    /// Removes `id`; the table's memory goes back once the last is gone.
    pub(crate) fn remove(&mut self, id: &SessionId) -> bool {
        let removed = self.0.remove(id);
        if removed && self.0.is_empty() {
            self.0.shrink_to_fit();
        }
        removed
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &SessionId> {
        self.0.iter()
    }

    #[cfg(test)]
    pub(crate) fn clear(&mut self) {
        self.0 = HashSet::default();
    }
}

impl FromIterator<SessionId> for Recovering {
    fn from_iter<I: IntoIterator<Item = SessionId>>(ids: I) -> Self {
        Recovering(ids.into_iter().collect())
    }
}

/// Every session a master took over, in ascending order, less those that
/// ended since.
#[derive(Debug, Default)]
pub(crate) struct Recovered {
    ids: Vec<SessionId>,
    /// A bit per entry of `ids`: set once its session ended.
    ended: Vec<u64>,
}

impl Recovered {
    /// `ids` must be in ascending order, as a state lists its sessions.
    pub(crate) fn new(ids: Vec<SessionId>) -> Self {
        debug_assert!(ids.windows(2).all(|w| w[0] < w[1]));
        let ended = vec![0; ids.len().div_ceil(64)];
        Recovered { ids, ended }
    }

    /// Whether `id` was taken over and has not ended since.
    pub(crate) fn contains(&self, id: &SessionId) -> bool {
        self.ids
            .binary_search(id)
            .is_ok_and(|at| self.ended[at / 64] & (1 << (at % 64)) == 0)
    }

    /// Marks `id` ended, if it was taken over.
    pub(crate) fn ended(&mut self, id: &SessionId) {
        if let Ok(at) = self.ids.binary_search(id) {
            self.ended[at / 64] |= 1 << (at % 64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_session_back_gives_the_table_back() {
        let mut set: Recovering = (1..=1000u128).map(SessionId::from_u128).collect();
        assert!(set.contains(&SessionId::from_u128(7)));
        for n in 1..=1000u128 {
            assert!(set.remove(&SessionId::from_u128(n)));
        }
        assert!(!set.remove(&SessionId::from_u128(7)));
        assert_eq!(set.len(), 0);
        assert_eq!(set.0.capacity(), 0);
    }

    #[test]
    fn a_recovered_session_is_known_until_it_ends() {
        let ids: Vec<SessionId> = (1..=200u128).map(|n| SessionId::from_u128(n * 3)).collect();
        let mut recovered = Recovered::new(ids);
        assert!(recovered.contains(&SessionId::from_u128(3)));
        assert!(recovered.contains(&SessionId::from_u128(600)));
        assert!(
            !recovered.contains(&SessionId::from_u128(4)),
            "never taken over"
        );
        recovered.ended(&SessionId::from_u128(195));
        recovered.ended(&SessionId::from_u128(5));
        assert!(!recovered.contains(&SessionId::from_u128(195)));
        assert!(recovered.contains(&SessionId::from_u128(192)));
        assert!(recovered.contains(&SessionId::from_u128(198)));
    }
}
