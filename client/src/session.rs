//! [`Session`]: a session on the master, kept alive in the background, with
//! its state (SPEC "Client session states").

use std::sync::{Arc, Mutex};

use leasehold_protocol::{
    CreateSession, ErrorCode, GetCached, KeepAlive, LeaseGrant, NodeStat, NodeView, Request,
    Response, SessionId, SessionToken,
};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::cache::CacheStats;
use crate::client::{unexpected, Client};
use crate::config::SessionOptions;
use crate::error::ClientError;
use crate::events::Dispatch;
use crate::keepalive::{FirstGrant, Keeper};
use crate::session_machine::SessionState;
use crate::shared::{CloseTx, Shared, Stop};

/// Sessions are made through a [`Client`]: created anew, or taken over
/// from their token.
impl Client {
    /// Creates a session and starts keeping it alive.
    pub async fn create_session(&self, options: SessionOptions) -> Result<Session, ClientError> {
        let request = Request::CreateSession(CreateSession {
            name: options.name.clone(),
            lease_ms: options.lease.map(|d| d.as_millis() as u64),
            lock_delay_ms: options.lock_delay.map(|d| d.as_millis() as u64),
            behavior: options.behavior,
            checks: options.checks.clone(),
        });
        match self.call_sent(request).await? {
            (
                Response::SessionCreated {
                    session,
                    secret,
                    epoch,
                    lease,
                },
                sent,
            ) => Ok(Session::start(
                self.clone(),
                SessionToken {
                    id: session,
                    secret,
                },
                epoch,
                sent,
                lease,
                options,
            )),
            (other, _) => Err(unexpected(other)),
        }
    }

    /// Takes over keeping alive a session created elsewhere, given its
    /// token (what [`Session::detach`] returns and `leasehold session
    /// create` prints). From then on it behaves as a session this client
    /// created; of `options` only the grace period and the clock drift
    /// apply, since the master fixed the rest when it was created.
    ///
    /// ```no_run
    /// use leasehold::{Client, SessionOptions, SessionToken};
    ///
    /// # async fn example(token: SessionToken) -> Result<(), leasehold::ClientError> {
    /// let client = Client::connect("127.0.0.1:7171").await?;
    /// let session = client.attach_session(token, SessionOptions::new("cli")).await?;
    /// session.close().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn attach_session(
        &self,
        token: SessionToken,
        options: SessionOptions,
    ) -> Result<Session, ClientError> {
        let mut epoch = self.epoch().await?;
        for _ in 0..2 {
            let request = Request::KeepAlive(KeepAlive {
                session: token,
                epoch,
                acked_seq: 0,
                hold: false,
            });
            match self.call_sent(request).await {
                Ok((Response::KeepAlive { epoch, lease, .. }, sent)) => {
                    // The reply's events are not acknowledged, so the
                    // session's next KeepAlive brings them again and they
                    // are delivered then.
                    return Ok(Session::start(
                        self.clone(),
                        token,
                        epoch,
                        sent,
                        lease,
                        options,
                    ));
                }
                Ok((other, _)) => return Err(unexpected(other)),
                Err(e) => match e.code() {
                    Some(ErrorCode::WrongEpoch { current }) => epoch = current,
                    _ => return Err(e),
                },
            }
        }
        Err(ClientError::Protocol(
            "the master's epoch changed twice while attaching".into(),
        ))
    }
}

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
            FirstGrant { epoch, sent, lease },
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
