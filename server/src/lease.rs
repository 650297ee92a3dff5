//! Leases: the master's soft state. They are never stored or replicated; a
//! new master rebuilds them from the sessions it recovers (SPEC "Leases").
//!
//! Each lease also carries its session's held KeepAlive, if one is held
//! (`H`, which the master defines), and its session's one timer: when the
//! held KeepAlive is due an answer, or else when the lease ends
//! (`LEASE-3`). A master holds one of each for every live session, so they
//! share one entry, and the timer is a time in it plus an ordered entry of
//! 24 bytes, where a slot in a timer wheel with its links and handle costs
//! several times that. Arming is O(log n) and nothing is ever scanned, so
//! idle sessions cost no time.
//!
//! The entries are in a table indexed by a hash of the id (`IdSlab`), not a
//! B-tree: every KeepAlive looks its session's up, and at a million
//! sessions a B-tree's descent is a cache miss at each of its levels, where
//! the table's is two. Nothing reads the leases in order; the timers are.
//!
//! Times are instants of master time (`time.rs`), passed in by the caller, so this table is deterministic and needs no runtime.

use std::collections::BTreeSet;
use std::time::Duration;

use leasehold_protocol::hold::hold_margin;
use leasehold_protocol::SessionId;

use crate::id_hash::IdSlab;
use crate::time::{whole_millis, Millis, Span};

/// A timer that is not set.
const UNARMED: Millis = Millis::NEVER;

#[derive(Debug)]
struct Lease<H> {
    expires_at: Millis,
    duration: Span,
    /// When the session's timer is due; [`UNARMED`] if it is not set.
    timer: Millis,
    /// Boxed: most sessions hold nothing at a time (a `KeepAliveAll`
    /// holds none), and a held KeepAlive is several times a lease's size.
    held: Option<Box<H>>,
    /// The quota slot of the address that created the session
    /// (`QUOTA-2`), [`NO_CREATOR`] if none counts it: kept here, in room
    /// the lease has spare, rather than in a table of its own.
    creator: u32,
}

/// What a removed lease's slot keeps until it is used again.
impl<H> Default for Lease<H> {
    fn default() -> Self {
        Lease {
            expires_at: Millis::ZERO,
            duration: Span::from(Duration::ZERO),
            timer: UNARMED,
            held: None,
            creator: NO_CREATOR,
        }
    }
}

/// When a KeepAlive held for `lease` is answered (`Leases::answer_held_at`).
fn held_answer_at<H>(lease: &Lease<H>, margin: Duration) -> Millis {
    let duration = Duration::from(lease.duration);
    let margin = hold_margin(margin, duration);
    Millis::from_millis(
        lease
            .expires_at
            .as_millis()
            .saturating_sub(whole_millis(margin)),
    )
}

/// The creator slot of a session no address counts (one recovered after a
/// restart, or created without a peer address).
const NO_CREATOR: u32 = u32::MAX;

/// The lease, the held KeepAlive and the timer of every live session.
#[derive(Debug)]
pub struct Leases<H = ()> {
    leases: IdSlab<Lease<H>>,
    /// Every armed timer, earliest first.
    timers: BTreeSet<(Millis, SessionId)>,
    /// How many leases hold a KeepAlive.
    holding: usize,
}

impl<H> Default for Leases<H> {
    fn default() -> Self {
        Leases {
            leases: IdSlab::default(),
            timers: BTreeSet::new(),
            holding: 0,
        }
    }
}

impl<H> Leases<H> {
    /// The leases of recovered sessions, each a full `duration` from `now`
    /// with its timer set for its end (`FO-2`), as [`Leases::start`] then
    /// [`Leases::arm`] would make them one by one, the timers' set built
    /// whole: at a million sessions, a tenth of the time of inserting each.
    pub fn recovered(sessions: impl IntoIterator<Item = (SessionId, Span)>, now: Millis) -> Self {
        let leases = IdSlab::from_values(sessions.into_iter().map(|(id, duration)| {
            let expires_at = now + Duration::from(duration);
            let lease = Lease {
                expires_at,
                duration,
                timer: expires_at,
                held: None,
                creator: NO_CREATOR,
            };
            (id, lease)
        }));
        let timers = leases.iter().map(|(id, l)| (l.timer, *id)).collect();
        Leases {
            leases,
            timers,
            holding: 0,
        }
    }

    /// Starts the lease of a new session at `now` (`LEASE-1`). Its timer is
    /// not set.
    pub fn start(&mut self, id: SessionId, duration: Span, now: Millis) -> Millis {
        let expires_at = now + Duration::from(duration);
        // Started again, a lease keeps whom the session is counted against.
        let creator = self.leases.get(&id).map_or(NO_CREATOR, |l| l.creator);
        let lease = Lease {
            expires_at,
            duration,
            timer: UNARMED,
            held: None,
            creator,
        };
        if let Some(previous) = self.leases.insert(id, lease) {
            self.timers.remove(&(previous.timer, id));
            self.holding -= usize::from(previous.held.is_some());
        }
        expires_at
    }

    /// Extends a lease to a full lease from `now`; it never moves backward
    /// (`LEASE-2`). Returns the new expiry, or `None` for an unknown session.
    pub fn extend(&mut self, id: SessionId, now: Millis) -> Option<Millis> {
        let lease = self.leases.get_mut(&id)?;
        lease.expires_at = lease.expires_at.max(now + Duration::from(lease.duration));
        Some(lease.expires_at)
    }

    /// Extends the lease of `id` from `now` if `extend` (as
    /// [`Leases::extend`]), and makes sure its timer comes no later than
    /// the lease's end; returns that end, or `None` for an unknown session.
    ///
    /// A timer already set earlier is left where it is: firing early costs
    /// a look and a new timer at the end ([`Leases::rearm_if_early`]),
    /// while moving it costs a removal from the middle of every timer, on
    /// every renewal. A session renewed every half lease is thus touched
    /// once a lease, near the timers' ends, where they are warm.
    pub fn renew(&mut self, id: SessionId, now: Millis, extend: bool) -> Option<Millis> {
        let lease = self.leases.get_mut(&id)?;
        if extend {
            lease.expires_at = lease.expires_at.max(now + Duration::from(lease.duration));
        }
        if lease.timer > lease.expires_at {
            self.timers.remove(&(lease.timer, id));
            lease.timer = lease.expires_at;
            self.timers.insert((lease.timer, id));
        }
        Some(lease.expires_at)
    }

    /// For a timer just popped: if what it serves (`Leases::due`) is
    /// still to come after `now`, sets it again for then and says so, in
    /// one lookup. The timer of a renewed lease comes early (see
    /// [`Leases::renew`]); this is all it then costs.
    pub fn rearm_if_early(&mut self, id: SessionId, margin: Duration, now: Millis) -> bool {
        let Some(lease) = self.leases.get_mut(&id) else {
            return false;
        };
        let due = if lease.held.is_some() {
            held_answer_at(lease, margin)
        } else {
            lease.expires_at
        };
        if lease.timer != UNARMED || due <= now {
            return false;
        }
        lease.timer = due;
        self.timers.insert((due, id));
        true
    }

    /// When the lease of `id` ends.
    pub fn expires_at(&self, id: SessionId) -> Option<Millis> {
        self.leases.get(&id).map(|l| l.expires_at)
    }

    /// Lease left at `now`.
    pub fn remaining(&self, id: SessionId, now: Millis) -> Option<Duration> {
        self.expires_at(id).map(|e| e.since(now))
    }

    /// When a held KeepAlive for `id` is to be answered: a margin before the
    /// lease ends (`KA-2`). The margin is the configured one, but at least a
    /// twentieth of the lease (so a client's drift allowance never eats it:
    /// `LEASE-5`) and at most a quarter (so short leases are still held).
    pub fn answer_held_at(&self, id: SessionId, margin: Duration) -> Option<Millis> {
        self.leases
            .get(&id)
            .map(|lease| held_answer_at(lease, margin))
    }

    /// When the timer of `id` is due: the answer of its held KeepAlive if
    /// one is held, else the end of its lease.
    pub fn due(&self, id: SessionId, margin: Duration) -> Option<Millis> {
        match self.held(id) {
            Some(_) => self.answer_held_at(id, margin),
            None => self.expires_at(id),
        }
    }

    /// Forgets the lease of an ended session and its timer; returns its
    /// held KeepAlive.
    pub fn remove(&mut self, id: SessionId) -> Option<H> {
        let lease = self.leases.remove(&id)?;
        self.timers.remove(&(lease.timer, id));
        self.holding -= usize::from(lease.held.is_some());
        lease.held.map(|held| *held)
    }

    /// Holds `held` for `id`; a session without a lease holds nothing.
    /// Returns what was held before.
    pub fn hold(&mut self, id: SessionId, held: H) -> Option<H> {
        let before = self.leases.get_mut(&id)?.held.replace(Box::new(held));
        let before = before.map(|held| *held);
        self.holding += usize::from(before.is_none());
        before
    }

    /// The KeepAlive held for `id`.
    pub fn held(&self, id: SessionId) -> Option<&H> {
        self.leases.get(&id)?.held.as_deref()
    }

    /// Takes the KeepAlive held for `id` out of its lease.
    pub fn take_held(&mut self, id: SessionId) -> Option<H> {
        let held = self.leases.get_mut(&id)?.held.take().map(|held| *held);
        self.holding -= usize::from(held.is_some());
        held
    }

    /// Records the quota slot of the address that created `id`
    /// (`QUOTA-2`); returns the slot it replaces, to be given back. A
    /// session without a lease records nothing.
    pub fn set_creator(&mut self, id: SessionId, slot: u32) -> Option<u32> {
        let lease = self.leases.get_mut(&id)?;
        let before = std::mem::replace(&mut lease.creator, slot);
        (before != NO_CREATOR).then_some(before)
    }

    /// The quota slot of the address that created `id`, if one counts it.
    pub fn creator(&self, id: SessionId) -> Option<u32> {
        let creator = self.leases.get(&id)?.creator;
        (creator != NO_CREATOR).then_some(creator)
    }

    /// How many KeepAlives are held.
    pub fn holding(&self) -> usize {
        self.holding
    }

    /// Sets the timer of `id` for `due`, replacing the one it had.
    pub fn arm(&mut self, id: SessionId, due: Millis) {
        let Some(lease) = self.leases.get_mut(&id) else {
            return;
        };
        self.timers.remove(&(lease.timer, id));
        lease.timer = due;
        self.timers.insert((due, id));
    }

    /// Whether the timer of `id` is set.
    pub fn is_armed(&self, id: SessionId) -> bool {
        self.leases.get(&id).is_some_and(|l| l.timer != UNARMED)
    }

    /// When the earliest timer is due.
    pub fn next_due(&self) -> Option<Millis> {
        self.timers.first().map(|(due, _)| *due)
    }

    /// Unsets and returns a timer due at `now`, earliest first.
    pub fn pop_due(&mut self, now: Millis) -> Option<SessionId> {
        let (due, id) = *self.timers.first()?;
        if due > now {
            return None;
        }
        self.timers.pop_first();
        if let Some(lease) = self.leases.get_mut(&id) {
            lease.timer = UNARMED;
        }
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::at;

    // FO-2: recovered leases are what starting and arming each makes.
    #[test]
    fn recovered_leases_are_those_started_and_armed_one_by_one() {
        let sessions = [(3u128, 12), (1, 30), (2, 12)]
            .map(|(n, s)| (SessionId::from_u128(n), Span::from(Duration::from_secs(s))));
        let now = at(5_000);
        let mut one_by_one: Leases<()> = Leases::default();
        for (id, duration) in sessions {
            let expires = one_by_one.start(id, duration, now);
            one_by_one.arm(id, expires);
        }
        let mut whole: Leases<()> = Leases::recovered(sessions, now);
        for (id, _) in sessions {
            assert_eq!(whole.expires_at(id), one_by_one.expires_at(id));
            assert!(whole.is_armed(id));
            assert_eq!(whole.creator(id), one_by_one.creator(id));
        }
        assert_eq!(whole.next_due(), one_by_one.next_due());
        let due = |leases: &mut Leases<()>| {
            std::iter::from_fn(|| leases.pop_due(at(60_000))).collect::<Vec<_>>()
        };
        assert_eq!(due(&mut whole), due(&mut one_by_one));
        assert_eq!(whole.holding(), 0);
    }

    // LEASE-2, LEASE-3: a renewal moves the end, not an earlier timer.
    #[test]
    fn a_renewal_leaves_a_timer_set_earlier_where_it_is() {
        let mut leases = leases_of(1);
        leases.arm(id(), at(12_000));
        assert_eq!(leases.renew(id(), at(6_000), true), Some(at(18_000)));
        assert_eq!(leases.next_due(), Some(at(12_000)));
    }

    // LEASE-3: a timer never comes after the lease's end.
    #[test]
    fn a_renewal_sets_an_unset_or_later_timer_for_the_leases_end() {
        let mut leases = leases_of(1);
        assert_eq!(leases.renew(id(), at(1_000), true), Some(at(13_000)));
        assert_eq!(leases.next_due(), Some(at(13_000)));
        leases.arm(id(), at(50_000));
        assert_eq!(leases.renew(id(), at(2_000), false), Some(at(13_000)));
        assert_eq!(leases.next_due(), Some(at(13_000)));
    }

    // LEASE-3
    #[test]
    fn a_timer_that_came_early_is_set_again_for_the_leases_end() {
        let mut leases = leases_of(1);
        leases.arm(id(), at(12_000));
        leases.renew(id(), at(6_000), true);
        assert_eq!(leases.pop_due(at(12_000)), Some(id()));
        assert!(leases.rearm_if_early(id(), Duration::from_secs(1), at(12_000)));
        assert_eq!(leases.next_due(), Some(at(18_000)));
    }

    // KA-2: with a KeepAlive held, what is due is its answer.
    #[test]
    fn a_timer_that_came_early_is_set_again_for_the_held_answer() {
        let mut leases = leases_of(1);
        leases.arm(id(), at(12_000));
        leases.renew(id(), at(6_000), true);
        leases.hold(id(), ());
        assert_eq!(leases.pop_due(at(12_000)), Some(id()));
        assert!(leases.rearm_if_early(id(), Duration::from_secs(1), at(12_000)));
        assert_eq!(leases.next_due(), Some(at(17_000)));
    }

    // SES-6: a timer whose time has come is handled, not put off.
    #[test]
    fn a_timer_whose_time_has_come_is_not_set_again() {
        let mut leases = leases_of(1);
        leases.arm(id(), at(12_000));
        assert_eq!(leases.pop_due(at(12_000)), Some(id()));
        assert!(!leases.rearm_if_early(id(), Duration::from_secs(1), at(12_000)));
        assert!(!leases.is_armed(id()));
        assert!(!leases.rearm_if_early(SessionId::from_u128(9), Duration::ZERO, at(0)));
    }

    fn id() -> SessionId {
        SessionId::from_u128(1)
    }

    fn leases_of(n: u128) -> Leases {
        let mut leases: Leases = Leases::default();
        for i in 1..=n {
            leases.start(
                SessionId::from_u128(i),
                Duration::from_secs(12).into(),
                at(0),
            );
        }
        leases
    }

    // LEASE-3
    #[test]
    fn timers_come_due_earliest_first_and_only_once_their_time_has_come() {
        let mut leases = leases_of(3);
        let id = SessionId::from_u128;
        leases.arm(id(1), at(30));
        leases.arm(id(2), at(10));
        leases.arm(id(3), at(20));
        assert_eq!(leases.next_due(), Some(at(10)));
        assert_eq!(leases.pop_due(at(9)), None);
        assert_eq!(leases.pop_due(at(25)), Some(id(2)));
        assert_eq!(leases.pop_due(at(25)), Some(id(3)));
        assert_eq!(leases.pop_due(at(25)), None);
        assert_eq!(leases.next_due(), Some(at(30)));
    }

    // LEASE-3
    #[test]
    fn arming_again_replaces_the_previous_time() {
        let mut leases = leases_of(1);
        leases.arm(id(), at(10));
        leases.arm(id(), at(50));
        assert_eq!(leases.pop_due(at(20)), None);
        assert_eq!(leases.pop_due(at(50)), Some(id()));
        assert!(!leases.is_armed(id()));
    }

    // LEASE-3
    #[test]
    fn the_timer_of_an_ended_session_never_comes_due() {
        let mut leases = leases_of(1);
        leases.arm(id(), at(10));
        leases.remove(id());
        assert_eq!(leases.next_due(), None);
        assert_eq!(leases.pop_due(at(100)), None);
    }

    // LEASE-1
    #[test]
    fn a_new_lease_runs_one_duration_from_its_start() {
        let mut leases: Leases = Leases::default();
        assert_eq!(
            leases.start(id(), Duration::from_secs(12).into(), at(1_000)),
            at(13_000)
        );
        assert_eq!(
            leases.remaining(id(), at(4_000)),
            Some(Duration::from_secs(9))
        );
    }

    // LEASE-2
    #[test]
    fn extending_never_moves_a_lease_backward() {
        let mut leases: Leases = Leases::default();
        leases.start(id(), Duration::from_secs(10).into(), at(5_000));
        assert_eq!(leases.extend(id(), at(1_000)), Some(at(15_000)));
        assert_eq!(leases.extend(id(), at(8_000)), Some(at(18_000)));
    }

    // KA-2
    #[test]
    fn a_held_keepalive_is_answered_a_margin_before_expiry() {
        let mut leases: Leases = Leases::default();
        leases.start(id(), Duration::from_secs(12).into(), at(0));
        assert_eq!(
            leases.answer_held_at(id(), Duration::from_secs(2)),
            Some(at(10_000))
        );
    }

    // KA-2, LEASE-5
    #[test]
    fn the_margin_is_at_least_a_twentieth_of_a_long_lease() {
        let mut leases: Leases = Leases::default();
        leases.start(id(), Duration::from_secs(60).into(), at(0));
        assert_eq!(
            leases.answer_held_at(id(), Duration::from_millis(100)),
            Some(at(57_000))
        );
    }

    // KA-2
    #[test]
    fn the_margin_is_at_most_a_quarter_of_a_short_lease() {
        let mut leases: Leases = Leases::default();
        leases.start(id(), Duration::from_millis(1_000).into(), at(0));
        assert_eq!(
            leases.answer_held_at(id(), Duration::from_secs(2)),
            Some(at(750))
        );
    }

    // QUOTA-2: the creator's quota slot rides in the lease, in room it
    // has spare: a lease stays 32 bytes, and a lease started again keeps
    // the slot it had.
    #[test]
    fn a_lease_keeps_its_creators_slot_in_32_bytes() {
        assert_eq!(std::mem::size_of::<Lease<()>>(), 32);
        let mut leases: Leases = Leases::default();
        assert_eq!(leases.creator(id()), None);
        assert_eq!(leases.set_creator(id(), 3), None);
        assert_eq!(leases.creator(id()), None, "no lease, nothing recorded");
        leases.start(id(), Duration::from_secs(12).into(), at(0));
        assert_eq!(leases.creator(id()), None);
        assert_eq!(leases.set_creator(id(), 3), None);
        leases.start(id(), Duration::from_secs(12).into(), at(5));
        assert_eq!(leases.creator(id()), Some(3));
        assert_eq!(leases.set_creator(id(), 4), Some(3), "the slot replaced");
        leases.remove(id());
        assert_eq!(leases.creator(id()), None);
    }
}
