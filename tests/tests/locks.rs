//! Locks through the client library over loopback.

use std::time::Duration;

use leasehold::{
    Client, ErrorCode, LockGuard, LockMode, LockOptions, Session, SessionOptions, SessionState,
};
use leasehold_protocol::{EventKind, Response};
use leasehold_tests::fixture::Fixture;
use leasehold_tests::proxy::{Link, Proxy};
use leasehold_tests::relay::Relay;
use leasehold_tests::server::{short_lease_config, start, TestServer};
use tokio::time::Instant;

async fn setup() -> (TestServer, Client) {
    let Fixture { server, client } = Fixture::new().await;
    (server, client)
}

async fn session(client: &Client, lock_delay: Duration) -> Session {
    client
        .create_session(SessionOptions::new("locker").lock_delay(lock_delay))
        .await
        .unwrap()
}

// LOCK-2, LOCK-7
#[tokio::test]
async fn a_held_lock_has_a_sequencer_the_master_confirms_until_release() {
    let (_server, client) = setup().await;
    let a = session(&client, Duration::ZERO).await;
    let guard = a
        .try_lock("svc/leader", LockOptions::exclusive())
        .await
        .unwrap();
    assert_eq!(guard.sequencer().mode, LockMode::Exclusive);
    let bytes = guard.sequencer_bytes().to_vec();
    assert!(client.check_sequencer(&bytes).await.unwrap());
    let stat = client.stat("svc/leader").await.unwrap().unwrap();
    // NS-2: a node's lock generation starts at its instance number; the
    // first acquisition raises it by one.
    assert_eq!(guard.sequencer().lock_generation, stat.instance + 1);
    assert_eq!(stat.lock_holders, [(a.id(), LockMode::Exclusive)]);
    guard.release().await.unwrap();
    assert!(!client.check_sequencer(&bytes).await.unwrap());
}

// LOCK-2
#[tokio::test]
async fn acquiring_with_contents_publishes_the_holders_value() {
    let (_server, client) = setup().await;
    let a = session(&client, Duration::ZERO).await;
    let _guard = a
        .try_lock(
            "svc/leader",
            LockOptions::exclusive().contents("10.0.0.1:80"),
        )
        .await
        .unwrap();
    let node = client.get("svc/leader").await.unwrap().unwrap();
    assert_eq!(node.contents.as_deref(), Some(&b"10.0.0.1:80"[..]));
}

// LOCK-3, ERR-11
#[tokio::test]
async fn a_second_session_is_refused_at_once_or_waits_its_turn() {
    let (_server, client) = setup().await;
    let a = session(&client, Duration::ZERO).await;
    let b = session(&client, Duration::ZERO).await;
    let held = a.try_lock("k", LockOptions::exclusive()).await.unwrap();
    let first = held.sequencer().lock_generation;
    let refused = b.try_lock("k", LockOptions::exclusive()).await.unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::LockHeld));
    let waiting = tokio::spawn(async move { b.lock("k", LockOptions::exclusive()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    held.release().await.unwrap();
    let guard = waiting.await.unwrap().unwrap();
    assert_eq!(guard.sequencer().lock_generation, first + 1);
}

// LOCK-3
#[tokio::test]
async fn a_wait_that_times_out_says_the_lock_is_still_held() {
    let (_server, client) = setup().await;
    let a = session(&client, Duration::ZERO).await;
    let b = session(&client, Duration::ZERO).await;
    let _held = a.try_lock("k", LockOptions::exclusive()).await.unwrap();
    let started = Instant::now();
    let error = b
        .lock(
            "k",
            LockOptions::exclusive().timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::LockHeld));
    assert!(started.elapsed() >= Duration::from_millis(290));
}

// LOCK-5
#[tokio::test]
async fn waiters_get_the_lock_in_the_order_they_asked() {
    let (_server, client) = setup().await;
    let holder = session(&client, Duration::ZERO).await;
    let held = holder
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    let (order_tx, mut order) = tokio::sync::mpsc::unbounded_channel();
    for n in 0..3 {
        let waiter = session(&client, Duration::ZERO).await;
        let order_tx = order_tx.clone();
        tokio::spawn(async move {
            let guard = waiter.lock("k", LockOptions::exclusive()).await.unwrap();
            order_tx.send(n).unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await.unwrap();
        });
        // Queue them in a known order.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    held.release().await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(order.recv().await.unwrap());
    }
    assert_eq!(seen, [0, 1, 2]);
}

// LOCK-1
#[tokio::test]
async fn shared_holders_coexist_and_keep_an_exclusive_one_out() {
    let (_server, client) = setup().await;
    let a = session(&client, Duration::ZERO).await;
    let b = session(&client, Duration::ZERO).await;
    let c = session(&client, Duration::ZERO).await;
    let _ra = a.try_lock("k", LockOptions::shared()).await.unwrap();
    let _rb = b.try_lock("k", LockOptions::shared()).await.unwrap();
    let refused = c.try_lock("k", LockOptions::exclusive()).await.unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::LockHeld));
}

// LOCK-6, ERR-12
#[tokio::test]
async fn lock_delay_follows_expiry_is_announced_with_its_remainder_and_is_waited_out() {
    let (_server, client) = setup().await;
    let lock_delay = Duration::from_millis(800);
    let dying = client
        .create_session(
            SessionOptions::new("dying")
                .lease(Duration::from_millis(300))
                .lock_delay(lock_delay),
        )
        .await
        .unwrap();
    let guard = dying.try_lock("k", LockOptions::exclusive()).await.unwrap();
    let first = guard.sequencer().lock_generation;
    std::mem::forget(guard); // the holder "crashes": no release
    let id = dying.detach().await.id;
    // A KeepAlive still held at the master extends the lease once more, so
    // wait for the end rather than for a fixed time.
    let deadline = Instant::now() + Duration::from_secs(5);
    while client.session_info(id).await.is_ok() {
        assert!(Instant::now() < deadline, "the lease never ran out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let next = session(&client, Duration::ZERO).await;
    // Before asking: the master measures the remainder after this.
    let asked = Instant::now();
    let refused = next
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap_err();
    let Some(ErrorCode::LockDelayed { remaining_ms }) = refused.code() else {
        panic!("expected lock-delay, got {refused}");
    };
    assert!(remaining_ms > 0 && remaining_ms <= 800, "{remaining_ms} ms");
    assert!(refused.to_string().contains("lock-delay"), "{refused}");
    let guard = next.lock("k", LockOptions::exclusive()).await.unwrap();
    // Less 2 ms for the master's millisecond clock.
    assert!(asked.elapsed() >= Duration::from_millis(remaining_ms.saturating_sub(2)));
    assert_eq!(guard.sequencer().lock_generation, first + 1);
}

// LOCK-6, LOCK-11
#[tokio::test]
async fn closing_a_session_hands_its_locks_on_without_lock_delay() {
    let (_server, client) = setup().await;
    let leaving = session(&client, Duration::from_secs(30)).await;
    let _guard = leaving
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    leaving.close().await.unwrap();
    let next = session(&client, Duration::ZERO).await;
    next.try_lock("k", LockOptions::exclusive()).await.unwrap();
}

// LOCK-11: a close gives back every lock of the session, those whose
// guards are still out included: releasing such a guard afterwards finds
// its lock given back already, and says so rather than fail.
#[tokio::test]
async fn a_guard_released_after_its_session_closed_finds_the_lock_given_back() {
    let (_server, client) = setup().await;
    let leaving = session(&client, Duration::from_secs(30)).await;
    let guard = leaving
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    leaving.clone().close().await.unwrap();
    assert_eq!(leaving.state(), SessionState::Closed);
    guard.release().await.unwrap();
    let next = session(&client, Duration::ZERO).await;
    next.try_lock("k", LockOptions::exclusive()).await.unwrap();
}

// LOCK-6
#[tokio::test]
async fn a_destroyed_session_leaves_its_locks_in_lock_delay() {
    let (_server, client) = setup().await;
    let victim = session(&client, Duration::from_secs(30)).await;
    let _guard = victim
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    client.destroy_session(victim.id()).await.unwrap();
    let next = session(&client, Duration::ZERO).await;
    let refused = next
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap_err();
    assert!(matches!(
        refused.code(),
        Some(ErrorCode::LockDelayed { .. })
    ));
}

/// A session with a 500 ms lease holding "k", connected through a proxy
/// that can hold or cut its link.
async fn held_through_a_proxy() -> (TestServer, Proxy, Session, LockGuard) {
    let server = start(short_lease_config()).await;
    let proxy = Proxy::start(server.addr).await;
    let client = Client::connect(proxy.addr.to_string()).await.unwrap();
    let holder = client
        .create_session(SessionOptions::new("holder").lease(Duration::from_secs(2)))
        .await
        .unwrap();
    let guard = holder
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    (server, proxy, holder, guard)
}

// LOCK-10
#[tokio::test]
async fn a_guard_reports_the_lock_lost_when_its_session_enters_jeopardy() {
    let (_server, proxy, holder, guard) = held_through_a_proxy().await;
    assert!(guard.is_held());
    proxy.set(Link::Cut);
    tokio::time::timeout(Duration::from_secs(6), guard.lost())
        .await
        .expect("lost once the local lease runs out");
    assert!(!guard.is_held());
    assert_ne!(holder.state(), SessionState::Normal);
}

// LOCK-10: the session's state channel keeps only the latest state, so a
// jeopardy over before the waiting task ran must still be reported.
#[tokio::test]
async fn a_guard_reports_a_jeopardy_that_ended_before_its_waiter_looked() {
    let (_server, proxy, holder, guard) = held_through_a_proxy().await;
    let lost = guard.lost();
    tokio::pin!(lost);
    // Polled once, as a task waiting on it would be, then left alone.
    tokio::select! {
        biased;
        () = &mut lost => panic!("lost while the session is normal"),
        () = std::future::ready(()) => {}
    }
    let mut states = holder.watch_state();
    proxy.set(Link::Hold);
    states
        .wait_for(|s| *s == SessionState::Jeopardy)
        .await
        .unwrap();
    proxy.set(Link::Pass);
    tokio::time::timeout(
        Duration::from_secs(5),
        states.wait_for(|s| *s == SessionState::Normal),
    )
    .await
    .expect("the session comes back")
    .unwrap();
    tokio::time::timeout(Duration::from_secs(1), lost)
        .await
        .expect("the jeopardy is reported although it is over");
    assert!(guard.is_held(), "the session kept its lock");
}

// LOCK-9
#[tokio::test]
async fn dropping_a_guard_releases_the_lock() {
    let (_server, client) = setup().await;
    let a = session(&client, Duration::from_secs(30)).await;
    drop(a.try_lock("k", LockOptions::exclusive()).await.unwrap());
    let b = session(&client, Duration::ZERO).await;
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        match b.try_lock("k", LockOptions::exclusive()).await {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                assert_eq!(e.code(), Some(ErrorCode::LockHeld));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("still held: {e}"),
        }
    }
}

/// Waits until `key`'s line on the master is `waiters` long.
async fn line_of(client: &Client, key: &str, waiters: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while client.lock_info(key).await.unwrap().waiters_total != waiters {
        assert!(
            Instant::now() < deadline,
            "the line never became {waiters} long"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

// LOCK-17: a wait given up by its caller leaves the master's line, and the
// lock goes to nobody when its holder lets it go.
#[tokio::test]
async fn a_wait_given_up_by_its_caller_leaves_the_line() {
    let (_server, client) = setup().await;
    let holder = session(&client, Duration::ZERO).await;
    let guard = holder
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    let waiter = session(&client, Duration::ZERO).await;
    let wait = waiter.lock("k", LockOptions::exclusive());
    let given_up = tokio::time::timeout(Duration::from_millis(300), wait).await;
    assert!(given_up.is_err(), "the wait was still under way");
    line_of(&client, "k", 0).await;
    guard.release().await.unwrap();
    let info = client.lock_info("k").await.unwrap();
    assert!(info.holders.is_empty(), "{info:?}");
    assert!(waiter.state() == SessionState::Normal);
}

// LOCK-17: a wait granted as its caller gave up on it, the grant still on
// its way, is given back: the session does not keep a lock nobody heard it
// was granted.
#[tokio::test]
async fn a_lock_granted_to_a_wait_given_up_is_given_back() {
    let (server, client) = setup().await;
    let holder = session(&client, Duration::ZERO).await;
    let guard = holder
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    let proxy = Proxy::start(server.addr).await;
    let proxied = Client::connect(proxy.addr.to_string()).await.unwrap();
    let waiter = session(&proxied, Duration::ZERO).await;
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.lock("k", LockOptions::exclusive()).await })
    };
    line_of(&client, "k", 1).await;
    // The master grants the wait; its answer waits in the relay while the
    // caller gives up.
    proxy.set(Link::Hold);
    guard.release().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while client
        .lock_info("k")
        .await
        .unwrap()
        .holders
        .first()
        .map(|h| h.0)
        != Some(waiter.id())
    {
        assert!(Instant::now() < deadline, "the wait was never granted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    waiting.abort();
    let _ = waiting.await;
    proxy.set(Link::Pass);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !client.lock_info("k").await.unwrap().holders.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the waiter's session kept the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(waiter.state(), SessionState::Normal);
}

// LOCK-11, LOCK-10: a closing session's guards count as lost before any of
// its locks is released, so no two holders act at once.
#[tokio::test]
async fn a_closing_sessions_guards_are_lost_before_another_can_hold_the_lock() {
    let (_server, client) = setup().await;
    for round in 0..10 {
        let key = format!("k{round}");
        let a = session(&client, Duration::ZERO).await;
        let b = session(&client, Duration::ZERO).await;
        let guard_a =
            std::sync::Arc::new(a.try_lock(&key, LockOptions::exclusive()).await.unwrap());
        let waiting = {
            let (key, guard_a) = (key.clone(), guard_a.clone());
            tokio::spawn(async move {
                let guard_b = b.lock(&key, LockOptions::exclusive()).await.unwrap();
                let a_still_held = guard_a.is_held();
                drop(guard_b);
                a_still_held
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        a.close().await.unwrap();
        assert!(
            !waiting.await.unwrap(),
            "round {round}: a still held when b got it"
        );
    }
}

// EV-6, LOCK-8: a lock taken away just after it was granted is reported,
// however the reply and the event race in the client.
#[tokio::test]
async fn a_lock_taken_away_right_after_its_grant_is_reported_lost() {
    let (_server, client) = setup().await;
    let holder = session(&client, Duration::ZERO).await;
    let waiter = session(&client, Duration::ZERO).await;
    for round in 0..30 {
        let key = format!("k{round}");
        let first = holder
            .try_lock(&key, LockOptions::exclusive())
            .await
            .unwrap();
        let pending = {
            let (waiter, key) = (waiter.clone(), key.clone());
            tokio::spawn(async move { waiter.lock(&key, LockOptions::exclusive()).await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        // Back to back: the grant to the waiter, then a delete under it.
        let (released, deleted) = tokio::join!(
            first.release(),
            client.delete(&key, leasehold::DeleteOptions::default())
        );
        released.unwrap();
        deleted.unwrap();
        let guard = pending.await.unwrap().unwrap();
        if client.get(&key).await.unwrap().is_none() {
            tokio::time::timeout(Duration::from_secs(5), guard.lost())
                .await
                .unwrap_or_else(|_| panic!("round {round}: the loss was not reported"));
        }
    }
}

// LOCK-13, EV-6: a LockLost names the generation of the holding taken
// away. Held back until the session has locked the key's new node, it
// costs the old holding alone: the guard of the new one stays held.
#[tokio::test]
async fn a_late_lock_lost_costs_only_the_holding_it_names() {
    let server = start(short_lease_config()).await;
    let relay = Relay::start(server.addr).await;
    let client = Client::connect(relay.addr.to_string()).await.unwrap();
    let holder = session(&client, Duration::ZERO).await;
    let old = holder
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    relay.hold(|r| {
        matches!(r, Response::KeepAlive { events, .. }
            if events.iter().any(|e| matches!(e.kind, EventKind::LockLost { .. })))
    });
    client
        .delete("k", leasehold::DeleteOptions::default())
        .await
        .unwrap();
    let new = holder
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    assert!(new.sequencer().lock_generation > old.sequencer().lock_generation);
    tokio::time::timeout(Duration::from_secs(10), relay.held())
        .await
        .expect("the master tells of the lock the delete took away");
    let last = relay
        .pass_held()
        .iter()
        .filter_map(|r| match r {
            Response::KeepAlive { events, .. } => events.iter().map(|e| e.seq).max(),
            _ => None,
        })
        .max()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), relay.acknowledged(last))
        .await
        .expect("the client delivers the held events");
    assert!(!old.is_held(), "the holding the delete took is lost");
    assert!(
        new.is_held(),
        "the LockLost of the old holding cost the new one"
    );
}

// LOCK-2: rewriting never takes a lost lock anew.
#[tokio::test]
async fn rewriting_a_lost_lock_fails_and_takes_nothing() {
    let (_server, client) = setup().await;
    let holder = session(&client, Duration::ZERO).await;
    let guard = holder
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    guard.rewrite("v2").await.unwrap();
    assert_eq!(
        client.get("k").await.unwrap().unwrap().contents.as_deref(),
        Some(&b"v2"[..])
    );
    client
        .delete("k", leasehold::DeleteOptions::default())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .unwrap();
    let refused = guard.rewrite("v3").await.unwrap_err();
    assert!(refused.to_string().contains("lost"), "{refused}");
    assert_eq!(client.get("k").await.unwrap(), None);
}

fn held_by_another(refused: leasehold::ClientError) {
    assert_eq!(refused.code(), Some(ErrorCode::LockHeld), "{refused}");
}

// LOCK-11: a session's guards of one key share its one holding, as a
// reentrant mutex's do: releasing one leaves the lock with the other.
#[tokio::test]
async fn a_sessions_guards_of_one_key_hold_it_until_the_last_is_released() {
    let (_server, client) = setup().await;
    let a = session(&client, Duration::ZERO).await;
    let b = session(&client, Duration::ZERO).await;
    let first = a.try_lock("k", LockOptions::exclusive()).await.unwrap();
    let second = a.try_lock("k", LockOptions::exclusive()).await.unwrap();
    first.release().await.unwrap();
    assert!(second.is_held());
    held_by_another(b.try_lock("k", LockOptions::exclusive()).await.unwrap_err());
    assert!(client
        .check_sequencer(second.sequencer_bytes())
        .await
        .unwrap());
    second.release().await.unwrap();
    b.try_lock("k", LockOptions::exclusive()).await.unwrap();
}

// LOCK-4, LOCK-2: a rewrite is the holder asking again, answered at a new
// index; the guard's release names it, and frees the lock.
#[tokio::test]
async fn a_release_after_a_rewrite_frees_the_lock() {
    let (_server, client) = setup().await;
    let a = session(&client, Duration::ZERO).await;
    let b = session(&client, Duration::ZERO).await;
    let guard = a.try_lock("k", LockOptions::exclusive()).await.unwrap();
    guard.rewrite("v2").await.unwrap();
    guard.release().await.unwrap();
    b.try_lock("k", LockOptions::exclusive()).await.unwrap();
}

// LOCK-4, LOCK-11: another holder of the session's token asked for the
// lock again, so the guard's release names an older acquire and is
// refused as stale; nothing of this client awaits the later answer, so
// the release goes again naming it, and the lock is free.
#[tokio::test]
async fn a_release_refused_as_stale_goes_again_when_nothing_here_awaits_the_later_answer() {
    use leasehold_protocol::{Acquire, Request};
    use leasehold_tests::raw::RawConnection;

    let (server, client) = setup().await;
    let a = session(&client, Duration::ZERO).await;
    let b = session(&client, Duration::ZERO).await;
    let guard = a.try_lock("k", LockOptions::exclusive()).await.unwrap();
    let (mut elsewhere, _) = RawConnection::open(server.addr).await;
    let again = Request::Acquire(Acquire {
        key: "k".into(),
        session: a.token(),
        mode: LockMode::Exclusive,
        contents: None,
        wait_ms: None,
        transient: false,
    });
    let told = elsewhere.call(again).await;
    assert!(matches!(told, Ok(Response::Acquired { .. })), "{told:?}");
    guard.release().await.unwrap();
    b.try_lock("k", LockOptions::exclusive()).await.unwrap();
}

/// The locks at or below `prefix`, one page of at most `limit`, after
/// `after`, as the master lists them (`LOCK-16`).
async fn locks_page(
    server: &TestServer,
    prefix: &str,
    after: Option<&str>,
    limit: u32,
) -> (Vec<leasehold::LockListing>, bool) {
    let (mut conn, _) = leasehold_tests::raw::RawConnection::open(server.addr).await;
    let list = leasehold_protocol::Request::ListLocks {
        prefix: prefix.into(),
        after: after.map(String::from),
        limit,
    };
    match conn.call(list).await {
        Ok(Response::Locks { locks, more }) => (locks, more),
        other => panic!("expected a page of locks, got {other:?}"),
    }
}

// LOCK-16: a listed lock shows its holder by session and name, how long
// it has held it, and its waiters first in line first.
#[tokio::test]
async fn a_listed_lock_shows_its_holder_time_held_and_waiters_in_line() {
    let (_server, client) = setup().await;
    let named = |name: &str| SessionOptions::new(name).lock_delay(Duration::ZERO);
    let alpha = client.create_session(named("alpha")).await.unwrap();
    let _held = alpha
        .try_lock("jobs/a", LockOptions::exclusive())
        .await
        .unwrap();
    let mut waiting = Vec::new();
    for name in ["beta", "gamma"] {
        let session = client.create_session(named(name)).await.unwrap();
        waiting.push(tokio::spawn(async move {
            let _ = session.lock("jobs/a", LockOptions::exclusive()).await;
            session
        }));
        while client.lock_info("jobs/a").await.unwrap().waiters_total < waiting.len() as u64 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let locks = client.list_locks("jobs/").await.unwrap();
    assert_eq!(locks.len(), 1, "{locks:?}");
    let lock = &locks[0];
    assert_eq!(lock.key, "jobs/a");
    assert_eq!(lock.holders.len(), 1);
    assert_eq!(lock.holders[0].session, alpha.id());
    assert_eq!(lock.holders[0].name, "alpha");
    assert_eq!(lock.holders[0].mode, LockMode::Exclusive);
    assert!(lock.holders[0].held_ms.is_some());
    let names: Vec<&str> = lock.waiters.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["beta", "gamma"]);
    assert_eq!(lock.waiters_total, 2);
    assert_eq!(lock.delay_remaining_ms, None);
    let stat = client.stat("jobs/a").await.unwrap().unwrap();
    assert_eq!(lock.lock_generation, stat.lock_generation);
}

// LOCK-16, LOCK-2: asking again for a lock one holds does not restart the
// time it has held it.
#[tokio::test]
async fn asking_again_does_not_restart_the_time_held() {
    let (_server, client) = setup().await;
    let a = session(&client, Duration::ZERO).await;
    let first = a
        .try_lock("jobs/t", LockOptions::exclusive())
        .await
        .unwrap();
    // The master's clock moves at least as far as ours between the grant's
    // answer and the listing's arrival.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let again = a
        .try_lock("jobs/t", LockOptions::exclusive())
        .await
        .unwrap();
    let locks = client.list_locks("jobs/t").await.unwrap();
    let held = locks[0].holders[0].held_ms.expect("a time held");
    assert!(held >= 200, "held {held} ms");
    drop((first, again));
}

// LOCK-16, LOCK-6: a lock in lock-delay is listed though nobody holds it
// or waits, with the lock-delay left.
#[tokio::test]
async fn a_lock_in_lock_delay_is_listed_with_no_holder() {
    let (_server, client) = setup().await;
    let options = SessionOptions::new("delayed")
        .lease(Duration::from_millis(500))
        .lock_delay(Duration::from_secs(60));
    let holder = client.create_session(options).await.unwrap();
    let guard = holder
        .try_lock("jobs/d", LockOptions::exclusive())
        .await
        .unwrap();
    std::mem::forget(guard);
    // Ended by its lease, which lock-delay follows (a destroy would not).
    holder.detach().await;
    let lock = loop {
        let locks = client.list_locks("jobs/d").await.unwrap();
        if locks.first().is_some_and(|l| l.holders.is_empty()) {
            break locks[0].clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let left = lock.delay_remaining_ms.expect("in lock-delay");
    assert!(left > 0 && left <= 60_000, "{lock:?}");
    assert!(lock.waiters.is_empty());
}

// LOCK-16: a page lists the locks after its cursor in key order, at most
// `limit`, and says whether more follow; the prefix is compared as a
// string.
#[tokio::test]
async fn locks_are_listed_a_page_at_a_time_in_key_order() {
    let (server, client) = setup().await;
    let a = session(&client, Duration::ZERO).await;
    let mut guards = Vec::new();
    for key in ["jobs/c", "jobs/a", "jobs/b", "jobsx", "other"] {
        guards.push(a.try_lock(key, LockOptions::exclusive()).await.unwrap());
    }
    let (first, more) = locks_page(&server, "jobs/", None, 2).await;
    let keys: Vec<&str> = first.iter().map(|l| l.key.as_str()).collect();
    assert_eq!((keys, more), (vec!["jobs/a", "jobs/b"], true));
    let (rest, more) = locks_page(&server, "jobs/", Some("jobs/b"), 2).await;
    let keys: Vec<&str> = rest.iter().map(|l| l.key.as_str()).collect();
    assert_eq!((keys, more), (vec!["jobs/c"], false));
    let all = client.list_locks("").await.unwrap();
    assert_eq!(all.len(), 5);
}

// LOCK-16: a shared lock with more holders than a listing shows lists the
// first 64 and says how many hold it, so that one listing always fits its
// page.
#[tokio::test]
async fn a_listing_shows_the_first_holders_of_a_crowded_shared_lock_and_counts_all() {
    let (_server, client) = setup().await;
    let mut held = Vec::new();
    for n in 0..70 {
        let session = client
            .create_session(SessionOptions::new(format!("reader {n}")))
            .await
            .unwrap();
        let guard = session
            .try_lock("jobs/shared", LockOptions::shared())
            .await
            .unwrap();
        held.push((session, guard));
    }
    let locks = client.list_locks("jobs/shared").await.unwrap();
    assert_eq!(locks[0].holders.len(), 64);
    assert_eq!(locks[0].holders_total, 70);
}
