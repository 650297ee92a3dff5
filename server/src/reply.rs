//! Where a reply goes: straight into the queue of the connection that sent
//! the request, tagged with the request's id.
//!
//! The master keeps a [`ReplyTx`] for every request it has not answered:
//! one per held KeepAlive, so a hundred thousand sessions hold a hundred
//! thousand of them. It is a handle on the connection's queue and the id,
//! nothing more: no channel of its own and no future waiting on it, which
//! keeps a held KeepAlive to a few dozen bytes and a reply to one hop from
//! the master to the connection's writer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use leasehold_protocol::{Error, ErrorCode, Response};
use tokio::sync::{mpsc, Notify};

/// A reply on its way to the connection's writer.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) id: u64,
    /// Boxed: a connection's queue keeps a block of slots allocated for
    /// as long as it is open, and a reply in place would make each slot,
    /// hence each idle connection, several kilobytes larger.
    pub(crate) body: Box<Result<Response, Error>>,
    /// Counted against the connection's in-flight limit (`CONN-3`).
    pub(crate) limited: bool,
}

/// What a connection's reader and writer share.
#[derive(Debug, Default)]
pub(crate) struct Flow {
    /// Replies queued and not yet written: past a bound the reader pauses,
    /// so a peer that stops reading cannot make its replies pile up.
    pub(crate) queued: AtomicUsize,
    /// Requests counted against the in-flight limit whose replies are not
    /// yet written.
    pub(crate) limited: AtomicUsize,
    /// Signalled each time the writer takes a reply off the queue.
    pub(crate) drained: Notify,
}

/// A reply that could not be queued: its connection is gone.
#[derive(Debug)]
pub(crate) struct Undelivered;

/// The way back to the connection that sent a request. Dropped without a
/// reply (the master stopping), it answers `Internal` so the request is
/// never left without one.
#[derive(Debug)]
pub(crate) struct ReplyTx {
    to: Option<mpsc::UnboundedSender<Reply>>,
    flow: Arc<Flow>,
    id: u64,
    limited: bool,
}

impl ReplyTx {
    pub(crate) fn new(
        to: mpsc::UnboundedSender<Reply>,
        flow: Arc<Flow>,
        id: u64,
        limited: bool,
    ) -> ReplyTx {
        ReplyTx {
            to: Some(to),
            flow,
            id,
            limited,
        }
    }

    /// Queues the reply; fails if the connection is gone.
    pub(crate) fn send(mut self, body: Result<Response, Error>) -> Result<(), Undelivered> {
        let to = self.to.take().expect("a reply is sent once");
        self.queue(&to, body)
    }

    fn queue(
        &self,
        to: &mpsc::UnboundedSender<Reply>,
        body: Result<Response, Error>,
    ) -> Result<(), Undelivered> {
        self.flow.queued.fetch_add(1, Ordering::AcqRel);
        let reply = Reply {
            id: self.id,
            body: Box::new(body),
            limited: self.limited,
        };
        to.send(reply).map_err(|_| {
            self.flow.queued.fetch_sub(1, Ordering::AcqRel);
            Undelivered
        })
    }

    /// Whether the connection is gone, so nobody would read a reply.
    pub(crate) fn is_closed(&self) -> bool {
        self.to.as_ref().is_none_or(|to| to.is_closed())
    }
}

impl Drop for ReplyTx {
    fn drop(&mut self) {
        if let Some(to) = self.to.take() {
            let _ = self.queue(
                &to,
                Err(Error::new(
                    ErrorCode::Internal,
                    "the master is shutting down",
                )),
            );
        }
    }
}

/// A reply handle and the queue it feeds, for tests of the master.
#[cfg(test)]
pub(crate) fn channel(id: u64) -> (ReplyTx, mpsc::UnboundedReceiver<Reply>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (ReplyTx::new(tx, Arc::default(), id, false), rx)
}
