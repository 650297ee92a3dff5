//! Replicas (`CELL-3`): every member that applied the cell's log up to the
//! same index holds the same replica, whatever masters came and went and
//! whichever members crashed and caught up from a snapshot. The driver
//! samples each member's replica as its applied index moves.

use std::collections::BTreeMap;

use super::Recorded;
use super::Violation;
use crate::sim::trace::What;

pub const NAME: &str = "replicas";

pub fn check(run: &Recorded) -> (usize, Vec<Violation>) {
    let mut violations = Vec::new();
    // The first sample at each index: its digest, where, when.
    let mut first: BTreeMap<u64, (u64, &str, u64)> = BTreeMap::new();
    let mut compared = std::collections::BTreeSet::new();
    for e in &run.entries {
        let What::Replica { index, digest } = &e.what else {
            continue;
        };
        match first.get(index) {
            Some(&(seen, by, at)) if by != e.who => {
                compared.insert(*index);
                if seen != *digest {
                    violations.push(Violation {
                        invariant: NAME,
                        at: e.at,
                        detail: format!(
                            "{}'s replica at index {index} differs from {by}'s at the same index ({at} ms)",
                            e.who
                        ),
                    });
                }
            }
            Some(_) => {}
            None => {
                first.insert(*index, (*digest, &e.who, e.at));
            }
        }
    }
    (compared.len(), violations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::check::tests::run_of;

    fn replica(at: u64, who: &'static str, index: u64, digest: u64) -> (u64, &'static str, What) {
        (at, who, What::Replica { index, digest })
    }

    #[test]
    fn members_alike_at_each_index_pass() {
        let run = run_of(vec![
            replica(10, "m1", 5, 7),
            replica(12, "m2", 5, 7),
            replica(20, "m1", 6, 8),
        ]);
        assert_eq!(check(&run), (1, vec![]));
    }

    #[test]
    fn members_that_differ_at_an_index_are_caught() {
        let run = run_of(vec![replica(10, "m1", 5, 7), replica(12, "m3", 5, 9)]);
        assert_eq!(check(&run).1.len(), 1);
    }
}
