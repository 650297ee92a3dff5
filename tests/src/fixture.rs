//! What most integration tests start from: a master on loopback, a client
//! of it, a session with its state transitions recorded, and a data
//! directory that is gone when the test is.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use leasehold::{Client, Session, SessionOptions};

use crate::server::{short_lease_config, start, Setup, TestServer};
use crate::states::StateLog;

/// A master and one client connected to it. Dropping it stops the master.
#[derive(Debug)]
pub struct Fixture {
    pub server: TestServer,
    pub client: Client,
}

impl Fixture {
    /// A master in memory that accepts the short leases tests use, and a
    /// client of it.
    pub async fn new() -> Fixture {
        Fixture::with(short_lease_config()).await
    }

    /// A master started from `setup`, and a client of it.
    pub async fn with(setup: impl Into<Setup>) -> Fixture {
        let server = start(setup).await;
        let client = server.client().await;
        Fixture { server, client }
    }

    /// Another client of the same master, on a connection of its own.
    pub async fn client(&self) -> Client {
        self.server.client().await
    }
}

/// A session of `client`, with every state it enters from now on recorded.
pub async fn recorded(client: &Client, options: SessionOptions) -> (Session, StateLog) {
    let session = client
        .create_session(options)
        .await
        .expect("create a session");
    let states = StateLog::record(&session);
    (session, states)
}

impl TestServer {
    /// A client connected straight to this master.
    pub async fn client(&self) -> Client {
        Client::connect(self.addr.to_string())
            .await
            .expect("connect to the test master")
    }
}

/// A directory of its own under the system's temporary directory, removed
/// with everything in it when dropped, so a failed test leaves nothing.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// A new, empty directory whose name starts with `name`; unique within
    /// this machine (process id and a counter), so tests running at once
    /// never share one.
    pub fn new(name: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "leasehold-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create a temporary directory");
        TempDir { path }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `file` inside it.
    pub fn join(&self, file: impl AsRef<Path>) -> PathBuf {
        self.path.join(file)
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_temporary_directory_is_gone_once_dropped() {
        let dir = TempDir::new("fixture");
        std::fs::write(dir.join("file"), b"x").unwrap();
        let path = dir.path().to_path_buf();
        assert!(path.join("file").exists());
        drop(dir);
        assert!(!path.exists());
    }

    #[test]
    fn two_temporary_directories_of_one_name_are_apart() {
        let (a, b) = (TempDir::new("same"), TempDir::new("same"));
        assert_ne!(a.path(), b.path());
    }
}
