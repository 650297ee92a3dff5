//! The way into the master task: connections send it [`Call`]s through a
//! [`MasterHandle`], KeepAlives on a queue of their own.

use std::future::Future;

use leasehold_protocol::Request;
use tokio::sync::mpsc;

use crate::call::Call;
use crate::reply::ReplyTx;

/// A cloneable way to send requests to the master task.
#[derive(Debug, Clone)]
pub struct MasterHandle {
    pub(super) calls: mpsc::Sender<Call>,
    /// KeepAlives, which the master takes before other requests and
    /// before fan-out (`EV-9`): a lease never waits behind others' work.
    pub(super) keepalives: mpsc::Sender<Call>,
    /// Each connection's first KeepAlive, which the master takes before
    /// the others (`KA-11`): its client has just come back, and may be in
    /// jeopardy or a fail-over, where the others' leases are renewed.
    pub(super) returning: mpsc::Sender<Call>,
    /// The master's clock, to stamp when each request arrived.
    pub(super) clock: super::MasterClock,
}

/// Room for one call in the master's queue of requests other than
/// KeepAlives.
pub(crate) type Room = mpsc::OwnedPermit<Call>;

impl MasterHandle {
    /// Sends `request` to the master, which answers through `reply`. A
    /// KeepAlive's reply may come much later (it is held).
    pub(crate) async fn call(
        &self,
        request: Request,
        reply: ReplyTx,
        caller: &std::sync::Arc<crate::caller::Caller>,
    ) {
        self.send(Call::from(request, reply, caller, self.clock.read()))
            .await;
    }

    /// Sends a KeepAlive (or KeepAliveAll) `call`: the connection's first
    /// (`first`) to the queue the master takes first (`KA-11`).
    pub(crate) async fn send_keepalive(&self, call: Call, first: bool) {
        let queue = if first {
            &self.returning
        } else {
            &self.keepalives
        };
        let _ = queue.send(call).await;
    }

    /// Master time now: when a request read now arrived.
    pub(crate) fn now(&self) -> crate::time::Millis {
        self.clock.read()
    }

    /// Sends `call` to the queue its request goes to, waiting for room.
    /// A closed master drops the call, and its reply then answers that it
    /// is shutting down.
    pub(crate) async fn send(&self, call: Call) {
        let _ = self.queue(&call.request).send(call).await;
    }

    /// Hands `call` to the master if its queue has room now (or the master
    /// has stopped, which drops it); gives it back otherwise.
    pub(crate) fn try_send(&self, call: Call) -> Option<Call> {
        match self.queue(&call.request).try_send(call) {
            Err(mpsc::error::TrySendError::Full(call)) => Some(call),
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => None,
        }
    }

    /// Room for one request other than a KeepAlive, once the master's
    /// queue has it. The wait keeps its place in line for as long as the
    /// future is kept.
    pub(crate) fn room(&self) -> impl Future<Output = Option<Room>> + Send + 'static {
        let calls = self.calls.clone();
        async move { calls.reserve_owned().await.ok() }
    }

    /// A handle onto the two queues given, for tests that stand in for
    /// the master.
    #[cfg(test)]
    pub(crate) fn from_queues(calls: mpsc::Sender<Call>, keepalives: mpsc::Sender<Call>) -> Self {
        let clock =
            super::MasterClock::new(tokio::time::Instant::now(), crate::time::Millis::ZERO, 1.0);
        MasterHandle {
            calls,
            returning: keepalives.clone(),
            keepalives,
            clock,
        }
    }

    /// Whether `request` goes to the master's queue of KeepAlives.
    pub(crate) fn is_keepalive(request: &Request) -> bool {
        matches!(request, Request::KeepAlive(_) | Request::KeepAliveAll(_))
    }

    fn queue(&self, request: &Request) -> &mpsc::Sender<Call> {
        if Self::is_keepalive(request) {
            &self.keepalives
        } else {
            &self.calls
        }
    }
}
