//! etcd 3 through its Rust client, etcd-client: a session is a lease kept
//! alive over a keep-alive stream (renewed every third of its TTL, as
//! etcd's own Go client does), a lock is the Lock API bound to that lease,
//! and a subscriber is a watch.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use etcd_client::{Client, ConnectOptions, LockOptions};
use futures::stream::{self, StreamExt, TryStreamExt};
use tokio::sync::{watch, Barrier};
use tokio::task::JoinHandle;

use crate::failover_peer;
use crate::fanout_arrivals::{Arrivals, Meters, Shape as FanoutShape};
use crate::sessions_tally::{Phase, Tally};

/// A new client with its own HTTP/2 connection to the server at `addr`,
/// or to each member of the cluster it lists (`HOST:PORT,HOST:PORT,...`),
/// among which the client balances its requests; over TLS to a server
/// whose certificate `ca` (PEM) signed, when given.
pub async fn connect(addr: &str, ca: Option<&Path>) -> anyhow::Result<Client> {
    let scheme = if ca.is_some() { "https" } else { "http" };
    let endpoints: Vec<String> = crate::system::members(addr)
        .iter()
        .map(|member| format!("{scheme}://{member}"))
        .collect();
    let options = match ca {
        None => None,
        Some(ca) => {
            let pem = std::fs::read(ca).with_context(|| {
                format!(
                    "reading etcd's CA {}: `bench/peers/start.sh start` writes it",
                    ca.display()
                )
            })?;
            let tls = etcd_client::TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(pem));
            Some(ConnectOptions::new().with_tls(tls))
        }
    };
    Ok(Client::connect(endpoints, options).await?)
}

fn ttl(lease: Duration) -> i64 {
    lease.as_secs().max(1) as i64
}

/// Keeps lease `id` alive until aborted or the lease is gone, the way
/// etcd's Go client does: a renewal every third of the TTL over a
/// keep-alive stream, read continuously, and a new stream (which renews at
/// once) 50 ms after one fails. `renewed` hears of each renewal (`true`)
/// and of the lease's loss (`false`).
async fn keep_alive(client: Client, id: i64, ttl: i64, mut renewed: impl FnMut(bool)) {
    let period = Duration::from_millis(ttl as u64 * 1000 / 3);
    loop {
        match client.clone().lease_keep_alive(id).await {
            Ok((mut keeper, mut replies)) => {
                renewed(true);
                let mut next = tokio::time::Instant::now() + period;
                loop {
                    tokio::select! {
                        reply = replies.message() => match reply {
                            Ok(Some(reply)) if reply.ttl() > 0 => renewed(true),
                            Ok(Some(_)) => {
                                renewed(false);
                                return;
                            }
                            _ => break,
                        },
                        _ = tokio::time::sleep_until(next) => {
                            if keeper.keep_alive().await.is_err() {
                                break;
                            }
                            next += period;
                        }
                    }
                }
            }
            // Opening a stream reads one reply; TTL 0 there is this error.
            Err(etcd_client::Error::LeaseKeepAliveError(_)) => {
                renewed(false);
                return;
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Grants a lease of `ttl` seconds. etcd refuses requests while its
/// applied index lags its committed one by 5,000 ("too many requests"), as
/// it does under a burst of grants: those are tried again shortly.
async fn grant(mut client: Client, ttl: i64) -> anyhow::Result<i64> {
    let mut tries = 0;
    loop {
        match client.lease_grant(ttl, None).await {
            Ok(granted) => return Ok(granted.id()),
            Err(e) if tries < 100 && e.to_string().contains("too many requests") => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// A client with a lease, kept alive in the background, taking locks
/// bound to it.
pub struct Locker {
    client: Client,
    lease: i64,
    keeper: JoinHandle<()>,
}

impl Locker {
    pub async fn new(addr: &str, ca: Option<&Path>, lease: Duration) -> anyhow::Result<Locker> {
        let mut client = connect(addr, ca).await?;
        let grant = client.lease_grant(ttl(lease), None).await?;
        let keeper = tokio::spawn(keep_alive(client.clone(), grant.id(), grant.ttl(), |_| {}));
        Ok(Locker {
            client,
            lease: grant.id(),
            keeper,
        })
    }

    pub async fn cycle(&self, key: &str) -> anyhow::Result<()> {
        let mut client = self.client.clone();
        let held = client
            .lock(key, Some(LockOptions::new().with_lease(self.lease)))
            .await?;
        client.unlock(held.key().to_vec()).await?;
        Ok(())
    }

    pub async fn close(self) {
        self.keeper.abort();
        let _ = self.client.clone().lease_revoke(self.lease).await;
    }
}

/// `sessions`: `n` leases over one connection, each with its own
/// keep-alive stream, until the phase is `Closing`; then revoked.
pub async fn hold_sessions(
    addr: &str,
    n: usize,
    lease: Duration,
    tally: Arc<Tally>,
    phase: watch::Receiver<Phase>,
) -> anyhow::Result<()> {
    let client = connect(addr, None).await?;
    let ids: Vec<i64> = stream::iter(0..n)
        .map(|_| grant(client.clone(), ttl(lease)))
        .buffer_unordered(4)
        .try_collect()
        .await?;
    let mut keepers = Vec::new();
    for &id in &ids {
        let (tally, phase) = (tally.clone(), phase.clone());
        keepers.push(tokio::spawn(keep_alive(
            client.clone(),
            id,
            ttl(lease),
            move |renewed| {
                if !renewed {
                    tally.expired.fetch_add(1, Ordering::Relaxed);
                } else if *phase.borrow() == Phase::Measuring {
                    tally.renewals.fetch_add(1, Ordering::Relaxed);
                }
            },
        )));
    }
    tally.created.fetch_add(n as u64, Ordering::Relaxed);
    let mut phase = phase;
    let _ = phase.wait_for(|p| *p == Phase::Closing).await;
    for keeper in &keepers {
        keeper.abort();
    }
    let _: Vec<_> = stream::iter(ids)
        .map(|id| {
            let mut client = client.clone();
            async move { client.lease_revoke(id).await }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    Ok(())
}

/// `fanout`: `shape.subscribers` watches of `key`, spread over
/// `shape.connections` clients (each a watch stream carrying its share).
pub async fn fanout(
    addr: &str,
    pids: &[u32],
    key: &str,
    shape: FanoutShape,
) -> anyhow::Result<Arrivals> {
    let per = shape.subscribers.div_ceil(shape.connections.max(1));
    let streams = shape.subscribers.div_ceil(per);
    let ready = Arc::new(Barrier::new(streams + 1));
    let (start_tx, start) = watch::channel(None::<Instant>);
    let mut tasks = Vec::new();
    let mut remaining = shape.subscribers;
    for _ in 0..streams {
        let n = per.min(remaining);
        remaining -= n;
        let (addr, key, ready, mut start) = (
            addr.to_string(),
            key.to_string(),
            ready.clone(),
            start.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let setup = async {
                let mut client = connect(&addr, None).await?;
                let mut watches = client.watch(key.as_str(), None).await?;
                for _ in 1..n {
                    watches.watch(key.as_str(), None).await?;
                }
                let mut created = 0;
                while created < n {
                    let reply = watches.message().await?.context("watch stream ended")?;
                    if reply.created() {
                        created += 1;
                    }
                }
                anyhow::Ok((client, watches))
            }
            .await;
            ready.wait().await;
            let (client, mut watches) = setup?;
            let sent = start.wait_for(|s| s.is_some()).await?.expect("set");
            let mut arrivals = Vec::new();
            tokio::time::timeout(Duration::from_secs(60), async {
                while arrivals.len() < n {
                    let reply = watches.message().await?.context("watch stream ended")?;
                    if !reply.events().is_empty() {
                        arrivals.push(sent.elapsed());
                    }
                }
                anyhow::Ok(())
            })
            .await
            .context("not every watch saw the write within 60 s")??;
            // Closed after the measurement.
            anyhow::Ok((arrivals, client, watches))
        }));
    }
    ready.wait().await;
    let mut writer = connect(addr, None).await?;
    let meters = Meters::start(pids);
    start_tx.send_replace(Some(Instant::now()));
    writer.put(key, "x", None).await?;
    let mut arrivals = Vec::new();
    let mut streams = Vec::new();
    for t in tasks {
        let (times, client, watches) = t.await??;
        arrivals.extend(times);
        streams.push((client, watches));
    }
    let arrivals = meters.finish(arrivals);
    drop(streams);
    Ok(arrivals)
}

/// `failover` against etcd.
pub struct Failover {
    addr: String,
    /// A client of each cluster member alone, made the first time the
    /// member is asked whether it leads.
    members: tokio::sync::Mutex<HashMap<String, Client>>,
}

impl Failover {
    pub fn new(addr: &str) -> Failover {
        Failover {
            addr: addr.to_string(),
            members: Default::default(),
        }
    }
}

impl failover_peer::Peer for Failover {
    type Sessions = Vec<JoinHandle<()>>;

    async fn preload(&self, nodes: u64) -> anyhow::Result<()> {
        use etcd_client::{Txn, TxnOp};
        // 128 puts per transaction: etcd's default limit of operations.
        let client = connect(&self.addr, None).await?;
        let run = uuid::Uuid::new_v4().simple().to_string();
        let batches = nodes.div_ceil(128);
        let bar = crate::progress::bar(batches, "writing nodes");
        stream::iter(0..batches)
            .map(|b| {
                let (mut client, run, bar) = (client.clone(), run.clone(), bar.clone());
                async move {
                    let ops: Vec<TxnOp> = (b * 128..((b + 1) * 128).min(nodes))
                        .map(|n| {
                            TxnOp::put(
                                format!("bench-data-{run}/{}/{n}", n % 1000),
                                [7u8; 32].to_vec(),
                                None,
                            )
                        })
                        .collect();
                    client.txn(Txn::new().and_then(ops)).await?;
                    bar.inc(1);
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(64)
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
        let clients: Vec<Client> = stream::iter(0..shape.connections)
            .map(|_| connect(&self.addr, None))
            .buffered(64)
            .try_collect()
            .await?;
        let bar = crate::progress::bar(shape.sessions as u64, "granting leases");
        let leases: Vec<(Client, i64)> = stream::iter(0..shape.sessions)
            .map(|i| {
                let client = clients[i % clients.len()].clone();
                let bar = bar.clone();
                async move {
                    let id = grant(client.clone(), 12).await?;
                    bar.inc(1);
                    anyhow::Ok((client, id))
                }
            })
            .buffer_unordered(256)
            .try_collect()
            .await?;
        bar.finish_and_clear();
        Ok(leases
            .into_iter()
            .map(|(client, id)| {
                let tally = tally.clone();
                let mut counted = false;
                tokio::spawn(keep_alive(client, id, 12, move |renewed| {
                    if !renewed {
                        tally.expired.fetch_add(1, Ordering::SeqCst);
                    } else if tally.restarted.load(Ordering::SeqCst) && !counted {
                        counted = true;
                        tally.back.fetch_add(1, Ordering::SeqCst);
                    }
                }))
            })
            .collect())
    }

    async fn lock_once(&self) -> anyhow::Result<()> {
        let locker = Locker::new(&self.addr, None, Duration::from_secs(12)).await?;
        let result = locker.cycle("bench-failover-lock").await;
        locker.close().await;
        result
    }

    /// The member's own status (the Maintenance API's `Status`, what
    /// `etcdctl endpoint status` shows) names it as the leader.
    async fn leads(&self, member: &str) -> bool {
        let ask = async {
            let mut client = {
                let mut members = self.members.lock().await;
                match members.get(member) {
                    Some(client) => client.clone(),
                    None => {
                        let client = connect(member, None).await?;
                        members.insert(member.to_string(), client.clone());
                        client
                    }
                }
            };
            let status = client.status().await?;
            let me = status.header().map(|h| h.member_id());
            anyhow::Ok(status.leader() != 0 && me == Some(status.leader()))
        };
        matches!(
            tokio::time::timeout(Duration::from_secs(1), ask).await,
            Ok(Ok(true))
        )
    }
}
