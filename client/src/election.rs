//! Leader election on one key's lock, as the leader-election seed (Consul's
//! guide) describes: contenders acquire the key's lock with their value
//! written in the same step; the holder leads; everyone else finds the
//! leader by reading the key and waits for changes with a blocking read.
//!
//! Unlike polling `acquire` with a timed wait between attempts, a campaign
//! waits in the lock's line: first come, first served, with lock-delay
//! waited out by the master (`LOCK-3`, `LOCK-5`).

use std::future::Future;

use leasehold_protocol::{LockMode, NodeView, Sequencer, SessionId};

use crate::client::Client;
use crate::config::OBSERVE_WAIT;
use crate::error::ClientError;
use crate::lock::{LockGuard, LockOptions};
use crate::session::Session;

/// The leader of an election, as read from its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The leader's session.
    pub session: SessionId,
    /// What the leader wrote: typically its address.
    pub value: Vec<u8>,
    /// The lock generation of its term: rises with every new leader.
    pub lock_generation: u64,
}

impl Leader {
    /// The leader held in a node, if its lock is held exclusively.
    fn of(node: &NodeView) -> Option<Leader> {
        let (session, _) = node
            .stat
            .lock_holders
            .iter()
            .find(|(_, mode)| *mode == LockMode::Exclusive)?;
        Some(Leader {
            session: *session,
            value: node.contents.clone().unwrap_or_default(),
            lock_generation: node.stat.lock_generation,
        })
    }
}

/// An election on one key, for one session's campaigns.
///
/// ```no_run
/// # async fn example(session: leasehold::Session) -> Result<(), leasehold::ClientError> {
/// use leasehold::Election;
///
/// let election = Election::new(&session, "service/mysql/leader");
/// let term = election.campaign("10.0.0.7:3306").await?;
/// // Lead, passing term.sequencer() to whatever the leader writes to, until:
/// term.lost().await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    session: Session,
    key: String,
}

impl Election {
    /// An election on `key` for `session`.
    pub fn new(session: &Session, key: impl Into<String>) -> Self {
        Election {
            session: session.clone(),
            key: key.into(),
        }
    }

    /// The election's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Waits until this session leads, then returns its term. `value` is
    /// written to the key in the same step as the acquisition, so a reader
    /// never sees a leader with an old value.
    pub async fn campaign(&self, value: impl Into<Vec<u8>>) -> Result<Term, ClientError> {
        let options = LockOptions::exclusive().contents(value).transient();
        loop {
            match self.session.lock(&self.key, options.clone()).await {
                Ok(guard) => return Ok(Term { guard }),
                // The longest wait the master allows ran out: wait again.
                Err(e) if e.is_lock_refusal() => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Leads at once if nobody else does; `None` if someone does.
    pub async fn try_campaign(
        &self,
        value: impl Into<Vec<u8>>,
    ) -> Result<Option<Term>, ClientError> {
        let options = LockOptions::exclusive().contents(value).transient();
        match self.session.try_lock(&self.key, options).await {
            Ok(guard) => Ok(Some(Term { guard })),
            Err(e) if e.is_lock_refusal() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The current leader, if any.
    pub async fn leader(&self) -> Result<Option<Leader>, ClientError> {
        self.session.client().leader(&self.key).await
    }

    /// The leader now, then each change of leader (or of its value).
    pub fn observe(&self) -> LeaderChanges {
        self.session.client().observe_leader(&self.key)
    }
}

/// A term as leader: the lock on the election key.
#[derive(Debug)]
pub struct Term {
    guard: LockGuard,
}

impl Term {
    /// The sequencer of this term: hand it to the servers the leader
    /// writes to, so that they can refuse a deposed leader.
    pub fn sequencer(&self) -> &Sequencer {
        self.guard.sequencer()
    }

    /// The sequencer as the opaque bytes the master checks.
    pub fn sequencer_bytes(&self) -> &[u8] {
        self.guard.sequencer_bytes()
    }

    /// Whether leadership can still be relied on: the session is in the
    /// normal state, the master has not taken the lock away, and no events
    /// were lost. Once this is false, stop acting as the leader (`LOCK-10`).
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// Resolves as soon as leadership can no longer be relied on: the
    /// session left the normal state, or the master took the lock away.
    pub async fn lost(&self) {
        self.guard.lost().await
    }

    /// As [`Term::lost`], as a future that does not borrow the term (see
    /// [`LockGuard::lost_owned`]).
    pub fn lost_owned(&self) -> impl Future<Output = ()> + Send + 'static {
        self.guard.lost_owned()
    }

    /// Resolves when another session starts waiting to lead.
    pub async fn challenger(&self) -> SessionId {
        self.guard.conflict().await
    }

    /// Publishes a new value without giving up the term: the leader acquires
    /// its lock again with the new contents, in one step. The lock generation
    /// stays the same, so the term's sequencer stays valid; the content
    /// generation rises as with any write (`LOCK-2`).
    pub async fn proclaim(&self, value: impl Into<Vec<u8>>) -> Result<(), ClientError> {
        self.guard.rewrite(value).await
    }

    /// Steps down: the next contender in line leads at once, without
    /// lock-delay.
    pub async fn resign(self) -> Result<(), ClientError> {
        self.guard.release().await
    }
}

/// The leader of an election, then every change of it.
///
/// Also a `futures::Stream` of the same results, which never ends:
///
/// ```no_run
/// # async fn example(client: leasehold::Client) {
/// use futures::StreamExt;
///
/// let a = client.observe_leader("service/a/leader");
/// let b = client.observe_leader("service/b/leader");
/// let mut both = futures::stream::select(a, b);
/// while let Some(change) = both.next().await {
///     println!("{change:?}");
/// }
/// # }
/// ```
pub struct LeaderChanges {
    observer: Option<Observer>,
    /// The step in progress, on a task of its own: a `next()` given up
    /// leaves it running rather than frozen part-way, where it could hold
    /// the client's one connection attempt and stall every other call.
    pending: Option<tokio::task::JoinHandle<Step>>,
}

impl Drop for LeaderChanges {
    fn drop(&mut self) {
        if let Some(step) = &self.pending {
            step.abort();
        }
    }
}

type Step = (Observer, Result<Option<Leader>, ClientError>);

impl std::fmt::Debug for LeaderChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderChanges")
            .field("observer", &self.observer)
            .field("waiting", &self.pending.is_some())
            .finish()
    }
}

/// What a [`LeaderChanges`] remembers between results.
#[derive(Debug)]
struct Observer {
    client: Client,
    key: String,
    index: u64,
    last: Option<Option<Leader>>,
}

impl Observer {
    async fn step(mut self) -> Step {
        let result = self.next_change().await;
        (self, result)
    }

    async fn next_change(&mut self) -> Result<Option<Leader>, ClientError> {
        if self.last.is_none() {
            let node = self.client.get(&self.key).await?;
            // A missing key's index is not known here; 0 makes the next
            // read return at once, which costs one read and changes nothing.
            self.index = node.as_ref().map_or(0, |n| n.stat.modify_index);
            let leader = node.as_ref().and_then(Leader::of);
            self.last = Some(leader.clone());
            return Ok(leader);
        }
        loop {
            let watched = self
                .client
                .watch(&self.key, self.index, OBSERVE_WAIT)
                .await?;
            self.index = watched.index;
            let leader = watched.node.as_ref().and_then(Leader::of);
            if self.last.as_ref() != Some(&leader) {
                self.last = Some(leader.clone());
                return Ok(leader);
            }
        }
    }
}

impl LeaderChanges {
    /// The leader now on the first call; afterwards, waits until the leader
    /// (or its value) differs from the last one returned. `None`: nobody
    /// leads. An error leaves the observer usable: the next call tries
    /// again from where it was.
    pub async fn next(&mut self) -> Result<Option<Leader>, ClientError> {
        std::future::poll_fn(|cx| futures::Stream::poll_next(std::pin::Pin::new(&mut *self), cx))
            .await
            .expect("a LeaderChanges stream never ends")
    }
}

impl futures::Stream for LeaderChanges {
    type Item = Result<Option<Leader>, ClientError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if self.pending.is_none() {
            let observer = self
                .observer
                .take()
                .expect("an observer is kept while no step runs");
            self.pending = Some(tokio::spawn(observer.step()));
        }
        let pending = self.pending.as_mut().expect("set above");
        let finished = std::task::ready!(std::pin::Pin::new(pending).poll(cx));
        self.pending = None;
        match finished {
            Ok((observer, result)) => {
                self.observer = Some(observer);
                std::task::Poll::Ready(Some(result))
            }
            // Only `Drop` aborts the step, so the task panicked.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

impl Client {
    /// The leader of the election on `key`, if any: the exclusive holder
    /// of its lock and the value it wrote.
    pub async fn leader(&self, key: &str) -> Result<Option<Leader>, ClientError> {
        Ok(self.get(key).await?.as_ref().and_then(Leader::of))
    }

    /// The leader of the election on `key` now, then every change of it;
    /// needs no session.
    pub fn observe_leader(&self, key: &str) -> LeaderChanges {
        LeaderChanges {
            observer: Some(Observer {
                client: self.clone(),
                key: key.to_string(),
                index: 0,
                last: None,
            }),
            pending: None,
        }
    }
}

#[cfg(test)]
mod tests {
    /// Like every other handle of the library, a `LeaderChanges` can be
    /// shared and sent between threads.
    #[test]
    fn leader_changes_is_send_and_sync() {
        fn shareable<T: Send + Sync>() {}
        shareable::<super::LeaderChanges>();
    }
}
