//! One member of a cell: its data directory and its Raft. What arrives on
//! its port is served by `peer.rs`, `status.rs` and `membership.rs`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::{BasicNode, Raft};

use super::broken::BrokenRules;
use super::lease::MasterLease;
use super::log::CellLog;
use super::machine::CellMachine;
use super::network::{CellNetwork, Dialer};
use super::rounds::Outstood;
use super::volume::{DirVolume, Volume};
use super::{CellTypes, NodeId};
pub use crate::config::DEFAULT_SNAPSHOT_EVERY;
use crate::disk::StoreError;
use crate::state::Bounds;
use leasehold_protocol::excerpt;

/// Raft's timers (SPEC `CELL-5`). The master lease is derived from the
/// election timeout, so every member of a cell must use the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub heartbeat: Duration,
    /// A follower that heard nothing from the leader for a time drawn
    /// between these stands for election.
    pub election_min: Duration,
    pub election_max: Duration,
    /// The longest election timeout as set, which the member's hello
    /// announces (`CELL-4`), where `election_max` is what a simulated
    /// clock running at another rate makes of it; `None`: `election_max`.
    #[doc(hidden)]
    pub announced_election_max: Option<Duration>,
}

impl Timing {
    /// The longest election timeout as set, announced to peers.
    pub fn announced(&self) -> Duration {
        self.announced_election_max.unwrap_or(self.election_max)
    }

    /// How long a quorum's acknowledgement keeps the master lease: the
    /// longest election timeout, for which a follower that took a request
    /// refuses to vote for anyone else (the engine's leader lease), less
    /// the clock-drift allowance (`CELL-6`).
    pub fn master_lease(&self) -> Duration {
        self.election_max
            .mul_f64(1.0 - crate::config::CELL_CLOCK_DRIFT)
    }
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            heartbeat: crate::config::CELL_HEARTBEAT,
            election_min: crate::config::CELL_ELECTION_MIN,
            election_max: crate::config::CELL_ELECTION_MAX,
            announced_election_max: None,
        }
    }
}

/// Who a member is and who its peers are.
#[derive(Debug, Clone)]
pub struct MemberConfig {
    /// The cell's id: peers of another cell are refused.
    pub cell: String,
    /// The cell's shared secret: members present it to each other, and a
    /// peer without it is refused (`CELL-4`). Without one, anyone who
    /// reaches the port and knows the cell's name can speak Raft to it.
    pub secret: Option<String>,
    pub id: NodeId,
    /// Every member's address as the others reach it, this one included.
    pub members: BTreeMap<NodeId, String>,
    pub storage: Storage,
    pub timing: Timing,
    /// Entries applied between snapshots; the log keeps a quarter as many
    /// before the last snapshot, for followers a little behind.
    pub snapshot_every: u64,
    /// Rules broken on purpose, so that a simulation can show it
    /// catches each; a real member breaks none.
    #[doc(hidden)]
    pub broken: BrokenRules,
    /// This member joins a cell that runs already: it waits to be added
    /// (`leasehold cell add`) instead of proposing `members` as a new
    /// cell's first membership (SPEC `CELL-9`).
    pub join: bool,
}

/// Where a member keeps its log, vote and snapshot.
#[derive(Debug, Clone)]
pub enum Storage {
    /// A data directory, taken for this member alone (`LOCK`).
    Dir(PathBuf),
    /// A volume the caller provides, such as a simulation's memory.
    Volume(Arc<dyn Volume>),
}

/// Why a member could not start.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the cell's settings do not work: {0}")]
    Config(String),
    #[error("the cell's engine failed: {0}")]
    Engine(String),
}

/// A running member.
#[derive(Clone)]
pub struct Member {
    pub(crate) config: MemberConfig,
    pub(crate) raft: Raft<CellTypes>,
    pub(crate) machine: CellMachine,
    pub(crate) lease: Arc<MasterLease>,
    /// The member's log, as the engine writes it.
    pub(crate) log: CellLog,
    /// The last leader that sent this member entries or a heartbeat, and
    /// when (`CELL-9`).
    pub(crate) led_by: Arc<std::sync::Mutex<Option<(NodeId, tokio::time::Instant)>>>,
    /// The last member that refused this one's vote holding a log at
    /// least as long, and when (`CELL-9`).
    pub(crate) outstood: Outstood,
    /// When a refusal of each peer was last logged: a peer refused keeps
    /// retrying, and its refusals are logged once a minute, not each time.
    pub(crate) refusals_logged:
        Arc<std::sync::Mutex<std::collections::HashMap<NodeId, tokio::time::Instant>>>,
    /// A data directory's lock, held while the member runs: one member
    /// per directory.
    _lock: Option<Arc<std::fs::File>>,
}

impl Member {
    /// Opens the member's data directory (log, vote, snapshot) and starts
    /// its Raft. A member whose log is empty proposes the configured
    /// members as the cell's first membership; the others' logs say who
    /// they are. The start waits one maximum election timeout first: a
    /// member that restarts must not vote before the lease it may have
    /// promised a leader has run out (SPEC `CELL-5`).
    pub async fn start(
        config: MemberConfig,
        bounds: Bounds,
        dialer: Arc<dyn Dialer>,
    ) -> Result<Member, MemberError> {
        if !config.members.contains_key(&config.id) {
            return Err(MemberError::Config(format!(
                "member {} is not among the cell's members {:?}",
                config.id,
                config.members.keys().collect::<Vec<_>>()
            )));
        }
        let timing = config.timing;
        // The engine refuses other candidates for its longest election
        // timeout after it heard the leader: the window the master lease
        // counts on, unless it is broken on purpose.
        let (election_min, election_max) = match config.broken.refusal_window {
            Some(window) => (timing.election_min.min(window / 2), window),
            None => (timing.election_min, timing.election_max),
        };
        let raft_config = openraft::Config {
            cluster_name: config.cell.clone(),
            heartbeat_interval: timing.heartbeat.as_millis() as u64,
            election_timeout_min: election_min.as_millis() as u64,
            election_timeout_max: election_max.as_millis() as u64,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(config.snapshot_every.max(1)),
            max_in_snapshot_log_to_keep: config.snapshot_every / 4,
            max_payload_entries: 64,
            ..Default::default()
        }
        .validate()
        .map_err(|e| MemberError::Config(e.to_string()))?;
        let (volume, lock): (Arc<dyn Volume>, _) = match &config.storage {
            Storage::Dir(dir) => (
                Arc::new(DirVolume::new(dir)),
                Some(take_dir(dir, config.id)?),
            ),
            Storage::Volume(volume) => (volume.clone(), None),
        };
        let log = CellLog::open(volume.clone())?;
        let machine = CellMachine::open(volume, bounds)?;
        if let (Storage::Dir(dir), Some(taken)) = (&config.storage, &lock) {
            taken.carried_forward(dir)?;
        }
        let fresh = log.is_empty();
        if !config.broken.vote_at_start {
            // Long enough for a promise this member made before a restart,
            // by this version or by the earlier one (CELL-5).
            let wait = timing
                .election_max
                .max(crate::config::CELL_EARLIER_ELECTION_MAX);
            tokio::time::sleep(wait).await;
        }
        let lease = Arc::new(if config.broken.keep_master_lease {
            MasterLease::kept_for_ever(config.id, timing.master_lease())
        } else {
            MasterLease::new(config.id, timing.master_lease())
        });
        let network = CellNetwork::new(config.cell.clone(), config.id, dialer, lease.clone())
            .with_secret(config.secret.clone())
            .with_election_max(timing.announced())
            .with_retry(timing.heartbeat);
        let outstood = network.outstood();
        let raft = Raft::new(
            config.id,
            Arc::new(raft_config),
            network,
            log.clone(),
            machine.clone(),
        )
        .await
        .map_err(|e| MemberError::Engine(e.to_string()))?;
        if fresh && !config.join {
            let members: BTreeMap<NodeId, BasicNode> = config
                .members
                .iter()
                .map(|(id, addr)| (*id, BasicNode::new(addr)))
                .collect();
            // Every fresh member proposes the same first membership; the
            // engine takes it once and the others' proposals are moot.
            if let Err(e) = raft.initialize(members).await {
                tracing::debug!(error = %e, "the cell was initialized already");
            }
        }
        Ok(Member {
            config,
            raft,
            machine,
            lease,
            log,
            led_by: Arc::default(),
            outstood,
            refusals_logged: Arc::default(),
            _lock: lock.map(|taken| Arc::new(taken.lock)),
        })
    }

    /// The Raft of this member.
    pub fn raft(&self) -> &Raft<CellTypes> {
        &self.raft
    }

    /// The Raft term in which this member believes it leads the cell, if
    /// it does. A leader cut off from its followers goes on believing it.
    pub fn leading_term(&self) -> Option<u64> {
        let metrics = self.raft.metrics();
        let m = metrics.borrow();
        (m.state == openraft::ServerState::Leader).then_some(m.current_term)
    }

    /// The state machine of this member.
    pub fn machine(&self) -> &CellMachine {
        &self.machine
    }

    /// Stops this member's Raft.
    pub async fn shutdown(&self) {
        let _ = self.raft.shutdown().await;
    }
}

/// A member's data directory, locked for it.
pub(super) struct TakenDir {
    /// Locked while the member runs.
    pub(super) lock: std::fs::File,
    /// It is an earlier cell format's, to be carried forward once read
    /// whole.
    upgrade: bool,
}

impl TakenDir {
    /// Marks the directory cell format 5's, once its log and snapshot were
    /// read: from now on the log may hold commands earlier formats do not
    /// know, and an earlier member must refuse the directory rather than
    /// misread it (`STORE-6`).
    pub(super) fn carried_forward(&self, dir: &std::path::Path) -> Result<(), StoreError> {
        if self.upgrade {
            tracing::info!(dir = %dir.display(), "carrying a cell directory forward to cell format 5");
            crate::disk::write_atomically(dir, "FORMAT", FORMAT.as_bytes())?;
        }
        Ok(())
    }
}

/// What a member's data directory says it is.
pub(super) const FORMAT: &str = "leasehold-cell 5\n";
/// Cell formats 2 to 4, whose directories a member reads and carries
/// forward: their logs hold commands it applies alike, and their
/// snapshots are read by their magic (`upgrade.rs`).
const FORMAT_2: &str = "leasehold-cell 2\n";
const FORMAT_3: &str = "leasehold-cell 3\n";
const FORMAT_4: &str = "leasehold-cell 4\n";

/// The cell format a `FORMAT` file of a later Leasehold names.
fn newer_cell_format(text: &str) -> Option<u32> {
    let n: u32 = text.strip_prefix("leasehold-cell ")?.trim().parse().ok()?;
    (n > 5).then_some(n)
}

/// The file naming the member a data directory belongs to.
pub(super) const NODE_FILE: &str = "NODE";

/// Takes member `node`'s data directory: creates it, or checks that it is
/// a cell member's, and this member's, and locks it. A single master's
/// directory is refused, not taken over: its state is not a cell's log. So
/// is another member's (its `NODE` file names it): its log holds that
/// member's votes, and a directory restored for one member (`OPS-6`)
/// names only that one in its membership, so under another id it would
/// never serve. A directory without the file, from an earlier Leasehold or
/// new, is this member's from now on.
pub(super) fn take_dir(dir: &std::path::Path, node: NodeId) -> Result<TakenDir, StoreError> {
    use crate::disk::{corrupt, io_error, write_atomically};
    std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    let format = dir.join("FORMAT");
    let mut upgrade = false;
    match std::fs::read_to_string(&format) {
        Ok(text) if text == FORMAT => {}
        Ok(text) if [FORMAT_2, FORMAT_3, FORMAT_4].contains(&text.as_str()) => upgrade = true,
        // Format 1's snapshots hold a state that does not say which
        // sessions may cache (`CACHE-7`).
        Ok(text) if text == "leasehold-cell 1\n" => {
            return Err(corrupt(
                dir,
                "it was written by an earlier Leasehold (cell format 1, whose state does not \
                 say which sessions may cache); this member reads cell formats 2 to 5: start it \
                 on a new directory",
            ))
        }
        Ok(text) if newer_cell_format(&text).is_some() => {
            return Err(corrupt(
                dir,
                format!(
                    "it was written by a newer Leasehold (cell format {}); this member reads \
                     cell formats 2 to 5: run the newer binary on it",
                    newer_cell_format(&text).unwrap_or_default()
                ),
            ))
        }
        Ok(text) => {
            return Err(corrupt(
                dir,
                format!(
                    "FORMAT says {:?}, not a cell member's {:?}: a single master's directory \
                     is not a cell's log; start the member on a new directory",
                    text.trim(),
                    FORMAT.trim()
                ),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if std::fs::read_dir(dir)
                .map_err(io_error(dir))?
                .next()
                .is_some()
            {
                return Err(corrupt(
                    dir,
                    "it is not empty and holds no FORMAT file: not a Leasehold data directory",
                ));
            }
            write_atomically(dir, "FORMAT", FORMAT.as_bytes())?;
        }
        Err(e) => return Err(io_error(&format)(e)),
    }
    let path = dir.join("LOCK");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_error(&path))?;
    if lock.try_lock().is_err() {
        return Err(StoreError::InUse {
            path: dir.to_path_buf(),
            holder: "another member or master",
        });
    }
    match std::fs::read_to_string(dir.join(NODE_FILE)) {
        Ok(text) => match text.trim().parse::<NodeId>() {
            Ok(owner) if owner == node => {}
            Ok(owner) => {
                return Err(corrupt(
                    dir,
                    format!(
                        "it is member {owner}'s (its NODE file says so), and this member is \
                         {node}: start it with --node {owner}, or start member {node} on a new \
                         directory and add it with `leasehold cell add`"
                    ),
                ))
            }
            Err(_) => {
                return Err(corrupt(
                    dir,
                    format!(
                        "its NODE file names no member ({}): it is damaged",
                        excerpt(text.trim(), 20)
                    ),
                ))
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            write_atomically(dir, NODE_FILE, format!("{node}\n").as_bytes())?;
        }
        Err(e) => return Err(io_error(&dir.join(NODE_FILE))(e)),
    }
    Ok(TakenDir { lock, upgrade })
}
