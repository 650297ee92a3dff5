//! What an earlier Leasehold left is read and served: format 4, 5 and 6
//! data directories are carried forward (SPEC `STORE-6`), and protocol 7,
//! 8 and 9 clients are served (`HS-2`). The fixtures, in `tests/fixtures/`, were written by
//! that Leasehold; their README says what each holds.

use std::path::Path;

use leasehold_protocol::{
    ClientFrame, ErrorCode, KeepAlive, LockListing, Request, Response, ServerFrame, SessionToken,
    Welcome,
};
use leasehold_server::Config;
use leasehold_tests::fixture::TempDir;
use leasehold_tests::raw::RawConnection;
use leasehold_tests::server::{start, Setup, TestServer};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures");

/// Session `a` of `data-format-4`: it holds `locks/x` (in the snapshot)
/// and `locks/y` (acquired in the log).
const A: &str = "5551904d-9765-48ad-8dcd-c25ed9ee2edb:68c39c42937ac1dc5bf05918191cee8b";
/// Session `b`: it holds `locks/s` shared, with `c`.
const B: &str = "023ead52-d511-420f-a642-1e853e88b8d8:442ddeec91cfeeccebbb17cc14c3d589";
const A_LOCKS_X: &str = "01076c6f636b732f78000605105551904d976548ad8dcdc25ed9ee2edb";
const A_LOCKS_Y: &str = "01076c6f636b732f79001615105551904d976548ad8dcdc25ed9ee2edb";
const B_LOCKS_S: &str = "01076c6f636b732f7301070610023ead52d511420fa6421e853e88b8d8";

/// Sessions of `data-format-5`: `a` holds `locks/x`, `b` `locks/s`
/// shared.
const A5: &str = "0e3204e9-90b0-42c4-acc3-4f3f715ceb7e:2eb631ec7b693aa4f1a5413e7f4467ec";
const A5_LOCKS_X: &str = "01076c6f636b732f78000605100e3204e990b042c4acc34f3f715ceb7e";
const B5_LOCKS_S: &str = "01076c6f636b732f7301070610f33d6da7210b4f6b96b6e0d269d84746";

/// Sessions of `data-format-6`: `a` holds `locks/x`, `b` `locks/s`
/// shared; a token for `reader`, who may read `svc/`.
const A6: &str = "c720d0f9-383d-4daa-81b0-17763520a33d:a1ba4de7069575ba5f9dfaf03cd656b2";
const A6_LOCKS_X: &str = "01076c6f636b732f7800060510c720d0f9383d4daa81b017763520a33d";
const B6_LOCKS_S: &str = "01076c6f636b732f7301070610c6a81c016966457f83c0a3d3a8760670";
const READER_6: &str = "lht1_1_5c4b22bb04da65c6a1e06e370d177d9ddd85bf97f5e7ec1f45f451d1073f01fb";

/// A protocol 9 client's `Hello`, and its `LockInfo { key: "locks/x" }`
/// as request 9, as it sent them (the frames' bodies).
const HELLO_9: &str = "004c45415345484c4409";
const LOCK_INFO_9: &str = "010916076c6f636b732f78";

/// A protocol 8 client's `Hello`, and its `Get { key: "svc/db" }` as
/// request 8, as it sent them (the frames' bodies).
const HELLO_8: &str = "004c45415345484c4408";
const GET_8: &str = "010805067376632f646200";

/// A protocol 7 client's `Hello`, as it sent it (the frame's body).
const HELLO_7: &str = "004c45415345484c4407";
/// Its `Release { key: "locks/x", session: a }`, request id 7.
const RELEASE_7: &str =
    "01070b076c6f636b732f78105551904d976548ad8dcdc25ed9ee2edb68c39c42937ac1dc5bf05918191cee8b";

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// A length-prefixed frame of `body`.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(body);
    frame
}

/// A copy of the fixture directory `name` in a directory of its own.
fn copied(name: &str) -> TempDir {
    let dir = TempDir::new(&format!("upgrade-{name}"));
    let from = Path::new(FIXTURES).join(name);
    for entry in std::fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    dir
}

async fn started_on_format_4() -> (TempDir, TestServer) {
    let dir = copied("data-format-4");
    let server = start(Setup::durable(dir.path(), Config::default())).await;
    (dir, server)
}

fn token(text: &str) -> SessionToken {
    text.parse().unwrap()
}

/// Acknowledges the fail-over event of the recovered session `session`,
/// so that the new master serves its requests (`FO-5`).
async fn past_failover(conn: &mut RawConnection, welcome: &Welcome, session: SessionToken) {
    let keepalive = |acked_seq| {
        Request::KeepAlive(KeepAlive {
            session,
            epoch: welcome.epoch,
            acked_seq,
            hold: false,
        })
    };
    let Ok(Response::KeepAlive { events, .. }) = conn.call(keepalive(0)).await else {
        panic!("the recovered session is kept alive");
    };
    let acked = events
        .iter()
        .map(|e| e.seq)
        .max()
        .expect("the fail-over event");
    conn.call(keepalive(acked)).await.unwrap();
}

/// Both fixtures hold `svc/db` = `10.0.0.5` with flags 3 in the
/// snapshot, and `svc/after` = `log` in the log.
async fn serves_svc_db_and_svc_after(conn: &mut RawConnection) {
    let get = |key: &str| Request::Get {
        key: key.into(),
        stat_only: false,
    };
    let Ok(Response::Node { node: Some(db), .. }) = conn.call(get("svc/db")).await else {
        panic!("svc/db survived");
    };
    assert_eq!(db.contents.as_deref(), Some(&b"10.0.0.5"[..]));
    assert_eq!(db.stat.flags, 3);
    let Ok(Response::Node {
        node: Some(after), ..
    }) = conn.call(get("svc/after")).await
    else {
        panic!("svc/after, written in the log, survived");
    };
    assert_eq!(after.contents.as_deref(), Some(&b"log"[..]));
}

/// The directory says format 7 and recovery's snapshot is in its shape.
fn is_format_7(dir: &TempDir) {
    assert_eq!(
        std::fs::read_to_string(dir.join("FORMAT")).unwrap(),
        "leasehold-data 7\n"
    );
    let snapshot = std::fs::read(dir.join("snapshot")).unwrap();
    assert_eq!(&snapshot[..8], b"LHSNAP04");
}

async fn valid(conn: &mut RawConnection, sequencer: &str) -> bool {
    let check = Request::CheckSequencer {
        sequencer: unhex(sequencer),
    };
    match conn.call(check).await {
        Ok(Response::SequencerChecked { valid }) => valid,
        other => panic!("expected a check, got {other:?}"),
    }
}

// STORE-6: the directory is taken, its nodes, sessions and locks are
// there, and from then on it says format 7, with recovery's snapshot in
// format 7's shape.
#[tokio::test]
async fn a_format_4_directory_is_carried_forward_with_its_nodes_sessions_and_locks() {
    let (dir, server) = started_on_format_4().await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    serves_svc_db_and_svc_after(&mut conn).await;
    for sequencer in [A_LOCKS_X, A_LOCKS_Y, B_LOCKS_S] {
        assert!(valid(&mut conn, sequencer).await, "{sequencer} is held");
    }
    is_format_7(&dir);
    server.shutdown().await.unwrap();

    // And it is read again as format 7.
    let server = start(Setup::durable(dir.path(), Config::default())).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    assert!(valid(&mut conn, A_LOCKS_X).await);
    server.shutdown().await.unwrap();
}

// STORE-6, LOCK-4: every holding carried forward (the snapshot's, and the
// one the log's records made again) counts as acquired at index 0, which
// any release names; from the first start on, each acquire is kept, and a
// release naming one older than the holding's latest is refused.
#[tokio::test]
async fn holdings_carried_forward_are_released_naming_any_acquire_and_fenced_from_then_on() {
    let (_dir, server) = started_on_format_4().await;
    let (mut conn, welcome) = RawConnection::open(server.addr).await;
    let (a, b) = (token(A), token(B));
    past_failover(&mut conn, &welcome, a).await;
    past_failover(&mut conn, &welcome, b).await;
    let release = |key: &str, session, acquired| Request::Release {
        key: key.into(),
        session,
        acquired,
    };
    let released = conn.call(release("locks/s", b, 0)).await;
    assert!(
        matches!(released, Ok(Response::Released { .. })),
        "{released:?}"
    );
    assert!(!valid(&mut conn, B_LOCKS_S).await);
    let released = conn.call(release("locks/x", a, 0)).await;
    assert!(
        matches!(released, Ok(Response::Released { .. })),
        "{released:?}"
    );

    // a asks again for locks/y, which the log made: answered at a kept index.
    let again = Request::Acquire(leasehold_protocol::Acquire {
        key: "locks/y".into(),
        session: a,
        mode: leasehold_protocol::LockMode::Exclusive,
        contents: None,
        wait_ms: None,
        transient: true,
    });
    let Ok(Response::Acquired {
        index: acquired, ..
    }) = conn.call(again).await
    else {
        panic!("a holder asking again is answered");
    };
    let stale = conn.call(release("locks/y", a, 0)).await;
    assert!(
        matches!(&stale, Err(e) if e.code == ErrorCode::StaleRelease { acquired }),
        "{stale:?}"
    );
    assert!(
        valid(&mut conn, A_LOCKS_Y).await,
        "a refused release changes nothing"
    );
    let released = conn.call(release("locks/y", a, acquired)).await;
    assert!(
        matches!(released, Ok(Response::Released { .. })),
        "{released:?}"
    );
    server.shutdown().await.unwrap();
}

// HS-2, LOCK-4: a protocol 7 client, speaking the bytes it always sent, is
// welcomed in its version and its release (which names no acquire) is
// carried out.
#[tokio::test]
async fn a_protocol_7_client_is_served_as_before() {
    let (_dir, server) = started_on_format_4().await;
    let (mut conn, welcome) = RawConnection::open(server.addr).await;
    past_failover(&mut conn, &welcome, token(A)).await;

    let mut old = RawConnection::connect(server.addr).await;
    old.send_bytes(&framed(&unhex(HELLO_7))).await;
    let Some(ServerFrame::Welcome(welcome)) = old.recv().await else {
        panic!("a protocol 7 client is welcomed");
    };
    assert_eq!(welcome.version, 7);
    old.send_bytes(&framed(&unhex(RELEASE_7))).await;
    let (id, released) = old.reply().await;
    assert_eq!(id, 7);
    assert!(
        matches!(released, Ok(Response::Released { .. })),
        "{released:?}"
    );
    assert!(!valid(&mut conn, A_LOCKS_X).await, "locks/x was released");
    drop(old);

    // A version neither side knows is refused, naming the newest spoken.
    let mut future = RawConnection::connect(server.addr).await;
    future
        .send(ClientFrame::Hello(leasehold_protocol::Hello {
            version: leasehold_protocol::PROTOCOL_VERSION + 1,
            ..leasehold_protocol::Hello::current()
        }))
        .await;
    let closed = future.closed_with().await.expect("a Close frame");
    assert_eq!(
        closed.code,
        ErrorCode::VersionMismatch {
            supported: leasehold_protocol::PROTOCOL_VERSION
        }
    );
    assert!(closed.message.contains("speaks 7 to 10"), "{closed:?}");
    server.shutdown().await.unwrap();
}

// STORE-6, ACL-5: a format 5 directory, from before access control, is
// carried forward with its nodes, sessions and locks, and with access
// control off: every client may do what it did before.
#[tokio::test]
async fn a_format_5_directory_is_carried_forward_with_access_control_off() {
    let dir = copied("data-format-5");
    let server = start(Setup::durable(dir.path(), Config::default())).await;
    let (mut conn, welcome) = RawConnection::open(server.addr).await;
    serves_svc_db_and_svc_after(&mut conn).await;
    for sequencer in [A5_LOCKS_X, B5_LOCKS_S] {
        assert!(valid(&mut conn, sequencer).await, "{sequencer} is held");
    }
    // Its sessions' owners act for them as before.
    past_failover(&mut conn, &welcome, token(A5)).await;
    let Ok(Response::Identity(identity)) = conn.call(Request::WhoAmI).await else {
        panic!("WhoAmI is answered");
    };
    assert!(!identity.access_control);
    is_format_7(&dir);
    server.shutdown().await.unwrap();

    let server = start(Setup::durable(dir.path(), Config::default())).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    assert!(valid(&mut conn, A5_LOCKS_X).await);
    server.shutdown().await.unwrap();
}

// HS-2: a protocol 8 client, speaking the bytes it always sent, is
// welcomed in its version and served.
#[tokio::test]
async fn a_protocol_8_client_is_served_as_before() {
    let dir = copied("data-format-5");
    let server = start(Setup::durable(dir.path(), Config::default())).await;
    let mut old = RawConnection::connect(server.addr).await;
    old.send_bytes(&framed(&unhex(HELLO_8))).await;
    let Some(ServerFrame::Welcome(welcome)) = old.recv().await else {
        panic!("a protocol 8 client is welcomed");
    };
    assert_eq!(welcome.version, 8);
    old.send_bytes(&framed(&unhex(GET_8))).await;
    let (id, got) = old.reply().await;
    assert_eq!(id, 8);
    match got {
        Ok(Response::Node { node: Some(db), .. }) => {
            assert_eq!(db.contents.as_deref(), Some(&b"10.0.0.5"[..]))
        }
        other => panic!("expected svc/db, got {other:?}"),
    }
    server.shutdown().await.unwrap();
}

/// The locks `ListLocks` lists at or below `prefix`.
async fn locks_below(conn: &mut RawConnection, prefix: &str) -> Vec<LockListing> {
    let list = Request::ListLocks {
        prefix: prefix.into(),
        after: None,
        limit: 0,
    };
    match conn.call(list).await {
        Ok(Response::Locks { locks, more: false }) => locks,
        other => panic!("expected a page of locks, got {other:?}"),
    }
}

// STORE-6, LOCK-16: a format 6 directory, from before holdings kept their
// time, is carried forward with its nodes, sessions, locks, rules and
// tokens; its holdings are held since a time unknown, and one taken from
// then on since it was taken.
#[tokio::test]
async fn a_format_6_directory_is_carried_forward_with_its_rules_and_tokens() {
    let dir = copied("data-format-6");
    let server = start(Setup::durable(dir.path(), Config::default())).await;
    let (mut conn, welcome) = RawConnection::open(server.addr).await;
    serves_svc_db_and_svc_after(&mut conn).await;
    for sequencer in [A6_LOCKS_X, B6_LOCKS_S] {
        assert!(valid(&mut conn, sequencer).await, "{sequencer} is held");
    }
    let Ok(Response::Rules { rules, enabled }) = conn.call(Request::ListRules).await else {
        panic!("the rules are listed");
    };
    assert!(!enabled);
    assert_eq!(rules.len(), 1);
    assert_eq!(
        (rules[0].prefix.as_str(), rules[0].principal.as_str()),
        ("svc/", "reader")
    );
    let locks = locks_below(&mut conn, "locks/").await;
    let x = locks.iter().find(|l| l.key == "locks/x").expect("locks/x");
    assert_eq!(x.holders.len(), 1);
    assert_eq!(x.holders[0].name, "a");
    assert_eq!(x.holders[0].held_ms, None, "format 6 kept no time");
    past_failover(&mut conn, &welcome, token(A6)).await;
    let take = Request::Acquire(leasehold_protocol::Acquire {
        key: "locks/new".into(),
        session: token(A6),
        mode: leasehold_protocol::LockMode::Exclusive,
        contents: None,
        wait_ms: None,
        transient: false,
    });
    assert!(matches!(
        conn.call(take).await,
        Ok(Response::Acquired { .. })
    ));
    let new = locks_below(&mut conn, "locks/new").await;
    assert!(new[0].holders[0].held_ms.is_some(), "{new:?}");
    is_format_7(&dir);
    server.shutdown().await.unwrap();

    let server = start(Setup::durable(dir.path(), Config::default())).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    assert!(valid(&mut conn, A6_LOCKS_X).await);
    let new = locks_below(&mut conn, "locks/new").await;
    assert!(
        new[0].holders[0].held_ms.is_some(),
        "its time survives a restart"
    );
    let authenticate = Request::Authenticate {
        token: READER_6.into(),
    };
    let Ok(Response::Identity(reader)) = conn.call(authenticate).await else {
        panic!("the token still authenticates");
    };
    assert_eq!(reader.principal.as_deref(), Some("reader"));
    server.shutdown().await.unwrap();
}

// HS-2: a protocol 9 client, speaking the bytes it always sent, is
// welcomed in its version and served.
#[tokio::test]
async fn a_protocol_9_client_is_served_as_before() {
    let dir = copied("data-format-6");
    let server = start(Setup::durable(dir.path(), Config::default())).await;
    let mut old = RawConnection::connect(server.addr).await;
    old.send_bytes(&framed(&unhex(HELLO_9))).await;
    let Some(ServerFrame::Welcome(welcome)) = old.recv().await else {
        panic!("a protocol 9 client is welcomed");
    };
    assert_eq!(welcome.version, 9);
    old.send_bytes(&framed(&unhex(LOCK_INFO_9))).await;
    let (id, got) = old.reply().await;
    assert_eq!(id, 9);
    match got {
        Ok(Response::LockInfo(info)) => assert_eq!(info.holders.len(), 1, "{info:?}"),
        other => panic!("expected the lock of locks/x, got {other:?}"),
    }
    server.shutdown().await.unwrap();
}
