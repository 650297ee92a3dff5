//! SPEC.md, "Sessions": creating one, the bounds on its lease and
//! lock-delay, its ephemeral nodes, its end by lease or by `DestroySession`,
//! and listing the live ones.

use std::time::Duration;

use leasehold_protocol::{Authority, Behavior, CreateSession, ErrorCode, Request, Response};

use crate::conformance::common::{
    case, create, ensure, expect_error, expect_reply, keepalive, key, open, put, remember, session,
    short_lease, SLACK,
};
use crate::conformance::{Case, Check, Ctx};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            &["SES-1"],
            a_created_session_gets_the_epoch_and_a_full_lease
        ),
        case!(&["SES-2"], a_lease_out_of_range_is_refused),
        case!(
            &["SES-3", "ERR-9"],
            a_lock_delay_over_the_maximum_is_refused
        ),
        case!(&["SES-4", "NS-4"], an_ephemeral_node_goes_with_its_session),
        // One expiry shows all four: the lease's length and timer, the end, SessionExpired.
        case!(
            &["SES-6", "LEASE-1", "LEASE-3", "ERR-2"],
            a_session_without_keepalives_expires
        ),
        case!(
            &["SES-6", "KA-7"],
            a_keepalive_sent_after_the_lease_ran_out_does_not_revive_it
        ),
        case!(
            &["SES-7", "AUTH-3"],
            the_owner_may_destroy_its_session_from_any_connection
        ),
        case!(&["SES-10"], a_created_session_is_listed),
    ]
}

async fn a_created_session_gets_the_epoch_and_a_full_lease(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let lease = short_lease(&w) * 2;
    let request = Request::CreateSession(CreateSession {
        name: "lease".into(),
        lease_ms: Some(lease),
        lock_delay_ms: None,
        behavior: Behavior::Release,
        checks: vec![],
    });
    let (session, secret, epoch, grant) = expect_reply!(
        conn.call(request).await,
        Response::SessionCreated { session, secret, epoch, lease: grant } => (session, secret, epoch, grant)
    )?;
    remember(
        &conn,
        leasehold_protocol::SessionToken {
            id: session,
            secret,
        },
    );
    ensure!(
        epoch == w.epoch,
        "SessionCreated names epoch {epoch}, Welcome {}",
        w.epoch
    );
    ensure!(
        grant.remaining_ms <= lease && grant.remaining_ms + 10 >= lease,
        "granted {grant:?} of {lease} ms"
    );
    Ok(())
}

async fn a_lease_out_of_range_is_refused(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let too_long = w.limits.max_lease_ms + 1;
    let refused = create(&mut conn, too_long, None, Behavior::Release, vec![]).await;
    ensure!(refused.is_err(), "a lease of {too_long} ms was accepted");
    Ok(())
}

async fn a_lock_delay_over_the_maximum_is_refused(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let delay = w.limits.max_lock_delay_ms + 1;
    let request = Request::CreateSession(CreateSession {
        name: "x".into(),
        lease_ms: None,
        lock_delay_ms: Some(delay),
        behavior: Behavior::Release,
        checks: vec![],
    });
    let reply = conn.call(request).await;
    expect_error!(reply, ErrorCode::InvalidArgument)
        .map_err(|e| format!("lock-delay {delay} ms: {e}"))
}

async fn an_ephemeral_node_goes_with_its_session(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let id = session(&mut conn, &w).await?;
    let k = key("ephemeral");
    conn.call(put(&k, b"x", None, Some(id)))
        .await
        .map_err(|e| format!("ephemeral put: {e}"))?;
    conn.call(Request::DestroySession {
        session: id.id,
        authority: Authority::Session(id),
    })
    .await
    .map_err(|e| format!("destroy: {e}"))?;
    let got = conn
        .call(Request::Get {
            key: k.clone(),
            stat_only: true,
        })
        .await;
    expect_reply!(got, Response::Node { node: None, .. })
        .map_err(|e| format!("the node outlived its session: {e}"))
}

async fn a_session_without_keepalives_expires(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let lease = short_lease(&w);
    let id = create(&mut conn, lease, None, Behavior::Release, vec![]).await?;
    tokio::time::sleep(Duration::from_millis(lease) + SLACK).await;
    let info = conn.call(Request::SessionInfo { session: id.id }).await;
    expect_error!(info, ErrorCode::SessionExpired).map_err(|e| format!("after its lease: {e}"))
}

// A KeepAlive renews a lease only if it reached the master before the
// lease ran out, however late the master reads it: one sent after the end
// is refused, and the session stays ended.
async fn a_keepalive_sent_after_the_lease_ran_out_does_not_revive_it(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let lease = short_lease(&w);
    let id = create(&mut conn, lease, None, Behavior::Release, vec![]).await?;
    tokio::time::sleep(Duration::from_millis(lease) + SLACK).await;
    let ka = conn.call(keepalive(id, &w, 0, false)).await;
    expect_error!(ka, ErrorCode::SessionExpired)
        .map_err(|e| format!("KeepAlive after the lease: {e}"))?;
    let info = conn.call(Request::SessionInfo { session: id.id }).await;
    expect_error!(info, ErrorCode::SessionExpired)
        .map_err(|e| format!("after the late KeepAlive: {e}"))
}

async fn the_owner_may_destroy_its_session_from_any_connection(ctx: Ctx) -> Check {
    let (mut a, w) = open(&ctx).await;
    let id = session(&mut a, &w).await?;
    let (mut b, _) = open(&ctx).await;
    let destroyed = b
        .call(Request::DestroySession {
            session: id.id,
            authority: Authority::Session(id),
        })
        .await;
    expect_reply!(destroyed, Response::Destroyed).map_err(|e| format!("destroy: {e}"))?;
    let ka = a.call(keepalive(id, &w, 0, false)).await;
    expect_error!(ka, ErrorCode::SessionExpired)
        .map_err(|e| format!("KeepAlive after destroy: {e}"))
}

async fn a_created_session_is_listed(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let id = session(&mut conn, &w).await?;
    let mut after = None;
    loop {
        let reply = conn.call(Request::ListSessions { after, limit: 0 }).await;
        let (sessions, more) =
            expect_reply!(reply, Response::Sessions { sessions, more } => (sessions, more))?;
        if sessions.iter().any(|s| s.session == id.id) {
            return Ok(());
        }
        ensure!(
            sessions.windows(2).all(|p| p[0].session < p[1].session),
            "a page out of id order"
        );
        after = sessions.last().map(|s| s.session);
        ensure!(more && after.is_some(), "the new session is not listed");
    }
}
