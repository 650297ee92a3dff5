//! A master on a loopback port, stopped when its guard is dropped.

use std::net::SocketAddr;

use leasehold_server::Config;
use tokio::sync::oneshot;

/// A running master; dropping it shuts the master down.
#[derive(Debug)]
pub struct TestServer {
    pub addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

/// Starts a master with `config` on 127.0.0.1 and an ephemeral port.
pub async fn start(config: Config) -> TestServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    let (stop, stopped) = oneshot::channel();
    tokio::spawn(leasehold_server::run(listener, config, async {
        let _ = stopped.await;
    }));
    TestServer { addr, _stop: stop }
}

/// Server bounds that accept the short leases tests use.
pub fn short_lease_config() -> Config {
    Config {
        min_lease: std::time::Duration::from_millis(100),
        ..Config::default()
    }
}
