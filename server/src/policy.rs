//! The master's soft-state policy: what a session's timer means when it
//! fires, and what a new master owes the state it takes over.
//!
//! Pure decisions over the lease table, the durable state and `now`, in
//! the shape of etcd's lessor: the master task reads the clock and the
//! depth of its queues, asks, and carries out the answer. Nothing here
//! knows of a runtime, so the cell's newly elected master will call the
//! same [`promote`] a restarted master does.

use std::time::Duration;

use leasehold_protocol::SessionId;

use crate::lease::Leases;
use crate::state::State;
use crate::time::Millis;

/// Whether the KeepAlive held for `id` is due its answer at `now`: a
/// margin before its lease ends (`KA-2`).
pub(crate) fn held_answer_due<H>(
    leases: &Leases<H>,
    id: SessionId,
    margin: Duration,
    now: Millis,
) -> bool {
    leases.held(id).is_some() && leases.due(id, margin).is_some_and(|due| due <= now)
}

/// What a session's timer asks for once any held KeepAlive due an answer
/// has had it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionDue {
    /// Nothing: the timer is set again already, or the session is gone.
    Nothing,
    /// Set the timer for this time (a held KeepAlive's answer, or the
    /// lease's end).
    Arm(Millis),
    /// Extend the lease by one more full lease, once (`FO-2`).
    OneMoreLease,
    /// The lease has run out: end the session (`SES-6`).
    Expire,
}

/// What the timer of `id` asks for at `now`.
///
/// `caught_up` is the time by which the master has read every KeepAlive
/// that reached it: a lease that ended after it may yet be renewed by a
/// KeepAlive that came in time (`SES-6`), so its timer is set again for
/// as far past `now` as its end is past `caught_up`. `backlog` is how
/// many requests are waiting for the master; `unheard`
/// says no KeepAlive has named this recovered session since the master
/// started. Together they grant the one extra lease of `FO-2`: a master
/// catching up after a restart may not yet have read the KeepAlive that
/// would have kept the session.
pub(crate) fn session_due<H>(
    leases: &Leases<H>,
    id: SessionId,
    margin: Duration,
    now: Millis,
    caught_up: Millis,
    backlog: usize,
    unheard: bool,
) -> SessionDue {
    if leases.is_armed(id) {
        return SessionDue::Nothing;
    }
    match leases.due(id, margin) {
        Some(due) if due > now => SessionDue::Arm(due),
        Some(due) if due > caught_up => SessionDue::Arm(now + due.since(caught_up)),
        Some(_) if backlog > 0 && unheard => SessionDue::OneMoreLease,
        Some(_) => SessionDue::Expire,
        None => SessionDue::Nothing,
    }
}

/// What a master that takes over a state owes it (`FO-2`..`FO-4`).
#[derive(Debug)]
pub(crate) struct Promotion<H> {
    /// Every session: each gets the fail-over event and must acknowledge
    /// it (`FO-5`).
    pub(crate) sessions: Vec<SessionId>,
    /// A full lease for every session from now, the longest the previous
    /// master may have granted (`FO-2`), its timer set for the lease's end.
    pub(crate) leases: Leases<H>,
    /// Lock-delays still running, and when each ends: no sooner than it
    /// would have under the previous master (`FO-3`).
    pub(crate) lock_delays: Vec<(String, Millis)>,
    /// Locks whose line can move now: a waiter left it, or its lock-delay
    /// ended, and the previous master stopped before it logged the grant
    /// (`LOCK-5`).
    pub(crate) lines: Vec<String>,
}

/// What taking over `state` at `now` requires, as etcd's `Promote` extends
/// every lease when a member becomes leader.
pub(crate) fn promote<H>(state: &State, now: Millis) -> Promotion<H> {
    let sessions: Vec<SessionId> = state.sessions().map(|s| s.id).collect();
    let leases = Leases::recovered(state.sessions().map(|s| (s.id, s.lease)), now);
    let mut lock_delays = Vec::new();
    let mut lines = Vec::new();
    for (key, lock) in state.locks().iter() {
        if let Some(until) = lock.delay_until.filter(|until| *until > now) {
            lock_delays.push((key.clone(), until));
        }
        if state.line_can_move(key, now) {
            lines.push(key.clone());
        }
    }
    Promotion {
        sessions,
        leases,
        lock_delays,
        lines,
    }
}

#[cfg(test)]
mod tests {
    use crate::state::command;
    use leasehold_protocol::{Behavior, LockMode, SessionSecret};

    use super::*;
    use crate::session::EndCause;
    use crate::state::{Bounds, Command, NewSession};
    use crate::time::at;

    const MARGIN: Duration = Duration::from_secs(2);

    fn id(n: u128) -> SessionId {
        SessionId::from_u128(n)
    }

    /// One session's lease of 12 s, granted at 0.
    fn one_lease() -> Leases<&'static str> {
        let mut leases = Leases::default();
        leases.start(id(1), Duration::from_secs(12).into(), at(0));
        leases
    }

    // KA-2
    #[test]
    fn a_held_keepalive_is_due_its_answer_a_margin_before_the_lease_ends() {
        let mut leases = one_lease();
        assert!(!held_answer_due(&leases, id(1), MARGIN, at(10_000)));
        leases.hold(id(1), "held");
        assert!(!held_answer_due(&leases, id(1), MARGIN, at(9_999)));
        assert!(held_answer_due(&leases, id(1), MARGIN, at(10_000)));
    }

    // LEASE-3
    #[test]
    fn a_timer_that_fired_early_is_set_again_for_the_lease_end() {
        let leases = one_lease();
        assert_eq!(
            session_due(&leases, id(1), MARGIN, at(11_999), at(11_999), 0, false),
            SessionDue::Arm(at(12_000))
        );
    }

    // LEASE-3
    #[test]
    fn a_timer_set_again_already_asks_for_nothing() {
        let mut leases = one_lease();
        leases.arm(id(1), at(20_000));
        assert_eq!(
            session_due(&leases, id(1), MARGIN, at(12_000), at(12_000), 5, true),
            SessionDue::Nothing
        );
    }

    // SES-6
    #[test]
    fn a_lease_that_ran_out_ends_its_session() {
        let leases = one_lease();
        assert_eq!(
            session_due(&leases, id(1), MARGIN, at(12_000), at(12_000), 0, false),
            SessionDue::Expire
        );
    }

    // SES-6
    #[test]
    fn a_lease_that_ran_out_waits_for_the_keepalives_that_arrived_before_its_end() {
        let leases = one_lease();
        // The master has read every KeepAlive that arrived by 11.5 s: one
        // for this session may still wait. Look again half a second on.
        assert_eq!(
            session_due(&leases, id(1), MARGIN, at(12_100), at(11_500), 0, false),
            SessionDue::Arm(at(12_600))
        );
        // Once it has read those that arrived by the lease's end, it ends.
        assert_eq!(
            session_due(&leases, id(1), MARGIN, at(12_600), at(12_000), 0, false),
            SessionDue::Expire
        );
    }

    // FO-2
    #[test]
    fn an_unheard_recovered_session_gets_one_more_lease_while_requests_wait() {
        let leases = one_lease();
        assert_eq!(
            session_due(&leases, id(1), MARGIN, at(12_000), at(12_000), 1, true),
            SessionDue::OneMoreLease
        );
    }

    // FO-2
    #[test]
    fn an_unheard_recovered_session_ends_with_its_lease_when_no_request_waits() {
        let leases = one_lease();
        assert_eq!(
            session_due(&leases, id(1), MARGIN, at(12_000), at(12_000), 0, true),
            SessionDue::Expire
        );
    }

    // FO-2
    #[test]
    fn a_session_a_keepalive_named_ends_with_its_lease_even_while_requests_wait() {
        let leases = one_lease();
        assert_eq!(
            session_due(&leases, id(1), MARGIN, at(12_000), at(12_000), 100, false),
            SessionDue::Expire
        );
    }

    // LEASE-3
    #[test]
    fn the_timer_of_an_ended_session_asks_for_nothing() {
        let mut leases = one_lease();
        leases.remove(id(1));
        assert_eq!(
            session_due(&leases, id(1), MARGIN, at(12_000), at(12_000), 0, false),
            SessionDue::Nothing
        );
    }

    fn create(s: &mut State, n: u128, lease: Duration, lock_delay: Duration) {
        let command = Command::CreateSession(NewSession {
            id: id(n),
            secret: SessionSecret::from_bytes([n as u8; 16]),
            name: format!("s{n}"),
            lease: Some(lease),
            lock_delay: Some(lock_delay),
            behavior: Behavior::Release,
            checks: Vec::new(),
        });
        s.apply(command, at(0)).0.unwrap();
    }

    fn acquire(s: &mut State, n: u128, key: &str, wait: bool, now: Millis) {
        let command = Command::Acquire(command::Acquire {
            key: key.into(),
            session: id(n),
            mode: LockMode::Exclusive,
            contents: None,
            transient: false,
            wait,
        });
        s.apply(command, now).0.unwrap();
    }

    // FO-2
    #[test]
    fn promotion_gives_every_session_a_full_lease_of_its_own_length_from_now() {
        let mut s = State::new(Bounds::from(&crate::Config::default()));
        create(&mut s, 1, Duration::from_secs(12), Duration::ZERO);
        create(&mut s, 2, Duration::from_secs(30), Duration::ZERO);
        let promotion = promote::<()>(&s, at(50_000));
        assert_eq!(promotion.sessions, [id(1), id(2)]);
        let leases = promotion.leases;
        assert_eq!(leases.expires_at(id(1)), Some(at(62_000)));
        assert_eq!(leases.expires_at(id(2)), Some(at(80_000)));
        assert_eq!(
            leases.next_due(),
            Some(at(62_000)),
            "timers set for the ends"
        );
    }

    // FO-3, FO-4
    #[test]
    fn promotion_keeps_running_lock_delays_and_cancels_every_wait() {
        let mut s = State::new(Bounds::from(&crate::Config::default()));
        create(&mut s, 1, Duration::from_secs(12), Duration::from_secs(5));
        create(&mut s, 2, Duration::from_secs(12), Duration::ZERO);
        acquire(&mut s, 1, "delayed", false, at(1_000));
        acquire(&mut s, 1, "over", false, at(1_000));
        acquire(&mut s, 2, "delayed", true, at(1_000));
        let end = Command::EndSession(command::EndSession {
            id: id(1),
            cause: EndCause::Expired,
        });
        s.apply(end, at(2_000)).0.unwrap();
        // Session 1's lock-delay on both keys runs to 7 s; "over" has no
        // waiter, and at 7 s the delay of both is over.
        let running = promote::<()>(&s, at(6_999));
        assert_eq!(running.lock_delays.len(), 2);
        assert!(running
            .lock_delays
            .iter()
            .all(|(_, until)| *until == at(7_000)));
        assert_eq!(promote::<()>(&s, at(7_000)).lock_delays, []);
    }

    // LOCK-5, FO-3: a lock-delay that ended while no master ran leaves a
    // line that can move; the new master is told of it, so its waiters do
    // not wait for a holder that will never let go.
    #[test]
    fn promotion_names_every_line_that_can_move_now() {
        let mut s = State::new(Bounds::from(&crate::Config::default()));
        create(&mut s, 1, Duration::from_secs(12), Duration::from_secs(5));
        create(&mut s, 2, Duration::from_secs(12), Duration::ZERO);
        acquire(&mut s, 1, "delayed", false, at(1_000));
        acquire(&mut s, 2, "delayed", true, at(1_000));
        let end = Command::EndSession(command::EndSession {
            id: id(1),
            cause: EndCause::Expired,
        });
        s.apply(end, at(2_000)).0.unwrap();
        assert!(promote::<()>(&s, at(6_999)).lines.is_empty());
        assert_eq!(promote::<()>(&s, at(7_000)).lines, ["delayed"]);
    }
}
