//! SPEC.md, "Operating": what the master says of itself over the protocol
//! (its HTTP port is another port, tested in tests/tests/metrics.rs).

use leasehold_protocol::{ErrorCode, LockMode, Request, Response};

use crate::conformance::common::{
    acquire, case, ensure, expect_error, expect_reply, generation, key, open, put, session, written,
};
use crate::conformance::{Case, Check, Ctx};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            &["OPS-4"],
            status_counts_what_the_master_serves_as_it_changes
        ),
        case!(
            &["OPS-6"],
            a_saved_snapshot_is_read_in_pieces_to_its_end_then_let_go
        ),
    ]
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

async fn a_saved_snapshot_is_read_in_pieces_to_its_end_then_let_go(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let k = key("snapshot");
    let index = written(&mut conn, put(&k, b"v", None, None), "a put").await?;
    let saved = conn.call(Request::SaveSnapshot).await;
    if let Err(e) = &saved {
        if e.code == ErrorCode::PermissionDenied {
            return Err(format!(
                "{}the server takes snapshots for its operator alone: {e}",
                crate::conformance::SKIPPED
            ));
        }
    }
    let (id, total, at, epoch) = expect_reply!(
        saved,
        Response::SnapshotSaved { id, bytes, index, epoch } => (id, bytes, index, epoch)
    )?;
    ensure!(at >= index, "it holds the put at {index}: index {at}");
    ensure!(epoch == w.epoch, "the master's epoch: {epoch}");
    let mut bytes = Vec::new();
    while (bytes.len() as u64) < total {
        let read = Request::ReadSnapshot {
            id,
            offset: bytes.len() as u64,
        };
        let piece = expect_reply!(
            conn.call(read).await,
            Response::SnapshotBytes { bytes, .. } => bytes
        )?;
        ensure!(!piece.is_empty(), "a piece before the end");
        ensure!(
            piece.len() <= w.limits.max_frame as usize / 2,
            "a piece fits half a frame: {}",
            piece.len()
        );
        bytes.extend(piece);
    }
    ensure!(
        bytes.len() as u64 == total,
        "{} bytes of {total}",
        bytes.len()
    );
    ensure!(
        bytes.starts_with(b"LHSNAP"),
        "a data directory's snapshot file"
    );
    let again = conn.call(Request::ReadSnapshot { id, offset: 0 }).await;
    expect_error!(again, ErrorCode::InvalidArgument)
        .map_err(|e| format!("read to its end, it is let go: {e}"))?;
    Ok(())
}
