//! The client's session states over real loopback TCP, with a relay between
//! client and master whose link can be held or cut.

use std::time::Duration;

use std::sync::atomic::Ordering;

use leasehold::{Client, ErrorCode, Session, SessionOptions, SessionState};
use leasehold_protocol::{Event, EventKind, LeaseGrant, Request, Response, SessionId};
use leasehold_tests::fixture::{recorded, Fixture};
use leasehold_tests::proxy::{Link, Proxy};
use leasehold_tests::scripted::{grant, ScriptedConnection, ScriptedMaster};
use leasehold_tests::server::{short_lease_config, start, TestServer};
use leasehold_tests::states::StateLog;
use tokio::time::Instant;
use uuid::Uuid;

const LEASE: Duration = Duration::from_millis(1_000);
const GRACE: Duration = Duration::from_millis(1_000);
/// Scheduling slack allowed on timers that fire on a shared machine.
const SLACK: Duration = Duration::from_millis(400);
/// How far an observed timer may run ahead of another scheduled from the
/// same instant (timers round to milliseconds; callbacks run when scheduled).
const TIMER_GRANULARITY: Duration = Duration::from_millis(20);

async fn wait_for(session: &Session, state: SessionState, within: Duration) {
    let mut watch = session.watch_state();
    tokio::time::timeout(within, watch.wait_for(|s| *s == state))
        .await
        .unwrap_or_else(|_| panic!("not {state:?} within {within:?}"))
        .expect("session task alive");
}

/// The lease of a session behind a relay that holds its link.
const HELD_LEASE: Duration = Duration::from_secs(2);

/// A session (lease [`HELD_LEASE`], grace 10 s) reaching a short-lease
/// master through a relay whose link the test holds.
struct BehindRelay {
    server: TestServer,
    proxy: Proxy,
    session: Session,
    seen: StateLog,
    _client: Client,
}

async fn behind_relay(name: &str) -> BehindRelay {
    let server = start(short_lease_config()).await;
    let proxy = Proxy::start(server.addr).await;
    let client = Client::connect(proxy.addr.to_string()).await.unwrap();
    let (session, seen) = recorded(
        &client,
        SessionOptions::new(name)
            .lease(HELD_LEASE)
            .grace(Duration::from_secs(10)),
    )
    .await;
    BehindRelay {
        server,
        proxy,
        session,
        seen,
        _client: client,
    }
}

impl BehindRelay {
    /// Holds the link once the session's KeepAlive has reached the master,
    /// which answers it (extending the lease) while the reply waits in the
    /// relay: the client's local lease runs out, and it is in jeopardy.
    async fn hold_until_jeopardy(&self) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.proxy.set(Link::Hold);
        wait_for(&self.session, SessionState::Jeopardy, HELD_LEASE + SLACK).await;
    }
}

// CS-1, SES-6
#[tokio::test]
async fn a_session_with_a_healthy_link_stays_normal_past_many_leases() {
    let Fixture {
        server: _server,
        client,
    } = Fixture::new().await;
    // Long enough that a loaded machine's scheduling cannot make a reply
    // late by a quarter of it; still several leases within the test.
    let (session, seen) = recorded(
        &client,
        SessionOptions::new("steady").lease(Duration::from_secs(2)),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(seen.states(), []);
    assert_eq!(session.state(), SessionState::Normal);
    assert!(client.session_info(session.id()).await.is_ok());
}

// CS-2, CS-3
#[tokio::test]
async fn a_cut_link_goes_normal_jeopardy_expired_on_time() {
    let server = start(short_lease_config()).await;
    let proxy = Proxy::start(server.addr).await;
    let client = Client::connect(proxy.addr.to_string()).await.unwrap();
    let lease = Duration::from_secs(2);
    let (session, seen) = recorded(
        &client,
        SessionOptions::new("cut").lease(lease).grace(GRACE),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let cut_at = Instant::now();
    proxy.set(Link::Cut);
    wait_for(&session, SessionState::Expired, lease + GRACE + SLACK * 2).await;

    assert_eq!(
        seen.states(),
        [SessionState::Jeopardy, SessionState::Expired]
    );
    let expired_at = seen.timed()[1].1;
    // The last reply came before the cut and granted at most one lease.
    let local_expiry = session.local_lease_expiry();
    assert!(
        local_expiry <= cut_at + lease,
        "the local lease ran to {:?} after the cut",
        local_expiry - cut_at
    );
    // Expiry comes the grace period after the local lease ran out, as the
    // library scheduled it (the callback may run a little after).
    let grace = expired_at - local_expiry;
    assert!(
        grace >= GRACE - TIMER_GRANULARITY && grace <= GRACE + SLACK,
        "expired {grace:?} after the local lease ran out"
    );
}

// CS-4, CS-5, KA-5
#[tokio::test]
async fn a_held_link_that_delivers_late_goes_jeopardy_safe_normal_and_keeps_the_session() {
    let held = behind_relay("held").await;
    held.hold_until_jeopardy().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.proxy.set(Link::Pass);
    wait_for(&held.session, SessionState::Normal, Duration::from_secs(3)).await;

    assert_eq!(
        held.seen.states(),
        [
            SessionState::Jeopardy,
            SessionState::Safe,
            SessionState::Normal
        ]
    );
    let direct = held.server.client().await;
    assert!(direct.session_info(held.session.id()).await.is_ok());
    tokio::time::sleep(HELD_LEASE + HELD_LEASE / 2).await;
    assert_eq!(
        held.session.state(),
        SessionState::Normal,
        "it stays normal"
    );
}

// CS-8: a session closed the moment it is normal again after a held link
// closes, its lock released.
#[tokio::test]
async fn a_session_closed_right_after_a_held_link_recovers_closes() {
    let held = behind_relay("held").await;
    let _guard = held
        .session
        .try_lock("k", leasehold::LockOptions::exclusive())
        .await
        .unwrap();
    held.hold_until_jeopardy().await;
    held.proxy.set(Link::Pass);
    wait_for(&held.session, SessionState::Normal, Duration::from_secs(3)).await;
    held.session.close().await.unwrap();
}

// CS-8: a session closed while its probe is opening a new connection (the
// old one fell silent in jeopardy) closes once the link passes. The probe
// is not polled while the session closes, and it held the client's one
// connection attempt: every call of the close waited for it until its
// timeout, and the session was left to expire.
#[tokio::test]
async fn a_session_closed_while_its_probe_opens_a_connection_closes() {
    let held = behind_relay("probing").await;
    let id = held.session.id();
    held.hold_until_jeopardy().await;
    // The probe's handshake waits in the relay now.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let closing = tokio::spawn(held.session.clone().close());
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.proxy.set(Link::Pass);
    let closed = tokio::time::timeout(Duration::from_secs(10), closing)
        .await
        .expect("the close ends")
        .unwrap();
    closed.expect("the close destroys the session");
    let direct = held.server.client().await;
    assert!(
        direct.session_info(id).await.is_err(),
        "the session is gone"
    );
}

// CS-6
#[tokio::test]
async fn a_session_destroyed_by_another_client_expires_at_once() {
    let Fixture { server, client } = Fixture::new().await;
    let (session, seen) = recorded(
        &client,
        SessionOptions::new("victim").lease(Duration::from_secs(10)),
    )
    .await;
    let operator = server.client().await;
    operator.destroy_session(session.id()).await.unwrap();
    wait_for(&session, SessionState::Expired, Duration::from_secs(2)).await;
    assert_eq!(seen.states(), [SessionState::Expired]);
}

// CS-6
#[tokio::test]
async fn a_session_destroyed_while_in_jeopardy_expires_at_next_contact_not_after_grace() {
    let server = start(short_lease_config()).await;
    let proxy = Proxy::start(server.addr).await;
    let client = Client::connect(proxy.addr.to_string()).await.unwrap();
    let lease = Duration::from_secs(2);
    let (session, seen) = recorded(
        &client,
        SessionOptions::new("destroyed-in-jeopardy")
            .lease(lease)
            .grace(Duration::from_secs(30)),
    )
    .await;
    // Cut once the master holds a KeepAlive: it answers it a margin before
    // the lease ends and extends the lease, so the master's lease outlives
    // the client's by most of a lease, time to destroy the session there.
    let direct = server.client().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !direct
        .session_info(session.id())
        .await
        .unwrap()
        .keepalive_held
    {
        assert!(Instant::now() < deadline, "no KeepAlive held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.set(Link::Cut);
    wait_for(&session, SessionState::Jeopardy, lease + SLACK).await;
    let operator = server.client().await;
    operator.destroy_session(session.id()).await.unwrap();
    proxy.set(Link::Pass);
    wait_for(&session, SessionState::Expired, Duration::from_secs(5)).await;
    assert_eq!(
        seen.states(),
        [SessionState::Jeopardy, SessionState::Expired]
    );
}

// SES-8
#[tokio::test]
async fn closing_a_session_destroys_it_on_the_master() {
    let Fixture {
        server: _server,
        client,
    } = Fixture::new().await;
    let session = client
        .create_session(SessionOptions::new("closing"))
        .await
        .unwrap();
    let id = session.id();
    session.close().await.unwrap();
    let error = client.session_info(id).await.unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::SessionExpired));
}

// CS-8
#[tokio::test]
async fn closing_or_detaching_a_session_makes_every_clone_closed_not_expired() {
    let Fixture {
        server: _server,
        client,
    } = Fixture::new().await;
    for detach in [false, true] {
        let session = client
            .create_session(SessionOptions::new("clones"))
            .await
            .unwrap();
        let clone = session.clone();
        let seen = StateLog::record(&clone);
        if detach {
            session.detach().await;
        } else {
            session.close().await.unwrap();
        }
        // Given up, not lost: closing is not expiring.
        assert_eq!(clone.state(), SessionState::Closed);
        assert_eq!(seen.states(), [SessionState::Closed]);
        tokio::time::timeout(Duration::from_secs(1), clone.expired())
            .await
            .expect("the invalidation signal fires");
    }
}

// SES-8
#[tokio::test]
async fn dropping_the_last_handle_destroys_the_session() {
    let Fixture {
        server: _server,
        client,
    } = Fixture::new().await;
    let session = client
        .create_session(SessionOptions::new("dropped"))
        .await
        .unwrap();
    let id = session.id();
    let clone = session.clone();
    drop(session);
    assert!(client.session_info(id).await.is_ok(), "a clone still lives");
    drop(clone);
    let deadline = Instant::now() + Duration::from_secs(3);
    while client.session_info(id).await.is_ok() {
        assert!(Instant::now() < deadline, "session still on the master");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// SES-9
#[tokio::test]
async fn a_detached_session_stays_on_the_master_until_its_lease_runs_out() {
    let Fixture {
        server: _server,
        client,
    } = Fixture::new().await;
    let session = client
        .create_session(SessionOptions::new("detached").lease(Duration::from_millis(500)))
        .await
        .unwrap();
    let id = session.detach().await.id;
    assert!(client.session_info(id).await.is_ok());
    tokio::time::sleep(Duration::from_millis(800)).await;
    let error = client.session_info(id).await.unwrap_err();
    assert_eq!(error.code(), Some(ErrorCode::SessionExpired));
}

// CS-7
#[tokio::test]
async fn a_session_keeper_reuses_the_live_session_and_replaces_an_expired_one() {
    let Fixture {
        server: _server,
        client,
    } = Fixture::new().await;
    let keeper = leasehold::SessionKeeper::new(client.clone(), SessionOptions::new("keeper"));
    let first = keeper.session().await.unwrap();
    assert_eq!(keeper.session().await.unwrap().id(), first.id());
    client.destroy_session(first.id()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), first.expired())
        .await
        .expect("the invalidation signal fires");
    let second = keeper.session().await.unwrap();
    assert_ne!(second.id(), first.id());
    keeper.close().await.unwrap();
    assert!(client.session_info(second.id()).await.is_err());
}

/// Answers each KeepAlive of `busy` on a 50 ms tick, so the connection
/// keeps delivering frames, and holds every KeepAlive of `quiet` but its
/// first probe, which it answers `probe_delay` after it arrived. Stops
/// `after` the probe is answered; returns how many probes `quiet` sent.
async fn serve_a_slow_probe(
    conn: &mut ScriptedConnection,
    (quiet, busy): (SessionId, SessionId),
    probe_delay: Duration,
    after: Duration,
) -> usize {
    let mut probes = 0;
    let mut probe: Option<(u64, Instant)> = None;
    let mut busy_waiting = Vec::new();
    let mut stop_at: Option<Instant> = None;
    let give_up = Instant::now() + Duration::from_secs(10);
    while stop_at.is_none_or(|at| Instant::now() < at) && Instant::now() < give_up {
        match conn.request(Duration::from_millis(50)).await {
            Some((id, Request::KeepAlive(ka))) if ka.session.id == busy => busy_waiting.push(id),
            Some((id, Request::KeepAlive(ka))) if ka.session.id == quiet && !ka.hold => {
                probes += 1;
                probe.get_or_insert((id, Instant::now()));
            }
            Some((_, Request::KeepAlive(_))) => {}
            Some((_, other)) => panic!("unexpected request {other:?}"),
            None => {}
        }
        for id in busy_waiting.drain(..) {
            let reply = Response::KeepAlive {
                epoch: 1,
                lease: grant(LEASE),
                events: vec![],
            };
            conn.reply(id, Ok(reply)).await;
        }
        if let Some((id, arrived)) = probe.filter(|(_, at)| at.elapsed() >= probe_delay) {
            if stop_at.is_none() {
                let lease = LeaseGrant {
                    remaining_ms: LEASE.as_millis() as u64,
                    held_ms: arrived.elapsed().as_millis() as u64,
                };
                let reply = Response::KeepAlive {
                    epoch: 1,
                    lease,
                    events: vec![],
                };
                conn.reply(id, Ok(reply)).await;
                stop_at = Some(Instant::now() + after);
            }
        }
    }
    probes
}

// CS-2: a master that is slow, not gone, answers in the end; abandoning
// its connection or sending more probes would only add to its backlog.
#[tokio::test]
async fn in_jeopardy_one_probe_waits_as_long_as_its_connection_delivers_frames() {
    let master = ScriptedMaster::bind().await;
    let (client, mut conn) =
        tokio::join!(Client::connect(master.addr.to_string()), master.accept(1));
    let client = client.unwrap();
    let (quiet_id, busy_id) = (Uuid::from_u128(1), Uuid::from_u128(2));
    let options = |name: &str| {
        SessionOptions::new(name)
            .lease(LEASE)
            .grace(Duration::from_secs(20))
    };
    let (quiet, ()) = tokio::join!(
        client.create_session(options("quiet")),
        conn.create_session(1, quiet_id, LEASE)
    );
    let (busy, ()) = tokio::join!(
        client.create_session(options("busy")),
        conn.create_session(1, busy_id, LEASE)
    );
    let (quiet, _busy) = (quiet.unwrap(), busy.unwrap());
    let log = StateLog::record(&quiet);
    let accepted = master.count_the_rest();

    let probe_delay = 3 * LEASE;
    let probes = serve_a_slow_probe(
        &mut conn,
        (quiet_id, busy_id),
        probe_delay,
        Duration::from_millis(200),
    )
    .await;

    assert_eq!(
        log.states(),
        [
            SessionState::Jeopardy,
            SessionState::Safe,
            SessionState::Normal
        ]
    );
    assert_eq!(probes, 1, "one probe at a time");
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "no second connection");
}

// KA-6, FO-6: the Welcome of a newer master names its epoch, which saves
// the round trip of a `WrongEpoch` refusal.
#[tokio::test]
async fn after_reconnecting_to_a_newer_master_the_first_keepalive_names_its_epoch_and_acknowledges_nothing(
) {
    let master = ScriptedMaster::bind().await;
    let (client, mut conn) =
        tokio::join!(Client::connect(master.addr.to_string()), master.accept(1));
    let client = client.unwrap();
    let id = Uuid::from_u128(1);
    let lease = Duration::from_secs(5);
    let (session, ()) = tokio::join!(
        client.create_session(SessionOptions::new("moving").lease(lease)),
        conn.create_session(1, id, lease)
    );
    let session = session.unwrap();
    let log = StateLog::record(&session);
    // An event of the first master, so there is something to acknowledge.
    let Some((first, Request::KeepAlive(_))) = conn.request(Duration::from_secs(5)).await else {
        panic!("expected a KeepAlive");
    };
    let events = vec![Event {
        seq: 7,
        kind: EventKind::EventsLost,
    }];
    let reply = Response::KeepAlive {
        epoch: 1,
        lease: grant(lease),
        events,
    };
    conn.reply(first, Ok(reply)).await;
    match conn.request(Duration::from_secs(5)).await {
        Some((_, Request::KeepAlive(ka))) => assert_eq!((ka.epoch, ka.acked_seq), (1, 7)),
        other => panic!("expected a KeepAlive, got {other:?}"),
    }
    drop(conn);

    let mut conn = master.accept(2).await;
    let Some((reconnected, Request::KeepAlive(ka))) = conn.request(Duration::from_secs(5)).await
    else {
        panic!("expected a KeepAlive");
    };
    assert_eq!((ka.epoch, ka.acked_seq), (2, 0));
    let events = vec![Event {
        seq: 1,
        kind: EventKind::Failover { epoch: 2 },
    }];
    let reply = Response::KeepAlive {
        epoch: 2,
        lease: grant(lease),
        events,
    };
    conn.reply(reconnected, Ok(reply)).await;
    match conn.request(Duration::from_secs(5)).await {
        Some((_, Request::KeepAlive(ka))) => assert_eq!((ka.epoch, ka.acked_seq), (2, 1)),
        other => panic!("expected a KeepAlive, got {other:?}"),
    }
    assert_eq!(log.states(), [SessionState::Failover, SessionState::Normal]);
}

// FO-6: after a fail-over, a stream hears `EventsLost` only once its
// subscription has been made again on the new master, so a reader that
// re-reads then hears of every change after what it read.
#[tokio::test]
async fn after_a_failover_a_stream_hears_events_lost_only_once_it_is_subscribed_again() {
    let (_master, mut conn, _client, _session, mut streams, keepalive) =
        subscribed_on_a_scripted_master(1).await;
    let mut stream = streams.pop().expect("one stream");
    let patience = Duration::from_secs(5);
    conn.reply(keepalive, Ok(failover_reply())).await;
    let resubscribe = loop {
        match conn.request(patience).await {
            Some((id, Request::Subscribe { .. })) => break id,
            Some((_, Request::KeepAlive(_))) => {}
            other => panic!("expected the subscription made again, got {other:?}"),
        }
    };
    // The stream tells of the session's states as they come; of its own
    // events, nothing while the Subscribe is not answered.
    let mut next_but_states = async |within: Duration| loop {
        match tokio::time::timeout(within, stream.next()).await {
            Ok(Some(leasehold::SubscriptionEvent::Session(_))) => {}
            other => break other,
        }
    };
    let early = next_but_states(Duration::from_millis(200)).await;
    assert!(
        early.is_err(),
        "heard {early:?} before the subscription was back"
    );
    let subscribed = Response::Subscribed { subscription: 2 };
    conn.reply(resubscribe, Ok(subscribed)).await;
    let heard = next_but_states(patience).await;
    assert!(
        matches!(heard, Ok(Some(leasehold::SubscriptionEvent::EventsLost))),
        "{heard:?}"
    );
}

/// A session on a scripted master, with `streams` subscriptions made on
/// keys "k0", "k1", ... (answered as subscriptions 1, 2, ...), and the id
/// of the KeepAlive the master holds.
async fn subscribed_on_a_scripted_master(
    streams: usize,
) -> (
    ScriptedMaster,
    ScriptedConnection,
    Client,
    Session,
    Vec<leasehold::Subscription>,
    u64,
) {
    let master = ScriptedMaster::bind().await;
    let (client, mut conn) =
        tokio::join!(Client::connect(master.addr.to_string()), master.accept(1));
    let client = client.unwrap();
    let lease = Duration::from_secs(5);
    let (session, ()) = tokio::join!(
        client.create_session(SessionOptions::new("watching").lease(lease)),
        conn.create_session(1, Uuid::from_u128(1), lease)
    );
    let session = session.unwrap();
    let patience = Duration::from_secs(5);
    let mut keepalive = None;
    let mut subscriptions = Vec::new();
    for n in 0..streams {
        let key = format!("k{n}");
        let subscribing = session.subscribe(&key, leasehold::SubscribeOptions::exact());
        let answering = async {
            loop {
                match conn.request(patience).await {
                    Some((id, Request::Subscribe { .. })) => {
                        let subscribed = Response::Subscribed {
                            subscription: n as u64 + 1,
                        };
                        conn.reply(id, Ok(subscribed)).await;
                        break;
                    }
                    Some((id, Request::KeepAlive(_))) => keepalive = Some(id),
                    other => panic!("expected a Subscribe, got {other:?}"),
                }
            }
        };
        let (stream, ()) = tokio::join!(subscribing, answering);
        subscriptions.push(stream.unwrap());
    }
    let keepalive = match keepalive {
        Some(id) => id,
        None => match conn.request(patience).await {
            Some((id, Request::KeepAlive(_))) => id,
            other => panic!("expected a KeepAlive, got {other:?}"),
        },
    };
    (master, conn, client, session, subscriptions, keepalive)
}

/// The KeepAlive answer of a new master, epoch 2.
fn failover_reply() -> Response {
    Response::KeepAlive {
        epoch: 2,
        lease: grant(Duration::from_secs(5)),
        events: vec![Event {
            seq: 1,
            kind: EventKind::Failover { epoch: 2 },
        }],
    }
}

// FO-6: after a fail-over the subscriptions are asked for again together:
// the new master has every Subscribe before it answers any.
#[tokio::test]
async fn after_a_failover_every_subscription_is_asked_for_again_at_once() {
    const STREAMS: usize = 4;
    let (_master, mut conn, _client, _session, _streams, keepalive) =
        subscribed_on_a_scripted_master(STREAMS).await;
    conn.reply(keepalive, Ok(failover_reply())).await;
    let mut asked = Vec::new();
    while asked.len() < STREAMS {
        match conn.request(Duration::from_secs(5)).await {
            Some((id, Request::Subscribe { key, .. })) => asked.push((id, key)),
            Some((_, Request::KeepAlive(_))) => {}
            other => panic!(
                "{} of {STREAMS} Subscribes came before any was answered; then {other:?}",
                asked.len()
            ),
        }
    }
    let mut keys: Vec<_> = asked.iter().map(|(_, key)| key.clone()).collect();
    keys.sort();
    assert_eq!(keys, ["k0", "k1", "k2", "k3"]);
}

// FO-6, EV-8: a subscription made again after a fail-over whose session
// ends before the new master answers does not outlive the session: its
// stream ends.
#[tokio::test]
async fn a_stream_made_again_for_a_session_that_ended_meanwhile_ends() {
    let (_master, mut conn, _client, session, mut streams, keepalive) =
        subscribed_on_a_scripted_master(1).await;
    conn.reply(keepalive, Ok(failover_reply())).await;
    let patience = Duration::from_secs(5);
    let mut resubscribe = None;
    let mut next_keepalive = None;
    while resubscribe.is_none() || next_keepalive.is_none() {
        match conn.request(patience).await {
            Some((id, Request::Subscribe { .. })) => resubscribe = Some(id),
            Some((id, Request::KeepAlive(_))) => next_keepalive = Some(id),
            other => panic!("expected a Subscribe and a KeepAlive, got {other:?}"),
        }
    }
    let ended = leasehold_protocol::Error::new(
        leasehold_protocol::ErrorCode::SessionExpired,
        "the session ended",
    );
    conn.reply(next_keepalive.unwrap(), Err(ended)).await;
    wait_for(&session, SessionState::Expired, patience).await;
    let subscribed = Response::Subscribed { subscription: 2 };
    conn.reply(resubscribe.unwrap(), Ok(subscribed)).await;
    let stream = &mut streams[0];
    let end = tokio::time::timeout(patience, async {
        while let Some(event) = stream.next().await {
            assert!(
                !matches!(event, leasehold::SubscriptionEvent::Changed { .. }),
                "{event:?}"
            );
        }
    })
    .await;
    assert!(end.is_ok(), "the stream of an expired session goes on");
}

// SES-8: dropping the last handle asks the session's task to destroy it,
// which it can only do while the runtime runs. A program that returns
// from `main` with its session open ends its runtime first: the session
// stays on the master until its lease runs out (README says so, and to
// close before returning).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_runtime_ends_without_a_close_lives_until_its_lease_runs_out() {
    let Fixture { server, client } = Fixture::new().await;
    let addr = server.addr.to_string();
    let id = tokio::task::spawn_blocking(move || {
        // Another program's main: its own runtime, ended with the session
        // still held. The session outlives the runtime, as a value held in
        // `main` does: dropping it inside would ask the runtime's tasks to
        // destroy it, and whether they got to it before the runtime ended
        // would be a race.
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let session = runtime.block_on(async {
            let client = Client::connect(addr.as_str()).await.unwrap();
            let options = SessionOptions::new("returns from main").lease(LEASE * 3);
            client.create_session(options).await.unwrap()
        });
        let id = session.id();
        drop(runtime);
        drop(session);
        id
    })
    .await
    .unwrap();
    let info = client.session_info(id).await;
    assert!(info.is_ok(), "the session is still on the master: {info:?}");
    // Its lease, the master's margin on it, and slack.
    let deadline = Instant::now() + LEASE * 3 * 2 + SLACK;
    loop {
        match client.session_info(id).await {
            Err(e) if e.code() == Some(ErrorCode::SessionExpired) => break,
            other => {
                assert!(Instant::now() < deadline, "still there: {other:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
