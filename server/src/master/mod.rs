//! The master task: one loop that reads the clock, feeds the engine
//! (`engine.rs`) and carries out what it decides.
//!
//! Connections send [`Call`]s over a channel, each with the way back to
//! its connection (`reply.rs`), so no lock is ever held and a held
//! KeepAlive costs a few dozen bytes, not a task. The engine owns the
//! state machine, the leases, the held KeepAlives and the timers; it
//! reads no clock and writes no disk. Each session has one timer, kept in
//! its lease (`lease.rs`), for its held KeepAlive's answer or its lease's
//! end; other timers (watches, waits, lock-delay) are in an ordered set
//! of their own (`timers.rs`). Neither is ever scanned.
//!
//! This file is the task: its loop, and master time, which nothing else
//! in the master reads (in a cell it also checks the master lease, on
//! tokio's clock). Each turn of the loop reads the clock once and hands
//! that time to the engine with what happened: a request, timers, the
//! log's durable point. It then carries out
//! the engine's effects in order: records to the log (`commit.rs`),
//! replies once what they depend on is durable, events to the observer.
//! What a timer or a promotion means is decided in `policy.rs`, without
//! a runtime.
//!
//! A request goes one way through the engine's files, never back to one
//! it left: `engine.rs` takes the input; `admission.rs` checks it (who may
//! act for a session in `auth.rs`, quotas in `quotas.rs`) and passes a
//! write to the cache gate (`cache.rs`), anything else to `serve.rs`; the
//! gate holds the write until caches are told, or passes it on;
//! `serve.rs` turns it into a command of one kind, or answers a read from
//! `views.rs`, and hands the requests they name to `keepalive.rs`,
//! `acquire.rs`, `watches.rs` and `events.rs`; `apply.rs` applies a
//! command and runs its events. What must happen leaves through the
//! outbox (`outbox.rs`). Once the input is handled, `engine.rs` applies
//! the work it made for itself and `keepalive.rs` answers the held
//! KeepAlives of sessions that got events; then this file carries the
//! effects out.

use leasehold_protocol::Request;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tracing::debug;

use crate::commit::Committer;
use crate::config::Config;
use crate::config::{FIGURES_EVERY, KEEPALIVE_RUN, REQUESTS_IN_TURNS, RETURNING_RUN};
use crate::observe::MasterEvent;
use crate::recovery::Start;
use crate::store::Snapshot;
use crate::time::Millis;
use crate::timers::Timer;

mod access;
mod acquire;
mod admission;
mod apply;
mod auditing;
pub(crate) use auditing::request_name;
mod auth;
mod backup;
mod cache;
mod clock;
mod engine;
#[cfg(test)]
mod engine_tests;
mod events;
mod handle;
mod identity;
mod keepalive;
mod outbox;
mod quotas;
mod rights;
#[cfg(test)]
mod run_tests;
mod serve;
#[cfg(test)]
mod tests;
mod turns;
mod views;
mod watches;

pub(crate) use crate::call::Call;
pub(crate) use crate::reply::ReplyTx;
pub(crate) use clock::MasterClock;
pub(crate) use engine::{Engine, Input, Told};
pub(crate) use handle::{MasterHandle, Room};
pub(crate) use outbox::Effect;

/// Resolves when the log's durable point moves; never without a store.
async fn durable(commit: &mut Option<Committer>) -> Result<(), watch::error::RecvError> {
    match commit {
        Some(commit) => commit.progress.changed().await,
        None => std::future::pending().await,
    }
}

/// Resolves once `lease`'s current end has passed or it ended early (at
/// once if there is none); the lease may have been extended meanwhile, so
/// the caller looks again.
async fn lease_lapses(lease: Option<&crate::cell::MasterLease>) {
    if let Some(lease) = lease {
        lease.lapses().await;
    }
}

/// The task around the engine: the clock, the log and the master lease.
pub(crate) struct Master {
    pub(crate) engine: Engine,
    /// Master time: it goes on from where the previous master stopped.
    clock: MasterClock,
    /// Group commit to the store; `None` runs in memory.
    pub(crate) commit: Option<Committer>,
    /// A cell's master lease: the master stops the moment it lapses
    /// (`CELL-6`).
    lease: Option<std::sync::Arc<crate::cell::MasterLease>>,
    /// Set when the store failed: the master stops.
    failed: bool,
    /// The queue the engine's effects are carried out from, kept between
    /// inputs (`Engine::swap_effects`).
    spare: std::collections::VecDeque<Effect>,
    /// The engine's totals as last shown in the metrics.
    shown: crate::tally::Tally,
}

/// The time by which the master has read every KeepAlive that reached
/// it (`SES-6`): the arrival of the oldest still waiting, of either queue
/// (`fronts`, each queue's taken in the order they came), or `now` if
/// none waits. One stamped with no arrival (a test's) counts as `start`.
fn caught_up(fronts: [&Option<Call>; 2], start: Millis, now: Millis) -> Millis {
    fronts
        .into_iter()
        .flatten()
        .map(|call| call.arrived.unwrap_or(start))
        .min()
        .unwrap_or(now)
}

/// How many KeepAlives `request` counts as: a KeepAliveAll as those it
/// carries.
fn keepalives_in(request: &Request) -> u32 {
    match request {
        Request::KeepAliveAll(all) => u32::try_from(all.len()).unwrap_or(u32::MAX).max(1),
        _ => 1,
    }
}

/// The next call of a queue whose oldest may have been taken out of it
/// already, into `front`.
async fn next_of(front: &mut Option<Call>, queue: &mut mpsc::Receiver<Call>) -> Option<Call> {
    match front.take() {
        Some(call) => Some(call),
        None => queue.recv().await,
    }
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
    let (returning, returning_rx) = mpsc::channel(1024);
    let master = Master::new(config, start, Instant::now());
    let clock = master.clock;
    let task = tokio::spawn(master.run(rx, (returning_rx, keepalives_rx), shutdown));
    (
        MasterHandle {
            calls,
            keepalives,
            returning,
            clock,
        },
        task,
    )
}

impl Master {
    /// A master starting at `clock`, which is master time `start.offset`.
    fn new(config: Config, start: Start, clock: Instant) -> Self {
        let logging = start.commit.is_some();
        let clock = MasterClock::new(clock, start.offset, config.clock_rate);
        let engine = Engine::new(config, start.state, start.recovered, start.offset, logging);
        let mut master = Master {
            engine,
            clock,
            commit: start.commit,
            lease: start.lease,
            failed: false,
            spare: Default::default(),
            shown: Default::default(),
        };
        master.carry_out();
        master.show_figures();
        master
    }

    /// Sets the gauges from the engine (`OPS-1`).
    fn show_figures(&mut self) {
        self.show_figures_at(self.engine.now);
    }

    /// Sets the gauges from the engine as of `now`, which may be later
    /// than its last input.
    fn show_figures_at(&mut self, now: Millis) {
        let figures = self.engine.figures(now);
        let metrics = &self.engine.config.metrics;
        metrics.engine(&figures, &self.engine.tally, &mut self.shown);
    }

    /// Feeds the engine `input`, happening at `now`, and carries out what
    /// it decides.
    pub(crate) fn turn(&mut self, input: Input, now: Millis) {
        self.engine.disk_full = self.commit.as_ref().is_some_and(|c| c.disk_full());
        self.engine.stored_bytes = self.commit.as_ref().and_then(|c| c.stored_bytes());
        self.engine.step(input, now);
        self.carry_out();
        self.show_figures();
    }

    /// Carries out the engine's effects in order. A reply granting a lock
    /// that nobody receives goes back to the engine, which may decide
    /// more.
    fn carry_out(&mut self) {
        let mut effects = std::mem::take(&mut self.spare);
        loop {
            self.engine.swap_effects(&mut effects);
            if effects.is_empty() {
                break;
            }
            let mut unheard = Vec::new();
            for effect in effects.drain(..) {
                match effect {
                    Effect::Log(record) => {
                        if let Some(commit) = &mut self.commit {
                            commit.append(record);
                        }
                    }
                    Effect::Reply {
                        reply,
                        result,
                        grant,
                        waits,
                    } => {
                        let lost = match &mut self.commit {
                            Some(commit) if waits => commit.reply(reply, result, grant),
                            _ => reply.send(result).err().and(grant),
                        };
                        unheard.extend(lost);
                    }
                    Effect::Observe(event) => {
                        if let Some(observer) = &self.engine.config.observer {
                            observer.tell(&event);
                        }
                    }
                    Effect::Audit(record) => {
                        if let Some(audit) = &self.engine.config.audit {
                            audit.record(record);
                        }
                    }
                }
            }
            self.snapshot_if_due();
            let now = self.engine.now;
            for grant in unheard {
                self.engine.step(Input::Unheard(grant), now);
            }
        }
        self.spare = effects;
    }

    /// Snapshots the state when the log has grown enough (`STORE-2`):
    /// every record the engine decided so far is appended, so the state
    /// is the one as of exactly those records.
    fn snapshot_if_due(&mut self) {
        let Some(commit) = &mut self.commit else {
            return;
        };
        let freed = self.engine.state.namespace().freed_bytes();
        if commit.wants_snapshot(freed) {
            let snapshot = Snapshot {
                epoch: self.engine.config.epoch,
                now: self.engine.now,
                next_seq: commit.next_seq,
                state: self.engine.state.clone(),
            };
            commit.compact(snapshot, freed);
        }
    }

    /// The log has grown durable: send what waited for it, and tell the
    /// engine of grants nobody received.
    pub(crate) fn on_durable(&mut self, now: Millis) {
        let Some(commit) = &mut self.commit else {
            return;
        };
        match commit.advance() {
            Ok(unheard) => {
                for grant in unheard {
                    self.turn(Input::Unheard(grant), now);
                }
            }
            Err(reason) => {
                tracing::error!(%reason, "stopping: changes can no longer be made durable");
                self.failed = true;
            }
        }
    }

    async fn run(
        mut self,
        mut calls: mpsc::Receiver<Call>,
        (mut returning, mut keepalives): (mpsc::Receiver<Call>, mpsc::Receiver<Call>),
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let timer = tokio::time::sleep_until(self.clock.start());
        tokio::pin!(timer);
        let mut armed: Option<Millis> = None;
        // KeepAlives taken in a row: past KEEPALIVE_RUN another request
        // gets a turn, so a flood of KeepAlives cannot starve the rest.
        let mut run = 0;
        // Gauges that walk the state or depend on the time alone (locks in
        // lock-delay) are shown again each second once someone reads them,
        // even when no input comes (`OPS-1`).
        // Requests taken from `calls`, to be served a connection at a time
        // (`CONN-13`).
        let mut turns = turns::Turns::default();
        let take_waiting = |calls: &mut mpsc::Receiver<Call>, turns: &mut turns::Turns| {
            while turns.len() < REQUESTS_IN_TURNS {
                match calls.try_recv() {
                    Ok(call) => turns.push(call),
                    Err(_) => break,
                }
            }
        };
        // The oldest KeepAlive of each queue, taken out when the timers
        // fire to learn when it arrived (`SES-6`), and served before the
        // rest of its queue.
        let mut returning_front: Option<Call> = None;
        let mut keepalives_front: Option<Call> = None;
        // Connections' first KeepAlives taken in a row while others waited.
        let mut returning_run = 0;
        let mut figures = tokio::time::interval(FIGURES_EVERY);
        figures.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Acknowledgements, deadlines and ended sessions may have let
            // held work go (`CACHE-3`); first, whatever turn comes next.
            if self.engine.held_work_moved() {
                self.turn(Input::HeldWork, self.engine.now);
            }
            if self.engine.owes_events() {
                // A turn of its own: it answers held KeepAlives, at the
                // time it runs, not the time of the turn before.
                let now = self.read_clock();
                self.turn(Input::DeliverEvents, now);
            }
            // A turn for each KEEPALIVE_RUN KeepAlives taken, however
            // they came (a KeepAliveAll counts as those it carries).
            if run >= KEEPALIVE_RUN {
                run -= KEEPALIVE_RUN;
                take_waiting(&mut calls, &mut turns);
                if let Some(call) = turns.next() {
                    let now = self.read_clock();
                    self.turn(Input::Call(call), now);
                    continue;
                }
                run = 0;
            }
            let next = self.engine.next_due();
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
                        tracing::warn!(epoch = self.engine.config.epoch, "the master lease lapsed: this master stops");
                        self.failed = true;
                    }
                }
                // Timers next: a lease that has run out ends before any
                // request can see it (`SES-6`).
                () = &mut timer, if armed.is_some() => {
                    let now = self.read_clock();
                    if returning_front.is_none() {
                        returning_front = returning.try_recv().ok();
                    }
                    if keepalives_front.is_none() {
                        keepalives_front = keepalives.try_recv().ok();
                    }
                    // Requests waiting for the master, for `FO-2`.
                    let fronts = usize::from(returning_front.is_some()) + usize::from(keepalives_front.is_some());
                    let backlog = calls.len() + turns.len() + keepalives.len() + returning.len() + fronts;
                    let start = self.clock.at(self.clock.start());
                    let caught_up = caught_up([&returning_front, &keepalives_front], start, now);
                    self.turn(Input::TimersDue { caught_up, backlog }, now);
                    // Fired: set it again even if the earliest is the same.
                    armed = None;
                }
                // Then what the disk made durable, which only answers
                // what waited for it; then KeepAlives, ahead of other
                // requests and of fan-out (`EV-9`).
                Ok(()) = durable(&mut self.commit) => {
                    let now = self.read_clock();
                    self.on_durable(now);
                }
                // A connection's first KeepAlive before the others (`KA-11`),
                // RETURNING_RUN in a row at most while others wait.
                Some(call) = next_of(&mut returning_front, &mut returning),
                    if returning_run < RETURNING_RUN || (keepalives_front.is_none() && keepalives.is_empty()) => {
                    returning_run += 1;
                    run += keepalives_in(&call.request);
                    let now = self.read_clock();
                    self.turn(Input::Call(call), now);
                }
                Some(call) = next_of(&mut keepalives_front, &mut keepalives) => {
                    returning_run = 0;
                    run += keepalives_in(&call.request);
                    let now = self.read_clock();
                    self.turn(Input::Call(call), now);
                }
                call = calls.recv(), if turns.len() < REQUESTS_IN_TURNS => match call {
                    Some(call) => {
                        turns.push(call);
                        take_waiting(&mut calls, &mut turns);
                        run = 0;
                        if let Some(call) = turns.next() {
                            let now = self.read_clock();
                            self.turn(Input::Call(call), now);
                        }
                    }
                    None => break,
                },
                () = std::future::ready(()), if !turns.is_empty() => {
                    run = 0;
                    if let Some(call) = turns.next() {
                        let now = self.read_clock();
                        self.turn(Input::Call(call), now);
                    }
                }
                () = &mut shutdown => break,
                _ = figures.tick(), if self.engine.config.metrics.read() => {
                    let now = self.read_clock();
                    self.show_figures_at(now);
                }
                // Fan-out left to do: go round again for its next slice,
                // yielding first, so that the runtime's cooperative budget
                // is renewed and the channels above are seen again.
                () = tokio::task::yield_now(), if self.engine.owes_events() => {}
            }
            if self.failed {
                break;
            }
        }
        // Told here, not through the engine's effects: nothing is decided
        // after the loop, and a vote this member gives a rival waits for
        // it (`CELL-6`).
        if let Some(lease) = &self.lease {
            lease.end_serving();
        }
        if let Some(observer) = &self.engine.config.observer {
            let (epoch, now) = (self.engine.config.epoch, self.read_clock());
            observer.tell(&MasterEvent::Stopped { epoch, now });
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
        self.clock.read()
    }

    /// The runtime's instant at which this master's clock reads `at`,
    /// rounded up: a timer set for it never fires before `at`.
    fn instant(&self, at: Millis) -> Instant {
        self.clock.instant(at)
    }
}
