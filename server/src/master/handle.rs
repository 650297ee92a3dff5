//! The way into the master task: connections send it [`Call`]s through a
//! [`MasterHandle`], KeepAlives on a queue of their own.

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
}

impl MasterHandle {
    /// Sends `request` to the master, which answers through `reply`. A
    /// KeepAlive's reply may come much later (it is held).
    pub(crate) async fn call(
        &self,
        request: Request,
        reply: ReplyTx,
        caller: &std::sync::Arc<crate::caller::Caller>,
    ) {
        let queue = match request {
            Request::KeepAlive(_) | Request::KeepAliveAll(_) => &self.keepalives,
            _ => &self.calls,
        };
        // A closed master drops the call, and `reply` then answers that
        // it is shutting down.
        let _ = queue
            .send(Call {
                request,
                reply,
                peer: Some(caller.peer),
                caller: Some(caller.clone()),
            })
            .await;
    }
}
