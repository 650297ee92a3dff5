//! SPEC.md, "Connections and requests": request ids, concurrency, the
//! in-flight limit, sessions free of connections, and what a peer that
//! does not read its replies is allowed to cost.

use std::time::{Duration, Instant};

use leasehold_protocol::{ClientFrame, ErrorCode, Request, Response};

use crate::conformance::common::{
    case, ensure, expect_error, expect_reply, keepalive, key, open, put, session, written,
};
use crate::conformance::{Case, Check, Ctx};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(&["CONN-1"], a_reply_echoes_the_request_id),
        case!(
            &["CONN-2", "CONN-4"],
            a_held_keepalive_delays_nothing_and_any_connection_serves_a_session
        ),
        case!(
            &["CONN-3", "ERR-6"],
            a_request_beyond_the_in_flight_limit_is_refused
        ),
        case!(
            &["CONN-5"],
            a_peer_that_stops_reading_is_closed_and_blocks_nobody
        ),
        case!(
            &["CONN-9", "ERR-16"],
            a_peer_that_leaves_its_replies_unread_is_refused_not_flooded
        ),
    ]
}

async fn a_reply_echoes_the_request_id(ctx: Ctx) -> Check {
    let (mut conn, _) = open(&ctx).await;
    let id = 0xdead_beef_u64;
    conn.send(ClientFrame::Request {
        id,
        body: Request::ListSessions {
            after: None,
            limit: 1,
        },
    })
    .await;
    let (got, _) = conn.reply().await;
    ensure!(got == id, "reply carries id {got}, not {id}");
    Ok(())
}

async fn a_held_keepalive_delays_nothing_and_any_connection_serves_a_session(ctx: Ctx) -> Check {
    let (mut a, w) = open(&ctx).await;
    let id = session(&mut a, &w).await?;
    let (mut b, _) = open(&ctx).await;
    let held = b.request(keepalive(id, &w, 0, true)).await;
    let started = Instant::now();
    let info = b.request(Request::SessionInfo { session: id.id }).await;
    let (got, reply) = b.reply().await;
    ensure!(
        got == info,
        "the held KeepAlive ({held}) was answered before a later request"
    );
    ensure!(
        started.elapsed() < Duration::from_secs(2),
        "a request waited behind the held KeepAlive"
    );
    expect_reply!(reply, Response::SessionInfo(ref s) if s.keepalive_held)
}

async fn a_request_beyond_the_in_flight_limit_is_refused(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let limit = w.limits.max_in_flight as usize;
    ensure!(
        limit <= 100_000,
        "an in-flight limit of {limit} is too large to test"
    );
    let k = key("inflight");
    let index = written(&mut conn, put(&k, b"x", None, None), "put").await?;
    // Watches that wait: each holds a slot until the key changes.
    for _ in 0..limit {
        conn.request(Request::Watch {
            key: k.clone(),
            after_index: index,
            timeout_ms: 60_000,
        })
        .await;
    }
    let over = conn
        .request(Request::List {
            prefix: k.clone(),
            recursive: false,
            after: None,
            limit: 0,
        })
        .await;
    let (id, reply) = conn.reply().await;
    ensure!(
        id == over,
        "reply to request {id} while {limit} watches wait"
    );
    expect_error!(reply, ErrorCode::LimitReached)
        .map_err(|e| format!("request {} of {limit}: {e}", limit + 1))?;
    // The connection stays open.
    let (mut writer, _) = open(&ctx).await;
    writer
        .call(put(&k, b"y", None, None))
        .await
        .map_err(|e| format!("put: {e}"))?;
    for _ in 0..limit {
        let (_, reply) = conn.reply().await;
        expect_reply!(reply, Response::Node { .. }).map_err(|e| format!("a watch: {e}"))?;
    }
    Ok(())
}

async fn a_peer_that_stops_reading_is_closed_and_blocks_nobody(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let k = key("flood");
    let size = (200 << 10).min(w.limits.max_frame as usize / 2);
    conn.call(put(&k, &vec![7; size], None, None))
        .await
        .map_err(|e| format!("put: {e}"))?;
    // Far more reply bytes than any socket buffers hold; none is read.
    let requests = (32 << 20) / size;
    for _ in 0..requests {
        conn.request(Request::Get {
            key: k.clone(),
            stat_only: false,
        })
        .await;
    }
    // The server went on reading (our writes got through) and serves
    // others: well before the write timeout, though after the replies
    // queued ahead of this one.
    let (mut bystander, _) = open(&ctx).await;
    let started = Instant::now();
    let other = bystander
        .call(Request::Get {
            key: k.clone(),
            stat_only: true,
        })
        .await;
    let waited = started.elapsed();
    ensure!(
        other.is_ok() && waited < Duration::from_secs(5),
        "another connection waited {waited:?}: {other:?}"
    );
    // The write timeout (10 s by default) closes the stuck connection.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let mut conn = conn.with_patience(Duration::from_secs(10));
    let mut replies = 0;
    while let Some(frame) = conn.recv().await {
        if matches!(frame, leasehold_protocol::ServerFrame::Reply { .. }) {
            replies += 1;
        }
    }
    ensure!(
        replies < requests,
        "all {requests} replies were written: the connection was never closed"
    );
    Ok(())
}

/// Held watches on a large node, all answered in one turn when another
/// connection writes it: their replies pile up faster than any socket
/// takes them, whatever the machine, so past the budget the rest are
/// refused, and reading them all leaves the connection serving again.
async fn a_peer_that_leaves_its_replies_unread_is_refused_not_flooded(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let (mut writer, _) = open(&ctx).await;
    let k = key("budget");
    let size = (64 * 1024).min(w.limits.max_frame as usize / 2);
    let index = written(&mut conn, put(&k, &vec![b'x'; size], None, None), "Put").await?;
    let watches = 400;
    for _ in 0..watches {
        conn.request(Request::Watch {
            key: k.clone(),
            after_index: index,
            timeout_ms: 60_000,
        })
        .await;
    }
    // Requests on one connection are taken in order: once this is
    // answered, every watch is held.
    let held = conn
        .call(Request::Get {
            key: k.clone(),
            stat_only: true,
        })
        .await;
    expect_reply!(held, Response::Node { .. }).map_err(|e| format!("before the write: {e}"))?;
    written(&mut writer, put(&k, &vec![b'y'; size], None, None), "Put").await?;
    let (mut served, mut refused) = (0, 0);
    for _ in 0..watches {
        match conn.reply().await.1 {
            Err(e) if matches!(e.code, ErrorCode::Congested { .. }) => refused += 1,
            reply => {
                expect_reply!(reply, Response::Node { node: Some(_), .. })
                    .map_err(|e| format!("neither served nor refused as congested: {e}"))?;
                served += 1;
            }
        }
    }
    ensure!(
        served > 0 && refused > 0,
        "{served} served and {refused} refused of {watches} unread watches of {size} bytes"
    );
    let after = conn
        .call(Request::Get {
            key: k,
            stat_only: true,
        })
        .await;
    expect_reply!(after, Response::Node { .. }).map_err(|e| format!("after reading: {e}"))
}
