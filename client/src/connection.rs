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
use leasehold_protocol::{
    keepalive_all_limit, ClientFrame, FrameCodec, Hello, KeepAlive, Request, Response, ServerFrame,
    Welcome,
};
use tokio::io::{ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::clock::Clock;
use crate::config::{CLOSE_WAIT, PRUNE_EVERY, QUEUE, WRITE_BATCH};
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
/// A request as it is written: one frame, and whoever waits for its reply.
type Framed = (Request, Waiter, Option<OwnedSemaphorePermit>);
type Pending = Arc<Mutex<PendingRequests>>;

static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

#[derive(Default)]
struct PendingRequests {
    /// Each request's reply channels, its in-flight permit, and when it was
    /// written to the socket.
    replies: BTreeMap<u64, (Waiter, Option<OwnedSemaphorePermit>, Instant)>,
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
                Some(Err(leasehold_protocol::CodecError::Io(e))) => match crate::tls::refusal(&e) {
                    Some(why) => Err(ClientError::Tls(why)),
                    None => Err(ClientError::Disconnected),
                },
                Some(Err(e)) => Err(ClientError::Protocol(e.to_string())),
                None => Err(ClientError::Disconnected),
            }
        };
        let welcome = tokio::time::timeout(handshake_timeout, handshake)
            .await
            .map_err(|_| ClientError::Timeout(handshake_timeout))??;
        let pending: Pending = Arc::default();
        let heard = Heard::default();
        let (requests, queue) = mpsc::channel(QUEUE);
        let probes_per_frame =
            keepalive_all_limit(max_frame.min(welcome.limits.max_frame as usize));
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
            probes_per_frame,
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

    /// Whether requests can still go out on it: its writer stops once the
    /// master closed it or its reader failed.
    pub(crate) fn is_open(&self) -> bool {
        !self.requests.is_closed()
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
    probes_per_frame: usize,
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
                    // Unheld KeepAlives come in a crowd, one per session,
                    // when a connection opens after a failure: a turn for
                    // the rest of the crowd to queue theirs lets them all
                    // go in one KeepAliveAll (`KA-10`).
                    if matches!(&first.0, Request::KeepAlive(ka) if !ka.hold) {
                        tokio::task::yield_now().await;
                    }
                    // Requests queued behind this one go out in the same
                    // write: under load, one system call carries many.
                    let mut queued = vec![first];
                    while queued.len() < QUEUE {
                        match queue.try_recv() {
                            Ok(next) => queued.push(next),
                            Err(_) => break,
                        }
                    }
                    for (batch, (body, waiter, permit)) in
                        coalesce(queued, probes_per_frame).into_iter().enumerate()
                    {
                        let id = next_id;
                        next_id += 1;
                        {
                            let mut pending = lock(&pending);
                            if pending.failed {
                                waiter.fail(|| ClientError::Disconnected);
                                continue;
                            }
                            pending.replies.insert(id, (waiter, permit, clock.now()));
                        }
                        if writer.feed(ClientFrame::Request { id, body }).await.is_err() {
                            break 'writing;
                        }
                        if (batch + 1) % WRITE_BATCH == 0 && writer.flush().await.is_err() {
                            break 'writing;
                        }
                    }
                    if writer.flush().await.is_err() {
                        break;
                    }
                }
                None => handles_gone = true,
            },
            _ = prune.tick(), if handles_gone => {
                let mut pending = lock(&pending);
                pending.replies.retain(|_, (waiter, _, _)| !waiter.is_closed());
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
                if let Some((waiter, _permit, sent)) = lock(&pending).replies.remove(&id) {
                    waiter.answer(body, sent);
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
    for (_, (waiter, _permit, _sent)) in std::mem::take(&mut pending.replies) {
        waiter.fail(|| match &failure {
            // Written, so the master may have carried them out before it
            // closed.
            Some(e) => ClientError::Interrupted(e.clone()),
            None => ClientError::Disconnected,
        });
    }
}

fn lock(pending: &Pending) -> std::sync::MutexGuard<'_, PendingRequests> {
    pending.lock().unwrap_or_else(|e| e.into_inner())
}

/// Who waits for a frame's reply: one request, or the KeepAlives that went
/// out together as one KeepAliveAll.
enum Waiter {
    One(ReplyTx),
    KeepAlives(Vec<ReplyTx>),
}

impl Waiter {
    /// Hands each waiter its answer: a KeepAliveAll's, session by session,
    /// as the answer to its own KeepAlive (`KA-10`).
    fn answer(self, body: Result<Response, leasehold_protocol::Error>, sent: Instant) {
        match self {
            Waiter::One(reply) => {
                let _ = reply.send(body.map(|r| (r, sent)).map_err(ClientError::Server));
            }
            Waiter::KeepAlives(replies) => match body {
                Ok(Response::KeepAliveAll { answers }) if answers.len() == replies.len() => {
                    for (reply, answer) in replies.into_iter().zip(answers) {
                        let answer = answer
                            .map(|grant| (Response::from(grant), sent))
                            .map_err(ClientError::Server);
                        let _ = reply.send(answer);
                    }
                }
                Ok(other) => {
                    let why = format!(
                        "a KeepAliveAll for {} sessions was answered with {other:?}",
                        replies.len()
                    );
                    for reply in replies {
                        let _ = reply.send(Err(ClientError::Protocol(why.clone())));
                    }
                }
                Err(e) => {
                    for reply in replies {
                        let _ = reply.send(Err(ClientError::Server(e.clone())));
                    }
                }
            },
        }
    }

    fn fail(self, error: impl Fn() -> ClientError) {
        match self {
            Waiter::One(reply) => {
                let _ = reply.send(Err(error()));
            }
            Waiter::KeepAlives(replies) => {
                for reply in replies {
                    let _ = reply.send(Err(error()));
                }
            }
        }
    }

    /// Whether nobody waits any more.
    fn is_closed(&self) -> bool {
        match self {
            Waiter::One(reply) => reply.is_closed(),
            Waiter::KeepAlives(replies) => replies.iter().all(|r| r.is_closed()),
        }
    }
}

/// The frames that carry `queued`: KeepAlives asking for an answer at once
/// go together, up to `per_frame` in one KeepAliveAll, when more than one
/// waits (after a reconnection or a fail-over, every session's does), so
/// the master renews them all in one turn (`KA-10`). The rest go as they
/// came, after them.
fn coalesce(queued: Vec<Outgoing>, per_frame: usize) -> Vec<Framed> {
    let probe = |request: &Request| matches!(request, Request::KeepAlive(ka) if !ka.hold);
    let probes = queued.iter().filter(|(r, _, _)| probe(r)).count();
    if probes < 2 {
        return queued
            .into_iter()
            .map(|(request, reply, permit)| (request, Waiter::One(reply), permit))
            .collect();
    }
    let mut frames = Vec::new();
    let mut rest = Vec::new();
    let mut group: (Vec<KeepAlive>, Vec<ReplyTx>) = (Vec::new(), Vec::new());
    for (request, reply, permit) in queued {
        match request {
            Request::KeepAlive(ka) if !ka.hold => {
                group.0.push(ka);
                group.1.push(reply);
                if group.0.len() == per_frame.max(1) {
                    frames.push(keepalive_all(std::mem::take(&mut group)));
                }
            }
            other => rest.push((other, Waiter::One(reply), permit)),
        }
    }
    if !group.0.is_empty() {
        frames.push(keepalive_all(group));
    }
    frames.extend(rest);
    frames
}

/// One frame for `keepalives`: a plain KeepAlive when there is one.
fn keepalive_all((mut keepalives, mut replies): (Vec<KeepAlive>, Vec<ReplyTx>)) -> Framed {
    if keepalives.len() == 1 {
        let (ka, reply) = (keepalives.remove(0), replies.remove(0));
        return (Request::KeepAlive(ka), Waiter::One(reply), None);
    }
    (
        Request::KeepAliveAll(keepalives),
        Waiter::KeepAlives(replies),
        None,
    )
}

#[cfg(test)]
mod tests {
    use leasehold_protocol::{
        Error, ErrorCode, KeepAliveGrant, LeaseGrant, SessionSecret, SessionToken,
    };

    use super::*;

    fn keepalive(n: u128, hold: bool) -> Request {
        Request::KeepAlive(KeepAlive {
            session: SessionToken {
                id: uuid::Uuid::from_u128(n),
                secret: SessionSecret::from_bytes([0; 16]),
            },
            epoch: 1,
            acked_seq: 0,
            hold,
        })
    }

    type Answer = oneshot::Receiver<Result<(Response, Instant), ClientError>>;

    fn queued(requests: Vec<Request>) -> (Vec<Outgoing>, Vec<Answer>) {
        requests
            .into_iter()
            .map(|request| {
                let (tx, rx) = oneshot::channel();
                ((request, tx, None), rx)
            })
            .unzip()
    }

    /// What each frame carries: `n` for a KeepAliveAll of n, "ka" for
    /// a KeepAlive, "other" for anything else.
    fn shapes(frames: &[Framed]) -> Vec<String> {
        frames
            .iter()
            .map(|(request, _, _)| match request {
                Request::KeepAliveAll(all) => all.len().to_string(),
                Request::KeepAlive(_) => "ka".into(),
                _ => "other".into(),
            })
            .collect()
    }

    // KA-10
    #[test]
    fn unheld_keepalives_waiting_together_go_as_one_keepalive_all() {
        let list = Request::ListChecks {
            after: None,
            limit: 0,
        };
        let (out, _answers) = queued(vec![
            keepalive(1, false),
            list,
            keepalive(2, true),
            keepalive(3, false),
        ]);
        assert_eq!(shapes(&coalesce(out, 100)), ["2", "other", "ka"]);
    }

    // KA-10
    #[test]
    fn a_lone_unheld_keepalive_goes_as_it_came() {
        let (out, _answers) = queued(vec![keepalive(1, false), keepalive(2, true)]);
        assert_eq!(shapes(&coalesce(out, 100)), ["ka", "ka"]);
    }

    // KA-10: never more sessions in one request than the limit.
    #[test]
    fn unheld_keepalives_past_the_limit_go_in_several_requests() {
        let (out, _answers) = queued((0..7).map(|n| keepalive(n, false)).collect());
        assert_eq!(shapes(&coalesce(out, 3)), ["3", "3", "ka"]);
    }

    // KA-10: each session's KeepAlive gets its own answer, refusals included.
    #[tokio::test]
    async fn each_keepalive_of_a_keepalive_all_gets_its_own_answer() {
        let (out, answers) = queued(vec![keepalive(1, false), keepalive(2, false)]);
        let (_, waiter, _) = coalesce(out, 100).pop().expect("one frame");
        let grant = KeepAliveGrant {
            epoch: 4,
            lease: LeaseGrant {
                remaining_ms: 9_000,
                held_ms: 0,
            },
            events: Vec::new(),
        };
        let gone = Error::new(ErrorCode::SessionExpired, "expired");
        let reply = Response::KeepAliveAll {
            answers: vec![Ok(grant), Err(gone)],
        };
        waiter.answer(Ok(reply), Instant::now());
        let mut answers = answers.into_iter();
        match answers.next().unwrap().await.unwrap() {
            Ok((Response::KeepAlive { epoch: 4, .. }, _)) => {}
            other => panic!("expected a renewal, got {other:?}"),
        }
        let refused = answers.next().unwrap().await.unwrap();
        assert_eq!(
            refused.err().and_then(|e| e.code()),
            Some(ErrorCode::SessionExpired)
        );
    }

    // KA-10: an answer of the wrong shape fails every KeepAlive it carried.
    #[tokio::test]
    async fn a_keepalive_all_answered_with_the_wrong_count_fails_each_keepalive() {
        let (out, answers) = queued(vec![keepalive(1, false), keepalive(2, false)]);
        let (_, waiter, _) = coalesce(out, 100).pop().expect("one frame");
        waiter.answer(
            Ok(Response::KeepAliveAll {
                answers: Vec::new(),
            }),
            Instant::now(),
        );
        for answer in answers {
            assert!(matches!(
                answer.await.unwrap(),
                Err(ClientError::Protocol(_))
            ));
        }
    }
}
