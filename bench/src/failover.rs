//! `failover`: a master holding many sessions and nodes is killed
//! (SIGKILL) and started again on the same data directory; how long until
//! every client's session is `Normal` again on the new master (`FO-6`), and
//! until a new client can take a lock. In a cell (`--cell`) the master is
//! killed and stays down, and so is a peer cluster's leader: how long
//! until another member serves as master, too.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use leasehold::{Client, LockOptions, PutOptions, Session, SessionOptions, SessionState};

use crate::cell::Cell;
pub use crate::failover_peer::Shape;
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
use crate::failover_peer::{Peer, Tally};
use crate::failover_raw::RawHeld;
use crate::master::{serving, Master};
use crate::report::Figure;
use crate::retry::through_failovers;
use crate::system::{Kind, System};

/// Leasehold restarts a master of its own, or kills the master of a cell
/// of its own (`cell`); a peer is restarted by the command line its
/// process was started with, or, given a cluster's members, loses its
/// leader.
pub async fn run(
    system: &System,
    bin: &Path,
    shape: Shape,
    cell: bool,
    kills: usize,
) -> anyhow::Result<Vec<Figure>> {
    match system.kind {
        Kind::Leasehold if cell => leasehold_cell(bin, shape, kills).await,
        Kind::Leasehold => leasehold(bin, shape).await,
        #[cfg(feature = "etcd")]
        Kind::Etcd => peer(system, shape, crate::etcd::Failover::new(&system.addr)).await,
        #[cfg(feature = "zookeeper")]
        Kind::Zookeeper => peer(system, shape, crate::zookeeper::Failover::new(&system.addr)).await,
        #[allow(unreachable_patterns)]
        _ => Err(system.missing()),
    }
}

/// The scenario's figures, times measured from the kill: `back` says when
/// a master served again (the restarted one, or another member of a
/// cluster, where the killed one is not started again).
fn figures(back: Figure, all_back: Duration, lock_taken: Duration, expired: u64) -> Vec<Figure> {
    let mut figures = timed(back, all_back, lock_taken);
    figures.push(expired_figure(expired));
    figures
}

/// The figures one kill or restart gives, timed from it.
fn timed(back: Figure, all_back: Duration, lock_taken: Duration) -> Vec<Figure> {
    vec![
        back,
        Figure::lower("every session Normal again", "ms", ms(all_back)).target(2000.0),
        Figure::lower("a new lock taken", "ms", ms(lock_taken)).target(2000.0),
    ]
}

fn expired_figure(expired: u64) -> Figure {
    Figure::lower("sessions expired", "", expired as f64).target(0.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A restarted master's figure: when it listened again.
fn listening(after: Duration) -> Figure {
    Figure::lower("restarted master listening", "ms", ms(after))
}

/// A cluster's figure: when another member served as master (led).
fn new_master(after: Duration) -> Figure {
    Figure::lower("new master serving", "ms", ms(after))
}

/// `serve`'s arguments for a master that keeps the run's sessions, the
/// sessions a creation lost to a fail-over leaves until they expire, and
/// the new client's: past the default limit only when the run needs it.
fn room_for(shape: Shape) -> Vec<String> {
    let needed = shape.sessions + shape.sessions / 10 + 100;
    if needed <= leasehold_server::DEFAULT_MAX_SESSIONS {
        return Vec::new();
    }
    vec!["--max-sessions".to_string(), needed.to_string()]
}

/// How long a failover is given before the run fails.
const PATIENCE: Duration = Duration::from_secs(120);

async fn leasehold(bin: &Path, shape: Shape) -> anyhow::Result<Vec<Figure>> {
    // The nodes are written into the data directory before the master
    // starts: a million acknowledged writes would take most of a minute
    // and measure nothing this scenario is about.
    let nodes = shape.nodes;
    let mut master = Master::start_with(bin, "failover", &room_for(shape), move |dir| {
        crate::recovery::build(dir, 0, nodes)
    })
    .await?;
    let addr = master.addr().to_string();
    // The handshake waits for recovery, which a million nodes make longer
    // than a client's connect timeout.
    serving(&addr).await?;
    let mut held = Holders::open(&addr, shape).await?;

    held.arm();
    let started = Instant::now();
    master.restart().await?;
    let restarted = started.elapsed();
    let lock_taken = on_own_thread(lock_after(addr, started));
    let all_back = held.all_back(started).await?;
    let lock_taken = lock_taken.await?;
    if lock_taken >= PATIENCE {
        bail!("no lock could be taken within {PATIENCE:?} of the restart");
    }
    let reconnected = held.connections_back();
    let expired = held.close().await?;
    master.stop().await;
    let mut figures = figures(listening(restarted), all_back, lock_taken, expired);
    figures.extend(reconnected);
    Ok(figures)
}

/// The cell's master is killed and not started again: how long until a
/// surviving member serves as master under a higher epoch, until every
/// session is `Normal` again and until a new client can take a lock.
/// With `kills` past one, the killed member is started again once the
/// figures are in, the cell is let settle, and the next master is killed:
/// each figure is then the median and the 99th percentile over the kills.
async fn leasehold_cell(bin: &Path, shape: Shape, kills: usize) -> anyhow::Result<Vec<Figure>> {
    let mut cell = Cell::start(bin, "failover", &room_for(shape)).await?;
    let addr = cell.addr();
    // A cell's data directories hold a Raft log: the nodes are written
    // through the master, as the peers' are.
    preload(&addr, shape.nodes).await?;
    let mut held = Holders::open(&addr, shape).await?;
    let mut rounds = Vec::with_capacity(kills);
    for kill in 0..kills {
        // Every kill, the first too, meets a cell with no member behind.
        cell.steady().await?;
        let (killed, figures) = kill_master(&mut cell, &mut held).await?;
        if kills > 1 {
            let each: Vec<String> = figures
                .iter()
                .map(|f| format!("{} {:.0} {}", f.name, f.value, f.unit))
                .collect();
            eprintln!(
                "kill {} of {kills}, member {killed}: {}",
                kill + 1,
                each.join(", ")
            );
        }
        rounds.push(figures);
        if kill + 1 < kills {
            cell.restart(killed).await?;
        }
    }
    let expired = held.close().await?;
    cell.stop().await;
    let mut figures = if kills == 1 {
        rounds.pop().expect("one kill")
    } else {
        spread(&rounds)
    };
    figures.push(expired_figure(expired));
    Ok(figures)
}

/// One kill of the cell's master: the member killed, and the figures
/// timed from it.
async fn kill_master(cell: &mut Cell, held: &mut Holders) -> anyhow::Result<(u64, Vec<Figure>)> {
    let addr = cell.addr();
    let (master, epoch) = cell.master().await?;
    let survivors = cell.others(master);
    held.arm();
    let started = Instant::now();
    cell.kill(master).await?;
    let lock_taken = on_own_thread(lock_after(addr, started));
    let elected = on_own_thread(async move {
        loop {
            if let Some((_, now)) = crate::cell::master_among(&survivors).await {
                if now > epoch {
                    return Some(started.elapsed());
                }
            }
            if started.elapsed() > PATIENCE {
                return None;
            }
            // Each question is a connection of its own: asked every 5 ms,
            // not to load the members that are electing.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let all_back = held.all_back(started).await?;
    let Some(elected) = elected.await? else {
        bail!("no surviving member served as master within {PATIENCE:?} of the kill");
    };
    let lock_taken = lock_taken.await?;
    if lock_taken >= PATIENCE {
        bail!("no lock could be taken within {PATIENCE:?} of the kill");
    }
    let mut figures = timed(new_master(elected), all_back, lock_taken);
    figures.extend(held.connections_back());
    Ok((master, figures))
}

/// Runs `probe` on a thread and runtime of its own, as a client on
/// another machine would run: the held sessions' tasks, all woken by the
/// kill, would otherwise queue ahead of it in this process's runtime, and
/// the figure would time them rather than the cell.
fn on_own_thread<T: Send + 'static>(
    probe: impl std::future::Future<Output = T> + Send + 'static,
) -> impl std::future::Future<Output = anyhow::Result<T>> {
    // Started now, not when awaited: the probe runs beside the caller.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("failover-probe".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the probe");
            let _ = tx.send(runtime.block_on(probe));
        });
    async move {
        spawned.context("cannot start the probe's thread")?;
        rx.await
            .context("the probe's thread ended without a figure")
    }
}

/// Each figure of `rounds` (one list per kill, the same names in each) as
/// its median and its 99th percentile (nearest rank) over the kills,
/// against the targets for a cell's fail-over.
fn spread(rounds: &[Vec<Figure>]) -> Vec<Figure> {
    let kills = rounds.len();
    let mut figures = Vec::new();
    for first in &rounds[0] {
        let mut values: Vec<f64> = rounds
            .iter()
            .filter_map(|round| round.iter().find(|f| f.name == first.name))
            .map(|f| f.value)
            .collect();
        if values.len() < kills {
            // A figure some kills did not give is no figure of them all.
            continue;
        }
        values.sort_by(f64::total_cmp);
        let median = values[kills / 2];
        let p99 = values[(kills * 99).div_ceil(100).max(1) - 1];
        let (median_target, p99_target) = match first.name.as_str() {
            "new master serving" => (Some(600.0), Some(1000.0)),
            "every session Normal again" => (Some(1500.0), None),
            "a new lock taken" => (Some(700.0), None),
            _ => (None, None),
        };
        for (what, value, target) in [("median", median, median_target), ("p99", p99, p99_target)] {
            figures.push(Figure {
                name: format!("{}, {what} of {kills} kills", first.name),
                value,
                target,
                ..first.clone()
            });
        }
    }
    figures
}

/// Writes `nodes` nodes of 32 bytes (keys as `recovery::build` makes
/// them) over 8 connections, 64 writes in flight.
async fn preload(addr: &str, nodes: u64) -> anyhow::Result<()> {
    use futures::stream::{self, StreamExt, TryStreamExt};
    let clients = crate::load::open(8, "connecting", |_| {
        let addr = addr.to_string();
        async move { through_failovers(PATIENCE, || Client::connect(addr.clone())).await }
    })
    .await?;
    let bar = crate::progress::bar(nodes, "writing nodes");
    let writes = stream::iter(0..nodes)
        .map(|n| {
            let (client, bar) = (clients[n as usize % clients.len()].clone(), bar.clone());
            async move {
                let key = format!("data/{}/{n}", n % 1000);
                let value = b"0123456789abcdef0123456789abcdef";
                // The same value again is the same node: safe to repeat.
                through_failovers(PATIENCE, || {
                    client.put(&key, value.to_vec(), PutOptions::new())
                })
                .await?;
                bar.inc(1);
                anyhow::Ok(())
            }
        })
        .buffer_unordered(64)
        .try_collect::<()>();
    // Bounded in time as in count: a million writes take a minute or two.
    let limit = Duration::from_secs(600);
    tokio::time::timeout(limit, writes)
        .await
        .with_context(|| format!("writing {nodes} nodes took over {limit:?}"))??;
    bar.finish_and_clear();
    Ok(())
}

/// The sessions a run holds: by the client library, or over the raw
/// protocol (`--keepalive-all`).
enum Holders {
    Library(Held),
    Raw(RawHeld),
}

impl Holders {
    async fn open(addr: &str, shape: Shape) -> anyhow::Result<Holders> {
        Ok(if shape.keepalive_all {
            Holders::Raw(RawHeld::open(addr, shape).await?)
        } else {
            Holders::Library(Held::open(addr, shape).await?)
        })
    }

    fn arm(&self) {
        match self {
            Holders::Library(held) => held.arm(),
            Holders::Raw(held) => held.arm(),
        }
    }

    async fn all_back(&mut self, started: Instant) -> anyhow::Result<Duration> {
        match self {
            Holders::Library(held) => held.all_back(started).await,
            Holders::Raw(held) => held.all_back(started).await,
        }
    }

    /// The raw holders' figure: when every connection was made again.
    fn connections_back(&self) -> Option<Figure> {
        match self {
            Holders::Library(_) => None,
            Holders::Raw(held) => held
                .connections_back()
                .map(|after| Figure::lower("every connection made again", "ms", ms(after))),
        }
    }

    async fn close(self) -> anyhow::Result<u64> {
        match self {
            Holders::Library(held) => Ok(held.close()),
            Holders::Raw(held) => held.close().await,
        }
    }
}

/// Sessions kept alive by the client library over a few connections,
/// counting themselves back once `Normal` after a fail-over.
struct Held {
    sessions: Vec<Session>,
    back: Arc<AtomicU64>,
    expired: Arc<AtomicU64>,
    /// The kill being counted, from 1; set just before it: a fail-over
    /// before the first (a leader starved on a loaded machine while the
    /// run was set up) counts nobody back.
    round: Arc<AtomicU64>,
}

impl Held {
    /// Opens `shape.sessions` sessions over `shape.connections`
    /// connections to `addr`.
    async fn open(addr: &str, shape: Shape) -> anyhow::Result<Held> {
        let clients = crate::load::open(shape.connections, "connecting", |_| {
            let addr = addr.to_string();
            async move { through_failovers(PATIENCE, || Client::connect(addr.clone())).await }
        })
        .await?;
        let back = Arc::new(AtomicU64::new(0));
        let expired = Arc::new(AtomicU64::new(0));
        let round = Arc::new(AtomicU64::new(0));
        let bar = crate::progress::bar(shape.sessions as u64, "creating sessions");
        let sessions = futures::future::try_join_all((0..shape.sessions).map(|i| {
            let client = clients[i % clients.len()].clone();
            let (back, expired, bar) = (back.clone(), expired.clone(), bar.clone());
            let round = round.clone();
            async move {
                // A session created by an answer lost to a fail-over is
                // left to expire; it costs the run nothing it measures.
                let session = through_failovers(PATIENCE, || {
                    client.create_session(SessionOptions::new("bench-failover"))
                })
                .await?;
                // Counted once per kill, on the first `Normal` after its
                // `Failover`: each holds the round it last saw.
                let failed_over = AtomicU64::new(0);
                let counted = AtomicU64::new(0);
                session.on_state_change(move |state| {
                    let now = round.load(Ordering::SeqCst);
                    match state {
                        SessionState::Failover | SessionState::Safe if now > 0 => {
                            failed_over.store(now, Ordering::SeqCst)
                        }
                        SessionState::Normal
                            if now > 0
                                && failed_over.load(Ordering::SeqCst) == now
                                && counted.swap(now, Ordering::SeqCst) != now =>
                        {
                            back.fetch_add(1, Ordering::SeqCst);
                        }
                        SessionState::Expired => {
                            expired.fetch_add(1, Ordering::SeqCst);
                        }
                        _ => {}
                    }
                });
                bar.inc(1);
                anyhow::Ok(session)
            }
        }))
        .await?;
        bar.finish_and_clear();
        Ok(Held {
            sessions,
            back,
            expired,
            round,
        })
    }

    /// From now on, a session's way back through `Failover` counts, for
    /// the next kill: nobody is back from it yet.
    fn arm(&self) {
        self.back.store(0, Ordering::SeqCst);
        self.round.fetch_add(1, Ordering::SeqCst);
    }

    /// Waits until every session is back, and says when, from `started`.
    async fn all_back(&self, started: Instant) -> anyhow::Result<Duration> {
        let sessions = self.sessions.len();
        let bar = crate::progress::bar(sessions as u64, "sessions back to normal");
        let all_back = loop {
            let n = self.back.load(Ordering::SeqCst);
            bar.set_position(n);
            if n as usize >= sessions {
                break started.elapsed();
            }
            if started.elapsed() > PATIENCE {
                bail!(
                    "{n} of {sessions} sessions back to normal after {PATIENCE:?} ({} expired)",
                    self.expired.load(Ordering::SeqCst)
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        bar.finish_and_clear();
        Ok(all_back)
    }

    /// Ends the sessions and says how many had expired before.
    fn close(self) -> u64 {
        // Counted before the sessions are dropped: dropping ends them, and
        // each then reports `Expired` (`CS-8`).
        let expired = self.expired.load(Ordering::SeqCst);
        drop(self.sessions);
        expired
    }
}

/// From `started`, how long until a new client (a new connection and
/// session) takes a lock at `addr`; `PATIENCE` if none can.
async fn lock_after(addr: String, started: Instant) -> Duration {
    let members = crate::system::members(&addr);
    let mut attempts = 0;
    loop {
        // A new client of a cell tries the members in the order it is
        // given them and fails when the first cannot be reached (a member
        // that can names the master instead): each attempt starts at the
        // next member, as a client given the list in another order would.
        let first = attempts % members.len().max(1);
        attempts += 1;
        let addr = [&members[first..], &members[..first]].concat().join(",");
        let attempt = async {
            let client = Client::connect(addr).await?;
            let session = client
                .create_session(SessionOptions::new("bench-failover-lock"))
                .await?;
            let guard = session
                .lock(
                    "bench-failover-lock",
                    LockOptions::exclusive().timeout(Duration::from_secs(1)),
                )
                .await?;
            let taken = started.elapsed();
            guard.release().await?;
            let _ = session.close().await;
            anyhow::Ok(taken)
        };
        match attempt.await {
            Ok(taken) => return taken,
            Err(_) if started.elapsed() < PATIENCE => {
                tokio::time::sleep(Duration::from_millis(5)).await
            }
            Err(_) => return PATIENCE,
        }
    }
}

/// Kills the peer's server (found by its port), starts it again the way
/// it was started, and times the clients' return. Given a cluster's
/// members, kills its leader instead ([`peer_cluster`]).
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
async fn peer<P: Peer>(system: &System, shape: Shape, peer: P) -> anyhow::Result<Vec<Figure>> {
    let shape = Shape {
        sessions: shape.sessions.min(system.kind.max_sessions()),
        ..shape
    };
    if crate::system::members(&system.addr).len() > 1 {
        return peer_cluster(system, shape, peer).await;
    }
    let pid = *system
        .pids
        .first()
        .with_context(|| format!("no process on this machine serves {}", system.addr))?;
    let launch = crate::peer_process::Launch::of(pid)?;
    peer.preload(shape.nodes).await?;
    let tally = Arc::new(Tally::default());
    let sessions = peer.open(shape, tally.clone()).await?;

    let started = Instant::now();
    tally.restarted.store(true, Ordering::SeqCst);
    crate::peer_process::kill(pid).await?;
    launch.spawn()?;
    let restarted = loop {
        if tokio::net::TcpStream::connect(&system.addr).await.is_ok() {
            break started.elapsed();
        }
        if started.elapsed() > PATIENCE {
            bail!("{} did not listen again within {PATIENCE:?}", system.addr);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let (lock_taken, all_back) = tokio::join!(
        peer_lock_after(&peer, started),
        peer_all_back(&tally, shape.sessions, started)
    );
    let (lock_taken, all_back) = (lock_taken?, all_back?);
    let expired = tally.expired.load(Ordering::SeqCst);
    drop(sessions);
    Ok(figures(listening(restarted), all_back, lock_taken, expired))
}

/// Kills the leader of the peer's cluster, whose members `system.addr`
/// lists, and times a new leader, the clients' return and a new lock
/// while it is down; then starts it again the way it was started, so that
/// the cluster is whole for another run.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
async fn peer_cluster<P: Peer>(
    system: &System,
    shape: Shape,
    peer: P,
) -> anyhow::Result<Vec<Figure>> {
    let members = crate::system::members(&system.addr);
    peer.preload(shape.nodes).await?;
    let tally = Arc::new(Tally::default());
    let sessions = peer.open(shape, tally.clone()).await?;
    let (leader, _) = peer_leader(&peer, &members, Instant::now()).await?;
    let killed = members[leader].clone();
    let pid = crate::system::port(&killed)
        .and_then(crate::procstat::listening_on)
        .with_context(|| format!("no process on this machine serves {killed}"))?;
    let launch = crate::peer_process::Launch::of(pid)?;
    let survivors: Vec<String> = members.iter().filter(|m| **m != killed).cloned().collect();

    let started = Instant::now();
    tally.restarted.store(true, Ordering::SeqCst);
    crate::peer_process::kill(pid).await?;
    let (elected, lock_taken, all_back) = tokio::join!(
        peer_leader(&peer, &survivors, started),
        peer_lock_after(&peer, started),
        peer_all_back(&tally, shape.sessions, started)
    );
    let expired = tally.expired.load(Ordering::SeqCst);
    drop(sessions);
    // Started again whatever the outcome, then waited for.
    launch.spawn()?;
    let restarted = Instant::now();
    while tokio::net::TcpStream::connect(&killed).await.is_err() {
        if restarted.elapsed() > PATIENCE {
            bail!("{killed} did not listen again within {PATIENCE:?} of its restart");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, elected) = elected?;
    Ok(figures(
        new_master(elected),
        all_back?,
        lock_taken?,
        expired,
    ))
}

/// The index of the member of `members` that leads, once one does, and
/// when, from `started`; asked every 5 ms (as a cell's members are), up
/// to `PATIENCE`.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
async fn peer_leader<P: Peer>(
    peer: &P,
    members: &[String],
    started: Instant,
) -> anyhow::Result<(usize, Duration)> {
    loop {
        for (i, member) in members.iter().enumerate() {
            if peer.leads(member).await {
                return Ok((i, started.elapsed()));
            }
        }
        if started.elapsed() > PATIENCE {
            bail!("no member of {members:?} led within {PATIENCE:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// From `started`, how long until a new connection and session take a
/// lock; bounded by `PATIENCE`.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
async fn peer_lock_after<P: Peer>(peer: &P, started: Instant) -> anyhow::Result<Duration> {
    loop {
        match tokio::time::timeout(Duration::from_secs(5), peer.lock_once()).await {
            Ok(Ok(())) => return Ok(started.elapsed()),
            _ if started.elapsed() > PATIENCE => {
                bail!("no lock could be taken within {PATIENCE:?} of the restart")
            }
            _ => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// From `started`, how long until all `sessions` counted themselves back;
/// bounded by `PATIENCE`.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
async fn peer_all_back(
    tally: &Tally,
    sessions: usize,
    started: Instant,
) -> anyhow::Result<Duration> {
    let bar = crate::progress::bar(sessions as u64, "sessions back");
    loop {
        let n = tally.back.load(Ordering::SeqCst);
        bar.set_position(n);
        if n as usize >= sessions {
            bar.finish_and_clear();
            return Ok(started.elapsed());
        }
        if started.elapsed() > PATIENCE {
            bail!(
                "{n} of {sessions} sessions back after {PATIENCE:?} ({} lost)",
                tally.expired.load(Ordering::SeqCst)
            );
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
