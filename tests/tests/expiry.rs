//! Sessions end when their lease runs out or someone destroys them.

use std::time::Duration;

use leasehold_protocol::{ErrorCode, Request, Response};
use leasehold_tests::raw::RawConnection;
use leasehold_tests::server::{short_lease_config, start};

// SES-6, ERR-2
#[tokio::test]
async fn a_session_without_keepalives_expires_and_says_so() {
    let server = start(short_lease_config()).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let session = conn.create_session(Duration::from_millis(300)).await;
    tokio::time::sleep(Duration::from_millis(600)).await;

    let info = conn
        .call(Request::SessionInfo {
            session: session.id,
        })
        .await
        .unwrap_err();
    assert_eq!(info.code, ErrorCode::SessionExpired);
    assert!(info.message.contains("lease ran out"), "{}", info.message);
    let keepalive = conn.keepalive(session, true).await;
    let (id, reply) = conn.reply().await;
    assert_eq!(id, keepalive);
    assert_eq!(reply.unwrap_err().code, ErrorCode::SessionExpired);
    let Ok(Response::Sessions { sessions, .. }) = conn
        .call(Request::ListSessions {
            after: None,
            limit: 0,
        })
        .await
    else {
        panic!("expected a session list");
    };
    assert!(sessions.iter().all(|s| s.session != session.id));
}

// SES-6
#[tokio::test]
async fn a_session_kept_alive_outlives_its_lease() {
    let server = start(short_lease_config()).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let session = conn.create_session(Duration::from_millis(400)).await;
    for _ in 0..4 {
        conn.keepalive(session, true).await;
        let (_, reply) = conn.reply().await;
        assert!(matches!(reply, Ok(Response::KeepAlive { .. })), "{reply:?}");
    }
    assert!(conn
        .call(Request::SessionInfo {
            session: session.id
        })
        .await
        .is_ok());
}

// SES-7, KA-7
#[tokio::test]
async fn destroying_a_session_answers_its_held_keepalive_with_session_expired() {
    let server = start(short_lease_config()).await;
    let (mut owner, _) = RawConnection::open(server.addr).await;
    let session = owner.create_session(Duration::from_secs(10)).await;
    owner.keepalive(session, true).await;
    let (mut operator, _) = RawConnection::open(server.addr).await;
    let destroyed = operator
        .call(Request::DestroySession {
            session: session.id,
            authority: leasehold_protocol::Authority::Session(session),
        })
        .await;
    assert_eq!(destroyed, Ok(Response::Destroyed));
    let (_, reply) = owner.reply().await;
    assert_eq!(reply.unwrap_err().code, ErrorCode::SessionExpired);
}

// ERR-1
#[tokio::test]
async fn a_session_never_created_is_unknown() {
    let server = start(short_lease_config()).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let reply = conn
        .call(Request::SessionInfo {
            session: uuid::Uuid::from_u128(42),
        })
        .await;
    assert_eq!(reply.unwrap_err().code, ErrorCode::UnknownSession);
}
