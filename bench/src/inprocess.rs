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

/// Starts a master on loopback over `dir`; returns its address and a
/// sender that stops it.
pub async fn serve(
    dir: &Path,
) -> anyhow::Result<(
    String,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let config = Config {
        data_dir: Some(dir.to_path_buf()),
        ..Config::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        if let Err(e) = leasehold_server::run(listener, config, async {
            let _ = stopped.await;
        })
        .await
        {
            eprintln!("master: {e}");
        }
    });
    Ok((addr, stop, task))
}
