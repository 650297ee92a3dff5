//! Crash safety of the real binary: clients write and take locks while the
//! master is killed with SIGKILL at random moments and restarted on the
//! same data directory. Every acknowledged write must be there afterwards,
//! and no lock generation may have been granted to two sessions.
//!
//! `LEASEHOLD_CRASH_ROUNDS` sets the number of kills (default 4; the soak
//! in BENCHMARKS.md uses more).

mod common;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::traffic::{locker, writer, Acknowledged};
use leasehold::Client;
use tokio::time::Instant;

/// A master process on a data directory.
fn serve(dir: &Path, listen: &str) -> (Child, String) {
    let dir = dir.to_str().expect("a UTF-8 path");
    common::spawn_serve(&["--listen", listen, "--data-dir", dir])
}

fn data_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("leasehold-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

// STORE-1, FO-1: acknowledged means durable, across SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_and_grants_survive_sigkill() {
    let rounds: u32 = std::env::var("LEASEHOLD_CRASH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(4);
    let dir = data_dir();
    let (mut master, addr) = serve(&dir, "127.0.0.1:0");
    let seen = Arc::new(Mutex::new(Acknowledged::default()));
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..rounds {
        // The clients run for longer than the master lives: some requests
        // are in flight when it dies.
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let life = Duration::from_millis(150 + rng % 500);
        let until = Instant::now() + life + Duration::from_millis(300);
        let mut tasks = Vec::new();
        for c in 0..4 {
            let client = Client::connect(addr.clone()).await.unwrap();
            let name = format!("r{round}c{c}");
            if c < 3 {
                tasks.push(tokio::spawn(writer(client, name, until, seen.clone())));
            } else {
                tasks.push(tokio::spawn(locker(
                    client,
                    name,
                    Duration::from_secs(2),
                    until,
                    seen.clone(),
                )));
            }
        }
        tokio::time::sleep(life).await;
        master.kill().expect("SIGKILL the master");
        master.wait().unwrap();
        for task in tasks {
            task.await.unwrap();
        }
        let (restarted, _) = serve(&dir, &addr);
        master = restarted;

        let check = Client::connect(addr.clone()).await.unwrap();
        // This round's writes after each restart; everything at the end.
        let prefix = format!("w/r{round}c");
        let last = round + 1 == rounds;
        let seen: Vec<(String, String)> = seen
            .lock()
            .unwrap()
            .writes
            .iter()
            .filter(|(key, _)| last || key.starts_with(&prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (key, value) in &seen {
            let node = check.get(key).await.unwrap();
            let got = node
                .and_then(|n| n.contents)
                .map(|c| String::from_utf8(c).unwrap());
            assert_eq!(
                got.as_deref(),
                Some(value.as_str()),
                "round {round}: {key} lost"
            );
        }
    }
    let seen = seen.lock().unwrap();
    assert!(
        seen.writes.len() > 20,
        "only {} writes acknowledged",
        seen.writes.len()
    );
    for ((key, generation), sessions) in &seen.grants {
        assert_eq!(
            sessions.len(),
            1,
            "{key} generation {generation} granted to {sessions:?}"
        );
    }
    let _ = master.kill();
    let _ = master.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
