//! What a session's handles and its keeper task share, and how the keeper
//! is told to stop: below both, so neither reaches into the other.

use std::sync::Mutex;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::ClientError;
use crate::events::Dispatch;
use crate::session_machine::SessionState;

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
    /// What [`Session::get`](crate::Session::get) read (`CACHE-1`).
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
