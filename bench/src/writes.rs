//! `writes`: acknowledged (fsynced) writes per second with N concurrent
//! clients, and the fsyncs that carried them. The master runs in this
//! process, so its fsync counter can be read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{Client, PutOptions};

use crate::inprocess::{scratch, serve};

pub async fn writes(clients: usize, seconds: u64, max_writes: u64) -> anyhow::Result<()> {
    let dir = scratch(&format!("writes{clients}"));
    let crate::inprocess::Served {
        addr,
        stop,
        task,
        syncs,
    } = serve(&dir).await?;
    let done = Arc::new(AtomicU64::new(0));
    // Connected first: a handshake waits for recovery, whose own fsyncs
    // (the new epoch) are not the writes'.
    let mut connected = Vec::new();
    for _ in 0..clients {
        connected.push(Client::connect(addr.clone()).await?);
    }
    let fsyncs_before = syncs.get();
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for (c, client) in connected.into_iter().enumerate() {
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
    let fsyncs = syncs.get() - fsyncs_before;
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
