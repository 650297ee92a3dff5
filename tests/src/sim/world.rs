//! One run: a master host, a storage host and the clients of a scenario on
//! turmoil's network, in virtual time, with the scenario's faults applied
//! as the run goes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_server::cell::BrokenRules;
use leasehold_server::{Config, HowGranted, IdSource, LetGo, MasterEvent, MasterObserver};

use super::admin;
use super::app::{self, short_id, Ctx, Leases, Role};
use super::cell::{self, Cell, Registry, Sampler};
use super::disk::Disk;
use super::net::SimListener;
use super::record::{Clocks, Run, Settings};
use super::rng::Rng;
use super::rules;
use super::scenario::{Action, Direction, Edge, Planner, Scenario};
use super::servers::{CellServers, Servers, SingleMaster};
use super::short_leases::{ShortLeases, SHORT};
use super::steps::{names, Faults, Late, Step};
use super::storage;
use super::trace::{now_ms, Trace, What};

/// When the master last granted each session a lease, by the session's
/// name in the trace: what lets the driver time a fault to a point of the
/// KeepAlive cycle.
#[derive(Debug, Clone, Default)]
pub struct Grants(Arc<Mutex<BTreeMap<String, u64>>>);

impl Grants {
    fn granted(&self, session: &str, at: u64) {
        self.0.lock().unwrap().insert(session.to_string(), at);
    }

    /// When the master last granted `session` a lease.
    fn last(&self, session: &str) -> Option<u64> {
        self.0.lock().unwrap().get(session).copied()
    }
}

/// An observer that writes the leases of the master on host `who` into
/// the trace in virtual time: a master clock at `rate` reaches a lease's
/// expiry after the master time left divided by its rate; a millisecond
/// less, since master time drops the fraction of a millisecond its clock
/// had reached. It also writes when each master begins, with its epoch.
pub(crate) fn master_observer(
    trace: Trace,
    grants: Grants,
    rate: f64,
    who: String,
) -> MasterObserver {
    MasterObserver::new(move |event: &MasterEvent| {
        let at = now_ms();
        match event {
            MasterEvent::Granted {
                session,
                now,
                expires,
                why,
            } => {
                let left = expires.since(*now).as_secs_f64() * 1_000.0;
                let left = ((left - 1.0).max(0.0) / rate).floor() as u64;
                let session = short_id(*session);
                let until = at + left;
                grants.granted(&session, at);
                let what = What::Lease {
                    session,
                    until,
                    why: format!("{why:?}").to_lowercase(),
                };
                trace.push_at(at, &who, what);
            }
            MasterEvent::Ended { session, cause, .. } => {
                let what = What::SessionEnded {
                    session: short_id(*session),
                    cause: format!("{cause:?}").to_lowercase(),
                };
                trace.push_at(at, &who, what);
            }
            MasterEvent::Serving { epoch, .. } => {
                trace.push_at(at, &who, What::Serving { epoch: *epoch });
            }
            MasterEvent::Stopped { epoch, .. } => {
                trace.push_at(at, &who, What::Stopped { epoch: *epoch });
            }
            MasterEvent::LockGranted {
                session,
                key,
                generation,
                index,
                how,
                ..
            } => {
                let how = match how {
                    HowGranted::AtOnce => "at_once",
                    HowGranted::Again => "again",
                    HowGranted::FromLine => "from_line",
                };
                let what = What::Granted {
                    session: short_id(*session),
                    lock: key.clone(),
                    generation: *generation,
                    index: *index,
                    how: how.to_string(),
                };
                trace.push_at(at, &who, what);
            }
            MasterEvent::LockLetGo {
                session,
                key,
                generation,
                why,
                ..
            } => {
                let why = match why {
                    LetGo::Released => "released",
                    LetGo::GivenBack => "given_back",
                    LetGo::SessionEnded => "session_ended",
                    LetGo::Deleted => "deleted",
                };
                let what = What::LetGo {
                    session: short_id(*session),
                    lock: key.clone(),
                    generation: *generation,
                    why: why.to_string(),
                };
                trace.push_at(at, &who, what);
            }
            MasterEvent::ReleaseRefused {
                session,
                key,
                named,
                acquired,
                ..
            } => {
                let what = What::ReleaseRefused {
                    session: short_id(*session),
                    lock: key.clone(),
                    named: *named,
                    acquired: *acquired,
                };
                trace.push_at(at, &who, what);
            }
            _ => {}
        }
    })
}

/// Log records between the simulated master's snapshots: few, so that
/// snapshots and crashes interleave (`STORE-2`).
const COMPACT_EVERY: u64 = 32;

/// tokio's runtimes keep their tasks in this many lists, chosen by task
/// id, and drop them list by list when a host crashes.
const TASK_LISTS: u64 = 4;

/// Sets the residue of the next tokio task id, which tokio counts for the
/// whole process, from `seed`.
///
/// A crashed host's tasks are dropped in an order that follows their ids
/// modulo [`TASK_LISTS`], and what they drop (connections, channels) is
/// seen by the other hosts in that order. Without this, a run would depend
/// on how many tasks the process had spawned before it: a seed that failed
/// in a sweep would pass on its own. Drawing the residue from the seed
/// keeps the orders varied across seeds. It holds while no other thread
/// spawns tasks during the run: a sweep runs each seed in a process of its
/// own, and [`run`] lets one run at a time in a process, so a test that
/// replays a seed beside others sees the sweep's trace.
pub fn align_task_ids(seed: u64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime to count tasks on");
    let wanted = seed % TASK_LISTS;
    runtime.block_on(async {
        loop {
            let id = tokio::spawn(async {}).id().to_string();
            let id: u64 = id.parse().expect("tokio's task ids are numbers");
            if (id + 1) % TASK_LISTS == wanted {
                break;
            }
        }
    });
}

/// Runs `scenario` with `seed`: the same trace for the same arguments
/// whatever else the process does, so runs wait for each other (see
/// [`align_task_ids`]).
pub fn run(scenario: &'static Scenario, seed: u64, settings: Settings) -> Run {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A run that panicked left nothing behind that the next one reads.
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    align_task_ids(seed);
    let settings = Settings {
        lock_delay: Some(settings.lock_delay.unwrap_or(scenario.lock_delay)),
        ..settings
    };
    let mut rng = Rng::new(seed);
    let contenders = settings.contenders.unwrap_or(scenario.contenders);
    let contender_names: Vec<String> = (1..=contenders).map(|i| format!("c{i}")).collect();
    let bystanders = vec!["w1".to_string(), "w2".to_string(), "watch".to_string()];
    let mut planner = Planner {
        rng: rng.fork(1),
        settings: settings.clone(),
        contenders: contender_names.clone(),
        bystanders: bystanders.clone(),
        actions: Vec::new(),
        spare: 0,
        slow_step_down: None,
        admin: Vec::new(),
    };
    (scenario.plan)(&mut planner);

    let work = settings.work.as_millis() as u64;
    let listen_until = work + settings.drain.as_millis() as u64;
    let trace = Trace::default();
    let started = What::RunStarted {
        scenario: scenario.name.to_string(),
        seed,
        contenders,
        lease_ms: settings.lease.as_millis() as u64,
        grace_ms: settings.grace.as_millis() as u64,
        semaphore_limit: settings.semaphore_limit,
    };
    trace.push_at(0, "sim", started);
    let leases = Leases::default();
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(Duration::from_millis(listen_until + 60_000))
        .max_message_latency(settings.max_latency)
        .tick_duration(settings.tick)
        .build();

    let members = settings.members.unwrap_or(scenario.members);
    let servers = if members == 0 {
        vec!["master".to_string()]
    } else {
        cell::names(members)
    };
    let mut hosts = servers.clone();
    hosts.extend(contender_names.iter().chain(&bystanders).cloned());
    if scenario.access {
        hosts.extend([rules::OPERATOR.to_string(), rules::SNOOPER.to_string()]);
    }
    let clocks = Clocks::draw(&mut rng.fork(5), settings.clock_spread, &hosts);
    let grants = Grants::default();
    let cell = (members > 0).then(|| {
        // openraft's election timeouts, from the seed: every member runs
        // on this thread.
        leasehold_server::cell::seed_elections(Some(seed));
        let cell = Cell {
            seed,
            names: servers.clone(),
            trace: trace.clone(),
            grants: grants.clone(),
            registry: Registry::default(),
            founders: servers.len() - planner.spare,
            broken: BrokenRules {
                slow_step_down: planner.slow_step_down.map(Duration::from_millis),
                ..settings.broken_cell
            },
            unfenced_releases: settings.unfenced_releases,
            unfiltered_events: settings.unfiltered_events,
            timing: settings.cell_timing.unwrap_or_default(),
        };
        let mut disks = Rng::new(seed).fork(6);
        let mut volumes = BTreeMap::new();
        for (id, name) in (1..).zip(&servers) {
            let volume = cell::volume(&mut disks);
            let join = id as usize > cell.founders;
            cell::host(&mut sim, &cell, id, volume.clone(), clocks.rate(name), join);
            volumes.insert(name.clone(), volume);
        }
        CellServers {
            registry: cell.registry,
            volumes,
            down: BTreeMap::new(),
            links: BTreeMap::new(),
            sampler: Sampler::default(),
            rng: Rng::new(seed).fork(7),
            fault: None,
        }
    });

    // Its own generator, so that its draws move no other part's.
    let disk = Disk::new(Rng::new(seed).fork(5), settings.lying_disk);
    let starts = Arc::new(AtomicU64::new(0));
    let master_disk = disk.clone();
    let observer = master_observer(
        trace.clone(),
        grants.clone(),
        clocks.rate("master"),
        "master".into(),
    );
    let master_rate = clocks.rate("master");
    let short = settings.short_recovered_leases;
    let unheld = settings.unheld_cache_writes;
    let unfenced = settings.unfenced_releases;
    let unfiltered = settings.unfiltered_events;
    if members == 0 {
        sim.host("master", move || {
            let observer = observer.clone();
            let disk = ShortLeases {
                inner: master_disk.clone(),
                broken: short,
            };
            // A restarted master must not hand out the ids of the first.
            let start = starts.fetch_add(1, Ordering::Relaxed);
            async move {
                let listener = SimListener::bind().await?;
                let config = Config {
                    ids: IdSource::Seeded(seed ^ (start << 48)),
                    clock_rate: master_rate,
                    observer: Some(observer),
                    unsafe_unheld_cache_writes: unheld,
                    unsafe_unfenced_releases: unfenced,
                    unsafe_unfiltered_events: unfiltered,
                    // The short lease is below the usual minimum.
                    min_lease: if short {
                        SHORT
                    } else {
                        Config::default().min_lease
                    },
                    // Only the log is shortened: no snapshot may cover it.
                    compact_every: if short {
                        Config::default().compact_every
                    } else {
                        COMPACT_EVERY
                    },
                    ..Config::default()
                };
                leasehold_server::run(listener, config, disk, std::future::pending()).await?;
                Ok(())
            }
        });
    }
    let (storage_trace, fencing) = (trace.clone(), settings.fencing);
    sim.host(storage::HOST, move || {
        storage::serve(storage_trace.clone(), fencing)
    });

    let base = Ctx {
        name: String::new(),
        trace: trace.clone(),
        leases: leases.clone(),
        settings: settings.clone(),
        rng: rng.fork(2),
        work_until: work,
        listen_until,
        watching: Arc::new(AtomicBool::new(false)),
        ops: Arc::new(AtomicU64::new(0)),
        clock_rate: 1.0,
        servers: servers.clone(),
        writer_pause: if scenario.quiet {
            (1_000, 4_000)
        } else {
            (50, 300)
        },
    };
    let mut roles: Vec<(String, Role)> = contender_names
        .iter()
        .enumerate()
        .map(|(i, name)| (name.clone(), scenario.role_of(i)))
        .collect();
    roles.push(("w1".into(), Role::Writer));
    roles.push(("w2".into(), Role::Writer));
    roles.push(("watch".into(), Role::Watcher));
    for (i, (name, role)) in roles.into_iter().enumerate() {
        let ctx = Ctx {
            name: name.clone(),
            rng: rng.fork(100 + i as u64),
            clock_rate: clocks.rate(&name),
            ..base.clone()
        };
        sim.client(name, app::run(role, ctx));
    }
    let reader = Ctx {
        name: "final".into(),
        rng: rng.fork(3),
        ..base.clone()
    };
    sim.client("final", app::final_reads(reader));
    if scenario.access {
        let slot = rules::TokenSlot::default();
        let changes = rules::plan(&mut rng.fork(7), work);
        let operator = Ctx {
            name: rules::OPERATOR.into(),
            rng: rng.fork(8),
            clock_rate: clocks.rate(rules::OPERATOR),
            ..base.clone()
        };
        sim.client(
            rules::OPERATOR,
            rules::operate(operator, changes, slot.clone()),
        );
        let snooper = Ctx {
            name: rules::SNOOPER.into(),
            rng: rng.fork(9),
            clock_rate: clocks.rate(rules::SNOOPER),
            ..base.clone()
        };
        sim.client(rules::SNOOPER, rules::snoop(snooper, slot));
    }
    if !planner.admin.is_empty() {
        let admin = admin::run(trace.clone(), servers.clone(), planner.admin.clone());
        sim.client(admin::HOST, admin);
    }

    let hosts: Box<dyn Servers> = match cell {
        Some(cell) => Box::new(cell),
        None => Box::new(SingleMaster { disk, down: false }),
    };
    let mut driver = Driver {
        faults: Faults {
            queue: BTreeMap::new(),
            seq: 0,
            trace: trace.clone(),
            active: BTreeMap::new(),
            servers,
            clients: contender_names.iter().chain(&bystanders).cloned().collect(),
        },
        hosts,
        rng: rng.fork(4),
        leases,
        settings: settings.clone(),
        grants,
    };
    for (at, action) in planner.actions {
        driver.schedule(at, action);
    }
    driver.faults.push(work, Step::Restart);

    let mut error = None;
    loop {
        let now = sim.elapsed().as_millis() as u64;
        driver.apply_due(&mut sim, now, work);
        driver.hosts.sample(&trace, now);
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    if members > 0 {
        leasehold_server::cell::seed_elections(None);
    }
    let end = sim.elapsed().as_millis() as u64;
    let ended = What::RunEnded {
        error: error.clone(),
    };
    trace.push_at(end, "sim", ended);
    Run {
        scenario: scenario.name,
        seed,
        settings,
        contenders,
        entries: trace.entries(),
        error,
        end,
        clocks,
    }
}

/// Applies a scenario's faults as the run goes: those of clients and
/// their links here, those only the servers have through [`Servers`].
struct Driver {
    faults: Faults,
    /// The single master or a cell's members.
    hosts: Box<dyn Servers>,
    rng: Rng,
    leases: Leases,
    settings: Settings,
    grants: Grants,
}

impl Driver {
    fn schedule(&mut self, at: u64, action: Action) {
        let step = match action {
            Action::Partition {
                client,
                direction,
                ms,
            } => Step::Cut {
                client,
                direction,
                ms,
                expect_normal: false,
            },
            Action::ShortPartition {
                client,
                expect_normal,
            } => Step::Short {
                client,
                give_up: at + self.settings.lease.as_millis() as u64,
                expect_normal,
            },
            Action::Hold { client, ms } => Step::Hold {
                client,
                ms,
                expect_normal: false,
            },
            Action::PartitionHolder { direction, ms } => Step::CutHolder { direction, ms },
            Action::Flap { client, ms } => Step::Flap {
                client,
                until: at + ms,
            },
            Action::Crash { ms } => self.hosts.crash(&mut self.faults, at, ms),
            Action::CrashFollower { ms } => Step::CrashMember { master: false, ms },
            Action::IsolateMaster {
                ms,
                reachable,
                bounce,
            } => Step::Isolate {
                ms,
                reachable,
                bounce,
            },
            Action::SplitCell {
                master_in_minority,
                ms,
                minority_clients,
            } => Step::Split {
                master_in_minority,
                ms,
                minority_clients,
            },
            Action::DeafFollower { ms } => Step::DeafFollower { ms },
            Action::CrashWhileJoint { within, ms, at_end } => Step::CrashWhileJoint {
                until: at + within,
                ms,
                at_end,
                seen: false,
            },
            Action::FlapPeers { ms } => Step::FlapPeers {
                until: at + ms,
                id: None,
            },
            Action::AfterGrant {
                client,
                delay,
                edge,
            } => {
                if edge == Edge::Hold {
                    // Published every step by the time the grant comes.
                    let watch = Step::Watch {
                        client: client.clone(),
                        watched: true,
                    };
                    self.faults.push(at.saturating_sub(100), watch);
                }
                Step::AfterGrant {
                    client,
                    delay,
                    edge,
                    since: None,
                    published: None,
                    give_up: at + 2 * self.settings.lease.as_millis() as u64,
                }
            }
            Action::LateRelease => Step::LateRelease {
                late: Late::Holder,
                give_up: at + self.settings.lease.as_millis() as u64,
            },
            Action::StaleThenLost {
                client,
                hold,
                delay,
                ms,
            } => {
                let cut = Step::Cut {
                    client: client.clone(),
                    direction: Direction::ToMaster,
                    ms,
                    expect_normal: false,
                };
                self.faults.push(at + hold + delay, cut);
                Step::Hold {
                    client,
                    ms: hold,
                    expect_normal: false,
                }
            }
        };
        self.faults.push(at, step);
    }

    /// Applies every step due by `now`; at `work` every fault still in
    /// force is repaired so the run can end healthy.
    fn apply_due(&mut self, sim: &mut turmoil::Sim<'_>, now: u64, work: u64) {
        while let Some(entry) = self.faults.queue.first_entry() {
            if entry.key().0 > now {
                return;
            }
            let step = entry.remove();
            if now >= work {
                self.heal_all(sim, now);
                // Faults scheduled past the work are dropped.
                if !matches!(
                    step,
                    Step::Heal { .. }
                        | Step::Release { .. }
                        | Step::Restart
                        | Step::RestartMember { .. }
                        | Step::CellHeal { .. }
                        | Step::PeerHeal { .. }
                ) {
                    continue;
                }
            }
            self.apply(sim, now, step);
        }
    }

    fn heal_all(&mut self, sim: &mut turmoil::Sim<'_>, now: u64) {
        let repairs: Vec<Step> = self
            .faults
            .active
            .values()
            .map(|(_, repair)| repair.clone())
            .collect();
        for repair in repairs {
            self.apply(sim, now, repair);
        }
        self.hosts.heal_all(&mut self.faults, sim, now);
    }

    fn apply(&mut self, sim: &mut turmoil::Sim<'_>, now: u64, step: Step) {
        match step {
            Step::Crash
            | Step::Restart
            | Step::CrashMember { .. }
            | Step::RestartMember { .. }
            | Step::Isolate { .. }
            | Step::CutAndBounce { .. }
            | Step::Split { .. }
            | Step::FlapPeers { .. }
            | Step::DeafFollower { .. }
            | Step::CrashWhileJoint { .. }
            | Step::PeerHeal { .. }
            | Step::CellHeal { .. } => self.hosts.apply(&mut self.faults, sim, now, step),
            Step::Cut {
                client,
                direction,
                ms,
                expect_normal,
            } => {
                if self.faults.is_cut(&client) {
                    return;
                }
                self.hosts.cut_client(&self.faults, sim, &client, direction);
                self.faults
                    .fault(now, &client, names(direction).0, "master", expect_normal);
                self.faults.seq += 1;
                let id = self.faults.seq;
                let heal = Step::Heal {
                    client: client.clone(),
                    direction,
                    id,
                };
                self.faults
                    .active
                    .insert((client, "cut"), (id, heal.clone()));
                self.faults.push(now + ms, heal);
            }
            Step::Heal {
                client,
                direction,
                id,
            } => {
                let key = (client.clone(), "cut");
                if self
                    .faults
                    .active
                    .get(&key)
                    .is_none_or(|(active, _)| *active != id)
                {
                    return;
                }
                self.faults.active.remove(&key);
                self.hosts
                    .heal_client(&self.faults, sim, &client, direction);
                self.faults
                    .fault(now, &client, names(direction).1, "master", false);
            }
            Step::Hold {
                client,
                ms,
                expect_normal,
            } => {
                let key = (client.clone(), "hold");
                if self.faults.active.contains_key(&key) {
                    return;
                }
                for server in &self.faults.servers {
                    sim.hold(client.as_str(), server.as_str());
                }
                sim.hold(client.as_str(), storage::HOST);
                self.faults
                    .fault(now, &client, "hold", "master", expect_normal);
                self.faults.seq += 1;
                let id = self.faults.seq;
                let release = Step::Release { client, id };
                self.faults.active.insert(key, (id, release.clone()));
                self.faults.push(now + ms, release);
            }
            Step::Release { client, id } => {
                let key = (client.clone(), "hold");
                if self
                    .faults
                    .active
                    .get(&key)
                    .is_none_or(|(active, _)| *active != id)
                {
                    return;
                }
                self.faults.active.remove(&key);
                for server in &self.faults.servers {
                    sim.release(client.as_str(), server.as_str());
                }
                sim.release(client.as_str(), storage::HOST);
                self.faults.fault(now, &client, "release", "master", false);
            }
            Step::CutHolder { direction, ms } => {
                // The holder of the moment if it is not cut off already,
                // else any contender that is not.
                let free: Vec<String> = (1..=16)
                    .map(|i| format!("c{i}"))
                    .filter(|c| self.leases.until(c).is_some() && !self.faults.is_cut(c))
                    .collect();
                let client = match self.holder().filter(|h| !self.faults.is_cut(h)) {
                    Some(holder) => holder,
                    None if free.is_empty() => return,
                    None => self.rng.pick(&free).clone(),
                };
                let expect_normal = false;
                let cut = Step::Cut {
                    client,
                    direction,
                    ms,
                    expect_normal,
                };
                self.apply(sim, now, cut);
            }
            Step::AfterGrant {
                client,
                delay,
                edge,
                since,
                published,
                give_up,
            } => {
                let last = self
                    .leases
                    .session(&client)
                    .and_then(|session| self.grants.last(&session));
                match (since, last) {
                    (Some(since), Some(granted)) if granted > since => {
                        let at = (granted + delay).max(now);
                        if let Some(step) = self.edge(client, edge, at, published) {
                            self.faults.push(at, step);
                        }
                    }
                    _ if now >= give_up => {}
                    _ => {
                        let watch = Step::AfterGrant {
                            published: self.leases.until(&client),
                            client,
                            delay,
                            edge,
                            since: Some(since.unwrap_or(last.unwrap_or(0))),
                            give_up,
                        };
                        self.faults.push(now + 1, watch);
                    }
                }
            }
            Step::Watch { client, watched } => self.leases.watch(&client, watched),
            Step::LateRelease { late, give_up } => self.late_release(sim, now, late, give_up),
            Step::AfterRenewal {
                client,
                before,
                give_up,
            } => {
                let until = self.leases.until(&client);
                let renewed = until.is_some() && until != before;
                if renewed || now >= give_up {
                    self.leases.watch(&client, false);
                }
                if renewed {
                    self.short(now, client, now, true);
                } else if now < give_up {
                    let watch = Step::AfterRenewal {
                        client,
                        before,
                        give_up,
                    };
                    self.faults.push(now + 1, watch);
                }
            }
            Step::Short {
                client,
                give_up,
                expect_normal,
            } => self.short(now, client, give_up, expect_normal),
            Step::Flap { client, until } => {
                if now + 300 >= until {
                    return;
                }
                let ms = self.rng.range(200, 1_500);
                let healed = self.rng.range(100, 800);
                let c = client.clone();
                let cut = Step::Cut {
                    client: c,
                    direction: Direction::Both,
                    ms,
                    expect_normal: false,
                };
                self.apply(sim, now, cut);
                self.faults
                    .push(now + ms + healed, Step::Flap { client, until });
            }
        }
    }

    /// The fault `edge` for `client`, beginning at `at`, just after the
    /// master granted it a lease; `published` is its local lease as last
    /// seen before that grant.
    fn edge(
        &mut self,
        client: String,
        edge: Edge,
        at: u64,
        published: Option<u64>,
    ) -> Option<Step> {
        match edge {
            Edge::Cut { direction, ms } => Some(Step::Cut {
                client,
                direction,
                ms,
                expect_normal: false,
            }),
            // The answer's reply is on its way: hold once it has arrived,
            // while the KeepAlive it sets off may still be in flight.
            Edge::Hold => Some(Step::AfterRenewal {
                before: published,
                client,
                give_up: at + 100,
            }),
        }
    }

    /// One phase of `Action::LateRelease`; polls every 5 ms until it can
    /// go on, or gives up.
    fn late_release(&mut self, sim: &mut turmoil::Sim<'_>, now: u64, late: Late, give_up: u64) {
        let again = |late| Step::LateRelease { late, give_up };
        let (lease, grace) = (
            self.settings.lease.as_millis() as u64,
            self.settings.grace.as_millis() as u64,
        );
        match late {
            Late::Holder => {
                let holder = self.holder().filter(|h| {
                    !self.faults.is_cut(h) && !self.faults.active.contains_key(&(h.clone(), "hold"))
                });
                match holder {
                    Some(client) => {
                        for server in &self.faults.servers {
                            sim.hold(client.as_str(), server.as_str());
                        }
                        self.faults.fault(now, &client, "hold", "master", false);
                        self.faults.seq += 1;
                        let id = self.faults.seq;
                        let release = Step::Release {
                            client: client.clone(),
                            id,
                        };
                        self.faults
                            .active
                            .insert((client.clone(), "hold"), (id, release));
                        let next = Step::LateRelease {
                            late: Late::LetGo {
                                client,
                                since: now,
                                id,
                            },
                            // Let go by the end of its local lease at most.
                            give_up: now + lease + grace,
                        };
                        self.faults.push(now + 5, next);
                    }
                    None if now < give_up => self.faults.push(now + 5, again(late)),
                    None => {}
                }
            }
            Late::LetGo { client, since, id } => {
                if !self.holds_hold(&client, id) {
                    return;
                }
                let let_go = self.believed_since(&client, since, false);
                if let_go.is_none() && now < give_up {
                    return self
                        .faults
                        .push(now + 5, again(Late::LetGo { client, since, id }));
                }
                // The release goes out right after the belief ends: let it
                // join the stalled messages, then let new traffic through.
                let sent = let_go.unwrap_or(now) + self.rng.range(20, 200);
                let flow = Step::LateRelease {
                    late: Late::Flow { client, id },
                    give_up: sent + lease + grace,
                };
                self.faults.push(sent.max(now + 5), flow);
            }
            Late::Flow { client, id } => {
                if !self.holds_hold(&client, id) {
                    return;
                }
                // A repair heals a cut too: not while one is in force.
                if self.faults.is_cut(&client) {
                    if now < give_up {
                        return self.faults.push(now + 5, again(Late::Flow { client, id }));
                    }
                    return self.apply(sim, now, Step::Release { client, id });
                }
                for server in &self.faults.servers {
                    sim.repair(client.as_str(), server.as_str());
                }
                // Not a "repair": the held messages still wait, and the
                // hold lasts until its "release".
                self.faults.fault(now, &client, "flow", "master", false);
                let next = Step::LateRelease {
                    late: Late::HeldAgain {
                        client,
                        since: now,
                        id,
                    },
                    give_up,
                };
                self.faults.push(now + 5, next);
            }
            Late::HeldAgain { client, since, id } => {
                if !self.holds_hold(&client, id) {
                    return;
                }
                if self.believed_since(&client, since, true).is_none() && now < give_up {
                    let next = Late::HeldAgain { client, since, id };
                    return self.faults.push(now + 5, again(next));
                }
                // The stalled messages arrive, the release among them.
                self.apply(sim, now, Step::Release { client, id });
            }
        }
    }

    /// Whether the hold `id` is the one in force on `client`'s link.
    fn holds_hold(&self, client: &str, id: u64) -> bool {
        self.faults
            .active
            .get(&(client.to_string(), "hold"))
            .is_some_and(|(active, _)| *active == id)
    }

    /// When, after `since`, `client` last came to believe it holds
    /// something (`holding`), or stopped believing it does.
    fn believed_since(&self, client: &str, since: u64, holding: bool) -> Option<u64> {
        self.faults.trace.read(|entries| {
            entries
                .iter()
                .rev()
                .take_while(|e| e.at >= since)
                .find(|e| {
                    e.who == client
                        && match e.what {
                            What::Holding { .. } => holding,
                            What::Released { .. } => !holding,
                            _ => false,
                        }
                })
                .map(|e| e.at)
        })
    }

    /// A contender that believes it holds something now.
    fn holder(&self) -> Option<String> {
        self.faults.trace.read(|entries| {
            let mut holding: BTreeMap<&str, u32> = BTreeMap::new();
            for e in entries {
                match e.what {
                    What::Holding { .. } => *holding.entry(&e.who).or_default() += 1,
                    What::Released { .. } => *holding.entry(&e.who).or_default() -= 1,
                    _ => {}
                }
            }
            holding
                .into_iter()
                .find(|(_, n)| *n > 0)
                .map(|(who, _)| who.to_string())
        })
    }

    /// Cuts `client` off for less than its local lease has left. Over TCP
    /// a partition that short delays traffic rather than losing it (the
    /// sender retransmits), so it is a hold: everything sent meanwhile
    /// arrives when it heals. turmoil's partitions drop what is in flight
    /// with no retransmission, which is the model for a connection that
    /// dies silently.
    fn short(&mut self, now: u64, client: String, give_up: u64, expect_normal: bool) {
        // A master down or a cut already in force may take the client out
        // of Normal whatever the hold does.
        let expect_normal = expect_normal && !self.hosts.troubled() && !self.faults.is_cut(&client);
        let latency = self.settings.max_latency.as_millis() as u64;
        if let Some(until) = self.leases.until(&client) {
            // The lease is sampled every 50 ms (every step while a fault
            // waits for a renewal), and the answer needs a couple of
            // message latencies to arrive after the heal.
            let heal_by = until.saturating_sub(100 + 4 * latency);
            if heal_by > now + 300 {
                let ms = self.rng.range(200, heal_by - now);
                let hold = Step::Hold {
                    client,
                    ms,
                    expect_normal,
                };
                self.faults.push(now, hold);
                return;
            }
        }
        if now < give_up {
            let short = Step::Short {
                client,
                give_up,
                expect_normal,
            };
            self.faults.push(now + 50, short);
        }
    }
}
