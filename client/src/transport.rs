//! How the client reaches a server. [`TcpConnector`] is the real one; a
//! simulation supplies its own [`Connector`] over a simulated network.

use std::future::Future;
use std::io;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::ClientError;
use crate::member_choice::MemberChoice;
use crate::tls::ClientTls;

/// A byte stream to a server.
pub trait Transport: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Transport for T {}

/// A boxed [`Transport`].
pub type BoxTransport = Box<dyn Transport>;

/// The future a [`Connector`] returns.
pub type ConnectFuture = Pin<Box<dyn Future<Output = io::Result<BoxTransport>> + Send>>;

/// Opens connections to one server, or to the members of a cell.
pub trait Connector: Send + Sync + 'static {
    /// Opens a new connection.
    fn connect(&self) -> ConnectFuture;
    /// The server's address, for messages.
    fn addr(&self) -> String;
    /// The member last connected to is not the cell's master; `master` is
    /// where it said the master is, if it knew (`CELL-7`). The next
    /// connect should go there, or to another member.
    fn redirected(&self, master: Option<&str>) {
        let _ = master;
    }
    /// The connection last made was given up: it broke, or went silent
    /// while an answer was due (`CS-2`, `CS-9`). The next connect should
    /// try another member first: a master that stopped without closing
    /// its connections still has its port accept new ones, and a client
    /// would spend its share of the connect timeout learning so again.
    fn abandoned(&self) {}
    /// How many servers `connect` goes through in turn: a cell's members.
    /// A client that cannot reach one tries the next before giving up.
    fn members(&self) -> usize {
        1
    }
}

/// Connects over TCP.
#[derive(Debug, Clone)]
pub struct TcpConnector {
    addr: String,
    tls: Option<ClientTls>,
}

impl TcpConnector {
    /// A connector for `addr` (`host:port`).
    pub fn new(addr: impl Into<String>) -> Self {
        TcpConnector {
            addr: addr.into(),
            tls: None,
        }
    }

    /// Speaks TLS as `tls` says on every connection.
    pub(crate) fn with_tls(mut self, tls: Option<ClientTls>) -> Self {
        self.tls = tls;
        self
    }

    /// Speaks TLS as `options` say on every connection: for tools that
    /// speak to a master's port with frames of their own, such as a cell's
    /// status queries.
    pub fn tls(self, options: &crate::TlsOptions) -> Result<Self, ClientError> {
        let tls = ClientTls::load(options).map_err(ClientError::Tls)?;
        Ok(self.with_tls(Some(tls)))
    }
}

impl Connector for TcpConnector {
    fn connect(&self) -> ConnectFuture {
        tcp(self.addr.clone(), self.tls.clone())
    }

    fn addr(&self) -> String {
        self.addr.clone()
    }
}

/// Connects over TCP to the members of a cell: to the master a member
/// named, else to each member in turn (`CELL-7`).
///
/// ```
/// use leasehold::{CellConnector, Connector};
///
/// let cell = CellConnector::new(["127.0.0.1:7171", "127.0.0.1:7172"]);
/// assert_eq!(cell.addr(), "127.0.0.1:7171,127.0.0.1:7172");
/// ```
#[derive(Debug)]
pub struct CellConnector {
    choice: MemberChoice,
    tls: Option<ClientTls>,
}

impl CellConnector {
    /// A connector for the members at `members` (`host:port` each).
    pub fn new<S: Into<String>>(members: impl IntoIterator<Item = S>) -> Self {
        CellConnector {
            choice: MemberChoice::new(members, 0),
            tls: None,
        }
    }

    /// Speaks TLS as `tls` says on every connection.
    pub(crate) fn with_tls(mut self, tls: Option<ClientTls>) -> Self {
        self.tls = tls;
        self
    }

    /// The members named in `addrs`, separated by commas.
    pub fn parse(addrs: &str) -> Self {
        CellConnector::new(
            addrs
                .split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(String::from),
        )
    }
}

impl Connector for CellConnector {
    fn connect(&self) -> ConnectFuture {
        tcp(self.choice.pick(), self.tls.clone())
    }

    fn addr(&self) -> String {
        self.choice.members().join(",")
    }

    fn redirected(&self, master: Option<&str>) {
        self.choice.redirected(master);
    }

    fn abandoned(&self) {
        self.choice.abandoned();
    }

    fn members(&self) -> usize {
        self.choice.members().len()
    }
}

fn tcp(addr: String, tls: Option<ClientTls>) -> ConnectFuture {
    Box::pin(async move {
        if !has_port(&addr) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the address has no port: write HOST:PORT, e.g. 127.0.0.1:7171",
            ));
        }
        let stream = tokio::net::TcpStream::connect(&addr).await?;
        stream.set_nodelay(true)?;
        match tls {
            None => Ok(Box::new(stream) as BoxTransport),
            Some(tls) => Ok(Box::new(tls.handshake(stream, &addr).await?) as BoxTransport),
        }
    })
}

/// Whether `addr` ends in a port: `host:port` or `[v6]:port`. A bare IPv6
/// address has colons but no port.
fn has_port(addr: &str) -> bool {
    let tail = match addr.rsplit_once(']') {
        Some((_, tail)) => tail,
        None if addr.matches(':').count() > 1 => return false,
        None => addr,
    };
    tail.rsplit_once(':')
        .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::has_port;

    #[test]
    fn an_address_without_a_port_is_told_apart() {
        for with in ["127.0.0.1:7171", "localhost:1", "[::1]:7171"] {
            assert!(has_port(with), "{with}");
        }
        for without in ["127.0.0.1", "localhost", "::1", "[::1]", "host:"] {
            assert!(!has_port(without), "{without}");
        }
    }
}
