//! Locks held by a session, with their sequencers (SPEC "Locks").

use std::time::Duration;

use leasehold_protocol::{Acquire, LockMode, Request, Response, Sequencer, SessionId};
use tokio::sync::watch;

use crate::client::{unexpected, Client};
use crate::error::ClientError;
use crate::events::LockSignal;
use crate::session::{Session, SessionState};

/// The longest a blocking acquire may wait at the master.
const LONGEST_WAIT: Duration = Duration::from_secs(600);

/// How to take a lock.
///
/// ```
/// use std::time::Duration;
/// use leasehold::LockOptions;
///
/// let options = LockOptions::exclusive()
///     .contents("10.0.0.7:8080")
///     .timeout(Duration::from_secs(30));
/// assert_eq!(options.timeout, Some(Duration::from_secs(30)));
/// ```
#[derive(Debug, Clone)]
pub struct LockOptions {
    /// Exclusive or shared.
    pub mode: LockMode,
    /// Written to the node in the same step as the acquisition.
    pub contents: Option<Vec<u8>>,
    /// How long [`Session::lock`] waits in line (at most 10 minutes, the
    /// default).
    pub timeout: Option<Duration>,
    /// Whether a node this acquire creates goes away again once the lock
    /// is free and nobody waits (see [`LockOptions::transient`]).
    pub transient: bool,
}

impl LockOptions {
    /// An exclusive lock.
    pub fn exclusive() -> Self {
        LockOptions {
            mode: LockMode::Exclusive,
            contents: None,
            timeout: None,
            transient: false,
        }
    }

    /// A shared lock.
    pub fn shared() -> Self {
        LockOptions {
            mode: LockMode::Shared,
            ..LockOptions::exclusive()
        }
    }

    /// Contents to write with the acquisition.
    pub fn contents(mut self, contents: impl Into<Vec<u8>>) -> Self {
        self.contents = Some(contents.into());
        self
    }

    /// How long to wait in line.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The node is there for the lock alone: if this acquire creates it,
    /// the master deletes it when the lock is next free with nobody
    /// waiting, so locks taken on throwaway keys leave nothing behind. A
    /// node that already exists, or that anyone writes with `put`, is
    /// kept (SPEC `LOCK-12`).
    ///
    /// ```no_run
    /// # async fn example(session: leasehold::Session) -> Result<(), leasehold::ClientError> {
    /// use leasehold::LockOptions;
    ///
    /// let guard = session
    ///     .lock("jobs/nightly", LockOptions::exclusive().transient())
    ///     .await?;
    /// // ... work while guard.is_held() ...
    /// guard.release().await?; // jobs/nightly is gone unless someone waits
    /// # Ok(())
    /// # }
    /// ```
    pub fn transient(mut self) -> Self {
        self.transient = true;
        self
    }
}

/// A lock held by a session. Dropping it releases the lock (best effort);
/// [`LockGuard::release`] does so and reports the outcome.
#[derive(Debug)]
pub struct LockGuard {
    session: Session,
    key: String,
    signal: watch::Receiver<LockSignal>,
    sequencer: Sequencer,
    bytes: Vec<u8>,
    /// Asked for a transient node; a rewrite asks so again, or it would
    /// make the node permanent.
    transient: bool,
    released: bool,
}

impl LockGuard {
    /// The locked key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The sequencer of this holding: pass it to the servers the lock
    /// protects, which check it with [`Client::check_sequencer`] or refuse
    /// any older generation than the newest they have seen.
    pub fn sequencer(&self) -> &Sequencer {
        &self.sequencer
    }

    /// The sequencer as the opaque bytes the master checks.
    pub fn sequencer_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether the lock can still be relied on: its session is normal, the
    /// master has not said it took this holding away (a `LockLost` for an
    /// earlier holding of the key is not about it, `LOCK-13`), and no
    /// events were lost (one of them may have said so) (`LOCK-10`).
    pub fn is_held(&self) -> bool {
        matches!(
            self.session.state(),
            SessionState::Normal | SessionState::Safe | SessionState::Failover
        ) && !self.signal.borrow().loses(self.sequencer.lock_generation)
    }

    /// Resolves as soon as the lock can no longer be relied on: its session
    /// left the normal state (jeopardy: the master may have released it
    /// already; expired: it has), the master took it away (its node was
    /// deleted), or events were lost, one of which may have said so
    /// (`LOCK-10`). Stop acting as the holder then.
    pub async fn lost(&self) {
        let mut signal = self.signal.clone();
        // The state channel keeps only the latest state, which may already
        // be `Normal` again after a brief jeopardy: jeopardies are counted.
        let seen = signal.borrow().jeopardies;
        let generation = self.sequencer.lock_generation;
        let mut states = self.session.watch_state();
        tokio::select! {
            _ = states.wait_for(|s| *s == SessionState::Jeopardy || s.is_final()) => {}
            _ = signal.wait_for(|s| s.loses(generation) || s.jeopardies > seen) => {}
        }
    }

    /// Resolves with the session that waits for this lock, as soon as one
    /// does: a holder that can hand the lock over may release it (`EV-6`).
    pub async fn conflict(&self) -> SessionId {
        let mut signal = self.signal.clone();
        loop {
            if let Some(waiter) = signal.borrow_and_update().conflict {
                return waiter;
            }
            if signal.changed().await.is_err() {
                // The guard's record is gone (released): nobody will ask.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Writes `contents` to the locked node in one step, as acquiring the
    /// lock again with contents does. The lock generation (and so this
    /// guard's sequencer) is unchanged; the content generation rises as
    /// with any write (`LOCK-2`).
    /// Fails with [`ClientError::Conflict`] if the lock can no longer be
    /// relied on: it never takes a lost lock anew.
    pub async fn rewrite(&self, contents: impl Into<Vec<u8>>) -> Result<(), ClientError> {
        if !self.is_held() {
            return Err(ClientError::Conflict(format!(
                "the lock on '{}' is lost; not rewriting it",
                self.key
            )));
        }
        let request = Request::Acquire(Acquire {
            key: self.key.clone(),
            session: self.session.token(),
            mode: self.sequencer.mode,
            contents: Some(contents.into()),
            wait_ms: None,
            transient: self.transient,
        });
        match self.session.client().call(request).await? {
            Response::Acquired { sequencer, .. } if sequencer == self.bytes => Ok(()),
            Response::Acquired { .. } => {
                // The holding was lost and this took the lock anew: give
                // that back rather than hold a lock nobody acts for.
                let _ = release(self.session.client(), &self.key, &self.session).await;
                Err(ClientError::Conflict(format!(
                    "the lock on '{}' was lost before the rewrite",
                    self.key
                )))
            }
            other => Err(unexpected(other)),
        }
    }

    /// Forgets the lock without a request: its node was deleted, which
    /// freed it (`LOCK-8`).
    pub(crate) fn forget(mut self) {
        self.released = true;
        self.session.forget_lock(&self.key);
    }

    /// Gives the lock back.
    pub async fn release(mut self) -> Result<(), ClientError> {
        self.released = true;
        self.session.forget_lock(&self.key);
        release(self.session.client(), &self.key, &self.session).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.session.forget_lock(&self.key);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let session = self.session.clone();
            let key = std::mem::take(&mut self.key);
            runtime.spawn(async move {
                let _ = release(session.client(), &key, &session).await;
            });
        }
    }
}

async fn release(client: &Client, key: &str, session: &Session) -> Result<(), ClientError> {
    let request = Request::Release {
        key: key.to_string(),
        session: session.token(),
    };
    match client.call(request).await? {
        Response::Released { .. } => Ok(()),
        other => Err(unexpected(other)),
    }
}

impl Session {
    /// Waits in line for the lock of `key` (first come, first served), up
    /// to the options' timeout; a lock in lock-delay is waited out. Fails
    /// with `LockHeld` or `LockDelayed` if the timeout passes first.
    ///
    /// ```no_run
    /// # async fn example(session: leasehold::Session) -> Result<(), leasehold::ClientError> {
    /// use leasehold::LockOptions;
    ///
    /// let guard = session.lock("jobs/nightly-report", LockOptions::exclusive()).await?;
    /// tokio::select! {
    ///     _ = guard.lost() => eprintln!("lost the lock: stop"),
    ///     _ = run_report(guard.sequencer_bytes()) => {}
    /// }
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// # async fn run_report(_sequencer: &[u8]) {}
    /// ```
    pub async fn lock(&self, key: &str, options: LockOptions) -> Result<LockGuard, ClientError> {
        let wait = options.timeout.unwrap_or(LONGEST_WAIT).min(LONGEST_WAIT);
        let wait_ms = (wait.as_millis() as u64).max(1);
        self.acquire(key, options, Some(wait_ms), wait).await
    }

    /// Takes the lock of `key` only if it can be had at once; fails with
    /// `LockHeld`, or with `LockDelayed` saying how long lock-delay lasts.
    pub async fn try_lock(
        &self,
        key: &str,
        options: LockOptions,
    ) -> Result<LockGuard, ClientError> {
        self.acquire(key, options, None, Duration::ZERO).await
    }

    async fn acquire(
        &self,
        key: &str,
        options: LockOptions,
        wait_ms: Option<u64>,
        held: Duration,
    ) -> Result<LockGuard, ClientError> {
        let request = Request::Acquire(Acquire {
            key: key.to_string(),
            session: self.token(),
            mode: options.mode,
            contents: options.contents,
            wait_ms,
            transient: options.transient,
        });
        // Registered before the request goes out: a LockLost the keeper
        // delivers before this task sees the reply must not be dropped.
        let mut registration = Registration {
            fresh: !self.dispatch().locks.contains_key(key),
            session: self,
            key,
            kept: false,
        };
        let signal = self.remember_lock(key);
        match self.client().call_waiting(request, held).await? {
            Response::Acquired { sequencer, .. } => {
                let parsed = Sequencer::from_bytes(&sequencer).ok_or_else(|| {
                    ClientError::Protocol("the master sent a malformed sequencer".into())
                })?;
                registration.kept = true;
                Ok(LockGuard {
                    session: self.clone(),
                    key: key.to_string(),
                    signal,
                    sequencer: parsed,
                    bytes: sequencer,
                    transient: options.transient,
                    released: false,
                })
            }
            other => Err(unexpected(other)),
        }
    }
}

/// A lock's signal registered for an acquire in flight; forgotten unless
/// the acquire succeeds, however it ends (an error, or the caller giving
/// up on the future).
struct Registration<'a> {
    session: &'a Session,
    key: &'a str,
    /// Whether this acquire made the registration (a second guard for a
    /// holding shares the first's and must leave it).
    fresh: bool,
    kept: bool,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if self.fresh && !self.kept {
            self.session.forget_lock(self.key);
        }
    }
}

impl Client {
    /// Whether `sequencer` is still valid: the session it names still holds
    /// that lock, in the same mode, on the same node, and the lock has not
    /// been freed and taken again since (`LOCK-7`).
    pub async fn check_sequencer(&self, sequencer: &[u8]) -> Result<bool, ClientError> {
        let request = Request::CheckSequencer {
            sequencer: sequencer.to_vec(),
        };
        match self.call(request).await? {
            Response::SequencerChecked { valid } => Ok(valid),
            other => Err(unexpected(other)),
        }
    }
}
