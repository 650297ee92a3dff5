//! Accepting connections, generic over the transport so the same server runs
//! over TCP and inside a simulated network.

use std::future::Future;

use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::accept::{accept_loop, Accepted, Ended, Listener};
use crate::caller::Caller;
use crate::config::SHUTDOWN_WAIT;
use crate::config::{Config, ConfigError};
use crate::connection;
use crate::disk::StoreError;
use crate::master;
use crate::recovery;
use crate::store::Store;

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
    /// The operator's HTTP port, if it has one (`OPS-2`).
    http: Option<tokio::net::TcpListener>,
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
        Ok(Server {
            config,
            start,
            http: None,
        })
    }

    /// Serves connections from `listener` until `shutdown` resolves, then
    /// closes every connection.
    /// Serves the operator's HTTP port on `listener` too, while the
    /// master serves: `/metrics`, `/health`, `/ready` and the status page
    /// (`OPS-2`, `OPS-5`).
    pub fn with_http(mut self, listener: tokio::net::TcpListener) -> Server {
        self.http = Some(listener);
        self
    }

    pub async fn serve<L: Listener>(
        self,
        listener: L,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServerError> {
        serve(listener, self.config, self.start, self.http, shutdown).await
    }
}

async fn serve<L: Listener>(
    listener: L,
    config: Config,
    start: recovery::Start,
    http: Option<tokio::net::TcpListener>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    let (stop_master, master_stopped) = tokio::sync::oneshot::channel::<()>();
    let (master, mut task) = master::spawn(config.clone(), start, async {
        let _ = master_stopped.await;
    });
    let connections = CancellationToken::new();
    if let Some(http) = http {
        // A single master serves from the moment it listens (`OPS-3`).
        let (_, health) = tokio::sync::watch::channel(crate::http::Health::serving());
        let port = crate::http::HttpPort::new(config.metrics.clone(), health)
            .with_master(master.clone(), &config.http_hosts)
            .with_tls(config.tls.clone());
        let stop = connections.clone();
        tokio::spawn(crate::http::serve_http(http, port, async move {
            stop.cancelled().await
        }));
    }
    let all_queued_bytes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // One copy that every connection shares, rather than one each.
    let shared = std::sync::Arc::new(config.clone());
    // The master stops by itself only when its store failed.
    let master_ended = async {
        let _ = (&mut task).await;
    };
    let Accepted {
        ended,
        mut tasks,
        refusing: _refusing,
    } = accept_loop(
        listener,
        &config,
        "master",
        shutdown,
        master_ended,
        |incoming, ip| {
            let (master, config) = (master.clone(), shared.clone());
            let (all_queued_bytes, shutdown) =
                (all_queued_bytes.clone(), connections.child_token());
            async move {
                // Boxed: a connection's task keeps no room for the
                // handshake's state once it serves (`CONN-8`'s thousands
                // of connections).
                let established = Box::pin(incoming.establish(&config, &shutdown)).await;
                if let Some((stream, hello_by)) = established {
                    let caller = Caller::new(ip, stream.certified());
                    connection::serve(
                        stream,
                        master,
                        config,
                        all_queued_bytes,
                        caller,
                        shutdown,
                        hello_by,
                    )
                    .await;
                }
            }
        },
    )
    .await;
    let master_failed = ended == Ended::Stopped;
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
