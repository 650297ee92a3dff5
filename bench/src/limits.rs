//! What this machine allows at best, measured in the same run as the
//! figures it bounds: an fsync of a small append, a loopback round trip,
//! and round trips per second over 64 loopback connections.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The machine's floor figures.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Limits {
    /// Median time to append 128 bytes to a file and fdatasync it.
    pub fsync_ms: f64,
    /// Median round trip of 64 bytes over one loopback connection.
    pub rtt_ms: f64,
    /// Round trips per second over 64 loopback connections at once.
    pub echo_64_per_s: f64,
}

impl Limits {
    /// Acquire+release cycles per second one sequential client could reach:
    /// two round trips and two fsyncs per cycle.
    pub fn lock_1_client(&self) -> f64 {
        1000.0 / (2.0 * (self.rtt_ms + self.fsync_ms))
    }

    /// Cycles per second 64 clients on 64 keys could reach: two round
    /// trips each, fsyncs shared by group commit.
    pub fn lock_64_keys(&self) -> f64 {
        self.echo_64_per_s / 2.0
    }

    /// Hand-offs per second of one lock: each needs a release to be
    /// durable and reach the master, one round trip and one fsync.
    pub fn lock_1_key(&self) -> f64 {
        1000.0 / (self.rtt_ms + self.fsync_ms)
    }

    /// Writes per second one sequential client could reach.
    pub fn write_1_client(&self) -> f64 {
        1000.0 / (self.rtt_ms + self.fsync_ms)
    }

    /// Reads per second one sequential client could reach.
    pub fn read_1_client(&self) -> f64 {
        1000.0 / self.rtt_ms
    }
}

/// Measures the limits, writing its test file under `dir`. Bounded: at
/// most about 3 seconds.
pub async fn measure(dir: &Path) -> anyhow::Result<Limits> {
    let fsync_ms = {
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || fsync_time(&dir)).await??
    };
    Ok(Limits {
        fsync_ms,
        rtt_ms: loopback_rtt().await?,
        echo_64_per_s: echo_rate(64).await?,
    })
}

fn fsync_time(dir: &Path) -> anyhow::Result<f64> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("fsync-probe-{}", std::process::id()));
    let mut file = std::fs::File::create(&path)?;
    let mut times = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(1);
    while times.len() < 2000 && Instant::now() < deadline {
        let started = Instant::now();
        file.write_all(&[7u8; 128])?;
        file.sync_data()?;
        times.push(started.elapsed());
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    Ok(median_ms(&mut times))
}

async fn echo_server() -> anyhow::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let mut buf = [0u8; 64];
                while stream.read_exact(&mut buf).await.is_ok() {
                    if stream.write_all(&buf).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    Ok(addr)
}

async fn loopback_rtt() -> anyhow::Result<f64> {
    let addr = echo_server().await?;
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut buf = [1u8; 64];
    let mut times = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(1);
    while times.len() < 5000 && Instant::now() < deadline {
        let started = Instant::now();
        stream.write_all(&buf).await?;
        stream.read_exact(&mut buf).await?;
        times.push(started.elapsed());
    }
    Ok(median_ms(&mut times))
}

async fn echo_rate(connections: usize) -> anyhow::Result<f64> {
    let addr = echo_server().await?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(1);
    let mut tasks = Vec::new();
    for _ in 0..connections {
        tasks.push(tokio::spawn(async move {
            let mut stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let mut buf = [1u8; 64];
            let mut n = 0u64;
            while n < 1_000_000 && Instant::now() < deadline {
                stream.write_all(&buf).await?;
                stream.read_exact(&mut buf).await?;
                n += 1;
            }
            anyhow::Ok(n)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

fn median_ms(times: &mut [Duration]) -> f64 {
    times.sort();
    times
        .get(times.len() / 2)
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}
