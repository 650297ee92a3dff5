//! The way into the master task: connections send it [`Call`]s through a
//! [`MasterHandle`], KeepAlives on a queue of their own.

use leasehold_protocol::Request;
use tokio::sync::mpsc;

use super::ReplyTx;

/// A request from a connection, with the channel its reply goes to.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) request: Request,
    pub(crate) reply: ReplyTx,
    /// The peer address of the connection it came on, for quotas
    /// (`QUOTA-1`); `None` where there is no connection (tests).
    pub(crate) peer: Option<std::net::IpAddr>,
}

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
        peer: Option<std::net::IpAddr>,
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
                peer,
            })
            .await;
    }
}
