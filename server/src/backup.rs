//! Backups (SPEC `OPS-6`): a file `SaveSnapshot` produced, which is a data
//! directory's `snapshot` file (magic, length, CRC-32, the encoded state),
//! read and verified whole, summed up, or made into a new data directory.

use std::path::{Path, PathBuf};

use crate::disk::StoreError;
use crate::store::Snapshot;

/// Why a backup cannot be read or restored.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The file cannot be read.
    #[error("cannot read {path}: {error}")]
    Unreadable {
        path: PathBuf,
        error: std::io::Error,
    },
    /// It is not a whole snapshot: damaged, truncated, or something else.
    #[error("{path} is not a whole Leasehold snapshot: {reason}")]
    Damaged { path: PathBuf, reason: String },
    /// The data directory cannot be made.
    #[error("cannot restore into {path}: {reason}")]
    NotRestored { path: PathBuf, reason: String },
}

fn reason(error: StoreError) -> String {
    match error {
        StoreError::Corrupt { reason, .. } => reason,
        StoreError::Io { error, .. } => error.to_string(),
        other => other.to_string(),
    }
}

/// A backup file, verified: its checksum held and its state decoded.
#[derive(Debug)]
pub struct Backup {
    snapshot: Snapshot,
    bytes: u64,
}

/// What a backup holds, in figures.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BackupSummary {
    /// The state's global index (`NS-2`).
    pub index: u64,
    /// The epoch of the master that took it.
    pub epoch: u64,
    /// Live sessions.
    pub sessions: u64,
    /// Nodes.
    pub nodes: u64,
    /// Keys whose lock is held.
    pub locks_held: u64,
    /// Sessions waiting in line for locks.
    pub waiters: u64,
    /// Health checks.
    pub checks: u64,
    /// Access rules, and whether access control is on.
    pub rules: u64,
    pub access_control: bool,
    /// Bearer tokens (their hashes: `TOK-1`).
    pub tokens: u64,
    /// The file's length.
    pub bytes: u64,
}

impl Backup {
    /// Reads the backup at `path` and verifies it: its magic (this
    /// format's, or an earlier one's), length and checksum, and that its
    /// state decodes. A damaged or truncated file is refused with the
    /// reason.
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("leasehold-doc-{}.snap", std::process::id()));
    /// std::fs::write(&path, b"LHSNAP04 not a snapshot").unwrap();
    /// let refused = leasehold_server::Backup::read(&path).unwrap_err();
    /// assert!(refused.to_string().contains("not a whole Leasehold snapshot"), "{refused}");
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn read(path: &Path) -> Result<Backup, BackupError> {
        let unreadable = |error| BackupError::Unreadable {
            path: path.to_path_buf(),
            error,
        };
        let bytes = std::fs::metadata(path).map_err(unreadable)?.len();
        match crate::file_store::snapshot_at(path) {
            Ok(Some(snapshot)) => Ok(Backup { snapshot, bytes }),
            Ok(None) => Err(unreadable(std::io::ErrorKind::NotFound.into())),
            Err(StoreError::Io { error, .. }) => Err(unreadable(error)),
            Err(e) => Err(BackupError::Damaged {
                path: path.to_path_buf(),
                reason: reason(e),
            }),
        }
    }

    /// What it holds, in figures.
    pub fn summary(&self) -> BackupSummary {
        let state = &self.snapshot.state;
        let locks = state.locks();
        BackupSummary {
            index: state.index,
            epoch: self.snapshot.epoch,
            sessions: state.sessions.len() as u64,
            nodes: state.namespace().len() as u64,
            locks_held: locks.iter().filter(|(_, l)| !l.holders.is_empty()).count() as u64,
            waiters: locks.iter().map(|(_, l)| l.waiters.len() as u64).sum(),
            checks: state.checks.len() as u64,
            rules: state.access().rules().len() as u64,
            access_control: state.access().enabled,
            tokens: state.access().tokens().len() as u64,
            bytes: self.bytes,
        }
    }

    /// Makes `dir` (absent or empty) a single master's data directory
    /// holding this state, for `leasehold serve --data-dir DIR`: built
    /// beside it and renamed into place once whole and durable, so a
    /// failure leaves nothing under `dir`. The master started on it takes
    /// the next epoch and grants the sessions in it their leases anew, as
    /// after a fail-over (`FO-1`..`FO-5`).
    pub fn restore(&self, dir: &Path) -> Result<(), BackupError> {
        crate::file_store::restore_dir(&self.snapshot, dir).map_err(|e| BackupError::NotRestored {
            path: dir.to_path_buf(),
            reason: reason(e),
        })
    }

    /// Makes `dir` (absent or empty) the data directory of member `node`,
    /// at `addr`, of a new cell of which it is the only member, holding
    /// this state, for `leasehold serve --cell NODE=ADDR --node NODE
    /// --data-dir DIR`; the others then join it (`--join`, `cell add`)
    /// and are sent the state. Built as [`Backup::restore`] builds. Its
    /// first master takes the epoch after the backup's.
    pub fn restore_member(&self, dir: &Path, node: u64, addr: &str) -> Result<(), BackupError> {
        crate::cell::restore_member(&self.snapshot, node, addr, dir).map_err(|e| {
            BackupError::NotRestored {
                path: dir.to_path_buf(),
                reason: reason(e),
            }
        })
    }
}
