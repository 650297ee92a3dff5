//! The recovered sessions a new master keeps track of.
//!
//! [`Recovering`]: what the master still waits on from each: that a
//! KeepAlive names it (`FO-2`), and that it acknowledges the fail-over
//! event (`FO-5`). Every session owes both when the master takes over, and
//! pays them with its first two KeepAlives: at a million sessions, that is
//! two million changes in the first seconds, each a cache miss or more.
//! One hash table holds both, so a KeepAlive makes one cold look at it,
//! where a set for each made two; it is given back whole once empty. Its
//! hasher has fixed keys, so a simulation runs the same way every time;
//! nothing depends on its order.
//!
//! [`Recovered`]: every session the master took over, in order, for the
//! one thing a session that acknowledged its fail-over event and has no
//! queue still needs: that its next event is numbered 2 (`EV-1`). Kept as
//! a sorted list with a bit for each that ended, it costs 16 bytes a
//! session and is read only when such a session gets an event or ends,
//! where a table of every session's next number took an insertion into
//! a million-entry B-tree on every acknowledgement.

use leasehold_protocol::SessionId;

use crate::id_hash::IdMap;

/// No KeepAlive has named the session yet (`FO-2`).
const UNHEARD: u8 = 1;
/// The session has not acknowledged the fail-over event (`FO-5`).
const AWAITING: u8 = 2;

/// What each recovered session still owes, emptied as they come back.
#[derive(Debug, Default)]
pub(crate) struct Recovering {
    owed: IdMap<u8>,
    /// How many still owe the acknowledgement.
    awaiting: usize,
}

impl Recovering {
    /// Every one of `sessions` owes both.
    pub(crate) fn new(sessions: &[SessionId]) -> Self {
        let owed: IdMap<_> = sessions
            .iter()
            .map(|&id| (id, UNHEARD | AWAITING))
            .collect();
        let awaiting = owed.len();
        Recovering { owed, awaiting }
    }

    /// Whether no KeepAlive has named `id` yet.
    pub(crate) fn is_unheard(&self, id: &SessionId) -> bool {
        self.owed.get(id).is_some_and(|f| f & UNHEARD != 0)
    }

    /// Whether `id` has not acknowledged the fail-over event.
    pub(crate) fn awaits_failover(&self, id: &SessionId) -> bool {
        self.owed.get(id).is_some_and(|f| f & AWAITING != 0)
    }

    /// A KeepAlive named `id`, or it was given its one more lease.
    pub(crate) fn heard(&mut self, id: &SessionId) {
        self.paid(id, UNHEARD);
    }

    /// `id` acknowledged the fail-over event; says whether it awaited it.
    pub(crate) fn acknowledged(&mut self, id: &SessionId) -> bool {
        let was = self.paid(id, AWAITING);
        self.awaiting -= usize::from(was);
        was
    }

    /// `id` ended; says whether it awaited the fail-over event.
    pub(crate) fn forget(&mut self, id: &SessionId) -> bool {
        let Some(flags) = self.owed.remove(id) else {
            return false;
        };
        self.awaiting -= usize::from(flags & AWAITING != 0);
        self.give_back_if_empty();
        flags & AWAITING != 0
    }

    /// How many sessions have not acknowledged the fail-over event.
    pub(crate) fn awaiting(&self) -> usize {
        self.awaiting
    }

    /// The sessions that have not acknowledged the fail-over event.
    pub(crate) fn awaiting_ids(&self) -> impl Iterator<Item = &SessionId> {
        self.owed
            .iter()
            .filter(|(_, f)| **f & AWAITING != 0)
            .map(|(id, _)| id)
    }

    /// As if every session had acknowledged the fail-over event.
    #[cfg(test)]
    pub(crate) fn acknowledge_all(&mut self) {
        let ids: Vec<SessionId> = self.awaiting_ids().copied().collect();
        for id in ids {
            self.acknowledged(&id);
        }
    }

    /// Clears `flag` of `id`; says whether it was set. The entry goes once
    /// nothing is owed, the table's memory once the last entry is gone.
    fn paid(&mut self, id: &SessionId, flag: u8) -> bool {
        let Some(flags) = self.owed.get_mut(id) else {
            return false;
        };
        let was = *flags & flag != 0;
        *flags &= !flag;
        if *flags == 0 {
            self.owed.remove(id);
            self.give_back_if_empty();
        }
        was
    }

    fn give_back_if_empty(&mut self) {
        if self.owed.is_empty() {
            self.owed = IdMap::default();
        }
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
        let ids: Vec<SessionId> = (1..=1000u128).map(SessionId::from_u128).collect();
        let mut owed = Recovering::new(&ids);
        let seven = SessionId::from_u128(7);
        assert!(owed.is_unheard(&seven) && owed.awaits_failover(&seven));
        for id in &ids {
            owed.heard(id);
        }
        assert_eq!(owed.awaiting(), 1000);
        assert!(!owed.is_unheard(&seven) && owed.awaits_failover(&seven));
        for id in &ids[1..] {
            assert!(owed.acknowledged(id));
        }
        assert!(!owed.acknowledged(&ids[1]), "acknowledged once");
        assert!(owed.forget(&ids[0]), "it still awaited the event");
        assert_eq!(owed.awaiting(), 0);
        assert_eq!(owed.owed.capacity(), 0);
    }

    #[test]
    fn a_session_acknowledging_before_it_is_heard_still_owes_a_keepalive() {
        let seven = SessionId::from_u128(7);
        let mut owed = Recovering::new(&[seven]);
        assert!(owed.acknowledged(&seven));
        assert!(owed.is_unheard(&seven) && !owed.awaits_failover(&seven));
        owed.heard(&seven);
        assert_eq!(owed.owed.len(), 0);
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
