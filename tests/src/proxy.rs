//! A loopback relay between clients and a master whose link can misbehave.
//!
//! - [`Link::Pass`]: bytes flow.
//! - [`Link::Hold`]: bytes wait in the relay (and behind it, in the kernel's
//!   buffers) and are delivered, in order, when the link passes again.
//! - [`Link::Cut`]: bytes are dropped silently and nothing is closed, as when
//!   a network partition swallows packets; new connections are accepted but
//!   go nowhere. A connection that lost bytes stays silent for good (TCP
//!   never resumes a stream with a gap); connections opened after the link
//!   passes again work.

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the link does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    Pass,
    Hold,
    Cut,
}

/// A running relay; dropping it stops accepting (open relays end with
/// their connections).
#[derive(Debug)]
pub struct Proxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    link: watch::Sender<Link>,
    accept: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Proxy {
    /// Starts a relay on 127.0.0.1 to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local address");
        let (link, _) = watch::channel(Link::Pass);
        let links = link.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(client_read, server_write, links.subscribe()));
                tokio::spawn(pump(server_read, client_write, links.subscribe()));
            }
        });
        Proxy { addr, link, accept }
    }

    /// Changes what the link does, for every connection through it.
    pub fn set(&self, link: Link) {
        self.link.send_replace(link);
    }
}

async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    mut link: watch::Receiver<Link>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut lost_bytes = false;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let Ok(state) = link.wait_for(|l| *l != Link::Hold).await.map(|l| *l) else {
            break;
        };
        if state == Link::Cut || lost_bytes {
            lost_bytes = true;
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
