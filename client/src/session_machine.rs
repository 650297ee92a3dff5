//! The client's session states as a pure machine (SPEC "Client session
//! states"): it takes what happened and the time, and says what to do.
//!
//! Normally exactly one KeepAlive is outstanding and the master holds it;
//! its reply renews the local lease and the next one goes out at once. When
//! the local lease runs out the session is in jeopardy: the held request is
//! left in flight (the link may only be slow) while probes that the master
//! answers at once go out one at a time, with backoff, until one succeeds
//! (safe, then normal) or the grace period ends (expired). A held request
//! whose answer is overdue (its master stopped, or cut off) is not waited
//! for that long: probes go out while the session is still normal (`CS-9`).
//!
//! Nothing here reads a clock or does I/O: the keeper task
//! (`keepalive.rs`) feeds it replies and the time, executes the
//! [`Action`]s it returns, and sleeps until [`SessionMachine::deadline`].
//! So every transition can be tested as a table, without a runtime.

use std::time::Duration;

use leasehold_protocol::backoff::retry_delay;
use leasehold_protocol::hold::hold_margin;
use leasehold_protocol::{Event, EventKind, LeaseGrant};
use tokio::time::Instant;

use crate::config::{MAX_IN_FLIGHT, OVERDUE_AFTER_AT_LEAST};
use crate::lease::{local_expiry, MAX_GRANT};

/// Where a session stands, as far as this client can tell (`CS-1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionState {
    /// The local lease is valid: the master holds the session.
    Normal,
    /// The local lease ran out without a reply. The master may or may not
    /// still hold the session; the grace period is running.
    Jeopardy,
    /// A KeepAlive succeeded during the grace period. Reported on the way
    /// back to `Normal`, which follows at once.
    Safe,
    /// A new master took over while the local lease was valid: the
    /// session, its locks and sequencers survive; subscriptions were made
    /// again and their streams report `EventsLost`, so re-read what you
    /// cache. Reported on the way back to `Normal`, which follows at once
    /// (`FO-6`).
    Failover,
    /// The grace period ran out, or the master said the session is gone:
    /// whatever relied on it may already be someone else's. Final.
    Expired,
    /// This client closed or detached the session (`CS-8`): it gave the
    /// session up, nothing was taken from it. Final.
    Closed,
}

impl SessionState {
    /// The lower-case name used by the CLI and in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Normal => "normal",
            SessionState::Jeopardy => "jeopardy",
            SessionState::Safe => "safe",
            SessionState::Failover => "failover",
            SessionState::Expired => "expired",
            SessionState::Closed => "closed",
        }
    }

    /// Whether no state follows: `Expired` or `Closed`.
    pub fn is_final(self) -> bool {
        matches!(self, SessionState::Expired | SessionState::Closed)
    }
}

/// What a KeepAlive came back with, sorted by what the machine does about
/// it.
#[derive(Debug)]
pub(crate) enum Reply {
    /// The master answered: its epoch, the lease it granted and events.
    /// `acked_seq` is what the answered KeepAlive acknowledged: the master
    /// holds that acknowledgement now.
    /// `margin` is the one announced by the master that answered
    /// (`Welcome`'s `limits.keepalive_margin_ms`).
    Granted {
        epoch: u64,
        lease: LeaseGrant,
        events: Vec<Event>,
        acked_seq: u64,
        margin: Duration,
    },
    /// The master says the session is gone (`CS-6`).
    Gone,
    /// The master runs another epoch (`KA-6`).
    WrongEpoch { current: u64 },
    /// Anything else: a timeout, a lost connection, a refusal to retry.
    Failed,
}

/// What the keeper task must do, in the order given.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// Send a KeepAlive naming `epoch` and acknowledging events up to
    /// `acked_seq`; `hold` asks the master to hold it (`KA-1`).
    Send {
        hold: bool,
        epoch: u64,
        acked_seq: u64,
    },
    /// Report this state to the application (`CS-7`).
    Enter(SessionState),
    /// The local lease now ends at this instant.
    Renewed(Instant),
    /// Forget every KeepAlive still in flight: a reply renewed the lease.
    ForgetInFlight,
    /// The connection may be dead: new requests should go out on a new
    /// one unless it delivered something lately (`CS-2`).
    AbandonIfSilent,
    /// Hand these events (new ones, in order) to the application (`EV-7`).
    Deliver(Vec<Event>),
    /// A new master took over: make the subscriptions again (`FO-6`).
    Resubscribe,
    /// The session is over for this client; the task ends.
    Stop,
}

/// The session as this client sees it, and its KeepAlive schedule.
#[derive(Debug)]
pub(crate) struct SessionMachine {
    state: SessionState,
    epoch: u64,
    local_expiry: Instant,
    grace: Duration,
    drift: f64,
    grace_end: Option<Instant>,
    /// When the next KeepAlive goes out, if one is due.
    send_at: Option<Instant>,
    /// Whether the next one asks to be held.
    hold: bool,
    /// Whether the KeepAlive in flight asked for an answer at once because
    /// the one before came back late (`KA-9`).
    hurried: bool,
    failures: u32,
    probes: u32,
    in_flight: usize,
    /// KeepAlives in flight that asked for an answer at once. In jeopardy
    /// one is enough: a master that is merely slow answers it in the end,
    /// and more would only add to what it has to catch up on.
    unheld: usize,
    /// The highest event sequence number delivered, acknowledged on the
    /// next KeepAlive.
    delivered: u64,
    /// The epoch and the acknowledgement of the last KeepAlive answered:
    /// what the master is known to hold.
    acknowledged: (u64, u64),
    /// Draws this session's waits between retries (`CS-2`), so that the
    /// sessions of a master that crashed do not all come back at once.
    salt: u64,
    /// When a held KeepAlive sent from now on is overdue, as far as the
    /// last grant tells (`CS-9`); `None` before one has been heard.
    answer_due: Option<Instant>,
    /// When the held KeepAlive in flight is overdue.
    overdue_at: Option<Instant>,
    /// Whether one was overdue, with no grant heard since: probes go out
    /// as in jeopardy, while the session stays normal (`CS-9`).
    overdue: bool,
}

impl SessionMachine {
    /// A session that was just created (or attached to) under `epoch`,
    /// whose local lease ends at `local_expiry`; the first KeepAlive goes
    /// out at `now`. `salt` differs between sessions (their ids): it
    /// draws the waits between retries.
    pub(crate) fn new(
        epoch: u64,
        local_expiry: Instant,
        grace: Duration,
        drift: f64,
        now: Instant,
        salt: u64,
    ) -> Self {
        SessionMachine {
            state: SessionState::Normal,
            epoch,
            local_expiry,
            grace,
            drift,
            grace_end: None,
            send_at: Some(now),
            hold: true,
            hurried: false,
            failures: 0,
            probes: 0,
            in_flight: 0,
            unheld: 0,
            delivered: 0,
            acknowledged: (epoch, 0),
            salt,
            answer_due: None,
            overdue_at: None,
            overdue: false,
        }
    }

    /// A master answered at `answered` with `lease`, keeping `margin` before
    /// a lease's end (`KA-2`): the held KeepAlive that follows is answered
    /// once the master's lease, which ended `remaining` after the answer
    /// left, is `m` from its end. The answer is overdue half of `m` (at
    /// least [`OVERDUE_AFTER_AT_LEAST`]) after that (`CS-9`). Counted from
    /// the answer's arrival, not from the local lease, so that the drift
    /// the local lease allows for is not taken from the master's time to
    /// answer. A master whose clock runs slower than this one answers
    /// later by this clock, but since `m ≥ lease / 20` only one slower by
    /// over 2.6%, past any drift allowed for, answers past the half margin.
    pub(crate) fn expect_answers(
        &mut self,
        answered: Instant,
        lease: LeaseGrant,
        margin: Duration,
    ) {
        let remaining = Duration::from_millis(lease.remaining_ms).min(MAX_GRANT);
        let m = hold_margin(margin, remaining);
        let late = (m / 2).max(OVERDUE_AFTER_AT_LEAST);
        self.answer_due = Some(answered + (remaining - m) + late);
    }

    #[cfg(test)]
    pub(crate) fn state(&self) -> SessionState {
        self.state
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The highest event sequence number delivered.
    pub(crate) fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Whether the master may not hold the acknowledgement of every event
    /// delivered, under the epoch last heard: a close must send it before
    /// its releases, which a new master refuses until its fail-over event
    /// is acknowledged (`FO-5`, `CS-8`).
    pub(crate) fn unacknowledged(&self) -> bool {
        self.acknowledged != (self.epoch, self.delivered)
    }

    #[cfg(test)]
    pub(crate) fn local_expiry(&self) -> Instant {
        self.local_expiry
    }

    /// The next instant at which [`SessionMachine::on_tick`] has something
    /// to do, if any.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let normal = self.state == SessionState::Normal;
        let expiry = normal.then_some(self.local_expiry);
        let overdue = self.overdue_at.filter(|_| normal);
        [expiry, self.grace_end, overdue, self.send_at]
            .into_iter()
            .flatten()
            .min()
    }

    /// The time is `now`: does the first thing that is due, in this order:
    /// the local lease running out (`CS-2`), the grace period ending
    /// (`CS-3`), a held KeepAlive overdue (`CS-9`), a KeepAlive to send.
    /// One at a time, so that a reply that arrived meanwhile is heard
    /// before the next.
    pub(crate) fn on_tick(&mut self, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.state == SessionState::Normal && now >= self.local_expiry {
            self.enter(SessionState::Jeopardy, &mut actions); // CS-2
            self.grace_end = Some(self.local_expiry + self.grace);
            actions.push(Action::AbandonIfSilent);
            self.hold = false;
            self.probes = 0;
            self.send_at = Some(now);
        } else if self.grace_end.is_some_and(|end| now >= end) {
            self.enter(SessionState::Expired, &mut actions); // CS-3
            actions.push(Action::Stop);
        } else if self.state == SessionState::Normal && self.overdue_at.is_some_and(|at| now >= at)
        {
            // CS-9: the held request stays in flight, as in jeopardy, and
            // probes go out on a connection that still delivers frames,
            // or on a new one.
            self.overdue_at = None;
            self.overdue = true;
            actions.push(Action::AbandonIfSilent);
            self.hold = false;
            self.probes = 0;
            self.send_at = Some(now);
        } else if self.send_at.is_some_and(|at| now >= at) {
            self.send_at = None;
            let probing = self.probing() && self.unheld > 0;
            if self.in_flight < MAX_IN_FLIGHT && !probing {
                if self.hold {
                    self.overdue_at = self.answer_due.filter(|due| *due > now);
                } else {
                    self.unheld += 1;
                }
                self.in_flight += 1;
                actions.push(Action::Send {
                    hold: self.hold,
                    epoch: self.epoch,
                    acked_seq: self.delivered,
                });
            }
            if self.probing() {
                // Keep probing until a reply comes or grace ends.
                self.probes += 1;
                self.send_at = Some(now + retry_delay(self.probes, self.salt));
            }
        }
        actions
    }

    /// A KeepAlive sent at `sent` (asking to be held or not) came back
    /// with `reply`, at `now`.
    pub(crate) fn on_reply(
        &mut self,
        sent: Instant,
        held: bool,
        reply: Reply,
        now: Instant,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        self.in_flight = self.in_flight.saturating_sub(1);
        if held {
            // Back, whatever it brought: nothing held is awaited (CS-9).
            self.overdue_at = None;
        } else {
            self.unheld = self.unheld.saturating_sub(1);
        }
        match reply {
            // A late reply from a master older than the one already heard
            // from proves nothing and carries stale events.
            Reply::Granted { epoch, .. } if epoch < self.epoch => {}
            Reply::Granted {
                epoch,
                lease,
                events,
                acked_seq,
                margin,
            } => {
                // A new master numbers its events afresh.
                if epoch != self.epoch {
                    self.delivered = 0;
                }
                // Replies may come back out of order; within an epoch,
                // acknowledgements only grow.
                self.acknowledged = self.acknowledged.max((epoch, acked_seq));
                self.epoch = epoch;
                // Events are news whether or not the lease is.
                let failover = self.deliver(events, &mut actions);
                let expiry = local_expiry(sent, lease, self.drift);
                // A reply that arrives after the lease it granted has run
                // out proves nothing about now (CS-5).
                if expiry > now {
                    self.expect_answers(now, lease, margin);
                    self.overdue = false;
                    self.overdue_at = None;
                    self.local_expiry = self.local_expiry.max(expiry);
                    actions.push(Action::Renewed(self.local_expiry));
                    if self.state == SessionState::Jeopardy {
                        self.enter(SessionState::Safe, &mut actions); // CS-4
                        self.enter(SessionState::Normal, &mut actions);
                        self.grace_end = None;
                    } else if failover && self.state == SessionState::Normal {
                        self.enter(SessionState::Failover, &mut actions); // FO-6
                        self.enter(SessionState::Normal, &mut actions);
                    }
                    actions.push(Action::ForgetInFlight);
                    self.in_flight = 0;
                    self.unheld = 0;
                    self.failures = 0;
                    // KA-9: a request delayed on its way leaves a local
                    // lease shorter than the master's by the delay, and the
                    // master would hold the next one until its own expiry
                    // less the margin: past the local lease. Ask for an
                    // answer at once instead, but never twice in a row.
                    let remaining = Duration::from_millis(lease.remaining_ms).min(MAX_GRANT);
                    let short = expiry < now + remaining - remaining / 20;
                    self.hurried = short && !self.hurried;
                    self.hold = !self.hurried;
                    self.send_at = Some(now); // KA-1
                } else if self.state == SessionState::Normal && self.in_flight == 0 {
                    self.hold = false;
                    self.send_at = Some(now);
                }
            }
            Reply::Gone => {
                self.enter(SessionState::Expired, &mut actions); // CS-6
                actions.push(Action::Stop);
            }
            Reply::WrongEpoch { current } => {
                self.epoch = current;
                self.delivered = 0;
                self.hold = false;
                self.send_at = Some(now);
            }
            Reply::Failed => {
                self.hold = false;
                // In jeopardy, probes go out on their own schedule.
                if self.state == SessionState::Normal
                    && self.send_at.is_none()
                    && self.in_flight == 0
                {
                    self.failures += 1;
                    self.send_at = Some(now + retry_delay(self.failures, self.salt));
                }
            }
        }
        actions
    }

    /// The client opened a new connection at `now`. A KeepAlive waiting out
    /// a backoff after failures goes at once: the failures were the old
    /// connection's (a master that stopped, or one cut off), and after a
    /// fail-over the new master is what a session in trouble needs to
    /// reach first (`CS-2`).
    pub(crate) fn on_connected(&mut self, now: Instant) {
        let backing_off = match self.state {
            SessionState::Normal if self.overdue => self.probes > 0 && self.unheld == 0,
            SessionState::Normal => self.failures > 0 && self.in_flight == 0,
            SessionState::Jeopardy => self.probes > 0 && self.unheld == 0,
            _ => false,
        };
        if backing_off && self.send_at.is_some_and(|at| at > now) {
            self.send_at = Some(now);
        }
    }

    /// The session was closed or detached by this client (`CS-8`).
    pub(crate) fn on_close(&mut self) -> Vec<Action> {
        let mut actions = Vec::new();
        // Expired is final: a session already lost is not given up (CS-8).
        if self.state != SessionState::Expired {
            self.enter(SessionState::Closed, &mut actions);
        }
        actions.push(Action::Stop);
        actions
    }

    /// The events not delivered yet, each once and in order: ones sent
    /// again because their acknowledgement was lost are skipped (`EV-7`).
    /// Says whether a fail-over event was among them.
    fn deliver(&mut self, events: Vec<Event>, actions: &mut Vec<Action>) -> bool {
        let mut fresh = Vec::new();
        let mut failover = false;
        for event in events {
            if event.seq > self.delivered {
                self.delivered = event.seq;
                failover |= matches!(event.kind, EventKind::Failover { .. });
                fresh.push(event);
            }
        }
        if !fresh.is_empty() {
            actions.push(Action::Deliver(fresh));
        }
        if failover {
            actions.push(Action::Resubscribe);
        }
        failover
    }

    /// Whether KeepAlives go out as probes, one unheld at a time on the
    /// backoff's schedule: in jeopardy (`CS-2`), or with a held one
    /// overdue (`CS-9`).
    fn probing(&self) -> bool {
        self.state == SessionState::Jeopardy || self.overdue
    }

    fn enter(&mut self, state: SessionState, actions: &mut Vec<Action>) {
        if state != self.state {
            self.state = state;
            actions.push(Action::Enter(state));
        }
    }
}

#[cfg(test)]
mod tests {
    //! Every transition of SPEC's state diagram, and the KeepAlive schedule
    //! around it, as tables: inputs and the time in, actions out. No
    //! runtime, no sleeps.

    use super::*;
    use SessionState::*;

    const LEASE: Duration = Duration::from_secs(12);
    const GRACE: Duration = Duration::from_secs(45);
    /// The margin the master keeps before a lease's end (`KA-2`): with a
    /// 12 s lease, `m` is this.
    const MARGIN: Duration = Duration::from_secs(2);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    const SALT: u64 = 7;

    /// The wait before retry `n` of the machine's session.
    fn wait(n: u32) -> Duration {
        retry_delay(n, SALT)
    }

    /// A session created at `t0` with a 12 s local lease, epoch 1, no drift.
    fn machine() -> (SessionMachine, Instant) {
        let t0 = Instant::now();
        (SessionMachine::new(1, t0 + LEASE, GRACE, 0.0, t0, SALT), t0)
    }

    fn grant(epoch: u64, remaining: Duration, held: Duration) -> Reply {
        Reply::Granted {
            epoch,
            lease: LeaseGrant {
                remaining_ms: remaining.as_millis() as u64,
                held_ms: held.as_millis() as u64,
            },
            events: Vec::new(),
            acked_seq: 0,
            margin: MARGIN,
        }
    }

    fn entered(actions: &[Action]) -> Vec<SessionState> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Enter(s) => Some(*s),
                _ => None,
            })
            .collect()
    }

    fn sends(actions: &[Action]) -> Vec<bool> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Send { hold, .. } => Some(*hold),
                _ => None,
            })
            .collect()
    }

    /// Sends the first (held) KeepAlive and answers it `after` later with
    /// a 12 s grant the master held for `after`.
    fn renewed_at(m: &mut SessionMachine, t0: Instant, after: Duration) -> Vec<Action> {
        assert_eq!(sends(&m.on_tick(t0)), [true]);
        m.on_reply(t0, true, grant(1, LEASE - after, after), t0 + after)
    }

    /// Lets the local lease run out with the held KeepAlive unanswered.
    fn into_jeopardy(m: &mut SessionMachine, t0: Instant) -> Instant {
        assert_eq!(sends(&m.on_tick(t0)), [true]);
        let expiry = m.local_expiry();
        assert_eq!(m.deadline(), Some(expiry));
        assert_eq!(entered(&m.on_tick(expiry)), [Jeopardy]);
        expiry
    }

    // CS-1, KA-1
    #[test]
    fn a_new_session_is_normal_and_sends_a_held_keepalive_at_once() {
        let (mut m, t0) = machine();
        assert_eq!(m.state(), Normal);
        assert_eq!(m.deadline(), Some(t0));
        let actions = m.on_tick(t0);
        assert_eq!(
            actions,
            [Action::Send {
                hold: true,
                epoch: 1,
                acked_seq: 0
            }]
        );
        // Nothing more to send: the next deadline is the local lease.
        assert_eq!(m.deadline(), Some(t0 + LEASE));
    }

    // CS-1, KA-1, LEASE-4
    #[test]
    fn a_reply_renews_the_local_lease_from_the_send_and_the_next_goes_out_at_once() {
        let (mut m, t0) = machine();
        let actions = renewed_at(&mut m, t0, ms(10_000));
        // 10 s held + 2 s remaining, counted from the send.
        assert!(actions.contains(&Action::Renewed(t0 + LEASE)));
        assert!(actions.contains(&Action::ForgetInFlight));
        assert!(entered(&actions).is_empty(), "still Normal");
        assert_eq!(m.deadline(), Some(t0 + ms(10_000)));
        assert_eq!(sends(&m.on_tick(t0 + ms(10_000))), [true]);
    }

    // CS-1
    #[test]
    fn a_session_stays_normal_up_to_the_last_instant_of_its_local_lease() {
        let (mut m, t0) = machine();
        m.on_tick(t0);
        assert!(m.on_tick(t0 + LEASE - ms(1)).is_empty());
        assert_eq!(m.state(), Normal);
    }

    // CS-2
    #[test]
    fn the_local_lease_running_out_is_jeopardy_and_a_probe_goes_out() {
        let (mut m, t0) = machine();
        m.on_tick(t0);
        let expiry = t0 + LEASE;
        let actions = m.on_tick(expiry);
        assert_eq!(
            actions,
            [Action::Enter(Jeopardy), Action::AbandonIfSilent],
            "the held KeepAlive stays in flight"
        );
        // The probe is due at once, and asks for an answer at once.
        assert_eq!(sends(&m.on_tick(expiry)), [false]);
    }

    // CS-2
    #[test]
    fn in_jeopardy_probes_go_one_at_a_time_with_backoff() {
        let (mut m, t0) = machine();
        let expiry = into_jeopardy(&mut m, t0);
        assert_eq!(sends(&m.on_tick(expiry)), [false]);
        // While the probe is unanswered no other goes out, but the
        // schedule goes on: up to 50 ms, then up to 100 ms, ...
        let first = expiry + wait(1);
        assert_eq!(m.deadline(), Some(first));
        assert!(sends(&m.on_tick(first)).is_empty());
        let second = first + wait(2);
        assert_eq!(m.deadline(), Some(second));
        // The probe fails; the next one goes out on the schedule.
        let failed = m.on_reply(expiry, false, Reply::Failed, first + ms(10));
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(sends(&m.on_tick(second)), [false]);
        assert_eq!(m.deadline(), Some(second + wait(3)));
    }

    // CS-2: each session draws its own waits, between half the step's
    // ceiling and all of it.
    #[test]
    fn sessions_draw_their_own_waits_within_the_step() {
        let t0 = Instant::now();
        let deadlines: std::collections::BTreeSet<Instant> = (0..20u64)
            .map(|salt| {
                let mut m = SessionMachine::new(1, t0 + LEASE, GRACE, 0.0, t0, salt);
                m.on_tick(t0);
                m.on_reply(t0, false, Reply::Failed, t0);
                let deadline = m.deadline().unwrap();
                assert!(deadline >= t0 + ms(25) && deadline <= t0 + ms(50));
                deadline
            })
            .collect();
        assert!(deadlines.len() > 10, "{deadlines:?}");
    }

    // CS-3
    #[test]
    fn no_reply_by_local_expiry_plus_grace_is_expired() {
        let (mut m, t0) = machine();
        let expiry = into_jeopardy(&mut m, t0);
        assert!(m.deadline().unwrap() <= expiry + GRACE);
        // Probes keep failing; the grace period ends.
        let mut now = expiry;
        while now < expiry + GRACE {
            now = m.deadline().unwrap().min(expiry + GRACE);
            let actions = m.on_tick(now);
            if sends(&actions) == [false] {
                m.on_reply(now, false, Reply::Failed, now);
            }
        }
        // The last tick at expiry + grace is the expiry.
        assert_eq!(m.state(), Expired);
    }

    // CS-3
    #[test]
    fn the_grace_period_ending_is_expired_and_stops_the_keeper() {
        let (mut m, t0) = machine();
        let expiry = into_jeopardy(&mut m, t0);
        let (now, actions) = loop {
            let now = m.deadline().unwrap();
            let actions = m.on_tick(now);
            if actions.contains(&Action::Stop) {
                break (now, actions);
            }
        };
        assert_eq!(now, expiry + GRACE);
        assert_eq!(actions, [Action::Enter(Expired), Action::Stop]);
    }

    // CS-4
    #[test]
    fn a_reply_in_jeopardy_with_a_lease_ahead_is_safe_then_normal() {
        let (mut m, t0) = machine();
        let expiry = into_jeopardy(&mut m, t0);
        m.on_tick(expiry);
        let actions = m.on_reply(expiry, false, grant(1, LEASE, ms(0)), expiry + ms(30));
        assert_eq!(entered(&actions), [Safe, Normal]);
        assert_eq!(m.state(), Normal);
        assert_eq!(m.deadline(), Some(expiry + ms(30)), "held again at once");
        assert_eq!(sends(&m.on_tick(expiry + ms(30))), [true]);
    }

    // CS-5
    #[test]
    fn a_reply_whose_lease_ran_out_before_it_arrived_changes_nothing() {
        let (mut m, t0) = machine();
        let expiry = into_jeopardy(&mut m, t0);
        // Sent at t0, granting 1 s: long over when it arrives.
        let actions = m.on_reply(t0, true, grant(1, ms(1_000), ms(0)), expiry + ms(5));
        assert!(entered(&actions).is_empty(), "{actions:?}");
        assert!(!actions.iter().any(|a| matches!(a, Action::Renewed(_))));
        assert_eq!(m.state(), Jeopardy);
    }

    // CS-5
    #[test]
    fn a_stale_reply_in_normal_sends_an_unheld_keepalive_at_once() {
        let (mut m, t0) = machine();
        m.on_tick(t0);
        let now = t0 + ms(3_000);
        let actions = m.on_reply(t0, true, grant(1, ms(1_000), ms(0)), now);
        assert!(actions.is_empty(), "{actions:?}");
        assert_eq!(m.deadline(), Some(now));
        assert_eq!(sends(&m.on_tick(now)), [false]);
    }

    // CS-6
    #[test]
    fn a_session_the_master_says_is_gone_is_expired_from_any_state() {
        for jeopardy in [false, true] {
            let (mut m, t0) = machine();
            let now = if jeopardy {
                into_jeopardy(&mut m, t0)
            } else {
                m.on_tick(t0);
                t0 + ms(5)
            };
            let actions = m.on_reply(t0, true, Reply::Gone, now);
            assert_eq!(actions, [Action::Enter(Expired), Action::Stop]);
        }
    }

    // CS-8
    #[test]
    fn closing_is_closed_not_expired() {
        let (mut m, t0) = machine();
        m.on_tick(t0);
        assert_eq!(m.on_close(), [Action::Enter(Closed), Action::Stop]);
    }

    // CS-8
    #[test]
    fn closing_in_jeopardy_is_closed() {
        let (mut m, t0) = machine();
        into_jeopardy(&mut m, t0);
        assert_eq!(m.on_close(), [Action::Enter(Closed), Action::Stop]);
    }

    // CS-3, CS-8
    #[test]
    fn closing_an_expired_session_leaves_it_expired() {
        let (mut m, t0) = machine();
        let now = into_jeopardy(&mut m, t0);
        m.on_reply(t0, true, Reply::Gone, now);
        assert_eq!(m.on_close(), [Action::Stop]);
    }

    // CS-7
    #[test]
    fn every_transition_is_reported_once_in_order() {
        let (mut m, t0) = machine();
        let mut seen = Vec::new();
        let expiry = into_jeopardy(&mut m, t0);
        seen.push(Jeopardy);
        m.on_tick(expiry);
        seen.extend(entered(&m.on_reply(
            expiry,
            false,
            grant(1, LEASE, ms(0)),
            expiry + ms(10),
        )));
        seen.extend(entered(&m.on_reply(t0, true, Reply::Gone, expiry + ms(20))));
        assert_eq!(seen, [Jeopardy, Safe, Normal, Expired]);
        // A repeated state is not news.
        let mut again = Vec::new();
        m.enter(Expired, &mut again);
        assert!(again.is_empty());
    }

    // KA-9
    #[test]
    fn a_reply_that_leaves_a_short_local_lease_makes_the_next_keepalive_unheld_once() {
        let (mut m, t0) = machine();
        m.on_tick(t0);
        // The request was delayed 3 s on its way: the local lease, counted
        // from the send, ends 3 s sooner than the master's.
        let arrived = t0 + ms(3_000);
        m.on_reply(t0, true, grant(1, LEASE, ms(0)), arrived);
        assert_eq!(sends(&m.on_tick(arrived)), [false], "not held");
        let next = arrived + ms(20);
        m.on_reply(arrived, false, grant(1, LEASE, ms(0)), next + ms(3_000));
        // Never two unheld in a row, however late the second came back.
        assert_eq!(sends(&m.on_tick(next + ms(3_000))), [true]);
    }

    // KA-9
    #[test]
    fn a_prompt_reply_keeps_the_keepalives_held() {
        let (mut m, t0) = machine();
        m.on_tick(t0);
        let arrived = t0 + ms(10);
        m.on_reply(t0, true, grant(1, LEASE, ms(0)), arrived);
        assert_eq!(sends(&m.on_tick(arrived)), [true]);
    }

    /// Answers the first KeepAlive at `t1` with a full lease and sends
    /// the held one that follows (`KA-1`). With no drift, the master
    /// answers that one at `t1 + LEASE - MARGIN`, and it is overdue half
    /// the margin later, a second before the local lease ends.
    fn holding_from(m: &mut SessionMachine, t0: Instant, t1: Instant) -> Instant {
        assert_eq!(sends(&m.on_tick(t0)), [true]);
        m.on_reply(t0, true, grant(1, LEASE, t1 - t0), t1);
        assert_eq!(sends(&m.on_tick(t1)), [true]);
        t1 + LEASE - MARGIN / 2
    }

    // CS-9
    #[test]
    fn a_held_keepalive_unanswered_half_the_margin_past_its_answer_is_overdue() {
        let (mut m, t0) = machine();
        let overdue = holding_from(&mut m, t0, t0 + ms(10));
        assert_eq!(m.deadline(), Some(overdue));
        assert!(overdue < m.local_expiry());
        assert!(m.on_tick(overdue - ms(1)).is_empty());
        let actions = m.on_tick(overdue);
        assert_eq!(
            actions,
            [Action::AbandonIfSilent],
            "still Normal, the held one left in flight"
        );
        assert_eq!(m.state(), Normal);
        assert_eq!(sends(&m.on_tick(overdue)), [false], "a probe, at once");
    }

    // CS-9
    #[test]
    fn a_held_keepalive_answered_in_time_sends_no_probe() {
        let (mut m, t0) = machine();
        let t1 = t0 + ms(10);
        let overdue = holding_from(&mut m, t0, t1);
        let answered = t1 + LEASE - MARGIN + ms(5);
        m.on_reply(t1, true, grant(1, LEASE, LEASE - MARGIN), answered);
        assert_eq!(sends(&m.on_tick(answered)), [true]);
        assert!(m.deadline().unwrap() > overdue);
        assert!(m.on_tick(overdue).is_empty());
    }

    // CS-9: as in jeopardy, one probe at a time, on the backoff's schedule.
    #[test]
    fn overdue_probes_go_one_at_a_time_with_backoff_while_normal() {
        let (mut m, t0) = machine();
        let overdue = holding_from(&mut m, t0, t0 + ms(10));
        m.on_tick(overdue);
        assert_eq!(sends(&m.on_tick(overdue)), [false]);
        let first = overdue + wait(1);
        assert_eq!(m.deadline(), Some(first));
        assert!(
            sends(&m.on_tick(first)).is_empty(),
            "one unanswered already"
        );
        m.on_reply(overdue, false, Reply::Failed, first + ms(10));
        let second = first + wait(2);
        assert_eq!(m.deadline(), Some(second));
        assert_eq!(sends(&m.on_tick(second)), [false]);
        assert_eq!(m.state(), Normal);
    }

    // CS-9, CS-1: a probe's answer renews the lease with no state reported,
    // and KeepAlives are held again.
    #[test]
    fn a_probes_answer_while_overdue_renews_quietly_and_holds_again() {
        let (mut m, t0) = machine();
        let overdue = holding_from(&mut m, t0, t0 + ms(10));
        m.on_tick(overdue);
        m.on_tick(overdue);
        let answered = overdue + ms(300);
        let actions = m.on_reply(overdue, false, grant(2, LEASE, ms(0)), answered);
        assert!(entered(&actions).is_empty(), "{actions:?}");
        assert!(actions.contains(&Action::ForgetInFlight));
        assert_eq!(sends(&m.on_tick(answered)), [true]);
        assert_eq!(m.deadline(), Some(answered + LEASE - MARGIN / 2));
    }

    // CS-9, CS-2: the local lease running out while overdue is jeopardy,
    // and the probe already out is not doubled.
    #[test]
    fn the_local_lease_running_out_while_overdue_is_jeopardy() {
        let (mut m, t0) = machine();
        let overdue = holding_from(&mut m, t0, t0 + ms(10));
        m.on_tick(overdue);
        assert_eq!(sends(&m.on_tick(overdue)), [false]);
        let expiry = m.local_expiry();
        let mut now = overdue;
        while let Some(at) = m.deadline().filter(|at| *at < expiry) {
            now = at;
            assert!(sends(&m.on_tick(now)).is_empty());
        }
        assert!(now < expiry);
        let actions = m.on_tick(expiry);
        assert_eq!(entered(&actions), [Jeopardy]);
        assert!(
            sends(&m.on_tick(expiry)).is_empty(),
            "the probe is still out"
        );
    }

    // CS-9, CS-2: the failures were the old connection's.
    #[test]
    fn an_overdue_probe_backing_off_goes_at_once_on_a_new_connection() {
        let (mut m, t0) = machine();
        let overdue = holding_from(&mut m, t0, t0 + ms(10));
        m.on_tick(overdue);
        m.on_tick(overdue);
        m.on_reply(overdue, false, Reply::Failed, overdue + ms(10));
        assert_eq!(m.deadline(), Some(overdue + wait(1)));
        m.on_connected(overdue + ms(20));
        assert_eq!(sends(&m.on_tick(overdue + ms(20))), [false]);
    }

    /// Answers the first KeepAlive at `t1` with a lease of `lease` and
    /// sends the held one that follows; the master, whose clock runs
    /// slower than this one by `slow`, answers it at its own `expiry - m`.
    /// Says when that answer arrives, and when the machine's next deadline
    /// is.
    fn slow_masters_answer(lease: Duration, margin: Duration, slow: f64) -> (Instant, Instant) {
        let t0 = Instant::now();
        let mut m = SessionMachine::new(1, t0 + lease, GRACE, 0.01, t0, SALT);
        assert_eq!(sends(&m.on_tick(t0)), [true]);
        let t1 = t0 + ms(5);
        let reply = Reply::Granted {
            epoch: 1,
            lease: LeaseGrant {
                remaining_ms: lease.as_millis() as u64,
                held_ms: 0,
            },
            events: Vec::new(),
            acked_seq: 0,
            margin,
        };
        m.on_reply(t0, true, reply, t1);
        assert_eq!(sends(&m.on_tick(t1)), [true]);
        let answer = t1 + (lease - hold_margin(margin, lease)).mul_f64(1.0 + slow);
        (answer, m.deadline().unwrap())
    }

    // CS-9, KA-2, LEASE-4: with m at least a twentieth of the lease, a
    // master whose clock runs up to 1% slow (the drift allowed for) answers
    // before the answer is overdue, whatever the lease.
    #[test]
    fn a_master_slow_within_the_drift_allowed_answers_before_it_is_overdue() {
        for lease_s in [1, 2, 5, 12, 30, 60, 300, 3_600] {
            for margin_ms in [0, 100, 2_000, 10_000] {
                let (lease, margin) = (Duration::from_secs(lease_s), ms(margin_ms));
                let (answer, deadline) = slow_masters_answer(lease, margin, 0.01);
                assert!(answer < deadline, "lease {lease:?}, margin {margin:?}");
            }
        }
        // One slower than the twentieth allows for is taken as overdue.
        let (answer, deadline) = slow_masters_answer(Duration::from_secs(60), ms(0), 0.03);
        assert!(answer > deadline);
    }

    // CS-9: a short lease's half margin may be a hundred milliseconds or
    // less; an answer is overdue only a quarter second late at least.
    #[test]
    fn a_short_leases_answer_is_overdue_only_a_quarter_second_late() {
        let (answer, deadline) = slow_masters_answer(Duration::from_secs(4), ms(300), 0.0);
        assert_eq!(deadline, answer + OVERDUE_AFTER_AT_LEAST);
    }

    // CS-9: once the held KeepAlive is back, failed or refused, nothing
    // held is awaited, and no probe goes out for it.
    #[test]
    fn a_held_keepalive_back_without_a_grant_is_not_overdue_later() {
        for back in [Reply::Failed, Reply::WrongEpoch { current: 2 }] {
            let (mut m, t0) = machine();
            let t1 = t0 + ms(10);
            let overdue = holding_from(&mut m, t0, t1);
            m.on_reply(t1, true, back, t1 + ms(20));
            // The retries go out unheld and fail too: nothing renews.
            while let Some(now) = m.deadline().filter(|at| *at <= overdue) {
                let actions = m.on_tick(now);
                assert!(
                    !actions.contains(&Action::AbandonIfSilent),
                    "{actions:?} at {:?}",
                    now - t0
                );
                if !sends(&actions).is_empty() {
                    m.on_reply(now, false, Reply::Failed, now + ms(1));
                }
            }
        }
    }

    // CS-9, KA-9: an unheld KeepAlive, answered at once, starts no overdue
    // clock of its own.
    #[test]
    fn an_unheld_keepalive_is_never_overdue() {
        let (mut m, t0) = machine();
        m.on_tick(t0);
        let arrived = t0 + ms(3_000);
        m.on_reply(t0, true, grant(1, LEASE, ms(0)), arrived);
        assert_eq!(sends(&m.on_tick(arrived)), [false], "KA-9");
        assert_eq!(m.deadline(), Some(m.local_expiry()));
    }

    // CS-9: before any grant says when the master answers, the local lease
    // alone decides, as before.
    #[test]
    fn with_no_grant_heard_yet_nothing_is_overdue() {
        let (mut m, t0) = machine();
        m.on_tick(t0);
        assert_eq!(m.deadline(), Some(t0 + LEASE));
    }

    fn event(seq: u64, kind: EventKind) -> Event {
        Event { seq, kind }
    }

    fn reply_with(epoch: u64, events: Vec<Event>) -> Reply {
        Reply::Granted {
            epoch,
            lease: LeaseGrant {
                remaining_ms: LEASE.as_millis() as u64,
                held_ms: 0,
            },
            events,
            acked_seq: 0,
            margin: MARGIN,
        }
    }

    // FO-6
    #[test]
    fn the_failover_event_in_normal_is_failover_then_normal_and_subscriptions_are_made_again() {
        let (mut m, t0) = machine();
        m.on_tick(t0);
        let failover = event(1, EventKind::Failover { epoch: 2 });
        let actions = m.on_reply(t0, true, reply_with(2, vec![failover.clone()]), t0 + ms(5));
        assert_eq!(entered(&actions), [Failover, Normal]);
        assert!(actions.contains(&Action::Deliver(vec![failover])));
        assert!(actions.contains(&Action::Resubscribe));
        assert_eq!(m.epoch(), 2);
    }

    // FO-6, CS-4
    #[test]
    fn the_failover_event_in_jeopardy_is_safe_then_normal() {
        let (mut m, t0) = machine();
        let expiry = into_jeopardy(&mut m, t0);
        m.on_tick(expiry);
        let failover = event(1, EventKind::Failover { epoch: 2 });
        let actions = m.on_reply(expiry, false, reply_with(2, vec![failover]), expiry + ms(5));
        assert_eq!(entered(&actions), [Safe, Normal]);
        assert!(actions.contains(&Action::Resubscribe));
    }

    // FO-6, EV-7
    #[test]
    fn events_are_numbered_afresh_when_the_epoch_changes_and_delivered_once() {
        let (mut m, t0) = machine();
        m.on_tick(t0);
        let lost = event(3, EventKind::EventsLost);
        m.on_reply(t0, true, reply_with(1, vec![lost.clone()]), t0 + ms(5));
        assert_eq!(m.delivered(), 3);
        // Sent again (the acknowledgement was lost): not delivered again.
        m.on_tick(t0 + ms(5));
        let again = m.on_reply(t0 + ms(5), true, reply_with(1, vec![lost]), t0 + ms(9));
        assert!(
            !again.iter().any(|a| matches!(a, Action::Deliver(_))),
            "{again:?}"
        );
        // A new master's first event is 1, and it is news.
        m.on_tick(t0 + ms(9));
        let first = event(1, EventKind::Failover { epoch: 2 });
        let news = m.on_reply(t0 + ms(9), true, reply_with(2, vec![first]), t0 + ms(12));
        assert!(news.iter().any(|a| matches!(a, Action::Deliver(_))));
        assert_eq!(m.delivered(), 1);
        assert_eq!(
            sends(&m.on_tick(t0 + ms(12))),
            [true],
            "acknowledging under the new epoch"
        );
    }

    fn acknowledging(epoch: u64, acked_seq: u64, events: Vec<Event>) -> Reply {
        let mut reply = reply_with(epoch, events);
        if let Reply::Granted { acked_seq: a, .. } = &mut reply {
            *a = acked_seq;
        }
        reply
    }

    // CS-8
    #[test]
    fn a_fresh_session_has_nothing_for_a_close_to_acknowledge() {
        let (m, _) = machine();
        assert!(!m.unacknowledged());
    }

    // CS-8, FO-5
    #[test]
    fn a_delivered_failover_event_is_for_a_close_to_acknowledge_until_a_reply_carried_it() {
        let (mut m, t0) = machine();
        m.on_tick(t0);
        let failover = event(1, EventKind::Failover { epoch: 2 });
        m.on_reply(t0, true, acknowledging(2, 0, vec![failover]), t0 + ms(5));
        assert!(m.unacknowledged(), "the new master has not heard of it");
        m.on_tick(t0 + ms(5));
        m.on_reply(
            t0 + ms(5),
            true,
            acknowledging(2, 1, Vec::new()),
            t0 + ms(9),
        );
        assert!(!m.unacknowledged());
    }

    // CS-8
    #[test]
    fn a_late_reply_carrying_an_older_acknowledgement_does_not_undo_a_newer_one() {
        let (mut m, t0) = machine();
        m.on_tick(t0);
        m.on_reply(
            t0,
            true,
            acknowledging(1, 0, vec![event(4, EventKind::EventsLost)]),
            t0 + ms(5),
        );
        m.on_reply(t0, false, acknowledging(1, 4, Vec::new()), t0 + ms(7));
        m.on_reply(t0, true, acknowledging(1, 0, Vec::new()), t0 + ms(9));
        assert!(!m.unacknowledged());
    }

    // FO-1, KA-6
    #[test]
    fn a_reply_from_an_older_master_is_ignored() {
        let (mut m, t0) = machine();
        m.on_tick(t0);
        m.on_reply(t0, true, reply_with(3, Vec::new()), t0 + ms(5));
        let stale = m.on_reply(
            t0,
            true,
            reply_with(2, vec![event(9, EventKind::EventsLost)]),
            t0 + ms(6),
        );
        assert!(stale.is_empty(), "{stale:?}");
        assert_eq!(m.epoch(), 3);
    }

    // KA-6
    #[test]
    fn wrong_epoch_adopts_the_masters_and_asks_again_at_once() {
        let (mut m, t0) = machine();
        m.on_tick(t0);
        let now = t0 + ms(5);
        assert!(m
            .on_reply(t0, true, Reply::WrongEpoch { current: 4 }, now)
            .is_empty());
        assert_eq!(
            m.on_tick(now),
            [Action::Send {
                hold: false,
                epoch: 4,
                acked_seq: 0
            }]
        );
    }

    // CS-1
    #[test]
    fn a_failed_keepalive_in_normal_is_retried_with_backoff() {
        let (mut m, t0) = machine();
        m.on_tick(t0);
        for n in 1..=3 {
            let now = t0 + ms(u64::from(n) * 1_000);
            m.on_reply(now, false, Reply::Failed, now);
            assert_eq!(m.deadline(), Some(now + wait(n)), "retry {n}");
            assert_eq!(sends(&m.on_tick(now + wait(n))), [false]);
        }
        assert_eq!(m.state(), Normal, "only the local lease decides");
    }

    // CS-2: the failures were the old connection's; the new one may reach
    // a new master, which the session needs before its lease runs out.
    #[test]
    fn a_keepalive_backing_off_after_failures_goes_at_once_on_a_new_connection() {
        let (mut m, t0) = machine();
        m.on_tick(t0);
        let mut now = t0;
        for _ in 0..5 {
            now += ms(100);
            m.on_reply(now, false, Reply::Failed, now);
            now = m.deadline().unwrap();
            m.on_tick(now);
        }
        m.on_reply(now, false, Reply::Failed, now);
        assert_eq!(m.deadline(), Some(now + wait(6)), "backing off");
        let connected = now + ms(30);
        m.on_connected(connected);
        assert_eq!(m.deadline(), Some(connected));
        assert_eq!(sends(&m.on_tick(connected)), [false]);
    }

    // CS-2: a probe waits out its backoff only while nothing has changed.
    #[test]
    fn a_probe_backing_off_in_jeopardy_goes_at_once_on_a_new_connection() {
        let (mut m, t0) = machine();
        let expiry = into_jeopardy(&mut m, t0);
        assert_eq!(sends(&m.on_tick(expiry)), [false]);
        m.on_reply(expiry, false, Reply::Failed, expiry + ms(10));
        assert_eq!(m.deadline(), Some(expiry + wait(1)));
        m.on_connected(expiry + ms(20));
        assert_eq!(sends(&m.on_tick(expiry + ms(20))), [false]);
    }

    // CS-2: one probe at a time still; a new connection adds none, and a
    // held KeepAlive in flight in Normal is not doubled either.
    #[test]
    fn a_new_connection_adds_no_keepalive_while_one_is_awaited() {
        let (mut m, t0) = machine();
        let expiry = into_jeopardy(&mut m, t0);
        assert_eq!(sends(&m.on_tick(expiry)), [false]);
        let deadline = m.deadline();
        m.on_connected(expiry + ms(10));
        assert_eq!(m.deadline(), deadline, "the probe is still awaited");

        let (mut m, t0) = machine();
        m.on_tick(t0);
        let deadline = m.deadline();
        m.on_connected(t0 + ms(10));
        assert_eq!(m.deadline(), deadline, "the held KeepAlive is awaited");
    }

    // CS-2
    #[test]
    fn no_keepalive_goes_out_while_eight_are_in_flight() {
        let (mut m, t0) = machine();
        m.in_flight = MAX_IN_FLIGHT;
        assert!(sends(&m.on_tick(t0)).is_empty());
        // One comes back failed: the next may go, on the retry schedule.
        let now = t0 + ms(10);
        m.in_flight = MAX_IN_FLIGHT;
        m.on_reply(t0, true, Reply::Failed, now);
        m.send_at = Some(now);
        assert_eq!(sends(&m.on_tick(now)).len(), 1);
    }
}
