//! What a master's engine counts as it goes (`OPS-1`): plain totals kept
//! beside its decisions and never read by them. The master task copies
//! them into the metrics after each turn (`Metrics::engine`), so the
//! engine stays free of shared state and a simulation's engine counts
//! exactly as a served one does.

use crate::holding::{HowGranted, LetGo};
use crate::session::EndCause;

/// When a KeepAlive was answered, against the time the master planned
/// for it (`KA-3`, `KA-5`, `EV-3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answered {
    /// At once, without being held: a KeepAlive that asked not to be, or
    /// one with events waiting, or a session whose lease was nearly over.
    AtOnce,
    /// Held, then answered before its time: events came for it, or the
    /// next KeepAlive of its session arrived.
    Early,
    /// Held until its time and answered then.
    Due,
    /// Held and answered after its time by more than a quarter of the
    /// KeepAlive margin in force for its lease: the master fell behind,
    /// and its client had less of the margin than it should to hear the
    /// reply.
    Late,
}

impl Answered {
    pub(crate) const ALL: [Answered; 4] = [
        Answered::AtOnce,
        Answered::Early,
        Answered::Due,
        Answered::Late,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Answered::AtOnce => "at_once",
            Answered::Early => "early",
            Answered::Due => "due",
            Answered::Late => "late",
        }
    }
}

/// A limit or quota a request was refused at, as the engine sees them
/// (the connection's own are counted where they are enforced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    SessionsPerAddress,
    ChecksPerAddress,
    SubscriptionsPerAddress,
    BytesPerAddress,
    WaitersPerAddress,
    SubscriptionsPerSession,
    Subscriptions,
    /// The connection's unread replies are over its budget (`CONN-9`).
    ReplyBudget,
    /// The master is behind telling subscribers (`EV-9`).
    FanoutBacklog,
    /// Too many failed authentications from one address (`ID-6`).
    AuthFailures,
}

impl Limit {
    pub(crate) const ALL: [Limit; 10] = [
        Limit::SessionsPerAddress,
        Limit::ChecksPerAddress,
        Limit::SubscriptionsPerAddress,
        Limit::BytesPerAddress,
        Limit::WaitersPerAddress,
        Limit::SubscriptionsPerSession,
        Limit::Subscriptions,
        Limit::ReplyBudget,
        Limit::FanoutBacklog,
        Limit::AuthFailures,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Limit::SessionsPerAddress => "sessions_per_address",
            Limit::ChecksPerAddress => "checks_per_address",
            Limit::SubscriptionsPerAddress => "subscriptions_per_address",
            Limit::BytesPerAddress => "bytes_per_address",
            Limit::WaitersPerAddress => "waiters_per_address",
            Limit::SubscriptionsPerSession => "subscriptions_per_session",
            Limit::Subscriptions => "subscriptions",
            Limit::ReplyBudget => "reply_budget",
            Limit::FanoutBacklog => "fanout_backlog",
            Limit::AuthFailures => "auth_failures",
        }
    }
}

pub(crate) const END_CAUSES: [EndCause; 3] = [
    EndCause::Expired,
    EndCause::Destroyed,
    EndCause::CheckFailed,
];

pub(crate) const HOW_GRANTED: [HowGranted; 3] =
    [HowGranted::AtOnce, HowGranted::Again, HowGranted::FromLine];

pub(crate) const LET_GO: [LetGo; 4] = [
    LetGo::Released,
    LetGo::GivenBack,
    LetGo::SessionEnded,
    LetGo::Deleted,
];

pub(crate) fn how_label(how: HowGranted) -> &'static str {
    match how {
        HowGranted::AtOnce => "at_once",
        HowGranted::Again => "again",
        HowGranted::FromLine => "from_line",
    }
}

pub(crate) fn let_go_label(why: LetGo) -> &'static str {
    match why {
        LetGo::Released => "released",
        LetGo::GivenBack => "given_back",
        LetGo::SessionEnded => "session_ended",
        LetGo::Deleted => "node_deleted",
    }
}

/// The engine's totals since it started, each only ever growing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// KeepAlives received, a KeepAliveAll counting one per session.
    pub(crate) keepalives: u64,
    /// KeepAlives answered, by `Answered`.
    pub(crate) answered: [u64; Answered::ALL.len()],
    /// Sessions ended, by `END_CAUSES`.
    pub(crate) ended: [u64; END_CAUSES.len()],
    /// Holdings begun, by `HOW_GRANTED`; `FromLine` are hand-offs.
    pub(crate) granted: [u64; HOW_GRANTED.len()],
    /// Holdings ended, by `LET_GO`.
    pub(crate) let_go: [u64; LET_GO.len()],
    /// Requests refused at a limit, by `Limit`.
    pub(crate) refused: [u64; Limit::ALL.len()],
    /// Reads answered as cacheable (`CACHE-2`).
    pub(crate) cache_grants: u64,
    /// Writes held until cachers were told (`CACHE-3`).
    pub(crate) writes_held: u64,
    /// Events queued, dropped for an `EventsLost`, and invalidations
    /// among those queued, as the event queues count them.
    pub(crate) events_queued: u64,
    pub(crate) events_dropped: u64,
    pub(crate) invalidations: u64,
    /// Times one address's subscriptions were cut off for owing more
    /// than their share of fan-out (`EV-9`).
    pub(crate) fanout_cut_offs: u64,
}

impl Tally {
    pub(crate) fn answered(&mut self, when: Answered) {
        self.answered[when as usize] += 1;
    }

    pub(crate) fn ended(&mut self, cause: EndCause) {
        if let Some(i) = END_CAUSES.iter().position(|c| *c == cause) {
            self.ended[i] += 1;
        }
    }

    pub(crate) fn granted(&mut self, how: HowGranted) {
        if let Some(i) = HOW_GRANTED.iter().position(|h| *h == how) {
            self.granted[i] += 1;
        }
    }

    pub(crate) fn let_go(&mut self, why: LetGo) {
        if let Some(i) = LET_GO.iter().position(|w| *w == why) {
            self.let_go[i] += 1;
        }
    }

    pub(crate) fn refused(&mut self, limit: Limit) {
        self.refused[limit as usize] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_label_has_its_own_slot() {
        let mut tally = Tally::default();
        for (i, limit) in Limit::ALL.into_iter().enumerate() {
            assert_eq!(limit as usize, i);
            tally.refused(limit);
        }
        for (i, when) in Answered::ALL.into_iter().enumerate() {
            assert_eq!(when as usize, i);
        }
        assert!(tally.refused.iter().all(|n| *n == 1));
        tally.granted(HowGranted::FromLine);
        assert_eq!(tally.granted, [0, 0, 1]);
    }
}
