//! SPEC.md, "Operating": what the master says of itself over the protocol
//! (its HTTP port is another port, tested in tests/tests/metrics.rs).

use leasehold_protocol::{LockMode, Request, Response};

use crate::conformance::common::{
    acquire, case, ensure, expect_reply, generation, key, open, put, session, written,
};
use crate::conformance::{Case, Check, Ctx};

pub(super) fn cases() -> Vec<Case> {
    vec![case!(
        &["OPS-4"],
        status_counts_what_the_master_serves_as_it_changes
    )]
}

async fn status_counts_what_the_master_serves_as_it_changes(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let before = expect_reply!(conn.call(Request::Status).await, Response::Status(s) => s)?;
    ensure!(!before.version.is_empty(), "a version: {before:?}");
    ensure!(before.epoch == w.epoch, "the Welcome's epoch: {before:?}");
    let a = session(&mut conn, &w).await?;
    let k = key("status");
    written(&mut conn, put(&k, b"v", None, None), "a put").await?;
    generation(&conn.call(acquire(&k, a, LockMode::Exclusive, None)).await)?;
    let after = expect_reply!(conn.call(Request::Status).await, Response::Status(s) => s)?;
    ensure!(
        after.index > before.index,
        "the index rises: {before:?} then {after:?}"
    );
    ensure!(
        after.sessions >= 1 && after.nodes >= 1 && after.locks_held >= 1 && after.holdings >= 1,
        "a session, a node and a lock at least: {after:?}"
    );
    ensure!(
        after.holdings >= after.locks_held,
        "a held lock has a holding at least: {after:?}"
    );
    let causes: Vec<&str> = after
        .recently_ended
        .iter()
        .map(|(c, _)| c.as_str())
        .collect();
    ensure!(
        causes == ["destroyed", "expired", "check-failed"],
        "every cause, zeros included: {after:?}"
    );
    Ok(())
}
