//! Events reach the application in order, with no gap and no duplicate.
//!
//! Each writer writes its own two keys under the watched prefix, one call
//! after another, so the events for a writer's keys must be exactly its
//! writes, in order: every acknowledged one once, a write whose answer was
//! lost at most once, a refused one never. The only allowed holes are the
//! ones the application was told of: after `EventsLost`, or while the
//! watcher had no subscription (its session had expired), writes that
//! began before the watcher heard of it (plus a resubscription's worth of
//! time) may be missing.

use std::collections::{BTreeMap, HashMap};

use super::history::{ops, Op};
use super::Violation;
use crate::sim::app::WATCHED;
use crate::sim::trace::What;
use crate::sim::world::Run;

pub const NAME: &str = "events";

/// Writes that began this long after a hole was reported must be heard.
const RESUBSCRIBE: u64 = 3_000;

#[derive(Debug)]
struct Heard {
    key: String,
    /// A hole was reported just before it, at this instant.
    hole: Option<u64>,
}

pub fn check(run: &Run) -> (usize, Vec<Violation>) {
    let Some(first) = run
        .entries
        .iter()
        .find(|e| matches!(e.what, What::Subscribed { .. }))
        .map(|e| e.at)
    else {
        return (0, Vec::new());
    };
    // What the watcher heard, split by writer, and whether it still
    // listened at the end.
    let mut heard: BTreeMap<String, Vec<Heard>> = BTreeMap::new();
    // Every hole reported, and how many of them each writer's last event
    // came after.
    let mut holes: Vec<u64> = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut listening = false;
    let mut total = 0;
    for e in run.entries.iter().filter(|e| e.who == "watch") {
        match &e.what {
            What::Subscribed { .. } => {
                if listening || e.at != first {
                    holes.push(e.at);
                }
                listening = true;
            }
            What::EventsLost => holes.push(e.at),
            What::Unsubscribed => {
                listening = false;
                holes.push(e.at);
            }
            What::Event { key, change } => {
                total += 1;
                let writer = writer_of(key);
                if !matches!(change.as_str(), "created" | "modified") {
                    continue;
                }
                let before = seen.insert(writer.clone(), holes.len()).unwrap_or(0);
                let hole = (holes.len() > before).then(|| holes[holes.len() - 1]);
                heard.entry(writer).or_default().push(Heard {
                    key: key.clone(),
                    hole,
                });
            }
            _ => {}
        }
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
        let before = seen.get(&writer).copied().unwrap_or(0);
        let trailing_hole = if !listening {
            Some(run.end)
        } else {
            (holes.len() > before).then(|| holes[holes.len() - 1])
        };
        let mut matcher = Matcher {
            heard: &heard,
            ops: &ops,
            trailing_hole,
            memo: HashMap::new(),
        };
        if !matcher.matches(0, 0) {
            let detail = explain(&writer, &heard, &ops);
            violations.push(Violation {
                invariant: NAME,
                at: run.end,
                detail,
            });
        }
    }
    (total, violations)
}

fn writer_of(key: &str) -> String {
    let rest = key
        .strip_prefix(WATCHED)
        .unwrap_or(key)
        .trim_start_matches('/');
    rest.split('/').next().unwrap_or_default().to_string()
}

struct Matcher<'a> {
    heard: &'a [Heard],
    ops: &'a [&'a Op],
    trailing_hole: Option<u64>,
    memo: HashMap<(usize, usize), bool>,
}

impl Matcher<'_> {
    /// Whether events `i..` can be matched, in order, to writes `j..`,
    /// skipping only what may be missed.
    fn matches(&mut self, i: usize, j: usize) -> bool {
        if let Some(&known) = self.memo.get(&(i, j)) {
            return known;
        }
        let result = self.search(i, j);
        self.memo.insert((i, j), result);
        result
    }

    /// Whether write `k` may be missing given a hole reported at `hole`.
    fn may_miss(&self, k: usize, hole: Option<u64>) -> bool {
        !self.ops[k].ok() || hole.is_some_and(|at| self.ops[k].invoked < at + RESUBSCRIBE)
    }

    fn search(&mut self, i: usize, j: usize) -> bool {
        let n = self.ops.len();
        if i == self.heard.len() {
            let hole = self.trailing_hole;
            return (j..n).all(|k| self.may_miss(k, hole));
        }
        let hole = self.heard[i].hole;
        for k in j..n {
            if self.ops[k].key == self.heard[i].key && self.matches(i + 1, k + 1) {
                return true;
            }
            if !self.may_miss(k, hole) {
                return false;
            }
        }
        false
    }
}

fn explain(writer: &str, heard: &[Heard], ops: &[&Op]) -> String {
    let heard: Vec<&str> = heard
        .iter()
        .map(|h| h.key.rsplit('/').next().unwrap_or(""))
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
        "the events for {writer}'s keys do not match its writes in order without gaps or duplicates: heard [{}], wrote [{}] (? = outcome unknown)",
        heard.join(" "),
        wrote.join(" ")
    )
}
