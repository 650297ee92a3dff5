//! The state machine's side of locks (SPEC "Locks"): acquiring, waiting,
//! releasing and giving back, lock-delay and what a session's end does to
//! its locks. Each changes [`Locks`] and the namespace together, inside
//! `State::apply`, so the lines are part of the replicated state.

use std::time::Duration;

use leasehold_protocol::{Behavior, Error, ErrorCode, LockMode, Sequencer, SessionId};

use super::command::{Acquire, CancelWait, GiveBack, GrantWaiters, Release, ReleaseAcquired};
use super::{Acquisition, Applied, Kind, State, StateEvent, WaitCancelled};
use crate::holding::{Holding, HowGranted, LetGo};
use crate::lock::{LockState, Waiter};
use crate::node::{check_key, NodeChange};
use crate::time::{whole_millis, Millis};

impl State {
    /// Takes, or queues for, the lock of `key` (`LOCK-2`, `LOCK-3`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquire(
        &mut self,
        key: String,
        session: SessionId,
        mode: LockMode,
        contents: Option<Vec<u8>>,
        transient: bool,
        wait: bool,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<Acquisition, Error> {
        check_key(&key).map_err(|e| Error::new(ErrorCode::InvalidArgument, e))?;
        self.check_contents(contents.as_deref())?;
        if self.session(session).is_none() {
            return Err(self.missing_session(session));
        }
        let lock = self.locks.locks.entry(key.clone()).or_default();
        match lock.holders.get(&session).map(|h| h.mode) {
            // Re-acquiring what one holds succeeds and leaves the generation.
            Some(held) if held == mode => {
                let how = HowGranted::Again;
                let sequencer = self.grant(
                    &key, session, mode, contents, transient, index, now, how, events,
                );
                return Ok(Acquisition::Acquired { index, sequencer });
            }
            Some(held) => {
                return Err(Error::new(
                    ErrorCode::InvalidArgument,
                    format!(
                        "the session holds '{key}' {held:?}; release it before asking for {mode:?}"
                    ),
                ));
            }
            None => {}
        }
        if lock.waiters.iter().any(|w| w.session == session) {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!("the session already waits for '{key}'"),
            ));
        }
        let delayed = lock.delay_remaining(now);
        // A newcomer never overtakes a waiter (`LOCK-5`).
        if delayed.is_none() && lock.waiters.is_empty() && lock.admits(mode) {
            let how = HowGranted::AtOnce;
            let sequencer = self.grant(
                &key, session, mode, contents, transient, index, now, how, events,
            );
            return Ok(Acquisition::Acquired { index, sequencer });
        }
        if wait {
            lock.waiters.push_back(Waiter {
                ticket: index,
                session,
                mode,
                contents,
                transient,
            });
            self.locks
                .waiting_by
                .entry(session)
                .or_default()
                .insert((key.clone(), index));
            events.push(StateEvent::LockWaiting {
                key,
                waiter: session,
            });
            return Ok(Acquisition::Queued { ticket: index });
        }
        let refusal = unavailable(&key, lock, now);
        self.locks.tidy(&key, now);
        Err(refusal)
    }

    /// Gives a lock back; the next waiters get it (`LOCK-4`). With
    /// `acquired`, only if no acquire answered after that one renewed the
    /// holding: a release sent before its client heard of a later acquire
    /// may arrive after it (on another connection, `CONN-2`), and must not
    /// undo what that acquire's answer told the client.
    pub(crate) fn release(
        &mut self,
        key: &str,
        session: SessionId,
        acquired: Option<u64>,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<u64, Error> {
        let holding = self.locks.get(key).and_then(|l| l.holders.get(&session));
        let Some(holding) = holding else {
            return Err(Error::new(
                ErrorCode::LockNotHeld,
                format!("the session does not hold '{key}'"),
            ));
        };
        if let Some(named) = acquired.filter(|named| *named < holding.acquired) {
            return Err(Error::new(
                ErrorCode::StaleRelease {
                    acquired: holding.acquired,
                },
                format!(
                    "the release names the acquire at index {named}, but the session asked for \
                     '{key}' again since and was answered at index {}: the lock stays held",
                    holding.acquired
                ),
            ));
        }
        self.let_go(key, session, LetGo::Released, index, now, events);
        Ok(index)
    }

    /// Gives back the grant of `key` at lock generation `generation` that
    /// nobody was there to hear (`LOCK-9`); the master checked that no
    /// reply told the session of it.
    pub(crate) fn give_back(
        &mut self,
        key: &str,
        session: SessionId,
        generation: u64,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<u64, Error> {
        let held = self.sequencer_of(key, session);
        if held.is_none_or(|s| s.lock_generation != generation) {
            return Err(Error::new(
                ErrorCode::LockNotHeld,
                format!("the session does not hold '{key}' at generation {generation}"),
            ));
        }
        self.let_go(key, session, LetGo::GivenBack, index, now, events);
        Ok(index)
    }

    /// Takes `session`'s holding of `key` away, a plain release with no
    /// lock-delay, and grants the lock to whoever waits next.
    fn let_go(
        &mut self,
        key: &str,
        session: SessionId,
        why: LetGo,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) {
        let generation = self.generation_of(key);
        self.locks.remove_holder(key, session);
        self.namespace.touch(key, index);
        events.push(StateEvent::NodeChanged {
            key: key.to_string(),
            change: NodeChange::Touched,
        });
        events.push(StateEvent::LockReleased {
            key: key.to_string(),
            session,
            generation,
            why,
        });
        self.grant_waiters(key, index, now, events);
        self.remove_if_transient(key, index, events);
        self.locks.tidy(key, now);
    }

    /// The lock generation of `key`'s node (0: no node).
    fn generation_of(&self, key: &str) -> u64 {
        self.namespace.get(key).map_or(0, |n| n.lock_generation)
    }

    /// Deletes `key`'s node if it is transient and its lock is free with
    /// nobody waiting (`LOCK-12`). Lock-delay, kept beside the namespace,
    /// outlives the node as it does a node deleted by behaviour `Delete`.
    fn remove_if_transient(&mut self, key: &str, index: u64, events: &mut Vec<StateEvent>) {
        let in_use = self
            .locks
            .get(key)
            .is_some_and(|l| !l.holders.is_empty() || !l.waiters.is_empty());
        if in_use || !self.namespace.get(key).is_some_and(|n| n.transient) {
            return;
        }
        self.namespace.remove(key, index);
        events.push(StateEvent::NodeDeleted {
            key: key.to_string(),
        });
    }

    /// Takes a waiter out of line, because it gave up (`LOCK-3`).
    pub(crate) fn cancel_wait(
        &mut self,
        key: &str,
        ticket: u64,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<WaitCancelled, Error> {
        let Some(lock) = self.locks.locks.get_mut(key) else {
            return Err(not_waiting(ticket));
        };
        let Some(at) = lock.waiters.iter().position(|w| w.ticket == ticket) else {
            return Err(not_waiting(ticket));
        };
        let waiter = lock.waiters.remove(at).unwrap_or_else(|| unreachable!());
        let refusal = unavailable(key, lock, now);
        self.locks.forget_waiter(waiter.session, key, ticket);
        events.push(StateEvent::LineLeft {
            key: key.to_string(),
        });
        self.remove_if_transient(key, index, events);
        self.locks.tidy(key, now);
        Ok(WaitCancelled { refusal })
    }

    /// Grants whatever waiters can now have the lock, first come first
    /// served: the head, and the shared waiters right behind a shared head.
    pub(crate) fn grant_waiters(
        &mut self,
        key: &str,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) {
        loop {
            let Some(lock) = self.locks.locks.get_mut(key) else {
                return;
            };
            if lock.delay_remaining(now).is_some() {
                return;
            }
            let Some(head) = lock.waiters.front() else {
                return;
            };
            if !lock.admits(head.mode) {
                return;
            }
            let waiter = lock.waiters.pop_front().unwrap_or_else(|| unreachable!());
            self.locks.forget_waiter(waiter.session, key, waiter.ticket);
            let granted = self.grant(
                key,
                waiter.session,
                waiter.mode,
                waiter.contents,
                waiter.transient,
                index,
                now,
                HowGranted::FromLine,
                events,
            );
            events.push(StateEvent::LockGranted {
                ticket: waiter.ticket,
                index,
                sequencer: granted,
            });
        }
    }

    /// Makes `session` a holder of `key`'s lock, creating the node if need
    /// be, writing `contents` if given, and raising the lock generation if
    /// the lock was free (`LOCK-2`).
    #[allow(clippy::too_many_arguments)]
    fn grant(
        &mut self,
        key: &str,
        session: SessionId,
        mode: LockMode,
        contents: Option<Vec<u8>>,
        transient: bool,
        index: u64,
        now: Millis,
        how: HowGranted,
        events: &mut Vec<StateEvent>,
    ) -> Sequencer {
        let lock = self.locks.locks.entry(key.to_string()).or_default();
        let was_free = lock.holders.is_empty();
        let acquired = if self.acquires_kept { index } else { 0 };
        // Asking again renews the acquire, not the time held (`LOCK-15`).
        let since = match lock.holders.get(&session) {
            Some(held) => held.since,
            None => Some(now),
        };
        lock.holders.insert(
            session,
            Holding {
                mode,
                acquired,
                since,
            },
        );
        self.locks
            .held_by
            .entry(session)
            .or_default()
            .insert(key.to_string());
        let (node, change) = self
            .namespace
            .lock_node(key, contents, transient, was_free, index);
        events.push(StateEvent::NodeChanged {
            key: key.to_string(),
            change,
        });
        events.push(StateEvent::LockAcquired {
            key: key.to_string(),
            session,
            mode,
            generation: node.lock_generation,
            index,
            how,
        });
        Sequencer {
            key: key.to_string(),
            mode,
            lock_generation: node.lock_generation,
            instance: node.instance,
            session,
        }
    }

    /// Ends `session`'s part in every lock: the locks it holds are released
    /// with its lock-delay, or their nodes deleted if its behaviour says so;
    /// its waits end (`LOCK-6`, `SES-4`).
    pub(crate) fn invalidate_locks(
        &mut self,
        session: SessionId,
        behavior: Behavior,
        lock_delay: Duration,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) {
        for (key, ticket) in self.locks.waiting_by.remove(&session).unwrap_or_default() {
            if let Some(lock) = self.locks.locks.get_mut(&key) {
                lock.waiters.retain(|w| w.ticket != ticket);
            }
            events.push(StateEvent::WaitEnded { ticket });
            events.push(StateEvent::LineLeft { key: key.clone() });
            self.remove_if_transient(&key, index, events);
            self.locks.tidy(&key, now);
        }
        for key in self.locks.held_by(session) {
            let generation = self.generation_of(&key);
            self.locks.remove_holder(&key, session);
            if whole_millis(lock_delay) > 0 {
                let until = now + lock_delay;
                let lock = self.locks.locks.entry(key.clone()).or_default();
                lock.delay_until = Some(lock.delay_until.map_or(until, |u| u.max(until)));
                events.push(StateEvent::LockDelayStarted {
                    key: key.clone(),
                    until,
                });
            }
            events.push(StateEvent::LockReleased {
                key: key.clone(),
                session,
                generation,
                why: LetGo::SessionEnded,
            });
            if behavior == Behavior::Delete {
                self.namespace.remove(&key, index);
                events.push(StateEvent::NodeDeleted { key: key.clone() });
            } else {
                self.namespace.touch(&key, index);
                events.push(StateEvent::NodeChanged {
                    key: key.clone(),
                    change: NodeChange::Touched,
                });
            }
            self.grant_waiters(&key, index, now, events);
            self.remove_if_transient(&key, index, events);
            self.locks.tidy(&key, now);
        }
    }

    /// Releases every holder of `key`, whose node (of lock generation
    /// `generation`) is being deleted: a plain release, without lock-delay
    /// (`LOCK-8`).
    pub(crate) fn release_deleted(
        &mut self,
        key: &str,
        generation: u64,
        events: &mut Vec<StateEvent>,
    ) {
        let holders: Vec<SessionId> = self
            .locks
            .locks
            .get(key)
            .map(|l| l.holders.keys().copied().collect())
            .unwrap_or_default();
        for session in holders {
            self.locks.remove_holder(key, session);
            events.push(StateEvent::LockReleased {
                key: key.to_string(),
                session,
                generation,
                why: LetGo::Deleted,
            });
        }
    }

    /// Whether `sequencer` names a holding that is current (`LOCK-7`).
    pub fn sequencer_is_valid(&self, sequencer: &Sequencer) -> bool {
        let Some(node) = self.namespace.get(&sequencer.key) else {
            return false;
        };
        node.instance == sequencer.instance
            && node.lock_generation == sequencer.lock_generation
            && self
                .locks
                .get(&sequencer.key)
                .and_then(|l| l.holders.get(&sequencer.session))
                .is_some_and(|h| h.mode == sequencer.mode)
    }

    /// The ticket and mode of `session`'s wait in `key`'s line, if it waits.
    pub fn waiting_ticket(&self, key: &str, session: SessionId) -> Option<(u64, LockMode)> {
        let waiter = self
            .locks
            .get(key)?
            .waiters
            .iter()
            .find(|w| w.session == session)?;
        Some((waiter.ticket, waiter.mode))
    }

    /// Whether the head of `key`'s line could have the lock at `now`: no
    /// lock-delay and its mode admitted by the holders (`LOCK-5`), so that
    /// a `GrantWaiters` would grant someone.
    pub fn line_can_move(&self, key: &str, now: Millis) -> bool {
        self.locks.locks.get(key).is_some_and(|lock| {
            lock.delay_remaining(now).is_none()
                && lock
                    .waiters
                    .front()
                    .is_some_and(|head| lock.admits(head.mode))
        })
    }

    /// Whether the wait `ticket` is still in `key`'s line.
    pub fn is_waiting(&self, key: &str, ticket: u64) -> bool {
        self.locks
            .get(key)
            .is_some_and(|l| l.waiters.iter().any(|w| w.ticket == ticket))
    }

    pub fn sequencer_of(&self, key: &str, session: SessionId) -> Option<Sequencer> {
        let mode = self.locks.get(key)?.holders.get(&session)?.mode;
        let node = self.namespace.get(key)?;
        Some(Sequencer {
            key: key.to_string(),
            mode,
            lock_generation: node.lock_generation,
            instance: node.instance,
            session,
        })
    }
}

/// Why the lock of `key` cannot be had now.
fn unavailable(key: &str, lock: &LockState, now: Millis) -> Error {
    match lock.delay_remaining(now) {
        Some(remaining) => Error::new(
            ErrorCode::LockDelayed {
                remaining_ms: whole_millis(remaining),
            },
            format!(
                "'{key}' is in lock-delay for another {} ms: its holder's session was invalidated",
                whole_millis(remaining)
            ),
        ),
        None if lock.holders.is_empty() => Error::new(
            ErrorCode::LockHeld,
            format!(
                "'{key}' is free but {} waiter(s) are ahead",
                lock.waiters.len()
            ),
        ),
        None => Error::new(
            ErrorCode::LockHeld,
            format!(
                "'{key}' is held by {} session(s); {} waiting",
                lock.holders.len(),
                lock.waiters.len()
            ),
        ),
    }
}

fn not_waiting(ticket: u64) -> Error {
    Error::new(
        ErrorCode::InvalidArgument,
        format!("no acquire {ticket} is waiting"),
    )
}

impl Kind for Acquire {
    type Reply = Acquisition;
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<Acquisition, Error> {
        let Acquire {
            key,
            session,
            mode,
            contents,
            transient,
            wait,
        } = self;
        state.acquire(
            key, session, mode, contents, transient, wait, index, now, events,
        )
    }
    fn applied(acquisition: Acquisition) -> Applied {
        match acquisition {
            Acquisition::Acquired { index, sequencer } => Applied::Acquired { index, sequencer },
            Acquisition::Queued { ticket } => Applied::Queued { ticket },
        }
    }
}

impl Kind for Release {
    /// The index it was released at.
    type Reply = u64;
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<u64, Error> {
        state.release(&self.key, self.session, None, index, now, events)
    }
    fn applied(index: u64) -> Applied {
        Applied::Released { index }
    }
}

impl Kind for ReleaseAcquired {
    /// The index it was released at.
    type Reply = u64;
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<u64, Error> {
        state.release(
            &self.key,
            self.session,
            Some(self.acquired),
            index,
            now,
            events,
        )
    }
    fn applied(index: u64) -> Applied {
        Applied::Released { index }
    }
}

impl Kind for GiveBack {
    /// The index it was given back at.
    type Reply = u64;
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<u64, Error> {
        state.give_back(&self.key, self.session, self.generation, index, now, events)
    }
    fn applied(index: u64) -> Applied {
        Applied::Released { index }
    }
}

impl Kind for CancelWait {
    type Reply = WaitCancelled;
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<WaitCancelled, Error> {
        state.cancel_wait(&self.key, self.ticket, index, now, events)
    }
    fn applied(WaitCancelled { refusal }: WaitCancelled) -> Applied {
        Applied::WaitCancelled { refusal }
    }
}

impl Kind for GrantWaiters {
    type Reply = ();
    fn apply_to(
        self,
        state: &mut State,
        index: u64,
        now: Millis,
        events: &mut Vec<StateEvent>,
    ) -> Result<(), Error> {
        state.grant_waiters(&self.key, index, now, events);
        Ok(())
    }
    fn applied((): ()) -> Applied {
        Applied::WaitersChecked
    }
}

#[cfg(test)]
mod tests {
    use crate::state::command;
    use std::time::Duration;

    use super::*;
    use crate::config::Config;
    use crate::session::EndCause;
    use crate::state::NewSession;
    use crate::state::{Bounds, Command};
    use crate::time::at;

    const A: u128 = 1;
    const B: u128 = 2;
    const C: u128 = 3;

    fn id(n: u128) -> SessionId {
        SessionId::from_u128(n)
    }

    /// A state with sessions A, B and C; A has a 5 s lock-delay and the
    /// behaviour given, the others none. Holdings keep their acquires, as
    /// once a master has started on it.
    fn state(behavior: Behavior) -> State {
        let mut s = State::new(Bounds::from(&Config::default()));
        s.apply(Command::KeepAcquires, at(0)).0.unwrap();
        for (n, delay) in [(A, 5_000), (B, 0), (C, 0)] {
            let (reply, _) = s.apply(
                Command::CreateSession(NewSession {
                    id: id(n),
                    secret: leasehold_protocol::SessionSecret::from_bytes([7; 16]),
                    name: format!("s{n}"),
                    lease: None,
                    lock_delay: Some(Duration::from_millis(delay)),
                    behavior: if n == A { behavior } else { Behavior::Release },
                    checks: Vec::new(),
                }),
                at(0),
            );
            reply.unwrap();
        }
        s
    }

    fn acquire(
        s: &mut State,
        who: u128,
        mode: LockMode,
        wait: bool,
        now: Millis,
    ) -> (Result<Applied, Error>, Vec<StateEvent>) {
        acquire_as(s, who, mode, wait, false, now)
    }

    /// An exclusive acquire of "k" asking for a transient node.
    fn acquire_transient(
        s: &mut State,
        who: u128,
        wait: bool,
        now: Millis,
    ) -> (Result<Applied, Error>, Vec<StateEvent>) {
        acquire_as(s, who, LockMode::Exclusive, wait, true, now)
    }

    fn acquire_as(
        s: &mut State,
        who: u128,
        mode: LockMode,
        wait: bool,
        transient: bool,
        now: Millis,
    ) -> (Result<Applied, Error>, Vec<StateEvent>) {
        s.apply(
            Command::Acquire(command::Acquire {
                key: "k".into(),
                session: id(who),
                mode,
                contents: None,
                transient,
                wait,
            }),
            now,
        )
    }

    fn deleted(events: &[StateEvent]) -> bool {
        events.contains(&StateEvent::NodeDeleted { key: "k".into() })
    }

    fn generation(reply: Result<Applied, Error>) -> u64 {
        match reply {
            Ok(Applied::Acquired { sequencer, .. }) => sequencer.lock_generation,
            other => panic!("expected the lock, got {other:?}"),
        }
    }

    fn ticket(reply: Result<Applied, Error>) -> u64 {
        match reply {
            Ok(Applied::Queued { ticket }) => ticket,
            other => panic!("expected to wait in line, got {other:?}"),
        }
    }

    fn release(s: &mut State, who: u128, now: Millis) -> Vec<StateEvent> {
        let (reply, events) = s.apply(
            Command::Release(command::Release {
                key: "k".into(),
                session: id(who),
            }),
            now,
        );
        assert!(matches!(reply, Ok(Applied::Released { .. })), "{reply:?}");
        events
    }

    fn end(s: &mut State, who: u128, now: Millis) -> Vec<StateEvent> {
        let (reply, events) = s.apply(
            Command::EndSession(command::EndSession {
                id: id(who),
                cause: EndCause::Expired,
            }),
            now,
        );
        reply.unwrap();
        events
    }

    fn granted(events: &[StateEvent]) -> Vec<u64> {
        events
            .iter()
            .filter_map(|e| match e {
                StateEvent::LockGranted { ticket, .. } => Some(*ticket),
                _ => None,
            })
            .collect()
    }

    // LOCK-2
    #[test]
    fn the_generation_rises_from_free_to_held_and_not_on_reacquire_or_release() {
        let mut s = state(Behavior::Release);
        let first = generation(acquire(&mut s, A, LockMode::Exclusive, false, at(0)).0);
        // NS-2: a node's lock generation starts at its instance number.
        let instance = s.namespace().get("k").unwrap().instance;
        assert_eq!(first, instance + 1);
        assert_eq!(
            generation(acquire(&mut s, A, LockMode::Exclusive, false, at(0)).0),
            first
        );
        release(&mut s, A, at(0));
        assert_eq!(s.namespace().get("k").unwrap().lock_generation, first);
        assert_eq!(
            generation(acquire(&mut s, B, LockMode::Exclusive, false, at(0)).0),
            first + 1
        );
    }

    // LOCK-1
    #[test]
    fn shared_holders_coexist_and_exclude_an_exclusive_one() {
        let mut s = state(Behavior::Release);
        let first = generation(acquire(&mut s, A, LockMode::Shared, false, at(0)).0);
        assert_eq!(
            generation(acquire(&mut s, B, LockMode::Shared, false, at(0)).0),
            first
        );
        let refused = acquire(&mut s, C, LockMode::Exclusive, false, at(0))
            .0
            .unwrap_err();
        assert_eq!(refused.code, ErrorCode::LockHeld);
        release(&mut s, A, at(0));
        release(&mut s, B, at(0));
        assert_eq!(
            generation(acquire(&mut s, C, LockMode::Exclusive, false, at(0)).0),
            first + 1
        );
        let refused = acquire(&mut s, A, LockMode::Shared, false, at(0))
            .0
            .unwrap_err();
        assert_eq!(refused.code, ErrorCode::LockHeld);
    }

    // LOCK-5
    #[test]
    fn waiters_are_served_first_come_first_served() {
        let mut s = state(Behavior::Release);
        generation(acquire(&mut s, A, LockMode::Exclusive, true, at(0)).0);
        let b = ticket(acquire(&mut s, B, LockMode::Exclusive, true, at(0)).0);
        let c = ticket(acquire(&mut s, C, LockMode::Exclusive, true, at(0)).0);
        assert_eq!(granted(&release(&mut s, A, at(0))), [b]);
        assert_eq!(granted(&release(&mut s, B, at(0))), [c]);
    }

    // LOCK-5
    #[test]
    fn a_newcomer_never_overtakes_a_waiter() {
        let mut s = state(Behavior::Release);
        generation(acquire(&mut s, A, LockMode::Shared, false, at(0)).0);
        ticket(acquire(&mut s, B, LockMode::Exclusive, true, at(0)).0);
        let refused = acquire(&mut s, C, LockMode::Shared, false, at(0))
            .0
            .unwrap_err();
        assert_eq!(refused.code, ErrorCode::LockHeld);
    }

    // LOCK-5
    #[test]
    fn shared_waiters_behind_each_other_are_granted_together() {
        let mut s = state(Behavior::Release);
        generation(acquire(&mut s, A, LockMode::Exclusive, false, at(0)).0);
        let b = ticket(acquire(&mut s, B, LockMode::Shared, true, at(0)).0);
        let c = ticket(acquire(&mut s, C, LockMode::Shared, true, at(0)).0);
        assert_eq!(granted(&release(&mut s, A, at(0))), [b, c]);
    }

    // LOCK-5: the state itself grants nothing when a waiter leaves, so a
    // replayed log gives what was logged; it says the line may move, and
    // the master logs `GrantWaiters`.
    #[test]
    fn a_waiter_whose_session_ends_says_the_line_behind_it_may_move() {
        let mut s = state(Behavior::Release);
        generation(acquire(&mut s, A, LockMode::Shared, false, at(0)).0);
        ticket(acquire(&mut s, B, LockMode::Exclusive, true, at(0)).0);
        let c = ticket(acquire(&mut s, C, LockMode::Shared, true, at(0)).0);
        assert!(!s.line_can_move("k", at(0)));
        let events = end(&mut s, B, at(0));
        assert!(events.contains(&StateEvent::LineLeft { key: "k".into() }));
        assert!(granted(&events).is_empty());
        assert!(s.line_can_move("k", at(0)));
        let (_, events) = s.apply(
            Command::GrantWaiters(command::GrantWaiters { key: "k".into() }),
            at(0),
        );
        assert_eq!(granted(&events), [c]);
        assert!(!s.line_can_move("k", at(0)));
    }

    // LOCK-6, ERR-12
    #[test]
    fn lock_delay_follows_invalidation_and_the_refusal_says_how_long() {
        let mut s = state(Behavior::Release);
        let first = generation(acquire(&mut s, A, LockMode::Exclusive, false, at(1_000)).0);
        let events = end(&mut s, A, at(1_000));
        assert!(events.contains(&StateEvent::LockDelayStarted {
            key: "k".into(),
            until: at(6_000)
        }));
        let refused = acquire(&mut s, B, LockMode::Exclusive, false, at(2_500))
            .0
            .unwrap_err();
        assert_eq!(
            refused.code,
            ErrorCode::LockDelayed {
                remaining_ms: 3_500
            }
        );
        assert!(refused.message.contains("3500 ms"), "{}", refused.message);
        assert_eq!(
            generation(acquire(&mut s, B, LockMode::Exclusive, false, at(6_000)).0),
            first + 1
        );
    }

    // LOCK-6
    #[test]
    fn a_normal_release_starts_no_lock_delay() {
        let mut s = state(Behavior::Release);
        generation(acquire(&mut s, A, LockMode::Exclusive, false, at(0)).0);
        release(&mut s, A, at(0));
        generation(acquire(&mut s, B, LockMode::Exclusive, false, at(1)).0);
    }

    // LOCK-6
    #[test]
    fn a_waiter_gets_the_lock_when_lock_delay_ends() {
        let mut s = state(Behavior::Release);
        generation(acquire(&mut s, A, LockMode::Exclusive, false, at(0)).0);
        let b = ticket(acquire(&mut s, B, LockMode::Exclusive, true, at(0)).0);
        assert!(
            granted(&end(&mut s, A, at(0))).is_empty(),
            "not during the delay"
        );
        let (_, early) = s.apply(
            Command::GrantWaiters(command::GrantWaiters { key: "k".into() }),
            at(4_999),
        );
        assert!(granted(&early).is_empty());
        let (_, on_time) = s.apply(
            Command::GrantWaiters(command::GrantWaiters { key: "k".into() }),
            at(5_000),
        );
        assert_eq!(granted(&on_time), [b]);
    }

    // SES-4, LOCK-6
    #[test]
    fn behaviour_delete_removes_the_nodes_the_session_held_and_keeps_the_delay() {
        let mut s = state(Behavior::Delete);
        generation(acquire(&mut s, A, LockMode::Exclusive, false, at(0)).0);
        let events = end(&mut s, A, at(0));
        assert!(events.contains(&StateEvent::NodeDeleted { key: "k".into() }));
        assert!(s.namespace().get("k").is_none());
        let refused = acquire(&mut s, B, LockMode::Exclusive, false, at(10))
            .0
            .unwrap_err();
        assert_eq!(
            refused.code,
            ErrorCode::LockDelayed {
                remaining_ms: 4_990
            }
        );
    }

    // LOCK-3
    #[test]
    fn a_waiter_whose_session_ends_leaves_the_line() {
        let mut s = state(Behavior::Release);
        generation(acquire(&mut s, A, LockMode::Exclusive, false, at(0)).0);
        let b = ticket(acquire(&mut s, B, LockMode::Exclusive, true, at(0)).0);
        let c = ticket(acquire(&mut s, C, LockMode::Exclusive, true, at(0)).0);
        assert!(end(&mut s, B, at(0)).contains(&StateEvent::WaitEnded { ticket: b }));
        assert_eq!(granted(&release(&mut s, A, at(0))), [c]);
    }

    // LOCK-3
    #[test]
    fn a_cancelled_wait_says_why_the_lock_was_not_had() {
        let mut s = state(Behavior::Release);
        generation(acquire(&mut s, A, LockMode::Exclusive, false, at(0)).0);
        let b = ticket(acquire(&mut s, B, LockMode::Exclusive, true, at(0)).0);
        let (reply, _) = s.apply(
            Command::CancelWait(command::CancelWait {
                key: "k".into(),
                ticket: b,
            }),
            at(0),
        );
        let Ok(Applied::WaitCancelled { refusal }) = reply else {
            panic!("expected the wait cancelled, got {reply:?}");
        };
        assert_eq!(refusal.code, ErrorCode::LockHeld);
        assert!(granted(&release(&mut s, A, at(0))).is_empty());
    }

    // LOCK-7
    #[test]
    fn a_sequencer_is_valid_only_while_its_holding_lasts() {
        let mut s = state(Behavior::Release);
        let Ok(Applied::Acquired { sequencer, .. }) =
            acquire(&mut s, A, LockMode::Exclusive, false, at(0)).0
        else {
            panic!("expected the lock");
        };
        assert!(s.sequencer_is_valid(&sequencer));
        assert_eq!(s.sequencer_of("k", id(A)), Some(sequencer.clone()));
        release(&mut s, A, at(0));
        assert!(!s.sequencer_is_valid(&sequencer));
        generation(acquire(&mut s, B, LockMode::Exclusive, false, at(0)).0);
        let stolen = Sequencer {
            session: id(B),
            ..sequencer.clone()
        };
        assert!(!s.sequencer_is_valid(&stolen), "an older generation");
    }

    // LOCK-7, LOCK-8
    #[test]
    fn a_sequencer_of_a_deleted_node_stays_invalid_after_the_node_is_recreated() {
        let mut s = state(Behavior::Release);
        let Ok(Applied::Acquired { sequencer, .. }) =
            acquire(&mut s, B, LockMode::Exclusive, false, at(0)).0
        else {
            panic!("expected the lock");
        };
        let (reply, _) = s.apply(
            Command::Delete(command::Delete {
                key: "k".into(),
                cas: None,
                recursive: false,
                locked: crate::state::LockedNodes::Any,
            }),
            at(0),
        );
        reply.unwrap();
        // NS-2: the new node's generations start above the old node's, and
        // the instance tells them apart too.
        assert!(
            generation(acquire(&mut s, B, LockMode::Exclusive, false, at(0)).0)
                > sequencer.lock_generation
        );
        assert!(!s.sequencer_is_valid(&sequencer));
    }

    // LOCK-8
    #[test]
    fn deleting_a_locked_node_hands_the_lock_to_the_next_waiter() {
        let mut s = state(Behavior::Release);
        generation(acquire(&mut s, B, LockMode::Exclusive, false, at(0)).0);
        let c = ticket(acquire(&mut s, C, LockMode::Exclusive, true, at(0)).0);
        let (reply, events) = s.apply(
            Command::Delete(command::Delete {
                key: "k".into(),
                cas: None,
                recursive: false,
                locked: crate::state::LockedNodes::Any,
            }),
            at(0),
        );
        reply.unwrap();
        assert_eq!(granted(&events), [c]);
        assert!(
            s.namespace().get("k").is_some(),
            "created again for its new holder"
        );
    }

    // LOCK-8, NS-4: a session's ephemeral node that another session holds
    // the lock of is deleted when its owner ends, and the lock goes with it
    // as with any delete: the holder is told, the next waiter has it.
    #[test]
    fn an_ephemeral_node_deleted_with_its_session_releases_another_sessions_lock() {
        let mut s = state(Behavior::Release);
        let ephemeral = Command::Put(crate::namespace::Put {
            key: "k".into(),
            contents: b"v".to_vec(),
            flags: 0,
            cas: None,
            ephemeral: Some(id(C)),
        });
        s.apply(ephemeral, at(0)).0.unwrap();
        let held = generation(acquire(&mut s, B, LockMode::Exclusive, false, at(0)).0);
        let a = ticket(acquire(&mut s, A, LockMode::Exclusive, true, at(0)).0);
        let end = Command::EndSession(command::EndSession {
            id: id(C),
            cause: EndCause::Destroyed,
        });
        let (reply, events) = s.apply(end, at(1));
        reply.unwrap();
        assert!(deleted(&events));
        assert!(events.contains(&StateEvent::LockReleased {
            key: "k".into(),
            session: id(B),
            generation: held,
            why: LetGo::Deleted,
        }));
        assert_eq!(granted(&events), [a]);
        let holders = &s.locks().get("k").expect("the lock").holders;
        assert!(!holders.contains_key(&id(B)) && holders.contains_key(&id(A)));
    }

    // LOCK-2
    #[test]
    fn an_acquire_with_contents_writes_them_in_the_same_step() {
        let mut s = state(Behavior::Release);
        let (reply, _) = s.apply(
            Command::Acquire(command::Acquire {
                key: "svc/leader".into(),
                session: id(A),
                mode: LockMode::Exclusive,
                contents: Some(b"10.0.0.1:80".to_vec()),
                transient: false,
                wait: false,
            }),
            at(0),
        );
        let Ok(Applied::Acquired { index, .. }) = reply else {
            panic!("expected the lock, got {reply:?}");
        };
        let node = s.namespace().get("svc/leader").unwrap();
        assert_eq!(node.contents, b"10.0.0.1:80");
        assert_eq!(
            (node.modify_index, node.lock_generation),
            (index, index + 1)
        );
    }

    // ERR-13
    #[test]
    fn releasing_a_lock_not_held_is_refused() {
        let mut s = state(Behavior::Release);
        let (reply, _) = s.apply(
            Command::Release(command::Release {
                key: "k".into(),
                session: id(A),
            }),
            at(0),
        );
        assert_eq!(reply.unwrap_err().code, ErrorCode::LockNotHeld);
    }

    // LOCK-12
    #[test]
    fn a_transient_node_goes_when_its_lock_is_released_and_nobody_waits() {
        let mut s = state(Behavior::Release);
        generation(acquire_transient(&mut s, B, false, at(0)).0);
        assert!(s.namespace.get("k").unwrap().stat().transient);
        let events = release(&mut s, B, at(1));
        assert!(deleted(&events), "{events:?}");
        assert!(s.namespace.get("k").is_none());
        assert!(s.locks.get("k").is_none(), "nothing is left of the lock");
    }

    // LOCK-12
    #[test]
    fn a_transient_node_stays_while_someone_waits_and_goes_with_the_last_holder() {
        let mut s = state(Behavior::Release);
        generation(acquire_transient(&mut s, B, false, at(0)).0);
        ticket(acquire_transient(&mut s, C, true, at(1)).0);
        let events = release(&mut s, B, at(2));
        assert!(!deleted(&events), "C took it over: {events:?}");
        assert_eq!(granted(&events).len(), 1);
        assert!(s.namespace.get("k").is_some());
        let events = release(&mut s, C, at(3));
        assert!(deleted(&events), "{events:?}");
    }

    // LOCK-12, LOCK-6
    #[test]
    fn a_transient_node_goes_with_its_expired_holder_and_the_lock_delay_stays() {
        let mut s = state(Behavior::Release);
        let first = generation(acquire_transient(&mut s, A, false, at(0)).0);
        let events = end(&mut s, A, at(1_000));
        assert!(deleted(&events), "{events:?}");
        assert!(s.namespace.get("k").is_none());
        let refusal = acquire_transient(&mut s, B, false, at(2_000))
            .0
            .unwrap_err();
        assert_eq!(
            refusal.code,
            ErrorCode::LockDelayed {
                remaining_ms: 4_000
            },
            "the key keeps A's lock-delay"
        );
        // After it, the key is taken and created anew, under a higher
        // generation than the deleted node's: fencing by generation holds
        // across the deletion (NS-2).
        let next = generation(acquire_transient(&mut s, B, false, at(6_000)).0);
        assert!(s.namespace.get("k").is_some());
        assert!(next > first, "{next} after {first}");
    }

    // LOCK-12, LOCK-3
    #[test]
    fn the_last_waiter_leaving_a_delayed_lock_takes_the_transient_node_with_it() {
        let mut s = state(Behavior::Release);
        generation(acquire_transient(&mut s, A, false, at(0)).0);
        let waiter = ticket(acquire_transient(&mut s, B, true, at(1)).0);
        let events = end(&mut s, A, at(1_000));
        assert!(!deleted(&events), "B still waits: {events:?}");
        let (reply, events) = s.apply(
            Command::CancelWait(command::CancelWait {
                key: "k".into(),
                ticket: waiter,
            }),
            at(2_000),
        );
        assert!(
            matches!(reply, Ok(Applied::WaitCancelled { .. })),
            "{reply:?}"
        );
        assert!(deleted(&events), "{events:?}");
        assert!(s.namespace.get("k").is_none());
    }

    // LOCK-12
    #[test]
    fn a_put_makes_a_transient_node_permanent() {
        let mut s = state(Behavior::Release);
        generation(acquire_transient(&mut s, B, false, at(0)).0);
        s.apply(
            Command::Put(crate::namespace::Put {
                key: "k".into(),
                contents: b"kept".to_vec(),
                flags: 0,
                cas: None,
                ephemeral: None,
            }),
            at(1),
        )
        .0
        .unwrap();
        assert!(!deleted(&release(&mut s, B, at(2))));
        assert_eq!(s.namespace.get("k").unwrap().contents, b"kept");
    }

    // LOCK-12
    #[test]
    fn a_transient_acquire_never_makes_an_existing_node_transient() {
        let mut s = state(Behavior::Release);
        generation(acquire(&mut s, B, LockMode::Exclusive, false, at(0)).0);
        release(&mut s, B, at(1));
        generation(acquire_transient(&mut s, C, false, at(2)).0);
        assert!(!s.namespace.get("k").unwrap().transient);
        assert!(!deleted(&release(&mut s, C, at(3))));
        assert!(s.namespace.get("k").is_some());
    }

    // LOCK-12
    #[test]
    fn one_acquire_that_wants_the_node_kept_keeps_it() {
        let mut s = state(Behavior::Release);
        acquire_as(&mut s, B, LockMode::Shared, false, true, at(0))
            .0
            .unwrap();
        acquire_as(&mut s, C, LockMode::Shared, false, false, at(1))
            .0
            .unwrap();
        release(&mut s, B, at(2));
        let events = release(&mut s, C, at(3));
        assert!(!deleted(&events), "{events:?}");
        assert!(s.namespace.get("k").is_some());
    }

    fn acquired_at(reply: Result<Applied, Error>) -> u64 {
        match reply {
            Ok(Applied::Acquired { index, .. }) => index,
            other => panic!("expected the lock, got {other:?}"),
        }
    }

    fn release_naming(s: &mut State, who: u128, acquired: u64) -> Result<Applied, Error> {
        let release = Command::ReleaseAcquired(command::ReleaseAcquired {
            key: "k".into(),
            session: id(who),
            acquired,
        });
        s.apply(release, at(2)).0
    }

    // LOCK-4, LOCK-2: a release sent before its client heard the answer to
    // the holder's asking again arrives after it (another connection): it
    // must not undo the holding that answer told of.
    #[test]
    fn a_release_naming_an_acquire_older_than_the_holdings_latest_is_refused() {
        let mut s = state(Behavior::Release);
        let first = acquired_at(acquire(&mut s, B, LockMode::Exclusive, false, at(0)).0);
        let again = acquired_at(acquire(&mut s, B, LockMode::Exclusive, false, at(1)).0);
        assert!(again > first, "asking again is answered at a new index");
        let waiter = ticket(acquire(&mut s, C, LockMode::Exclusive, true, at(1)).0);
        let refused = release_naming(&mut s, B, first);
        assert!(
            matches!(
                refused,
                Err(Error {
                    code: ErrorCode::StaleRelease { acquired },
                    ..
                }) if acquired == again
            ),
            "{refused:?}"
        );
        assert!(s.sequencer_of("k", id(B)).is_some(), "the holding stays");
        assert!(s.is_waiting("k", waiter), "nobody else got the lock");
        let released = release_naming(&mut s, B, again);
        assert!(
            matches!(released, Ok(Applied::Released { .. })),
            "{released:?}"
        );
        assert!(
            s.sequencer_of("k", id(C)).is_some(),
            "the waiter has it now"
        );
    }

    // LOCK-4: a release from an earlier holding cannot end a later one of
    // the same session, even at the same lock generation (a shared lock
    // that others held throughout).
    #[test]
    fn a_release_from_an_earlier_holding_leaves_a_later_shared_one() {
        let mut s = state(Behavior::Release);
        acquire(&mut s, C, LockMode::Shared, false, at(0))
            .0
            .unwrap();
        let first = acquired_at(acquire(&mut s, B, LockMode::Shared, false, at(0)).0);
        release_naming(&mut s, B, first).unwrap();
        let second = acquire(&mut s, B, LockMode::Shared, false, at(1)).0;
        let generation_of = |s: &State| s.sequencer_of("k", id(B)).map(|q| q.lock_generation);
        let held = generation_of(&s);
        assert!(acquired_at(second) > first);
        let stale = release_naming(&mut s, B, first);
        assert!(
            matches!(&stale, Err(e) if matches!(e.code, ErrorCode::StaleRelease { .. })),
            "{stale:?}"
        );
        assert_eq!(generation_of(&s), held, "the later holding stays");
    }

    // LOCK-4: protocol 7's release, naming no acquire, gives back whatever
    // holding the session has, as it always did.
    #[test]
    fn a_release_naming_no_acquire_gives_back_the_latest_holding() {
        let mut s = state(Behavior::Release);
        acquire(&mut s, B, LockMode::Exclusive, false, at(0))
            .0
            .unwrap();
        acquire(&mut s, B, LockMode::Exclusive, false, at(1))
            .0
            .unwrap();
        let release = Command::Release(command::Release {
            key: "k".into(),
            session: id(B),
        });
        let released = s.apply(release, at(2)).0;
        assert!(
            matches!(released, Ok(Applied::Released { .. })),
            "{released:?}"
        );
        assert!(s.sequencer_of("k", id(B)).is_none());
    }

    // LOCK-9: a give-back names the generation of the grant nobody heard;
    // a later holding of the session is not given back.
    #[test]
    fn a_give_back_ends_only_the_holding_of_its_generation() {
        let mut s = state(Behavior::Release);
        let first = generation(acquire(&mut s, B, LockMode::Exclusive, false, at(0)).0);
        release(&mut s, B, at(1));
        let second = generation(acquire(&mut s, B, LockMode::Exclusive, false, at(1)).0);
        assert!(second > first);
        let give_back = |generation| {
            Command::GiveBack(command::GiveBack {
                key: "k".into(),
                session: id(B),
                generation,
            })
        };
        let (stale, _) = s.apply(give_back(first), at(2));
        assert!(stale.is_err(), "{stale:?}");
        let (reply, events) = s.apply(give_back(second), at(2));
        assert!(matches!(reply, Ok(Applied::Released { .. })), "{reply:?}");
        assert!(events.contains(&StateEvent::LockReleased {
            key: "k".into(),
            session: id(B),
            generation: second,
            why: LetGo::GivenBack,
        }));
    }

    // LOCK-4, STORE-6: until `KeepAcquires`, a grant records no index, as
    // a holding carried forward from format 4 has none: any release names
    // it, and a member replaying the log from any snapshot, or none, holds
    // the same state.
    #[test]
    fn holdings_keep_their_acquires_only_once_a_master_has_said_so() {
        let mut s = State::new(Bounds::from(&Config::default()));
        for n in [A, B] {
            let new = NewSession {
                id: id(n),
                secret: leasehold_protocol::SessionSecret::from_bytes([7; 16]),
                name: format!("s{n}"),
                lease: None,
                lock_delay: Some(Duration::ZERO),
                behavior: Behavior::Release,
                checks: Vec::new(),
            };
            s.apply(Command::CreateSession(new), at(0)).0.unwrap();
        }
        assert!(!s.acquires_kept());
        let first = acquired_at(acquire(&mut s, A, LockMode::Exclusive, false, at(0)).0);
        acquire(&mut s, A, LockMode::Exclusive, false, at(1))
            .0
            .unwrap();
        let holding = |s: &State| {
            s.locks()
                .get("k")
                .and_then(|l| l.holders.get(&id(A)))
                .copied()
        };
        assert_eq!(holding(&s).map(|h| h.acquired), Some(0));
        release_naming(&mut s, A, first).unwrap();

        s.apply(Command::KeepAcquires, at(2)).0.unwrap();
        let kept = acquired_at(acquire(&mut s, A, LockMode::Exclusive, false, at(2)).0);
        assert_eq!(holding(&s).map(|h| h.acquired), Some(kept));
        let stale = release_naming(&mut s, A, kept - 1);
        assert!(stale.is_err(), "{stale:?}");
    }
}
