//! The master task's loop as it runs: which of its queues it takes from
//! first.

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
