//! What replies show of the state: a node, a lock with its holders and
//! waiters, a session, a session's locks, each bounded to fit a frame.

use leasehold_protocol::{
    Error, ErrorCode, LockHolder, LockInfo, LockListing, LockWaiter, MasterStatus, NodeView,
    Response, SessionId, SessionInfo, SessionLocks,
};

use super::Engine;
use crate::access::Principal;
use crate::config::{LISTED_HOLDERS, LISTED_WAITERS, MAX_LIST_PAGE, MAX_LIST_SCAN, SHOWN_CHARS};
use crate::metrics::EngineFigures;
use crate::session::EndCause;
use crate::time::{whole_millis, Millis};

/// One page of `items`: at most `limit` (0: the server's page size), and
/// past the first no more than `budget` bytes as `size` counts them, so a
/// reply stays well inside a frame. Says whether more follow.
pub(super) fn page<T>(
    items: impl Iterator<Item = T>,
    limit: u32,
    budget: usize,
    size: impl Fn(&T) -> usize,
) -> (Vec<T>, bool) {
    let limit = match limit {
        0 => MAX_LIST_PAGE,
        n => n.min(MAX_LIST_PAGE),
    } as usize;
    let mut used = 0;
    let mut items = items.peekable();
    let mut taken = Vec::new();
    while let Some(item) =
        items.next_if(|i| taken.len() < limit && (taken.is_empty() || used + size(i) <= budget))
    {
        used += size(&item);
        taken.push(item);
    }
    (taken, items.peek().is_some())
}

/// How long the counts of `Status` that walk the state are reused while
/// the state does not change (`OPS-4`).
const STATUS_COUNTS_LAST: std::time::Duration = std::time::Duration::from_secs(1);

/// Recovering sessions past which the figures estimate how many of them
/// have a KeepAlive held rather than look at each (`OPS-1`).
const RECOVERING_WALKED: usize = 65_536;

/// The counts of `Status` that walk the state, as of `index` and `at`.
#[derive(Debug)]
pub(crate) struct Counted {
    index: u64,
    at: Millis,
    recently_ended: Vec<(String, u64)>,
    locks_held: u64,
    holdings: u64,
    waiters: u64,
    locks_in_delay: u64,
    /// Recovered sessions still to acknowledge the fail-over whose
    /// KeepAlive is held (`FO-5`).
    recovering_held: u64,
}

/// About how many bytes a listing takes in a reply.
fn listing_size(l: &LockListing) -> usize {
    let holders: usize = l.holders.iter().map(|h| 40 + h.name.len()).sum();
    let waiters: usize = l.waiters.iter().map(|w| 32 + w.name.len()).sum();
    l.key.len() + 40 + holders + waiters
}

impl Engine {
    /// The node at `key` as a reply carries it.
    pub(crate) fn node_view(&self, key: &str, stat_only: bool) -> Option<NodeView> {
        let node = self.state.namespace().get(key)?;
        let mut stat = node.stat();
        if let Some(lock) = self.state.locks().get(key) {
            stat.lock_holders = lock.holders.iter().map(|(s, h)| (*s, h.mode)).collect();
        }
        Some(NodeView {
            key: key.to_string(),
            stat,
            contents: (!stat_only).then(|| node.contents.clone()),
        })
    }

    /// Who holds `key`'s lock, who waits (a page of them), and its
    /// lock-delay (`LOCK-14`).
    pub(super) fn lock_info(&self, key: &str, now: Millis) -> LockInfo {
        let index = self.state.namespace().key_index(key);
        let Some(lock) = self.state.locks().get(key) else {
            return LockInfo {
                index,
                holders: Vec::new(),
                waiters: Vec::new(),
                waiters_total: 0,
                delay_remaining_ms: None,
            };
        };
        let waiters = lock.waiters.iter().map(|w| (w.session, w.mode));
        let (waiters, _) = page(waiters, 0, usize::MAX, |_| 0);
        LockInfo {
            index,
            holders: lock.holders.iter().map(|(s, h)| (*s, h.mode)).collect(),
            waiters,
            waiters_total: lock.waiters.len() as u64,
            delay_remaining_ms: lock.delay_remaining(now).map(whole_millis),
        }
    }

    /// One page of the locks at or below `prefix` after `after`, those on
    /// keys `principal` may read, as many as fit half a frame (`LOCK-16`,
    /// `ACL-4`). A holder's or waiter's name is shown to whom may see its
    /// session. As `List` does, unreadable locks are skipped, not counted,
    /// for at most [`MAX_LIST_SCAN`] of them.
    pub(super) fn list_locks(
        &self,
        prefix: &str,
        after: Option<String>,
        limit: u32,
        principal: &Principal,
        now: Millis,
    ) -> Result<Response, Error> {
        use std::ops::Bound;
        let start = match &after {
            Some(after) if after.as_str() >= prefix => Bound::Excluded(after.as_str()),
            _ => Bound::Included(prefix),
        };
        let name = |session: SessionId| match self.sees_session(session, principal) {
            true => self
                .state
                .session(session)
                .map_or_else(String::new, |s| s.name.to_string()),
            false => String::new(),
        };
        let unreadable = std::cell::Cell::new(0);
        let cut_short = std::cell::Cell::new(false);
        let listings = self
            .state
            .locks
            .locks
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix))
            .map_while(|entry| {
                if unreadable.get() >= MAX_LIST_SCAN {
                    cut_short.set(true);
                    return None;
                }
                let readable = self.may_read(principal, entry.0);
                unreadable.set(unreadable.get() + usize::from(!readable));
                Some(readable.then_some(entry))
            })
            .flatten()
            // A line emptied and a delay ended leave an entry until the
            // lock is next tidied: it is not shown.
            .filter(|(_, lock)| !lock.is_idle(now))
            .map(|(key, lock)| LockListing {
                key: key.clone(),
                lock_generation: self
                    .state
                    .namespace()
                    .get(key)
                    .map_or(0, |n| n.stat().lock_generation),
                holders: lock
                    .holders
                    .iter()
                    .take(LISTED_HOLDERS)
                    .map(|(session, holding)| LockHolder {
                        session: *session,
                        name: name(*session),
                        mode: holding.mode,
                        held_ms: holding.since.map(|since| whole_millis(now.since(since))),
                    })
                    .collect(),
                holders_total: lock.holders.len() as u64,
                waiters: lock
                    .waiters
                    .iter()
                    .take(LISTED_WAITERS)
                    .map(|w| LockWaiter {
                        session: w.session,
                        name: name(w.session),
                        mode: w.mode,
                    })
                    .collect(),
                waiters_total: lock.waiters.len() as u64,
                delay_remaining_ms: lock.delay_remaining(now).map(whole_millis),
            });
        let (locks, more) = page(listings, limit, self.config.max_frame / 2, listing_size);
        let cut_short = cut_short.get();
        if cut_short && locks.is_empty() {
            return Err(Error::new(
                ErrorCode::PermissionDenied,
                format!(
                    "{} may read none of the next {MAX_LIST_SCAN} locked keys below {}: \
                     list a prefix it may read",
                    super::rights::described(principal),
                    leasehold_protocol::excerpt(prefix, SHOWN_CHARS)
                ),
            ));
        }
        Ok(Response::Locks {
            locks,
            more: more || cut_short,
        })
    }

    /// What the master serves, in figures (`OPS-4`). The counts that walk
    /// every lock, every session's holdings and the ended sessions are
    /// taken again only when the state changed or a second passed, so
    /// asking often costs the master little.
    pub(super) fn status(&mut self, now: Millis) -> MasterStatus {
        let fresh = self
            .counted
            .as_ref()
            .filter(|c| c.index == self.state.index && now < c.at + STATUS_COUNTS_LAST)
            .is_some();
        if !fresh {
            self.counted = Some(self.count(now));
        }
        let counted = self.counted.as_ref().expect("counted just now");
        MasterStatus {
            version: env!("CARGO_PKG_VERSION").to_string(),
            epoch: self.config.epoch,
            index: self.state.index,
            sessions: self.state.sessions.len() as u64,
            keepalives_held: self.leases.holding() as u64,
            recently_ended: counted.recently_ended.clone(),
            nodes: self.state.namespace().len() as u64,
            locks_held: counted.locks_held,
            holdings: counted.holdings,
            waiters: counted.waiters,
            locks_in_delay: counted.locks_in_delay,
            checks: self.state.checks.len() as u64,
            access_control: self.state.access.enabled,
            stored_bytes: self.stored_bytes,
        }
    }

    /// What the gauges show of the engine (`OPS-1`), as of `now`: the
    /// figures that walk the state are those of `Status`, taken again
    /// once they are a second old, so that showing them after every turn
    /// costs a master with many locks nothing.
    pub(crate) fn figures(&mut self, now: Millis) -> EngineFigures {
        self.tally.events_queued = self.events.queued_total;
        self.tally.events_dropped = self.events.dropped_total;
        self.tally.invalidations = self.events.invalidations_total;
        self.tally.fanout_cut_offs = self.events.cut_offs_total;
        let stale = self
            .counted
            .as_ref()
            .is_none_or(|c| now >= c.at + STATUS_COUNTS_LAST || now < c.at);
        if stale {
            self.counted = Some(self.count(now));
        }
        let counted = self.counted.as_ref().expect("counted just now");
        let count = |n: usize| n as u64;
        let sessions = count(self.state.sessions.len());
        let recovering = count(self.events.recovering.awaiting());
        let ending = count(self.cache.ending.len());
        let held = count(self.leases.holding()).saturating_sub(counted.recovering_held);
        let waiting = sessions.saturating_sub(recovering + ending + held);
        EngineFigures {
            sessions,
            sessions_by_state: [held, waiting, recovering, ending],
            lock_holders: count(self.state.locks.held_by.len()),
            locks_held: counted.locks_held,
            locks_in_delay: counted.locks_in_delay,
            lock_waiters: count(self.acquires.waiting.len()),
            keepalives_held: count(self.leases.holding()),
            subscriptions: count(self.events.subscriptions.len()),
            events_queued_bytes: count(self.events.queued_bytes),
            writes_held_now: count(self.cache.held()),
            epoch: self.config.epoch,
            index: self.state.index,
            stored_bytes: self.stored_bytes,
        }
    }

    /// The counts of `Status` that walk the state.
    fn count(&self, now: Millis) -> Counted {
        let locks = &self.state.locks;
        let mut ended = [
            (EndCause::Destroyed, 0),
            (EndCause::Expired, 0),
            (EndCause::CheckFailed, 0),
        ];
        for cause in self.state.ended.values() {
            if let Some((_, n)) = ended.iter_mut().find(|(c, _)| c == cause) {
                *n += 1;
            }
        }
        let (mut locks_held, mut waiters, mut locks_in_delay) = (0, 0, 0);
        for lock in locks.locks.values() {
            locks_held += u64::from(!lock.holders.is_empty());
            waiters += lock.waiters.len() as u64;
            locks_in_delay += u64::from(lock.delay_remaining(now).is_some());
        }
        // Walked only while few are recovering: right after a fail-over of
        // many sessions, a share of the held KeepAlives in proportion.
        let owed = &self.events.recovering;
        let recovering_held = if owed.awaiting() <= RECOVERING_WALKED {
            owed.awaiting_ids()
                .filter(|id| self.leases.held(**id).is_some())
                .count() as u64
        } else {
            let (held, recovering) = (self.leases.holding(), owed.awaiting());
            (held as u128 * recovering as u128 / self.state.sessions.len().max(1) as u128) as u64
        };
        Counted {
            index: self.state.index,
            at: now,
            recovering_held,
            recently_ended: ended
                .into_iter()
                .map(|(cause, n)| (cause.label().to_string(), n))
                .collect(),
            locks_held,
            holdings: locks.held_by.values().map(|keys| keys.len() as u64).sum(),
            waiters,
            locks_in_delay,
        }
    }

    /// The locks `session` holds and waits for, those on keys `principal`
    /// may read (`SES-11`, `ACL-4`), as many as fit half a frame.
    pub(super) fn session_locks(
        &self,
        session: SessionId,
        principal: &crate::access::Principal,
    ) -> Result<Response, Error> {
        if self.state.session(session).is_none() {
            return Err(self.state.missing_session(session));
        }
        let locks = self.state.locks();
        let readable = |key: &String| self.may_read(principal, key);
        let held = locks
            .held_by(session)
            .into_iter()
            .filter(readable)
            .filter_map(|key| {
                let mode = locks.get(&key)?.holders.get(&session)?.mode;
                Some((true, key, mode))
            });
        let waiting = locks
            .waited_by(session)
            .into_iter()
            .filter(readable)
            .filter_map(|key| {
                let waiter = locks
                    .get(&key)?
                    .waiters
                    .iter()
                    .find(|w| w.session == session)?;
                Some((false, key.clone(), waiter.mode))
            });
        let (listed, more) = page(held.chain(waiting), 0, self.config.max_frame / 2, |e| {
            e.1.len() + 8
        });
        let (mut held, mut waiting) = (Vec::new(), Vec::new());
        for (holds, key, mode) in listed {
            if holds { &mut held } else { &mut waiting }.push((key, mode));
        }
        Ok(Response::SessionLocks(SessionLocks {
            held,
            waiting,
            more,
        }))
    }

    /// What `SessionInfo` says of session `id`, if it is live.
    pub(super) fn info(&self, id: SessionId, now: Millis) -> Option<SessionInfo> {
        let s = self.state.session(id)?;
        Some(SessionInfo {
            session: s.id,
            name: s.name.to_string(),
            lease_ms: s.lease.as_millis(),
            lock_delay_ms: s.lock_delay.as_millis(),
            behavior: s.behavior,
            lease_remaining_ms: self.leases.remaining(id, now).map_or(0, whole_millis),
            keepalive_held: self.leases.held(id).is_some_and(|h| !h.reply.is_closed()),
            checks: s.checks.to_vec(),
        })
    }
}
