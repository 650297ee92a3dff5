//! Accepting connections, generic over the transport so the same server runs
//! over TCP and inside a simulated network.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::{Config, ConfigError};
use crate::connection;
use crate::master;

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

/// How long a shutting-down server waits for its connections to close.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// Serves connections from `listener` until `shutdown` resolves, then closes
/// every connection. Fails at once if `config` is invalid.
///
/// ```no_run
/// # async fn example() -> std::io::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:7171").await?;
/// leasehold_server::run(listener, leasehold_server::Config::default(), async {
///     let _ = tokio::signal::ctrl_c().await;
/// })
/// .await
/// .expect("a valid configuration");
/// # Ok(())
/// # }
/// ```
pub async fn run<L: Listener>(
    mut listener: L,
    config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ConfigError> {
    config.validate()?;
    let (stop_master, master_stopped) = tokio::sync::oneshot::channel::<()>();
    let (master, task) = master::spawn(config.clone(), async {
        let _ = master_stopped.await;
    });
    let connections = CancellationToken::new();
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    let mut backoff = Duration::from_millis(10);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    backoff = Duration::from_millis(10);
                    tracing::debug!(%peer, "connection accepted");
                    tasks.spawn(connection::serve(
                        stream,
                        master.clone(),
                        config.clone(),
                        connections.child_token(),
                    ));
                }
                Err(error) => {
                    // Typically out of file descriptors: wait for some to be
                    // released rather than spin or exit.
                    warn!(%error, "accept failed; retrying in {backoff:?}");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            },
            // Reap finished connections so the set does not grow.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            () = &mut shutdown => break,
        }
    }
    info!("shutting down");
    connections.cancel();
    let drained = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_WAIT, drained).await.is_err() {
        tasks.abort_all();
    }
    let _ = stop_master.send(());
    let _ = task.await;
    Ok(())
}
