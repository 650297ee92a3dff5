//! Benchmarks that print figures (BENCHMARKS.md records them). Everything
//! runs on loopback against an in-process master, in a fresh data
//! directory under the system's temporary directory, and stops by itself.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};
use leasehold::{Client, PutOptions};
use leasehold_protocol::{Behavior, SessionId};
use leasehold_server::{Command, Config, FileStore, Put, Record, Store};

#[derive(Parser)]
#[command(name = "leasehold-bench", about = "Leasehold benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// Acknowledged (fsynced) writes per second with N concurrent clients,
    /// and the fsyncs that carried them.
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
    /// Time for a master to recover a data directory and serve a request.
    Recovery {
        #[arg(long, default_value_t = 100_000)]
        sessions: u64,
        #[arg(long, default_value_t = 1_000_000)]
        nodes: u64,
    },
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("leasehold-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Starts a master on loopback over `dir`; returns its address and a
/// sender that stops it.
async fn serve(
    dir: &Path,
) -> anyhow::Result<(
    String,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let config = Config {
        data_dir: Some(dir.to_path_buf()),
        ..Config::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        if let Err(e) = leasehold_server::run(listener, config, async {
            let _ = stopped.await;
        })
        .await
        {
            eprintln!("master: {e}");
        }
    });
    Ok((addr, stop, task))
}

async fn writes(clients: usize, seconds: u64, max_writes: u64) -> anyhow::Result<()> {
    let dir = scratch(&format!("writes{clients}"));
    let (addr, stop, task) = serve(&dir).await?;
    let done = Arc::new(AtomicU64::new(0));
    let fsyncs_before = leasehold_server::fsync_count();
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let client = Client::connect(addr.clone()).await?;
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = 0u64;
            while Instant::now() < until && done.load(Ordering::Relaxed) < max_writes {
                n += 1;
                let sent = Instant::now();
                client
                    .put(
                        &format!("bench/{c}/{}", n % 1000),
                        "0123456789abcdef",
                        PutOptions::new(),
                    )
                    .await?;
                latencies.push(sent.elapsed());
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(latencies)
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await??);
    }
    let elapsed = started.elapsed().as_secs_f64();
    let fsyncs = leasehold_server::fsync_count() - fsyncs_before;
    let writes = done.load(Ordering::Relaxed);
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p) as usize];
    println!(
        "clients={clients:>3}  writes={writes:>8}  writes/s={:>9.0}  fsyncs/s={:>7.0}  writes/fsync={:>6.1}  p50={:?}  p99={:?}",
        writes as f64 / elapsed,
        fsyncs as f64 / elapsed,
        writes as f64 / fsyncs.max(1) as f64,
        pct(0.5),
        pct(0.99),
    );
    let _ = stop.send(());
    let _ = task.await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// Writes a data directory holding `sessions` sessions and `nodes` nodes as
/// a log of the commands that made them.
fn build(dir: &Path, sessions: u64, nodes: u64) -> anyhow::Result<()> {
    let (mut store, _) = FileStore::open(dir)?;
    store.append(&Record::Epoch(1))?;
    for s in 0..sessions {
        store.append(&Record::Command {
            now: 1,
            command: Command::CreateSession {
                id: SessionId::from_u128(u128::from(s) + 1),
                name: format!("s{s}"),
                lease: Some(Duration::from_secs(60)),
                lock_delay: None,
                behavior: Behavior::Release,
                checks: Vec::new(),
            },
        })?;
    }
    for n in 0..nodes {
        store.append(&Record::Command {
            now: 2,
            command: Command::Put(Put {
                key: format!("data/{}/{n}", n % 1000),
                contents: b"0123456789abcdef0123456789abcdef".to_vec(),
                flags: 0,
                cas: None,
                ephemeral: None,
            }),
        })?;
    }
    store.sync()?;
    Ok(())
}

async fn recovery(sessions: u64, nodes: u64) -> anyhow::Result<()> {
    let dir = scratch("recovery");
    let built = Instant::now();
    build(&dir, sessions, nodes).context("building the data directory")?;
    let log = std::fs::metadata(dir.join("log"))?.len();
    println!(
        "built {sessions} sessions and {nodes} nodes as a {:.1} MiB log in {:.1?}",
        log as f64 / (1 << 20) as f64,
        built.elapsed()
    );
    // First start replays the log (and writes a snapshot); the second
    // loads that snapshot.
    for what in ["from the log", "from a snapshot"] {
        let started = Instant::now();
        let (addr, stop, task) = serve(&dir).await?;
        // The handshake waits for recovery; the client gives up on it after
        // its timeout, so try again until the master answers.
        let deadline = started + Duration::from_secs(600);
        let client = loop {
            match Client::connect(addr.clone()).await {
                Ok(client) => match client.get("data/0/0").await {
                    Ok(probe) => {
                        anyhow::ensure!(probe.is_some(), "a recovered node is missing");
                        break client;
                    }
                    Err(e) if Instant::now() > deadline => return Err(e.into()),
                    Err(_) => {}
                },
                Err(e) if Instant::now() > deadline => return Err(e.into()),
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        println!(
            "recovery {what}: first request served after {:.2?}",
            started.elapsed()
        );
        drop(client);
        let _ = stop.send(());
        let _ = task.await;
    }
    let snapshot = std::fs::metadata(dir.join("snapshot"))?.len();
    println!("snapshot: {:.1} MiB", snapshot as f64 / (1 << 20) as f64);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Bench::Writes {
            clients,
            seconds,
            max_writes,
        } => {
            for n in clients {
                writes(n, seconds, max_writes).await?;
            }
        }
        Bench::Recovery { sessions, nodes } => recovery(sessions, nodes).await?,
    }
    Ok(())
}
