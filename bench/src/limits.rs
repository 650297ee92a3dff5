//! What this machine allows at best, measured in the same run as the
//! figures it bounds: an fsync of a small append, a loopback round trip,
//! and round trips per second over 64 loopback connections.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The machine's floor figures.
#[derive(Debug, Clone, Serialize)]
pub struct Limits {
    /// Median time to append 128 bytes to a file and fdatasync it.
    pub fsync_ms: f64,
    /// How many fsyncs the median is of.
    pub fsync_probes: usize,
    /// Median round trip of 64 bytes over one loopback connection.
    pub rtt_ms: f64,
    /// Round trips per second over 64 loopback connections at once.
    pub echo_64_per_s: f64,
    /// Why these figures are not to be trusted, if they are not: too few
    /// probes, or probes before and after the runs that disagree.
    pub noisy: Option<String>,
}

/// What a figure's best is on this machine, as a function of its limits.
pub type Bound = fn(&Limits) -> f64;

/// Fewer fsyncs than this in a probe, and its median says little.
const MIN_FSYNC_PROBES: usize = 200;
/// Probes before and after the runs further apart than this, and the
/// machine changed speed under the benchmark.
const DISAGREEMENT: f64 = 1.5;

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

    /// The limits of probes taken before and after the runs: the faster of
    /// each (the neighbours' noise only ever slows a probe down), flagged
    /// as noisy when the two disagree or either had too few fsyncs.
    pub fn combine(&self, after: &Limits) -> Limits {
        let mut noisy: Vec<String> = [&self.noisy, &after.noisy]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        let apart = |a: f64, b: f64| a.max(b) / a.min(b) > DISAGREEMENT;
        if apart(self.fsync_ms, after.fsync_ms) {
            noisy.push(format!(
                "fsync took {:.3} ms before the runs and {:.3} ms after",
                self.fsync_ms, after.fsync_ms
            ));
        }
        if apart(self.rtt_ms, after.rtt_ms) {
            noisy.push(format!(
                "a loopback round trip took {:.3} ms before the runs and {:.3} ms after",
                self.rtt_ms, after.rtt_ms
            ));
        }
        noisy.dedup();
        Limits {
            fsync_ms: self.fsync_ms.min(after.fsync_ms),
            fsync_probes: self.fsync_probes + after.fsync_probes,
            rtt_ms: self.rtt_ms.min(after.rtt_ms),
            echo_64_per_s: self.echo_64_per_s.max(after.echo_64_per_s),
            noisy: (!noisy.is_empty()).then(|| noisy.join("; ")),
        }
    }
}

/// Measures the limits, writing its test file under `dir`. Bounded: at
/// most about 6 seconds.
pub async fn measure(dir: &Path) -> anyhow::Result<Limits> {
    let mut fsyncs = {
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || fsync_times(&dir)).await??
    };
    let noisy = (fsyncs.len() < MIN_FSYNC_PROBES).then(|| {
        format!(
            "only {} fsyncs fit in the probe's time (at least {MIN_FSYNC_PROBES} make a median)",
            fsyncs.len()
        )
    });
    Ok(Limits {
        fsync_ms: median_ms(&mut fsyncs),
        fsync_probes: fsyncs.len(),
        rtt_ms: loopback_rtt().await?,
        echo_64_per_s: echo_rate(64).await?,
        noisy,
    })
}

/// Fsyncs of 128-byte appends: for at least one second, and on until there
/// are enough for a median or four seconds have passed.
fn fsync_times(dir: &Path) -> anyhow::Result<Vec<Duration>> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("fsync-probe-{}", std::process::id()));
    let mut file = std::fs::File::create(&path)?;
    let mut times = Vec::new();
    let started = Instant::now();
    while times.len() < 2000 {
        let elapsed = started.elapsed();
        let enough = times.len() >= MIN_FSYNC_PROBES;
        if (enough && elapsed >= Duration::from_secs(1)) || elapsed >= Duration::from_secs(4) {
            break;
        }
        let one = Instant::now();
        file.write_all(&[7u8; 128])?;
        file.sync_data()?;
        times.push(one.elapsed());
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    Ok(times)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(fsync_ms: f64, rtt_ms: f64) -> Limits {
        Limits {
            fsync_ms,
            fsync_probes: 500,
            rtt_ms,
            echo_64_per_s: 50_000.0,
            noisy: None,
        }
    }

    #[test]
    fn the_faster_of_two_probes_is_the_limit() {
        let combined = limits(1.0, 0.05).combine(&limits(1.2, 0.04));
        assert_eq!(combined.fsync_ms, 1.0);
        assert_eq!(combined.rtt_ms, 0.04);
        assert_eq!(combined.fsync_probes, 1000);
        assert!(combined.noisy.is_none(), "{:?}", combined.noisy);
    }

    #[test]
    fn probes_that_disagree_are_flagged_as_noisy() {
        let combined = limits(1.0, 0.05).combine(&limits(8.0, 0.05));
        let why = combined.noisy.expect("flagged");
        assert!(
            why.contains("fsync took 1.000 ms before the runs and 8.000 ms after"),
            "{why}"
        );
    }

    #[test]
    fn a_probe_with_too_few_fsyncs_stays_flagged() {
        let mut slow = limits(9.0, 0.05);
        slow.noisy = Some("only 110 fsyncs".into());
        let combined = limits(8.0, 0.05).combine(&slow);
        assert!(combined.noisy.unwrap().contains("only 110 fsyncs"));
    }
}
