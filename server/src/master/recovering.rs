//! The recovered sessions a new master still waits on: those that have not
//! acknowledged the fail-over event (`FO-5`), and those no KeepAlive has
//! named yet (`FO-2`). Every session is in both when the master takes
//! over, and leaves each on its first KeepAlives: at a million sessions
//! that is two million removals in the first seconds, where a B-tree's
//! few cache misses per level showed in every KeepAlive's cost. A hash
//! set takes one, and is given back whole once empty. Its hasher has
//! fixed keys, so a simulation runs the same way every time; nothing
//! depends on its order.

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
}
