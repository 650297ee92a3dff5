//! Quotas per peer address: one client cannot take everything the master
//! shares, so others still find room (SPEC "Quotas"). Raw frames from a
//! greedy address, 127.0.0.2, and a bystander on 127.0.0.1.

use std::net::IpAddr;
use std::time::Duration;

use leasehold_protocol::{
    event_mask, Acquire, Authority, Behavior, CreateSession, Error, ErrorCode, LockMode, Put,
    Request, Response, SessionToken,
};
use leasehold_server::Config;
use leasehold_tests::raw::RawConnection;
use leasehold_tests::server::{short_lease_config, start, TestServer};

const LONG: Duration = Duration::from_secs(30);

fn greedy_address() -> IpAddr {
    "127.0.0.2".parse().unwrap()
}

async fn greedy_and_bystander(config: Config) -> (TestServer, RawConnection, RawConnection) {
    let server = start(config).await;
    let (greedy, _) = RawConnection::open_from(server.addr, greedy_address()).await;
    let (bystander, _) = RawConnection::open(server.addr).await;
    (server, greedy, bystander)
}

fn over_quota(reply: Result<Response, Error>, what: &str) {
    let refused = reply.expect_err("refused past the quota");
    assert_eq!(refused.code, ErrorCode::LimitReached, "{refused:?}");
    assert!(
        refused.message.contains("127.0.0.2") && refused.message.contains(what),
        "{}",
        refused.message
    );
}

fn create_session() -> Request {
    Request::CreateSession(CreateSession {
        name: "greedy".into(),
        lease_ms: Some(LONG.as_millis() as u64),
        lock_delay_ms: None,
        behavior: Behavior::Release,
        checks: Vec::new(),
    })
}

fn put(key: &str, contents: Vec<u8>) -> Request {
    Request::Put(Put {
        key: key.into(),
        contents,
        flags: 0,
        cas: None,
        ephemeral: None,
    })
}

fn waiting_acquire(key: &str, session: SessionToken) -> Request {
    Request::Acquire(Acquire {
        key: key.into(),
        session,
        mode: LockMode::Exclusive,
        contents: None,
        wait_ms: Some(60_000),
        transient: false,
    })
}

// QUOTA-2
#[tokio::test]
async fn a_peer_address_has_at_most_its_quota_of_live_sessions() {
    let (_server, mut greedy, mut bystander) = greedy_and_bystander(Config {
        max_sessions_per_peer: 3,
        ..short_lease_config()
    })
    .await;
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(greedy.create_session(LONG).await);
    }
    over_quota(greedy.call(create_session()).await, "3 live sessions");
    bystander.create_session(LONG).await;
    // A session that ends is given back.
    let destroy = Request::DestroySession {
        session: sessions[0].id,
        authority: Authority::Session(sessions[0]),
    };
    greedy.call(destroy).await.unwrap();
    greedy.create_session(LONG).await;
}

// QUOTA-3
#[tokio::test]
async fn a_peer_address_has_at_most_its_quota_of_subscriptions_over_all_its_sessions() {
    let (_server, mut greedy, mut bystander) = greedy_and_bystander(Config {
        max_subscriptions_per_peer: 4,
        ..short_lease_config()
    })
    .await;
    let (one, two) = (
        greedy.create_session(LONG).await,
        greedy.create_session(LONG).await,
    );
    let mut ids = Vec::new();
    for n in 0..2 {
        for session in [one, two] {
            let key = format!("k{n}");
            ids.push(
                greedy
                    .subscribe(session, &key, false, event_mask::CONTENTS)
                    .await,
            );
        }
    }
    // The same again is no new subscription, so it is not refused.
    greedy.subscribe(one, "k0", false, event_mask::ALL).await;
    let fifth = Request::Subscribe {
        session: two,
        key: "k9".into(),
        prefix: true,
        mask: event_mask::CONTENTS,
    };
    over_quota(greedy.call(fifth.clone()).await, "4 subscriptions");
    let watcher = bystander.create_session(LONG).await;
    bystander
        .subscribe(watcher, "k9", true, event_mask::CONTENTS)
        .await;
    // Unsubscribing gives one back; a session's end gives back all of its.
    let unsubscribe = Request::Unsubscribe {
        session: two,
        subscription: ids[1],
    };
    greedy.call(unsubscribe).await.unwrap();
    greedy.call(fifth.clone()).await.unwrap();
    over_quota(greedy.call(fifth_on(one)).await, "4 subscriptions");
    let destroy = Request::DestroySession {
        session: two.id,
        authority: Authority::Session(two),
    };
    greedy.call(destroy).await.unwrap();
    greedy.call(fifth_on(one)).await.unwrap();
}

fn fifth_on(session: SessionToken) -> Request {
    Request::Subscribe {
        session,
        key: "k8".into(),
        prefix: true,
        mask: event_mask::CONTENTS,
    }
}

// QUOTA-4
#[tokio::test]
async fn a_peer_address_has_at_most_its_quota_of_acquires_waiting() {
    let (_server, mut greedy, mut bystander) = greedy_and_bystander(Config {
        max_waiters_per_peer: 2,
        ..short_lease_config()
    })
    .await;
    let holder = bystander.create_session(LONG).await;
    for key in ["a", "b", "c"] {
        let take = Request::Acquire(Acquire {
            wait_ms: None,
            ..match waiting_acquire(key, holder) {
                Request::Acquire(a) => a,
                _ => unreachable!(),
            }
        });
        bystander.call(take).await.unwrap();
    }
    let waiter = greedy.create_session(LONG).await;
    let first = greedy.request(waiting_acquire("a", waiter)).await;
    greedy.request(waiting_acquire("b", waiter)).await;
    over_quota(
        greedy.call(waiting_acquire("c", waiter)).await,
        "2 acquires waiting",
    );
    // A wait that ends, here by the grant, is given back.
    let release = Request::Release {
        key: "a".into(),
        session: holder,
        acquired: u64::MAX,
    };
    bystander.call(release).await.unwrap();
    let (granted, reply) = greedy.reply().await;
    assert_eq!(granted, first);
    assert!(matches!(reply, Ok(Response::Acquired { .. })), "{reply:?}");
    greedy.request(waiting_acquire("c", waiter)).await;
}

// QUOTA-5
#[tokio::test]
async fn a_peer_address_writes_at_most_its_quota_of_node_bytes() {
    let (_server, mut greedy, mut bystander) = greedy_and_bystander(Config {
        max_bytes_per_peer: 10_000,
        ..short_lease_config()
    })
    .await;
    // Key and contents count: 4,000 + 2 bytes each.
    greedy.call(put("n1", vec![0; 4_000])).await.unwrap();
    greedy.call(put("n2", vec![0; 4_000])).await.unwrap();
    over_quota(
        greedy.call(put("n3", vec![0; 4_000])).await,
        "10000 bytes of nodes",
    );
    // Rewriting a node smaller is no more than before.
    greedy.call(put("n1", vec![0; 1_000])).await.unwrap();
    greedy.call(put("n3", vec![0; 4_000])).await.unwrap();
    bystander.call(put("n4", vec![0; 8_000])).await.unwrap();
    // A deleted node is given back; so is one another peer wrote over.
    let delete = Request::Delete {
        key: "n2".into(),
        cas: None,
        recursive: false,
        authority: Authority::Anonymous,
    };
    greedy.call(delete).await.unwrap();
    bystander.call(put("n3", vec![0; 10])).await.unwrap();
    greedy.call(put("n5", vec![0; 8_000])).await.unwrap();
}

// QUOTA-5: locking a node writes nothing, so it moves no bytes.
#[tokio::test]
async fn taking_a_lock_on_a_node_moves_none_of_its_bytes() {
    let (_server, mut greedy, mut bystander) = greedy_and_bystander(Config {
        max_bytes_per_peer: 10_000,
        ..short_lease_config()
    })
    .await;
    greedy.call(put("n1", vec![0; 8_000])).await.unwrap();
    let holder = bystander.create_session(LONG).await;
    let take = Request::Acquire(Acquire {
        key: "n1".into(),
        session: holder,
        mode: LockMode::Exclusive,
        contents: None,
        wait_ms: None,
        transient: false,
    });
    bystander.call(take).await.unwrap();
    let release = Request::Release {
        key: "n1".into(),
        session: holder,
        acquired: u64::MAX,
    };
    bystander.call(release).await.unwrap();
    over_quota(
        greedy.call(put("n2", vec![0; 4_000])).await,
        "10000 bytes of nodes",
    );
    // And the locker was charged nothing.
    bystander.call(put("n3", vec![0; 9_000])).await.unwrap();
}
