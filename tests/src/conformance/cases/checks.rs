//! SPEC.md, "Health checks": setting a check, binding sessions to it, the
//! sessions a failing or deleted check ends, and listing checks.

use leasehold_protocol::{Behavior, CheckStatus, ErrorCode, Request, Response};

use crate::conformance::common::{
    case, create, ensure, expect_error, expect_reply, key, open, session, set_check,
};
use crate::conformance::{Case, Check, Ctx};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(&["CHK-1", "CHK-3"], a_critical_check_ends_its_sessions),
        case!(&["CHK-2"], a_session_binds_only_to_an_existing_check),
        case!(&["CHK-4"], deleting_a_check_ends_its_sessions),
        case!(&["CHK-5"], a_check_is_listed_with_its_status),
    ]
}

/// A check name no other case uses.
fn check_name(name: &str) -> String {
    key(name).replace('/', ":")
}

async fn a_critical_check_ends_its_sessions(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let name = check_name("check");
    set_check(&mut conn, &name, CheckStatus::Passing).await?;
    let bound = create(
        &mut conn,
        30_000.min(w.limits.max_lease_ms),
        None,
        Behavior::Release,
        vec![name.clone()],
    )
    .await?;
    let free = session(&mut conn, &w).await?;
    let warned = set_check(&mut conn, &name, CheckStatus::Warning).await?;
    ensure!(warned.is_empty(), "a warning ended {warned:?}");
    let ended = set_check(&mut conn, &name, CheckStatus::Critical).await?;
    ensure!(
        ended == [bound.id],
        "critical ended {ended:?}, expected [{bound}]"
    );
    let info = conn.call(Request::SessionInfo { session: bound.id }).await;
    expect_error!(info, ErrorCode::SessionExpired).map_err(|e| format!("bound session: {e}"))?;
    let info = conn.call(Request::SessionInfo { session: free.id }).await;
    ensure!(info.is_ok(), "unbound session: {info:?}");
    Ok(())
}

async fn a_session_binds_only_to_an_existing_check(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let name = check_name("bind");
    let missing = create(
        &mut conn,
        30_000.min(w.limits.max_lease_ms),
        None,
        Behavior::Release,
        vec![name.clone()],
    )
    .await;
    ensure!(
        missing.is_err(),
        "a session bound to a missing check was created"
    );
    set_check(&mut conn, &name, CheckStatus::Passing).await?;
    create(
        &mut conn,
        30_000.min(w.limits.max_lease_ms),
        None,
        Behavior::Release,
        vec![name.clone()],
    )
    .await?;
    Ok(())
}

async fn deleting_a_check_ends_its_sessions(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let name = check_name("delcheck");
    set_check(&mut conn, &name, CheckStatus::Passing).await?;
    let bound = create(
        &mut conn,
        30_000.min(w.limits.max_lease_ms),
        None,
        Behavior::Release,
        vec![name.clone()],
    )
    .await?;
    let deleted = conn.call(Request::DeleteCheck { name: name.clone() }).await;
    let invalidated =
        expect_reply!(deleted, Response::CheckDeleted { invalidated, .. } => invalidated)
            .map_err(|e| format!("DeleteCheck: {e}"))?;
    ensure!(invalidated == [bound.id], "ended {invalidated:?}");
    Ok(())
}

async fn a_check_is_listed_with_its_status(ctx: Ctx) -> Check {
    let (mut conn, _) = open(&ctx).await;
    let name = check_name("listed");
    set_check(&mut conn, &name, CheckStatus::Passing).await?;
    set_check(&mut conn, &name, CheckStatus::Critical).await?;
    let listed = conn
        .call(Request::ListChecks {
            after: None,
            limit: 0,
        })
        .await;
    let checks = expect_reply!(listed, Response::Checks { checks, .. } => checks)
        .map_err(|e| format!("ListChecks: {e}"))?;
    ensure!(
        checks
            .iter()
            .any(|c| c.name == name && c.status == CheckStatus::Critical),
        "the check is not listed as critical"
    );
    Ok(())
}
