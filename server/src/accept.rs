//! Accepting connections, for a single master and a cell's member alike:
//! admission by peer address and in all (`CONN-8`), refusals bounded in
//! number, a backoff when accepting fails (typically out of file
//! descriptors), ended connections reaped, and memory given back after a
//! burst of them ends.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};

use futures::FutureExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinSet;
use tracing::warn;

use crate::config::{Config, ACCEPT_BACKOFF_MAX, ACCEPT_BACKOFF_MIN, LISTEN_BACKLOG, MAX_REFUSING};
use crate::connection;
use crate::incoming::Incoming;
use crate::memory::Trim;

/// Listens on `addr` (`HOST:PORT`; the first of its addresses that can be
/// bound) with a queue of [`LISTEN_BACKLOG`] connections, where tokio's
/// own `bind` queues 128: the connections of every client coming back
/// together after a fail-over wait their turn rather than their SYN's
/// retransmission a second later (`CONN-8`).
///
/// ```no_run
/// # async fn example() -> std::io::Result<()> {
/// let listener = leasehold_server::bind("127.0.0.1:7171").await?;
/// # Ok(()) }
/// ```
pub async fn bind(addr: &str) -> io::Result<tokio::net::TcpListener> {
    let mut last = None;
    for at in tokio::net::lookup_host(addr).await? {
        let socket = match at {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        // A master restarted on its port while its old connections linger
        // in TIME_WAIT binds it again, as tokio's `bind` allows.
        socket.set_reuseaddr(true)?;
        match socket.bind(at).and_then(|()| socket.listen(LISTEN_BACKLOG)) {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the address names no address to listen on",
        )
    }))
}

/// A source of connections.
pub trait Listener: Send + 'static {
    /// The connection type.
    type Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static;

    /// Waits for the next connection.
    fn accept(&mut self) -> impl Future<Output = io::Result<(Self::Stream, SocketAddr)>> + Send;
}

impl Listener for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;

    async fn accept(&mut self) -> io::Result<(Self::Stream, SocketAddr)> {
        let (stream, peer) = tokio::net::TcpListener::accept(self).await?;
        // Replies are small and latency matters more than packet count.
        stream.set_nodelay(true)?;
        Ok((stream, peer))
    }
}

/// Connections served now, by peer address, and whether one more may be
/// (`CONN-8`): a single master and a cell's member admit alike.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    per_peer: HashMap<IpAddr, usize>,
}

impl Admission {
    /// Why a connection from `ip` is refused while `served` are, if it is;
    /// `what` names the server in the reason.
    pub(crate) fn refusal(
        &self,
        ip: IpAddr,
        served: usize,
        config: &Config,
        what: &str,
    ) -> Option<String> {
        let from_peer = self.per_peer.get(&ip).copied().unwrap_or(0);
        if served >= config.max_connections {
            config.metrics.refused_at("connections");
            Some(format!(
                "the {what} serves its maximum of {} connections",
                config.max_connections
            ))
        } else if from_peer >= config.max_connections_per_peer {
            config.metrics.refused_at("connections_per_address");
            Some(format!(
                "{ip} holds the maximum of {} connections per address",
                config.max_connections_per_peer
            ))
        } else {
            None
        }
    }

    pub(crate) fn admit(&mut self, ip: IpAddr) {
        *self.per_peer.entry(ip).or_default() += 1;
    }

    pub(crate) fn ended(&mut self, ip: IpAddr) {
        if let Some(n) = self.per_peer.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&ip);
            }
        }
    }
}

/// Why [`accept_loop`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Its `shutdown` resolved.
    Shutdown,
    /// Its `stopped` resolved: what it served for is gone.
    Stopped,
}

/// What [`accept_loop`] hands back when it returns.
pub(crate) struct Accepted {
    pub(crate) ended: Ended,
    /// The connections still being served, for the caller to end as it
    /// must.
    pub(crate) tasks: JoinSet<IpAddr>,
    /// Refusals still telling their peer why: they go on until the caller
    /// drops this, after its own shutdown, as they did before it stopped.
    pub(crate) refusing: JoinSet<()>,
}

/// Accepts connections from `listener` and hands each one admitted to
/// `serve`, on a task of its own, until `shutdown` or `stopped` resolves,
/// with the TLS it must speak (`Config::tls`, as in force when it
/// arrived). `what` names the server in refusals.
pub(crate) async fn accept_loop<L, F>(
    mut listener: L,
    config: &Config,
    what: &str,
    shutdown: impl Future<Output = ()>,
    stopped: impl Future<Output = ()>,
    mut serve: impl FnMut(Incoming<L::Stream>, IpAddr) -> F,
) -> Accepted
where
    L: Listener,
    F: Future<Output = ()> + Send + 'static,
{
    let mut tasks = JoinSet::new();
    let mut admission = Admission::default();
    let mut refusing = JoinSet::new();
    let mut backoff = ACCEPT_BACKOFF_MIN;
    let mut trim = Trim::default();
    tokio::pin!(shutdown);
    tokio::pin!(stopped);
    let ended = loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    backoff = ACCEPT_BACKOFF_MIN;
                    let ip = peer.ip();
                    match admission.refusal(ip, tasks.len(), config, what) {
                        // Refusals are bounded too: past a few at once the
                        // connection is dropped without a word.
                        // A TLS client would read a plaintext refusal as
                        // garbage, and a handshake is the work an overloaded
                        // server must not take on: it is dropped.
                        Some(reason) if refusing.len() < MAX_REFUSING && config.tls.is_none() => {
                            tracing::debug!(%peer, %reason, "connection refused");
                            refusing.spawn(connection::refuse(stream, reason, config.clone()));
                        }
                        Some(_) => drop(stream),
                        None => {
                            tracing::debug!(%peer, "connection accepted");
                            admission.admit(ip);
                            let tls = config.tls.as_ref().map(|tls| tls.acceptor());
                            let serving = serve(Incoming { stream, tls }, ip);
                            // Mapped, not awaited in an async block: a
                            // block would hold the connection's future
                            // twice (as captured, then as awaited), each
                            // task twice its size for as long as the
                            // connection lives.
                            tasks.spawn(serving.map(move |()| ip));
                        }
                    }
                }
                Err(error) => {
                    // Wait for descriptors to be released rather than spin
                    // or exit.
                    warn!(%error, "accept failed; retrying in {backoff:?}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                }
            },
            // Reap finished connections so the set does not grow.
            Some(ended) = tasks.join_next(), if !tasks.is_empty() => {
                trim.connection_ended(tokio::time::Instant::now());
                if let Ok(ip) = ended {
                    admission.ended(ip);
                }
            }
            Some(_) = refusing.join_next(), if !refusing.is_empty() => {}
            () = trim.due() => trim.run(),
            () = &mut shutdown => break Ended::Shutdown,
            () = &mut stopped => break Ended::Stopped,
        }
    };
    Accepted {
        ended,
        tasks,
        refusing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernel allows a listener to queue at most.
    fn somaxconn() -> usize {
        std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(128)
    }

    // CONN-8: clients coming back together are queued, not dropped. A
    // connection past a full queue loses its SYN and is retried after 1,
    // 3, 7 s...: nobody accepts here, so with tokio's 128 it never lands.
    #[tokio::test]
    async fn a_listener_queues_hundreds_of_connections_nobody_accepted_yet() {
        let listener = bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let n = 600.min(somaxconn().saturating_sub(8));
        let connects = (0..n).map(|_| {
            tokio::time::timeout(
                std::time::Duration::from_secs(10),
                tokio::net::TcpStream::connect(addr),
            )
        });
        let connected = futures::future::join_all(connects).await;
        let landed = connected.iter().filter(|c| matches!(c, Ok(Ok(_)))).count();
        assert_eq!(landed, n, "of {n} connections, {landed} were queued");
        drop(listener);
    }

    #[tokio::test]
    async fn binding_an_address_that_names_nothing_is_refused() {
        assert!(bind("no-such-host.invalid:7171").await.is_err());
        assert!(bind("127.0.0.1:notaport").await.is_err());
    }
}
