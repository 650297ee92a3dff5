//! Held KeepAlives over real loopback TCP, checked with raw frames.

use std::time::Duration;

use leasehold_protocol::{ErrorCode, Request, Response};
use leasehold_tests::raw::RawConnection;
use leasehold_tests::server::{short_lease_config, start};
use tokio::time::Instant;

/// A lease long enough that the time to create the session and send the
/// KeepAlive, however loaded the machine, is small beside how long it is
/// held.
const LONG_LEASE: Duration = Duration::from_secs(4);
/// The default 2 s margin is capped at a quarter of a 4 s lease (KA-2).
const HELD_UNTIL: Duration = Duration::from_millis(3_000);

// KA-2
#[tokio::test]
async fn a_keepalive_is_held_until_lease_minus_margin() {
    let server = start(short_lease_config()).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let before_create = Instant::now();
    let session = conn.create_session(LONG_LEASE).await;
    conn.keepalive(session, true).await;
    let (_, reply) = conn.reply().await;
    let waited = before_create.elapsed();
    let Ok(Response::KeepAlive { lease, .. }) = reply else {
        panic!("expected a KeepAlive reply, got {reply:?}");
    };
    // The lease started no earlier than `before_create`, so the master may
    // not answer before 3 s after it (1 ms for its millisecond clock).
    assert!(
        waited >= HELD_UNTIL - Duration::from_millis(1),
        "answered after {waited:?}"
    );
    assert!(lease.held_ms >= 2_000, "held for {} ms", lease.held_ms);
    // A full lease from the reply, less 1 ms for the master's clock (KA-4).
    assert_eq!(lease.remaining_ms, 3_999);
}

// KA-3
#[tokio::test]
async fn a_keepalive_that_does_not_ask_to_be_held_is_answered_at_once() {
    let server = start(short_lease_config()).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let session = conn.create_session(Duration::from_secs(30)).await;
    conn.keepalive(session, false).await;
    let (_, reply) = conn.reply().await;
    let Ok(Response::KeepAlive { lease, .. }) = reply else {
        panic!("expected a KeepAlive reply, got {reply:?}");
    };
    assert!(lease.held_ms < 1_000, "held for {} ms", lease.held_ms);
    assert!(lease.remaining_ms >= 29_000);
}

// CONN-2
#[tokio::test]
async fn a_held_keepalive_does_not_delay_other_requests_on_its_connection() {
    let server = start(short_lease_config()).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let session = conn.create_session(Duration::from_secs(10)).await;
    let keepalive = conn.keepalive(session, true).await;
    let list = conn
        .request(Request::ListSessions {
            after: None,
            limit: 0,
        })
        .await;
    let info = conn
        .request(Request::SessionInfo {
            session: session.id,
        })
        .await;
    let (first, _) = conn.reply().await;
    let (second, reply) = conn.reply().await;
    assert_eq!([first, second], [list, info]);
    let Ok(Response::SessionInfo(info)) = reply else {
        panic!("expected session info, got {reply:?}");
    };
    assert!(
        info.keepalive_held,
        "the KeepAlive {keepalive} is still held"
    );
}

// KA-5
#[tokio::test]
async fn a_second_keepalive_answers_the_held_one_at_once() {
    let server = start(short_lease_config()).await;
    let (mut old, _) = RawConnection::open(server.addr).await;
    let session = old.create_session(Duration::from_secs(10)).await;
    old.keepalive(session, true).await;
    let (mut new, _) = RawConnection::open(server.addr).await;
    new.keepalive(session, true).await;
    let (_, replaced) = old.reply().await;
    let Ok(Response::KeepAlive { lease, .. }) = replaced else {
        panic!("expected the replaced KeepAlive to be answered, got {replaced:?}");
    };
    assert!(lease.held_ms < 5_000, "held for {} ms", lease.held_ms);
    let info = new
        .call(Request::SessionInfo {
            session: session.id,
        })
        .await;
    let Ok(Response::SessionInfo(info)) = info else {
        panic!("expected session info, got {info:?}");
    };
    assert!(info.keepalive_held, "the new KeepAlive is the held one");
}

// KA-6
#[tokio::test]
async fn a_keepalive_with_another_epoch_is_refused_with_the_current_one() {
    let server = start(short_lease_config()).await;
    let (mut conn, welcome) = RawConnection::open(server.addr).await;
    let session = conn.create_session(Duration::from_secs(10)).await;
    let reply = conn
        .call(Request::KeepAlive(leasehold_protocol::KeepAlive {
            session,
            epoch: welcome.epoch + 1,
            acked_seq: 0,
            hold: false,
        }))
        .await;
    assert_eq!(
        reply.unwrap_err().code,
        ErrorCode::WrongEpoch {
            current: welcome.epoch
        }
    );
}
