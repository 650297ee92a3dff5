//! Fencing at the storage host: a write is accepted only with a sequencer
//! at least as new as the newest the host has seen, so no write of a holder
//! that a newer one superseded is accepted, however late it arrives; and
//! every accepted write carries a generation its writer was granted.

use std::collections::{BTreeMap, BTreeSet};

use super::Violation;
use crate::sim::trace::What;
use crate::sim::world::Run;

pub const NAME: &str = "fencing";

pub fn check(run: &Run) -> (usize, Vec<Violation>) {
    let mut newest: BTreeMap<&str, (u64, &str)> = BTreeMap::new();
    let mut granted: BTreeSet<(&str, &str, u64)> = BTreeSet::new();
    let mut violations = Vec::new();
    let mut writes = 0;
    for e in &run.entries {
        match &e.what {
            What::Holding { lock, generation } => {
                granted.insert((&e.who, lock, *generation));
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
