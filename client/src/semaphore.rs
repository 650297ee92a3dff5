//! A counting semaphore built only from the public primitives, as the
//! semaphore seed (Consul's guide) describes.
//!
//! Under a prefix, each contender keeps a contender key `<prefix>/<session>`,
//! ephemeral and locked by its session, so it disappears when the session
//! ends whatever the session's behaviour. One coordinating key,
//! `<prefix>/.lock`, holds `{"Limit": N, "Holders": [session, ...]}`. To take
//! a slot a contender reads it, prunes holders whose contender key is gone
//! (or no longer locked by them), and if fewer than `Limit` remain adds
//! itself with a compare-and-set on the key's modify index; a lost race
//! reads again. Holders are only ever added by a CAS that sees the limit
//! respected, so the list never exceeds it.
//!
//! Like every lock here it is advisory: a holder checks [`Permit::lost`]
//! before and while it works.

use std::future::Future;
use std::time::Duration;

use leasehold_protocol::{event_mask, ErrorCode, SessionId};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{LEAVE_TRIES, LONGEST_WAIT};
use crate::error::ClientError;
use crate::events::{SubscribeOptions, SubscriptionEvent};
use crate::kv::{DeleteOptions, PutOptions};
use crate::lock::{LockGuard, LockOptions};
use crate::session::Session;
use crate::session_machine::SessionState;
use crate::subscription::Subscription;

/// The coordinating key's last segment.
pub const SEMAPHORE_LOCK: &str = ".lock";

/// The coordinating key's contents, spelled as the seed spells them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct LockBody {
    #[serde(rename = "Limit")]
    limit: u32,
    #[serde(rename = "Holders")]
    holders: Vec<SessionId>,
}

/// A contender key being made; its reservation ends with it, however
/// `enter` ends (by then a guard holds the key, or nothing does).
struct Entering<'a> {
    session: &'a Session,
    key: &'a str,
}

impl Drop for Entering<'_> {
    fn drop(&mut self) {
        self.session.dispatch().entering.remove(self.key);
    }
}

/// A semaphore under one prefix, for one session.
///
/// ```no_run
/// # async fn example(session: leasehold::Session) -> Result<(), leasehold::ClientError> {
/// use leasehold::Semaphore;
///
/// // At most two report builders at a time.
/// let slots = Semaphore::new(&session, "jobs/report-builders", 2);
/// let permit = slots.acquire("builder-7", None).await?;
/// tokio::select! {
///     _ = permit.lost() => eprintln!("lost the slot: stop"),
///     _ = build_report() => {}
/// }
/// permit.release().await?;
/// # Ok(())
/// # }
/// # async fn build_report() {}
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    session: Session,
    prefix: String,
    limit: u32,
}

enum Attempt {
    Taken,
    Full,
    Raced,
}

impl Semaphore {
    /// A semaphore of `limit` slots under `prefix`. Every participant must
    /// use the same limit; one that differs is refused with
    /// [`ClientError::Conflict`].
    pub fn new(session: &Session, prefix: impl Into<String>, limit: u32) -> Self {
        Semaphore {
            session: session.clone(),
            prefix: prefix.into(),
            limit,
        }
    }

    fn lock_key(&self) -> String {
        format!("{}/{SEMAPHORE_LOCK}", self.prefix)
    }

    fn contender_key(&self, session: SessionId) -> String {
        format!("{}/{session}", self.prefix)
    }

    /// Waits for a slot, up to `timeout` (`None`: as long as the session
    /// lives). `value` goes into the contender key, for people.
    pub async fn acquire(
        &self,
        value: impl Into<Vec<u8>>,
        timeout: Option<Duration>,
    ) -> Result<Permit, ClientError> {
        if self.limit == 0 {
            return Err(ClientError::Conflict(
                "a semaphore needs a limit of at least 1".into(),
            ));
        }
        // Counted from the call, whatever the subscription and the first
        // attempts take.
        let mut expiry = timeout.map(|t| Box::pin(tokio::time::sleep(t)));
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        // Subscribed before the first read, so no change between a read
        // and the wait is missed. Both ride through a lost connection or a
        // fail-over, as the wait does (`LOCK-15`).
        let value = value.into();
        let mut failures = 0;
        let (mut changes, contender) = loop {
            let entered = async {
                let changes = self.subscribe().await?;
                Ok::<_, ClientError>((changes, self.enter(value.clone(), deadline).await?))
            };
            match entered.await {
                Ok(entered) => break entered,
                Err(e) if e.rides_through() => self.back(deadline, &mut failures).await?,
                Err(e) => return Err(e),
            }
        };
        let outcome = async {
            let mut failures = 0;
            loop {
                match self.attempt().await {
                    Ok(Attempt::Taken) => return Ok(()),
                    Ok(Attempt::Raced) => continue,
                    Ok(Attempt::Full) => {}
                    // The session lives on through a lost connection or a
                    // fail-over: once it is back, look again (`LOCK-15`).
                    // What an attempt writes is compare-and-set, safe to
                    // try again whatever became of the last try.
                    Err(e) if e.rides_through() => {
                        self.back(deadline, &mut failures).await?;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
                let next = changes.next();
                let event = match expiry.as_mut() {
                    Some(expiry) => tokio::select! {
                        biased;
                        event = next => event,
                        () = expiry.as_mut() => {
                            return Err(ClientError::Timeout(timeout.unwrap_or_default()))
                        }
                    },
                    None => next.await,
                };
                match event {
                    None
                    | Some(SubscriptionEvent::Session(
                        SessionState::Expired | SessionState::Closed,
                    )) => return Err(ClientError::SessionExpired),
                    Some(_) => {}
                }
            }
        }
        .await;
        match outcome {
            Ok(()) => Ok(Permit::start(self.clone(), contender, changes)),
            Err(e) => {
                self.leave(contender).await;
                Err(e)
            }
        }
    }

    /// Takes a slot only if one is free now.
    pub async fn try_acquire(
        &self,
        value: impl Into<Vec<u8>>,
    ) -> Result<Option<Permit>, ClientError> {
        let changes = self.subscribe().await?;
        let contender = self.enter(value.into(), None).await?;
        loop {
            match self.attempt().await {
                Ok(Attempt::Taken) => {
                    return Ok(Some(Permit::start(self.clone(), contender, changes)))
                }
                Ok(Attempt::Raced) => continue,
                Ok(Attempt::Full) => {
                    self.leave(contender).await;
                    return Ok(None);
                }
                Err(e) => {
                    self.leave(contender).await;
                    return Err(e);
                }
            }
        }
    }

    /// The sessions holding slots now, after pruning the dead.
    pub async fn holders(&self) -> Result<Vec<SessionId>, ClientError> {
        Ok(self.read().await?.0.holders)
    }

    async fn subscribe(&self) -> Result<Subscription, ClientError> {
        let mask = event_mask::CONTENTS | event_mask::LOCK_RELEASED | event_mask::SESSION_STATE;
        let options = SubscribeOptions::prefix().mask(mask);
        self.session.subscribe(&self.prefix, options).await
    }

    /// Creates this session's contender key, ephemeral and locked by it,
    /// waiting until `deadline` at most for a delete of it still under way.
    async fn enter(
        &self,
        value: Vec<u8>,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<LockGuard, ClientError> {
        let key = self.contender_key(self.session.id());
        // A slot given back a moment ago may still be deleting its
        // contender key (its caller stopped waiting for that), and an
        // acquire given up part-way may still be withdrawing its lock of
        // the key (`LOCK-17`): this waits for either, which ends by the
        // session's end at the latest, within `deadline` if there is one
        // (`SEM-1`, `SEM-4`).
        let started = tokio::time::Instant::now();
        while self.session.dispatch().winding_down(&key) {
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                return Err(ClientError::Timeout(started.elapsed()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // One slot per session: a second permit would share the first's
        // contender key and entry in Holders, and releasing either would
        // free both. Checked and reserved under one lock, so that of two
        // tasks of the session asking at once, one is refused.
        let _entering = {
            let mut dispatch = self.session.dispatch();
            if dispatch.locks.contains_key(&key) || dispatch.entering.contains(&key) {
                return Err(ClientError::Conflict(format!(
                    "this session already holds or is taking a slot in {}",
                    self.prefix
                )));
            }
            dispatch.entering.insert(key.clone());
            Entering {
                session: &self.session,
                key: &key,
            }
        };
        let client = self.session.client();
        client
            .put(&key, value, PutOptions::new().ephemeral(&self.session))
            .await?;
        self.session.try_lock(&key, LockOptions::exclusive()).await
    }

    /// Waits until the session is back in contact (`Session::back`), at
    /// most until `deadline` (`None`: as long as a wait may last), counting
    /// the failure just ridden through.
    async fn back(
        &self,
        deadline: Option<tokio::time::Instant>,
        failures: &mut u32,
    ) -> Result<(), ClientError> {
        let forever = tokio::time::Instant::now() + LONGEST_WAIT;
        self.session
            .back(deadline.unwrap_or(forever), *failures)
            .await?;
        *failures += 1;
        Ok(())
    }

    /// Marks this session's slot as being given back, until `leave` has
    /// deleted its contender key: the session's next acquire waits for
    /// that (`enter`). Returns the contender key.
    fn start_leaving(&self) -> String {
        let key = self.contender_key(self.session.id());
        self.session.dispatch().leaving.insert(key.clone());
        key
    }

    /// Deletes this session's contender key, which frees its lock too
    /// (`SEM-4`). The delete names the modify index it read, so a copy of it
    /// delivered late (a request given up on a slow link) cannot remove the
    /// contender key of this session's next slot; and the next acquire
    /// waits until it is done, in a task of its own so that a caller who
    /// gives up leaves nothing half done. Best effort: the session's end
    /// removes the key anyway. The master tells this session the delete
    /// took its lock (`LockLost`, `EV-6`), maybe only after the next
    /// acquire locked the key again; the event names the old holding's
    /// generation, so it costs the next slot nothing (`LOCK-13`).
    async fn leave(&self, contender: LockGuard) {
        let key = self.start_leaving();
        let session = self.session.clone();
        let task = tokio::spawn(async move {
            let client = session.client();
            for attempt in 1..=LEAVE_TRIES {
                let gone = match client.stat(&key).await {
                    Ok(None) => true,
                    Ok(Some(stat)) => {
                        let only_this = DeleteOptions {
                            cas: Some(stat.modify_index),
                            ..DeleteOptions::default()
                        }
                        .as_holder(&session);
                        client.delete(&key, only_this).await.is_ok()
                    }
                    Err(_) => false,
                };
                if gone || session.state().is_final() {
                    break;
                }
                let pause = Duration::from_millis(50u64 << attempt.min(4));
                tokio::time::sleep(pause).await;
            }
            contender.forget();
            session.dispatch().leaving.remove(&key);
        });
        let _ = task.await;
    }

    /// The coordinating key's body with dead holders pruned, and its modify
    /// index (0: it does not exist yet).
    async fn read(&self) -> Result<(LockBody, u64), ClientError> {
        let client = self.session.client();
        let (mut body, index) = match client.get(&self.lock_key()).await? {
            None => (
                LockBody {
                    limit: self.limit,
                    holders: Vec::new(),
                },
                0,
            ),
            Some(node) => {
                let contents = node.contents.unwrap_or_default();
                let body: LockBody = serde_json::from_slice(&contents).map_err(|e| {
                    ClientError::Conflict(format!("{} is not a semaphore: {e}", self.lock_key()))
                })?;
                (body, node.stat.modify_index)
            }
        };
        if body.limit != self.limit {
            return Err(ClientError::Conflict(format!(
                "the semaphore at {} has limit {}, not {}",
                self.prefix, body.limit, self.limit
            )));
        }
        let mut live = Vec::with_capacity(body.holders.len());
        for holder in body.holders {
            let stat = client.stat(&self.contender_key(holder)).await?;
            if stat.is_some_and(|s| s.lock_holders.iter().any(|(h, _)| *h == holder)) {
                live.push(holder);
            }
        }
        body.holders = live;
        Ok((body, index))
    }

    async fn attempt(&self) -> Result<Attempt, ClientError> {
        let (mut body, index) = self.read().await?;
        let me = self.session.id();
        if body.holders.contains(&me) {
            // Still listed from an earlier slot whose give-back failed: the
            // read alone proves nothing, since another contender may be
            // pruning this session right now (its contender key was gone
            // for a moment). Writing the same body by compare-and-set
            // makes the slot this session's at a known index, or loses the
            // race and reads again (SEM-2).
            return self.write(&body, index).await;
        }
        if body.holders.len() >= self.limit as usize {
            return Ok(Attempt::Full);
        }
        body.holders.push(me);
        self.write(&body, index).await
    }

    /// Writes the body if nobody wrote since `index`.
    async fn write(&self, body: &LockBody, index: u64) -> Result<Attempt, ClientError> {
        let contents = serde_json::to_vec(body).expect("a LockBody serializes");
        let put = self
            .session
            .client()
            .put(&self.lock_key(), contents, PutOptions::new().cas(index))
            .await;
        match put {
            Ok(_) => Ok(Attempt::Taken),
            Err(e) if matches!(e.code(), Some(ErrorCode::CasMismatch { .. })) => Ok(Attempt::Raced),
            Err(e) => Err(e),
        }
    }

    /// Takes this session out of the holders, retrying lost races.
    async fn give_back(&self) -> Result<(), ClientError> {
        let me = self.session.id();
        loop {
            let (mut body, index) = self.read().await?;
            if !body.holders.contains(&me) {
                return Ok(());
            }
            body.holders.retain(|h| *h != me);
            match self.write(&body, index).await? {
                Attempt::Raced => continue,
                _ => return Ok(()),
            }
        }
    }
}

/// A slot in a [`Semaphore`]. Dropping it releases the slot in the
/// background (best effort); await [`Permit::release`] before the same
/// session asks for a slot again.
#[derive(Debug)]
pub struct Permit {
    semaphore: Semaphore,
    contender: Option<LockGuard>,
    lost: watch::Receiver<bool>,
    watcher: JoinHandle<()>,
}

impl Permit {
    /// Starts watching the prefix: the seed requires holders to re-check
    /// their slot on every change, since an operator or a false failure
    /// detection may take it away.
    fn start(semaphore: Semaphore, contender: LockGuard, mut changes: Subscription) -> Permit {
        let (tx, lost) = watch::channel(false);
        let watching = semaphore.clone();
        let watcher = tokio::spawn(async move {
            let me = watching.session.id();
            loop {
                let still = match changes.next().await {
                    None => false,
                    // Jeopardy is the contender guard's to report, and
                    // passes if contact comes back; expiry is final.
                    Some(SubscriptionEvent::Session(state)) => !state.is_final(),
                    // Any change, or lost events: re-read. A failed read
                    // leaves the slot in doubt, which is lost (the seed:
                    // "if the watch fails to connect the slot should be
                    // considered lost").
                    Some(_) => watching
                        .read()
                        .await
                        .is_ok_and(|(body, _)| body.holders.contains(&me)),
                };
                if !still {
                    let _ = tx.send(true);
                    return;
                }
            }
        });
        Permit {
            semaphore,
            contender: Some(contender),
            lost,
            watcher,
        }
    }

    /// Whether the slot can still be relied on.
    pub fn is_held(&self) -> bool {
        !*self.lost.borrow() && self.contender.as_ref().is_some_and(|c| c.is_held())
    }

    /// Resolves as soon as the slot can no longer be relied on: the session
    /// left the normal state, the contender key was taken away, or the
    /// holders no longer include this session.
    pub async fn lost(&self) {
        self.lost_owned().await
    }

    /// As [`Permit::lost`], as a future that does not borrow the permit (see
    /// [`LockGuard::lost_owned`]).
    pub fn lost_owned(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut lost = self.lost.clone();
        let contender = self.contender.as_ref().map(LockGuard::lost_owned);
        async move {
            let contender = async {
                match contender {
                    Some(c) => c.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = lost.wait_for(|l| *l) => {}
                () = contender => {}
            }
        }
    }

    /// Gives the slot back: out of the holders by compare-and-set, then the
    /// contender key goes.
    pub async fn release(mut self) -> Result<(), ClientError> {
        self.watcher.abort();
        // From here until the contender key is gone, this session's next
        // acquire waits rather than finds the slot still held, even if
        // this future is dropped part-way (`Drop` finishes the job).
        self.semaphore.start_leaving();
        let result = self.semaphore.give_back().await;
        if let Some(contender) = self.contender.take() {
            self.semaphore.leave(contender).await;
        }
        result
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.watcher.abort();
        let Some(contender) = self.contender.take() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let semaphore = self.semaphore.clone();
            semaphore.start_leaving();
            runtime.spawn(async move {
                let _ = semaphore.give_back().await;
                semaphore.leave(contender).await;
            });
        }
    }
}
