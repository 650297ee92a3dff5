//! What a run is set up with and what it produced: [`Settings`], each
//! host's [`Clocks`], and the [`Run`] with its trace. The checks read
//! only the trace (`check::Recorded`); the rest is for the report and the
//! timeline.

use std::collections::BTreeMap;
use std::time::Duration;

use super::rng::Rng;
use super::trace::Entry;

/// How a run is set up. The defaults are the product's safe use; the
/// `ignore_jeopardy`, `fencing`, `lock_delay`, `lying_disk`,
/// `clock_spread`, `clock_drift`, `short_recovered_leases` and
/// `unheld_cache_writes` and `unfenced_releases` knobs exist to break it
/// on purpose and see the checkers fire.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Contending clients; `None`: the scenario's own number.
    pub contenders: Option<usize>,
    pub lease: Duration,
    pub grace: Duration,
    /// Every session's lock-delay; `None`: the scenario's own.
    pub lock_delay: Option<Duration>,
    /// Each host's clock runs at a rate drawn from `1 ± clock_spread`
    /// times true time. Within half the clients' drift allowance, master
    /// and client differ by less than the allowance (`LEASE-4`); beyond
    /// it, a client's local lease can outlast the master's.
    pub clock_spread: f64,
    /// The clients' drift allowance (`SessionOptions::clock_drift`).
    pub clock_drift: f64,
    /// The master gives the sessions it recovers a lease of 100 ms.
    pub short_recovered_leases: bool,
    /// Break it another way: a master that grants cacheable reads but
    /// never holds a write for the sessions that cache its key.
    pub unheld_cache_writes: bool,
    /// Break it another way: a master that carries out every release
    /// whichever acquire it names, so a release delivered late undoes an
    /// acquire answered after it was sent (`LOCK-4`).
    pub unfenced_releases: bool,
    /// Break it another way: a master that tells every subscriber of every
    /// change, whatever the rules let it read (`ACL-4`).
    pub unfiltered_events: bool,
    pub semaphore_limit: u32,
    /// Contenders keep believing they hold their lock in jeopardy.
    pub ignore_jeopardy: bool,
    /// The storage host checks sequencers.
    pub fencing: bool,
    /// The master's disk acknowledges syncs it has not done, so a crash
    /// of the master's host loses acknowledged writes.
    pub lying_disk: bool,
    /// How long the clients work; faults happen inside it.
    pub work: Duration,
    /// After the work, how long the watcher keeps listening before the
    /// final reads.
    pub drain: Duration,
    pub max_latency: Duration,
    /// Virtual time per simulation step: the resolution of every timer.
    pub tick: Duration,
    /// Members of a replicated cell; `None`: the scenario's own number
    /// (0: a single master).
    pub members: Option<usize>,
    /// Rules of the master lease and of elections a cell's members break
    /// (`BrokenRules`): a master that keeps its lease without a quorum, a
    /// member that votes as soon as it restarts, followers whose refusal
    /// window is shorter than the lease counts on, a leader that keeps its
    /// lease while asked for a higher vote, members that hear any
    /// candidate.
    pub broken_cell: leasehold_server::cell::BrokenRules,
    /// A cell's Raft timers; `None`: the members' defaults (`CELL-5`). A
    /// seed found at other timers replays at those.
    pub cell_timing: Option<leasehold_server::cell::Timing>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            contenders: None,
            lease: Duration::from_secs(4),
            grace: Duration::from_secs(6),
            lock_delay: None,
            clock_spread: DEFAULT_CLOCK_SPREAD,
            clock_drift: leasehold::lease::DEFAULT_CLOCK_DRIFT,
            short_recovered_leases: false,
            unheld_cache_writes: false,
            unfenced_releases: false,
            unfiltered_events: false,
            semaphore_limit: 2,
            ignore_jeopardy: false,
            fencing: true,
            lying_disk: false,
            work: Duration::from_secs(40),
            drain: Duration::from_secs(8),
            max_latency: Duration::from_millis(10),
            tick: Duration::from_millis(5),
            members: None,
            broken_cell: Default::default(),
            cell_timing: None,
        }
    }
}

/// The clocks' default spread: a quarter of the clients' default drift
/// allowance, so master and client clocks differ by at most half of it and
/// a local lease stays tens of milliseconds inside the master's, several
/// simulation ticks.
pub const DEFAULT_CLOCK_SPREAD: f64 = leasehold::lease::DEFAULT_CLOCK_DRIFT / 4.0;

/// Each host's clock rate, drawn from the run's seed.
#[derive(Debug, Clone, Default)]
pub struct Clocks(BTreeMap<String, f64>);

impl Clocks {
    pub(super) fn draw(rng: &mut Rng, spread: f64, hosts: &[String]) -> Clocks {
        let mut rates = BTreeMap::new();
        for host in hosts {
            let unit = rng.range(0, 1_000_001) as f64 / 1_000_000.0;
            rates.insert(host.clone(), 1.0 + spread * (2.0 * unit - 1.0));
        }
        Clocks(rates)
    }

    /// The rate of `host`'s clock; 1.0 for a host that has none drawn.
    pub fn rate(&self, host: &str) -> f64 {
        self.0.get(host).copied().unwrap_or(1.0)
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
    /// Each host's clock rate.
    pub clocks: Clocks,
}
