//! Hash tables keyed by session id, with a hasher that costs one multiply
//! a word, and a table of values kept apart from its index.
//!
//! A session id is 128 bits the master drew at random (`ids.rs`): nobody
//! else chooses it, so it needs no keyed hash to keep a client from
//! piling its entries into one bucket, and its bits are already spread.
//! The tables a KeepAlive looks at (the leases, what recovered sessions
//! owe) are looked up once or more for every session renewed, a million
//! times in the seconds after a fail-over: where SipHash cost a fifth of
//! such a lookup, this costs next to nothing. The hash is the same on
//! every run, so a simulation replays exactly.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use leasehold_protocol::SessionId;

/// A hash table keyed by session id.
pub(crate) type IdMap<V> = HashMap<SessionId, V, BuildHasherDefault<IdHasher>>;

/// A hash set of session ids.
pub(crate) type IdSet = HashSet<SessionId, BuildHasherDefault<IdHasher>>;

/// Folds each 8-byte word into the hash with a multiply by an odd
/// constant (the golden ratio's), as rustc's own hasher does, and mixes
/// the high bits down at the end.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

const SEED: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        // A multiply carries each bit upward only: the last word's high
        // bits reach the low ones, which the table's bucket index is taken
        // from, through the shifts around one more (MurmurHash3's last
        // step, halved).
        let h = (self.0 ^ (self.0 >> 33)).wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        h ^ (h >> 33)
    }
}

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

/// Gives back most of `map`'s room once it holds a quarter of it or less:
/// a table never shrinks by itself, and a million sessions that ended
/// would leave theirs behind. Halving at a quarter costs each removal
/// O(1) on average.
pub(crate) fn shrink_if_sparse<V>(map: &mut IdMap<V>) {
    if map.capacity() > 64 && map.len() * 4 < map.capacity() {
        map.shrink_to(map.len() * 2);
    }
}

/// Values keyed by session id, kept in a vector that an id's hash table
/// entry points into: 20 bytes an entry in the table, where the value
/// itself in it would make every bucket its size, and a table doubles
/// its buckets at seven eighths full. At a million leases of 32 bytes,
/// 78 MB, against 103 MB for the values in the table and about 81 MB for
/// a B-tree; a lookup is two cache misses, against one a level of the
/// B-tree's. The slots of removed values are used again; the vector is
/// packed anew once a quarter of it or less is in use.
#[derive(Debug)]
pub(crate) struct IdSlab<V> {
    index: IdMap<u32>,
    slots: Vec<V>,
    /// Slots whose values were removed, used again first.
    free: Vec<u32>,
}

impl<V> Default for IdSlab<V> {
    fn default() -> Self {
        IdSlab {
            index: IdMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<V: Default> IdSlab<V> {
    /// `values`, each under its id; an id given twice keeps its last.
    pub(crate) fn from_values(values: impl IntoIterator<Item = (SessionId, V)>) -> Self {
        let values = values.into_iter();
        let (fewest, _) = values.size_hint();
        let mut slab = IdSlab {
            index: IdMap::with_capacity_and_hasher(fewest, Default::default()),
            slots: Vec::with_capacity(fewest),
            free: Vec::new(),
        };
        for (id, value) in values {
            slab.insert(id, value);
        }
        slab
    }

    pub(crate) fn get(&self, id: &SessionId) -> Option<&V> {
        let slot = *self.index.get(id)?;
        Some(&self.slots[slot as usize])
    }

    pub(crate) fn get_mut(&mut self, id: &SessionId) -> Option<&mut V> {
        let slot = *self.index.get(id)?;
        Some(&mut self.slots[slot as usize])
    }

    /// Puts `value` under `id`; returns the value it replaces. One look
    /// at the index, where a session is created or a log replayed.
    pub(crate) fn insert(&mut self, id: SessionId, value: V) -> Option<V> {
        let vacant = match self.index.entry(id) {
            Entry::Occupied(taken) => {
                return Some(std::mem::replace(
                    &mut self.slots[*taken.get() as usize],
                    value,
                ));
            }
            Entry::Vacant(vacant) => vacant,
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = value;
                slot
            }
            None => {
                self.slots.push(value);
                // A master holds far fewer sessions than 2^32 (its
                // `--max-sessions`).
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 values")
            }
        };
        vacant.insert(slot);
        None
    }

    pub(crate) fn remove(&mut self, id: &SessionId) -> Option<V> {
        let slot = self.index.remove(id)?;
        let value = std::mem::take(&mut self.slots[slot as usize]);
        self.free.push(slot);
        if self.slots.len() > 64 && self.index.len() * 4 < self.slots.len() {
            self.pack();
        }
        shrink_if_sparse(&mut self.index);
        Some(value)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// Every value, in no particular order (the same on every run).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&SessionId, &V)> {
        self.index
            .iter()
            .map(|(id, &slot)| (id, &self.slots[slot as usize]))
    }

    /// Moves every value into a vector of twice their number, dropping
    /// the free slots: O(n) once the values fell to a quarter of the
    /// slots, so O(1) a removal on average.
    fn pack(&mut self) {
        let mut slots = Vec::with_capacity(self.index.len() * 2);
        for slot in self.index.values_mut() {
            slots.push(std::mem::take(&mut self.slots[*slot as usize]));
            *slot = u32::try_from(slots.len() - 1).expect("fewer than 2^32 values");
        }
        self.slots = slots;
        self.free = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn hash(id: SessionId) -> u64 {
        BuildHasherDefault::<IdHasher>::default().hash_one(id)
    }

    #[test]
    fn ids_that_differ_in_one_bit_hash_apart_in_the_low_and_high_bits() {
        let base = SessionId::from_u128(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        for bit in 0..128 {
            let other = SessionId::from_u128(base.as_u128() ^ (1 << bit));
            let (a, b) = (hash(base), hash(other));
            // hashbrown takes the bucket from the low bits and a tag from
            // the top seven.
            assert_ne!(a & 0xFFFF, b & 0xFFFF, "bit {bit}: same bucket bits");
        }
    }

    #[test]
    fn the_hash_is_the_same_on_every_run() {
        let id = SessionId::from_u128(42);
        assert_eq!(hash(id), hash(id));
        assert_eq!(
            hash(id),
            BuildHasherDefault::<IdHasher>::default().hash_one(id)
        );
    }

    #[test]
    fn a_table_emptied_to_a_quarter_gives_back_its_room() {
        let mut map = IdMap::default();
        for n in 0..10_000u128 {
            map.insert(SessionId::from_u128(n), n);
        }
        let full = map.capacity();
        for n in 0..9_000u128 {
            map.remove(&SessionId::from_u128(n));
            shrink_if_sparse(&mut map);
        }
        assert!(map.capacity() <= full / 4, "{} of {full}", map.capacity());
        assert_eq!(map.len(), 1_000);
        assert!((9_000..10_000u128).all(|n| map[&SessionId::from_u128(n)] == n));
    }

    #[test]
    fn a_slab_finds_what_was_put_under_each_id_until_it_is_removed() {
        let mut slab = IdSlab::default();
        for n in 0..100u128 {
            assert_eq!(slab.insert(SessionId::from_u128(n), n), None);
        }
        assert_eq!(slab.insert(SessionId::from_u128(7), 700), Some(7));
        assert_eq!(slab.remove(&SessionId::from_u128(8)), Some(8));
        assert_eq!(slab.remove(&SessionId::from_u128(8)), None);
        assert_eq!(slab.get(&SessionId::from_u128(8)), None);
        *slab.get_mut(&SessionId::from_u128(9)).unwrap() += 1;
        assert_eq!(slab.len(), 99);
        for n in (0..100u128).filter(|&n| n != 8) {
            let want = match n {
                7 => 700,
                9 => 10,
                n => n,
            };
            assert_eq!(slab.get(&SessionId::from_u128(n)), Some(&want), "{n}");
        }
    }

    #[test]
    fn a_removed_values_slot_is_used_again() {
        let mut slab = IdSlab::default();
        for n in 0..100u128 {
            slab.insert(SessionId::from_u128(n), n);
        }
        slab.remove(&SessionId::from_u128(3));
        slab.insert(SessionId::from_u128(1_000), 1_000);
        assert_eq!(slab.slots.len(), 100);
        assert_eq!(slab.get(&SessionId::from_u128(1_000)), Some(&1_000));
    }

    #[test]
    fn a_slab_emptied_to_a_quarter_is_packed_and_keeps_the_rest() {
        let mut slab = IdSlab::default();
        for n in 0..10_000u128 {
            slab.insert(SessionId::from_u128(n), n);
        }
        // Every other one, then most of what is left.
        for n in (0..10_000u128).step_by(2).chain((1..9_000u128).step_by(2)) {
            assert_eq!(slab.remove(&SessionId::from_u128(n)), Some(n));
        }
        assert!(slab.slots.len() <= 2_500, "{} slots", slab.slots.len());
        assert_eq!(slab.len(), 500);
        for n in (9_001..10_000u128).step_by(2) {
            assert_eq!(slab.get(&SessionId::from_u128(n)), Some(&n));
        }
        assert_eq!(slab.iter().count(), 500);
    }
}
