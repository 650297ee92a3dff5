//! Events on KeepAlive replies, checked with raw frames.

use std::time::Duration;

use leasehold_protocol::{
    event_mask, Acquire, Change, Event, EventKind, LockMode, Request, Response, Sequencer,
};
use leasehold_tests::raw::RawConnection;
use leasehold_tests::server::{short_lease_config, start};
use tokio::time::Instant;

const LONG: Duration = Duration::from_secs(30);

fn keepalive_events(reply: Result<Response, leasehold_protocol::Error>) -> Vec<Event> {
    match reply {
        Ok(Response::KeepAlive { events, .. }) => events,
        other => panic!("expected a KeepAlive reply, got {other:?}"),
    }
}

/// The events of the next reply on `conn`, which must be a KeepAlive's.
async fn events(conn: &mut RawConnection) -> Vec<Event> {
    keepalive_events(conn.reply().await.1)
}

fn changes(events: &[Event]) -> Vec<(u64, Change)> {
    events
        .iter()
        .map(|e| match &e.kind {
            EventKind::Node { change, .. } => (e.seq, change.clone()),
            other => panic!("expected a node event, got {other:?}"),
        })
        .collect()
}

// EV-1, EV-3
#[tokio::test]
async fn a_queued_event_answers_the_held_keepalive_at_once() {
    let server = start(short_lease_config()).await;
    let (mut watcher, _) = RawConnection::open(server.addr).await;
    let (mut writer, _) = RawConnection::open(server.addr).await;
    let session = watcher.create_session(LONG).await;
    watcher
        .subscribe(session, "cfg", false, event_mask::CONTENTS)
        .await;
    watcher.keepalive(session, true).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    writer.put("cfg", "v1").await;
    let events = events(&mut watcher).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "not held to the margin"
    );
    assert_eq!(changes(&events), [(1, Change::Created)]);
}

// EV-2
#[tokio::test]
async fn unacknowledged_events_come_again_and_acknowledged_ones_do_not() {
    let server = start(short_lease_config()).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let session = conn.create_session(LONG).await;
    conn.subscribe(session, "cfg", false, event_mask::CONTENTS)
        .await;
    conn.put("cfg", "v1").await;
    conn.put("cfg", "v2").await;
    conn.keepalive_acking(session, true, 0).await;
    assert_eq!(
        changes(&events(&mut conn).await),
        [(1, Change::Created), (2, Change::Modified)]
    );
    // Acknowledging only the first: the second comes again, at once.
    conn.keepalive_acking(session, true, 1).await;
    assert_eq!(changes(&events(&mut conn).await), [(2, Change::Modified)]);
    // Acknowledging both: nothing waits, so the KeepAlive is held until the
    // next change, and its reply carries that change alone (had it been
    // answered at once, it would carry nothing).
    let held = conn.keepalive_acking(session, true, 2).await;
    let put = conn
        .request(Request::Put(leasehold_protocol::Put {
            key: "cfg".into(),
            contents: b"v3".to_vec(),
            flags: 0,
            cas: None,
            ephemeral: None,
        }))
        .await;
    let (mut replies, mut ids) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        let (id, reply) = conn.reply().await;
        ids.push(id);
        replies.push((id, reply));
    }
    ids.sort();
    assert_eq!(ids, [held, put]);
    let (_, keepalive) = replies.into_iter().find(|(id, _)| *id == held).unwrap();
    assert_eq!(
        changes(&keepalive_events(keepalive)),
        [(3, Change::Modified)]
    );
}

// EV-4
#[tokio::test]
async fn an_overflowing_queue_is_replaced_by_one_events_lost() {
    let server = start(short_lease_config()).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let session = conn.create_session(LONG).await;
    conn.subscribe(session, "hot", false, event_mask::CONTENTS)
        .await;
    for n in 0..1_100 {
        conn.put("hot", &n.to_string()).await;
    }
    conn.keepalive_acking(session, false, 0).await;
    let events = events(&mut conn).await;
    assert_eq!(events[0].kind, EventKind::EventsLost);
    assert_eq!(events[0].seq, 1_025, "numbering goes on across the loss");
    assert_eq!(events.len(), 1 + 75);
    assert!(events.windows(2).all(|w| w[1].seq == w[0].seq + 1));
}

// EV-5
#[tokio::test]
async fn an_exact_subscription_hears_of_children_and_a_prefix_one_of_descendants() {
    let server = start(short_lease_config()).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let session = conn.create_session(LONG).await;
    let children = event_mask::CHILD_ADDED | event_mask::CHILD_REMOVED;
    conn.subscribe(session, "svc", false, children).await;
    conn.subscribe(session, "svc", true, event_mask::CONTENTS)
        .await;
    conn.put("svc/a", "1").await;
    conn.put("svc/a/deep", "2").await;
    conn.put("other", "3").await;
    conn.keepalive_acking(session, false, 0).await;
    let mut seen: Vec<Change> = changes(&events(&mut conn).await)
        .into_iter()
        .map(|(_, c)| c)
        .collect();
    seen.sort_by_key(|c| format!("{c:?}"));
    assert_eq!(
        seen,
        [
            Change::ChildAdded {
                child: "svc/a".into()
            },
            Change::Created,
            Change::Created,
        ]
    );
}

// EV-6, LOCK-13
#[tokio::test]
async fn a_holder_hears_of_a_conflicting_request_and_of_losing_its_lock() {
    let server = start(short_lease_config()).await;
    let (mut holder, _) = RawConnection::open(server.addr).await;
    let (mut other, _) = RawConnection::open(server.addr).await;
    let a = holder.create_session(LONG).await;
    let b = other.create_session(LONG).await;
    let generation = match holder.call(exclusive(a, None)).await {
        Ok(Response::Acquired { sequencer, .. }) => {
            Sequencer::from_bytes(&sequencer).unwrap().lock_generation
        }
        other => panic!("expected the lock, got {other:?}"),
    };
    holder.keepalive(a, true).await;
    other.request(exclusive(b, Some(10_000))).await;
    let told = events(&mut holder).await;
    assert_eq!(
        told.iter().map(|e| e.kind.clone()).collect::<Vec<_>>(),
        [conflict(b)]
    );
    holder.keepalive_acking(a, true, 1).await;
    let deleted = Request::Delete {
        key: "k".into(),
        cas: None,
        recursive: false,
        authority: leasehold_protocol::Authority::Anonymous,
    };
    let (mut third, _) = RawConnection::open(server.addr).await;
    third.call(deleted).await.unwrap();
    let lost = events(&mut holder).await;
    // It names the holding taken, by its generation (LOCK-13).
    assert_eq!(
        lost[0].kind,
        EventKind::LockLost {
            key: "k".into(),
            lock_generation: generation,
        }
    );
    // The waiter got the lock the deletion freed.
    assert!(matches!(
        other.reply().await.1,
        Ok(Response::Acquired { .. })
    ));
}

// EV-5
#[tokio::test]
async fn lock_events_reach_subscribers_who_asked_for_them() {
    let server = start(short_lease_config()).await;
    let (mut watcher, _) = RawConnection::open(server.addr).await;
    let (mut locker, _) = RawConnection::open(server.addr).await;
    let observer = watcher.create_session(LONG).await;
    let holder = locker.create_session(LONG).await;
    let mask = event_mask::LOCK_ACQUIRED | event_mask::LOCK_RELEASED;
    watcher.subscribe(observer, "leader", false, mask).await;
    let acquire = Request::Acquire(Acquire {
        key: "leader".into(),
        session: holder,
        mode: LockMode::Exclusive,
        contents: None,
        wait_ms: None,
        transient: false,
    });
    locker.call(acquire).await.unwrap();
    let release = Request::Release {
        key: "leader".into(),
        session: holder,
        acquired: u64::MAX,
    };
    locker.call(release).await.unwrap();
    watcher.keepalive_acking(observer, false, 0).await;
    assert_eq!(
        changes(&events(&mut watcher).await),
        [
            (1, Change::LockAcquired { holder: holder.id }),
            (2, Change::LockReleased { holder: holder.id })
        ]
    );
}

// EV-5
#[tokio::test]
async fn a_subscription_needs_a_live_session_and_a_sensible_mask() {
    let server = start(short_lease_config()).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let session = conn.create_session(LONG).await;
    let bad_mask = Request::Subscribe {
        session,
        key: "k".into(),
        prefix: false,
        mask: 1 << 20,
    };
    let error = conn.call(bad_mask).await.unwrap_err();
    assert_eq!(error.code, leasehold_protocol::ErrorCode::InvalidArgument);
    let unknown = Request::Subscribe {
        session: leasehold_protocol::SessionToken {
            id: uuid::Uuid::from_u128(5),
            secret: leasehold_protocol::SessionSecret::from_bytes([5; 16]),
        },
        key: "k".into(),
        prefix: false,
        mask: event_mask::ALL,
    };
    let error = conn.call(unknown).await.unwrap_err();
    assert_eq!(error.code, leasehold_protocol::ErrorCode::UnknownSession);
}

fn exclusive(session: leasehold_protocol::SessionToken, wait_ms: Option<u64>) -> Request {
    Request::Acquire(Acquire {
        key: "k".into(),
        session,
        mode: LockMode::Exclusive,
        contents: None,
        wait_ms,
        transient: false,
    })
}

fn conflict(waiter: leasehold_protocol::SessionToken) -> EventKind {
    EventKind::LockConflict {
        key: "k".into(),
        waiter: waiter.id,
    }
}

/// A lock with a holder and one waiter, each with a held KeepAlive, and a
/// third session yet to ask for it.
struct Line {
    holder: RawConnection,
    first: RawConnection,
    second: RawConnection,
    a: leasehold_protocol::SessionToken,
    c: leasehold_protocol::SessionToken,
    /// The waiter's Acquire.
    acquire: u64,
    /// The holder's event about the waiter.
    told: Event,
}

/// `a` holds "k"; `b` joins the empty line, and `a` is told (EV-6).
async fn a_holder_and_one_waiter(addr: std::net::SocketAddr) -> Line {
    let (mut holder, _) = RawConnection::open(addr).await;
    let (mut first, _) = RawConnection::open(addr).await;
    let (mut second, _) = RawConnection::open(addr).await;
    let a = holder.create_session(LONG).await;
    let b = first.create_session(LONG).await;
    let c = second.create_session(LONG).await;
    assert!(matches!(
        holder.call(exclusive(a, None)).await,
        Ok(Response::Acquired { .. })
    ));
    holder.keepalive(a, true).await;
    first.keepalive(b, true).await;
    let acquire = first.request(exclusive(b, Some(10_000))).await;
    let mut told = events(&mut holder).await;
    assert_eq!(
        told.iter().map(|e| e.kind.clone()).collect::<Vec<_>>(),
        [conflict(b)]
    );
    Line {
        holder,
        first,
        second,
        a,
        c,
        acquire,
        told: told.remove(0),
    }
}

// EV-6
#[tokio::test]
async fn a_second_waiter_in_line_is_not_news_to_the_holder() {
    let server = start(short_lease_config()).await;
    let mut line = a_holder_and_one_waiter(server.addr).await;
    line.holder
        .keepalive_acking(line.a, true, line.told.seq)
        .await;
    line.second.request(exclusive(line.c, Some(10_000))).await;
    // Nothing new to say, so the held KeepAlive stays held.
    let answered = tokio::time::timeout(Duration::from_millis(500), line.holder.reply()).await;
    assert!(answered.is_err(), "answered early: {answered:?}");
}

// EV-6
#[tokio::test]
async fn a_session_granted_a_lock_while_others_wait_hears_of_the_head_of_the_line() {
    let server = start(short_lease_config()).await;
    let mut line = a_holder_and_one_waiter(server.addr).await;
    // One connection's requests are applied in order, so `c` is in line
    // before the release.
    line.second.request(exclusive(line.c, Some(10_000))).await;
    let release = Request::Release {
        key: "k".into(),
        session: line.a,
        acquired: u64::MAX,
    };
    assert!(line.second.call(release).await.is_ok());
    // The grant and the event come on the same connection, in either order.
    let mut granted = false;
    let mut told = Vec::new();
    for _ in 0..2 {
        let (id, reply) = line.first.reply().await;
        if id == line.acquire {
            granted = matches!(reply, Ok(Response::Acquired { .. }));
        } else {
            told = keepalive_events(reply);
        }
    }
    assert!(granted);
    assert_eq!(
        told.iter().map(|e| e.kind.clone()).collect::<Vec<_>>(),
        [conflict(line.c)]
    );
}

// EV-5
#[tokio::test]
async fn subscribing_again_to_a_key_widens_the_one_subscription_instead_of_adding_one() {
    let server = start(short_lease_config()).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let session = conn.create_session(LONG).await;
    let first = conn
        .subscribe(session, "cfg", false, event_mask::CONTENTS)
        .await;
    // More than a session's cap of 1024: repeats cost the master nothing.
    for _ in 0..1_500 {
        let again = conn
            .subscribe(session, "cfg", false, event_mask::CONTENTS)
            .await;
        assert_eq!(again, first);
    }
    let widened = conn
        .subscribe(session, "cfg", false, event_mask::LOCK_ACQUIRED)
        .await;
    assert_eq!(widened, first);
    let below = conn
        .subscribe(session, "cfg", true, event_mask::CONTENTS)
        .await;
    assert_ne!(below, first, "a prefix subscription is another kind");
    conn.put("cfg", "1").await;
    let acquire = Request::Acquire(Acquire {
        key: "cfg".into(),
        session,
        mode: LockMode::Exclusive,
        contents: None,
        wait_ms: None,
        transient: false,
    });
    conn.call(acquire).await.unwrap();
    conn.keepalive_acking(session, false, 0).await;
    let heard: Vec<(u64, Change)> = events(&mut conn)
        .await
        .into_iter()
        .map(|e| match e.kind {
            EventKind::Node {
                subscription,
                change,
                ..
            } => (subscription, change),
            other => panic!("expected a node event, got {other:?}"),
        })
        .collect();
    assert_eq!(
        heard,
        [
            (first, Change::Created),
            (below, Change::Created),
            (first, Change::LockAcquired { holder: session.id }),
        ]
    );
    // One Unsubscribe ends it, however often it was asked for.
    let unsubscribe = Request::Unsubscribe {
        session,
        subscription: first,
    };
    conn.call(unsubscribe.clone()).await.unwrap();
    assert!(conn.call(unsubscribe).await.is_err());
}

// EV-4: the events waiting for one address's sessions are bounded in bytes,
// so its sessions that never read cannot make the master hold more; the
// sessions of others hear everything.
#[tokio::test]
async fn the_events_waiting_for_one_addresses_sessions_are_bounded_in_bytes() {
    let server = start(leasehold_server::Config {
        event_bytes_per_peer: 20_000,
        ..short_lease_config()
    })
    .await;
    let greedy_address = "127.0.0.2".parse().unwrap();
    let (mut greedy, _) = RawConnection::open_from(server.addr, greedy_address).await;
    let (mut bystander, _) = RawConnection::open(server.addr).await;
    let hoarder = greedy.create_session(LONG).await;
    let reader = bystander.create_session(LONG).await;
    greedy
        .subscribe(hoarder, "", true, event_mask::CONTENTS)
        .await;
    bystander
        .subscribe(reader, "", true, event_mask::CONTENTS)
        .await;
    // 100 events of about 464 bytes each: past the hoarder's 20,000. The
    // reader reads as they come, so its own address's budget never fills.
    let long = "k".repeat(400);
    let mut read: Vec<Event> = Vec::new();
    for i in 0..100 {
        bystander.put(&format!("{long}/{i:02}"), "v").await;
        let acked = read.last().map_or(0, |e| e.seq);
        bystander.keepalive_acking(reader, false, acked).await;
        read.extend(
            events(&mut bystander)
                .await
                .into_iter()
                .filter(|e| e.seq > acked),
        );
    }
    assert_eq!(read.len(), 100, "the reader lost events: {read:?}");
    assert!(read.iter().all(|e| e.kind != EventKind::EventsLost));
    greedy.keepalive_acking(hoarder, false, 0).await;
    let hoarded = events(&mut greedy).await;
    assert!(
        hoarded.iter().any(|e| e.kind == EventKind::EventsLost),
        "the hoarder's queue never overflowed"
    );
    assert!(
        hoarded.len() < 50,
        "{} events kept past the budget",
        hoarded.len()
    );
}

// EV-4: a master-wide budget is the last line.
#[tokio::test]
async fn the_events_waiting_for_all_sessions_are_bounded_in_bytes() {
    let server = start(leasehold_server::Config {
        all_event_bytes: 20_000,
        ..short_lease_config()
    })
    .await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let session = conn.create_session(LONG).await;
    conn.subscribe(session, "", true, event_mask::CONTENTS)
        .await;
    let long = "k".repeat(400);
    for i in 0..100 {
        conn.put(&format!("{long}/{i:02}"), "v").await;
    }
    conn.keepalive_acking(session, false, 0).await;
    let kept = events(&mut conn).await;
    assert!(kept.iter().any(|e| e.kind == EventKind::EventsLost));
    assert!(
        kept.len() < 50,
        "{} events kept past the budget",
        kept.len()
    );
    // Acknowledged, they free the budget for what comes next.
    let last = kept.last().unwrap().seq;
    conn.keepalive_acking(session, false, last).await;
    assert!(events(&mut conn).await.is_empty());
    conn.put(&format!("{long}/next"), "v").await;
    conn.keepalive_acking(session, false, last).await;
    assert_eq!(
        changes(&events(&mut conn).await),
        [(last + 1, Change::Created)]
    );
}

/// The contents each node event of `events` carries, by length.
fn carried(events: &[Event]) -> Vec<Option<usize>> {
    events
        .iter()
        .map(|e| match &e.kind {
            EventKind::Node { contents, .. } => contents.as_ref().map(Vec::len),
            other => panic!("expected a node event, got {other:?}"),
        })
        .collect()
}

// EV-10: under a small maximum frame, contents that would crowd a reply
// stay out of the event, and the session's KeepAlives go on.
#[tokio::test]
async fn a_small_maximum_frame_keeps_large_contents_out_of_events() {
    let config = leasehold_server::Config {
        max_frame: 1024,
        ..short_lease_config()
    };
    let server = start(config).await;
    let (mut conn, _) = RawConnection::open(server.addr).await;
    let session = conn.create_session(LONG).await;
    conn.subscribe(session, "cfg", false, event_mask::CONTENTS)
        .await;
    // An eighth of 1024 bytes is 128: 100 bytes ride along, 900 do not.
    conn.put("cfg", &"s".repeat(100)).await;
    conn.put("cfg", &"L".repeat(900)).await;
    conn.keepalive_acking(session, false, 0).await;
    let heard = events(&mut conn).await;
    assert_eq!(carried(&heard), [Some(100), None]);
    conn.keepalive_acking(session, false, 2).await;
    assert!(events(&mut conn).await.is_empty());
}

// EV-9: fan-out is charged to the address whose subscriptions owe it, not
// to the clients that write.
#[tokio::test]
async fn one_addresss_subscriptions_do_not_make_other_clients_writes_congested() {
    let server = start(leasehold_server::Config {
        fanout_backlog: 8_192,
        fanout_per_payer: 4_096,
        ..short_lease_config()
    })
    .await;
    let greedy_address = "127.0.0.2".parse().unwrap();
    let (mut greedy, _) = RawConnection::open_from(server.addr, greedy_address).await;
    let deep = (0..30)
        .map(|i| format!("d{i}"))
        .collect::<Vec<_>>()
        .join("/");
    let covering: Vec<String> = std::iter::once(String::new())
        .chain(deep.match_indices('/').map(|(i, _)| deep[..i].to_string()))
        .chain(std::iter::once(deep.clone()))
        .collect();
    // 100 sessions with 31 subscriptions each: 3,100 deliveries a write.
    let mut sessions = Vec::new();
    for _ in 0..100 {
        let session = greedy.create_session(LONG).await;
        for key in &covering {
            greedy
                .subscribe(session, key, true, event_mask::CONTENTS)
                .await;
        }
        sessions.push(session);
    }
    let (mut writer, _) = RawConnection::open(server.addr).await;
    for n in 0..300 {
        let put = leasehold_protocol::Put {
            key: deep.clone(),
            contents: n.to_string().into_bytes(),
            flags: 0,
            cas: None,
            ephemeral: None,
        };
        writer.request(Request::Put(put)).await;
    }
    for n in 0..300 {
        let (_, reply) = writer.reply().await;
        assert!(reply.is_ok(), "write {n}: {reply:?}");
    }
    greedy.keepalive_acking(sessions[99], false, 0).await;
    let heard = events(&mut greedy).await;
    assert!(
        heard.iter().any(|e| e.kind == EventKind::EventsLost),
        "the greedy address's sessions hear they lost events: {heard:?}"
    );
}
