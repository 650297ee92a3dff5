//! Events reach the application in order, with no gap and no duplicate.
//!
//! Each writer writes its own two keys under the watched prefix, one call
//! after another, so the events for a writer's keys must be exactly its
//! writes, in order: every acknowledged one once, a write whose answer was
//! lost at most once, a refused one never. The only allowed holes are the
//! ones the application was told of. An `EventsLost`, or a stream that
//! ended with its session, owns up to every event not yet delivered: a
//! write may be missing if it began before the notice (or before the new
//! subscription) and each event heard before the notice belongs to an
//! earlier write. Where the undelivered events were held (a master that
//! crashed or lost its lease, a held link, a full queue) does not matter.
//! The notice of a fail-over comes once the subscription is back (`FO-6`),
//! so every write begun after it must be heard.

use std::collections::{BTreeMap, HashSet};

use super::history::{ops, Op};
use super::Recorded;
use super::Violation;
use crate::sim::app::WATCHED;
use crate::sim::trace::What;

pub const NAME: &str = "events";

pub fn check(run: &Recorded) -> (usize, Vec<Violation>) {
    let Some(first) = run
        .entries
        .iter()
        .find(|e| matches!(e.what, What::Subscribed { .. }))
        .map(|e| e.at)
    else {
        return (0, Vec::new());
    };
    // What the watcher heard, by writer, and each notice that events may
    // be lost: when it came, and how many of each writer's events the
    // watcher had heard by then. A stream that ended with its session is
    // a notice too, given when a new subscription begins (or at the end).
    let mut heard: BTreeMap<String, Vec<(String, u64)>> = BTreeMap::new();
    let mut notices: Vec<Notice> = Vec::new();
    let mut gone = false;
    let mut total = 0;
    for e in run.entries.iter().filter(|e| e.who == "watch") {
        match &e.what {
            What::Subscribed { .. } if std::mem::take(&mut gone) => {
                notices.push((e.at, counts_of(&heard)));
            }
            What::EventsLost => notices.push((e.at, counts_of(&heard))),
            What::Unsubscribed => gone = true,
            What::Event { key, change } => {
                total += 1;
                if matches!(change.as_str(), "created" | "modified") {
                    let writer = writer_of(key);
                    heard.entry(writer).or_default().push((key.clone(), e.at));
                }
            }
            _ => {}
        }
    }
    if gone {
        notices.push((run.end, counts_of(&heard)));
    }
    let all = ops(run);
    let mut violations = Vec::new();
    let mut writers: BTreeMap<String, Vec<&Op>> = BTreeMap::new();
    for op in all.iter().filter(|o| {
        o.key.starts_with(WATCHED) && o.written().is_some() && !o.failed() && o.invoked >= first
    }) {
        writers.entry(writer_of(&op.key)).or_default().push(op);
    }
    for writer in heard.keys() {
        writers.entry(writer.clone()).or_default();
    }
    for (writer, ops) in writers {
        let heard = heard.remove(&writer).unwrap_or_default();
        // A write may be missing if it began before a notice, and every
        // event heard before that notice is accounted for by earlier
        // writes: its event was one the notice owned up to. The earliest
        // such notice asks the fewest events to be accounted for.
        let excused = |o: &Op| {
            notices
                .iter()
                .find(|(at, _)| o.invoked <= *at)
                .map(|(_, counts)| counts.get(&writer).copied().unwrap_or(0))
        };
        if let Err(why) = follow(&heard, &ops, excused) {
            violations.push(Violation {
                invariant: NAME,
                at: run.end,
                detail: format!("{writer}: {why}; {}", explain(&heard, &ops)),
            });
        }
    }
    (total, violations)
}

/// When the watcher was told events may be lost, and how many events of
/// each writer it had heard by then.
type Notice = (u64, BTreeMap<String, usize>);

fn counts_of(heard: &BTreeMap<String, Vec<(String, u64)>>) -> BTreeMap<String, usize> {
    heard.iter().map(|(w, h)| (w.clone(), h.len())).collect()
}

fn writer_of(key: &str) -> String {
    let rest = key
        .strip_prefix(WATCHED)
        .unwrap_or(key)
        .trim_start_matches('/');
    rest.split('/').next().unwrap_or_default().to_string()
}

/// Follows the events heard for one writer's keys through its writes.
///
/// Acknowledged writes happened one after another, so their events must
/// come in their order, each after its write began; one may be missing only
/// where a notice excuses it (`excused`: how many events must be matched
/// before it). A write whose answer never came may have been
/// applied at any time after it began (even after later writes, if it was
/// delayed on its way), or never: it can account for one event of its key
/// heard after it began. An event nothing accounts for is a duplicate or
/// out of order.
fn follow(
    heard: &[(String, u64)],
    ops: &[&Op],
    excused: impl Fn(&Op) -> Option<usize>,
) -> Result<(), String> {
    let acked: Vec<&Op> = ops.iter().copied().filter(|o| o.ok()).collect();
    let unknown: Vec<&Op> = ops.iter().copied().filter(|o| !o.ok()).take(64).collect();
    let mut search = Follow {
        heard,
        excused: acked.iter().map(|o| excused(o)).collect(),
        acked,
        unknown,
        failed: HashSet::new(),
        furthest: (0, None),
    };
    if search.from(0, 0, 0) {
        return Ok(());
    }
    let (i, lost) = search.furthest;
    Err(match (heard.get(i), lost) {
        (_, Some(lost)) => format!(
            "no event for the acknowledged write {:?} to {} at {} ms",
            lost.written().unwrap_or_default(),
            lost.key,
            lost.invoked
        ),
        (Some((key, at)), None) => format!(
            "the event for {key} at {at} ms matches no write in order (a duplicate, or a write missed before it)"
        ),
        (None, None) => "the events do not match the writes".into(),
    })
}

struct Follow<'a> {
    heard: &'a [(String, u64)],
    acked: Vec<&'a Op>,
    /// For each acknowledged write, how many events must have been
    /// matched before it for it to be missing: `None`, never.
    excused: Vec<Option<usize>>,
    unknown: Vec<&'a Op>,
    /// States (event, next acknowledged write, unknown writes used) known
    /// to lead nowhere.
    failed: HashSet<(usize, usize, u64)>,
    /// The most events matched on any path, and the write found missing
    /// there, for the report.
    furthest: (usize, Option<&'a Op>),
}

impl<'a> Follow<'a> {
    /// Whether the acknowledged write `k` may be missing when `i` events
    /// have been matched before it.
    fn missable(&self, k: usize, i: usize) -> bool {
        self.excused[k].is_some_and(|needed| needed <= i)
    }

    fn from(&mut self, i: usize, j: usize, used: u64) -> bool {
        if self.failed.contains(&(i, j, used)) {
            return false;
        }
        let found = self.search(i, j, used);
        if !found {
            self.failed.insert((i, j, used));
        }
        found
    }

    fn search(&mut self, i: usize, j: usize, used: u64) -> bool {
        if i >= self.furthest.0 {
            self.furthest = (i, None);
        }
        let Some((key, at)) = self.heard.get(i) else {
            let lost = (j..self.acked.len()).find(|&k| !self.missable(k, i));
            if let Some(k) = lost {
                self.furthest = (i, Some(self.acked[k]));
            }
            return lost.is_none();
        };
        // An acknowledged write of this key, skipping only missable ones.
        for k in j..self.acked.len() {
            let op = self.acked[k];
            if op.key == *key && op.invoked <= *at && self.from(i + 1, k + 1, used) {
                return true;
            }
            if !self.missable(k, i) {
                break;
            }
        }
        // Else a write whose answer never came: of those that fit, the one
        // begun last, keeping the earlier (more widely fitting) ones.
        let fits = (0..self.unknown.len())
            .filter(|&u| used & (1 << u) == 0)
            .filter(|&u| self.unknown[u].key == *key && self.unknown[u].invoked <= *at)
            .max_by_key(|&u| self.unknown[u].invoked);
        match fits {
            Some(u) => self.from(i + 1, j, used | (1 << u)),
            None => false,
        }
    }
}

fn explain(heard: &[(String, u64)], ops: &[&Op]) -> String {
    let heard: Vec<&str> = heard
        .iter()
        .map(|(h, _)| h.rsplit('/').next().unwrap_or(""))
        .collect();
    let wrote: Vec<String> = ops
        .iter()
        .map(|o| {
            let name = o.key.rsplit('/').next().unwrap_or("");
            let mark = if o.ok() { "" } else { "?" };
            format!("{name}{mark}")
        })
        .collect();
    format!(
        "heard [{}], wrote [{}] (? = outcome unknown)",
        heard.join(" "),
        wrote.join(" ")
    )
}
