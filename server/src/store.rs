//! Durable storage: a snapshot of the state plus a log of the commands
//! applied since (SPEC "Storage").
//!
//! The state machine is deterministic, so the log of commands, each with the
//! master time it was applied at, is the state: recovery loads the snapshot
//! and applies the log on top. Every reply waits until the commands before
//! it are on disk (fsync), and one fsync covers every command appended while
//! the previous one ran (group commit). Leases are not stored: they are the
//! master's soft state, rebuilt on recovery (`STORE-4`).
//!
//! This file is the [`Store`] contract and what every store shares: the
//! records, the snapshot, and the log's bytes (magic and the sequence number
//! of its first record, then [`framed`](crate::disk::framed) records
//! without a magic, each an encoded [`Record`]). [`FileStore`] keeps them
//! in a data directory (`file_store.rs`), [`MemoryStore`](crate::MemoryStore)
//! in memory for simulations.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::codec::{decode, encode};
use crate::config::MAX_RECORD;
use crate::disk::{corrupt, framed, whole_frame, StoreError};
use crate::state::{Command, State};
use crate::time::Millis;
#[cfg(doc)]
use crate::FileStore;

const LOG_MAGIC: &[u8; 8] = b"LHLOG001";

/// One entry of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// A master started serving with this epoch (`EP-1`).
    Epoch(u64),
    /// A command applied at master time `now`.
    Command { now: Millis, command: Command },
    /// Written after a batch's fsync returned: everything before it is
    /// synced data, so damage there is refused; damage after the last one
    /// is a torn write (`STORE-3`). Not counted in sequence numbers.
    BatchEnd,
}

/// The state as of a log position.
#[derive(Debug, Serialize, Deserialize)]
pub struct Snapshot {
    /// The highest epoch any master has served with.
    pub epoch: u64,
    /// Master time of the last command included.
    pub now: Millis,
    /// Records before this sequence number are included.
    pub next_seq: u64,
    pub state: State,
}

/// What recovery found.
#[derive(Debug)]
pub struct Recovered {
    pub snapshot: Option<Snapshot>,
    /// Records after the snapshot, in order.
    pub records: Vec<Record>,
    /// Sequence number the next appended record gets.
    pub next_seq: u64,
    /// Whether the store was written in an earlier format and is carried
    /// forward: recovery then rewrites its snapshot in this one's at once
    /// (`STORE-2`, `STORE-6`).
    pub carried_forward: bool,
    /// When the snapshot was written, where the store knows.
    pub snapshot_written: Option<std::time::SystemTime>,
}

/// Where a master keeps its durable state: a snapshot, and a log of the
/// records appended after it.
///
/// A master recovers from its store once, as it starts, then appends a
/// record for every command it applies and calls `sync`; it replies to a
/// request only once a `sync` covering every record before the reply has
/// returned (`STORE-1`). [`FileStore`] keeps a data directory;
/// [`MemoryStore`](crate::MemoryStore) keeps the same records in memory for
/// simulations. The replicated cell's log storage is meant to be another
/// implementation of this same contract.
///
/// # To ensure correctness
///
/// Every promise the master makes about durability rests on these; an
/// implementation must keep all of them.
///
/// - **Durable before returning.** When `sync` returns `Ok`, every record
///   appended before it survives any crash, power loss included. `compact`
///   is durable when it returns, too.
/// - **No holes.** `recover` returns the records in the order they were
///   appended, and a prefix of them: a crash may lose only records appended
///   since the last `sync` returned, and only a suffix of those, never one
///   from the middle.
/// - **Torn tails cut, damage refused.** A record only partly written when
///   the process died (never acknowledged) is dropped. Anything else that
///   fails its checks is an error from `recover`, never skipped: skipping
///   it would quietly take back something a client was told.
/// - **Compaction loses nothing.** After `compact(snapshot)`, `recover`
///   yields that snapshot (or a later one) and every record from
///   `snapshot.next_seq` on. A crash during `compact` leaves either the
///   old snapshot and log or the new ones, both whole.
/// - **One master.** While a store is open, no other master writes to the
///   same place (a data directory is locked).
/// - **A sync's time is spent before it.** A store that says its `sync`
///   takes time ([`Store::sync_latency`]) is given that time before each
///   batch's `sync` (the one a snapshot begins with is taken at once), and
///   a crash may come at any moment of it: nothing appended may be durable
///   on account of the wait alone, only once `sync` is called.
///
/// A store may block on I/O in any method; [`Store::blocking`] says so, and
/// the master then calls it from a writer thread, never from its own task.
pub trait Store: Send + 'static {
    /// What the store holds: the latest snapshot and the records after it,
    /// in order. Called once, before the first `append`.
    fn recover(&mut self) -> Result<Recovered, StoreError>;
    /// Appends a record. It may sit in a buffer until the next `sync`.
    fn append(&mut self, record: &Record) -> Result<(), StoreError>;
    /// Makes everything appended durable, then marks the batch's end
    /// ([`Record::BatchEnd`], carried to disk by the next batch).
    fn sync(&mut self) -> Result<(), StoreError>;
    /// Makes the last batch's end marker durable without waiting for the
    /// next batch: the master calls it when it goes idle, so damage to an
    /// acknowledged batch is refused rather than taken for a torn write
    /// (`STORE-3`).
    fn seal(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Replaces everything before `snapshot.next_seq` with the snapshot.
    fn compact(&mut self, snapshot: &Snapshot) -> Result<(), StoreError>;
    /// Bytes of log written since the last snapshot, and the snapshot's
    /// size: the master snapshots when the log outgrows a multiple of it
    /// (`STORE-2`).
    fn sizes(&self) -> StoreSizes {
        StoreSizes::default()
    }
    /// Sets `bytes` aside for when the disk fills (`STORE-5`); 0 sets none
    /// aside. Fails if the disk has no room for them.
    fn set_reserve(&mut self, bytes: u64) -> Result<(), StoreError> {
        let _ = bytes;
        Ok(())
    }
    /// Frees the space set aside for a full disk (`STORE-5`); says whether
    /// there was any to free.
    fn release_reserve(&mut self) -> bool {
        false
    }
    /// Sets the reserve aside again; says whether the disk had room.
    fn restore_reserve(&mut self) -> bool {
        false
    }
    /// Drops whatever was appended since the last successful `sync`, as if
    /// it had never been: after a failed write, the batch is appended
    /// again from the start rather than after a half-written record.
    fn rewind(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Whether calls may block on I/O. The master writes a blocking store
    /// from a thread of its own, overlapping fsyncs with serving; one that
    /// never blocks, from a task on the master's own runtime, which keeps a
    /// simulation in virtual time deterministic.
    fn blocking(&self) -> bool {
        true
    }
    /// How long the next `sync` takes, for a store that never blocks but
    /// stands for a device that would (a simulated disk): the master's
    /// writer task waits this long, by its runtime's clock, then calls
    /// `sync`, and replies wait all the while (`STORE-1`). A blocking store
    /// spends its time inside `sync` and leaves this at zero.
    fn sync_latency(&mut self) -> Duration {
        Duration::ZERO
    }
    /// Where the store keeps its data, for the master's log lines.
    fn location(&self) -> String;
}

/// How many times a store has made a batch durable (its fsyncs), readable
/// while the store is in the master's hands. Cheap to clone: clones share
/// the count.
#[derive(Debug, Clone, Default)]
pub struct SyncCount(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl SyncCount {
    /// Batches made durable so far.
    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn add_one(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// How much a store holds, for deciding when to compact.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreSizes {
    pub log_bytes: u64,
    pub snapshot_bytes: u64,
}

/// The record at `at`, if it is whole (its length fits the file, is not
/// zero, and its checksum holds), with the offset after it.
fn whole_record(bytes: &[u8], at: usize) -> Option<(Result<Record, String>, usize)> {
    let (body, next) = whole_frame(bytes, at, b"", MAX_RECORD)?;
    // An empty body is no record: bytes of a torn write that happen to read
    // as a length of zero and the checksum of nothing.
    (!body.is_empty()).then(|| (decode(body), next))
}

/// Whether a whole batch-end marker starts at `at`. Markers are a few
/// bytes long, so looking for one at every offset is cheap.
fn is_batch_end(bytes: &[u8], at: usize) -> bool {
    let Some(head) = bytes.get(at..at + 4) else {
        return false;
    };
    let len = u32::from_le_bytes(head.try_into().expect("4 bytes")) as usize;
    len <= 8 && matches!(whole_record(bytes, at), Some((Ok(Record::BatchEnd), _)))
}

/// What a log holds: the sequence number of its first record, its records,
/// and the length of the bytes they take up (a torn tail after them is
/// not counted, and is to be cut).
#[derive(Debug)]
pub(crate) struct LogImage {
    pub(crate) base: u64,
    pub(crate) records: Vec<Record>,
    pub(crate) valid_len: u64,
}

/// Reads a log's bytes as recovery does, whichever store kept them: a
/// torn tail is cut (with a warning naming `path`), damage before a synced
/// batch's end is refused (`STORE-3`).
pub(crate) fn parse_log(bytes: &[u8], path: &Path) -> Result<LogImage, StoreError> {
    if bytes.len() < 16 || &bytes[..8] != LOG_MAGIC {
        return Err(corrupt(path, "not a log (bad magic)"));
    }
    let base = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    let mut records = Vec::new();
    let mut at = 16;
    while at < bytes.len() {
        let Some((record, next)) = whole_record(bytes, at) else {
            // Damage. Within the last batch, which was never fully
            // fsynced (a crash cut the write short, or the file system
            // kept some of its pages and not others), nothing was
            // acknowledged: the log ends here. Before a later batch's end
            // marker, it is damage to synced data: refuse.
            if let Some(marker) = (at + 1..bytes.len()).find(|o| is_batch_end(bytes, *o)) {
                return Err(corrupt(
                    path,
                    format!(
                        "the record at byte {at} is damaged, and a batch that ends at byte {marker} follows it"
                    ),
                ));
            }
            // Never silent: what is cut was not acknowledged, but an
            // operator who sees this after anything but a crash has failing
            // media.
            tracing::warn!(
                log = %path.display(),
                at,
                bytes = bytes.len() - at,
                records_kept = records.len(),
                "recovery cut the log's tail: a batch whose fsync had not returned \
                 (a crash while writing); nothing in it was acknowledged"
            );
            break;
        };
        match record {
            Ok(Record::BatchEnd) => {}
            Ok(record) => records.push(record),
            Err(e) => {
                return Err(corrupt(
                    path,
                    format!("record at byte {at} passes its checksum but does not decode: {e}"),
                ))
            }
        }
        at = next;
    }
    Ok(LogImage {
        base,
        records,
        valid_len: at as u64,
    })
}

/// The header of a log whose first record is `base`.
pub(crate) fn log_header(base: u64) -> Vec<u8> {
    let mut header = Vec::with_capacity(16);
    header.extend_from_slice(LOG_MAGIC);
    header.extend_from_slice(&base.to_le_bytes());
    header
}

/// A record as the log holds it: length, CRC-32 of the body, body.
pub(crate) fn frame(record: &Record) -> Vec<u8> {
    framed(b"", &encode(record))
}

/// What a store at `place` holds, from its snapshot and the log after it
/// (`None`: no log): the records the snapshot does not include. A log that
/// does not reach the snapshot, or a snapshot with no log, is refused:
/// changes acknowledged since the snapshot would be missing.
pub(crate) fn recovered(
    place: &Path,
    snapshot: Option<Snapshot>,
    log: Option<LogImage>,
) -> Result<Recovered, StoreError> {
    let from = snapshot.as_ref().map_or(0, |s| s.next_seq);
    // A snapshot is always followed by a log (compaction writes the new
    // log right after it): without one, every change acknowledged since
    // the snapshot is gone, and serving would hide that.
    let Some(LogImage { base, records, .. }) = log else {
        if snapshot.is_some() {
            return Err(corrupt(
                place,
                format!(
                    "the snapshot is followed by no log: the records from {from} on, every change \
                     acknowledged since the snapshot, are missing"
                ),
            ));
        }
        return Ok(Recovered {
            snapshot,
            records: Vec::new(),
            next_seq: from,
            carried_forward: false,
            snapshot_written: None,
        });
    };
    if base > from {
        return Err(corrupt(
            place,
            format!("the log starts at record {base} but the snapshot ends at {from}"),
        ));
    }
    let skip = (from - base) as usize;
    if skip > records.len() {
        return Err(corrupt(
            place,
            format!(
                "the snapshot ends at record {from} but the log holds only up to {}",
                base + records.len() as u64
            ),
        ));
    }
    let next_seq = base + records.len() as u64;
    let records = records.into_iter().skip(skip).collect();
    Ok(Recovered {
        snapshot,
        records,
        next_seq,
        carried_forward: false,
        snapshot_written: None,
    })
}
