//! SPEC.md, "Ownership": a session's secret, and the requests that need
//! it (AUTH-5, about the master's log, is unobservable from the wire).

use leasehold_protocol::{
    Authority, ErrorCode, LockMode, Request, Response, SessionSecret, SessionToken,
};

use crate::conformance::common::{
    acquire, case, ensure, expect_error, expect_reply, keepalive, key, open, release, session,
};
use crate::conformance::{Case, Check, Ctx};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            &["AUTH-1"],
            the_secret_a_session_is_created_with_acts_for_it
        ),
        case!(
            &["AUTH-2", "ERR-15"],
            a_wrong_secret_is_refused_and_changes_nothing
        ),
        case!(&["AUTH-3"], a_false_claim_to_own_a_session_is_refused),
        case!(&["AUTH-4"], the_only_holder_may_delete_its_locked_node),
    ]
}

/// The session's id with a secret that is not its own.
fn forged(token: SessionToken) -> SessionToken {
    let mut bytes = *token.secret.as_bytes();
    bytes[15] ^= 0x80;
    SessionToken {
        id: token.id,
        secret: SessionSecret::from_bytes(bytes),
    }
}

async fn the_secret_a_session_is_created_with_acts_for_it(ctx: Ctx) -> Check {
    let (mut owner, w) = open(&ctx).await;
    let s = session(&mut owner, &w).await?;
    let k = key("auth");
    let acquired = owner.call(acquire(&k, s, LockMode::Exclusive, None)).await;
    expect_reply!(acquired, Response::Acquired { .. })
        .map_err(|e| format!("acquire with the token: {e}"))?;
    // The secret works from any connection (CONN-4).
    let (mut other, _) = open(&ctx).await;
    let kept = other.call(keepalive(s, &w, 0, false)).await;
    expect_reply!(kept, Response::KeepAlive { .. })
        .map_err(|e| format!("KeepAlive with the token: {e}"))
}

async fn a_wrong_secret_is_refused_and_changes_nothing(ctx: Ctx) -> Check {
    let (mut owner, w) = open(&ctx).await;
    let s = session(&mut owner, &w).await?;
    let k = key("auth");
    let acquired = owner.call(acquire(&k, s, LockMode::Exclusive, None)).await;
    expect_reply!(acquired, Response::Acquired { .. })
        .map_err(|e| format!("acquire with the token: {e}"))?;
    let (mut other, _) = open(&ctx).await;
    let forged_release = release(&k, forged(s));
    let refused = other.call(forged_release).await;
    expect_error!(refused, ErrorCode::PermissionDenied)
        .map_err(|e| format!("Release with a wrong secret: {e}"))?;
    let refused = other.call(keepalive(forged(s), &w, 0, false)).await;
    expect_error!(refused, ErrorCode::PermissionDenied)
        .map_err(|e| format!("KeepAlive with a wrong secret: {e}"))?;
    let released = other.call(release(&k, s)).await;
    expect_reply!(released, Response::Released { .. })
        .map_err(|e| format!("the lock was not still held: {e}"))
}

async fn a_false_claim_to_own_a_session_is_refused(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let claimed = conn
        .call(Request::DestroySession {
            session: s.id,
            authority: Authority::Session(forged(s)),
        })
        .await;
    expect_error!(claimed, ErrorCode::PermissionDenied)
        .map_err(|e| format!("destroy with a wrong secret: {e}"))?;
    let info = conn.call(Request::SessionInfo { session: s.id }).await;
    ensure!(info.is_ok(), "the session was ended: {info:?}");
    Ok(())
}

async fn the_only_holder_may_delete_its_locked_node(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let k = key("auth-delete");
    conn.call(acquire(&k, s, LockMode::Exclusive, None))
        .await
        .map_err(|e| format!("acquire: {e:?}"))?;
    let deleted = conn
        .call(Request::Delete {
            key: k.clone(),
            cas: None,
            recursive: false,
            authority: Authority::Session(s),
        })
        .await;
    expect_reply!(&deleted, Response::Deleted { keys, .. } if keys.len() == 1 && keys[0] == k)
        .map_err(|e| format!("delete by the holder: {e}"))
}
