//! State survives a restart of the master on its data directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use leasehold::{Client, ErrorCode, LockOptions, PutOptions, SessionOptions, SessionState};
use leasehold_server::Config;
use leasehold_tests::server::{short_lease_config, start, start_on};
use tokio::time::Instant;

fn data_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "leasehold-durability-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn durable(dir: &Path) -> Config {
    Config {
        data_dir: Some(dir.to_path_buf()),
        ..short_lease_config()
    }
}

// STORE-1, STORE-2, FO-1
#[tokio::test]
async fn acknowledged_writes_sessions_and_locks_survive_a_restart_under_a_new_epoch() {
    let dir = data_dir("survive");
    let server = start(durable(&dir)).await;
    let client = Client::connect(server.addr.to_string()).await.unwrap();
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
    let id = session.detach().await;
    std::mem::forget(guard);
    drop(client);
    server.shutdown().await.unwrap();

    let server = start(durable(&dir)).await;
    let client = Client::connect(server.addr.to_string()).await.unwrap();
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
    let _ = std::fs::remove_dir_all(&dir);
}

// FO-2, LOCK-6: a holder that never comes back loses its lock after a full
// lease from the restart plus lock-delay; the next holder gets a higher
// generation.
#[tokio::test]
async fn a_holder_that_never_returns_loses_its_lock_after_lease_and_lock_delay() {
    let dir = data_dir("gone");
    let lease = Duration::from_millis(800);
    let lock_delay = Duration::from_millis(500);
    let server = start(durable(&dir)).await;
    let client = Client::connect(server.addr.to_string()).await.unwrap();
    let gone = client
        .create_session(
            SessionOptions::new("gone")
                .lease(lease)
                .lock_delay(lock_delay),
        )
        .await
        .unwrap();
    let guard = gone.try_lock("k", LockOptions::exclusive()).await.unwrap();
    assert_eq!(guard.sequencer().lock_generation, 1);
    std::mem::forget(guard);
    gone.detach().await;
    drop(client);
    server.shutdown().await.unwrap();

    let server = start(durable(&dir)).await;
    let restarted = Instant::now();
    let client = Client::connect(server.addr.to_string()).await.unwrap();
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
    assert_eq!(guard.sequencer().lock_generation, 2);
    drop(guard);
    next.close().await.unwrap();
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

// FO-1, KA-6: a client holding a lock across a restart keeps it, with the
// same sequencer.
#[tokio::test]
async fn a_client_keeps_its_lock_and_sequencer_across_a_restart() {
    let dir = data_dir("keep");
    let server = start(durable(&dir)).await;
    let addr = server.addr;
    let client = Client::connect(addr.to_string()).await.unwrap();
    let session = client
        .create_session(
            SessionOptions::new("keeper")
                .lease(Duration::from_secs(2))
                .grace(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    let guard = session
        .try_lock("k", LockOptions::exclusive())
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
    tokio::time::sleep(Duration::from_secs(3)).await; // past one lease
    assert_ne!(session.state(), SessionState::Expired);
    let checker = Client::connect(addr.to_string()).await.unwrap();
    assert!(checker
        .check_sequencer(guard.sequencer_bytes())
        .await
        .unwrap());
    assert!(checker.session_info(session.id()).await.is_ok());
    guard.release().await.unwrap();
    session.close().await.unwrap();
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

// STORE-3
#[tokio::test]
async fn a_foreign_data_directory_is_refused() {
    let dir = data_dir("foreign");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("precious.txt"), "not ours").unwrap();
    let server = start(durable(&dir)).await;
    let ended = server.shutdown().await.unwrap_err();
    assert!(
        ended.to_string().contains("not a Leasehold data directory"),
        "{ended}"
    );
    assert!(dir.join("precious.txt").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
