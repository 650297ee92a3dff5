//! A master in this process, for the benchmarks that read its internals
//! (the fsync counter) or time its recovery from a data directory they
//! wrote.

use std::path::{Path, PathBuf};

use leasehold_server::Config;

pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("leasehold-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A master serving in this process.
pub struct Served {
    pub addr: String,
    /// Stops the master.
    pub stop: tokio::sync::oneshot::Sender<()>,
    pub task: tokio::task::JoinHandle<()>,
    /// Its store's fsyncs of batches.
    pub syncs: leasehold_server::SyncCount,
}

/// Starts a master on loopback over `dir`.
pub async fn serve(dir: &Path) -> anyhow::Result<Served> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let store = leasehold_server::FileStore::open(dir)?;
    let syncs = store.syncs();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        if let Err(e) = leasehold_server::run(listener, Config::default(), store, async {
            let _ = stopped.await;
        })
        .await
        {
            eprintln!("master: {e}");
        }
    });
    Ok(Served {
        addr,
        stop,
        task,
        syncs,
    })
}
