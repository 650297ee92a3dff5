//! State survives a restart of the master on its data directory.

use std::path::Path;
use std::time::Duration;

use leasehold::{
    Change, Client, ErrorCode, LockGuard, LockOptions, PutOptions, SessionOptions, SessionState,
    SubscribeOptions, SubscriptionEvent,
};
use leasehold_server::Config;
use leasehold_tests::fixture::TempDir;
use leasehold_tests::server::{short_lease_config, start, start_on, Setup};
use leasehold_tests::states::StateLog;
use tokio::time::Instant;

fn durable(dir: &TempDir) -> Setup {
    Setup::durable(dir.path(), short_lease_config())
}

// STORE-1, STORE-2, FO-1
#[tokio::test]
async fn acknowledged_writes_sessions_and_locks_survive_a_restart_under_a_new_epoch() {
    let dir = TempDir::new("durability-survive");
    let server = start(durable(&dir)).await;
    let client = server.client().await;
    let first_epoch = client.epoch().await.unwrap();
    let index = client
        .put("svc/db", "10.0.0.5", PutOptions::new().flags(3))
        .await
        .unwrap();
    let session = client
        .create_session(SessionOptions::new("holder").lease(Duration::from_secs(30)))
        .await
        .unwrap();
    let guard = session
        .try_lock("svc/leader", LockOptions::exclusive().contents("me"))
        .await
        .unwrap();
    let sequencer = guard.sequencer_bytes().to_vec();
    let id = session.detach().await.id;
    std::mem::forget(guard);
    drop(client);
    server.shutdown().await.unwrap();

    let server = start(durable(&dir)).await;
    let client = server.client().await;
    assert!(client.epoch().await.unwrap() > first_epoch);
    let node = client
        .get("svc/db")
        .await
        .unwrap()
        .expect("the write survived");
    assert_eq!(node.contents.as_deref(), Some(&b"10.0.0.5"[..]));
    assert_eq!((node.stat.modify_index, node.stat.flags), (index, 3));
    let info = client.session_info(id).await.expect("the session survived");
    assert_eq!(info.name, "holder");
    assert!(client.check_sequencer(&sequencer).await.unwrap());
    let leader = client.leader("svc/leader").await.unwrap().unwrap();
    assert_eq!(leader.session, id);
    server.shutdown().await.unwrap();
}

// FO-2, LOCK-6: a holder that never comes back loses its lock after a full
// lease from the restart plus lock-delay; the next holder gets a higher
// generation.
#[tokio::test]
async fn a_holder_that_never_returns_loses_its_lock_after_lease_and_lock_delay() {
    let dir = TempDir::new("durability-gone");
    let lease = Duration::from_millis(800);
    let lock_delay = Duration::from_millis(500);
    let server = start(durable(&dir)).await;
    let client = server.client().await;
    let gone = client
        .create_session(
            SessionOptions::new("gone")
                .lease(lease)
                .lock_delay(lock_delay),
        )
        .await
        .unwrap();
    let guard = gone.try_lock("k", LockOptions::exclusive()).await.unwrap();
    let first = guard.sequencer().lock_generation;
    std::mem::forget(guard);
    gone.detach().await;
    drop(client);
    server.shutdown().await.unwrap();

    let server = start(durable(&dir)).await;
    let restarted = Instant::now();
    let client = server.client().await;
    let next = client
        .create_session(SessionOptions::new("next").lock_delay(Duration::ZERO))
        .await
        .unwrap();
    let refused = next
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::LockHeld), "{refused}");
    let guard = next.lock("k", LockOptions::exclusive()).await.unwrap();
    let waited = restarted.elapsed();
    assert!(
        waited >= lease + lock_delay - Duration::from_millis(50),
        "{waited:?}"
    );
    assert_eq!(guard.sequencer().lock_generation, first + 1);
    drop(guard);
    next.close().await.unwrap();
    server.shutdown().await.unwrap();
}

// FO-1, FO-6, KA-6: a client holding a lock across a restart keeps it, with
// the same sequencer; the application sees only the fail-over; its
// subscription is made again and says events may have been lost.
#[tokio::test]
async fn a_client_keeps_its_lock_and_sequencer_across_a_restart() {
    let dir = TempDir::new("durability-keep");
    let server = start(durable(&dir)).await;
    let addr = server.addr;
    let client = Client::connect(addr.to_string()).await.unwrap();
    let session = client
        .create_session(
            SessionOptions::new("keeper")
                .lease(Duration::from_secs(5))
                .grace(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    let guard = session
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    let states = StateLog::record(&session);
    let mut sub = session
        .subscribe("watched", SubscribeOptions::prefix())
        .await
        .unwrap();
    server.shutdown().await.unwrap();
    let server = start_on(addr, durable(&dir)).await;

    // The client finds the new master and its epoch; its lease goes on.
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.epoch().await.map_or(true, |e| e < 2) {
        assert!(Instant::now() < deadline, "the client reconnects");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The fail-over state, then the loss of events once the subscription
    // is back on the new master (FO-6).
    let mut heard = Vec::new();
    while !heard.contains(&SubscriptionEvent::EventsLost) {
        assert!(heard.len() < 4, "no EventsLost: {heard:?}");
        let next = tokio::time::timeout(Duration::from_secs(5), sub.next()).await;
        heard.push(next.unwrap().unwrap());
    }
    assert_eq!(
        heard.first(),
        Some(&SubscriptionEvent::Session(SessionState::Failover)),
        "{heard:?}"
    );
    tokio::time::sleep(Duration::from_secs(6)).await; // past one lease
    assert_ne!(session.state(), SessionState::Expired);
    assert_eq!(
        states.states(),
        [SessionState::Failover, SessionState::Normal]
    );
    // The subscription was made again on the new master.
    let writer = Client::connect(addr.to_string()).await.unwrap();
    writer
        .put("watched/x", "1", PutOptions::new())
        .await
        .unwrap();
    let mut heard = Vec::new();
    while !matches!(heard.last(), Some(SubscriptionEvent::Changed { .. })) {
        let next = tokio::time::timeout(Duration::from_secs(5), sub.next()).await;
        heard.push(next.expect("the write is heard").unwrap());
    }
    assert!(
        matches!(
            heard.last(),
            Some(SubscriptionEvent::Changed { key, change: Change::Created, .. })
                if key == "watched/x"
        ),
        "{heard:?}"
    );
    let checker = Client::connect(addr.to_string()).await.unwrap();
    assert!(checker
        .check_sequencer(guard.sequencer_bytes())
        .await
        .unwrap());
    assert!(checker.session_info(session.id()).await.is_ok());
    guard.release().await.unwrap();
    session.close().await.unwrap();
    server.shutdown().await.unwrap();
}

// STORE-3
#[tokio::test]
async fn a_foreign_data_directory_is_refused() {
    let dir = TempDir::new("durability-foreign");
    std::fs::write(dir.join("precious.txt"), "not ours").unwrap();
    let server = start(durable(&dir)).await;
    let ended = server.shutdown().await.unwrap_err();
    assert!(
        ended.to_string().contains("not a Leasehold data directory"),
        "{ended}"
    );
    assert!(dir.join("precious.txt").exists());
}

// FO-5, ERR-14: until a recovered session acknowledges the fail-over
// event, only its KeepAlives are served.
#[tokio::test]
async fn a_recovered_session_is_served_only_keepalives_until_it_acknowledges_the_failover() {
    use leasehold_protocol::{Acquire, EventKind, KeepAlive, LockMode, Request, Response};
    use leasehold_tests::raw::RawConnection;

    let dir = TempDir::new("durability-gate");
    let server = start(durable(&dir)).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let session = conn.create_session(Duration::from_secs(30)).await;
    drop(conn);
    server.shutdown().await.unwrap();

    let server = start(durable(&dir)).await;
    let (mut conn, welcome) = RawConnection::open(server.addr).await;
    let acquire = Request::Acquire(Acquire {
        key: "k".into(),
        session,
        mode: LockMode::Exclusive,
        contents: None,
        wait_ms: None,
        transient: false,
    });
    let refused = conn.call(acquire.clone()).await.unwrap_err();
    assert!(
        matches!(refused.code, ErrorCode::FailoverInProgress { retry_after_ms } if retry_after_ms > 0),
        "{refused:?}"
    );
    // Reads and sessionless writes are served meanwhile.
    conn.put("free", "x").await;
    let keepalive = |acked_seq| {
        Request::KeepAlive(KeepAlive {
            session,
            epoch: welcome.epoch,
            acked_seq,
            hold: false,
        })
    };
    let Ok(Response::KeepAlive { events, .. }) = conn.call(keepalive(0)).await else {
        panic!("a KeepAlive is served");
    };
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].kind,
        EventKind::Failover {
            epoch: welcome.epoch
        }
    );
    assert!(
        conn.call(acquire.clone()).await.is_err(),
        "not yet acknowledged"
    );
    conn.call(keepalive(events[0].seq)).await.unwrap();
    assert!(matches!(
        conn.call(acquire).await,
        Ok(Response::Acquired { .. })
    ));
    server.shutdown().await.unwrap();
}

// FO-2, FO-6, CS-4: a master that is back within the client's grace period
// finds the session in jeopardy, which goes safe and normal again, locks
// and all.
#[tokio::test]
async fn a_restart_longer_than_the_lease_but_within_grace_is_jeopardy_then_safe() {
    let dir = TempDir::new("durability-grace");
    let server = start(durable(&dir)).await;
    let addr = server.addr;
    let client = Client::connect(addr.to_string()).await.unwrap();
    let session = client
        .create_session(
            SessionOptions::new("patient")
                .lease(Duration::from_secs(3))
                .grace(Duration::from_secs(15)),
        )
        .await
        .unwrap();
    let guard = session
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    let states = StateLog::record(&session);
    server.shutdown().await.unwrap();
    let mut watch = session.watch_state();
    tokio::time::timeout(
        Duration::from_secs(10),
        watch.wait_for(|s| *s == SessionState::Jeopardy),
    )
    .await
    .expect("jeopardy")
    .unwrap();
    let server = start_on(addr, durable(&dir)).await;
    tokio::time::timeout(
        Duration::from_secs(5),
        watch.wait_for(|s| *s == SessionState::Normal),
    )
    .await
    .expect("back to normal")
    .unwrap();
    assert_eq!(
        states.states(),
        [
            SessionState::Jeopardy,
            SessionState::Safe,
            SessionState::Normal
        ]
    );
    let checker = Client::connect(addr.to_string()).await.unwrap();
    assert!(checker
        .check_sequencer(guard.sequencer_bytes())
        .await
        .unwrap());
    assert!(guard.is_held());
    server.shutdown().await.unwrap();
}

// STORE-2: snapshots taken while serving keep the log short and lose
// nothing.
#[tokio::test]
async fn snapshots_taken_while_serving_keep_the_log_short_and_lose_nothing() {
    let dir = TempDir::new("durability-compact");
    let config = Setup::durable(
        dir.path(),
        Config {
            compact_every: 10,
            ..short_lease_config()
        },
    );
    let server = start(config.clone()).await;
    let client = server.client().await;
    for n in 0..35 {
        client
            .put(&format!("n/{n}"), n.to_string(), PutOptions::new())
            .await
            .unwrap();
    }
    drop(client);
    server.shutdown().await.unwrap();
    // 35 writes (about 21 bytes a record), a snapshot every 10 records: at
    // most 9 left in the log, against about 770 bytes without snapshots.
    let log = std::fs::metadata(dir.join("log")).unwrap().len();
    assert!(log < 400, "the log holds {log} bytes");

    let server = start(config).await;
    let client = server.client().await;
    for n in 0..35 {
        let node = client.get(&format!("n/{n}")).await.unwrap().unwrap();
        assert_eq!(node.contents, Some(n.to_string().into_bytes()));
    }
    server.shutdown().await.unwrap();
}

// FO-6: every subscription is made again on the new master, each hearing
// its own key.
#[tokio::test]
async fn every_subscription_is_made_again_after_a_restart() {
    let dir = TempDir::new("durability-subs");
    let server = start(durable(&dir)).await;
    let addr = server.addr;
    let client = Client::connect(addr.to_string()).await.unwrap();
    let session = client
        .create_session(SessionOptions::new("w").lease(Duration::from_secs(5)))
        .await
        .unwrap();
    let mut subs = Vec::new();
    for n in 0..6 {
        let options = SubscribeOptions::exact().mask(leasehold::event_mask::CONTENTS);
        subs.push(session.subscribe(&format!("s{n}"), options).await.unwrap());
    }
    server.shutdown().await.unwrap();
    let server = start_on(addr, durable(&dir)).await;
    for sub in &mut subs {
        let lost = tokio::time::timeout(Duration::from_secs(5), sub.next()).await;
        assert_eq!(lost.unwrap(), Some(SubscriptionEvent::EventsLost));
    }
    // The re-subscriptions are made in the background: write each key
    // until its stream hears of it.
    let writer = Client::connect(addr.to_string()).await.unwrap();
    for (n, sub) in subs.iter_mut().enumerate() {
        let key = format!("s{n}");
        let mut heard = false;
        for attempt in 0..20 {
            writer
                .put(&key, attempt.to_string(), PutOptions::new())
                .await
                .unwrap();
            if let Ok(event) = tokio::time::timeout(Duration::from_millis(250), sub.next()).await {
                let Some(SubscriptionEvent::Changed { key: got, .. }) = event else {
                    panic!("{key}: unexpected {event:?}");
                };
                assert_eq!(got, key, "each stream hears its own key");
                heard = true;
                break;
            }
        }
        assert!(heard, "{key} is subscribed again");
    }
    server.shutdown().await.unwrap();
}

/// Bytes of every file in `dir` but the fixed reserve (`STORE-5`).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != "reserve")
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum()
}

/// A durable master on `dir` that compacts once its log passes 256 KiB.
fn compacting_early(dir: &TempDir) -> Setup {
    Setup::durable(
        dir.path(),
        Config {
            compact_min_log_bytes: 256 * 1024,
            ..short_lease_config()
        },
    )
}

// STORE-2: rewriting one large node many times leaves a directory a small
// multiple of the live state, not of everything ever written.
#[tokio::test]
async fn rewriting_one_large_node_keeps_the_directory_near_the_live_state() {
    let dir = TempDir::new("durability-rewrites");
    let server = start(compacting_early(&dir)).await;
    let client = server.client().await;
    let contents = vec![b'x'; 64 * 1024];
    for _ in 0..200 {
        client
            .put("big", contents.clone(), leasehold::PutOptions::new())
            .await
            .unwrap();
    }
    drop(client);
    server.shutdown().await.unwrap();
    // 12.5 MiB were written; the live state is one 64 KiB node.
    let on_disk = dir_bytes(dir.path());
    assert!(
        on_disk < 1024 * 1024,
        "the directory holds {} KiB",
        on_disk / 1024
    );
    // And nothing was lost to the compactions.
    let server = start(durable(&dir)).await;
    let client = server.client().await;
    let node = client.get("big").await.unwrap().expect("the node");
    assert_eq!(node.stat.content_generation, 200);
    assert_eq!(node.contents.unwrap(), contents);
    drop(client);
    server.shutdown().await.unwrap();
}

// STORE-2: deleting most of the state compacts the directory down to what
// is left, without waiting for four times the old snapshot of more log.
#[tokio::test]
async fn deleting_most_of_the_state_shrinks_the_directory_to_what_is_left() {
    let dir = TempDir::new("durability-deletes");
    let server = start(compacting_early(&dir)).await;
    let client = server.client().await;
    let contents = vec![b'x'; 64 * 1024];
    for n in 0..64 {
        let key = format!("big/{n}");
        client
            .put(&key, contents.clone(), leasehold::PutOptions::new())
            .await
            .unwrap();
    }
    client
        .put("kept", b"small".to_vec(), leasehold::PutOptions::new())
        .await
        .unwrap();
    for n in 0..64 {
        client
            .delete(&format!("big/{n}"), leasehold::DeleteOptions::new())
            .await
            .unwrap();
    }
    drop(client);
    server.shutdown().await.unwrap();
    // 4 MiB were written and deleted; a few hundred bytes are live.
    let on_disk = dir_bytes(dir.path());
    assert!(
        on_disk < 512 * 1024,
        "the directory holds {} KiB",
        on_disk / 1024
    );
    let server = start(durable(&dir)).await;
    let client = server.client().await;
    assert_eq!(
        client.get("kept").await.unwrap().unwrap().contents.unwrap(),
        b"small"
    );
    assert!(client.get("big/0").await.unwrap().is_none());
    drop(client);
    server.shutdown().await.unwrap();
}

/// A session on `addr` with a lease long enough to ride through a restart.
async fn waiting_session(client: &Client, name: &str) -> leasehold::Session {
    let options = SessionOptions::new(name)
        .lease(Duration::from_secs(5))
        .grace(Duration::from_secs(20));
    client.create_session(options).await.unwrap()
}

// LOCK-15, FO-4: a lock's waiter rides through a restart of the master:
// its wait does not end with its connection; it asks again once its
// session is back, and gets the lock when the holder lets go. (That it
// keeps its place when it asks again before its turn is a master's test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_rides_through_a_restart_and_gets_the_lock() {
    let dir = TempDir::new("durability-waiter");
    let server = start(durable(&dir)).await;
    let addr = server.addr;
    let client = Client::connect(addr.to_string()).await.unwrap();
    let holder = waiting_session(&client, "holder").await;
    let guard = holder
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    let waiter_client = Client::connect(addr.to_string()).await.unwrap();
    let waiter = waiting_session(&waiter_client, "waiter").await;
    let waits = {
        let waiter = waiter.clone();
        let options = LockOptions::exclusive().timeout(Duration::from_secs(60));
        tokio::spawn(async move { waiter.lock("k", options).await })
    };
    // In line before the restart.
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.lock_info("k").await.unwrap().waiters.is_empty() {
        assert!(Instant::now() < deadline, "the waiter never got in line");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.shutdown().await.unwrap();
    let server = start_on(addr, durable(&dir)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while holder.state() != SessionState::Normal || waiter.state() != SessionState::Normal {
        assert!(Instant::now() < deadline, "the sessions came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!waits.is_finished(), "the wait ended with the connection");
    guard.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(20), waits)
        .await
        .expect("the wait ends")
        .unwrap()
        .expect("the waiter gets the lock, not an error");
    assert!(got.is_held());
    drop(server);
}

/// A session holding the lock of `k` on a master over `dir`, which has
/// just stopped: its address, the client, the session and the guard.
async fn holding_k_as_the_master_stops(
    dir: &TempDir,
) -> (std::net::SocketAddr, Client, leasehold::Session, LockGuard) {
    let server = start(durable(dir)).await;
    let addr = server.addr;
    let client = Client::connect(addr.to_string()).await.unwrap();
    let holder = waiting_session(&client, "holder").await;
    let guard = holder
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    server.shutdown().await.unwrap();
    (addr, client, holder, guard)
}

// LOCK-15, LOCK-4: a release asked for while the master is down is not
// lost: it goes once the session is back, and the lock is free at once
// for another session (no lock-delay: released, not expired).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_asked_for_while_the_master_is_down_is_carried_out_once_it_is_back() {
    let dir = TempDir::new("durability-release");
    let (addr, _client, _holder, guard) = holding_k_as_the_master_stops(&dir).await;
    let release = tokio::spawn(guard.release());
    // Tries against no master at all come first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!release.is_finished(), "{:?}", release.await);
    let server = start_on(addr, durable(&dir)).await;
    tokio::time::timeout(Duration::from_secs(20), release)
        .await
        .expect("the release ends")
        .unwrap()
        .expect("the release is carried out, not an error");
    let other = Client::connect(addr.to_string()).await.unwrap();
    let next = waiting_session(&other, "next").await;
    let taken = next.try_lock("k", LockOptions::exclusive()).await;
    assert!(taken.is_ok(), "{:?}", taken.err());
    drop(server);
}

// CS-8, FO-5, LOCK-11: a session closed just after its master restarted,
// before its KeepAlives noticed, acknowledges the new master's fail-over
// event first, so that master serves its release and the lock passes at
// once, not after lock-delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_closed_before_it_notices_a_restart_hands_its_lock_on_at_once() {
    let dir = TempDir::new("durability-close-after-failover");
    let (addr, _client, holder, _guard) = holding_k_as_the_master_stops(&dir).await;
    let server = start_on(addr, durable(&dir)).await;
    // Its lease outlives the restart: it is still Normal, and a close now
    // most likely comes before its KeepAlives reach the new master.
    assert_eq!(holder.state(), SessionState::Normal);
    holder.close().await.unwrap();
    let other = Client::connect(addr.to_string()).await.unwrap();
    let next = waiting_session(&other, "next").await;
    let taken = next.try_lock("k", LockOptions::exclusive()).await;
    assert!(taken.is_ok(), "{:?}", taken.err());
    drop(server);
}

// LOCK-11: a release that fails while its session closes ends as the
// close does: a close that could not reach the master gave nothing back,
// and the release says so rather than report the lock given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_waiting_on_a_close_that_failed_fails_too() {
    let dir = TempDir::new("durability-release-close");
    let (_addr, _client, holder, guard) = holding_k_as_the_master_stops(&dir).await;
    let release = tokio::spawn(guard.release());
    let closed = holder.close().await;
    assert!(closed.is_err(), "nothing to close it on: {closed:?}");
    let released = tokio::time::timeout(Duration::from_secs(20), release)
        .await
        .expect("the release ends with the close")
        .unwrap();
    assert!(released.is_err(), "{released:?}");
}

// LOCK-15: a candidate's campaign and a semaphore's waiter ride through a
// restart too, and lead, or take a slot, once the holder lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_and_a_semaphore_waiter_ride_through_a_restart() {
    let dir = TempDir::new("durability-recipes");
    let server = start(durable(&dir)).await;
    let addr = server.addr;
    let client = Client::connect(addr.to_string()).await.unwrap();
    let leader = waiting_session(&client, "leader").await;
    let term = leasehold::Election::new(&leader, "svc/leader")
        .campaign("one")
        .await
        .unwrap();
    let slot = leasehold::Semaphore::new(&leader, "pool", 1)
        .acquire("one", None)
        .await
        .unwrap();
    let other_client = Client::connect(addr.to_string()).await.unwrap();
    let other = waiting_session(&other_client, "other").await;
    let campaign = {
        let other = other.clone();
        tokio::spawn(async move {
            leasehold::Election::new(&other, "svc/leader")
                .campaign("two")
                .await
        })
    };
    let semaphore = {
        let other = other.clone();
        tokio::spawn(async move {
            leasehold::Semaphore::new(&other, "pool", 1)
                .acquire("two", None)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.shutdown().await.unwrap();
    let server = start_on(addr, durable(&dir)).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while leader.state() != SessionState::Normal || other.state() != SessionState::Normal {
        assert!(Instant::now() < deadline, "the sessions came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    term.resign().await.unwrap();
    slot.release().await.unwrap();
    let led = tokio::time::timeout(Duration::from_secs(20), campaign)
        .await
        .expect("the campaign ends")
        .unwrap()
        .expect("the candidate leads, not an error");
    assert!(led.is_leader());
    let took = tokio::time::timeout(Duration::from_secs(20), semaphore)
        .await
        .expect("the wait for a slot ends")
        .unwrap()
        .expect("the waiter takes the slot, not an error");
    assert!(took.is_held());
    drop(server);
}

// LOCK-15: a try sent while the master is down is not failed for the lost
// connection: once the session is back it asks again, within a request
// timeout, and gets a definite answer (here: the lock, which is free).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_lock_sent_while_the_master_restarts_gets_a_definite_answer() {
    let dir = TempDir::new("durability-try");
    let server = start(durable(&dir)).await;
    let addr = server.addr;
    let client = Client::connect(addr.to_string()).await.unwrap();
    let session = waiting_session(&client, "trier").await;
    server.shutdown().await.unwrap();
    let tries = {
        let session = session.clone();
        tokio::spawn(async move { session.try_lock("k", LockOptions::exclusive()).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!tries.is_finished(), "the try ended with the connection");
    let server = start_on(addr, durable(&dir)).await;
    let got = tokio::time::timeout(Duration::from_secs(20), tries)
        .await
        .expect("the try ends")
        .unwrap()
        .expect("the lock, not an error");
    assert!(got.is_held());
    drop(server);
}
