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
use crate::recovery;
use crate::store::StoreError;

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

/// Why a server could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store failed while serving: changes could no longer be made
    /// durable, so the server stopped rather than acknowledge them.
    #[error("the master stopped: its storage failed")]
    StoreFailed,
}

/// Serves connections from `listener` until `shutdown` resolves, then closes
/// every connection. Fails at once if `config` is invalid or its data
/// directory unusable; recovers the state stored there first.
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
) -> Result<(), ServerError> {
    config.validate()?;
    let mut config = config;
    let start = recovery::open(&mut config)?;
    let (stop_master, master_stopped) = tokio::sync::oneshot::channel::<()>();
    let (master, mut task) = master::spawn(config.clone(), start, async {
        let _ = master_stopped.await;
    });
    let mut master_failed = false;
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
            // The master stops by itself only when its store failed.
            _ = &mut task => {
                master_failed = true;
                break;
            }
        }
    }
    info!("shutting down");
    connections.cancel();
    let drained = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_WAIT, drained).await.is_err() {
        tasks.abort_all();
    }
    if master_failed {
        return Err(ServerError::StoreFailed);
    }
    let _ = stop_master.send(());
    let _ = task.await;
    Ok(())
}
