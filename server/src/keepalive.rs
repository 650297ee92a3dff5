//! Held KeepAlives (SPEC "KeepAlive").
//!
//! The master answers a KeepAlive only when the session's lease is about to
//! end (or at once when asked to), so a healthy client costs one request per
//! lease rather than one per polling interval, and the reply can carry
//! whatever happened meanwhile. At most one KeepAlive is held per session: a
//! new one answers the old one at once, so a client that reconnects is never
//! stuck behind a request on a dead connection.
//!
//! This is what is held; holding and answering is `master/keepalive.rs`.

use crate::reply::ReplyTx;
use crate::time::Millis;

/// A KeepAlive waiting for its answer, kept in its session's lease. The
/// session's one timer is set for its answer while it waits
/// (`Leases::answer_held_at`; see `Master::session_timer_fired`, below).
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) reply: ReplyTx,
    pub(crate) received_at: Millis,
}
