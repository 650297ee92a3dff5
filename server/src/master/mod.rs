//! The master task: the single owner of the state machine, the leases, the
//! held KeepAlives and the timers that drive them.
//!
//! Connections send [`Call`]s over a channel, each with the way back to
//! its connection (`reply.rs`), so no lock is ever held and a held
//! KeepAlive costs a few dozen bytes, not a task. Each session has one
//! timer, kept in its lease (`lease.rs`), for its held KeepAlive's answer
//! or its lease's end; other timers (watches, waits, lock-delay) are in an
//! ordered set of their own (`timers.rs`). Neither is ever scanned.
//!
//! This file is the task: its loop, and master time, which nothing else
//! reads (in a cell it also checks the master lease, on tokio's clock).
//! Each turn of the loop reads the clock once and hands that time to what
//! it runs: requests (`dispatch.rs`), timers, the store's progress.
//! What a timer or a promotion means is decided in `policy.rs`, without a
//! runtime; this task carries the decision out.

use leasehold_protocol::{Request, Sequencer, SessionId};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::debug;

use crate::acquire::Acquires;
use crate::commit::Committer;
use crate::config::Config;
use crate::config::KEEPALIVE_RUN;
use crate::events::Events;
use crate::ids::Ids;
use crate::keepalive::Held;
use crate::lease::Leases;
use crate::observe::{Grant, MasterEvent};
use crate::policy;
use crate::recovery::Start;
use crate::state::{Command, State};
use crate::time::Millis;
use crate::timers::{Timer, Timers};
use crate::watch::Watches;

mod acquire;
mod apply;
mod auth;
mod cache;
mod dispatch;
mod events;
mod handle;
mod keepalive;
#[cfg(test)]
mod tests;
mod watches;

pub(crate) use crate::call::Call;
pub(crate) use crate::reply::ReplyTx;
pub(crate) use dispatch::mismatch;
pub(crate) use handle::MasterHandle;

/// Resolves when the log's durable point moves; never without a store.
async fn durable(commit: &mut Option<Committer>) -> Result<(), watch::error::RecvError> {
    match commit {
        Some(commit) => commit.progress.changed().await,
        None => std::future::pending().await,
    }
}

/// Resolves once `lease`'s current end has passed (at once if there is
/// none); the lease may have been extended meanwhile, so the caller looks
/// again.
async fn lease_lapses(lease: Option<&crate::cell::MasterLease>) {
    if let Some(deadline) = lease.and_then(|l| l.deadline()) {
        tokio::time::sleep_until(deadline).await;
    }
}

pub(crate) struct Master {
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
    ids: Ids,
    /// The clock's reading when this master started...
    start: Instant,
    /// ...and master time then: time goes on from where the previous
    /// master stopped, so times in the recovered state keep their meaning.
    offset: Millis,
    /// Master time of the current turn of the loop: everything one turn
    /// does happens at this time.
    pub(crate) now: Millis,
    /// Group commit to the store; `None` runs in memory.
    pub(crate) commit: Option<Committer>,
    /// A cell's master lease: the master stops the moment it lapses
    /// (`CELL-6`).
    lease: Option<std::sync::Arc<crate::cell::MasterLease>>,
    /// Set when the store failed: the master stops.
    failed: bool,
    /// What each peer address has taken of shared resources ("Quotas").
    pub(crate) quotas: crate::quota::Quotas,
    /// How many `apply` calls are under way (one inside another's events).
    depth: u32,
    /// Commands to apply once the current one is finished.
    deferred: std::collections::VecDeque<Command>,
    /// Recovered sessions that have not yet acknowledged the fail-over
    /// event; only KeepAlives are served for them (`FO-5`).
    pub(crate) failover_pending: std::collections::BTreeSet<SessionId>,
    /// Recovered sessions no KeepAlive has named yet (`FO-2`).
    pub(crate) unheard: std::collections::BTreeSet<SessionId>,
    /// What this master's replies told of each holding (`LOCK-9`).
    pub(crate) told: std::collections::BTreeMap<(SessionId, String), Told>,
    /// Give-backs decided and not yet applied, by session, key and lock
    /// generation (`LOCK-9`).
    pub(crate) giving_back: std::collections::BTreeSet<(SessionId, String, u64)>,
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

/// Starts the master task; it stops when every handle is dropped or
/// `shutdown` resolves.
pub(crate) fn spawn(
    config: Config,
    start: Start,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> (MasterHandle, tokio::task::JoinHandle<()>) {
    let (calls, rx) = mpsc::channel(1024);
    let (keepalives, keepalives_rx) = mpsc::channel(1024);
    let master = Master::new(config, start, Instant::now());
    let task = tokio::spawn(master.run(rx, keepalives_rx, shutdown));
    (MasterHandle { calls, keepalives }, task)
}

impl Master {
    /// A master starting at `clock`, which is master time `start.offset`.
    fn new(config: Config, start: Start, clock: Instant) -> Self {
        let mut master = Master {
            state: start.state,
            ids: Ids::new(config.ids),
            config,
            leases: Leases::default(),
            timers: Timers::default(),
            watches: Watches::default(),
            acquires: Acquires::default(),
            events: Events::default(),
            cache: crate::cache::Cache::default(),
            start: clock,
            offset: start.offset,
            now: start.offset,
            commit: start.commit,
            lease: start.lease,
            failed: false,
            quotas: Default::default(),
            depth: 0,
            deferred: Default::default(),
            failover_pending: Default::default(),
            unheard: Default::default(),
            told: Default::default(),
            giving_back: Default::default(),
        };
        master.events.budget = crate::events::EventBudget {
            per_peer: master.config.event_bytes_per_peer,
            all: master.config.all_event_bytes,
        };
        master.cache.per_session = master.config.cached_keys_per_session;
        master.cache.max_bytes = master.config.all_cache_bytes;
        master.cache.unheld = master.config.unsafe_unheld_cache_writes;
        let (epoch, now) = (master.config.epoch, master.now);
        master.observe(|| MasterEvent::Serving { epoch, now });
        if start.recovered {
            master.promote();
        }
        // Once, on a new state or one carried forward from format 4 (cell
        // format 2): logged, so every member keeps acquires from the same
        // entry on (`STORE-6`).
        if !master.state.acquires_kept() {
            let now = master.now;
            let _ = master.apply(Command::KeepAcquires, now);
        }
        master
    }

    /// Takes over a recovered state, as `policy::promote` says
    /// (`FO-2`..`FO-5`).
    fn promote(&mut self) {
        let now = self.now;
        let promotion = policy::promote(&self.state, now);
        self.leases = promotion.leases;
        for id in promotion.sessions {
            if let Some(expires) = self.leases.expires_at(id) {
                self.observe(|| MasterEvent::Granted {
                    session: id,
                    now,
                    expires,
                    why: Grant::Failover,
                });
            }
            let seq = self.events.push_failover(id, self.config.epoch);
            // Its client may serve a cache filled under the previous
            // master until it hears of this one or the lease it may have
            // had runs out (`CACHE-7`).
            // Only a session that ever cached: the others never served a
            // read without the master.
            if let Some(expires) = self.leases.expires_at(id) {
                if self.state.may_cache.contains(&id) {
                    self.cache.recovered(id, seq, expires);
                }
            }
            self.failover_pending.insert(id);
            self.unheard.insert(id);
        }
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

    async fn run(
        mut self,
        mut calls: mpsc::Receiver<Call>,
        mut keepalives: mpsc::Receiver<Call>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let timer = tokio::time::sleep_until(self.start);
        tokio::pin!(timer);
        let mut armed: Option<Millis> = None;
        // KeepAlives taken in a row: past KEEPALIVE_RUN another request
        // gets a turn, so a flood of KeepAlives cannot starve the rest.
        let mut run = 0;
        loop {
            // Acknowledgements, deadlines and ended sessions may have let
            // held work go (`CACHE-3`); first, whatever turn comes next.
            if self.cache.moved {
                self.run_held();
            }
            if self.events.owes() {
                // A turn of its own: it answers held KeepAlives, at the
                // time it runs, not the time of the turn before.
                self.now = self.read_clock();
                self.deliver_events();
            }
            // A turn for each KEEPALIVE_RUN KeepAlives taken, however
            // they came (a KeepAliveAll counts as those it carries).
            if run >= KEEPALIVE_RUN {
                run -= KEEPALIVE_RUN;
                if let Ok(call) = calls.try_recv() {
                    self.now = self.read_clock();
                    self.handle(call);
                    continue;
                }
                run = 0;
            }
            let next = match (self.leases.next_due(), self.timers.next_due()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if next != armed {
                if let Some(due) = next {
                    timer.as_mut().reset(self.instant(due));
                }
                armed = next;
            }
            tokio::select! {
                // The master lease before all: a master whose lease has
                // lapsed answers nothing more (`CELL-6`).
                biased;
                () = lease_lapses(self.lease.as_deref()), if self.lease.is_some() => {
                    if self.lease.as_ref().is_some_and(|l| !l.holds(Instant::now())) {
                        tracing::warn!(epoch = self.config.epoch, "the master lease lapsed: this master stops");
                        self.failed = true;
                    }
                }
                // Timers next: a lease that has run out ends before any
                // request can see it (`SES-6`).
                () = &mut timer, if armed.is_some() => {
                    self.now = self.read_clock();
                    // Requests waiting for the master, for `FO-2`.
                    let backlog = calls.len() + keepalives.len();
                    self.fire_timers(backlog);
                    // Fired: set it again even if the earliest is the same.
                    armed = None;
                }
                // Then what the disk made durable, which only answers
                // what waited for it; then KeepAlives, ahead of other
                // requests and of fan-out (`EV-9`).
                Ok(()) = durable(&mut self.commit) => {
                    self.now = self.read_clock();
                    self.on_durable();
                }
                Some(call) = keepalives.recv() => {
                    // A KeepAliveAll counts as the KeepAlives it carries.
                    run += match &call.request {
                        Request::KeepAliveAll(all) => u32::try_from(all.len()).unwrap_or(u32::MAX).max(1),
                        _ => 1,
                    };
                    self.now = self.read_clock();
                    self.handle(call);
                }
                call = calls.recv() => match call {
                    Some(call) => {
                        run = 0;
                        self.now = self.read_clock();
                        self.handle(call);
                    }
                    None => break,
                },
                () = &mut shutdown => break,
                // Fan-out left to do: go round again for its next slice,
                // yielding first, so that the runtime's cooperative budget
                // is renewed and the channels above are seen again.
                () = tokio::task::yield_now(), if self.events.owes() => {
                    self.now = self.read_clock();
                }
            }
            if self.failed {
                break;
            }
        }
        if let Some(commit) = &mut self.commit {
            commit.finish().await;
        }
        debug!("master stopped");
    }

    /// Master time by the clock: the one place the master reads it. A
    /// master whose clock runs at a rate of its own (`Config::clock_rate`)
    /// counts its time at that rate.
    fn read_clock(&self) -> Millis {
        let elapsed = self.start.elapsed();
        match self.rate() {
            None => self.offset + elapsed,
            Some(rate) => self.offset + elapsed.mul_f64(rate),
        }
    }

    /// The runtime's instant at which this master's clock reads `at`,
    /// rounded up: a timer set for it never fires before `at`.
    fn instant(&self, at: Millis) -> Instant {
        let since = at.since(self.offset);
        match self.rate() {
            None => self.start + since,
            Some(rate) => self.start + since.div_f64(rate) + std::time::Duration::from_micros(1),
        }
    }

    /// The clock's rate, or `None` at true rate, which reads the runtime's
    /// clock unchanged.
    fn rate(&self) -> Option<f64> {
        let rate = self.config.clock_rate;
        ((rate - 1.0).abs() > f64::EPSILON).then_some(rate)
    }

    /// Tells the observer, if there is one, of `event`.
    pub(crate) fn observe(&self, event: impl FnOnce() -> MasterEvent) {
        if let Some(observer) = &self.config.observer {
            observer.tell(&event());
        }
    }

    /// Handles every timer due by now: sessions' first, so a lease that
    /// has run out ends before anything that timer's turn does; `backlog`
    /// is how many requests wait for the master (`FO-2`).
    fn fire_timers(&mut self, backlog: usize) {
        let now = self.now;
        while let Some(id) = self.leases.pop_due(now) {
            self.session_timer_fired(id, backlog);
        }
        while let Some(timer) = self.timers.pop_due(now) {
            match timer {
                Timer::WatchTimeout(watch) => self.watch_timed_out(watch),
                Timer::AcquireTimeout(ticket) => self.acquire_timed_out(ticket),
                Timer::LockDelayEnd(key) => self.apply_made(Command::GrantWaiters { key }),
                // Checked again: what ran since may have moved the line.
                Timer::LineLeft(key) => {
                    if self.state.line_can_move(&key, now) {
                        self.apply_made(Command::GrantWaiters { key });
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
