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
//! Files in the data directory:
//! - `FORMAT`: `leasehold-data 5`, so a foreign directory is never taken
//!   for ours. A format 4 directory is carried forward (`upgrade.rs`).
//! - `LOCK`: locked while a master has the directory open.
//! - `snapshot`: magic, length, CRC-32, then the encoded [`Snapshot`]; the
//!   magic says which format's shape it is in.
//! - `log`: magic and the sequence number of its first record, then records:
//!   length (u32), CRC-32 of the body (u32), body (an encoded [`Record`]).
//!
//! The writer is behind the [`Store`] trait so a replicated log can replace
//! it without touching the state machine.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bincode::config::{self, Configuration, Limit};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::state::{Command, State};
use crate::time::Millis;

const FORMAT: &str = "leasehold-data 5\n";
/// Format 4, whose directories this master reads and carries forward.
const FORMAT_4: &str = "leasehold-data 4\n";
const SNAPSHOT_MAGIC: &[u8; 8] = b"LHSNAP02";
/// A snapshot in format 4's shape (`upgrade.rs`).
const SNAPSHOT_MAGIC_4: &[u8; 8] = b"LHSNAP01";
const LOG_MAGIC: &[u8; 8] = b"LHLOG001";
/// A record's body may not claim more than this; bigger means corruption.
const MAX_RECORD: usize = 64 << 20;
/// Decoding a snapshot allocates at most this much per length field.
const MAX_SNAPSHOT: usize = 1 << 34;

type StoreConfig = Configuration<config::LittleEndian, config::Varint, Limit<MAX_SNAPSHOT>>;

const fn store_config() -> StoreConfig {
    config::standard().with_limit::<MAX_SNAPSHOT>()
}

/// Why the store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    // Not a `source`: the message already says it, and a report that
    // walks the chain would say it twice.
    #[error("data directory {path}: {error}")]
    Io { path: PathBuf, error: io::Error },
    /// The directory holds something that is not Leasehold's data, or data
    /// that fails its checksums. It is never reset silently.
    #[error("data directory {path} is unusable: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    /// What the store held was asked for a second time: a store is
    /// recovered once, when its master starts. A bug, not damage.
    #[error("the store's contents were already recovered: a store is recovered once, by the master that starts on it")]
    RecoveredTwice,
}

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

    fn add_one(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether a store failed because its disk is full.
pub(crate) fn is_disk_full(error: &StoreError) -> bool {
    matches!(error, StoreError::Io { error, .. } if error.kind() == io::ErrorKind::StorageFull)
}

/// How much a store holds, for deciding when to compact.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreSizes {
    pub log_bytes: u64,
    pub snapshot_bytes: u64,
}

/// The store in a data directory.
#[derive(Debug)]
pub struct FileStore {
    dir: PathBuf,
    log: BufWriter<File>,
    sizes: StoreSizes,
    /// The log's length when the last `sync` returned: what `rewind`
    /// goes back to.
    synced_len: u64,
    /// Bytes set aside in `reserve` for a full disk (`STORE-5`), and
    /// whether they are set aside now.
    reserve: u64,
    reserved: bool,
    /// What `open` read, until `recover` hands it over.
    recovered: Option<Recovered>,
    syncs: SyncCount,
    /// Held (locked) while the store is open: one master per directory.
    _lock: File,
}

pub(crate) fn io_error(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |error| StoreError::Io {
        path: path.to_path_buf(),
        error,
    }
}

pub(crate) fn corrupt(path: &Path, reason: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

pub(crate) fn encode(value: &impl Serialize) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, store_config()).expect("stored types encode")
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let (value, read) =
        bincode::serde::decode_from_slice(bytes, store_config()).map_err(|e| e.to_string())?;
    if read != bytes.len() {
        return Err(format!("{} bytes left over", bytes.len() - read));
    }
    Ok(value)
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))
}

impl FileStore {
    /// Opens (or creates) the data directory, takes its lock and reads what
    /// it holds, which [`Store::recover`] then returns. A torn last record,
    /// left by a crash before its fsync (so never acknowledged), is cut
    /// off; anything else that fails its checks is refused here.
    ///
    /// ```
    /// use leasehold_server::{FileStore, Store};
    ///
    /// let dir = std::env::temp_dir().join(format!("leasehold-doc-{}", std::process::id()));
    /// let mut store = FileStore::open(&dir)?;
    /// let recovered = store.recover()?;
    /// assert!(recovered.snapshot.is_none() && recovered.records.is_empty());
    /// // A second master is refused while this one holds the directory.
    /// assert!(FileStore::open(&dir).is_err());
    /// # drop(store);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), leasehold_server::StoreError>(())
    /// ```
    pub fn open(dir: &Path) -> Result<FileStore, StoreError> {
        fs::create_dir_all(dir).map_err(io_error(dir))?;
        let format = dir.join("FORMAT");
        let mut upgrade = false;
        match fs::read_to_string(&format) {
            Ok(text) if text == FORMAT => {}
            // Format 4 differs only in its snapshot, which is read by its
            // magic; its log holds commands this master applies alike.
            Ok(text) if text == FORMAT_4 => upgrade = true,
            // Format 1 kept sessions without secrets (`AUTH-1`): no owner
            // could prove itself, so such a directory is not taken over.
            Ok(text) if text == "leasehold-data 1\n" => {
                return Err(corrupt(
                    dir,
                    "it was written by an earlier Leasehold (format 1, whose sessions have no \
                     secret); this master reads formats 4 and 5: start it on a new directory",
                ))
            }
            // Format 2 encoded nodes and acquires without the transient
            // mark (`LOCK-12`): its records cannot be read as format 3's.
            Ok(text) if text == "leasehold-data 2\n" => {
                return Err(corrupt(
                    dir,
                    "it was written by an earlier Leasehold (format 2, whose nodes have no \
                     transient mark); this master reads formats 4 and 5: start it on a new directory",
                ))
            }
            // Format 3's state has no record of which sessions may cache
            // (`CACHE-7`): its snapshots cannot be read as format 4's.
            Ok(text) if text == "leasehold-data 3\n" => {
                return Err(corrupt(
                    dir,
                    "it was written by an earlier Leasehold (format 3, whose state does not \
                     say which sessions may cache); this master reads formats 4 and 5: start \
                     it on a new directory",
                ))
            }
            Ok(text) => {
                return Err(corrupt(
                    dir,
                    format!("FORMAT says {:?}, expected {FORMAT:?}", text.trim()),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let foreign = fs::read_dir(dir).map_err(io_error(dir))?.next().is_some();
                if foreign {
                    return Err(corrupt(
                        dir,
                        "it is not empty and holds no FORMAT file: not a Leasehold data directory",
                    ));
                }
                write_atomically(dir, "FORMAT", FORMAT.as_bytes())?;
            }
            Err(e) => return Err(io_error(&format)(e)),
        }
        let lock_path = dir.join("LOCK");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_error(&lock_path))?;
        if lock.try_lock().is_err() {
            return Err(corrupt(dir, "another master is using it (LOCK is held)"));
        }
        let snapshot_path = dir.join("snapshot");
        let snapshot = read_snapshot(&snapshot_path)?;
        let snapshot_bytes = fs::metadata(&snapshot_path).map_or(0, |m| m.len());
        let log_path = dir.join("log");
        let log = read_log(&log_path)?;
        let valid_len = log.as_ref().map(|l| l.valid_len);
        let recovered = recovered(dir, snapshot, log)?;
        if upgrade {
            // Read whole: from now on the log may hold commands format 4
            // does not know, so an earlier master must refuse the
            // directory rather than misread it. (Had it not read, the
            // directory would still be format 4's, untouched.) The
            // snapshot is rewritten in format 5's shape once recovery is
            // done (`STORE-2`).
            tracing::info!(dir = %dir.display(), "carrying a format 4 data directory forward to format 5");
            write_atomically(dir, "FORMAT", FORMAT.as_bytes())?;
        }
        let log = match valid_len {
            // No log yet (nor a snapshot): start one.
            None => new_log(dir, recovered.next_seq)?,
            Some(len) => {
                let file = OpenOptions::new()
                    .write(true)
                    .open(&log_path)
                    .map_err(io_error(&log_path))?;
                // Drop a torn tail so new records follow the last whole one.
                file.set_len(len).map_err(io_error(&log_path))?;
                file.sync_all().map_err(io_error(&log_path))?;
                let mut file = file;
                std::io::Seek::seek(&mut file, io::SeekFrom::End(0))
                    .map_err(io_error(&log_path))?;
                file
            }
        };
        Ok(FileStore {
            dir: dir.to_path_buf(),
            log: BufWriter::new(log),
            sizes: StoreSizes {
                log_bytes: valid_len.unwrap_or(16),
                snapshot_bytes,
            },
            synced_len: valid_len.unwrap_or(16),
            reserve: 0,
            reserved: false,
            recovered: Some(recovered),
            syncs: SyncCount::default(),
            _lock: lock,
        })
    }

    /// Counts this store's fsyncs of batches, from now on and wherever the
    /// store goes.
    pub fn syncs(&self) -> SyncCount {
        self.syncs.clone()
    }
}

impl Store for FileStore {
    fn recover(&mut self) -> Result<Recovered, StoreError> {
        self.recovered.take().ok_or(StoreError::RecoveredTwice)
    }

    fn location(&self) -> String {
        self.dir.display().to_string()
    }

    fn set_reserve(&mut self, bytes: u64) -> Result<(), StoreError> {
        self.reserve = bytes;
        if bytes == 0 {
            let _ = fs::remove_file(self.dir.join("reserve"));
            return Ok(());
        }
        self.set_reserve_aside()?;
        self.reserved = true;
        Ok(())
    }

    /// Writes `snapshot` and starts an empty log after it: recovery then
    /// reads one file instead of the whole history.
    fn compact(&mut self, snapshot: &Snapshot) -> Result<(), StoreError> {
        self.sync()?;
        let bytes = sealed(SNAPSHOT_MAGIC, &encode(snapshot));
        write_atomically(&self.dir, "snapshot", &bytes)?;
        // The snapshot is durable; a crash from here on finds it and skips
        // the log records it includes.
        self.log = BufWriter::new(new_log(&self.dir, snapshot.next_seq)?);
        self.sizes = StoreSizes {
            log_bytes: 16,
            snapshot_bytes: bytes.len() as u64,
        };
        self.synced_len = 16;
        Ok(())
    }

    fn release_reserve(&mut self) -> bool {
        if !self.reserved {
            return false;
        }
        self.reserved = false;
        fs::remove_file(self.dir.join("reserve")).is_ok()
    }

    fn restore_reserve(&mut self) -> bool {
        if self.reserve == 0 {
            return false;
        }
        self.reserved = self.set_reserve_aside().is_ok();
        self.reserved
    }

    fn rewind(&mut self) -> Result<(), StoreError> {
        let path = self.dir.join("log");
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(io_error(&path))?;
        // The buffer is dropped unwritten: its records are appended again.
        let old = std::mem::replace(&mut self.log, BufWriter::new(file));
        let (_, _unwritten) = old.into_parts();
        self.log
            .get_ref()
            .set_len(self.synced_len)
            .map_err(io_error(&path))?;
        self.sizes.log_bytes = self.synced_len;
        Ok(())
    }

    fn seal(&mut self) -> Result<(), StoreError> {
        let path = self.dir.join("log");
        self.log.flush().map_err(io_error(&path))?;
        self.log.get_ref().sync_data().map_err(io_error(&path))
    }

    fn sizes(&self) -> StoreSizes {
        self.sizes
    }

    fn append(&mut self, record: &Record) -> Result<(), StoreError> {
        let framed = frame(record);
        let path = self.dir.join("log");
        self.log.write_all(&framed).map_err(io_error(&path))?;
        self.sizes.log_bytes += framed.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        let path = self.dir.join("log");
        self.log.flush().map_err(io_error(&path))?;
        self.log.get_ref().sync_data().map_err(io_error(&path))?;
        self.syncs.add_one();
        self.synced_len = self.sizes.log_bytes;
        // Written only now that the batch is on disk, and carried to disk
        // by the next one: a marker proves that everything before it was
        // synced.
        self.append(&Record::BatchEnd)
    }
}

impl FileStore {
    /// Allocates the reserve in the file `reserve`, on disk, so that
    /// a full disk leaves room to finish what was acknowledged and to keep
    /// ending sessions while writes are refused (`STORE-5`).
    fn set_reserve_aside(&self) -> Result<(), StoreError> {
        let path = self.dir.join("reserve");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_error(&path))?;
        allocate(&file, self.reserve).map_err(|e| {
            let _ = fs::remove_file(&path);
            io_error(&path)(e)
        })?;
        file.sync_all().map_err(io_error(&path))
    }
}

/// Allocates `len` bytes of disk for `file`, failing with `StorageFull`
/// when the disk lacks them (a sparse file would not hold them).
fn allocate(file: &File, len: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: posix_fallocate on an open descriptor; no memory involved.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(())
    }
    #[cfg(not(unix))]
    {
        file.set_len(len)
    }
}

/// Writes `name` in `dir` so that a crash leaves either the old file or the
/// new one, never a mixture. A write that fails leaves no temporary file.
pub(crate) fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
    let tmp = dir.join(format!("{name}.tmp"));
    let written = (|| {
        let mut file = File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io_error(&tmp)(e));
    }
    let path = dir.join(name);
    fs::rename(&tmp, &path).map_err(io_error(&path))?;
    sync_dir(dir)
}

/// A new, empty log whose first record will be `base`, replacing any old
/// one atomically.
fn new_log(dir: &Path, base: u64) -> Result<File, StoreError> {
    write_atomically(dir, "log", &log_header(base))?;
    let path = dir.join("log");
    OpenOptions::new()
        .append(true)
        .open(&path)
        .map_err(io_error(&path))
}

fn read_snapshot(path: &Path) -> Result<Option<Snapshot>, StoreError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path)(e)),
    };
    let undecodable = |e: String| corrupt(path, format!("the snapshot does not decode: {e}"));
    if bytes.starts_with(SNAPSHOT_MAGIC_4) {
        let body = unseal(bytes, path, SNAPSHOT_MAGIC_4, "snapshot")?;
        let old: crate::upgrade::SnapshotV4 = decode(&body).map_err(undecodable)?;
        return Ok(Some(old.into()));
    }
    let body = unseal(bytes, path, SNAPSHOT_MAGIC, "snapshot")?;
    decode(&body).map(Some).map_err(undecodable)
}

/// A whole file as snapshots are kept: `magic`, the body's length (u64),
/// its CRC-32, the body.
pub(crate) fn sealed(magic: &[u8; 8], body: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(body.len() + 20);
    bytes.extend_from_slice(magic);
    bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    bytes.extend_from_slice(body);
    bytes
}

/// The body of a [`sealed`] file's `bytes`, read from `path`.
pub(crate) fn unseal(
    mut bytes: Vec<u8>,
    path: &Path,
    magic: &[u8; 8],
    what: &str,
) -> Result<Vec<u8>, StoreError> {
    if bytes.len() < 20 || &bytes[..8] != magic {
        return Err(corrupt(path, format!("not a {what} (bad magic)")));
    }
    let len = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")) as usize;
    let crc = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    let body = bytes.split_off(20);
    if body.len() != len || crc32fast::hash(&body) != crc {
        return Err(corrupt(
            path,
            format!("the {what} fails its length or checksum"),
        ));
    }
    Ok(body)
}

/// The record at `at`, if it is whole (its length fits the file, is not
/// zero, and its checksum holds), with the offset after it.
fn whole_record(bytes: &[u8], at: usize) -> Option<(Result<Record, String>, usize)> {
    let rest = bytes.get(at..)?;
    if rest.len() < 8 {
        return None;
    }
    let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
    if len == 0 || len > MAX_RECORD || rest.len() < 8 + len {
        return None;
    }
    let body = &rest[8..8 + len];
    if crc32fast::hash(body) != crc {
        return None;
    }
    Some((decode(body), at + 8 + len))
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

/// The log in the file at `path`, if there is one.
fn read_log(path: &Path) -> Result<Option<LogImage>, StoreError> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_end(&mut bytes).map_err(io_error(path))?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(path)(e)),
    }
    parse_log(&bytes, path).map(Some)
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
    let body = encode(record);
    let mut framed = Vec::with_capacity(8 + body.len());
    framed.extend_from_slice(&(body.len() as u32).to_le_bytes());
    framed.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    framed.extend_from_slice(&body);
    framed
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
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use leasehold_protocol::{Behavior, SessionId};

    use super::*;

    /// The store in `dir` and what it holds, as a master starting on it
    /// sees them.
    fn opened(dir: &Path) -> (FileStore, Recovered) {
        let mut store = FileStore::open(dir).unwrap();
        let recovered = store.recover().unwrap();
        (store, recovered)
    }
    use crate::config::Config;
    use crate::state::Bounds;
    use crate::state::NewSession;
    use crate::time::at;

    fn dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("leasehold-store-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn create(n: u128) -> Record {
        Record::Command {
            now: Millis::from_millis(n as u64),
            command: Command::CreateSession(NewSession {
                id: SessionId::from_u128(n),
                secret: leasehold_protocol::SessionSecret::from_bytes([7; 16]),
                name: format!("s{n}"),
                lease: Some(Duration::from_secs(10)),
                lock_delay: None,
                behavior: Behavior::Release,
                checks: Vec::new(),
            }),
        }
    }

    #[test]
    fn what_a_store_holds_is_handed_over_once() {
        let dir = dir("twice");
        let (mut store, _) = opened(&dir);
        let again = store.recover().unwrap_err();
        assert!(matches!(again, StoreError::RecoveredTwice), "{again}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn each_store_counts_its_own_fsyncs() {
        let (one, two) = (dir("count-one"), dir("count-two"));
        let (mut first, _) = opened(&one);
        let (mut second, _) = opened(&two);
        let (first_syncs, second_syncs) = (first.syncs(), second.syncs());
        for n in 1..=3 {
            first.append(&create(n)).unwrap();
            first.sync().unwrap();
        }
        second.sync().unwrap();
        assert_eq!((first_syncs.get(), second_syncs.get()), (3, 1));
        drop((first, second));
        let _ = (fs::remove_dir_all(&one), fs::remove_dir_all(&two));
    }

    // STORE-1
    #[test]
    fn synced_records_come_back_in_order() {
        let dir = dir("order");
        let (mut store, recovered) = opened(&dir);
        assert!(recovered.records.is_empty() && recovered.snapshot.is_none());
        for n in 1..=3 {
            store.append(&create(n)).unwrap();
        }
        store.sync().unwrap();
        drop(store);
        let (_, recovered) = opened(&dir);
        assert_eq!(recovered.records, [create(1), create(2), create(3)]);
        assert_eq!(recovered.next_seq, 3);
        let _ = fs::remove_dir_all(&dir);
    }

    /// Appends raw bytes to the log, as a crash or a disk might leave them.
    fn scribble(dir: &Path, bytes: &[u8]) {
        let mut log = OpenOptions::new()
            .append(true)
            .open(dir.join("log"))
            .unwrap();
        log.write_all(bytes).unwrap();
    }

    // STORE-3
    #[test]
    fn a_torn_last_record_is_dropped_and_later_appends_follow_the_last_whole_one() {
        let dir = dir("torn");
        let (mut store, _) = opened(&dir);
        store.append(&create(1)).unwrap();
        store.sync().unwrap();
        store.append(&create(2)).unwrap();
        store.sync().unwrap();
        drop(store);
        // A write cut short: a header claiming 100 bytes, and 10 of them.
        let mut torn = vec![100, 0, 0, 0, 1, 2, 3, 4];
        torn.extend([7; 10]);
        scribble(&dir, &torn);
        let (mut store, recovered) = opened(&dir);
        assert_eq!(recovered.records, [create(1), create(2)]);
        store.append(&create(3)).unwrap();
        store.sync().unwrap();
        drop(store);
        let (_, recovered) = opened(&dir);
        assert_eq!(recovered.records, [create(1), create(2), create(3)]);
        let _ = fs::remove_dir_all(&dir);
    }

    // STORE-3
    #[test]
    fn a_damaged_record_in_the_last_unsynced_batch_ends_the_log_there() {
        let dir = dir("unsynced");
        let (mut store, _) = opened(&dir);
        store.append(&create(1)).unwrap();
        store.sync().unwrap();
        drop(store);
        // A batch whose fsync never returned: its first record lost (zeros),
        // its second kept by the disk.
        let body = encode(&create(2));
        scribble(&dir, &vec![0; 8 + body.len()]);
        let mut second = (body.len() as u32).to_le_bytes().to_vec();
        second.extend(crc32fast::hash(&body).to_le_bytes());
        second.extend(&body);
        scribble(&dir, &second);
        let (_, recovered) = opened(&dir);
        assert_eq!(recovered.records, [create(1)]);
        let _ = fs::remove_dir_all(&dir);
    }

    // STORE-3
    #[test]
    fn a_damaged_length_before_a_synced_batch_is_refused_not_truncated() {
        let dir = dir("length");
        let (mut store, _) = opened(&dir);
        for n in 1..=3 {
            store.append(&create(n)).unwrap();
            store.sync().unwrap();
        }
        drop(store);
        let log = dir.join("log");
        let mut bytes = fs::read(&log).unwrap();
        bytes[16] = 0xff;
        bytes[17] = 0xff;
        fs::write(&log, &bytes).unwrap();
        let err = FileStore::open(&dir).unwrap_err();
        assert!(err.to_string().contains("damaged"), "{err}");
        assert_eq!(fs::read(&log).unwrap(), bytes, "nothing was cut");
        let _ = fs::remove_dir_all(&dir);
    }

    // STORE-3
    #[test]
    fn a_damaged_record_in_a_synced_batch_is_refused() {
        let dir = dir("damaged");
        let (mut store, _) = opened(&dir);
        store.append(&create(1)).unwrap();
        store.append(&create(2)).unwrap();
        store.sync().unwrap();
        drop(store);
        let log = dir.join("log");
        let mut bytes = fs::read(&log).unwrap();
        bytes[16 + 8 + 2] ^= 0xff;
        fs::write(&log, bytes).unwrap();
        let err = FileStore::open(&dir).unwrap_err();
        assert!(err.to_string().contains("damaged"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }

    // STORE-3
    #[test]
    fn a_snapshot_without_the_log_after_it_is_refused() {
        let dir = dir("no-log");
        let (mut store, _) = opened(&dir);
        store.append(&create(1)).unwrap();
        store.sync().unwrap();
        let snapshot = Snapshot {
            epoch: 1,
            now: at(1),
            next_seq: 1,
            state: State::new(Bounds::from(&Config::default())),
        };
        store.compact(&snapshot).unwrap();
        store.append(&create(2)).unwrap();
        store.sync().unwrap();
        drop(store);
        fs::remove_file(dir.join("log")).unwrap();
        let err = FileStore::open(&dir).unwrap_err();
        assert!(err.to_string().contains("followed by no log"), "{err}");
        assert!(
            !dir.join("log").exists(),
            "nothing was made up in its place"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    // STORE-3
    #[test]
    fn a_directory_in_use_is_refused() {
        let dir = dir("in-use");
        let (_store, _) = opened(&dir);
        let err = FileStore::open(&dir).unwrap_err();
        assert!(err.to_string().contains("another master"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_io_error_is_told_once_along_its_chain() {
        let error = io_error(Path::new("/data"))(io::Error::from_raw_os_error(28));
        let mut chain = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            chain.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        assert_eq!(chain.matches("os error 28").count(), 1, "{chain}");
    }

    // STORE-2, AUTH-1
    #[test]
    fn a_directory_of_format_1_is_refused_with_the_reason() {
        let dir = dir("format-1");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("FORMAT"), "leasehold-data 1\n").unwrap();
        let err = FileStore::open(&dir).unwrap_err();
        assert!(err.to_string().contains("format 1"), "{err}");
        assert!(err.to_string().contains("no secret"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }

    // STORE-2, LOCK-12
    #[test]
    fn a_directory_of_format_2_is_refused_with_the_reason() {
        let dir = dir("format-2");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("FORMAT"), "leasehold-data 2\n").unwrap();
        let err = FileStore::open(&dir).unwrap_err();
        assert!(err.to_string().contains("format 2"), "{err}");
        assert!(err.to_string().contains("reads formats 4 and 5"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }

    // STORE-2, CACHE-7
    #[test]
    fn a_directory_of_format_3_is_refused_with_the_reason() {
        let dir = dir("format-3");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("FORMAT"), "leasehold-data 3\n").unwrap();
        let err = FileStore::open(&dir).unwrap_err();
        assert!(err.to_string().contains("format 3"), "{err}");
        assert!(err.to_string().contains("may cache"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }

    // STORE-3
    #[test]
    fn a_foreign_directory_is_refused() {
        let dir = dir("foreign");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("notes.txt"), "mine").unwrap();
        let err = FileStore::open(&dir).unwrap_err();
        assert!(
            err.to_string().contains("not a Leasehold data directory"),
            "{err}"
        );
        fs::write(dir.join("FORMAT"), "something else 9\n").unwrap();
        assert!(FileStore::open(&dir).is_err());
        let _ = fs::remove_dir_all(&dir);
    }

    // STORE-2
    #[test]
    fn a_compacted_store_recovers_the_snapshot_and_only_later_records() {
        let dir = dir("compact");
        let (mut store, _) = opened(&dir);
        let mut state = State::new(Bounds::from(&Config::default()));
        for n in 1..=2 {
            let record = create(n);
            store.append(&record).unwrap();
            if let Record::Command { now, command } = record {
                state.apply(command, now).0.unwrap();
            }
        }
        store
            .compact(&Snapshot {
                epoch: 3,
                now: at(2),
                next_seq: 2,
                state,
            })
            .unwrap();
        store.append(&create(3)).unwrap();
        store.sync().unwrap();
        drop(store);
        let (_, recovered) = opened(&dir);
        let snapshot = recovered.snapshot.unwrap();
        assert_eq!(snapshot.epoch, 3);
        assert_eq!(snapshot.state.sessions().count(), 2);
        assert_eq!(recovered.records, [create(3)]);
        assert_eq!(recovered.next_seq, 3);
        let _ = fs::remove_dir_all(&dir);
    }
}
