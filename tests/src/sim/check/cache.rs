//! No read a session's cache served returned a value older than a write
//! acknowledged before the read began (`CACHE-3`): the value it read was not
//! written by a put acknowledged before an acknowledged put of the same key
//! began, and a key some acknowledged put created was not read as absent.
//! The linearizable check holds cached reads to the rest, with every other
//! call; this one names the stale hit when there is one, and counts the
//! hits, so a run whose cache served nothing is seen to check nothing.

use std::collections::HashMap;

use super::history::{by_key, ops, Op};
use super::Recorded;
use super::Violation;

pub const NAME: &str = "cache";

pub fn check(run: &Recorded) -> (usize, Vec<Violation>) {
    let all = ops(run);
    let mut violations = Vec::new();
    let mut hits = 0;
    for (key, ops) in by_key(&all) {
        let puts: Vec<&Op> = ops
            .iter()
            .copied()
            .filter(|o| o.written().is_some())
            .collect();
        let by_value: HashMap<&str, &Op> = puts
            .iter()
            .filter_map(|p| p.written().map(|v| (v, *p)))
            .collect();
        for read in ops.iter().filter(|o| o.hit) {
            let Some(value) = read.read() else {
                continue;
            };
            hits += 1;
            // Acknowledged before the read began.
            let before = puts
                .iter()
                .filter(|p| p.ok() && p.completed.is_some_and(|end| end < read.invoked));
            let stale = match value {
                None => before.clone().next().map(|p| (p, "absent".to_string())),
                Some(v) => match by_value.get(v) {
                    None => {
                        violations.push(Violation {
                            invariant: NAME,
                            at: read.invoked,
                            detail: format!(
                                "{} read {v:?} from {key}, which no put wrote",
                                read.who
                            ),
                        });
                        continue;
                    }
                    // Older only if acknowledged before the other began: a
                    // put whose answer never came may take effect at any
                    // time after it began, a delayed request long after
                    // the client gave up on it.
                    Some(writer) => before
                        .clone()
                        .find(|p| {
                            writer.ok() && writer.completed.is_some_and(|end| end < p.invoked)
                        })
                        .map(|p| (p, format!("{v:?}"))),
                },
            };
            if let Some((newer, read_as)) = stale {
                violations.push(Violation {
                    invariant: NAME,
                    at: read.invoked,
                    detail: format!(
                        "{}'s cache served {key} as {read_as} at {} ms, after the put of {:?} was acknowledged at {} ms",
                        read.who,
                        read.invoked,
                        newer.written().unwrap_or_default(),
                        newer.completed.unwrap_or_default()
                    ),
                });
            }
        }
    }
    violations.extend(bounded_waits(run, &all));
    (hits, violations)
}

/// In `cache-partition`, where only the contenders are cut off, every write
/// the bystanders had acknowledged waited no longer than a cut-off
/// cacher's lease, and a second for the round trips (`CACHE-3`).
fn bounded_waits(run: &Recorded, all: &[Op]) -> Vec<Violation> {
    if run.scenario != "cache-partition" {
        return Vec::new();
    }
    let bound = run.settings.lease.as_millis() as u64 + 1_000;
    all.iter()
        .filter(|o| o.written().is_some() && o.ok() && (o.who == "w1" || o.who == "w2"))
        .filter_map(|o| {
            let took = o.completed? - o.invoked;
            (took > bound).then(|| Violation {
                invariant: NAME,
                at: o.invoked,
                detail: format!(
                    "{}'s write of {} took {took} ms, past a cacher's lease and a second ({bound} ms)",
                    o.who, o.key
                ),
            })
        })
        .collect()
}
