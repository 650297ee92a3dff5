//! Events, piggybacked on KeepAlive replies (SPEC "Events").
//!
//! Subscriptions and queues are the master's soft state, like leases: a new
//! master starts without them and clients subscribe again after the
//! fail-over event. What changed comes from the state machine's events; this
//! module decides who hears of it, and `master/events.rs` carries it out.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;

pub use crate::config::{EVENTS_PER_REPLY, EVENT_QUEUE, SUBSCRIPTIONS_PER_SESSION};
use leasehold_protocol::{Change, Event, EventKind, SessionId};

use crate::recovering::{Recovered, Recovering};

/// Who a subscription's fan-out is charged to: the peer address that made
/// it, as its quota is (`QUOTA-3`, `EV-9`); `None` where none is known.
pub(crate) type Payer = Option<IpAddr>;

#[derive(Debug)]
pub(crate) struct Subscription {
    pub(crate) session: SessionId,
    pub(crate) key: String,
    pub(crate) prefix: bool,
    pub(crate) payer: Payer,
    /// Its mask, and the number of the first change each widening of it
    /// applies to, oldest first: subscribing again widens it for changes
    /// from then on, not for those still being fanned out (`EV-5`).
    pub(crate) masks: Vec<(u64, u32)>,
}

impl Subscription {
    /// The mask in force when change number `change` was applied.
    pub(crate) fn mask_at(&self, change: u64) -> u32 {
        self.masks
            .iter()
            .rev()
            .find(|(from, _)| *from <= change)
            .map_or(0, |(_, mask)| *mask)
    }
}

#[derive(Debug, Default)]
pub(crate) struct Queue {
    /// Sequence number of the next event; the first is 1 (`EV-1`).
    pub(crate) next_seq: u64,
    pub(crate) pending: VecDeque<Event>,
    /// The encoded size of `pending`.
    pub(crate) bytes: usize,
    /// The peer address that created the session, whose budget the queue
    /// counts against (`EV-4`).
    pub(crate) owner: Option<IpAddr>,
}

/// How many bytes of events may wait, for one peer address's sessions and
/// for all sessions (`EV-4`), and how many deliveries the master may owe
/// one payer's subscriptions before it cuts their fan-out off (`EV-9`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EventBudget {
    pub(crate) per_peer: usize,
    pub(crate) all: usize,
    pub(crate) fanout_per_payer: usize,
}

impl Default for EventBudget {
    fn default() -> Self {
        EventBudget {
            per_peer: usize::MAX,
            all: usize::MAX,
            fanout_per_payer: usize::MAX,
        }
    }
}

/// Index entries (a key, or a prefix), each with its subscriptions by
/// payer, so that one payer's fan-out can be charged and cut off without
/// walking anyone else's.
pub(crate) type Entries = BTreeMap<String, BTreeMap<Payer, BTreeSet<u64>>>;

/// Which index a fan-out walks.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Index {
    Exact,
    Prefix,
}

/// Events decided but not yet queued (`EV-9`), in the order the changes
/// were applied, so that each session still hears them in that order.
#[derive(Debug)]
pub(crate) enum Pending {
    /// One event for one session.
    Direct(SessionId, EventKind),
    /// One change for one payer's subscriptions under one index entry.
    FanOut(FanOut),
    /// The end of a payer's cut-off: each session it subscribed for hears
    /// `EventsLost`, after every event it heard before the cut-off and
    /// before any change after it (`EV-9`).
    Lost(Lost),
}

/// A cut-off payer's sessions being told they lost events, a slice at a
/// time: `after` is where the walk stands.
#[derive(Debug)]
pub(crate) struct Lost {
    pub(crate) payer: Payer,
    pub(crate) after: Option<SessionId>,
    /// Deliveries still counted as owed for it.
    pub(crate) left: usize,
}

/// When a change happened, and what it left when that is small (`EV-10`).
#[derive(Debug, Clone)]
pub(crate) struct Happened {
    pub(crate) index: u64,
    pub(crate) contents: Option<Vec<u8>>,
}

/// A change on its way to the subscriptions of one index entry, walked a
/// slice at a time: `after` is where the walk stands.
#[derive(Debug)]
pub(crate) struct FanOut {
    pub(crate) index: Index,
    pub(crate) entry: String,
    pub(crate) payer: Payer,
    /// Deliveries still counted as owed for it: the entry's subscriptions
    /// of that payer when the change was applied, less those walked.
    pub(crate) left: usize,
    /// The bits a subscription must have to hear it.
    pub(crate) mask: u32,
    /// The key the event names, and what happened.
    pub(crate) key: String,
    pub(crate) change: Change,
    pub(crate) at: Happened,
    /// The newest subscription when the change was applied: later ones did
    /// not exist then and do not hear of it. Ids only grow on a master.
    pub(crate) upto: u64,
    /// The change's number, to read each subscription's mask as it was.
    pub(crate) number: u64,
    pub(crate) after: Option<u64>,
}

/// Every subscription and every session's queue.
#[derive(Debug, Default)]
pub(crate) struct Events {
    pub(crate) subscriptions: BTreeMap<u64, Subscription>,
    pub(crate) exact: Entries,
    pub(crate) prefixes: Entries,
    /// The sessions each payer subscribed for, with how many
    /// subscriptions: who hears `EventsLost` when it is cut off.
    pub(crate) sessions_by_payer: BTreeMap<Payer, BTreeMap<SessionId, usize>>,
    /// Each session's subscriptions, by what they cover: one per key and
    /// kind (`EV-5`).
    pub(crate) by_session: BTreeMap<SessionId, BTreeMap<(String, bool), u64>>,
    pub(crate) queues: BTreeMap<SessionId, Queue>,
    /// The sequence number of the next event of each session whose queue
    /// emptied (`EV-1`): an acknowledged session costs this entry, not a
    /// queue and its buffer (about 200 bytes). A recovered session whose
    /// only event was its fail-over needs none: it numbers on from 2
    /// (`recovered`).
    pub(crate) quiet: BTreeMap<SessionId, u64>,
    /// What recovered sessions still owe: a KeepAlive (`FO-2`, the
    /// engine's to judge) and the fail-over event's acknowledgement
    /// (`FO-5`). One that awaits the event and has no queue has it
    /// implied, not queued: `Failover { epoch: failover_epoch }`,
    /// numbered 1, counted in the budgets as if queued
    /// (`Events::imply_failovers`). At a million sessions that spares the
    /// promotion a million queues and each session's two KeepAlives their
    /// looks at them.
    pub(crate) recovering: Recovering,
    pub(crate) failover_epoch: u64,
    /// Every session taken over with its fail-over event implied.
    pub(crate) recovered: Recovered,
    pub(crate) next_subscription: u64,
    /// Sessions with new events whose held KeepAlive is still to answer.
    pub(crate) woken: BTreeSet<SessionId>,
    /// What is decided and not yet queued, oldest first (`EV-9`).
    pub(crate) outbox: VecDeque<Pending>,
    /// About how many deliveries the outbox holds: an upper bound, from
    /// the size of each index entry when its change was applied; in all
    /// and by payer (`EV-9`).
    pub(crate) owed: usize,
    pub(crate) owed_by: BTreeMap<Payer, usize>,
    /// Payers whose fan-out is cut off until their `Lost` is delivered.
    pub(crate) cut_off: BTreeSet<Payer>,
    /// Cut-offs since the master started (`OPS-1`).
    pub(crate) cut_offs_total: u64,
    /// Bytes of events waiting, in all and by the peer address that
    /// created their sessions (`EV-4`).
    pub(crate) queued_bytes: usize,
    pub(crate) queued_by_peer: HashMap<IpAddr, usize>,
    pub(crate) budget: EventBudget,
    /// How many changes have been published.
    pub(crate) changes: u64,
    /// Events queued, and events dropped for an `EventsLost` (`EV-4`),
    /// since the master started (`OPS-1`).
    pub(crate) queued_total: u64,
    pub(crate) dropped_total: u64,
    /// Invalidation events queued (`CACHE-3`).
    pub(crate) invalidations_total: u64,
}

/// A bound on an event's encoded size: its keys, and a generous allowance
/// for the rest (ids, sequence number, tags).
pub(crate) fn encoded_size(event: &Event) -> usize {
    encoded_size_of(&event.kind)
}

/// What an event's encoding is allowed beyond its keys and contents.
const EVENT_ALLOWANCE: usize = 64;

/// The encoded size of `Failover { .. }`, as [`encoded_size_of`] counts it.
const FAILOVER_SIZE: usize = EVENT_ALLOWANCE;

pub(crate) fn encoded_size_of(kind: &EventKind) -> usize {
    let keys = match kind {
        EventKind::Node {
            key,
            change,
            contents,
            ..
        } => {
            key.len()
                + contents.as_ref().map_or(0, Vec::len)
                + match change {
                    Change::ChildAdded { child }
                    | Change::ChildRemoved { child }
                    | Change::ChildModified { child } => child.len(),
                    _ => 0,
                }
        }
        EventKind::LockLost { key, .. } | EventKind::LockConflict { key, .. } => key.len(),
        EventKind::Invalidate { keys } => keys.iter().map(|k| k.len() + 2).sum(),
        EventKind::EventsLost | EventKind::Failover { .. } => 0,
    };
    EVENT_ALLOWANCE + keys
}

impl Events {
    /// Drops what the client has acknowledged (`EV-2`). A session no
    /// longer awaits its fail-over event once that is dropped (`FO-5`).
    pub(crate) fn acknowledge(&mut self, session: SessionId, acked: u64) {
        let Some(queue) = self.queues.get_mut(&session) else {
            // Only an implied fail-over event can wait with no queue: it
            // is number 1.
            if acked >= 1 && self.recovering.acknowledged(&session) {
                self.release(None, FAILOVER_SIZE);
            }
            return;
        };
        let mut freed = 0;
        while queue.pending.front().is_some_and(|e| e.seq <= acked) {
            freed += queue.pending.pop_front().map_or(0, |e| encoded_size(&e));
        }
        queue.bytes -= freed;
        // Only while sessions await it is the queue walked for the event.
        let failover_left = self.recovering.awaiting() > 0
            && queue
                .pending
                .iter()
                .any(|e| matches!(e.kind, EventKind::Failover { .. }));
        let (owner, next_seq, empty) = (queue.owner, queue.next_seq, queue.pending.is_empty());
        if !failover_left && self.recovering.awaiting() > 0 {
            self.recovering.acknowledged(&session);
        }
        self.release(owner, freed);
        if empty {
            self.queues.remove(&session);
            self.quiet.insert(session, next_seq);
        }
    }

    /// Whether `session` must still acknowledge its fail-over event before
    /// anything but KeepAlives is served for it (`FO-5`).
    pub(crate) fn awaits_failover(&self, session: SessionId) -> bool {
        self.recovering.awaits_failover(&session)
    }

    /// The implied fail-over event of `session`, if it has one: it awaits
    /// the event and has no queue.
    fn implied_failover(&self, session: SessionId) -> Option<Event> {
        self.recovering.awaits_failover(&session).then_some(Event {
            seq: 1,
            kind: EventKind::Failover {
                epoch: self.failover_epoch,
            },
        })
    }

    /// Gives back `bytes` of queued events to the master's and `owner`'s
    /// budgets.
    pub(crate) fn release(&mut self, owner: Option<IpAddr>, bytes: usize) {
        self.queued_bytes -= bytes;
        if let Some(peer) = owner {
            if let Some(used) = self.queued_by_peer.get_mut(&peer) {
                *used -= bytes;
                if *used == 0 {
                    self.queued_by_peer.remove(&peer);
                }
            }
        }
    }

    pub(crate) fn has_pending(&self, session: SessionId) -> bool {
        match self.queues.get(&session) {
            Some(queue) => !queue.pending.is_empty(),
            None => self.recovering.awaits_failover(&session),
        }
    }

    /// The oldest unacknowledged events, for a KeepAlive reply (`EV-3`):
    /// at most 256, and no more than `budget` bytes, so the reply always
    /// fits a frame. The first is taken even if it alone is over the
    /// budget when `first_regardless`, so the queue always drains; a
    /// reply shared by many sessions (`KA-10`) grants that to the first
    /// taker only.
    pub(crate) fn pending(
        &self,
        session: SessionId,
        budget: usize,
        first_regardless: bool,
    ) -> Vec<Event> {
        let Some(queue) = self.queues.get(&session) else {
            let fits = first_regardless || FAILOVER_SIZE <= budget;
            return match self.implied_failover(session) {
                Some(event) if fits => vec![event],
                _ => Vec::new(),
            };
        };
        let mut used = 0;
        let mut taken = Vec::new();
        for event in queue.pending.iter().take(EVENTS_PER_REPLY) {
            let size = encoded_size(event);
            let free = first_regardless && taken.is_empty();
            if !free && used + size > budget {
                break;
            }
            used += size;
            taken.push(event.clone());
        }
        taken
    }

    /// Queues the fail-over event a recovered session must acknowledge
    /// before anything but KeepAlives is served for it (`FO-5`).
    /// Returns its sequence number.
    pub(crate) fn push_failover(&mut self, session: SessionId, epoch: u64) -> u64 {
        // A recovered session's creator is not known (quotas are soft
        // state), so its queue counts against the master's budget alone.
        self.tell(session, EventKind::Failover { epoch }, None)
    }

    /// Gives each of `sessions` (ascending ids), on a master that queued
    /// nothing yet, `Failover { epoch }` as its first event, as
    /// [`Events::push_failover`] would one by one, but implied rather than
    /// queued: no queue is made until another event comes or the session
    /// ends, and the budgets count it as queued (`EV-4`). No session is
    /// woken: nothing is held before the master serves. Returns the
    /// events' sequence number (1), or `None` having done nothing, when
    /// the queues are not empty or the master's budget would not hold
    /// them all (then each is pushed on its own, `EV-4`). Either way the
    /// caller marks every session as owing its acknowledgement
    /// ([`Events::take_over`]).
    pub(crate) fn imply_failovers(&mut self, sessions: &[SessionId], epoch: u64) -> Option<u64> {
        let bytes = FAILOVER_SIZE.checked_mul(sessions.len())?;
        let fresh = self.queues.is_empty() && self.quiet.is_empty();
        if !fresh || self.queued_bytes + bytes > self.budget.all {
            return None;
        }
        self.failover_epoch = epoch;
        self.recovered = Recovered::new(sessions.to_vec());
        self.queued_bytes += bytes;
        self.queued_total += sessions.len() as u64;
        Some(1)
    }

    /// Marks each of `sessions` as owing a KeepAlive (`FO-2`) and the
    /// acknowledgement of its fail-over event (`FO-5`).
    pub(crate) fn take_over(&mut self, sessions: &[SessionId]) {
        self.recovering = Recovering::new(sessions);
    }

    /// Queues `kind` for `session` at once, ahead of fan-out still owed
    /// (it reports no change, so no order with changes is kept), and
    /// marks the session's held KeepAlive for an answer. Returns the
    /// sequence number its acknowledgement must reach: that of `kind`, or
    /// of the `EventsLost` that replaced it (`EV-4`).
    /// Queues `keys`' invalidation for `session`, in events of at most
    /// `max_bytes` of keys each, so that every one fits a KeepAlive reply
    /// (`CACHE-3`, `EV-3`); returns the sequence number of the last.
    pub(crate) fn invalidate(
        &mut self,
        session: SessionId,
        keys: Vec<String>,
        owner: Option<IpAddr>,
        max_bytes: usize,
    ) -> u64 {
        let mut seq = 0;
        let mut chunk = Vec::new();
        let mut bytes = 0;
        for key in keys {
            let size = key.len() + 2;
            if !chunk.is_empty() && bytes + size > max_bytes {
                let keys = std::mem::take(&mut chunk);
                self.invalidations_total += 1;
                seq = self.tell(session, EventKind::Invalidate { keys }, owner);
                bytes = 0;
            }
            bytes += size;
            chunk.push(key);
        }
        if !chunk.is_empty() {
            self.invalidations_total += 1;
            seq = self.tell(session, EventKind::Invalidate { keys: chunk }, owner);
        }
        seq
    }

    pub(crate) fn tell(
        &mut self,
        session: SessionId,
        kind: EventKind,
        owner: Option<IpAddr>,
    ) -> u64 {
        self.push(session, kind, owner);
        self.woken.insert(session);
        self.queues.get(&session).map_or(0, |q| q.next_seq - 1)
    }

    /// Queues `kind` for `session`, created by `owner`. An event past the
    /// queue's length, its creator's budget or the master's replaces
    /// everything queued with one `EventsLost` (`EV-4`). Returns how many
    /// events that dropped: work a slice of fan-out counts (`EV-9`).
    pub(crate) fn push(
        &mut self,
        session: SessionId,
        kind: EventKind,
        owner: Option<IpAddr>,
    ) -> usize {
        let size = encoded_size_of(&kind);
        let queue = match self.queues.entry(session) {
            std::collections::btree_map::Entry::Occupied(queue) => queue.into_mut(),
            // The implied fail-over event comes first, queued as it would
            // have been: counted already, and against no peer (`FO-5`).
            std::collections::btree_map::Entry::Vacant(vacant)
                if self.recovering.awaits_failover(&session) =>
            {
                let first = Event {
                    seq: 1,
                    kind: EventKind::Failover {
                        epoch: self.failover_epoch,
                    },
                };
                vacant.insert(Queue {
                    next_seq: 2,
                    pending: VecDeque::from([first]),
                    bytes: FAILOVER_SIZE,
                    owner: None,
                })
            }
            std::collections::btree_map::Entry::Vacant(vacant) => {
                let next_seq = match self.quiet.remove(&session) {
                    Some(seq) => seq,
                    None if self.recovered.contains(&session) => 2,
                    None => 1,
                };
                vacant.insert(Queue {
                    next_seq,
                    owner,
                    ..Queue::default()
                })
            }
        };
        let owner = queue.owner;
        let peer_used = owner.map_or(0, |p| self.queued_by_peer.get(&p).copied().unwrap_or(0));
        let full = queue.pending.len() >= EVENT_QUEUE
            || peer_used + size > self.budget.per_peer
            || self.queued_bytes + size > self.budget.all;
        let mut dropped = 0;
        let kind = if full {
            // The fail-over event stays: the client must still hear of the
            // new master and acknowledge it (`FO-5`).
            let before = queue.pending.len() + 1;
            queue
                .pending
                .retain(|e| matches!(e.kind, EventKind::Failover { .. }));
            dropped = before - queue.pending.len();
            self.dropped_total += dropped as u64;
            let kept: usize = queue.pending.iter().map(encoded_size).sum();
            let freed = queue.bytes - kept;
            queue.bytes = kept;
            self.release(owner, freed);
            EventKind::EventsLost
        } else {
            kind
        };
        let Some(queue) = self.queues.get_mut(&session) else {
            return dropped;
        };
        let size = encoded_size_of(&kind);
        queue.pending.push_back(Event {
            seq: queue.next_seq,
            kind,
        });
        queue.next_seq += 1;
        queue.bytes += size;
        self.queued_bytes += size;
        self.queued_total += 1;
        if let Some(peer) = owner {
            *self.queued_by_peer.entry(peer).or_default() += size;
        }
        dropped
    }

    /// Ends a session's queue and subscriptions; returns their ids.
    pub(crate) fn forget_session(&mut self, session: SessionId) -> Vec<u64> {
        let awaited = self.recovering.forget(&session);
        if let Some(queue) = self.queues.remove(&session) {
            self.release(queue.owner, queue.bytes);
        } else if awaited {
            self.release(None, FAILOVER_SIZE);
        }
        self.quiet.remove(&session);
        self.recovered.ended(&session);
        let ids: Vec<u64> = self
            .by_session
            .remove(&session)
            .unwrap_or_default()
            .into_values()
            .collect();
        for id in &ids {
            self.drop_subscription(*id);
        }
        ids
    }

    /// Whether the session already has a subscription on `key` of this
    /// kind, which subscribing again widens (`EV-5`).
    pub(crate) fn subscribed(&self, session: SessionId, key: &str, prefix: bool) -> bool {
        self.by_session
            .get(&session)
            .is_some_and(|mine| mine.contains_key(&(key.to_string(), prefix)))
    }

    /// Adds a new subscription to the index its kind walks.
    pub(crate) fn insert_subscription(&mut self, id: u64, sub: Subscription) {
        let index = if sub.prefix {
            &mut self.prefixes
        } else {
            &mut self.exact
        };
        let entry = index.entry(sub.key.clone()).or_default();
        entry.entry(sub.payer).or_default().insert(id);
        let sessions = self.sessions_by_payer.entry(sub.payer).or_default();
        *sessions.entry(sub.session).or_default() += 1;
        self.subscriptions.insert(id, sub);
    }

    pub(crate) fn drop_subscription(&mut self, id: u64) -> Option<Subscription> {
        let sub = self.subscriptions.remove(&id)?;
        let index = if sub.prefix {
            &mut self.prefixes
        } else {
            &mut self.exact
        };
        if let Some(payers) = index.get_mut(&sub.key) {
            if let Some(ids) = payers.get_mut(&sub.payer) {
                ids.remove(&id);
                if ids.is_empty() {
                    payers.remove(&sub.payer);
                }
            }
            if payers.is_empty() {
                index.remove(&sub.key);
            }
        }
        if let Some(sessions) = self.sessions_by_payer.get_mut(&sub.payer) {
            if let Some(count) = sessions.get_mut(&sub.session) {
                *count -= 1;
                if *count == 0 {
                    sessions.remove(&sub.session);
                }
            }
            if sessions.is_empty() {
                self.sessions_by_payer.remove(&sub.payer);
            }
        }
        Some(sub)
    }

    /// Sends a change at `key` to the exact subscriptions on it and the
    /// prefix subscriptions on it or any ancestor (the root included).
    pub(crate) fn send_covering(&mut self, key: &str, mask: u32, change: Change, at: Happened) {
        self.fan_out(Index::Exact, key, mask, key, change.clone(), at.clone());
        let mut prefix = Some(key);
        while let Some(p) = prefix {
            self.fan_out(Index::Prefix, p, mask, key, change.clone(), at.clone());
            prefix = if p.is_empty() {
                None
            } else {
                Some(p.rfind('/').map_or("", |i| &p[..i]))
            };
        }
    }

    /// Sends a child change to the exact subscriptions on `key`'s parent.
    pub(crate) fn send_parent(&mut self, key: &str, mask: u32, change: Change, index: u64) {
        let parent = key.rfind('/').map_or("", |i| &key[..i]);
        let at = Happened {
            index,
            contents: None,
        };
        self.fan_out(Index::Exact, parent, mask, parent, change, at);
    }

    pub(crate) fn fan_out(
        &mut self,
        index: Index,
        entry: &str,
        mask: u32,
        key: &str,
        change: Change,
        at: Happened,
    ) {
        let subscribers = match index {
            Index::Exact => &self.exact,
            Index::Prefix => &self.prefixes,
        };
        let Some(payers) = subscribers.get(entry) else {
            return;
        };
        for (&payer, ids) in payers {
            if self.cut_off.contains(&payer) {
                continue; // its sessions hear `EventsLost` instead
            }
            let owed = self.owed_by.get(&payer).copied().unwrap_or(0);
            if owed + ids.len() > self.budget.fanout_per_payer {
                // The payer's subscriptions owe more than its share: what
                // they are owed is dropped, and what they would be owed
                // until its sessions hear `EventsLost` is never queued, so
                // the writers that matched them are not made to wait.
                self.cut_off.insert(payer);
                self.cut_offs_total += 1;
                let left = self.sessions_by_payer.get(&payer).map_or(0, BTreeMap::len);
                self.owed += left;
                self.outbox.push_back(Pending::Lost(Lost {
                    payer,
                    after: None,
                    left,
                }));
                continue;
            }
            *self.owed_by.entry(payer).or_default() += ids.len();
            self.owed += ids.len();
            self.outbox.push_back(Pending::FanOut(FanOut {
                index,
                entry: entry.to_string(),
                payer,
                left: ids.len(),
                mask,
                key: key.to_string(),
                change: change.clone(),
                at: at.clone(),
                upto: ids.last().copied().unwrap_or(0),
                number: self.changes,
                after: None,
            }));
        }
    }

    /// Counts `n` deliveries of `payer`'s as no longer owed.
    fn settle(&mut self, payer: Payer, n: usize) {
        self.owed = self.owed.saturating_sub(n);
        if let Some(owed) = self.owed_by.get_mut(&payer) {
            *owed = owed.saturating_sub(n);
            if *owed == 0 {
                self.owed_by.remove(&payer);
            }
        }
    }

    /// Whether `payer`'s fan-out is cut off (`EV-9`).
    #[cfg(test)]
    pub(crate) fn is_cut_off(&self, payer: Payer) -> bool {
        self.cut_off.contains(&payer)
    }

    pub(crate) fn send_session(&mut self, session: SessionId, kind: EventKind) {
        self.owed += 1;
        self.outbox.push_back(Pending::Direct(session, kind));
    }

    /// Whether fan-out is behind by more than the master lets writes add
    /// to (`EV-9`).
    pub(crate) fn backlogged(&self, limit: usize) -> bool {
        self.owed > limit
    }

    /// About how many deliveries are owed (an upper bound).
    #[cfg(test)]
    pub(crate) fn owed(&self) -> usize {
        self.owed
    }

    pub(crate) fn owes(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Queues what the outbox holds, looking at no more than `slice`
    /// subscriptions, oldest change first. `whose` gives the peer address
    /// that created a session, if known, and `None` for one that ended and
    /// may hear nothing more; `may_hear` whether a session may hear of an
    /// event's keys (`ACL-4`).
    pub(crate) fn drain(
        &mut self,
        mut slice: usize,
        whose: impl Fn(SessionId) -> Option<Option<IpAddr>>,
        may_hear: impl Fn(SessionId, &EventKind) -> bool,
    ) {
        while slice > 0 {
            let Some(front) = self.outbox.front_mut() else {
                break;
            };
            match front {
                Pending::Direct(..) => {
                    let Some(Pending::Direct(session, kind)) = self.outbox.pop_front() else {
                        unreachable!("the front was a direct event");
                    };
                    if let Some(owner) = whose(session).filter(|_| may_hear(session, &kind)) {
                        self.push(session, kind, owner);
                        self.woken.insert(session);
                    }
                    self.owed = self.owed.saturating_sub(1);
                    slice -= 1;
                }
                Pending::FanOut(job) if self.cut_off.contains(&job.payer) => {
                    // Cut off: its sessions hear `EventsLost` instead.
                    let (payer, left) = (job.payer, job.left);
                    self.dropped_total += left as u64;
                    self.outbox.pop_front();
                    self.settle(payer, left);
                    slice -= 1;
                }
                Pending::FanOut(job) => {
                    let index = match job.index {
                        Index::Exact => &self.exact,
                        Index::Prefix => &self.prefixes,
                    };
                    let lower = match job.after {
                        Some(after) => std::ops::Bound::Excluded(after),
                        None => std::ops::Bound::Unbounded,
                    };
                    let range = (lower, std::ops::Bound::Included(job.upto));
                    let ids: Vec<u64> = index
                        .get(&job.entry)
                        .and_then(|payers| payers.get(&job.payer))
                        .map(|ids| ids.range(range).take(slice).copied().collect())
                        .unwrap_or_default();
                    let exhausted = ids.len() < slice || ids.last() == Some(&job.upto);
                    let (mask, number, payer) = (job.mask, job.number, job.payer);
                    let (key, change) = (job.key.clone(), job.change.clone());
                    let at = job.at.clone();
                    // Each subscription looked at is work, and so is each
                    // event a full queue drops for it: a slice stops at
                    // its size either way.
                    let mut walked = 0;
                    let mut work = 0;
                    for &id in &ids {
                        if work >= slice {
                            break;
                        }
                        walked += 1;
                        work += 1;
                        let Some(sub) = self.subscriptions.get(&id) else {
                            continue;
                        };
                        if sub.mask_at(number) & mask != 0 {
                            let session = sub.session;
                            let kind = EventKind::Node {
                                subscription: id,
                                key: key.clone(),
                                change: change.clone(),
                                index: at.index,
                                contents: at.contents.clone(),
                            };
                            if !may_hear(session, &kind) {
                                continue;
                            }
                            work += self.push(session, kind, whose(session).flatten());
                            self.woken.insert(session);
                        }
                    }
                    slice -= work.clamp(1, slice);
                    let done = exhausted && walked == ids.len();
                    let Some(Pending::FanOut(job)) = self.outbox.front_mut() else {
                        unreachable!("the front was this fan-out");
                    };
                    let settled = if done { job.left } else { walked.min(job.left) };
                    job.left -= settled;
                    job.after = ids[..walked].last().copied().or(job.after);
                    if done {
                        self.outbox.pop_front();
                    }
                    self.settle(payer, settled);
                }
                Pending::Lost(lost) => {
                    let lower = match lost.after {
                        Some(after) => std::ops::Bound::Excluded(after),
                        None => std::ops::Bound::Unbounded,
                    };
                    let payer = lost.payer;
                    let sessions: Vec<SessionId> = self
                        .sessions_by_payer
                        .get(&payer)
                        .map(|s| {
                            let range = (lower, std::ops::Bound::Unbounded);
                            s.range(range).take(slice).map(|(s, _)| *s).collect()
                        })
                        .unwrap_or_default();
                    let exhausted = sessions.len() < slice;
                    let mut walked = 0;
                    let mut work = 0;
                    for &session in &sessions {
                        if work >= slice {
                            break;
                        }
                        walked += 1;
                        work += 1;
                        if let Some(owner) = whose(session) {
                            work += self.push(session, EventKind::EventsLost, owner);
                            self.woken.insert(session);
                        }
                    }
                    slice -= work.clamp(1, slice);
                    let done = exhausted && walked == sessions.len();
                    let Some(Pending::Lost(lost)) = self.outbox.front_mut() else {
                        unreachable!("the front was this cut-off's end");
                    };
                    let settled = if done {
                        lost.left
                    } else {
                        walked.min(lost.left)
                    };
                    lost.left -= settled;
                    lost.after = sessions[..walked].last().copied().or(lost.after);
                    if done {
                        self.outbox.pop_front();
                        self.cut_off.remove(&payer);
                    }
                    self.owed = self.owed.saturating_sub(settled);
                }
            }
        }
        if self.outbox.is_empty() {
            self.owed = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events() -> Events {
        Events {
            budget: EventBudget {
                per_peer: 1 << 20,
                all: 1 << 20,
                fanout_per_payer: 1 << 20,
            },
            ..Events::default()
        }
    }

    fn seqs(events: &Events, session: SessionId) -> Vec<u64> {
        events
            .queues
            .get(&session)
            .map(|q| q.pending.iter().map(|e| e.seq).collect())
            .unwrap_or_default()
    }

    fn recovered(events: &mut Events, sessions: &[SessionId]) {
        assert_eq!(events.imply_failovers(sessions, 3), Some(1));
        events.take_over(sessions);
    }

    // EV-1, EV-2, FO-5: a session whose events were all acknowledged keeps
    // no queue, and its next event follows the last it had.
    #[test]
    fn an_acknowledged_session_keeps_no_queue_and_numbers_on() {
        let mut events = events();
        let s = SessionId::from_u128(7);
        recovered(&mut events, &[s]);
        events.acknowledge(s, 0);
        assert!(events.awaits_failover(s), "the fail-over event still waits");
        events.acknowledge(s, 1);
        assert!(!events.awaits_failover(s));
        assert!(!events.queues.contains_key(&s));
        assert_eq!(events.queued_bytes, 0);
        assert_eq!(events.tell(s, EventKind::EventsLost, None), 2);
        assert_eq!(seqs(&events, s), vec![2]);
        events.acknowledge(s, 1);
        assert_eq!(
            seqs(&events, s),
            vec![2],
            "an old acknowledgement drops nothing"
        );
        events.acknowledge(s, 2);
        assert_eq!(events.tell(s, EventKind::EventsLost, None), 3);
    }

    // FO-5, EV-3: a recovered session's fail-over event is delivered as
    // number 1 and counted against the master's budget, with no queue.
    #[test]
    fn an_implied_fail_over_event_is_delivered_and_counted_as_if_queued() {
        let mut events = events();
        let (s, t) = (SessionId::from_u128(7), SessionId::from_u128(8));
        recovered(&mut events, &[s, t]);
        assert!(events.queues.is_empty());
        assert_eq!(events.queued_bytes, 2 * FAILOVER_SIZE);
        assert!(events.has_pending(s));
        let pending = events.pending(s, usize::MAX, false);
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].seq, 1);
        assert!(matches!(pending[0].kind, EventKind::Failover { epoch: 3 }));
        assert!(events.pending(s, FAILOVER_SIZE - 1, false).is_empty());
        assert_eq!(
            events.pending(s, 0, true).len(),
            1,
            "a lone KeepAlive's first"
        );
        events.acknowledge(s, 1);
        assert!(!events.has_pending(s));
        assert_eq!(events.queued_bytes, FAILOVER_SIZE);
        events.forget_session(t);
        assert_eq!(events.queued_bytes, 0);
        assert!(!events.awaits_failover(t));
    }

    // FO-5, EV-1: an event for a recovered session that has not yet
    // acknowledged its fail-over comes after that event, numbered 2.
    #[test]
    fn an_event_before_the_acknowledgement_follows_the_implied_fail_over_event() {
        let mut events = events();
        let s = SessionId::from_u128(7);
        recovered(&mut events, &[s]);
        assert_eq!(events.tell(s, EventKind::EventsLost, None), 2);
        assert_eq!(seqs(&events, s), vec![1, 2]);
        assert_eq!(events.queued_bytes, 2 * FAILOVER_SIZE);
        events.acknowledge(s, 1);
        assert!(!events.awaits_failover(s));
        assert_eq!(seqs(&events, s), vec![2]);
    }

    // EV-1: only the sessions taken over number on from 2; a session that
    // ended is forgotten, and one created anew numbers from 1.
    #[test]
    fn only_recovered_sessions_number_their_events_from_two() {
        let mut events = events();
        let (s, t, fresh) = (
            SessionId::from_u128(7),
            SessionId::from_u128(8),
            SessionId::from_u128(9),
        );
        recovered(&mut events, &[s, t]);
        events.acknowledge(s, 1);
        events.acknowledge(t, 1);
        events.forget_session(t);
        assert_eq!(events.tell(fresh, EventKind::EventsLost, None), 1);
        assert_eq!(events.tell(s, EventKind::EventsLost, None), 2);
        assert_eq!(events.tell(t, EventKind::EventsLost, None), 1);
    }

    #[test]
    fn a_forgotten_session_leaves_nothing_behind() {
        let mut events = events();
        let s = SessionId::from_u128(9);
        events.tell(s, EventKind::EventsLost, None);
        events.acknowledge(s, 1);
        events.forget_session(s);
        assert!(events.quiet.is_empty() && events.queues.is_empty());
        assert_eq!(events.tell(s, EventKind::EventsLost, None), 1);
    }
}
