//! The master's timers, checked to the millisecond: the real server and raw
//! frames over turmoil's network, in virtual time, with every message taking
//! exactly one millisecond each way. The same rules are checked over TCP
//! elsewhere with only lower bounds, which is all a loaded machine allows.

use std::time::Duration;

use leasehold_protocol::{
    Acquire, Behavior, CreateSession, ErrorCode, KeepAlive, LockMode, Request, Response,
    SessionToken, Welcome,
};
use leasehold_server::{Config, IdSource};
use leasehold_tests::raw::RawConnection;
use leasehold_tests::sim::{SimListener, PORT};
use tokio::time::Instant;

/// One way, every message.
const LATENCY: Duration = Duration::from_millis(1);
/// What a timer may be late by: the master's clock counts whole
/// milliseconds, and the simulation steps one at a time.
const TICK: Duration = Duration::from_millis(2);

fn simulation() -> turmoil::Sim<'static> {
    let mut sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(60))
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(LATENCY)
        .max_message_latency(LATENCY)
        .rng_seed(1)
        .build();
    sim.host("master", || async {
        let listener = SimListener::bind().await?;
        let config = Config {
            ids: IdSource::Seeded(1),
            min_lease: Duration::from_millis(100),
            ..Config::default()
        };
        leasehold_server::Server::volatile(config)?
            .serve(listener, std::future::pending())
            .await?;
        Ok(())
    });
    sim
}

type SimRaw = RawConnection<turmoil::net::TcpStream>;

async fn open() -> (SimRaw, Welcome) {
    let stream = turmoil::net::TcpStream::connect(("master", PORT))
        .await
        .expect("connect to the master");
    RawConnection::over(stream).await
}

/// Creates a session; returns it and when its reply arrived, which is one
/// latency after the master started its lease.
async fn create(
    conn: &mut SimRaw,
    lease: Duration,
    lock_delay: Duration,
) -> (SessionToken, Instant) {
    let reply = conn
        .call(Request::CreateSession(CreateSession {
            name: "timed".into(),
            lease_ms: Some(lease.as_millis() as u64),
            lock_delay_ms: Some(lock_delay.as_millis() as u64),
            behavior: Behavior::Release,
            checks: Vec::new(),
        }))
        .await;
    let Ok(Response::SessionCreated {
        session, secret, ..
    }) = reply
    else {
        panic!("expected a session, got {reply:?}");
    };
    let token = SessionToken {
        id: session,
        secret,
    };
    (token, Instant::now())
}

/// An exclusive acquire of the key "k": at once, or waiting `wait_ms`.
fn acquire(session: SessionToken, wait_ms: Option<u64>) -> Request {
    Request::Acquire(Acquire {
        key: "k".into(),
        session,
        mode: LockMode::Exclusive,
        contents: None,
        wait_ms,
        transient: false,
    })
}

/// Asserts `actual` is `expected`, give or take a [`TICK`].
fn near(what: &str, actual: Duration, expected: Duration) {
    assert!(
        actual + TICK >= expected && actual <= expected + TICK,
        "{what}: {actual:?}, expected {expected:?} (±{TICK:?})"
    );
}

// KA-2
#[test]
fn a_held_keepalive_is_answered_exactly_a_margin_before_the_lease_ends() {
    let mut sim = simulation();
    sim.client("client", async {
        let (mut conn, welcome) = open().await;
        // The default 2 s margin, capped at a quarter of a 4 s lease.
        let lease = Duration::from_secs(4);
        let (session, granted) = create(&mut conn, lease, Duration::ZERO).await;
        let reply = conn
            .call(Request::KeepAlive(KeepAlive {
                session,
                epoch: welcome.epoch,
                acked_seq: 0,
                hold: true,
            }))
            .await;
        let Ok(Response::KeepAlive { lease: grant, .. }) = reply else {
            panic!("expected a KeepAlive reply, got {reply:?}");
        };
        // Lease started at `granted - LATENCY`, answered 3 s later, heard
        // one latency after that.
        near("answered", granted.elapsed(), Duration::from_secs(3));
        // Received two latencies after the lease began, held until 3 s.
        let held = Duration::from_millis(grant.held_ms);
        near("held", held, Duration::from_secs(3) - 2 * LATENCY);
        Ok(())
    });
    sim.run().unwrap();
}

// SES-6, LEASE-1
#[test]
fn a_session_without_keepalives_ends_when_its_lease_runs_out() {
    let mut sim = simulation();
    sim.client("client", async {
        let (mut conn, _) = open().await;
        let lease = Duration::from_millis(300);
        let (session, granted) = create(&mut conn, lease, Duration::ZERO).await;
        let info = Request::SessionInfo {
            session: session.id,
        };
        // The question reaches the master one latency after it is sent:
        // just before the lease ends, then just after.
        tokio::time::sleep_until(granted + lease - 2 * LATENCY - TICK).await;
        let before = conn.call(info.clone()).await;
        assert!(matches!(before, Ok(Response::SessionInfo(_))), "{before:?}");
        tokio::time::sleep_until(granted + lease + TICK).await;
        let after = conn.call(info).await.unwrap_err();
        assert_eq!(after.code, ErrorCode::SessionExpired);
        Ok(())
    });
    sim.run().unwrap();
}

// LOCK-3
#[test]
fn a_wait_for_a_lock_ends_exactly_when_its_time_is_up() {
    let mut sim = simulation();
    sim.client("client", async {
        let (mut conn, _) = open().await;
        let long = Duration::from_secs(30);
        let (holder, _) = create(&mut conn, long, Duration::ZERO).await;
        let (waiter, _) = create(&mut conn, long, Duration::ZERO).await;
        let held = conn.call(acquire(holder, None)).await;
        assert!(matches!(held, Ok(Response::Acquired { .. })), "{held:?}");
        let asked = Instant::now();
        let refused = conn.call(acquire(waiter, Some(300))).await.unwrap_err();
        assert_eq!(refused.code, ErrorCode::LockHeld);
        near(
            "waited",
            asked.elapsed(),
            Duration::from_millis(300) + 2 * LATENCY,
        );
        Ok(())
    });
    sim.run().unwrap();
}

// LOCK-6, FO-3
#[test]
fn lock_delay_runs_from_the_holders_expiry_to_the_millisecond() {
    let mut sim = simulation();
    sim.client("client", async {
        let (mut conn, _) = open().await;
        let (lease, delay) = (Duration::from_millis(300), Duration::from_millis(800));
        let (dying, granted) = create(&mut conn, lease, delay).await;
        let (next, _) = create(&mut conn, Duration::from_secs(30), Duration::ZERO).await;
        let held = conn.call(acquire(dying, None)).await;
        assert!(matches!(held, Ok(Response::Acquired { .. })), "{held:?}");
        // No KeepAlive: the holder's lease ends one lease after the master
        // started it (a latency before `granted`), and lock-delay runs from
        // then.
        let free_at = granted - LATENCY + lease + delay;
        tokio::time::sleep_until(granted + lease + Duration::from_millis(100)).await;
        let asked = Instant::now();
        let refused = conn.call(acquire(next, None)).await.unwrap_err();
        let ErrorCode::LockDelayed { remaining_ms } = refused.code else {
            panic!("expected lock-delay, got {refused:?}");
        };
        // Counted by the master when the request arrived.
        near(
            "remaining",
            Duration::from_millis(remaining_ms),
            free_at - (asked + LATENCY),
        );
        let waited = conn.call(acquire(next, Some(0))).await;
        assert!(
            matches!(waited, Ok(Response::Acquired { .. })),
            "{waited:?}"
        );
        // Granted as the delay ends, heard a latency later.
        near(
            "granted",
            Instant::now() - granted,
            free_at + LATENCY - granted,
        );
        Ok(())
    });
    sim.run().unwrap();
}
