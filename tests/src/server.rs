//! A master on a loopback port, stopped when its guard is dropped.

use std::net::SocketAddr;

use leasehold_server::{Config, ServerError};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running master; dropping it shuts the master down.
#[derive(Debug)]
pub struct TestServer {
    pub addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), ServerError>>,
}

impl TestServer {
    /// Shuts the master down and waits until it has stopped (its store is
    /// closed), returning how it ended.
    pub async fn shutdown(self) -> Result<(), ServerError> {
        let _ = self.stop.send(());
        self.task.await.expect("the server task")
    }
}

/// Starts a master with `config` on 127.0.0.1 and an ephemeral port.
pub async fn start(config: Config) -> TestServer {
    start_on("127.0.0.1:0".parse().unwrap(), config).await
}

/// Starts a master with `config` on `addr` (a loopback address; port 0
/// picks one), for a restart on the address a client already knows.
pub async fn start_on(addr: SocketAddr, config: Config) -> TestServer {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(leasehold_server::run(listener, config, async {
        let _ = stopped.await;
    }));
    TestServer { addr, stop, task }
}

/// Server bounds that accept the short leases tests use.
pub fn short_lease_config() -> Config {
    Config {
        min_lease: std::time::Duration::from_millis(100),
        ..Config::default()
    }
}
