//! `cache`: a read-mostly workload (99% reads over 1,000 keys by 64
//! clients), read two ways on each system: Leasehold with each session's
//! cache on (`CACHE-1`) and off, etcd with serializable and with
//! linearizable reads, ZooKeeper with plain and with synced reads. Then
//! Leasehold alone: a write to a key 100 live sessions cache, against one
//! nobody caches, beside a KeepAlive round trip (`CACHE-3`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{Client, PutOptions, Session, SessionOptions};

use crate::latency::Latency;
use crate::load;
use crate::procstat::Meter;
use crate::report::Figure;
use crate::system::{Kind, System};

const VALUE: &[u8] = b"0123456789abcdef0123456789abcdef";

/// The workload.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub clients: usize,
    pub keys: usize,
    /// Of every 1,000 operations, how many are reads.
    pub reads_per_mille: u32,
    /// Sessions caching the key of the held-write phase.
    pub cachers: usize,
}

/// One client of the mixed workload.
enum Reader {
    /// A session whose `get` reads through its cache (or not), and the
    /// client it writes with.
    Leasehold { session: Session, client: Client },
    #[cfg(feature = "etcd")]
    Etcd {
        client: Box<etcd_client::Client>,
        serializable: bool,
    },
    #[cfg(feature = "zookeeper")]
    Zookeeper {
        kv: crate::zookeeper::Kv,
        synced: bool,
    },
}

impl Reader {
    async fn read(&self, key: &str) -> anyhow::Result<()> {
        match self {
            Reader::Leasehold { session, .. } => {
                session.get(key).await?;
            }
            #[cfg(feature = "etcd")]
            Reader::Etcd {
                client,
                serializable,
            } => {
                let options =
                    serializable.then(|| etcd_client::GetOptions::new().with_serializable());
                client.as_ref().clone().get(key, options).await?;
            }
            #[cfg(feature = "zookeeper")]
            Reader::Zookeeper { kv, synced } => {
                if *synced {
                    kv.get_synced(key).await?;
                } else {
                    kv.get(key).await?;
                }
            }
        }
        Ok(())
    }

    async fn write(&self, key: &str) -> anyhow::Result<()> {
        match self {
            Reader::Leasehold { client, .. } => {
                client.put(key, VALUE.to_vec(), PutOptions::new()).await?;
            }
            #[cfg(feature = "etcd")]
            Reader::Etcd { client, .. } => {
                client.as_ref().clone().put(key, VALUE, None).await?;
            }
            #[cfg(feature = "zookeeper")]
            Reader::Zookeeper { kv, .. } => kv.put(key, VALUE).await?,
        }
        Ok(())
    }

    /// One read from the master, past any cache: a round trip.
    async fn round_trip(&self, key: &str) -> anyhow::Result<()> {
        match self {
            Reader::Leasehold { client, .. } => {
                client.get(key).await?;
            }
            #[allow(unreachable_patterns)]
            _ => self.read(key).await?,
        }
        Ok(())
    }

    /// Reads its cache served, and reads it sent to the master.
    fn hits(&self) -> (u64, u64) {
        match self {
            Reader::Leasehold { session, .. } => {
                let stats = session.cache_stats();
                (stats.hits, stats.misses)
            }
            #[allow(unreachable_patterns)]
            _ => (0, 0),
        }
    }

    async fn close(self) {
        // The peers' sessions end with their connections.
        let session = match self {
            Reader::Leasehold { session, .. } => Some(session),
            #[allow(unreachable_patterns)]
            _ => None,
        };
        if let Some(session) = session {
            let _ = session.close().await;
        }
    }
}

/// A new reader of `system`, the fast way (`fast`: Leasehold's cache,
/// etcd's serializable reads, ZooKeeper's plain reads) or the
/// linearizable way.
async fn reader(system: &System, fast: bool) -> anyhow::Result<Reader> {
    match system.kind {
        Kind::Leasehold => {
            let client = Client::connect(system.addr.clone()).await?;
            let session = client
                .create_session(SessionOptions::new("bench-cache").cache(fast))
                .await?;
            Ok(Reader::Leasehold { session, client })
        }
        #[cfg(feature = "etcd")]
        Kind::Etcd => Ok(Reader::Etcd {
            client: Box::new(crate::etcd::connect(&system.addr, None).await?),
            serializable: fast,
        }),
        #[cfg(feature = "zookeeper")]
        Kind::Zookeeper => Ok(Reader::Zookeeper {
            kv: crate::zookeeper::Kv::new(&system.addr).await?,
            synced: !fast,
        }),
        #[allow(unreachable_patterns)]
        _ => Err(system.missing()),
    }
}

/// xorshift64*: each client's own sequence of keys and choices.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// What one mixed run measured.
struct Mixed {
    reads: Latency,
    writes: Latency,
    elapsed: Duration,
    server_cpu: Option<Duration>,
    hits: u64,
    misses: u64,
}

async fn mixed(
    system: &System,
    shape: Shape,
    prefix: &str,
    fast: bool,
    duration: Duration,
    what: &str,
) -> anyhow::Result<Mixed> {
    let readers = load::open(shape.clients, "connecting", |_| reader(system, fast)).await?;
    // Every reader reads every key once first, so the run measures the
    // steady state, not the first misses.
    for r in &readers {
        for k in 0..shape.keys {
            r.read(&format!("{prefix}/{k}")).await?;
        }
    }
    let before: Vec<(u64, u64)> = readers.iter().map(|r| r.hits()).collect();
    let bar = crate::progress::timer(duration, what);
    let meter = Meter::start(&system.pids);
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for (i, r) in readers.iter().enumerate() {
        let (r, done, prefix) = (r.clone(), done.clone(), prefix.to_string());
        tasks.push(tokio::spawn(async move {
            let (mut reads, mut writes) = (Latency::new(), Latency::new());
            let mut rng = 0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1);
            while Instant::now() < deadline && done.fetch_add(1, Ordering::Relaxed) < 200_000_000 {
                let key = format!("{prefix}/{}", next(&mut rng) % shape.keys as u64);
                let write = next(&mut rng) % 1_000 >= u64::from(shape.reads_per_mille);
                let sent = Instant::now();
                if write {
                    r.write(&key).await?;
                    writes.record(sent.elapsed());
                } else {
                    r.read(&key).await?;
                    reads.record(sent.elapsed());
                }
            }
            anyhow::Ok((reads, writes))
        }));
    }
    let (mut reads, mut writes) = (Latency::new(), Latency::new());
    for t in tasks {
        let (r, w) = t.await??;
        reads.merge(&r);
        writes.merge(&w);
    }
    let elapsed = started.elapsed();
    let server_cpu = meter.span().map(|s| s.cpu);
    bar.finish_and_clear();
    let (mut hits, mut misses) = (0, 0);
    for (r, (h, m)) in readers.iter().zip(before) {
        let (h2, m2) = r.hits();
        hits += h2 - h;
        misses += m2 - m;
    }
    for r in readers {
        if let Ok(r) = Arc::try_unwrap(r) {
            r.close().await;
        }
    }
    Ok(Mixed {
        reads,
        writes,
        elapsed,
        server_cpu,
        hits,
        misses,
    })
}

pub async fn run(system: &System, shape: Shape, duration: Duration) -> anyhow::Result<Vec<Figure>> {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let prefix = format!("bench-cache-{run}");
    let writer = reader(system, false).await?;
    for k in 0..shape.keys {
        writer.write(&format!("{prefix}/{k}")).await?;
    }
    writer.close().await;
    let mut figures = Vec::new();
    for (fast, way) in [(true, "fast reads"), (false, "linearizable reads")] {
        let label = format!("{way}, {} clients", shape.clients);
        let m = mixed(system, shape, &prefix, fast, duration, &label).await?;
        let reads = m.reads.count();
        figures.push(Figure::higher(
            format!("reads/s, {label}"),
            "/s",
            reads as f64 / m.elapsed.as_secs_f64().max(1e-9),
        ));
        figures.push(Figure::lower(
            format!("read p50, {label}"),
            "us",
            m.reads.us(0.5),
        ));
        figures.push(Figure::lower(
            format!("read p99, {label}"),
            "us",
            m.reads.us(0.99),
        ));
        figures.push(Figure::lower(
            format!("write p50, {label}"),
            "ms",
            m.writes.ms(0.5),
        ));
        figures.push(Figure::lower(
            format!("write p99, {label}"),
            "ms",
            m.writes.ms(0.99),
        ));
        if system.kind == Kind::Leasehold && fast {
            let ratio = m.hits as f64 * 100.0 / (m.hits + m.misses).max(1) as f64;
            figures.push(Figure::higher(format!("hit ratio, {label}"), "%", ratio));
        }
        if let Some(cpu) = m.server_cpu {
            figures.push(Figure::lower(
                format!("server CPU per read, {label}"),
                "us",
                cpu.as_secs_f64() * 1e6 / reads.max(1) as f64,
            ));
        }
    }
    if system.kind == Kind::Leasehold {
        figures.extend(held_writes(system, shape.cachers, &prefix).await?);
    }
    Ok(figures)
}

/// Writes to a key `cachers` live sessions cache (each write waits for all
/// of them to drop it, `CACHE-3`), then to a key nobody caches, beside the
/// round trip of an unheld KeepAlive.
async fn held_writes(system: &System, cachers: usize, prefix: &str) -> anyhow::Result<Vec<Figure>> {
    const WRITES: usize = 200;
    let cached = format!("{prefix}/held");
    let alone = format!("{prefix}/alone");
    let sessions = load::open(cachers, "cachers", |_| reader(system, true)).await?;
    let writer = Client::connect(system.addr.clone()).await?;
    writer
        .put(&cached, VALUE.to_vec(), PutOptions::new())
        .await?;
    let (mut held, mut free, mut round_trip) = (Latency::new(), Latency::new(), Latency::new());
    let mut all_at_once = Latency::new();
    let probe = writer
        .create_session(SessionOptions::new("bench-probe").cache(false))
        .await?;
    for _ in 0..WRITES {
        // Every cacher reads the key again, so it caches it again.
        futures::future::try_join_all(sessions.iter().map(|s| s.read(&cached))).await?;
        let sent = Instant::now();
        writer
            .put(&cached, VALUE.to_vec(), PutOptions::new())
            .await?;
        held.record(sent.elapsed());
        let sent = Instant::now();
        writer
            .put(&alone, VALUE.to_vec(), PutOptions::new())
            .await?;
        free.record(sent.elapsed());
        let sent = Instant::now();
        probe.get(&alone).await?;
        round_trip.record(sent.elapsed());
        // A round trip from every cacher at once: about what the held
        // write waits for, each cacher's answer and acknowledgement.
        let sent = Instant::now();
        futures::future::try_join_all(sessions.iter().map(|s| s.round_trip(&alone))).await?;
        all_at_once.record(sent.elapsed());
    }
    let _ = probe.close().await;
    for s in sessions {
        if let Ok(s) = Arc::try_unwrap(s) {
            s.close().await;
        }
    }
    let label = format!("{cachers} cachers");
    Ok(vec![
        Figure::lower(format!("write p50, {label}"), "ms", held.ms(0.5)),
        Figure::lower(format!("write p99, {label}"), "ms", held.ms(0.99)),
        Figure::lower("write p50, no cacher", "ms", free.ms(0.5)),
        Figure::lower("write p99, no cacher", "ms", free.ms(0.99)),
        Figure::neutral("read round trip p50", "ms", round_trip.ms(0.5)),
        Figure::neutral(
            format!("a round trip from each of {cachers} clients at once, p50"),
            "ms",
            all_at_once.ms(0.5),
        ),
    ])
}
