//! A session's consistent cache of nodes (SPEC "Cache"): what
//! [`Session::get`](crate::Session::get) read, served again without a round
//! trip while the master would have told this session of any change.
//!
//! The master records this session as a cacher of every key it answers
//! `cacheable` for, and applies no change to such a key until the session
//! acknowledges its `Invalidate` event or the lease it had then runs out.
//! So an entry may be served only while the local lease (`LEASE-4`), which
//! ends no later than the master's, is valid, and only if no invalidation
//! arrived since the read that filled it was sent. The keeper drops
//! invalidated entries before it acknowledges their events and before it
//! extends the local lease, under this cache's lock, so a reader either
//! finds an entry nobody has acknowledged a change to yet, or none.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::config::{DEFAULT_CACHE_BYTES, DEFAULT_CACHE_KEYS, DROPPED_PER_READ, ENTRY_BYTES};
use leasehold_protocol::NodeView;
use tokio::time::Instant;

/// How a session's cache has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Reads served from the cache.
    pub hits: u64,
    /// Reads that went to the master.
    pub misses: u64,
    /// Entries the cache holds now.
    pub entries: usize,
    /// Entries dropped because the master said their keys changed.
    pub invalidations: u64,
}

/// A read as the master answered it: the key's index and its node.
pub(crate) type Read = (u64, Option<NodeView>);

#[derive(Debug)]
struct Entry {
    read: Read,
    /// Its place in the order of use, for eviction.
    used: u64,
    bytes: usize,
}

/// Reads of one key in flight, and whether an invalidation of it came
/// while they were: then none of them may fill the cache.
#[derive(Debug, Default)]
struct Reading {
    count: usize,
    invalidated: bool,
}

/// What a read must carry and hand back: the cache's generation when it
/// was sent, and the keys to tell the master this session dropped.
#[derive(Debug)]
pub(crate) struct ReadTicket {
    generation: u64,
    pub(crate) dropped: Vec<String>,
}

/// The cache of one session.
#[derive(Debug)]
pub(crate) struct Cache {
    enabled: bool,
    /// The local lease's end: nothing is served at or after it.
    valid_until: Option<Instant>,
    entries: HashMap<String, Entry>,
    by_use: BTreeMap<u64, String>,
    clock: u64,
    bytes: usize,
    max_keys: usize,
    max_bytes: usize,
    /// Rises with every flush: a read sent before one fills nothing.
    generation: u64,
    reading: HashMap<String, Reading>,
    /// Keys dropped that the master may still count as cached here.
    to_drop: HashSet<String>,
    /// Keys named as dropped by reads still in flight: the master may take
    /// the drop after granting the key to another read, so no answer may
    /// fill them until those reads are answered.
    dropping: HashMap<String, usize>,
    stats: CacheStats,
}

impl Default for Cache {
    fn default() -> Self {
        Cache::new(DEFAULT_CACHE_KEYS, DEFAULT_CACHE_BYTES)
    }
}

impl Cache {
    /// A cache of at most `max_keys` entries and `max_bytes` bytes; none
    /// at all when `max_keys` is 0.
    pub(crate) fn new(max_keys: usize, max_bytes: usize) -> Self {
        Cache {
            enabled: max_keys > 0,
            valid_until: None,
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
            clock: 0,
            bytes: 0,
            max_keys,
            max_bytes,
            generation: 0,
            reading: HashMap::new(),
            to_drop: HashSet::new(),
            dropping: HashMap::new(),
            stats: CacheStats::default(),
        }
    }

    /// Whether this session caches at all (`CACHE-1`).
    pub(crate) fn wanted(&self) -> bool {
        self.max_keys > 0
    }

    /// The entry for `key`, if one may be served at `now` (`CACHE-1`).
    pub(crate) fn lookup(&mut self, key: &str, now: Instant) -> Option<Read> {
        let valid = self.enabled && self.valid_until.is_some_and(|until| now < until);
        let found = valid.then(|| self.entries.get_mut(key)).flatten();
        let Some(entry) = found else {
            self.stats.misses += 1;
            return None;
        };
        self.clock += 1;
        self.by_use.remove(&entry.used);
        entry.used = self.clock;
        self.by_use.insert(self.clock, key.to_string());
        self.stats.hits += 1;
        Some(entry.read.clone())
    }

    /// A read of `key` is about to go to the master.
    pub(crate) fn begin_read(&mut self, key: &str) -> ReadTicket {
        self.reading.entry(key.to_string()).or_default().count += 1;
        // This read may fill it again: telling the master it is dropped
        // after that would leave it cached here unknown to the master.
        self.to_drop.remove(key);
        let dropped: Vec<String> = self
            .to_drop
            .iter()
            .take(DROPPED_PER_READ)
            .cloned()
            .collect();
        for k in &dropped {
            self.to_drop.remove(k);
            *self.dropping.entry(k.clone()).or_default() += 1;
        }
        ReadTicket {
            generation: self.generation,
            dropped,
        }
    }

    /// The read of `key` came back as `read`, cacheable or not; an
    /// unanswered read passes `None`.
    pub(crate) fn end_read(
        &mut self,
        key: &str,
        ticket: ReadTicket,
        answer: Option<(&Read, bool)>,
    ) {
        let invalidated = match self.reading.get_mut(key) {
            Some(reading) => {
                reading.count -= 1;
                let invalidated = reading.invalidated;
                if reading.count == 0 {
                    self.reading.remove(key);
                }
                invalidated
            }
            None => true,
        };
        for k in &ticket.dropped {
            if let Some(n) = self.dropping.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    self.dropping.remove(k);
                }
            }
        }
        // What the master may not have heard of being dropped, it may still
        // count; unless it is cached again, or about to be.
        if answer.is_none() {
            for k in ticket.dropped {
                if !self.entries.contains_key(&k) && !self.reading.contains_key(&k) {
                    self.to_drop.insert(k);
                }
            }
        }
        let Some((read, true)) = answer else {
            return;
        };
        let dropping = self.dropping.contains_key(key);
        if !self.enabled || invalidated || dropping || ticket.generation != self.generation {
            // The master counts it cached here: say it is not.
            self.drop_later(key.to_string());
            return;
        }
        self.insert(key, read.clone());
    }

    fn insert(&mut self, key: &str, read: Read) {
        let bytes = ENTRY_BYTES
            + key.len()
            + read
                .1
                .as_ref()
                .map_or(0, |n| n.contents.as_ref().map_or(0, Vec::len));
        self.remove(key);
        self.to_drop.remove(key);
        if bytes > self.max_bytes {
            self.drop_later(key.to_string());
            return;
        }
        while self.entries.len() >= self.max_keys || self.bytes + bytes > self.max_bytes {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            if let Some(entry) = self.entries.remove(&oldest) {
                self.bytes -= entry.bytes;
            }
            self.drop_later(oldest);
        }
        self.clock += 1;
        self.by_use.insert(self.clock, key.to_string());
        self.bytes += bytes;
        self.entries.insert(
            key.to_string(),
            Entry {
                read,
                used: self.clock,
                bytes,
            },
        );
        self.stats.entries = self.entries.len();
    }

    fn remove(&mut self, key: &str) -> bool {
        let Some(entry) = self.entries.remove(key) else {
            return false;
        };
        self.by_use.remove(&entry.used);
        self.bytes -= entry.bytes;
        self.stats.entries = self.entries.len();
        true
    }

    /// Keeps the to-drop list within what the master may count here.
    fn drop_later(&mut self, key: String) {
        if self.to_drop.len() < self.max_keys.max(DROPPED_PER_READ) {
            self.to_drop.insert(key);
        }
    }

    /// The master will change `keys`: drop them, and keep reads in flight
    /// from filling them (`CACHE-3`).
    pub(crate) fn invalidate(&mut self, keys: &[String]) {
        for key in keys {
            if self.remove(key) {
                self.stats.invalidations += 1;
            }
            if let Some(reading) = self.reading.get_mut(key) {
                reading.invalidated = true;
            }
        }
    }

    /// Drops every entry, and keeps every read in flight from filling one
    /// (`CACHE-6`, `CACHE-7`).
    pub(crate) fn flush(&mut self) {
        let keys: Vec<String> = self.entries.drain().map(|(k, _)| k).collect();
        for key in keys {
            self.drop_later(key);
        }
        self.by_use.clear();
        self.bytes = 0;
        self.generation += 1;
        self.stats.entries = 0;
    }

    /// Serves entries again (`Normal`), or stops serving and keeping them
    /// (`Jeopardy`, and for good once the session is over).
    pub(crate) fn set_enabled(&mut self, enabled: bool) {
        if !enabled {
            self.flush();
        }
        self.enabled = enabled && self.max_keys > 0;
    }

    /// The local lease now ends at `until`.
    pub(crate) fn renewed(&mut self, until: Instant) {
        self.valid_until = Some(until);
    }

    pub(crate) fn stats(&self) -> CacheStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn read(index: u64) -> Read {
        (index, None)
    }

    fn lease(cache: &mut Cache) -> Instant {
        let now = Instant::now();
        cache.renewed(now + Duration::from_secs(10));
        now
    }

    fn filled(cache: &mut Cache, key: &str, index: u64) {
        let ticket = cache.begin_read(key);
        cache.end_read(key, ticket, Some((&read(index), true)));
    }

    // CACHE-1: a read the master called cacheable is served again.
    #[test]
    fn a_cacheable_read_is_served_from_the_cache_while_the_lease_lasts() {
        let mut cache = Cache::new(16, 1 << 20);
        let now = lease(&mut cache);
        filled(&mut cache, "k", 3);
        assert_eq!(cache.lookup("k", now), Some(read(3)));
        assert_eq!(cache.lookup("k", now + Duration::from_secs(10)), None);
    }

    #[test]
    fn a_read_the_master_did_not_call_cacheable_is_not_kept() {
        let mut cache = Cache::new(16, 1 << 20);
        let now = lease(&mut cache);
        let ticket = cache.begin_read("k");
        cache.end_read("k", ticket, Some((&read(3), false)));
        assert_eq!(cache.lookup("k", now), None);
    }

    // CACHE-3: an invalidation that overtakes the read's answer wins.
    #[test]
    fn an_invalidation_arriving_during_a_read_keeps_its_answer_out() {
        let mut cache = Cache::new(16, 1 << 20);
        let now = lease(&mut cache);
        let ticket = cache.begin_read("k");
        cache.invalidate(&["k".into()]);
        cache.end_read("k", ticket, Some((&read(3), true)));
        assert_eq!(cache.lookup("k", now), None);
        let ticket = cache.begin_read("other");
        assert_eq!(ticket.dropped, ["k"], "the master is told it is not kept");
    }

    // CACHE-6: a flush drops everything, and reads sent before it fill
    // nothing.
    #[test]
    fn a_flush_keeps_reads_sent_before_it_from_filling_the_cache() {
        let mut cache = Cache::new(16, 1 << 20);
        let now = lease(&mut cache);
        filled(&mut cache, "a", 1);
        let ticket = cache.begin_read("b");
        cache.flush();
        cache.end_read("b", ticket, Some((&read(2), true)));
        assert_eq!(cache.lookup("a", now), None);
        assert_eq!(cache.lookup("b", now), None);
    }

    #[test]
    fn a_disabled_cache_serves_nothing_until_enabled_again() {
        let mut cache = Cache::new(16, 1 << 20);
        let now = lease(&mut cache);
        cache.set_enabled(false);
        filled(&mut cache, "a", 1);
        assert_eq!(cache.lookup("a", now), None);
        cache.set_enabled(true);
        filled(&mut cache, "a", 1);
        assert_eq!(cache.lookup("a", now), Some(read(1)));
    }

    // CACHE-8: past its cap the least recently used entry goes, and the
    // next read tells the master.
    #[test]
    fn the_least_recently_used_entry_goes_first_and_the_master_hears_of_it() {
        let mut cache = Cache::new(2, 1 << 20);
        let now = lease(&mut cache);
        filled(&mut cache, "a", 1);
        filled(&mut cache, "b", 2);
        assert!(cache.lookup("a", now).is_some());
        filled(&mut cache, "c", 3);
        assert!(cache.lookup("b", now).is_none());
        assert!(cache.lookup("a", now).is_some());
        assert_eq!(cache.begin_read("d").dropped, ["b"]);
    }

    // CACHE-8: a key dropped, then cached again, is not named as dropped
    // after it is back, however long the list of drops.
    #[test]
    fn a_key_cached_again_is_taken_off_the_list_of_drops() {
        let mut cache = Cache::new(4096, 1 << 30);
        let now = lease(&mut cache);
        for i in 0..2000 {
            filled(&mut cache, &format!("k{i}"), 1);
        }
        cache.flush();
        let ticket = cache.begin_read("k1500");
        let mut named = ticket.dropped.clone();
        cache.end_read("k1500", ticket, Some((&read(2), true)));
        assert_eq!(cache.lookup("k1500", now), Some(read(2)));
        for _ in 0..3 {
            let ticket = cache.begin_read("other");
            named.extend(ticket.dropped.clone());
            cache.end_read("other", ticket, Some((&read(0), false)));
        }
        assert!(
            !named.iter().any(|k| k == "k1500"),
            "named k1500 as dropped"
        );
        assert_eq!(named.len(), 1999);
    }

    // CACHE-8: a drop still in flight may reach the master after a grant
    // of the same key to another read: that read fills nothing.
    #[test]
    fn a_read_answered_while_its_key_is_being_dropped_fills_nothing() {
        let mut cache = Cache::new(16, 1 << 20);
        let now = lease(&mut cache);
        filled(&mut cache, "a", 1);
        cache.flush();
        let dropping = cache.begin_read("b");
        assert_eq!(dropping.dropped, ["a"]);
        let again = cache.begin_read("a");
        cache.end_read("a", again, Some((&read(2), true)));
        assert_eq!(cache.lookup("a", now), None);
        // The drop's read timed out: "a" is not cached, so it is named again.
        cache.end_read("b", dropping, None);
        let next = cache.begin_read("c");
        assert_eq!(next.dropped, ["a"]);
    }

    // A drop whose read timed out is not named again once the key is back.
    #[test]
    fn a_timed_out_drop_of_a_key_cached_since_is_not_sent_again() {
        let mut cache = Cache::new(16, 1 << 20);
        let now = lease(&mut cache);
        filled(&mut cache, "a", 1);
        cache.flush();
        let dropping = cache.begin_read("b");
        cache.end_read("b", dropping, Some((&read(0), false)));
        filled(&mut cache, "a", 2);
        let stale = cache.begin_read("c");
        assert!(stale.dropped.is_empty());
        cache.end_read("c", stale, None);
        assert_eq!(cache.lookup("a", now), Some(read(2)));
        assert!(cache.begin_read("d").dropped.is_empty());
    }

    #[test]
    fn a_cache_of_no_keys_is_off() {
        let mut cache = Cache::new(0, 1 << 20);
        let now = lease(&mut cache);
        assert!(!cache.wanted());
        filled(&mut cache, "a", 1);
        assert_eq!(cache.lookup("a", now), None);
    }
}
