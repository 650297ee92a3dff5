//! SPEC.md, "KeepAlive": when a held KeepAlive is answered, what an
//! answer grants, and which KeepAlives are refused (LEASE-2, the lease an
//! answer extends, is checked here with KA-4).

use std::time::{Duration, Instant};

use leasehold_protocol::{
    keepalive_all_limit, Behavior, ErrorCode, KeepAlive, Request, Response, SessionId,
    SessionSecret, SessionToken, Welcome,
};

use crate::conformance::common::{
    case, create, ensure, expect_error, expect_reply, keepalive, open, session, short_lease, SLACK,
};
use crate::conformance::{Case, Check, Ctx};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            &["KA-2"],
            a_held_keepalive_is_answered_a_margin_before_expiry
        ),
        case!(&["KA-3"], a_keepalive_without_hold_is_answered_at_once),
        case!(
            &["KA-4", "LEASE-2"],
            an_answered_keepalive_grants_a_full_lease
        ),
        case!(&["KA-5"], a_second_keepalive_answers_the_held_one),
        case!(
            &["KA-6", "ERR-3"],
            a_keepalive_naming_another_epoch_is_refused
        ),
        case!(
            &["KA-7", "ERR-1"],
            a_keepalive_for_an_unknown_session_is_refused
        ),
        case!(
            &["KA-10", "CONN-3"],
            a_keepalive_all_renews_each_session_at_once
        ),
        case!(
            &["KA-10", "KA-6", "KA-7"],
            a_keepalive_all_refuses_a_session_alone
        ),
        case!(&["KA-10"], a_keepalive_all_over_the_limit_is_refused_whole),
    ]
}

async fn a_held_keepalive_is_answered_a_margin_before_expiry(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let lease = short_lease(&w) * 2;
    // Before asking: the lease starts after this.
    let created = Instant::now();
    let id = create(&mut conn, lease, None, Behavior::Release, vec![]).await?;
    let margin = w.limits.keepalive_margin_ms.max(lease / 20).min(lease / 4);
    let due = Duration::from_millis(lease - margin);
    conn.request(keepalive(id, &w, 0, true)).await;
    let (_, reply) = conn.reply().await;
    let at = created.elapsed();
    expect_reply!(reply, Response::KeepAlive { .. })?;
    // Not before lease − margin (less 2 ms of clock rounding), and not
    // much after.
    ensure!(
        at + Duration::from_millis(2) >= due,
        "answered after {at:?}, due at {due:?}"
    );
    ensure!(at <= due + SLACK, "answered after {at:?}, due at {due:?}");
    Ok(())
}

async fn a_keepalive_without_hold_is_answered_at_once(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let id = session(&mut conn, &w).await?;
    let started = Instant::now();
    let reply = conn.call(keepalive(id, &w, 0, false)).await;
    expect_reply!(reply, Response::KeepAlive { .. })?;
    ensure!(started.elapsed() < SLACK, "took {:?}", started.elapsed());
    Ok(())
}

async fn an_answered_keepalive_grants_a_full_lease(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let lease = short_lease(&w) * 2;
    let id = create(&mut conn, lease, None, Behavior::Release, vec![]).await?;
    let reply = conn.call(keepalive(id, &w, 0, false)).await;
    let g = expect_reply!(reply, Response::KeepAlive { lease: g, .. } => g)?;
    ensure!(
        g.remaining_ms <= lease && g.remaining_ms + 10 >= lease,
        "KeepAlive granted {g:?} of {lease} ms"
    );
    Ok(())
}

async fn a_second_keepalive_answers_the_held_one(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let id = session(&mut conn, &w).await?;
    let first = conn.request(keepalive(id, &w, 0, true)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    conn.request(keepalive(id, &w, 0, true)).await;
    let (got, reply) = conn.reply().await;
    ensure!(
        got == first,
        "expected the first KeepAlive answered, got reply to {got}"
    );
    expect_reply!(reply, Response::KeepAlive { .. })?;
    ensure!(started.elapsed() < SLACK, "took {:?}", started.elapsed());
    Ok(())
}

async fn a_keepalive_naming_another_epoch_is_refused(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let id = session(&mut conn, &w).await?;
    let stale = Request::KeepAlive(KeepAlive {
        session: id,
        epoch: w.epoch + 1_000,
        acked_seq: 0,
        hold: false,
    });
    let reply = conn.call(stale).await;
    expect_error!(reply, ErrorCode::WrongEpoch { current } if current == w.epoch)
}

async fn a_keepalive_for_an_unknown_session_is_refused(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let reply = conn
        .call(keepalive(
            SessionToken {
                id: SessionId::from_u128(7),
                secret: SessionSecret::from_bytes([7; 16]),
            },
            &w,
            0,
            false,
        ))
        .await;
    expect_error!(reply, ErrorCode::UnknownSession)
}

fn keepalive_all(sessions: &[SessionToken], w: &Welcome, hold: bool) -> Request {
    Request::KeepAliveAll(
        sessions
            .iter()
            .map(|&session| KeepAlive {
                session,
                epoch: w.epoch,
                acked_seq: 0,
                hold,
            })
            .collect(),
    )
}

async fn a_keepalive_all_renews_each_session_at_once(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let lease = short_lease(&w) * 2;
    let a = create(&mut conn, lease, None, Behavior::Release, vec![]).await?;
    let b = create(&mut conn, lease, None, Behavior::Release, vec![]).await?;
    let started = Instant::now();
    // Asked to be held, and answered at once all the same.
    let reply = conn.call(keepalive_all(&[a, b], &w, true)).await;
    let took = started.elapsed();
    let answers = expect_reply!(reply, Response::KeepAliveAll { answers } => answers)?;
    ensure!(
        answers.len() == 2,
        "{} answers for 2 sessions",
        answers.len()
    );
    for answer in &answers {
        let g = answer.as_ref().map_err(|e| format!("refused: {e}"))?.lease;
        ensure!(
            g.remaining_ms <= lease && g.remaining_ms + 10 >= lease,
            "granted {g:?} of {lease} ms"
        );
    }
    ensure!(took < SLACK, "took {took:?}");
    Ok(())
}

async fn a_keepalive_all_refuses_a_session_alone(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let id = session(&mut conn, &w).await?;
    let stale = session(&mut conn, &w).await?;
    let unknown = SessionToken {
        id: SessionId::from_u128(7),
        secret: SessionSecret::from_bytes([7; 16]),
    };
    let mut request = keepalive_all(&[id, unknown, stale], &w, false);
    if let Request::KeepAliveAll(all) = &mut request {
        all[2].epoch = w.epoch + 1_000;
    }
    let reply = conn.call(request).await;
    let answers = expect_reply!(reply, Response::KeepAliveAll { answers } => answers)?;
    let codes: Vec<Option<ErrorCode>> = answers
        .into_iter()
        .map(|answer| answer.err().map(|e| e.code))
        .collect();
    let wanted = [
        None,
        Some(ErrorCode::UnknownSession),
        Some(ErrorCode::WrongEpoch { current: w.epoch }),
    ];
    ensure!(codes == wanted, "answered {codes:?}, expected {wanted:?}");
    Ok(())
}

async fn a_keepalive_all_over_the_limit_is_refused_whole(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let id = session(&mut conn, &w).await?;
    let limit = keepalive_all_limit(w.limits.max_frame as usize);
    let reply = conn
        .call(keepalive_all(&vec![id; limit + 1], &w, false))
        .await;
    expect_error!(reply, ErrorCode::InvalidArgument)?;
    // The connection serves on.
    let reply = conn.call(keepalive(id, &w, 0, false)).await;
    expect_reply!(reply, Response::KeepAlive { .. })
}
