//! Lease containment, the invariant Chubby's safety argument rests on:
//! every instant a client believed its session `Normal`, and every instant
//! it believed it held a lock, lies inside the lease the master kept for
//! that session (`LEASE-4`, `CS-1`). The master's side comes from the
//! master itself ([`leasehold_server::MasterObserver`]): each lease it
//! granted, until when by its own clock, in virtual time; the client's
//! from its reported states and holdings. Exclusion follows: the master
//! grants a lock again only once the holder's session has ended, which is
//! never before its lease ran out, so whatever lock-delay adds is cushion,
//! not the reason two holders never overlap.

use std::collections::BTreeMap;

use super::Recorded;
use super::Violation;
use crate::sim::trace::What;

pub const NAME: &str = "containment";

/// What a client believed of one session over `[from, to)`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Belief {
    who: String,
    session: String,
    /// "normal", or the lock it believed it held.
    what: String,
    from: u64,
    to: u64,
}

/// The stretches of virtual time in which the master held a lease for one
/// session: `[from, to)`, in order, apart.
#[derive(Debug, Default)]
struct Leases {
    covered: Vec<(u64, u64)>,
    /// The last time the master ended the session, for messages.
    ended: Option<u64>,
    /// Ended, and not taken up again by a master recovering it.
    closed: bool,
}

impl Leases {
    /// A grant at `at` until `until`: a lease never moves backward
    /// (`LEASE-2`). After an end only a master that recovered the session
    /// (`failover`) grants it again: any other grant is a revival the
    /// master must never make (`KA-7`), and covers nothing.
    fn grant(&mut self, at: u64, until: u64, failover: bool) {
        if self.closed && !failover {
            return;
        }
        self.closed = false;
        match self.covered.last_mut() {
            Some((_, to)) if *to >= at => *to = (*to).max(until),
            _ if until > at => self.covered.push((at, until)),
            _ => {}
        }
    }

    /// The master ended the session at `at`. A master that crashed before
    /// the end was durable takes the session up again from its log, with
    /// a fresh lease (`FO-2`): nobody had been told of the end, since
    /// replies wait for the log (`STORE-1`), so a later grant covers again.
    fn end(&mut self, at: u64) {
        if let Some((from, to)) = self.covered.last_mut() {
            *to = (*to).min(at.max(*from));
        }
        self.ended = Some(at);
        self.closed = true;
    }

    /// The first instant of `[from, to)` the session held no lease.
    fn first_uncovered(&self, from: u64, to: u64) -> Option<u64> {
        let mut t = from;
        for &(start, end) in &self.covered {
            if end <= t {
                continue;
            }
            if start > t {
                return Some(t);
            }
            t = end;
            if t >= to {
                return None;
            }
        }
        (t < to).then_some(t)
    }
}

fn beliefs(run: &Recorded) -> Vec<Belief> {
    let mut done = Vec::new();
    // Each client's session, and since when it has been Normal.
    let mut normal: BTreeMap<&str, (String, Option<u64>)> = BTreeMap::new();
    let mut holding: BTreeMap<(&str, &str), (String, u64)> = BTreeMap::new();
    let mut end = |who: &str, session: &str, what: &str, from: u64, to: u64| {
        done.push(Belief {
            who: who.to_string(),
            session: session.to_string(),
            what: what.to_string(),
            from,
            to,
        });
    };
    for e in &run.entries {
        let who = e.who.as_str();
        match &e.what {
            What::SessionStarted { session } => {
                normal.insert(who, (session.clone(), Some(e.at)));
            }
            What::State { state, session } => {
                let Some((current, since)) = normal.get_mut(who) else {
                    continue;
                };
                if current != session {
                    continue;
                }
                match (state.as_str(), *since) {
                    ("normal", None) => *since = Some(e.at),
                    ("normal", Some(_)) => {}
                    (_, Some(from)) => {
                        end(who, session, "normal", from, e.at);
                        *since = None;
                    }
                    (_, None) => {}
                }
            }
            // The client gives its session up: what follows (its
            // `Closed`, which comes once the master has destroyed it) is
            // its own doing, not a belief.
            What::Closing => {
                if let Some((session, since)) = normal.get_mut(who) {
                    if let Some(from) = since.take() {
                        end(who, session, "normal", from, e.at);
                    }
                }
            }
            What::Holding { lock, session, .. } => {
                holding.insert((who, lock), (session.clone(), e.at));
            }
            What::Released { lock, .. } => {
                if let Some((session, from)) = holding.remove(&(who, lock.as_str())) {
                    end(who, &session, lock, from, e.at);
                }
            }
            _ => {}
        }
    }
    for (who, (session, since)) in normal {
        if let Some(from) = since {
            end(who, &session, "normal", from, run.end);
        }
    }
    for ((who, lock), (session, from)) in holding {
        end(who, &session, lock, from, run.end);
    }
    done
}

fn leases(run: &Recorded) -> BTreeMap<&str, Leases> {
    let mut leases: BTreeMap<&str, Leases> = BTreeMap::new();
    for e in &run.entries {
        match &e.what {
            What::Lease {
                session,
                until,
                why,
            } => {
                let failover = why == "failover";
                leases
                    .entry(session)
                    .or_default()
                    .grant(e.at, *until, failover);
            }
            What::SessionEnded { session, .. } => {
                leases.entry(session).or_default().end(e.at);
            }
            _ => {}
        }
    }
    leases
}

pub fn check(run: &Recorded) -> (usize, Vec<Violation>) {
    let leases = leases(run);
    let none = Leases::default();
    let all = beliefs(run);
    let mut violations = Vec::new();
    for b in &all {
        let granted = leases.get(b.session.as_str()).unwrap_or(&none);
        // A state reported and left in the same instant was still
        // believed in that instant: an application may act on it.
        let to = b.to.max(b.from + 1);
        let Some(at) = granted.first_uncovered(b.from, to) else {
            continue;
        };
        let lease = match (
            granted.covered.iter().rev().find(|(from, _)| *from <= at),
            granted.ended,
        ) {
            (_, Some(ended)) if ended <= at => format!("the master ended it at {ended} ms"),
            (Some((_, until)), _) => format!("the master's lease ran to {until} ms"),
            (None, _) => "the master had granted it no lease yet".to_string(),
        };
        violations.push(Violation {
            invariant: NAME,
            at,
            detail: format!(
                "{} believed {} of session {} from {} ms to {} ms, but {lease}",
                b.who, b.what, b.session, b.from, b.to
            ),
        });
    }
    (all.len(), violations)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leases(grants: &[(u64, u64)], ended: Option<u64>) -> Leases {
        let mut leases = Leases::default();
        for &(at, until) in grants {
            leases.grant(at, until, false);
        }
        if let Some(at) = ended {
            leases.end(at);
        }
        leases
    }

    // LEASE-4
    #[test]
    fn a_belief_inside_one_grant_is_covered() {
        assert_eq!(leases(&[(0, 100)], None).first_uncovered(10, 100), None);
    }

    // LEASE-4
    #[test]
    fn a_belief_that_outlasts_the_lease_is_uncovered_from_its_expiry() {
        assert_eq!(
            leases(&[(0, 100)], None).first_uncovered(10, 101),
            Some(100)
        );
    }

    // LEASE-2
    #[test]
    fn grants_in_turn_cover_a_long_belief() {
        let chain = leases(&[(0, 100), (90, 190), (180, 280)], None);
        assert_eq!(chain.first_uncovered(0, 280), None);
        // A grant after the lease ran out does not cover the gap.
        let late = leases(&[(0, 100), (120, 220)], None);
        assert_eq!(late.first_uncovered(0, 200), Some(100));
    }

    // FO-2: an end the crash took back, and the session recovered.
    #[test]
    fn a_recovering_masters_grant_after_the_end_covers_again() {
        let mut recovered = leases(&[(0, 100)], Some(80));
        recovered.grant(120, 220, true);
        assert_eq!(recovered.first_uncovered(130, 200), None);
        assert_eq!(recovered.first_uncovered(70, 130), Some(80));
    }

    // KA-7: a lease that has run out is never revived.
    #[test]
    fn a_keepalive_grant_after_the_end_covers_nothing() {
        let mut revived = leases(&[(0, 100)], Some(80));
        revived.grant(120, 220, false);
        assert_eq!(revived.first_uncovered(130, 200), Some(130));
    }

    // LEASE-1, SES-6
    #[test]
    fn a_belief_before_any_grant_or_after_the_end_is_uncovered() {
        assert_eq!(leases(&[(50, 150)], None).first_uncovered(40, 60), Some(40));
        assert_eq!(
            leases(&[(0, 150)], Some(80)).first_uncovered(0, 90),
            Some(80)
        );
    }
}
