//! A session's consistent cache through the client library, over real
//! loopback TCP: reads served again with no round trip, writes by others
//! seen by the next read, the cache flushed in jeopardy, and a cacher cut
//! off from the master (SPEC "Cache").

use std::time::Duration;

use leasehold::{Client, ClientConfig, PutOptions, SessionOptions, SessionState};
use leasehold_tests::fixture::Fixture;
use leasehold_tests::proxy::{Link, Proxy};
use leasehold_tests::server::{short_lease_config, start};
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(2);
/// Scheduling slack allowed on a shared machine.
const SLACK: Duration = Duration::from_millis(1_500);

fn contents(node: Option<leasehold::NodeView>) -> Option<Vec<u8>> {
    node.and_then(|n| n.contents)
}

// CACHE-1
#[tokio::test]
async fn a_second_read_is_served_from_the_sessions_cache() {
    let Fixture { server: _s, client } = Fixture::new().await;
    client.put("k", "v", PutOptions::new()).await.unwrap();
    let session = client
        .create_session(SessionOptions::new("reader"))
        .await
        .unwrap();
    let first = session.get("k").await.unwrap();
    let again = session.get("k").await.unwrap();
    assert_eq!(first, again);
    assert_eq!(contents(again), Some(b"v".to_vec()));
    let stats = session.cache_stats();
    assert_eq!((stats.hits, stats.misses, stats.entries), (1, 1, 1));
}

// CACHE-1: the absence of a node is cached too.
#[tokio::test]
async fn a_missing_node_is_cached_and_its_creation_is_seen() {
    let fixture = Fixture::new().await;
    let session = fixture
        .client
        .create_session(SessionOptions::new("reader"))
        .await
        .unwrap();
    assert_eq!(session.get("absent").await.unwrap(), None);
    assert_eq!(session.get("absent").await.unwrap(), None);
    assert_eq!(session.cache_stats().hits, 1);
    let writer = fixture.client().await;
    writer
        .put("absent", "here", PutOptions::new())
        .await
        .unwrap();
    let now = session.get("absent").await.unwrap();
    assert_eq!(contents(now), Some(b"here".to_vec()));
}

// CACHE-1, CACHE-3: the write is acknowledged only once this session has
// dropped the value it replaced.
#[tokio::test]
async fn a_write_acknowledged_elsewhere_is_seen_by_the_next_read() {
    let fixture = Fixture::new().await;
    let writer = fixture.client().await;
    writer.put("k", "one", PutOptions::new()).await.unwrap();
    let session = fixture
        .client
        .create_session(SessionOptions::new("reader").lease(LEASE))
        .await
        .unwrap();
    assert_eq!(
        contents(session.get("k").await.unwrap()),
        Some(b"one".to_vec())
    );
    for round in 0..5u32 {
        let value = format!("v{round}");
        let started = Instant::now();
        writer
            .put("k", value.as_str(), PutOptions::new())
            .await
            .unwrap();
        // The cacher answers the invalidation on its next KeepAlive, which
        // the master asks for at once: far sooner than its lease.
        assert!(
            started.elapsed() < LEASE,
            "the write waited {:?}",
            started.elapsed()
        );
        assert_eq!(
            contents(session.get("k").await.unwrap()),
            Some(value.into_bytes())
        );
        assert_eq!(
            contents(session.get("k").await.unwrap()),
            contents(writer.get("k").await.unwrap())
        );
    }
    assert!(session.cache_stats().invalidations >= 5);
}

// CACHE-1
#[tokio::test]
async fn a_session_with_its_cache_off_asks_the_master_every_time() {
    let Fixture { server: _s, client } = Fixture::new().await;
    let session = client
        .create_session(SessionOptions::new("uncached").cache(false))
        .await
        .unwrap();
    session.get("k").await.unwrap();
    session.get("k").await.unwrap();
    assert_eq!(session.cache_stats().hits, 0);
}

// CACHE-6
#[tokio::test]
async fn jeopardy_flushes_the_cache_and_normal_fills_it_again() {
    let server = start(short_lease_config()).await;
    let proxy = Proxy::start(server.addr).await;
    let client = Client::connect(proxy.addr.to_string()).await.unwrap();
    let session = client
        .create_session(
            SessionOptions::new("flushed")
                .lease(LEASE)
                .grace(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    session.get("k").await.unwrap();
    assert_eq!(session.cache_stats().entries, 1);
    // Held, not cut: the master's answer to the held KeepAlive waits in
    // the link and renews the lease once it passes, whenever the client's
    // own probes go out (CS-9 sends one before jeopardy, on a connection
    // that a cut would leave dead for the connect timeout).
    proxy.set(Link::Hold);
    let mut states = session.watch_state();
    tokio::time::timeout(
        LEASE + SLACK,
        states.wait_for(|s| *s == SessionState::Jeopardy),
    )
    .await
    .expect("jeopardy")
    .unwrap();
    assert_eq!(session.cache_stats().entries, 0);
    proxy.set(Link::Pass);
    // The answer held in the link may itself bring `Normal` back for a
    // moment: it was asked for before the link was held, so the lease it
    // grants ends just after the jeopardy began. The reads wait for a lease
    // that a KeepAlive answered since then granted.
    tokio::time::timeout(Duration::from_secs(10), async {
        while !(session.state() == SessionState::Normal
            && session.local_lease_expiry() > Instant::now() + LEASE / 2)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("normal again, with a fresh lease");
    session.get("k").await.unwrap();
    session.get("k").await.unwrap();
    assert_eq!(session.cache_stats().entries, 1);
}

// CACHE-3, CACHE-6: a cacher cut off holds a write for its lease at most,
// and never serves the value the write replaced once it is acknowledged.
#[tokio::test]
async fn a_write_waits_for_a_cut_off_cacher_no_longer_than_its_lease() {
    let server = start(short_lease_config()).await;
    let proxy = Proxy::start(server.addr).await;
    let config = ClientConfig {
        request_timeout: Duration::from_millis(500),
        ..ClientConfig::default()
    };
    let cut_off = Client::connect_with(proxy.addr.to_string(), config)
        .await
        .unwrap();
    let writer = server.client().await;
    writer.put("k", "old", PutOptions::new()).await.unwrap();
    let session = cut_off
        .create_session(
            SessionOptions::new("cut-off")
                .lease(LEASE)
                .grace(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert_eq!(
        contents(session.get("k").await.unwrap()),
        Some(b"old".to_vec())
    );
    proxy.set(Link::Cut);
    let started = Instant::now();
    writer.put("k", "new", PutOptions::new()).await.unwrap();
    let took = started.elapsed();
    assert!(took <= LEASE + SLACK, "the write waited {took:?}");
    // Acknowledged: the cut-off session must not serve the old value.
    // The master cannot be reached, so an error is right; the old value
    // would not be.
    if let Ok(node) = session.get("k").await {
        assert_eq!(contents(node), Some(b"new".to_vec()));
    }
    assert_ne!(
        session.state(),
        SessionState::Normal,
        "its local lease has run out"
    );
}
