//! One multiplexed connection: many requests in flight, replies matched to
//! requests by id, in whatever order they come.
//!
//! A reader task and a writer task own the two halves of the socket, so
//! replies are read even while a large request is being written (neither
//! peer can wait on the other's reading). The tasks outlive the last handle
//! while requests are still waiting for replies, so a KeepAlive held by the
//! master survives the client switching to a new connection.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use leasehold_protocol::{ClientFrame, FrameCodec, Hello, Request, Response, ServerFrame, Welcome};
use tokio::io::{ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::clock::Clock;
use crate::error::ClientError;
use crate::transport::BoxTransport;

type ReplyTx = oneshot::Sender<Result<(Response, Instant), ClientError>>;
/// A request on its way out: its reply channel, and the in-flight permit it
/// holds until its reply arrives. KeepAlives take no permit: the master
/// does not count them against the in-flight limit, since it holds at most
/// one per session, and a KeepAlive must never wait for a slot that held
/// requests fill (`CONN-3`).
type Outgoing = (Request, ReplyTx, Option<OwnedSemaphorePermit>);
type Codec = FrameCodec<ServerFrame, ClientFrame>;
type Pending = Arc<Mutex<PendingRequests>>;

/// Requests written before a flush at most; the codec also flushes on its
/// own whenever its buffer fills.
const WRITE_BATCH: usize = 64;
/// How often a connection with no handles left looks for abandoned requests.
const PRUNE_EVERY: Duration = Duration::from_secs(1);
/// How long a closing connection waits for its last write and for the server
/// to close its side.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

#[derive(Default)]
struct PendingRequests {
    /// Each request's reply channel, its in-flight permit, and when it was
    /// written to the socket.
    replies: BTreeMap<u64, (ReplyTx, Option<OwnedSemaphorePermit>, Instant)>,
    /// Set once the connection has failed; later requests fail at once.
    failed: bool,
}

/// A handle to an open connection.
#[derive(Debug, Clone)]
pub(crate) struct Connection {
    id: u64,
    requests: mpsc::Sender<Outgoing>,
    /// One permit per request the server allows in flight: beyond it,
    /// requests wait here instead of being refused with `LimitReached`.
    in_flight: Arc<Semaphore>,
    welcome: Welcome,
    heard: Heard,
}

/// When a connection last delivered a frame. A connection that is
/// delivering replies is alive however slow its answers are, and opening
/// another to the same master would only add to that master's load.
#[derive(Debug, Clone, Default)]
pub(crate) struct Heard {
    /// When the reader started, just after the Welcome arrived.
    opened: Arc<std::sync::OnceLock<Instant>>,
    /// Milliseconds from `opened` to the latest frame.
    latest_ms: Arc<AtomicU64>,
}

impl Heard {
    /// The reader starts at `now`: the Welcome has just arrived.
    fn start(&self, now: Instant) {
        let _ = self.opened.set(now);
    }

    /// A frame arrived at `now`.
    fn frame_at(&self, now: Instant) {
        if let Some(opened) = self.opened.get() {
            let ms = now.saturating_duration_since(*opened).as_millis() as u64;
            self.latest_ms.fetch_max(ms, Ordering::Relaxed);
        }
    }

    /// When the latest frame arrived (the Welcome, before any other);
    /// `None` until the reader has started.
    pub(crate) fn latest(&self) -> Option<Instant> {
        let opened = *self.opened.get()?;
        Some(opened + Duration::from_millis(self.latest_ms.load(Ordering::Relaxed)))
    }
}

impl Connection {
    /// Performs the handshake on `transport` and starts its tasks.
    pub(crate) async fn open(
        transport: BoxTransport,
        max_frame: usize,
        handshake_timeout: Duration,
        clock: Clock,
    ) -> Result<Connection, ClientError> {
        // Split from the start: a frame that arrives with the Welcome stays
        // in the reader's buffer and is decoded on the next read.
        let (read, write) = tokio::io::split(transport);
        let mut reader = FramedRead::new(read, Codec::new(max_frame));
        let mut writer = FramedWrite::new(write, Codec::new(max_frame));
        let handshake = async {
            writer
                .send(ClientFrame::Hello(Hello::current()))
                .await
                .map_err(|_| ClientError::Disconnected)?;
            match reader.next().await {
                Some(Ok(ServerFrame::Welcome(w))) => Ok(w),
                Some(Ok(ServerFrame::Close(e))) => Err(ClientError::Closed(e)),
                Some(Ok(ServerFrame::Redirect { master })) => {
                    Err(ClientError::Redirected { master })
                }
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
        let pending: Pending = Arc::default();
        let heard = Heard::default();
        let (requests, queue) = mpsc::channel(256);
        let (reader_done, reader_stopped) = oneshot::channel();
        let reading = tokio::spawn(read_replies(
            reader,
            pending.clone(),
            heard.clone(),
            reader_done,
            clock,
        ));
        tokio::spawn(write_requests(
            writer,
            queue,
            pending,
            reader_stopped,
            reading,
            clock,
        ));
        let permits = (welcome.limits.max_in_flight as usize).clamp(1, Semaphore::MAX_PERMITS);
        Ok(Connection {
            id: NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed),
            requests,
            in_flight: Arc::new(Semaphore::new(permits)),
            welcome,
            heard,
        })
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    pub(crate) fn heard(&self) -> &Heard {
        &self.heard
    }

    /// Sends `request` and waits for its reply; says when the request was
    /// written to the socket, which the master cannot have read before.
    pub(crate) async fn request(
        &self,
        request: Request,
    ) -> Result<(Response, Instant), ClientError> {
        // The permit travels with the request and is released when its reply
        // arrives, not when the caller stops waiting: the server counts the
        // request until it answers.
        let permit = if matches!(request, Request::KeepAlive(_)) {
            None
        } else {
            let permits = self.in_flight.clone();
            Some(
                permits
                    .acquire_owned()
                    .await
                    .map_err(|_| ClientError::Disconnected)?,
            )
        };
        let (tx, rx) = oneshot::channel();
        self.requests
            .send((request, tx, permit))
            .await
            .map_err(|_| ClientError::Disconnected)?;
        rx.await.map_err(|_| ClientError::Disconnected)?
    }
}

/// Writes requests, registering each before it goes out. Ends when every
/// handle is gone and no reply is awaited, or when the reader stops; it then
/// closes the connection (a split socket closes only when both halves are
/// gone, so the reader is ended too).
async fn write_requests(
    mut writer: FramedWrite<WriteHalf<BoxTransport>, Codec>,
    mut queue: mpsc::Receiver<Outgoing>,
    pending: Pending,
    mut reader_stopped: oneshot::Receiver<()>,
    reading: tokio::task::JoinHandle<()>,
    clock: Clock,
) {
    let mut next_id = 1u64;
    let mut handles_gone = false;
    let mut reader_ended = false;
    let mut prune = tokio::time::interval(PRUNE_EVERY);
    'writing: loop {
        tokio::select! {
            _ = &mut reader_stopped => {
                reader_ended = true;
                break;
            }
            outgoing = queue.recv(), if !handles_gone => match outgoing {
                Some(first) => {
                    // Requests queued behind this one go out in the same
                    // write: under load, one system call carries many.
                    let mut next = Some(first);
                    let mut batch = 0;
                    while let Some((body, reply, permit)) = next {
                        let id = next_id;
                        next_id += 1;
                        {
                            let mut pending = lock(&pending);
                            if pending.failed {
                                let _ = reply.send(Err(ClientError::Disconnected));
                                break;
                            }
                            pending.replies.insert(id, (reply, permit, clock.now()));
                        }
                        if writer.feed(ClientFrame::Request { id, body }).await.is_err() {
                            break 'writing;
                        }
                        batch += 1;
                        next = if batch < WRITE_BATCH { queue.try_recv().ok() } else { None };
                    }
                    if writer.flush().await.is_err() {
                        break;
                    }
                }
                None => handles_gone = true,
            },
            _ = prune.tick(), if handles_gone => {
                let mut pending = lock(&pending);
                pending.replies.retain(|_, (reply, _, _)| !reply.is_closed());
                if pending.replies.is_empty() {
                    break;
                }
            }
        }
    }
    fail_all(&pending, None);
    // Half-close so the server sees the end and closes its side; the reader
    // then sees the end too. Give it a moment, then stop it regardless.
    let _ = tokio::time::timeout(CLOSE_WAIT, writer.close()).await;
    if !reader_ended
        && tokio::time::timeout(CLOSE_WAIT, &mut reader_stopped)
            .await
            .is_err()
    {
        reading.abort();
    }
}

/// Reads replies and hands each to its request.
async fn read_replies(
    mut reader: FramedRead<ReadHalf<BoxTransport>, Codec>,
    pending: Pending,
    heard: Heard,
    done: oneshot::Sender<()>,
    clock: Clock,
) {
    heard.start(clock.now());
    let failure = loop {
        let frame = reader.next().await;
        heard.frame_at(clock.now());
        match frame {
            Some(Ok(ServerFrame::Reply { id, body })) => {
                if let Some((reply, _permit, sent)) = lock(&pending).replies.remove(&id) {
                    let _ = reply.send(body.map(|r| (r, sent)).map_err(ClientError::Server));
                }
            }
            Some(Ok(ServerFrame::Close(e))) => break Some(e),
            Some(Ok(ServerFrame::Welcome(_) | ServerFrame::Redirect { .. }))
            | Some(Err(_))
            | None => break None,
        }
    };
    fail_all(&pending, failure);
    let _ = done.send(());
}

fn fail_all(pending: &Pending, failure: Option<leasehold_protocol::Error>) {
    let mut pending = lock(pending);
    pending.failed = true;
    for (_, (reply, _permit, _sent)) in std::mem::take(&mut pending.replies) {
        let error = match &failure {
            // Written, so the master may have carried them out before it
            // closed.
            Some(e) => ClientError::Interrupted(e.clone()),
            None => ClientError::Disconnected,
        };
        let _ = reply.send(Err(error));
    }
}

fn lock(pending: &Pending) -> std::sync::MutexGuard<'_, PendingRequests> {
    pending.lock().unwrap_or_else(|e| e.into_inner())
}
