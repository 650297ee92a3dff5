//! A new cell's first member made from a backup (SPEC `OPS-6`): its data
//! directory holds the backup's state as a snapshot of a log that has only
//! ever had this member, so it starts as a cell of one that already holds
//! the state, takes an epoch after the backup's, and the others join it
//! (`cell add`) and are sent the state as any new member is.
//!
//! Only the first member is restored: founding several members from one
//! backup would let each found its own cell on a copy, while a member
//! that joins gets the state from the one that has it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use openraft::{BasicNode, CommittedLeaderId, LogId, Membership, SnapshotMeta, StoredMembership};

use super::log::CellLog;
use super::machine::{snapshot_file, CellMachine, Replica, FILE};
use super::volume::DirVolume;
use super::NodeId;
use crate::codec::encode;
use crate::disk::{write_atomically, StoreError};
use crate::file_store::build_beside;
use crate::store::Snapshot;

/// Makes `dir`, which must not exist or be empty, the data directory of
/// member `node` at `addr`, the only member of a new cell, whose state is
/// `snapshot`'s. Built beside `dir` and renamed into place once it reads
/// back as a member reads it.
pub(crate) fn restore_member(
    snapshot: &Snapshot,
    node: NodeId,
    addr: &str,
    dir: &Path,
) -> Result<(), StoreError> {
    // The membership that founds the cell, as the log's first entry would
    // carry it: term 0, index 0.
    let founded = LogId::new(CommittedLeaderId::new(0, node), 0);
    let voters = BTreeSet::from([node]);
    let nodes = BTreeMap::from([(node, BasicNode::new(addr))]);
    let membership = StoredMembership::new(Some(founded), Membership::new(vec![voters], nodes));
    let replica = Replica {
        state: snapshot.state.clone(),
        epoch: snapshot.epoch,
        now: snapshot.now,
        applied: Some(founded),
        membership: membership.clone(),
    };
    let meta = SnapshotMeta {
        last_log_id: Some(founded),
        last_membership: membership,
        snapshot_id: format!("restored-{}", snapshot.state.index()),
    };
    let bounds = snapshot.state.bounds.clone();
    build_beside(dir, |building| {
        write_atomically(building, "FORMAT", super::member::FORMAT.as_bytes())?;
        write_atomically(
            building,
            super::member::NODE_FILE,
            format!("{node}\n").as_bytes(),
        )?;
        write_atomically(building, FILE, &snapshot_file(&meta, &encode(&replica)))?;
        // Reading it as a member starts is the check that it reads.
        let volume = Arc::new(DirVolume::new(building));
        CellLog::open(volume.clone())?;
        let machine = CellMachine::open(volume, bounds)?;
        let epoch = machine.replica_epoch();
        if epoch != snapshot.epoch {
            return Err(crate::disk::corrupt(
                building,
                format!(
                    "the restored member reads epoch {epoch}, not {}",
                    snapshot.epoch
                ),
            ));
        }
        Ok(())
    })
}
