//! Starting a master from its store (SPEC `STORE-2`, `FO-1`..): load the
//! snapshot, apply the log, take a new epoch, and make that durable before
//! anything is served; snapshot first only where the log asks for it.

use tracing::{info, warn};

use crate::commit::{Committer, Compaction, Logged};
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
    let (carried_forward, found) = (recovered.carried_forward, recovered.snapshot_written);
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
    let next_seq = recovered.next_seq + 1;
    let compaction = Compaction {
        every: config.compact_every,
        min_log_bytes: config.compact_min_log_bytes,
    };
    // The namespace counts what the replay freed, all of it after the
    // snapshot.
    let freed = state.namespace().freed_bytes();
    let mut logged = Logged {
        since_snapshot: replayed as u64 + 1,
        freed_at_snapshot: 0,
    };
    // STORE-2: the log goes on from where it was, within the bounds the
    // running master keeps, unless it is past one of them or the directory
    // is carried forward from an earlier format. A snapshot written here
    // would hold every session's return back by the time it takes (0.4 s
    // at a million sessions) for nothing those bounds do not give.
    let snapshot_written =
        carried_forward || compaction.due(logged.since_snapshot, store.sizes(), freed);
    if snapshot_written {
        let snapshot = Snapshot {
            epoch: config.epoch,
            now,
            next_seq,
            state,
        };
        store.compact(&snapshot)?;
        config.metrics.snapshot_written();
        state = snapshot.state;
        logged = Logged {
            since_snapshot: 0,
            freed_at_snapshot: freed,
        };
    } else if let Some(at) = found {
        config.metrics.snapshot_found(at);
    }
    info!(
        store = %place,
        epoch = config.epoch,
        sessions = state.sessions().count(),
        index = state.index(),
        replayed,
        snapshot_written,
        "recovered"
    );
    Ok(Start {
        state,
        offset: now,
        commit: Some(Committer::start(
            store,
            next_seq,
            compaction,
            logged,
            config.metrics.clone(),
        )),
        recovered: true,
        lease: None,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::file_store::FileStore;
    use crate::scratch::Scratch;

    /// Starts and stops a master on `dir`, snapshotting after `every`
    /// records; returns the epoch it took.
    fn start_and_stop(dir: &Path, every: u64) -> u64 {
        let mut config = Config {
            compact_every: every,
            disk_reserve: 0,
            ..Config::default()
        };
        let store = FileStore::open(dir).unwrap();
        drop(open(&mut config, Some(Box::new(store))).unwrap());
        config.epoch
    }

    /// The snapshot age `/metrics` shows after starting a master on `dir`.
    fn snapshot_age_after_start(dir: &Path) -> String {
        let mut config = Config {
            disk_reserve: 0,
            ..Config::default()
        };
        let store = FileStore::open(dir).unwrap();
        drop(open(&mut config, Some(Box::new(store))).unwrap());
        let figures = config.metrics.encode();
        let line = figures
            .lines()
            .find(|l| l.starts_with("leasehold_snapshot_age_seconds "))
            .expect("the snapshot's age is shown");
        line.rsplit(' ').next().unwrap().to_string()
    }

    // STORE-2, OPS-1: the age shown is the directory's snapshot's, even
    // one this master did not write.
    #[test]
    fn a_restart_that_keeps_the_log_shows_the_age_of_the_snapshot_it_found() {
        let scratch = Scratch::new("recovery-age");
        assert_eq!(snapshot_age_after_start(&scratch), "NaN", "no snapshot yet");
        start_and_stop(&scratch, 1);
        assert!(scratch.join("snapshot").exists());
        let age: f64 = snapshot_age_after_start(&scratch).parse().unwrap();
        assert!((0.0..600.0).contains(&age), "{age}");
    }

    // STORE-2: the log goes on from where it was.
    #[test]
    fn a_restart_within_the_bounds_writes_no_snapshot_and_keeps_the_log() {
        let scratch = Scratch::new("recovery-within");
        assert_eq!(start_and_stop(&scratch, 1_000), 1);
        assert_eq!(start_and_stop(&scratch, 1_000), 2);
        assert!(!scratch.join("snapshot").exists());
        assert_eq!(start_and_stop(&scratch, 1_000), 3, "both epochs read back");
    }

    // STORE-2: a log past a bound is snapshotted before anything is served.
    #[test]
    fn a_restart_past_a_bound_writes_the_snapshot_first() {
        let scratch = Scratch::new("recovery-past");
        start_and_stop(&scratch, 1_000);
        assert!(!scratch.join("snapshot").exists());
        assert_eq!(start_and_stop(&scratch, 2), 2);
        assert!(scratch.join("snapshot").exists());
        assert_eq!(start_and_stop(&scratch, 1_000), 3);
    }
}
