//! Masters (`CELL-3`, `CELL-6`): epochs rise strictly, one master after
//! another, and at most one master grants at any instant: once a master
//! of a newer epoch has begun serving, no master of an older one grants a
//! lease again. The master lease is what makes the old one stop in time; a
//! master that kept granting after losing its quorum breaks this.

use std::collections::BTreeMap;

use super::Recorded;
use super::Violation;
use crate::sim::trace::What;

pub const NAME: &str = "masters";

pub fn check(run: &Recorded) -> (usize, Vec<Violation>) {
    let mut violations = Vec::new();
    // Each server's master's epoch, from the last time one began there.
    let mut epoch_of: BTreeMap<&str, u64> = BTreeMap::new();
    // The newest epoch that began serving: the epoch, when, where.
    let mut newest: Option<(u64, u64, &str)> = None;
    let mut masters = 0;
    for e in &run.entries {
        let who = e.who.as_str();
        match &e.what {
            What::Serving { epoch } => {
                masters += 1;
                match newest {
                    Some((top, at, by)) if *epoch <= top => violations.push(Violation {
                        invariant: NAME,
                        at: e.at,
                        detail: format!(
                            "a master on {who} began serving in epoch {epoch}, no newer than epoch {top} that began on {by} at {at} ms"
                        ),
                    }),
                    _ => newest = Some((*epoch, e.at, who)),
                }
                epoch_of.insert(who, *epoch);
            }
            What::Lease { session, .. } => {
                let (Some(epoch), Some((top, at, by))) = (epoch_of.get(who), newest) else {
                    continue;
                };
                if *epoch < top {
                    violations.push(Violation {
                        invariant: NAME,
                        at: e.at,
                        detail: format!(
                            "the master on {who} (epoch {epoch}) granted session {session} a lease after a master on {by} began serving in epoch {top} at {at} ms: two masters granting at once"
                        ),
                    });
                }
            }
            _ => {}
        }
    }
    (masters, violations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::check::tests::run_of;

    fn serving(at: u64, who: &'static str, epoch: u64) -> (u64, &'static str, What) {
        (at, who, What::Serving { epoch })
    }

    fn lease(at: u64, who: &'static str) -> (u64, &'static str, What) {
        let what = What::Lease {
            session: "s1".into(),
            until: at + 4_000,
            why: "keepalive".into(),
        };
        (at, who, what)
    }

    #[test]
    fn masters_one_after_another_pass() {
        let run = run_of(vec![
            serving(0, "m1", 1),
            lease(100, "m1"),
            serving(2_000, "m2", 2),
            lease(2_100, "m2"),
            serving(5_000, "m1", 3),
            lease(5_100, "m1"),
        ]);
        assert_eq!(check(&run), (3, vec![]));
    }

    #[test]
    fn an_old_master_granting_after_a_new_one_began_is_caught() {
        let run = run_of(vec![
            serving(0, "m1", 1),
            serving(2_000, "m2", 2),
            lease(2_300, "m1"),
        ]);
        let (_, violations) = check(&run);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].detail.contains("two masters"));
    }

    #[test]
    fn an_epoch_that_does_not_rise_is_caught() {
        let run = run_of(vec![serving(0, "m1", 2), serving(2_000, "m2", 2)]);
        assert_eq!(check(&run).1.len(), 1);
    }
}
