//! Runs Leasehold's partition simulations: one scenario and seed with its
//! trace and timeline, the scenario catalogue, or a sweep over many seeds.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use clap::{Parser, Subcommand};
use leasehold_tests::sim::{self, check, timeline, trace, Settings, SCENARIOS};

#[derive(Parser)]
#[command(
    name = "leasehold-sim",
    about = "Deterministic partition simulations of Leasehold"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct Knobs {
    /// Contending clients (default: the scenario's own number).
    #[arg(long)]
    clients: Option<usize>,
    /// Break the setup on purpose, to see the checkers fire: contenders
    /// that ignore jeopardy.
    #[arg(long)]
    ignore_jeopardy: bool,
    /// Break it another way: a storage host that does not check sequencers.
    #[arg(long)]
    no_fencing: bool,
    /// Break it another way: a master disk that acknowledges syncs it has
    /// not done, so a crash of the master loses acknowledged writes.
    #[arg(long)]
    lying_disk: bool,
    /// Lock-delay of every session, in milliseconds (default: the
    /// scenario's, 2000 in most).
    #[arg(long)]
    lock_delay_ms: Option<u64>,
    /// Each host's clock runs at a rate drawn from 1 ± this (default
    /// 0.0025, a quarter of the clients' drift allowance). More than half
    /// the allowance breaks the setup: a local lease can outlast the
    /// master's.
    #[arg(long)]
    clock_spread: Option<f64>,
    /// The clients' clock-drift allowance (default 0.01). 0 breaks the
    /// setup when clocks differ.
    #[arg(long)]
    clock_drift: Option<f64>,
    /// A cell's election timeouts, `MIN-MAX` in milliseconds (default: the
    /// members' own, CELL-5), to replay a seed found at other timers; the
    /// heartbeat stays the default.
    #[arg(long, value_parser = parse_election_ms)]
    election_ms: Option<(u64, u64)>,
    /// Break it another way: a master that gives the sessions it recovers
    /// a lease of 100 ms.
    #[arg(long)]
    short_recovered_leases: bool,
    /// Break it another way: a master that grants cacheable reads but
    /// never holds a write for the sessions that cache its key.
    #[arg(long)]
    unheld_cache_writes: bool,
    /// Break it another way: a master that carries out every release
    /// whichever acquire it names, so a release delivered late undoes an
    /// acquire answered after it was sent.
    #[arg(long)]
    unfenced_releases: bool,
    /// Break it another way: a master that tells every subscriber of every
    /// change, whatever the access rules let it read.
    #[arg(long)]
    unfiltered_events: bool,
    /// Break it another way: a cell's masters keep their master lease once
    /// held, so one cut off from its quorum goes on granting.
    #[arg(long)]
    broken_master_lease: bool,
    /// Break a rule of a cell's elections (repeatable): `start-wait` (a
    /// restarted member votes at once, CELL-5), `refusal-window`
    /// (followers refuse rivals for half the window the master lease
    /// counts on, CELL-6), `yield` (a leader asked for a higher vote keeps
    /// its lease, CELL-6), `candidate` (members hear every candidate and
    /// always stand, CELL-9), `outstood` (the member being removed stands
    /// after a voter of the new configuration with as long a log refused
    /// it, CELL-9), `settled` (a leader answers `Done` for a
    /// change its configuration shows without confirming that
    /// configuration is committed, CELL-9).
    #[arg(long = "break-cell-rule", value_enum)]
    break_cell_rule: Vec<CellRule>,
}

/// A rule of a cell's elections a run can break.
#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
enum CellRule {
    StartWait,
    RefusalWindow,
    Yield,
    Candidate,
    Outstood,
    Settled,
}

impl Knobs {
    fn settings(&self) -> Settings {
        let mut settings = Settings {
            contenders: self.clients,
            ignore_jeopardy: self.ignore_jeopardy,
            fencing: !self.no_fencing,
            short_recovered_leases: self.short_recovered_leases,
            unheld_cache_writes: self.unheld_cache_writes,
            unfenced_releases: self.unfenced_releases,
            unfiltered_events: self.unfiltered_events,
            lying_disk: self.lying_disk,
            ..Settings::default()
        };
        settings.cell_timing = self
            .election_ms
            .map(|(min, max)| leasehold_server::cell::Timing {
                election_min: Duration::from_millis(min),
                election_max: Duration::from_millis(max),
                ..leasehold_server::cell::Timing::default()
            });
        let timing = settings.cell_timing.unwrap_or_default();
        let broken = &mut settings.broken_cell;
        broken.keep_master_lease = self.broken_master_lease;
        for rule in &self.break_cell_rule {
            match rule {
                CellRule::StartWait => broken.vote_at_start = true,
                CellRule::RefusalWindow => {
                    let window = leasehold_server::cell::short_refusal_window(&timing);
                    broken.refusal_window = Some(window);
                }
                CellRule::Yield => broken.keep_lease_when_asked = true,
                CellRule::Candidate => broken.hear_any_candidate = true,
                CellRule::Outstood => broken.stand_when_outstood = true,
                CellRule::Settled => broken.done_unsettled = true,
            }
        }
        if let Some(ms) = self.lock_delay_ms {
            settings.lock_delay = Some(Duration::from_millis(ms));
        }
        if let Some(spread) = self.clock_spread {
            settings.clock_spread = spread;
        }
        if let Some(drift) = self.clock_drift {
            settings.clock_drift = drift;
        }
        settings
    }

    fn flags(&self) -> String {
        let mut flags = String::new();
        if let Some(n) = self.clients {
            flags.push_str(&format!(" --clients {n}"));
        }
        if self.ignore_jeopardy {
            flags.push_str(" --ignore-jeopardy");
        }
        if self.no_fencing {
            flags.push_str(" --no-fencing");
        }
        if self.lying_disk {
            flags.push_str(" --lying-disk");
        }
        if let Some(ms) = self.lock_delay_ms {
            flags.push_str(&format!(" --lock-delay-ms {ms}"));
        }
        if let Some(spread) = self.clock_spread {
            flags.push_str(&format!(" --clock-spread {spread}"));
        }
        if let Some(drift) = self.clock_drift {
            flags.push_str(&format!(" --clock-drift {drift}"));
        }
        if let Some((min, max)) = self.election_ms {
            flags.push_str(&format!(" --election-ms {min}-{max}"));
        }
        if self.short_recovered_leases {
            flags.push_str(" --short-recovered-leases");
        }
        if self.unheld_cache_writes {
            flags.push_str(" --unheld-cache-writes");
        }
        if self.unfenced_releases {
            flags.push_str(" --unfenced-releases");
        }
        if self.unfiltered_events {
            flags.push_str(" --unfiltered-events");
        }
        if self.broken_master_lease {
            flags.push_str(" --broken-master-lease");
        }
        for rule in &self.break_cell_rule {
            if let Some(value) = clap::ValueEnum::to_possible_value(rule) {
                flags.push_str(&format!(" --break-cell-rule {}", value.get_name()));
            }
        }
        flags
    }
}

#[derive(Subcommand)]
enum Command {
    /// Prints every scenario: its name, then what it does.
    List,
    /// Runs one scenario with one seed; writes its trace and timeline.
    Run {
        #[arg(long)]
        scenario: String,
        #[arg(long)]
        seed: u64,
        #[command(flatten)]
        knobs: Knobs,
        /// Where the trace (.jsonl) and timeline (.svg) go.
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
    /// Runs many seeds in parallel, each in a process of its own (see
    /// `Seed`); stops at the first violation.
    Sweep {
        #[arg(long)]
        scenario: String,
        #[arg(long, default_value_t = 1000)]
        seeds: u64,
        #[arg(long, default_value_t = 1)]
        first_seed: u64,
        #[command(flatten)]
        knobs: Knobs,
        /// Parallel runs (default: one per core).
        #[arg(long)]
        jobs: Option<usize>,
    },
    /// Runs one seed and prints its report only if it failed: a sweep's
    /// unit of work. Runs sharing a process would share tokio's task
    /// counter, and a run's course depends on it (`sim::align_task_ids`).
    #[command(hide = true)]
    Seed {
        #[arg(long)]
        scenario: String,
        #[arg(long)]
        seed: u64,
        #[command(flatten)]
        knobs: Knobs,
    },
}

/// Prints to standard output; a closed pipe (`| head`) ends the output
/// quietly instead of panicking.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

fn scenario(name: &str) -> Result<&'static sim::Scenario, ExitCode> {
    sim::find(name).ok_or_else(|| {
        eprintln!("no scenario {name:?}; `leasehold-sim list` names them");
        ExitCode::from(2)
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    // RUST_LOG=debug shows what the master and clients log, for a replay.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .with_timer(VirtualTime)
            .init();
    }
    let result = match args.command {
        Command::List => {
            for s in SCENARIOS {
                say!("{:<22} {}", s.name, s.about);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            scenario: name,
            seed,
            knobs,
            out,
        } => scenario(&name).map(|s| run(s, seed, &knobs, &out)),
        Command::Sweep {
            scenario: name,
            seeds,
            first_seed,
            knobs,
            jobs,
        } => scenario(&name).map(|s| sweep(s, first_seed, seeds, &knobs, jobs)),
        Command::Seed {
            scenario: name,
            seed,
            knobs,
        } => scenario(&name).map(|s| {
            let run = sim::run(s, seed, knobs.settings());
            let report = check::all(&run.entries);
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                say!("{}", report.summary(&run).trim_end());
                ExitCode::FAILURE
            }
        }),
    };
    result.unwrap_or_else(|code| code)
}

fn run(
    scenario: &'static sim::Scenario,
    seed: u64,
    knobs: &Knobs,
    out: &std::path::Path,
) -> ExitCode {
    let run = sim::run(scenario, seed, knobs.settings());
    let report = check::all(&run.entries);
    say!("{}", report.summary(&run).trim_end());
    let stem = format!("{}-{seed}", scenario.name);
    let written = std::fs::create_dir_all(out)
        .and_then(|()| {
            std::fs::write(
                out.join(format!("{stem}.jsonl")),
                trace::to_jsonl(&run.entries),
            )
        })
        .and_then(|()| {
            std::fs::write(
                out.join(format!("{stem}.svg")),
                timeline::svg(&run, &report),
            )
        });
    match written {
        Ok(()) => say!("  wrote {0}/{stem}.jsonl and {0}/{stem}.svg", out.display()),
        Err(e) => {
            eprintln!("cannot write into {}: {e}", out.display());
            return ExitCode::from(2);
        }
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn sweep(
    scenario: &'static sim::Scenario,
    first: u64,
    seeds: u64,
    knobs: &Knobs,
    jobs: Option<usize>,
) -> ExitCode {
    let jobs = jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let next = AtomicU64::new(first);
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let failure: Mutex<Option<(u64, String)>> = Mutex::new(None);
    let end = first + seeds;
    let started = std::time::Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                while !stop.load(Ordering::Acquire) {
                    let seed = next.fetch_add(1, Ordering::AcqRel);
                    if seed >= end {
                        return;
                    }
                    if let Err(summary) = run_apart(scenario, seed, knobs) {
                        stop.store(true, Ordering::Release);
                        let mut failure = failure.lock().unwrap();
                        // The lowest failing seed, so the replay is stable.
                        if failure.as_ref().is_none_or(|(s, _)| seed < *s) {
                            *failure = Some((seed, summary));
                        }
                        return;
                    }
                    let finished = done.fetch_add(1, Ordering::AcqRel) + 1;
                    if finished.is_multiple_of(100) {
                        eprintln!(
                            "{}: {finished}/{seeds} seeds passed ({:.0?})",
                            scenario.name,
                            started.elapsed()
                        );
                    }
                }
            });
        }
    });
    match failure.into_inner().unwrap() {
        Some((seed, summary)) => {
            say!("{}", summary.trim_end());
            say!(
                "replay: cargo run -p leasehold-tests --bin leasehold-sim -- run --scenario {} --seed {seed}{}",
                scenario.name,
                knobs.flags()
            );
            ExitCode::FAILURE
        }
        None => {
            say!(
                "{}: {seeds} seeds from {first} passed, every invariant held ({:.1?})",
                scenario.name,
                started.elapsed()
            );
            ExitCode::SUCCESS
        }
    }
}

/// Runs one seed in a child process: the report if it failed.
fn run_apart(scenario: &sim::Scenario, seed: u64, knobs: &Knobs) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let output = std::process::Command::new(me)
        .args(["seed", "--scenario", scenario.name, "--seed"])
        .arg(seed.to_string())
        .args(knobs.flags().split_whitespace())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run seed {seed}: {e}"))?;
    if output.status.success() {
        return Ok(());
    }
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    Err(if report.trim().is_empty() {
        format!("seed {seed} ended with {} and no report", output.status)
    } else {
        report
    })
}

/// Stamps each log line with the simulation's virtual time, in
/// milliseconds as the trace counts them, so a replay's log lines up with
/// its trace and timeline.
struct VirtualTime;

impl tracing_subscriber::fmt::time::FormatTime for VirtualTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        match turmoil::sim_elapsed() {
            Some(at) => write!(w, "{:>8.1} ms", at.as_secs_f64() * 1_000.0),
            None => write!(w, "{:>11}", "-"),
        }
    }
}

/// `MIN-MAX` in milliseconds, the heartbeat (50 ms) below MIN, MIN below MAX.
fn parse_election_ms(text: &str) -> Result<(u64, u64), String> {
    let (min, max) = text
        .split_once('-')
        .ok_or_else(|| format!("{text:?} is not MIN-MAX, e.g. 250-500"))?;
    let parse = |n: &str| {
        n.trim()
            .parse::<u64>()
            .map_err(|_| format!("{n:?} is not a number of milliseconds"))
    };
    let (min, max) = (parse(min)?, parse(max)?);
    let heartbeat = leasehold_server::cell::Timing::default()
        .heartbeat
        .as_millis() as u64;
    if min <= heartbeat || max <= min {
        return Err(format!(
            "the election timeouts must lie above the heartbeat of {heartbeat} ms, the shortest below the longest"
        ));
    }
    Ok((min, max))
}
