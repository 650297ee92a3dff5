//! Members (`CELL-9`): what the operator is told of a change of members
//! is what the cell holds. A `Done` names the voters after the change;
//! they must follow from the voters known before it by the change asked
//! and by any of the changes given up since (each may have been carried
//! through in part), and the cell must end with voters that follow from
//! the last `Done` alike. A master that answers `Done` from a
//! configuration nobody else took (a joint one left by its own crash) is
//! caught here: the cell goes on without the change the operator was told
//! is done (`cell-removal-crash` seed 5001668).

use std::collections::BTreeSet;

use super::Recorded;
use super::Violation;
use crate::sim::admin;
use crate::sim::trace::What;

pub const NAME: &str = "members";

/// A change of members the operator asked for: add (true) or remove, and
/// the member's number.
type Change = (bool, u64);

pub fn check(run: &Recorded) -> (usize, Vec<Violation>) {
    let mut violations = Vec::new();
    let mut checked = 0;
    // The voters known for certain: the first leader's, then each the
    // operator was told of.
    let mut known: Option<BTreeSet<u64>> = None;
    // Changes given up since: each may or may not have been carried out.
    let mut undecided: Vec<Change> = Vec::new();
    let mut asking: Option<Change> = None;
    // The leader's membership when it last changed: when, and its halves.
    let mut last: Option<(u64, &Vec<Vec<u64>>)> = None;
    for e in &run.entries {
        match &e.what {
            What::Configuration { configs } => {
                if let (None, [voters]) = (&known, configs.as_slice()) {
                    known = Some(voters.iter().copied().collect());
                }
                last = Some((e.at, configs));
            }
            What::Fault { fault, peer, .. } if e.who == admin::HOST => {
                let member = peer.trim_start_matches('m').parse().unwrap_or(0);
                match fault.as_str() {
                    "add" | "remove" => asking = Some((fault == "add", member)),
                    given_up if given_up.ends_with("-given-up") => {
                        undecided.extend(asking.take());
                    }
                    _ => {}
                }
            }
            What::Configured { voters } => {
                checked += 1;
                let told: BTreeSet<u64> = voters.iter().copied().collect();
                let change = asking.take();
                if let Some(before) = &known {
                    let possible = reachable(before, &undecided, change);
                    if !possible.contains(&told) {
                        violations.push(Violation {
                            invariant: NAME,
                            at: e.at,
                            detail: format!(
                                "the operator was told {} is done with voters {}, which do not follow from voters {}{}",
                                describe(change),
                                show(&told),
                                show(before),
                                given_up(&undecided),
                            ),
                        });
                    }
                }
                known = Some(told);
                undecided.clear();
            }
            _ => {}
        }
    }
    // The leader's membership at the end: it is sampled whenever it
    // changes, so the last sample is the one held at the end.
    if let (Some(before), Some((at, configs))) = (&known, last) {
        checked += 1;
        let possible = reachable(before, &undecided, None);
        for config in configs {
            let held: BTreeSet<u64> = config.iter().copied().collect();
            if !possible.contains(&held) {
                violations.push(Violation {
                    invariant: NAME,
                    at,
                    detail: format!(
                        "the cell ends with voters {}, which do not follow from voters {} the operator was last told of{}",
                        show(&held),
                        show(before),
                        given_up(&undecided),
                    ),
                });
            }
        }
    }
    (checked, violations)
}

/// Every set of voters that `voters` can become by any of `undecided`, in
/// order, and then by `change`.
fn reachable(
    voters: &BTreeSet<u64>,
    undecided: &[Change],
    change: Option<Change>,
) -> Vec<BTreeSet<u64>> {
    let mut possible = vec![voters.clone()];
    for &step in undecided {
        let done: Vec<BTreeSet<u64>> = possible.iter().map(|v| apply(v, step)).collect();
        possible.extend(done);
    }
    if let Some(step) = change {
        possible = possible.iter().map(|v| apply(v, step)).collect();
    }
    possible
}

fn apply(voters: &BTreeSet<u64>, (add, member): Change) -> BTreeSet<u64> {
    let mut after = voters.clone();
    if add {
        after.insert(member);
    } else {
        after.remove(&member);
    }
    after
}

fn describe(change: Option<Change>) -> String {
    match change {
        Some((true, member)) => format!("adding m{member}"),
        Some((false, member)) => format!("removing m{member}"),
        None => "a change".into(),
    }
}

fn show(voters: &BTreeSet<u64>) -> String {
    let names: Vec<String> = voters.iter().map(|v| format!("m{v}")).collect();
    format!("{{{}}}", names.join(", "))
}

fn given_up(undecided: &[Change]) -> String {
    if undecided.is_empty() {
        return String::new();
    }
    let changes: Vec<String> = undecided.iter().map(|c| describe(Some(*c))).collect();
    format!(" (given up since: {})", changes.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::check::tests::run_of;

    fn configuration(at: u64, configs: &[&[u64]]) -> (u64, &'static str, What) {
        let configs = configs.iter().map(|c| c.to_vec()).collect();
        (at, "cell", What::Configuration { configs })
    }

    fn operator(at: u64, fault: &str, member: &str) -> (u64, &'static str, What) {
        let what = What::Fault {
            fault: fault.into(),
            peer: member.into(),
            expect_normal: false,
        };
        (at, admin::HOST, what)
    }

    fn told(at: u64, voters: &[u64]) -> (u64, &'static str, What) {
        let voters = voters.to_vec();
        (at, admin::HOST, What::Configured { voters })
    }

    #[test]
    fn a_change_told_done_and_kept_passes() {
        let run = run_of(vec![
            configuration(100, &[&[1, 2, 3]]),
            operator(1_000, "add", "m4"),
            configuration(1_200, &[&[1, 2, 3], &[1, 2, 3, 4]]),
            configuration(1_300, &[&[1, 2, 3, 4]]),
            told(1_400, &[1, 2, 3, 4]),
            operator(1_400, "add-done", "m4"),
        ]);
        assert_eq!(check(&run), (2, vec![]));
    }

    // CELL-9: cell-removal-crash seed 5001668
    #[test]
    fn a_change_told_done_that_the_cell_lost_is_caught() {
        let run = run_of(vec![
            configuration(100, &[&[1, 2, 3]]),
            operator(1_000, "add", "m4"),
            told(1_400, &[1, 2, 3, 4]),
            operator(1_400, "add-done", "m4"),
            configuration(3_000, &[&[1, 2, 3]]),
        ]);
        let (_, violations) = check(&run);
        assert_eq!(violations.len(), 1, "{violations:?}");
        assert!(violations[0]
            .detail
            .contains("ends with voters {m1, m2, m3}"));
    }

    #[test]
    fn a_done_naming_voters_the_change_does_not_give_is_caught() {
        let run = run_of(vec![
            configuration(100, &[&[1, 2, 3]]),
            operator(1_000, "remove", "m3"),
            told(1_400, &[1, 2, 3]),
        ]);
        assert_eq!(check(&run).1.len(), 1);
    }

    #[test]
    fn a_change_given_up_may_be_carried_out_or_not() {
        let gave_up = |end: &[&[u64]]| {
            run_of(vec![
                configuration(100, &[&[1, 2, 3]]),
                operator(1_000, "add", "m4"),
                operator(21_000, "add-given-up", "m4"),
                configuration(22_000, end),
            ])
        };
        assert_eq!(check(&gave_up(&[&[1, 2, 3]])).1, vec![]);
        assert_eq!(check(&gave_up(&[&[1, 2, 3, 4]])).1, vec![]);
        assert_eq!(check(&gave_up(&[&[1, 2, 3], &[1, 2, 3, 4]])).1, vec![]);
        assert_eq!(check(&gave_up(&[&[1, 2, 4]])).1.len(), 1);
    }
}
