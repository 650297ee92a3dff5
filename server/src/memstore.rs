//! Durable state kept in memory, for simulations of master crashes.
//!
//! A [`MemoryStore`] outlives the master that writes to it: a master started
//! again on the same store recovers exactly as from a data directory (new
//! epoch, full leases, `FO-1`..`FO-6`). It keeps what a data directory
//! would: the encoded snapshot, and the log's bytes in the log file's own
//! format, with how much of them a `sync` (or `seal`) has made durable.
//! A master's process ending keeps everything appended, as a file's page
//! cache would; a crash of its host ([`MemoryStore::crash`]) keeps the
//! synced bytes and only a prefix of the rest, which may end inside a
//! record. Recovery reads those bytes with the data directory's own
//! reader, so a torn tail is cut, and damage refused, by the code that
//! does it for a file (`STORE-3`).
//!
//! It never blocks: the master writes it from a task on its own runtime,
//! so a simulation in virtual time stays deterministic.

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::codec::{decode, encode};
use crate::disk::StoreError;
use crate::store::{
    frame, log_header, parse_log, recovered, Record, Recovered, Snapshot, Store, StoreSizes,
};

/// The durable state of a simulated master, shared by every master started
/// on it. Cheap to clone: clones are the same store.
///
/// ```
/// use leasehold_server::{MemoryStore, Record, Store};
///
/// let store = MemoryStore::default();
/// // A master would be handed one clone; what it writes, the next reads.
/// let mut first = store.clone();
/// first.append(&Record::Epoch(1))?;
/// first.sync()?;
/// first.append(&Record::Epoch(2))?;
/// // The host loses power before the second record's sync: none of the
/// // bytes written since survive.
/// store.crash(|_unsynced| 0);
/// let mut second = store.clone();
/// assert_eq!(second.recover()?.records, [Record::Epoch(1)]);
/// # Ok::<(), leasehold_server::StoreError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryStore(Arc<Mutex<Contents>>);

#[derive(Debug, Default)]
struct Contents {
    /// The encoded snapshot, as a file would hold it.
    snapshot: Option<Vec<u8>>,
    /// The log file's bytes, header included; empty before the first
    /// record (no log yet).
    log: Vec<u8>,
    /// How many of them a crash keeps for certain.
    synced: usize,
}

/// Where a store in memory says it is, in errors and log lines.
const PLACE: &str = "memory";

impl MemoryStore {
    fn contents(&self) -> std::sync::MutexGuard<'_, Contents> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The host lost power: of the log bytes appended since the last
    /// `sync` or `seal`, only the first `kept(unsynced)` reach the disk
    /// (at most all of them); the rest are gone. The snapshot and the
    /// synced bytes are untouched. A master of the crashed host must not
    /// write again: the next one recovers.
    pub fn crash(&self, kept: impl FnOnce(usize) -> usize) {
        let mut contents = self.contents();
        let unsynced = contents.log.len() - contents.synced;
        let end = contents.synced + kept(unsynced).min(unsynced);
        contents.log.truncate(end);
    }
}

impl Contents {
    fn snapshot(&self) -> Result<Option<Snapshot>, StoreError> {
        self.snapshot
            .as_deref()
            .map(|bytes| {
                decode::<Snapshot>(bytes).map_err(|reason| StoreError::Corrupt {
                    path: PLACE.into(),
                    reason: format!("the snapshot does not decode: {reason}"),
                })
            })
            .transpose()
    }

    /// Starts a log if there is none: its first record follows the
    /// snapshot. The header is durable at once, as a data directory's new
    /// log is written whole before any record goes into it.
    fn log_started(&mut self) -> Result<(), StoreError> {
        if self.log.is_empty() {
            let base = self.snapshot()?.map_or(0, |s| s.next_seq);
            self.log = log_header(base);
            self.synced = self.log.len();
        }
        Ok(())
    }
}

impl Store for MemoryStore {
    fn recover(&mut self) -> Result<Recovered, StoreError> {
        let mut contents = self.contents();
        let snapshot = contents.snapshot()?;
        let log = if contents.log.is_empty() {
            None
        } else {
            Some(parse_log(&contents.log, Path::new(PLACE))?)
        };
        // A torn tail is cut, so new records follow the last whole one.
        if let Some(log) = &log {
            let whole = log.valid_len as usize;
            contents.log.truncate(whole);
            contents.synced = whole;
        }
        recovered(Path::new(PLACE), snapshot, log)
    }

    fn blocking(&self) -> bool {
        false
    }

    fn location(&self) -> String {
        PLACE.into()
    }

    fn append(&mut self, record: &Record) -> Result<(), StoreError> {
        let mut contents = self.contents();
        contents.log_started()?;
        contents.log.extend(frame(record));
        Ok(())
    }

    /// As a file's: the batch is durable, and its end marker follows,
    /// durable only with the next batch or a `seal`.
    fn sync(&mut self) -> Result<(), StoreError> {
        {
            let mut contents = self.contents();
            contents.log_started()?;
            contents.synced = contents.log.len();
        }
        self.append(&Record::BatchEnd)
    }

    fn seal(&mut self) -> Result<(), StoreError> {
        let mut contents = self.contents();
        contents.synced = contents.log.len();
        Ok(())
    }

    fn rewind(&mut self) -> Result<(), StoreError> {
        let mut contents = self.contents();
        let synced = contents.synced;
        contents.log.truncate(synced);
        Ok(())
    }

    fn sizes(&self) -> StoreSizes {
        let contents = self.contents();
        StoreSizes {
            log_bytes: contents.log.len() as u64,
            snapshot_bytes: contents.snapshot.as_ref().map_or(0, |s| s.len() as u64),
        }
    }

    /// Durable when it returns, all at once: the snapshot, and a new log
    /// holding the records from its position on.
    fn compact(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        let mut contents = self.contents();
        let records = if contents.log.is_empty() {
            Vec::new()
        } else {
            let log = parse_log(&contents.log, Path::new(PLACE))?;
            let covered = snapshot.next_seq.saturating_sub(log.base) as usize;
            log.records.into_iter().skip(covered).collect()
        };
        let mut log = log_header(snapshot.next_seq);
        for record in &records {
            log.extend(frame(record));
        }
        contents.synced = log.len();
        contents.log = log;
        contents.snapshot = Some(encode(snapshot));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Bounds, State};
    use crate::time::at;

    fn snapshot_at(next_seq: u64) -> Snapshot {
        Snapshot {
            epoch: 2,
            now: at(7),
            next_seq,
            state: State::new(Bounds::from(&crate::Config::default())),
        }
    }

    // STORE-2
    #[test]
    fn a_compacted_store_recovers_the_snapshot_and_the_records_after_it() {
        let mut store = MemoryStore::default();
        store.append(&Record::Epoch(1)).unwrap();
        store.append(&Record::Epoch(2)).unwrap();
        store.compact(&snapshot_at(2)).unwrap();
        store.append(&Record::Epoch(3)).unwrap();

        let recovered = store.clone().recover().unwrap();
        assert_eq!(
            recovered.snapshot.map(|s| (s.epoch, s.now)),
            Some((2, at(7)))
        );
        assert_eq!(recovered.records, [Record::Epoch(3)]);
        assert_eq!(recovered.next_seq, 3);
    }

    // STORE-2: compaction is durable when it returns.
    #[test]
    fn a_crash_after_a_compaction_keeps_the_snapshot() {
        let mut store = MemoryStore::default();
        store.append(&Record::Epoch(1)).unwrap();
        store.compact(&snapshot_at(1)).unwrap();
        store.crash(|_| 0);
        let recovered = store.clone().recover().unwrap();
        assert_eq!(recovered.snapshot.map(|s| s.next_seq), Some(1));
        assert_eq!(recovered.next_seq, 1);
    }

    // STORE-1
    #[test]
    fn a_crash_keeps_every_synced_record_and_loses_the_unsynced_ones() {
        let mut store = MemoryStore::default();
        store.append(&Record::Epoch(1)).unwrap();
        store.sync().unwrap();
        store.append(&Record::Epoch(2)).unwrap();
        store.crash(|_| 0);
        let mut again = store.clone();
        let recovered = again.recover().unwrap();
        assert_eq!(recovered.records, [Record::Epoch(1)]);
        assert_eq!(recovered.next_seq, 1);
    }

    // STORE-3: a new log's header is written whole, so a crash before the
    // first sync loses records, never the log itself.
    #[test]
    fn a_crash_before_the_first_sync_leaves_an_empty_log() {
        let mut store = MemoryStore::default();
        store.append(&Record::Epoch(1)).unwrap();
        store.crash(|unsynced| {
            assert_eq!(unsynced, frame(&Record::Epoch(1)).len());
            3
        });
        let recovered = store.clone().recover().unwrap();
        assert!(recovered.records.is_empty());
        assert_eq!(recovered.next_seq, 0);
    }

    // STORE-3
    #[test]
    fn a_crash_inside_an_unsynced_record_leaves_a_torn_tail_that_recovery_cuts() {
        let mut store = MemoryStore::default();
        store.append(&Record::Epoch(1)).unwrap();
        store.sync().unwrap();
        store.append(&Record::Epoch(2)).unwrap();
        store.append(&Record::Epoch(3)).unwrap();
        // The first unsynced record is the sync's end marker; keep it, the
        // second record whole, and part of the third.
        let marker = frame(&Record::BatchEnd).len();
        let whole = frame(&Record::Epoch(2)).len();
        store.crash(|unsynced| {
            assert_eq!(unsynced, marker + 2 * whole);
            marker + whole + 3
        });
        let recovered = store.clone().recover().unwrap();
        assert_eq!(recovered.records, [Record::Epoch(1), Record::Epoch(2)]);
        // Later records follow the last whole one.
        store.append(&Record::Epoch(4)).unwrap();
        store.sync().unwrap();
        let recovered = store.clone().recover().unwrap();
        assert_eq!(
            recovered.records,
            [Record::Epoch(1), Record::Epoch(2), Record::Epoch(4)]
        );
    }

    // STORE-3
    #[test]
    fn a_seal_makes_the_last_batch_end_survive_a_crash() {
        let mut store = MemoryStore::default();
        store.append(&Record::Epoch(1)).unwrap();
        store.sync().unwrap();
        store.seal().unwrap();
        store.crash(|unsynced| {
            assert_eq!(unsynced, 0, "the marker is synced");
            0
        });
        assert_eq!(store.clone().recover().unwrap().records, [Record::Epoch(1)]);
    }
}
