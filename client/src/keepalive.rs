//! The task that keeps a session alive: it executes what the session
//! machine (`session_machine.rs`, SPEC "Client session states") decides,
//! sends the KeepAlives, reads the clock and reports the states.
//!
//! A connection is given up only once it has gone silent: after a
//! fail-over, a master catching up on many sessions answers slowly, and
//! probes that time out and multiply would bury it.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::StreamExt;
use leasehold_protocol::{
    Authority, ErrorCode, EventKind, KeepAlive, LeaseGrant, Remedy, Request, Response, SessionId,
    SessionToken,
};
use tokio::sync::{oneshot, watch};

use tokio::time::Instant;
use tracing::debug;

use crate::client::Client;
use crate::config::{SessionOptions, CLOSE_ACKS, DESTROY_TIMEOUT, PROBE_TIMEOUT, RELEASE_TRIES};
use crate::error::ClientError;
use crate::events::{Route, SubscriptionEvent};
use crate::lease::local_expiry;
use crate::release::release_holding;
use crate::session_machine::{Action, Reply, SessionMachine, SessionState};
use crate::shared::{Shared, Stop};

/// When a KeepAlive was sent, whether it asked to be held, and its outcome
/// with the acknowledgement it carried and the margin its master keeps
/// before a lease's end (`KA-2`).
type Sent = (
    Instant,
    bool,
    Result<(u64, Duration, Response), ClientError>,
);
type InFlight = Pin<Box<dyn Future<Output = Sent> + Send>>;

pub(crate) struct Keeper {
    client: Client,
    id: SessionId,
    /// What proves this client's right to act for the session (`AUTH-2`).
    token: SessionToken,
    machine: SessionMachine,
    states: watch::Sender<SessionState>,
    shared: Arc<Shared>,
    /// The connection the latest KeepAlive went out on.
    last_connection: Arc<AtomicU64>,
}

/// A KeepAlive's outcome, sorted by what the session machine does with it.
fn sorted(result: Result<(u64, Duration, Response), ClientError>) -> Reply {
    match result {
        Ok((
            acked_seq,
            margin,
            Response::KeepAlive {
                epoch,
                lease,
                events,
            },
        )) => Reply::Granted {
            epoch,
            lease,
            events,
            acked_seq,
            margin,
        },
        Ok((_, _, other)) => {
            debug!(reply = ?other, "KeepAlive answered with something else");
            Reply::Failed
        }
        Err(e) => match e.code() {
            Some(ErrorCode::SessionExpired | ErrorCode::UnknownSession) => Reply::Gone,
            Some(ErrorCode::WrongEpoch { current }) => Reply::WrongEpoch { current },
            _ => {
                debug!(error = %e, "KeepAlive failed");
                Reply::Failed
            }
        },
    }
}

/// What draws a session's waits between retries: its id, which differs
/// between sessions (and replays the same in a simulation).
pub(crate) fn salt_of(token: &SessionToken) -> u64 {
    let (high, low) = token.id.as_u64_pair();
    high ^ low
}

/// What the request that created (or attached to) a session was granted.
pub(crate) struct FirstGrant {
    /// The master's epoch.
    pub(crate) epoch: u64,
    /// When the request was sent.
    pub(crate) sent: Instant,
    /// The lease granted.
    pub(crate) lease: LeaseGrant,
}

impl Keeper {
    pub(crate) fn new(
        client: Client,
        token: SessionToken,
        FirstGrant { epoch, sent, lease }: FirstGrant,
        options: &SessionOptions,
        states: watch::Sender<SessionState>,
        shared: Arc<Shared>,
    ) -> Self {
        let local_expiry = local_expiry(sent, lease, options.clock_drift);
        *shared
            .local_expiry
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(local_expiry);
        shared.cache().renewed(local_expiry);
        let now = client.clock().now();
        let mut machine = SessionMachine::new(
            epoch,
            local_expiry,
            options.grace,
            options.clock_drift,
            now,
            salt_of(&token),
        );
        // The first held KeepAlive is overdue as any later one (`CS-9`).
        if let Some(margin) = client.keepalive_margin() {
            machine.expect_answers(now, lease, margin);
        }
        Keeper {
            client,
            id: token.id,
            token,
            machine,
            states,
            shared,
            last_connection: Arc::default(),
        }
    }

    /// Moves messages between the session machine and the world: replies
    /// and the time in, KeepAlives, states and events out.
    pub(crate) async fn run(mut self, mut close: oneshot::Receiver<Stop>) {
        let mut in_flight = FuturesUnordered::<InFlight>::new();
        let clock = self.client.clock();
        let far = clock.now() + Duration::from_secs(86_400 * 365);
        let mut opened = self.client.opened();
        opened.mark_unchanged();
        loop {
            let deadline = self.machine.deadline();
            let actions = tokio::select! {
                biased;
                stop = &mut close => {
                    // Nothing polls the KeepAlives in flight while the
                    // session closes, and one of them may be opening the
                    // client's connection, the one attempt every call of
                    // the close would wait for (`CS-8`). The close sends
                    // its own.
                    in_flight.clear();
                    // A dropped sender means every handle is gone: destroy.
                    let (destroy, done) = match stop {
                        Ok(Stop { destroy, done }) => (destroy, Some(done)),
                        Err(_) => (true, None),
                    };
                    let outcome = if destroy { self.destroy().await } else { Ok(()) };
                    // Before the session ends: releases waiting for it read
                    // this once it has (`LOCK-11`).
                    self.shared.dispatch().closed_cleanly = destroy && outcome.is_ok();
                    // Ended for this client: every clone must see it (CS-8).
                    let actions = self.machine.on_close();
                    self.execute(actions, &mut in_flight);
                    if let Some(done) = done {
                        let _ = done.send(outcome);
                    }
                    return;
                }
                Some((sent, held, result)) = in_flight.next() => {
                    self.machine.on_reply(sent, held, sorted(result), clock.now())
                }
                () = clock.sleep_until(deadline.unwrap_or(far)), if deadline.is_some() => {
                    self.machine.on_tick(clock.now())
                }
                Ok(()) = opened.changed() => {
                    self.machine.on_connected(clock.now());
                    Vec::new()
                }
            };
            if self.execute(actions, &mut in_flight) {
                return;
            }
        }
    }

    /// Does what the machine decided, in order; says whether the task ends.
    fn execute(
        &mut self,
        actions: Vec<Action>,
        in_flight: &mut FuturesUnordered<InFlight>,
    ) -> bool {
        for action in actions {
            match action {
                Action::Send {
                    hold,
                    epoch,
                    acked_seq,
                } => in_flight.push(self.send(hold, epoch, acked_seq)),
                Action::Enter(state) => self.enter(state),
                Action::Renewed(expiry) => {
                    // After the invalidations this reply carried, which
                    // `Deliver` handed over first (`CACHE-6`).
                    self.shared.cache().renewed(expiry);
                    *self
                        .shared
                        .local_expiry
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = Some(expiry);
                }
                Action::ForgetInFlight => in_flight.clear(),
                Action::AbandonIfSilent => {
                    // New requests go out on a new connection, while the
                    // held request stays in flight. One that delivered a
                    // frame within the last probe timeout is alive, its
                    // master only slow; it is kept.
                    self.client.abandon_if_silent(
                        self.last_connection.load(Ordering::Relaxed),
                        PROBE_TIMEOUT,
                        self.client.clock().now(),
                    );
                }
                Action::Deliver(events) => {
                    // The cache first: its invalidations are acknowledged
                    // with these events (`CACHE-3`), and a lost event or a
                    // new master may have changed anything (`CACHE-7`).
                    {
                        let mut cache = self.shared.cache();
                        for event in &events {
                            match &event.kind {
                                EventKind::Invalidate { keys } => cache.invalidate(keys),
                                EventKind::EventsLost | EventKind::Failover { .. } => cache.flush(),
                                _ => {}
                            }
                        }
                    }
                    let mut dispatch = self.shared.dispatch();
                    for event in events {
                        dispatch.deliver(event);
                    }
                }
                Action::Resubscribe => {
                    tokio::spawn(resubscribe(
                        self.client.clone(),
                        self.token,
                        self.shared.clone(),
                    ));
                }
                Action::Stop => return true,
            }
        }
        false
    }

    /// Sends one KeepAlive. One with `hold = false` asks for an immediate
    /// answer, and is given up once its connection has delivered nothing
    /// for [`PROBE_TIMEOUT`]; the connection is then abandoned.
    fn send(&self, hold: bool, known_epoch: u64, delivered: u64) -> InFlight {
        let client = self.client.clone();
        let last_connection = self.last_connection.clone();
        let session = self.token;
        Box::pin(async move {
            // Taken before connecting: the earliest the master can have seen
            // the request, so the local lease stays conservative.
            let clock = client.clock();
            let sent = clock.now();
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
                // Stamped above, before connecting, rather than when
                // written: the earlier time is the conservative one.
                let margin = Duration::from_millis(conn.welcome().limits.keepalive_margin_ms);
                let reply = async {
                    let (response, _written) = client.call_on(&conn, request).await?;
                    Ok((acked_seq, margin, response))
                };
                if hold {
                    return reply.await;
                }
                tokio::pin!(reply);
                let mut deadline = clock.now() + PROBE_TIMEOUT;
                loop {
                    tokio::select! {
                        result = &mut reply => return result,
                        () = clock.sleep_until(deadline) => {
                            // A reader not yet started has heard nothing
                            // yet, and is not silent either (as in
                            // `abandon_if_silent`).
                            let now = clock.now();
                            let heard = conn.heard().latest().unwrap_or(now);
                            if heard + PROBE_TIMEOUT > now {
                                deadline = heard + PROBE_TIMEOUT;
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
        debug!(session = %self.id, to = state.as_str(), "session state");
        // Flushed and off in jeopardy and once the session is over, on
        // again when it is back to normal (`CACHE-6`).
        match state {
            SessionState::Normal => self.shared.cache().set_enabled(true),
            SessionState::Jeopardy | SessionState::Expired | SessionState::Closed => {
                self.shared.cache().set_enabled(false)
            }
            _ => {}
        }
        self.states.send_replace(state);
        for callback in self.shared.callbacks().iter() {
            callback(state);
        }
        self.shared.dispatch().session_state(state);
    }

    async fn destroy(&self) -> Result<(), ClientError> {
        // A new master serves the releases only once its fail-over event
        // is acknowledged (`FO-5`). Nothing to do if the master of the open
        // connection is the one whose answers already carried every
        // acknowledgement.
        let settled = !self.machine.unacknowledged()
            && self.client.current_epoch() == Some(self.machine.epoch());
        if !settled {
            self.acknowledge().await;
        }
        // Destroying invalidates the session, which would start lock-delay
        // on every lock it holds; a plain release first hands them on at
        // once (`LOCK-11`).
        let held = {
            let mut dispatch = self.shared.dispatch();
            // Guards stop counting as held before the first release, so no
            // holder acts on a lock someone else may already have; guards
            // made from answers still to come count as lost too.
            dispatch.closing = true;
            for lock in dispatch.locks.values() {
                lock.signal.send_modify(|s| s.lost = true);
            }
            // Releases riding through a fail-over wait for a session that
            // is normal again, which this one no longer becomes: the close
            // carries them out.
            dispatch.to_release_on_close()
        };
        for (key, heard) in held {
            // Every guard is lost already, and so is any an answer still on
            // its way would make: a release refused as stale goes again,
            // naming the later acquire.
            // A few tries, a short pause apart: the session is closing,
            // and the time it may take is bounded here.
            let back = |failures: u32| async move {
                tokio::time::sleep(Duration::from_millis(50 << failures.min(4))).await;
                Ok(failures + 1 < RELEASE_TRIES)
            };
            let release = release_holding(&self.client, self.token, &key, heard, |_| true, back);
            let _ = tokio::time::timeout(DESTROY_TIMEOUT, release).await;
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

    /// Acknowledges, for a close, whatever the master may not hold yet: the
    /// events delivered, or a new master's fail-over event, which that
    /// master hands over only in answer to a KeepAlive naming its epoch.
    /// Each KeepAlive asks for an answer at once and acknowledges what the
    /// one before brought; the events are not delivered, the session being
    /// over for its application already.
    async fn acknowledge(&self) {
        let (mut epoch, mut acked_seq) = (self.machine.epoch(), self.machine.delivered());
        for _ in 0..CLOSE_ACKS {
            let ack = Request::KeepAlive(KeepAlive {
                session: self.token,
                epoch,
                acked_seq,
                hold: false,
            });
            match tokio::time::timeout(DESTROY_TIMEOUT, self.client.call(ack)).await {
                Ok(Ok(Response::KeepAlive { events, .. })) => {
                    match events.iter().map(|event| event.seq).max() {
                        Some(last) if last > acked_seq => acked_seq = last,
                        // The master held the acknowledgement as it
                        // answered, and had nothing new.
                        _ => return,
                    }
                }
                Ok(Err(e)) => match e.code() {
                    // Its events are numbered afresh (`FO-6`).
                    Some(ErrorCode::WrongEpoch { current }) if current > epoch => {
                        epoch = current;
                        acked_seq = 0;
                    }
                    // The connection was lost, most likely with its master:
                    // the next KeepAlive opens one to whoever serves now.
                    _ if matches!(e.remedy(), Remedy::Reconnect | Remedy::OutcomeUnknown) => {}
                    _ => return,
                },
                Ok(Ok(_)) | Err(_) => return,
            }
        }
    }
}

/// Makes every subscription of a session again on a new master, which
/// starts without any (`FO-6`). Every route is taken out first, since the
/// new master's ids may coincide with the old ones. The `Subscribe`s go
/// out together, so every stream is back within one round trip; a
/// subscription that cannot be made again, or whose session ended
/// meanwhile, ends its stream.
async fn resubscribe(
    client: Client,
    session: leasehold_protocol::SessionToken,
    shared: Arc<Shared>,
) {
    let _changing = shared.subscribing.lock().await;
    let routes: Vec<Route> = shared
        .dispatch()
        .take_routes()
        .into_iter()
        // Its Subscription was dropped meanwhile: nothing to make again.
        .filter(|route| !route.tx.is_closed())
        .collect();
    // No `joining`: with every route taken out, what the new master sends
    // before its answers waits among the orphans for `install`.
    let outcomes = futures::future::join_all(routes.iter().map(|route| {
        client.call(Request::Subscribe {
            session,
            key: route.key.clone(),
            prefix: route.options.prefix,
            mask: route.options.mask,
        })
    }))
    .await;
    let mut answered: BTreeMap<u64, Vec<Route>> = BTreeMap::new();
    let mut made = Vec::new();
    {
        let mut dispatch = shared.dispatch();
        for (route, outcome) in routes.into_iter().zip(outcomes) {
            // Told only now, with the subscription back on the new master:
            // a reader that re-reads on `EventsLost` hears of every change
            // after what it read (`FO-6`). Told before the events that
            // raced ahead of the reply, which came after the re-making.
            route.send(SubscriptionEvent::EventsLost);
            if let Ok(Response::Subscribed { subscription }) = outcome {
                made.push(subscription);
                if !route.tx.is_closed() {
                    answered.entry(subscription).or_default().push(route);
                }
            }
        }
        // Streams sharing a subscription share what raced ahead of it.
        for (subscription, routes) in answered {
            dispatch.install(subscription, routes);
        }
        made.retain(|subscription| !dispatch.in_use(*subscription));
        made.sort_unstable();
        made.dedup();
    }
    let unused = made.into_iter().map(|subscription| {
        client.call(Request::Unsubscribe {
            session,
            subscription,
        })
    });
    futures::future::join_all(unused).await;
}
