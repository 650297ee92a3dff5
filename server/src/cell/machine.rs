//! The state machine the cell's log drives, on every member alike: the
//! master's durable state (`State`), the cell's epoch, and master time as
//! the log last carried it (SPEC `CELL-3`).
//!
//! Applying is deterministic: a command applies at the master time it
//! carries, an epoch is the one before plus one, and a deposed master's
//! commands (an epoch that is no longer the cell's) change nothing. So
//! every member that applied the same entries holds the same replica.
//!
//! Snapshots are durable in `raft-snapshot` (magic, length, CRC-32, body),
//! written atomically before openraft is told of them: the log is purged
//! only up to a snapshot that a crash cannot take back.

use std::io::Cursor;
use std::sync::{Arc, Mutex};

use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::volume::{self, Volume};
use super::{CellTypes, NodeId, Outcome, Proposal};
use crate::codec::{decode, encode};
use crate::disk::{corrupt, io_error, sealed, unseal, StoreError};
use crate::state::{Bounds, State};
use crate::time::Millis;

const SNAPSHOT_MAGIC: &[u8; 8] = b"LHRSNP04";
/// A snapshot whose replica is in cell format 2's shape (`upgrade.rs`).
const SNAPSHOT_MAGIC_2: &[u8; 8] = b"LHRSNP01";
/// A snapshot whose replica is in cell format 3's shape, without access
/// control (`upgrade.rs`).
const SNAPSHOT_MAGIC_3: &[u8; 8] = b"LHRSNP02";
/// A snapshot whose replica is in cell format 4's shape, with no time kept
/// with a lock's holders (`upgrade.rs`).
const SNAPSHOT_MAGIC_4: &[u8; 8] = b"LHRSNP03";
pub(super) const FILE: &str = "raft-snapshot";

/// One member's copy of what the log has made of the state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Replica {
    pub state: State,
    /// The epoch of the cell's current master (0 before the first).
    pub epoch: u64,
    /// The latest master time a command carried.
    pub now: Millis,
    /// The last entry applied.
    pub applied: Option<LogId<NodeId>>,
    pub membership: StoredMembership<NodeId, BasicNode>,
}

/// A replica as an earlier cell format stored it: today's, with its state
/// in that format's shape `S` (`upgrade.rs`): format 4's for cell format
/// 2, 5's for 3, 6's for 4.
#[derive(Deserialize)]
struct ReplicaOf<S> {
    state: S,
    epoch: u64,
    now: Millis,
    applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
}

impl<S: Into<State>> From<ReplicaOf<S>> for Replica {
    fn from(old: ReplicaOf<S>) -> Replica {
        Replica {
            state: old.state.into(),
            epoch: old.epoch,
            now: old.now,
            applied: old.applied,
            membership: old.membership,
        }
    }
}

impl Replica {
    fn new(bounds: Bounds) -> Self {
        Replica {
            state: State::new(bounds),
            epoch: 0,
            now: Millis::ZERO,
            applied: None,
            membership: StoredMembership::default(),
        }
    }

    /// Applies one entry of the log.
    fn apply(&mut self, entry: Entry<CellTypes>) -> Outcome {
        self.applied = Some(entry.log_id);
        match entry.payload {
            EntryPayload::Blank => Outcome::Nothing,
            EntryPayload::Membership(membership) => {
                self.membership = StoredMembership::new(Some(entry.log_id), membership);
                Outcome::Nothing
            }
            EntryPayload::Normal(Proposal::NewEpoch { .. }) => {
                self.epoch += 1;
                Outcome::Epoch(self.epoch)
            }
            EntryPayload::Normal(Proposal::Commands { epoch, commands }) => {
                if epoch != self.epoch {
                    return Outcome::Commands { applied: false };
                }
                for (at, command) in commands {
                    // Only commands that succeeded on the master were
                    // proposed; the state machine is deterministic, so
                    // they succeed here too.
                    if let Err(e) = self.state.apply(command, at).0 {
                        tracing::warn!(error = %e, "a replicated command failed to apply");
                    }
                    self.now = self.now.max(at);
                }
                Outcome::Commands { applied: true }
            }
        }
    }
}

/// A snapshot as stored and sent: its metadata and the encoded replica.
#[derive(Debug, Clone)]
struct Stored {
    meta: SnapshotMeta<NodeId, BasicNode>,
    data: Vec<u8>,
}

#[derive(Debug)]
struct Inner {
    volume: Arc<dyn Volume>,
    /// The limits this member enforces: a received state takes them.
    bounds: Bounds,
    replica: Replica,
    snapshot: Option<Stored>,
    /// Snapshots built so far, for their ids.
    built: u64,
}

/// The state machine of one member. Cheap to clone: clones share it.
#[derive(Debug, Clone)]
pub struct CellMachine {
    inner: Arc<Mutex<Inner>>,
    applied: watch::Sender<Option<LogId<NodeId>>>,
}

fn sm_failed(e: impl std::fmt::Display) -> StorageError<NodeId> {
    StorageIOError::write_state_machine(AnyError::error(e.to_string())).into()
}

pub(super) fn snapshot_file(meta: &SnapshotMeta<NodeId, BasicNode>, data: &[u8]) -> Vec<u8> {
    sealed(SNAPSHOT_MAGIC, &encode(&(meta, data)))
}

/// The member's snapshot, its replica encoded in today's shape whatever
/// the shape it was stored in: it is also what followers are sent.
fn read_snapshot(volume: &dyn Volume) -> Result<Option<Stored>, StoreError> {
    let path = volume.path(FILE);
    let Some(bytes) = volume.read(FILE).map_err(io_error(&path))? else {
        return Ok(None);
    };
    let magic = [SNAPSHOT_MAGIC_2, SNAPSHOT_MAGIC_3, SNAPSHOT_MAGIC_4]
        .into_iter()
        .find(|magic| bytes.starts_with(*magic))
        .unwrap_or(SNAPSHOT_MAGIC);
    let body = unseal(bytes, &path, magic, "cell snapshot")?;
    let (meta, mut data): (SnapshotMeta<NodeId, BasicNode>, Vec<u8>) = decode(&body)
        .map_err(|e| corrupt(&path, format!("the cell snapshot does not decode: {e}")))?;
    let undecodable = |format: u32| {
        move |e: String| {
            corrupt(
                &path,
                format!("the cell snapshot's state (cell format {format}) does not decode: {e}"),
            )
        }
    };
    if magic == SNAPSHOT_MAGIC_2 {
        let replica: ReplicaOf<crate::upgrade::StateV4> = decode(&data).map_err(undecodable(2))?;
        data = encode(&Replica::from(replica));
    } else if magic == SNAPSHOT_MAGIC_3 {
        let replica: ReplicaOf<crate::upgrade::StateV5> = decode(&data).map_err(undecodable(3))?;
        data = encode(&Replica::from(replica));
    } else if magic == SNAPSHOT_MAGIC_4 {
        let replica: ReplicaOf<crate::upgrade::StateV6> = decode(&data).map_err(undecodable(4))?;
        data = encode(&Replica::from(replica));
    }
    Ok(Some(Stored { meta, data }))
}

impl CellMachine {
    /// The state machine of the member whose volume is `volume` (taken by
    /// the caller for this member alone): its last snapshot, or an empty
    /// state. openraft applies the log's committed entries after it.
    pub fn open(volume: Arc<dyn Volume>, bounds: Bounds) -> Result<CellMachine, StoreError> {
        let path = volume.path(FILE);
        let snapshot = read_snapshot(&*volume)?;
        let replica = match &snapshot {
            Some(stored) => {
                let mut replica: Replica = decode(&stored.data).map_err(|e| {
                    corrupt(
                        &path,
                        format!("the cell snapshot's state does not decode: {e}"),
                    )
                })?;
                replica.state.set_bounds(bounds.clone());
                replica
            }
            None => Replica::new(bounds.clone()),
        };
        let (applied, _) = watch::channel(replica.applied);
        Ok(CellMachine {
            inner: Arc::new(Mutex::new(Inner {
                volume,
                bounds,
                replica,
                snapshot,
                built: 0,
            })),
            applied,
        })
    }

    /// A copy of the replica as it stands.
    pub fn replica(&self) -> Replica {
        self.lock().replica.clone()
    }

    /// The cell's epoch as this replica has it.
    pub fn replica_epoch(&self) -> u64 {
        self.lock().replica.epoch
    }

    /// Follows the last applied entry.
    pub fn applied(&self) -> watch::Receiver<Option<LogId<NodeId>>> {
        self.applied.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("state machine lock")
    }

    /// Makes `stored` the current snapshot, durable first.
    async fn keep(&self, stored: Stored) -> Result<(), StorageError<NodeId>> {
        let volume = self.lock().volume.clone();
        let bytes = snapshot_file(&stored.meta, &stored.data);
        volume::run(&volume, move |v| v.replace(FILE, &bytes))
            .await
            .map_err(sm_failed)?;
        self.lock().snapshot = Some(stored);
        Ok(())
    }
}

impl RaftSnapshotBuilder<CellTypes> for CellMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<CellTypes>, StorageError<NodeId>> {
        let stored = {
            let mut inner = self.lock();
            inner.built += 1;
            let replica = &inner.replica;
            let meta = SnapshotMeta {
                last_log_id: replica.applied,
                last_membership: replica.membership.clone(),
                snapshot_id: format!("{}-{}", replica.applied.map_or(0, |l| l.index), inner.built),
            };
            Stored {
                meta,
                data: encode(replica),
            }
        };
        self.keep(stored.clone()).await?;
        Ok(Snapshot {
            meta: stored.meta,
            snapshot: Box::new(Cursor::new(stored.data)),
        })
    }
}

impl RaftStateMachine<CellTypes> for CellMachine {
    type SnapshotBuilder = CellMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        let inner = self.lock();
        Ok((inner.replica.applied, inner.replica.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Outcome>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<CellTypes>> + Send,
        I::IntoIter: Send,
    {
        let (outcomes, applied) = {
            let mut inner = self.lock();
            let outcomes: Vec<Outcome> = entries
                .into_iter()
                .map(|entry| inner.replica.apply(entry))
                .collect();
            (outcomes, inner.replica.applied)
        };
        self.applied.send_replace(applied);
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let data = snapshot.into_inner();
        let mut replica: Replica = decode(&data).map_err(|e| {
            StorageError::from(StorageIOError::read_snapshot(
                Some(meta.signature()),
                AnyError::error(e),
            ))
        })?;
        self.keep(Stored {
            meta: meta.clone(),
            data,
        })
        .await?;
        let applied = {
            let mut inner = self.lock();
            replica.state.set_bounds(inner.bounds.clone());
            inner.replica = replica;
            inner.replica.applied
        };
        self.applied.send_replace(applied);
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<CellTypes>>, StorageError<NodeId>> {
        Ok(self.lock().snapshot.clone().map(|stored| Snapshot {
            meta: stored.meta,
            snapshot: Box::new(Cursor::new(stored.data)),
        }))
    }
}
