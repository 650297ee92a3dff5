//! No acknowledged write is lost: once the network has healed (and the
//! master restarted), the final read of each key returns a value written by
//! a put that no acknowledged put of that key followed in real time.
//!
//! A later put of the same key can hide the loss of an earlier one (the
//! final read finds the later value either way), so the writers also put
//! write-once keys: one of those whose put was acknowledged must read back
//! exactly that value at the end.

use super::history::{by_key, ops, Op};
use super::Recorded;
use super::Violation;
use crate::sim::app::WRITE_ONCE;

pub const NAME: &str = "durability";

pub fn check(run: &Recorded) -> (usize, Vec<Violation>) {
    let all = ops(run);
    let mut violations = Vec::new();
    let mut acked_total = 0;
    for (key, ops) in by_key(&all) {
        let acked: Vec<&&Op> = ops
            .iter()
            .filter(|o| o.written().is_some() && o.ok())
            .collect();
        acked_total += acked.len();
        let Some(last) = ops.iter().rev().find(|o| o.who == "final" && o.ok()) else {
            violations.push(Violation {
                invariant: NAME,
                at: run.end,
                detail: format!("{key} was never read at the end"),
            });
            continue;
        };
        let at = last.invoked;
        let value = last.read().expect("a successful get");
        if key.starts_with(WRITE_ONCE) {
            violations.extend(written_once(key, &acked, value, at));
            continue;
        }
        let Some(value) = value else {
            if let Some(lost) = acked.first() {
                violations.push(Violation {
                    invariant: NAME,
                    at,
                    detail: format!(
                        "{key} is missing at the end, though {} wrote {:?} and was acknowledged at {} ms",
                        lost.who,
                        lost.written().unwrap_or_default(),
                        lost.completed.unwrap_or_default()
                    ),
                });
            }
            continue;
        };
        let Some(source) = ops.iter().find(|o| o.written() == Some(value)) else {
            violations.push(Violation {
                invariant: NAME,
                at,
                detail: format!("{key} holds {value:?} at the end, which nobody wrote"),
            });
            continue;
        };
        let source_end = source.completed.filter(|_| source.ok()).unwrap_or(u64::MAX);
        for later in acked.iter().filter(|o| o.invoked > source_end) {
            violations.push(Violation {
                invariant: NAME,
                at,
                detail: format!(
                    "{key} holds {value:?} at the end, but {} wrote {:?} after it (from {} ms) and was acknowledged: that write is lost",
                    later.who,
                    later.written().unwrap_or_default(),
                    later.invoked
                ),
            });
        }
    }
    (acked_total, violations)
}

/// A write-once key, read as `read` at the end (at `at`): each
/// acknowledged put of it must be what was read.
fn written_once(key: &str, acked: &[&&Op], read: Option<&str>, at: u64) -> Vec<Violation> {
    acked
        .iter()
        .filter(|put| put.written() != read)
        .map(|put| Violation {
            invariant: NAME,
            at,
            detail: format!(
                "the write-once key {key} reads {read:?} at the end, though {} wrote {:?} \
                 there and was acknowledged at {} ms: that write is lost",
                put.who,
                put.written().unwrap_or_default(),
                put.completed.unwrap_or_default()
            ),
        })
        .collect()
}
