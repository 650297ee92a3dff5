//! One run: a master host, a storage host and the clients of a scenario on
//! turmoil's network, in virtual time, with the scenario's faults applied
//! as the run goes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_server::{Config, IdSource, MemoryStore};

use super::app::{self, Ctx, Leases, Role};
use super::net::SimListener;
use super::rng::Rng;
use super::scenario::{Action, Direction, Planner, Scenario};
use super::storage;
use super::trace::{Entry, Trace, What};

/// How a run is set up. The defaults are the product's safe use; the
/// `ignore_jeopardy`, `fencing` and `lock_delay` knobs exist to break it on
/// purpose and see the checkers fire.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Contending clients; `None`: the scenario's own number.
    pub contenders: Option<usize>,
    pub lease: Duration,
    pub grace: Duration,
    pub lock_delay: Duration,
    pub semaphore_limit: u32,
    /// Contenders keep believing they hold their lock in jeopardy.
    pub ignore_jeopardy: bool,
    /// The storage host checks sequencers.
    pub fencing: bool,
    /// How long the clients work; faults happen inside it.
    pub work: Duration,
    /// After the work, how long the watcher keeps listening before the
    /// final reads.
    pub drain: Duration,
    pub max_latency: Duration,
    /// Virtual time per simulation step: the resolution of every timer.
    pub tick: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            contenders: None,
            lease: Duration::from_secs(4),
            grace: Duration::from_secs(6),
            lock_delay: Duration::from_secs(2),
            semaphore_limit: 2,
            ignore_jeopardy: false,
            fencing: true,
            work: Duration::from_secs(40),
            drain: Duration::from_secs(8),
            max_latency: Duration::from_millis(10),
            tick: Duration::from_millis(5),
        }
    }
}

/// What a run produced.
#[derive(Debug)]
pub struct Run {
    pub scenario: &'static str,
    pub seed: u64,
    pub settings: Settings,
    pub contenders: usize,
    pub entries: Vec<Entry>,
    /// Why the simulation itself failed (a host's error, or time ran out).
    pub error: Option<String>,
    /// Virtual milliseconds the run took.
    pub end: u64,
}

/// A fault as the driver applies it.
#[derive(Debug, Clone)]
enum Step {
    Cut {
        client: String,
        direction: Direction,
        expect_normal: bool,
    },
    Heal {
        client: String,
        direction: Direction,
    },
    Hold {
        client: String,
        expect_normal: bool,
    },
    Release(String),
    Crash,
    Restart,
    /// Wait for the moment after a KeepAlive reply, then cut briefly.
    Short {
        client: String,
        give_up: u64,
        expect_normal: bool,
    },
    Flap {
        client: String,
        until: u64,
    },
    CutHolder {
        direction: Direction,
        ms: u64,
    },
}

fn names(direction: Direction) -> (&'static str, &'static str) {
    match direction {
        Direction::Both => ("partition", "repair"),
        Direction::ToMaster => ("partition-to-master", "repair-to-master"),
        Direction::FromMaster => ("partition-from-master", "repair-from-master"),
    }
}

/// Runs `scenario` with `seed`.
pub fn run(scenario: &'static Scenario, seed: u64, settings: Settings) -> Run {
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
    };
    (scenario.plan)(&mut planner);

    let work = settings.work.as_millis() as u64;
    let listen_until = work + settings.drain.as_millis() as u64;
    let trace = Trace::default();
    let leases = Leases::default();
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(Duration::from_millis(listen_until + 60_000))
        .max_message_latency(settings.max_latency)
        .tick_duration(settings.tick)
        .build();

    let store = MemoryStore::default();
    let starts = Arc::new(AtomicU64::new(0));
    sim.host("master", move || {
        let store = store.clone();
        // A restarted master must not hand out the ids of the first.
        let start = starts.fetch_add(1, Ordering::Relaxed);
        async move {
            let listener = SimListener::bind().await?;
            let config = Config {
                ids: IdSource::Seeded(seed ^ (start << 48)),
                memory_store: Some(store),
                ..Config::default()
            };
            leasehold_server::run(listener, config, std::future::pending()).await?;
            Ok(())
        }
    });
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

    let mut driver = Driver {
        queue: BTreeMap::new(),
        seq: 0,
        rng: rng.fork(4),
        trace: trace.clone(),
        leases,
        settings: settings.clone(),
        active: BTreeMap::new(),
        master_down: false,
    };
    for (at, action) in planner.actions {
        driver.schedule(at, action);
    }
    driver.push(work, Step::Restart);

    let mut error = None;
    loop {
        let now = sim.elapsed().as_millis() as u64;
        driver.apply_due(&mut sim, now, work);
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    Run {
        scenario: scenario.name,
        seed,
        settings,
        contenders,
        entries: trace.entries(),
        error,
        end: sim.elapsed().as_millis() as u64,
    }
}

struct Driver {
    queue: BTreeMap<(u64, u64), Step>,
    seq: u64,
    rng: Rng,
    trace: Trace,
    leases: Leases,
    settings: Settings,
    /// Faults in force, by client and kind, so the end of the work can
    /// repair each of them by name.
    active: BTreeMap<(String, &'static str), Step>,
    master_down: bool,
}

impl Driver {
    fn push(&mut self, at: u64, step: Step) {
        self.seq += 1;
        self.queue.insert((at, self.seq), step);
    }

    fn schedule(&mut self, at: u64, action: Action) {
        match action {
            Action::Partition {
                client,
                direction,
                ms,
            } => {
                let cut = Step::Cut {
                    client: client.clone(),
                    direction,
                    expect_normal: false,
                };
                self.push(at, cut);
                self.push(at + ms, Step::Heal { client, direction });
            }
            Action::ShortPartition {
                client,
                expect_normal,
            } => {
                let give_up = at + self.settings.lease.as_millis() as u64;
                let short = Step::Short {
                    client,
                    give_up,
                    expect_normal,
                };
                self.push(at, short);
            }
            Action::Hold { client, ms } => {
                let expect_normal = false;
                let c = client.clone();
                self.push(
                    at,
                    Step::Hold {
                        client: c,
                        expect_normal,
                    },
                );
                self.push(at + ms, Step::Release(client));
            }
            Action::PartitionHolder { direction, ms } => {
                self.push(at, Step::CutHolder { direction, ms })
            }
            Action::Flap { client, ms } => self.push(
                at,
                Step::Flap {
                    client,
                    until: at + ms,
                },
            ),
            Action::Crash { ms } => {
                self.push(at, Step::Crash);
                self.push(at + ms, Step::Restart);
            }
        }
    }

    fn fault(&self, at: u64, who: &str, fault: &str, peer: &str, expect_normal: bool) {
        let what = What::Fault {
            fault: fault.into(),
            peer: peer.into(),
            expect_normal,
        };
        self.trace.push_at(at, who, what);
    }

    /// Applies every step due by `now`; at `work` every fault still in
    /// force is repaired so the run can end healthy.
    fn apply_due(&mut self, sim: &mut turmoil::Sim<'_>, now: u64, work: u64) {
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > now {
                return;
            }
            let step = entry.remove();
            if now >= work {
                self.heal_all(sim, now);
                // Faults scheduled past the work are dropped.
                if !matches!(step, Step::Heal { .. } | Step::Release(_) | Step::Restart) {
                    continue;
                }
            }
            self.apply(sim, now, step);
        }
    }

    fn heal_all(&mut self, sim: &mut turmoil::Sim<'_>, now: u64) {
        let active: Vec<_> = self
            .active
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        // Each repair takes its fault out of `active`.
        for ((client, _), step) in active {
            match step {
                Step::Cut { direction, .. } => {
                    self.apply(sim, now, Step::Heal { client, direction })
                }
                Step::Hold { .. } => self.apply(sim, now, Step::Release(client)),
                _ => {}
            }
        }
        if self.master_down {
            self.apply(sim, now, Step::Restart);
        }
    }

    fn apply(&mut self, sim: &mut turmoil::Sim<'_>, now: u64, step: Step) {
        match step.clone() {
            Step::Cut {
                client,
                direction,
                expect_normal,
            } => {
                let key = (client.clone(), "cut");
                if self.active.contains_key(&key) {
                    return;
                }
                match direction {
                    Direction::Both => sim.partition(client.as_str(), "master"),
                    Direction::ToMaster => sim.partition_oneway(client.as_str(), "master"),
                    Direction::FromMaster => sim.partition_oneway("master", client.as_str()),
                }
                self.fault(now, &client, names(direction).0, "master", expect_normal);
                self.active.insert(key, step);
            }
            Step::Heal { client, direction } => {
                if self.active.remove(&(client.clone(), "cut")).is_none() {
                    return;
                }
                match direction {
                    Direction::Both => sim.repair(client.as_str(), "master"),
                    Direction::ToMaster => sim.repair_oneway(client.as_str(), "master"),
                    Direction::FromMaster => sim.repair_oneway("master", client.as_str()),
                }
                self.fault(now, &client, names(direction).1, "master", false);
            }
            Step::Hold {
                client,
                expect_normal,
            } => {
                let key = (client.clone(), "hold");
                if self.active.contains_key(&key) {
                    return;
                }
                sim.hold(client.as_str(), "master");
                sim.hold(client.as_str(), storage::HOST);
                self.fault(now, &client, "hold", "master", expect_normal);
                self.active.insert(key, step);
            }
            Step::Release(client) => {
                if self.active.remove(&(client.clone(), "hold")).is_none() {
                    return;
                }
                sim.release(client.as_str(), "master");
                sim.release(client.as_str(), storage::HOST);
                self.fault(now, &client, "release", "master", false);
            }
            Step::Crash => {
                if !self.master_down {
                    sim.crash("master");
                    self.master_down = true;
                    self.fault(now, "master", "crash", "", false);
                }
            }
            Step::Restart => {
                if self.master_down {
                    sim.bounce("master");
                    self.master_down = false;
                    self.fault(now, "master", "restart", "", false);
                }
            }
            Step::CutHolder { direction, ms } => {
                let client = self.holder().unwrap_or_else(|| "c1".to_string());
                let c = client.clone();
                let expect_normal = false;
                self.apply(
                    sim,
                    now,
                    Step::Cut {
                        client: c,
                        direction,
                        expect_normal,
                    },
                );
                self.push(now + ms, Step::Heal { client, direction });
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
                let cut = self.rng.range(200, 1_500);
                let healed = self.rng.range(100, 800);
                let direction = Direction::Both;
                let expect_normal = false;
                let c = client.clone();
                self.apply(
                    sim,
                    now,
                    Step::Cut {
                        client: c,
                        direction,
                        expect_normal,
                    },
                );
                let c = client.clone();
                self.push(
                    now + cut,
                    Step::Heal {
                        client: c,
                        direction,
                    },
                );
                self.push(now + cut + healed, Step::Flap { client, until });
            }
        }
    }

    /// A contender that believes it holds something now.
    fn holder(&self) -> Option<String> {
        let mut holding: BTreeMap<String, u32> = BTreeMap::new();
        for e in self.trace.entries() {
            match e.what {
                What::Holding { .. } => *holding.entry(e.who).or_default() += 1,
                What::Released { .. } => *holding.entry(e.who).or_default() -= 1,
                _ => {}
            }
        }
        holding
            .into_iter()
            .find(|(_, n)| *n > 0)
            .map(|(who, _)| who)
    }

    /// Cuts `client` off for less than its local lease has left. Over TCP
    /// a partition that short delays traffic rather than losing it (the
    /// sender retransmits), so it is a hold: everything sent meanwhile
    /// arrives when it heals. turmoil's partitions drop what is in flight
    /// with no retransmission, which is the model for a connection that
    /// dies silently.
    fn short(&mut self, now: u64, client: String, give_up: u64, expect_normal: bool) {
        let latency = self.settings.max_latency.as_millis() as u64;
        if let Some(view) = self.leases.get(&client) {
            // The lease view is sampled every 50 ms; the answer needs a
            // couple of message latencies to arrive after the heal.
            let heal_by = view.until.saturating_sub(100 + 4 * latency);
            if heal_by > now + 300 {
                let ms = self.rng.range(200, heal_by - now);
                let c = client.clone();
                self.push(
                    now,
                    Step::Hold {
                        client: c,
                        expect_normal,
                    },
                );
                self.push(now + ms, Step::Release(client));
                return;
            }
        }
        if now < give_up {
            let short = Step::Short {
                client,
                give_up,
                expect_normal,
            };
            self.push(now + 50, short);
        }
    }
}
