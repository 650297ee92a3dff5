//! No client ever read or heard of a key its principal could not read at
//! that index (`ACL-4`).
//!
//! The operator changes one rule at a time, each setting what the snooper
//! may read under one prefix; before the first, it may read everything.
//! A change that was answered took effect at the index its answer gave; one
//! whose outcome is unknown may have taken effect anywhere after the
//! change answered before it, and before the next one answered, or not at
//! all; a failed one did not.
//!
//! - An event is judged at the index of the change it tells of: the rule
//!   then is the last answered change's before that index, or any unknown
//!   change that may have come between. The snooper must not have heard
//!   it unless one of these lets it read the key.
//! - A read is judged by time: it took effect somewhere between its
//!   sending and its answer. The snooper must not have learned the key
//!   unless a rule in force at some moment of that span let it read: the
//!   one in force when the read was sent, or any change made (or possibly
//!   made) during it.

use std::collections::BTreeMap;

use super::{Recorded, Violation};
use crate::sim::rules::{OPERATOR, SNOOPER};
use crate::sim::trace::What;

pub const NAME: &str = "access";

/// One change of the snooper's rule on a prefix.
#[derive(Debug, Clone)]
struct Change {
    read: bool,
    sent: u64,
    /// When its answer came; `None` for an unknown outcome, which may take
    /// effect later still.
    answered: Option<u64>,
    /// The index it was applied at, when answered.
    index: Option<u64>,
}

/// The operator's changes, by prefix, in the order made; failed ones,
/// which changed nothing, left out.
fn changes(run: &Recorded) -> BTreeMap<String, Vec<Change>> {
    let mut by_prefix: BTreeMap<String, Vec<Change>> = BTreeMap::new();
    let mut sending: Option<u64> = None;
    for e in run.entries.iter().filter(|e| e.who == OPERATOR) {
        match &e.what {
            What::RuleSending { .. } => sending = Some(e.at),
            What::RuleSet {
                prefix,
                rights,
                outcome,
                index,
            } => {
                let sent = sending.take().unwrap_or(e.at);
                if outcome == "failed" {
                    continue;
                }
                let done = outcome == "done";
                by_prefix.entry(prefix.clone()).or_default().push(Change {
                    read: rights == "read",
                    sent,
                    answered: done.then_some(e.at),
                    index: if done { *index } else { None },
                });
            }
            _ => {}
        }
    }
    by_prefix
}

/// The prefix among `prefixes` that decides `key`: the longest that
/// starts it.
fn governing<'a>(prefixes: &'a BTreeMap<String, Vec<Change>>, key: &str) -> Option<&'a [Change]> {
    prefixes
        .iter()
        .filter(|(p, _)| key.starts_with(p.as_str()))
        .max_by_key(|(p, _)| p.len())
        .map(|(_, changes)| changes.as_slice())
}

/// Whether some rule possibly in force at `index` lets the snooper read.
fn readable_at_index(changes: &[Change], index: u64) -> bool {
    // The last answered change before the index, and the unknown ones
    // after it that may have come before the index: made before the first
    // answered change past the index was sent.
    let last = changes
        .iter()
        .rposition(|c| c.index.is_some_and(|i| i < index));
    let mut possible = vec![last.is_none_or(|at| changes[at].read)];
    for change in &changes[last.map_or(0, |at| at + 1)..] {
        match change.index {
            Some(i) if i > index => break,
            Some(_) => {}
            None => possible.push(change.read),
        }
    }
    possible.into_iter().any(|read| read)
}

/// Whether some rule in force at some moment from `sent` to `answered`
/// lets the snooper read.
fn readable_during(changes: &[Change], sent: u64, answered: u64) -> bool {
    // In force at `sent`: the last change answered before it; unknown
    // changes sent before it may be in force too.
    let last = changes
        .iter()
        .rposition(|c| c.answered.is_some_and(|at| at < sent));
    let mut possible = vec![last.is_none_or(|at| changes[at].read)];
    for change in &changes[last.map_or(0, |at| at + 1)..] {
        if change.sent <= answered {
            possible.push(change.read);
        }
    }
    possible.into_iter().any(|read| read)
}

pub fn check(run: &Recorded) -> (usize, Vec<Violation>) {
    let by_prefix = changes(run);
    let mut judged = 0;
    let mut violations = Vec::new();
    for e in run.entries.iter().filter(|e| e.who == SNOOPER) {
        let (key, allowed, what) = match &e.what {
            What::Heard { key, index } => {
                let allowed =
                    governing(&by_prefix, key).is_none_or(|c| readable_at_index(c, *index));
                (
                    key,
                    allowed,
                    format!("heard of {key} changed at index {index}"),
                )
            }
            What::Learned { key, sent } => {
                let allowed =
                    governing(&by_prefix, key).is_none_or(|c| readable_during(c, *sent, e.at));
                (
                    key,
                    allowed,
                    format!("read {key} from {sent} ms to {} ms", e.at),
                )
            }
            _ => continue,
        };
        judged += 1;
        if !allowed {
            violations.push(Violation {
                invariant: NAME,
                at: e.at,
                detail: format!(
                    "the snooper {what}, though no rule in force then let it read {key}"
                ),
            });
        }
    }
    (judged, violations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::check::tests::run_of;

    fn set(prefix: &str, read: bool, outcome: &str, index: Option<u64>) -> What {
        What::RuleSet {
            prefix: prefix.into(),
            rights: if read { "read" } else { "none" }.into(),
            outcome: outcome.into(),
            index,
        }
    }

    fn sending(prefix: &str) -> What {
        What::RuleSending {
            prefix: prefix.into(),
            rights: String::new(),
        }
    }

    fn heard(key: &str, index: u64) -> What {
        What::Heard {
            key: key.into(),
            index,
        }
    }

    #[test]
    fn an_event_after_the_rule_denied_the_key_is_a_violation() {
        let run = run_of(vec![
            (100, OPERATOR, sending("kv/a/")),
            (110, OPERATOR, set("kv/a/", false, "done", Some(10))),
            (200, SNOOPER, heard("kv/a/k", 9)),
            (210, SNOOPER, heard("kv/b/k", 12)),
            (220, SNOOPER, heard("kv/a/k", 11)),
        ]);
        let (judged, violations) = check(&run);
        assert_eq!(judged, 3);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert_eq!(violations[0].at, 220);
    }

    #[test]
    fn a_change_of_unknown_outcome_may_be_in_force() {
        let run = run_of(vec![
            (100, OPERATOR, sending("kv/a/")),
            (110, OPERATOR, set("kv/a/", false, "done", Some(10))),
            (200, OPERATOR, sending("kv/a/")),
            (900, OPERATOR, set("kv/a/", true, "unknown", None)),
            (950, SNOOPER, heard("kv/a/k", 30)),
        ]);
        assert!(check(&run).1.is_empty());
    }

    #[test]
    fn a_read_sent_after_a_denial_was_answered_is_a_violation() {
        let run = run_of(vec![
            (100, OPERATOR, sending("kv/a/")),
            (110, OPERATOR, set("kv/a/", false, "done", Some(10))),
            (
                300,
                SNOOPER,
                What::Learned {
                    key: "kv/a/k".into(),
                    sent: 105,
                },
            ),
            (
                400,
                SNOOPER,
                What::Learned {
                    key: "kv/a/k".into(),
                    sent: 120,
                },
            ),
        ]);
        let (_, violations) = check(&run);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert_eq!(violations[0].at, 400);
    }
}
