//! `leasehold-bench`: scenarios that measure Leasehold, and the same
//! scenarios against etcd and ZooKeeper through their native Rust clients,
//! printed side by side with this machine's limits (BENCHMARKS.md records
//! the figures). Everything runs on loopback, every load loop is bounded in
//! count and time, and without `--addr` the master is a `leasehold serve`
//! process of its own on a free port with a fresh data directory (with
//! `--cell`, three of them as one cell, beside the peers' clusters).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};

mod cache;
mod cell;
mod chart;
mod clients;
mod failover;
mod failover_peer;
mod failover_raw;
mod fanout;
mod fanout_arrivals;
mod inprocess;
mod kv;
mod latency;
mod limits;
mod load;
mod lock;
mod master;
mod noisy;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
mod peer_process;
mod procstat;
mod progress;
mod recovery;
mod report;
mod retry;
mod sessions;
mod sessions_tally;
mod system;
mod writes;

#[cfg(feature = "etcd")]
mod etcd;
#[cfg(feature = "zookeeper")]
mod zookeeper;

use cell::Cell;
use master::Master;
use report::{Outcome, Report};
use system::{Kind, System};

#[derive(Parser)]
#[command(
    name = "leasehold-bench",
    about = "Leasehold benchmarks, side by side with etcd and ZooKeeper"
)]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
    #[command(flatten)]
    common: Common,
}

#[derive(clap::Args)]
struct Common {
    /// A Leasehold master to measure (or a cell's members, separated by
    /// commas); without it one is started as a separate process on a free
    /// loopback port and stopped after.
    #[arg(long, global = true)]
    addr: Option<String>,
    /// Measure a cell: Leasehold as three `leasehold serve --cell` members
    /// started on loopback (the failover kills the one that is master),
    /// and the peers as the clusters `bench/peers/start.sh start-cluster`
    /// runs, unless --etcd-addr or --zookeeper-addr name others. For
    /// `lock`, `kv`, `fanout` and `failover`.
    #[arg(long, global = true, conflicts_with = "addr")]
    cell: bool,
    /// How long each timed phase runs (e.g. `10s`, `500ms`).
    #[arg(long, global = true, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Print one JSON object instead of the table.
    #[arg(long, global = true)]
    json: bool,
    /// Also write the JSON object to this file (for `chart`), whichever
    /// of the two is printed.
    #[arg(long, global = true, value_name = "FILE")]
    json_out: Option<PathBuf>,
    /// Run the same scenario against a peer too (repeatable).
    #[arg(long = "peer", global = true, value_enum)]
    peers: Vec<Kind>,
    /// Run each system this many times and report each figure's median.
    #[arg(long, global = true, default_value_t = 1)]
    runs: usize,
    /// The `leasehold` binary to run as the master.
    #[arg(long, global = true)]
    server_bin: Option<PathBuf>,
    /// Where etcd serves clients: one server, or a cluster's members
    /// separated by commas [default: 127.0.0.1:2379; with --cell,
    /// 127.0.0.1:12379,127.0.0.1:22379,127.0.0.1:32379].
    #[arg(long, global = true)]
    etcd_addr: Option<String>,
    /// Where etcd serves clients over TLS, for `--peer etcd-tls`.
    #[arg(long, global = true, default_value = ETCD_TLS)]
    etcd_tls_addr: String,
    /// The CA that signed that etcd's certificate [default: the one
    /// `bench/peers/start.sh start` writes, under $LEASEHOLD_PEERS_DIR or
    /// /tmp/leasehold-peers: tls/ca.pem].
    #[arg(long, global = true)]
    etcd_tls_ca: Option<PathBuf>,
    /// Where ZooKeeper serves clients: one server, or an ensemble's servers
    /// separated by commas [default: 127.0.0.1:2181; with --cell,
    /// 127.0.0.1:12181,127.0.0.1:12182,127.0.0.1:12183].
    #[arg(long, global = true)]
    zookeeper_addr: Option<String>,
}

/// Where `bench/peers/start.sh start` runs the peers...
const ETCD: &str = "127.0.0.1:2379";
const ZOOKEEPER: &str = "127.0.0.1:2181";
const ETCD_TLS: &str = "127.0.0.1:2479";
/// ... and where `bench/peers/start.sh start-cluster` runs their clusters.
const ETCD_CLUSTER: &str = "127.0.0.1:12379,127.0.0.1:22379,127.0.0.1:32379";
const ZOOKEEPER_CLUSTER: &str = "127.0.0.1:12181,127.0.0.1:12182,127.0.0.1:12183";

#[derive(Subcommand)]
enum Scenario {
    /// Hold many sessions over fewer connections: KeepAlive rate, master
    /// CPU and memory per session, spurious expirations.
    Sessions {
        #[arg(long, default_value_t = 100_000)]
        sessions: usize,
        #[arg(long, default_value_t = 1_000)]
        connections: usize,
        /// Lease of every session.
        #[arg(long, value_parser = parse_duration, default_value = "12s")]
        lease: Duration,
        /// Renew each connection's sessions together, every half lease,
        /// in KeepAliveAll requests (KA-10), rather than with a held
        /// KeepAlive each (Leasehold only).
        #[arg(long)]
        keepalive_all: bool,
    },
    /// Exclusive lock acquire+release round trips: 1 client on 1 key, 64
    /// clients on 64 keys, 64 clients on 1 key (or the one shape given).
    Lock {
        #[arg(long, requires = "keys")]
        clients: Option<usize>,
        #[arg(long, requires = "clients")]
        keys: Option<usize>,
    },
    /// Puts then gets of 32-byte values, with 1 and with 64 clients.
    Kv {
        /// Concurrent clients, each on its own connection (repeatable).
        #[arg(long = "clients", default_values_t = [1, 64])]
        clients: Vec<usize>,
    },
    /// A read-mostly workload, reads fast and linearizable: Leasehold's
    /// session cache on and off, etcd's serializable and linearizable
    /// reads, ZooKeeper's plain and synced reads; then writes to a key
    /// many sessions cache.
    Cache {
        /// Concurrent clients, each on its own connection.
        #[arg(long, default_value_t = 64)]
        clients: usize,
        /// Keys read and written.
        #[arg(long, default_value_t = 1_000)]
        keys: usize,
        /// Reads of every 1,000 operations.
        #[arg(long, default_value_t = 990)]
        reads_per_mille: u32,
        /// Sessions that cache the key of the held-write phase.
        #[arg(long, default_value_t = 100)]
        cachers: usize,
    },
    /// One write, many subscribers: time until the last has the event.
    Fanout {
        #[arg(long, default_value_t = 10_000)]
        subscribers: usize,
        #[arg(long, default_value_t = 100)]
        connections: usize,
    },
    /// Kill and restart a master holding sessions and nodes: time until
    /// every session is Normal again and a new lock can be taken. With
    /// --cell, or a peer cluster's members, the master (leader) is killed
    /// and not restarted until the figures are in: time until another
    /// member serves as master, too.
    Failover {
        #[arg(long, default_value_t = 100_000)]
        sessions: usize,
        #[arg(long, default_value_t = 1_000_000)]
        nodes: u64,
        #[arg(long, default_value_t = 1_000)]
        connections: usize,
        /// Hold the sessions over the raw protocol, each connection
        /// renewing its sessions together in KeepAliveAll requests (KA-10),
        /// as `sessions --keepalive-all` does: the shape for a million
        /// sessions (Leasehold only).
        #[arg(long)]
        keepalive_all: bool,
        /// With --cell: kill the master this many times in one cell, the
        /// killed member started again and the cell settled between kills,
        /// and give each figure's median and 99th percentile over them
        /// (Leasehold only).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
        kills: u64,
    },
    /// A canary session kept alive while attackers abuse the master, one
    /// pattern at a time: its worst KeepAlive round trip, whether it left
    /// Normal, and the master's peak memory (Leasehold only).
    Noisy {
        /// Connections each attack uses.
        #[arg(long, default_value_t = 8)]
        connections: usize,
        /// The master's memory the run must stay under, in MiB.
        #[arg(long, default_value_t = 1024)]
        rss_budget: u64,
    },
    /// Acknowledged (fsynced) writes per second with N concurrent clients,
    /// and the fsyncs that carried them (master in this process).
    Writes {
        /// Concurrent clients, each with its own connection (repeatable).
        #[arg(long = "clients", default_values_t = [1, 64])]
        clients: Vec<usize>,
        /// How long each run writes.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Stop a run after this many writes, whatever the time.
        #[arg(long, default_value_t = 2_000_000)]
        max_writes: u64,
    },
    /// Time for a master to recover a data directory and serve a request
    /// (master in this process).
    Recovery {
        #[arg(long, default_value_t = 100_000)]
        sessions: u64,
        #[arg(long, default_value_t = 1_000_000)]
        nodes: u64,
    },
    /// Draw each report a scenario printed with `--json` as an SVG bar
    /// chart, `OUT/<scenario>.svg`.
    Chart {
        /// Files each holding one scenario's `--json` output.
        #[arg(required = true)]
        reports: Vec<PathBuf>,
        /// The directory to write the charts to.
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
}

/// `250ms`, `10s`, `2m`, or a bare number of seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60.0)
    } else {
        (text, 1.0)
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("not a duration: {text:?} (try 10s or 500ms)"))?;
    if !value.is_finite() || value < 0.0 || value * scale > 86_400.0 {
        return Err(format!("out of range: {text:?}"));
    }
    Ok(Duration::from_secs_f64(value * scale))
}

/// A Leasehold the benchmark started for one run: a master, or a cell.
enum Running {
    Master(Box<Master>),
    Cell(Cell),
}

impl Running {
    async fn stop(self) {
        match self {
            Running::Master(master) => master.stop().await,
            Running::Cell(cell) => cell.stop().await,
        }
    }
}

impl Common {
    fn etcd_tls_ca(&self) -> PathBuf {
        self.etcd_tls_ca.clone().unwrap_or_else(|| {
            std::env::var_os("LEASEHOLD_PEERS_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/tmp/leasehold-peers"))
                .join("tls/ca.pem")
        })
    }

    fn peer_addr(&self, kind: Kind) -> &str {
        let (given, single, cluster) = match kind {
            Kind::Etcd => (&self.etcd_addr, ETCD, ETCD_CLUSTER),
            Kind::EtcdTls => return &self.etcd_tls_addr,
            Kind::Zookeeper => (&self.zookeeper_addr, ZOOKEEPER, ZOOKEEPER_CLUSTER),
            Kind::Leasehold | Kind::LeaseholdTls => {
                return self.addr.as_deref().unwrap_or_default()
            }
        };
        match given {
            Some(addr) => addr,
            None if self.cell => cluster,
            None => single,
        }
    }

    /// The system to run against, with the master (or with `--cell` the
    /// cell) started for it when there is no `--addr`.
    async fn system(
        &self,
        kind: Kind,
        name: &str,
        start: bool,
    ) -> anyhow::Result<(System, Option<Running>)> {
        if kind == Kind::LeaseholdTls {
            if self.addr.is_some() || self.cell || !start {
                anyhow::bail!(
                    "leasehold-tls is measured on a master the benchmark starts itself, not \
                     with --addr or --cell"
                );
            }
            let bin = master::find_binary(self.server_bin.as_deref())?;
            let (master, tls) = Master::start_tls(&bin, name).await?;
            let system = System {
                kind,
                addr: master.addr().to_string(),
                tls: Some(tls),
                pids: master.pid().into_iter().collect(),
            };
            return Ok((system, Some(Running::Master(Box::new(master)))));
        }
        if kind == Kind::Leasehold && self.addr.is_none() && start {
            let bin = master::find_binary(self.server_bin.as_deref())?;
            if self.cell {
                let cell = Cell::start(&bin, name, &[]).await?;
                let system = System {
                    kind,
                    addr: cell.addr(),
                    tls: None,
                    pids: cell.pids(),
                };
                return Ok((system, Some(Running::Cell(cell))));
            }
            let master = Master::start(&bin, name).await?;
            let system = System {
                kind,
                addr: master.addr().to_string(),
                tls: None,
                pids: master.pid().into_iter().collect(),
            };
            return Ok((system, Some(Running::Master(Box::new(master)))));
        }
        let tls = match kind {
            Kind::EtcdTls if self.cell => anyhow::bail!(
                "etcd-tls is measured on the single etcd `bench/peers/start.sh start` runs, \
                 not with --cell"
            ),
            Kind::EtcdTls => Some(leasehold::TlsOptions::new(self.etcd_tls_ca())),
            _ => None,
        };
        let addr = self.peer_addr(kind).to_string();
        // Each member's process, where it runs on this machine.
        let pids = system::members(&addr)
            .iter()
            .filter_map(|member| system::port(member).and_then(procstat::listening_on))
            .collect();
        Ok((
            System {
                kind,
                addr,
                tls,
                pids,
            },
            None,
        ))
    }
}

/// Runs `scenario` on Leasehold and on every peer, `runs` times each, and
/// prints the figures side by side.
async fn compare<F, Fut>(
    common: &Common,
    name: &str,
    start_master: bool,
    mut parameters: serde_json::Value,
    scenario: F,
) -> anyhow::Result<()>
where
    F: Fn(System) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Vec<report::Figure>>>,
{
    let before = limits::measure(&std::env::temp_dir()).await?;
    let mut outcomes = Vec::new();
    let mut failures = Vec::new();
    for kind in std::iter::once(Kind::Leasehold).chain(common.peers.iter().copied()) {
        let mut runs = Vec::new();
        for run in 0..common.runs.max(1) {
            if !common.json {
                eprintln!(
                    "{name}: {} run {} of {}",
                    kind.name(),
                    run + 1,
                    common.runs.max(1)
                );
            }
            let (system, running) = common.system(kind, name, start_master).await?;
            let figures = scenario(system).await;
            if let Some(running) = running {
                running.stop().await;
            }
            match figures {
                Ok(figures) => runs.push(figures),
                // A peer that fails the scenario is reported as failing it;
                // Leasehold failing it fails the run.
                Err(e) if kind != Kind::Leasehold => {
                    eprintln!("{name}: {} failed: {e:#}", kind.name());
                    failures.push(format!("{}: {e:#}", kind.name()));
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if !runs.is_empty() {
            outcomes.push(Outcome::median(kind.name(), runs));
        }
    }
    // Measured again after the runs: a probe the machine's neighbours
    // slowed at one moment does not make the limit (`Limits::combine`).
    let after = limits::measure(&std::env::temp_dir()).await?;
    let limits = before.combine(&after);
    for outcome in &mut outcomes {
        for figure in &mut outcome.figures {
            figure.apply_limits(&limits);
        }
    }
    // A cell's report is a scenario of its own, beside the single
    // master's (its chart is `<scenario>-cell.svg`).
    let scenario = if common.cell {
        if let Some(p) = parameters.as_object_mut() {
            p.insert("members".into(), cell::MEMBERS.into());
        }
        format!("{name}-cell")
    } else {
        name.to_string()
    };
    let report = Report {
        scenario,
        parameters,
        limits: Some(limits),
        outcomes,
        failures,
    };
    if let Some(path) = &common.json_out {
        std::fs::write(path, format!("{}\n", report.to_json()))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if common.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_table());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Cli { scenario, common } = Cli::parse();
    if common.cell
        && !matches!(
            scenario,
            Scenario::Lock { .. }
                | Scenario::Kv { .. }
                | Scenario::Fanout { .. }
                | Scenario::Failover { .. }
        )
    {
        bail!("--cell is for lock, kv, fanout and failover");
    }
    let timed = |default: u64| common.duration.unwrap_or(Duration::from_secs(default));
    match scenario {
        Scenario::Sessions {
            sessions,
            connections,
            lease,
            keepalive_all,
        } => {
            if keepalive_all && !common.peers.is_empty() {
                bail!("--keepalive-all is Leasehold's own request: run it without --peer");
            }
            let shape = sessions::Shape {
                sessions,
                connections,
                lease,
                hold: timed(30),
                keepalive_all,
            };
            let parameters = serde_json::json!({
                "sessions": sessions, "connections": connections,
                "lease_ms": lease.as_millis() as u64, "hold_ms": shape.hold.as_millis() as u64,
                "keepalive_all": keepalive_all,
            });
            compare(&common, "sessions", true, parameters, |system| async move {
                sessions::run(&system, shape).await
            })
            .await
        }
        Scenario::Lock { clients, keys } => {
            let shapes = match (clients, keys) {
                (Some(clients), Some(keys)) => vec![lock::Shape { clients, keys }],
                _ => lock::DEFAULT_SHAPES.to_vec(),
            };
            let duration = timed(10);
            let parameters = serde_json::json!({
                "shapes": shapes.iter().map(|s| [s.clients, s.keys]).collect::<Vec<_>>(),
                "duration_ms": duration.as_millis() as u64,
            });
            compare(&common, "lock", true, parameters, |system| {
                let shapes = shapes.clone();
                async move { lock::run(&system, &shapes, duration).await }
            })
            .await
        }
        Scenario::Kv { clients } => {
            let duration = timed(10);
            let parameters = serde_json::json!({
                "clients": clients, "duration_ms": duration.as_millis() as u64,
            });
            compare(&common, "kv", true, parameters, |system| {
                let clients = clients.clone();
                async move { kv::run(&system, &clients, duration).await }
            })
            .await
        }
        Scenario::Cache {
            clients,
            keys,
            reads_per_mille,
            cachers,
        } => {
            let shape = cache::Shape {
                clients,
                keys,
                reads_per_mille: reads_per_mille.min(1_000),
                cachers,
            };
            let duration = timed(10);
            let parameters = serde_json::json!({
                "clients": clients, "keys": keys, "reads_per_mille": shape.reads_per_mille,
                "cachers": cachers, "duration_ms": duration.as_millis() as u64,
            });
            compare(&common, "cache", true, parameters, |system| async move {
                cache::run(&system, shape, duration).await
            })
            .await
        }
        Scenario::Fanout {
            subscribers,
            connections,
        } => {
            let shape = fanout::Shape {
                subscribers,
                connections,
            };
            let parameters = serde_json::json!({
                "subscribers": subscribers, "connections": connections,
            });
            compare(&common, "fanout", true, parameters, |system| async move {
                fanout::run(&system, shape).await
            })
            .await
        }
        Scenario::Failover {
            sessions,
            nodes,
            connections,
            keepalive_all,
            kills,
        } => {
            if common.addr.is_some() {
                bail!("failover kills and restarts the master: run it without --addr");
            }
            if kills > 1 && (!common.cell || !common.peers.is_empty()) {
                bail!("--kills is for a Leasehold cell: run it with --cell and without --peer");
            }
            if kills > 1 && common.runs > 1 {
                bail!("--kills gives each figure's median and p99 over its kills: run it without --runs");
            }
            if keepalive_all && !common.peers.is_empty() {
                bail!("--keepalive-all is Leasehold's own request: run it without --peer");
            }
            let shape = failover::Shape {
                sessions,
                nodes,
                connections,
                keepalive_all,
            };
            let parameters = serde_json::json!({
                "sessions": sessions, "nodes": nodes, "connections": connections,
                "keepalive_all": keepalive_all, "kills": kills,
            });
            let bin = master::find_binary(common.server_bin.as_deref())?;
            let cell = common.cell;
            compare(&common, "failover", false, parameters, |system| {
                let bin = bin.clone();
                async move { failover::run(&system, &bin, shape, cell, kills as usize).await }
            })
            .await
        }
        Scenario::Noisy {
            connections,
            rss_budget,
        } => {
            let shape = noisy::Shape {
                attack: timed(30),
                connections,
                rss_budget_mib: rss_budget,
            };
            let parameters = serde_json::json!({
                "attack_ms": shape.attack.as_millis() as u64, "connections": connections,
                "rss_budget_mib": rss_budget,
            });
            compare(&common, "noisy", true, parameters, |system| async move {
                noisy::run(&system, shape).await
            })
            .await
        }
        Scenario::Writes {
            clients,
            seconds,
            max_writes,
        } => {
            for n in clients {
                writes::writes(n, seconds, max_writes).await?;
            }
            Ok(())
        }
        Scenario::Recovery { sessions, nodes } => recovery::recovery(sessions, nodes).await,
        Scenario::Chart { reports, out } => {
            std::fs::create_dir_all(&out)?;
            for path in reports {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("cannot read {}", path.display()))?;
                let report: chart::Chartable = serde_json::from_str(&text).with_context(|| {
                    format!("{} is not a report printed with --json", path.display())
                })?;
                let file = out.join(format!("{}.svg", report.scenario));
                std::fs::write(&file, chart::svg(&report))?;
                println!("{}", file.display());
            }
            Ok(())
        }
    }
}
