//! Events a session hears of, on its KeepAlive replies (SPEC "Events").

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use leasehold_protocol::{event_mask, Change, Event, EventKind, SessionId};
use tokio::sync::{mpsc, watch};

use crate::config::ORPHANS;
use crate::session_machine::SessionState;

/// What a subscription hears.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubscriptionEvent {
    /// Something changed at `key` (`EV-10`).
    Changed {
        /// The key it concerns (for a child change, the subscribed key).
        key: String,
        /// What happened.
        change: Change,
        /// The global index it happened at: after `Created` or `Modified`,
        /// the node's new modify index.
        index: u64,
        /// With `Created` and `Modified`, the node's new contents when they
        /// are at most [`EVENT_CONTENTS_MAX`](crate::EVENT_CONTENTS_MAX)
        /// bytes, so small values need no read; otherwise `None`.
        contents: Option<Vec<u8>>,
    },
    /// Events were dropped (the master's queue or this buffer overflowed):
    /// re-read what you watch.
    EventsLost,
    /// The session entered this state (`CS-7`); after `Expired` or
    /// `Closed` the stream ends.
    Session(SessionState),
}

/// What to subscribe to.
///
/// ```
/// use leasehold::{event_mask, SubscribeOptions};
///
/// let everything_below = SubscribeOptions::prefix().mask(event_mask::ALL);
/// assert!(everything_below.prefix);
/// ```
#[derive(Debug, Clone)]
pub struct SubscribeOptions {
    /// Every key at or below the key, rather than the key and its children.
    pub prefix: bool,
    /// Which events, from [`event_mask`].
    pub mask: u32,
}

impl SubscribeOptions {
    /// The key itself and its direct children: contents, child and
    /// session state events.
    pub fn exact() -> Self {
        SubscribeOptions {
            prefix: false,
            mask: event_mask::CONTENTS
                | event_mask::CHILD_ADDED
                | event_mask::CHILD_REMOVED
                | event_mask::CHILD_MODIFIED
                | event_mask::SESSION_STATE,
        }
    }

    /// Every key at or below the key (the root when empty): contents and
    /// session state events.
    pub fn prefix() -> Self {
        SubscribeOptions {
            prefix: true,
            mask: event_mask::CONTENTS | event_mask::SESSION_STATE,
        }
    }

    /// Sets the mask.
    pub fn mask(mut self, mask: u32) -> Self {
        self.mask = mask;
        self
    }
}

/// One of the session's locks as this client knows it: the guards that
/// hold it, the acquires of it still waiting for their answers, and the
/// latest acquire of it the master answered.
#[derive(Debug)]
pub(crate) struct HeldLock {
    /// What its guards hear of it.
    pub(crate) signal: watch::Sender<LockSignal>,
    /// Guards that hold it. Every guard of one key holds the session's one
    /// holding: the lock is released when the last of them is
    /// (`LOCK-11`).
    pub(crate) guards: usize,
    /// Acquires of it (a `rewrite` too) waiting for their answers: each
    /// may tell the session it holds the lock.
    pub(crate) acquiring: usize,
    /// The index of the latest `Acquired` answer heard for it (or that a
    /// refused release named): the release names it, so a copy of it
    /// delivered late cannot undo an acquire answered after it was sent
    /// (`LOCK-4`).
    pub(crate) heard: u64,
    /// No guard holds it, and it is to be released once the acquires of it
    /// still waiting for their answers end without making a guard: until
    /// then an answer may still tell the session it holds the lock.
    pub(crate) release_pending: bool,
}

impl HeldLock {
    /// A record for a lock the session begins to ask for; `lost` if the
    /// session is closing, so no guard made from it counts as held.
    fn new(lost: bool) -> HeldLock {
        let signal = LockSignal {
            lost,
            ..LockSignal::default()
        };
        HeldLock {
            signal: watch::channel(signal).0,
            guards: 0,
            acquiring: 0,
            heard: 0,
            release_pending: false,
        }
    }

    /// Whether nothing of this client holds the lock or may be told it
    /// does.
    pub(crate) fn unused(&self) -> bool {
        self.guards == 0 && self.acquiring == 0
    }
}

/// What a lock's holder hears of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LockSignal {
    /// Every holding of the key is lost: events were lost (one may have
    /// been a `LockLost`), or the session is closing (`LOCK-11`).
    pub(crate) lost: bool,
    /// The highest lock generation the master said it took away (0:
    /// none). A key's generations only rise (`NS-2`), so the holdings at
    /// or below it are lost and a later one, taken after the event was
    /// sent, is not (`LOCK-13`).
    pub(crate) taken: u64,
    /// The latest session waiting for it.
    pub(crate) conflict: Option<SessionId>,
    /// How many times the session has entered jeopardy while holding it:
    /// counted, so a jeopardy over before anyone looked is still seen.
    pub(crate) jeopardies: u64,
}

impl LockSignal {
    /// Whether the holding of lock generation `generation` is lost, as far
    /// as the master's events tell.
    pub(crate) fn loses(&self, generation: u64) -> bool {
        self.lost || generation <= self.taken
    }
}

#[derive(Debug)]
pub(crate) struct Route {
    pub(crate) tx: mpsc::Sender<SubscriptionEvent>,
    pub(crate) overflowed: Arc<AtomicBool>,
    /// What it subscribed to (and whether it asked for session states), to
    /// subscribe again on a new master.
    pub(crate) key: String,
    pub(crate) options: SubscribeOptions,
    /// The master's id, shared with the
    /// [`Subscription`](crate::Subscription).
    pub(crate) id: Arc<AtomicU64>,
}

/// The mask bit that asks for `change` (`EV-5`).
fn bit_of(change: &Change) -> u32 {
    match change {
        Change::Created | Change::Modified | Change::Deleted => event_mask::CONTENTS,
        Change::ChildAdded { .. } => event_mask::CHILD_ADDED,
        Change::ChildRemoved { .. } => event_mask::CHILD_REMOVED,
        Change::ChildModified { .. } => event_mask::CHILD_MODIFIED,
        Change::LockAcquired { .. } => event_mask::LOCK_ACQUIRED,
        Change::LockReleased { .. } => event_mask::LOCK_RELEASED,
        // A kind of change this library does not know yet: every stream
        // hears it, rather than none.
        _ => event_mask::ALL,
    }
}

/// Where a session's events go: its subscriptions and its locks.
#[derive(Debug, Default)]
pub(crate) struct Dispatch {
    /// The streams of each of the master's subscriptions: more than one
    /// when several asked for the same key and kind.
    subscriptions: BTreeMap<u64, Vec<Route>>,
    orphans: VecDeque<(u64, SubscriptionEvent)>,
    /// Some orphan was dropped for room since the last install: a stream
    /// installed now may have missed events, and is told so.
    orphans_overflowed: bool,
    /// The key and kind of the `Subscribe` in flight, if any: its answer
    /// may name a subscription that already has streams, and what that
    /// subscription hears meanwhile is kept in `joined` for the new stream
    /// too (`EV-7`).
    pub(crate) joining: Option<(String, bool)>,
    joined: Vec<(u64, SubscriptionEvent)>,
    joined_overflowed: bool,
    /// Keys this client holds locks on, or asks for; released before a
    /// close destroys the session (`LOCK-11`).
    pub(crate) locks: BTreeMap<String, HeldLock>,
    /// Keys no guard holds any more whose releases are still under way
    /// (riding through a fail-over, `LOCK-15`), each with the latest
    /// acquire heard and how many releases of it are under way: a close
    /// releases these too, or destroying the session would put them in
    /// lock-delay rather than hand them on (`LOCK-11`).
    releasing: BTreeMap<String, (u64, u32)>,
    /// Semaphore contender keys still being deleted (`SEM-4`).
    pub(crate) leaving: std::collections::BTreeSet<String>,
    /// Semaphore contender keys being made, by one task of the session at
    /// a time (`SEM-1`).
    pub(crate) entering: std::collections::BTreeSet<String>,
    /// The session is closing: every guard counts as lost, those made from
    /// answers still to come too (`LOCK-11`).
    pub(crate) closing: bool,
    /// The close gave back the session's locks and destroyed it: a
    /// release that failed while it closed is done (`LOCK-11`).
    pub(crate) closed_cleanly: bool,
    /// The session has ended: a stream installed from now on ends at once,
    /// since nothing would end it later (`EV-8`).
    ended: bool,
}

impl Dispatch {
    /// Whether what this session did with semaphore contender key `key`
    /// is still being undone by nothing that holds or takes a slot: its
    /// delete under way (`SEM-4`), or its lock asked for by no guard and
    /// by no task taking a slot, only by a withdrawal or a release of an
    /// acquire given up (`LOCK-17`).
    pub(crate) fn winding_down(&self, key: &str) -> bool {
        self.leaving.contains(key)
            || (!self.entering.contains(key)
                && self.locks.get(key).is_some_and(|lock| lock.guards == 0))
    }

    /// An acquire of `key` is about to go out: what the guard it may make
    /// will hear of the lock.
    pub(crate) fn acquiring(&mut self, key: &str) -> watch::Receiver<LockSignal> {
        let closing = self.closing;
        let lock = self
            .locks
            .entry(key.to_string())
            .or_insert_with(|| HeldLock::new(closing));
        lock.acquiring += 1;
        lock.signal.subscribe()
    }

    /// An acquire of `key` is over: answered at `index` (with a guard made
    /// for it if `guard`), or not answered (`None`: refused, failed, or
    /// given up on). Returns the index to release the lock naming, if it
    /// is to be released now: no guard holds it, and a release waited for
    /// this acquire's end.
    #[must_use]
    pub(crate) fn acquire_ended(
        &mut self,
        key: &str,
        answered: Option<u64>,
        guard: bool,
    ) -> Option<u64> {
        let lock = self.locks.get_mut(key)?;
        lock.acquiring -= 1;
        if let Some(index) = answered {
            lock.heard = lock.heard.max(index);
        }
        if guard {
            lock.guards += 1;
            lock.release_pending = false;
        }
        if !lock.unused() {
            return None;
        }
        let release = lock.release_pending.then_some(lock.heard);
        self.locks.remove(key);
        release
    }

    /// A guard of `key` is gone (released, dropped, or freed with its
    /// node). If it was the last, and no acquire of the key awaits its
    /// answer, returns the index the release names (`LOCK-4`). While other
    /// guards hold it, the lock stays theirs; while an acquire awaits its
    /// answer, the release waits for it (`acquire_ended`), since that
    /// answer may tell the session it holds the lock.
    #[must_use]
    pub(crate) fn guard_gone(&mut self, key: &str) -> Option<u64> {
        let lock = self.locks.get_mut(key)?;
        lock.guards = lock.guards.saturating_sub(1);
        if lock.guards > 0 {
            return None;
        }
        if lock.acquiring > 0 {
            lock.release_pending = true;
            return None;
        }
        let heard = lock.heard;
        self.locks.remove(key);
        Some(heard)
    }

    /// A release of `key`, naming `heard`, is under way.
    pub(crate) fn release_started(&mut self, key: &str, heard: u64) {
        let entry = self.releasing.entry(key.to_string()).or_insert((heard, 0));
        entry.0 = entry.0.max(heard);
        entry.1 += 1;
    }

    /// A release of `key` is over, however it ended.
    pub(crate) fn release_ended(&mut self, key: &str) {
        if let Some(entry) = self.releasing.get_mut(key) {
            entry.1 -= 1;
            if entry.1 == 0 {
                self.releasing.remove(key);
            }
        }
    }

    /// What a close releases before it destroys the session (`LOCK-11`):
    /// every key the session holds, asks for, or is still releasing, each
    /// naming the latest acquire of it heard.
    pub(crate) fn to_release_on_close(&self) -> BTreeMap<String, u64> {
        let mut keys: BTreeMap<String, u64> = self
            .releasing
            .iter()
            .map(|(key, &(heard, _))| (key.clone(), heard))
            .collect();
        for (key, lock) in &self.locks {
            let heard = keys.entry(key.clone()).or_insert(0);
            *heard = (*heard).max(lock.heard);
        }
        keys
    }

    /// A release of `key` was refused: the session asked for the lock
    /// again since and was answered at `latest`. Whether to release again
    /// now, naming it: only if nothing of this client holds the lock or
    /// awaits an answer that may say it does. Otherwise a guard holds it,
    /// and releases it naming `latest` at the earliest, or the release
    /// waits for the acquires still to be answered (`acquire_ended`).
    pub(crate) fn release_refused(&mut self, key: &str, latest: u64) -> bool {
        let Some(lock) = self.locks.get_mut(key) else {
            return true;
        };
        if lock.unused() {
            self.locks.remove(key);
            return true;
        }
        lock.heard = lock.heard.max(latest);
        if lock.guards == 0 {
            lock.release_pending = true;
        }
        false
    }

    /// The session's holdings of `key` at `generation` or below are over,
    /// as a `LockLost` naming it says (`LOCK-13`).
    pub(crate) fn holding_lost(&mut self, key: &str, generation: u64) {
        if let Some(lock) = self.locks.get(key) {
            lock.signal
                .send_modify(|s| s.taken = s.taken.max(generation));
        }
    }

    /// Hands one event to whoever waits for it (`EV-7`).
    pub(crate) fn deliver(&mut self, event: Event) {
        match event.kind {
            EventKind::Node {
                subscription,
                key,
                change,
                index,
                contents,
            } => {
                let bit = bit_of(&change);
                let event = SubscriptionEvent::Changed {
                    key,
                    change,
                    index,
                    contents,
                };
                let routes = self.subscriptions.get(&subscription);
                let joined = routes.and_then(|r| r.first()).is_some_and(|r| {
                    self.joining
                        .as_ref()
                        .is_some_and(|(key, prefix)| r.key == *key && r.options.prefix == *prefix)
                });
                for route in routes.into_iter().flatten() {
                    if route.options.mask & bit != 0 {
                        route.send(event.clone());
                    }
                }
                if joined {
                    if self.joined.len() == ORPHANS {
                        self.joined_overflowed = true;
                    } else {
                        self.joined.push((subscription, event));
                    }
                } else if routes.is_none() {
                    if self.orphans.len() == ORPHANS {
                        self.orphans.pop_front();
                        self.orphans_overflowed = true;
                    }
                    self.orphans.push_back((subscription, event));
                }
            }
            // By generation, not by key alone: the session may have given
            // that holding up and locked the key again since the master
            // sent it (a semaphore deletes its contender key, `SEM-4`).
            EventKind::LockLost {
                key,
                lock_generation,
            } => self.holding_lost(&key, lock_generation),
            EventKind::LockConflict { key, waiter } => {
                if let Some(lock) = self.locks.get(&key) {
                    lock.signal.send_modify(|s| s.conflict = Some(waiter));
                }
            }
            // Subscriptions are made again by the keeper, and each stream
            // is told its events were lost once its subscription is back
            // (`resubscribe`). Locks survive.
            EventKind::Failover { .. } => {}
            // The keeper drops the keys from the session's cache before it
            // hands events here (`CACHE-3`).
            EventKind::Invalidate { .. } => {}
            EventKind::EventsLost => {
                // Into the stream, so a reader waiting on it wakes; only a
                // full stream falls back on the flag.
                for route in self.routes() {
                    route.send(SubscriptionEvent::EventsLost);
                }
                // A lost event may have been a lock taken away: assume so.
                for lock in self.locks.values() {
                    lock.signal.send_modify(|s| s.lost = true);
                }
            }
        }
    }

    /// Takes every route out, to be made again on a new master (`FO-6`).
    pub(crate) fn take_routes(&mut self) -> Vec<Route> {
        std::mem::take(&mut self.subscriptions)
            .into_values()
            .flatten()
            .collect()
    }

    fn routes(&self) -> impl Iterator<Item = &Route> {
        self.subscriptions.values().flatten()
    }

    /// Puts `routes` under the master's id `id`, first handing each the
    /// events that raced ahead of the `Subscribed` reply. Nothing is
    /// installed once the session has ended: those streams end.
    pub(crate) fn install(&mut self, id: u64, routes: Vec<Route>) {
        let mut early = Vec::new();
        if std::mem::take(&mut self.joined_overflowed) || self.orphans_overflowed {
            early.push(SubscriptionEvent::EventsLost);
        }
        self.orphans.retain(|(sub, event)| {
            if *sub == id {
                early.push(event.clone());
            }
            *sub != id
        });
        if self.orphans.is_empty() {
            self.orphans_overflowed = false;
        }
        for (sub, event) in std::mem::take(&mut self.joined) {
            if sub == id {
                early.push(event);
            }
        }
        for route in routes {
            for event in &early {
                let wanted = match event {
                    SubscriptionEvent::Changed { change, .. } => {
                        route.options.mask & bit_of(change) != 0
                    }
                    _ => true,
                };
                if wanted {
                    route.send(event.clone());
                }
            }
            route.id.store(id, Ordering::Release);
            if !self.ended {
                self.subscriptions.entry(id).or_default().push(route);
            }
        }
    }

    /// Drops what was kept for a `Subscribe` that installed nothing.
    pub(crate) fn forget_joined(&mut self) {
        self.joined.clear();
        self.joined_overflowed = false;
    }

    /// Takes out the stream whose id is `id`; the master's subscription
    /// stays until [`leave`] finds it unused.
    pub(crate) fn remove_route(&mut self, id: &Arc<AtomicU64>) {
        let master_id = id.load(Ordering::Acquire);
        if let Some(routes) = self.subscriptions.get_mut(&master_id) {
            routes.retain(|r| !Arc::ptr_eq(&r.id, id));
            if routes.is_empty() {
                self.subscriptions.remove(&master_id);
            }
        }
    }

    /// Whether a stream still uses the master's subscription `id`.
    pub(crate) fn in_use(&self, id: u64) -> bool {
        self.subscriptions.contains_key(&id)
    }

    /// Tells the subscriptions that asked of a session state change; on
    /// `Expired` every stream ends after it.
    pub(crate) fn session_state(&mut self, state: SessionState) {
        if state == SessionState::Jeopardy {
            for lock in self.locks.values() {
                lock.signal.send_modify(|s| s.jeopardies += 1);
            }
        }
        let asked = |r: &&Route| r.options.mask & event_mask::SESSION_STATE != 0;
        for route in self.routes().filter(asked) {
            route.send(SubscriptionEvent::Session(state));
        }
        if state.is_final() {
            self.ended = true;
            self.subscriptions.clear();
            self.orphans.clear();
        }
    }
}

impl Route {
    pub(crate) fn send(&self, event: SubscriptionEvent) {
        if self.tx.try_send(event).is_err() {
            self.overflowed.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // LOCK-11: the last guard's release names the latest answer heard.
    #[test]
    fn the_last_guard_of_a_key_releases_it_naming_the_latest_answer() {
        let mut d = Dispatch::default();
        let _ = d.acquiring("k");
        assert_eq!(d.acquire_ended("k", Some(5), true), None);
        let _ = d.acquiring("k");
        assert_eq!(d.acquire_ended("k", Some(9), true), None);
        assert_eq!(d.guard_gone("k"), None, "another guard holds it");
        assert_eq!(d.guard_gone("k"), Some(9));
        assert!(!d.locks.contains_key("k"));
    }

    // LOCK-4, LOCK-11: a guard let go while another acquire of the key
    // awaits its answer: the answer may tell the session it holds the
    // lock, so the release waits; an acquire that ends without a guard
    // lets it go.
    #[test]
    fn a_release_waits_for_the_acquires_still_to_be_answered() {
        let mut d = Dispatch::default();
        let _ = d.acquiring("k");
        assert_eq!(d.acquire_ended("k", Some(5), true), None);
        let _ = d.acquiring("k");
        assert_eq!(d.guard_gone("k"), None, "an answer is still to come");
        assert_eq!(d.acquire_ended("k", None, false), Some(5));
        assert!(!d.locks.contains_key("k"));
    }

    // LOCK-4, LOCK-11: ...and an answer that makes a guard keeps the lock
    // for it.
    #[test]
    fn an_answer_that_makes_a_guard_takes_over_a_waiting_release() {
        let mut d = Dispatch::default();
        let _ = d.acquiring("k");
        assert_eq!(d.acquire_ended("k", Some(5), true), None);
        let _ = d.acquiring("k");
        assert_eq!(d.guard_gone("k"), None);
        assert_eq!(d.acquire_ended("k", Some(7), true), None);
        assert_eq!(d.guard_gone("k"), Some(7));
    }

    // LOCK-4: a release refused as stale goes again only when nothing of
    // the client holds the key or awaits an answer for it; otherwise the
    // later index is remembered for the release to come.
    #[test]
    fn a_stale_release_goes_again_only_when_nothing_here_may_hold_the_lock() {
        let mut d = Dispatch::default();
        assert!(d.release_refused("free", 4), "nothing here holds it");

        let _ = d.acquiring("held");
        assert_eq!(d.acquire_ended("held", Some(5), true), None);
        assert!(!d.release_refused("held", 8), "a guard holds it");
        assert_eq!(d.guard_gone("held"), Some(8));

        let _ = d.acquiring("asked");
        assert!(!d.release_refused("asked", 8), "an answer is still to come");
        assert_eq!(d.acquire_ended("asked", None, false), Some(8));
    }

    // LOCK-11, LOCK-15: a key whose release is still under way (riding
    // through a fail-over) is released by a close too, naming the latest
    // acquire heard, until the last release of it ends.
    #[test]
    fn a_close_releases_the_keys_whose_releases_are_still_under_way() {
        let mut d = Dispatch::default();
        let _ = d.acquiring("k");
        assert_eq!(d.acquire_ended("k", Some(5), true), None);
        assert_eq!(d.guard_gone("k"), Some(5));
        d.release_started("k", 5);
        let _ = d.acquiring("k");
        assert_eq!(d.acquire_ended("k", Some(9), true), None);
        assert_eq!(d.guard_gone("k"), Some(9));
        d.release_started("k", 9);
        let _ = d.acquiring("held");
        assert_eq!(d.acquire_ended("held", Some(3), true), None);
        let close = |d: &Dispatch| d.to_release_on_close().into_iter().collect::<Vec<_>>();
        assert_eq!(close(&d), [("held".to_string(), 3), ("k".to_string(), 9)]);
        d.release_ended("k");
        assert_eq!(close(&d), [("held".to_string(), 3), ("k".to_string(), 9)]);
        d.release_ended("k");
        assert_eq!(close(&d), [("held".to_string(), 3)]);
    }

    // LOCK-11: once the session closes, a guard made from an answer still
    // to come counts as lost from the start.
    #[test]
    fn an_answer_that_comes_while_the_session_closes_makes_a_lost_guard() {
        let mut d = Dispatch {
            closing: true,
            ..Dispatch::default()
        };
        let signal = d.acquiring("k");
        assert!(signal.borrow().lost);
    }
}
