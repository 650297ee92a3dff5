//! `failover`: a master holding many sessions and nodes is killed
//! (SIGKILL) and started again on the same data directory; how long until
//! every client's session is `Normal` again on the new master (`FO-6`), and
//! until a new client can take a lock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use leasehold::{Client, LockOptions, SessionOptions, SessionState};

use crate::master::Master;
use crate::report::Figure;
use crate::system::{Kind, System};
use std::path::Path;

#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub sessions: usize,
    pub nodes: u64,
    pub connections: usize,
}

/// Leasehold restarts a master of its own; a peer is restarted by the
/// command line its process was started with.
pub async fn run(system: &System, bin: &Path, shape: Shape) -> anyhow::Result<Vec<Figure>> {
    match system.kind {
        Kind::Leasehold => leasehold(bin, shape).await,
        #[cfg(feature = "etcd")]
        Kind::Etcd => crate::etcd::failover(system, shape).await,
        #[cfg(feature = "zookeeper")]
        Kind::Zookeeper => crate::zookeeper::failover(system, shape).await,
        #[allow(unreachable_patterns)]
        _ => Err(system.missing()),
    }
}

/// The scenario's figures, times measured from the kill.
fn figures(
    listening: Duration,
    all_back: Duration,
    lock_taken: Duration,
    expired: u64,
) -> Vec<Figure> {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    vec![
        Figure::lower("restarted master listening", "ms", ms(listening)),
        Figure::lower("every session Normal again", "ms", ms(all_back)).target(2000.0),
        Figure::lower("a new lock taken", "ms", ms(lock_taken)).target(2000.0),
        Figure::lower("sessions expired", "", expired as f64).target(0.0),
    ]
}

/// How long a failover is given before the run fails.
const PATIENCE: Duration = Duration::from_secs(120);

async fn leasehold(bin: &Path, shape: Shape) -> anyhow::Result<Vec<Figure>> {
    // The nodes are written into the data directory before the master
    // starts: a million acknowledged writes would take most of a minute
    // and measure nothing this scenario is about.
    let nodes = shape.nodes;
    let mut master = Master::start_with(bin, "failover", move |dir| {
        crate::recovery::build(dir, 0, nodes)
    })
    .await?;
    let addr = master.addr().to_string();
    // The handshake waits for recovery, which a million nodes make longer
    // than a client's connect timeout.
    serving(&addr).await?;
    let clients = crate::load::open(shape.connections, "connecting", |_| {
        let addr = addr.clone();
        async move { anyhow::Ok(Client::connect(addr).await?) }
    })
    .await?;
    let back = Arc::new(AtomicU64::new(0));
    let expired = Arc::new(AtomicU64::new(0));
    let bar = crate::progress::bar(shape.sessions as u64, "creating sessions");
    let sessions = futures::future::try_join_all((0..shape.sessions).map(|i| {
        let client = clients[i % clients.len()].clone();
        let (back, expired, bar) = (back.clone(), expired.clone(), bar.clone());
        async move {
            let session = client
                .create_session(SessionOptions::new("bench-failover"))
                .await?;
            // Counted once, on the first `Normal` after the `Failover`.
            let failed_over = AtomicBool::new(false);
            let counted = AtomicBool::new(false);
            session.on_state_change(move |state| match state {
                SessionState::Failover | SessionState::Safe => {
                    failed_over.store(true, Ordering::SeqCst)
                }
                SessionState::Normal
                    if failed_over.load(Ordering::SeqCst)
                        && !counted.swap(true, Ordering::SeqCst) =>
                {
                    back.fetch_add(1, Ordering::SeqCst);
                }
                SessionState::Expired => {
                    expired.fetch_add(1, Ordering::SeqCst);
                }
                _ => {}
            });
            bar.inc(1);
            anyhow::Ok(session)
        }
    }))
    .await?;
    bar.finish_and_clear();

    let started = Instant::now();
    master.restart().await?;
    let listening = started.elapsed();
    let lock_taken = tokio::spawn({
        let addr = master.addr().to_string();
        async move {
            loop {
                let attempt = async {
                    let client = Client::connect(addr.clone()).await?;
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
    });
    let bar = crate::progress::bar(shape.sessions as u64, "sessions back to normal");
    let all_back = loop {
        let n = back.load(Ordering::SeqCst);
        bar.set_position(n);
        if n as usize >= shape.sessions {
            break started.elapsed();
        }
        if started.elapsed() > PATIENCE {
            bail!(
                "{n} of {} sessions back to normal after {PATIENCE:?} ({} expired)",
                shape.sessions,
                expired.load(Ordering::SeqCst)
            );
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    bar.finish_and_clear();
    let lock_taken = lock_taken.await?;
    if lock_taken >= PATIENCE {
        bail!("no lock could be taken within {PATIENCE:?} of the restart");
    }
    // Counted before the sessions are dropped: dropping ends them, and
    // each then reports `Expired` (`CS-8`).
    let expired = expired.load(Ordering::SeqCst);
    drop(sessions);
    master.stop().await;
    Ok(figures(listening, all_back, lock_taken, expired))
}

/// Waits until the master at `addr` (or the master of the cell whose
/// members it lists) answers a request.
pub async fn serving(addr: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let probe = async { Client::connect(addr.to_string()).await?.epoch().await };
        match probe.await {
            Ok(_) => return Ok(()),
            Err(e) if started.elapsed() > Duration::from_secs(300) => {
                return Err(anyhow::Error::new(e).context("the master did not serve within 300 s"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// What the failover scenario needs of a peer.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub trait Peer {
    /// Sessions kept alive by the peer's client library; dropping it ends
    /// them.
    type Sessions;

    /// Writes `nodes` small nodes.
    async fn preload(&self, nodes: u64) -> anyhow::Result<()>;

    /// Opens `shape.sessions` sessions over `shape.connections`
    /// connections. Once `restarted` is set, each counts itself in `back`
    /// the first time it is renewed, and in `expired` if it is lost.
    async fn open(&self, shape: Shape, tally: Arc<Tally>) -> anyhow::Result<Self::Sessions>;

    /// A new connection and session take a lock and release it.
    async fn lock_once(&self) -> anyhow::Result<()>;
}

/// Counters a peer's sessions share.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
#[derive(Default)]
pub struct Tally {
    pub restarted: AtomicBool,
    pub back: AtomicU64,
    pub expired: AtomicU64,
}

/// Kills the peer's server (found by its port), starts it again the way
/// it was started, and times the clients' return.
#[cfg(any(feature = "etcd", feature = "zookeeper"))]
pub async fn peer<P: Peer>(system: &System, shape: Shape, peer: P) -> anyhow::Result<Vec<Figure>> {
    use anyhow::Context;
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
    let listening = loop {
        if tokio::net::TcpStream::connect(&system.addr).await.is_ok() {
            break started.elapsed();
        }
        if started.elapsed() > PATIENCE {
            bail!("{} did not listen again within {PATIENCE:?}", system.addr);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let lock_taken = async {
        loop {
            match tokio::time::timeout(Duration::from_secs(5), peer.lock_once()).await {
                Ok(Ok(())) => return Ok(started.elapsed()),
                _ if started.elapsed() > PATIENCE => {
                    bail!("no lock could be taken within {PATIENCE:?} of the restart")
                }
                _ => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    };
    let all_back = async {
        let bar = crate::progress::bar(shape.sessions as u64, "sessions back");
        loop {
            let n = tally.back.load(Ordering::SeqCst);
            bar.set_position(n);
            if n as usize >= shape.sessions {
                bar.finish_and_clear();
                return Ok(started.elapsed());
            }
            if started.elapsed() > PATIENCE {
                bail!(
                    "{n} of {} sessions back after {PATIENCE:?} ({} lost)",
                    shape.sessions,
                    tally.expired.load(Ordering::SeqCst)
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    let (lock_taken, all_back) = tokio::join!(lock_taken, all_back);
    let (lock_taken, all_back) = (lock_taken?, all_back?);
    let expired = tally.expired.load(Ordering::SeqCst);
    drop(sessions);
    Ok(figures(listening, all_back, lock_taken, expired))
}
