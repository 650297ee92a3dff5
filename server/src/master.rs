//! The master task: the single owner of the state machine, the leases, the
//! held KeepAlives and the timers that drive them.
//!
//! Connections send [`Call`]s over a channel, each with the way back to
//! its connection (`reply.rs`), so no lock is ever held and a held
//! KeepAlive costs a few dozen bytes, not a task. Each session has one
//! timer, kept in its lease (`lease.rs`), for its held KeepAlive's answer
//! or its lease's end; other timers (watches, waits, lock-delay) are in a
//! `DelayQueue`. Neither is ever scanned.

use std::time::Duration;

use futures::StreamExt;
use leasehold_protocol::{
    Error, ErrorCode, LeaseGrant, NodeView, Request, Response, Sequencer, SessionId, SessionInfo,
};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::time::DelayQueue;
use tracing::{debug, info};

use crate::acquire::Acquires;
use crate::commit::Committer;
use crate::config::{Config, MAX_LIST_PAGE};
use crate::events::Events;
use crate::ids::Ids;
use crate::keepalive::Held;
use crate::lease::Leases;
use crate::node::check_key;
use crate::recovery::Start;
use crate::session::EndCause;
use crate::state::{Applied, Command, NewSession, State, StateEvent};
use crate::store::{Record, Snapshot};
use crate::time::{whole_millis, Millis};
use crate::watch::Watches;

/// Encoded size of a `SessionInfo` besides its name, generously rounded up.
const SESSION_INFO_SIZE: usize = 64;
/// A bound on a `CheckInfo`'s encoded size besides its name and note.
const CHECK_INFO_SIZE: usize = 32;

/// One page of `items`: at most `limit` (0: the server's page size), and
/// past the first no more than `budget` bytes as `size` counts them, so a
/// reply stays well inside a frame. Says whether more follow.
fn page<T>(
    items: impl Iterator<Item = T>,
    limit: u32,
    budget: usize,
    size: impl Fn(&T) -> usize,
) -> (Vec<T>, bool) {
    let limit = match limit {
        0 => MAX_LIST_PAGE,
        n => n.min(MAX_LIST_PAGE),
    } as usize;
    let mut used = 0;
    let mut items = items.peekable();
    let mut taken = Vec::new();
    while let Some(item) =
        items.next_if(|i| taken.len() < limit && (taken.is_empty() || used + size(i) <= budget))
    {
        used += size(&item);
        taken.push(item);
    }
    (taken, items.peek().is_some())
}

/// KeepAlives the master takes in a row before anything else gets a turn.
const KEEPALIVE_RUN: u32 = 64;

/// The retry hint of `Congested`: a moment for the peer to read.
const CONGESTED_RETRY_MS: u64 = 20;

/// The retry hint of `FailoverInProgress`: about one KeepAlive round trip.
const FAILOVER_RETRY_MS: u64 = 100;

/// The session a request acts for, when it changes or depends on that
/// session's locks, nodes or subscriptions: such requests wait for the
/// session's fail-over acknowledgement (`FO-5`).
fn acting_for(request: &Request) -> Option<SessionId> {
    match request {
        Request::Acquire(a) => Some(a.session.id),
        Request::Release { session, .. }
        | Request::GetSequencer { session, .. }
        | Request::Subscribe { session, .. }
        | Request::Unsubscribe { session, .. } => Some(session.id),
        Request::Put(put) => put.ephemeral.map(|t| t.id),
        _ => None,
    }
}

/// Whether a request changes the durable state, so that a master on a
/// full disk refuses it (`STORE-5`).
fn writes(request: &Request) -> bool {
    matches!(
        request,
        Request::CreateSession(_)
            | Request::DestroySession { .. }
            | Request::Put(_)
            | Request::Delete { .. }
            | Request::Acquire(_)
            | Request::Release { .. }
            | Request::SetCheck { .. }
            | Request::DeleteCheck { .. }
    )
}

/// The first 1000 of a check's ended sessions, so the reply fits a frame
/// however many were bound to it (`CHK-3`).
fn capped(mut sessions: Vec<SessionId>) -> Vec<SessionId> {
    sessions.truncate(1000);
    sessions
}

/// A command answered with the wrong kind of outcome: a bug, reported to
/// the client rather than allowed to panic the master.
pub(crate) fn mismatch(applied: Applied) -> Error {
    Error::new(
        ErrorCode::Internal,
        format!("unexpected outcome {applied:?}"),
    )
}

pub(crate) use crate::reply::ReplyTx;

/// A request from a connection, with the channel its reply goes to.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) request: Request,
    pub(crate) reply: ReplyTx,
    /// The peer address of the connection it came on, for quotas
    /// (`QUOTA-1`); `None` where there is no connection (tests).
    pub(crate) peer: Option<std::net::IpAddr>,
}

/// A cloneable way to send requests to the master task.
#[derive(Debug, Clone)]
pub struct MasterHandle {
    calls: mpsc::Sender<Call>,
    /// KeepAlives, which the master takes before other requests and
    /// before fan-out (`EV-9`): a lease never waits behind others' work.
    keepalives: mpsc::Sender<Call>,
}

impl MasterHandle {
    /// Sends `request` to the master, which answers through `reply`. A
    /// KeepAlive's reply may come much later (it is held).
    pub(crate) async fn call(
        &self,
        request: Request,
        reply: ReplyTx,
        peer: Option<std::net::IpAddr>,
    ) {
        let queue = match request {
            Request::KeepAlive(_) => &self.keepalives,
            _ => &self.calls,
        };
        // A closed master drops the call, and `reply` then answers that
        // it is shutting down.
        let _ = queue
            .send(Call {
                request,
                reply,
                peer,
            })
            .await;
    }
}

/// Resolves when the log's durable point moves; never without a store.
async fn durable(commit: &mut Option<Committer>) -> Result<(), watch::error::RecvError> {
    match commit {
        Some(commit) => commit.progress.changed().await,
        None => std::future::pending().await,
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Timer {
    WatchTimeout(u64),
    AcquireTimeout(u64),
    LockDelayEnd(String),
}

pub(crate) struct Master {
    pub(crate) config: Config,
    pub(crate) state: State,
    pub(crate) leases: Leases<Held>,
    pub(crate) timers: DelayQueue<Timer>,
    pub(crate) watches: Watches,
    pub(crate) acquires: Acquires,
    pub(crate) events: Events,
    ids: Ids,
    start: Instant,
    /// Master time at `start`: time goes on from where the previous master
    /// stopped, so times in the recovered state keep their meaning.
    offset: Millis,
    /// Group commit to the store; `None` runs in memory.
    commit: Option<Committer>,
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
    /// Requests waiting for the master when the latest timer fired.
    waiting: usize,
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
    let task = tokio::spawn(Master::new(config, start).run(rx, keepalives_rx, shutdown));
    (MasterHandle { calls, keepalives }, task)
}

impl Master {
    fn new(config: Config, start: Start) -> Self {
        let mut master = Master {
            state: start.state,
            ids: Ids::new(config.ids),
            config,
            leases: Leases::default(),
            timers: DelayQueue::new(),
            watches: Watches::default(),
            acquires: Acquires::default(),
            events: Events::default(),
            start: Instant::now(),
            offset: start.offset,
            commit: start.commit,
            failed: false,
            quotas: Default::default(),
            depth: 0,
            deferred: Default::default(),
            failover_pending: Default::default(),
            unheard: Default::default(),
            waiting: 0,
        };
        master.events.budget = crate::events::EventBudget {
            per_peer: master.config.event_bytes_per_peer,
            all: master.config.all_event_bytes,
        };
        if start.recovered {
            master.resume();
        }
        master
    }

    /// Rebuilds the soft state a recovered state needs (`FO-2`..`FO-4`):
    /// every session gets a full lease from now, the longest the previous
    /// master may have granted; lock-delay that was running ends no sooner
    /// than it would have; waiters, whose requests died with their
    /// connections, leave the line.
    fn resume(&mut self) {
        let now = self.now();
        let sessions: Vec<(SessionId, Duration)> =
            self.state.sessions().map(|s| (s.id, s.lease)).collect();
        for (id, lease) in sessions {
            let expires = self.leases.start(id, lease, now);
            self.leases.arm(id, expires);
            self.events.push_failover(id, self.config.epoch);
            self.failover_pending.insert(id);
            self.unheard.insert(id);
        }
        let mut cancels = Vec::new();
        let mut delays = Vec::new();
        for (key, lock) in self.state.locks().iter() {
            if let Some(until) = lock.delay_until.filter(|u| *u > now) {
                delays.push((key.clone(), until));
            }
            cancels.extend(lock.waiters.iter().map(|w| (key.clone(), w.ticket)));
        }
        for (key, until) in delays {
            self.timers
                .insert_at(Timer::LockDelayEnd(key), self.instant(until));
        }
        for (key, ticket) in cancels {
            let _ = self.apply(Command::CancelWait { key, ticket }, now);
        }
    }

    async fn run(
        mut self,
        mut calls: mpsc::Receiver<Call>,
        mut keepalives: mpsc::Receiver<Call>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let session_timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(session_timer);
        let mut armed: Option<Millis> = None;
        // KeepAlives taken in a row: past KEEPALIVE_RUN another request
        // gets a turn, so a flood of KeepAlives cannot starve the rest.
        let mut run = 0;
        loop {
            if self.events.owes() {
                self.deliver_events();
            }
            if run >= KEEPALIVE_RUN {
                run = 0;
                if let Ok(call) = calls.try_recv() {
                    self.handle(call);
                    continue;
                }
            }
            let next = self.leases.next_due();
            if next != armed {
                if let Some(due) = next {
                    session_timer.as_mut().reset(self.instant(due));
                }
                armed = next;
            }
            tokio::select! {
                // Timers first: a lease that has run out ends before any
                // request can see it (`SES-6`).
                biased;
                () = &mut session_timer, if armed.is_some() => {
                    self.waiting = calls.len() + keepalives.len();
                    self.fire_session_timers();
                    // Fired: set it again even if the earliest is the same.
                    armed = None;
                }
                Some(fired) = self.timers.next() => {
                    self.waiting = calls.len() + keepalives.len();
                    self.on_timer(fired.into_inner());
                }
                // Then what the disk made durable, which only answers
                // what waited for it; then KeepAlives, ahead of other
                // requests and of fan-out (`EV-9`).
                Ok(()) = durable(&mut self.commit) => self.on_durable(),
                Some(call) = keepalives.recv() => {
                    run += 1;
                    self.handle(call);
                }
                call = calls.recv() => match call {
                    Some(call) => {
                        run = 0;
                        self.handle(call);
                    }
                    None => break,
                },
                () = &mut shutdown => break,
                // Fan-out left to do: go round again for its next slice,
                // yielding first, so that the runtime's cooperative budget
                // is renewed and the channels above are seen again.
                () = tokio::task::yield_now(), if self.events.owes() => {}
            }
            if self.failed {
                break;
            }
        }
        debug!("master stopped");
    }

    pub(crate) fn now(&self) -> Millis {
        self.offset + self.start.elapsed()
    }

    pub(crate) fn instant(&self, at: Millis) -> Instant {
        self.start + at.since(self.offset)
    }

    /// Sends a reply once everything applied before it is durable.
    pub(crate) fn deliver(&mut self, reply: ReplyTx, result: Result<Response, Error>) {
        match &mut self.commit {
            Some(commit) => {
                commit.reply(reply, result, None);
            }
            None => {
                let _ = reply.send(result);
            }
        }
    }

    /// As `deliver`, applying `undelivered` if nobody is there to receive
    /// the reply (`LOCK-9`).
    pub(crate) fn deliver_or(
        &mut self,
        reply: ReplyTx,
        result: Result<Response, Error>,
        undelivered: Command,
    ) {
        let unheard = match &mut self.commit {
            Some(commit) => commit.reply(reply, result, Some(undelivered)),
            None => reply.send(result).err().map(|_| undelivered),
        };
        if let Some(command) = unheard {
            if self.depth > 0 {
                self.deferred.push_back(command);
            } else {
                let _ = self.apply(command, self.now());
            }
        }
    }

    /// The log has grown durable: send what waited for it.
    fn on_durable(&mut self) {
        let Some(commit) = &mut self.commit else {
            return;
        };
        match commit.advance() {
            Ok(unheard) => {
                for command in unheard {
                    let _ = self.apply(command, self.now());
                }
            }
            Err(reason) => {
                tracing::error!(%reason, "stopping: changes can no longer be made durable");
                self.failed = true;
            }
        }
    }

    fn handle(&mut self, call: Call) {
        let now = self.now();
        if let Err(refused) = self.authorize(&call.request) {
            return self.deliver(call.reply, Err(refused)); // AUTH-2
        }
        if self.commit.as_ref().is_some_and(|c| c.disk_full()) && writes(&call.request) {
            let refusal = Error::new(
                ErrorCode::StorageFull,
                "the master's disk is full: nothing was written; reads and KeepAlives are \
                 served, and writes are accepted again once it has room",
            );
            return self.deliver(call.reply, Err(refusal)); // STORE-5
        }
        if self.events.backlogged(self.config.fanout_backlog) && writes(&call.request) {
            let refusal = Error::new(
                ErrorCode::Congested {
                    retry_after_ms: CONGESTED_RETRY_MS,
                },
                "the master is behind telling subscribers of earlier writes: nothing was done; retry",
            );
            return self.deliver(call.reply, Err(refusal)); // EV-9
        }
        // A peer that leaves its replies unread gets nothing more to leave
        // unread, and nothing is done for it, but its leases are kept
        // (`CONN-9`).
        if !matches!(call.request, Request::KeepAlive(_)) && self.congested(&call.reply) {
            let refusal = self.congested_refusal();
            return self.deliver(call.reply, Err(refusal));
        }
        if let Some(refusal) = self.over_quota(&call.request, call.peer) {
            return self.deliver(call.reply, Err(refusal)); // QUOTA-1..QUOTA-5
        }
        if let Some(session) = acting_for(&call.request) {
            if self.failover_pending.contains(&session) {
                let error = Error::new(
                    ErrorCode::FailoverInProgress {
                        retry_after_ms: FAILOVER_RETRY_MS,
                    },
                    format!(
                        "failover in progress: session {session} must acknowledge the fail-over event on its next KeepAlive; retry"
                    ),
                );
                return self.deliver(call.reply, Err(error));
            }
        }
        self.serve(call, now);
    }

    /// Carries out a request that passed the checks every request passes.
    fn serve(&mut self, call: Call, now: Millis) {
        let reply = match call.request {
            Request::KeepAlive(ka) => return self.keepalive(ka, call.reply, now),
            Request::Watch {
                key,
                after_index,
                timeout_ms,
            } => return self.watch(key, after_index, timeout_ms, call.reply),
            Request::Acquire(acquire) => return self.acquire(acquire, call.reply, call.peer, now),
            Request::Subscribe {
                session,
                key,
                prefix,
                mask,
            } => self.subscribe(session.id, key, prefix, mask, call.peer),
            Request::Unsubscribe {
                session,
                subscription,
            } => self.unsubscribe(session.id, subscription),
            Request::Release { key, session } => self
                .apply(
                    Command::Release {
                        key,
                        session: session.id,
                    },
                    now,
                )
                .and_then(|applied| match applied {
                    Applied::Released { index } => Ok(Response::Released { index }),
                    other => Err(mismatch(other)),
                }),
            Request::GetSequencer { key, session } => self
                .state
                .sequencer_of(&key, session.id)
                .map(|s| Response::Sequencer {
                    sequencer: s.to_bytes(),
                })
                .ok_or_else(|| {
                    Error::new(
                        ErrorCode::LockNotHeld,
                        format!("the session does not hold '{}'", key.escape_debug()),
                    )
                }),
            Request::CheckSequencer { sequencer } => match Sequencer::from_bytes(&sequencer) {
                Some(s) => Ok(Response::SequencerChecked {
                    valid: self.state.sequencer_is_valid(&s),
                }),
                None => Err(Error::new(
                    ErrorCode::InvalidArgument,
                    "those bytes are not a sequencer",
                )),
            },
            Request::Get { key, stat_only } => check_key(&key)
                .map_err(|e| Error::new(ErrorCode::InvalidArgument, e))
                .map(|()| Response::Node {
                    index: self.state.namespace().key_index(&key),
                    node: self.node_view(&key, stat_only),
                }),
            Request::List {
                prefix,
                recursive,
                after,
                limit,
            } => {
                let limit = match limit {
                    0 => MAX_LIST_PAGE,
                    n => n.min(MAX_LIST_PAGE),
                } as usize;
                self.state
                    .namespace()
                    .list_page(
                        &prefix,
                        recursive,
                        after.as_deref(),
                        limit,
                        self.config.max_frame / 2,
                    )
                    .map(|(keys, more)| Response::Keys {
                        index: self.state.index(),
                        keys,
                        more,
                    })
            }
            Request::Put(put) => {
                let key = put.key.clone();
                self.apply(Command::Put(put.into()), now)
                    .and_then(|applied| match applied {
                        Applied::Written { index } => {
                            self.count_node_bytes(key, call.peer);
                            Ok(Response::Written { index })
                        }
                        other => Err(mismatch(other)),
                    })
            }
            Request::Delete {
                key,
                cas,
                recursive,
                authority,
            } => self
                .locked_nodes(&authority)
                .and_then(|locked| {
                    self.apply(
                        Command::Delete {
                            key,
                            cas,
                            recursive,
                            locked,
                        },
                        now,
                    )
                })
                .and_then(|applied| match applied {
                    Applied::Deleted { index, mut keys } => {
                        // Bounded, so the reply fits a frame however many
                        // keys a recursive delete removed (`NS-7`).
                        let deleted_total = keys.len() as u64;
                        keys.truncate(1000);
                        Ok(Response::Deleted {
                            index,
                            keys,
                            deleted_total,
                        })
                    }
                    other => Err(mismatch(other)),
                }),
            Request::CreateSession(c) => {
                let (id, secret) = (self.ids.next_id(), self.ids.next_secret());
                let command = Command::CreateSession(NewSession::requested(c, id, secret));
                self.apply(command, now).and_then(|applied| match applied {
                    Applied::SessionCreated(s) => Ok(Response::SessionCreated {
                        session: self.counted_session(s.id, call.peer),
                        secret: s.secret,
                        epoch: self.config.epoch,
                        lease: LeaseGrant::conservative(s.lease.as_millis() as u64, 0),
                    }),
                    other => Err(mismatch(other)),
                })
            }
            Request::DestroySession { session, authority } => self
                .may_destroy(session, &authority)
                .and_then(|()| {
                    self.apply(
                        Command::EndSession {
                            id: session,
                            cause: EndCause::Destroyed,
                        },
                        now,
                    )
                })
                .map(|_| Response::Destroyed),
            Request::SessionInfo { session } => self
                .info(session, now)
                .map(Response::SessionInfo)
                .ok_or_else(|| self.state.missing_session(session)),
            Request::ListSessions { after, limit } => {
                let (sessions, more) = page(
                    self.state.sessions_after(after),
                    limit,
                    self.config.max_frame / 2,
                    |s| {
                        SESSION_INFO_SIZE
                            + s.name.len()
                            + s.checks.iter().map(|c| c.len() + 1).sum::<usize>()
                    },
                );
                let ids: Vec<SessionId> = sessions.into_iter().map(|s| s.id).collect();
                Ok(Response::Sessions {
                    sessions: ids
                        .into_iter()
                        .filter_map(|id| self.info(id, now))
                        .collect(),
                    more,
                })
            }
            Request::SetCheck { name, status, note } => {
                let creating = self.state.checks.get(&name).is_none();
                self.apply(
                    Command::SetCheck {
                        name: name.clone(),
                        status,
                        note,
                    },
                    now,
                )
                .and_then(|applied| match applied {
                    Applied::CheckSet { index, invalidated } => {
                        if let (true, Some(peer)) = (creating, call.peer) {
                            self.quotas.checks.take(name, peer, 1);
                        }
                        Ok(Response::CheckSet {
                            index,
                            invalidated_total: invalidated.len() as u64,
                            invalidated: capped(invalidated),
                        })
                    }
                    other => Err(mismatch(other)),
                })
            }
            Request::DeleteCheck { name } => self
                .apply(Command::DeleteCheck { name: name.clone() }, now)
                .inspect(|_| self.quotas.checks.give_back(&name))
                .and_then(|applied| match applied {
                    Applied::CheckDeleted { index, invalidated } => Ok(Response::CheckDeleted {
                        index,
                        invalidated_total: invalidated.len() as u64,
                        invalidated: capped(invalidated),
                    }),
                    other => Err(mismatch(other)),
                }),
            Request::ListChecks { after, limit } => {
                let (checks, more) = page(
                    self.state.checks.after(after.as_deref()),
                    limit,
                    self.config.max_frame / 2,
                    |c| CHECK_INFO_SIZE + c.name.len() + c.note.len(),
                );
                Ok(Response::Checks { checks, more })
            }
        };
        self.deliver(call.reply, reply);
    }

    /// The refusal of a request that would take `peer` past one of its
    /// quotas (`QUOTA-1`..`QUOTA-5`).
    fn over_quota(&self, request: &Request, peer: Option<std::net::IpAddr>) -> Option<Error> {
        use crate::quota::over;
        let (c, q) = (&self.config, &self.quotas);
        let node_bytes = |key: &str, contents: usize| (key.len() + contents) as u64;
        match request {
            Request::CreateSession(_) => over(
                peer,
                |p| q.sessions.used(p) + 1,
                c.max_sessions_per_peer,
                "live sessions",
            ),
            Request::SetCheck { name, .. } if self.state.checks.get(name).is_none() => over(
                peer,
                |p| q.checks.used(p) + 1,
                c.max_checks_per_peer,
                "health checks",
            ),
            Request::Subscribe {
                session,
                key,
                prefix,
                ..
            } if !self.events.subscribed(session.id, key, *prefix) => over(
                peer,
                |p| q.subscriptions.used(p) + 1,
                c.max_subscriptions_per_peer,
                "subscriptions",
            ),
            Request::Put(put) => over(
                peer,
                |p| {
                    q.bytes
                        .used_with(p, &put.key, node_bytes(&put.key, put.contents.len()))
                },
                c.max_bytes_per_peer,
                "bytes of nodes",
            ),
            Request::Acquire(a) => {
                let waiting = a.wait_ms.is_some().then(|| {
                    over(
                        peer,
                        |p| q.waiters.used(p) + 1,
                        c.max_waiters_per_peer,
                        "acquires waiting",
                    )
                });
                let writing = a.contents.as_ref().map(|contents| {
                    over(
                        peer,
                        |p| {
                            q.bytes
                                .used_with(p, &a.key, node_bytes(&a.key, contents.len()))
                        },
                        c.max_bytes_per_peer,
                        "bytes of nodes",
                    )
                });
                waiting.flatten().or(writing.flatten())
            }
            _ => None,
        }
    }

    /// Counts the node at `key`, just written by `peer`, against it; the
    /// node's previous writer gets its bytes back (`QUOTA-5`).
    pub(crate) fn count_node_bytes(&mut self, key: String, peer: Option<std::net::IpAddr>) {
        let (Some(peer), Some(node)) = (peer, self.state.namespace().get(&key)) else {
            return;
        };
        let bytes = (key.len() + node.contents.len()) as u64;
        self.quotas.bytes.take(key, peer, bytes);
    }

    /// Counts a new session against the peer that created it (`QUOTA-2`).
    fn counted_session(&mut self, id: SessionId, peer: Option<std::net::IpAddr>) -> SessionId {
        if let Some(peer) = peer {
            self.quotas.sessions.take(id, peer, 1);
        }
        id
    }

    /// Applies a command to the state machine and carries out its events.
    pub(crate) fn apply(&mut self, command: Command, now: Millis) -> Result<Applied, Error> {
        // Fan-out already behind goes on a slice per turn of the master's
        // loop; this command's adds to it and takes no extra slice.
        let behind = self.depth == 0 && self.events.owes();
        // A refused command changes nothing and is not logged.
        let logged = self.commit.as_ref().map(|_| command.clone());
        let (reply, events) = self.state.apply(command, now);
        if let (Some(commit), Some(command), true) = (&mut self.commit, logged, reply.is_ok()) {
            commit.append(Record::Command { now, command });
            if commit.wants_snapshot() {
                // Taken before this command's events run further commands,
                // so it is the state as of exactly the records so far.
                let snapshot = Snapshot {
                    epoch: self.config.epoch,
                    now,
                    next_seq: commit.next_seq,
                    state: self.state.clone(),
                };
                commit.compact(snapshot);
            }
        }
        self.depth += 1;
        for event in events {
            self.on_event(event, now);
        }
        self.depth -= 1;
        if self.depth == 0 {
            // Work that applies commands of its own waits until this
            // command's events are decided, so events stay in order; a
            // small fan-out is queued at once, a large one a slice at a
            // time between timers and requests (`EV-9`).
            if !behind {
                self.deliver_events();
            }
            while let Some(command) = self.deferred.pop_front() {
                let _ = self.apply(command, self.now());
            }
        }
        reply
    }

    fn on_event(&mut self, event: StateEvent, now: Millis) {
        self.publish(&event);
        match event {
            StateEvent::SessionCreated { id } => {
                let Some(session) = self.state.session(id) else {
                    return;
                };
                info!(session = %id, name = %session.name, lease = ?session.lease, "session created");
                let expires = self.leases.start(id, session.lease, now);
                self.leases.arm(id, expires);
            }
            // Heard of through `publish` alone.
            StateEvent::LockAcquired { .. }
            | StateEvent::LockReleased { .. }
            | StateEvent::LockWaiting { .. } => {}
            StateEvent::NodeChanged { key, .. } => self.wake_watchers(&key),
            StateEvent::NodeDeleted { key } => {
                self.quotas.bytes.give_back(&key);
                self.wake_watchers(&key);
            }
            StateEvent::LockGranted {
                ticket,
                index,
                sequencer,
            } => self.acquire_granted(ticket, index, sequencer),
            StateEvent::WaitEnded { ticket } => self.acquire_ended(ticket),
            StateEvent::LockDelayStarted { key, until } => {
                // Waiters get the lock when the delay ends (`LOCK-6`).
                self.timers
                    .insert_at(Timer::LockDelayEnd(key), self.instant(until));
            }
            StateEvent::SessionEnded { id, cause } => {
                info!(session = %id, "session ended: {}", cause.as_str());
                self.quotas.sessions.give_back(&id);
                self.failover_pending.remove(&id);
                self.unheard.remove(&id);
                // A KeepAlive held for it is answered at once (`KA-7`).
                if let Some(held) = self.leases.remove(id) {
                    self.deliver(held.reply, Err(self.state.missing_session(id)));
                }
            }
        }
    }

    fn on_timer(&mut self, timer: Timer) {
        let now = self.now();
        match timer {
            Timer::WatchTimeout(watch) => self.watch_timed_out(watch),
            Timer::AcquireTimeout(ticket) => self.acquire_timed_out(ticket),
            Timer::LockDelayEnd(key) => {
                let _ = self.apply(Command::GrantWaiters { key }, now);
            }
        }
    }

    /// A session's timer: answers its held KeepAlive if that is due, then
    /// sets the timer for what comes next, or ends the session if its
    /// lease has run out. The timer rounds to milliseconds and may fire a
    /// tick early: nothing happens before its time.
    fn session_timer_fired(&mut self, id: SessionId, now: Millis) {
        let margin = self.config.keepalive_margin;
        if self.leases.held(id).is_some() && self.leases.due(id, margin).is_some_and(|d| d <= now) {
            let held = self.leases.take_held(id).expect("checked");
            self.answer(id, held, now);
        }
        if self.leases.is_armed(id) || self.state.session(id).is_none() {
            return;
        }
        match self.leases.due(id, margin) {
            Some(due) if due > now => self.leases.arm(id, due),
            Some(_) if self.waiting > 0 && self.unheard.remove(&id) => {
                // A master catching up after a restart may not yet have
                // read this session's KeepAlive: one more lease, once
                // (`FO-2`).
                if let Some(expires) = self.leases.extend(id, now) {
                    debug!(session = %id, waiting = self.waiting, "recovered session unheard from while requests wait: one more lease");
                    self.leases.arm(id, expires);
                }
            }
            Some(_) => {
                self.end_if_ran_out(id, now);
            }
            None => {}
        }
    }

    /// Ends the session `id` if its lease has run out at `now`; says whether
    /// it did.
    pub(crate) fn end_if_ran_out(&mut self, id: SessionId, now: Millis) -> bool {
        if self.leases.expires_at(id).is_some_and(|e| e <= now) {
            let _ = self.apply(
                Command::EndSession {
                    id,
                    cause: EndCause::Expired,
                },
                now,
            );
            return true;
        }
        false
    }

    /// Handles every session timer due by now.
    fn fire_session_timers(&mut self) {
        let now = self.now();
        while let Some(id) = self.leases.pop_due(now) {
            self.session_timer_fired(id, now);
        }
    }

    /// The node at `key` as a reply carries it.
    pub(crate) fn node_view(&self, key: &str, stat_only: bool) -> Option<NodeView> {
        let node = self.state.namespace().get(key)?;
        let mut stat = node.stat();
        if let Some(lock) = self.state.locks().get(key) {
            stat.lock_holders = lock.holders.iter().map(|(s, m)| (*s, *m)).collect();
        }
        Some(NodeView {
            key: key.to_string(),
            stat,
            contents: (!stat_only).then(|| node.contents.clone()),
        })
    }

    fn info(&self, id: SessionId, now: Millis) -> Option<SessionInfo> {
        let s = self.state.session(id)?;
        Some(SessionInfo {
            session: s.id,
            name: s.name.to_string(),
            lease_ms: s.lease.as_millis() as u64,
            lock_delay_ms: s.lock_delay.as_millis() as u64,
            behavior: s.behavior,
            lease_remaining_ms: self.leases.remaining(id, now).map_or(0, whole_millis),
            keepalive_held: self.leases.held(id).is_some_and(|h| !h.reply.is_closed()),
            checks: s.checks.to_vec(),
        })
    }

    /// Whether the connection of `reply` has too many bytes of replies
    /// unread to be sent more (`CONN-9`).
    pub(crate) fn congested(&self, reply: &ReplyTx) -> bool {
        let c = &self.config;
        reply.congested(c.reply_budget, c.all_reply_budget, c.max_frame)
    }

    /// Whether events may go on a KeepAlive reply to `reply`'s connection:
    /// not while it is congested, so pipelined KeepAlives cannot pile events
    /// up (`CONN-9`, `EV-3`).
    pub(crate) fn may_carry_events(&self, reply: &ReplyTx) -> bool {
        !self.congested(reply)
    }

    /// The refusal for a request on a connection whose unread replies
    /// have used up its budget (`CONN-9`).
    pub(crate) fn congested_refusal(&self) -> Error {
        Error::new(
            ErrorCode::Congested {
                retry_after_ms: CONGESTED_RETRY_MS,
            },
            format!(
                "this connection's unread replies exceed its budget of {} bytes: nothing was done; read them, then retry",
                self.config.reply_budget
            ),
        )
    }

    /// `answer()`, unless the connection of `reply` is congested, which
    /// gets the refusal instead (`CONN-9`).
    pub(crate) fn unless_congested(
        &self,
        reply: &ReplyTx,
        answer: impl FnOnce() -> Response,
    ) -> Result<Response, Error> {
        if self.congested(reply) {
            Err(self.congested_refusal())
        } else {
            Ok(answer())
        }
    }

    pub(crate) fn wrong_epoch(&self, epoch: u64) -> Error {
        Error::new(
            ErrorCode::WrongEpoch {
                current: self.config.epoch,
            },
            format!(
                "request names epoch {epoch}; the master's epoch is {}",
                self.config.epoch
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_protocol::{Behavior, CreateSession, KeepAlive, SessionToken};

    fn call(master: &mut Master, request: Request) -> Result<Response, Error> {
        let (reply, mut rx) = crate::reply::channel(1);
        master.handle(Call {
            request,
            reply,
            peer: None,
        });
        // A change is answered once the store has it.
        master.on_durable();
        *rx.try_recv().expect("answered at once").body
    }

    /// Creates a session named `name` and returns its token.
    fn created(master: &mut Master, name: &str, lease_ms: Option<u64>) -> SessionToken {
        let created = call(
            master,
            Request::CreateSession(CreateSession {
                name: name.into(),
                lease_ms,
                lock_delay_ms: None,
                behavior: Behavior::Release,
                checks: Vec::new(),
            }),
        );
        let Ok(Response::SessionCreated {
            session, secret, ..
        }) = created
        else {
            panic!("expected a session, got {created:?}");
        };
        SessionToken {
            id: session,
            secret,
        }
    }

    // SES-6, KA-7
    #[tokio::test(start_paused = true)]
    async fn a_keepalive_after_the_lease_ran_out_is_refused_even_before_its_timer_runs() {
        let mut config = Config {
            min_lease: Duration::from_millis(100),
            ..Config::default()
        };
        let start = crate::recovery::open(&mut config).unwrap();
        let mut master = Master::new(config, start);
        let token = created(&mut master, "late", Some(1_000));
        // The master loop is not running, so the lease-end timer has not
        // been handled: only the KeepAlive's own check can catch this.
        tokio::time::advance(Duration::from_millis(1_001)).await;
        let reply = call(
            &mut master,
            Request::KeepAlive(KeepAlive {
                session: token,
                epoch: 1,
                acked_seq: 0,
                hold: false,
            }),
        );
        assert_eq!(reply.unwrap_err().code, ErrorCode::SessionExpired);
        assert!(master.state.session(token.id).is_none());
    }

    const LEASE: Duration = Duration::from_millis(1_000);

    /// A master restarted on a store holding one session, which no
    /// KeepAlive has named since.
    fn restarted_with_a_session() -> (Master, SessionToken) {
        let mut config = Config {
            min_lease: Duration::from_millis(100),
            memory_store: Some(crate::MemoryStore::default()),
            ..Config::default()
        };
        let start = crate::recovery::open(&mut config).unwrap();
        let mut first = Master::new(config.clone(), start);
        let token = created(&mut first, "recovered", Some(LEASE.as_millis() as u64));
        drop(first);
        let start = crate::recovery::open(&mut config).unwrap();
        (Master::new(config, start), token)
    }

    // FO-2
    #[tokio::test(start_paused = true)]
    async fn a_recovered_session_unheard_from_gets_one_more_lease_while_requests_wait() {
        let (mut master, session) = restarted_with_a_session();
        master.waiting = 5;
        tokio::time::advance(LEASE).await;
        master.fire_session_timers();
        assert!(master.state.session(session.id).is_some(), "one more lease");
        tokio::time::advance(LEASE).await;
        master.fire_session_timers();
        assert!(master.state.session(session.id).is_none(), "only once");
    }

    // FO-2
    #[tokio::test(start_paused = true)]
    async fn a_recovered_session_unheard_from_ends_with_its_lease_when_no_request_waits() {
        let (mut master, session) = restarted_with_a_session();
        master.waiting = 0;
        tokio::time::advance(LEASE).await;
        master.fire_session_timers();
        assert!(master.state.session(session.id).is_none());
    }

    // FO-2
    #[tokio::test(start_paused = true)]
    async fn a_recovered_session_that_sent_a_keepalive_ends_with_its_lease_even_while_requests_wait(
    ) {
        let (mut master, session) = restarted_with_a_session();
        let epoch = master.config.epoch;
        let reply = call(
            &mut master,
            Request::KeepAlive(KeepAlive {
                session,
                epoch,
                acked_seq: 0,
                hold: false,
            }),
        );
        assert!(reply.is_ok(), "{reply:?}");
        master.waiting = 5;
        tokio::time::advance(LEASE).await;
        master.fire_session_timers();
        assert!(master.state.session(session.id).is_none());
    }

    /// A master in memory with `n` sessions, each subscribed to every
    /// key (a prefix subscription on the root).
    fn watched_by(n: usize, config: Config) -> (Master, Vec<SessionToken>) {
        let mut config = config;
        let start = crate::recovery::open(&mut config).unwrap();
        let mut master = Master::new(config, start);
        let sessions = (0..n).map(|_| subscribed(&mut master)).collect();
        (master, sessions)
    }

    fn subscribed(master: &mut Master) -> SessionToken {
        subscribed_to(master, "", true)
    }

    fn subscribed_to(master: &mut Master, key: &str, prefix: bool) -> SessionToken {
        let token = created(master, "watcher", None);
        let subscribe = Request::Subscribe {
            session: token,
            key: key.into(),
            prefix,
            mask: leasehold_protocol::event_mask::CONTENTS,
        };
        assert!(call(master, subscribe).is_ok());
        token
    }

    fn put(key: &str) -> Request {
        Request::Put(leasehold_protocol::Put {
            key: key.into(),
            contents: Vec::new(),
            flags: 0,
            cas: None,
            ephemeral: None,
        })
    }

    fn told(master: &Master, sessions: &[SessionToken]) -> usize {
        sessions
            .iter()
            .filter(|s| master.events.has_pending(s.id))
            .count()
    }

    fn heard(master: &Master, session: SessionToken) -> Vec<String> {
        master
            .events
            .pending(session.id, usize::MAX)
            .into_iter()
            .map(|e| match e.kind {
                leasehold_protocol::EventKind::Node { key, .. } => key,
                other => panic!("expected a node event, got {other:?}"),
            })
            .collect()
    }

    // EV-9
    #[tokio::test]
    async fn a_change_many_subscriptions_hear_is_queued_a_slice_at_a_time() {
        let n = crate::events::FANOUT_SLICE + 100;
        let (mut master, sessions) = watched_by(n, Config::default());
        assert!(call(&mut master, put("k")).is_ok());
        assert_eq!(told(&master, &sessions), crate::events::FANOUT_SLICE);
        assert!(master.events.owes());
        master.deliver_events();
        assert_eq!(told(&master, &sessions), n);
        assert!(!master.events.owes());
    }

    // EV-5, EV-9: a write costs what matches it, not what exists.
    #[tokio::test]
    async fn a_write_looks_only_at_the_subscriptions_that_match_it() {
        let mut config = Config::default();
        let start = crate::recovery::open(&mut config).unwrap();
        let mut master = Master::new(config, start);
        let mut sessions = Vec::new();
        for i in 0..crate::events::FANOUT_SLICE * 4 {
            let token = subscribed_to(&mut master, &format!("k{i}"), false);
            sessions.push(token);
        }
        assert!(call(&mut master, put("elsewhere")).is_ok());
        assert!(!master.events.owes(), "nothing matched, nothing to walk");
        assert_eq!(master.events.owed(), 0);
        assert!(call(&mut master, put("k7")).is_ok());
        assert_eq!(told(&master, &sessions), 1);
    }

    // EV-5, EV-9
    #[tokio::test]
    async fn a_widened_mask_does_not_reach_back_to_changes_still_being_fanned_out() {
        let (mut master, _) = watched_by(crate::events::FANOUT_SLICE + 100, Config::default());
        let parent = subscribed_to(&mut master, "k", false);
        assert!(call(&mut master, put("k/c")).is_ok());
        assert!(master.events.owes(), "k/c's fan-out is still under way");
        let widen = Request::Subscribe {
            session: parent,
            key: "k".into(),
            prefix: false,
            mask: leasehold_protocol::event_mask::CHILD_ADDED,
        };
        assert!(call(&mut master, widen).is_ok());
        while master.events.owes() {
            master.deliver_events();
        }
        assert_eq!(heard(&master, parent), Vec::<String>::new());
        assert!(call(&mut master, put("k/d")).is_ok());
        while master.events.owes() {
            master.deliver_events();
        }
        assert_eq!(heard(&master, parent), ["k"], "k/d's ChildAdded");
    }

    // EV-1, EV-9
    #[tokio::test]
    async fn events_of_a_later_change_come_after_those_still_owed() {
        let n = crate::events::FANOUT_SLICE + 100;
        let (mut master, sessions) = watched_by(n, Config::default());
        let last = sessions[n - 1];
        assert!(call(&mut master, put("a")).is_ok());
        assert!(call(&mut master, put("b")).is_ok());
        while master.events.owes() {
            master.deliver_events();
        }
        assert_eq!(heard(&master, last), ["a", "b"]);
        assert_eq!(heard(&master, sessions[0]), ["a", "b"]);
    }

    // EV-9
    #[tokio::test]
    async fn a_subscription_made_after_a_change_does_not_hear_of_it() {
        let n = crate::events::FANOUT_SLICE + 100;
        let (mut master, _) = watched_by(n, Config::default());
        assert!(call(&mut master, put("a")).is_ok());
        assert!(master.events.owes());
        let late = subscribed(&mut master);
        while master.events.owes() {
            master.deliver_events();
        }
        assert_eq!(heard(&master, late), Vec::<String>::new());
    }

    // EV-9, ERR-16
    #[tokio::test]
    async fn writes_are_refused_while_too_many_deliveries_are_owed_and_served_again_after() {
        let config = Config {
            fanout_backlog: 2 * crate::events::FANOUT_SLICE,
            ..Config::default()
        };
        let (mut master, sessions) = watched_by(crate::events::FANOUT_SLICE + 1_000, config);
        // Each write adds more than a slice's worth, so the debt grows.
        let mut refused = None;
        for n in 0..100 {
            if let Err(e) = call(&mut master, put(&format!("k{n}"))) {
                refused = Some(e);
                break;
            }
        }
        let refused = refused.expect("a write refused once the fan-out fell behind");
        assert!(
            matches!(refused.code, ErrorCode::Congested { .. }),
            "{refused:?}"
        );
        // Reads and KeepAlives are still served.
        let keepalive = Request::KeepAlive(KeepAlive {
            session: sessions[0],
            epoch: master.config.epoch,
            acked_seq: 0,
            hold: false,
        });
        assert!(call(&mut master, keepalive).is_ok());
        while master.events.owes() {
            master.deliver_events();
        }
        assert!(call(&mut master, put("after")).is_ok());
    }
}
