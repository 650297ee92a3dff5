//! Mutual exclusion, as the clients believed it: at no virtual instant did
//! two clients believe they held the same exclusive lock (or more than the
//! limit a semaphore's slots) while their local lease was valid. Correct
//! clients stop believing when their session leaves `Normal`, so each
//! belief lies inside a valid local lease.

use std::collections::BTreeMap;

use super::Recorded;
use super::Violation;
use crate::sim::app::SEMAPHORE;
use crate::sim::trace::What;

pub const NAME: &str = "exclusion";

/// A holding as one client believed it: `[from, to)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Belief {
    pub who: String,
    pub lock: String,
    pub generation: u64,
    pub from: u64,
    pub to: u64,
}

/// Every belief in the trace; one still held at the end lasts to the end.
/// A second belief in a lock the client already believed it held is a
/// violation of the trace's own form.
pub fn beliefs(run: &Recorded) -> (Vec<Belief>, Vec<Violation>) {
    let mut open: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    let mut done = Vec::new();
    let mut malformed = Vec::new();
    for e in &run.entries {
        match &e.what {
            What::Holding {
                lock, generation, ..
            } => {
                let key = (e.who.clone(), lock.clone());
                if open.insert(key, (e.at, *generation)).is_some() {
                    malformed.push(Violation {
                        invariant: NAME,
                        at: e.at,
                        detail: format!("{} began holding {lock} again without letting go", e.who),
                    });
                }
            }
            What::Released { lock, .. } => {
                if let Some((from, generation)) = open.remove(&(e.who.clone(), lock.clone())) {
                    done.push(Belief {
                        who: e.who.clone(),
                        lock: lock.clone(),
                        generation,
                        from,
                        to: e.at,
                    });
                }
            }
            _ => {}
        }
    }
    for ((who, lock), (from, generation)) in open {
        let to = run.end;
        done.push(Belief {
            who,
            lock,
            generation,
            from,
            to,
        });
    }
    (done, malformed)
}

pub fn check(run: &Recorded) -> (usize, Vec<Violation>) {
    let (all, mut violations) = beliefs(run);
    let mut by_lock: BTreeMap<&str, Vec<&Belief>> = BTreeMap::new();
    for b in all.iter().filter(|b| b.to > b.from) {
        by_lock.entry(&b.lock).or_default().push(b);
    }
    for (lock, beliefs) in by_lock {
        let limit = if lock == SEMAPHORE {
            run.settings.semaphore_limit as usize
        } else {
            1
        };
        // Ends sort before starts at the same instant: [from, to).
        let mut edges: Vec<(u64, bool, &Belief)> = Vec::new();
        for b in beliefs {
            edges.push((b.from, true, b));
            edges.push((b.to, false, b));
        }
        edges.sort_by_key(|(at, start, b)| (*at, *start, b.who.clone()));
        let mut holders: Vec<&Belief> = Vec::new();
        for (at, start, b) in edges {
            if !start {
                holders.retain(|h| !std::ptr::eq(*h, b));
                continue;
            }
            holders.push(b);
            if holders.len() > limit {
                let who: Vec<String> = holders
                    .iter()
                    .map(|h| {
                        format!(
                            "{} (generation {}, from {} ms)",
                            h.who, h.generation, h.from
                        )
                    })
                    .collect();
                violations.push(Violation {
                    invariant: NAME,
                    at,
                    detail: format!(
                        "{} clients believed they held {lock} (limit {limit}): {}",
                        holders.len(),
                        who.join(", ")
                    ),
                });
            }
        }
    }
    (all.len(), violations)
}
