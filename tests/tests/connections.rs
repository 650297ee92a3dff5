//! Connection-level behaviour: large traffic both ways, oversized replies,
//! paging, and shutdown.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use leasehold::{Client, ErrorCode, SessionOptions};
use leasehold_protocol::{
    ClientFrame, FrameCodec, Request, Response, ServerFrame, Welcome, MAX_FRAME_CAP,
    PROTOCOL_VERSION,
};
use leasehold_server::Config;
use leasehold_tests::raw::RawConnection;
use leasehold_tests::server::{short_lease_config, start};
use tokio::net::TcpListener;
use tokio_util::codec::Framed;

// CONN-3
#[tokio::test]
async fn requests_beyond_the_servers_in_flight_limit_wait_instead_of_being_refused() {
    let server = start(Config {
        max_in_flight: 1,
        ..Config::default()
    })
    .await;
    let client = server.client().await;
    let session = client
        .create_session(SessionOptions::new("busy"))
        .await
        .unwrap();
    let calls: Vec<_> = (0..200)
        .map(|_| {
            let client = client.clone();
            let id = session.id();
            tokio::spawn(async move { client.session_info(id).await })
        })
        .collect();
    for call in calls {
        call.await.unwrap().expect("queued, not refused");
    }
}

// CONN-2
#[tokio::test]
async fn the_client_reads_replies_while_its_own_writes_are_blocked() {
    // A server that writes megabytes of replies before it reads anything:
    // a client that stopped reading while its writes are blocked would
    // deadlock with it.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut framed = Framed::new(
            stream,
            FrameCodec::<ClientFrame, ServerFrame>::new(MAX_FRAME_CAP),
        );
        let Some(Ok(ClientFrame::Hello(_))) = framed.next().await else {
            panic!("expected Hello");
        };
        let mut limits = Config::default().limits();
        limits.max_in_flight = u32::MAX;
        let welcome = Welcome {
            version: PROTOCOL_VERSION,
            epoch: 1,
            limits,
        };
        framed.send(ServerFrame::Welcome(welcome)).await.unwrap();
        let filler = ServerFrame::Reply {
            id: u64::MAX,
            body: Err(leasehold_protocol::Error::new(
                ErrorCode::Internal,
                "x".repeat(1 << 20),
            )),
        };
        for _ in 0..32 {
            framed.send(filler.clone()).await.unwrap();
        }
        while let Some(Ok(ClientFrame::Request { id, .. })) = framed.next().await {
            framed
                .send(ServerFrame::Reply {
                    id,
                    body: Ok(Response::Destroyed),
                })
                .await
                .unwrap();
        }
    });
    let config = leasehold::ClientConfig {
        max_frame: MAX_FRAME_CAP,
        ..Default::default()
    };
    let client = Client::with_connector(leasehold::TcpConnector::new(addr.to_string()), config)
        .await
        .unwrap();
    let big_name = "n".repeat(1 << 20);
    let calls: Vec<_> = (0..32)
        .map(|_| {
            let client = client.clone();
            let options = SessionOptions::new(big_name.clone());
            tokio::spawn(async move { client.create_session(options).await })
        })
        .collect();
    let all = async {
        for call in calls {
            // The fake answers every request with `Destroyed`.
            let error = call.await.unwrap().unwrap_err();
            assert!(
                matches!(error, leasehold::ClientError::Protocol(_)),
                "{error}"
            );
        }
    };
    tokio::time::timeout(Duration::from_secs(20), all)
        .await
        .expect("no deadlock");
}

// SES-10
#[tokio::test]
async fn listing_pages_through_every_session_in_id_order() {
    let server = start(Config::default()).await;
    let client = server.client().await;
    let mut ids = Vec::new();
    for _ in 0..2_500 {
        let session = client
            .create_session(SessionOptions::new("paged"))
            .await
            .unwrap();
        ids.push(session.detach().await.id);
    }
    ids.sort();
    let listed: Vec<_> = client
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.session)
        .collect();
    assert_eq!(listed, ids);
}

// SES-10
#[tokio::test]
async fn with_a_small_frame_listing_pages_by_size_and_still_returns_everything() {
    let server = start(Config {
        max_frame: 4096,
        ..short_lease_config()
    })
    .await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    for _ in 0..200 {
        conn.create_session(Duration::from_secs(30)).await;
    }
    let first_page = Request::ListSessions {
        after: None,
        limit: 0,
    };
    let Ok(Response::Sessions { sessions, more }) = conn.call(first_page).await else {
        panic!("expected a page");
    };
    assert!(more && sessions.len() < 200, "{} sessions", sessions.len());
    let client = server.client().await;
    assert_eq!(client.list_sessions().await.unwrap().len(), 200);
}

/// Accepts one connection, answers its Hello with `welcome_and`, then reads
/// until the client closes; reports the end of stream on `closed`.
async fn fake_server(
    after_welcome: Option<ServerFrame>,
) -> (std::net::SocketAddr, tokio::sync::oneshot::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (closed, on_close) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut framed = Framed::new(stream, FrameCodec::<ClientFrame, ServerFrame>::new(1 << 20));
        let Some(Ok(ClientFrame::Hello(_))) = framed.next().await else {
            panic!("expected Hello");
        };
        let welcome = ServerFrame::Welcome(Welcome {
            version: PROTOCOL_VERSION,
            epoch: 1,
            limits: Config::default().limits(),
        });
        // Both frames in one write, as one segment on the wire.
        framed.feed(welcome).await.unwrap();
        if let Some(frame) = after_welcome {
            framed.feed(frame).await.unwrap();
        }
        framed.flush().await.unwrap();
        while let Some(Ok(_)) = framed.next().await {}
        let _ = closed.send(());
    });
    (addr, on_close)
}

// CONN-7
#[tokio::test]
async fn dropping_a_client_closes_its_connection() {
    let (addr, closed) = fake_server(None).await;
    let client = Client::connect(addr.to_string()).await.unwrap();
    drop(client);
    tokio::time::timeout(Duration::from_secs(5), closed)
        .await
        .expect("the server sees the connection end")
        .unwrap();
}

// HS-3
#[tokio::test]
async fn a_frame_arriving_with_the_welcome_is_read_at_once() {
    let close = ServerFrame::Close(leasehold_protocol::Error::new(
        ErrorCode::Internal,
        "going away",
    ));
    let (addr, _closed) = fake_server(Some(close)).await;
    let client = Client::connect(addr.to_string()).await.unwrap();
    let started = tokio::time::Instant::now();
    let error = client.list_sessions().await.unwrap_err();
    assert!(
        matches!(
            error,
            leasehold::ClientError::Interrupted(_) | leasehold::ClientError::Disconnected
        ),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "not left waiting"
    );
}

// CONN-6
#[tokio::test]
async fn stopping_the_server_closes_a_connection_still_in_its_handshake() {
    let server = start(short_lease_config()).await;
    let mut conn = RawConnection::connect(server.addr).await;
    drop(server);
    let started = tokio::time::Instant::now();
    assert_eq!(conn.recv().await, None);
    assert!(started.elapsed() < Duration::from_secs(5));
}

// CONN-6
#[tokio::test]
async fn stopping_the_server_closes_its_connections() {
    let server = start(short_lease_config()).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let session = conn.create_session(Duration::from_secs(10)).await;
    conn.keepalive(session, true).await;
    drop(server);
    let mut frames = Vec::new();
    while let Some(frame) = conn.recv().await {
        frames.push(frame);
    }
    assert!(frames.len() <= 1, "at most the held reply: {frames:?}");
}

// CONN-6: a peer that never closes its side does not hold a stopping
// server: its connection lingers 100 ms after the Close, not the second a
// connection closed for a fault of its own does.
#[tokio::test]
async fn a_stopping_server_does_not_wait_for_a_peer_that_never_closes() {
    let server = start(short_lease_config()).await;
    let (conn, _) = RawConnection::open(server.addr).await;
    let started = tokio::time::Instant::now();
    server.shutdown().await.unwrap();
    let took = started.elapsed();
    // Well inside the second the connection would have lingered.
    assert!(took < Duration::from_millis(800), "{took:?}");
    drop(conn);
}

/// A cell whose members all refuse connections, noting when each connect
/// was made.
struct RefusingCell {
    members: usize,
    attempts: std::sync::Arc<std::sync::Mutex<Vec<tokio::time::Instant>>>,
}

impl leasehold::Connector for RefusingCell {
    fn connect(&self) -> leasehold::ConnectFuture {
        self.attempts
            .lock()
            .unwrap()
            .push(tokio::time::Instant::now());
        Box::pin(async { Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)) })
    }

    fn addr(&self) -> String {
        "a,b,c".into()
    }

    fn members(&self) -> usize {
        self.members
    }
}

// CELL-7: a member that is down refuses at once; the client tries the next
// without a pause, and pauses only after a whole round refused.
#[tokio::test(start_paused = true)]
async fn a_refused_member_is_followed_at_once_and_a_refused_round_by_a_pause() {
    let attempts = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let cell = RefusingCell {
        members: 3,
        attempts: attempts.clone(),
    };
    let config = leasehold::ClientConfig {
        connect_timeout: Duration::from_millis(90),
        ..Default::default()
    };
    let err = Client::with_connector(cell, config).await.err().unwrap();
    assert!(
        format!("{err:?}").contains("timed out finding the cell's master"),
        "{err:?}"
    );
    let attempts = attempts.lock().unwrap().clone();
    let start = attempts[0];
    let offsets: Vec<u128> = attempts
        .iter()
        .map(|at| (*at - start).as_millis())
        .collect();
    // Rounds of three at 0, 20, 40, 60 and 80 ms: every member tried five
    // times in the time one pause per refusal allowed five attempts.
    assert_eq!(
        offsets,
        [0, 0, 0, 20, 20, 20, 40, 40, 40, 60, 60, 60, 80, 80, 80],
        "connect attempts (ms after the first)"
    );
}
