//! Waits ride through what their sessions ride through (`LOCK-15`): no
//! wait for a lock, a term or a semaphore slot ends with an error while
//! its session lives. A wait ends granted, refused (the lock was held, or
//! in lock-delay, past its timeout), with its session's end, with its
//! timeout while its session was out of contact, or because the
//! application stopped waiting; a lost connection, an answer that never
//! came or a fail-over is never how it ends.

use super::Recorded;
use super::Violation;
use crate::sim::trace::What;

pub const NAME: &str = "waits";

pub fn check(run: &Recorded) -> (usize, Vec<Violation>) {
    let mut checked = 0;
    let mut violations = Vec::new();
    for e in &run.entries {
        let What::Waited { lock, outcome } = &e.what else {
            continue;
        };
        checked += 1;
        if let Some(error) = outcome.strip_prefix("error: ") {
            violations.push(Violation {
                invariant: NAME,
                at: e.at,
                detail: format!("{}'s wait for {lock} ended with an error: {error}", e.who),
            });
        }
    }
    (checked, violations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::trace::Entry;

    fn run_of(outcomes: &[&str]) -> Recorded {
        let entries = outcomes
            .iter()
            .enumerate()
            .map(|(at, outcome)| Entry {
                at: at as u64,
                who: "c1".into(),
                what: What::Waited {
                    lock: "locks/work".into(),
                    outcome: outcome.to_string(),
                },
            })
            .collect();
        Recorded {
            scenario: "unit".into(),
            seed: 0,
            settings: crate::sim::check::tests::limits(),
            contenders: 1,
            entries,
            error: None,
            end: 10,
        }
    }

    #[test]
    fn every_way_a_wait_may_end_passes() {
        let run = run_of(&["granted", "refused", "expired", "timeout", "gave_up"]);
        assert_eq!(check(&run), (5, Vec::new()));
    }

    #[test]
    fn a_wait_ended_by_an_error_is_caught() {
        let run = run_of(&["granted", "error: connection lost before the reply arrived"]);
        let (checked, violations) = check(&run);
        assert_eq!(checked, 2);
        assert_eq!(violations.len(), 1);
        assert!(
            violations[0].detail.contains("connection lost"),
            "{violations:?}"
        );
    }
}
