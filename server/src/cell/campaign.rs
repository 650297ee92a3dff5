//! Standing for election as soon as a vote can be won (SPEC `CELL-5`).
//!
//! A follower that accepted the leader's request refuses every other
//! candidate for the longest election timeout after it (the engine's leader
//! lease, which the master lease rests on, `CELL-6`). openraft's own timer
//! has a follower wait out that lease and then a whole election timeout
//! more before it campaigns, so a cell whose master died had none for 750
//! to 1000 ms with the default timing. The voters' leases end one longest
//! election timeout after each last accepted a request, and the leader
//! sends its requests to all of them together: a follower that has heard
//! nothing for that long plus a heartbeat stands at once, with a jitter of
//! up to two heartbeats so that two followers seldom split the vote; a
//! follower that gave its vote meanwhile waits for the candidate it chose.
//!
//! Nothing here decides who may be elected or when a vote may be given:
//! the engine still refuses a vote inside a lease, so this changes how
//! soon a new master serves, never whether two can. A campaign that loses
//! is retried on the engine's own timer.

use std::time::Duration;

use openraft::ServerState;
use rand::Rng;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::member::{Member, Timing};
use super::runtime::ElectionRng;

/// When this member last accepted a request from a leader or gave a
/// candidate its vote; `None` until it first does, so a cell starting up
/// elects on the engine's timer. A vote counts: the candidate it went to
/// may be about to lead, and standing against it before its first request
/// arrives would depose it.
pub(crate) type LeaderHeard = watch::Sender<Option<Instant>>;

/// When a follower that last heard its leader at `heard` stands for
/// election, `jitter` (drawn up to two heartbeats) after the earliest
/// instant every voter's lease has surely run out.
pub(crate) fn stand_at(timing: &Timing, heard: Instant, jitter: Duration) -> Instant {
    heard + timing.election_max + timing.heartbeat + jitter
}

/// A jitter between zero and two heartbeats, from the generator election
/// timeouts are drawn from (seeded in a simulation).
fn jitter(timing: &Timing) -> Duration {
    let most = (timing.heartbeat * 2).as_micros() as u64;
    Duration::from_micros(ElectionRng.gen_range(0..=most))
}

/// Stands for election each time the leader goes silent past
/// [`stand_at`], until `stop`.
pub(crate) async fn campaign(member: Member, stop: CancellationToken) {
    let timing = member.config.timing;
    let mut heard = member.heard.subscribe();
    loop {
        let last = *heard.borrow_and_update();
        if let Some(last) = last {
            let at = stand_at(&timing, last, jitter(&timing));
            tokio::select! {
                () = stop.cancelled() => return,
                changed = heard.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
                () = tokio::time::sleep_until(at) => {}
            }
            // A request accepted since the timer fired is one the leader
            // counts towards its master lease: standing now would break
            // the promise it made. Under the gate nothing more goes in
            // before the election, which the engine takes in order.
            let gate = member.gate.lock().await;
            if *heard.borrow() != Some(last) {
                continue;
            }
            let state = member.raft.metrics().borrow().state;
            if state == ServerState::Follower {
                info!(
                    silent_ms = (Instant::now() - last).as_millis() as u64,
                    "the leader went silent past every voter's lease: standing for election"
                );
                // The engine ignores it from a member that is not a voter.
                if member.raft.trigger().elect().await.is_err() {
                    return;
                }
            }
            drop(gate);
        }
        // Once per silence: the next campaign waits for a leader to be
        // heard again.
        tokio::select! {
            () = stop.cancelled() => return,
            changed = heard.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // CELL-5: past the longest election timeout and a heartbeat, every
    // voter that heard the same leader's last request has ended its lease.
    #[test]
    fn a_follower_stands_once_every_voters_lease_has_run_out() {
        let timing = Timing::default();
        let heard = Instant::now();
        let earliest = stand_at(&timing, heard, Duration::ZERO);
        assert_eq!(earliest - heard, Duration::from_millis(550));
        let latest = stand_at(&timing, heard, timing.heartbeat * 2);
        assert!(
            latest - heard < timing.election_max + timing.election_min,
            "sooner than the engine's own timer, which waits the lease and an election timeout"
        );
    }

    #[test]
    fn the_jitter_stays_within_two_heartbeats() {
        let timing = Timing::default();
        let draws: Vec<Duration> = (0..200).map(|_| jitter(&timing)).collect();
        assert!(draws.iter().all(|d| *d <= timing.heartbeat * 2));
        assert!(draws.iter().any(|d| *d != draws[0]), "it varies");
    }
}
