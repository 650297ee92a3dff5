//! A session's state transitions as its callbacks report them, for tests
//! that check the sequence and its timing.

use std::sync::{Arc, Mutex};

use leasehold::{Session, SessionState};
use tokio::time::Instant;

/// Every state a session entered since [`StateLog::record`], with when.
#[derive(Debug, Clone, Default)]
pub struct StateLog(Arc<Mutex<Vec<(SessionState, Instant)>>>);

impl StateLog {
    /// Starts recording `session`'s transitions (`tokio::time`, so virtual
    /// under turmoil).
    pub fn record(session: &Session) -> StateLog {
        let log = StateLog::default();
        let sink = log.0.clone();
        session.on_state_change(move |s| sink.lock().unwrap().push((s, Instant::now())));
        log
    }

    /// The states, in order.
    pub fn states(&self) -> Vec<SessionState> {
        self.timed().into_iter().map(|(s, _)| s).collect()
    }

    /// The states with the instants they were entered.
    pub fn timed(&self) -> Vec<(SessionState, Instant)> {
        self.0.lock().unwrap().clone()
    }
}
