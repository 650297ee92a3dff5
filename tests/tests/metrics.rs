//! The operator's figures (SPEC `OPS-1`..`OPS-4`): after a scripted
//! workload, `/metrics` shows each figure where it should be; `/health`
//! and `/ready` answer as probes expect; anything else is refused. Read
//! over plain HTTP/1.1 from a TCP socket, as a scraper would.

use std::time::Duration;

use leasehold::{Client, ErrorCode, LockOptions, PutOptions, SessionOptions};
use leasehold_server::http::{serve_http, Health, HttpPort};
use leasehold_server::{Config, Metrics};
use leasehold_tests::http::sample;
use leasehold_tests::server::{start, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An HTTP port on a free loopback port serving `metrics` and the health
/// `health` watches.
async fn http_port(
    metrics: Metrics,
    health: tokio::sync::watch::Receiver<Health>,
) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_http(
        listener,
        HttpPort::new(metrics, health),
        std::future::pending(),
    ));
    addr
}

/// A master, and its HTTP port on another loopback port.
async fn master_with_port(config: Config) -> (TestServer, std::net::SocketAddr) {
    let metrics = config.metrics.clone();
    let server = start(config).await;
    let (_, health) = tokio::sync::watch::channel(Health::serving());
    (server, http_port(metrics, health).await)
}

/// The status line and body of `METHOD path`.
async fn http(addr: std::net::SocketAddr, method: &str, path: &str) -> (String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request =
        format!("{method} {path} HTTP/1.1\r\nHost: leasehold\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
        .await
        .expect("an answer in time")
        .unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("headers and a body");
    let status = head.lines().next().unwrap_or_default().to_string();
    (format!("{status}\n{head}"), body.to_string())
}

// OPS-1: requests by kind and outcome, sessions, lock holders and
// waiters, KeepAlives held, connections and the epoch, after a workload.
#[tokio::test]
async fn metrics_show_a_workloads_requests_sessions_locks_and_refusals() {
    let config = Config {
        min_lease: Duration::from_millis(100),
        max_sessions_per_peer: 2,
        ..Config::default()
    };
    let (server, port) = master_with_port(config).await;
    let client = Client::connect(server.addr.to_string()).await.unwrap();
    client.put("svc/a", "1", PutOptions::new()).await.unwrap();
    client.get("svc/a").await.unwrap();
    let holder = client
        .create_session(SessionOptions::new("holder"))
        .await
        .unwrap();
    let waiter = client
        .create_session(SessionOptions::new("waiter"))
        .await
        .unwrap();
    // The third session from one address is over the quota.
    let refused = client
        .create_session(SessionOptions::new("third"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::LimitReached));
    let guard = holder
        .lock("jobs/x", LockOptions::exclusive())
        .await
        .unwrap();
    let waiting =
        tokio::spawn(async move { waiter.lock("jobs/x", LockOptions::exclusive()).await });
    // The waiter is in line once the master counts it.
    let text = metrics_when(port, |t| sample(t, "leasehold_lock_waiters") == Some(1.0)).await;
    assert_eq!(sample(&text, "leasehold_sessions"), Some(2.0), "{text}");
    assert_eq!(sample(&text, "leasehold_lock_holders"), Some(1.0), "{text}");
    guard.release().await.unwrap();
    let handed = waiting.await.unwrap().unwrap();
    handed.release().await.unwrap();

    let (status, text) = http(port, "GET", "/metrics").await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert!(
        status.contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{status}"
    );
    let count = |labels: &str| sample(&text, &format!("leasehold_requests_total{{{labels}}}"));
    assert_eq!(count("kind=\"put\",outcome=\"ok\""), Some(1.0), "{text}");
    assert_eq!(count("kind=\"get\",outcome=\"ok\""), Some(1.0), "{text}");
    assert_eq!(
        count("kind=\"create-session\",outcome=\"ok\""),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        count("kind=\"create-session\",outcome=\"limit_reached\""),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        count("kind=\"acquire\",outcome=\"ok\""),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        count("kind=\"release\",outcome=\"ok\""),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "leasehold_request_duration_seconds_count{kind=\"acquire\"}"
        ),
        Some(2.0),
        "{text}"
    );
    assert_eq!(sample(&text, "leasehold_lock_waiters"), Some(0.0), "{text}");
    assert_eq!(sample(&text, "leasehold_connections"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "leasehold_epoch"), Some(1.0), "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
}

// OPS-1: a session's held KeepAlive is counted while the master holds it.
#[tokio::test]
async fn a_held_keepalive_is_counted_while_held() {
    let (server, port) = master_with_port(Config::default()).await;
    let client = Client::connect(server.addr.to_string()).await.unwrap();
    let _session = client
        .create_session(SessionOptions::new("kept"))
        .await
        .unwrap();
    metrics_when(port, |t| {
        sample(t, "leasehold_keepalives_held") == Some(1.0)
    })
    .await;
}

// OPS-3: health and readiness, as etcd's and Kubernetes' probes read them.
#[tokio::test]
async fn health_and_ready_say_true_while_serving_and_false_with_a_reason() {
    let (set, health) = tokio::sync::watch::channel(Health::serving());
    let port = http_port(Metrics::new(), health).await;
    for path in ["/health", "/ready"] {
        let (status, body) = http(port, "GET", path).await;
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        assert_eq!(body, "{\"health\":\"true\",\"reason\":\"\"}\n");
    }
    set.send(Health::not_serving("no master")).unwrap();
    let (status, body) = http(port, "GET", "/health").await;
    assert!(status.starts_with("HTTP/1.1 503"), "{status}");
    assert_eq!(body, "{\"health\":\"false\",\"reason\":\"no master\"}\n");
}

// OPS-2: GET (or HEAD) only, on three paths.
#[tokio::test]
async fn other_methods_and_paths_are_refused() {
    let (_server, port) = master_with_port(Config::default()).await;
    let (status, _) = http(port, "POST", "/metrics").await;
    assert!(status.starts_with("HTTP/1.1 405"), "{status}");
    assert!(status.contains("allow: GET, HEAD"), "{status}");
    let (status, _) = http(port, "GET", "/admin").await;
    assert!(status.starts_with("HTTP/1.1 404"), "{status}");
}

// OPS-4: `Status` counts what the master serves: sessions and those kept
// alive, ended sessions by cause, nodes, locks held and holdings, waiters,
// checks, and what its data directory holds.
#[tokio::test]
async fn status_counts_sessions_locks_waiters_and_what_is_stored() {
    let dir = leasehold_tests::fixture::TempDir::new("status");
    let server = start(leasehold_tests::server::Setup::durable(
        dir.path(),
        Config::default(),
    ))
    .await;
    let client = Client::connect(server.addr.to_string()).await.unwrap();
    let before = client.status().await.unwrap();
    assert_eq!((before.sessions, before.locks_held), (0, 0));
    let options = |name: &str| SessionOptions::new(name).lock_delay(Duration::ZERO);
    let a = client.create_session(options("a")).await.unwrap();
    let b = client.create_session(options("b")).await.unwrap();
    let c = client.create_session(options("c")).await.unwrap();
    let gone = client.create_session(options("gone")).await.unwrap();
    gone.close().await.unwrap();
    let _shared = [
        a.try_lock("s", LockOptions::shared()).await.unwrap(),
        b.try_lock("s", LockOptions::shared()).await.unwrap(),
    ];
    let _held = a.try_lock("x", LockOptions::exclusive()).await.unwrap();
    let waiter = tokio::spawn(async move {
        let _ = c.lock("x", LockOptions::exclusive()).await;
        c
    });
    while client.lock_info("x").await.unwrap().waiters_total == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    client
        .set_check("db", leasehold::CheckStatus::Passing, "")
        .await
        .unwrap();
    client
        .put("svc/db", b"10.0.0.5".to_vec(), PutOptions::new())
        .await
        .unwrap();
    let status = client.status().await.unwrap();
    assert_eq!(status.sessions, 3);
    assert!(status.keepalives_held <= 3);
    let destroyed = status
        .recently_ended
        .iter()
        .find(|(cause, _)| cause == "destroyed");
    assert_eq!(destroyed, Some(&("destroyed".to_string(), 1)));
    assert_eq!(status.nodes, 3, "s, x and svc/db");
    assert_eq!((status.locks_held, status.holdings), (2, 3));
    assert_eq!((status.waiters, status.locks_in_delay), (1, 0));
    assert_eq!(status.checks, 1);
    assert!(!status.access_control);
    assert!(status.index > before.index);
    assert!(status.stored_bytes.is_some_and(|n| n > 0), "{status:?}");
    waiter.abort();
}

/// Polls `/metrics` until `ready` holds of its text, for at most 10 s.
async fn metrics_when(port: std::net::SocketAddr, ready: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, text) = http(port, "GET", "/metrics").await;
        if ready(&text) {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not seen in 10 s:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// OPS-1: after sessions, a hand-off, a session destroyed holding a lock
// with lock-delay, one expired, a refused quota and a write held for a
// cacher, each figure is where it should be.
#[tokio::test]
async fn metrics_count_hand_offs_ends_lock_delay_quotas_and_held_writes() {
    let dir = leasehold_tests::fixture::TempDir::new("metrics");
    let config = Config {
        min_lease: Duration::from_millis(100),
        max_sessions_per_peer: 3,
        ..Config::default()
    };
    let metrics = config.metrics.clone();
    let server = start(leasehold_tests::server::Setup::durable(dir.path(), config)).await;
    let (_, health) = tokio::sync::watch::channel(Health::serving());
    let port = http_port(metrics, health).await;
    let client = Client::connect(server.addr.to_string()).await.unwrap();
    let options = |name: &str| SessionOptions::new(name).lock_delay(Duration::ZERO);

    // A hand-off: the holder releases to the waiter in line.
    let holder = client.create_session(options("holder")).await.unwrap();
    let waiter = client.create_session(options("waiter")).await.unwrap();
    let guard = holder
        .lock("jobs/x", LockOptions::exclusive())
        .await
        .unwrap();
    let waiting =
        tokio::spawn(async move { waiter.lock("jobs/x", LockOptions::exclusive()).await });
    metrics_when(port, |t| sample(t, "leasehold_lock_waiters") == Some(1.0)).await;
    guard.release().await.unwrap();
    let handed = waiting.await.unwrap().unwrap();

    // A session destroyed while it holds a lock with a long lock-delay.
    let delayed = client
        .create_session(SessionOptions::new("delayed").lock_delay(Duration::from_secs(60)))
        .await
        .unwrap();
    let _kept = delayed
        .lock("jobs/d", LockOptions::exclusive())
        .await
        .unwrap();
    client.destroy_session(delayed.id()).await.unwrap();

    // A write held until a session caching its key is told.
    client.put("cfg/k", "1", PutOptions::new()).await.unwrap();
    let cacher = client.create_session(options("cacher")).await.unwrap();
    cacher.get("cfg/k").await.unwrap();
    client.put("cfg/k", "2", PutOptions::new()).await.unwrap();

    // A fourth live session from one address is over its quota.
    let refused = client.create_session(options("fourth")).await.unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::LimitReached));

    // A session from another address that is never kept alive expires.
    let other: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let (mut raw, _) = leasehold_tests::raw::RawConnection::open_from(server.addr, other).await;
    raw.create_session(Duration::from_millis(100)).await;

    // Figures that walk the locks are at most a second old (`OPS-1`).
    let text = metrics_when(port, |t| {
        sample(t, "leasehold_sessions_ended_total{cause=\"expired\"}") == Some(1.0)
            && sample(t, "leasehold_locks_in_lock_delay") == Some(1.0)
    })
    .await;
    let at = |name: &str| sample(&text, name).unwrap_or_else(|| panic!("no {name}:\n{text}"));
    assert_eq!(at("leasehold_lock_grants_total{how=\"at_once\"}"), 2.0);
    assert_eq!(at("leasehold_lock_grants_total{how=\"from_line\"}"), 1.0);
    assert_eq!(at("leasehold_lock_releases_total{why=\"released\"}"), 1.0);
    assert_eq!(
        at("leasehold_lock_releases_total{why=\"session_ended\"}"),
        1.0
    );
    assert_eq!(
        at("leasehold_sessions_ended_total{cause=\"destroyed\"}"),
        1.0
    );
    assert_eq!(at("leasehold_locks_in_lock_delay"), 1.0);
    assert_eq!(at("leasehold_locks_held"), 1.0, "the hand-off's lock");
    assert_eq!(
        at("leasehold_refusals_total{limit=\"sessions_per_address\"}"),
        1.0
    );
    assert_eq!(
        at("leasehold_refusals_total{limit=\"bytes_per_address\"}"),
        0.0
    );
    assert!(at("leasehold_cache_grants_total") >= 1.0);
    assert!(at("leasehold_cache_held_writes_total") >= 1.0);
    assert!(at("leasehold_cache_invalidations_total") >= 1.0);
    assert!(at("leasehold_events_queued_total") >= 1.0);
    assert_eq!(at("leasehold_events_dropped_total"), 0.0);
    // The invalidation reached the cacher on a KeepAlive's answer, held
    // or not (which depends on when its client sent it).
    let carried = at("leasehold_keepalive_answers_total{when=\"early\"}")
        + at("leasehold_keepalive_answers_total{when=\"at_once\"}");
    assert!(carried >= 1.0);
    assert!(at("leasehold_keepalives_received_total") >= 3.0);
    assert_eq!(at("leasehold_keepalive_answers_total{when=\"late\"}"), 0.0);
    let sessions = at("leasehold_sessions");
    assert_eq!(sessions, 3.0, "holder, waiter and cacher");
    let by_state: f64 = ["keepalive_held", "waiting", "recovering", "ending"]
        .iter()
        .map(|state| at(&format!("leasehold_sessions_by_state{{state=\"{state}\"}}")))
        .sum();
    assert_eq!(by_state, sessions);
    assert!(at("leasehold_store_size_bytes") > 0.0);
    // A new data directory holds no snapshot until its log reaches a
    // bound (STORE-2).
    let age = at("leasehold_snapshot_age_seconds");
    assert!(age.is_nan(), "{age}");
    handed.release().await.unwrap();
}
