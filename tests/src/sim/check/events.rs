//! Events reach the application in order, with no gap and no duplicate.
//!
//! Each writer writes its own two keys under the watched prefix, one call
//! after another, so the events for a writer's keys must be exactly its
//! writes, in order: every acknowledged one once, a write whose answer was
//! lost at most once, a refused one never. The only allowed holes are the
//! ones the application was told of: writes made between the last event
//! the watcher heard before an `EventsLost` (or before its session expired)
//! and the notice (or its new subscription) may be missing. The notice of
//! a fail-over comes once the subscription is back (`FO-6`), so every
//! write after it must be heard.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::history::{ops, Op};
use super::Violation;
use crate::sim::app::WATCHED;
use crate::sim::trace::What;
use crate::sim::world::Run;

pub const NAME: &str = "events";

pub fn check(run: &Run) -> (usize, Vec<Violation>) {
    let Some(first) = run
        .entries
        .iter()
        .find(|e| matches!(e.what, What::Subscribed { .. }))
        .map(|e| e.at)
    else {
        return (0, Vec::new());
    };
    // What the watcher heard, by writer, and the spans of time whose writes
    // it was told it may have missed: from the last event it heard before
    // the notice to the notice.
    let mut heard: BTreeMap<String, Vec<(String, u64)>> = BTreeMap::new();
    let mut holes: Vec<(u64, u64)> = Vec::new();
    let mut last_heard = first;
    let mut gone_since: Option<u64> = None;
    let mut jeopardy: Option<u64> = None;
    let lease = run.settings.lease.as_millis() as u64;
    // The start of the faults cutting the watcher off, kept after the last
    // of them ends until the master has answered one of its KeepAlives:
    // till then the master still holds the events queued during the cut.
    let mut watcher_cut: Option<u64> = None;
    let mut cut_ended: Option<u64> = None;
    // The faults cutting the watcher off, which may overlap: a hold and a
    // partition, ended one at a time.
    let mut cuts: BTreeSet<(String, &str)> = BTreeSet::new();
    let mut session: Option<&str> = None;
    // A change of master loses what the old one had not delivered (`FO-6`):
    // from the earliest change not yet reported to the watcher, or from
    // the start of its cut if one was in force.
    let mut lost_from: Option<u64> = None;
    let mut total = 0;
    for e in &run.entries {
        let from_here = watcher_cut.unwrap_or(e.at);
        match &e.what {
            What::Fault { fault, peer, .. } if e.who == "watch" => {
                if fault.starts_with("partition") || fault == "hold" {
                    cuts.insert((fault.clone(), peer));
                    watcher_cut = Some(watcher_cut.unwrap_or(e.at));
                    cut_ended = None;
                } else {
                    let ended = match fault.as_str() {
                        "release" => "hold".to_string(),
                        repair => repair.replacen("repair", "partition", 1),
                    };
                    cuts.remove(&(ended, peer.as_str()));
                    if cuts.is_empty() && watcher_cut.is_some() {
                        cut_ended = Some(e.at);
                    }
                }
            }
            What::Fault { fault, .. } if fault == "crash" => {
                lost_from = Some(lost_from.map_or(from_here, |f| f.min(from_here)));
            }
            What::Serving { .. } => {
                lost_from = Some(lost_from.map_or(from_here, |f| f.min(from_here)));
            }
            What::Lease {
                session: s, why, ..
            } if why == "keepalive"
                && session == Some(s.as_str())
                && cut_ended.is_some_and(|ended| e.at > ended) =>
            {
                watcher_cut = None;
                cut_ended = None;
            }
            _ => {}
        }
        if e.who != "watch" {
            continue;
        }
        match &e.what {
            What::SessionStarted { session: s } => session = Some(s),
            What::Subscribed { .. } => {
                if let Some(since) = gone_since.take() {
                    holes.push((since, e.at));
                }
                last_heard = e.at;
                lost_from = None;
            }
            // The notice comes once the subscription is back (`FO-6`):
            // every write after it must be heard.
            What::EventsLost => {
                let from = last_heard.min(lost_from.take().unwrap_or(from_here));
                holes.push((from.min(from_here), e.at));
            }
            What::State { state, .. } => match state.as_str() {
                "jeopardy" => jeopardy = Some(e.at),
                "normal" => jeopardy = None,
                _ => {}
            },
            // The session is gone: the master may have dropped its events
            // from the last KeepAlive it answered, at most a lease before
            // the local lease ran out.
            What::Unsubscribed => {
                let ran_out = jeopardy.take().unwrap_or(e.at);
                gone_since = Some(last_heard.min(ran_out.saturating_sub(lease)));
            }
            What::Event { key, change } => {
                total += 1;
                last_heard = e.at;
                if matches!(change.as_str(), "created" | "modified") {
                    let writer = writer_of(key);
                    heard.entry(writer).or_default().push((key.clone(), e.at));
                }
            }
            _ => {}
        }
    }
    if let Some(since) = gone_since {
        holes.push((since, run.end));
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
        // A write took effect somewhere between its start and its answer.
        let missable = |o: &Op| {
            let done = o.completed.unwrap_or(u64::MAX);
            holes
                .iter()
                .any(|(from, to)| o.invoked <= *to && done >= *from)
        };
        if let Err(why) = follow(&heard, &ops, missable) {
            violations.push(Violation {
                invariant: NAME,
                at: run.end,
                detail: format!("{writer}: {why}; {}", explain(&heard, &ops)),
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

/// Follows the events heard for one writer's keys through its writes.
///
/// Acknowledged writes happened one after another, so their events must
/// come in their order, each after its write began; one may be missing only
/// inside a reported hole. A write whose answer never came may have been
/// applied at any time after it began (even after later writes, if it was
/// delayed on its way), or never: it can account for one event of its key
/// heard after it began. An event nothing accounts for is a duplicate or
/// out of order.
fn follow(
    heard: &[(String, u64)],
    ops: &[&Op],
    missable: impl Fn(&Op) -> bool,
) -> Result<(), String> {
    let acked: Vec<&Op> = ops.iter().copied().filter(|o| o.ok()).collect();
    let unknown: Vec<&Op> = ops.iter().copied().filter(|o| !o.ok()).take(64).collect();
    let mut search = Follow {
        heard,
        missable: acked.iter().map(|o| missable(o)).collect(),
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
    missable: Vec<bool>,
    unknown: Vec<&'a Op>,
    /// States (event, next acknowledged write, unknown writes used) known
    /// to lead nowhere.
    failed: HashSet<(usize, usize, u64)>,
    /// The most events matched on any path, and the write found missing
    /// there, for the report.
    furthest: (usize, Option<&'a Op>),
}

impl<'a> Follow<'a> {
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
            let lost = (j..self.acked.len()).find(|&k| !self.missable[k]);
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
            if !self.missable[k] {
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
