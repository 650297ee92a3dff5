//! The engine: everything the master decides, with no clock, no disk and
//! no runtime. It owns the durable state and the master's soft state
//! (leases, held KeepAlives, timers, waits, event queues, cache
//! bookkeeping), takes one [`Input`] at a time with the master time it
//! happens at, and says what must happen as [`Effect`]s: records to log,
//! replies to send, events to observe. The loop in `mod.rs` reads the
//! clock, feeds it and carries the effects out, in order; a reply waits
//! for every record logged before it to be durable.
//!
//! Work the engine makes for itself while it handles an input (giving
//! back a grant nobody was there to hear) waits in a queue of its own
//! until that input is handled, and so do the held KeepAlives of sessions
//! that got events (answering one may end a session whose lease ran
//! out): nothing is applied inside another command's events.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use leasehold_protocol::{Sequencer, SessionId};

use super::{Call, Effect};
use crate::acquire::Acquires;
use crate::config::Config;
use crate::events::Events;
use crate::ids::Ids;
use crate::keepalive::Held;
use crate::lease::Leases;
use crate::observe::{Grant, MasterEvent};
use crate::policy;
use crate::state::command::{GrantWaiters, KeepAcquires};
use crate::state::{Command, State};
use crate::time::Millis;
use crate::timers::{Timer, Timers};
use crate::watch::Watches;

/// What happens to the master, one at a time.
#[derive(Debug)]
pub(crate) enum Input {
    /// A request from a connection.
    Call(Call),
    /// Timers are due; `caught_up` is the time by which every KeepAlive
    /// that reached the master has been read (`SES-6`); `backlog` is how
    /// many requests wait for the master (`FO-2`).
    TimersDue { caught_up: Millis, backlog: usize },
    /// A reply granting this holding found nobody to receive it: it was
    /// sent to a closed connection, now or once the log was durable
    /// (`LOCK-9`).
    Unheard(Sequencer),
    /// Acknowledgements, deadlines or ended sessions may have let work
    /// held for caches go (`CACHE-3`).
    HeldWork,
    /// Fan-out is owed: the next slice of it (`EV-9`).
    DeliverEvents,
}

/// The engine's state and what it has decided so far.
pub(crate) struct Engine {
    pub(crate) config: Config,
    pub(crate) state: State,
    pub(crate) leases: Leases<Held>,
    pub(crate) timers: Timers<Timer>,
    pub(crate) watches: Watches,
    pub(crate) acquires: Acquires,
    pub(crate) events: Events,
    /// Which sessions may cache which keys, and work held for them
    /// (`CACHE-1`..).
    pub(crate) cache: crate::cache::Cache,
    pub(crate) ids: Ids,
    /// Failed authentications by address (`ID-6`).
    pub(crate) guesses: super::identity::Guesses,
    /// Master time of the input being handled: everything it does happens
    /// at this time.
    pub(crate) now: Millis,
    /// Whether commands are logged (the master has a store or a cell's
    /// log); in memory nothing is.
    pub(super) logging: bool,
    /// The disk is full: writes are refused (`STORE-5`). The loop sets it
    /// before each input.
    pub(crate) disk_full: bool,
    /// What the store holds, in bytes, for `Status` (`OPS-4`); `None`
    /// without a data directory of the master's own. The loop sets it
    /// before each input.
    pub(crate) stored_bytes: Option<u64>,
    /// The snapshot taken for a backup, until it is read (`OPS-6`).
    pub(super) export: Option<super::backup::Export>,
    /// Snapshots taken for backups by this master: their ids.
    pub(super) exports_taken: u64,
    /// The counts of `Status` last taken (`OPS-4`).
    pub(super) counted: Option<super::views::Counted>,
    /// What each peer address has taken of shared resources ("Quotas").
    pub(crate) quotas: crate::quota::Quotas,
    /// What this master's replies told of each holding (`LOCK-9`).
    pub(crate) told: BTreeMap<(SessionId, String), Told>,
    /// Give-backs decided and not yet applied, by session, key and lock
    /// generation (`LOCK-9`).
    pub(crate) giving_back: BTreeSet<(SessionId, String, u64)>,
    /// What it counted (`OPS-1`).
    pub(crate) tally: crate::tally::Tally,
    /// Commands the engine made while handling an input, applied once
    /// that input is handled.
    pub(crate) made: VecDeque<Command>,
    /// What must happen, for the loop to carry out.
    pub(super) out: VecDeque<Effect>,
}

/// What this master's replies told a session of one of its holdings: one
/// of them undelivered gives the lock back only if no other told the
/// session of it, and the holding was made by this master's acquire, not
/// an earlier one (`LOCK-9`).
#[derive(Debug)]
pub(crate) struct Told {
    pub(crate) grant: Sequencer,
    /// Replies that told of it, sent or waiting for the log.
    pub(crate) replies: u32,
    /// Whether an acquire this master answered made the holding.
    pub(crate) made_here: bool,
}

impl Engine {
    /// An engine on `state` at master time `now`; a `recovered` state is
    /// taken over as `policy::promote` says. `logging`: commands are
    /// logged.
    pub(crate) fn new(
        config: Config,
        state: State,
        recovered: bool,
        now: Millis,
        logging: bool,
    ) -> Self {
        let mut engine = Engine {
            state,
            ids: Ids::new(config.ids),
            guesses: Default::default(),
            leases: Leases::default(),
            timers: Timers::default(),
            watches: Watches::default(),
            acquires: Acquires::default(),
            events: Events::default(),
            cache: crate::cache::Cache::default(),
            tally: Default::default(),
            now,
            logging,
            disk_full: false,
            stored_bytes: None,
            export: None,
            exports_taken: 0,
            counted: None,
            quotas: Default::default(),
            told: Default::default(),
            giving_back: Default::default(),
            made: Default::default(),
            out: Default::default(),
            config,
        };
        engine.events.budget = crate::events::EventBudget {
            per_peer: engine.config.event_bytes_per_peer,
            all: engine.config.all_event_bytes,
            fanout_per_payer: engine.config.fanout_per_payer,
        };
        engine.cache.per_session = engine.config.cached_keys_per_session;
        engine.cache.max_bytes = engine.config.all_cache_bytes;
        engine.cache.unheld = engine.config.unsafe_unheld_cache_writes;
        let epoch = engine.config.epoch;
        engine.observe(|| MasterEvent::Serving { epoch, now });
        if recovered {
            engine.promote();
        }
        // Once, on a new state or one carried forward from format 4 (cell
        // format 2): logged, so every member keeps acquires from the same
        // entry on (`STORE-6`).
        if !engine.state.acquires_kept() {
            let _ = engine.apply(KeepAcquires, now);
        }
        engine
    }

    /// Handles `input`, which happens at `now`, and whatever work it made
    /// for the engine itself. What must happen then waits for
    /// `swap_effects`.
    pub(crate) fn step(&mut self, input: Input, now: Millis) {
        self.now = now;
        match input {
            Input::Call(call) => self.handle(call),
            Input::TimersDue { caught_up, backlog } => {
                self.fire_timers(caught_up.min(now), backlog)
            }
            Input::Unheard(grant) => self.grant_unheard(grant),
            Input::HeldWork => self.run_held(),
            Input::DeliverEvents => self.deliver_events(),
        }
        // Made work and woken KeepAlives only now, never inside another
        // command's events: a give-back applies a command of its own, and
        // answering a KeepAlive may find its session ending (`CACHE-5`).
        loop {
            while let Some(command) = self.made.pop_front() {
                self.apply_made(command);
            }
            if self.events.woken.is_empty() {
                break;
            }
            self.wake();
        }
    }

    /// What the engine has decided since this was last asked, in order.
    #[cfg(test)]
    pub(crate) fn effects(&mut self) -> VecDeque<Effect> {
        std::mem::take(&mut self.out)
    }

    /// Hands over what the engine has decided since this was last asked,
    /// in order, in exchange for `spare`, an empty queue: the two take
    /// turns, so that neither is allocated again input after input.
    pub(crate) fn swap_effects(&mut self, spare: &mut VecDeque<Effect>) {
        debug_assert!(spare.is_empty());
        std::mem::swap(&mut self.out, spare);
    }

    /// When the engine next has something to do by itself: the earliest
    /// lease or timer.
    pub(crate) fn next_due(&self) -> Option<Millis> {
        match (self.leases.next_due(), self.timers.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether held work may have been let go (`Input::HeldWork`).
    pub(crate) fn held_work_moved(&self) -> bool {
        self.cache.moved
    }

    /// Whether fan-out is owed (`Input::DeliverEvents`).
    pub(crate) fn owes_events(&self) -> bool {
        self.events.owes()
    }

    /// Takes over a recovered state, as `policy::promote` says
    /// (`FO-2`..`FO-5`).
    fn promote(&mut self) {
        let now = self.now;
        let promotion = policy::promote(&self.state, now);
        self.leases = promotion.leases;
        let sessions = promotion.sessions;
        // Every table here is built whole from the sessions in ascending
        // order: at a million sessions, inserting each took seconds.
        let pushed = self.events.imply_failovers(&sessions, self.config.epoch);
        for &id in &sessions {
            let Some(expires) = self.leases.expires_at(id) else {
                continue;
            };
            self.observe(|| MasterEvent::Granted {
                session: id,
                now,
                expires,
                why: Grant::Failover,
            });
            let seq = match pushed {
                Some(seq) => seq,
                None => self.events.push_failover(id, self.config.epoch),
            };
            // Its client may serve a cache filled under the previous
            // master until it hears of this one or the lease it may have
            // had runs out (`CACHE-7`).
            // Only a session that ever cached: the others never served a
            // read without the master.
            if self.state.may_cache.contains(&id) {
                self.cache.recovered(id, seq, expires);
            }
        }
        self.events.take_over(&sessions);
        for (key, until) in promotion.lock_delays {
            self.timers.insert(until, Timer::LockDelayEnd(key));
        }
        for key in promotion.lines {
            self.timers.insert(now, Timer::LineLeft(key));
        }
        // Recovered waiters keep their places (`FO-4`): each waits for its
        // session to ask again (`LOCK-3`), or for its turn, when the grant,
        // with nobody to hear it, is given back (`LOCK-9`).
    }

    /// Handles every timer due by now: sessions' first, so a lease that
    /// has run out ends before anything that timer's turn does, once the
    /// master has read every KeepAlive that arrived before its end
    /// (`caught_up`, `SES-6`); `backlog` is how many requests wait for the
    /// master (`FO-2`).
    pub(crate) fn fire_timers(&mut self, caught_up: Millis, backlog: usize) {
        let now = self.now;
        while let Some(id) = self.leases.pop_due(now) {
            self.session_timer_fired(id, caught_up, backlog);
        }
        while let Some(timer) = self.timers.pop_due(now) {
            match timer {
                Timer::WatchTimeout(watch) => self.watch_timed_out(watch),
                Timer::AcquireTimeout(ticket) => self.acquire_timed_out(ticket),
                Timer::LockDelayEnd(key) => self.apply_made(GrantWaiters { key }.into()),
                // Checked again: what ran since may have moved the line.
                Timer::LineLeft(key) => {
                    if self.state.line_can_move(&key, now) {
                        self.apply_made(GrantWaiters { key }.into());
                    }
                }
                Timer::CacheDeadline => {
                    self.cache.armed = None;
                    self.cache.moved_everything();
                }
            }
        }
    }
}
