//! Durable state kept in memory, for simulations of master crashes.
//!
//! A [`MemoryStore`] outlives the master that writes to it: a master started
//! again on the same store recovers exactly as from a data directory (new
//! epoch, full leases, `FO-1`..`FO-6`). Every record is "synced" the moment
//! it is appended, so a crash loses only what was never acknowledged, and
//! the master writes it itself rather than through a writer thread: a
//! simulation in virtual time stays deterministic.

use std::sync::{Arc, Mutex};

use crate::store::{decode, encode, Record, Recovered, Snapshot, Store, StoreError};

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
    /// Sequence number of `records[0]`.
    first_seq: u64,
    records: Vec<Record>,
}

impl MemoryStore {
    fn contents(&self) -> std::sync::MutexGuard<'_, Contents> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Store for MemoryStore {
    fn recover(&mut self) -> Result<Recovered, StoreError> {
        let contents = self.contents();
        let snapshot = match &contents.snapshot {
            Some(bytes) => {
                Some(
                    decode::<Snapshot>(bytes).map_err(|reason| StoreError::Corrupt {
                        path: "memory".into(),
                        reason,
                    })?,
                )
            }
            None => None,
        };
        let records: Vec<Record> = contents
            .records
            .iter()
            .filter(|r| !matches!(r, Record::BatchEnd))
            .cloned()
            .collect();
        let next_seq = contents.first_seq + records.len() as u64;
        Ok(Recovered {
            snapshot,
            records,
            next_seq,
        })
    }

    /// Never: the master writes it itself, in its own turn, so that a
    /// simulation stays deterministic.
    fn blocking(&self) -> bool {
        false
    }

    fn location(&self) -> String {
        "memory".into()
    }

    fn append(&mut self, record: &Record) -> Result<(), StoreError> {
        if !matches!(record, Record::BatchEnd) {
            self.contents().records.push(record.clone());
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    fn compact(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        let mut contents = self.contents();
        let covered = snapshot.next_seq.saturating_sub(contents.first_seq) as usize;
        let covered = covered.min(contents.records.len());
        contents.records.drain(..covered);
        contents.first_seq = snapshot.next_seq;
        contents.snapshot = Some(encode(snapshot));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Bounds, State};
    use crate::time::at;

    #[test]
    fn a_compacted_store_recovers_the_snapshot_and_the_records_after_it() {
        let mut store = MemoryStore::default();
        store.append(&Record::Epoch(1)).unwrap();
        store.append(&Record::Epoch(2)).unwrap();
        let snapshot = Snapshot {
            epoch: 2,
            now: at(7),
            next_seq: 2,
            state: State::new(Bounds::from(&crate::Config::default())),
        };
        store.compact(&snapshot).unwrap();
        store.append(&Record::Epoch(3)).unwrap();

        let recovered = store.clone().recover().unwrap();
        assert_eq!(
            recovered.snapshot.map(|s| (s.epoch, s.now)),
            Some((2, at(7)))
        );
        assert_eq!(recovered.records, [Record::Epoch(3)]);
        assert_eq!(recovered.next_seq, 3);
    }
}
