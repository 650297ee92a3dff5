//! One client connection: the handshake, then requests in and replies out.
//!
//! Reading and writing are separate tasks, so the connection keeps reading
//! requests while a large reply is being written, and replies go out in the
//! order they complete: a held KeepAlive never delays another request
//! (`CONN-2`). A frame that cannot be read closes this connection, with a
//! `Close` frame that says why, and touches nothing else (`WIRE-4`).

use std::time::Duration;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use futures::{SinkExt, StreamExt};
use leasehold_protocol::{
    ClientFrame, CodecError, Error, ErrorCode, FrameCodec, Hello, Request, ServerFrame, Welcome,
    MAGIC, OLDEST_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::call::Call;
use crate::caller::Caller;
use crate::config::Config;
use crate::config::{
    CONNECTION_BUFFER, CONNECTION_BUFFER_KEPT, CONNECTION_HELD_BYTES, CONNECTION_WRITE_BATCH,
    CONNECTION_WRITE_QUEUE, LINGER, LINGER_BYTES, REFUSAL_DRAIN_BUFFER, REFUSAL_DRAIN_BYTES,
    SHUTDOWN_LINGER,
};
use crate::master::{request_name, MasterHandle, Room};
use crate::reply::{Flow, Reply, ReplyTx};

type Codec = FrameCodec<ClientFrame, ServerFrame>;
type Reader<S> = FramedRead<ReadHalf<S>, Codec>;
type Writer<S> = FramedWrite<WriteHalf<S>, Codec>;

/// Serves one connection until the peer closes it, breaks the protocol, or
/// `shutdown` is cancelled.
pub(crate) async fn serve<S>(
    stream: S,
    master: MasterHandle,
    config: Arc<Config>,
    all_queued_bytes: Arc<std::sync::atomic::AtomicUsize>,
    caller: Caller,
    shutdown: CancellationToken,
    hello_by: tokio::time::Instant,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    config.metrics.connection_opened();
    let _counted = OpenConnection(&config.metrics);
    let (read, write) = tokio::io::split(stream);
    // Small buffers that grow when frames need it: a master holds
    // thousands of mostly idle connections (tokio-util starts at 8 KiB).
    let mut reader =
        FramedRead::with_capacity(read, Codec::new(config.max_frame), CONNECTION_BUFFER);
    let mut writer =
        FramedWrite::with_capacity(write, Codec::new(config.max_frame), CONNECTION_BUFFER);
    let hello = tokio::select! {
        hello = tokio::time::timeout_at(hello_by, reader.next()) => hello,
        () = shutdown.cancelled() => return,
    };
    let welcome = match hello {
        Err(_) => Err(Error::new(ErrorCode::Malformed, "no Hello in time")),
        Ok(frame) => handshake(frame, &config),
    };
    let closing = match welcome {
        Err(error) => Some(error),
        Ok(welcome) => {
            if !write_frame(
                &mut writer,
                ServerFrame::Welcome(welcome),
                &config,
                Flushing::Now,
            )
            .await
            {
                return;
            }
            let flow = Arc::new(Flow {
                all_queued_bytes: all_queued_bytes.clone(),
                metrics: config.metrics.clone(),
                ..Flow::default()
            });
            let (replies, queue) = mpsc::unbounded_channel();
            let caller = Arc::new(caller);
            let done = CancellationToken::new();
            // Also if this future is dropped half way: the writer must not
            // outlive the connection while the master holds reply handles.
            let _done_on_drop = done.clone().drop_guard();
            let writing = tokio::spawn(write_replies(
                writer,
                queue,
                flow.clone(),
                done.clone(),
                config.clone(),
            ));
            let mut held = Held::default();
            let closing = tokio::select! {
                closing = requests(&mut reader, &replies, &flow, &master, &config, &caller, &mut held) => {
                    held.hand_over(&master, &replies).await;
                    closing
                }
                // A request in flight gets `Interrupted` from the client
                // library: its outcome is unknown (`CELL-7`).
                () = shutdown.cancelled() => Some(Error::new(
                    ErrorCode::Internal,
                    "the master stopped: it is shutting down, or no longer the cell's master; \
                     connect again",
                )),
            };
            drop(replies);
            // Replies still to come (held KeepAlives) have nobody to read
            // them: the writer sends what is queued and stops, and the
            // master then sees the connection closed (`KA-4`).
            done.cancel();
            match writing.await {
                Ok(Some(w)) => writer = w,
                _ => return,
            }
            closing
        }
    };
    if let Some(error) = closing {
        debug!(%error, "closing connection");
        // A master going away waits for no slow peer: its Close is on its
        // way, which is what lingering is for (`CONN-6`).
        let linger = match shutdown.is_cancelled() {
            true => SHUTDOWN_LINGER,
            false => LINGER,
        };
        // Boxed, as the handshake is: the task keeps no room for it while
        // it serves.
        Box::pin(close_lingering(
            writer,
            reader.into_inner(),
            error,
            &config,
            linger,
        ))
        .await;
    }
}

/// Counts a connection as closed when dropped, however its task ends.
struct OpenConnection<'a>(&'a crate::metrics::Metrics);

impl Drop for OpenConnection<'_> {
    fn drop(&mut self) {
        self.0.connection_closed();
    }
}

/// Sends `Close(error)`, then lingers so that the peer reads it rather
/// than a reset (`WIRE-4`).
async fn close_with<S>(writer: Writer<S>, read: ReadHalf<S>, error: Error, config: &Config)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    close_lingering(writer, read, error, config, LINGER).await;
}

/// [`close_with`], waiting at most `most` for the peer to close its side.
async fn close_lingering<S>(
    mut writer: Writer<S>,
    read: ReadHalf<S>,
    error: Error,
    config: &Config,
    most: Duration,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if write_frame(
        &mut writer,
        ServerFrame::Close(error),
        config,
        Flushing::Now,
    )
    .await
    {
        linger(read.unsplit(writer.into_inner()), most).await;
    }
}

/// Tells a connection the master will not serve it (`CONN-8`): a `Close`
/// with `LimitReached` and the reason, without waiting for its Hello.
pub(crate) async fn refuse<S>(stream: S, reason: String, config: Config)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    refuse_with(stream, Error::new(ErrorCode::LimitReached, reason), config).await;
}

/// Tells a connection why it is not served, in a `Close`, without waiting
/// for its Hello.
pub(crate) async fn refuse_with<S>(stream: S, error: Error, config: Config)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (read, write) = tokio::io::split(stream);
    let mut writer =
        FramedWrite::with_capacity(write, Codec::new(config.max_frame), CONNECTION_BUFFER);
    let close = ServerFrame::Close(error);
    if write_frame(&mut writer, close, &config, Flushing::Now).await {
        let stream = read.unsplit(writer.into_inner());
        drain(stream, LINGER, REFUSAL_DRAIN_BYTES, REFUSAL_DRAIN_BUFFER).await;
    }
}

/// Tells a client that this member of a cell is not its master, and where
/// the master is (`CELL-7`): the answer to its Hello is `Redirect`, then
/// the connection closes.
pub(crate) async fn redirect<S>(
    stream: S,
    master: Option<String>,
    config: Config,
    hello_by: tokio::time::Instant,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (read, write) = tokio::io::split(stream);
    let mut reader =
        FramedRead::with_capacity(read, Codec::new(config.max_frame), CONNECTION_BUFFER);
    let mut writer =
        FramedWrite::with_capacity(write, Codec::new(config.max_frame), CONNECTION_BUFFER);
    let hello = tokio::time::timeout_at(hello_by, reader.next()).await;
    if let Err(error) = hello.map_or_else(
        |_| Err(Error::new(ErrorCode::Malformed, "no Hello in time")),
        |frame| handshake(frame, &config),
    ) {
        close_with(writer, reader.into_inner(), error, &config).await;
        return;
    }
    if write_frame(
        &mut writer,
        ServerFrame::Redirect { master },
        &config,
        Flushing::Now,
    )
    .await
    {
        linger(reader.into_inner().unsplit(writer.into_inner()), LINGER).await;
    }
}

fn handshake(
    frame: Option<Result<ClientFrame, CodecError>>,
    config: &Config,
) -> Result<Welcome, Error> {
    match frame {
        Some(Ok(ClientFrame::Hello(Hello { magic, version }))) => {
            if magic != MAGIC {
                Err(Error::new(
                    ErrorCode::Malformed,
                    "not a Leasehold client: bad magic",
                ))
            } else if !(OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&version) {
                Err(Error::new(
                    ErrorCode::VersionMismatch {
                        supported: PROTOCOL_VERSION,
                    },
                    format!(
                        "protocol version {version} is not supported; this server speaks \
                         {OLDEST_PROTOCOL_VERSION} to {PROTOCOL_VERSION}"
                    ),
                ))
            } else {
                // Protocol 7 differs only in a request it may not send
                // (the release naming its acquire) and the one refusal
                // that request alone gets: its client is answered as ever.
                Ok(Welcome {
                    version,
                    epoch: config.epoch,
                    limits: config.limits(),
                })
            }
        }
        Some(Ok(ClientFrame::Request { .. })) => Err(Error::new(
            ErrorCode::Malformed,
            "the first frame must be Hello",
        )),
        Some(Err(e)) => Err(codec_error(e)),
        None => Err(Error::new(ErrorCode::Malformed, "closed before Hello")),
    }
}

/// Requests other than KeepAlives read from the connection while the
/// master's queue had no room for them, in the order they came, each with
/// what it costs against `CONNECTION_HELD_BYTES`: its frame, and its place
/// in the list. A decoded request takes several times its frame's bytes,
/// so counting frames alone let a connection of small requests hold ten
/// times the budget; and the list's memory goes back once it empties, not
/// kept by every connection that was ever behind.
#[derive(Default)]
struct Held {
    calls: std::collections::VecDeque<(Call, usize)>,
    bytes: usize,
}

/// What a held request costs beyond its frame.
const HELD_ENTRY: usize = std::mem::size_of::<(Call, usize)>();

impl Held {
    fn push(&mut self, call: Call, frame: usize) {
        let cost = frame + HELD_ENTRY;
        self.calls.push_back((call, cost));
        self.bytes += cost;
    }

    fn pop(&mut self) -> Option<Call> {
        let (call, cost) = self.calls.pop_front()?;
        self.bytes -= cost;
        if self.calls.is_empty() {
            self.calls = std::collections::VecDeque::new();
        }
        Some(call)
    }

    fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Hands what is held to the master, waiting for room: requests read
    /// before the connection ended are served as if it had not (unless
    /// the writer gave up on the peer, so nobody would hear the replies).
    async fn hand_over(self, master: &MasterHandle, replies: &mpsc::UnboundedSender<Reply>) {
        if replies.is_closed() {
            return;
        }
        for (call, _) in self.calls {
            master.send(call).await;
        }
    }
}

type Waiting = std::pin::Pin<Box<dyn std::future::Future<Output = Option<Room>> + Send>>;

/// Reads requests and hands each to the master with the way back to this
/// connection, holding in `held` those its queue has no room for yet;
/// returns the error to close with, if the connection ends because of
/// one.
async fn requests<S: AsyncRead>(
    reader: &mut Reader<S>,
    replies: &mpsc::UnboundedSender<Reply>,
    flow: &Arc<Flow>,
    master: &MasterHandle,
    config: &Config,
    caller: &Arc<Caller>,
    held: &mut Held,
) -> Option<Error> {
    // Checked once per interval: a frame still incomplete at two checks in
    // a row, with no frame read between them, took more than the frame
    // read timeout (`CONN-10`); a connection with nothing in flight and
    // silent for the idle timeout is closed (`CONN-11`).
    let interval = config.frame_read_timeout.min(config.idle_timeout);
    let mut next_check = tokio::time::Instant::now() + interval;
    let mut incomplete_at_last_check = false;
    let mut last_frame = tokio::time::Instant::now();
    // The wait for room in the master's queue for the oldest held request:
    // kept from one turn of the loop to the next, so that it keeps its
    // place in line while the connection reads on.
    let mut room: Option<Waiting> = None;
    // Whether a KeepAlive came on this connection yet (`KA-11`).
    let mut renewed = false;
    loop {
        // A peer that does not read its replies is not read either: they
        // cannot pile up, and it cannot block anyone else (`CONN-5`,
        // `CONN-9`).
        while flow.queued.load(Ordering::Acquire) >= CONNECTION_WRITE_QUEUE
            || flow.queued_bytes.load(Ordering::Acquire) >= config.reply_budget
            || (flow.queued_bytes.load(Ordering::Acquire) >= config.max_frame
                && flow.all_queued_bytes.load(Ordering::Acquire) >= config.all_reply_budget)
        {
            tokio::select! {
                () = flow.drained.notified() => {}
                () = replies.closed() => return None,
            }
        }
        if room.is_none() && !held.is_empty() {
            room = Some(Box::pin(master.room()));
        }
        // Requests held past their budget: the next frame waits in the
        // socket until the master takes the oldest of them.
        let reading = held.bytes < CONNECTION_HELD_BYTES;
        let frame = tokio::select! {
            room_made = async { room.as_mut().expect("checked").await }, if room.is_some() => {
                room = None;
                let call = held.pop().expect("a request is held");
                // A stopped master drops the call: its reply answers that
                // it is shutting down.
                if let Some(room) = room_made {
                    room.send(call);
                }
                continue;
            }
            frame = reader.next(), if reading => frame,
            // The writer gave up on the peer: stop serving it, so that no
            // more KeepAlives are answered (and leases extended) for nobody.
            () = replies.closed() => return None,
            () = tokio::time::sleep_until(next_check) => {
                let now = tokio::time::Instant::now();
                next_check = now + interval;
                // A frame left unread while requests are held is this
                // side's wait, not the peer's.
                let incomplete = reading && !reader.read_buffer().is_empty();
                if incomplete && incomplete_at_last_check {
                    return Some(Error::new(
                        ErrorCode::Malformed,
                        format!(
                            "a frame has been incomplete for more than {:?}",
                            config.frame_read_timeout
                        ),
                    ));
                }
                incomplete_at_last_check = incomplete;
                let idle = !incomplete
                    && flow.unanswered.load(Ordering::Acquire) == 0
                    && now.duration_since(last_frame) >= config.idle_timeout;
                if idle {
                    return Some(Error::new(
                        ErrorCode::LimitReached,
                        format!(
                            "idle for {:?} with no request in flight",
                            config.idle_timeout
                        ),
                    ));
                }
                continue;
            }
        };
        last_frame = tokio::time::Instant::now();
        incomplete_at_last_check = false;
        shrink_if_idle(reader.read_buffer_mut());
        let (id, request) = match frame? {
            Ok(ClientFrame::Request { id, body }) => (id, body),
            Ok(ClientFrame::Hello(_)) => {
                return Some(Error::new(ErrorCode::Malformed, "Hello sent twice"));
            }
            Err(CodecError::Io(_)) => return None,
            Err(e) => return Some(codec_error(e)),
        };
        let bytes = reader.decoder().last_frame_len();
        // KeepAlives are not counted against the in-flight limit: at most
        // one is held per session, so sessions bound them, and a
        // KeepAliveAll is answered at once (`CONN-3`).
        let keepalive = MasterHandle::is_keepalive(&request);
        let counted = !keepalive;
        let kind = request_name(&request);
        // A held KeepAlive waits for its lease, not for the master.
        let timed = !matches!(request, Request::KeepAlive(_));
        if counted && flow.limited.load(Ordering::Acquire) >= config.max_in_flight {
            config.metrics.refused_at("in_flight");
            let refusal = Err(Error::new(
                ErrorCode::LimitReached,
                format!(
                    "more than {} requests in flight on one connection",
                    config.max_in_flight
                ),
            ));
            flow.unanswered.fetch_add(1, Ordering::AcqRel);
            ReplyTx::new(replies.clone(), flow.clone(), id, false)
                .metered(kind, timed)
                .send(refusal)
                .ok()?;
            continue;
        }
        flow.unanswered.fetch_add(1, Ordering::AcqRel);
        if counted {
            flow.limited.fetch_add(1, Ordering::AcqRel);
        }
        let reply = ReplyTx::new(replies.clone(), flow.clone(), id, counted).metered(kind, timed);
        let call = Call::from(request, reply, caller, master.now());
        // A KeepAlive never waits behind this connection's other requests:
        // they keep their order among themselves, held here while the
        // master's queue is full (`CONN-13`).
        if keepalive {
            let first = !std::mem::replace(&mut renewed, true);
            master.send_keepalive(call, first).await;
        } else if !held.is_empty() {
            held.push(call, bytes);
        } else if let Some(call) = master.try_send(call) {
            held.push(call, bytes);
        }
    }
}

/// Writes replies as they come until the reader is `done`, then what is
/// already queued; gives the writer back, or `None` if the peer stopped
/// reading or the connection broke.
async fn write_replies<S: AsyncWrite>(
    mut writer: Writer<S>,
    mut queue: mpsc::UnboundedReceiver<Reply>,
    flow: Arc<Flow>,
    done: CancellationToken,
    config: Arc<Config>,
) -> Option<Writer<S>> {
    let taken = |reply: &Reply| {
        if reply.limited() {
            flow.limited.fetch_sub(1, Ordering::AcqRel);
        }
        flow.queued_bytes.fetch_sub(reply.bytes(), Ordering::AcqRel);
        flow.all_queued_bytes
            .fetch_sub(reply.bytes(), Ordering::AcqRel);
        flow.unanswered.fetch_sub(1, Ordering::AcqRel);
        flow.queued.fetch_sub(1, Ordering::AcqRel);
        flow.drained.notify_one();
    };
    let mut closing = false;
    loop {
        let reply = tokio::select! {
            biased;
            reply = queue.recv() => reply,
            () = done.cancelled(), if !closing => {
                // From now on a reply cannot be queued: the master sees the
                // connection closed, so it extends no lease for nobody
                // (`KA-4`) and undoes a grant nobody heard of (`LOCK-9`).
                // What is queued already is still written.
                queue.close();
                closing = true;
                continue;
            }
        };
        let Some(reply) = reply else {
            return Some(writer);
        };
        // Replies queued behind this one go out in the same write: under
        // load, one system call carries many of them.
        let mut next = Some(reply);
        let mut batch = 0;
        while let Some(reply) = next {
            taken(&reply);
            let frame = ServerFrame::Reply {
                id: reply.id(),
                body: reply.into_body(),
            };
            if !write_frame(&mut writer, frame, &config, Flushing::Later).await {
                return None;
            }
            batch += 1;
            next = if batch < CONNECTION_WRITE_BATCH {
                queue.try_recv().ok()
            } else {
                None
            };
        }
        if !flush(&mut writer, &config).await {
            return None;
        }
        shrink_if_idle(writer.write_buffer_mut());
    }
}

/// Gives back what an empty buffer grew to for a large frame. Its
/// capacity counts only what lies past the frames already taken out of
/// it: reclaiming (which never allocates) first shows the whole.
fn shrink_if_idle(buffer: &mut BytesMut) {
    if !buffer.is_empty() {
        return;
    }
    if buffer.try_reclaim(CONNECTION_BUFFER_KEPT + 1) {
        *buffer = BytesMut::with_capacity(CONNECTION_BUFFER);
    }
}

/// Whether a frame is flushed to the socket at once or left in the
/// writer's buffer for the next flush.
#[derive(Clone, Copy)]
enum Flushing {
    Now,
    Later,
}

/// Flushes what the writer has buffered, within the write timeout.
async fn flush<S: AsyncWrite>(writer: &mut Writer<S>, config: &Config) -> bool {
    match tokio::time::timeout(config.write_timeout, SinkExt::flush(writer)).await {
        Ok(Ok(())) => true,
        Ok(Err(_)) => false,
        Err(_) => {
            debug!("peer stopped reading; closing the connection");
            false
        }
    }
}

/// Writes one frame within the write timeout. A reply too large for a frame
/// is replaced by an error reply to the same request (`WIRE-5`).
async fn write_frame<S: AsyncWrite>(
    writer: &mut Writer<S>,
    frame: ServerFrame,
    config: &Config,
    flushing: Flushing,
) -> bool {
    let id = match &frame {
        ServerFrame::Reply { id, .. } => Some(*id),
        _ => None,
    };
    let frame = match (try_write(writer, frame, config, flushing).await, id) {
        (Written::Done, _) => return true,
        (Written::Failed, _) | (Written::TooLarge { .. }, None) => return false,
        (Written::TooLarge { len, max }, Some(id)) => ServerFrame::Reply {
            id,
            body: Err(Error::new(
                ErrorCode::LimitReached,
                format!("the reply of {len} bytes exceeds the maximum frame of {max} bytes"),
            )),
        },
    };
    // The replacement is tried once; if even it does not fit, give up.
    matches!(
        try_write(writer, frame, config, flushing).await,
        Written::Done
    )
}

enum Written {
    Done,
    TooLarge { len: usize, max: usize },
    Failed,
}

async fn try_write<S: AsyncWrite>(
    writer: &mut Writer<S>,
    frame: ServerFrame,
    config: &Config,
    flushing: Flushing,
) -> Written {
    let written = async {
        match flushing {
            Flushing::Now => writer.send(frame).await,
            Flushing::Later => writer.feed(frame).await,
        }
    };
    match tokio::time::timeout(config.write_timeout, written).await {
        Ok(Ok(())) => Written::Done,
        Ok(Err(CodecError::FrameTooLarge { len, max })) => Written::TooLarge { len, max },
        Ok(Err(_)) => Written::Failed,
        Err(_) => {
            debug!("peer stopped reading; closing the connection");
            Written::Failed
        }
    }
}

fn codec_error(e: CodecError) -> Error {
    let code = match e {
        CodecError::FrameTooLarge { .. } => ErrorCode::FrameTooLarge,
        _ => ErrorCode::Malformed,
    };
    Error::new(code, e.to_string())
}

/// Half-closes, then discards what the peer still sends for a short, bounded
/// while: closing a socket with unread input makes the kernel send a reset,
/// which can destroy the `Close` frame before the peer reads it, and which
/// a TLS client reads as a broken connection rather than an orderly end.
pub(crate) async fn linger<S: AsyncRead + AsyncWrite + Unpin>(stream: S, most: Duration) {
    drain(stream, most, LINGER_BYTES, 8192).await;
}

/// [`linger`], discarding at most `bytes` through a buffer of `buffer`
/// bytes.
async fn drain<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    most: Duration,
    bytes: usize,
    buffer: usize,
) {
    let _ = stream.shutdown().await;
    let drain = async {
        // On the heap: in place it would sit in every connection's task
        // for its whole life, though only a closing one uses it.
        let mut buf = vec![0u8; buffer];
        let mut total = 0;
        while total < bytes {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(most, drain).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_protocol::Response;

    async fn reply_through(max_frame: usize, reply: ServerFrame) -> (bool, Option<ServerFrame>) {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (_, write) = tokio::io::split(ours);
        let mut writer = FramedWrite::new(write, Codec::new(max_frame));
        let config = Config {
            max_frame,
            ..Config::default()
        };
        let written = write_frame(&mut writer, reply, &config, Flushing::Now).await;
        drop(writer);
        let mut peer =
            FramedRead::new(theirs, FrameCodec::<ServerFrame, ClientFrame>::new(1 << 16));
        (written, peer.next().await.and_then(Result::ok))
    }

    fn big_reply() -> ServerFrame {
        ServerFrame::Reply {
            id: 9,
            body: Err(Error::new(ErrorCode::Internal, "x".repeat(4096))),
        }
    }

    /// A connection served against queues the test reads in place of the
    /// master, each with room for `room` calls; gives the peer's framed
    /// side and the two queues' receiving ends.
    async fn served_against_queues(
        room: usize,
    ) -> (
        tokio_util::codec::Framed<tokio::io::DuplexStream, FrameCodec<ServerFrame, ClientFrame>>,
        mpsc::Receiver<Call>,
        mpsc::Receiver<Call>,
    ) {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (calls, calls_rx) = mpsc::channel(room);
        let (keepalives, keepalives_rx) = mpsc::channel(room);
        let master = MasterHandle::from_queues(calls, keepalives);
        let caller = Caller::new(std::net::Ipv4Addr::LOCALHOST.into(), None);
        tokio::spawn(serve(
            ours,
            master,
            Arc::new(Config::default()),
            Arc::default(),
            caller,
            CancellationToken::new(),
            tokio::time::Instant::now() + Duration::from_secs(5),
        ));
        let mut peer = tokio_util::codec::Framed::new(theirs, FrameCodec::new(1 << 20));
        peer.send(ClientFrame::Hello(Hello::current()))
            .await
            .unwrap();
        assert!(matches!(
            peer.next().await,
            Some(Ok(ServerFrame::Welcome(_)))
        ));
        (peer, calls_rx, keepalives_rx)
    }

    fn get(id: u64) -> ClientFrame {
        ClientFrame::Request {
            id,
            body: Request::Get {
                key: format!("k{id}"),
                stat_only: true,
            },
        }
    }

    fn keepalive_all(id: u64) -> ClientFrame {
        ClientFrame::Request {
            id,
            body: Request::KeepAliveAll(Vec::new()),
        }
    }

    // CONN-13
    #[tokio::test]
    async fn a_keepalive_reaches_the_master_while_the_connections_other_requests_wait_for_room() {
        let (mut peer, mut calls, mut keepalives) = served_against_queues(1).await;
        // The first fills the master's queue; the next two wait for room.
        for id in 1..=3 {
            peer.feed(get(id)).await.unwrap();
        }
        peer.send(keepalive_all(4)).await.unwrap();
        let keepalive = tokio::time::timeout(Duration::from_secs(10), keepalives.recv())
            .await
            .expect("the KeepAlive waited behind requests the master had no room for")
            .unwrap();
        assert!(matches!(keepalive.request, Request::KeepAliveAll(_)));
        // The others come in the order they were sent, as room is made.
        for id in 1..=3 {
            let call = calls.recv().await.unwrap();
            assert!(matches!(&call.request, Request::Get { key, .. } if *key == format!("k{id}")));
        }
    }

    // CONN-13
    #[tokio::test]
    async fn a_connection_holding_its_budget_of_requests_reads_no_further() {
        let (mut peer, mut calls, mut keepalives) = served_against_queues(1).await;
        let big = |id| ClientFrame::Request {
            id,
            body: Request::Get {
                key: "k".repeat(CONNECTION_HELD_BYTES),
                stat_only: true,
            },
        };
        // One fills the queue, one is held at the budget: the KeepAlive
        // after them stays in the socket.
        peer.feed(big(1)).await.unwrap();
        peer.feed(big(2)).await.unwrap();
        peer.send(keepalive_all(3)).await.unwrap();
        let early = tokio::time::timeout(Duration::from_millis(200), keepalives.recv()).await;
        assert!(early.is_err(), "read past the budget of held requests");
        // Room in the queue lets the held request go, and reading resumes.
        assert!(calls.recv().await.is_some());
        assert!(keepalives.recv().await.is_some());
    }

    // CONN-13: a small request's frame is a fraction of what holding it
    // takes; a budget of frames alone let one connection hold ten times
    // its bytes.
    #[tokio::test]
    async fn held_requests_count_the_memory_they_take_not_only_their_frames() {
        let (mut peer, mut calls, mut keepalives) = served_against_queues(1).await;
        let over = (CONNECTION_HELD_BYTES / HELD_ENTRY) as u64 + 2;
        for id in 1..=over {
            peer.feed(get(id)).await.unwrap();
        }
        peer.send(keepalive_all(over + 1)).await.unwrap();
        let early = tokio::time::timeout(Duration::from_millis(200), keepalives.recv()).await;
        assert!(early.is_err(), "read past the budget of held requests");
        for _ in 1..=over {
            assert!(calls.recv().await.is_some());
        }
        assert!(keepalives.recv().await.is_some());
    }

    // CONN-13
    #[test]
    fn the_held_list_gives_its_memory_back_once_it_empties() {
        let (replies, _queue) = mpsc::unbounded_channel();
        let caller = Arc::new(Caller::new(std::net::Ipv4Addr::LOCALHOST.into(), None));
        let mut held = Held::default();
        for id in 1..=100 {
            let reply = ReplyTx::new(replies.clone(), Arc::default(), id, true);
            let get = Request::Get {
                key: "k".into(),
                stat_only: true,
            };
            let call = Call::from(get, reply, &caller, crate::time::Millis::ZERO);
            held.push(call, 16);
        }
        assert_eq!(held.bytes, 100 * (16 + HELD_ENTRY));
        while held.pop().is_some() {}
        assert_eq!((held.bytes, held.calls.capacity()), (0, 0));
    }

    // CONN-13
    #[tokio::test]
    async fn requests_held_when_the_peer_closes_still_reach_the_master() {
        let (mut peer, mut calls, _keepalives) = served_against_queues(1).await;
        for id in 1..=3 {
            peer.feed(get(id)).await.unwrap();
        }
        peer.flush().await.unwrap();
        peer.get_mut().shutdown().await.unwrap();
        for id in 1..=3 {
            let call = calls.recv().await.unwrap();
            assert!(matches!(&call.request, Request::Get { key, .. } if *key == format!("k{id}")));
        }
    }

    // WIRE-5
    #[tokio::test]
    async fn a_buffer_grown_for_a_large_frame_is_given_back_once_it_is_taken() {
        let (mut ours, theirs) = tokio::io::duplex(1 << 20);
        let mut reader = FramedRead::with_capacity(
            theirs,
            FrameCodec::<ClientFrame, ServerFrame>::new(1 << 20),
            CONNECTION_BUFFER,
        );
        let big = ClientFrame::Request {
            id: 1,
            body: Request::Get {
                key: "k".repeat(64 << 10),
                stat_only: true,
            },
        };
        let mut writer = FramedWrite::new(
            &mut ours,
            FrameCodec::<ServerFrame, ClientFrame>::new(1 << 20),
        );
        writer.send(big).await.unwrap();
        assert!(reader.next().await.unwrap().is_ok());
        let buffer = reader.read_buffer_mut();
        shrink_if_idle(buffer);
        let kept = buffer.try_reclaim(CONNECTION_BUFFER_KEPT + 1);
        assert!(!kept, "the buffer still holds {} bytes", buffer.capacity());
    }

    #[tokio::test]
    async fn a_reply_too_large_for_a_frame_becomes_a_limit_reached_reply() {
        let (written, frame) = reply_through(1024, big_reply()).await;
        assert!(written);
        let Some(ServerFrame::Reply {
            id: 9,
            body: Err(e),
        }) = frame
        else {
            panic!("expected an error reply to request 9, got {frame:?}");
        };
        assert_eq!(e.code, ErrorCode::LimitReached);
        assert!(e.message.contains("exceeds"), "{}", e.message);
    }

    // WIRE-5
    #[tokio::test]
    async fn when_even_the_error_reply_does_not_fit_the_connection_gives_up() {
        let (written, frame) = reply_through(16, big_reply()).await;
        assert!(!written);
        assert_eq!(frame, None);
    }

    #[tokio::test]
    async fn a_reply_that_fits_is_written_as_it_is() {
        let reply = ServerFrame::Reply {
            id: 1,
            body: Ok(Response::Destroyed),
        };
        let (written, frame) = reply_through(1024, reply.clone()).await;
        assert!(written);
        assert_eq!(frame, Some(reply));
    }
}
