//! Watching the master's leases and locks from outside the process that
//! keeps them.
//!
//! Chubby's safety argument rests on one containment: whatever a client
//! believes while its session is `Normal` (that it holds a lock, that it
//! leads) lies inside the lease the master keeps for that session. A
//! [`MasterObserver`] is told of every lease the master grants and every
//! session it ends, so a simulation can check that containment from the
//! master's side rather than trust the client's own account of it. It is
//! told too of every holding of a lock the master begins or ends, with
//! the reason, so that a run in which two clients believed they held one
//! lock says why the master gave it to the second.

use std::sync::Arc;

use leasehold_protocol::SessionId;

use crate::holding::{HowGranted, LetGo};
use crate::session::EndCause;
use crate::time::Millis;

/// Why a master granted a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Grant {
    /// A new session's first lease (`LEASE-1`).
    Created,
    /// A KeepAlive was answered (`LEASE-2`, `KA-4`).
    KeepAlive,
    /// A master took over the session after a restart (`FO-2`).
    Failover,
    /// The one more lease a recovered session unheard from gets while
    /// requests wait (`FO-2`).
    OneMore,
}

/// What the master did to a session's lease, in master time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MasterEvent {
    /// From `now` the session is live until `expires` at least: a lease
    /// never moves backward (`LEASE-2`).
    Granted {
        /// The session.
        session: SessionId,
        /// When the master granted it.
        now: Millis,
        /// When the lease ends, by the master's clock.
        expires: Millis,
        /// Why it was granted.
        why: Grant,
    },
    /// A master began serving in `epoch` at `now`: the grants and ends
    /// that follow, until the next `Serving`, are its. A cell's members
    /// each run a master in turn, every one in a new epoch (`CELL-3`).
    Serving {
        /// The master's epoch.
        epoch: u64,
        /// When it began.
        now: Millis,
    },
    /// The master that began serving in `epoch` decides nothing more from
    /// `now`: its master lease lapsed, its member no longer leads, its
    /// store failed, or it was shut down. A master whose host crashed
    /// tells nothing.
    Stopped {
        /// The master's epoch.
        epoch: u64,
        /// When it stopped.
        now: Millis,
    },
    /// The master ended the session at `now`.
    Ended {
        /// The session.
        session: SessionId,
        /// When the master ended it.
        now: Millis,
        /// Why it ended.
        cause: EndCause,
    },
    /// The master answered an acquire of `key` with the holding of lock
    /// generation `generation`, at `index` (`LOCK-2`, `LOCK-5`).
    LockGranted {
        /// The holder.
        session: SessionId,
        /// The locked key.
        key: String,
        /// The holding's lock generation.
        generation: u64,
        /// The index the acquire was answered with.
        index: u64,
        /// When.
        now: Millis,
        /// At once, from the line, or to a holder asking again.
        how: HowGranted,
    },
    /// The session no longer holds `key`'s lock, which it held at
    /// `generation`.
    LockLetGo {
        /// The holder it was.
        session: SessionId,
        /// The key.
        key: String,
        /// The holding's lock generation.
        generation: u64,
        /// When.
        now: Millis,
        /// Released, given back unheard, its session ended, its node
        /// deleted.
        why: LetGo,
    },
    /// A release named an acquire older than the holding's latest, and
    /// was refused: the lock stays held (`LOCK-4`).
    ReleaseRefused {
        /// The holder.
        session: SessionId,
        /// The key.
        key: String,
        /// The acquire the release named.
        named: u64,
        /// The holding's latest acquire.
        acquired: u64,
        /// When.
        now: Millis,
    },
}

/// Told of every [`MasterEvent`], on the master's task: it must return
/// quickly and never call back into the master. Cheap to clone.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use leasehold_server::{Config, MasterEvent, MasterObserver};
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let log = seen.clone();
/// let config = Config {
///     observer: Some(MasterObserver::new(move |event: &MasterEvent| {
///         log.lock().unwrap().push(event.clone());
///     })),
///     ..Config::default()
/// };
/// # let _ = config;
/// ```
#[derive(Clone)]
pub struct MasterObserver(Arc<dyn Fn(&MasterEvent) + Send + Sync>);

impl MasterObserver {
    /// An observer that calls `tell` with each event.
    pub fn new(tell: impl Fn(&MasterEvent) + Send + Sync + 'static) -> MasterObserver {
        MasterObserver(Arc::new(tell))
    }

    pub(crate) fn tell(&self, event: &MasterEvent) {
        (self.0)(event);
    }
}

impl std::fmt::Debug for MasterObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterObserver")
    }
}
