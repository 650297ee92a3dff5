//! Locks held by a session, with their sequencers (SPEC "Locks").

use std::future::Future;
use std::time::Duration;

use leasehold_protocol::backoff::retry_delay;
use leasehold_protocol::{Acquire, LockMode, Request, Response, Sequencer, SessionId};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::client::{unexpected, Client};
use crate::config::{LONGEST_WAIT, RELEASE_RIDES};
use crate::error::ClientError;
use crate::events::LockSignal;
use crate::keepalive::salt_of;
use crate::release::release_holding;
use crate::session::Session;
use crate::session_machine::SessionState;

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
/// [`LockGuard::release`] does so and reports the outcome. A session's
/// guards of one key share its one holding, as a reentrant mutex's do:
/// the lock is given back when the last of them goes (`LOCK-11`).
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
        self.lost_owned().await
    }

    /// As [`LockGuard::lost`], as a future that does not borrow the guard:
    /// a task can watch for the loss while the guard stays free to be
    /// released. It counts from now: a jeopardy that began and ended before
    /// this call is not a loss for it.
    ///
    /// ```no_run
    /// # async fn example(guard: leasehold::LockGuard) {
    /// tokio::spawn(guard.lost_owned());
    /// guard.release().await.ok();
    /// # }
    /// ```
    pub fn lost_owned(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut signal = self.signal.clone();
        // The state channel keeps only the latest state, which may already
        // be `Normal` again after a brief jeopardy: jeopardies are counted.
        let seen = signal.borrow().jeopardies;
        let generation = self.sequencer.lock_generation;
        let mut states = self.session.watch_state();
        async move {
            tokio::select! {
                _ = states.wait_for(|s| *s == SessionState::Jeopardy || s.is_final()) => {}
                _ = signal.wait_for(|s| s.loses(generation) || s.jeopardies > seen) => {}
            }
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
        // An acquire in flight: a release of the key refused as stale
        // meanwhile leaves the lock to what its answer tells.
        let mut asking = Asking::new(&self.session, &self.key);
        match self.session.client().call(request).await? {
            Response::Acquired { sequencer, index } if sequencer == self.bytes => {
                asking.answered(index, false);
                Ok(())
            }
            Response::Acquired { index, .. } => {
                // The holding was lost and this took the lock anew. Another
                // guard of the session may hold that one (it took the lock
                // meanwhile); if none does, it goes back with this guard,
                // whose release names this answer. This guard's holding is
                // over whether or not the master's word has come.
                asking.answered(index, false);
                let generation = self.sequencer.lock_generation;
                self.session.dispatch().holding_lost(&self.key, generation);
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
        // The node's deletion freed the lock: nothing to release.
        let _ = self.session.dispatch().guard_gone(&self.key);
    }

    /// Gives the lock back, unless another guard of this session holds
    /// it still: then it is given back when the last of them goes.
    pub async fn release(mut self) -> Result<(), ClientError> {
        self.released = true;
        let last = Releasing::after_guard(&self.session, &self.key);
        match last {
            Some(releasing) => release(releasing).await,
            None => Ok(()),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Some(releasing) = Releasing::after_guard(&self.session, &self.key) {
            release_in_background(releasing);
        }
    }
}

/// A release of a session's lock under way, known to the session until it
/// ends, so that a close meanwhile gives the lock back too (`LOCK-11`).
struct Releasing {
    session: Session,
    key: String,
    /// The latest acquire of the lock answered.
    heard: u64,
}

impl Releasing {
    fn new(session: &Session, key: &str, heard: u64) -> Releasing {
        session.dispatch().release_started(key, heard);
        Releasing {
            session: session.clone(),
            key: key.to_string(),
            heard,
        }
    }

    /// A guard of `key` is gone: the release to make, if it was the last
    /// (`LOCK-4`).
    fn after_guard(session: &Session, key: &str) -> Option<Releasing> {
        let last = session.dispatch().guard_gone(key);
        last.map(|heard| Releasing::new(session, key, heard))
    }
}

impl Drop for Releasing {
    fn drop(&mut self) {
        self.session.dispatch().release_ended(&self.key);
    }
}

/// Gives back a session's lock, naming the latest acquire of it answered
/// (`LOCK-4`). A close of the session gives back every lock of it, this
/// one included, before it destroys the session (`LOCK-11`): a release
/// that fails once the session is closing ends as the close does, with
/// success if the close succeeded, and with its own failure if not.
async fn release(releasing: Releasing) -> Result<(), ClientError> {
    let (session, key, heard) = (&releasing.session, releasing.key.as_str(), releasing.heard);
    let closing = || session.dispatch().closing;
    let again = |latest| session.dispatch().release_refused(key, latest);
    // After each failure the session has a request timeout to be back
    // (the failed call may have taken one already); the release is sent
    // again however often it fails within a request timeout of its start,
    // and after that until its `RELEASE_RIDES`th failure in all.
    let patience = session.client().request_timeout();
    let began = Instant::now();
    let back = move |failures| async move {
        if !release_rides_on(failures, began.elapsed(), patience) {
            return Ok(false);
        }
        match session.back(Instant::now() + patience, failures).await {
            Ok(()) => Ok(true),
            Err(ClientError::Timeout(_)) => Ok(false),
            Err(other) => Err(other),
        }
    };
    let released = release_holding(session.client(), session.token(), key, heard, again, back);
    match released.await {
        Err(e) if closing() => {
            session.expired().await;
            match session.dispatch().closed_cleanly {
                true => Ok(()),
                false => Err(e),
            }
        }
        other => other,
    }
}

/// Whether a release that has failed `failures` times for want of a
/// master, `elapsed` after it began, is sent again once its session is
/// back (`LOCK-15`): always within `patience` (a request timeout), so a
/// master away for less is ridden through however quickly each try
/// fails while the session still counts as normal; after that, up to
/// [`RELEASE_RIDES`] failures, so a master that keeps failing over does not
/// keep a release going for ever.
fn release_rides_on(failures: u32, elapsed: Duration, patience: Duration) -> bool {
    elapsed < patience || failures < RELEASE_RIDES
}

/// Releases `session`'s lock of `key` naming `heard` in a task of its
/// own (best effort), from where nothing can wait for it: a drop.
fn release_in_background(releasing: Releasing) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let _ = release(releasing).await;
        });
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
        self.acquire(key, options, Some(wait), Withdraw::OnDrop)
            .await
    }

    /// Takes the lock of `key` only if it can be had at once; fails with
    /// `LockHeld`, or with `LockDelayed` saying how long lock-delay lasts.
    pub async fn try_lock(
        &self,
        key: &str,
        options: LockOptions,
    ) -> Result<LockGuard, ClientError> {
        self.acquire(key, options, None, Withdraw::OnDrop).await
    }

    /// Asks for the lock of `key`, waiting in line up to `wait` (`None`:
    /// not at all). A lost connection, an answer that does not come, or a
    /// fail-over does not end it: its session lives on, and once it is
    /// back this asks again (`LOCK-15`). The master keeps its place in
    /// line for it (`LOCK-3`, `FO-4`), or says it holds the lock already
    /// if it was granted meanwhile (`LOCK-2`).
    ///
    /// An acquire that ends with no answer from the master (the caller
    /// dropped the future, or it gave up riding through an outage) is
    /// withdrawn, unless it is itself a withdrawal (`withdraw`): see
    /// [`withdraw_in_background`].
    async fn acquire(
        &self,
        key: &str,
        options: LockOptions,
        wait: Option<Duration>,
        withdraw: Withdraw,
    ) -> Result<LockGuard, ClientError> {
        let deadline = wait.map(|wait| Instant::now() + wait);
        // A try rides through one outage of a request timeout at most.
        let patience = self.client().request_timeout();
        let give_up = deadline.unwrap_or_else(|| Instant::now() + patience);
        // Registered before the request goes out: a LockLost the keeper
        // delivers before this task sees the reply must not be dropped.
        let mut asking = Asking::new(self, key);
        if withdraw == Withdraw::OnDrop {
            // The same mode (another would be refused while the session
            // holds the lock), and no contents: a withdrawal writes nothing.
            asking.withdraw = Some(LockOptions {
                contents: None,
                ..options.clone()
            });
        }
        let signal = asking.signal.clone();
        let mut failures = 0;
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let request = Request::Acquire(Acquire {
                key: key.to_string(),
                session: self.token(),
                mode: options.mode,
                contents: options.contents.clone(),
                // Past its time, a wait still asks once, for a definite
                // answer: it takes its place back and is answered at once.
                wait_ms: left.map(|left| (left.as_millis() as u64).max(1)),
                transient: options.transient,
            });
            // A master that stopped without closing its connections (a
            // process paused, a host cut off) answers neither the wait nor
            // with an error: once the session has found a master again,
            // the wait is asked again there rather than left on the old
            // connection until its time runs out.
            let mut states = self.watch_state();
            states.borrow_and_update();
            let call = self
                .client()
                .call_waiting(request, left.unwrap_or_default());
            let answer = tokio::select! {
                answer = call => answer,
                () = back_in_contact(states) => continue,
            };
            if matches!(answer, Ok(_) | Err(ClientError::Server(_))) {
                // The master answered: nothing of this acquire stands in
                // its line any more.
                asking.withdraw = None;
            }
            let (sequencer, index) = match answer {
                Ok(Response::Acquired { sequencer, index }) => (sequencer, index),
                Ok(other) => return Err(unexpected(other)),
                Err(e) if e.rides_through() => {
                    let until = give_up.max(Instant::now() + patience);
                    self.back(until, failures).await?;
                    failures += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let Some(parsed) = Sequencer::from_bytes(&sequencer) else {
                // Held by the session all the same, with no guard to act
                // for it: give it back unless a guard holds it.
                asking.answered(index, true);
                drop(asking);
                if let Some(releasing) = Releasing::after_guard(self, key) {
                    let _ = release(releasing).await;
                }
                return Err(ClientError::Protocol(
                    "the master sent a malformed sequencer".into(),
                ));
            };
            asking.answered(index, true);
            return Ok(LockGuard {
                session: self.clone(),
                key: key.to_string(),
                signal,
                sequencer: parsed,
                bytes: sequencer,
                transient: options.transient,
                released: false,
            });
        }
    }

    /// Waits until the session is normal again (a fail-over acknowledged,
    /// contact back), to ask again after `failures` failed tries:
    /// `Timeout` if that does not happen by `until`, `SessionExpired` if
    /// the session ends.
    pub(crate) async fn back(&self, until: Instant, failures: u32) -> Result<(), ClientError> {
        let started = Instant::now();
        let timed_out = || ClientError::Timeout(until.saturating_duration_since(started));
        let mut states = self.watch_state();
        // The session may still count as normal while its master is gone
        // (its lease runs on): the tries back off, as the session's own
        // probes do, rather than hammer a master that is not there. A
        // change of state (a fail-over, jeopardy) ends the pause early:
        // what counts then is when the session is normal again.
        let pause = retry_delay(failures + 1, salt_of(&self.token()));
        states.borrow_and_update();
        let paused = async {
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                _ = states.changed() => {}
            }
        };
        if tokio::time::timeout_at(until, paused).await.is_err() {
            return Err(timed_out());
        }
        let back = async {
            let state = states
                .wait_for(|s| *s == SessionState::Normal || s.is_final())
                .await
                .map(|state| *state);
            state.map_or(true, |state| state.is_final())
        };
        match tokio::time::timeout_at(until, back).await {
            Ok(false) => Ok(()),
            Ok(true) => Err(ClientError::SessionExpired),
            Err(_) => Err(timed_out()),
        }
    }
}

/// Resolves once the session's state has changed since `states` was last
/// seen (it left `Normal`: contact was lost) and it is `Normal` again, or
/// over; never if the session is gone.
pub(crate) async fn back_in_contact(mut states: watch::Receiver<SessionState>) {
    if states.changed().await.is_err() {
        return std::future::pending().await;
    }
    let gone = states
        .wait_for(|s| *s == SessionState::Normal || s.is_final())
        .await
        .is_err();
    if gone {
        std::future::pending::<()>().await;
    }
}

/// An acquire of a key in flight, counted in the session's record of the
/// lock until it ends however it ends (answered, refused, failed, or the
/// caller giving up on the future): while it is counted, a release of the
/// key refused as stale is not sent again, since its answer may still
/// tell the session it holds the lock (`LOCK-4`).
struct Asking<'a> {
    session: &'a Session,
    key: &'a str,
    signal: watch::Receiver<LockSignal>,
    /// The answer's index, and whether a guard was made for it.
    answer: Option<(u64, bool)>,
    /// The acquire to withdraw if this one ends before the master answered
    /// it: it may still wait in the master's line.
    withdraw: Option<LockOptions>,
}

/// Whether an acquire that ends unanswered is withdrawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Withdraw {
    OnDrop,
    /// It is itself a withdrawal.
    Never,
}

impl<'a> Asking<'a> {
    fn new(session: &'a Session, key: &'a str) -> Asking<'a> {
        let signal = session.dispatch().acquiring(key);
        Asking {
            session,
            key,
            signal,
            answer: None,
            withdraw: None,
        }
    }

    /// The master answered at `index`; `guard`: a guard holds it now.
    fn answered(&mut self, index: u64, guard: bool) {
        self.answer = Some((index, guard));
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        let (index, guard) = self.answer.unzip();
        let guard = guard.unwrap_or(false);
        let ended = self
            .session
            .dispatch()
            .acquire_ended(self.key, index, guard);
        // A guard let the lock go while this acquire waited for its answer,
        // which made none: the release waited for it.
        if let Some(heard) = ended {
            release_in_background(Releasing::new(self.session, self.key, heard));
        }
        if let Some(options) = self.withdraw.take() {
            withdraw_in_background(self.session.clone(), self.key.to_string(), options);
        }
    }
}

/// Withdraws an acquire of `key` that ended before the master answered it
/// (`LOCK-17`). It may still wait in the master's line, and be granted
/// there later with nobody to hear the answer: the session would hold the
/// lock, and nobody else get it, until the session ended. The same acquire
/// with no wait and no contents takes its place and ends it (`LOCK-3`); if
/// the session holds the lock by then (granted meanwhile, or free now), it
/// is answered as a holder asking again (`LOCK-2`) or granted, and given
/// back at once.
fn withdraw_in_background(session: Session, key: String, options: LockOptions) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let taken = session.acquire(&key, options, None, Withdraw::Never).await;
            if let Ok(guard) = taken {
                let _ = guard.release().await;
            }
        });
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

#[cfg(test)]
mod tests {
    use super::*;

    const PATIENCE: Duration = Duration::from_secs(10);

    // LOCK-15: a master away for less than a request timeout is ridden
    // through, however many quick failures the release meets meanwhile
    // (each try fails at once while the session's lease still runs).
    #[test]
    fn a_release_rides_through_quick_failures_within_a_request_timeout() {
        for failures in [0, RELEASE_RIDES, 10 * RELEASE_RIDES] {
            assert!(release_rides_on(failures, Duration::from_secs(4), PATIENCE));
        }
    }

    // LOCK-15: past a request timeout, a few more tries, then the failure
    // is the answer.
    #[test]
    fn past_a_request_timeout_a_release_gives_up_after_its_rides() {
        let late = PATIENCE + Duration::from_secs(1);
        assert!(release_rides_on(RELEASE_RIDES - 1, late, PATIENCE));
        assert!(!release_rides_on(RELEASE_RIDES, late, PATIENCE));
    }
}
