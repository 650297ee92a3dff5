//! What replies show of the state: a node, a lock with its holders and
//! waiters, a session, a session's locks, each bounded to fit a frame.

use leasehold_protocol::{
    Error, LockInfo, NodeView, Response, SessionId, SessionInfo, SessionLocks,
};

use super::Engine;
use crate::config::MAX_LIST_PAGE;
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

    /// The locks `session` holds and waits for (`SES-11`), as many as fit
    /// half a frame.
    /// The locks `session` holds and waits for, those on keys `principal`
    /// may read (`SES-11`, `ACL-4`).
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
            lease_ms: s.lease.as_millis() as u64,
            lock_delay_ms: s.lock_delay.as_millis() as u64,
            behavior: s.behavior,
            lease_remaining_ms: self.leases.remaining(id, now).map_or(0, whole_millis),
            keepalive_held: self.leases.held(id).is_some_and(|h| !h.reply.is_closed()),
            checks: s.checks.to_vec(),
        })
    }
}
