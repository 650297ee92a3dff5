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

use leasehold_protocol::{Error, ErrorCode, Event, EventKind, NodeView, Response, SessionInfo};
use tokio::sync::{mpsc, Notify};

/// A reply on its way to the connection's writer: one pointer wide. A
/// connection's queue keeps blocks of 32 slots allocated for as long as it
/// is open, several at a time as it cycles through them, so a slot's size
/// is paid per idle connection many times over: the fields, not only the
/// body, live behind the box, in the one allocation a reply needs anyway.
#[derive(Debug)]
pub(crate) struct Reply(Box<Queued>);

#[derive(Debug)]
struct Queued {
    id: u64,
    body: Result<Response, Error>,
    /// Counted against the connection's in-flight limit (`CONN-3`).
    limited: bool,
    /// What it counts against the connection's reply budget (`CONN-9`).
    bytes: usize,
}

impl Reply {
    /// The id of the request it answers.
    pub(crate) fn id(&self) -> u64 {
        self.0.id
    }

    /// Whether it counts against the connection's in-flight limit.
    pub(crate) fn limited(&self) -> bool {
        self.0.limited
    }

    /// What it counts against the connection's reply budget.
    pub(crate) fn bytes(&self) -> usize {
        self.0.bytes
    }

    /// The answer itself.
    pub(crate) fn into_body(self) -> Result<Response, Error> {
        self.0.body
    }
}

/// A bound on what a few fixed fields of any message take on the wire.
const FIXED: usize = 64;

fn node_len(node: &Option<NodeView>) -> usize {
    node.as_ref().map_or(0, |n| {
        n.key.len()
            + n.contents.as_ref().map_or(0, Vec::len)
            + n.stat.lock_holders.len() * 24
            + FIXED
    })
}

fn event_len(event: &Event) -> usize {
    FIXED
        + match &event.kind {
            EventKind::Node {
                key,
                change,
                contents,
                ..
            } => {
                key.len()
                    + contents.as_ref().map_or(0, Vec::len)
                    + match change {
                        leasehold_protocol::Change::ChildAdded { child }
                        | leasehold_protocol::Change::ChildRemoved { child }
                        | leasehold_protocol::Change::ChildModified { child } => child.len(),
                        _ => 0,
                    }
            }
            EventKind::LockLost { key, .. } | EventKind::LockConflict { key, .. } => key.len(),
            EventKind::Invalidate { keys } => keys.iter().map(|k| k.len() + 2).sum(),
            EventKind::EventsLost | EventKind::Failover { .. } => 0,
        }
}

fn info_len(info: &SessionInfo) -> usize {
    FIXED + info.name.len() + info.checks.iter().map(|c| c.len() + 1).sum::<usize>()
}

/// About what a reply takes on the wire, cheaply: it is what the reply
/// costs the connection's budget while it waits to be written, and only
/// the large parts (contents, keys, lists) matter for that.
pub(crate) fn approx_len(body: &Result<Response, Error>) -> usize {
    let strings = |items: &[String]| items.iter().map(|s| s.len() + 2).sum::<usize>();
    FIXED
        + match body {
            Err(e) => e.message.len(),
            Ok(Response::Node { node, .. }) | Ok(Response::Cached { node, .. }) => node_len(node),
            Ok(Response::Keys { keys, .. }) | Ok(Response::Deleted { keys, .. }) => strings(keys),
            Ok(Response::KeepAlive { events, .. }) => events.iter().map(event_len).sum(),
            Ok(Response::KeepAliveAll { answers }) => answers
                .iter()
                .map(|answer| match answer {
                    Ok(grant) => FIXED + grant.events.iter().map(event_len).sum::<usize>(),
                    Err(e) => FIXED + e.message.len(),
                })
                .sum(),
            Ok(Response::SessionInfo(info)) => info_len(info),
            Ok(Response::Sessions { sessions, .. }) => sessions.iter().map(info_len).sum(),
            Ok(Response::Checks { checks, .. }) => checks
                .iter()
                .map(|c| FIXED + c.name.len() + c.note.len())
                .sum(),
            Ok(Response::CheckSet { invalidated, .. })
            | Ok(Response::CheckDeleted { invalidated, .. }) => invalidated.len() * 17,
            Ok(Response::Acquired { sequencer, .. }) | Ok(Response::Sequencer { sequencer }) => {
                sequencer.len()
            }
            Ok(Response::SnapshotBytes { bytes, .. }) => bytes.len(),
            Ok(Response::Locks { locks, .. }) => locks
                .iter()
                .map(|l| {
                    FIXED
                        + l.key.len()
                        + l.holders
                            .iter()
                            .map(|h| FIXED + h.name.len())
                            .sum::<usize>()
                        + l.waiters
                            .iter()
                            .map(|w| FIXED + w.name.len())
                            .sum::<usize>()
                })
                .sum(),
            Ok(_) => 0,
        }
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
    /// Bytes of replies queued and not yet written (`CONN-9`).
    pub(crate) queued_bytes: AtomicUsize,
    /// The same, summed over every connection of the master.
    pub(crate) all_queued_bytes: Arc<AtomicUsize>,
    /// Requests of any kind, held KeepAlives included, whose replies are
    /// not yet written: a connection with none is idle (`CONN-11`).
    pub(crate) unanswered: AtomicUsize,
    /// Signalled each time the writer takes a reply off the queue.
    pub(crate) drained: Notify,
    /// Where replies are counted (`OPS-1`): held here, once per
    /// connection, so that a request clones no shared handle.
    pub(crate) metrics: crate::metrics::Metrics,
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
    meter: Option<Meter>,
    /// Bytes already counted against the connection's budget for the
    /// reply the master has decided on and not yet queued (`CONN-9`).
    reserved: usize,
}

/// What a reply is counted as once it is sent (`OPS-1`), into its
/// connection's metrics.
#[derive(Debug)]
struct Meter {
    kind: &'static str,
    /// When the request arrived; `None` for a KeepAlive, whose wait is its
    /// lease's, not the master's.
    since: Option<tokio::time::Instant>,
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
            meter: None,
            reserved: 0,
        }
    }

    /// Counts the reply, when sent, as an answer to a request of `kind`,
    /// timed from now unless `timed` is false.
    pub(crate) fn metered(mut self, kind: &'static str, timed: bool) -> ReplyTx {
        self.meter = Some(Meter {
            kind,
            since: timed.then(tokio::time::Instant::now),
        });
        self
    }

    /// Counts `body` against the connection's budget from now, before it
    /// is queued: replies the master decides on in one turn (every watch
    /// a write wakes, a batch waiting for the disk) count as each is
    /// decided, so the next in the same turn sees them (`CONN-9`).
    pub(crate) fn reserve(&mut self, body: &Result<Response, Error>) {
        let bytes = approx_len(body);
        self.flow.queued_bytes.fetch_add(bytes, Ordering::AcqRel);
        self.flow
            .all_queued_bytes
            .fetch_add(bytes, Ordering::AcqRel);
        self.reserved += bytes;
    }

    /// Which connection the reply goes to: the same for every request of
    /// one connection, and no other's while any of its replies is alive.
    pub(crate) fn connection(&self) -> usize {
        Arc::as_ptr(&self.flow) as usize
    }

    /// The id of the request it answers.
    #[cfg(test)]
    pub(crate) fn request_id(&self) -> u64 {
        self.id
    }

    /// Queues the reply; fails if the connection is gone.
    pub(crate) fn send(mut self, body: Result<Response, Error>) -> Result<(), Undelivered> {
        let to = self.to.take().expect("a reply is sent once");
        self.queue(&to, body)
    }

    fn queue(
        &mut self,
        to: &mpsc::UnboundedSender<Reply>,
        body: Result<Response, Error>,
    ) -> Result<(), Undelivered> {
        if let Some(meter) = &self.meter {
            let outcome = body.as_ref().map(|_| ()).map_err(|e| e.code);
            let took = meter.since.map(|since| since.elapsed());
            self.flow.metrics.answered(meter.kind, outcome, took);
        }
        // A reply reserved when decided is counted already, as what it
        // was then: the body sent is that one, or the short refusal of a
        // reply dropped unsent, which the reservation more than covers.
        let bytes = match std::mem::take(&mut self.reserved) {
            0 => {
                let bytes = approx_len(&body);
                self.flow.queued_bytes.fetch_add(bytes, Ordering::AcqRel);
                self.flow
                    .all_queued_bytes
                    .fetch_add(bytes, Ordering::AcqRel);
                bytes
            }
            reserved => reserved,
        };
        self.flow.queued.fetch_add(1, Ordering::AcqRel);
        let reply = Reply(Box::new(Queued {
            id: self.id,
            body,
            limited: self.limited,
            bytes,
        }));
        to.send(reply).map_err(|_| {
            self.flow.queued.fetch_sub(1, Ordering::AcqRel);
            self.flow.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
            self.flow
                .all_queued_bytes
                .fetch_sub(bytes, Ordering::AcqRel);
            Undelivered
        })
    }

    /// Whether the connection's unread replies have used up `budget`, or
    /// those of all connections have used up `all_budget` and this one's
    /// are more than `share`: its peer does not read them, so it gets
    /// nothing large until it does (`CONN-9`).
    pub(crate) fn congested(&self, budget: usize, all_budget: usize, share: usize) -> bool {
        let own = self.flow.queued_bytes.load(Ordering::Acquire);
        own >= budget
            || (own >= share && self.flow.all_queued_bytes.load(Ordering::Acquire) >= all_budget)
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

#[cfg(test)]
mod tests {
    use super::*;

    // A connection's queue keeps blocks of slots allocated while it is
    // open: a slot wider than a pointer costs every idle connection.
    #[test]
    fn a_queued_reply_is_one_pointer_wide() {
        assert_eq!(std::mem::size_of::<Reply>(), std::mem::size_of::<usize>());
    }

    #[test]
    fn a_queued_reply_keeps_its_id_budget_and_body() {
        let (tx, mut rx) = channel(7);
        tx.send(Ok(Response::Destroyed)).unwrap();
        let reply = rx.try_recv().unwrap();
        assert_eq!(reply.id(), 7);
        assert!(!reply.limited());
        assert!(reply.bytes() > 0);
        assert_eq!(reply.into_body(), Ok(Response::Destroyed));
    }
}
