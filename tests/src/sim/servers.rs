//! The servers a run drives faults into, behind one trait: the single
//! master ([`SingleMaster`]) or a cell's members ([`CellServers`]). The
//! driver (`world.rs`) applies the faults of clients and links; each kind
//! of servers carries out the faults only it has (a crashed master, a
//! member isolated, a cell split) and cuts a client off from itself.

use std::collections::BTreeMap;

use leasehold_server::cell::MemoryVolume;

use super::cell::{Registry, Sampler};
use super::disk::Disk;
use super::rng::Rng;
use super::scenario::Direction;
use super::steps::{directed, Faults, Step};
use super::trace::Trace;

/// What the driver needs of the servers, whichever they are.
pub(super) trait Servers {
    /// The step a scheduled crash of the master (at `at`, for `ms`)
    /// becomes; the restart it needs is queued.
    fn crash(&mut self, faults: &mut Faults, at: u64, ms: u64) -> Step;
    /// Cuts `client` off from every server in `direction`.
    fn cut_client(
        &mut self,
        faults: &Faults,
        sim: &mut turmoil::Sim<'_>,
        client: &str,
        direction: Direction,
    );
    /// Heals what `cut_client` cut.
    fn heal_client(
        &mut self,
        faults: &Faults,
        sim: &mut turmoil::Sim<'_>,
        client: &str,
        direction: Direction,
    );
    /// Carries out a step that is the servers' own (a crash, a restart,
    /// a fault among members); steps of other servers do nothing.
    fn apply(&mut self, faults: &mut Faults, sim: &mut turmoil::Sim<'_>, now: u64, step: Step);
    /// Ends every fault of their own still in force: the work is over.
    fn heal_all(&mut self, faults: &mut Faults, sim: &mut turmoil::Sim<'_>, now: u64);
    /// Whether the servers misbehave now.
    fn troubled(&self) -> bool;
    /// Looks at the servers after each step of the simulation.
    fn sample(&mut self, _trace: &Trace, _now: u64) {}
}

/// One master host, on a simulated disk that loses what was not synced
/// when the host crashes.
pub(super) struct SingleMaster {
    pub(super) disk: Disk,
    pub(super) down: bool,
}

impl Servers for SingleMaster {
    fn crash(&mut self, faults: &mut Faults, at: u64, ms: u64) -> Step {
        faults.push(at + ms, Step::Restart);
        Step::Crash
    }

    fn cut_client(
        &mut self,
        _: &Faults,
        sim: &mut turmoil::Sim<'_>,
        client: &str,
        direction: Direction,
    ) {
        match direction {
            Direction::Both => sim.partition(client, "master"),
            Direction::ToMaster => sim.partition_oneway(client, "master"),
            Direction::FromMaster => sim.partition_oneway("master", client),
        }
    }

    fn heal_client(
        &mut self,
        _: &Faults,
        sim: &mut turmoil::Sim<'_>,
        client: &str,
        direction: Direction,
    ) {
        match direction {
            Direction::Both => sim.repair(client, "master"),
            Direction::ToMaster => sim.repair_oneway(client, "master"),
            Direction::FromMaster => sim.repair_oneway("master", client),
        }
    }

    fn apply(&mut self, faults: &mut Faults, sim: &mut turmoil::Sim<'_>, now: u64, step: Step) {
        match step {
            Step::Crash if !self.down => {
                sim.crash("master");
                // At the same instant: the writer's task is gone, and what
                // it had not synced is torn.
                self.disk.crash();
                self.down = true;
                faults.fault(now, "master", "crash", "", false);
            }
            Step::Restart if self.down => {
                sim.bounce("master");
                self.down = false;
                faults.fault(now, "master", "restart", "", false);
            }
            _ => {}
        }
    }

    fn heal_all(&mut self, faults: &mut Faults, sim: &mut turmoil::Sim<'_>, now: u64) {
        if self.down {
            self.apply(faults, sim, now, Step::Restart);
        }
    }

    fn troubled(&self) -> bool {
        self.down
    }
}

/// A cell's members, each on a volume of its own.
pub(super) struct CellServers {
    pub(super) registry: Registry,
    pub(super) volumes: BTreeMap<String, MemoryVolume>,
    /// Members whose host is down, with the id of the crash.
    pub(super) down: BTreeMap<String, u64>,
    /// Directed links cut, with how many faults cut each: a link heals
    /// when the last fault that cut it ends.
    pub(super) links: BTreeMap<(String, String), u32>,
    pub(super) sampler: Sampler,
    pub(super) rng: Rng,
    /// The id of the fault among members in force: one at a time.
    pub(super) fault: Option<u64>,
}

impl Servers for CellServers {
    fn crash(&mut self, _: &mut Faults, _: u64, ms: u64) -> Step {
        Step::CrashMember { master: true, ms }
    }

    fn cut_client(
        &mut self,
        faults: &Faults,
        sim: &mut turmoil::Sim<'_>,
        client: &str,
        direction: Direction,
    ) {
        for server in faults.servers.clone() {
            self.cut_link(sim, client, &server, direction);
        }
    }

    fn heal_client(
        &mut self,
        faults: &Faults,
        sim: &mut turmoil::Sim<'_>,
        client: &str,
        direction: Direction,
    ) {
        for server in faults.servers.clone() {
            for (from, to) in directed(client, &server, direction) {
                self.heal_link(sim, from, to);
            }
        }
    }

    fn apply(&mut self, faults: &mut Faults, sim: &mut turmoil::Sim<'_>, now: u64, step: Step) {
        match step {
            Step::Crash | Step::Restart => {}
            step => self.apply_step(faults, sim, now, step),
        }
    }

    fn heal_all(&mut self, faults: &mut Faults, sim: &mut turmoil::Sim<'_>, now: u64) {
        let down: Vec<(String, u64)> = self.down.iter().map(|(n, id)| (n.clone(), *id)).collect();
        for ((from, to), _) in std::mem::take(&mut self.links) {
            sim.repair_oneway(from.as_str(), to.as_str());
        }
        self.fault = None;
        for (name, id) in down {
            self.apply(faults, sim, now, Step::RestartMember { name, id });
        }
    }

    fn troubled(&self) -> bool {
        self.fault.is_some() || !self.down.is_empty()
    }

    fn sample(&mut self, trace: &Trace, now: u64) {
        self.sampler.sample(&self.registry, trace, now);
    }
}

impl CellServers {
    /// Cuts the link between `a` and `b` of a cell's simulation in
    /// `direction` (`ToMaster`: from `a` to `b`), counting the faults that
    /// cut each way; returns the directed links it cut.
    fn cut_link(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        a: &str,
        b: &str,
        direction: Direction,
    ) -> Vec<(String, String)> {
        let mut cut = Vec::new();
        for (from, to) in directed(a, b, direction) {
            let n = self
                .links
                .entry((from.to_string(), to.to_string()))
                .or_default();
            *n += 1;
            if *n == 1 {
                sim.partition_oneway(from, to);
            }
            cut.push((from.to_string(), to.to_string()));
        }
        cut
    }

    /// Ends one fault's cut of the directed link `from` to `to`.
    fn heal_link(&mut self, sim: &mut turmoil::Sim<'_>, from: &str, to: &str) {
        let key = (from.to_string(), to.to_string());
        let Some(n) = self.links.get_mut(&key) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            self.links.remove(&key);
            sim.repair_oneway(from, to);
        }
    }

    /// Starts a fault among a cell's members, unless one is in force:
    /// its id.
    fn claim_fault(&mut self, faults: &mut Faults) -> Option<u64> {
        if self.fault.is_some() || !self.down.is_empty() {
            return None;
        }
        faults.seq += 1;
        self.fault = Some(faults.seq);
        Some(faults.seq)
    }

    /// Schedules the end of cell fault `id` after `ms`.
    fn end_fault(&mut self, faults: &mut Faults, now: u64, ms: u64, heal: Step) {
        let Step::CellHeal { id, .. } = &heal else {
            unreachable!("a cell fault ends with CellHeal");
        };
        faults
            .active
            .insert(("cell".to_string(), "fault"), (*id, heal.clone()));
        faults.push(now + ms, heal);
    }

    /// Crashes member `name`'s host (its volume keeps what it synced) and
    /// starts it again `ms` later, as fault `id`.
    fn crash_member(
        &mut self,
        faults: &mut Faults,
        sim: &mut turmoil::Sim<'_>,
        now: u64,
        name: String,
        id: u64,
        ms: u64,
    ) {
        sim.crash(name.as_str());
        let rng = &mut self.rng;
        self.volumes[&name].crash(|unsynced| rng.range(0, unsynced as u64 + 1) as usize);
        self.registry.crashed(&name);
        self.down.insert(name.clone(), id);
        faults.fault(now, &name, "crash", "", false);
        faults.push(now + ms, Step::RestartMember { name, id });
    }

    /// The running members, the master first if there is one.
    fn running(&self, faults: &Faults) -> (Option<String>, Vec<String>) {
        let leader = self.registry.leader();
        let others = faults
            .servers
            .iter()
            .filter(|s| !self.down.contains_key(*s) && Some(*s) != leader.as_ref())
            .cloned()
            .collect();
        (leader, others)
    }

    fn apply_step(
        &mut self,
        faults: &mut Faults,
        sim: &mut turmoil::Sim<'_>,
        now: u64,
        step: Step,
    ) {
        match step {
            Step::CrashMember { master, ms } => {
                let Some(id) = self.claim_fault(faults) else {
                    return;
                };
                let (leader, others) = self.running(faults);
                self.fault = None;
                let name = match (master, leader) {
                    (true, Some(leader)) => leader,
                    _ if others.is_empty() => return,
                    _ => self.rng.pick(&others).clone(),
                };
                self.crash_member(faults, sim, now, name, id, ms);
            }
            Step::RestartMember { name, id } => {
                if self.down.get(&name) != Some(&id) {
                    return;
                }
                self.down.remove(&name);
                sim.bounce(name.as_str());
                faults.fault(now, &name, "restart", "", false);
            }
            Step::Isolate {
                ms,
                reachable,
                bounce,
            } => {
                let (Some(master), others) = self.running(faults) else {
                    return;
                };
                let Some(id) = self.claim_fault(faults) else {
                    return;
                };
                // The follower cut off last, as it crashes; its links are
                // healed with the others'.
                let last = match bounce {
                    Some(_) if !others.is_empty() => Some(self.rng.pick(&others).clone()),
                    _ => None,
                };
                let mut links = Vec::new();
                for other in &others {
                    if Some(other) == last.as_ref() {
                        for (from, to) in directed(&master, other, Direction::Both) {
                            links.push((from.to_string(), to.to_string()));
                        }
                    } else {
                        links.extend(self.cut_link(sim, &master, other, Direction::Both));
                    }
                }
                for client in faults.clients.clone() {
                    if !reachable.contains(&client) {
                        links.extend(self.cut_link(sim, &master, &client, Direction::Both));
                    }
                }
                faults.fault(now, &master, "partition", "members", false);
                if let (Some(bounce), Some(follower)) = (bounce, last) {
                    let step = Step::CutAndBounce {
                        id,
                        master: master.clone(),
                        follower,
                        down: bounce.down,
                    };
                    faults.push(now + bounce.after, step);
                }
                let heal = Step::CellHeal {
                    id,
                    links,
                    clients: Vec::new(),
                    who: vec![master],
                };
                self.end_fault(faults, now, ms, heal);
            }
            Step::CutAndBounce {
                id,
                master,
                follower,
                down,
            } => {
                if self.fault != Some(id) || self.down.contains_key(&follower) {
                    return;
                }
                self.cut_link(sim, &master, &follower, Direction::Both);
                self.crash_member(faults, sim, now, follower, id, down);
            }
            Step::CrashWhileJoint {
                until,
                ms,
                at_end,
                seen,
            } => {
                let leader = self.registry.leader();
                let joint = leader.as_deref().is_some_and(|l| self.registry.joint(l));
                if joint != at_end && (seen || !at_end) {
                    self.apply_step(faults, sim, now, Step::CrashMember { master: true, ms });
                } else if now < until {
                    let seen = seen || joint;
                    let again = Step::CrashWhileJoint {
                        until,
                        ms,
                        at_end,
                        seen,
                    };
                    faults.push(now + 1, again);
                }
            }
            Step::DeafFollower { ms } => {
                let (Some(master), others) = self.running(faults) else {
                    return;
                };
                if others.is_empty() {
                    return;
                }
                let Some(id) = self.claim_fault(faults) else {
                    return;
                };
                let follower = self.rng.pick(&others).clone();
                let links = self.cut_link(sim, &master, &follower, Direction::ToMaster);
                faults.fault(now, &follower, "partition-from", &master, false);
                let heal = Step::CellHeal {
                    id,
                    links,
                    clients: Vec::new(),
                    who: vec![follower],
                };
                self.end_fault(faults, now, ms, heal);
            }
            Step::Split {
                master_in_minority,
                ms,
                minority_clients,
            } => {
                let (leader, mut others) = self.running(faults);
                if leader.is_none() || others.len() + 1 < faults.servers.len() {
                    return;
                }
                let Some(id) = self.claim_fault(faults) else {
                    return;
                };
                let leader = leader.expect("checked");
                let size = (faults.servers.len() - 1) / 2;
                self.rng.shuffle(&mut others);
                let mut minority = Vec::new();
                if master_in_minority {
                    minority.push(leader.clone());
                }
                while minority.len() < size {
                    minority.push(others.remove(0));
                }
                let majority: Vec<String> = faults
                    .servers
                    .iter()
                    .filter(|s| !minority.contains(s))
                    .cloned()
                    .collect();
                let mut links = Vec::new();
                for a in &minority {
                    for b in &majority {
                        links.extend(self.cut_link(sim, a, b, Direction::Both));
                    }
                }
                for client in faults.clients.clone() {
                    let cut_from = if minority_clients.contains(&client) {
                        // Its side has no quorum: it is cut off from the
                        // cell.
                        faults.fault(now, &client, "partition", "cell", false);
                        &majority
                    } else {
                        &minority
                    };
                    for server in cut_from.clone() {
                        links.extend(self.cut_link(sim, &client, &server, Direction::Both));
                    }
                }
                for member in &minority {
                    faults.fault(now, member, "partition", "majority", false);
                }
                let heal = Step::CellHeal {
                    id,
                    links,
                    clients: minority_clients,
                    who: minority,
                };
                self.end_fault(faults, now, ms, heal);
            }
            Step::FlapPeers { until, id } => {
                let id = match id {
                    Some(id) => id,
                    None => match self.claim_fault(faults) {
                        Some(id) => {
                            let heal = Step::CellHeal {
                                id,
                                links: Vec::new(),
                                clients: Vec::new(),
                                who: Vec::new(),
                            };
                            faults
                                .active
                                .insert(("cell".to_string(), "fault"), (id, heal));
                            id
                        }
                        None => return,
                    },
                };
                if self.fault != Some(id) {
                    return;
                }
                if now + 300 >= until {
                    self.fault = None;
                    faults.active.remove(&("cell".to_string(), "fault"));
                    return;
                }
                let mut pair = faults.servers.clone();
                self.rng.shuffle(&mut pair);
                let (a, b) = (pair[0].clone(), pair[1].clone());
                let ms = self.rng.range(200, 1_500);
                let healed = self.rng.range(100, 800);
                self.cut_link(sim, &a, &b, Direction::Both);
                faults.fault(now, &a, "partition", &b, false);
                faults.push(now + ms, Step::PeerHeal { a, b });
                let next = Step::FlapPeers {
                    until,
                    id: Some(id),
                };
                faults.push(now + ms + healed, next);
            }
            Step::PeerHeal { a, b } => {
                if !self.links.contains_key(&(a.clone(), b.clone())) {
                    return;
                }
                self.heal_link(sim, &a, &b);
                self.heal_link(sim, &b, &a);
                faults.fault(now, &a, "repair", &b, false);
            }
            Step::CellHeal {
                id,
                links,
                clients,
                who,
            } => {
                if self.fault != Some(id) {
                    return;
                }
                self.fault = None;
                faults.active.remove(&("cell".to_string(), "fault"));
                for (from, to) in links {
                    self.heal_link(sim, &from, &to);
                }
                for client in clients {
                    faults.fault(now, &client, "repair", "cell", false);
                }
                for member in who {
                    faults.fault(now, &member, "repair", "", false);
                }
            }
            _ => unreachable!("not a cell's step"),
        }
    }
}
