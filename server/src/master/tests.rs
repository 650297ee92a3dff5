//! The master task's handling, driven by hand: each test sets the time of
//! the turn and calls what the loop would.

use std::time::Duration;

use leasehold_protocol::{
    Behavior, CreateSession, Error, ErrorCode, KeepAlive, KeepAliveGrant, Request, Response,
    SessionToken,
};
use tokio::time::Instant;

use super::{Call, Input, Master};
use crate::config::Config;
use crate::observe::{Grant, MasterEvent, MasterObserver};
use crate::time::Millis;

/// What the loop does, by hand: each at the time the test set.
impl Master {
    fn handle(&mut self, call: Call) {
        self.turn(Input::Call(call), self.engine.now);
    }

    fn fire_timers(&mut self, backlog: usize) {
        let caught_up = self.engine.now;
        self.turn(Input::TimersDue { caught_up, backlog }, self.engine.now);
    }

    fn run_held(&mut self) {
        self.turn(Input::HeldWork, self.engine.now);
    }

    fn deliver_events(&mut self) {
        self.turn(Input::DeliverEvents, self.engine.now);
    }

    fn durable(&mut self) {
        self.on_durable(self.engine.now);
    }
}

/// A master on `config`'s store, as `Server::open` starts one.
fn started(config: &mut Config, store: Option<crate::MemoryStore>) -> Master {
    let store = store.map(|s| Box::new(s) as Box<dyn crate::Store>);
    let start = crate::recovery::open(config, store).unwrap();
    Master::new(config.clone(), start, Instant::now())
}

async fn call(master: &mut Master, request: Request) -> Result<Response, Error> {
    call_from(master, request, None).await
}

/// `call`, as a peer at `peer` asks it.
async fn call_from(
    master: &mut Master,
    request: Request,
    peer: Option<std::net::IpAddr>,
) -> Result<Response, Error> {
    let (reply, mut rx) = crate::reply::channel(1);
    master.handle(Call {
        request,
        reply,
        peer,
        caller: None,
        arrived: None,
    });
    // A change is answered once the store has it.
    loop {
        master.durable();
        if let Ok(reply) = rx.try_recv() {
            return reply.into_body();
        }
        assert!(master.commit.is_some(), "answered at once without a store");
        super::durable(&mut master.commit)
            .await
            .expect("the writer goes on");
    }
}

/// An unheld KeepAlive for `session` under epoch 1, acknowledging nothing.
pub(super) fn keepalive(session: SessionToken) -> Request {
    Request::KeepAlive(KeepAlive {
        session,
        epoch: 1,
        acked_seq: 0,
        hold: false,
    })
}

/// Creates a session named `name` and returns its token.
async fn created(master: &mut Master, name: &str, lease_ms: Option<u64>) -> SessionToken {
    token_of(call(master, create_session(name, lease_ms)).await)
}

/// A request for a session named `name`.
pub(super) fn create_session(name: &str, lease_ms: Option<u64>) -> Request {
    Request::CreateSession(CreateSession {
        name: name.into(),
        lease_ms,
        lock_delay_ms: None,
        behavior: Behavior::Release,
        checks: Vec::new(),
    })
}

/// The token a `SessionCreated` answer gives.
pub(super) fn token_of(created: Result<Response, Error>) -> SessionToken {
    let Ok(Response::SessionCreated {
        session, secret, ..
    }) = created
    else {
        panic!("expected a session, got {created:?}");
    };
    SessionToken {
        id: session,
        secret,
    }
}

// SES-6, KA-7
#[tokio::test]
async fn a_keepalive_after_the_lease_ran_out_is_refused_even_before_its_timer_runs() {
    let mut master = started(
        &mut Config {
            min_lease: Duration::from_millis(100),
            ..Config::default()
        },
        None,
    );
    let token = created(&mut master, "late", Some(1_000)).await;
    // The lease-end timer has not been handled: only the KeepAlive's own
    // check can catch this.
    master.engine.now = master.engine.now + Duration::from_millis(1_001);
    let reply = call(&mut master, keepalive(token)).await;
    assert_eq!(reply.unwrap_err().code, ErrorCode::SessionExpired);
    assert!(master.engine.state.session(token.id).is_none());
}

const LEASE: Duration = Duration::from_millis(1_000);

/// A master restarted on a store holding one session, which no
/// KeepAlive has named since.
async fn restarted_with_a_session() -> (Master, SessionToken) {
    let mut config = Config {
        min_lease: Duration::from_millis(100),
        ..Config::default()
    };
    let store = crate::MemoryStore::default();
    let mut first = started(&mut config, Some(store.clone()));
    let token = created(&mut first, "recovered", Some(LEASE.as_millis() as u64)).await;
    drop(first);
    (started(&mut config, Some(store)), token)
}

// FO-2
#[tokio::test]
async fn a_recovered_session_unheard_from_gets_one_more_lease_while_requests_wait() {
    let (mut master, session) = restarted_with_a_session().await;
    master.engine.now = master.engine.now + LEASE;
    master.fire_timers(5);
    assert!(
        master.engine.state.session(session.id).is_some(),
        "one more lease"
    );
    master.engine.now = master.engine.now + LEASE;
    master.fire_timers(5);
    assert!(
        master.engine.state.session(session.id).is_none(),
        "only once"
    );
}

// FO-2
#[tokio::test]
async fn a_recovered_session_unheard_from_ends_with_its_lease_when_no_request_waits() {
    let (mut master, session) = restarted_with_a_session().await;
    master.engine.now = master.engine.now + LEASE;
    master.fire_timers(0);
    assert!(master.engine.state.session(session.id).is_none());
}

// FO-2
#[tokio::test]
async fn a_recovered_session_that_sent_a_keepalive_ends_with_its_lease_even_while_requests_wait() {
    let (mut master, session) = restarted_with_a_session().await;
    let epoch = master.engine.config.epoch;
    let reply = call(
        &mut master,
        Request::KeepAlive(KeepAlive {
            session,
            epoch,
            acked_seq: 0,
            hold: false,
        }),
    )
    .await;
    assert!(reply.is_ok(), "{reply:?}");
    master.engine.now = master.engine.now + LEASE;
    master.fire_timers(5);
    assert!(master.engine.state.session(session.id).is_none());
}

/// A master in memory with `n` sessions, each subscribed to every
/// key (a prefix subscription on the root).
async fn watched_by(n: usize, config: Config) -> (Master, Vec<SessionToken>) {
    let mut config = config;
    let mut master = started(&mut config, None);
    let mut sessions = Vec::with_capacity(n);
    for _ in 0..n {
        sessions.push(subscribed(&mut master).await);
    }
    (master, sessions)
}

async fn subscribed(master: &mut Master) -> SessionToken {
    subscribed_to(master, "", true).await
}

async fn subscribed_to(master: &mut Master, key: &str, prefix: bool) -> SessionToken {
    let token = created(master, "watcher", None).await;
    let subscribe = Request::Subscribe {
        session: token,
        key: key.into(),
        prefix,
        mask: leasehold_protocol::event_mask::CONTENTS,
    };
    assert!(call(master, subscribe).await.is_ok());
    token
}

fn put(key: &str) -> Request {
    Request::Put(leasehold_protocol::Put {
        key: key.into(),
        contents: Vec::new(),
        flags: 0,
        cas: None,
        ephemeral: None,
    })
}

fn told(master: &Master, sessions: &[SessionToken]) -> usize {
    sessions
        .iter()
        .filter(|s| master.engine.events.has_pending(s.id))
        .count()
}

// EV-9
#[tokio::test]
async fn a_change_many_subscriptions_hear_is_queued_a_slice_at_a_time() {
    let n = crate::config::FANOUT_SLICE + 100;
    let (mut master, sessions) = watched_by(n, Config::default()).await;
    assert!(call(&mut master, put("k")).await.is_ok());
    assert_eq!(told(&master, &sessions), crate::config::FANOUT_SLICE);
    assert!(master.engine.events.owes());
    master.deliver_events();
    assert_eq!(told(&master, &sessions), n);
    assert!(!master.engine.events.owes());
}

// EV-5, EV-9: a write costs what matches it, not what exists.
#[tokio::test]
async fn a_write_looks_only_at_the_subscriptions_that_match_it() {
    let mut master = started(&mut Config::default(), None);
    let mut sessions = Vec::new();
    for i in 0..crate::config::FANOUT_SLICE * 4 {
        let token = subscribed_to(&mut master, &format!("k{i}"), false).await;
        sessions.push(token);
    }
    assert!(call(&mut master, put("elsewhere")).await.is_ok());
    assert!(
        !master.engine.events.owes(),
        "nothing matched, nothing to walk"
    );
    assert_eq!(master.engine.events.owed(), 0);
    assert!(call(&mut master, put("k7")).await.is_ok());
    assert_eq!(told(&master, &sessions), 1);
}

// EV-5, EV-9
#[tokio::test]
async fn a_widened_mask_does_not_reach_back_to_changes_still_being_fanned_out() {
    let (mut master, _) = watched_by(crate::config::FANOUT_SLICE + 100, Config::default()).await;
    let parent = subscribed_to(&mut master, "k", false).await;
    assert!(call(&mut master, put("k/c")).await.is_ok());
    assert!(
        master.engine.events.owes(),
        "k/c's fan-out is still under way"
    );
    let widen = Request::Subscribe {
        session: parent,
        key: "k".into(),
        prefix: false,
        mask: leasehold_protocol::event_mask::CHILD_ADDED,
    };
    assert!(call(&mut master, widen).await.is_ok());
    while master.engine.events.owes() {
        master.deliver_events();
    }
    assert_eq!(queued(&master, parent), Vec::<String>::new());
    assert!(call(&mut master, put("k/d")).await.is_ok());
    while master.engine.events.owes() {
        master.deliver_events();
    }
    assert_eq!(queued(&master, parent), ["k"], "k/d's ChildAdded");
}

// EV-1, EV-9
#[tokio::test]
async fn events_of_a_later_change_come_after_those_still_owed() {
    let n = crate::config::FANOUT_SLICE + 100;
    let (mut master, sessions) = watched_by(n, Config::default()).await;
    let last = sessions[n - 1];
    assert!(call(&mut master, put("a")).await.is_ok());
    assert!(call(&mut master, put("b")).await.is_ok());
    while master.engine.events.owes() {
        master.deliver_events();
    }
    assert_eq!(queued(&master, last), ["a", "b"]);
    assert_eq!(queued(&master, sessions[0]), ["a", "b"]);
}

// EV-9
#[tokio::test]
async fn a_subscription_made_after_a_change_does_not_hear_of_it() {
    let n = crate::config::FANOUT_SLICE + 100;
    let (mut master, _) = watched_by(n, Config::default()).await;
    assert!(call(&mut master, put("a")).await.is_ok());
    assert!(master.engine.events.owes());
    let late = subscribed(&mut master).await;
    while master.engine.events.owes() {
        master.deliver_events();
    }
    assert_eq!(queued(&master, late), Vec::<String>::new());
}

// EV-9, ERR-16
#[tokio::test]
async fn writes_are_refused_while_too_many_deliveries_are_owed_and_served_again_after() {
    let config = Config {
        fanout_backlog: 2 * crate::config::FANOUT_SLICE,
        ..Config::default()
    };
    let (mut master, sessions) = watched_by(crate::config::FANOUT_SLICE + 1_000, config).await;
    // Each write adds more than a slice's worth, so the debt grows.
    let mut refused = None;
    for n in 0..100 {
        if let Err(e) = call(&mut master, put(&format!("k{n}"))).await {
            refused = Some(e);
            break;
        }
    }
    let refused = refused.expect("a write refused once the fan-out fell behind");
    assert!(
        matches!(refused.code, ErrorCode::Congested { .. }),
        "{refused:?}"
    );
    // Reads and KeepAlives are still served.
    let keepalive = Request::KeepAlive(KeepAlive {
        session: sessions[0],
        epoch: master.engine.config.epoch,
        acked_seq: 0,
        hold: false,
    });
    assert!(call(&mut master, keepalive).await.is_ok());
    while master.engine.events.owes() {
        master.deliver_events();
    }
    assert!(call(&mut master, put("after")).await.is_ok());
}

// EV-4, EV-9: the events a full queue drops are work a slice counts, so
// a slice that frees a thousand events walks no further.
#[tokio::test]
async fn a_slice_of_fan_out_counts_the_events_a_full_queue_drops() {
    let mut master = started(&mut Config::default(), None);
    let full = subscribed_to(&mut master, "k", false).await;
    for _ in 0..crate::config::EVENT_QUEUE {
        assert!(call(&mut master, put("k")).await.is_ok());
    }
    let mut others = Vec::new();
    for _ in 0..crate::config::FANOUT_SLICE {
        others.push(subscribed_to(&mut master, "k", false).await);
    }
    assert!(call(&mut master, put("k")).await.is_ok());
    assert_eq!(queued(&master, full), ["lost"]);
    assert_eq!(told(&master, &others), 0, "the slice ended at the drop");
    master.deliver_events();
    assert_eq!(told(&master, &others), others.len());
}

/// A session that `peer` created and subscribed to every key.
async fn subscribed_from(master: &mut Master, peer: std::net::IpAddr) -> SessionToken {
    let create = Request::CreateSession(CreateSession {
        name: "watcher".into(),
        lease_ms: None,
        lock_delay_ms: None,
        behavior: Behavior::Release,
        checks: Vec::new(),
    });
    let Ok(Response::SessionCreated {
        session, secret, ..
    }) = call_from(master, create, Some(peer)).await
    else {
        panic!("no session");
    };
    let token = SessionToken {
        id: session,
        secret,
    };
    let subscribe = Request::Subscribe {
        session: token,
        key: String::new(),
        prefix: true,
        mask: leasehold_protocol::event_mask::CONTENTS,
    };
    assert!(call_from(master, subscribe, Some(peer)).await.is_ok());
    token
}

/// What a session's queue holds: the key of each node event, `lost` for
/// `EventsLost`.
fn queued(master: &Master, session: SessionToken) -> Vec<String> {
    master
        .engine
        .events
        .pending(session.id, usize::MAX, true)
        .into_iter()
        .map(|e| match e.kind {
            leasehold_protocol::EventKind::Node { key, .. } => key,
            leasehold_protocol::EventKind::EventsLost => "lost".into(),
            other => panic!("expected a node event or EventsLost, got {other:?}"),
        })
        .collect()
}

/// A master whose fan-out may owe one address two slices and all of
/// them four, with `noisy` sessions from 127.0.0.2 and one from 127.0.0.1
/// subscribed to every key.
async fn noisy_subscribers(noisy: usize) -> (Master, Vec<SessionToken>, SessionToken) {
    let mut config = Config {
        fanout_per_payer: 2 * crate::config::FANOUT_SLICE,
        fanout_backlog: 4 * crate::config::FANOUT_SLICE,
        ..Config::default()
    };
    let mut master = started(&mut config, None);
    let mut sessions = Vec::new();
    for _ in 0..noisy {
        sessions.push(subscribed_from(&mut master, [127, 0, 0, 2].into()).await);
    }
    let quiet = subscribed_from(&mut master, [127, 0, 0, 1].into()).await;
    (master, sessions, quiet)
}

// EV-9: fan-out is charged to the address whose subscriptions owe it.
#[tokio::test]
async fn writes_go_on_while_one_addresss_subscriptions_owe_more_than_their_share() {
    let (mut master, noisy, quiet) = noisy_subscribers(crate::config::FANOUT_SLICE + 100).await;
    for n in 0..20 {
        let written = call_from(
            &mut master,
            put(&format!("k{n}")),
            Some([127, 0, 0, 3].into()),
        );
        let written = written.await;
        assert!(written.is_ok(), "write {n}: {written:?}");
    }
    assert!(master.engine.events.is_cut_off(Some([127, 0, 0, 2].into())));
    while master.engine.events.owes() {
        master.deliver_events();
    }
    let every: Vec<String> = (0..20).map(|n| format!("k{n}")).collect();
    assert_eq!(queued(&master, quiet), every, "the other address hears all");
    for session in [noisy[0], noisy[noisy.len() - 1]] {
        let heard = queued(&master, session);
        assert_eq!(heard.last().map(String::as_str), Some("lost"), "{heard:?}");
        assert!(heard.len() < every.len(), "{heard:?}");
    }
}

// EV-1, EV-9: a cut-off ends with `EventsLost`, after what was heard
// before it and before any later change.
#[tokio::test]
async fn a_cut_off_addresss_sessions_hear_events_lost_then_later_changes() {
    let (mut master, noisy, _) = noisy_subscribers(crate::config::FANOUT_SLICE + 100).await;
    let writer = Some([127, 0, 0, 3].into());
    // The first slice of `a` is queued at once; the rest of `a` and `b`
    // are owed; `c` would owe more than the address's share.
    for key in ["a", "b", "c"] {
        assert!(call_from(&mut master, put(key), writer).await.is_ok());
    }
    assert!(master.engine.events.is_cut_off(Some([127, 0, 0, 2].into())));
    while master.engine.events.owes() {
        master.deliver_events();
    }
    assert!(!master.engine.events.is_cut_off(Some([127, 0, 0, 2].into())));
    assert!(call_from(&mut master, put("d"), writer).await.is_ok());
    while master.engine.events.owes() {
        master.deliver_events();
    }
    assert_eq!(queued(&master, noisy[0]), ["a", "lost", "d"]);
    assert_eq!(queued(&master, noisy[noisy.len() - 1]), ["lost", "d"]);
}

/// A master whose observer writes down every lease event.
fn observed(config: Config) -> (Master, std::sync::Arc<std::sync::Mutex<Vec<MasterEvent>>>) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let mut config = Config {
        observer: Some(MasterObserver::new(move |e: &MasterEvent| {
            log.lock().unwrap().push(e.clone());
        })),
        ..config
    };
    (started(&mut config, None), seen)
}

// LEASE-1, LEASE-2, SES-6
#[tokio::test]
async fn the_observer_is_told_each_grant_at_its_expiry_and_the_end_of_the_session() {
    let (mut master, seen) = observed(Config::default());
    let start = master.engine.now;
    let token = created(&mut master, "watched", Some(5_000)).await;
    master.engine.now = start + Duration::from_millis(1_000);
    let kept = call(&mut master, keepalive(token)).await;
    assert!(kept.is_ok(), "{kept:?}");
    master.engine.now = start + Duration::from_millis(6_000);
    master.fire_timers(0);
    let id = token.id;
    assert_eq!(
        *seen.lock().unwrap(),
        [
            MasterEvent::Serving {
                epoch: master.engine.config.epoch,
                now: start
            },
            MasterEvent::Granted {
                session: id,
                now: start,
                expires: start + Duration::from_millis(5_000),
                why: Grant::Created
            },
            MasterEvent::Granted {
                session: id,
                now: start + Duration::from_millis(1_000),
                expires: start + Duration::from_millis(6_000),
                why: Grant::KeepAlive
            },
            MasterEvent::Ended {
                session: id,
                now: start + Duration::from_millis(6_000),
                cause: crate::EndCause::Expired
            },
        ]
    );
}

// FO-2
#[tokio::test]
async fn a_master_that_recovers_sessions_tells_the_observer_of_their_fresh_leases() {
    let store = crate::MemoryStore::default();
    let mut first = started(&mut Config::default(), Some(store.clone()));
    let token = created(&mut first, "survivor", Some(5_000)).await;
    drop(first);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let mut config = Config {
        observer: Some(MasterObserver::new(move |e: &MasterEvent| {
            log.lock().unwrap().push(e.clone());
        })),
        ..Config::default()
    };
    let second = started(&mut config, Some(store));
    let now = second.engine.now;
    assert_eq!(
        *seen.lock().unwrap(),
        [
            MasterEvent::Serving {
                epoch: second.engine.config.epoch,
                now
            },
            MasterEvent::Granted {
                session: token.id,
                now,
                expires: now + Duration::from_millis(5_000),
                why: Grant::Failover
            }
        ]
    );
}

// LEASE-4
#[tokio::test(start_paused = true)]
async fn a_master_whose_clock_runs_fast_counts_master_time_at_its_rate() {
    let master = started(
        &mut Config {
            clock_rate: 1.25,
            ..Config::default()
        },
        None,
    );
    tokio::time::advance(Duration::from_secs(8)).await;
    let (start, offset) = (master.clock.start(), master.clock.at(master.clock.start()));
    assert_eq!(master.read_clock(), offset + Duration::from_secs(10));
    // And its timers wake when its own clock reaches their time.
    let due = offset + Duration::from_secs(20);
    assert!(master.instant(due) >= start + Duration::from_secs(16));
    assert!(master.instant(due) <= start + Duration::from_millis(16_001));
}

fn acquire(session: SessionToken, wait_ms: Option<u64>) -> Request {
    Request::Acquire(leasehold_protocol::Acquire {
        key: "locks/a".into(),
        session,
        mode: leasehold_protocol::LockMode::Exclusive,
        contents: None,
        wait_ms,
        transient: false,
    })
}

/// Hands `request` to the master without waiting for its answer.
fn handed(
    master: &mut Master,
    request: Request,
) -> tokio::sync::mpsc::UnboundedReceiver<crate::reply::Reply> {
    let (reply, rx) = crate::reply::channel(1);
    master.handle(Call {
        request,
        reply,
        peer: None,
        caller: None,
        arrived: None,
    });
    rx
}

// LOCK-2, LOCK-9: a session that waited for a lock on a connection now
// gone, and asked again on another while the grant waited for the log, was
// told it holds the lock: the grant nobody heard must not give it back.
#[tokio::test]
async fn a_grant_nobody_heard_keeps_the_lock_another_reply_told_its_session_of() {
    let mut master = started(&mut Config::default(), Some(crate::MemoryStore::default()));
    let holder = created(&mut master, "holder", None).await;
    let waiter = created(&mut master, "waiter", None).await;
    let held = call(&mut master, acquire(holder, None)).await;
    let Ok(Response::Acquired { index, .. }) = held else {
        panic!("{held:?}");
    };
    let first = handed(&mut master, acquire(waiter, Some(60_000)));
    let release = Request::Release {
        key: "locks/a".into(),
        session: holder,
        acquired: index,
    };
    let _released = handed(&mut master, release);
    let mut second = handed(&mut master, acquire(waiter, Some(60_000)));
    // The first acquire's connection closes before its grant is durable.
    drop(first);
    let told = loop {
        master.durable();
        if let Ok(reply) = second.try_recv() {
            break reply.into_body();
        }
        super::durable(&mut master.commit)
            .await
            .expect("the writer goes on");
    };
    assert!(matches!(told, Ok(Response::Acquired { .. })), "{told:?}");
    assert!(
        master
            .engine
            .state
            .sequencer_of("locks/a", waiter.id)
            .is_some(),
        "the lock the waiter was told of was given back"
    );
}

// LOCK-9: after a restart, a holder asks again and the answer finds
// nobody to receive it. The holding was made under the previous master,
// whose reply told the session of it: it is not given back.
#[tokio::test]
async fn an_unheard_answer_to_a_holder_asking_again_never_gives_back_an_earlier_holding() {
    let mut config = Config::default();
    let store = crate::MemoryStore::default();
    let mut first = started(&mut config, Some(store.clone()));
    let holder = created(&mut first, "holder", None).await;
    let held = call(&mut first, acquire(holder, None)).await;
    assert!(matches!(held, Ok(Response::Acquired { .. })), "{held:?}");
    drop(first);
    let mut master = started(&mut config, Some(store));
    // Its fail-over event acknowledged, its requests are served (`FO-5`).
    master.engine.events.recovering.acknowledge_all();
    let again = handed(&mut master, acquire(holder, None));
    drop(again);
    // The answer waits for the log; once the log has it, it finds nobody.
    let holding = (holder.id, "locks/a".to_string());
    loop {
        master.durable();
        if master
            .engine
            .told
            .get(&holding)
            .is_none_or(|t| t.replies == 0)
        {
            break;
        }
        super::durable(&mut master.commit)
            .await
            .expect("the writer goes on");
    }
    assert!(
        master
            .engine
            .state
            .sequencer_of("locks/a", holder.id)
            .is_some(),
        "the holding the previous master told of was given back"
    );
}

/// `session`'s release of "locks/a", whichever acquire answered it.
fn release_a(session: SessionToken) -> Request {
    Request::Release {
        key: "locks/a".into(),
        session,
        acquired: u64::MAX,
    }
}

/// The next answer on `rx`, once the log lets it go.
async fn answer_on(
    master: &mut Master,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<crate::reply::Reply>,
) -> Result<Response, Error> {
    loop {
        master.durable();
        if let Ok(reply) = rx.try_recv() {
            return reply.into_body();
        }
        super::durable(&mut master.commit)
            .await
            .expect("the writer goes on");
    }
}

// LOCK-3: a session that waits, and asks again on another connection (its
// first one lost), keeps its place in line; the first request is told it
// was replaced.
#[tokio::test]
async fn a_waiter_asking_again_on_another_connection_keeps_its_place() {
    let mut master = started(&mut Config::default(), Some(crate::MemoryStore::default()));
    let holder = created(&mut master, "holder", None).await;
    let first = created(&mut master, "first", None).await;
    let second = created(&mut master, "second", None).await;
    let held = call(&mut master, acquire(holder, None)).await;
    assert!(matches!(held, Ok(Response::Acquired { .. })), "{held:?}");
    let mut lost = handed(&mut master, acquire(first, Some(60_000)));
    let _behind = handed(&mut master, acquire(second, Some(60_000)));
    let mut again = handed(&mut master, acquire(first, Some(60_000)));
    let replaced = answer_on(&mut master, &mut lost).await;
    assert!(
        matches!(&replaced, Err(e) if e.code == ErrorCode::LockHeld),
        "{replaced:?}"
    );
    call(&mut master, release_a(holder)).await.unwrap();
    let granted = answer_on(&mut master, &mut again).await;
    assert!(
        matches!(granted, Ok(Response::Acquired { .. })),
        "{granted:?}"
    );
    assert!(master
        .engine
        .state
        .sequencer_of("locks/a", first.id)
        .is_some());
}

fn acquire_in(session: SessionToken, mode: leasehold_protocol::LockMode, wait_ms: u64) -> Request {
    Request::Acquire(leasehold_protocol::Acquire {
        key: "locks/a".into(),
        session,
        mode,
        contents: None,
        wait_ms: Some(wait_ms),
        transient: false,
    })
}

// LOCK-5: a shared waiter behind an exclusive one could not have the lock
// while the exclusive one waited ahead of it; once that one gives up, the
// shared waiter joins the shared holder at once, not when the holder
// leaves.
#[tokio::test]
async fn a_waiter_leaving_the_line_lets_the_waiters_behind_it_have_the_lock() {
    use leasehold_protocol::LockMode::{Exclusive, Shared};
    let mut master = started(&mut Config::default(), Some(crate::MemoryStore::default()));
    let holder = created(&mut master, "holder", None).await;
    let writer = created(&mut master, "writer", None).await;
    let reader = created(&mut master, "reader", None).await;
    let held = call(&mut master, acquire_in(holder, Shared, 0)).await;
    assert!(matches!(held, Ok(Response::Acquired { .. })), "{held:?}");
    let mut gives_up = handed(&mut master, acquire_in(writer, Exclusive, 1_000));
    let mut behind = handed(&mut master, acquire_in(reader, Shared, 60_000));
    master.engine.now = master.engine.now + Duration::from_millis(2_000);
    master.fire_timers(0);
    let refused = answer_on(&mut master, &mut gives_up).await;
    assert!(
        matches!(&refused, Err(e) if e.code == ErrorCode::LockHeld),
        "{refused:?}"
    );
    // Checked before waiting for the answer, which would never come.
    assert!(
        master
            .engine
            .state
            .sequencer_of("locks/a", reader.id)
            .is_some(),
        "the shared waiter still waits behind a wait that is gone"
    );
    let granted = answer_on(&mut master, &mut behind).await;
    assert!(
        matches!(granted, Ok(Response::Acquired { .. })),
        "{granted:?}"
    );
    assert!(master
        .engine
        .state
        .sequencer_of("locks/a", holder.id)
        .is_some());
}

/// A master restarted on a store where `holder` holds "locks/a" and
/// `first`, then `second`, wait for it, each acknowledged its fail-over.
async fn restarted_with_a_line() -> (Master, [SessionToken; 3]) {
    let mut config = Config::default();
    let store = crate::MemoryStore::default();
    let mut before = started(&mut config, Some(store.clone()));
    let holder = created(&mut before, "holder", None).await;
    let first = created(&mut before, "first", None).await;
    let second = created(&mut before, "second", None).await;
    call(&mut before, acquire(holder, None)).await.unwrap();
    let _first = handed(&mut before, acquire(first, Some(60_000)));
    let _second = handed(&mut before, acquire(second, Some(60_000)));
    call(
        &mut before,
        Request::Get {
            key: "locks/a".into(),
            stat_only: true,
        },
    )
    .await
    .unwrap();
    drop(before);
    let mut master = started(&mut config, Some(store));
    master.engine.events.recovering.acknowledge_all();
    (master, [holder, first, second])
}

// FO-4, LOCK-3: waiters keep their places across a fail-over; one that asks
// again on the new master takes its place back, ahead of those behind it.
#[tokio::test]
async fn a_recovered_waiter_asking_again_keeps_its_place() {
    let (mut master, [holder, first, second]) = restarted_with_a_line().await;
    let line = master
        .engine
        .state
        .locks()
        .get("locks/a")
        .expect("the line")
        .waiters
        .len();
    assert_eq!(line, 2, "both waits were recovered");
    let mut behind = handed(&mut master, acquire(second, Some(60_000)));
    let mut again = handed(&mut master, acquire(first, Some(60_000)));
    call(&mut master, release_a(holder)).await.unwrap();
    let granted = answer_on(&mut master, &mut again).await;
    assert!(
        matches!(granted, Ok(Response::Acquired { .. })),
        "{granted:?}"
    );
    assert!(behind.try_recv().is_err(), "the second waits on");
    assert!(master
        .engine
        .state
        .sequencer_of("locks/a", second.id)
        .is_none());
}

// FO-4, LOCK-9: a recovered waiter whose turn comes before its session
// asked again has nobody to tell: the grant is given back at once, and the
// lock passes on.
#[tokio::test]
async fn a_recovered_waiter_whose_turn_comes_unasked_passes_the_lock_on() {
    let (mut master, [holder, first, second]) = restarted_with_a_line().await;
    let mut behind = handed(&mut master, acquire(second, Some(60_000)));
    call(&mut master, release_a(holder)).await.unwrap();
    let granted = answer_on(&mut master, &mut behind).await;
    assert!(
        matches!(granted, Ok(Response::Acquired { .. })),
        "{granted:?}"
    );
    assert!(master
        .engine
        .state
        .sequencer_of("locks/a", first.id)
        .is_none());
}

/// A master restarted with `holder` holding "locks/a", `first` waiting for
/// it and a cacher that may still serve an old cache; `holder`'s release
/// and `first`'s acquire asking again are both held for the cacher, and
/// are let go once it acknowledges the fail-over. Returns the master,
/// `first`, and the answer to its acquire.
async fn a_grant_nobody_heard_behind_its_sessions_ask() -> (
    Master,
    SessionToken,
    tokio::sync::mpsc::UnboundedReceiver<crate::reply::Reply>,
    SessionToken,
) {
    let mut config = lenient();
    let store = crate::MemoryStore::default();
    let mut before = started(&mut config, Some(store.clone()));
    let holder = created(&mut before, "holder", None).await;
    let first = created(&mut before, "first", None).await;
    let cacher = created(&mut before, "cacher", Some(LEASE.as_millis() as u64)).await;
    call(&mut before, acquire(holder, None)).await.unwrap();
    let _first = handed(&mut before, acquire(first, Some(60_000)));
    let read = call(&mut before, get_cached("k", cacher)).await;
    assert!(matches!(
        read,
        Ok(Response::Cached {
            cacheable: true,
            ..
        })
    ));
    drop(before);
    let mut master = started(&mut config, Some(store));
    master.engine.events.recovering.acknowledged(&holder.id);
    master.engine.events.recovering.acknowledged(&first.id);

    let mut release = send(&mut master, release_a(holder));
    let mut asked = send(&mut master, acquire(first, Some(60_000)));
    assert!(answered(&mut release).is_none(), "held for the cacher");
    assert!(answered(&mut asked).is_none(), "held behind the release");
    (master, first, asked, cacher)
}

/// The cacher acknowledges its fail-over: the held work goes.
fn acknowledged(master: &mut Master, cacher: SessionToken) {
    let events = renewed(master, cacher, 0);
    let failover = events.first().expect("the fail-over event").seq;
    renewed(master, cacher, failover);
}

// LOCK-9, CACHE-7: the release grants the recovered waiter, which nobody
// can tell, so its give-back is decided, and waits behind the waiter's own
// acquire; that acquire is answered that the session holds the lock
// (LOCK-2), so the give-back is dropped: the holding its client was told
// of stays.
#[tokio::test]
async fn a_give_back_is_dropped_when_its_session_is_told_of_the_holding_first() {
    let (mut master, first, mut asked, cacher) =
        a_grant_nobody_heard_behind_its_sessions_ask().await;
    acknowledged(&mut master, cacher);
    let granted = answer_on(&mut master, &mut asked).await;
    assert!(
        matches!(granted, Ok(Response::Acquired { .. })),
        "{granted:?}"
    );
    master.durable();
    assert!(
        master
            .engine
            .state
            .sequencer_of("locks/a", first.id)
            .is_some(),
        "the holding its session was told of was given back"
    );
}

// LOCK-9: as above, but the acquire's connection is gone before its answer
// could be handed over: nobody heard of the holding after all, and it goes
// back rather than stay with a session whose client never learns of it.
#[tokio::test]
async fn a_dropped_give_back_is_owed_again_when_the_answer_that_dropped_it_is_unheard() {
    let (mut master, first, asked, cacher) = a_grant_nobody_heard_behind_its_sessions_ask().await;
    drop(asked);
    acknowledged(&mut master, cacher);
    // Until the log has made durable everything the answer waited for.
    for _ in 0..10 {
        master.durable();
        let durable = super::durable(&mut master.commit);
        if tokio::time::timeout(Duration::from_millis(200), durable)
            .await
            .is_err()
        {
            break;
        }
    }
    master.durable();
    assert!(
        master
            .engine
            .state
            .sequencer_of("locks/a", first.id)
            .is_none(),
        "a holding nobody heard of stayed"
    );
}

/// A KeepAliveAll for `sessions` under `epoch`, acknowledging nothing.
fn keepalive_all(sessions: &[SessionToken], epoch: u64, hold: bool) -> Request {
    Request::KeepAliveAll(
        sessions
            .iter()
            .map(|&session| KeepAlive {
                session,
                epoch,
                acked_seq: 0,
                hold,
            })
            .collect(),
    )
}

fn answers(response: Result<Response, Error>) -> Vec<Result<KeepAliveGrant, Error>> {
    match response {
        Ok(Response::KeepAliveAll { answers }) => answers,
        other => panic!("expected the answers of a KeepAliveAll, got {other:?}"),
    }
}

// KA-10: each session is renewed at once, held or not, in the order named.
#[tokio::test]
async fn a_keepalive_all_renews_every_session_it_names_at_once() {
    let mut master = started(&mut Config::default(), None);
    let a = created(&mut master, "a", Some(10_000)).await;
    let b = created(&mut master, "b", Some(20_000)).await;
    master.engine.now = master.engine.now + Duration::from_secs(3);
    let answers = answers(call(&mut master, keepalive_all(&[a, b], 1, true)).await);
    let remaining: Vec<u64> = answers
        .iter()
        .map(|answer| answer.as_ref().expect("renewed").lease.remaining_ms)
        .collect();
    assert_eq!(remaining, [9_999, 19_999]);
    assert!(master.engine.leases.held(a.id).is_none() && master.engine.leases.held(b.id).is_none());
}

// KA-10, AUTH-2, KA-6, KA-7: a refusal answers its own session alone.
#[tokio::test]
async fn a_keepalive_all_refuses_each_session_on_its_own() {
    let mut master = started(&mut Config::default(), None);
    let good = created(&mut master, "good", None).await;
    let stolen = created(&mut master, "stolen", None).await;
    let forged = SessionToken {
        id: stolen.id,
        secret: good.secret,
    };
    let unknown = SessionToken {
        id: uuid::Uuid::new_v4(),
        secret: good.secret,
    };
    let stale = created(&mut master, "stale", None).await;
    let mut request = keepalive_all(&[good, forged, unknown, stale], 1, false);
    if let Request::KeepAliveAll(all) = &mut request {
        all[3].epoch = 7;
    }
    let codes: Vec<Option<ErrorCode>> = answers(call(&mut master, request).await)
        .into_iter()
        .map(|answer| answer.err().map(|e| e.code))
        .collect();
    assert_eq!(
        codes,
        [
            None,
            Some(ErrorCode::PermissionDenied),
            Some(ErrorCode::UnknownSession),
            Some(ErrorCode::WrongEpoch { current: 1 }),
        ]
    );
}

// KA-10: more sessions than the limit is refused whole.
#[tokio::test]
async fn a_keepalive_all_over_the_limit_is_refused_whole() {
    let mut config = Config {
        max_frame: crate::config::MIN_FRAME,
        ..Config::default()
    };
    let mut master = started(&mut config, None);
    let a = created(&mut master, "a", None).await;
    let limit = leasehold_protocol::keepalive_all_limit(crate::config::MIN_FRAME);
    let at_limit = answers(call(&mut master, keepalive_all(&vec![a; limit], 1, false)).await);
    assert_eq!(at_limit.len(), limit);
    let over = call(&mut master, keepalive_all(&vec![a; limit + 1], 1, false)).await;
    assert_eq!(over.err().map(|e| e.code), Some(ErrorCode::InvalidArgument));
}

// KA-10, EV-3: the events of one reply share half a frame; a session whose
// events did not fit keeps them for its next KeepAlive, answered at once.
#[tokio::test]
async fn events_past_a_keepalive_alls_share_wait_for_the_next_keepalive() {
    let config = Config {
        max_frame: crate::config::MIN_FRAME,
        ..Config::default()
    };
    let (mut master, sessions) = watched_by(3, config).await;
    // Each event counts its key and 64 bytes: three of 214 overflow the
    // 512 of half a frame.
    let key = "k".repeat(150);
    assert!(call(&mut master, put(&key)).await.is_ok());
    master.deliver_events();
    let answers = answers(call(&mut master, keepalive_all(&sessions, 1, false)).await);
    let carried: Vec<usize> = answers
        .iter()
        .map(|answer| answer.as_ref().expect("renewed").events.len())
        .collect();
    assert_eq!(carried, [1, 1, 0]);
    let last = sessions[2];
    let held = Request::KeepAlive(KeepAlive {
        session: last,
        epoch: 1,
        acked_seq: 0,
        hold: true,
    });
    match call(&mut master, held).await {
        Ok(Response::KeepAlive { events, .. }) => assert_eq!(events.len(), 1),
        other => panic!("expected an answer at once with the event, got {other:?}"),
    }
}

// KA-10: a session named twice is refused the second time, alone.
#[tokio::test]
async fn a_keepalive_all_refuses_a_session_named_twice() {
    let mut master = started(&mut Config::default(), None);
    let a = created(&mut master, "a", None).await;
    let answers = answers(call(&mut master, keepalive_all(&[a, a], 1, false)).await);
    assert!(answers[0].is_ok());
    assert_eq!(
        answers[1].as_ref().err().map(|e| e.code),
        Some(ErrorCode::InvalidArgument)
    );
}

// KA-10, WIRE-2: with every session it may name refused at length but
// one, whose events fill what is left, the answer still fits a frame.
#[tokio::test]
async fn a_keepalive_all_answer_fits_a_frame_however_its_sessions_fare() {
    let config = Config {
        max_frame: crate::config::MIN_FRAME,
        ..Config::default()
    };
    let (mut master, sessions) = watched_by(1, config).await;
    let key = "k".repeat(300);
    for _ in 0..3 {
        assert!(call(&mut master, put(&key)).await.is_ok());
        master.deliver_events();
    }
    let watcher = sessions[0];
    let limit = leasehold_protocol::keepalive_all_limit(crate::config::MIN_FRAME);
    let mut named = vec![watcher];
    for n in 1..limit as u128 {
        // A forged secret: refused with a message naming the session.
        let victim = created(&mut master, "victim", None).await;
        named.push(SessionToken {
            id: victim.id,
            secret: leasehold_protocol::SessionSecret::from_bytes([n as u8; 16]),
        });
    }
    let reply = call(&mut master, keepalive_all(&named, 1, false)).await;
    let carried = match &reply {
        Ok(Response::KeepAliveAll { answers }) => answers[0].as_ref().unwrap().events.len(),
        other => panic!("expected the answers, got {other:?}"),
    };
    assert!(carried >= 1, "the events that fit go");
    let frame = leasehold_protocol::ServerFrame::Reply {
        id: u64::MAX,
        body: reply,
    };
    let body = leasehold_protocol::codec::encode_body(&frame).unwrap();
    assert!(
        body.len() <= crate::config::MIN_FRAME,
        "{} bytes in a frame of {}",
        body.len(),
        crate::config::MIN_FRAME
    );
}

// The cache (SPEC "Cache"): the master's side, driven turn by turn.

/// Sends `request` and returns where its reply will come.
fn send(
    master: &mut Master,
    request: Request,
) -> tokio::sync::mpsc::UnboundedReceiver<crate::reply::Reply> {
    let (reply, rx) = crate::reply::channel(1);
    master.handle(Call {
        request,
        reply,
        peer: None,
        caller: None,
        arrived: None,
    });
    if master.engine.cache.moved {
        master.run_held();
    }
    rx
}

/// The reply that has come, if one has.
fn answered(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<crate::reply::Reply>,
) -> Option<Result<Response, Error>> {
    rx.try_recv().ok().map(|r| r.into_body())
}

/// The reply that comes once the store has what it waits for.
async fn durably_answered(
    master: &mut Master,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<crate::reply::Reply>,
) -> Result<Response, Error> {
    loop {
        master.durable();
        if let Some(reply) = answered(rx) {
            return reply;
        }
        super::durable(&mut master.commit)
            .await
            .expect("the writer goes on");
    }
}

fn put_value(key: &str, value: &str) -> Request {
    Request::Put(leasehold_protocol::Put {
        key: key.into(),
        contents: value.as_bytes().to_vec(),
        flags: 0,
        cas: None,
        ephemeral: None,
    })
}

fn get_cached(key: &str, session: SessionToken) -> Request {
    Request::GetCached(leasehold_protocol::GetCached {
        key: key.into(),
        session,
        dropped: Vec::new(),
    })
}

/// What the master answers now for `key`: its contents (None: no node).
fn contents(master: &mut Master, key: &str) -> Option<Vec<u8>> {
    let mut rx = send(
        master,
        Request::Get {
            key: key.into(),
            stat_only: false,
        },
    );
    match answered(&mut rx) {
        Some(Ok(Response::Node { node, .. })) => node.and_then(|n| n.contents),
        other => panic!("expected a node, got {other:?}"),
    }
}

/// Whether `session`'s read of `key` for its cache was called cacheable.
fn cacheable(master: &mut Master, key: &str, session: SessionToken) -> bool {
    let mut rx = send(master, get_cached(key, session));
    match answered(&mut rx) {
        Some(Ok(Response::Cached { cacheable, .. })) => cacheable,
        other => panic!("expected a cached read, got {other:?}"),
    }
}

/// `session`'s KeepAlive acknowledging `acked`, answered at once; the
/// events it carried.
fn renewed(
    master: &mut Master,
    session: SessionToken,
    acked: u64,
) -> Vec<leasehold_protocol::Event> {
    let mut rx = send(
        master,
        Request::KeepAlive(KeepAlive {
            session,
            epoch: master.engine.config.epoch,
            acked_seq: acked,
            hold: false,
        }),
    );
    match answered(&mut rx) {
        Some(Ok(Response::KeepAlive { events, .. })) => events,
        other => panic!("expected a KeepAlive reply, got {other:?}"),
    }
}

fn invalidation(events: &[leasehold_protocol::Event]) -> Option<(u64, Vec<String>)> {
    events.iter().find_map(|e| match &e.kind {
        leasehold_protocol::EventKind::Invalidate { keys } => Some((e.seq, keys.clone())),
        _ => None,
    })
}

fn lenient() -> Config {
    Config {
        min_lease: Duration::from_millis(100),
        ..Config::default()
    }
}

// CACHE-3, CACHE-4
#[tokio::test]
async fn a_write_to_a_cached_key_waits_until_the_cacher_acknowledges_its_invalidation() {
    let mut master = started(&mut lenient(), None);
    let cacher = created(&mut master, "cacher", None).await;
    let other = created(&mut master, "other", None).await;
    assert!(answered(&mut send(&mut master, put_value("k", "one"))).is_some());
    assert!(cacheable(&mut master, "k", cacher));

    let mut write = send(&mut master, put_value("k", "two"));
    assert!(answered(&mut write).is_none(), "held for the cacher");
    assert_eq!(
        contents(&mut master, "k"),
        Some(b"one".to_vec()),
        "not applied yet"
    );
    assert!(!cacheable(&mut master, "k", other), "uncachable while held");

    let (seq, keys) = invalidation(&renewed(&mut master, cacher, 0)).expect("told");
    assert_eq!(keys, ["k"]);
    assert!(answered(&mut write).is_none(), "told, not yet acknowledged");
    renewed(&mut master, cacher, seq);
    assert!(matches!(
        answered(&mut write),
        Some(Ok(Response::Written { .. }))
    ));
    assert_eq!(contents(&mut master, "k"), Some(b"two".to_vec()));
    assert!(cacheable(&mut master, "k", other), "cachable again");
}

// CACHE-3
#[tokio::test]
async fn a_write_to_a_key_nobody_caches_is_not_held() {
    let mut master = started(&mut lenient(), None);
    let cacher = created(&mut master, "cacher", None).await;
    assert!(cacheable(&mut master, "cached", cacher));
    let mut write = send(&mut master, put_value("other", "x"));
    assert!(matches!(
        answered(&mut write),
        Some(Ok(Response::Written { .. }))
    ));
}

// CACHE-3: a cacher that never answers holds a write for the lease it had
// when it was told, no longer.
#[tokio::test]
async fn a_silent_cachers_lease_bounds_how_long_a_write_waits() {
    let mut master = started(&mut lenient(), None);
    let cacher = created(&mut master, "silent", Some(1_000)).await;
    assert!(cacheable(&mut master, "k", cacher));
    let told_at = master.engine.now;
    let mut write = send(&mut master, put_value("k", "new"));
    assert!(answered(&mut write).is_none());
    let until = master.engine.leases.expires_at(cacher.id).unwrap();
    assert_eq!(until, told_at + Duration::from_millis(1_000));
    master.engine.now = Millis::from_millis(until.as_millis() - 1);
    master.fire_timers(0);
    master.run_held();
    assert!(answered(&mut write).is_none(), "still within its lease");
    master.engine.now = until;
    master.fire_timers(0);
    if master.engine.cache.moved {
        master.run_held();
    }
    assert!(matches!(
        answered(&mut write),
        Some(Ok(Response::Written { .. }))
    ));
}

// CACHE-6
#[tokio::test]
async fn a_reply_that_leaves_an_invalidation_untold_does_not_extend_the_lease() {
    let mut master = started(&mut lenient(), None);
    let cacher = created(&mut master, "cacher", Some(1_000)).await;
    assert!(cacheable(&mut master, "k", cacher));
    let _write = send(&mut master, put_value("k", "new"));
    let before = master.engine.leases.expires_at(cacher.id).unwrap();
    master.engine.now = master.engine.now + Duration::from_millis(500);
    let now = master.engine.now;
    let bare = master
        .engine
        .grant(cacher.id, now, now, &mut 0, false)
        .unwrap();
    assert!(bare.events.is_empty());
    assert_eq!(
        master.engine.leases.expires_at(cacher.id),
        Some(before),
        "not extended"
    );
    let full = master
        .engine
        .grant(cacher.id, now, now, &mut 4096, false)
        .unwrap();
    assert!(invalidation(&full.events).is_some());
    assert_eq!(
        master.engine.leases.expires_at(cacher.id),
        Some(now + Duration::from_millis(1_000))
    );
}

// CACHE-5
#[tokio::test]
async fn a_session_whose_lease_ran_out_counts_as_ended_while_its_end_waits_for_caches() {
    let mut master = started(&mut lenient(), None);
    let owner = created(&mut master, "owner", Some(1_000)).await;
    let cacher = created(&mut master, "cacher", Some(60_000)).await;
    let ephemeral = Request::Put(leasehold_protocol::Put {
        key: "e".into(),
        contents: b"alive".to_vec(),
        flags: 0,
        cas: None,
        ephemeral: Some(owner),
    });
    assert!(answered(&mut send(&mut master, ephemeral)).is_some());
    assert!(cacheable(&mut master, "e", cacher));

    master.engine.now = master.engine.now + Duration::from_millis(1_000);
    master.fire_timers(0);
    master.run_held();
    assert!(
        master.engine.state.session(owner.id).is_some(),
        "its end is held"
    );
    let mut refused = send(&mut master, keepalive(owner));
    let refused = answered(&mut refused).unwrap().unwrap_err();
    assert_eq!(refused.code, ErrorCode::SessionExpired);
    assert_eq!(contents(&mut master, "e"), Some(b"alive".to_vec()));

    let (seq, _) = invalidation(&renewed(&mut master, cacher, 0)).expect("told");
    renewed(&mut master, cacher, seq);
    assert!(master.engine.state.session(owner.id).is_none());
    assert_eq!(contents(&mut master, "e"), None);
}

/// A master restarted on a store holding one session that was granted a
/// cacheable read, and no KeepAlive has named since.
async fn restarted_with_a_cacher() -> (Master, SessionToken) {
    let mut config = lenient();
    let store = crate::MemoryStore::default();
    let mut first = started(&mut config, Some(store.clone()));
    let token = created(&mut first, "cacher", Some(LEASE.as_millis() as u64)).await;
    let read = call(&mut first, get_cached("k", token)).await;
    assert!(matches!(
        read,
        Ok(Response::Cached {
            cacheable: true,
            ..
        })
    ));
    drop(first);
    (started(&mut config, Some(store)), token)
}

// CACHE-7
#[tokio::test]
async fn after_a_restart_a_session_that_never_cached_holds_no_write() {
    let (mut master, _recovered) = restarted_with_a_session().await;
    let mut write = send(&mut master, put_value("anything", "x"));
    assert!(matches!(
        durably_answered(&mut master, &mut write).await,
        Ok(Response::Written { .. })
    ));
}

// CACHE-7
#[tokio::test]
async fn after_a_restart_writes_wait_for_recovered_cachers_to_acknowledge_the_failover() {
    let (mut master, recovered) = restarted_with_a_cacher().await;
    let mut write = send(&mut master, put_value("anything", "x"));
    assert!(answered(&mut write).is_none(), "it may cache anything");
    assert!(
        !cacheable(&mut master, "k", recovered),
        "no grant before it has flushed"
    );
    let events = renewed(&mut master, recovered, 0);
    let failover = events.first().expect("the fail-over event").seq;
    assert!(answered(&mut write).is_none());
    renewed(&mut master, recovered, failover);
    assert!(matches!(
        durably_answered(&mut master, &mut write).await,
        Ok(Response::Written { .. })
    ));
}

// CACHE-7
#[tokio::test]
async fn after_a_restart_a_silent_recovered_cacher_holds_writes_no_longer_than_its_lease() {
    let (mut master, _recovered) = restarted_with_a_cacher().await;
    let mut write = send(&mut master, put_value("anything", "x"));
    assert!(answered(&mut write).is_none());
    master.engine.now = master.engine.now + LEASE;
    master.fire_timers(0);
    master.run_held();
    assert!(matches!(
        durably_answered(&mut master, &mut write).await,
        Ok(Response::Written { .. })
    ));
}

// CACHE-3: however many keys one change touches, each invalidation fits a
// reply: a lone KeepAlive never carries one over the frame.
#[tokio::test]
async fn an_invalidation_of_many_keys_comes_in_events_that_fit_a_reply() {
    let mut master = started(
        &mut Config {
            max_frame: 4096,
            ..lenient()
        },
        None,
    );
    let cacher = created(&mut master, "cacher", None).await;
    let keys: Vec<String> = (0..200).map(|i| format!("a/key-number-{i:04}")).collect();
    for key in &keys {
        assert!(answered(&mut send(&mut master, put_value(key, "x"))).is_some());
        assert!(cacheable(&mut master, key, cacher));
    }
    let delete = Request::Delete {
        key: "a".into(),
        cas: None,
        recursive: true,
        authority: leasehold_protocol::Authority::Anonymous,
    };
    let mut deleted = send(&mut master, delete);
    assert!(answered(&mut deleted).is_none());
    let mut told = Vec::new();
    let mut acked = 0;
    while told.len() < keys.len() {
        let events = renewed(&mut master, cacher, acked);
        assert!(
            !events.is_empty(),
            "told {} of {} keys",
            told.len(),
            keys.len()
        );
        for event in events {
            let leasehold_protocol::EventKind::Invalidate { keys: some } = event.kind else {
                panic!("expected an invalidation, got {event:?}");
            };
            let bytes: usize = some.iter().map(|k| k.len() + 2).sum();
            assert!(bytes <= 4096 / 8, "an event of {bytes} bytes of keys");
            told.extend(some);
            acked = event.seq;
        }
    }
    told.sort();
    assert_eq!(told, keys);
    renewed(&mut master, cacher, acked);
    assert!(matches!(
        answered(&mut deleted),
        Some(Ok(Response::Deleted { .. }))
    ));
}

// CACHE-3: a check that stays passing ends no session and changes no node.
#[tokio::test]
async fn a_passing_check_is_not_held_for_the_caches_of_its_sessions_nodes() {
    let mut master = started(&mut lenient(), None);
    let set = |status| Request::SetCheck {
        name: "web".into(),
        status,
        note: String::new(),
    };
    assert!(answered(&mut send(
        &mut master,
        set(leasehold_protocol::CheckStatus::Passing)
    ))
    .is_some());
    let bound = Request::CreateSession(CreateSession {
        name: "bound".into(),
        lease_ms: None,
        lock_delay_ms: None,
        behavior: Behavior::Release,
        checks: vec!["web".into()],
    });
    let Some(Ok(Response::SessionCreated {
        session, secret, ..
    })) = answered(&mut send(&mut master, bound))
    else {
        panic!("no session");
    };
    let owner = SessionToken {
        id: session,
        secret,
    };
    let cacher = created(&mut master, "cacher", None).await;
    let ephemeral = Request::Put(leasehold_protocol::Put {
        key: "svc/a".into(),
        contents: b"up".to_vec(),
        flags: 0,
        cas: None,
        ephemeral: Some(owner),
    });
    assert!(answered(&mut send(&mut master, ephemeral)).is_some());
    assert!(cacheable(&mut master, "svc/a", cacher));
    let mut heartbeat = send(&mut master, set(leasehold_protocol::CheckStatus::Passing));
    assert!(matches!(
        answered(&mut heartbeat),
        Some(Ok(Response::CheckSet { .. }))
    ));
    let mut critical = send(&mut master, set(leasehold_protocol::CheckStatus::Critical));
    assert!(
        answered(&mut critical).is_none(),
        "ending the session waits for the cacher"
    );
}

// STORE-1: a KeepAlive's answer that carries no event tells of nothing
// logged, and goes out while another client's write still waits for the
// disk.
#[tokio::test]
async fn a_keepalive_without_events_is_answered_before_a_write_is_durable() {
    let mut config = Config::default();
    let mut master = started(&mut config, Some(crate::MemoryStore::default()));
    let session = created(&mut master, "canary", None).await;
    let (put_reply, mut put_rx) = crate::reply::channel(1);
    master.handle(Call {
        request: put_value("bulk/1", &"x".repeat(64 * 1024)),
        reply: put_reply,
        peer: None,
        caller: None,
        arrived: None,
    });
    let (ka_reply, mut ka_rx) = crate::reply::channel(1);
    master.handle(Call {
        request: keepalive(session),
        reply: ka_reply,
        peer: None,
        caller: None,
        arrived: None,
    });
    assert!(
        matches!(answered(&mut ka_rx), Some(Ok(Response::KeepAlive { .. }))),
        "the lease is renewed at once"
    );
    assert!(
        answered(&mut put_rx).is_none(),
        "the write waits for the disk"
    );
    assert!(durably_answered(&mut master, &mut put_rx).await.is_ok());
}

// STORE-1: a KeepAlive's answer that carries the event of a write waits
// until that write is on disk, like the write's own reply.
#[tokio::test]
async fn a_keepalive_carrying_an_event_waits_for_the_disk() {
    let mut config = Config::default();
    let mut master = started(&mut config, Some(crate::MemoryStore::default()));
    let watcher = subscribed(&mut master).await;
    let (put_reply, mut put_rx) = crate::reply::channel(1);
    master.handle(Call {
        request: put("watched/1"),
        reply: put_reply,
        peer: None,
        caller: None,
        arrived: None,
    });
    master.deliver_events();
    assert_eq!(told(&master, &[watcher]), 1, "the watcher has the event");
    let (ka_reply, mut ka_rx) = crate::reply::channel(1);
    master.handle(Call {
        request: keepalive(watcher),
        reply: ka_reply,
        peer: None,
        caller: None,
        arrived: None,
    });
    assert!(
        answered(&mut ka_rx).is_none(),
        "the event waits for the disk"
    );
    assert!(durably_answered(&mut master, &mut put_rx).await.is_ok());
    match answered(&mut ka_rx) {
        Some(Ok(Response::KeepAlive { events, .. })) => assert_eq!(events.len(), 1),
        other => panic!("expected the KeepAlive's answer with the event, got {other:?}"),
    }
}
