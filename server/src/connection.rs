//! One client connection: the handshake, then requests in and replies out.
//!
//! Replies are written in the order they complete, not the order requests
//! arrived, so a held KeepAlive never delays another request (`CONN-2`). A
//! frame that cannot be read closes this connection, with a `Close` frame that
//! says why, and touches nothing else (`WIRE-4`).

use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{SinkExt, StreamExt};
use leasehold_protocol::{
    ClientFrame, CodecError, Error, ErrorCode, FrameCodec, Hello, ServerFrame, Welcome, MAGIC,
    PROTOCOL_VERSION,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::Framed;
use tracing::debug;

use crate::config::Config;
use crate::master::MasterHandle;

/// How long a closing connection keeps reading (and discarding) what the
/// peer still sends, so the peer reads our `Close` frame instead of a reset.
const LINGER: Duration = Duration::from_secs(1);
/// At most this much is discarded while lingering.
const LINGER_BYTES: usize = 64 << 20;

type ServerFramed<S> = Framed<S, FrameCodec<ClientFrame, ServerFrame>>;

/// Serves one connection until the peer closes it or breaks the protocol.
pub(crate) async fn serve<S>(stream: S, master: MasterHandle, config: Config)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let mut framed = Framed::new(stream, FrameCodec::new(config.max_frame));
    let outcome = match tokio::time::timeout(config.handshake_timeout, framed.next()).await {
        Err(_) => Err(Error::new(ErrorCode::Malformed, "no Hello in time")),
        Ok(frame) => handshake(frame, &config),
    };
    let closing = match outcome {
        Ok(welcome) => match framed.send(ServerFrame::Welcome(welcome)).await {
            Ok(()) => requests(&mut framed, &master, &config).await,
            Err(_) => None,
        },
        Err(error) => Some(error),
    };
    if let Some(error) = closing {
        debug!(%error, "closing connection");
        if framed.send(ServerFrame::Close(error)).await.is_ok() {
            linger(framed.into_inner()).await;
        }
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
            } else if version != PROTOCOL_VERSION {
                Err(Error::new(
                    ErrorCode::VersionMismatch {
                        supported: PROTOCOL_VERSION,
                    },
                    format!("protocol version {version} is not supported; this server speaks {PROTOCOL_VERSION}"),
                ))
            } else {
                Ok(Welcome {
                    version: PROTOCOL_VERSION,
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

/// Reads requests and writes replies; returns the error to close with, if
/// the connection ends because of one.
async fn requests<S>(
    framed: &mut ServerFramed<S>,
    master: &MasterHandle,
    config: &Config,
) -> Option<Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut pending = FuturesUnordered::new();
    loop {
        tokio::select! {
            frame = framed.next() => {
                let (id, request) = match frame? {
                    Ok(ClientFrame::Request { id, body }) => (id, body),
                    Ok(ClientFrame::Hello(_)) => {
                        return Some(Error::new(ErrorCode::Malformed, "Hello sent twice"));
                    }
                    Err(CodecError::Io(_)) => return None,
                    Err(e) => return Some(codec_error(e)),
                };
                if pending.len() >= config.max_in_flight {
                    let refusal = Err(Error::new(
                        ErrorCode::LimitReached,
                        format!("more than {} requests in flight on one connection", config.max_in_flight),
                    ));
                    if framed.send(ServerFrame::Reply { id, body: refusal }).await.is_err() {
                        return None;
                    }
                    continue;
                }
                let reply = master.call(request).await;
                pending.push(async move { (id, reply.await) });
            }
            Some((id, reply)) = pending.next(), if !pending.is_empty() => {
                let body = reply.unwrap_or_else(|_| {
                    Err(Error::new(ErrorCode::Internal, "the master is shutting down"))
                });
                if framed.send(ServerFrame::Reply { id, body }).await.is_err() {
                    return None;
                }
            }
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
/// which can destroy the `Close` frame before the peer reads it.
async fn linger<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) {
    let _ = stream.shutdown().await;
    let drain = async {
        let mut buf = [0u8; 8192];
        let mut total = 0;
        while total < LINGER_BYTES {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}
