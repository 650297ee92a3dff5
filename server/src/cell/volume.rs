//! Where a member keeps its files (`raft-log`, `raft-snapshot`): its data
//! directory, or memory that a simulation crashes as a power cut would.
//!
//! The log and the state machine rely on four obligations, which every
//! volume keeps:
//! - what [`Volume::append`] wrote is durable once [`Volume::sync`] on the
//!   same file returns, and not before: a crash may keep any prefix of the
//!   bytes appended since the last sync, ending anywhere, even mid-frame;
//! - [`Volume::replace`] is atomic and durable: after a crash the file
//!   holds the old contents or the new, whole;
//! - [`Volume::truncate`] is durable when it returns;
//! - a live process reads back everything it wrote, synced or not.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::disk::{sync_dir, write_atomically, StoreError};

/// A member's storage. See the module's documentation for what an
/// implementation must guarantee.
pub trait Volume: Debug + Send + Sync + 'static {
    /// The whole file, synced or not; `None` if there is none.
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>>;
    /// Adds `bytes` at the file's end, creating it if need be; durable
    /// only after [`Volume::sync`].
    fn append(&self, name: &str, bytes: &[u8]) -> io::Result<()>;
    /// Makes everything appended to the file durable.
    fn sync(&self, name: &str) -> io::Result<()>;
    /// Replaces the file's contents atomically and durably.
    fn replace(&self, name: &str, bytes: &[u8]) -> io::Result<()>;
    /// Cuts the file to `len` bytes, durably.
    fn truncate(&self, name: &str, len: u64) -> io::Result<()>;
    /// Where the file lives, for messages.
    fn path(&self, name: &str) -> PathBuf;
    /// Whether calls block their thread on a disk: then they run on tokio's
    /// blocking pool, so an fsync never stalls the runtime serving clients.
    fn blocks(&self) -> bool {
        true
    }
    /// How long a sync takes, in the runtime's time, for a volume that
    /// does not block: a crash can land inside it.
    fn sync_latency(&self) -> Duration {
        Duration::ZERO
    }
}

/// A data directory on disk.
#[derive(Debug)]
pub struct DirVolume {
    dir: PathBuf,
    /// Files open for appending, kept between calls.
    open: Mutex<BTreeMap<String, File>>,
}

impl DirVolume {
    /// The volume of `dir`, which the caller has created and locked.
    pub fn new(dir: &Path) -> DirVolume {
        DirVolume {
            dir: dir.to_path_buf(),
            open: Mutex::new(BTreeMap::new()),
        }
    }

    fn with_file<T>(
        &self,
        name: &str,
        f: impl FnOnce(&mut File) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut open = self.open.lock().expect("volume lock");
        if !open.contains_key(name) {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.dir.join(name))?;
            open.insert(name.to_string(), file);
        }
        f(open.get_mut(name).expect("opened above"))
    }

    /// Forgets the open handle of `name`: the file was replaced.
    fn forget(&self, name: &str) {
        self.open.lock().expect("volume lock").remove(name);
    }
}

fn into_io(e: StoreError) -> io::Error {
    io::Error::other(e.to_string())
}

impl Volume for DirVolume {
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(self.dir.join(name)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn append(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.with_file(name, |file| file.write_all(bytes))
    }

    fn sync(&self, name: &str) -> io::Result<()> {
        self.with_file(name, |file| file.sync_data())
    }

    fn replace(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.forget(name);
        write_atomically(&self.dir, name, bytes).map_err(into_io)
    }

    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        self.forget(name);
        let file = OpenOptions::new().write(true).open(self.dir.join(name))?;
        file.set_len(len)?;
        file.sync_all()?;
        sync_dir(&self.dir).map_err(into_io)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// A volume in memory that a simulation crashes: the bytes appended since
/// a file's last sync are what a crash may tear. Clones are the same
/// volume, so whoever crashes the host keeps one.
#[derive(Debug, Clone)]
pub struct MemoryVolume {
    files: Arc<Mutex<BTreeMap<String, MemoryFile>>>,
    sync_latency: Duration,
}

#[derive(Debug, Clone, Default)]
struct MemoryFile {
    bytes: Vec<u8>,
    /// How many of the bytes are durable.
    synced: usize,
}

impl MemoryVolume {
    /// An empty volume whose syncs take `sync_latency`.
    pub fn new(sync_latency: Duration) -> MemoryVolume {
        MemoryVolume {
            files: Arc::default(),
            sync_latency,
        }
    }

    /// The power went out: of each file's bytes since its last sync,
    /// `keep(unsynced)` survive (at most `unsynced`).
    pub fn crash(&self, mut keep: impl FnMut(usize) -> usize) {
        for file in self.files.lock().expect("volume lock").values_mut() {
            let unsynced = file.bytes.len() - file.synced;
            let kept = file.synced + keep(unsynced).min(unsynced);
            file.bytes.truncate(kept);
            file.synced = kept;
        }
    }

    /// Bytes held, synced or not, across every file.
    pub fn size(&self) -> usize {
        let files = self.files.lock().expect("volume lock");
        files.values().map(|f| f.bytes.len()).sum()
    }
}

impl Volume for MemoryVolume {
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        let files = self.files.lock().expect("volume lock");
        Ok(files.get(name).map(|f| f.bytes.clone()))
    }

    fn append(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let mut files = self.files.lock().expect("volume lock");
        files
            .entry(name.to_string())
            .or_default()
            .bytes
            .extend_from_slice(bytes);
        Ok(())
    }

    fn sync(&self, name: &str) -> io::Result<()> {
        let mut files = self.files.lock().expect("volume lock");
        if let Some(file) = files.get_mut(name) {
            file.synced = file.bytes.len();
        }
        Ok(())
    }

    fn replace(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let file = MemoryFile {
            bytes: bytes.to_vec(),
            synced: bytes.len(),
        };
        self.files
            .lock()
            .expect("volume lock")
            .insert(name.to_string(), file);
        Ok(())
    }

    fn truncate(&self, name: &str, len: u64) -> io::Result<()> {
        let mut files = self.files.lock().expect("volume lock");
        let file = files
            .get_mut(name)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        file.bytes.truncate(len as usize);
        file.synced = file.synced.min(file.bytes.len());
        Ok(())
    }

    fn path(&self, name: &str) -> PathBuf {
        Path::new("memory").join(name)
    }

    fn blocks(&self) -> bool {
        false
    }

    fn sync_latency(&self) -> Duration {
        self.sync_latency
    }
}

/// Runs `f` on `volume` where it belongs: on the blocking pool for a disk,
/// inline for memory.
pub(crate) async fn run<T: Send + 'static>(
    volume: &Arc<dyn Volume>,
    f: impl FnOnce(&dyn Volume) -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    if volume.blocks() {
        let volume = volume.clone();
        tokio::task::spawn_blocking(move || f(&*volume))
            .await
            .map_err(io::Error::other)?
    } else {
        f(&**volume)
    }
}

/// Appends `bytes` to `name` and syncs it: the sync's latency passes
/// between the two, so a crash can land on unsynced bytes.
pub(crate) async fn append_synced(
    volume: &Arc<dyn Volume>,
    name: &'static str,
    bytes: Vec<u8>,
) -> io::Result<()> {
    if volume.blocks() {
        return run(volume, move |v| {
            v.append(name, &bytes)?;
            v.sync(name)
        })
        .await;
    }
    volume.append(name, &bytes)?;
    let latency = volume.sync_latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    volume.sync(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_keeps_what_was_synced_and_a_prefix_of_the_rest() {
        let volume = MemoryVolume::new(Duration::ZERO);
        volume.append("f", b"synced").unwrap();
        volume.sync("f").unwrap();
        volume.append("f", b"-torn").unwrap();
        volume.crash(|unsynced| {
            assert_eq!(unsynced, 5);
            2
        });
        assert_eq!(volume.read("f").unwrap().unwrap(), b"synced-t");
    }

    #[test]
    fn a_replaced_file_survives_a_crash_whole() {
        let volume = MemoryVolume::new(Duration::ZERO);
        volume.append("f", b"old").unwrap();
        volume.replace("f", b"new").unwrap();
        volume.crash(|_| 0);
        assert_eq!(volume.read("f").unwrap().unwrap(), b"new");
    }

    #[test]
    fn a_directory_reads_back_what_it_appended() {
        let dir = std::env::temp_dir().join(format!("leasehold-volume-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let volume = DirVolume::new(&dir);
        volume.append("f", b"abc").unwrap();
        volume.sync("f").unwrap();
        volume.truncate("f", 2).unwrap();
        volume.append("f", b"d").unwrap();
        assert_eq!(volume.read("f").unwrap().unwrap(), b"abd");
        volume.replace("f", b"xyz").unwrap();
        volume.append("f", b"!").unwrap();
        assert_eq!(volume.read("f").unwrap().unwrap(), b"xyz!");
        assert_eq!(volume.read("none").unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
