//! Bad input closes one connection with a reason and touches nothing else.

use std::time::Duration;

use leasehold_protocol::{ClientFrame, ErrorCode, Hello, Request, Response};
use leasehold_tests::raw::RawConnection;
use leasehold_tests::server::{short_lease_config, start};

/// A session on its own connection, with a KeepAlive held for it.
async fn bystander(
    addr: std::net::SocketAddr,
) -> (RawConnection, leasehold_protocol::SessionToken, u64) {
    let (mut conn, _) = RawConnection::open(addr).await;
    let session = conn.create_session(Duration::from_millis(1_000)).await;
    let held = conn.keepalive(session, true).await;
    (conn, session, held)
}

/// The bystander's held KeepAlive is answered normally and its session lives.
async fn assert_unaffected(
    mut conn: RawConnection,
    session: leasehold_protocol::SessionToken,
    held: u64,
) {
    let (id, reply) = conn.reply().await;
    assert_eq!(id, held);
    assert!(matches!(reply, Ok(Response::KeepAlive { .. })), "{reply:?}");
    let info = conn
        .call(Request::SessionInfo {
            session: session.id,
        })
        .await;
    assert!(matches!(info, Ok(Response::SessionInfo(_))), "{info:?}");
}

// WIRE-3, WIRE-4
#[tokio::test]
async fn a_garbage_body_closes_that_connection_with_malformed() {
    let server = start(short_lease_config()).await;
    let (other, session, held) = bystander(server.addr).await;
    let (mut bad, _) = RawConnection::open(server.addr).await;
    bad.send_bytes(&[0, 0, 0, 3, 0xde, 0xad, 0xbf]).await;
    let close = bad.closed_with().await.expect("a Close frame");
    assert_eq!(close.code, ErrorCode::Malformed);
    assert_unaffected(other, session, held).await;
}

// WIRE-2, WIRE-4
#[tokio::test]
async fn an_oversized_frame_closes_that_connection_with_frame_too_large() {
    let server = start(short_lease_config()).await;
    let (other, session, held) = bystander(server.addr).await;
    let (mut bad, _) = RawConnection::open(server.addr).await;
    let len = 2u32 << 20;
    let mut frame = len.to_be_bytes().to_vec();
    frame.resize(4 + len as usize, 7);
    bad.send_bytes(&frame).await;
    let close = bad.closed_with().await.expect("a Close frame");
    assert_eq!(close.code, ErrorCode::FrameTooLarge);
    assert!(close.message.contains("exceeds"), "{}", close.message);
    assert_unaffected(other, session, held).await;
}

// WIRE-3
#[tokio::test]
async fn a_length_claiming_more_than_the_body_holds_is_malformed() {
    let server = start(short_lease_config()).await;
    let (mut bad, _) = RawConnection::open(server.addr).await;
    // A Request frame whose session-name length claims 2^40 bytes.
    let mut body = vec![1u8, 1, 0, 253];
    body.extend_from_slice(&(1u64 << 40).to_be_bytes());
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    bad.send_bytes(&frame).await;
    assert_eq!(
        bad.closed_with().await.expect("a Close frame").code,
        ErrorCode::Malformed
    );
}

// HS-2
#[tokio::test]
async fn a_hello_with_another_version_is_refused_with_the_supported_one() {
    let server = start(short_lease_config()).await;
    let mut conn = RawConnection::connect(server.addr).await;
    conn.send(ClientFrame::Hello(Hello {
        version: 99,
        ..Hello::current()
    }))
    .await;
    assert_eq!(
        conn.closed_with().await.expect("a Close frame").code,
        ErrorCode::VersionMismatch {
            supported: leasehold_protocol::PROTOCOL_VERSION
        }
    );
}

// HS-1
#[tokio::test]
async fn a_request_before_hello_is_refused() {
    let server = start(short_lease_config()).await;
    let mut conn = RawConnection::connect(server.addr).await;
    conn.request(Request::ListSessions {
        after: None,
        limit: 0,
    })
    .await;
    assert_eq!(
        conn.closed_with().await.expect("a Close frame").code,
        ErrorCode::Malformed
    );
}

// HS-1
#[tokio::test]
async fn a_hello_with_a_bad_magic_is_refused() {
    let server = start(short_lease_config()).await;
    let mut conn = RawConnection::connect(server.addr).await;
    conn.send(ClientFrame::Hello(Hello {
        magic: *b"NOTMAGIC",
        ..Hello::current()
    }))
    .await;
    assert_eq!(
        conn.closed_with().await.expect("a Close frame").code,
        ErrorCode::Malformed
    );
}

// HS-3
#[tokio::test]
async fn the_welcome_announces_epoch_and_limits() {
    let server = start(short_lease_config()).await;
    let (_, welcome) = RawConnection::open(server.addr).await;
    assert_eq!(welcome.version, leasehold_protocol::PROTOCOL_VERSION);
    assert_eq!(welcome.epoch, 1);
    assert_eq!(welcome.limits.max_frame, 1 << 20);
    assert_eq!(welcome.limits.min_lease_ms, 100);
    assert_eq!(welcome.limits.max_lease_ms, 60_000);
    assert_eq!(welcome.limits.max_in_flight, 4096);
}
