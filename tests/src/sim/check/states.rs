//! Session states follow the SPEC diagram (`CS-1`..`CS-8`, `FO-6`): Normal
//! to Jeopardy, Failover or Expired; Jeopardy to Safe or Expired; Safe and
//! Failover straight back to Normal, at the same instant; to Closed only
//! after the client closed its session; nothing after Expired or Closed. A partition that heals while the local lease still covers the
//! held KeepAlive answer never leaves Normal.

use std::collections::BTreeMap;

use super::Recorded;
use super::Violation;
use crate::sim::trace::{is_server, What};

pub const NAME: &str = "states";

fn allowed(from: &str, to: &str) -> bool {
    matches!(
        (from, to),
        ("normal", "jeopardy" | "failover" | "expired")
            | ("jeopardy", "safe" | "expired")
            | ("safe" | "failover", "normal")
            | ("normal" | "jeopardy" | "safe" | "failover", "closed")
    )
}

pub fn check(run: &Recorded) -> (usize, Vec<Violation>, BTreeMap<String, usize>) {
    let mut violations = Vec::new();
    let mut transitions: BTreeMap<String, usize> = BTreeMap::new();
    // Each session's current state and when it was entered.
    let mut current: BTreeMap<(&str, &str), (&str, u64)> = BTreeMap::new();
    // Each client's newest session, and the sessions their clients began
    // closing: a close the client stopped waiting for can end after its
    // next session began, and that one is not closing.
    let mut newest: BTreeMap<&str, &str> = BTreeMap::new();
    let mut closing = std::collections::BTreeSet::new();
    let mut count = 0;
    for e in &run.entries {
        match &e.what {
            What::SessionStarted { session } => {
                newest.insert(&e.who, session);
                current.insert((&e.who, session), ("normal", e.at));
            }
            What::Closing => {
                if let Some(session) = newest.get(e.who.as_str()) {
                    closing.insert((e.who.as_str(), *session));
                }
            }
            What::State { state, session } => {
                count += 1;
                let key = (e.who.as_str(), session.as_str());
                let Some((from, since)) = current.get(&key).copied() else {
                    violations.push(Violation {
                        invariant: NAME,
                        at: e.at,
                        detail: format!(
                            "{} reported {state} for session {session}, which never started",
                            e.who
                        ),
                    });
                    continue;
                };
                *transitions.entry(format!("{from}->{state}")).or_default() += 1;
                if !allowed(from, state) {
                    violations.push(Violation {
                        invariant: NAME,
                        at: e.at,
                        detail: format!("{} went from {from} to {state}", e.who),
                    });
                } else if state == "closed" && !closing.contains(&key) {
                    violations.push(Violation {
                        invariant: NAME,
                        at: e.at,
                        detail: format!("{}'s session closed without its client closing it", e.who),
                    });
                } else if matches!(from, "safe" | "failover") && e.at != since {
                    violations.push(Violation {
                        invariant: NAME,
                        at: e.at,
                        detail: format!("{} stayed {from} for {} ms", e.who, e.at - since),
                    });
                }
                current.insert(key, (state, e.at));
            }
            _ => {}
        }
    }
    violations.extend(short_partitions_stay_normal(run));
    (count, violations, transitions)
}

/// `CS-1`: the clients cut off by a partition marked `expect_normal` see no
/// transition from the cut until a second after the repair.
fn short_partitions_stay_normal(run: &Recorded) -> Vec<Violation> {
    let mut violations = Vec::new();
    for (i, e) in run.entries.iter().enumerate() {
        let What::Fault {
            expect_normal: true,
            ..
        } = &e.what
        else {
            continue;
        };
        let rest = &run.entries[i + 1..];
        let healed = rest
            .iter()
            .find(|r| r.who == e.who && matches!(&r.what, What::Fault { fault, .. } if fault.starts_with("repair") || fault == "release"))
            .map_or(run.end, |r| r.at);
        // A fault that begins before then (another cut of this client, a
        // master crash) voids the promise.
        let interrupted = rest.iter().take_while(|r| r.at <= healed + 1_000).any(|r| {
            (r.who == e.who || is_server(&r.who))
                && matches!(&r.what, What::Fault { fault, .. }
                        if fault.starts_with("partition") || fault == "hold" || fault == "crash")
        });
        if interrupted {
            continue;
        }
        // Until the client closes its session itself.
        let left = rest
            .iter()
            .filter(|r| r.who == e.who)
            .take_while(|r| !matches!(r.what, What::Closing))
            .find(|r| r.at <= healed + 1_000 && matches!(r.what, What::State { .. }));
        if let Some(r) = left {
            violations.push(Violation {
                invariant: NAME,
                at: r.at,
                detail: format!(
                    "{} was cut off from {} ms to {healed} ms, inside its lease, yet left Normal: {:?}",
                    e.who, e.at, r.what
                ),
            });
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::check::tests::run_of;

    fn started(at: u64, session: &str) -> (u64, &'static str, What) {
        let what = What::SessionStarted {
            session: session.into(),
        };
        (at, "c1", what)
    }

    fn state(at: u64, session: &str, state: &str) -> (u64, &'static str, What) {
        let what = What::State {
            state: state.into(),
            session: session.into(),
        };
        (at, "c1", what)
    }

    // CS-8: a close the client stopped waiting for may finish after its
    // next session began; it is still the old session's own close.
    #[test]
    fn a_close_that_finishes_after_the_next_session_began_passes() {
        let run = run_of(vec![
            started(0, "s1"),
            (1_000, "c1", What::Closing),
            started(1_500, "s2"),
            state(1_800, "s1", "closed"),
        ]);
        let (_, violations, _) = check(&run);
        assert!(violations.is_empty(), "{violations:?}");
    }

    // CS-8: the client closing one session does not let another close.
    #[test]
    fn a_session_closed_that_its_client_never_closed_is_caught() {
        let run = run_of(vec![
            started(0, "s1"),
            (1_000, "c1", What::Closing),
            started(1_500, "s2"),
            state(1_800, "s2", "closed"),
        ]);
        let (_, violations, _) = check(&run);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0]
            .detail
            .contains("without its client closing it"));
    }
}
