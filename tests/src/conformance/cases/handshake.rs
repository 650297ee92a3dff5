//! SPEC.md, "Handshake": `Hello` first, answered by `Welcome` or refused
//! with `Close`, within the handshake timeout.

use std::time::{Duration, Instant};

use leasehold_protocol::{
    ClientFrame, ErrorCode, Hello, LockMode, Request, Response, ServerFrame, MAGIC,
};

use crate::conformance::common::{
    acquire, case, ensure, expect_close, expect_reply, generation, key, open, session,
};
use crate::conformance::{Case, Check, Ctx};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(&["HS-1", "WIRE-1"], hello_is_answered_with_welcome),
        case!(
            &["HS-1", "ERR-4"],
            a_request_before_hello_closes_the_connection
        ),
        case!(
            &["HS-2", "ERR-8"],
            another_version_is_refused_with_the_supported_one
        ),
        case!(&["HS-3"], welcome_names_the_version_and_sane_limits),
        case!(
            &["HS-2", "LOCK-4"],
            a_protocol_7_client_is_welcomed_in_its_version_and_its_release_served
        ),
        case!(&["HS-4"], a_connection_without_hello_is_closed),
        case!(
            &["TLS-3"],
            a_client_speaking_the_other_way_is_told_or_closed
        ),
    ]
}

// On a TLS port, a plaintext Hello gets a Close saying the port speaks TLS;
// on a plaintext port, the start of a TLS ClientHello closes the
// connection without a frame. Either way at once, not at a timeout.
async fn a_client_speaking_the_other_way_is_told_or_closed(ctx: Ctx) -> Check {
    let started = Instant::now();
    if ctx.tls.is_some() {
        let mut conn = crate::raw::RawConnection::connect(ctx.addr).await;
        conn.send(ClientFrame::Hello(Hello::current())).await;
        match conn.closed_with().await {
            Some(e) if e.code == ErrorCode::Malformed && e.message.contains("speaks TLS") => {}
            other => {
                return Err(format!(
                    "expected Close(Malformed) naming TLS, got {other:?}"
                ))
            }
        }
    } else {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(ctx.addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        // A TLS record header: a handshake, version 3.1, then garbage.
        let mut hello = vec![22u8, 3, 1, 0, 64];
        hello.extend([0x5a; 64]);
        stream
            .write_all(&hello)
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer));
        match read.await {
            Ok(Ok(_)) => ensure!(answer.is_empty(), "answered {} bytes", answer.len()),
            // A reset also closes it.
            Ok(Err(_)) => {}
            Err(_) => return Err("still open after 5 s".into()),
        }
    }
    ensure!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    Ok(())
}

// One frame each way proves both rules: the Hello, framed and encoded as
// WIRE-1 says, is answered with a Welcome that decodes the same way.
async fn hello_is_answered_with_welcome(ctx: Ctx) -> Check {
    // `open` sends the Hello and fails the case unless a Welcome comes back.
    open(&ctx).await;
    Ok(())
}

async fn a_request_before_hello_closes_the_connection(ctx: Ctx) -> Check {
    let mut conn = ctx.connect().await;
    conn.send(ClientFrame::Request {
        id: 1,
        body: Request::ListSessions {
            after: None,
            limit: 1,
        },
    })
    .await;
    expect_close!(conn.closed_with().await, ErrorCode::Malformed)
}

async fn another_version_is_refused_with_the_supported_one(ctx: Ctx) -> Check {
    let mut conn = ctx.connect().await;
    conn.send(ClientFrame::Hello(Hello {
        magic: MAGIC,
        version: 9_999,
    }))
    .await;
    expect_close!(
        conn.closed_with().await,
        ErrorCode::VersionMismatch { supported }
            if supported == leasehold_protocol::PROTOCOL_VERSION
    )
}

async fn a_protocol_7_client_is_welcomed_in_its_version_and_its_release_served(ctx: Ctx) -> Check {
    let mut conn = ctx.connect().await;
    conn.send(ClientFrame::Hello(Hello {
        magic: MAGIC,
        version: 7,
    }))
    .await;
    let w = match conn.recv().await {
        Some(ServerFrame::Welcome(w)) => w,
        other => return Err(format!("expected a Welcome for protocol 7, got {other:?}")),
    };
    ensure!(w.version == 7, "Welcome names version {}", w.version);
    let s = session(&mut conn, &w).await?;
    let k = key("protocol-7");
    generation(&conn.call(acquire(&k, s, LockMode::Exclusive, None)).await)?;
    generation(&conn.call(acquire(&k, s, LockMode::Exclusive, None)).await)?;
    // Protocol 7's release names no acquire: whatever the session holds.
    let release = Request::ReleaseUnfenced { key: k, session: s };
    expect_reply!(conn.call(release).await, Response::Released { .. })
}

async fn welcome_names_the_version_and_sane_limits(ctx: Ctx) -> Check {
    let (_, w) = open(&ctx).await;
    ensure!(
        w.version == leasehold_protocol::PROTOCOL_VERSION,
        "Welcome names version {}",
        w.version
    );
    let l = &w.limits;
    ensure!(
        l.min_lease_ms <= l.max_lease_ms,
        "lease bounds out of order: {l:?}"
    );
    ensure!(
        (1024..=4 << 20).contains(&(l.max_frame as usize)),
        "max frame {} out of range",
        l.max_frame
    );
    ensure!(
        l.keepalive_margin_ms >= 100,
        "margin {} under 100 ms",
        l.keepalive_margin_ms
    );
    Ok(())
}

async fn a_connection_without_hello_is_closed(ctx: Ctx) -> Check {
    // The server's handshake timeout (10 s by default) closes it: wait up
    // to 20 s.
    let conn = ctx.connect().await.with_patience(Duration::from_secs(20));
    let started = Instant::now();
    expect_close!(conn.closed_with().await, ErrorCode::Malformed)
        .map_err(|e| format!("after {:?}: {e}", started.elapsed()))
}
