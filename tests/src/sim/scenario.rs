//! The scenario catalogue: each a named schedule of faults, drawn from the
//! run's seed, against a set of contending clients plus two writers and a
//! watcher.

use std::time::Duration;

use super::admin::Scheduled;
use super::app::Role;
use super::record::Settings;
use super::rng::Rng;

/// Which way a partition cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Both,
    /// Only the client's messages to the master are dropped.
    ToMaster,
    /// Only the master's messages to the client are dropped.
    FromMaster,
}

/// A fault, as a scenario schedules it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Cut `client` off from the master for `ms`.
    Partition {
        client: String,
        direction: Direction,
        ms: u64,
    },
    /// Cut off whichever contender then holds the lock (or leads, or has a
    /// slot), else a random one: the case fencing and lock-delay exist for.
    PartitionHolder { direction: Direction, ms: u64 },
    /// Cut `client` off from the master and storage for less than its
    /// local lease has left: the client must stay Normal. Traffic is
    /// delayed, not lost, as TCP's retransmission makes it.
    ShortPartition { client: String, expect_normal: bool },
    /// Hold every message between `client` and the master and storage for
    /// `ms`, then deliver them all, late.
    Hold { client: String, ms: u64 },
    /// Cut and heal `client`'s link in quick succession for `ms`.
    Flap { client: String, ms: u64 },
    /// Crash the master and start it again `ms` later. In a cell: the
    /// member that leads it then.
    Crash { ms: u64 },
    /// In a cell: crash a member that does not lead it, and start it
    /// again `ms` later.
    CrashFollower { ms: u64 },
    /// In a cell: cut the master off from every other member, and from
    /// every client but `reachable`, for `ms`. With `bounce`, one
    /// follower still hears the master at first (the others, cut off,
    /// stand for election again and again); `after` ms later it is cut
    /// off too as it crashes, and it starts again `down` ms after that,
    /// inside the lease it promised the master before it went down.
    IsolateMaster {
        ms: u64,
        reachable: Vec<String>,
        bounce: Option<Bounce>,
    },
    /// In a cell: split the members in two for `ms`, the master in the
    /// minority or the majority; `minority_clients` reach only the
    /// minority, every other client only the majority.
    SplitCell {
        master_in_minority: bool,
        ms: u64,
        minority_clients: Vec<String>,
    },
    /// In a cell: cut and heal links between members, one at a time, in
    /// quick succession for `ms`.
    FlapPeers { ms: u64 },
    /// In a cell: crash the master the moment its membership turns joint
    /// (a change begun), or with `at_end` the moment it stops being joint
    /// (the change's second half appended, some followers not yet told),
    /// looking until `within` ms have passed; start it again `ms` later.
    CrashWhileJoint { within: u64, ms: u64, at_end: bool },
    /// In a cell: drop the master's messages to one follower for `ms`,
    /// the follower's to the master still arriving. The follower hears no
    /// heartbeat and stands for election; its request reaches the master,
    /// which, leading for longer than its engine's leader lease, may grant
    /// it.
    DeafFollower { ms: u64 },
    /// Once the master next grants `client`'s session a lease (answers
    /// its KeepAlive), wait `delay`, then `edge`: a fault timed to a phase
    /// of the KeepAlive cycle.
    AfterGrant {
        client: String,
        delay: u64,
        edge: Edge,
    },
    /// Stall the link of whichever contender then holds the lock (waiting
    /// for one): its messages to and from the master wait, the release it
    /// sends as it lets the lock go among them. Once it has let go, new
    /// traffic flows again while the stalled messages still wait, so the
    /// client reconnects; once it holds the lock again (its session, still
    /// holding it at the master, is told so, `LOCK-2`), or after a lease
    /// and a grace period, the stalled messages arrive, the release last
    /// (`LOCK-4`).
    LateRelease,
    /// Hold `client`'s traffic for `hold`, then cut its messages to the
    /// master off for `ms` from `delay` after the held messages are let
    /// go: the stale reply arrives, the KeepAlive it sets off is lost.
    StaleThenLost {
        client: String,
        hold: u64,
        delay: u64,
        ms: u64,
    },
}

/// The follower of an [`Action::IsolateMaster`] that is cut off last, as
/// it crashes: `after` ms into the cut, down for `down` ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounce {
    pub after: u64,
    pub down: u64,
}

/// A fault timed to the master's answer of a KeepAlive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    /// Cut the client off for `ms`. Soon after the answer and `ToMaster`,
    /// the KeepAlive the answer sets off is lost.
    Cut { direction: Direction, ms: u64 },
    /// Hold the client's traffic for less than its local lease has left,
    /// catching the KeepAlive the answer sets off on its way: a request
    /// delayed on its way to the master (`KA-9`). The client must stay
    /// Normal.
    Hold,
}

/// What a scenario's plan function gets and fills in.
pub struct Planner {
    pub rng: Rng,
    pub settings: Settings,
    /// The hosts contending for the lock, election or semaphore.
    pub contenders: Vec<String>,
    /// The writers and the watcher.
    pub bystanders: Vec<String>,
    pub actions: Vec<(u64, Action)>,
    /// Of a cell's members, how many (the last) start waiting to be
    /// added (`join`) rather than as founding voters.
    pub spare: usize,
    /// Membership changes the operator makes.
    pub admin: Vec<Scheduled>,
    /// Every member's task notices this many ms late that its member no
    /// longer leads, as on a loaded machine (`BrokenRules::slow_step_down`).
    pub slow_step_down: Option<u64>,
}

impl Planner {
    pub fn lease(&self) -> u64 {
        self.settings.lease.as_millis() as u64
    }

    pub fn grace(&self) -> u64 {
        self.settings.grace.as_millis() as u64
    }

    /// Virtual milliseconds of work; faults end before it does.
    pub fn work(&self) -> u64 {
        self.settings.work.as_millis() as u64
    }

    pub fn add(&mut self, at: u64, action: Action) {
        self.actions.push((at, action));
    }

    /// A random start for a fault of `ms` that ends well before the work
    /// does.
    fn start_for(&mut self, ms: u64) -> u64 {
        let latest = self.work().saturating_sub(ms + 3_000).max(3_001);
        self.rng.range(3_000, latest)
    }

    /// Cuts each contender with probability `p` (at least one) for a
    /// duration in `lo..hi`.
    fn some_partitions(&mut self, p: f64, direction: Direction, lo: u64, hi: u64) {
        let mut chosen: Vec<String> = Vec::new();
        for client in self.contenders.clone() {
            if self.rng.chance(p) {
                chosen.push(client);
            }
        }
        if chosen.is_empty() {
            chosen.push(self.rng.pick(&self.contenders).clone());
        }
        for client in chosen {
            let ms = self.rng.range(lo, hi);
            let at = self.start_for(ms);
            self.add(
                at,
                Action::Partition {
                    client,
                    direction,
                    ms,
                },
            );
        }
    }

    /// Cuts off the holder of the moment, once, for `lo..hi`.
    fn holder_partition(&mut self, lo: u64, hi: u64) {
        let ms = self.rng.range(lo, hi);
        let at = self.start_for(ms);
        let direction = Direction::Both;
        self.add(at, Action::PartitionHolder { direction, ms });
    }

    /// One client's faults timed to the lease's edges, one after another:
    /// a cut toward the master just after a KeepAlive reply, a one-way or
    /// two-way cut at any phase of the KeepAlive cycle, a hold that
    /// delays the KeepAlive a reply sets off, a stale reply followed by a
    /// lost KeepAlive.
    fn edge_faults(&mut self, client: &str) {
        let (lease, grace) = (self.lease(), self.grace());
        let mut at = self.rng.range(2_000, 6_000);
        while at + 4_000 < self.work() {
            let client = client.to_string();
            let ms = self.rng.range(lease / 2, lease + grace + 2_000);
            let (action, took) = match self.rng.range(0, 4) {
                0 => {
                    let delay = self.rng.range(0, 20);
                    let direction = Direction::ToMaster;
                    let edge = Edge::Cut { direction, ms };
                    let cut = Action::AfterGrant {
                        client,
                        delay,
                        edge,
                    };
                    (cut, lease + ms)
                }
                1 => {
                    let delay = self.rng.range(0, lease);
                    let directions = [Direction::ToMaster, Direction::FromMaster, Direction::Both];
                    let direction = *self.rng.pick(&directions);
                    let edge = Edge::Cut { direction, ms };
                    let cut = Action::AfterGrant {
                        client,
                        delay,
                        edge,
                    };
                    (cut, lease + delay + ms)
                }
                2 => {
                    let delay = self.rng.range(0, 15);
                    let edge = Edge::Hold;
                    let hold = Action::AfterGrant {
                        client,
                        delay,
                        edge,
                    };
                    (hold, 2 * lease)
                }
                _ => {
                    let hold = self.rng.range(200, lease);
                    let delay = self.rng.range(1, 30);
                    let stale = Action::StaleThenLost {
                        client,
                        hold,
                        delay,
                        ms,
                    };
                    (stale, hold + delay + ms)
                }
            };
            self.add(at, action);
            at += took + self.rng.range(1_000, 5_000);
        }
    }

    /// One client's faults, one after another, of every kind.
    fn random_faults(&mut self, client: &str) {
        let (lease, grace) = (self.lease(), self.grace());
        let mut at = self.rng.range(1_000, 6_000);
        while at + 4_000 < self.work() {
            let client = client.to_string();
            let ms = self.rng.range(300, lease + grace + 3_000);
            let (action, took) = match self.rng.range(0, 6) {
                // A connection an earlier fault left stalled may still put
                // the client in jeopardy: no promise of Normal here.
                0 => (
                    Action::ShortPartition {
                        client,
                        expect_normal: false,
                    },
                    lease,
                ),
                1 => (Action::Hold { client, ms }, ms),
                2 => (Action::Flap { client, ms }, ms),
                n => {
                    let direction = [Direction::Both, Direction::ToMaster, Direction::FromMaster]
                        [n as usize - 3];
                    let action = Action::Partition {
                        client,
                        direction,
                        ms,
                    };
                    (action, ms)
                }
            };
            self.add(at, action);
            at += took + self.rng.range(1_000, 8_000);
        }
    }
}

/// A named, documented schedule of faults.
pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    /// What the contenders do; `None` mixes locks, elections and semaphores.
    pub role: Option<Role>,
    pub contenders: usize,
    /// Every session's lock-delay, unless the settings name one.
    pub lock_delay: Duration,
    /// Members of a replicated cell; 0: a single master.
    pub members: usize,
    /// An operator changes what a snooping client may read throughout
    /// (`rules.rs`).
    pub access: bool,
    /// The writers pause for one to four seconds after each call: the
    /// log grows seldom, so a follower cut off for a moment can be as up
    /// to date as its master. Their caches then serve too seldom to
    /// judge.
    pub quiet: bool,
    pub plan: fn(&mut Planner),
}

/// The lock-delay of most scenarios.
pub const LOCK_DELAY: Duration = Duration::from_secs(2);

impl Scenario {
    /// Whether a run of this scenario gives the check `invariant` something
    /// to judge, so that a run in which it judged nothing is a test that
    /// could not fail. What a scenario runs says which: a single master has
    /// no replicas to compare and no members to change; semaphore slots
    /// carry no sequencer to fence writes with; clients that only read and
    /// write hold no lock and wait for none.
    pub fn expects(&self, invariant: &str) -> bool {
        use super::check::{access, cache, exclusion, fencing, members, replicas, waits};
        let locks = self.role.is_none_or(|role| {
            matches!(role, Role::Locker | Role::Elector | Role::SemaphoreHolder)
        });
        match invariant {
            replicas::NAME | members::NAME => self.members > 0,
            cache::NAME => !self.quiet,
            access::NAME => self.access,
            fencing::NAME => locks && self.role != Some(Role::SemaphoreHolder),
            exclusion::NAME | waits::NAME => locks,
            _ => true,
        }
    }

    /// The role of contender number `i`. A mix has more semaphore holders
    /// than slots, so the semaphore can be oversubscribed.
    pub fn role_of(&self, i: usize) -> Role {
        let mix = [
            Role::Locker,
            Role::SemaphoreHolder,
            Role::Elector,
            Role::SemaphoreHolder,
        ];
        self.role.unwrap_or(mix[i % mix.len()])
    }
}

pub static SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "short-partition",
        about: "contenders cut off for less than their local lease has left (traffic delayed, as over TCP): they must stay Normal",
        role: Some(Role::Locker),
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 0,
        access: false,
        quiet: false,
        plan: |p| {
            for client in p.contenders.clone() {
                let mut at = p.rng.range(2_000, 5_000);
                while at + 3_000 < p.work() {
                    let short = Action::ShortPartition {
                        client: client.clone(),
                        expect_normal: true,
                    };
                    p.add(at, short);
                    at += p.rng.range(p.lease(), 2 * p.lease());
                }
            }
        },
    },
    Scenario {
        name: "jeopardy-partition",
        about: "contenders cut off for longer than their local lease but less than the grace period: jeopardy, then safe",
        role: Some(Role::Locker),
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 0,
        access: false,
        quiet: false,
        plan: |p| {
            let (lease, grace) = (p.lease(), p.grace());
            p.some_partitions(0.5, Direction::Both, lease + 500, lease + grace - 1_500);
            p.holder_partition(lease + 500, lease + grace - 1_500);
        },
    },
    Scenario {
        name: "long-partition",
        about: "contenders cut off for longer than lease plus grace: the session expires and the lock passes on",
        role: Some(Role::Locker),
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 0,
        access: false,
        quiet: false,
        plan: |p| {
            let (lease, grace) = (p.lease(), p.grace());
            p.some_partitions(0.4, Direction::Both, lease + grace + 1_000, lease + grace + 4_000);
            p.holder_partition(lease + grace + 1_000, lease + grace + 4_000);
        },
    },
    Scenario {
        name: "partition-to-master",
        about: "one-way partitions: the contender's messages to the master are dropped, the master's still arrive",
        role: Some(Role::Locker),
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 0,
        access: false,
        quiet: false,
        plan: |p| {
            let (lease, grace) = (p.lease(), p.grace());
            p.some_partitions(0.6, Direction::ToMaster, lease / 2, lease + grace + 2_000);
        },
    },
    Scenario {
        name: "partition-from-master",
        about: "one-way partitions: the master's messages to the contender are dropped, the contender's still arrive",
        role: Some(Role::Locker),
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 0,
        access: false,
        quiet: false,
        plan: |p| {
            let (lease, grace) = (p.lease(), p.grace());
            p.some_partitions(0.6, Direction::FromMaster, lease / 2, lease + grace + 2_000);
        },
    },
    Scenario {
        name: "stale-replies",
        about: "messages between a contender and the master and storage held, then delivered late: stale replies and late writes",
        role: Some(Role::Locker),
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 0,
        access: false,
        quiet: false,
        plan: |p| {
            let (lease, grace) = (p.lease(), p.grace());
            for client in p.contenders.clone() {
                for _ in 0..2 {
                    let ms = p.rng.range(500, lease + grace);
                    let at = p.start_for(ms);
                    p.add(at, Action::Hold { client: client.clone(), ms });
                }
            }
        },
    },
    Scenario {
        name: "flapping",
        about: "a contender's link cut and healed every few hundred milliseconds for several seconds",
        role: Some(Role::Locker),
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 0,
        access: false,
        quiet: false,
        plan: |p| {
            for client in p.contenders.clone().into_iter().take(2) {
                let ms = p.rng.range(8_000, 15_000);
                let at = p.start_for(ms);
                p.add(at, Action::Flap { client, ms });
            }
        },
    },
    Scenario {
        name: "master-restart-quick",
        about: "the master crashes twice and is back within half a lease: sessions and locks survive (Failover)",
        role: Some(Role::Locker),
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 0,
        access: false,
        quiet: false,
        plan: |p| {
            let down = p.lease() / 2;
            two_crashes(p, down);
        },
    },
    Scenario {
        name: "master-restart-slow",
        about: "the master crashes and is down for longer than the lease, within the grace period: jeopardy, then safe",
        role: Some(Role::Locker),
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 0,
        access: false,
        quiet: false,
        plan: |p| {
            let ms = p.lease() + p.rng.range(500, p.grace() - 2_000);
            let at = p.start_for(ms);
            p.add(at, Action::Crash { ms });
        },
    },
    Scenario {
        name: "lock-contention",
        about: "many contenders for one exclusive lock, some of them cut off for a while",
        role: Some(Role::Locker),
        contenders: 8,
        lock_delay: LOCK_DELAY,
        members: 0,
        access: false,
        quiet: false,
        plan: contended,
    },
    Scenario {
        name: "election",
        about: "many candidates in one election, some of them cut off for a while; leaders fence their writes",
        role: Some(Role::Elector),
        contenders: 8,
        lock_delay: LOCK_DELAY,
        members: 0,
        access: false,
        quiet: false,
        plan: contended,
    },
    Scenario {
        name: "semaphore",
        about: "many contenders for a two-slot semaphore, some of them cut off for a while",
        role: Some(Role::SemaphoreHolder),
        contenders: 8,
        lock_delay: LOCK_DELAY,
        members: 0,
        access: false,
        quiet: false,
        plan: contended,
    },
    Scenario {
        name: "random",
        about: "locks, an election and a semaphore at once, under a random mix of every fault, writers and watcher included",
        role: None,
        contenders: 6,
        lock_delay: LOCK_DELAY,
        members: 0,
        access: true,
        quiet: false,
        plan: |p| {
            for client in p.contenders.clone().iter().chain(p.bystanders.clone().iter()) {
                p.random_faults(client);
            }
            if p.rng.chance(0.5) {
                let ms = if p.rng.chance(0.5) {
                    p.rng.range(200, p.lease() / 2)
                } else {
                    p.lease() + p.rng.range(500, p.grace() - 2_000)
                };
                let at = p.start_for(ms);
                p.add(at, Action::Crash { ms });
            }
        },
    },
    Scenario {
        name: "lock-contention-no-delay",
        about: "lock-contention with no lock-delay: only the leases keep two holders apart",
        role: Some(Role::Locker),
        contenders: 8,
        lock_delay: Duration::ZERO,
        members: 0,
        access: false,
        quiet: false,
        plan: contended,
    },
    Scenario {
        name: "election-no-delay",
        about: "election with no lock-delay: only the leases keep two leaders apart",
        role: Some(Role::Elector),
        contenders: 8,
        lock_delay: Duration::ZERO,
        members: 0,
        access: false,
        quiet: false,
        plan: contended,
    },
    Scenario {
        name: "late-release",
        about: "no lock-delay; a holder's link stalls as it lets the lock go, it reconnects and is told it holds the lock again, then the release it sent arrives: it must not free the lock the second answer told of",
        role: Some(Role::Locker),
        contenders: 4,
        lock_delay: Duration::ZERO,
        members: 0,
        access: false,
        quiet: false,
        plan: |p| {
            let mut at = p.rng.range(2_000, 4_000);
            while at + 8_000 < p.work() {
                p.add(at, Action::LateRelease);
                at += p.rng.range(6_000, 12_000);
            }
        },
    },
    Scenario {
        name: "lease-edges",
        about: "no lock-delay; faults timed to the KeepAlive cycle (a cut just after a reply, cuts one-way either way at any phase, a hold delaying the next KeepAlive), stale replies then lost KeepAlives, a master crash while the holder is cut off",
        role: Some(Role::Locker),
        contenders: 4,
        lock_delay: Duration::ZERO,
        members: 0,
        access: false,
        quiet: false,
        plan: |p| {
            for client in p.contenders.clone() {
                p.edge_faults(&client);
            }
            if p.rng.chance(0.5) {
                let (lease, grace) = (p.lease(), p.grace());
                let ms = p.rng.range(lease, lease + grace);
                let at = p.start_for(ms);
                p.add(at, Action::PartitionHolder { direction: Direction::Both, ms });
                let down = p.rng.range(200, lease + grace - 2_000);
                let crash = at + p.rng.range(0, ms / 2);
                p.add(crash, Action::Crash { ms: down });
            }
        },
    },
    Scenario {
        name: "cache-partition",
        about: "writers read through their sessions' caches and are cut off while others write what they cache: a write waits for a cut-off cacher's lease at most, and no cache serves a value an acknowledged write replaced",
        role: Some(Role::Writer),
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 0,
        access: false,
        quiet: false,
        plan: cachers_cut_off,
    },
    Scenario {
        name: "cache-master-restart",
        about: "writers read through their sessions' caches while the master restarts: the new master holds writes until every cacher has flushed on the fail-over event",
        role: Some(Role::Writer),
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 0,
        access: false,
        quiet: false,
        plan: |p| {
            let down = p.lease() + p.grace() / 2;
            two_crashes(p, down);
            p.some_partitions(0.5, Direction::Both, p.lease() / 2, p.lease() + 2_000);
        },
    },
    Scenario {
        name: "cell-master-crash",
        about: "a three-member cell whose master crashes twice, down for a moment or for longer than a lease: a follower takes over in a new epoch",
        role: None,
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 3,
        access: false,
        quiet: false,
        plan: master_crashes,
    },
    Scenario {
        name: "cell5-master-crash",
        about: "cell-master-crash on a five-member cell",
        role: None,
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 5,
        access: false,
        quiet: false,
        plan: master_crashes,
    },
    Scenario {
        name: "cell-master-isolated",
        about: "a three-member cell's master cut off from its followers and from some clients, others still reaching it: it must stop granting before a new master starts",
        role: None,
        contenders: 4,
        lock_delay: Duration::ZERO,
        members: 3,
        access: false,
        quiet: false,
        plan: master_isolated,
    },
    Scenario {
        name: "cell5-master-isolated",
        about: "cell-master-isolated on a five-member cell",
        role: None,
        contenders: 4,
        lock_delay: Duration::ZERO,
        members: 5,
        access: false,
        quiet: false,
        plan: master_isolated,
    },
    Scenario {
        name: "cell-restart-in-lease",
        about: "a three-member cell's master cut off from its followers as one of them crashes and starts again at once, inside the lease it promised the master: it must not vote before that lease is over (CELL-5)",
        role: None,
        contenders: 4,
        lock_delay: Duration::ZERO,
        members: 3,
        access: false,
        quiet: false,
        plan: restart_in_lease,
    },
    Scenario {
        name: "cell-split",
        about: "a three-member cell split in two, the master in the minority or the majority; clients on the minority's side are cut off from the cell",
        role: None,
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 3,
        access: false,
        quiet: false,
        plan: splits,
    },
    Scenario {
        name: "cell5-split",
        about: "cell-split on a five-member cell: two members against three",
        role: None,
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 5,
        access: false,
        quiet: false,
        plan: splits,
    },
    Scenario {
        name: "cell-follower-behind",
        about: "a follower down long enough that the others' logs are purged past it: it comes back from a snapshot",
        role: None,
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 3,
        access: false,
        quiet: false,
        plan: |p| {
            let ms = p.rng.range(8_000, 16_000);
            let at = p.rng.range(2_000, p.work() - ms - 4_000);
            p.add(at, Action::CrashFollower { ms });
            let at = p.rng.range(at + ms + 2_000, p.work() - 1_000);
            let ms = p.rng.range(200, 3_000);
            p.add(at, Action::Crash { ms });
        },
    },
    Scenario {
        name: "cell-flapping-peers",
        about: "links between a three-member cell's members cut and healed one at a time, every few hundred milliseconds",
        role: None,
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 3,
        access: false,
        quiet: false,
        plan: |p| {
            let ms = p.rng.range(8_000, 16_000);
            let at = p.start_for(ms);
            p.add(at, Action::FlapPeers { ms });
        },
    },
    Scenario {
        name: "cell-slow-step-down",
        about: "a quiet three-member cell (two candidates, writers that pause for seconds) on members whose tasks notice 500 ms late that they no longer lead, as on a loaded machine; a follower stops hearing the master for a second or two, again and again, and asks it for its vote: the master must stop before that vote leaves (CELL-6)",
        role: Some(Role::Elector),
        contenders: 2,
        lock_delay: Duration::ZERO,
        members: 3,
        access: false,
        quiet: true,
        plan: |p| {
            p.slow_step_down = Some(500);
            let mut at = p.rng.range(3_000, 6_000);
            while at + 4_000 < p.work() {
                let ms = p.rng.range(900, 2_000);
                p.add(at, Action::DeafFollower { ms });
                at += ms + p.rng.range(1_000, 3_000);
            }
        },
    },
    Scenario {
        name: "cell-membership",
        about: "a five-host cell founded by three members: the operator adds the fourth, removes a founder, adds the fifth, while the master crashes around each change",
        role: None,
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 5,
        access: false,
        quiet: false,
        plan: membership_changes,
    },
    Scenario {
        name: "cell-removal-crash",
        about: "cell-membership with the master crashing the moment each change turns joint, or the moment it is finished on the master and not yet on every follower: the member being removed, still running, must neither depose the next master nor take the votes it needs (CELL-9)",
        role: None,
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 5,
        access: false,
        quiet: false,
        plan: |p| {
            p.spare = 2;
            let mut at = p.rng.range(3_000, 8_000);
            let founder = p.rng.range(1, 4);
            for (add, member) in [(true, 4), (false, founder), (true, 5)] {
                p.admin.push(Scheduled { at, add, member });
                let ms = p.rng.range(200, 3_000);
                let at_end = p.rng.chance(0.5);
                let crash = Action::CrashWhileJoint {
                    within: 2_000,
                    ms,
                    at_end,
                };
                p.add(at, crash);
                at += p.rng.range(8_000, 12_000);
            }
        },
    },
    Scenario {
        name: "cell-random",
        about: "a three-member cell under a random mix of member crashes, isolation, splits and flapping peer links, with client faults of every kind",
        role: None,
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 3,
        access: true,
        quiet: false,
        plan: cell_random,
    },
    Scenario {
        name: "cell5-random",
        about: "cell-random on a five-member cell",
        role: None,
        contenders: 4,
        lock_delay: LOCK_DELAY,
        members: 5,
        access: true,
        quiet: false,
        plan: cell_random,
    },
];

/// The master crashes twice: once back within half a lease, once after
/// more than a lease.
fn master_crashes(p: &mut Planner) {
    let half = p.work() / 2;
    let quick = p.rng.range(200, p.lease() / 2);
    let slow = p.lease() + p.rng.range(500, p.grace() - 2_000);
    let at = p.rng.range(3_000, half - quick - 1_000);
    p.add(at, Action::Crash { ms: quick });
    let at = p.rng.range(half + 1_000, p.work() - slow - 1_000);
    p.add(at, Action::Crash { ms: slow });
}

/// Some clients, at random.
fn some_clients(p: &mut Planner, chance: f64) -> Vec<String> {
    let all: Vec<String> = p.contenders.iter().chain(&p.bystanders).cloned().collect();
    all.into_iter().filter(|_| p.rng.chance(chance)).collect()
}

/// The master cut off from its followers three times, each time with
/// some clients still reaching it.
fn master_isolated(p: &mut Planner) {
    let mut at = p.rng.range(3_000, 6_000);
    while at + 5_000 < p.work() {
        let ms = p.rng.range(500, 2 * p.lease());
        let reachable = some_clients(p, 0.5);
        let bounce = None;
        p.add(
            at,
            Action::IsolateMaster {
                ms,
                reachable,
                bounce,
            },
        );
        at += ms + p.rng.range(3_000, 8_000);
    }
}

/// The master cut off from its followers three times or more, the last
/// of them as it crashes and is back within 100 ms, while the others,
/// cut off for up to two seconds already, stand for election; some
/// clients still reach the master.
fn restart_in_lease(p: &mut Planner) {
    let mut at = p.rng.range(3_000, 6_000);
    while at + 6_000 < p.work() {
        let after = p.rng.range(500, 2_000);
        let ms = after + p.rng.range(1_500, 2 * p.lease());
        let reachable = some_clients(p, 0.5);
        let down = p.rng.range(0, 100);
        let bounce = Some(Bounce { after, down });
        p.add(
            at,
            Action::IsolateMaster {
                ms,
                reachable,
                bounce,
            },
        );
        at += ms + p.rng.range(3_000, 6_000);
    }
}

/// A five-host cell founded by three: the operator adds the fourth,
/// removes a founder, adds the fifth, the master crashing within 1.5 s
/// after each change is asked for.
fn membership_changes(p: &mut Planner) {
    p.spare = 2;
    let mut at = p.rng.range(3_000, 8_000);
    let founder = p.rng.range(1, 4);
    for (add, member) in [(true, 4), (false, founder), (true, 5)] {
        p.admin.push(Scheduled { at, add, member });
        let crash = at + p.rng.range(0, 1_500);
        let ms = p.rng.range(200, 3_000);
        p.add(crash, Action::Crash { ms });
        at += p.rng.range(8_000, 12_000);
    }
}

/// Splits of the cell, the master on either side.
fn splits(p: &mut Planner) {
    let mut at = p.rng.range(3_000, 6_000);
    while at + 5_000 < p.work() {
        let ms = p.rng.range(500, 2 * p.lease());
        let master_in_minority = p.rng.chance(0.5);
        let minority_clients = some_clients(p, 0.25);
        let split = Action::SplitCell {
            master_in_minority,
            ms,
            minority_clients,
        };
        p.add(at, split);
        at += ms + p.rng.range(3_000, 8_000);
    }
}

/// Faults among members one after another, and client faults as in
/// `random`.
fn cell_random(p: &mut Planner) {
    for client in p
        .contenders
        .clone()
        .iter()
        .chain(p.bystanders.clone().iter())
    {
        if p.rng.chance(0.5) {
            p.random_faults(client);
        }
    }
    let mut at = p.rng.range(2_000, 5_000);
    while at + 4_000 < p.work() {
        let ms = p.rng.range(300, p.lease() + p.grace());
        let action = match p.rng.range(0, 5) {
            0 => Action::Crash { ms },
            1 => Action::CrashFollower { ms },
            2 => Action::IsolateMaster {
                ms,
                reachable: some_clients(p, 0.5),
                bounce: None,
            },
            3 => Action::SplitCell {
                master_in_minority: p.rng.chance(0.5),
                ms,
                minority_clients: some_clients(p, 0.25),
            },
            _ => Action::FlapPeers { ms },
        };
        p.add(at, action);
        at += ms + p.rng.range(1_000, 6_000);
    }
}

/// Some contenders, and the holder of the moment, cut off for anything
/// from half a second to past lease plus grace.
fn contended(p: &mut Planner) {
    let (lease, grace) = (p.lease(), p.grace());
    p.some_partitions(0.3, Direction::Both, 500, lease + grace + 2_000);
    p.holder_partition(500, lease + grace + 2_000);
}

/// Two crashes of the master, one in each half of the work, each down for
/// 200 ms up to `down`.
fn two_crashes(p: &mut Planner, down: u64) {
    let half = p.work() / 2;
    for (lo, hi) in [(4_000, half - 2_000), (half + 2_000, p.work() - 6_000)] {
        let at = p.rng.range(lo, hi);
        let ms = p.rng.range(200, down);
        p.add(at, Action::Crash { ms });
    }
}

/// Writers cut off (either way, or both) while the others write the keys
/// they cache: the bystanders `w1` and `w2` are never cut off, so their
/// writes wait for a cacher's lease at most (`CACHE-3`).
fn cachers_cut_off(p: &mut Planner) {
    let (lease, grace) = (p.lease(), p.grace());
    let directions = [Direction::Both, Direction::ToMaster, Direction::FromMaster];
    for client in p.contenders.clone() {
        let mut at = p.rng.range(2_000, 6_000);
        while at + 4_000 < p.work() {
            let ms = p.rng.range(lease / 2, lease + grace + 2_000);
            let direction = *p.rng.pick(&directions);
            let cut = Action::Partition {
                client: client.clone(),
                direction,
                ms,
            };
            p.add(at, cut);
            at += ms + p.rng.range(2_000, 8_000);
        }
    }
}

/// The scenario called `name`.
pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}
