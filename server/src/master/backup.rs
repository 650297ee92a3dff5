//! Backups taken from a live master (SPEC `OPS-6`): `SaveSnapshot` encodes
//! the whole state as it is after every input handled so far, in the data
//! directory's snapshot format, and keeps the bytes for `ReadSnapshot` to
//! hand out a piece at a time. Its answer waits for the log like any
//! other, so a client learns of a snapshot only once everything in it is
//! durable.

use std::sync::Arc;

use leasehold_protocol::{Error, ErrorCode, Response};

use super::Engine;
use crate::store::Snapshot;
use crate::time::Millis;

/// The snapshot last taken, until it is read to its end or another is
/// taken: one at a time, so a master holds at most one copy of its state
/// for backups.
#[derive(Debug)]
pub(crate) struct Export {
    id: u64,
    bytes: Arc<Vec<u8>>,
}

impl Engine {
    /// Takes a snapshot of the state for a backup (`OPS-6`).
    pub(super) fn save_snapshot(&mut self, now: Millis) -> Response {
        let snapshot = Snapshot {
            epoch: self.config.epoch,
            now,
            // A directory restored from it starts a log of its own.
            next_seq: 0,
            state: self.state.clone(),
        };
        let bytes = crate::file_store::snapshot_file(&snapshot);
        // Never the same twice: not on this master, whose count only
        // rises, and not on the next, whose epoch is higher. A reader of
        // an earlier one is refused rather than handed another's bytes.
        self.exports_taken += 1;
        let id = (self.config.epoch << 32) | (self.exports_taken & 0xffff_ffff);
        let saved = Response::SnapshotSaved {
            id,
            bytes: bytes.len() as u64,
            index: self.state.index,
            epoch: self.config.epoch,
        };
        self.export = Some(Export {
            id,
            bytes: Arc::new(bytes),
        });
        saved
    }

    /// The snapshot's bytes from `offset`, at most half a frame of them
    /// (`OPS-6`). The last piece lets the snapshot go.
    pub(super) fn read_snapshot(&mut self, id: u64, offset: u64) -> Result<Response, Error> {
        let export = self.export.as_ref().filter(|e| e.id == id).ok_or_else(|| {
            Error::new(
                ErrorCode::InvalidArgument,
                format!(
                    "snapshot {id} is gone: another was taken since, or it was read to its \
                     end; save again"
                ),
            )
        })?;
        let total = export.bytes.len() as u64;
        let start = offset.min(total) as usize;
        let end = (start + self.config.max_frame / 2).min(export.bytes.len());
        let bytes = export.bytes[start..end].to_vec();
        if end == export.bytes.len() {
            self.export = None;
        }
        Ok(Response::SnapshotBytes { offset, bytes })
    }
}
