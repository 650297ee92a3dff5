//! Every connection has a budget: how many a peer may open, how long a
//! frame may take to arrive, how long a connection may sit idle, and how
//! many bytes of replies it may leave unread. Raw frames against the real
//! master over loopback.

use std::time::Duration;

use leasehold_protocol::{ClientFrame, ErrorCode, Hello, Request, Response, ServerFrame};
use leasehold_server::Config;
use leasehold_tests::raw::RawConnection;
use leasehold_tests::server::{short_lease_config, start};

/// Connects and says Hello; returns the connection and the server's answer.
async fn hello(addr: std::net::SocketAddr) -> (RawConnection, Option<ServerFrame>) {
    let mut conn = RawConnection::connect(addr).await;
    conn.send(ClientFrame::Hello(Hello::current())).await;
    let answer = conn.recv().await;
    (conn, answer)
}

fn refused_with(answer: Option<ServerFrame>, words: &str) {
    match answer {
        Some(ServerFrame::Close(e)) => {
            assert_eq!(e.code, ErrorCode::LimitReached, "{e:?}");
            assert!(e.message.contains(words), "{}", e.message);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

// CONN-8
#[tokio::test]
async fn a_peer_past_its_connection_limit_is_refused_with_the_reason() {
    let server = start(Config {
        max_connections_per_peer: 2,
        ..short_lease_config()
    })
    .await;
    let (first, _) = RawConnection::open(server.addr).await;
    let (_second, _) = RawConnection::open(server.addr).await;
    let (_, answer) = hello(server.addr).await;
    refused_with(answer, "per address");
    // A connection that ends makes room for another.
    drop(first);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match hello(server.addr).await.1 {
            Some(ServerFrame::Welcome(_)) => break,
            other => {
                assert!(tokio::time::Instant::now() < deadline, "{other:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

// CONN-8
#[tokio::test]
async fn connections_past_the_masters_limit_are_refused() {
    let server = start(Config {
        max_connections: 1,
        ..short_lease_config()
    })
    .await;
    let (mut served, _) = RawConnection::open(server.addr).await;
    let (_, answer) = hello(server.addr).await;
    refused_with(answer, "maximum of 1 connections");
    // The one served is untouched.
    served.put("k", "v").await;
}

// CONN-10
#[tokio::test]
async fn a_frame_left_half_sent_closes_its_connection() {
    let server = start(Config {
        frame_read_timeout: Duration::from_millis(200),
        ..short_lease_config()
    })
    .await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    // A length of 100 bytes, and only 3 of them.
    conn.send_bytes(&[0, 0, 0, 100, 1, 2, 3]).await;
    let close = conn.closed_with().await.expect("a Close frame");
    assert_eq!(close.code, ErrorCode::Malformed);
    assert!(close.message.contains("incomplete"), "{}", close.message);
}

// CONN-11
#[tokio::test]
async fn a_connection_with_nothing_in_flight_is_closed_when_idle() {
    let server = start(Config {
        idle_timeout: Duration::from_millis(200),
        ..short_lease_config()
    })
    .await;
    let (conn, _) = RawConnection::open(server.addr).await;
    let close = conn.closed_with().await.expect("a Close frame");
    assert_eq!(close.code, ErrorCode::LimitReached);
    assert!(close.message.contains("idle"), "{}", close.message);
}

// CONN-11
#[tokio::test]
async fn a_connection_holding_a_keepalive_is_not_idle() {
    // Long beside the gaps between this test's first requests on a loaded
    // machine, which must not count as idleness either.
    let idle = Duration::from_secs(1);
    let server = start(Config {
        idle_timeout: idle,
        ..short_lease_config()
    })
    .await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let session = conn.create_session(Duration::from_secs(30)).await;
    conn.keepalive(session, true).await;
    // Held until 28 s before expiry: for now nothing is answered, and the
    // connection stays open for many idle timeouts.
    let mut conn = conn.with_patience(idle * 100);
    let waited = tokio::time::timeout(idle * 5, conn.recv()).await;
    assert!(
        waited.is_err(),
        "the connection was answered or closed: {waited:?}"
    );
}

// CONN-9
#[tokio::test]
async fn a_peer_that_does_not_read_gets_refusals_not_replies_past_its_budget() {
    let contents = "x".repeat(32 * 1024);
    let server = start(Config {
        max_frame: 64 * 1024,
        reply_budget: 64 * 1024,
        ..short_lease_config()
    })
    .await;
    let (mut writer, _) = RawConnection::open(server.addr).await;
    writer.put("big", &contents).await;
    let (mut greedy, _) = RawConnection::open(server.addr).await;
    let gets = 2_000u64;
    for _ in 0..gets {
        greedy
            .request(Request::Get {
                key: "big".into(),
                stat_only: false,
            })
            .await;
    }
    // Only now does it read: every Get is answered, and those that reached
    // the master while its replies were piling up are refused.
    let (mut served, mut refused) = (0, 0);
    for _ in 0..gets {
        match greedy.reply().await.1 {
            Ok(Response::Node { node: Some(_), .. }) => served += 1,
            Err(e) if matches!(e.code, ErrorCode::Congested { .. }) => {
                assert!(e.message.contains("unread replies"), "{}", e.message);
                refused += 1;
            }
            other => panic!("unexpected reply {other:?}"),
        }
    }
    assert_eq!(served + refused, gets);
    eprintln!("served {served}, refused {refused}");
    assert!(served >= 1, "some Gets were served");
    assert!(refused >= 1, "the unread replies were never refused");
    // Once it has read, it is served again.
    let after = greedy
        .call(Request::Get {
            key: "big".into(),
            stat_only: true,
        })
        .await;
    assert!(matches!(after, Ok(Response::Node { .. })), "{after:?}");
}

// CONN-9, ERR-16: the client library reads all the time, so a burst larger
// than its connection's budget is refused only for a moment, and retried.
#[tokio::test]
async fn the_client_library_rides_out_a_burst_larger_than_its_budget() {
    let server = start(Config {
        max_frame: 64 * 1024,
        reply_budget: 64 * 1024,
        ..short_lease_config()
    })
    .await;
    let client = server.client().await;
    client
        .put("big", vec![7u8; 32 * 1024], leasehold::PutOptions::new())
        .await
        .unwrap();
    // A hundred times the budget: refused many times over, yet all served
    // within each request's timeout on a loaded machine.
    let gets = (0..200).map(|_| client.get("big"));
    let nodes = futures::future::join_all(gets).await;
    for node in nodes {
        assert_eq!(node.unwrap().unwrap().contents.unwrap().len(), 32 * 1024);
    }
}

// EV-5: subscriptions are capped over all sessions, so no number of
// sessions can make every write walk an unbounded set.
#[tokio::test]
async fn subscriptions_past_the_masters_cap_are_refused() {
    let server = start(Config {
        max_subscriptions: 3,
        ..short_lease_config()
    })
    .await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let a = conn.create_session(Duration::from_secs(30)).await;
    let b = conn.create_session(Duration::from_secs(30)).await;
    conn.subscribe(a, "x", false, 1).await;
    conn.subscribe(a, "y", false, 1).await;
    conn.subscribe(b, "x", false, 1).await;
    let refused = conn
        .call(Request::Subscribe {
            session: b,
            key: "z".into(),
            prefix: false,
            mask: 1,
        })
        .await;
    let error = refused.unwrap_err();
    assert_eq!(error.code, ErrorCode::LimitReached);
    assert!(
        error.message.contains("maximum of 3 subscriptions"),
        "{}",
        error.message
    );
}

fn set_check(name: &str) -> Request {
    Request::SetCheck {
        name: name.into(),
        status: leasehold_protocol::CheckStatus::Passing,
        note: String::new(),
    }
}

// QUOTA-1: one address cannot take every health check; others, the
// operator among them, still find room.
#[tokio::test]
async fn a_peer_address_creates_at_most_its_quota_of_health_checks() {
    let server = start(Config {
        max_checks_per_peer: 2,
        ..short_lease_config()
    })
    .await;
    let (mut greedy, _) = RawConnection::open_from(server.addr, "127.0.0.2".parse().unwrap()).await;
    greedy.call(set_check("a")).await.unwrap();
    greedy.call(set_check("b")).await.unwrap();
    let refused = greedy.call(set_check("c")).await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::LimitReached);
    assert!(
        refused.message.contains("quota of 2 health checks"),
        "{}",
        refused.message
    );
    // Updating its own checks is not creating any.
    greedy.call(set_check("a")).await.unwrap();
    // Another address still has room.
    let (mut other, _) = RawConnection::open(server.addr).await;
    other.call(set_check("c")).await.unwrap();
    // Deleting one gives it back.
    greedy
        .call(Request::DeleteCheck { name: "b".into() })
        .await
        .unwrap();
    greedy.call(set_check("d")).await.unwrap();
}

// CONN-8: a burst of refusals is told why, each one, rather than reset.
#[tokio::test]
async fn every_connection_refused_in_a_burst_reads_the_reason_not_a_reset() {
    let server = start(Config {
        max_connections_per_peer: 1,
        ..short_lease_config()
    })
    .await;
    let (_served, _) = RawConnection::open(server.addr).await;
    // Each says Hello and reads nothing until all are open: a refusal that
    // did not read the Hello before closing would reset the connection.
    let mut refused = Vec::new();
    for _ in 0..300 {
        let mut conn = RawConnection::connect(server.addr).await;
        conn.send(ClientFrame::Hello(Hello::current())).await;
        refused.push(conn);
    }
    for (n, mut conn) in refused.into_iter().enumerate() {
        match conn.recv().await {
            Some(ServerFrame::Close(e)) => assert_eq!(e.code, ErrorCode::LimitReached, "{e:?}"),
            other => panic!("connection {n}: expected the refusal, got {other:?}"),
        }
    }
}
