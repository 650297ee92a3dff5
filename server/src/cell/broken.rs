//! Rules of the master lease and of elections, each of which can be turned
//! off on purpose: a simulation that breaks one must find two masters, or
//! a cell without one, in the schedule written for it (SIMULATION.md,
//! "Rules the cell's schedules need"). A real member never turns any off:
//! `serve` has no flag for them.

use std::time::Duration;

/// The rules a member breaks; the default breaks none.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BrokenRules {
    /// Keeps the master lease once held, whatever the followers answer
    /// (`CELL-6`): a master that grants without its quorum.
    pub keep_master_lease: bool,
    /// Starts Raft as soon as the data directory is open, without the
    /// wait of one longest election timeout (`CELL-5`): a restarted
    /// member can vote inside a lease it promised before it went down.
    pub vote_at_start: bool,
    /// A follower refuses other candidates for this long after it heard
    /// the leader, not the longest election timeout the master lease
    /// counts on (`CELL-6`): the engine's leader lease, shortened.
    pub refusal_window: Option<Duration>,
    /// A leader asked for a higher vote keeps its master lease until the
    /// engine has answered (`CELL-6`'s "the lease ends as such a request
    /// arrives").
    pub keep_lease_when_asked: bool,
    /// Every member hears every candidate and stands whenever its leader
    /// goes silent, whichever configuration it is in (`CELL-9`).
    pub hear_any_candidate: bool,
    /// The member being removed stands even after a voter of the new
    /// configuration with a log as long refused it (`CELL-9`).
    pub stand_when_outstood: bool,
    /// A leader asked for a change its configuration already shows answers
    /// `Done` at once, without confirming with a quorum that the
    /// configuration is one and committed (`CELL-9`).
    pub done_unsettled: bool,
    /// Not a rule but a slow machine: the member's task that starts and
    /// stops its master notices this late that the member no longer
    /// leads. The master lease must stop the master without it.
    pub slow_step_down: Option<Duration>,
}

/// The refusal window the simulations' `refusal-window` knob leaves: two
/// fifths of the longest election timeout, so that followers stand well
/// inside the master lease, but never under two heartbeats and a little:
/// the election timeouts the member then draws (half of it and up) must
/// stay longer than a heartbeat, or the engine refuses to start, and a run
/// that never starts its cell would read as a rule caught.
pub fn short_refusal_window(timing: &super::Timing) -> Duration {
    (timing.election_max * 2 / 5).max(timing.heartbeat * 2 + Duration::from_millis(2))
}
