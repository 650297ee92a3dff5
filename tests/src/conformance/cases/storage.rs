//! SPEC.md, "Storage": what the master keeps across a restart (the
//! harness restarts it; the data directory itself, STORE-2 and STORE-3,
//! and a full disk, STORE-5, are not observable from the wire).

use leasehold_protocol::{Request, Response};

use crate::conformance::common::{
    case, ensure, expect_reply, key, needs_restart, open, put, restart, written,
};
use crate::conformance::{Case, Check, Ctx};

pub(super) fn cases() -> Vec<Case> {
    vec![case!(
        &["STORE-1", "STORE-4"],
        a_restart_keeps_acknowledged_writes_and_indexes_go_on_rising
    )]
}

async fn a_restart_keeps_acknowledged_writes_and_indexes_go_on_rising(ctx: Ctx) -> Check {
    needs_restart(&ctx)?;
    let (mut conn, _) = open(&ctx).await;
    let k = key("durable");
    let index = written(&mut conn, put(&k, b"kept", None, None), "put").await?;
    drop(conn);
    let (mut conn, _) = restart(&ctx).await?;
    let got = conn
        .call(Request::Get {
            key: k.clone(),
            stat_only: false,
        })
        .await;
    let n = expect_reply!(got, Response::Node { node: Some(n), .. } => n)
        .map_err(|e| format!("an acknowledged write is gone: {e}"))?;
    ensure!(
        n.contents.as_deref() == Some(&b"kept"[..]),
        "contents {:?}",
        n.contents
    );
    ensure!(
        n.stat.modify_index == index,
        "modify index {} != {index}",
        n.stat.modify_index
    );
    // Indexes go on rising after the restart.
    let later = written(&mut conn, put(&k, b"later", None, None), "put").await?;
    ensure!(later > index, "index {later} after {index}");
    Ok(())
}
