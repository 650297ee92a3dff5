//! This member's own rounds of election, and the pause after one that
//! failed (SPEC `CELL-12`).
//!
//! openraft 0.9 draws a member's election timeout once, when the member
//! starts, and never again. Two candidates whose rounds fail together
//! start the next ones together, round after round: two members with the
//! same timeout split the votes for ever, and a member that cannot win
//! (the one being removed, a voter of the old half only) but whose timer
//! runs a little shorter takes, each round, the vote of a member behind in
//! the log a moment before a rightful candidate asks for it, in the same
//! term, and openraft ranks the higher id first (`cell-removal-crash` seed
//! 5001425: 16 s without a master). Raft's answer is a timeout drawn
//! afresh for every round; here, after a round of its own that failed, a
//! member keeps from standing for a pause drawn up to the longest
//! election timeout, so that tied rounds come apart.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::LogId;
use tokio::time::Instant;

use super::NodeId;

/// What this member knows of its own rounds.
#[derive(Debug, Default)]
pub(crate) struct Rounds {
    /// The term of the round this member stands in now.
    standing_in: Option<u64>,
    /// Until when this member does not stand again.
    paused_until: Option<Instant>,
}

impl Rounds {
    /// The engine shows this member a candidate in `term` (`None`: not a
    /// candidate) at `now`, and whether a leader is known (`led`). A new
    /// round of its own with no leader known since its last means that one
    /// failed, even if it followed another candidate's higher vote in
    /// between: the next waits `pause()` longer.
    pub(crate) fn observe(
        &mut self,
        candidate_in: Option<u64>,
        led: bool,
        now: Instant,
        pause: impl FnOnce() -> Duration,
    ) {
        if led {
            self.standing_in = None;
            return;
        }
        if let Some(term) = candidate_in {
            if self.standing_in.is_some_and(|before| term > before) {
                self.paused_until = Some(now + pause());
            }
            self.standing_in = Some(term);
        }
    }

    /// Whether this member keeps from standing at `now`.
    pub(crate) fn paused(&self, now: Instant) -> bool {
        self.paused_until.is_some_and(|until| now < until)
    }
}

/// The members that refused this member's vote requests while their logs
/// ended at or past the candidate's, each with when and the log the
/// candidate asked with (`CELL-9`). Such a member is a candidate at least
/// as able to win as this one: when it is a voter of the newest
/// configuration and this member is not (the member being removed, during
/// the change), this member keeps from standing for a while. Its rounds
/// would win nothing, and each would raise its vote to a new term that the
/// rightful candidates take on from its answers and from the voters it
/// asks, resetting their election timers: a member being removed whose
/// timer runs shortest kept the cell without a master for 30 s after it
/// crashed and came back (`cell-removal-crash` seed 6000938).
#[derive(Debug, Clone, Default)]
pub(crate) struct Outstood(Arc<Mutex<Refusals>>);

type Refusals = BTreeMap<NodeId, (Instant, Option<LogId<NodeId>>)>;

impl Outstood {
    /// `refuser` refused, at `now`, a vote request this member sent with
    /// its log ending at `asked`, its own log ending at or past that.
    pub(crate) fn note(&self, refuser: NodeId, now: Instant, asked: Option<LogId<NodeId>>) {
        let mut refusals = self.0.lock().unwrap_or_else(|e| e.into_inner());
        refusals.insert(refuser, (now, asked));
    }

    /// Each refuser, and when, whose refusal still speaks of this member's
    /// log, which ends at `ours` now: once the log has grown past what it
    /// asked with (it led, and wrote), the refuser may be behind it.
    pub(crate) fn refusers(&self, ours: Option<LogId<NodeId>>) -> Vec<(NodeId, Instant)> {
        let refusals = self.0.lock().unwrap_or_else(|e| e.into_inner());
        refusals
            .iter()
            .filter(|(_, (_, asked))| ours <= *asked)
            .map(|(refuser, (at, _))| (*refuser, *at))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAUSE: Duration = Duration::from_millis(250);

    // CELL-12
    #[test]
    fn a_first_round_is_not_paused() {
        let now = Instant::now();
        let mut rounds = Rounds::default();
        rounds.observe(Some(3), false, now, || PAUSE);
        assert!(!rounds.paused(now));
    }

    // CELL-12: the next round after a failed one waits the drawn pause.
    #[test]
    fn after_a_failed_round_the_member_pauses_for_the_drawn_time() {
        let now = Instant::now();
        let mut rounds = Rounds::default();
        rounds.observe(Some(3), false, now, || PAUSE);
        rounds.observe(Some(3), false, now, || PAUSE);
        assert!(!rounds.paused(now), "the same round goes on");
        // It follows a rival's higher vote, which wins nothing either.
        rounds.observe(None, false, now, || PAUSE);
        let next = now + Duration::from_millis(500);
        rounds.observe(Some(5), false, next, || PAUSE);
        assert!(rounds.paused(next));
        assert!(rounds.paused(next + PAUSE - Duration::from_millis(1)));
        assert!(!rounds.paused(next + PAUSE));
    }

    // CELL-12: a round after a leader was known is not one of a run of
    // failed rounds.
    #[test]
    fn a_round_after_a_leader_was_known_is_not_paused() {
        let now = Instant::now();
        let mut rounds = Rounds::default();
        rounds.observe(Some(3), false, now, || PAUSE);
        rounds.observe(None, true, now, || PAUSE);
        rounds.observe(Some(5), false, now, || PAUSE);
        assert!(!rounds.paused(now));
    }

    fn at(term: u64, index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(openraft::CommittedLeaderId::new(term, 1), index))
    }

    // CELL-9: every refuser is kept, not only the last to answer.
    #[test]
    fn each_refuser_is_kept() {
        let now = Instant::now();
        let outstood = Outstood::default();
        outstood.note(1, now, at(1, 5));
        outstood.note(5, now, at(1, 5));
        let refusers: Vec<NodeId> = outstood.refusers(at(1, 5)).iter().map(|r| r.0).collect();
        assert_eq!(refusers, [1, 5]);
    }

    // CELL-9: a refusal measured against a log this member has since grown
    // past says nothing of the log now.
    #[test]
    fn a_refusal_of_a_shorter_log_no_longer_counts() {
        let now = Instant::now();
        let outstood = Outstood::default();
        outstood.note(1, now, at(1, 5));
        assert!(outstood.refusers(at(2, 6)).is_empty());
        assert_eq!(outstood.refusers(at(1, 4)).len(), 1);
    }
}
