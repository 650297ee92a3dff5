//! A [`Call`]: what a connection hands the master, a request with the way
//! back to that connection. The master may hold it (a KeepAlive, a wait,
//! work behind a cache invalidation) and answer much later.

use std::sync::Arc;

use leasehold_protocol::Request;

use crate::caller::Caller;
use crate::reply::ReplyTx;
use crate::time::Millis;

/// A request from a connection, with the channel its reply goes to.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) request: Request,
    pub(crate) reply: ReplyTx,
    /// The peer address of the connection it came on, for quotas
    /// (`QUOTA-1`); `None` where there is no connection (tests).
    pub(crate) peer: Option<std::net::IpAddr>,
    /// Who sent it; `None` where there is no connection (tests), which
    /// acts as an anonymous caller.
    pub(crate) caller: Option<Arc<Caller>>,
    /// Master time when its connection read it; `None` where there is no
    /// connection (tests), which counts as when the master takes it. A
    /// KeepAlive renews a lease that had not run out when it arrived,
    /// however late the master reads it (`SES-6`).
    pub(crate) arrived: Option<Millis>,
}

impl Call {
    /// `request`, sent by `caller` over a connection, answered through
    /// `reply`.
    pub(crate) fn from(
        request: Request,
        reply: ReplyTx,
        caller: &Arc<Caller>,
        arrived: Millis,
    ) -> Call {
        Call {
            request,
            reply,
            peer: Some(caller.peer),
            caller: Some(caller.clone()),
            arrived: Some(arrived),
        }
    }
}
