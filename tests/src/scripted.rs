//! A master whose every answer the test writes by hand: what the client
//! library does when a master is slow, answers out of order or changes its
//! epoch, which a real master cannot be made to do on cue.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use leasehold_protocol::{
    ClientFrame, Error, FrameCodec, LeaseGrant, Limits, Request, Response, ServerFrame, SessionId,
    Welcome, DEFAULT_MAX_FRAME, PROTOCOL_VERSION,
};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;

/// A listener on 127.0.0.1 that counts the connections made to it.
pub struct ScriptedMaster {
    pub addr: SocketAddr,
    listener: TcpListener,
    accepted: Arc<AtomicUsize>,
}

impl ScriptedMaster {
    pub async fn bind() -> ScriptedMaster {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        ScriptedMaster {
            addr: listener.local_addr().expect("local address"),
            listener,
            accepted: Arc::default(),
        }
    }

    /// Accepts one connection and completes its handshake, announcing
    /// `epoch`.
    pub async fn accept(&self, epoch: u64) -> ScriptedConnection {
        let (stream, _) = self.listener.accept().await.expect("accept");
        self.accepted.fetch_add(1, Ordering::SeqCst);
        let mut framed = Framed::new(stream, FrameCodec::new(DEFAULT_MAX_FRAME));
        match framed.next().await {
            Some(Ok(ClientFrame::Hello(_))) => {}
            other => panic!("expected Hello, got {other:?}"),
        }
        let welcome = Welcome {
            version: PROTOCOL_VERSION,
            epoch,
            limits: Limits {
                max_frame: DEFAULT_MAX_FRAME as u32,
                min_lease_ms: 100,
                max_lease_ms: 60_000,
                max_lock_delay_ms: 60_000,
                keepalive_margin_ms: 100,
                max_in_flight: 1_000,
            },
        };
        framed
            .send(ServerFrame::Welcome(welcome))
            .await
            .expect("send Welcome");
        ScriptedConnection { framed }
    }

    /// Counts, from now on, every connection made to this master without
    /// answering any of them.
    pub fn count_the_rest(self) -> Arc<AtomicUsize> {
        let accepted = self.accepted.clone();
        tokio::spawn(async move {
            let mut silent = Vec::new();
            while let Ok((stream, _)) = self.listener.accept().await {
                self.accepted.fetch_add(1, Ordering::SeqCst);
                silent.push(stream);
            }
        });
        accepted
    }
}

/// One accepted connection, past its handshake.
pub struct ScriptedConnection {
    framed: Framed<TcpStream, FrameCodec<ClientFrame, ServerFrame>>,
}

impl ScriptedConnection {
    /// The next request, or `None` if the client closed the connection or
    /// sent nothing within `patience`.
    pub async fn request(&mut self, patience: Duration) -> Option<(u64, Request)> {
        match tokio::time::timeout(patience, self.framed.next()).await {
            Ok(Some(Ok(ClientFrame::Request { id, body }))) => Some((id, body)),
            Ok(Some(Ok(other))) => panic!("expected a request, got {other:?}"),
            Ok(Some(Err(e))) => panic!("bad frame from the client: {e}"),
            Ok(None) | Err(_) => None,
        }
    }

    pub async fn reply(&mut self, id: u64, body: Result<Response, Error>) {
        self.framed
            .send(ServerFrame::Reply { id, body })
            .await
            .expect("send reply");
    }

    /// Answers a `CreateSession` with session `id` and a lease of `lease`.
    pub async fn create_session(&mut self, epoch: u64, session: SessionId, lease: Duration) {
        match self.request(Duration::from_secs(10)).await {
            Some((id, Request::CreateSession(_))) => {
                let created = Response::SessionCreated {
                    session,
                    secret: leasehold_protocol::SessionSecret::from_bytes([1; 16]),
                    epoch,
                    lease: grant(lease),
                };
                self.reply(id, Ok(created)).await;
            }
            other => panic!("expected CreateSession, got {other:?}"),
        }
    }
}

/// A grant of `lease`, answered at once.
pub fn grant(lease: Duration) -> LeaseGrant {
    LeaseGrant {
        remaining_ms: lease.as_millis() as u64,
        held_ms: 0,
    }
}
