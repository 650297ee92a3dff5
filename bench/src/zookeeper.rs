//! ZooKeeper 3.8 through its Rust client, zookeeper-client: a session is
//! a connection (ZooKeeper binds the two), a lock is the
//! Curator-compatible lock recipe, a subscriber is a one-shot data watch.
//!
//! One session per connection means one file descriptor per session on
//! each side: the scenarios that hold many sessions hold at most
//! `Kind::max_sessions` here and report per-session figures.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::stream::{self, StreamExt, TryStreamExt};
use tokio::sync::{watch, Barrier};
use zookeeper_client as zk;

use crate::failover_peer;
use crate::fanout_arrivals::{Arrivals, Meters, Shape as FanoutShape};
use crate::sessions_tally::{Phase, Tally};

/// A session with the server at `addr`, or with one of the ensemble's
/// servers it lists (`HOST:PORT,HOST:PORT,...`, ZooKeeper's own connect
/// string): the client moves to another if its server goes.
pub async fn connect(addr: &str, timeout: Duration) -> anyhow::Result<zk::Client> {
    Ok(zk::Client::connector()
        .with_session_timeout(timeout)
        .connect(addr)
        .await?)
}

fn everyone() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

/// A key as a ZooKeeper path: one level below the root, so a write never
/// needs its parents made first.
fn path(key: &str) -> String {
    format!("/{}", key.replace('/', "_"))
}

/// A session, taking and releasing Curator-compatible locks.
pub struct Locker {
    client: zk::Client,
}

impl Locker {
    pub async fn new(addr: &str, lease: Duration) -> anyhow::Result<Locker> {
        Ok(Locker {
            client: connect(addr, lease).await?,
        })
    }

    pub async fn cycle(&self, key: &str) -> anyhow::Result<()> {
        let dir = format!("/{key}");
        let prefix = zk::LockPrefix::new_curator(&dir, "lock-")?;
        let options =
            zk::LockOptions::new(zk::Acls::anyone_all()).with_ancestor_options(everyone())?;
        let lock = self.client.lock(prefix, b"", options).await?;
        // Release as Curator does, by deleting the lock node and awaiting
        // the reply. The guard would delete it again in the background on
        // drop (a second, failing write), so it is forgotten instead: that
        // leaks its path string, a few dozen bytes per cycle of a run that
        // lasts seconds.
        self.client.delete(lock.lock_path(), None).await?;
        std::mem::forget(lock);
        Ok(())
    }

    pub async fn close(self) {
        drop(self.client);
    }
}

/// A connection (and session) reading and writing nodes.
#[derive(Clone)]
pub struct Kv {
    client: zk::Client,
}

impl Kv {
    pub async fn new(addr: &str) -> anyhow::Result<Kv> {
        Ok(Kv {
            client: connect(addr, Duration::from_secs(12)).await?,
        })
    }

    /// Sets the node's data, creating it the first time.
    pub async fn put(&self, key: &str, value: &[u8]) -> anyhow::Result<()> {
        let path = path(key);
        match self.client.set_data(&path, value, None).await {
            Err(zk::Error::NoNode) => match self.client.create(&path, value, &everyone()).await {
                Err(zk::Error::NodeExists) => {
                    self.client.set_data(&path, value, None).await?;
                }
                other => {
                    other?;
                }
            },
            other => {
                other?;
            }
        }
        Ok(())
    }

    pub async fn get(&self, key: &str) -> anyhow::Result<bool> {
        match self.client.get_data(&path(key)).await {
            Ok(_) => Ok(true),
            Err(zk::Error::NoNode) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Reads `key` after a `sync`, so the read sees every write the
    /// leader had committed when it began: ZooKeeper's linearizable read.
    pub async fn get_synced(&self, key: &str) -> anyhow::Result<bool> {
        self.client.sync(&path(key)).await?;
        self.get(key).await
    }
}

/// `sessions`: `n` sessions, each its own connection, until the phase is
/// `Closing`. The client pings on its own; its pings are not counted.
pub async fn hold_sessions(
    addr: &str,
    n: usize,
    lease: Duration,
    tally: Arc<Tally>,
    mut phase: watch::Receiver<Phase>,
) -> anyhow::Result<()> {
    let clients: Vec<zk::Client> = stream::iter(0..n)
        .map(|_| connect(addr, lease))
        .buffer_unordered(16)
        .try_collect()
        .await?;
    let watchers: Vec<_> = clients
        .iter()
        .map(|client| {
            let mut states = client.state_watcher();
            let tally = tally.clone();
            tokio::spawn(async move {
                loop {
                    let state = states.changed().await;
                    if state == zk::SessionState::Expired {
                        tally.expired.fetch_add(1, Ordering::Relaxed);
                    }
                    if state.is_terminated() {
                        return;
                    }
                }
            })
        })
        .collect();
    tally.created.fetch_add(n as u64, Ordering::Relaxed);
    let _ = phase.wait_for(|p| *p == Phase::Closing).await;
    for watcher in watchers {
        watcher.abort();
    }
    drop(clients);
    Ok(())
}

/// `fanout`: `shape.subscribers` one-shot watches of the node, spread over
/// `shape.connections` sessions. ZooKeeper sends one notification per
/// session and path; the client library hands it to each watcher.
pub async fn fanout(
    addr: &str,
    pids: &[u32],
    key: &str,
    shape: FanoutShape,
) -> anyhow::Result<Arrivals> {
    let path = path(key);
    let setup = connect(addr, Duration::from_secs(12)).await?;
    setup.create(&path, b"", &everyone()).await?;
    let per = shape.subscribers.div_ceil(shape.connections.max(1));
    let sessions = shape.subscribers.div_ceil(per);
    let ready = Arc::new(Barrier::new(sessions + 1));
    let (start_tx, start) = watch::channel(None::<Instant>);
    let mut tasks = Vec::new();
    let mut remaining = shape.subscribers;
    for _ in 0..sessions {
        let n = per.min(remaining);
        remaining -= n;
        let (addr, path, ready, mut start) =
            (addr.to_string(), path.clone(), ready.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            let setup = async {
                let client = connect(&addr, Duration::from_secs(12)).await?;
                let mut watchers = Vec::new();
                for _ in 0..n {
                    let (_, _, watcher) = client.get_and_watch_data(&path).await?;
                    watchers.push(watcher);
                }
                anyhow::Ok((client, watchers))
            }
            .await;
            ready.wait().await;
            let (client, watchers) = setup?;
            let sent = start.wait_for(|s| s.is_some()).await?.expect("set");
            let arrivals = futures::future::join_all(watchers.into_iter().map(|w| async move {
                w.changed().await;
                sent.elapsed()
            }));
            let arrivals = tokio::time::timeout(Duration::from_secs(60), arrivals)
                .await
                .context("not every watch fired within 60 s")?;
            // Closed after the measurement.
            anyhow::Ok((arrivals, client))
        }));
    }
    ready.wait().await;
    let meters = Meters::start(pids);
    start_tx.send_replace(Some(Instant::now()));
    setup.set_data(&path, b"x", None).await?;
    let mut arrivals = Vec::new();
    let mut clients = Vec::new();
    for t in tasks {
        let (times, client) = t.await??;
        arrivals.extend(times);
        clients.push(client);
    }
    let arrivals = meters.finish(arrivals);
    drop(clients);
    let _ = setup.delete(&path, None).await;
    Ok(arrivals)
}

/// `failover` against ZooKeeper.
pub struct Failover {
    addr: String,
}

impl Failover {
    pub fn new(addr: &str) -> Failover {
        Failover {
            addr: addr.to_string(),
        }
    }
}

impl failover_peer::Peer for Failover {
    type Sessions = (Vec<zk::Client>, Vec<tokio::task::JoinHandle<()>>);

    async fn preload(&self, nodes: u64) -> anyhow::Result<()> {
        let client = connect(&self.addr, Duration::from_secs(30)).await?;
        let root = format!("/bench-data-{}", uuid::Uuid::new_v4().simple());
        client.create(&root, b"", &everyone()).await?;
        const BATCH: u64 = 1000;
        let batches = nodes.div_ceil(BATCH);
        let bar = crate::progress::bar(batches, "writing nodes");
        stream::iter(0..batches)
            .map(|b| {
                let (client, root, bar) = (client.clone(), root.clone(), bar.clone());
                async move {
                    let mut writer = client.new_multi_writer();
                    for n in b * BATCH..((b + 1) * BATCH).min(nodes) {
                        writer.add_create(&format!("{root}/{n}"), &[7u8; 32], &everyone())?;
                    }
                    writer
                        .commit()
                        .await
                        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
                    bar.inc(1);
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(16)
            .try_collect::<()>()
            .await?;
        bar.finish_and_clear();
        Ok(())
    }

    async fn open(
        &self,
        shape: failover_peer::Shape,
        tally: Arc<failover_peer::Tally>,
    ) -> anyhow::Result<Self::Sessions> {
        let bar = crate::progress::bar(shape.sessions as u64, "opening sessions");
        let clients: Vec<zk::Client> = stream::iter(0..shape.sessions)
            .map(|_| {
                let bar = bar.clone();
                async move {
                    let client = connect(&self.addr, Duration::from_secs(12)).await?;
                    bar.inc(1);
                    anyhow::Ok(client)
                }
            })
            .buffer_unordered(16)
            .try_collect()
            .await?;
        bar.finish_and_clear();
        let watchers = clients
            .iter()
            .map(|client| {
                let mut states = client.state_watcher();
                let tally = tally.clone();
                tokio::spawn(async move {
                    loop {
                        match states.changed().await {
                            zk::SessionState::SyncConnected
                                if tally.restarted.load(Ordering::SeqCst) =>
                            {
                                tally.back.fetch_add(1, Ordering::SeqCst);
                                return;
                            }
                            state if state.is_terminated() => {
                                tally.expired.fetch_add(1, Ordering::SeqCst);
                                return;
                            }
                            _ => {}
                        }
                    }
                })
            })
            .collect();
        Ok((clients, watchers))
    }

    async fn lock_once(&self) -> anyhow::Result<()> {
        let locker = Locker::new(&self.addr, Duration::from_secs(12)).await?;
        locker.cycle("bench-failover-lock").await
    }

    /// The four-letter word `srvr` on a connection of its own says `Mode:
    /// leader` (a server still electing says it is not serving).
    async fn leads(&self, member: &str) -> bool {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let ask = async {
            let mut stream = tokio::net::TcpStream::connect(member).await?;
            stream.write_all(b"srvr").await?;
            let mut reply = String::new();
            stream.read_to_string(&mut reply).await?;
            anyhow::Ok(reply.lines().any(|line| line.trim() == "Mode: leader"))
        };
        matches!(
            tokio::time::timeout(Duration::from_secs(1), ask).await,
            Ok(Ok(true))
        )
    }
}
