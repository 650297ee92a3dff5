//! Accepting connections, generic over the transport so the same server runs
//! over TCP and inside a simulated network.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::{Config, ConfigError};
use crate::connection;
use crate::disk::StoreError;
use crate::master;
use crate::recovery;
use crate::store::Store;

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

/// Connections being told they are refused at once, at most (`CONN-8`).
pub(crate) const MAX_REFUSING: usize = 64;

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
            Some(format!(
                "the {what} serves its maximum of {} connections",
                config.max_connections
            ))
        } else if from_peer >= config.max_connections_per_peer {
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
/// every connection, keeping the state durable in `store`. Fails at once if
/// `config` is invalid or the store cannot be recovered; recovers the state
/// it holds first. The same as [`Server::open`] then [`Server::serve`].
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use leasehold_server::{Config, FileStore};
///
/// let store = FileStore::open("/var/lib/leasehold".as_ref())?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:7171").await?;
/// leasehold_server::run(listener, Config::default(), store, async {
///     let _ = tokio::signal::ctrl_c().await;
/// })
/// .await?;
/// # Ok(())
/// # }
/// ```
pub async fn run<L: Listener>(
    listener: L,
    config: Config,
    store: impl Store,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    Server::open(config, store)?.serve(listener, shutdown).await
}

/// A master whose configuration is checked and whose data directory is
/// taken and recovered, not yet serving: what can fail at start has
/// failed by now, before anyone is told where it listens.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use leasehold_server::{Config, FileStore, Server};
///
/// let store = FileStore::open("/var/lib/leasehold".as_ref())?;
/// let server = Server::open(Config::default(), store)?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:7171").await?;
/// println!("listening on {}", listener.local_addr()?);
/// server
///     .serve(listener, async {
///         let _ = tokio::signal::ctrl_c().await;
///     })
///     .await?;
/// # Ok(())
/// # }
/// ```
pub struct Server {
    config: Config,
    start: recovery::Start,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("epoch", &self.config.epoch)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Checks `config` and recovers the state `store` holds (a new epoch
    /// is durable in it before this returns, `FO-1`). Every change is
    /// made durable in `store` before it is acknowledged.
    pub fn open(config: Config, store: impl Store) -> Result<Server, ServerError> {
        Self::start(config, Some(Box::new(store)))
    }

    /// A master whose state lives in its memory alone: a restart forgets
    /// everything. For tests and trials, never for locks anyone relies on.
    ///
    /// ```
    /// let server = leasehold_server::Server::volatile(leasehold_server::Config::default())?;
    /// # drop(server);
    /// # Ok::<(), leasehold_server::ServerError>(())
    /// ```
    pub fn volatile(config: Config) -> Result<Server, ServerError> {
        Self::start(config, None)
    }

    fn start(config: Config, store: Option<Box<dyn Store>>) -> Result<Server, ServerError> {
        config.validate()?;
        let mut config = config;
        let start = recovery::open(&mut config, store)?;
        Ok(Server { config, start })
    }

    /// Serves connections from `listener` until `shutdown` resolves, then
    /// closes every connection.
    pub async fn serve<L: Listener>(
        self,
        listener: L,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServerError> {
        serve(listener, self.config, self.start, shutdown).await
    }
}

async fn serve<L: Listener>(
    mut listener: L,
    config: Config,
    start: recovery::Start,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    let (stop_master, master_stopped) = tokio::sync::oneshot::channel::<()>();
    let (master, mut task) = master::spawn(config.clone(), start, async {
        let _ = master_stopped.await;
    });
    let mut master_failed = false;
    let connections = CancellationToken::new();
    let mut tasks = JoinSet::new();
    let mut admission = Admission::default();
    let mut refusing = JoinSet::new();
    let all_queued_bytes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tokio::pin!(shutdown);
    let mut backoff = Duration::from_millis(10);
    let mut trim = crate::memory::Trim::default();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    backoff = Duration::from_millis(10);
                    let ip = peer.ip();
                    match admission.refusal(ip, tasks.len(), &config, "master") {
                        // Refusals are bounded too: past a few at once the
                        // connection is dropped without a word.
                        Some(reason) if refusing.len() < MAX_REFUSING => {
                            tracing::debug!(%peer, %reason, "connection refused");
                            refusing.spawn(connection::refuse(stream, reason, config.clone()));
                        }
                        Some(_) => drop(stream),
                        None => {
                            tracing::debug!(%peer, "connection accepted");
                            admission.admit(ip);
                            let serving = connection::serve(
                                stream,
                                master.clone(),
                                config.clone(),
                                all_queued_bytes.clone(),
                                ip,
                                connections.child_token(),
                            );
                            tasks.spawn(async move {
                                serving.await;
                                ip
                            });
                        }
                    }
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
            Some(ended) = tasks.join_next(), if !tasks.is_empty() => {
                trim.connection_ended(tokio::time::Instant::now());
                if let Ok(ip) = ended {
                    admission.ended(ip);
                }
            }
            Some(_) = refusing.join_next(), if !refusing.is_empty() => {}
            () = trim.due() => trim.run(),
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
