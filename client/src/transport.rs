//! How the client reaches a server. [`TcpConnector`] is the real one; a
//! simulation supplies its own [`Connector`] over a simulated network.

use std::future::Future;
use std::io;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream to a server.
pub trait Transport: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Transport for T {}

/// A boxed [`Transport`].
pub type BoxTransport = Box<dyn Transport>;

/// The future a [`Connector`] returns.
pub type ConnectFuture = Pin<Box<dyn Future<Output = io::Result<BoxTransport>> + Send>>;

/// Opens connections to one server.
pub trait Connector: Send + Sync + 'static {
    /// Opens a new connection.
    fn connect(&self) -> ConnectFuture;
    /// The server's address, for messages.
    fn addr(&self) -> String;
}

/// Connects over TCP.
#[derive(Debug, Clone)]
pub struct TcpConnector {
    addr: String,
}

impl TcpConnector {
    /// A connector for `addr` (`host:port`).
    pub fn new(addr: impl Into<String>) -> Self {
        TcpConnector { addr: addr.into() }
    }
}

impl Connector for TcpConnector {
    fn connect(&self) -> ConnectFuture {
        let addr = self.addr.clone();
        Box::pin(async move {
            if !has_port(&addr) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the address has no port: write HOST:PORT, e.g. 127.0.0.1:7171",
                ));
            }
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            Ok(Box::new(stream) as BoxTransport)
        })
    }

    fn addr(&self) -> String {
        self.addr.clone()
    }
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
