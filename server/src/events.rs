//! Events, piggybacked on KeepAlive replies (SPEC "Events").
//!
//! Subscriptions and queues are the master's soft state, like leases: a new
//! master starts without them and clients subscribe again after the
//! fail-over event. What changed comes from the state machine's events; this
//! module decides who hears of it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use leasehold_protocol::{
    event_mask, Change, Error, ErrorCode, Event, EventKind, Response, SessionId,
};

use crate::master::Master;
use crate::node::{check_key, check_prefix};
use crate::state::{NodeChange, StateEvent};

/// Events one session may have waiting; past it they are dropped for one
/// `EventsLost` (`EV-4`).
pub const EVENT_QUEUE: usize = 1024;
/// Events one KeepAlive reply carries at most (`EV-3`).
pub const EVENTS_PER_REPLY: usize = 256;
/// Subscriptions one session may have (`EV-5`).
pub const SUBSCRIPTIONS_PER_SESSION: usize = 1024;

#[derive(Debug)]
struct Subscription {
    session: SessionId,
    key: String,
    prefix: bool,
    mask: u32,
}

#[derive(Debug, Default)]
struct Queue {
    /// Sequence number of the next event; the first is 1 (`EV-1`).
    next_seq: u64,
    pending: VecDeque<Event>,
}

/// Every subscription and every session's queue.
#[derive(Debug, Default)]
pub(crate) struct Events {
    subscriptions: BTreeMap<u64, Subscription>,
    exact: BTreeMap<String, BTreeSet<u64>>,
    prefixes: BTreeMap<String, BTreeSet<u64>>,
    by_session: BTreeMap<SessionId, BTreeSet<u64>>,
    queues: BTreeMap<SessionId, Queue>,
    next_subscription: u64,
    /// Sessions with new events whose held KeepAlive is still to answer.
    woken: BTreeSet<SessionId>,
}

/// A bound on an event's encoded size: its keys, and a generous allowance
/// for the rest (ids, sequence number, tags).
fn encoded_size(event: &Event) -> usize {
    let keys = match &event.kind {
        EventKind::Node { key, change, .. } => {
            key.len()
                + match change {
                    Change::ChildAdded { child }
                    | Change::ChildRemoved { child }
                    | Change::ChildModified { child } => child.len(),
                    _ => 0,
                }
        }
        EventKind::LockLost { key } | EventKind::LockConflict { key, .. } => key.len(),
        EventKind::EventsLost | EventKind::Failover { .. } => 0,
    };
    64 + keys
}

impl Events {
    /// Drops what the client has acknowledged (`EV-2`).
    pub(crate) fn acknowledge(&mut self, session: SessionId, acked: u64) {
        if let Some(queue) = self.queues.get_mut(&session) {
            while queue.pending.front().is_some_and(|e| e.seq <= acked) {
                queue.pending.pop_front();
            }
        }
    }

    pub(crate) fn has_pending(&self, session: SessionId) -> bool {
        self.queues
            .get(&session)
            .is_some_and(|q| !q.pending.is_empty())
    }

    /// The oldest unacknowledged events, for a KeepAlive reply (`EV-3`):
    /// at most 256, and past the first no more than `budget` bytes, so the
    /// reply always fits a frame and the queue always drains.
    pub(crate) fn pending(&self, session: SessionId, budget: usize) -> Vec<Event> {
        let Some(queue) = self.queues.get(&session) else {
            return Vec::new();
        };
        let mut used = 0;
        let mut taken = Vec::new();
        for event in queue.pending.iter().take(EVENTS_PER_REPLY) {
            let size = encoded_size(event);
            if !taken.is_empty() && used + size > budget {
                break;
            }
            used += size;
            taken.push(event.clone());
        }
        taken
    }

    /// Queues the fail-over event a recovered session must acknowledge
    /// before anything but KeepAlives is served for it (`FO-5`).
    pub(crate) fn push_failover(&mut self, session: SessionId, epoch: u64) {
        self.push(session, EventKind::Failover { epoch });
    }

    /// Whether the session's fail-over event still waits to be
    /// acknowledged.
    pub(crate) fn failover_unacknowledged(&self, session: SessionId) -> bool {
        self.queues.get(&session).is_some_and(|q| {
            q.pending
                .iter()
                .any(|e| matches!(e.kind, EventKind::Failover { .. }))
        })
    }

    fn push(&mut self, session: SessionId, kind: EventKind) {
        let queue = self.queues.entry(session).or_insert_with(|| Queue {
            next_seq: 1,
            pending: VecDeque::new(),
        });
        if queue.pending.len() >= EVENT_QUEUE {
            // The fail-over event stays: the client must still hear of the
            // new master and acknowledge it (`FO-5`).
            queue
                .pending
                .retain(|e| matches!(e.kind, EventKind::Failover { .. }));
            queue.pending.push_back(Event {
                seq: queue.next_seq,
                kind: EventKind::EventsLost,
            });
            queue.next_seq += 1;
            return;
        }
        queue.pending.push_back(Event {
            seq: queue.next_seq,
            kind,
        });
        queue.next_seq += 1;
    }

    fn forget_session(&mut self, session: SessionId) {
        self.queues.remove(&session);
        for id in self.by_session.remove(&session).unwrap_or_default() {
            self.drop_subscription(id);
        }
    }

    fn drop_subscription(&mut self, id: u64) -> Option<Subscription> {
        let sub = self.subscriptions.remove(&id)?;
        let index = if sub.prefix {
            &mut self.prefixes
        } else {
            &mut self.exact
        };
        if let Some(ids) = index.get_mut(&sub.key) {
            ids.remove(&id);
            if ids.is_empty() {
                index.remove(&sub.key);
            }
        }
        Some(sub)
    }

    /// Who hears of a change at `key`: exact subscriptions on it, and prefix
    /// subscriptions on it or any ancestor (the root included).
    fn covering(&self, key: &str, mask: u32) -> Vec<(u64, SessionId)> {
        let mut ids: Vec<u64> = self.exact.get(key).into_iter().flatten().copied().collect();
        let mut prefix = Some(key);
        while let Some(p) = prefix {
            ids.extend(self.prefixes.get(p).into_iter().flatten().copied());
            prefix = if p.is_empty() {
                None
            } else {
                Some(p.rfind('/').map_or("", |i| &p[..i]))
            };
        }
        self.matching(ids, mask)
    }

    /// Exact subscriptions on the parent of `key`, for child events.
    fn parents_of(&self, key: &str, mask: u32) -> Vec<(u64, SessionId)> {
        let parent = key.rfind('/').map_or("", |i| &key[..i]);
        let ids = self
            .exact
            .get(parent)
            .into_iter()
            .flatten()
            .copied()
            .collect();
        self.matching(ids, mask)
    }

    fn matching(&self, ids: Vec<u64>, mask: u32) -> Vec<(u64, SessionId)> {
        ids.into_iter()
            .filter_map(|id| {
                let sub = self.subscriptions.get(&id)?;
                (sub.mask & mask != 0).then_some((id, sub.session))
            })
            .collect()
    }
}

impl Master {
    pub(crate) fn subscribe(
        &mut self,
        session: SessionId,
        key: String,
        prefix: bool,
        mask: u32,
    ) -> Result<Response, Error> {
        if self.state.session(session).is_none() {
            return Err(self.state.missing_session(session));
        }
        let checked = if prefix {
            check_prefix(&key)
        } else {
            check_key(&key)
        };
        checked.map_err(|e| Error::new(ErrorCode::InvalidArgument, e))?;
        if mask & !event_mask::ALL != 0 || mask == 0 {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!("mask {mask:#x} names no event or unknown ones"),
            ));
        }
        let events = &mut self.events;
        if events.subscriptions.len() >= self.config.max_subscriptions {
            return Err(Error::new(
                ErrorCode::LimitReached,
                format!(
                    "the master holds its maximum of {} subscriptions",
                    self.config.max_subscriptions
                ),
            ));
        }
        let mine = events.by_session.entry(session).or_default();
        if mine.len() >= SUBSCRIPTIONS_PER_SESSION {
            return Err(Error::new(
                ErrorCode::LimitReached,
                format!("a session may have at most {SUBSCRIPTIONS_PER_SESSION} subscriptions"),
            ));
        }
        events.next_subscription += 1;
        // Unique across masters too: a client's old ids never name a new
        // master's subscriptions (`FO-6`).
        let id = (self.config.epoch << 32) | events.next_subscription;
        mine.insert(id);
        let index = if prefix {
            &mut events.prefixes
        } else {
            &mut events.exact
        };
        index.entry(key.clone()).or_default().insert(id);
        events.subscriptions.insert(
            id,
            Subscription {
                session,
                key,
                prefix,
                mask,
            },
        );
        Ok(Response::Subscribed { subscription: id })
    }

    pub(crate) fn unsubscribe(&mut self, session: SessionId, id: u64) -> Result<Response, Error> {
        let events = &mut self.events;
        if events
            .subscriptions
            .get(&id)
            .is_none_or(|s| s.session != session)
        {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!("the session has no subscription {id}"),
            ));
        }
        events.drop_subscription(id);
        if let Some(mine) = events.by_session.get_mut(&session) {
            mine.remove(&id);
        }
        Ok(Response::Unsubscribed)
    }

    /// Queues the events a state change means for each session, and answers
    /// the held KeepAlive of every session that got one (`EV-3`).
    pub(crate) fn publish(&mut self, event: &StateEvent) {
        let mut deliveries: Vec<(SessionId, EventKind)> = Vec::new();
        let node = |id: u64, key: &str, change: Change| EventKind::Node {
            subscription: id,
            key: key.to_string(),
            change,
        };
        let ev = &self.events;
        match event {
            StateEvent::NodeChanged { key, change } => {
                let (own, child, child_mask) = match change {
                    NodeChange::Touched => return,
                    NodeChange::Created => (
                        Change::Created,
                        Change::ChildAdded { child: key.clone() },
                        event_mask::CHILD_ADDED,
                    ),
                    NodeChange::Modified => (
                        Change::Modified,
                        Change::ChildModified { child: key.clone() },
                        event_mask::CHILD_MODIFIED,
                    ),
                };
                for (id, s) in ev.covering(key, event_mask::CONTENTS) {
                    deliveries.push((s, node(id, key, own.clone())));
                }
                for (id, s) in ev.parents_of(key, child_mask) {
                    let parent = key.rfind('/').map_or("", |i| &key[..i]);
                    deliveries.push((s, node(id, parent, child.clone())));
                }
            }
            StateEvent::NodeDeleted { key } => {
                for (id, s) in ev.covering(key, event_mask::CONTENTS) {
                    deliveries.push((s, node(id, key, Change::Deleted)));
                }
                let parent = key.rfind('/').map_or("", |i| &key[..i]);
                for (id, s) in ev.parents_of(key, event_mask::CHILD_REMOVED) {
                    let change = Change::ChildRemoved { child: key.clone() };
                    deliveries.push((s, node(id, parent, change)));
                }
            }
            StateEvent::LockAcquired { key, session, .. } => {
                for (id, s) in ev.covering(key, event_mask::LOCK_ACQUIRED) {
                    let change = Change::LockAcquired { holder: *session };
                    deliveries.push((s, node(id, key, change)));
                }
                // Granted with others still in line: the new holder hears
                // of the head of it at once, in the grant's own commit.
                let head = self.state.locks().get(key).and_then(|l| l.waiters.front());
                if let Some(head) = head {
                    let kind = EventKind::LockConflict {
                        key: key.clone(),
                        waiter: head.session,
                    };
                    deliveries.push((*session, kind));
                }
            }
            StateEvent::LockReleased {
                key,
                session,
                taken,
            } => {
                for (id, s) in ev.covering(key, event_mask::LOCK_RELEASED) {
                    let change = Change::LockReleased { holder: *session };
                    deliveries.push((s, node(id, key, change)));
                }
                if *taken {
                    deliveries.push((*session, EventKind::LockLost { key: key.clone() }));
                }
            }
            StateEvent::LockWaiting { key, waiter } => {
                // Only the first in line is news to the holders: the rest
                // would each cost them an early KeepAlive answer (and the
                // master an fsync, `STORE-1`) to say the same thing again.
                let first = |l: &&crate::lock::LockState| l.waiters.len() == 1;
                if let Some(lock) = self.state.locks().get(key).filter(first) {
                    for holder in lock.holders.keys() {
                        let kind = EventKind::LockConflict {
                            key: key.clone(),
                            waiter: *waiter,
                        };
                        deliveries.push((*holder, kind));
                    }
                }
            }
            StateEvent::SessionEnded { id, .. } => {
                self.events.forget_session(*id);
                return;
            }
            _ => return,
        }
        for (session, kind) in deliveries {
            // Only live sessions have queues; one that just ended hears no more.
            if self.state.session(session).is_some() {
                self.events.push(session, kind);
                // Answered once the whole command's events are queued:
                // answering may end a session, whose events must come
                // after these (`EV-1`).
                self.events.woken.insert(session);
            }
        }
    }

    /// Answers the held KeepAlives of sessions that got events.
    pub(crate) fn wake(&mut self) {
        let now = self.now();
        for session in std::mem::take(&mut self.events.woken) {
            if let Some(held) = self.take_held(session) {
                self.answer(session, held, now);
            }
        }
    }
}
