//! [`Subscription`]s: the streams `Session::subscribe` makes, and the
//! master's subscriptions under them (`EV-5`, `EV-7`). Where their events
//! go is `events.rs`; making them again on a new master is the keeper's
//! (`keepalive.rs`, `FO-6`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use leasehold_protocol::{Request, Response};
use tokio::sync::mpsc;

use crate::client::unexpected;
use crate::config::SUBSCRIPTION_BUFFER;
use crate::error::ClientError;
use crate::events::{Route, SubscribeOptions, SubscriptionEvent};
use crate::session::Session;

/// A stream of events for one subscription. Dropping it unsubscribes (best
/// effort).
///
/// Streams of one session on the same key and kind share one subscription
/// on the master (`EV-5`); each hears only what its own mask asks for.
#[derive(Debug)]
pub struct Subscription {
    /// The master's id; a new master gives a new one (`FO-6`). The
    /// allocation also tells this stream's route from the others sharing
    /// the id.
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
        self.session.dispatch().remove_route(&self.id);
        let left = leave(&self.session, &self.id).await;
        // Only now: a cancel given up half way leaves the rest to `drop`.
        self.cancelled = true;
        left
    }
}

/// The same events as [`Subscription::next`], for `StreamExt` and friends.
///
/// ```no_run
/// # async fn example(session: leasehold::Session) -> Result<(), leasehold::ClientError> {
/// use futures::StreamExt;
/// use leasehold::SubscribeOptions;
///
/// let a = session.subscribe("service/a", SubscribeOptions::prefix()).await?;
/// let b = session.subscribe("service/b", SubscribeOptions::prefix()).await?;
/// let mut both = futures::stream::select(a, b);
/// while let Some(event) = both.next().await {
///     println!("{event:?}");
/// }
/// # Ok(())
/// # }
/// ```
impl futures::Stream for Subscription {
    type Item = SubscriptionEvent;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<SubscriptionEvent>> {
        if self.overflowed.swap(false, Ordering::AcqRel) {
            return std::task::Poll::Ready(Some(SubscriptionEvent::EventsLost));
        }
        self.events.poll_recv(cx)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.cancelled {
            return;
        }
        self.session.dispatch().remove_route(&self.id);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let session = self.session.clone();
            let id = self.id.clone();
            runtime.spawn(async move {
                let _ = leave(&session, &id).await;
            });
        }
    }
}

/// Takes the stream `route` out and ends its master subscription unless
/// another stream still uses it. Under the session's subscription lock, so
/// that no `Subscribe` answered with the same id is in flight meanwhile,
/// and the route is taken out again there: a new master's
/// resubscription may have put it back under a new id.
async fn leave(session: &Session, route: &Arc<AtomicU64>) -> Result<(), ClientError> {
    let _changing = session.subscribing().lock().await;
    let id = {
        let mut dispatch = session.dispatch();
        dispatch.remove_route(route);
        let id = route.load(Ordering::Acquire);
        if dispatch.in_use(id) {
            return Ok(());
        }
        id
    };
    unsubscribe(session, id).await
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
    ///         SubscriptionEvent::Changed { key, change, index, contents } => {
    ///             // Small values ride along; larger ones are a read away.
    ///             println!("{key}: {change:?} at {index}, {contents:?}")
    ///         }
    ///         SubscriptionEvent::EventsLost => println!("missed some: re-read config/"),
    ///         SubscriptionEvent::Session(state) => println!("session {state:?}"),
    ///         other => println!("{other:?}"), // kinds a later version may add
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
        let (tx, events) = mpsc::channel(SUBSCRIPTION_BUFFER);
        let overflowed = Arc::new(AtomicBool::new(false));
        let id = Arc::new(AtomicU64::new(0));
        let route = Route {
            tx,
            overflowed: overflowed.clone(),
            key: key.to_string(),
            options,
            id: id.clone(),
        };
        // The call runs in its own task, so that a caller who gives up
        // while it is in flight leaves no subscription behind: the task
        // learns the id anyway and takes it back.
        let (done, outcome) = tokio::sync::oneshot::channel();
        let session = self.clone();
        let route_id = id.clone();
        tokio::spawn(async move {
            let outcome = join(&session, route).await;
            if let Err(Ok(())) = done.send(outcome) {
                // Nobody holds the stream: its route goes, and the
                // master's subscription with it unless another uses it.
                let _ = leave(&session, &route_id).await;
            }
        });
        outcome
            .await
            .map_err(|_| ClientError::Protocol("the subscribe task ended".into()))??;
        Ok(Subscription {
            id,
            session: self.clone(),
            events,
            overflowed,
            cancelled: false,
        })
    }
}

/// Subscribes on the master and installs `route` under the answer, holding
/// the session's subscription lock: streams on the same key and kind share
/// one subscription on the master, so joining and ending must not race
/// (`EV-5`).
async fn join(session: &Session, route: Route) -> Result<(), ClientError> {
    let _changing = session.subscribing().lock().await;
    let request = Request::Subscribe {
        session: session.token(),
        key: route.key.clone(),
        prefix: route.options.prefix,
        mask: route.options.mask,
    };
    session.dispatch().joining = Some((route.key.clone(), route.options.prefix));
    let outcome = session.client().call(request).await;
    let mut dispatch = session.dispatch();
    dispatch.joining = None;
    let id = match outcome {
        Ok(Response::Subscribed { subscription }) => subscription,
        failed => {
            dispatch.forget_joined();
            return Err(failed.map_or_else(|e| e, unexpected));
        }
    };
    dispatch.install(id, vec![route]);
    Ok(())
}
