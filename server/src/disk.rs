//! The data directory's toolbox, shared by the single master's
//! [`FileStore`](crate::FileStore) and the cell's log, snapshots and
//! membership files: errors, atomic writes, and the two framings with a
//! CRC-32 that let recovery tell a torn tail from damage (`STORE-3`):
//!
//! - a whole file ([`sealed`]): an 8-byte magic, the body's length (u64),
//!   its CRC-32, the body;
//! - a frame of a log ([`framed`]): an optional magic, the body's length
//!   (u32), its CRC-32, the body. A log is a header and frames one after
//!   the other; [`whole_frame`] reads one back only if it is whole.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

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
    /// Another master (or member) has the directory open: its `LOCK` is
    /// held. Not damage: it is free again once that process stops.
    #[error("data directory {path} is in use: {holder} has it open (its LOCK is held)")]
    InUse { path: PathBuf, holder: &'static str },
    /// What the store held was asked for a second time: a store is
    /// recovered once, when its master starts. A bug, not damage.
    #[error("the store's contents were already recovered: a store is recovered once, by the master that starts on it")]
    RecoveredTwice,
}

/// Whether a store failed because its disk is full.
pub(crate) fn is_disk_full(error: &StoreError) -> bool {
    matches!(error, StoreError::Io { error, .. } if error.kind() == io::ErrorKind::StorageFull)
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

pub(crate) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))
}

/// Allocates `len` bytes of disk for `file`, failing with `StorageFull`
/// when the disk lacks them (a sparse file would not hold them).
pub(crate) fn allocate(file: &File, len: u64) -> io::Result<()> {
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

/// A frame of a log: `magic` (none for the single master's log), the
/// body's length (u32), its CRC-32, the body.
pub(crate) fn framed(magic: &[u8], body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(magic.len() + 8 + body.len());
    frame.extend_from_slice(magic);
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    frame.extend_from_slice(body);
    frame
}

/// The body of the [`framed`] frame at `at` in `bytes` if it is whole (its
/// magic, a length of at most `max` that fits the bytes, a checksum that
/// holds), with the offset after it. `None` is a torn or damaged frame:
/// which of the two, only what follows it can tell.
pub(crate) fn whole_frame<'a>(
    bytes: &'a [u8],
    at: usize,
    magic: &[u8],
    max: usize,
) -> Option<(&'a [u8], usize)> {
    let rest = bytes.get(at..)?;
    let head = magic.len() + 8;
    if rest.len() < head || &rest[..magic.len()] != magic {
        return None;
    }
    let len = u32::from_le_bytes(rest[head - 8..head - 4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(rest[head - 4..head].try_into().expect("4 bytes"));
    if len > max || rest.len() < head + len {
        return None;
    }
    let body = &rest[head..head + len];
    (crc32fast::hash(body) == crc).then_some((body, at + head + len))
}
