//! The master task's loop as it runs: which of its queues it takes from
//! first.

use std::time::Duration;

use leasehold_protocol::{Request, Response, SessionId, SessionToken};

use super::tests::{create_session, keepalive, token_of};
use super::{spawn, Call, MasterHandle};
use crate::config::{Config, RETURNING_RUN};
use crate::observe::{Grant, MasterEvent, MasterObserver};

type Seen = std::sync::Arc<std::sync::Mutex<Vec<MasterEvent>>>;

/// A master in memory, running as a server runs it, whose observer
/// records what it grants.
fn running() -> (MasterHandle, Seen) {
    let seen = Seen::default();
    let log = seen.clone();
    let mut config = Config {
        observer: Some(MasterObserver::new(move |e: &MasterEvent| {
            log.lock().unwrap().push(e.clone());
        })),
        ..Config::default()
    };
    let start = crate::recovery::open(&mut config, None).unwrap();
    let (handle, _task) = spawn(config, start, std::future::pending());
    (handle, seen)
}

fn call(
    request: Request,
) -> (
    Call,
    tokio::sync::mpsc::UnboundedReceiver<crate::reply::Reply>,
) {
    let (reply, rx) = crate::reply::channel(1);
    let call = Call {
        request,
        reply,
        peer: None,
        caller: None,
        arrived: None,
    };
    (call, rx)
}

async fn created(master: &MasterHandle, name: &str) -> SessionToken {
    let (create, mut rx) = call(create_session(name, None));
    master.send(create).await;
    token_of(rx.recv().await.expect("answered").into_body())
}

/// A KeepAlive call for `session`, stamped as arriving now.
fn keepalive_now(
    master: &MasterHandle,
    session: SessionToken,
) -> (
    Call,
    tokio::sync::mpsc::UnboundedReceiver<crate::reply::Reply>,
) {
    let (mut ka, rx) = call(keepalive(session));
    ka.arrived = Some(master.now());
    (ka, rx)
}

/// When the master ended `session` for running out, if it did.
fn expired_at(seen: &Seen, session: SessionId) -> Option<crate::time::Millis> {
    seen.lock().unwrap().iter().find_map(|e| match e {
        MasterEvent::Ended {
            session: ended,
            now,
            cause: crate::EndCause::Expired,
        } if *ended == session => Some(*now),
        _ => None,
    })
}

/// A session nobody renews runs out as another session's KeepAlive (a
/// connection's first if `first`) reaches the master, the previous one of
/// that queue read a whole lease earlier: says how long after its lease
/// ended the session was ended.
async fn ended_after_its_lease_while_a_keepalive_waits(first: bool) -> Duration {
    let (master, seen) = running();
    let silent = created(&master, "silent").await;
    let renewing = created(&master, "renewing").await;
    let lease_end = master.now() + Duration::from_secs(12);
    let (ka, mut rx) = keepalive_now(&master, renewing);
    master.send_keepalive(ka, first).await;
    rx.recv().await.expect("answered");
    tokio::time::advance(Duration::from_millis(11_990)).await;
    // Queued, and then the lease's end passes before the master runs.
    let (ka, mut rx) = keepalive_now(&master, renewing);
    master.send_keepalive(ka, first).await;
    tokio::time::advance(Duration::from_millis(20)).await;
    rx.recv().await.expect("answered");
    // The paused clock moves to each timer in turn while all wait.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let ended = expired_at(&seen, silent.id).expect("the silent session ended");
    ended.since(lease_end)
}

// SES-6, KA-11: a connection's first KeepAlive read beside the timers
// holds back no lease that ran out before it arrived.
#[tokio::test(start_paused = true)]
async fn a_lease_runs_out_on_time_beside_a_connections_first_keepalive() {
    let late = ended_after_its_lease_while_a_keepalive_waits(true).await;
    assert!(
        late < Duration::from_millis(100),
        "ended {late:?} after its lease"
    );
}

fn arrived_at(ms: u64) -> Option<Call> {
    let (mut call, _) = call(Request::KeepAliveAll(Vec::new()));
    call.arrived = Some(crate::time::Millis::from_millis(ms));
    Some(call)
}

// SES-6: the master has read what arrived before the oldest waiting
// KeepAlive, however long ago the one before it was read.
#[test]
fn the_master_has_caught_up_to_the_oldest_keepalive_waiting_in_either_queue() {
    let (start, now) = (
        crate::time::Millis::ZERO,
        crate::time::Millis::from_millis(50_000),
    );
    let caught_up = super::caught_up;
    assert_eq!(caught_up([&None, &None], start, now), now);
    let (older, newer) = (arrived_at(11_990), arrived_at(12_400));
    assert_eq!(caught_up([&older, &None], start, now).as_millis(), 11_990);
    assert_eq!(caught_up([&None, &newer], start, now).as_millis(), 12_400);
    assert_eq!(caught_up([&newer, &older], start, now).as_millis(), 11_990);
    let (mut unstamped, _) = call(Request::KeepAliveAll(Vec::new()));
    unstamped.arrived = None;
    assert_eq!(caught_up([&Some(unstamped), &newer], start, now), start);
}

/// Sends `firsts` first KeepAlives of `returning` after `others`
/// KeepAlives of `renewed`, all before the master takes any, and gives
/// the sessions whose KeepAlives it granted, in the order it did.
async fn granted_in_order(others: usize, firsts: usize) -> (Vec<SessionId>, SessionId, SessionId) {
    let (master, seen) = running();
    let renewed = created(&master, "renewed").await;
    let returning = created(&master, "returning").await;
    let mut answers = Vec::new();
    // The master task runs only once this one waits: every call below is
    // queued before it takes any.
    for _ in 0..others {
        let (ka, rx) = call(keepalive(renewed));
        master.send_keepalive(ka, false).await;
        answers.push(rx);
    }
    for _ in 0..firsts {
        let (ka, rx) = call(keepalive(returning));
        master.send_keepalive(ka, true).await;
        answers.push(rx);
    }
    for mut rx in answers {
        let reply = rx.recv().await.expect("answered").into_body();
        assert!(matches!(reply, Ok(Response::KeepAlive { .. })), "{reply:?}");
    }
    let order = seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            MasterEvent::Granted {
                session,
                why: Grant::KeepAlive,
                ..
            } => Some(*session),
            _ => None,
        })
        .collect();
    (order, renewed.id, returning.id)
}

// KA-11
#[tokio::test]
async fn a_connections_first_keepalive_is_taken_before_others_already_waiting() {
    let (order, renewed, returning) = granted_in_order(5, 1).await;
    assert_eq!(order.len(), 6);
    assert_eq!(order[0], returning, "{order:?}");
    assert!(order[1..].iter().all(|s| *s == renewed), "{order:?}");
}

// KA-11
#[tokio::test]
async fn a_flood_of_first_keepalives_leaves_the_others_a_turn() {
    let firsts = 3 * RETURNING_RUN as usize;
    let (order, renewed, _) = granted_in_order(2, firsts).await;
    assert_eq!(order.len(), firsts + 2);
    let first_other = order.iter().position(|s| *s == renewed);
    assert_eq!(first_other, Some(RETURNING_RUN as usize), "{order:?}");
}
