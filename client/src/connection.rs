//! One multiplexed connection: many requests in flight, replies matched to
//! requests by id, in whatever order they come.
//!
//! A single I/O task owns the socket. It outlives the last handle while
//! requests are still waiting for replies, so a KeepAlive held by the master
//! survives the client switching to a new connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use leasehold_protocol::{ClientFrame, FrameCodec, Hello, Request, Response, ServerFrame, Welcome};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::Framed;

use crate::error::ClientError;
use crate::transport::BoxTransport;

type ReplyTx = oneshot::Sender<Result<Response, ClientError>>;

/// How often an I/O task with no handles left looks for abandoned requests.
const PRUNE_EVERY: Duration = Duration::from_secs(1);

static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

/// A handle to an open connection.
#[derive(Debug, Clone)]
pub(crate) struct Connection {
    id: u64,
    requests: mpsc::Sender<(Request, ReplyTx)>,
    welcome: Welcome,
}

impl Connection {
    /// Performs the handshake on `transport` and starts its I/O task.
    pub(crate) async fn open(
        transport: BoxTransport,
        max_frame: usize,
        handshake_timeout: Duration,
    ) -> Result<Connection, ClientError> {
        let mut framed = Framed::new(
            transport,
            FrameCodec::<ServerFrame, ClientFrame>::new(max_frame),
        );
        let handshake = async {
            framed
                .send(ClientFrame::Hello(Hello::current()))
                .await
                .map_err(|_| ClientError::Disconnected)?;
            match framed.next().await {
                Some(Ok(ServerFrame::Welcome(w))) => Ok(w),
                Some(Ok(ServerFrame::Close(e))) => Err(ClientError::Closed(e)),
                Some(Ok(other)) => Err(ClientError::Protocol(format!(
                    "expected Welcome, got {other:?}"
                ))),
                Some(Err(e)) => Err(ClientError::Protocol(e.to_string())),
                None => Err(ClientError::Disconnected),
            }
        };
        let welcome = tokio::time::timeout(handshake_timeout, handshake)
            .await
            .map_err(|_| ClientError::Timeout(handshake_timeout))??;
        let (requests, rx) = mpsc::channel(256);
        tokio::spawn(io_task(framed, rx));
        Ok(Connection {
            id: NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed),
            requests,
            welcome,
        })
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// Sends `request` and waits for its reply.
    pub(crate) async fn request(&self, request: Request) -> Result<Response, ClientError> {
        let (tx, rx) = oneshot::channel();
        self.requests
            .send((request, tx))
            .await
            .map_err(|_| ClientError::Disconnected)?;
        rx.await.map_err(|_| ClientError::Disconnected)?
    }
}

async fn io_task(
    mut framed: Framed<BoxTransport, FrameCodec<ServerFrame, ClientFrame>>,
    mut requests: mpsc::Receiver<(Request, ReplyTx)>,
) {
    let mut pending: HashMap<u64, ReplyTx> = HashMap::new();
    let mut next_id = 1u64;
    let mut handles_gone = false;
    let mut prune = tokio::time::interval(PRUNE_EVERY);
    let failure = loop {
        tokio::select! {
            outgoing = requests.recv(), if !handles_gone => match outgoing {
                Some((body, reply)) => {
                    let id = next_id;
                    next_id += 1;
                    pending.insert(id, reply);
                    if framed.send(ClientFrame::Request { id, body }).await.is_err() {
                        break None;
                    }
                }
                None => handles_gone = true,
            },
            incoming = framed.next() => match incoming {
                Some(Ok(ServerFrame::Reply { id, body })) => {
                    if let Some(reply) = pending.remove(&id) {
                        let _ = reply.send(body.map_err(ClientError::Server));
                    }
                }
                Some(Ok(ServerFrame::Close(e))) => break Some(e),
                Some(Ok(ServerFrame::Welcome(_))) => break None,
                Some(Err(_)) | None => break None,
            },
            _ = prune.tick(), if handles_gone => {
                pending.retain(|_, reply| !reply.is_closed());
            }
        }
        if handles_gone && pending.is_empty() {
            return;
        }
    };
    for (_, reply) in pending.drain() {
        let error = match &failure {
            Some(e) => ClientError::Closed(e.clone()),
            None => ClientError::Disconnected,
        };
        let _ = reply.send(Err(error));
    }
}
