//! The key/value calls of a run, each with when it began and ended.

use std::collections::BTreeMap;

use super::Recorded;
use crate::sim::trace::{Call, Outcome, What};

/// One key/value call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub id: u64,
    pub who: String,
    pub key: String,
    pub call: Call,
    pub invoked: u64,
    /// When it ended; `None` if it never did.
    pub completed: Option<u64>,
    pub result: Option<Outcome>,
    /// A read its session's cache served (`CACHE-1`).
    pub hit: bool,
}

impl Op {
    /// Known to have taken effect (a put) or to have read (a get).
    pub fn ok(&self) -> bool {
        matches!(self.result, Some(Outcome::Ok { .. }))
    }

    /// Known not to have taken effect.
    pub fn failed(&self) -> bool {
        matches!(self.result, Some(Outcome::Failed { .. }))
    }

    /// The value a put wrote.
    pub fn written(&self) -> Option<&str> {
        match &self.call {
            Call::Put { value } => Some(value),
            Call::Get | Call::CachedGet => None,
        }
    }

    /// The value a successful get read.
    pub fn read(&self) -> Option<Option<&str>> {
        match (&self.call, &self.result) {
            (Call::Get | Call::CachedGet, Some(Outcome::Ok { value })) => Some(value.as_deref()),
            _ => None,
        }
    }
}

/// The calls of each key, in the order they began (linearizability and
/// durability are judged key by key).
pub fn by_key(ops: &[Op]) -> BTreeMap<&str, Vec<&Op>> {
    let mut keys: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        keys.entry(&op.key).or_default().push(op);
    }
    keys
}

/// Every call, in the order they began.
pub fn ops(run: &Recorded) -> Vec<Op> {
    let mut ops: BTreeMap<u64, Op> = BTreeMap::new();
    let mut order = Vec::new();
    for e in &run.entries {
        match &e.what {
            What::Invoke { op, key, call } => {
                order.push(*op);
                ops.insert(
                    *op,
                    Op {
                        id: *op,
                        who: e.who.clone(),
                        key: key.clone(),
                        call: call.clone(),
                        invoked: e.at,
                        completed: None,
                        result: None,
                        hit: false,
                    },
                );
            }
            What::Complete { op, result } => {
                if let Some(o) = ops.get_mut(op) {
                    o.completed = Some(e.at);
                    o.result = Some(result.clone());
                }
            }
            What::CacheHit { op } => {
                if let Some(o) = ops.get_mut(op) {
                    o.hit = true;
                }
            }
            _ => {}
        }
    }
    order.into_iter().filter_map(|id| ops.remove(&id)).collect()
}
