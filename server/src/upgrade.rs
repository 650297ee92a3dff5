//! Reading the state as earlier formats stored it (SPEC `STORE-6`).
//!
//! Data directories of formats 6, 5 and 4 (a single master) and cell
//! formats 4, 3 and 2 are read and carried forward: their logs hold
//! commands this master applies alike, and their snapshots differ from
//! today's in what the state holds. Format 6 (cell format 4) kept no time
//! with a lock's holders: a holding it recovers is held since a time
//! unknown (`LOCK-15`). Format 5 (cell format 3) had no access control: its
//! state is today's without rules, tokens or session owners, which it is
//! read with none of, access control off (`ACL-5`).
//!
//! Format 4 (cell format 2) differed besides in how a lock's holders are
//! kept.
//! Format 4 kept each holder's mode alone; format 5 keeps with it the index
//! of the latest acquire answered for the holding (`LOCK-4`). A recovered
//! holding gets 0 there, which any release names: it was taken before
//! releases named acquires, so no release of it can be told from a stale
//! one.
//!
//! Each earlier shape is written out in full below, field for field as it
//! was, because the snapshot encoding (bincode) is not self-describing: a
//! shape is read only as the shape it was written in. A snapshot file says
//! which by its magic.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use leasehold_protocol::{LockMode, SessionId};
use serde::Deserialize;

use crate::access::Access;
use crate::check::Checks;
use crate::holding::Holding;
use crate::lock::LockState as Lock;
use crate::lock::{Locks, Waiter};
use crate::namespace::Namespace;
use crate::session::{EndCause, Session};
use crate::state::{Bounds, State};
use crate::store::Snapshot;
use crate::time::Millis;

/// A snapshot of an earlier format: epoch, master time, sequence number,
/// and the state in that format's shape `S`.
#[derive(Deserialize)]
pub(crate) struct SnapshotOf<S> {
    epoch: u64,
    now: Millis,
    next_seq: u64,
    state: S,
}

impl<S: Into<State>> From<SnapshotOf<S>> for Snapshot {
    fn from(old: SnapshotOf<S>) -> Snapshot {
        Snapshot {
            epoch: old.epoch,
            now: old.now,
            next_seq: old.next_seq,
            state: old.state.into(),
        }
    }
}

/// The state as format 6 (and cell format 4) stored it: today's, with no
/// time kept with a lock's holders.
#[derive(Deserialize)]
pub(crate) struct StateV6 {
    bounds: Bounds,
    sessions: BTreeMap<SessionId, Session>,
    ended: BTreeMap<SessionId, EndCause>,
    ended_order: VecDeque<SessionId>,
    namespace: Namespace,
    locks: LocksV5,
    checks: Checks,
    index: u64,
    may_cache: BTreeSet<SessionId>,
    acquires_kept: bool,
    access: Access,
}

impl From<StateV6> for State {
    fn from(old: StateV6) -> State {
        State {
            bounds: old.bounds,
            sessions: old.sessions,
            ended: old.ended,
            ended_order: old.ended_order,
            namespace: old.namespace,
            locks: old.locks.into(),
            checks: old.checks,
            index: old.index,
            may_cache: old.may_cache,
            acquires_kept: old.acquires_kept,
            access: old.access,
        }
    }
}

/// Locks as formats 5 and 6 (cell formats 3 and 4) kept them.
#[derive(Deserialize)]
struct LocksV5 {
    locks: BTreeMap<String, LockStateV5>,
    held_by: BTreeMap<SessionId, BTreeSet<String>>,
    waiting_by: BTreeMap<SessionId, BTreeSet<(String, u64)>>,
}

#[derive(Deserialize)]
struct LockStateV5 {
    holders: BTreeMap<SessionId, HoldingV5>,
    waiters: VecDeque<Waiter>,
    delay_until: Option<Millis>,
}

#[derive(Deserialize)]
struct HoldingV5 {
    mode: LockMode,
    acquired: u64,
}

impl From<LocksV5> for Locks {
    fn from(old: LocksV5) -> Locks {
        let locks = old
            .locks
            .into_iter()
            .map(|(key, lock)| {
                let holders = lock
                    .holders
                    .into_iter()
                    .map(|(session, h)| {
                        let holding = Holding {
                            mode: h.mode,
                            acquired: h.acquired,
                            since: None,
                        };
                        (session, holding)
                    })
                    .collect();
                let lock = Lock {
                    holders,
                    waiters: lock.waiters,
                    delay_until: lock.delay_until,
                };
                (key, lock)
            })
            .collect();
        Locks {
            locks,
            held_by: old.held_by,
            waiting_by: old.waiting_by,
        }
    }
}

/// The state as format 5 (and cell format 3) stored it: format 6's,
/// without access control.
#[derive(Deserialize)]
pub(crate) struct StateV5 {
    bounds: Bounds,
    sessions: BTreeMap<SessionId, Session>,
    ended: BTreeMap<SessionId, EndCause>,
    ended_order: VecDeque<SessionId>,
    namespace: Namespace,
    locks: LocksV5,
    checks: Checks,
    index: u64,
    may_cache: BTreeSet<SessionId>,
    acquires_kept: bool,
}

impl From<StateV5> for State {
    /// Format 6's state without rules, tokens or owners, access control
    /// off (`ACL-5`).
    fn from(old: StateV5) -> State {
        StateV6 {
            bounds: old.bounds,
            sessions: old.sessions,
            ended: old.ended,
            ended_order: old.ended_order,
            namespace: old.namespace,
            locks: old.locks,
            checks: old.checks,
            index: old.index,
            may_cache: old.may_cache,
            acquires_kept: old.acquires_kept,
            access: Access::default(),
        }
        .into()
    }
}

/// The state as format 4 (and cell format 2) stored it.
#[derive(Deserialize)]
pub(crate) struct StateV4 {
    bounds: Bounds,
    sessions: BTreeMap<SessionId, Session>,
    ended: BTreeMap<SessionId, EndCause>,
    ended_order: VecDeque<SessionId>,
    namespace: Namespace,
    locks: LocksV4,
    checks: Checks,
    index: u64,
    may_cache: BTreeSet<SessionId>,
}

#[derive(Deserialize)]
struct LocksV4 {
    locks: BTreeMap<String, LockStateV4>,
    held_by: BTreeMap<SessionId, BTreeSet<String>>,
    waiting_by: BTreeMap<SessionId, BTreeSet<(String, u64)>>,
}

#[derive(Deserialize)]
struct LockStateV4 {
    holders: BTreeMap<SessionId, LockMode>,
    waiters: VecDeque<Waiter>,
    delay_until: Option<Millis>,
}

impl From<StateV4> for State {
    fn from(old: StateV4) -> State {
        let locks = old
            .locks
            .locks
            .into_iter()
            .map(|(key, lock)| {
                let holders = lock
                    .holders
                    .into_iter()
                    .map(|(session, mode)| {
                        let holding = Holding {
                            mode,
                            acquired: 0,
                            since: None,
                        };
                        (session, holding)
                    })
                    .collect();
                let lock = Lock {
                    holders,
                    waiters: lock.waiters,
                    delay_until: lock.delay_until,
                };
                (key, lock)
            })
            .collect();
        State {
            bounds: old.bounds,
            sessions: old.sessions,
            ended: old.ended,
            ended_order: old.ended_order,
            namespace: old.namespace,
            locks: Locks {
                locks,
                held_by: old.locks.held_by,
                waiting_by: old.locks.waiting_by,
            },
            checks: old.checks,
            index: old.index,
            may_cache: old.may_cache,
            // As a state that replays the same log from an older snapshot,
            // or from none, has them until a master logs `KeepAcquires`.
            acquires_kept: false,
            access: Access::default(),
        }
    }
}
