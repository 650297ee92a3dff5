//! [`Client`]: a handle to one Leasehold master, shared by every session and
//! call made through it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_protocol::{
    Authority, ErrorCode, LockInfo, LockListing, MasterStatus, Request, Response, SessionId,
    SessionInfo, SessionLocks, SessionToken,
};

use crate::clock::Clock;
use crate::config::ClientConfig;
use crate::connection::Connection;
use crate::error::ClientError;
use crate::tls::ClientTls;
use crate::transport::{CellConnector, Connector};

/// What [`Client::save_snapshot`] saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavedSnapshot {
    /// The state's global index it holds.
    pub index: u64,
    /// The epoch of the master that took it.
    pub epoch: u64,
    /// Its length in bytes.
    pub bytes: u64,
}

/// A connection to a Leasehold master, reopened as needed. Cheap to clone.
///
/// ```no_run
/// use leasehold::{Client, SessionOptions};
///
/// # async fn example() -> Result<(), leasehold::ClientError> {
/// let client = Client::connect("127.0.0.1:7171").await?;
/// let session = client.create_session(SessionOptions::new("worker-1")).await?;
/// println!("session {} is {:?}", session.id(), session.state());
/// session.close().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    connector: Box<dyn Connector>,
    config: ClientConfig,
    current: Mutex<Option<Connection>>,
    /// Held while a connection is being opened: one attempt at a time.
    connecting: tokio::sync::Mutex<Option<std::io::ErrorKind>>,
    /// Connection attempts finished so far.
    attempts: AtomicU64,
    /// Connections opened so far: a session backing off after failures
    /// tries again at once on a new one (`CS-2`).
    opened: tokio::sync::watch::Sender<u64>,
    /// Where sessions' timers and the connections' time stamps read the
    /// time.
    clock: Clock,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("addr", &self.inner.connector.addr())
            .finish()
    }
}

impl Client {
    /// Connects to the master at `addr` (`host:port`) over TCP, or to the
    /// master of the cell whose members `addr` lists, separated by commas
    /// (`a:7171,b:7171,c:7171`). Fails at once if it cannot be reached.
    pub async fn connect(addr: impl Into<String>) -> Result<Client, ClientError> {
        Client::connect_with(addr, ClientConfig::default()).await
    }

    /// Connects to the master at `addr` (`host:port`) over TCP with
    /// `config`.
    pub async fn connect_with(
        addr: impl Into<String>,
        config: ClientConfig,
    ) -> Result<Client, ClientError> {
        let addr = addr.into();
        let tls = match &config.tls {
            None => None,
            Some(options) => Some(ClientTls::load(options).map_err(ClientError::Tls)?),
        };
        // One address too: a cell's member that is not the master names
        // it, and the client goes there (`CELL-7`); a single master never
        // does, and is simply connected to again.
        let members = CellConnector::parse(&addr).with_tls(tls);
        Client::with_connector(members, config).await
    }

    /// Connects through any [`Connector`], such as a simulated network's.
    pub async fn with_connector(
        connector: impl Connector,
        config: ClientConfig,
    ) -> Result<Client, ClientError> {
        let client = Client {
            inner: Arc::new(Inner {
                connector: Box::new(connector),
                current: Mutex::new(None),
                connecting: tokio::sync::Mutex::new(None),
                attempts: AtomicU64::new(0),
                opened: tokio::sync::watch::Sender::new(0),
                clock: Clock::new(config.clock_rate),
                config,
            }),
        };
        client.connection().await?;
        Ok(client)
    }

    /// This client's clock.
    pub(crate) fn clock(&self) -> Clock {
        self.inner.clock
    }

    /// The current connection, opening one if there is none.
    pub(crate) async fn connection(&self) -> Result<Connection, ClientError> {
        if let Some(conn) = self.current().clone() {
            return Ok(conn);
        }
        // One attempt at a time, shared: when a connection carrying many
        // sessions breaks, each of them asks for a new one at once, and a
        // connect apiece would have the master face a storm of connections
        // as it comes back. Callers that waited for an attempt share its
        // connection, or its failure. The lock on `current` is not held
        // meanwhile, so abandoning a connection never waits for a connect.
        let seen = self.inner.attempts.load(Ordering::Acquire);
        let mut connecting = self.inner.connecting.lock().await;
        let addr = self.inner.connector.addr();
        if let Some(conn) = self.current().clone() {
            return Ok(conn);
        }
        if self.inner.attempts.load(Ordering::Acquire) != seen {
            if let Some(kind) = *connecting {
                return Err(ClientError::Connect {
                    addr,
                    source: std::io::Error::new(kind, "the connection attempt under way failed"),
                });
            }
        }
        let outcome = self.open(&addr).await;
        *connecting = outcome.as_ref().err().map(|e| match e {
            ClientError::Connect { source, .. } => source.kind(),
            _ => std::io::ErrorKind::ConnectionAborted,
        });
        self.inner.attempts.fetch_add(1, Ordering::AcqRel);
        let conn = outcome?;
        let conn = self.current().get_or_insert(conn).clone();
        self.inner.opened.send_modify(|n| *n += 1);
        Ok(conn)
    }

    /// Changes each time this client opens a connection.
    pub(crate) fn opened(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.opened.subscribe()
    }

    async fn open(&self, addr: &str) -> Result<Connection, ClientError> {
        let timeout = self.inner.config.connect_timeout;
        let addr = addr.to_string();
        // A member that is not the master names it (or says there is none
        // now): go there, within the same time allowed (`CELL-7`).
        // A member that cannot be reached (down, or cut off) costs its
        // share of the time, and the next is tried (`CELL-7`).
        let members = self.inner.connector.members().max(1);
        let each = if members > 1 {
            (timeout / members as u32).max(Duration::from_millis(250))
        } else {
            timeout
        };
        // What the members said last, for the error if none serves in time.
        let heard = std::sync::Mutex::new("no member answered");
        let find = async {
            // Members that could not be reached since the last pause: a
            // refused connect costs nothing, so the next member is tried at
            // once, and the pause comes only after a round of them.
            let mut unreached = 0;
            loop {
                match self.open_one(&addr, each).await {
                    Err(ClientError::Redirected { master }) => {
                        if master.is_none() {
                            *heard.lock().unwrap_or_else(|e| e.into_inner()) =
                                "a member answered that the cell has no master now (an \
                                 election, or too few members up to elect one: `leasehold \
                                 cell status` shows which answer)";
                            // An election is under way: give it a moment.
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            unreached = 0;
                        }
                        self.inner.connector.redirected(master.as_deref());
                    }
                    // Down, cut off, still starting, or closing its clients'
                    // connections as it stops being master: the connector
                    // goes to the next member, until the time allowed is up.
                    Err(
                        ClientError::Connect { .. }
                        | ClientError::Timeout(_)
                        | ClientError::Disconnected,
                    ) if members > 1 => {
                        unreached += 1;
                        if unreached >= members {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            unreached = 0;
                        }
                    }
                    other => return other,
                }
            }
        };
        let found = tokio::time::timeout(timeout, find).await;
        found.map_err(|_| {
            let heard = *heard.lock().unwrap_or_else(|e| e.into_inner());
            ClientError::Connect {
                addr: addr.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("timed out finding the cell's master: {heard}"),
                ),
            }
        })?
    }

    async fn open_one(&self, addr: &str, timeout: Duration) -> Result<Connection, ClientError> {
        let addr = addr.to_string();
        let open = async {
            let transport = self.inner.connector.connect().await.map_err(|source| {
                // A certificate that is wrong stays wrong: no retry.
                match crate::tls::lasting_failure(&source) {
                    Some(why) => ClientError::Tls(why),
                    None => ClientError::Connect {
                        addr: addr.clone(),
                        source,
                    },
                }
            })?;
            let conn = Connection::open(
                transport,
                self.inner.config.max_frame,
                timeout,
                self.inner.clock,
            )
            .await?;
            // Before the connection is anyone's: every request on it acts
            // as the token's principal (`ID-2`).
            if let Some(token) = &self.inner.config.token {
                let authenticate = Request::Authenticate {
                    token: token.clone(),
                };
                match conn.request(authenticate).await? {
                    (Response::Identity(_), _) => {}
                    (other, _) => {
                        return Err(ClientError::Protocol(format!(
                            "expected Identity, got {other:?}"
                        )))
                    }
                }
            }
            Ok(conn)
        };
        let conn =
            tokio::time::timeout(timeout, open)
                .await
                .map_err(|_| ClientError::Connect {
                    addr: addr.clone(),
                    source: std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"),
                })??;
        Ok(conn)
    }

    /// The epoch announced by the master of the open connection, which a
    /// request sent now would reach; `None` if a new one must be opened.
    pub(crate) fn current_epoch(&self) -> Option<u64> {
        self.current()
            .as_ref()
            .filter(|conn| conn.is_open())
            .map(|conn| conn.welcome().epoch)
    }

    /// The margin the open connection's master keeps before a lease's end
    /// when it answers a held KeepAlive (`KA-2`), if a connection is open.
    pub(crate) fn keepalive_margin(&self) -> Option<Duration> {
        self.current()
            .as_ref()
            .filter(|conn| conn.is_open())
            .map(|conn| Duration::from_millis(conn.welcome().limits.keepalive_margin_ms))
    }

    fn current(&self) -> std::sync::MutexGuard<'_, Option<Connection>> {
        self.inner.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops using connection `id` for new calls if it is the current one;
    /// the next call opens a new connection. Calls already in flight on it
    /// carry on.
    pub(crate) fn abandon(&self, id: u64) {
        let mut current = self.current();
        if current.as_ref().is_some_and(|c| c.id() == id) {
            *current = None;
            self.inner.connector.abandoned();
        }
    }

    /// Abandons connection `id` (as [`Client::abandon`]) unless it has
    /// delivered a frame within `window` before `now`: one that is
    /// delivering replies is slow, not dead. Says whether it was abandoned.
    pub(crate) fn abandon_if_silent(
        &self,
        id: u64,
        window: Duration,
        now: tokio::time::Instant,
    ) -> bool {
        let mut current = self.current();
        let silent = current.as_ref().is_some_and(|c| {
            c.id() == id && c.heard().latest().is_some_and(|at| at + window <= now)
        });
        if silent {
            *current = None;
            self.inner.connector.abandoned();
        }
        silent
    }

    /// Sends `request` on `conn`, abandoning the connection if it broke.
    /// Says when the request was written, with the reply.
    pub(crate) async fn call_on(
        &self,
        conn: &Connection,
        request: Request,
    ) -> Result<(Response, tokio::time::Instant), ClientError> {
        let result = conn.request(request).await;
        if matches!(
            result,
            Err(ClientError::Disconnected | ClientError::Closed(_) | ClientError::Interrupted(_))
        ) {
            self.abandon(conn.id());
        }
        result
    }

    /// Sends `request` on the current connection and waits for its reply at
    /// most the request timeout; a connection that times out is abandoned.
    pub(crate) async fn call(&self, request: Request) -> Result<Response, ClientError> {
        self.call_waiting(request, Duration::ZERO).await
    }

    /// As [`Client::call`], also saying when the request that was answered
    /// was written: a lease in the reply counts from then (`LEASE-4`).
    pub(crate) async fn call_sent(
        &self,
        request: Request,
    ) -> Result<(Response, tokio::time::Instant), ClientError> {
        self.call_retrying(request, Duration::ZERO).await
    }

    /// Like [`Client::call`], for a request the server holds for up to
    /// `held` on purpose: the timeout is that much longer.
    ///
    /// A request refused with `FailoverInProgress` is sent again after the
    /// master's hint, until the request timeout: the session acknowledges
    /// the fail-over event on its next KeepAlive, moments later (`FO-5`).
    /// So is one refused with `Congested`, which the master did not carry
    /// out because this connection's replies were arriving faster than
    /// they were read (`CONN-9`).
    pub(crate) async fn call_waiting(
        &self,
        request: Request,
        held: Duration,
    ) -> Result<Response, ClientError> {
        self.call_retrying(request, held)
            .await
            .map(|(response, _)| response)
    }

    async fn call_retrying(
        &self,
        request: Request,
        held: Duration,
    ) -> Result<(Response, tokio::time::Instant), ClientError> {
        // Retries go on for up to the request timeout from the first
        // refusal, then the refusal in hand is the answer. Set only then,
        // so a request answered at once costs no timer.
        let mut budget: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
        loop {
            let result = self.call_once(request.clone(), held).await;
            let hint = match &result {
                Err(e) => match e.code() {
                    Some(
                        ErrorCode::FailoverInProgress { retry_after_ms }
                        | ErrorCode::Congested { retry_after_ms },
                    ) => retry_after_ms,
                    _ => return result,
                },
                Ok(_) => return result,
            };
            let timeout = self.inner.config.request_timeout;
            let budget = budget.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
            tokio::select! {
                biased;
                () = budget.as_mut() => return result,
                () = tokio::time::sleep(Duration::from_millis(hint.max(1))) => {}
            }
        }
    }

    async fn call_once(
        &self,
        request: Request,
        held: Duration,
    ) -> Result<(Response, tokio::time::Instant), ClientError> {
        let conn = self.connection().await?;
        let timeout = self.inner.config.request_timeout + held;
        match tokio::time::timeout(timeout, self.call_on(&conn, request)).await {
            Ok(result) => result,
            Err(_) => {
                self.abandon(conn.id());
                Err(ClientError::Timeout(timeout))
            }
        }
    }

    /// How long a request waits for its answer (`ClientConfig`).
    pub(crate) fn request_timeout(&self) -> Duration {
        self.inner.config.request_timeout
    }

    /// The master's epoch, as last announced to this client.
    pub async fn epoch(&self) -> Result<u64, ClientError> {
        Ok(self.connection().await?.welcome().epoch)
    }

    /// The authority this client's requests claim when they end or take
    /// away what belongs to a session: the operator's, if configured.
    pub(crate) fn authority(&self) -> Authority {
        match &self.inner.config.operator_token {
            Some(token) => Authority::Operator(token.clone()),
            None => Authority::Anonymous,
        }
    }

    /// What the master knows of a session.
    pub async fn session_info(&self, session: SessionId) -> Result<SessionInfo, ClientError> {
        match self.call(Request::SessionInfo { session }).await? {
            Response::SessionInfo(info) => Ok(info),
            other => Err(unexpected(other)),
        }
    }

    /// The locks `session` holds and waits for (`SES-11`).
    ///
    /// ```no_run
    /// # async fn example(client: leasehold::Client, id: leasehold::SessionId) -> Result<(), leasehold::ClientError> {
    /// let locks = client.session_locks(id).await?;
    /// for (key, mode) in &locks.held {
    ///     println!("holds {key} {mode:?}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn session_locks(&self, session: SessionId) -> Result<SessionLocks, ClientError> {
        match self.call(Request::SessionLocks { session }).await? {
            Response::SessionLocks(locks) => Ok(locks),
            other => Err(unexpected(other)),
        }
    }

    /// Who holds the lock of `key`, who waits for it (first in line
    /// first), and how long its lock-delay lasts (`LOCK-14`): a lock in
    /// lock-delay is not free, though nobody holds it.
    ///
    /// ```no_run
    /// # async fn example(client: leasehold::Client) -> Result<(), leasehold::ClientError> {
    /// let lock = client.lock_info("jobs/nightly").await?;
    /// if let Some(ms) = lock.delay_remaining_ms {
    ///     println!("in lock-delay for {ms} ms more");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_info(&self, key: &str) -> Result<LockInfo, ClientError> {
        let request = Request::LockInfo {
            key: key.to_string(),
        };
        match self.call(request).await? {
            Response::LockInfo(info) => Ok(info),
            other => Err(unexpected(other)),
        }
    }

    /// Every lock at or below `prefix` that is held, awaited or in
    /// lock-delay, in key order, fetched a page at a time (`LOCK-16`): who
    /// holds each and for how long, who waits first, and how long its
    /// lock-delay lasts. With access control on, only keys this client
    /// may read.
    ///
    /// ```no_run
    /// # async fn example(client: leasehold::Client) -> Result<(), leasehold::ClientError> {
    /// for lock in client.list_locks("jobs/").await? {
    ///     for holder in &lock.holders {
    ///         println!("{} held by {} for {:?} ms", lock.key, holder.name, holder.held_ms);
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn list_locks(&self, prefix: &str) -> Result<Vec<LockListing>, ClientError> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let request = Request::ListLocks {
                prefix: prefix.to_string(),
                after: after.take(),
                limit: 0,
            };
            match self.call(request).await? {
                Response::Locks { locks, more } => {
                    after = locks.last().map(|l| l.key.clone());
                    all.extend(locks);
                    if !more || after.is_none() {
                        return Ok(all);
                    }
                }
                other => return Err(unexpected(other)),
            }
        }
    }

    /// What the master serves, in figures (`OPS-4`): its epoch and index,
    /// sessions, nodes, locks, waiters and what its data directory holds.
    ///
    /// ```no_run
    /// # async fn example(client: leasehold::Client) -> Result<(), leasehold::ClientError> {
    /// let status = client.status().await?;
    /// println!("epoch {}: {} sessions, {} locks held", status.epoch, status.sessions, status.locks_held);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn status(&self) -> Result<MasterStatus, ClientError> {
        match self.call(Request::Status).await? {
            Response::Status(status) => Ok(status),
            other => Err(unexpected(other)),
        }
    }

    /// Takes a consistent snapshot of the master's whole state, as of
    /// when it answers, and writes it to `out` a piece at a time, calling
    /// `progress(written, total)` after each (`OPS-6`). The master answers
    /// only once everything the snapshot holds is durable. The bytes are
    /// a data directory's `snapshot` file: `leasehold snapshot restore`
    /// makes a data directory of them. It needs `admin` on every key, or
    /// with access control off and an operator token, the operator: it
    /// holds every session's secret.
    ///
    /// ```no_run
    /// # async fn example(client: leasehold::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut file = std::fs::File::create("leasehold.snap")?;
    /// let saved = client.save_snapshot(&mut file, |done, total| eprint!("\r{done}/{total}")).await?;
    /// file.sync_all()?;
    /// println!("index {} of epoch {}", saved.index, saved.epoch);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn save_snapshot(
        &self,
        out: &mut impl std::io::Write,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<SavedSnapshot, ClientError> {
        let (id, total, index, epoch) = match self.call(Request::SaveSnapshot).await? {
            Response::SnapshotSaved {
                id,
                bytes,
                index,
                epoch,
            } => (id, bytes, index, epoch),
            other => return Err(unexpected(other)),
        };
        let mut offset = 0;
        progress(0, total);
        while offset < total {
            let bytes = match self.call(Request::ReadSnapshot { id, offset }).await? {
                Response::SnapshotBytes { bytes, .. } if !bytes.is_empty() => bytes,
                other => return Err(unexpected(other)),
            };
            out.write_all(&bytes).map_err(|source| ClientError::Write {
                what: "the snapshot",
                source,
            })?;
            offset += bytes.len() as u64;
            progress(offset, total);
        }
        Ok(SavedSnapshot {
            index,
            epoch,
            bytes: total,
        })
    }

    /// Every live session on the master, in id order, fetched a page at a
    /// time.
    pub async fn list_sessions(&self) -> Result<Vec<SessionInfo>, ClientError> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            match self.call(Request::ListSessions { after, limit: 0 }).await? {
                Response::Sessions { sessions, more } => {
                    after = sessions.last().map(|s| s.session);
                    all.extend(sessions);
                    if !more || after.is_none() {
                        return Ok(all);
                    }
                }
                other => return Err(unexpected(other)),
            }
        }
    }

    /// Destroys a session by id, as an operator may need to. A master with
    /// an operator token refuses it with `PermissionDenied` unless this
    /// client was configured with that token
    /// ([`ClientConfig::operator_token`]); a session's owner closes it
    /// with [`Session::close`](crate::Session::close) or [`Client::destroy_session_by_token`].
    pub async fn destroy_session(&self, session: SessionId) -> Result<(), ClientError> {
        let authority = self.authority();
        match self
            .call(Request::DestroySession { session, authority })
            .await?
        {
            Response::Destroyed => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Destroys the session `token` proves, as its owner (`AUTH-3`).
    pub async fn destroy_session_by_token(&self, token: SessionToken) -> Result<(), ClientError> {
        let request = Request::DestroySession {
            session: token.id,
            authority: Authority::Session(token),
        };
        match self.call(request).await? {
            Response::Destroyed => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

pub(crate) fn unexpected(response: Response) -> ClientError {
    ClientError::Protocol(format!("unexpected reply {response:?}"))
}
