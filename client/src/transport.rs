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
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            Ok(Box::new(stream) as BoxTransport)
        })
    }

    fn addr(&self) -> String {
        self.addr.clone()
    }
}
