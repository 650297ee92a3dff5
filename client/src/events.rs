//! Events a session hears of, on its KeepAlive replies (SPEC "Events").

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use leasehold_protocol::{event_mask, Change, Event, EventKind, Request, Response, SessionId};
use tokio::sync::{mpsc, watch};

use crate::client::unexpected;
use crate::error::ClientError;
use crate::session::{Session, SessionState};

/// Events a subscription buffers for the application; past that it reports
/// `EventsLost` (`EV-7`).
const SUBSCRIPTION_BUFFER: usize = 1024;
/// Events kept for subscriptions whose `Subscribed` reply has not arrived.
const ORPHANS: usize = 1024;

/// What a subscription hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubscriptionEvent {
    /// Something changed at `key`.
    Changed { key: String, change: Change },
    /// Events were dropped (the master's queue or this buffer overflowed):
    /// re-read what you watch.
    EventsLost,
    /// The session entered this state (`CS-7`); after `Expired` the stream
    /// ends.
    Session(SessionState),
}

/// What to subscribe to.
///
/// ```
/// use leasehold::{event_mask, SubscribeOptions};
///
/// let everything_below = SubscribeOptions::prefix().mask(event_mask::ALL);
/// assert!(everything_below.prefix);
/// ```
#[derive(Debug, Clone)]
pub struct SubscribeOptions {
    /// Every key at or below the key, rather than the key and its children.
    pub prefix: bool,
    /// Which events, from [`event_mask`].
    pub mask: u32,
}

impl SubscribeOptions {
    /// The key itself and its direct children: contents, child and
    /// session state events.
    pub fn exact() -> Self {
        SubscribeOptions {
            prefix: false,
            mask: event_mask::CONTENTS
                | event_mask::CHILD_ADDED
                | event_mask::CHILD_REMOVED
                | event_mask::CHILD_MODIFIED
                | event_mask::SESSION_STATE,
        }
    }

    /// Every key at or below the key (the root when empty): contents and
    /// session state events.
    pub fn prefix() -> Self {
        SubscribeOptions {
            prefix: true,
            mask: event_mask::CONTENTS | event_mask::SESSION_STATE,
        }
    }

    /// Sets the mask.
    pub fn mask(mut self, mask: u32) -> Self {
        self.mask = mask;
        self
    }
}

/// A stream of events for one subscription. Dropping it unsubscribes (best
/// effort).
#[derive(Debug)]
pub struct Subscription {
    /// The master's id; a new master gives a new one (`FO-6`).
    id: Arc<AtomicU64>,
    session: Session,
    events: mpsc::Receiver<SubscriptionEvent>,
    overflowed: Arc<AtomicBool>,
    cancelled: bool,
}

impl Subscription {
    /// The master's id for it (it changes when a new master takes over).
    pub fn id(&self) -> u64 {
        self.id.load(Ordering::Acquire)
    }

    /// The next event, in the order they happened; `None` once the session
    /// has ended.
    pub async fn next(&mut self) -> Option<SubscriptionEvent> {
        if self.overflowed.swap(false, Ordering::AcqRel) {
            return Some(SubscriptionEvent::EventsLost);
        }
        self.events.recv().await
    }

    /// Stops the subscription.
    pub async fn cancel(mut self) -> Result<(), ClientError> {
        self.cancelled = true;
        let id = self.id();
        self.session.dispatch().subscriptions.remove(&id);
        unsubscribe(&self.session, id).await
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.cancelled {
            return;
        }
        let id = self.id();
        self.session.dispatch().subscriptions.remove(&id);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let session = self.session.clone();
            runtime.spawn(async move {
                let _ = unsubscribe(&session, id).await;
            });
        }
    }
}

async fn unsubscribe(session: &Session, subscription: u64) -> Result<(), ClientError> {
    let request = Request::Unsubscribe {
        session: session.token(),
        subscription,
    };
    match session.client().call(request).await? {
        Response::Unsubscribed => Ok(()),
        other => Err(unexpected(other)),
    }
}

/// What a lock's holder hears of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LockSignal {
    /// The master took the lock away (or events were lost, so it may have).
    pub(crate) lost: bool,
    /// The latest session waiting for it.
    pub(crate) conflict: Option<SessionId>,
    /// How many times the session has entered jeopardy while holding it:
    /// counted, so a jeopardy over before anyone looked is still seen.
    pub(crate) jeopardies: u64,
}

#[derive(Debug)]
struct Route {
    tx: mpsc::Sender<SubscriptionEvent>,
    overflowed: Arc<AtomicBool>,
    /// What it subscribed to (and whether it asked for session states), to
    /// subscribe again on a new master.
    key: String,
    options: SubscribeOptions,
    /// The master's id, shared with the [`Subscription`].
    id: Arc<AtomicU64>,
}

/// Where a session's events go: its subscriptions and its locks.
#[derive(Debug, Default)]
pub(crate) struct Dispatch {
    subscriptions: BTreeMap<u64, Route>,
    orphans: VecDeque<(u64, SubscriptionEvent)>,
    /// Keys this client holds locks on, with their signals; released before
    /// a close destroys the session (`LOCK-11`).
    pub(crate) locks: BTreeMap<String, watch::Sender<LockSignal>>,
    /// Semaphore contender keys still being deleted (`SEM-4`).
    pub(crate) leaving: std::collections::BTreeSet<String>,
}

impl Dispatch {
    /// Hands one event to whoever waits for it (`EV-7`).
    pub(crate) fn deliver(&mut self, event: Event) {
        match event.kind {
            EventKind::Node {
                subscription,
                key,
                change,
            } => {
                let event = SubscriptionEvent::Changed { key, change };
                match self.subscriptions.get(&subscription) {
                    Some(route) => route.send(event),
                    None => {
                        if self.orphans.len() == ORPHANS {
                            self.orphans.pop_front();
                        }
                        self.orphans.push_back((subscription, event));
                    }
                }
            }
            EventKind::LockLost { key } => {
                if let Some(signal) = self.locks.get(&key) {
                    signal.send_modify(|s| s.lost = true);
                }
            }
            EventKind::LockConflict { key, waiter } => {
                if let Some(signal) = self.locks.get(&key) {
                    signal.send_modify(|s| s.conflict = Some(waiter));
                }
            }
            // Subscriptions are made again by the keeper; what happened in
            // between is unknown, as after an overflow. Locks survive.
            EventKind::Failover { .. } => {
                // Into the stream, so a reader waiting on it wakes; only a
                // full stream falls back on the flag.
                for route in self.subscriptions.values() {
                    route.send(SubscriptionEvent::EventsLost);
                }
            }
            EventKind::EventsLost => {
                // Into the stream, so a reader waiting on it wakes; only a
                // full stream falls back on the flag.
                for route in self.subscriptions.values() {
                    route.send(SubscriptionEvent::EventsLost);
                }
                // A lost event may have been a lock taken away: assume so.
                for signal in self.locks.values() {
                    signal.send_modify(|s| s.lost = true);
                }
            }
        }
    }
}

impl Dispatch {
    /// Puts `route` under the master's id `id`, first handing it the events
    /// that raced ahead of the `Subscribed` reply. Nothing is installed for
    /// an expired session, whose streams must end.
    fn install(&mut self, id: u64, route: Route, expired: bool) {
        let mut early = Vec::new();
        self.orphans.retain(|(sub, event)| {
            if *sub == id {
                early.push(event.clone());
            }
            *sub != id
        });
        for event in early {
            route.send(event);
        }
        route.id.store(id, Ordering::Release);
        if !expired {
            self.subscriptions.insert(id, route);
        }
    }

    /// Tells the subscriptions that asked of a session state change; on
    /// `Expired` every stream ends after it.
    pub(crate) fn session_state(&mut self, state: SessionState) {
        if state == SessionState::Jeopardy {
            for signal in self.locks.values() {
                signal.send_modify(|s| s.jeopardies += 1);
            }
        }
        let asked = |r: &&Route| r.options.mask & event_mask::SESSION_STATE != 0;
        for route in self.subscriptions.values().filter(asked) {
            route.send(SubscriptionEvent::Session(state));
        }
        if state == SessionState::Expired {
            self.subscriptions.clear();
            self.orphans.clear();
        }
    }
}

impl Route {
    fn send(&self, event: SubscriptionEvent) {
        if self.tx.try_send(event).is_err() {
            self.overflowed.store(true, Ordering::Release);
        }
    }
}

impl Session {
    /// Hears of changes to `key` as they happen, in order, once each.
    ///
    /// ```no_run
    /// # async fn example(session: leasehold::Session) -> Result<(), leasehold::ClientError> {
    /// use leasehold::{SubscribeOptions, SubscriptionEvent};
    ///
    /// let mut changes = session.subscribe("config", SubscribeOptions::prefix()).await?;
    /// while let Some(event) = changes.next().await {
    ///     match event {
    ///         SubscriptionEvent::Changed { key, change } => println!("{key}: {change:?}"),
    ///         SubscriptionEvent::EventsLost => println!("missed some: re-read config/"),
    ///         SubscriptionEvent::Session(state) => println!("session {state:?}"),
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn subscribe(
        &self,
        key: &str,
        options: SubscribeOptions,
    ) -> Result<Subscription, ClientError> {
        let request = Request::Subscribe {
            session: self.token(),
            key: key.to_string(),
            prefix: options.prefix,
            mask: options.mask,
        };
        // The call runs in its own task, so that a caller who gives up
        // while it is in flight leaves no subscription behind: the task
        // learns the id anyway and takes it back.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let session = self.clone();
        tokio::spawn(async move {
            let outcome = session.client().call(request).await;
            if let Err(Ok(Response::Subscribed { subscription })) = tx.send(outcome) {
                let _ = unsubscribe(&session, subscription).await;
            }
        });
        let outcome = rx
            .await
            .map_err(|_| ClientError::Protocol("the subscribe task ended".into()))?;
        let id = match outcome? {
            Response::Subscribed { subscription } => subscription,
            other => return Err(unexpected(other)),
        };
        let (tx, events) = mpsc::channel(SUBSCRIPTION_BUFFER);
        let overflowed = Arc::new(AtomicBool::new(false));
        let shared_id = Arc::new(AtomicU64::new(id));
        let route = Route {
            tx,
            overflowed: overflowed.clone(),
            key: key.to_string(),
            options,
            id: shared_id.clone(),
        };
        {
            // Checked under the lock an expiry clears routes under, so a
            // stream made as the session ends still ends.
            let mut dispatch = self.dispatch();
            dispatch.install(id, route, self.state() == SessionState::Expired);
        }
        Ok(Subscription {
            id: shared_id,
            session: self.clone(),
            events,
            overflowed,
            cancelled: false,
        })
    }
}

/// Makes every subscription of a session again on a new master, which
/// starts without any (`FO-6`). Every route is taken out first, since the
/// new master's ids may coincide with the old ones; a subscription that
/// cannot be made again ends its stream.
pub(crate) async fn resubscribe(
    client: crate::client::Client,
    session: leasehold_protocol::SessionToken,
    shared: Arc<crate::session::Shared>,
) {
    let routes: Vec<Route> = std::mem::take(&mut shared.dispatch().subscriptions)
        .into_values()
        .collect();
    for route in routes {
        // Its Subscription was dropped meanwhile: nothing to make again.
        if route.tx.is_closed() {
            continue;
        }
        let request = Request::Subscribe {
            session,
            key: route.key.clone(),
            prefix: route.options.prefix,
            mask: route.options.mask,
        };
        if let Ok(Response::Subscribed { subscription }) = client.call(request).await {
            if route.tx.is_closed() {
                let request = Request::Unsubscribe {
                    session,
                    subscription,
                };
                let _ = client.call(request).await;
                continue;
            }
            shared.dispatch().install(subscription, route, false);
        }
    }
}
