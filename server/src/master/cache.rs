//! The master's side of the cache (SPEC "Cache"): work held while
//! cachers are told of a change, and the invalidations that go with it.

use leasehold_protocol::{CheckStatus, Error, ErrorCode, GetCached, Request, Response, SessionId};
use tracing::debug;

use super::{Call, Engine, Timer};
use crate::cache::{Busy, Touch, Work};
use crate::config::DROPPED_PER_READ;
use crate::node::check_key;
use crate::state::command::{
    CancelWait, Delete, DeleteCheck, GiveBack, GrantWaiters, MayCache, Release, ReleaseAcquired,
    SetCheck,
};
use crate::state::Command;
use crate::time::Millis;

impl Engine {
    /// What `request` may change, for the caches (`CACHE-3`): nothing for
    /// a request that changes no node.
    pub(crate) fn request_touches(&self, request: &Request) -> Vec<Touch> {
        match request {
            Request::Put(put) => vec![Touch::Key(put.key.clone())],
            Request::Delete { key, recursive, .. } => {
                let mut touches = vec![Touch::Key(key.clone())];
                if *recursive {
                    touches.push(Touch::Below(key.clone()));
                }
                touches
            }
            Request::Acquire(a) => vec![Touch::Key(a.key.clone())],
            Request::Release { key, .. } | Request::ReleaseUnfenced { key, .. } => {
                vec![Touch::Key(key.clone())]
            }
            Request::DestroySession { session, .. } => self.session_touches(*session),
            // Only a critical check (or its removal) ends the sessions bound
            // to it; a passing or warning one changes no node.
            Request::SetCheck { name, status, .. } if *status == CheckStatus::Critical => {
                self.check_touches(name)
            }
            Request::DeleteCheck { name } => self.check_touches(name),
            _ => Vec::new(),
        }
    }

    /// What `command` may change.
    fn command_touches(&self, command: &Command) -> Vec<Touch> {
        match command {
            Command::EndSession(end) => self.session_touches(end.id),
            Command::CancelWait(CancelWait { key, .. })
            | Command::GrantWaiters(GrantWaiters { key })
            | Command::Release(Release { key, .. })
            | Command::ReleaseAcquired(ReleaseAcquired { key, .. })
            | Command::GiveBack(GiveBack { key, .. }) => vec![Touch::Key(key.clone())],
            Command::Put(put) => vec![Touch::Key(put.key.clone())],
            Command::Delete(Delete { key, recursive, .. }) => {
                let mut touches = vec![Touch::Key(key.clone())];
                if *recursive {
                    touches.push(Touch::Below(key.clone()));
                }
                touches
            }
            Command::Acquire(acquire) => vec![Touch::Key(acquire.key.clone())],
            Command::SetCheck(SetCheck { name, status, .. })
                if *status == CheckStatus::Critical =>
            {
                self.check_touches(name)
            }
            Command::DeleteCheck(DeleteCheck { name }) => self.check_touches(name),
            Command::SetOwnedCheck(owned) if owned.check.status == CheckStatus::Critical => {
                self.check_touches(&owned.check.name)
            }
            Command::SetCheck(_)
            | Command::SetOwnedCheck(_)
            | Command::CreateSession(_)
            | Command::CreateOwnedSession(_)
            | Command::MayCache(_)
            | Command::KeepAcquires
            | Command::SetRule(_)
            | Command::RemoveRule(_)
            | Command::SetAccessControl(_)
            | Command::CreateToken(_)
            | Command::RevokeToken(_) => Vec::new(),
        }
    }

    /// What ending the sessions bound to check `name` may change.
    fn check_touches(&self, name: &str) -> Vec<Touch> {
        self.state
            .checks
            .bound_to(name)
            .into_iter()
            .flat_map(|id| self.session_touches(id))
            .collect()
    }

    /// What ending session `id` may change: its ephemeral nodes, and the
    /// nodes whose locks it holds or waits for (released, deleted or
    /// granted to the next in line).
    fn session_touches(&self, id: SessionId) -> Vec<Touch> {
        let locks = self.state.locks();
        let mut keys = self.state.namespace().ephemeral_of(id);
        keys.extend(locks.held_by(id));
        keys.extend(locks.waited_by(id));
        keys.sort();
        keys.dedup();
        keys.into_iter().map(Touch::Key).collect()
    }

    fn work_touches(&self, work: &Work) -> Vec<Touch> {
        match work {
            Work::Request(call) => self.request_touches(&call.request),
            Work::Command(command) => self.command_touches(command),
            Work::Timer(Timer::AcquireTimeout(ticket)) => self
                .acquires
                .waiting_key(*ticket)
                .map(|key| vec![Touch::Key(key.to_string())])
                .unwrap_or_default(),
            Work::Timer(_) => Vec::new(),
        }
    }

    /// The cache gate: holds a write while sessions cache what it changes,
    /// or behind held work on the same keys, until they are told
    /// (`CACHE-3`); serves it at once otherwise.
    pub(crate) fn gate(&mut self, call: Call) {
        let touches = self.request_touches(&call.request);
        if self.cache.must_hold(&touches, self.now) {
            self.tally.writes_held += 1;
            self.cache.hold(Work::Request(call), touches);
        } else {
            self.serve(call, self.now);
        }
    }

    /// Applies a command the master made itself, or holds it as it would a
    /// request (`CACHE-5`). A session whose end is held is ended for every
    /// request meanwhile.
    pub(crate) fn apply_made(&mut self, command: Command) {
        let touches = self.command_touches(&command);
        if self.cache.must_hold(&touches, self.now) {
            if let Command::EndSession(end) = &command {
                if !self.cache.ending.insert(end.id) {
                    return; // its end is held already
                }
            }
            self.tally.writes_held += 1;
            self.cache.hold(Work::Command(command), touches);
            return;
        }
        let _ = self.apply_any(command, self.now);
    }

    /// Holds a timer's work if what it changes is cached; says whether it
    /// did.
    pub(crate) fn held_timer(&mut self, timer: Timer) -> Option<Timer> {
        let work = Work::Timer(timer);
        let touches = self.work_touches(&work);
        if self.cache.must_hold(&touches, self.now) {
            self.tally.writes_held += 1;
            self.cache.hold(work, touches);
            return None;
        }
        match work {
            Work::Timer(timer) => Some(timer),
            _ => unreachable!("built above"),
        }
    }

    /// Sends the invalidations held work needs and lets go, in order, the
    /// work nothing keeps any longer (`CACHE-3`).
    pub(crate) fn run_held(&mut self) {
        let (everything, mut cleared) = self.cache.pass();
        let now = self.now;
        let mut next: Option<Millis> = None;
        // What the work still held ahead of the one looked at touches:
        // work waits behind earlier work on the same keys.
        let mut ahead = Busy::default();
        let mut i = 0;
        while i < self.cache.held() {
            // Work none of whose keys cleared since the last pass stays as
            // it was: held.
            if !everything && !cleared.overlaps(self.cache.touches(i)) {
                ahead.add(self.cache.touches(i));
                i += 1;
                continue;
            }
            let touches = self.work_touches(self.cache.work(i));
            self.cache.retouch(i, touches);
            let (events, leases, quotas) = (&mut self.events, &self.leases, &self.quotas);
            // Each event within an eighth of a frame, as a node event's
            // contents are (`EV-10`): a reply always carries it.
            let max_bytes = self.config.max_frame / 8;
            let wait = self.cache.invalidate(
                i,
                now,
                |session, keys| {
                    let owner = super::quotas::creator(leases, &quotas.sessions, session);
                    events.invalidate(session, keys, owner, max_bytes)
                },
                |session| leases.expires_at(session).unwrap_or(now),
            );
            if wait.is_some() || ahead.overlaps(self.cache.touches(i)) {
                if let Some(at) = wait {
                    next = Some(next.map_or(at, |n| n.min(at)));
                }
                ahead.add(self.cache.touches(i));
                i += 1;
                continue;
            }
            // What waited behind it on its keys may go now.
            cleared.add(self.cache.touches(i));
            match self.cache.take(i) {
                Work::Request(call) => self.handle_checked(call),
                Work::Command(command) => {
                    let _ = self.apply_any(command, self.now);
                }
                Work::Timer(Timer::AcquireTimeout(ticket)) => self.acquire_times_out(ticket),
                Work::Timer(timer) => debug!(?timer, "held timer with nothing to do"),
            }
        }
        // The cachers told answer their held KeepAlives once this input
        // is handled (`EV-3`, `Engine::step`).
        if let Some(at) = next {
            if self
                .cache
                .armed
                .is_none_or(|armed| armed > at || armed <= now)
            {
                self.cache.armed = Some(at);
                self.timers.insert(at, Timer::CacheDeadline);
            }
        }
    }

    /// Answers a read for `get.session`'s cache (`CACHE-2`).
    pub(crate) fn get_cached(&mut self, get: GetCached) -> Result<Response, Error> {
        check_key(&get.key).map_err(|e| Error::new(ErrorCode::InvalidArgument, e))?;
        if get.dropped.len() > DROPPED_PER_READ {
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!("a read drops at most {DROPPED_PER_READ} keys"),
            ));
        }
        let id = get.session.id;
        self.cache.dropped(id, &get.dropped);
        let now = self.now;
        let live = self.state.session(id).is_some()
            && self.leases.expires_at(id).is_some_and(|e| e > now)
            && !self.events.awaits_failover(id)
            && !self.cache.ending.contains(&id);
        let mut cacheable = live && self.cache.may_grant(id, &get.key);
        // A session's first grant is made durable, so that a new master
        // waits for this session, and no other, to flush (`CACHE-7`). On a
        // full disk nothing is logged for a read: it is not cacheable.
        if cacheable && !self.state.may_cache.contains(&id) {
            let disk_full = self.disk_full;
            cacheable = !disk_full && self.apply(MayCache { session: id }, now).is_ok();
        }
        if cacheable {
            self.tally.cache_grants += 1;
            self.cache.grant(id, &get.key);
        }
        Ok(Response::Cached {
            index: self.state.namespace().key_index(&get.key),
            node: self.node_view(&get.key, false),
            cacheable,
        })
    }
}
