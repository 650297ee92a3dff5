//! The simulated master's disk: what survives a crash of its host is what
//! a real disk would keep, so a master that answered before its log was
//! durable loses an acknowledged write, and the `durability` check says so.
//!
//! The bytes live in a [`MemoryStore`], which already keeps them as a data
//! directory does (the log in the log file's format, with how much of it
//! is synced) and recovers them with the data directory's own reader: a
//! torn tail is cut, damage refused, by the product's code (`STORE-3`).
//! That model belongs with the store, whose format is private to the
//! server. What is the simulation's alone stays here: the virtual time a
//! sync takes and how much of the unsynced tail a crash keeps, both drawn
//! from the run's seed, and a disk that lies about its syncs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_server::{MemoryStore, Record, Recovered, Snapshot, Store, StoreError, StoreSizes};

use super::rng::Rng;

/// Shortest and longest virtual time a sync takes (milliseconds,
/// inclusive). Past one simulation step some of the time, so the replies
/// waiting for it wait across steps, where crashes land.
const SYNC_MS: (u64, u64) = (1, 8);

/// The master host's disk. Cheap to clone: clones are the same disk, so
/// the simulation driver keeps one to crash the host with.
#[derive(Debug, Clone)]
pub struct Disk {
    bytes: MemoryStore,
    rng: Arc<Mutex<Rng>>,
    /// `sync` and `seal` return at once and make nothing durable, as a
    /// disk whose write cache acknowledges flushes it has not done. Only a
    /// snapshot is written through.
    lying: bool,
}

impl Disk {
    /// An empty disk whose draws come from `rng`; `lying` breaks it.
    pub fn new(rng: Rng, lying: bool) -> Disk {
        Disk {
            bytes: MemoryStore::default(),
            rng: Arc::new(Mutex::new(rng)),
            lying,
        }
    }

    /// The host lost power at this instant: of the bytes written since the
    /// last sync, a prefix drawn from the seed survives, often ending
    /// inside a record.
    pub fn crash(&self) {
        let mut rng = self.rng.lock().unwrap();
        self.bytes
            .crash(|unsynced| rng.range(0, unsynced as u64 + 1) as usize);
    }
}

impl Store for Disk {
    fn recover(&mut self) -> Result<Recovered, StoreError> {
        self.bytes.recover()
    }

    fn append(&mut self, record: &Record) -> Result<(), StoreError> {
        self.bytes.append(record)
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        if self.lying {
            return Ok(());
        }
        self.bytes.sync()
    }

    fn seal(&mut self) -> Result<(), StoreError> {
        if self.lying {
            return Ok(());
        }
        self.bytes.seal()
    }

    fn compact(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        self.bytes.compact(snapshot)
    }

    fn sizes(&self) -> StoreSizes {
        self.bytes.sizes()
    }

    fn rewind(&mut self) -> Result<(), StoreError> {
        self.bytes.rewind()
    }

    fn blocking(&self) -> bool {
        false
    }

    fn sync_latency(&mut self) -> Duration {
        let (shortest, longest) = SYNC_MS;
        let ms = self.rng.lock().unwrap().range(shortest, longest + 1);
        Duration::from_millis(ms)
    }

    fn location(&self) -> String {
        if self.lying {
            "the simulated master's lying disk".into()
        } else {
            "the simulated master's disk".into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // STORE-1: what a sync covered survives any crash.
    #[test]
    fn a_crash_never_takes_back_a_synced_record() {
        for seed in 0..20 {
            let mut disk = Disk::new(Rng::new(seed), false);
            disk.append(&Record::Epoch(1)).unwrap();
            disk.sync().unwrap();
            disk.append(&Record::Epoch(2)).unwrap();
            disk.crash();
            let records = disk.clone().recover().unwrap().records;
            assert!(
                records == [Record::Epoch(1)] || records == [Record::Epoch(1), Record::Epoch(2)],
                "seed {seed}: {records:?}"
            );
        }
    }

    #[test]
    fn a_lying_disk_can_lose_a_synced_record_in_a_crash() {
        let lost = (0..20).any(|seed| {
            let mut disk = Disk::new(Rng::new(seed), true);
            disk.append(&Record::Epoch(1)).unwrap();
            disk.sync().unwrap();
            disk.crash();
            disk.recover().unwrap().records.is_empty()
        });
        assert!(lost);
    }
}
