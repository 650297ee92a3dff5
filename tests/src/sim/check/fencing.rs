//! Fencing: the sequencers the master hands out make it work, and the
//! storage host applies them.
//!
//! - Each holder of an exclusive lock (or leader) got a generation higher
//!   than every earlier holder's, across expiries and master restarts
//!   (`LOCK-2`): otherwise a superseded holder's sequencer would pass.
//! - The storage host accepted no write with a generation older than one it
//!   had already seen (its writer had been superseded), and none under a
//!   generation its writer was never granted.

use std::collections::{BTreeMap, BTreeSet};

use super::Recorded;
use super::Violation;
use crate::sim::app::SEMAPHORE;
use crate::sim::trace::What;

pub const NAME: &str = "fencing";

pub fn check(run: &Recorded) -> (usize, Vec<Violation>) {
    let mut newest: BTreeMap<&str, (u64, &str)> = BTreeMap::new();
    let mut granted: BTreeSet<(&str, &str, u64)> = BTreeSet::new();
    // The highest generation granted so far, and to whom.
    let mut highest: BTreeMap<&str, (u64, &str)> = BTreeMap::new();
    let mut violations = Vec::new();
    let mut writes = 0;
    for e in &run.entries {
        match &e.what {
            What::Holding {
                lock, generation, ..
            } if lock.as_str() != SEMAPHORE => {
                granted.insert((&e.who, lock, *generation));
                let (top, by) = highest.get(lock.as_str()).copied().unwrap_or((0, ""));
                if by != e.who && *generation <= top {
                    violations.push(Violation {
                        invariant: NAME,
                        at: e.at,
                        detail: format!(
                            "{} was granted {lock} with generation {generation}, no newer than {by}'s {top}",
                            e.who
                        ),
                    });
                }
                if *generation >= top {
                    highest.insert(lock, (*generation, &e.who));
                }
            }
            What::Write {
                lock,
                generation,
                accepted,
                ..
            } => {
                writes += 1;
                let (seen, by) = newest.get(lock.as_str()).copied().unwrap_or((0, ""));
                if *accepted && *generation < seen {
                    violations.push(Violation {
                        invariant: NAME,
                        at: e.at,
                        detail: format!(
                            "the storage host accepted {}'s write to {lock} with generation {generation} after {by}'s with generation {seen}: {} had been superseded",
                            e.who, e.who
                        ),
                    });
                }
                if *accepted && !granted.contains(&(e.who.as_str(), lock.as_str(), *generation)) {
                    violations.push(Violation {
                        invariant: NAME,
                        at: e.at,
                        detail: format!(
                            "the storage host accepted {}'s write to {lock} with generation {generation}, which {} never held",
                            e.who, e.who
                        ),
                    });
                }
                if *generation > seen {
                    newest.insert(lock, (*generation, &e.who));
                }
            }
            _ => {}
        }
    }
    (writes, violations)
}
