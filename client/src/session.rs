//! [`Session`]: a session on the master, kept alive in the background, with
//! its state (SPEC "Client session states").

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_protocol::{
    Behavior, GetCached, LeaseGrant, NodeStat, NodeView, Request, Response, SessionId, SessionToken,
};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::cache::CacheStats;
use crate::client::Client;
use crate::error::ClientError;
use crate::events::Dispatch;
use crate::keepalive::Keeper;
use crate::lease::{local_expiry, DEFAULT_CLOCK_DRIFT};

/// Default time a session may spend in jeopardy (its local lease ran out
/// with no KeepAlive reply) while the client keeps retrying, before the
/// client takes it as `Expired`: 45 s (`CS-3`).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(45);

/// Where a session stands, as far as this client can tell (`CS-1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionState {
    /// The local lease is valid: the master holds the session.
    Normal,
    /// The local lease ran out without a reply. The master may or may not
    /// still hold the session; the grace period is running.
    Jeopardy,
    /// A KeepAlive succeeded during the grace period. Reported on the way
    /// back to `Normal`, which follows at once.
    Safe,
    /// A new master took over while the local lease was valid: the
    /// session, its locks and sequencers survive; subscriptions were made
    /// again and their streams report `EventsLost`, so re-read what you
    /// cache. Reported on the way back to `Normal`, which follows at once
    /// (`FO-6`).
    Failover,
    /// The grace period ran out, or the master said the session is gone:
    /// whatever relied on it may already be someone else's. Final.
    Expired,
    /// This client closed or detached the session (`CS-8`): it gave the
    /// session up, nothing was taken from it. Final.
    Closed,
}

impl SessionState {
    /// The lower-case name used by the CLI and in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Normal => "normal",
            SessionState::Jeopardy => "jeopardy",
            SessionState::Safe => "safe",
            SessionState::Failover => "failover",
            SessionState::Expired => "expired",
            SessionState::Closed => "closed",
        }
    }

    /// Whether no state follows: `Expired` or `Closed`.
    pub fn is_final(self) -> bool {
        matches!(self, SessionState::Expired | SessionState::Closed)
    }
}

/// How to create a session.
///
/// ```
/// use std::time::Duration;
/// use leasehold::SessionOptions;
///
/// let options = SessionOptions::new("indexer")
///     .lease(Duration::from_secs(10))
///     .lock_delay(Duration::ZERO)
///     .grace(Duration::from_secs(30));
/// assert_eq!(options.lock_delay, Some(Duration::ZERO));
/// ```
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// A label for people.
    pub name: String,
    /// Requested lease; `None` takes the master's default (12 s).
    pub lease: Option<Duration>,
    /// Requested lock-delay; `None` takes the default (15 s), zero means none.
    pub lock_delay: Option<Duration>,
    /// What the master does with the session's locks when it is invalidated.
    pub behavior: Behavior,
    /// How long jeopardy lasts before the session is taken as expired.
    pub grace: Duration,
    /// Allowance for the master's clock running faster than this one's, as a
    /// fraction (0.01 = 1%).
    pub clock_drift: f64,
    /// Health checks the session lives by: when one goes critical the master
    /// ends the session (`CHK-3`).
    pub checks: Vec<String>,
    /// Keys [`Session::get`] may keep in the session's cache; 0 turns the
    /// cache off (`CACHE-1`, `CACHE-8`).
    pub cache_keys: usize,
    /// Bytes of keys and contents the cache may hold.
    pub cache_bytes: usize,
}

impl SessionOptions {
    /// Options with every default and the given name.
    pub fn new(name: impl Into<String>) -> Self {
        SessionOptions {
            name: name.into(),
            lease: None,
            lock_delay: None,
            behavior: Behavior::Release,
            grace: DEFAULT_GRACE,
            clock_drift: DEFAULT_CLOCK_DRIFT,
            checks: Vec::new(),
            cache_keys: crate::cache::DEFAULT_CACHE_KEYS,
            cache_bytes: crate::cache::DEFAULT_CACHE_BYTES,
        }
    }

    /// Turns the session's cache on (the default) or off: off, every
    /// [`Session::get`] asks the master (`CACHE-1`).
    pub fn cache(mut self, on: bool) -> Self {
        self.cache_keys = if on {
            crate::cache::DEFAULT_CACHE_KEYS
        } else {
            0
        };
        self
    }

    /// Caps the session's cache at `keys` entries and `bytes` bytes; the
    /// least recently used entry goes first (`CACHE-8`).
    pub fn cache_capacity(mut self, keys: usize, bytes: usize) -> Self {
        self.cache_keys = keys;
        self.cache_bytes = bytes;
        self
    }

    /// Binds the session to a health check, which must exist and not be
    /// critical (`CHK-2`); may be called for several checks.
    pub fn check(mut self, name: impl Into<String>) -> Self {
        self.checks.push(name.into());
        self
    }

    /// Sets the requested lease.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Sets the lock-delay; zero disables it.
    pub fn lock_delay(mut self, lock_delay: Duration) -> Self {
        self.lock_delay = Some(lock_delay);
        self
    }

    /// Sets the behaviour on invalidation.
    pub fn behavior(mut self, behavior: Behavior) -> Self {
        self.behavior = behavior;
        self
    }

    /// Sets the grace period.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Sets the clock-rate allowance.
    pub fn clock_drift(mut self, drift: f64) -> Self {
        self.clock_drift = drift;
        self
    }
}

pub(crate) type Callback = Box<dyn Fn(SessionState) + Send + Sync>;

/// What a session's handles and its keeper task share.
#[derive(Default)]
pub(crate) struct Shared {
    /// Called with every state the session enters.
    pub(crate) callbacks: Mutex<Vec<Callback>>,
    /// Where events go.
    pub(crate) dispatch: Mutex<Dispatch>,
    /// When the local lease runs out (`LEASE-4`), kept by the keeper.
    pub(crate) local_expiry: Mutex<Option<Instant>>,
    /// Held while a subscription is made or ended on the master, since
    /// streams on the same key share one there (`EV-5`).
    pub(crate) subscribing: tokio::sync::Mutex<()>,
    /// What [`Session::get`] read (`CACHE-1`).
    pub(crate) cache: Mutex<crate::cache::Cache>,
}

impl Shared {
    pub(crate) fn dispatch(&self) -> std::sync::MutexGuard<'_, Dispatch> {
        self.dispatch.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn callbacks(&self) -> std::sync::MutexGuard<'_, Vec<Callback>> {
        self.callbacks.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn cache(&self) -> std::sync::MutexGuard<'_, crate::cache::Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How a session's keeper is told to stop.
#[derive(Debug)]
pub(crate) struct Stop {
    /// Destroy the session on the master, or leave it to expire.
    pub(crate) destroy: bool,
    pub(crate) done: oneshot::Sender<Result<(), ClientError>>,
}
pub(crate) type CloseTx = oneshot::Sender<Stop>;

/// A session on the master, kept alive by a background task for as long as
/// a clone of it exists. Dropping the last clone asks that task to destroy
/// it on the master (best effort), which it can do only while the runtime
/// runs: a program that returns from `main` with the session open leaves
/// it on the master until its lease runs out. [`Session::close`] destroys
/// it and reports the outcome: await it before returning.
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

struct Inner {
    token: SessionToken,
    client: Client,
    states: watch::Receiver<SessionState>,
    shared: Arc<Shared>,
    close: Mutex<Option<CloseTx>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(close) = self.close.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let (done, _) = oneshot::channel();
            let _ = close.send(Stop {
                destroy: true,
                done,
            });
        }
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.inner.token.id)
            .field("state", &self.state())
            .finish()
    }
}

impl Session {
    pub(crate) fn start(
        client: Client,
        token: SessionToken,
        epoch: u64,
        sent: Instant,
        lease: LeaseGrant,
        options: SessionOptions,
    ) -> Session {
        let (states_tx, states) = watch::channel(SessionState::Normal);
        let shared = Arc::new(Shared {
            cache: Mutex::new(crate::cache::Cache::new(
                options.cache_keys,
                options.cache_bytes,
            )),
            ..Shared::default()
        });
        let (close, close_rx) = oneshot::channel();
        let keeper = Keeper::new(
            client.clone(),
            token,
            epoch,
            local_expiry(sent, lease, options.clock_drift),
            &options,
            states_tx,
            shared.clone(),
        );
        tokio::spawn(keeper.run(close_rx));
        Session {
            inner: Arc::new(Inner {
                token,
                client,
                states,
                shared,
                close: Mutex::new(Some(close)),
            }),
        }
    }

    /// The session's id: public, as `ListSessions` and lock holders show
    /// it. Knowing it gives no right to act for the session.
    pub fn id(&self) -> SessionId {
        self.inner.token.id
    }

    /// The session's id with its secret: the right to act for it
    /// (`AUTH-2`). Give it only to a process that may keep the session
    /// alive, release its locks or destroy it ([`Client::attach_session`]).
    pub fn token(&self) -> SessionToken {
        self.inner.token
    }

    /// The client the session was created through.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    pub(crate) fn dispatch(&self) -> std::sync::MutexGuard<'_, Dispatch> {
        self.inner.shared.dispatch()
    }

    /// Held while a subscription is made or ended on the master, since
    /// streams on the same key share one subscription there (`EV-5`).
    pub(crate) fn subscribing(&self) -> &tokio::sync::Mutex<()> {
        &self.inner.shared.subscribing
    }

    /// A node's contents and metadata, or `None` if it does not exist, from
    /// this session's cache when it has them (no round trip), else from the
    /// master, which then tells this session before the node changes
    /// (`CACHE-1`..`CACHE-3`). A read from the cache never returns a value
    /// older than a write acknowledged before the read began.
    ///
    /// ```no_run
    /// # async fn example(client: leasehold::Client) -> Result<(), leasehold::ClientError> {
    /// use leasehold::SessionOptions;
    ///
    /// let session = client.create_session(SessionOptions::new("reader")).await?;
    /// let first = session.get("service/db/primary").await?; // the master
    /// let again = session.get("service/db/primary").await?; // the cache
    /// assert_eq!(first, again);
    /// assert_eq!(session.cache_stats().hits, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn get(&self, key: &str) -> Result<Option<NodeView>, ClientError> {
        Ok(self.read(key).await?.1)
    }

    /// A node's metadata alone, or `None` if it does not exist, as
    /// [`Session::get`] reads it.
    pub async fn stat(&self, key: &str) -> Result<Option<NodeStat>, ClientError> {
        Ok(self.read(key).await?.1.map(|n| n.stat))
    }

    /// How the session's cache has done so far.
    pub fn cache_stats(&self) -> CacheStats {
        self.inner.shared.cache().stats()
    }

    /// A key's index and node, from the cache or the master.
    async fn read(&self, key: &str) -> Result<crate::cache::Read, ClientError> {
        let clock = self.inner.client.clock();
        let wanted = self.inner.shared.cache().wanted();
        if !wanted {
            let read = self.inner.client.get_node(key, false).await?;
            return Ok((read.index, read.node));
        }
        let ticket = {
            let mut cache = self.inner.shared.cache();
            if let Some(read) = cache.lookup(key, clock.now()) {
                return Ok(read);
            }
            cache.begin_read(key)
        };
        let request = Request::GetCached(GetCached {
            key: key.to_string(),
            session: self.inner.token,
            dropped: ticket.dropped.clone(),
        });
        let answer = match self.inner.client.call(request).await {
            Ok(Response::Cached {
                index,
                node,
                cacheable,
            }) => Ok(((index, node), cacheable)),
            Ok(other) => Err(crate::client::unexpected(other)),
            Err(e) => Err(e),
        };
        let mut cache = self.inner.shared.cache();
        match answer {
            Ok((read, cacheable)) => {
                cache.end_read(key, ticket, Some((&read, cacheable)));
                Ok(read)
            }
            Err(e) => {
                cache.end_read(key, ticket, None);
                Err(e)
            }
        }
    }

    /// The session's state now.
    pub fn state(&self) -> SessionState {
        *self.inner.states.borrow()
    }

    /// When the local lease (`LEASE-4`) runs out unless a KeepAlive reply
    /// extends it; in `tokio::time`. Until then the master certainly holds
    /// the session, so work that must end while this client may act for it
    /// (a write under a lock) can check how long it has.
    pub fn local_lease_expiry(&self) -> Instant {
        let expiry = *self
            .inner
            .shared
            .local_expiry
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Kept in this client's clock (`ClientConfig::clock_rate`).
        self.inner
            .client
            .clock()
            .runtime_instant_before(expiry.expect("set when the session starts"))
    }

    /// A channel that always holds the latest state. It may skip the brief
    /// `Safe` between `Jeopardy` and `Normal`; callbacks see every transition.
    pub fn watch_state(&self) -> watch::Receiver<SessionState> {
        self.inner.states.clone()
    }

    /// Calls `callback` with every state the session enters from now on, in
    /// order, from the task that keeps the session alive. The callback must
    /// be quick and must not register callbacks itself.
    pub fn on_state_change(&self, callback: impl Fn(SessionState) + Send + Sync + 'static) {
        self.inner.shared.callbacks().push(Box::new(callback));
    }

    /// Resolves when the session has expired (or was closed): the signal to
    /// stop whatever relied on it.
    pub async fn expired(&self) {
        let mut states = self.inner.states.clone();
        let _ = states.wait_for(|s| s.is_final()).await;
    }

    /// Stops keeping the session alive and destroys it on the master,
    /// releasing the locks it holds first so that they go to their next
    /// holders without lock-delay (`LOCK-11`). Closing a session that has
    /// already expired succeeds. The session, and
    /// every clone of it, is `Closed` afterwards.
    pub async fn close(self) -> Result<(), ClientError> {
        self.stop(true).await
    }

    /// Stops keeping the session alive but leaves it on the master, where it
    /// lives until its lease runs out unless a holder of its token keeps it
    /// alive ([`Client::attach_session`]). Returns the token. For this
    /// client the session is over: it, and every clone of it, is `Closed`
    /// afterwards.
    pub async fn detach(self) -> SessionToken {
        let token = self.token();
        let _ = self.stop(false).await;
        token
    }

    async fn stop(self, destroy: bool) -> Result<(), ClientError> {
        let close = self
            .inner
            .close
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some(close) = close else {
            return Ok(());
        };
        let (done, rx) = oneshot::channel();
        if close.send(Stop { destroy, done }).is_err() {
            return Ok(()); // the keeper ended: the session already expired
        }
        rx.await.unwrap_or(Ok(()))
    }
}
