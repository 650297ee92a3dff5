//! A connection as it arrives, made ready for frames: plaintext, or TLS
//! once its handshake is done (`TLS-1`, `TLS-3`). The first byte tells
//! the two apart: a TLS ClientHello starts with a handshake record (22),
//! a Hello frame with its length's high byte (0).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use leasehold_protocol::{Error, ErrorCode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::cert_name;
use crate::config::{Config, LINGER};
use crate::connection;
use crate::prefixed::Prefixed;

/// The first byte of a TLS record that carries a handshake message.
const TLS_HANDSHAKE_RECORD: u8 = 22;

/// A connection just accepted, and the TLS it must speak, if any.
pub(crate) struct Incoming<S> {
    pub(crate) stream: S,
    pub(crate) tls: Option<TlsAcceptor>,
}

/// A connection ready for frames.
pub(crate) enum Stream<S> {
    Plain(Prefixed<S>),
    Tls(Box<TlsStream<Prefixed<S>>>),
}

impl<S> Stream<S> {
    /// The principal the client certificate names, if TLS verified one
    /// (`ID-1`).
    pub(crate) fn certified(&self) -> Option<String> {
        match self {
            Stream::Plain(_) => None,
            Stream::Tls(tls) => tls
                .get_ref()
                .1
                .peer_certificates()?
                .first()
                .and_then(|cert| cert_name::common_name(cert.as_ref())),
        }
    }
}

impl<S> Incoming<S>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    /// The connection ready for frames, and by when its Hello must have
    /// come: the handshake timeout counts from its arrival, TLS included
    /// (`HS-4`). `None` once it has been dealt with. A plaintext client on a TLS
    /// port is told so in a `Close`; a TLS client on a plaintext port is
    /// closed at once, which its TLS library reports as a server that
    /// does not speak TLS; a failed TLS handshake is closed.
    pub(crate) async fn establish(
        self,
        config: &Config,
        stop: &CancellationToken,
    ) -> Option<(Stream<S>, tokio::time::Instant)> {
        // A server that stops closes a connection still in its handshake
        // at once (`CONN-6`).
        tokio::select! {
            ready = self.establish_unstopped(config) => ready,
            () = stop.cancelled() => None,
        }
    }

    async fn establish_unstopped(
        self,
        config: &Config,
    ) -> Option<(Stream<S>, tokio::time::Instant)> {
        let Incoming { mut stream, tls } = self;
        let deadline = tokio::time::Instant::now() + config.handshake_timeout;
        let mut first = [0u8; 1];
        match tokio::time::timeout_at(deadline, stream.read(&mut first)).await {
            Ok(Ok(1..)) => {}
            Ok(_) => return None,
            // Silent past the handshake timeout: a plaintext peer is told,
            // as it would be without TLS (`HS-4`).
            Err(_) => {
                if tls.is_none() {
                    let error = Error::new(ErrorCode::Malformed, "no Hello in time");
                    connection::refuse_with(stream, error, config.clone()).await;
                }
                return None;
            }
        }
        let prefixed = Prefixed::new(Bytes::copy_from_slice(&first), stream);
        let speaks_tls = first[0] == TLS_HANDSHAKE_RECORD;
        match tls {
            // Closed in order, not reset: its TLS library then reports the
            // end of the handshake, which the client library explains.
            None if speaks_tls => {
                debug!("a TLS client on a plaintext port: closed");
                connection::linger(prefixed, LINGER).await;
                None
            }
            None => Some((Stream::Plain(prefixed), deadline)),
            Some(_) if !speaks_tls => {
                let error = Error::new(
                    ErrorCode::Malformed,
                    "this port speaks TLS: connect with TLS (--tls-ca, or TlsOptions in the library)",
                );
                connection::refuse_with(prefixed, error, config.clone()).await;
                None
            }
            Some(acceptor) => {
                match tokio::time::timeout_at(deadline, acceptor.accept(prefixed)).await {
                    Ok(Ok(tls)) => Some((Stream::Tls(Box::new(tls)), deadline)),
                    Ok(Err(error)) => {
                        debug!(%error, "TLS handshake failed");
                        None
                    }
                    Err(_) => {
                        debug!("no TLS handshake in time: closed");
                        None
                    }
                }
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
