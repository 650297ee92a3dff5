//! Starting a master from its store (SPEC `STORE-2`, `FO-1`..): load the
//! snapshot, apply the log, take a new epoch, and make that durable before
//! anything is served.

use tracing::{info, warn};

use crate::commit::Committer;
use crate::config::Config;
use crate::disk::StoreError;
use crate::state::{Bounds, State};
use crate::store::{Record, Snapshot, Store};
use crate::time::Millis;

/// What a master starts from.
#[derive(Debug)]
pub(crate) struct Start {
    pub(crate) state: State,
    /// Master time to go on from.
    pub(crate) offset: Millis,
    pub(crate) commit: Option<Committer>,
    /// Whether the state came from a store (the master then rebuilds its
    /// soft state for it).
    pub(crate) recovered: bool,
    /// A cell's master serves only while this holds (`CELL-6`).
    pub(crate) lease: Option<std::sync::Arc<crate::cell::MasterLease>>,
}

/// Recovers the state to start from out of `store`, or starts afresh
/// without one; `config.epoch` becomes the new epoch.
pub(crate) fn open(
    config: &mut Config,
    store: Option<Box<dyn Store>>,
) -> Result<Start, StoreError> {
    let bounds = Bounds::from(&*config);
    let Some(mut store) = store else {
        return Ok(Start {
            state: State::new(bounds),
            offset: Millis::ZERO,
            commit: None,
            recovered: false,
            lease: None,
        });
    };
    store.set_reserve(config.disk_reserve)?;
    let recovered = store.recover()?;
    let place = store.location();
    let (mut state, mut epoch, mut now) = match recovered.snapshot {
        Some(s) => (s.state, s.epoch, s.now),
        None => (State::new(bounds.clone()), 0, Millis::ZERO),
    };
    let replayed = recovered.records.len();
    for record in recovered.records {
        match record {
            Record::Epoch(e) => epoch = epoch.max(e),
            Record::BatchEnd => {}
            Record::Command { now: at, command } => {
                // Only commands that succeeded were logged; the state
                // machine is deterministic, so they succeed again.
                if let Err(e) = state.apply(command, at).0 {
                    warn!(error = %e, "a logged command failed on replay");
                }
                now = now.max(at);
            }
        }
    }
    state.set_bounds(bounds);
    // FO-1: strictly greater than every earlier epoch, durable before any
    // request is served.
    config.epoch = (epoch + 1).max(config.epoch);
    store.append(&Record::Epoch(config.epoch))?;
    store.sync()?;
    let snapshot = Snapshot {
        epoch: config.epoch,
        now,
        next_seq: recovered.next_seq + 1,
        state,
    };
    store.compact(&snapshot)?;
    config.metrics.snapshot_written();
    info!(
        store = %place,
        epoch = config.epoch,
        sessions = snapshot.state.sessions().count(),
        index = snapshot.state.index(),
        replayed,
        "recovered"
    );
    Ok(Start {
        state: snapshot.state,
        offset: now,
        commit: Some(Committer::start(
            store,
            recovered.next_seq + 1,
            crate::commit::Compaction {
                every: config.compact_every,
                min_log_bytes: config.compact_min_log_bytes,
            },
            config.metrics.clone(),
        )),
        recovered: true,
        lease: None,
    })
}
