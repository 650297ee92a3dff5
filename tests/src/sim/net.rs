//! The real server and client over turmoil's simulated network.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use leasehold::{BoxTransport, ConnectFuture, Connector};
use leasehold_server::Listener;

/// The port the simulated master listens on.
pub const PORT: u16 = 7171;

/// A turmoil listener the master can serve from.
pub struct SimListener(pub turmoil::net::TcpListener);

impl SimListener {
    /// Binds the master's port on the current simulated host.
    pub async fn bind() -> io::Result<SimListener> {
        let addr = (IpAddr::from(Ipv4Addr::UNSPECIFIED), PORT);
        Ok(SimListener(turmoil::net::TcpListener::bind(addr).await?))
    }
}

impl Listener for SimListener {
    type Stream = turmoil::net::TcpStream;

    async fn accept(&mut self) -> io::Result<(Self::Stream, SocketAddr)> {
        self.0.accept().await
    }
}

/// Connects to a simulated host by name.
#[derive(Debug, Clone)]
pub struct SimConnector {
    pub host: String,
}

impl Connector for SimConnector {
    fn connect(&self) -> ConnectFuture {
        let host = self.host.clone();
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect((host.as_str(), PORT)).await?;
            Ok(Box::new(stream) as BoxTransport)
        })
    }

    fn addr(&self) -> String {
        format!("{}:{PORT}", self.host)
    }
}
