//! A replicated cell in the simulation: members `m1`..`mN`, each the real
//! member (openraft, the master lease, epochs through the log) on its own
//! host, with its own clock rate and a volume that loses what it never
//! synced when its host crashes.
//!
//! The driver finds the master and the followers through the members'
//! Raft metrics, and samples every member's replica, so the `replicas`
//! check can compare them index by index.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_server::cell::{
    serve_member, BrokenRules, Member, MemberConfig, MemoryVolume, Storage, Timing, Volume,
};
use leasehold_server::{Config, IdSource};

use super::net::{SimDialer, SimListener, PORT};
use super::rng::Rng;
use super::trace::{Trace, What};
use super::world::{master_observer, Grants};

/// The cell's name, as peers check it.
const CELL: &str = "sim";
/// The cell's secret: what its members present to each other, and the
/// operator's right to change them (`CELL-10`).
pub const CELL_SECRET: &str = "the simulated cell's secret";

/// Entries applied between a member's snapshots: few, so that snapshots,
/// log purges and crashes interleave, and a member down for a while comes
/// back behind the purged log.
const SNAPSHOT_EVERY: u64 = 32;

/// The members' names.
pub fn names(members: usize) -> Vec<String> {
    (1..=members).map(|i| format!("m{i}")).collect()
}

/// The running members, by host name: each registers when it has started
/// and the driver removes it when it crashes the host.
#[derive(Clone, Default)]
pub struct Registry(Arc<Mutex<BTreeMap<String, Member>>>);

impl Registry {
    fn started(&self, name: &str, member: Member) {
        self.0.lock().unwrap().insert(name.to_string(), member);
    }

    /// The host crashed: its member is gone.
    pub fn crashed(&self, name: &str) {
        self.0.lock().unwrap().remove(name);
    }

    /// The member that leads the cell now with the newest term, if one
    /// does. A leader cut off from its followers still believes it leads;
    /// the newest term is the one the others follow.
    pub fn leader(&self) -> Option<String> {
        let members = self.0.lock().unwrap();
        members
            .iter()
            .filter_map(|(name, member)| Some((member.leading_term()?, name.clone())))
            .max()
            .map(|(_, name)| name)
    }

    /// Whether member `name` holds a joint membership: a change begun
    /// and not yet finished.
    pub fn joint(&self, name: &str) -> bool {
        let members = self.0.lock().unwrap();
        members.get(name).is_some_and(|member| {
            let metrics = member.raft().metrics();
            let m = metrics.borrow();
            m.membership_config.membership().get_joint_config().len() > 1
        })
    }

    /// The voters of each configuration the leader of the newest term
    /// holds, if a member leads.
    fn configuration(&self) -> Option<Vec<Vec<u64>>> {
        let leader = self.leader()?;
        let members = self.0.lock().unwrap();
        let metrics = members.get(&leader)?.raft().metrics();
        let m = metrics.borrow();
        let configs = m.membership_config.membership().get_joint_config();
        Some(
            configs
                .iter()
                .map(|c| c.iter().copied().collect())
                .collect(),
        )
    }

    /// Each running member's replica whose applied index is not the one
    /// `last` has for it: the index and a digest of what it holds.
    fn replicas(&self, last: &BTreeMap<String, u64>) -> Vec<(String, u64, u64)> {
        let members = self.0.lock().unwrap();
        members
            .iter()
            .filter(|(name, member)| {
                let applied = member.machine().applied().borrow().map(|id| id.index);
                applied.is_some() && applied != last.get(*name).copied()
            })
            .filter_map(|(name, member)| {
                let replica = member.machine().replica();
                let index = replica.applied?.index;
                let bytes = bincode::serde::encode_to_vec(
                    (&replica.state, replica.epoch, replica.now),
                    bincode::config::standard(),
                )
                .expect("replicas encode");
                let mut hasher = std::hash::DefaultHasher::new();
                bytes.hash(&mut hasher);
                Some((name.clone(), index, hasher.finish()))
            })
            .collect()
    }
}

/// Writes each member's replica to the trace when its applied index has
/// moved since the last sample.
#[derive(Default)]
pub struct Sampler {
    last: BTreeMap<String, u64>,
    /// The leader's membership when it last changed.
    configuration: Option<Vec<Vec<u64>>>,
}

impl Sampler {
    pub fn sample(&mut self, registry: &Registry, trace: &Trace, at: u64) {
        for (name, index, digest) in registry.replicas(&self.last) {
            self.last.insert(name.clone(), index);
            trace.push_at(at, &name, What::Replica { index, digest });
        }
        if let Some(configs) = registry.configuration() {
            if self.configuration.as_ref() != Some(&configs) {
                self.configuration = Some(configs.clone());
                trace.push_at(at, "cell", What::Configuration { configs });
            }
        }
    }
}

/// What every member of a run shares.
pub struct Cell {
    pub seed: u64,
    pub names: Vec<String>,
    pub trace: Trace,
    pub grants: Grants,
    pub registry: Registry,
    /// The first members, which found the cell; the rest join it later.
    pub founders: usize,
    /// The rules of the master lease and of elections the members break
    /// on purpose: none, unless a run shows a check catching it.
    pub broken: BrokenRules,
    /// Masters carry out every release whichever acquire it names.
    pub unfenced_releases: bool,
    pub unfiltered_events: bool,
    /// The members' Raft timers, as a clock at the true rate runs them.
    pub timing: Timing,
}

/// One member's volume: kept by the driver, which crashes it with its
/// host.
pub fn volume(rng: &mut Rng) -> MemoryVolume {
    MemoryVolume::new(Duration::from_millis(rng.range(1, 9)))
}

/// Timing of a member whose clock runs at `rate`: its timers measure its
/// own clock, so in true time they last `1 / rate` as long. The master
/// lease, derived from them, scales alike.
fn timing(t: Timing, rate: f64) -> Timing {
    Timing {
        heartbeat: t.heartbeat.div_f64(rate),
        election_min: t.election_min.div_f64(rate),
        election_max: t.election_max.div_f64(rate),
        // The hello announces the setting, which no clock's rate changes.
        announced_election_max: Some(t.announced()),
    }
}

/// Adds member `name` (the `id`th) to the simulation.
/// With `join`, it waits to be added to the cell.
pub fn host(
    sim: &mut turmoil::Sim<'_>,
    cell: &Cell,
    id: u64,
    volume: MemoryVolume,
    rate: f64,
    join: bool,
) {
    let name = cell.names[id as usize - 1].clone();
    // Founders propose themselves as the first membership; one that joins
    // later knows them all.
    let members: BTreeMap<u64, String> = (1..)
        .zip(&cell.names)
        .take(if join {
            cell.names.len()
        } else {
            cell.founders
        })
        .map(|(i, n)| (i, format!("{n}:{PORT}")))
        .collect();
    let member = MemberConfig {
        cell: CELL.into(),
        secret: Some(CELL_SECRET.into()),
        id,
        members,
        storage: Storage::Volume(Arc::new(volume) as Arc<dyn Volume>),
        timing: timing(cell.timing, rate),
        snapshot_every: SNAPSHOT_EVERY,
        broken: cell.broken,
        join,
    };
    let observer = master_observer(cell.trace.clone(), cell.grants.clone(), rate, name.clone());
    let (seed, registry) = (cell.seed, cell.registry.clone());
    let (unfenced, unfiltered) = (cell.unfenced_releases, cell.unfiltered_events);
    let starts = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let host = name.clone();
    sim.host(name, move || {
        let (member, observer, registry, host) = (
            member.clone(),
            observer.clone(),
            registry.clone(),
            host.clone(),
        );
        // No two masters, on any member or start, hand out the same ids.
        let start = starts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        async move {
            let listener = SimListener::bind().await?;
            let config = Config {
                ids: IdSource::Seeded(seed ^ (id << 56) ^ (start << 48)),
                clock_rate: rate,
                observer: Some(observer),
                unsafe_unfenced_releases: unfenced,
                unsafe_unfiltered_events: unfiltered,
                ..Config::default()
            };
            let bounds = leasehold_server::Bounds::from(&config);
            let member = Member::start(member, bounds, Arc::new(SimDialer)).await?;
            registry.started(&host, member.clone());
            serve_member(listener, config, member, std::future::pending()).await?;
            Ok(())
        }
    });
}
