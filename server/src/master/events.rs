//! The master's side of events: subscriptions made and ended, changes
//! fanned out to the sessions' queues, queues delivered on KeepAlive
//! replies (`EV-1`..).

use leasehold_protocol::{
    event_mask, Change, Error, ErrorCode, EventKind, Response, SessionId, EVENT_CONTENTS_MAX,
};

use super::Engine;
use crate::access::Principal;
use crate::config::FANOUT_SLICE;
use crate::events::{Happened, Subscription, SUBSCRIPTIONS_PER_SESSION};
use crate::holding::LetGo;
use crate::node::NodeChange;
use crate::node::{check_key, check_prefix};
use crate::state::StateEvent;
use crate::tally::Limit;
use leasehold_protocol::access::Rights;

impl Engine {
    pub(crate) fn subscribe(
        &mut self,
        session: SessionId,
        key: String,
        prefix: bool,
        mask: u32,
        peer: Option<std::net::IpAddr>,
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
        let mine = events.by_session.entry(session).or_default();
        if let Some(&id) = mine.get(&(key.clone(), prefix)) {
            // The same again: one subscription hears what both asked for,
            // so a client cannot multiply the master's fan-out by
            // repeating itself.
            let from = events.changes + 1;
            if let Some(sub) = events.subscriptions.get_mut(&id) {
                let wider = sub.mask_at(from) | mask;
                if wider != sub.mask_at(from) {
                    sub.masks.push((from, wider));
                }
            }
            return Ok(Response::Subscribed { subscription: id });
        }
        if mine.len() >= SUBSCRIPTIONS_PER_SESSION {
            self.tally.refused(Limit::SubscriptionsPerSession);
            return Err(Error::new(
                ErrorCode::LimitReached,
                format!("a session may have at most {SUBSCRIPTIONS_PER_SESSION} subscriptions"),
            ));
        }
        if events.subscriptions.len() >= self.config.max_subscriptions {
            self.tally.refused(Limit::Subscriptions);
            return Err(Error::new(
                ErrorCode::LimitReached,
                format!(
                    "the master holds its maximum of {} subscriptions",
                    self.config.max_subscriptions
                ),
            ));
        }
        events.next_subscription += 1;
        // Unique across masters too: a client's old ids never name a new
        // master's subscriptions (`FO-6`).
        let id = (self.config.epoch << 32) | events.next_subscription;
        mine.insert((key.clone(), prefix), id);
        let subscription = Subscription {
            session,
            key,
            prefix,
            payer: peer,
            masks: vec![(0, mask)],
        };
        events.insert_subscription(id, subscription);
        if let Some(peer) = peer {
            self.quotas.subscriptions.take(id, peer, 1); // QUOTA-3
        }
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
        self.quotas.subscriptions.give_back(&id);
        if let Some(sub) = events.drop_subscription(id) {
            if let Some(mine) = events.by_session.get_mut(&session) {
                mine.remove(&(sub.key, sub.prefix));
            }
        }
        Ok(Response::Unsubscribed)
    }

    /// Decides who hears of a state change (`EV-5`, `EV-6`). The events go
    /// to the outbox, which `deliver_events` empties into the queues.
    pub(crate) fn publish(&mut self, event: &StateEvent) {
        let ev = &mut self.events;
        ev.changes += 1;
        // Events are published as their command is applied: the state's
        // index is that command's (`EV-10`).
        let index = self.state.index();
        let at = Happened {
            index,
            contents: None,
        };
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
                // Small contents ride along, so a subscriber need not
                // read them back; only as this command left them, and
                // never so large that one event could not fit a reply
                // under a small `--max-frame`.
                let carried = EVENT_CONTENTS_MAX.min(self.config.max_frame / 8);
                let contents = self
                    .state
                    .namespace()
                    .get(key)
                    .filter(|n| n.modify_index == index && n.contents.len() <= carried)
                    .map(|n| n.contents.clone());
                ev.send_covering(key, event_mask::CONTENTS, own, Happened { index, contents });
                ev.send_parent(key, child_mask, child, index);
            }
            StateEvent::NodeDeleted { key } => {
                ev.send_covering(key, event_mask::CONTENTS, Change::Deleted, at);
                let change = Change::ChildRemoved { child: key.clone() };
                ev.send_parent(key, event_mask::CHILD_REMOVED, change, index);
            }
            StateEvent::LockAcquired { key, session, .. } => {
                let change = Change::LockAcquired { holder: *session };
                ev.send_covering(key, event_mask::LOCK_ACQUIRED, change, at);
                // Granted with others still in line: the new holder hears
                // of the head of it at once, in the grant's own commit.
                let head = self.state.locks().get(key).and_then(|l| l.waiters.front());
                if let Some(head) = head {
                    let kind = EventKind::LockConflict {
                        key: key.clone(),
                        waiter: head.session,
                    };
                    ev.send_session(*session, kind);
                }
            }
            StateEvent::LockReleased {
                key,
                session,
                generation,
                why,
            } => {
                let change = Change::LockReleased { holder: *session };
                ev.send_covering(key, event_mask::LOCK_RELEASED, change, at);
                // Taken from a live holder: its node was deleted under it
                // (`LOCK-8`).
                if *why == LetGo::Deleted {
                    let kind = EventKind::LockLost {
                        key: key.clone(),
                        lock_generation: *generation,
                    };
                    ev.send_session(*session, kind);
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
                        ev.send_session(*holder, kind);
                    }
                }
            }
            StateEvent::SessionEnded { id, .. } => {
                for subscription in ev.forget_session(*id) {
                    self.quotas.subscriptions.give_back(&subscription);
                }
            }
            _ => {}
        }
    }

    /// Queues a slice of the outbox (`EV-9`); the held KeepAlive of every
    /// session that got events is answered once the input is handled
    /// (`EV-3`, `Engine::step`). Only live sessions have queues: one that
    /// ended hears no more.
    pub(crate) fn deliver_events(&mut self) {
        let (state, sessions, leases) = (&self.state, &self.quotas.sessions, &self.leases);
        let access = state.access();
        let unfiltered = self.config.unsafe_unfiltered_events;
        let may_hear = |session: SessionId, kind: &EventKind| {
            // A session hears as the principal that created it (`ACL-4`).
            if !access.enabled || unfiltered {
                return true;
            }
            let principal = access
                .owner(session)
                .map_or(Principal::Anonymous, |owner| owner.principal());
            event_keys(kind)
                .iter()
                .all(|key| access.allows(&principal, key, Rights::READ))
        };
        self.events.drain(
            FANOUT_SLICE,
            |session| {
                let creator = super::quotas::creator(leases, sessions, session);
                state.session(session).map(|_| creator)
            },
            may_hear,
        );
    }
}

/// The keys an event tells of: its own, and a child's for a child change.
/// An invalidation names keys its session read into its cache when it
/// could, and must reach the cache whatever the rules say now, or the
/// cache would go on serving what the master no longer holds: it tells
/// nothing of the new contents (`ACL-4`).
fn event_keys(kind: &EventKind) -> Vec<&str> {
    match kind {
        EventKind::Node { key, change, .. } => match change {
            Change::ChildAdded { child }
            | Change::ChildRemoved { child }
            | Change::ChildModified { child } => vec![key, child],
            _ => vec![key],
        },
        EventKind::LockLost { key, .. } | EventKind::LockConflict { key, .. } => vec![key],
        EventKind::Invalidate { .. } | EventKind::EventsLost | EventKind::Failover { .. } => {
            Vec::new()
        }
    }
}
