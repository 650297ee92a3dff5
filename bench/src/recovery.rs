//! `recovery`: time for a master to recover a large data directory and
//! serve a request, from its log and then from its snapshot.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use leasehold::Client;
use leasehold_protocol::{Behavior, SessionId};
use leasehold_server::{Command, FileStore, Millis, NewSession, Put, Record, Store};

use crate::inprocess::{scratch, serve};

/// Writes a data directory holding `sessions` sessions and `nodes` nodes as
/// a log of the commands that made them.
pub fn build(dir: &Path, sessions: u64, nodes: u64) -> anyhow::Result<()> {
    let mut store = FileStore::open(dir)?;
    store.append(&Record::Epoch(1))?;
    for s in 0..sessions {
        store.append(&Record::Command {
            now: Millis::from_millis(1),
            command: Command::CreateSession(NewSession {
                id: SessionId::from_u128(u128::from(s) + 1),
                secret: leasehold_protocol::SessionSecret::from_bytes([7; 16]),
                name: format!("s{s}"),
                lease: Some(Duration::from_secs(60)),
                lock_delay: None,
                behavior: Behavior::Release,
                checks: Vec::new(),
            }),
        })?;
    }
    for n in 0..nodes {
        store.append(&Record::Command {
            now: Millis::from_millis(2),
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

pub async fn recovery(sessions: u64, nodes: u64) -> anyhow::Result<()> {
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
        let crate::inprocess::Served {
            addr, stop, task, ..
        } = serve(&dir).await?;
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
