//! Chubby's consistent client cache, the master's side (SPEC "Cache").
//!
//! The master records which sessions may cache which keys. A change to a
//! key some session caches is held back: each cacher is sent an
//! `Invalidate` event on its KeepAlive reply, and the change is applied
//! once every cacher has acknowledged it or its lease, as it stood when it
//! was told, has run out. While a change is held its keys are uncachable,
//! so reads never wait behind it. Invalidate, never update.
//!
//! All of it is soft state, like leases: a new master knows no cacher, so
//! it takes every recovered session as a possible cacher of every key until
//! that session acknowledges its fail-over event (on which the client
//! flushes its cache) or the lease it may have been granted by the previous
//! master has run out (`CACHE-7`).
//!
//! What is held is the work itself, not its outcome: a request is carried
//! out, with every check it passes, only when it is let go, so a read of a
//! held key answers the value before the change and no cache can disagree
//! with it.
//!
//! This file is the bookkeeping, pure and tested on its own; the master's
//! side of it (holding work, telling cachers, letting work go) is
//! `master/cache.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use leasehold_protocol::SessionId;

use crate::call::Call;
use crate::config::CACHED_KEYS_PER_SESSION;
use crate::state::Command;
use crate::time::Millis;
use crate::timers::Timer;

/// What one record of a cacher costs the master, besides its key: the
/// budget of all records is counted in these bytes (`CACHE-8`).
pub(crate) const RECORD_BYTES: usize = 64;

/// What a change may alter: one key's node, or every node below a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Touch {
    Key(String),
    Below(String),
}

impl Touch {
    /// The range of recorded keys this may cover.
    pub(crate) fn range<'a, V>(
        &self,
        map: &'a BTreeMap<String, V>,
    ) -> Box<dyn Iterator<Item = (&'a String, &'a V)> + 'a> {
        match self {
            Touch::Key(k) => Box::new(map.get_key_value(k).into_iter()),
            Touch::Below(k) => {
                let start = if k.is_empty() {
                    String::new()
                } else {
                    format!("{k}/")
                };
                let whole = k.is_empty();
                Box::new(
                    map.range(start.clone()..)
                        .take_while(move |(key, _)| whole || key.starts_with(&start)),
                )
            }
        }
    }
}

/// The keys `key` lies below: the root (""), then each of its prefixes.
pub(crate) fn ancestors(key: &str) -> impl Iterator<Item = &str> {
    std::iter::once("").chain(key.match_indices('/').map(move |(i, _)| &key[..i]))
}

/// What held work touches, counted by key, so that whether work touches a
/// key is found without walking the work: a hostile client may have
/// thousands of writes held.
#[derive(Debug, Default)]
pub(crate) struct Busy {
    pub(crate) keys: BTreeMap<String, usize>,
    pub(crate) below: BTreeMap<String, usize>,
}

impl Busy {
    pub(crate) fn add(&mut self, touches: &[Touch]) {
        for t in touches {
            let (map, key) = match t {
                Touch::Key(k) => (&mut self.keys, k),
                Touch::Below(k) => (&mut self.below, k),
            };
            *map.entry(key.clone()).or_default() += 1;
        }
    }

    pub(crate) fn remove(&mut self, touches: &[Touch]) {
        for t in touches {
            let (map, key) = match t {
                Touch::Key(k) => (&mut self.keys, k),
                Touch::Below(k) => (&mut self.below, k),
            };
            if let Some(n) = map.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
    }

    /// Whether something counted here covers `key`.
    pub(crate) fn covers(&self, key: &str) -> bool {
        self.keys.contains_key(key) || ancestors(key).any(|a| self.below.contains_key(a))
    }

    /// Whether something counted here shares a key with `touches`.
    pub(crate) fn overlaps(&self, touches: &[Touch]) -> bool {
        touches.iter().any(|t| match t {
            Touch::Key(k) => self.covers(k),
            Touch::Below(p) => {
                // Below p or at p's descendants, or below p's ancestors
                // or p itself.
                t.range(&self.keys).next().is_some()
                    || t.range(&self.below).next().is_some()
                    || self.below.contains_key(p)
                    || ancestors(p).any(|a| self.below.contains_key(a))
            }
        })
    }
}

/// Whether two sets of touches share a key.
#[cfg(test)]
pub(crate) fn overlap(a: &[Touch], b: &[Touch]) -> bool {
    let mut busy = Busy::default();
    busy.add(b);
    busy.overlaps(a)
}

/// One session's standing for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// It may cache the key.
    Granted,
    /// It was sent the invalidation numbered `seq` (its event's sequence
    /// number), and stops counting once it acknowledges it or at `until`,
    /// the end of the lease it had then.
    Told { seq: u64, until: Millis },
}

/// What the master knows of one session's cache.
#[derive(Debug, Default)]
pub(crate) struct SessionCache {
    pub(crate) keys: BTreeSet<String>,
    /// Invalidations sent and not acknowledged, by sequence number.
    pub(crate) told: BTreeMap<u64, Vec<String>>,
}

/// Work held until the caches of what it changes are invalidated.
#[derive(Debug)]
pub(crate) enum Work {
    /// A request, carried out (with all its checks) when let go.
    Request(Call),
    /// A command the master made itself.
    Command(Command),
    /// A timer whose work is held.
    Timer(Timer),
}

#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) work: Work,
    pub(crate) touches: Vec<Touch>,
}

/// Cachers, held work and the sessions a new master waits for.
#[derive(Debug)]
pub(crate) struct Cache {
    pub(crate) records: BTreeMap<String, BTreeMap<SessionId, Standing>>,
    pub(crate) sessions: HashMap<SessionId, SessionCache>,
    /// Bytes the records take, as `RECORD_BYTES` and their keys count them.
    pub(crate) bytes: usize,
    pub(crate) held: VecDeque<Held>,
    /// What the held work touches.
    pub(crate) busy: Busy,
    /// Recovered sessions that may still serve a cache filled under the
    /// previous master: the sequence number of their fail-over event and
    /// the end of the lease the previous master may have granted.
    pub(crate) recovering: HashMap<SessionId, (u64, Millis)>,
    pub(crate) recovering_until: BTreeSet<(Millis, SessionId)>,
    /// Sessions whose lease ran out and whose end is held (`CACHE-5`).
    pub(crate) ending: BTreeSet<SessionId>,
    /// Keys one session may cache, and bytes all records may take.
    pub(crate) per_session: usize,
    pub(crate) max_bytes: usize,
    /// Set when something happened that may let held work go.
    pub(crate) moved: bool,
    /// Whether every held work must be looked at again (work was held, a
    /// deadline passed, a session ended or flushed), or only the work on
    /// the keys in `cleared`, whose last cacher is done: a pass over all
    /// of it for every key would grow with the square of the work held.
    pub(crate) everything: bool,
    pub(crate) cleared: Busy,
    /// The deadline a timer is set for, to look at held work again.
    pub(crate) armed: Option<Millis>,
    /// Never hold anything: a broken master, for simulations
    /// (`Config::unsafe_unheld_cache_writes`).
    pub(crate) unheld: bool,
}

impl Default for Cache {
    fn default() -> Self {
        Cache {
            records: BTreeMap::new(),
            sessions: HashMap::new(),
            bytes: 0,
            held: VecDeque::new(),
            busy: Busy::default(),
            recovering: HashMap::new(),
            recovering_until: BTreeSet::new(),
            ending: BTreeSet::new(),
            per_session: CACHED_KEYS_PER_SESSION,
            max_bytes: usize::MAX,
            moved: false,
            everything: false,
            cleared: Busy::default(),
            armed: None,
            unheld: false,
        }
    }
}

/// Invalidations to send: for each session, the keys it must drop.
pub(crate) type ToTell = BTreeMap<SessionId, Vec<String>>;

impl Cache {
    /// Whether `session` may be granted `key` now: nothing held touches it,
    /// no cacher of it is still being told, and the session's cap and the
    /// master's budget leave room (`CACHE-2`, `CACHE-4`, `CACHE-8`).
    pub(crate) fn may_grant(&self, session: SessionId, key: &str) -> bool {
        if self.busy.covers(key) {
            return false;
        }
        let standings = self.records.get(key);
        if standings.is_some_and(|s| s.values().any(|s| matches!(s, Standing::Told { .. }))) {
            return false;
        }
        if standings.is_some_and(|s| s.contains_key(&session)) {
            return true;
        }
        let mine = self.sessions.get(&session).map_or(0, |s| s.keys.len());
        mine < self.per_session && self.bytes + RECORD_BYTES + key.len() <= self.max_bytes
    }

    /// Records that `session` may cache `key`.
    pub(crate) fn grant(&mut self, session: SessionId, key: &str) {
        let standings = self.records.entry(key.to_string()).or_default();
        if standings.insert(session, Standing::Granted).is_none() {
            self.bytes += RECORD_BYTES + key.len();
            self.sessions
                .entry(session)
                .or_default()
                .keys
                .insert(key.to_string());
        }
    }

    /// Forgets `session`'s record of `key`.
    pub(crate) fn forget(&mut self, session: SessionId, key: &str) {
        let Some(standings) = self.records.get_mut(key) else {
            return;
        };
        if let Some(standing) = standings.remove(&session) {
            self.bytes -= RECORD_BYTES + key.len();
            // Its invalidation is done with, acknowledged or not.
            if let (Standing::Told { seq, .. }, Some(mine)) =
                (standing, self.sessions.get_mut(&session))
            {
                if let Some(keys) = mine.told.get_mut(&seq) {
                    keys.retain(|k| k != key);
                    if keys.is_empty() {
                        mine.told.remove(&seq);
                    }
                }
            }
            // Held work may go only once the last cacher still being told
            // of the key is done: looking at it sooner finds it still held,
            // and with many cachers would cost a look per acknowledgement.
            let told = |s: &Standing| matches!(s, Standing::Told { .. });
            if told(&standing) && !standings.values().any(told) {
                self.moved = true;
                self.cleared.add(&[Touch::Key(key.to_string())]);
            }
        }
        if standings.is_empty() {
            self.records.remove(key);
        }
        if let Some(mine) = self.sessions.get_mut(&session) {
            mine.keys.remove(key);
            if mine.keys.is_empty() && mine.told.is_empty() {
                self.sessions.remove(&session);
            }
        }
    }

    /// The session no longer caches `keys` (`CACHE-8`).
    pub(crate) fn dropped(&mut self, session: SessionId, keys: &[String]) {
        for key in keys {
            self.forget(session, key);
        }
    }

    /// The session acknowledged its events up to `acked`: every
    /// invalidation among them is done with, and so is the fail-over event
    /// of a recovered session (`CACHE-3`, `CACHE-7`).
    pub(crate) fn acknowledged(&mut self, session: SessionId, acked: u64) {
        if let Some(&(seq, until)) = self.recovering.get(&session) {
            if seq <= acked {
                self.recovering.remove(&session);
                self.recovering_until.remove(&(until, session));
                self.moved_everything();
            }
        }
        let Some(mine) = self.sessions.get_mut(&session) else {
            return;
        };
        let later = mine.told.split_off(&(acked.saturating_add(1)));
        let done = std::mem::replace(&mut mine.told, later);
        for (seq, keys) in done {
            for key in keys {
                let told = self
                    .records
                    .get(&key)
                    .and_then(|s| s.get(&session))
                    .copied();
                if matches!(told, Some(Standing::Told { seq: s, .. }) if s == seq) {
                    self.forget(session, &key);
                }
            }
        }
    }

    /// Whether `session` has an invalidation (or a fail-over event it must
    /// hear before the master counts it flushed) numbered above `carried`,
    /// which a reply carrying events up to `carried` leaves untold: such a
    /// reply must not extend the lease (`CACHE-6`).
    pub(crate) fn untold_beyond(&self, session: SessionId, carried: u64) -> bool {
        let told = self
            .sessions
            .get(&session)
            .is_some_and(|s| s.told.range(carried.saturating_add(1)..).next().is_some());
        let recovering = self
            .recovering
            .get(&session)
            .is_some_and(|(seq, _)| *seq > carried);
        told || recovering
    }

    /// Every held work is to be looked at again.
    pub(crate) fn moved_everything(&mut self) {
        self.moved = true;
        self.everything = true;
    }

    /// Starts a pass over held work: whether it must look at all of it,
    /// and else the keys whose last cacher is done since the last.
    pub(crate) fn pass(&mut self) -> (bool, Busy) {
        self.moved = false;
        (
            std::mem::take(&mut self.everything),
            std::mem::take(&mut self.cleared),
        )
    }

    /// Forgets everything of a session that ended.
    pub(crate) fn forget_session(&mut self, session: SessionId) {
        if let Some(mine) = self.sessions.remove(&session) {
            for key in mine.keys {
                if let Some(standings) = self.records.get_mut(&key) {
                    if standings.remove(&session).is_some() {
                        self.bytes -= RECORD_BYTES + key.len();
                    }
                    if standings.is_empty() {
                        self.records.remove(&key);
                    }
                }
            }
        }
        if let Some((_, until)) = self.recovering.remove(&session) {
            self.recovering_until.remove(&(until, session));
        }
        self.ending.remove(&session);
        self.moved_everything();
    }

    /// Takes `session`, recovered by a new master, as a possible cacher of
    /// every key until it acknowledges event `seq` (its fail-over event) or
    /// `until` passes (`CACHE-7`).
    pub(crate) fn recovered(&mut self, session: SessionId, seq: u64, until: Millis) {
        self.recovering.insert(session, (seq, until));
        self.recovering_until.insert((until, session));
    }

    /// Whether some recovered session may still serve an old cache at
    /// `now`; forgets those that no longer may.
    pub(crate) fn recovering_at(&mut self, now: Millis) -> Option<Millis> {
        while let Some(&(until, session)) = self.recovering_until.first() {
            if until > now {
                return Some(until);
            }
            self.recovering_until.pop_first();
            self.recovering.remove(&session);
        }
        None
    }

    /// Whether work touching `touches` must wait: a cacher of one of them,
    /// earlier held work sharing one, or a recovered session that may
    /// still serve an old cache.
    pub(crate) fn must_hold(&mut self, touches: &[Touch], now: Millis) -> bool {
        if touches.is_empty() || self.unheld {
            return false;
        }
        if self.recovering_at(now).is_some() {
            return true;
        }
        if self.busy.overlaps(touches) {
            return true;
        }
        touches
            .iter()
            .any(|t| t.range(&self.records).next().is_some())
    }

    /// Holds `work` behind what is held already.
    pub(crate) fn hold(&mut self, work: Work, touches: Vec<Touch>) {
        self.busy.add(&touches);
        self.held.push_back(Held { work, touches });
        self.moved_everything();
    }

    /// How much work is held.
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }

    /// The work held at `i`, to recompute its touches.
    pub(crate) fn work(&self, i: usize) -> &Work {
        &self.held[i].work
    }

    /// Replaces the touches of the work at `i`.
    pub(crate) fn retouch(&mut self, i: usize, touches: Vec<Touch>) {
        if self.held[i].touches != touches {
            self.busy.remove(&self.held[i].touches);
            self.busy.add(&touches);
            self.held[i].touches = touches;
        }
    }

    /// What the work at `i` touches.
    pub(crate) fn touches(&self, i: usize) -> &[Touch] {
        &self.held[i].touches
    }

    /// Lets the work at `i` go.
    pub(crate) fn take(&mut self, i: usize) -> Work {
        let held = self.held.remove(i).expect("an index of held work");
        self.busy.remove(&held.touches);
        held.work
    }

    /// For the work at `i`: the cachers still to tell (now marked told,
    /// with the sequence number `seq` gives each and the end of its lease
    /// `lease` gives), and the earliest time the work may go if nobody
    /// acknowledges: `None` when nothing keeps it, `Some` when something
    /// still does until then.
    pub(crate) fn invalidate(
        &mut self,
        i: usize,
        now: Millis,
        mut tell: impl FnMut(SessionId, Vec<String>) -> u64,
        lease: impl Fn(SessionId) -> Millis,
    ) -> Option<Millis> {
        let mut to_tell: ToTell = BTreeMap::new();
        let mut expired = Vec::new();
        let mut wait: Option<Millis> = None;
        for touch in &self.held[i].touches {
            for (key, standings) in touch.range(&self.records) {
                for (session, standing) in standings {
                    match standing {
                        Standing::Granted => {
                            to_tell.entry(*session).or_default().push(key.clone());
                        }
                        Standing::Told { until, .. } if *until <= now => {
                            expired.push((*session, key.clone()));
                        }
                        Standing::Told { until, .. } => {
                            wait = Some(wait.map_or(*until, |w| w.min(*until)));
                        }
                    }
                }
            }
        }
        for (session, key) in expired {
            self.forget(session, &key);
        }
        for (session, keys) in to_tell {
            let until = lease(session);
            if until <= now {
                // Its lease ran out: it serves nothing from its cache.
                for key in &keys {
                    self.forget(session, key);
                }
                continue;
            }
            let seq = tell(session, keys.clone());
            for key in &keys {
                if let Some(s) = self.records.get_mut(key).and_then(|s| s.get_mut(&session)) {
                    *s = Standing::Told { seq, until };
                }
            }
            let mine = self.sessions.entry(session).or_default();
            mine.told.entry(seq).or_default().extend(keys);
            wait = Some(wait.map_or(until, |w| w.min(until)));
        }
        match (wait, self.recovering_at(now)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// How many keys `session` is recorded as caching, and bytes all
    /// records take.
    #[cfg(test)]
    pub(crate) fn size(&self, session: SessionId) -> (usize, usize) {
        (
            self.sessions.get(&session).map_or(0, |s| s.keys.len()),
            self.bytes,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::command;

    pub(crate) fn id(n: u8) -> SessionId {
        SessionId::from_u128(u128::from(n))
    }

    pub(crate) fn at(ms: u64) -> Millis {
        Millis::from_millis(ms)
    }

    #[test]
    pub(crate) fn a_touch_below_a_key_covers_its_descendants_only() {
        let key = |k: &str| Touch::Key(k.into());
        let under = |k: &str| Touch::Below(k.into());
        assert!(overlap(&[key("a/b")], &[under("a")]));
        assert!(overlap(&[key("a/b/c")], &[under("a")]));
        assert!(!overlap(&[key("ab")], &[under("a")]));
        assert!(overlap(&[under("a/b")], &[under("a")]));
        assert!(overlap(&[under("a")], &[under("a/b")]));
        assert!(overlap(&[under("a")], &[key("a/x")]));
        assert!(!overlap(&[under("a")], &[key("a")]));
        assert!(overlap(&[under("")], &[key("z")]));
        assert!(!overlap(&[under("b")], &[under("a")]));
    }

    // CACHE-4: a key with an invalidation outstanding is not granted.
    #[test]
    pub(crate) fn a_key_being_invalidated_is_not_granted_to_anyone() {
        let mut cache = Cache::default();
        cache.grant(id(1), "k");
        assert!(cache.must_hold(&[Touch::Key("k".into())], at(0)));
        cache.hold(
            Work::Command(Command::GrantWaiters(command::GrantWaiters {
                key: "k".into(),
            })),
            vec![Touch::Key("k".into())],
        );
        assert!(!cache.may_grant(id(2), "k"));
        let wait = cache.invalidate(0, at(0), |_, _| 7, |_| at(12_000));
        assert_eq!(wait, Some(at(12_000)));
        assert!(!cache.may_grant(id(2), "k"));
        assert!(cache.untold_beyond(id(1), 6));
        assert!(!cache.untold_beyond(id(1), 7));
        cache.acknowledged(id(1), 7);
        assert_eq!(cache.invalidate(0, at(1), |_, _| 8, |_| at(12_000)), None);
        cache.take(0);
        assert!(cache.may_grant(id(2), "k"));
    }

    // CACHE-3: a cacher that does not acknowledge stops counting when the
    // lease it had when told runs out.
    #[test]
    pub(crate) fn a_silent_cacher_stops_counting_when_its_lease_runs_out() {
        let mut cache = Cache::default();
        cache.grant(id(1), "k");
        cache.hold(
            Work::Command(Command::GrantWaiters(command::GrantWaiters {
                key: "k".into(),
            })),
            vec![Touch::Key("k".into())],
        );
        assert_eq!(
            cache.invalidate(0, at(0), |_, _| 1, |_| at(5_000)),
            Some(at(5_000))
        );
        assert_eq!(
            cache.invalidate(0, at(4_999), |_, _| 2, |_| at(9_000)),
            Some(at(5_000))
        );
        assert_eq!(
            cache.invalidate(0, at(5_000), |_, _| 3, |_| at(9_000)),
            None
        );
        assert_eq!(cache.size(id(1)), (0, 0));
    }

    // CACHE-8: the cap counts keys a session caches; dropped keys free it.
    #[test]
    pub(crate) fn the_cap_refuses_past_its_keys_until_some_are_dropped() {
        let mut cache = Cache {
            per_session: 2,
            ..Cache::default()
        };
        for key in ["a", "b"] {
            assert!(cache.may_grant(id(1), key));
            cache.grant(id(1), key);
        }
        assert!(!cache.may_grant(id(1), "c"));
        assert!(cache.may_grant(id(1), "a"), "a key it has is no new room");
        assert!(cache.may_grant(id(2), "c"), "the cap is per session");
        cache.dropped(id(1), &["a".into()]);
        assert!(cache.may_grant(id(1), "c"));
    }

    // CACHE-8: all records together stay within the master's bytes.
    #[test]
    pub(crate) fn the_master_budget_counts_every_sessions_records_in_bytes() {
        let mut cache = Cache {
            max_bytes: 2 * (RECORD_BYTES + 1),
            ..Cache::default()
        };
        cache.grant(id(1), "a");
        cache.grant(id(2), "b");
        assert!(!cache.may_grant(id(3), "c"));
        cache.forget_session(id(1));
        assert!(cache.may_grant(id(3), "c"));
    }

    // CACHE-7: a recovered session counts as a cacher of every key until
    // it acknowledges its fail-over event or its lease may have ended.
    #[test]
    pub(crate) fn a_recovered_session_holds_every_change_until_it_acknowledges() {
        let mut cache = Cache::default();
        cache.recovered(id(1), 1, at(12_000));
        cache.recovered(id(2), 1, at(6_000));
        let k = [Touch::Key("anything".into())];
        assert!(cache.must_hold(&k, at(0)));
        cache.acknowledged(id(1), 1);
        assert!(cache.must_hold(&k, at(5_999)));
        assert!(!cache.must_hold(&k, at(6_000)));
        assert!(
            !cache.untold_beyond(id(2), 0),
            "forgotten once it may not serve"
        );
    }

    #[test]
    pub(crate) fn work_on_a_key_waits_behind_earlier_work_on_it() {
        let mut cache = Cache::default();
        cache.hold(
            Work::Command(Command::GrantWaiters(command::GrantWaiters {
                key: "a".into(),
            })),
            vec![Touch::Below("a".into())],
        );
        assert!(cache.must_hold(&[Touch::Key("a/b".into())], at(0)));
        assert!(!cache.must_hold(&[Touch::Key("a".into())], at(0)));
        cache.hold(
            Work::Command(Command::GrantWaiters(command::GrantWaiters {
                key: "a/b".into(),
            })),
            vec![Touch::Key("a/b".into())],
        );
        let mut ahead = Busy::default();
        ahead.add(cache.touches(0));
        assert!(ahead.overlaps(cache.touches(1)));
        assert!(!Busy::default().overlaps(cache.touches(0)));
    }
}
