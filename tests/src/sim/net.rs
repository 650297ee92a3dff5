//! The real server and client over turmoil's simulated network.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use leasehold::{BoxTransport, ConnectFuture, Connector, MemberChoice};
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

/// Connects to the members of a simulated cell, choosing the member as
/// `CellConnector` does over TCP (`MemberChoice`).
#[derive(Debug)]
pub struct SimCellConnector {
    choice: MemberChoice,
}

impl SimCellConnector {
    /// A connector that starts with the member at `start` in `hosts`.
    pub fn new(hosts: Vec<String>, start: usize) -> Self {
        SimCellConnector {
            choice: MemberChoice::new(hosts, start),
        }
    }
}

impl Connector for SimCellConnector {
    fn connect(&self) -> ConnectFuture {
        SimConnector {
            host: self.choice.pick(),
        }
        .connect()
    }

    fn addr(&self) -> String {
        self.choice.members().join(",")
    }

    fn members(&self) -> usize {
        self.choice.members().len()
    }

    fn redirected(&self, master: Option<&str>) {
        // Members name each other `host:port`; the choice is among hosts.
        let host = master.map(|m| m.split(':').next().unwrap_or(m));
        self.choice.redirected(host);
    }

    fn abandoned(&self) {
        self.choice.abandoned();
    }
}

/// Dials other members of a simulated cell.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimDialer;

impl leasehold_server::cell::Dialer for SimDialer {
    fn dial(&self, addr: &str, _to: u64) -> leasehold_server::cell::DialFuture {
        let addr = addr.to_string();
        Box::pin(async move {
            let (host, port) = addr
                .rsplit_once(':')
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no port"))?;
            let port: u16 = port
                .parse()
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad port"))?;
            let stream = turmoil::net::TcpStream::connect((host, port)).await?;
            Ok(Box::new(stream) as Box<dyn leasehold_server::cell::PeerStream>)
        })
    }
}
