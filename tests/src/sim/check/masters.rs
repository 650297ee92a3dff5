//! Masters (`CELL-3`, `CELL-6`): epochs rise strictly, one master after
//! another, and at most one master decides at any instant: a master of a
//! newer epoch begins serving only once every master of an older one has
//! stopped (or its host crashed), and no master of an older epoch grants a
//! lease after it began. The master lease is what makes the old one stop
//! in time; a master that kept granting after losing its quorum breaks
//! this, and so does any rule the lease counts on, broken (a restarted
//! member that votes at once, a follower that refuses rivals for less
//! time than the lease assumes), even when the old master happened to
//! grant nothing in the overlap.
//!
//! And masters change only for a cause: every master begins within
//! [`SETTLE`] of the start or of a fault among the servers (a crash or
//! restart, a cut or repair of a member's links, a membership change). A
//! cell whose members depose their masters with nothing wrong (a removed
//! member that keeps standing for election, `CELL-9`) serves in fits and
//! starts, and this is where it shows.

use std::collections::BTreeMap;

use super::Recorded;
use super::Violation;
use crate::sim::trace::What;

pub const NAME: &str = "masters";

/// How long after a fault among the servers a new master may begin: a
/// crash's detection (the engine's leader lease and an election timeout,
/// up to 1 s), elections lost to split votes, an epoch through the log,
/// and a member coming back from a cut with a higher term.
pub const SETTLE: u64 = 4_000;

pub fn check(run: &Recorded) -> (usize, Vec<Violation>) {
    let mut violations = Vec::new();
    // The servers: whoever serves as a master or holds a replica, and the
    // operator who changes a cell's members.
    let servers: std::collections::BTreeSet<&str> = run
        .entries
        .iter()
        .filter(|e| matches!(e.what, What::Serving { .. } | What::Replica { .. }))
        .map(|e| e.who.as_str())
        .chain(["admin"])
        .collect();
    // When the servers last had a fault; the start counts as one: a cell's
    // members start together, and their first elections may split.
    let mut troubled: u64 = 0;
    // Each server's master's epoch, from the last time one began there.
    let mut epoch_of: BTreeMap<&str, u64> = BTreeMap::new();
    // The newest epoch that began serving: the epoch, when, where.
    let mut newest: Option<(u64, u64, &str)> = None;
    // The masters that began serving and have not stopped: host, epoch.
    let mut running: BTreeMap<&str, u64> = BTreeMap::new();
    let mut masters = 0;
    for e in &run.entries {
        let who = e.who.as_str();
        match &e.what {
            What::Serving { epoch } => {
                if e.at > troubled + SETTLE {
                    let since = match troubled {
                        0 => "the start".to_string(),
                        at => format!("{at} ms"),
                    };
                    violations.push(Violation {
                        invariant: NAME,
                        at: e.at,
                        detail: format!(
                            "a master on {who} began serving in epoch {epoch} with no fault among the servers since {since}: the cell changed masters for no cause"
                        ),
                    });
                }
                masters += 1;
                for (host, old) in &running {
                    if old < epoch {
                        violations.push(Violation {
                            invariant: NAME,
                            at: e.at,
                            detail: format!(
                                "a master on {who} began serving in epoch {epoch} while the master of epoch {old} on {host} had not stopped: two masters at once"
                            ),
                        });
                    }
                }
                running.insert(who, *epoch);
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
            What::Stopped { epoch } if running.get(who) == Some(epoch) => {
                running.remove(who);
            }
            What::Fault { fault, .. } if servers.contains(who) => {
                troubled = e.at;
                if fault == "crash" {
                    running.remove(who);
                }
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

    fn stopped(at: u64, who: &'static str, epoch: u64) -> (u64, &'static str, What) {
        (at, who, What::Stopped { epoch })
    }

    fn crash(at: u64, who: &'static str) -> (u64, &'static str, What) {
        let what = What::Fault {
            fault: "crash".into(),
            peer: String::new(),
            expect_normal: false,
        };
        (at, who, what)
    }

    #[test]
    fn masters_one_after_another_pass() {
        let run = run_of(vec![
            serving(0, "m1", 1),
            lease(100, "m1"),
            stopped(1_500, "m1", 1),
            serving(2_000, "m2", 2),
            lease(2_100, "m2"),
            crash(4_000, "m2"),
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
        assert!(!violations.is_empty(), "{violations:?}");
        assert!(violations.iter().any(|v| v.detail.contains("granted")));
    }

    // CELL-6: the old master granting nothing in the overlap does not make
    // an overlap safe.
    #[test]
    fn a_new_master_serving_before_the_old_one_stopped_is_caught() {
        let run = run_of(vec![
            serving(0, "m1", 1),
            lease(100, "m1"),
            serving(2_000, "m2", 2),
            stopped(2_050, "m1", 1),
        ]);
        let (_, violations) = check(&run);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0].detail.contains("had not stopped"));
    }

    // CELL-9: a removed member that keeps standing deposes master after
    // master with nothing wrong among the servers.
    #[test]
    fn a_master_change_long_after_any_fault_is_caught() {
        let run = run_of(vec![
            serving(500, "m1", 1),
            crash(6_000, "m1"),
            serving(7_000, "m2", 2),
            stopped(12_000, "m2", 2),
            serving(12_100, "m3", 3),
        ]);
        let (_, violations) = check(&run);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0]
            .detail
            .contains("no fault among the servers since 6000 ms"));
    }

    #[test]
    fn an_epoch_that_does_not_rise_is_caught() {
        let run = run_of(vec![serving(0, "m1", 2), serving(2_000, "m2", 2)]);
        assert_eq!(check(&run).1.len(), 1);
    }
}
