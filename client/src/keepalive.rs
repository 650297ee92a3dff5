//! The task that keeps a session alive and tracks its state (SPEC
//! "Client session states").
//!
//! Normally exactly one KeepAlive is outstanding and the master holds it;
//! its reply renews the local lease and the next one goes out at once. When
//! the local lease runs out the session is in jeopardy: the held request is
//! left in flight (the link may only be slow) while probes that the master
//! answers at once go out one at a time, with backoff, until one succeeds
//! (safe, then normal) or the grace period ends (expired). A connection
//! is given up only once it has gone silent: after a fail-over, a master
//! catching up on many sessions answers slowly, and probes that time out
//! and multiply would bury it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use leasehold_protocol::{
    Authority, ErrorCode, Event, EventKind, KeepAlive, LeaseGrant, Request, Response, SessionId,
    SessionToken,
};
use tokio::sync::{oneshot, watch};

use tokio::time::{sleep_until, Instant};
use tracing::debug;

use crate::client::{unexpected, Client};
use crate::error::ClientError;
use crate::lease::{local_expiry, MAX_GRANT};
use crate::session::{SessionOptions, SessionState, Shared, Stop};

/// How long a KeepAlive that asks for an immediate answer waits while its
/// connection delivers nothing at all.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Time allowed for the DestroySession sent on close.
const DESTROY_TIMEOUT: Duration = Duration::from_secs(2);
/// KeepAlives in flight at most; timeouts keep them draining.
const MAX_IN_FLIGHT: usize = 8;

/// When a KeepAlive was sent, whether it asked to be held, and its outcome.
type Reply = (Instant, bool, Result<Response, ClientError>);
type InFlight = Pin<Box<dyn Future<Output = Reply> + Send>>;

pub(crate) struct Keeper {
    client: Client,
    id: SessionId,
    /// What proves this client's right to act for the session (`AUTH-2`).
    token: SessionToken,
    epoch: u64,
    grace: Duration,
    drift: f64,
    local_expiry: Instant,
    state: SessionState,
    states: watch::Sender<SessionState>,
    shared: Arc<Shared>,
    /// The connection the latest KeepAlive went out on.
    last_connection: Arc<AtomicU64>,
    /// The highest event sequence number delivered, acknowledged on the
    /// next KeepAlive.
    delivered: u64,
}

type Granted = (u64, LeaseGrant, Vec<Event>);

fn keepalive_reply(response: Response) -> Result<Granted, ClientError> {
    match response {
        Response::KeepAlive {
            epoch,
            lease,
            events,
        } => Ok((epoch, lease, events)),
        other => Err(unexpected(other)),
    }
}

/// Delay before retry number `attempt` (from 1): 50 ms doubling to 1 s.
fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(50u64 << attempt.saturating_sub(1).min(5)).min(Duration::from_secs(1))
}

impl Keeper {
    pub(crate) fn new(
        client: Client,
        token: SessionToken,
        epoch: u64,
        local_expiry: Instant,
        options: &SessionOptions,
        states: watch::Sender<SessionState>,
        shared: Arc<Shared>,
    ) -> Self {
        *shared
            .local_expiry
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(local_expiry);
        Keeper {
            client,
            id: token.id,
            token,
            epoch,
            grace: options.grace,
            drift: options.clock_drift,
            local_expiry,
            state: SessionState::Normal,
            states,
            shared,
            last_connection: Arc::default(),
            delivered: 0,
        }
    }

    pub(crate) async fn run(mut self, mut close: oneshot::Receiver<Stop>) {
        let mut in_flight = FuturesUnordered::<InFlight>::new();
        // KeepAlives in flight that asked for an answer at once. In
        // jeopardy one is enough: a master that is merely slow answers it
        // in the end, and more would only add to what it has to catch up
        // on.
        let mut unheld = 0usize;
        let mut send_at = Some(Instant::now());
        let mut hold = true;
        // Whether the KeepAlive in flight asked for an answer at once
        // because the one before came back late (KA-9).
        let mut hurried = false;
        let mut failures = 0u32;
        let mut probes = 0u32;
        let mut grace_end: Option<Instant> = None;
        let far = Instant::now() + Duration::from_secs(86_400 * 365);
        loop {
            tokio::select! {
                biased;
                stop = &mut close => {
                    // A dropped sender means every handle is gone: destroy.
                    let (destroy, done) = match stop {
                        Ok(Stop { destroy, done }) => (destroy, Some(done)),
                        Err(_) => (true, None),
                    };
                    let outcome = if destroy { self.destroy().await } else { Ok(()) };
                    // Ended for this client: every clone must see it (CS-8).
                    self.enter(SessionState::Closed);
                    if let Some(done) = done {
                        let _ = done.send(outcome);
                    }
                    return;
                }
                Some((sent, held, result)) = in_flight.next() => {
                    if !held {
                        unheld -= 1;
                    }
                    match result.and_then(keepalive_reply) {
                        // A late reply from a master older than the one already
                        // heard from proves nothing and carries stale events.
                        Ok((epoch, ..)) if epoch < self.epoch => {}
                        Ok((epoch, lease, events)) => {
                            // A new master numbers its events afresh.
                            if epoch != self.epoch {
                                self.delivered = 0;
                            }
                            self.epoch = epoch;
                            // Events are news whether or not the lease is.
                            let failover = self.deliver(events);
                            let expiry = local_expiry(sent, lease, self.drift);
                            // A reply that arrives after the lease it granted has
                            // run out proves nothing about now (CS-5).
                            if expiry > Instant::now() {
                                self.local_expiry = self.local_expiry.max(expiry);
                                *self.shared.local_expiry.lock().unwrap_or_else(|e| e.into_inner()) =
                                    Some(self.local_expiry);
                                if self.state == SessionState::Jeopardy {
                                    self.enter(SessionState::Safe); // CS-4
                                    self.enter(SessionState::Normal);
                                    grace_end = None;
                                } else if failover && self.state == SessionState::Normal {
                                    self.enter(SessionState::Failover); // FO-6
                                    self.enter(SessionState::Normal);
                                }
                                in_flight.clear();
                                unheld = 0;
                                failures = 0;
                                // KA-9: a request delayed on its way leaves a
                                // local lease shorter than the master's by the
                                // delay, and the master would hold the next
                                // one until its own expiry less the margin:
                                // past the local lease. Ask for an answer at
                                // once instead, but never twice in a row.
                                let remaining = Duration::from_millis(lease.remaining_ms).min(MAX_GRANT);
                                let short = expiry < Instant::now() + remaining - remaining / 20;
                                hurried = short && !hurried;
                                hold = !hurried;
                                send_at = Some(Instant::now()); // KA-1
                            } else if self.state == SessionState::Normal && in_flight.is_empty() {
                                hold = false;
                                send_at = Some(Instant::now());
                            }
                        }
                        Err(e) => match e.code() {
                            Some(ErrorCode::SessionExpired | ErrorCode::UnknownSession) => {
                                self.enter(SessionState::Expired); // CS-6
                                return;
                            }
                            Some(ErrorCode::WrongEpoch { current }) => {
                                self.epoch = current;
                                self.delivered = 0;
                                hold = false;
                                send_at = Some(Instant::now());
                            }
                            _ => {
                                debug!(session = %self.id, error = %e, "KeepAlive failed");
                                hold = false;
                                // In jeopardy, probes go out on their own schedule.
                                if self.state == SessionState::Normal
                                    && send_at.is_none()
                                    && in_flight.is_empty()
                                {
                                    failures += 1;
                                    send_at = Some(Instant::now() + backoff(failures));
                                }
                            }
                        },
                    }
                },
                () = sleep_until(self.local_expiry), if self.state == SessionState::Normal => {
                    self.enter(SessionState::Jeopardy); // CS-2
                    grace_end = Some(self.local_expiry + self.grace);
                    // The connection may be dead: new requests go out on a
                    // new one, while the held request stays in flight. One
                    // that delivered a frame within the last probe timeout
                    // is alive, its master only slow; it is kept.
                    self.client.abandon_if_silent(
                        self.last_connection.load(Ordering::Relaxed),
                        PROBE_TIMEOUT,
                    );
                    hold = false;
                    probes = 0;
                    send_at = Some(Instant::now());
                }
                () = sleep_until(grace_end.unwrap_or(far)), if grace_end.is_some() => {
                    self.enter(SessionState::Expired); // CS-3
                    return;
                }
                () = sleep_until(send_at.unwrap_or(far)), if send_at.is_some() => {
                    send_at = None;
                    let probing = self.state == SessionState::Jeopardy && unheld > 0;
                    if in_flight.len() < MAX_IN_FLIGHT && !probing {
                        if !hold {
                            unheld += 1;
                        }
                        in_flight.push(self.send(hold));
                    }
                    if self.state == SessionState::Jeopardy {
                        // Keep probing until a reply comes or grace ends.
                        probes += 1;
                        send_at = Some(Instant::now() + backoff(probes));
                    }
                }
            }
        }
    }

    /// Hands the events of a reply to the application, each once and in
    /// order: ones already delivered (sent again because their
    /// acknowledgement was lost) are skipped (`EV-7`).
    /// Says whether a fail-over event was among them; subscriptions are
    /// then made again on the new master.
    fn deliver(&mut self, events: Vec<Event>) -> bool {
        let mut failover = false;
        {
            let mut dispatch = self.shared.dispatch();
            for event in events {
                if event.seq > self.delivered {
                    self.delivered = event.seq;
                    failover |= matches!(event.kind, EventKind::Failover { .. });
                    dispatch.deliver(event);
                }
            }
        }
        if failover {
            tokio::spawn(crate::events::resubscribe(
                self.client.clone(),
                self.token,
                self.shared.clone(),
            ));
        }
        failover
    }

    /// Sends one KeepAlive. One with `hold = false` asks for an immediate
    /// answer, and is given up once its connection has delivered nothing
    /// for [`PROBE_TIMEOUT`]; the connection is then abandoned.
    fn send(&self, hold: bool) -> InFlight {
        let client = self.client.clone();
        let last_connection = self.last_connection.clone();
        let (session, known_epoch, delivered) = (self.token, self.epoch, self.delivered);
        Box::pin(async move {
            // Taken before connecting: the earliest the master can have seen
            // the request, so the local lease stays conservative.
            let sent = Instant::now();
            let attempt = async {
                let conn = client.connection().await?;
                last_connection.store(conn.id(), Ordering::Relaxed);
                // A newer master announces its epoch in the Welcome: naming
                // it at once saves the round trip of a `WrongEpoch`
                // refusal (`KA-6`). That master numbers its events afresh,
                // so none of them is acknowledged yet (`FO-6`).
                let announced = conn.welcome().epoch;
                let (epoch, acked_seq) = if announced > known_epoch {
                    (announced, 0)
                } else {
                    (known_epoch, delivered)
                };
                let request = Request::KeepAlive(KeepAlive {
                    session,
                    epoch,
                    acked_seq,
                    hold,
                });
                let reply = client.call_on(&conn, request);
                if hold {
                    return reply.await;
                }
                tokio::pin!(reply);
                let mut deadline = Instant::now() + PROBE_TIMEOUT;
                loop {
                    tokio::select! {
                        result = &mut reply => return result,
                        () = sleep_until(deadline) => {
                            let alive_until = conn.heard().latest() + PROBE_TIMEOUT;
                            if alive_until > Instant::now() {
                                deadline = alive_until;
                                continue;
                            }
                            client.abandon(conn.id());
                            return Err(ClientError::Timeout(PROBE_TIMEOUT));
                        }
                    }
                }
            };
            (sent, hold, attempt.await)
        })
    }

    fn enter(&mut self, state: SessionState) {
        if state == self.state {
            return;
        }
        debug!(session = %self.id, from = self.state.as_str(), to = state.as_str(), "session state");
        self.state = state;
        self.states.send_replace(state);
        for callback in self.shared.callbacks().iter() {
            callback(state);
        }
        self.shared.dispatch().session_state(state);
    }

    async fn destroy(&self) -> Result<(), ClientError> {
        // A new master serves the releases only once its fail-over event
        // is acknowledged (`FO-5`): acknowledge what was delivered first.
        let ack = Request::KeepAlive(KeepAlive {
            session: self.token,
            epoch: self.epoch,
            acked_seq: self.delivered,
            hold: false,
        });
        let _ = tokio::time::timeout(DESTROY_TIMEOUT, self.client.call(ack)).await;
        // Destroying invalidates the session, which would start lock-delay
        // on every lock it holds; a plain release first hands them on at
        // once (`LOCK-11`).
        let held: Vec<String> = {
            let dispatch = self.shared.dispatch();
            // Guards stop counting as held before the first release, so no
            // holder acts on a lock someone else may already have.
            for signal in dispatch.locks.values() {
                signal.send_modify(|s| s.lost = true);
            }
            dispatch.locks.keys().cloned().collect()
        };
        for key in held {
            let release = Request::Release {
                key,
                session: self.token,
            };
            let _ = tokio::time::timeout(DESTROY_TIMEOUT, self.client.call(release)).await;
        }
        let request = Request::DestroySession {
            session: self.id,
            authority: Authority::Session(self.token),
        };
        match tokio::time::timeout(DESTROY_TIMEOUT, self.client.call(request)).await {
            Err(_) => Err(ClientError::Timeout(DESTROY_TIMEOUT)),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e))
                if matches!(
                    e.code(),
                    Some(ErrorCode::SessionExpired | ErrorCode::UnknownSession)
                ) =>
            {
                Ok(())
            }
            Ok(Err(e)) => Err(e),
        }
    }
}
