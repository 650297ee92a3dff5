//! A connection that sends and reads frames as they are on the wire.

use std::net::SocketAddr;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use leasehold_protocol::{Behavior, Error, Welcome};
use leasehold_protocol::{
    ClientFrame, CodecError, CreateSession, FrameCodec, Hello, KeepAlive, Request, Response,
    ServerFrame, SessionToken, DEFAULT_MAX_FRAME,
};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

/// A byte stream to a server: TCP, or TLS over TCP.
pub trait LinkStream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> LinkStream for T {}

/// A boxed [`LinkStream`].
pub type Link = Box<dyn LinkStream>;

/// How a raw connection speaks TLS: the connector and the name the
/// server's certificate must carry.
#[derive(Clone)]
pub struct RawTls {
    pub connector: tokio_rustls::TlsConnector,
    pub name: rustls::pki_types::ServerName<'static>,
}

impl RawTls {
    /// TLS to a server whose certificate `ca` (PEM) signed and names
    /// `name`, presenting `client` (certificate and key, PEM) if given.
    pub fn load(
        ca: &std::path::Path,
        client: Option<(&std::path::Path, &std::path::Path)>,
        name: &str,
    ) -> Result<RawTls, String> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
        let certs = |path: &std::path::Path| {
            CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("{}: {e}", path.display()))
        };
        let mut roots = rustls::RootCertStore::empty();
        for cert in certs(ca)? {
            roots.add(cert).map_err(|e| e.to_string())?;
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        let config = match client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| format!("{}: {e}", key.display()))?;
                builder
                    .with_client_auth_cert(certs(cert)?, key)
                    .map_err(|e| e.to_string())?
            }
        };
        Ok(RawTls {
            connector: tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)),
            name: ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?,
        })
    }
}

/// A raw protocol connection, over TCP (or TLS over TCP) unless made
/// [`RawConnection::over`] another stream (turmoil's, for tests in virtual
/// time).
pub struct RawConnection<S = Link> {
    framed: Framed<S, FrameCodec<ServerFrame, ClientFrame>>,
    /// The server's address, when connected over TCP.
    peer: Option<SocketAddr>,
    next_id: u64,
    /// How long [`RawConnection::recv`] waits for a frame before failing.
    patience: Duration,
}

impl RawConnection {
    /// The address this connection reaches.
    pub fn peer(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// Connects without a handshake.
    pub async fn connect(addr: SocketAddr) -> RawConnection {
        RawConnection::connect_over(addr, None).await
    }

    /// Connects, speaking TLS when `tls` is given, without a handshake.
    pub async fn connect_over(addr: SocketAddr, tls: Option<&RawTls>) -> RawConnection {
        let stream = TcpStream::connect(addr).await.expect("connect");
        let link: Link = match tls {
            None => Box::new(stream),
            Some(tls) => Box::new(
                tls.connector
                    .connect(tls.name.clone(), stream)
                    .await
                    .expect("a TLS handshake"),
            ),
        };
        RawConnection {
            framed: Framed::new(link, FrameCodec::new(DEFAULT_MAX_FRAME)),
            peer: Some(addr),
            next_id: 1,
            patience: Duration::from_secs(10),
        }
    }

    /// Connects, speaking TLS when `tls` is given, and completes the
    /// handshake.
    pub async fn open_over(addr: SocketAddr, tls: Option<&RawTls>) -> (RawConnection, Welcome) {
        let mut conn = RawConnection::connect_over(addr, tls).await;
        conn.send(ClientFrame::Hello(Hello::current())).await;
        match conn.recv().await {
            Some(ServerFrame::Welcome(w)) => (conn, w),
            other => panic!("expected Welcome, got {other:?}"),
        }
    }

    /// Connects from local address `from` (another loopback address, as
    /// another host would) and completes the handshake.
    pub async fn open_from(addr: SocketAddr, from: std::net::IpAddr) -> (RawConnection, Welcome) {
        let socket = match from {
            std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        }
        .expect("a socket");
        socket
            .bind((from, 0).into())
            .expect("bind the local address");
        let stream = socket.connect(addr).await.expect("connect");
        let (mut conn, welcome) = RawConnection::over(Box::new(stream) as Link).await;
        conn.peer = Some(addr);
        (conn, welcome)
    }

    /// Connects and completes the handshake.
    pub async fn open(addr: SocketAddr) -> (RawConnection, Welcome) {
        RawConnection::open_over(addr, None).await
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> RawConnection<S> {
    /// Completes the handshake over `stream`, already connected.
    pub async fn over(stream: S) -> (RawConnection<S>, Welcome) {
        let mut conn = RawConnection {
            framed: Framed::new(stream, FrameCodec::new(DEFAULT_MAX_FRAME)),
            peer: None,
            next_id: 1,
            patience: Duration::from_secs(10),
        };
        conn.send(ClientFrame::Hello(Hello::current())).await;
        match conn.recv().await {
            Some(ServerFrame::Welcome(w)) => (conn, w),
            other => panic!("expected Welcome, got {other:?}"),
        }
    }

    /// Waits up to `patience` for each frame (10 s unless set).
    pub fn with_patience(mut self, patience: Duration) -> Self {
        self.patience = patience;
        self
    }

    /// Sends one frame.
    pub async fn send(&mut self, frame: ClientFrame) {
        self.framed.send(frame).await.expect("send frame");
    }

    /// Sends bytes as they are, bypassing the codec.
    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        self.framed
            .get_mut()
            .write_all(bytes)
            .await
            .expect("send bytes");
    }

    /// Half-closes: the server reads end of stream after what was sent.
    pub async fn finish_writing(&mut self) {
        let _ = self.framed.get_mut().shutdown().await;
    }

    /// Sends `body` as a request and returns its id.
    pub async fn request(&mut self, body: Request) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(ClientFrame::Request { id, body }).await;
        id
    }

    /// The next frame, or `None` once the server has closed the connection.
    pub async fn recv(&mut self) -> Option<ServerFrame> {
        match tokio::time::timeout(self.patience, self.framed.next()).await {
            Err(_) => panic!("no frame from the server within {:?}", self.patience),
            Ok(None) => None,
            Ok(Some(Ok(frame))) => Some(frame),
            Ok(Some(Err(CodecError::Io(_)))) => None,
            Ok(Some(Err(e))) => panic!("server sent an unreadable frame: {e}"),
        }
    }

    /// The next reply, as (request id, body).
    pub async fn reply(&mut self) -> (u64, Result<Response, Error>) {
        match self.recv().await {
            Some(ServerFrame::Reply { id, body }) => (id, body),
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    /// Sends `body` and waits for its reply, which must be the next frame.
    pub async fn call(&mut self, body: Request) -> Result<Response, Error> {
        let id = self.request(body).await;
        let (reply_id, reply) = self.reply().await;
        assert_eq!(reply_id, id, "reply to another request");
        reply
    }

    /// Creates a session with `lease` and returns its token.
    pub async fn create_session(&mut self, lease: Duration) -> SessionToken {
        match self
            .call(Request::CreateSession(CreateSession {
                name: "raw".into(),
                lease_ms: Some(lease.as_millis() as u64),
                lock_delay_ms: None,
                behavior: Behavior::Release,
                checks: Vec::new(),
            }))
            .await
        {
            Ok(Response::SessionCreated {
                session, secret, ..
            }) => SessionToken {
                id: session,
                secret,
            },
            other => panic!("expected a created session, got {other:?}"),
        }
    }

    /// Sends a KeepAlive for `session` in epoch 1 and returns its request id.
    pub async fn keepalive(&mut self, session: SessionToken, hold: bool) -> u64 {
        self.request(Request::KeepAlive(KeepAlive {
            session,
            epoch: 1,
            acked_seq: 0,
            hold,
        }))
        .await
    }

    /// Sends a KeepAlive that acknowledges events up to `acked`.
    pub async fn keepalive_acking(&mut self, session: SessionToken, hold: bool, acked: u64) -> u64 {
        self.request(Request::KeepAlive(KeepAlive {
            session,
            epoch: 1,
            acked_seq: acked,
            hold,
        }))
        .await
    }

    /// Subscribes `session` and returns the subscription id.
    pub async fn subscribe(
        &mut self,
        session: SessionToken,
        key: &str,
        prefix: bool,
        mask: u32,
    ) -> u64 {
        match self
            .call(Request::Subscribe {
                session,
                key: key.into(),
                prefix,
                mask,
            })
            .await
        {
            Ok(Response::Subscribed { subscription }) => subscription,
            other => panic!("expected a subscription, got {other:?}"),
        }
    }

    /// Writes `key` and returns its modify index.
    pub async fn put(&mut self, key: &str, contents: &str) -> u64 {
        match self
            .call(Request::Put(leasehold_protocol::Put {
                key: key.into(),
                contents: contents.as_bytes().to_vec(),
                flags: 0,
                cas: None,
                ephemeral: None,
            }))
            .await
        {
            Ok(Response::Written { index }) => index,
            other => panic!("expected a write, got {other:?}"),
        }
    }

    /// Reads until the server closes: returns the `Close` frame it sent
    /// first, if any. Anything else before the close is a failure.
    pub async fn closed_with(mut self) -> Option<Error> {
        let mut close = None;
        loop {
            match self.recv().await {
                None => return close,
                Some(ServerFrame::Close(e)) if close.is_none() => close = Some(e),
                Some(other) => panic!("expected Close then end of stream, got {other:?}"),
            }
        }
    }
}
