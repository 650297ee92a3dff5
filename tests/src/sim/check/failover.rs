//! The fail-over promise (`FO-1`, `FO-2`, `CS-3`): a session whose client
//! was never cut off does not expire. A master that comes back within the
//! grace period gives every session a full lease (`FO-2`), and its client,
//! probing with at most a second between tries (`CS-2`), reaches it; only
//! a client cut off itself, or a master back too late for a probe to
//! reach it, can lose its session. And the master expires no session its
//! client still holds unless that client was cut off.

use std::collections::BTreeMap;

use super::Recorded;
use super::Violation;
use crate::sim::trace::What;

pub const NAME: &str = "failover";

/// How long before a session's grace ran out the master must have been
/// back for its client to be sure to reach it: a probe's longest backoff
/// (1 s), a connect that waited on the master's downtime (1 s), and round
/// trips.
const REACH: u64 = 2_500;

/// Intervals in which `who` had a fault of its own in force, and in which
/// the master was down.
fn outages(run: &Recorded) -> BTreeMap<&str, Vec<(u64, u64)>> {
    let mut open: BTreeMap<(&str, bool), u64> = BTreeMap::new();
    let mut spans: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for e in &run.entries {
        let What::Fault { fault, .. } = &e.what else {
            continue;
        };
        let who = e.who.as_str();
        // A hold and a cut may overlap; each is its own span.
        let (hold, starts) = match fault.as_str() {
            "hold" => (true, true),
            "release" => (true, false),
            "crash" => (false, true),
            "restart" => (false, false),
            f if f.starts_with("partition") => (false, true),
            f if f.starts_with("repair") => (false, false),
            _ => continue,
        };
        if starts {
            open.entry((who, hold)).or_insert(e.at);
        } else if let Some(from) = open.remove(&(who, hold)) {
            spans.entry(who).or_default().push((from, e.at));
        }
    }
    for ((who, _), from) in open {
        spans.entry(who).or_default().push((from, run.end));
    }
    spans
}

fn overlaps(spans: Option<&Vec<(u64, u64)>>, from: u64, to: u64) -> bool {
    spans.is_some_and(|s| s.iter().any(|&(a, b)| a <= to && b >= from))
}

pub fn check(run: &Recorded) -> (usize, Vec<Violation>) {
    let outages = outages(run);
    let lease = run.settings.lease.as_millis() as u64;
    let grace = run.settings.grace.as_millis() as u64;
    let mut violations = Vec::new();
    let mut sessions = 0;
    // Each session's client, and when that client saw it end or began
    // closing it: from then on it no longer holds it.
    let mut client_of: BTreeMap<&str, &str> = BTreeMap::new();
    let mut current: BTreeMap<&str, &str> = BTreeMap::new();
    let mut gone: BTreeMap<&str, u64> = BTreeMap::new();
    for e in &run.entries {
        match &e.what {
            What::SessionStarted { session } => {
                client_of.insert(session, &e.who);
                current.insert(&e.who, session);
            }
            What::Closing => {
                if let Some(session) = current.get(e.who.as_str()) {
                    gone.entry(session).or_insert(e.at);
                }
            }
            What::State { state, session } if state == "expired" || state == "closed" => {
                gone.entry(session).or_insert(e.at);
            }
            _ => {}
        }
    }
    for e in &run.entries {
        match &e.what {
            // A correct master ends a recovered session only a full lease
            // after it came back (`FO-2`), by when a client that is not cut
            // off has reached it, or has given the session up itself.
            What::SessionEnded { session, cause } if cause == "expired" => {
                let Some(&client) = client_of.get(session.as_str()) else {
                    continue;
                };
                let since = e.at.saturating_sub(lease + grace + 3_000);
                let given_up = gone.get(session.as_str()).is_some_and(|at| *at <= e.at);
                if given_up || overlaps(outages.get(client), since, e.at) {
                    continue;
                }
                violations.push(Violation {
                    invariant: NAME,
                    at: e.at,
                    detail: format!(
                        "the master expired {client}'s session {session} while {client} still held it, and {client} was not cut off since {since} ms"
                    ),
                });
            }
            What::SessionStarted { .. } => sessions += 1,
            What::State { state, session } if state == "expired" => {
                let since = e.at.saturating_sub(lease + grace + 3_000);
                if overlaps(outages.get(e.who.as_str()), since, e.at)
                    || overlaps(outages.get("master"), e.at.saturating_sub(REACH), e.at)
                {
                    continue;
                }
                violations.push(Violation {
                    invariant: NAME,
                    at: e.at,
                    detail: format!(
                        "{}'s session {session} expired, though {} was not cut off since {since} ms and the master was up from {} ms before",
                        e.who, e.who, REACH
                    ),
                });
            }
            _ => {}
        }
    }
    (sessions, violations)
}
