//! The key/value history is linearizable: for each key (linearizability is
//! local, so keys are checked apart) some order of the calls, each placed
//! between its start and its end, explains every read as the latest write.
//! A put whose answer never came may take effect at any point after it
//! began, or never. Search in the manner of Wing and Gong, with Lowe's
//! memo of (calls placed, value) states already explored.

use std::collections::{BTreeMap, HashSet};

use super::history::{by_key, ops, Op};
use super::Recorded;
use super::Violation;

pub const NAME: &str = "linearizable";

pub fn check(run: &Recorded) -> (usize, Vec<Violation>) {
    let all = ops(run);
    let mut violations = Vec::new();
    let mut checked = 0;
    for (key, ops) in by_key(&all) {
        let history = History::new(&ops);
        checked += history.calls.len();
        if !history.linearizable() {
            violations.push(Violation {
                invariant: NAME,
                at: run.end,
                detail: format!(
                    "the history of {key} ({} calls) has no linearization",
                    history.calls.len()
                ),
            });
        }
    }
    (checked, violations)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// Writes value number `.0`.
    Put(u32),
    /// Read value number `.0` (`None`: the key did not exist).
    Get(Option<u32>),
}

#[derive(Debug, Clone)]
struct Call {
    start: u64,
    /// `u64::MAX` when no answer came.
    end: u64,
    kind: Kind,
    /// Must be placed (it is known to have happened).
    required: bool,
}

/// One key's calls, with values numbered.
pub struct History {
    calls: Vec<Call>,
}

impl History {
    fn new(ops: &[&Op]) -> History {
        let mut numbers: BTreeMap<String, u32> = BTreeMap::new();
        let mut number = |v: &str| {
            let next = numbers.len() as u32;
            *numbers.entry(v.to_string()).or_insert(next)
        };
        let mut calls = Vec::new();
        for op in ops {
            if op.failed() || op.result.is_none() && op.written().is_none() {
                continue;
            }
            let kind = match (op.written(), op.read()) {
                (Some(v), _) => Kind::Put(number(v)),
                (None, Some(read)) => Kind::Get(read.map(&mut number)),
                // A read without an answer says nothing.
                (None, None) => continue,
            };
            let end = if op.ok() {
                op.completed.unwrap_or(u64::MAX)
            } else {
                u64::MAX
            };
            calls.push(Call {
                start: op.invoked,
                end,
                kind,
                required: op.ok(),
            });
        }
        History { calls }
    }

    /// Whether the calls have a linearization.
    pub fn linearizable(&self) -> bool {
        let mut search = Search {
            calls: &self.calls,
            placed: vec![0u64; self.calls.len().div_ceil(64)],
            seen: HashSet::new(),
        };
        let required = self.calls.iter().filter(|c| c.required).count();
        search.from(None, required)
    }
}

struct Search<'a> {
    calls: &'a [Call],
    placed: Vec<u64>,
    seen: HashSet<(Vec<u64>, Option<u32>)>,
}

impl Search<'_> {
    fn is_placed(&self, i: usize) -> bool {
        self.placed[i / 64] & (1 << (i % 64)) != 0
    }

    fn flip(&mut self, i: usize) {
        self.placed[i / 64] ^= 1 << (i % 64);
    }

    fn from(&mut self, value: Option<u32>, required_left: usize) -> bool {
        if required_left == 0 {
            return true;
        }
        if !self.seen.insert((self.placed.clone(), value)) {
            return false;
        }
        // Whatever comes next began before every unplaced call ended (at
        // millisecond resolution, a tie may go either way).
        let horizon = (0..self.calls.len())
            .filter(|&i| !self.is_placed(i) && self.calls[i].required)
            .map(|i| self.calls[i].end)
            .min()
            .unwrap_or(u64::MAX);
        for i in 0..self.calls.len() {
            let call = &self.calls[i];
            if self.is_placed(i) || call.start > horizon {
                continue;
            }
            let next = match call.kind {
                Kind::Put(v) => Some(v),
                Kind::Get(read) if read == value => value,
                Kind::Get(_) => continue,
            };
            let left = required_left - usize::from(call.required);
            self.flip(i);
            let found = self.from(next, left);
            self.flip(i);
            if found {
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(start: u64, end: u64, kind: Kind) -> Call {
        Call {
            start,
            end,
            kind,
            required: end != u64::MAX,
        }
    }

    #[test]
    fn a_read_of_the_latest_write_is_linearizable() {
        let calls = vec![
            call(0, 10, Kind::Put(0)),
            call(20, 30, Kind::Put(1)),
            call(40, 50, Kind::Get(Some(1))),
        ];
        assert!(History { calls }.linearizable());
    }

    #[test]
    fn a_stale_read_after_a_completed_write_is_not() {
        let calls = vec![
            call(0, 10, Kind::Put(0)),
            call(20, 30, Kind::Put(1)),
            call(40, 50, Kind::Get(Some(0))),
        ];
        assert!(!History { calls }.linearizable());
    }

    #[test]
    fn concurrent_writes_may_land_in_either_order() {
        let calls = vec![
            call(0, 30, Kind::Put(0)),
            call(5, 25, Kind::Put(1)),
            call(40, 50, Kind::Get(Some(0))),
            call(60, 70, Kind::Get(Some(0))),
        ];
        assert!(History { calls }.linearizable());
    }

    #[test]
    fn a_write_without_an_answer_may_land_late_or_never() {
        let late = vec![
            call(0, u64::MAX, Kind::Put(0)),
            call(10, 20, Kind::Get(None)),
            call(100, 110, Kind::Get(Some(0))),
        ];
        assert!(History { calls: late }.linearizable());
        let never = vec![
            call(0, u64::MAX, Kind::Put(0)),
            call(10, 20, Kind::Get(None)),
        ];
        assert!(History { calls: never }.linearizable());
    }

    #[test]
    fn a_value_cannot_come_back_once_overwritten() {
        let calls = vec![
            call(0, 10, Kind::Put(0)),
            call(20, 30, Kind::Get(Some(0))),
            call(40, 50, Kind::Put(1)),
            call(60, 70, Kind::Get(Some(1))),
            call(80, 90, Kind::Get(Some(0))),
        ];
        assert!(!History { calls }.linearizable());
    }
}
