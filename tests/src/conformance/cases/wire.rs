//! SPEC.md, "Wire format": how frames are delimited and decoded, and what a
//! frame the server cannot read does to its connection (WIRE-1 is checked
//! with the handshake, whose Welcome is the first frame decoded).

use leasehold_protocol::{ErrorCode, Request, Response};

use crate::conformance::common::{case, ensure, expect_close, expect_reply, open, session};
use crate::conformance::{Case, Check, Ctx};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            &["WIRE-2", "ERR-5"],
            an_oversized_length_closes_the_connection
        ),
        case!(
            &["WIRE-3", "WIRE-4"],
            a_garbage_body_closes_only_its_connection
        ),
        case!(
            &["WIRE-3"],
            unknown_kinds_and_truncated_frames_are_malformed
        ),
    ]
}

async fn an_oversized_length_closes_the_connection(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let claimed = w.limits.max_frame + 1;
    conn.send_bytes(&claimed.to_be_bytes()).await;
    expect_close!(conn.closed_with().await, ErrorCode::FrameTooLarge)
}

async fn a_garbage_body_closes_only_its_connection(ctx: Ctx) -> Check {
    let (mut bystander, w) = open(&ctx).await;
    let id = session(&mut bystander, &w).await?;
    let (mut conn, _) = open(&ctx).await;
    conn.send_bytes(&[0, 0, 0, 4, 0xff, 0xfe, 0xfd, 0xfc]).await;
    expect_close!(conn.closed_with().await, ErrorCode::Malformed)?;
    let info = bystander
        .call(Request::SessionInfo { session: id.id })
        .await;
    expect_reply!(info, Response::SessionInfo(_))
        .map_err(|e| format!("another connection was affected: {e}"))
}

async fn unknown_kinds_and_truncated_frames_are_malformed(ctx: Ctx) -> Check {
    // A frame whose message kind (the enum's variant index) is unknown.
    let (mut conn, _) = open(&ctx).await;
    conn.send_bytes(&[0, 0, 0, 1, 100]).await;
    expect_close!(conn.closed_with().await, ErrorCode::Malformed)
        .map_err(|e| format!("unknown kind: {e}"))?;
    // A frame cut short by the end of the stream: closed, quietly or with
    // Malformed, and the server goes on serving.
    let (mut conn, _) = open(&ctx).await;
    conn.send_bytes(&[0, 0, 0, 100, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
        .await;
    conn.finish_writing().await;
    let close = conn.closed_with().await;
    ensure!(
        close
            .as_ref()
            .is_none_or(|e| e.code == ErrorCode::Malformed),
        "truncated frame: expected the connection closed, got {close:?}"
    );
    let (mut fresh, _) = open(&ctx).await;
    let reply = fresh
        .call(Request::ListSessions {
            after: None,
            limit: 1,
        })
        .await;
    ensure!(reply.is_ok(), "after a truncated frame: {reply:?}");
    Ok(())
}
