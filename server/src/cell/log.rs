//! The Raft log and vote of one member, durable in its data directory
//! (SPEC `CELL-2`), with the single master's crash discipline: nothing is
//! reported written before it is fsynced, every frame carries a checksum,
//! a torn tail (a crash mid-write, never acknowledged) is cut, and damage
//! before the tail is refused with the place it was found.
//!
//! One file, `raft-log`: a magic and then frames, one per call openraft
//! makes (a batch of entries, a vote, the commit point, a truncation, a
//! purge): magic, length (u32), CRC-32 of the body (u32), body. Replaying
//! the frames in order rebuilds the log. Once purges leave most of the
//! file dead it is rewritten, atomically, as the live log alone.
//!
//! Obligations openraft places on it (its `RaftLogStorage`): the vote is
//! durable before `save_vote` returns; `append` reports completion only
//! once the entries are durable; calls are made one at a time and leave no
//! holes. The commit point is the exception: openraft lets it lag, and it
//! costs no fsync of its own but rides in the next write that is synced
//! anyway. A member that restarts with an older commit point applies less
//! until the leader tells it more, which is safe because a follower serves
//! nobody and a new master takes an epoch through the log (committing
//! everything before it) before it serves.
//!
//! The file lives on the member's [`Volume`]: a data directory,
//! whose I/O runs on tokio's blocking pool so that an fsync never stalls
//! the runtime serving clients, or memory a simulation crashes.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{
    AnyError, Entry, LogId, LogState, RaftLogReader, StorageError, StorageIOError, Vote,
};
use serde::{Deserialize, Serialize};

use super::volume::{self, Volume};
use super::{CellTypes, NodeId};
use crate::codec::{decode, encode};
use crate::config::{MAX_RAFT_LOG_FRAME, RAFT_LOG_REWRITE_MIN, RAFT_LOG_REWRITE_RATIO};
use crate::disk::{self, corrupt, framed, io_error, StoreError};

const LOG_MAGIC: &[u8; 8] = b"LHRAFT01";
const FRAME_MAGIC: &[u8; 4] = b"LHRF";
const FILE: &str = "raft-log";

type CellEntry = Entry<CellTypes>;

/// One durable change to the log, as a frame's body holds it.
#[derive(Debug, Serialize, Deserialize)]
enum LogOp {
    Entries(Vec<CellEntry>),
    /// Entries from this index on are removed (a conflicting suffix).
    Truncate(u64),
    /// Entries up to this id are removed: a snapshot covers them.
    Purge(LogId<NodeId>),
    Vote(Vote<NodeId>),
    Committed(Option<LogId<NodeId>>),
}

/// The log as replaying its frames leaves it.
#[derive(Debug, Default, Clone)]
struct Image {
    entries: BTreeMap<u64, CellEntry>,
    vote: Option<Vote<NodeId>>,
    committed: Option<LogId<NodeId>>,
    purged: Option<LogId<NodeId>>,
}

impl Image {
    fn apply(&mut self, op: LogOp) {
        match op {
            LogOp::Entries(entries) => {
                for entry in entries {
                    self.entries.insert(entry.log_id.index, entry);
                }
            }
            LogOp::Truncate(from) => {
                self.entries.split_off(&from);
            }
            LogOp::Purge(upto) => {
                self.entries = self.entries.split_off(&(upto.index + 1));
                self.purged = Some(upto);
            }
            LogOp::Vote(vote) => self.vote = Some(vote),
            LogOp::Committed(committed) => self.committed = committed,
        }
    }

    /// The frames that rebuild this image from nothing.
    fn frames(&self) -> Vec<u8> {
        let mut bytes = LOG_MAGIC.to_vec();
        if let Some(vote) = self.vote {
            bytes.extend(frame(&LogOp::Vote(vote)));
        }
        if let Some(purged) = self.purged {
            bytes.extend(frame(&LogOp::Purge(purged)));
        }
        bytes.extend(frame(&LogOp::Committed(self.committed)));
        if !self.entries.is_empty() {
            let entries = self.entries.values().cloned().collect();
            bytes.extend(frame(&LogOp::Entries(entries)));
        }
        bytes
    }
}

fn frame(op: &LogOp) -> Vec<u8> {
    framed(FRAME_MAGIC, &encode(op))
}

/// The body of the frame at `at` if it is whole (magic, a length that
/// fits, a checksum that holds), with the offset after it.
fn whole_frame(bytes: &[u8], at: usize) -> Option<(&[u8], usize)> {
    disk::whole_frame(bytes, at, FRAME_MAGIC, MAX_RAFT_LOG_FRAME)
}

/// Replays a log file's bytes: the image and the length of the bytes that
/// hold it. A damaged frame with no whole frame after it is a torn tail,
/// cut; one with a whole frame after it is damage to what was fsynced and
/// acknowledged, refused.
fn parse(bytes: &[u8], path: &Path) -> Result<(Image, usize), StoreError> {
    if bytes.len() < LOG_MAGIC.len() || &bytes[..LOG_MAGIC.len()] != LOG_MAGIC {
        return Err(corrupt(path, "not a Raft log (bad magic)"));
    }
    let mut image = Image::default();
    let mut at = LOG_MAGIC.len();
    while at < bytes.len() {
        let Some((body, next)) = whole_frame(bytes, at) else {
            let later = (at + 1..bytes.len())
                .filter(|o| bytes[*o..].starts_with(FRAME_MAGIC))
                .find(|o| whole_frame(bytes, *o).is_some());
            if let Some(later) = later {
                return Err(corrupt(
                    path,
                    format!(
                        "the Raft log's frame at byte {at} is damaged, and a whole frame \
                         follows it at byte {later}: written data was lost"
                    ),
                ));
            }
            tracing::warn!(
                log = %path.display(),
                at,
                bytes = bytes.len() - at,
                "recovery cut the Raft log's tail: a write whose fsync had not returned \
                 (a crash while writing); nothing in it was acknowledged"
            );
            break;
        };
        let op: LogOp = decode(body).map_err(|e| {
            corrupt(
                path,
                format!("the Raft log's frame at byte {at} passes its checksum but does not decode: {e}"),
            )
        })?;
        image.apply(op);
        at = next;
    }
    Ok((image, at))
}

/// The file and what it holds, behind one lock: openraft makes one call at
/// a time, and readers it hands out read the image.
#[derive(Debug)]
struct Inner {
    volume: Arc<dyn Volume>,
    /// Bytes in the file.
    len: u64,
    image: Image,
    /// The image's commit point is newer than the file's.
    unwritten_committed: bool,
}

impl Inner {
    /// The bytes that write `op`: its frame, after the commit point's if
    /// that is unwritten, so one sync makes both durable.
    fn framed(&mut self, op: &LogOp) -> Vec<u8> {
        let mut bytes = Vec::new();
        if std::mem::take(&mut self.unwritten_committed) {
            bytes = frame(&LogOp::Committed(self.image.committed));
        }
        bytes.extend(frame(op));
        bytes
    }

    /// Writes `op` and syncs it, blocking on the volume.
    fn write(&mut self, op: LogOp) -> io::Result<()> {
        let bytes = self.framed(&op);
        self.volume.append(FILE, &bytes)?;
        self.volume.sync(FILE)?;
        self.written(bytes.len(), op);
        Ok(())
    }

    /// `op`, `len` bytes long, is durable.
    fn written(&mut self, len: usize, op: LogOp) {
        self.len += len as u64;
        self.image.apply(op);
    }

    /// Rewrites the file as the live log alone once purges left most of
    /// it dead.
    fn maybe_rewrite(&mut self) -> Result<(), StoreError> {
        let live: u64 = self
            .image
            .entries
            .values()
            .map(|e| encode(e).len() as u64)
            .sum();
        if self.len < RAFT_LOG_REWRITE_MIN || self.len < RAFT_LOG_REWRITE_RATIO * live.max(1) {
            return Ok(());
        }
        let bytes = self.image.frames();
        let path = self.volume.path(FILE);
        self.volume.replace(FILE, &bytes).map_err(io_error(&path))?;
        self.len = bytes.len() as u64;
        self.unwritten_committed = false;
        Ok(())
    }
}

/// A member's Raft log and vote, durable on its volume. Cheap to clone:
/// clones share the file.
#[derive(Debug, Clone)]
pub struct CellLog {
    inner: Arc<Mutex<Inner>>,
    volume: Arc<dyn Volume>,
}

fn io_failed(e: impl std::fmt::Display) -> StorageError<NodeId> {
    StorageIOError::write_logs(AnyError::error(e.to_string())).into()
}

impl CellLog {
    /// Opens the log on `volume` (which the caller has taken for this
    /// member alone), creating it if there is none. A torn tail is cut;
    /// damage is refused.
    pub fn open(volume: Arc<dyn Volume>) -> Result<CellLog, StoreError> {
        let path = volume.path(FILE);
        let bytes = match volume.read(FILE).map_err(io_error(&path))? {
            Some(bytes) => bytes,
            None => {
                volume.replace(FILE, LOG_MAGIC).map_err(io_error(&path))?;
                LOG_MAGIC.to_vec()
            }
        };
        let (image, valid) = parse(&bytes, &path)?;
        if valid < bytes.len() {
            // New frames follow the last whole one.
            volume
                .truncate(FILE, valid as u64)
                .map_err(io_error(&path))?;
        }
        Ok(CellLog {
            inner: Arc::new(Mutex::new(Inner {
                volume: volume.clone(),
                len: valid as u64,
                image,
                unwritten_committed: false,
            })),
            volume,
        })
    }

    /// The id of the last entry written, or of the last purged if none
    /// is left.
    pub fn last_log_id(&self) -> Option<LogId<NodeId>> {
        let inner = self.image();
        let last = inner.image.entries.values().next_back().map(|e| e.log_id);
        last.or(inner.image.purged)
    }

    /// Whether nothing was ever written: no entry, no vote, no purge.
    pub fn is_empty(&self) -> bool {
        let inner = self.image();
        inner.image.entries.is_empty() && inner.image.vote.is_none() && inner.image.purged.is_none()
    }

    /// Writes `op` durably, then applies it to the image. openraft makes
    /// one call at a time, so nothing else writes meanwhile.
    async fn write(&self, op: LogOp) -> io::Result<()> {
        if self.volume.blocks() {
            let inner = self.inner.clone();
            return tokio::task::spawn_blocking(move || inner.lock().expect("log lock").write(op))
                .await
                .map_err(io::Error::other)?;
        }
        let bytes = self.image().framed(&op);
        let len = bytes.len();
        volume::append_synced(&self.volume, FILE, bytes).await?;
        self.image().written(len, op);
        Ok(())
    }

    /// Records the commit point, to be written with the next synced frame.
    fn defer_committed(&self, committed: Option<LogId<NodeId>>) {
        let mut inner = self.image();
        inner.image.committed = committed;
        inner.unwritten_committed = true;
    }

    /// Rewrites the file if purges left most of it dead.
    async fn maybe_rewrite(&self) -> Result<(), StoreError> {
        if self.volume.blocks() {
            let inner = self.inner.clone();
            return tokio::task::spawn_blocking(move || {
                inner.lock().expect("log lock").maybe_rewrite()
            })
            .await
            .map_err(|e| io_error(Path::new(FILE))(io::Error::other(e)))?;
        }
        self.image().maybe_rewrite()
    }

    fn image(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("log lock")
    }
}

impl RaftLogReader<CellTypes> for CellLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<CellEntry>, StorageError<NodeId>> {
        Ok(self
            .image()
            .image
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<CellTypes> for CellLog {
    type LogReader = CellLog;

    async fn get_log_state(&mut self) -> Result<LogState<CellTypes>, StorageError<NodeId>> {
        let inner = self.image();
        let purged = inner.image.purged;
        let last = inner
            .image
            .entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(purged);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.write(LogOp::Vote(*vote))
            .await
            .map_err(|e| StorageIOError::write_vote(AnyError::error(e.to_string())).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        Ok(self.image().image.vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<NodeId>>,
    ) -> Result<(), StorageError<NodeId>> {
        self.defer_committed(committed);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
        Ok(self.image().image.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<CellTypes>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = CellEntry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<CellEntry> = entries.into_iter().collect();
        let written = self.write(LogOp::Entries(entries)).await;
        let failed = written.as_ref().err().map(io_failed);
        callback.log_io_completed(written);
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.write(LogOp::Truncate(log_id.index))
            .await
            .map_err(io_failed)
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.write(LogOp::Purge(log_id)).await.map_err(io_failed)?;
        self.maybe_rewrite().await.map_err(io_failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::command;
    use std::fs::OpenOptions;

    use openraft::{CommittedLeaderId, EntryPayload};

    use crate::cell::volume::{DirVolume, MemoryVolume};

    use crate::cell::Proposal;
    use crate::scratch::Scratch;

    fn dir(name: &str) -> Scratch {
        Scratch::new(&format!("cell-log-{name}"))
    }

    fn open(dir: &Path) -> Result<CellLog, StoreError> {
        CellLog::open(Arc::new(DirVolume::new(dir)))
    }

    fn entry(index: u64) -> CellEntry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Proposal::NewEpoch { node: index }),
        }
    }

    fn write(log: &CellLog, op: LogOp) {
        log.image().write(op).unwrap();
    }

    fn indexes(log: &CellLog) -> Vec<u64> {
        log.image().image.entries.keys().copied().collect()
    }

    // CELL-2: what was written survives a reopen, vote and commit point
    // included, with truncations and purges applied.
    #[test]
    fn a_reopened_log_holds_what_was_written() {
        let dir = dir("reopen");
        let log = open(&dir).unwrap();
        write(&log, LogOp::Entries((1..=5).map(entry).collect()));
        write(&log, LogOp::Truncate(4));
        write(&log, LogOp::Purge(entry(1).log_id));
        let vote = Vote::new_committed(3, 2);
        write(&log, LogOp::Vote(vote));
        write(&log, LogOp::Committed(Some(entry(3).log_id)));
        drop(log);
        let log = open(&dir).unwrap();
        assert_eq!(indexes(&log), vec![2, 3]);
        let inner = log.image();
        assert_eq!(inner.image.vote, Some(vote));
        assert_eq!(inner.image.committed, Some(entry(3).log_id));
        assert_eq!(inner.image.purged, Some(entry(1).log_id));
    }

    // CELL-2: a crash mid-write leaves a torn last frame, never
    // acknowledged: it is cut, and the log goes on after the last whole one.
    #[test]
    fn a_torn_last_frame_is_cut() {
        let dir = dir("torn");
        let log = open(&dir).unwrap();
        write(&log, LogOp::Entries(vec![entry(1)]));
        write(&log, LogOp::Entries(vec![entry(2)]));
        drop(log);
        let path = dir.join(FILE);
        let len = std::fs::metadata(&path).unwrap().len();
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(len - 3).unwrap();
        drop(file);
        let log = open(&dir).unwrap();
        assert_eq!(indexes(&log), vec![1]);
        write(&log, LogOp::Entries(vec![entry(2)]));
        drop(log);
        assert_eq!(indexes(&open(&dir).unwrap()), vec![1, 2]);
    }

    // CELL-2: damage with whole frames after it hit data that was fsynced
    // and acknowledged: the member refuses to start on it.
    #[test]
    fn damage_before_the_last_frame_is_refused() {
        let dir = dir("damaged");
        let log = open(&dir).unwrap();
        write(&log, LogOp::Entries(vec![entry(1)]));
        write(&log, LogOp::Entries(vec![entry(2)]));
        drop(log);
        let path = dir.join(FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        // Past the first frame's magic, length and checksum: its body.
        bytes[LOG_MAGIC.len() + FRAME_MAGIC.len() + 8 + 1] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let error = open(&dir).unwrap_err().to_string();
        assert!(error.contains("damaged"), "{error}");
    }

    // CELL-2: on a volume that keeps only what was synced, a crash inside
    // an append's sync tears that frame alone, which was never reported
    // written; the reopened log holds every entry reported written.
    #[tokio::test(start_paused = true)]
    async fn a_crash_inside_a_sync_tears_only_the_frame_not_reported_written() {
        let volume = MemoryVolume::new(std::time::Duration::from_millis(5));
        let log = CellLog::open(Arc::new(volume.clone())).unwrap();
        log.write(LogOp::Entries(vec![entry(1)])).await.unwrap();
        let pending = log.clone();
        let writing =
            tokio::spawn(async move { pending.write(LogOp::Entries(vec![entry(2)])).await });
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        writing.abort();
        volume.crash(|unsynced| unsynced / 2);
        let log = CellLog::open(Arc::new(volume)).unwrap();
        assert_eq!(indexes(&log), vec![1]);
    }

    // CELL-2: the commit point costs no sync of its own: a crash before
    // the next write loses it (openraft allows a lagging one), and the
    // next synced write carries it.
    #[tokio::test(start_paused = true)]
    async fn the_commit_point_is_durable_with_the_next_synced_write() {
        let volume = MemoryVolume::new(std::time::Duration::from_millis(5));
        let mut log = CellLog::open(Arc::new(volume.clone())).unwrap();
        log.write(LogOp::Entries(vec![entry(1), entry(2)]))
            .await
            .unwrap();
        let size = volume.size();
        log.save_committed(Some(entry(1).log_id)).await.unwrap();
        assert_eq!(volume.size(), size, "nothing written for it alone");
        assert_eq!(
            log.read_committed().await.unwrap(),
            Some(entry(1).log_id),
            "read back at once"
        );
        volume.crash(|unsynced| unsynced);
        let mut log = CellLog::open(Arc::new(volume.clone())).unwrap();
        assert_eq!(log.read_committed().await.unwrap(), None, "lost unwritten");

        log.save_committed(Some(entry(2).log_id)).await.unwrap();
        log.write(LogOp::Entries(vec![entry(3)])).await.unwrap();
        volume.crash(|_| 0);
        let mut log = CellLog::open(Arc::new(volume)).unwrap();
        assert_eq!(log.read_committed().await.unwrap(), Some(entry(2).log_id));
        assert_eq!(indexes(&log), vec![1, 2, 3]);
    }

    #[test]
    fn a_file_that_is_not_a_raft_log_is_refused() {
        let dir = dir("foreign");
        std::fs::write(dir.join(FILE), b"something else entirely").unwrap();
        let error = open(&dir).unwrap_err().to_string();
        assert!(error.contains("not a Raft log"), "{error}");
    }

    // Purges that leave most of the file dead rewrite it as the live log,
    // which reopens to the same log.
    #[test]
    fn a_mostly_purged_log_is_rewritten_smaller() {
        let dir = dir("rewrite");
        let log = open(&dir).unwrap();
        let big = |index: u64| Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Proposal::Commands {
                epoch: 1,
                commands: vec![(
                    crate::time::Millis::ZERO,
                    crate::state::Command::CancelWait(command::CancelWait {
                        key: "k".repeat(64 << 10),
                        ticket: index,
                    }),
                )],
            }),
        };
        for index in 1..=100 {
            write(&log, LogOp::Entries(vec![big(index)]));
        }
        let before = log.image().len;
        {
            let mut inner = log.image();
            inner.write(LogOp::Purge(big(95).log_id)).unwrap();
            inner.maybe_rewrite().unwrap();
        }
        let after = log.image().len;
        assert!(after < before / 10, "{before} -> {after}");
        write(&log, LogOp::Entries(vec![big(101)]));
        drop(log);
        let log = open(&dir).unwrap();
        assert_eq!(indexes(&log), (96..=101).collect::<Vec<_>>());
    }
}
