//! A session acts only for its owner (SPEC "Ownership"): raw frames from a
//! connection that knows a session's id but not its secret, against the
//! real master over loopback.

use std::time::Duration;

use leasehold::{Client, ClientConfig, DeleteOptions, LockOptions, SessionOptions};
use leasehold_protocol::{
    event_mask, Acquire, Authority, ErrorCode, KeepAlive, LockMode, Put, Request, Response,
    SessionSecret, SessionToken,
};
use leasehold_server::Config;
use leasehold_tests::fixture::{Fixture, TempDir};
use leasehold_tests::raw::RawConnection;
use leasehold_tests::server::{short_lease_config, start, Setup};

const LONG: Duration = Duration::from_secs(30);
const OPERATOR_TOKEN: &str = "operator-token-for-tests";

/// The session's id with a secret that is not its own: what anyone who
/// read `ListSessions` or a lock's holders can make.
fn forged(token: SessionToken) -> SessionToken {
    let mut bytes = *token.secret.as_bytes();
    bytes[0] ^= 1;
    SessionToken {
        id: token.id,
        secret: SessionSecret::from_bytes(bytes),
    }
}

fn with_operator_token() -> Config {
    Config {
        operator_token: Some(OPERATOR_TOKEN.into()),
        ..short_lease_config()
    }
}

fn acquire(key: &str, session: SessionToken) -> Request {
    Request::Acquire(Acquire {
        key: key.into(),
        session,
        mode: LockMode::Exclusive,
        contents: None,
        wait_ms: None,
        transient: false,
    })
}

fn denied(reply: Result<Response, leasehold_protocol::Error>) {
    match reply {
        Err(e) => assert_eq!(e.code, ErrorCode::PermissionDenied, "{e:?}"),
        Ok(other) => panic!("expected PermissionDenied, got {other:?}"),
    }
}

async fn sequencer_of(conn: &mut RawConnection, key: &str, session: SessionToken) -> Vec<u8> {
    match conn
        .call(Request::GetSequencer {
            key: key.into(),
            session,
        })
        .await
    {
        Ok(Response::Sequencer { sequencer }) => sequencer,
        other => panic!("expected a sequencer, got {other:?}"),
    }
}

async fn still_valid(conn: &mut RawConnection, sequencer: Vec<u8>) -> bool {
    match conn.call(Request::CheckSequencer { sequencer }).await {
        Ok(Response::SequencerChecked { valid }) => valid,
        other => panic!("expected a check, got {other:?}"),
    }
}

// AUTH-2
#[tokio::test]
async fn a_release_without_the_secret_is_refused_and_the_holder_keeps_its_lock() {
    let server = start(short_lease_config()).await;
    let (mut owner, _) = RawConnection::open(server.addr).await;
    let (mut attacker, _) = RawConnection::open(server.addr).await;
    let victim = owner.create_session(LONG).await;
    owner.call(acquire("k", victim)).await.unwrap();
    let sequencer = sequencer_of(&mut owner, "k", victim).await;

    let release = Request::Release {
        key: "k".into(),
        session: forged(victim),
        acquired: u64::MAX,
    };
    denied(attacker.call(release).await);
    assert!(still_valid(&mut attacker, sequencer).await);
    // Its own session cannot take the lock either: the victim holds it.
    let thief = attacker.create_session(LONG).await;
    let taken = attacker.call(acquire("k", thief)).await;
    assert_eq!(taken.unwrap_err().code, ErrorCode::LockHeld);
}

// AUTH-2
#[tokio::test]
async fn every_request_acting_for_a_session_needs_its_secret() {
    let server = start(short_lease_config()).await;
    let (mut owner, _) = RawConnection::open(server.addr).await;
    let (mut attacker, _) = RawConnection::open(server.addr).await;
    let victim = owner.create_session(LONG).await;
    owner.call(acquire("held", victim)).await.unwrap();
    let subscription = owner.subscribe(victim, "", true, event_mask::ALL).await;
    let forged = forged(victim);
    let requests = [
        Request::KeepAlive(KeepAlive {
            session: forged,
            epoch: 1,
            acked_seq: 0,
            hold: false,
        }),
        acquire("other", forged),
        Request::Release {
            key: "held".into(),
            session: forged,
            acquired: u64::MAX,
        },
        Request::GetSequencer {
            key: "held".into(),
            session: forged,
        },
        Request::Subscribe {
            session: forged,
            key: "".into(),
            prefix: true,
            mask: event_mask::ALL,
        },
        Request::Unsubscribe {
            session: forged,
            subscription,
        },
        Request::Put(Put {
            key: "planted".into(),
            contents: b"x".to_vec(),
            flags: 0,
            cas: None,
            ephemeral: Some(forged),
        }),
    ];
    for request in requests {
        let what = format!("{request:?}");
        match attacker.call(request).await {
            Err(e) => assert_eq!(e.code, ErrorCode::PermissionDenied, "{what}: {e:?}"),
            Ok(other) => panic!("{what} was served: {other:?}"),
        }
    }
    // Nothing changed: no node was planted, the subscription still works.
    let planted = attacker
        .call(Request::Get {
            key: "planted".into(),
            stat_only: true,
        })
        .await;
    assert!(matches!(planted, Ok(Response::Node { node: None, .. })));
    let unsubscribed = owner
        .call(Request::Unsubscribe {
            session: victim,
            subscription,
        })
        .await;
    assert_eq!(unsubscribed, Ok(Response::Unsubscribed));
}

// AUTH-2, EV-2
#[tokio::test]
async fn a_forged_keepalive_acknowledges_none_of_the_owners_events() {
    let server = start(short_lease_config()).await;
    let (mut owner, _) = RawConnection::open(server.addr).await;
    let (mut attacker, _) = RawConnection::open(server.addr).await;
    let victim = owner.create_session(LONG).await;
    owner
        .subscribe(victim, "watched", false, event_mask::CONTENTS)
        .await;
    owner.put("watched", "1").await;
    let ack_all = Request::KeepAlive(KeepAlive {
        session: forged(victim),
        epoch: 1,
        acked_seq: u64::MAX,
        hold: false,
    });
    denied(attacker.call(ack_all).await);
    owner.keepalive(victim, false).await;
    match owner.reply().await.1 {
        Ok(Response::KeepAlive { events, .. }) => {
            assert_eq!(events.len(), 1, "the event is still queued: {events:?}")
        }
        other => panic!("expected a KeepAlive, got {other:?}"),
    }
}

// AUTH-2, SES-6
#[tokio::test]
async fn forged_keepalives_do_not_keep_a_crashed_holders_session_alive() {
    let lease = Duration::from_millis(500);
    let server = start(short_lease_config()).await;
    let (mut owner, _) = RawConnection::open(server.addr).await;
    let (mut attacker, _) = RawConnection::open(server.addr).await;
    let victim = owner.create_session(lease).await;
    // The holder crashes.
    drop(owner);
    // Forged KeepAlives until the session ends, which it must at its lease;
    // the deadline only bounds a master that lets them extend it.
    let until = tokio::time::Instant::now() + 40 * lease;
    loop {
        assert!(
            tokio::time::Instant::now() < until,
            "forged KeepAlives kept the session alive"
        );
        let keepalive = Request::KeepAlive(KeepAlive {
            session: forged(victim),
            epoch: 1,
            acked_seq: 0,
            hold: false,
        });
        match attacker.call(keepalive).await {
            Err(e) if e.code == ErrorCode::PermissionDenied => {}
            Err(e) if e.code == ErrorCode::SessionExpired => break,
            other => panic!("a forged KeepAlive was served: {other:?}"),
        }
        tokio::time::sleep(lease / 10).await;
    }
    let info = attacker
        .call(Request::SessionInfo { session: victim.id })
        .await;
    assert_eq!(info.unwrap_err().code, ErrorCode::SessionExpired);
}

// AUTH-3, SES-7
#[tokio::test]
async fn without_an_operator_token_anyone_may_destroy_a_session() {
    let server = start(short_lease_config()).await;
    let (mut owner, _) = RawConnection::open(server.addr).await;
    let (mut other, _) = RawConnection::open(server.addr).await;
    let session = owner.create_session(LONG).await;
    let destroyed = other
        .call(Request::DestroySession {
            session: session.id,
            authority: Authority::Anonymous,
        })
        .await;
    assert_eq!(destroyed, Ok(Response::Destroyed));
}

// AUTH-3
#[tokio::test]
async fn a_false_claim_to_own_a_session_is_refused_even_without_an_operator_token() {
    let server = start(short_lease_config()).await;
    let (mut owner, _) = RawConnection::open(server.addr).await;
    let session = owner.create_session(LONG).await;
    let claimed = owner
        .call(Request::DestroySession {
            session: session.id,
            authority: Authority::Session(forged(session)),
        })
        .await;
    denied(claimed);
}

// AUTH-3
#[tokio::test]
async fn with_an_operator_token_only_the_owner_or_the_operator_destroys_a_session() {
    let server = start(with_operator_token()).await;
    let (mut owner, _) = RawConnection::open(server.addr).await;
    let (mut other, _) = RawConnection::open(server.addr).await;
    let first = owner.create_session(LONG).await;
    let second = owner.create_session(LONG).await;
    let bystander = other.create_session(LONG).await;
    for authority in [
        Authority::Anonymous,
        Authority::Session(bystander),
        Authority::Session(forged(first)),
        Authority::Operator("not-the-operator-token".into()),
    ] {
        let what = format!("{authority:?}");
        let reply = other
            .call(Request::DestroySession {
                session: first.id,
                authority,
            })
            .await;
        assert_eq!(
            reply.map_err(|e| e.code),
            Err(ErrorCode::PermissionDenied),
            "{what}"
        );
    }
    let by_owner = other
        .call(Request::DestroySession {
            session: first.id,
            authority: Authority::Session(first),
        })
        .await;
    assert_eq!(by_owner, Ok(Response::Destroyed));
    let by_operator = other
        .call(Request::DestroySession {
            session: second.id,
            authority: Authority::Operator(OPERATOR_TOKEN.into()),
        })
        .await;
    assert_eq!(by_operator, Ok(Response::Destroyed));
}

fn delete(key: &str, recursive: bool, authority: Authority) -> Request {
    Request::Delete {
        key: key.into(),
        cas: None,
        recursive,
        authority,
    }
}

// AUTH-4
#[tokio::test]
async fn with_an_operator_token_a_locked_node_is_deleted_only_by_its_holder_or_the_operator() {
    let server = start(with_operator_token()).await;
    let (mut owner, _) = RawConnection::open(server.addr).await;
    let (mut other, _) = RawConnection::open(server.addr).await;
    let holder = owner.create_session(LONG).await;
    let stranger = other.create_session(LONG).await;
    owner.call(acquire("app/leader", holder)).await.unwrap();
    let sequencer = sequencer_of(&mut owner, "app/leader", holder).await;
    other.put("app/config", "x").await;

    for (key, recursive, authority) in [
        ("app/leader", false, Authority::Anonymous),
        ("app/leader", false, Authority::Session(stranger)),
        ("app", true, Authority::Anonymous),
        ("app", true, Authority::Session(stranger)),
    ] {
        denied(other.call(delete(key, recursive, authority)).await);
    }
    assert!(still_valid(&mut other, sequencer.clone()).await);
    // The refused recursive delete removed nothing, not even unlocked nodes.
    let config = other
        .call(Request::Get {
            key: "app/config".into(),
            stat_only: true,
        })
        .await;
    assert!(matches!(config, Ok(Response::Node { node: Some(_), .. })));
    // Unlocked nodes need no authority; writes ignore locks.
    let unlocked = other.call(delete("app/config", false, Authority::Anonymous));
    assert!(matches!(unlocked.await, Ok(Response::Deleted { .. })));
    other.put("app/leader", "overwritten").await;
    assert!(still_valid(&mut other, sequencer.clone()).await);

    let by_holder = other
        .call(delete("app/leader", false, Authority::Session(holder)))
        .await;
    assert!(matches!(by_holder, Ok(Response::Deleted { .. })));
    owner.call(acquire("app/leader", holder)).await.unwrap();
    let by_operator = other
        .call(delete(
            "app",
            true,
            Authority::Operator(OPERATOR_TOKEN.into()),
        ))
        .await;
    assert!(matches!(by_operator, Ok(Response::Deleted { .. })));
}

// AUTH-4, LOCK-8
#[tokio::test]
async fn without_an_operator_token_anyone_may_delete_a_locked_node() {
    let server = start(short_lease_config()).await;
    let (mut owner, _) = RawConnection::open(server.addr).await;
    let (mut other, _) = RawConnection::open(server.addr).await;
    let holder = owner.create_session(LONG).await;
    owner.call(acquire("k", holder)).await.unwrap();
    let deleted = other.call(delete("k", false, Authority::Anonymous)).await;
    assert!(
        matches!(deleted, Ok(Response::Deleted { .. })),
        "{deleted:?}"
    );
}

// AUTH-1, AUTH-2
#[tokio::test]
async fn a_token_lets_another_client_take_over_keeping_a_session_alive() {
    let server = start(short_lease_config()).await;
    let creator = server.client().await;
    let session = creator
        .create_session(SessionOptions::new("handed-over").lease(Duration::from_secs(2)))
        .await
        .unwrap();
    let guard = session.try_lock("k", LockOptions::exclusive()).await;
    std::mem::forget(guard.unwrap()); // the lock stays with the session
    let token = session.detach().await;
    let text = token.to_string();

    let successor = server.client().await;
    let attached = successor
        .attach_session(text.parse().unwrap(), SessionOptions::new("handed-over"))
        .await
        .unwrap();
    // Kept alive for more than two leases by the new client.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(attached.state(), leasehold::SessionState::Normal);
    let info = successor.session_info(token.id).await.unwrap();
    assert_eq!(info.name, "handed-over");
    attached.close().await.unwrap();
    assert!(successor.session_info(token.id).await.is_err());
}

// AUTH-2
#[tokio::test]
async fn attaching_with_a_wrong_secret_is_refused() {
    let Fixture {
        server: _server,
        client,
    } = Fixture::new().await;
    let session = client
        .create_session(SessionOptions::new("mine"))
        .await
        .unwrap();
    let refused = client
        .attach_session(forged(session.token()), SessionOptions::new("theirs"))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::PermissionDenied));
    assert_eq!(session.state(), leasehold::SessionState::Normal);
}

// AUTH-3, AUTH-4
#[tokio::test]
async fn a_client_with_the_operator_token_destroys_sessions_and_deletes_locked_nodes() {
    let server = start(with_operator_token()).await;
    let owner = server.client().await;
    let session = owner
        .create_session(SessionOptions::new("held"))
        .await
        .unwrap();
    let _guard = session
        .try_lock("k", LockOptions::exclusive())
        .await
        .unwrap();
    let plain = server.client().await;
    let refused = plain.delete("k", DeleteOptions::default()).await;
    assert_eq!(
        refused.unwrap_err().code(),
        Some(ErrorCode::PermissionDenied)
    );
    let refused = plain.destroy_session(session.id()).await;
    assert_eq!(
        refused.unwrap_err().code(),
        Some(ErrorCode::PermissionDenied)
    );

    let config = ClientConfig {
        operator_token: Some(OPERATOR_TOKEN.into()),
        ..ClientConfig::default()
    };
    let operator = Client::connect_with(server.addr.to_string(), config)
        .await
        .unwrap();
    assert_eq!(
        operator
            .delete("k", DeleteOptions::default())
            .await
            .unwrap()
            .keys,
        ["k"]
    );
    operator.destroy_session(session.id()).await.unwrap();
}

// AUTH-1
#[tokio::test]
async fn a_session_secret_survives_a_restart_of_the_master() {
    let dir = TempDir::new("ownership");
    let config = || Setup::durable(dir.path(), short_lease_config());
    let server = start(config()).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let session = conn.create_session(LONG).await;
    drop(conn);
    server.shutdown().await.unwrap();

    let server = start(config()).await;
    let (mut conn, welcome) = RawConnection::open(server.addr).await;
    let keepalive = |session| {
        Request::KeepAlive(KeepAlive {
            session,
            epoch: welcome.epoch,
            acked_seq: 0,
            hold: false,
        })
    };
    denied(conn.call(keepalive(forged(session))).await);
    let kept = conn.call(keepalive(session)).await;
    assert!(matches!(kept, Ok(Response::KeepAlive { .. })), "{kept:?}");
    drop(conn);
    server.shutdown().await.unwrap();
}
