//! The master's durable state as a deterministic state machine.
//!
//! [`State::apply_kind`] takes a command of one kind (`command.rs`) and
//! the master's clock reading and returns the reply of that kind and the
//! [`StateEvent`]s it caused; [`State::apply`] does the same for a
//! [`Command`] of any kind, as a log holds it. It does no I/O and
//! reads no clock, so the same sequence of commands always yields the same
//! state: the property a log, a snapshot and a replicated cell rely on.
//! Everything that must survive the master (sessions, nodes, locks and
//! their waiters, health checks) lives here, and is changed only through
//! `apply`.

mod access;
mod checks;
pub mod command;
mod locks;

pub use command::{
    Acquisition, Applied, CheckChanged, Command, Deleted, Kind, LockedNodes, NewSession,
    WaitCancelled,
};
use command::{Delete, EndSession, KeepAcquires, MayCache};

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use leasehold_protocol::{Error, ErrorCode, LockMode, Sequencer, SessionId};

use crate::access::Access;
use crate::check::Checks;
use crate::config::{Config, ENDED_SESSIONS_REMEMBERED, MAX_NAME_LEN};
use crate::holding::{HowGranted, LetGo};
use crate::lock::Locks;
use crate::namespace::{Namespace, Put};
use crate::node::NodeChange;
use crate::node::MAX_CONTENTS;
use crate::session::{EndCause, Session};
use crate::time::Millis;

/// Something that happened because a command was applied; the wrapper turns
/// these into timers, replies and notifications.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateEvent {
    SessionCreated {
        id: SessionId,
    },
    SessionEnded {
        id: SessionId,
        cause: EndCause,
    },
    /// A node was created, written, or had its lock change.
    NodeChanged {
        key: String,
        change: NodeChange,
    },
    /// A node was deleted.
    NodeDeleted {
        key: String,
    },
    /// Waiter `ticket` got the lock.
    LockGranted {
        ticket: u64,
        index: u64,
        sequencer: Sequencer,
    },
    /// Waiter `ticket` left the line because its session ended.
    WaitEnded {
        ticket: u64,
    },
    /// A waiter left the line of `key` (it gave up, was replaced or its
    /// session ended): those behind it may now be able to have the lock
    /// (`LOCK-5`). The state grants nothing by itself, so that replaying a
    /// log gives what the master logged; the master logs `GrantWaiters`.
    LineLeft {
        key: String,
    },
    /// The lock of `key` is in lock-delay until master time `until`.
    LockDelayStarted {
        key: String,
        until: Millis,
    },
    /// `session` took the lock of `key`, or asked again for what it held:
    /// the holding of lock generation `generation`, answered at `index`.
    LockAcquired {
        key: String,
        session: SessionId,
        mode: LockMode,
        generation: u64,
        index: u64,
        how: HowGranted,
    },
    /// `session` no longer holds the lock of `key`, which it held at lock
    /// generation `generation`, for the reason `why`.
    LockReleased {
        key: String,
        session: SessionId,
        generation: u64,
        why: LetGo,
    },
    /// `waiter` waits for the lock of `key`: its holders may want to hand it
    /// over (`EV-6`).
    LockWaiting {
        key: String,
        waiter: SessionId,
    },
}

/// Bounds a command is checked against; part of the state machine's
/// configuration, identical on every replica.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Bounds {
    pub default_lease: Duration,
    pub min_lease: Duration,
    pub max_lease: Duration,
    pub default_lock_delay: Duration,
    pub max_lock_delay: Duration,
    pub max_sessions: usize,
}

impl From<&Config> for Bounds {
    fn from(c: &Config) -> Self {
        Bounds {
            default_lease: c.default_lease,
            min_lease: c.min_lease,
            max_lease: c.max_lease,
            default_lock_delay: c.default_lock_delay,
            max_lock_delay: c.max_lock_delay,
            max_sessions: c.max_sessions,
        }
    }
}

/// The durable state of a master.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct State {
    pub(crate) bounds: Bounds,
    // BTreeMap: listing order is observable and must not depend on hashing.
    pub(crate) sessions: BTreeMap<SessionId, Session>,
    pub(crate) ended: BTreeMap<SessionId, EndCause>,
    pub(crate) ended_order: VecDeque<SessionId>,
    pub(crate) namespace: Namespace,
    pub(crate) locks: Locks,
    pub(crate) checks: Checks,
    /// Rises by one with every command that changes the state (`NS-2`).
    pub(crate) index: u64,
    /// Live sessions that may have cached nodes (`CACHE-7`).
    pub(crate) may_cache: BTreeSet<SessionId>,
    /// Whether a grant records its index in the holding (`LOCK-4`): not
    /// before `KeepAcquires` is applied. Until then every holding counts
    /// as acquired at index 0, as one carried forward from format 4 (or
    /// cell format 2) does, so every member that applies the same log
    /// holds the same state, whichever snapshot it started from: one of
    /// the earlier format, or none (`STORE-6`).
    pub(crate) acquires_kept: bool,
    /// Rules, tokens and who owns each session (`ACL-7`).
    pub(crate) access: Access,
}

impl State {
    /// Checks later commands against `bounds` (a recovered state keeps
    /// the ones it was saved with until then).
    pub fn set_bounds(&mut self, bounds: Bounds) {
        self.bounds = bounds;
    }

    /// An empty state checked against `bounds`.
    pub fn new(bounds: Bounds) -> Self {
        State {
            bounds,
            sessions: BTreeMap::new(),
            ended: BTreeMap::new(),
            ended_order: VecDeque::new(),
            namespace: Namespace::default(),
            locks: Locks::default(),
            checks: Checks::default(),
            index: 0,
            may_cache: BTreeSet::new(),
            acquires_kept: false,
            access: Access::default(),
        }
    }

    /// Whether holdings keep the index of their latest acquire (`LOCK-4`).
    pub fn acquires_kept(&self) -> bool {
        self.acquires_kept
    }

    /// Applies one command of any kind at master time `now`: replay, and
    /// a cell's members.
    pub fn apply(
        &mut self,
        command: Command,
        now: Millis,
    ) -> (Result<Applied, Error>, Vec<StateEvent>) {
        command.apply_to(self, now)
    }

    /// Applies one command at master time `now`, answering with the reply
    /// of its kind.
    pub fn apply_kind<K: Kind>(
        &mut self,
        command: K,
        now: Millis,
    ) -> (Result<K::Reply, Error>, Vec<StateEvent>) {
        let mut events = Vec::new();
        // Every command gets the next index; a refused one changes nothing,
        // so it gives the index back.
        self.index += 1;
        let index = self.index;
        let reply = command.apply_to(self, index, now, &mut events);
        if reply.is_err() {
            self.index -= 1;
        }
        (reply, events)
    }

    fn create_session(
        &mut self,
        new: NewSession,
        events: &mut Vec<StateEvent>,
    ) -> Result<Session, Error> {
        let NewSession {
            id,
            secret,
            name,
            lease,
            lock_delay,
            behavior,
            checks,
        } = new;
        let b = &self.bounds;
        if name.len() > MAX_NAME_LEN {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!(
                    "a session name of {} bytes exceeds the maximum of {MAX_NAME_LEN}",
                    name.len()
                ),
            ));
        }
        let lease = lease.unwrap_or(b.default_lease);
        if lease < b.min_lease || lease > b.max_lease {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!(
                    "lease {lease:?} is outside the accepted {:?}..={:?} (the master's \
                     --min-lease and --max-lease set the range)",
                    b.min_lease, b.max_lease
                ),
            ));
        }
        // An explicit zero means no lock-delay; only None takes the default.
        let lock_delay = lock_delay.unwrap_or(b.default_lock_delay);
        if lock_delay > b.max_lock_delay {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!(
                    "lock-delay {lock_delay:?} exceeds the maximum {:?}",
                    b.max_lock_delay
                ),
            ));
        }
        if self.sessions.len() >= b.max_sessions {
            return Err(Error::new(
                ErrorCode::LimitReached,
                format!(
                    "the master holds its maximum of {} sessions",
                    b.max_sessions
                ),
            ));
        }
        if self.sessions.contains_key(&id) || self.ended.contains_key(&id) {
            return Err(Error::new(ErrorCode::Internal, "session id already used"));
        }
        self.check_session_checks(&checks)?;
        let mut checks = checks;
        checks.sort();
        checks.dedup();
        self.checks.bind(id, &checks);
        let session = Session {
            id,
            name: name.into_boxed_str(),
            lease: lease.into(),
            lock_delay: lock_delay.into(),
            behavior,
            checks: checks.into(),
            secret,
        };
        self.sessions.insert(id, session.clone());
        events.push(StateEvent::SessionCreated { id });
        Ok(session)
    }

    pub(crate) fn end_session(
        &mut self,
        id: SessionId,
        cause: EndCause,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<(), Error> {
        let Some(session) = self.sessions.remove(&id) else {
            return Err(self.missing_session(id));
        };
        self.remember_ended(id, cause);
        self.may_cache.remove(&id);
        self.access.owners.remove(&id);
        self.checks.unbind(id, &session.checks);
        self.invalidate_locks(
            id,
            session.behavior,
            session.lock_delay.into(),
            index,
            now,
            events,
        );
        events.push(StateEvent::SessionEnded { id, cause });
        for key in self.namespace.ephemeral_of(id) {
            // Another session's lock on the node goes with it, as with any
            // delete (`LOCK-8`, `EV-6`), and its waiters may have it.
            let generation = self.namespace.get(&key).map(|n| n.lock_generation);
            self.namespace.remove(&key, index);
            events.push(StateEvent::NodeDeleted { key: key.clone() });
            if let Some(generation) = generation {
                self.release_deleted(&key, generation, events);
            }
            self.grant_waiters(&key, index, now, events);
            self.locks.tidy(&key, now);
        }
        Ok(())
    }

    fn put(&mut self, put: Put, index: u64, events: &mut Vec<StateEvent>) -> Result<u64, Error> {
        if let Some(owner) = put.ephemeral {
            if !self.sessions.contains_key(&owner) {
                return Err(self.missing_session(owner));
            }
        }
        let key = put.key.clone();
        let change = self.namespace.put(put, index)?;
        events.push(StateEvent::NodeChanged { key, change });
        Ok(index)
    }

    #[allow(clippy::too_many_arguments)]
    fn delete(
        &mut self,
        key: &str,
        cas: Option<u64>,
        recursive: bool,
        locked: LockedNodes,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<Deleted, Error> {
        if let LockedNodes::HeldOnlyBy(by) = locked {
            self.check_may_delete_locked(key, recursive, by)?;
        }
        // Read while the nodes are there: each holder is told which of its
        // holdings the delete took (`EV-6`).
        let generations: BTreeMap<String, u64> = self
            .locks
            .held_at_or_below(key, recursive)
            .filter_map(|(k, _)| Some((k.to_string(), self.namespace.get(k)?.lock_generation)))
            .collect();
        let keys = self.namespace.delete(key, cas, recursive, index)?;
        for key in &keys {
            events.push(StateEvent::NodeDeleted { key: key.clone() });
            // A deleted node's lock is released, as a plain release is; its
            // waiters may now have it, which creates the node again.
            if let Some(&generation) = generations.get(key) {
                self.release_deleted(key, generation, events);
            }
            self.grant_waiters(key, index, now, events);
            self.locks.tidy(key, now);
        }
        Ok(Deleted { index, keys })
    }

    /// Refuses a delete that would take a lock from a session other than
    /// `by` (`AUTH-4`): locks are advisory for writes, but deleting a node
    /// takes its lock away (`LOCK-8`), which is another session's to give.
    fn check_may_delete_locked(
        &self,
        key: &str,
        recursive: bool,
        by: Option<SessionId>,
    ) -> Result<(), Error> {
        for (locked, lock) in self.locks.held_at_or_below(key, recursive) {
            if self.namespace.get(locked).is_none() {
                continue;
            }
            if let Some(other) = lock.holders.keys().find(|h| Some(**h) != by) {
                return Err(Error::new(
                    ErrorCode::PermissionDenied,
                    format!(
                        "'{locked}' is locked by session {other}: deleting it takes the lock \
                         away, which needs the holder's session token or the operator token"
                    ),
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn check_contents(&self, contents: Option<&[u8]>) -> Result<(), Error> {
        match contents {
            Some(c) if c.len() > MAX_CONTENTS => Err(Error::new(
                ErrorCode::InvalidArgument,
                format!(
                    "contents of {} bytes exceed the maximum of {MAX_CONTENTS}",
                    c.len()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The locks, for reads.
    pub fn locks(&self) -> &Locks {
        &self.locks
    }

    /// The namespace, for reads.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// Rules, tokens and who owns each session.
    pub fn access(&self) -> &Access {
        &self.access
    }

    /// The index of the last command that changed the state.
    pub fn index(&self) -> u64 {
        self.index
    }

    fn remember_ended(&mut self, id: SessionId, cause: EndCause) {
        if self.ended_order.len() == ENDED_SESSIONS_REMEMBERED {
            if let Some(oldest) = self.ended_order.pop_front() {
                self.ended.remove(&oldest);
            }
        }
        self.ended_order.push_back(id);
        self.ended.insert(id, cause);
    }

    /// The error for a request naming a session that is not live:
    /// `SessionExpired` if it ended recently, else `UnknownSession`.
    pub fn missing_session(&self, id: SessionId) -> Error {
        match self.ended.get(&id) {
            Some(cause) => Error::new(
                ErrorCode::SessionExpired,
                format!("session {id} has ended: {}", cause.as_str()),
            ),
            None => Error::new(ErrorCode::UnknownSession, format!("no session {id}")),
        }
    }

    /// A live session.
    pub fn session(&self, id: SessionId) -> Option<&Session> {
        self.sessions.get(&id)
    }

    /// Every live session, in id order.
    pub fn sessions(&self) -> impl Iterator<Item = &Session> {
        self.sessions.values()
    }

    /// Live sessions with ids greater than `after`, in id order.
    pub fn sessions_after(&self, after: Option<SessionId>) -> impl Iterator<Item = &Session> {
        use std::ops::Bound::{Excluded, Unbounded};
        let start = after.map_or(Unbounded, Excluded);
        self.sessions.range((start, Unbounded)).map(|(_, s)| s)
    }
}

impl Kind for NewSession {
    type Reply = Session;
    fn apply_to(
        self,
        state: &mut State,
        _: u64,
        _: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<Session, Error> {
        state.create_session(self, events)
    }
    fn applied(session: Session) -> Applied {
        Applied::SessionCreated(session)
    }
}

impl Kind for EndSession {
    type Reply = ();
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<(), Error> {
        state.end_session(self.id, self.cause, index, now, events)
    }
    fn applied((): ()) -> Applied {
        Applied::SessionEnded
    }
}

impl Kind for Put {
    /// The index it was written at.
    type Reply = u64;
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        _: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<u64, Error> {
        state.put(self, index, events)
    }
    fn applied(index: u64) -> Applied {
        Applied::Written { index }
    }
}

impl Kind for Delete {
    type Reply = Deleted;
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<Deleted, Error> {
        state.delete(
            &self.key,
            self.cas,
            self.recursive,
            self.locked,
            index,
            now,
            events,
        )
    }
    fn applied(Deleted { index, keys }: Deleted) -> Applied {
        Applied::Deleted { index, keys }
    }
}

impl Kind for MayCache {
    type Reply = ();
    fn apply_to(
        self,
        state: &mut State,
        _: u64,
        _: Millis,
        _: &mut Vec<StateEvent>,
    ) -> Result<(), Error> {
        if !state.sessions.contains_key(&self.session) {
            return Err(state.missing_session(self.session));
        }
        state.may_cache.insert(self.session);
        Ok(())
    }
    fn applied((): ()) -> Applied {
        Applied::MayCache
    }
}

impl Kind for KeepAcquires {
    type Reply = ();
    fn apply_to(
        self,
        state: &mut State,
        _: u64,
        _: Millis,
        _: &mut Vec<StateEvent>,
    ) -> Result<(), Error> {
        state.acquires_kept = true;
        Ok(())
    }
    fn applied((): ()) -> Applied {
        Applied::KeepingAcquires
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::command;
    use crate::time::at;
    use leasehold_protocol::{Behavior, SessionSecret};

    fn state() -> State {
        State::new(Bounds::from(&Config::default()))
    }

    fn create(id: u128, lease: Option<u64>, lock_delay: Option<u64>) -> Command {
        Command::CreateSession(NewSession {
            id: SessionId::from_u128(id),
            secret: SessionSecret::from_bytes([id as u8; 16]),
            name: "test".into(),
            lease: lease.map(Duration::from_millis),
            lock_delay: lock_delay.map(Duration::from_millis),
            behavior: Behavior::Release,
            checks: Vec::new(),
        })
    }

    fn created(reply: Result<Applied, Error>) -> Session {
        match reply {
            Ok(Applied::SessionCreated(s)) => s,
            other => panic!("expected a created session, got {other:?}"),
        }
    }

    // SES-2
    #[test]
    fn a_session_without_a_lease_gets_the_default_lease() {
        let (reply, events) = state().apply(create(1, None, None), at(0));
        assert_eq!(created(reply).lease, Duration::from_secs(12).into());
        assert_eq!(
            events,
            vec![StateEvent::SessionCreated {
                id: SessionId::from_u128(1)
            }]
        );
    }

    // SES-2
    #[test]
    fn a_lease_outside_the_bounds_is_an_invalid_argument() {
        let mut s = state();
        for lease in [999, 60_001] {
            let (reply, events) = s.apply(create(lease as u128, Some(lease), None), at(0));
            assert_eq!(reply.unwrap_err().code, ErrorCode::InvalidArgument);
            assert!(events.is_empty());
        }
    }

    // SES-3
    #[test]
    fn an_explicit_zero_lock_delay_is_kept_and_none_takes_the_default() {
        let mut s = state();
        assert_eq!(
            created(s.apply(create(1, None, Some(0)), at(0)).0).lock_delay,
            Duration::ZERO.into()
        );
        assert_eq!(
            created(s.apply(create(2, None, None), at(0)).0).lock_delay,
            Duration::from_secs(15).into()
        );
    }

    // SES-1
    #[test]
    fn a_name_longer_than_the_maximum_is_an_invalid_argument() {
        let mut s = state();
        let (reply, _) = s.apply(
            Command::CreateSession(NewSession {
                id: SessionId::from_u128(1),
                secret: SessionSecret::from_bytes([1; 16]),
                name: "x".repeat(MAX_NAME_LEN + 1),
                lease: None,
                lock_delay: None,
                behavior: Behavior::Release,
                checks: Vec::new(),
            }),
            at(0),
        );
        assert_eq!(reply.unwrap_err().code, ErrorCode::InvalidArgument);
    }

    // SES-10
    #[test]
    fn sessions_after_an_id_start_past_it_in_id_order() {
        let mut s = state();
        for id in [3u128, 1, 2] {
            created(s.apply(create(id, None, None), at(0)).0);
        }
        let after_one: Vec<_> = s
            .sessions_after(Some(SessionId::from_u128(1)))
            .map(|s| s.id.as_u128())
            .collect();
        assert_eq!(after_one, [2, 3]);
    }

    // SES-3
    #[test]
    fn a_lock_delay_over_a_minute_is_an_invalid_argument() {
        let (reply, _) = state().apply(create(1, None, Some(60_001)), at(0));
        assert_eq!(reply.unwrap_err().code, ErrorCode::InvalidArgument);
    }

    // ERR-6
    #[test]
    fn creating_past_the_session_limit_is_refused() {
        let mut bounds = Bounds::from(&Config::default());
        bounds.max_sessions = 1;
        let mut s = State::new(bounds);
        created(s.apply(create(1, None, None), at(0)).0);
        let (reply, _) = s.apply(create(2, None, None), at(0));
        assert_eq!(reply.unwrap_err().code, ErrorCode::LimitReached);
    }

    // ERR-1, ERR-2
    #[test]
    fn an_ended_session_is_expired_and_a_never_seen_one_is_unknown() {
        let mut s = state();
        created(s.apply(create(1, None, None), at(0)).0);
        let id = SessionId::from_u128(1);
        let (reply, events) = s.apply(
            Command::EndSession(command::EndSession {
                id,
                cause: EndCause::Expired,
            }),
            at(5),
        );
        assert_eq!(reply, Ok(Applied::SessionEnded));
        assert_eq!(
            events,
            vec![StateEvent::SessionEnded {
                id,
                cause: EndCause::Expired
            }]
        );
        assert_eq!(s.missing_session(id).code, ErrorCode::SessionExpired);
        assert_eq!(
            s.missing_session(SessionId::from_u128(9)).code,
            ErrorCode::UnknownSession
        );
    }

    // SES-7
    #[test]
    fn ending_a_session_twice_reports_it_already_ended() {
        let mut s = state();
        created(s.apply(create(1, None, None), at(0)).0);
        let end = Command::EndSession(command::EndSession {
            id: SessionId::from_u128(1),
            cause: EndCause::Destroyed,
        });
        assert!(s.apply(end.clone(), at(0)).0.is_ok());
        let (reply, events) = s.apply(end, at(0));
        assert_eq!(reply.unwrap_err().code, ErrorCode::SessionExpired);
        assert!(events.is_empty());
    }

    fn put(key: &str, ephemeral: Option<u128>) -> Command {
        Command::Put(Put {
            key: key.into(),
            contents: b"v".to_vec(),
            flags: 0,
            cas: None,
            ephemeral: ephemeral.map(SessionId::from_u128),
        })
    }

    // NS-4
    #[test]
    fn ending_a_session_deletes_its_ephemeral_nodes_and_no_others() {
        let mut s = state();
        created(s.apply(create(1, None, None), at(0)).0);
        s.apply(put("svc/a", Some(1)), at(0)).0.unwrap();
        s.apply(put("svc/b", None), at(0)).0.unwrap();
        let (reply, events) = s.apply(
            Command::EndSession(command::EndSession {
                id: SessionId::from_u128(1),
                cause: EndCause::Expired,
            }),
            at(0),
        );
        assert_eq!(reply, Ok(Applied::SessionEnded));
        assert!(events.contains(&StateEvent::NodeDeleted {
            key: "svc/a".into()
        }));
        assert!(s.namespace().get("svc/a").is_none());
        assert!(s.namespace().get("svc/b").is_some());
        assert_eq!(s.namespace().key_index("svc/a"), s.index());
    }

    // NS-4
    #[test]
    fn an_ephemeral_node_needs_a_live_session() {
        let mut s = state();
        let (reply, _) = s.apply(put("svc/a", Some(9)), at(0));
        assert_eq!(reply.unwrap_err().code, ErrorCode::UnknownSession);
    }

    // NS-2
    #[test]
    fn every_applied_command_takes_the_next_index_and_a_refused_one_none() {
        let mut s = state();
        created(s.apply(create(1, None, None), at(0)).0);
        assert_eq!(
            s.apply(put("a", None), at(0)).0,
            Ok(Applied::Written { index: 2 })
        );
        let refused = Command::Put(Put {
            cas: Some(0),
            ..match put("a", None) {
                Command::Put(p) => p,
                _ => unreachable!(),
            }
        });
        assert!(s.apply(refused, at(0)).0.is_err());
        assert_eq!(
            s.apply(put("b", None), at(0)).0,
            Ok(Applied::Written { index: 3 })
        );
        assert_eq!(s.namespace().get("b").unwrap().instance, 3);
    }

    #[test]
    fn the_same_commands_give_the_same_state() {
        let run = || {
            let mut s = state();
            for i in 0..50u128 {
                let _ = s.apply(create(i, Some(1_000 + i as u64 * 100), None), at(i as u64));
                if i % 3 == 0 {
                    let _ = s.apply(
                        Command::EndSession(command::EndSession {
                            id: SessionId::from_u128(i / 2),
                            cause: EndCause::Expired,
                        }),
                        at(i as u64),
                    );
                }
            }
            s.sessions().cloned().collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }
}
