//! [`FileStore`]: the [`Store`] in a data directory.
//!
//! Files in the data directory:
//! - `FORMAT`: `leasehold-data 6`, so a foreign directory is never taken
//!   for ours. Format 4 and 5 directories are carried forward
//!   (`upgrade.rs`).
//! - `LOCK`: locked while a master has the directory open.
//! - `snapshot`: a [`sealed`] file whose magic says which format's shape
//!   the encoded [`Snapshot`] is in.
//! - `log`: the log's bytes (`store.rs`).
//! - `reserve`: disk set aside for a full disk (`STORE-5`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::codec::{decode, encode};
use crate::disk::{allocate, corrupt, io_error, sealed, unseal, write_atomically, StoreError};
use crate::store::{
    frame, log_header, parse_log, recovered, LogImage, Record, Recovered, Snapshot, Store,
    StoreSizes, SyncCount,
};

const FORMAT: &str = "leasehold-data 7\n";
/// Formats 4 to 6, whose directories this master reads and carries
/// forward.
const FORMAT_4: &str = "leasehold-data 4\n";
const FORMAT_5: &str = "leasehold-data 5\n";
const FORMAT_6: &str = "leasehold-data 6\n";
const SNAPSHOT_MAGIC: &[u8; 8] = b"LHSNAP04";
/// A snapshot in format 4's shape (`upgrade.rs`).
const SNAPSHOT_MAGIC_4: &[u8; 8] = b"LHSNAP01";
/// A snapshot in format 5's shape, without access control (`upgrade.rs`).
const SNAPSHOT_MAGIC_5: &[u8; 8] = b"LHSNAP02";
/// A snapshot in format 6's shape, with no time kept with a lock's
/// holders (`upgrade.rs`).
const SNAPSHOT_MAGIC_6: &[u8; 8] = b"LHSNAP03";

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
        let mut upgrade = None;
        match fs::read_to_string(&format) {
            Ok(text) if text == FORMAT => {}
            // Formats 4 to 6 differ only in their snapshots, which are
            // read by their magic; their logs hold commands this master
            // applies alike.
            Ok(text) if [FORMAT_4, FORMAT_5, FORMAT_6].contains(&text.as_str()) => {
                upgrade = Some(text)
            }
            // Format 1 kept sessions without secrets (`AUTH-1`): no owner
            // could prove itself, so such a directory is not taken over.
            Ok(text) if text == "leasehold-data 1\n" => {
                return Err(corrupt(
                    dir,
                    "it was written by an earlier Leasehold (format 1, whose sessions have no \
                     secret); this master reads formats 4 to 7: start it on a new directory",
                ))
            }
            // Format 2 encoded nodes and acquires without the transient
            // mark (`LOCK-12`): its records cannot be read as format 3's.
            Ok(text) if text == "leasehold-data 2\n" => {
                return Err(corrupt(
                    dir,
                    "it was written by an earlier Leasehold (format 2, whose nodes have no \
                     transient mark); this master reads formats 4 to 7: start it on a new directory",
                ))
            }
            // Format 3's state has no record of which sessions may cache
            // (`CACHE-7`): its snapshots cannot be read as format 4's.
            Ok(text) if text == "leasehold-data 3\n" => {
                return Err(corrupt(
                    dir,
                    "it was written by an earlier Leasehold (format 3, whose state does not \
                     say which sessions may cache); this master reads formats 4 to 7: start \
                     it on a new directory",
                ))
            }
            Ok(text) => {
                let why = match newer_format(&text) {
                    Some(n) => format!(
                        "it was written by a newer Leasehold (format {n}); this master reads \
                         formats 4 to 7: run the newer binary on it"
                    ),
                    None if text.starts_with("leasehold-cell ") => format!(
                        "it is a cell member's directory ({}), not a single master's: start \
                         it with serve --cell ... --node ID",
                        text.trim()
                    ),
                    None => format!(
                        "FORMAT says {:?}, not a single master's {:?}",
                        text.trim(),
                        FORMAT.trim()
                    ),
                };
                return Err(corrupt(dir, why));
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
            return Err(StoreError::InUse {
                path: dir.to_path_buf(),
                holder: "another master",
            });
        }
        let snapshot_path = dir.join("snapshot");
        let snapshot = read_snapshot(&snapshot_path)?;
        let snapshot_file = fs::metadata(&snapshot_path).ok();
        let snapshot_bytes = snapshot_file.as_ref().map_or(0, |m| m.len());
        let log_path = dir.join("log");
        let log = read_log(&log_path)?;
        let valid_len = log.as_ref().map(|l| l.valid_len);
        let mut recovered = recovered(dir, snapshot, log)?;
        recovered.carried_forward = upgrade.is_some();
        recovered.snapshot_written = recovered
            .snapshot
            .as_ref()
            .and(snapshot_file)
            .and_then(|m| m.modified().ok());
        if let Some(was) = upgrade {
            // Read whole: from now on the log may hold commands the
            // earlier format does not know, so an earlier master must
            // refuse the directory rather than misread it. (Had it not
            // read, the directory would still be the earlier format's,
            // untouched.) The snapshot is rewritten in format 7's shape
            // once recovery is done (`STORE-2`).
            tracing::info!(dir = %dir.display(), from = was.trim(), "carrying a data directory forward to format 7");
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
        let bytes = snapshot_file(snapshot);
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
        let old: crate::upgrade::SnapshotOf<crate::upgrade::StateV4> =
            decode(&body).map_err(undecodable)?;
        return Ok(Some(old.into()));
    }
    if bytes.starts_with(SNAPSHOT_MAGIC_5) {
        let body = unseal(bytes, path, SNAPSHOT_MAGIC_5, "snapshot")?;
        let old: crate::upgrade::SnapshotOf<crate::upgrade::StateV5> =
            decode(&body).map_err(undecodable)?;
        return Ok(Some(old.into()));
    }
    if bytes.starts_with(SNAPSHOT_MAGIC_6) {
        let body = unseal(bytes, path, SNAPSHOT_MAGIC_6, "snapshot")?;
        let old: crate::upgrade::SnapshotOf<crate::upgrade::StateV6> =
            decode(&body).map_err(undecodable)?;
        return Ok(Some(old.into()));
    }
    let body = unseal(bytes, path, SNAPSHOT_MAGIC, "snapshot")?;
    decode(&body).map(Some).map_err(undecodable)
}

/// `snapshot` as the file `snapshot` of a data directory holds it: what a
/// backup is too (`OPS-6`).
pub(crate) fn snapshot_file(snapshot: &Snapshot) -> Vec<u8> {
    sealed(SNAPSHOT_MAGIC, &encode(snapshot))
}

/// The snapshot in the file at `path`, of this format or an earlier one,
/// verified; `None` if there is no such file.
pub(crate) fn snapshot_at(path: &Path) -> Result<Option<Snapshot>, StoreError> {
    read_snapshot(path)
}

/// Makes `dir`, which must not exist or be empty, a data directory whose
/// state is `snapshot` and whose log is empty (`OPS-6`). It is built
/// beside `dir` and renamed into place once whole and durable, so a
/// failure leaves nothing half-made under `dir`.
pub(crate) fn restore_dir(snapshot: &Snapshot, dir: &Path) -> Result<(), StoreError> {
    build_beside(dir, |building| {
        write_atomically(building, "FORMAT", FORMAT.as_bytes())?;
        write_atomically(building, "snapshot", &snapshot_file(snapshot))?;
        new_log(building, snapshot.next_seq)?
            .sync_all()
            .map_err(io_error(&building.join("log")))?;
        // Taking it as a master would is the check that it reads.
        let mut store = FileStore::open(building)?;
        store.recover()?;
        Ok(())
    })
}

/// Makes the new directory `dir` by `build` in a private directory beside
/// it, renamed to `dir` only once `build` succeeded: nothing is left half
/// made, and nothing already there is overwritten (`dir` must be empty or
/// absent).
pub(crate) fn build_beside(
    dir: &Path,
    build: impl FnOnce(&Path) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    match fs::read_dir(dir).map(|mut entries| entries.next().is_some()) {
        Ok(true) => {
            return Err(corrupt(
                dir,
                "it is not empty: restore into a new directory, so that nothing is overwritten",
            ))
        }
        Ok(false) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error(dir)(e)),
    }
    let name = dir
        .file_name()
        .map_or_else(|| "data".into(), |n| n.to_string_lossy().to_string());
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let building = parent.join(format!(".{name}.restoring-{}", std::process::id()));
    let _ = fs::remove_dir_all(&building);
    fs::create_dir_all(&building).map_err(io_error(&building))?;
    // It holds every session's secret, as the master's own does.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&building, fs::Permissions::from_mode(0o700))
            .map_err(io_error(&building))?;
    }
    if let Err(e) = build(&building) {
        let _ = fs::remove_dir_all(&building);
        return Err(e);
    }
    let _ = fs::remove_file(building.join("LOCK"));
    let _ = fs::remove_file(building.join("reserve"));
    if dir.exists() {
        fs::remove_dir(dir).map_err(io_error(dir))?;
    }
    fs::rename(&building, dir).map_err(io_error(dir))?;
    File::open(&parent)
        .and_then(|d| d.sync_all())
        .map_err(io_error(&parent))?;
    Ok(())
}

/// The format a `FORMAT` file of a later Leasehold names.
fn newer_format(text: &str) -> Option<u32> {
    let n: u32 = text.strip_prefix("leasehold-data ")?.trim().parse().ok()?;
    (n > 7).then_some(n)
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use leasehold_protocol::{Behavior, SessionId};

    use super::*;
    use crate::state::{Command, State};
    use crate::time::Millis;

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

    // STORE-6: a directory a newer Leasehold wrote is refused, naming
    // both formats.
    #[test]
    fn a_directory_of_a_newer_format_is_refused_naming_both() {
        let dir = dir("format-8");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("FORMAT"), "leasehold-data 8\n").unwrap();
        let err = FileStore::open(&dir).unwrap_err().to_string();
        assert!(err.contains("newer Leasehold (format 8)"), "{err}");
        assert!(err.contains("reads formats 4 to 7"), "{err}");
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
        assert!(err.to_string().contains("reads formats 4 to 7"), "{err}");
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
