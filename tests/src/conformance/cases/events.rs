//! SPEC.md, "Events": sequence numbers, redelivery until acknowledged,
//! held KeepAlives answered by events, the bounded queue, subscriptions,
//! lock conflicts and locks taken away, and what a node event carries.

use std::time::{Duration, Instant};

use leasehold_protocol::{
    event_mask, Authority, Change, ErrorCode, EventKind, LockMode, Put, Request, Response,
};

use crate::conformance::common::{
    acquire, case, ensure, expect_error, expect_reply, generation, keepalive, key, open, put,
    session, subscribe, written, SLACK,
};
use crate::conformance::{Case, Check, Ctx};

pub(super) fn cases() -> Vec<Case> {
    vec![
        // One held reply proves all three: it comes at once, carrying event 1 alone.
        case!(
            &["EV-1", "EV-3", "KA-8"],
            a_queued_event_answers_the_held_keepalive
        ),
        case!(&["EV-2"], unacknowledged_events_are_sent_again),
        case!(
            &["EV-4"],
            an_overflowing_event_queue_becomes_one_events_lost
        ),
        case!(&["EV-5", "EV-6"], subscriptions_and_lock_conflicts),
        case!(
            &["EV-6", "LOCK-8"],
            a_holder_is_told_which_holding_a_delete_took
        ),
        case!(&["EV-5"], a_repeated_subscription_is_the_same_one),
        case!(
            &["EV-10"],
            a_node_event_carries_its_index_and_small_contents
        ),
    ]
}

async fn a_queued_event_answers_the_held_keepalive(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let k = key("ev");
    subscribe(&mut conn, s, &k, false, event_mask::CONTENTS).await?;
    conn.request(keepalive(s, &w, 0, true)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (mut writer, _) = open(&ctx).await;
    let started = Instant::now();
    writer
        .call(put(&k, b"1", None, None))
        .await
        .map_err(|e| format!("put: {e}"))?;
    let (_, reply) = conn.reply().await;
    ensure!(
        started.elapsed() < SLACK,
        "the held KeepAlive answered after {:?}",
        started.elapsed()
    );
    let events = expect_reply!(reply, Response::KeepAlive { events, .. } => events)?;
    ensure!(events.len() == 1 && events[0].seq == 1, "events {events:?}");
    Ok(())
}

async fn unacknowledged_events_are_sent_again(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let k = key("redeliver");
    subscribe(&mut conn, s, &k, false, event_mask::CONTENTS).await?;
    conn.call(put(&k, b"1", None, None))
        .await
        .map_err(|e| format!("put: {e}"))?;
    conn.call(put(&k, b"2", None, None))
        .await
        .map_err(|e| format!("put: {e}"))?;
    let seqs = |r: Result<Response, leasehold_protocol::Error>| {
        expect_reply!(
            r,
            Response::KeepAlive { events, .. } => events.iter().map(|e| e.seq).collect::<Vec<_>>()
        )
    };
    let first = seqs(conn.call(keepalive(s, &w, 0, false)).await)?;
    ensure!(first == [1, 2], "first delivery {first:?}");
    let again = seqs(conn.call(keepalive(s, &w, 0, false)).await)?;
    ensure!(again == [1, 2], "unacknowledged, sent again: {again:?}");
    let rest = seqs(conn.call(keepalive(s, &w, 1, false)).await)?;
    ensure!(rest == [2], "after acknowledging 1: {rest:?}");
    let none = seqs(conn.call(keepalive(s, &w, 2, false)).await)?;
    ensure!(none.is_empty(), "after acknowledging 2: {none:?}");
    Ok(())
}

async fn an_overflowing_event_queue_becomes_one_events_lost(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let k = key("flood");
    subscribe(&mut conn, s, &k, true, event_mask::CONTENTS).await?;
    for n in 0..1_100 {
        conn.call(put(&format!("{k}/{n}"), b"", None, None))
            .await
            .map_err(|e| format!("put {n}: {e}"))?;
    }
    let reply = conn.call(keepalive(s, &w, 0, false)).await;
    let events = expect_reply!(reply, Response::KeepAlive { events, .. } => events)?;
    let lost = events.iter().position(|e| e.kind == EventKind::EventsLost);
    ensure!(
        lost.is_some(),
        "no EventsLost among {} events",
        events.len()
    );
    ensure!(
        events.len() < 1_100,
        "{} events delivered: the queue is unbounded",
        events.len()
    );
    ensure!(
        events.windows(2).all(|p| p[1].seq == p[0].seq + 1),
        "sequence numbers not consecutive"
    );
    Ok(())
}

async fn subscriptions_and_lock_conflicts(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let bad = conn
        .call(Request::Subscribe {
            session: s,
            key: "x".into(),
            prefix: false,
            mask: 0,
        })
        .await;
    expect_error!(bad, ErrorCode::InvalidArgument).map_err(|e| format!("mask 0: {e}"))?;
    let k = key("conflict");
    generation(&conn.call(acquire(&k, s, LockMode::Exclusive, None)).await)?;
    let (mut other, _) = open(&ctx).await;
    let waiter = session(&mut other, &w).await?;
    other
        .request(acquire(&k, waiter, LockMode::Exclusive, Some(5_000)))
        .await;
    // The waiter's acquire came on another connection: ask until the
    // master has applied it.
    let conflict = EventKind::LockConflict {
        key: k.clone(),
        waiter: waiter.id,
    };
    let deadline = Instant::now() + SLACK * 2;
    loop {
        let reply = conn.call(keepalive(s, &w, 0, false)).await;
        let events = expect_reply!(reply, Response::KeepAlive { events, .. } => events)?;
        if events.iter().any(|e| e.kind == conflict) {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "no LockConflict for the holder: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn a_holder_is_told_which_holding_a_delete_took(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let k = key("taken");
    let held = generation(&conn.call(acquire(&k, s, LockMode::Exclusive, None)).await)?;
    // By the holder's own session, as the semaphore recipe gives a slot
    // back (SEM-4): the holder is told all the same.
    let delete = Request::Delete {
        key: k.clone(),
        cas: None,
        recursive: false,
        authority: Authority::Session(s),
    };
    conn.call(delete)
        .await
        .map_err(|e| format!("Delete: {e:?}"))?;
    let lost = EventKind::LockLost {
        key: k.clone(),
        lock_generation: held,
    };
    let deadline = Instant::now() + SLACK * 2;
    loop {
        let reply = conn.call(keepalive(s, &w, 0, false)).await;
        let events = expect_reply!(reply, Response::KeepAlive { events, .. } => events)?;
        if events.iter().any(|e| e.kind == lost) {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "no {lost:?} for the holder: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn a_repeated_subscription_is_the_same_one(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let k = key("repeated");
    let mut ids = Vec::new();
    for mask in [
        event_mask::CONTENTS,
        event_mask::CONTENTS,
        event_mask::CHILD_ADDED,
    ] {
        let subscribe = Request::Subscribe {
            session: s,
            key: k.clone(),
            prefix: false,
            mask,
        };
        let reply = conn.call(subscribe).await;
        let id = expect_reply!(reply, Response::Subscribed { subscription } => subscription)
            .map_err(|e| format!("Subscribe: {e}"))?;
        ids.push(id);
    }
    ensure!(
        ids.windows(2).all(|w| w[0] == w[1]),
        "the same key and kind got several subscriptions: {ids:?}"
    );
    let child = format!("{k}/c");
    let put = Request::Put(Put {
        key: child.clone(),
        contents: Vec::new(),
        flags: 0,
        cas: None,
        ephemeral: None,
    });
    conn.call(put).await.map_err(|e| format!("Put: {e:?}"))?;
    let reply = conn.call(keepalive(s, &w, 0, false)).await;
    let events = expect_reply!(reply, Response::KeepAlive { events, .. } => events)?;
    ensure!(
        events.iter().any(|e| matches!(
            &e.kind,
            EventKind::Node { subscription, key, change: Change::ChildAdded { child: c }, .. }
                if *subscription == ids[0] && *key == k && *c == child
        )),
        "the widened mask heard no ChildAdded: {events:?}"
    );
    Ok(())
}

async fn a_node_event_carries_its_index_and_small_contents(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let k = key("payload");
    let subscribe = Request::Subscribe {
        session: s,
        key: k.clone(),
        prefix: false,
        mask: event_mask::CONTENTS,
    };
    conn.call(subscribe)
        .await
        .map_err(|e| format!("Subscribe: {e:?}"))?;
    let small = b"10.0.0.5:5432".to_vec();
    let large = vec![b'x'; leasehold_protocol::EVENT_CONTENTS_MAX + 1];
    let first = written(&mut conn, put(&k, &small, None, None), "Put").await?;
    let second = written(&mut conn, put(&k, &large, None, None), "Put").await?;
    let expected = [
        (Change::Created, first, Some(small)),
        (Change::Modified, second, None),
    ];
    let mut heard = Vec::new();
    let deadline = Instant::now() + SLACK;
    let mut acked = 0;
    while heard.len() < expected.len() {
        ensure!(
            Instant::now() < deadline,
            "heard only {heard:?} of two writes"
        );
        let reply = conn.call(keepalive(s, &w, acked, false)).await;
        let events = expect_reply!(reply, Response::KeepAlive { events, .. } => events)?;
        for e in events {
            acked = acked.max(e.seq);
            if let EventKind::Node {
                change,
                index,
                contents,
                ..
            } = e.kind
            {
                heard.push((change, index, contents));
            }
        }
    }
    ensure!(
        heard == expected,
        "events {:?}, expected {:?}",
        brief(&heard),
        brief(&expected)
    );
    Ok(())
}

/// Events with their contents as lengths, for messages.
fn brief(events: &[(Change, u64, Option<Vec<u8>>)]) -> Vec<(Change, u64, Option<usize>)> {
    events
        .iter()
        .map(|(c, i, v)| (c.clone(), *i, v.as_ref().map(Vec::len)))
        .collect()
}
