//! A master on a loopback port, stopped when its guard is dropped.

use std::net::SocketAddr;
use std::path::PathBuf;

use leasehold_server::{Config, FileStore, Server, ServerError};
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

/// What a test master starts from: its configuration and, if it keeps its
/// state durable, the data directory it keeps it in.
#[derive(Debug, Clone)]
pub struct Setup {
    pub config: Config,
    pub data_dir: Option<PathBuf>,
}

impl Setup {
    /// A master keeping its state in `dir`.
    pub fn durable(dir: impl Into<PathBuf>, config: Config) -> Setup {
        Setup {
            config,
            data_dir: Some(dir.into()),
        }
    }
}

impl From<Config> for Setup {
    /// A master whose state lives in its memory alone.
    fn from(config: Config) -> Setup {
        Setup {
            config,
            data_dir: None,
        }
    }
}

/// Starts a master on 127.0.0.1 and an ephemeral port.
pub async fn start(setup: impl Into<Setup>) -> TestServer {
    start_on("127.0.0.1:0".parse().unwrap(), setup).await
}

/// Starts a master on `addr` (a loopback address; port 0 picks one), for a
/// restart on the address a client already knows. A data directory that
/// cannot be taken fails the master's task, as it fails `serve`.
pub async fn start_on(addr: SocketAddr, setup: impl Into<Setup>) -> TestServer {
    start_serving(addr, setup.into(), None).await
}

/// Starts a master on 127.0.0.1 with its operator's HTTP port, on
/// another ephemeral port, whose address comes second (`OPS-2`).
pub async fn start_with_http(setup: impl Into<Setup>) -> (TestServer, SocketAddr) {
    let http = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let at = http.local_addr().expect("local address");
    let server = start_serving("127.0.0.1:0".parse().unwrap(), setup.into(), Some(http)).await;
    (server, at)
}

async fn start_serving(
    addr: SocketAddr,
    setup: Setup,
    http: Option<tokio::net::TcpListener>,
) -> TestServer {
    let Setup { config, data_dir } = setup;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(async move {
        let mut server = match data_dir {
            Some(dir) => Server::open(config, FileStore::open(&dir)?)?,
            None => Server::volatile(config)?,
        };
        if let Some(http) = http {
            server = server.with_http(http);
        }
        server
            .serve(listener, async {
                let _ = stopped.await;
            })
            .await
    });
    TestServer { addr, stop, task }
}

/// Server bounds that accept the short leases tests use.
pub fn short_lease_config() -> Config {
    Config {
        min_lease: std::time::Duration::from_millis(100),
        ..Config::default()
    }
}
