//! What the cases share: the macros that register cases and state what a
//! reply must be, and the helpers that build requests and take the steps
//! many cases take (a connection, a session, a write, a lock). None of it
//! is a SPEC section of its own; the section files under `cases/` use it.

use std::time::{Duration, Instant};

use leasehold_protocol::{
    Acquire, Authority, Behavior, CheckStatus, CreateSession, KeepAlive, LockMode, NodeStat, Put,
    Request, Response, Sequencer, SessionId, SessionToken, Welcome,
};

use super::{Ctx, SKIPPED};
use crate::raw::RawConnection;

/// How late a timed answer may be on a busy machine.
pub(super) const SLACK: Duration = Duration::from_secs(2);

/// Fails the case with the formatted message unless `$cond` holds.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}
pub(super) use ensure;

/// A [`Case`](super::Case) checking `$rules`, named after its body, the
/// async fn `$name`.
macro_rules! case {
    ($rules:expr, $name:ident) => {
        $crate::conformance::Case {
            rules: $rules,
            name: stringify!($name),
            run: |ctx| Box::pin($name(ctx)),
        }
    };
}
pub(super) use case;

/// What a reply must be: `expect_reply!(reply, Response::Written { index }
/// => index)` is `Ok(index)` when `reply` is `Ok(Response::Written { .. })`
/// (and the optional `if` guard holds), else `Err("expected
/// Response::Written { index }, got <the whole reply>")`, the guard's text
/// after the pattern when there is one. Without `=>` it yields `()`.
/// `reply` may be a reference; use the result with `?`.
macro_rules! expect_reply {
    ($reply:expr, $pattern:pat $(if $guard:expr)? => $value:expr) => {
        match $reply {
            Ok($pattern) $(if $guard)? => Ok($value),
            other => Err(format!(
                "expected {}, got {:?}",
                concat!(stringify!($pattern) $(, " if ", stringify!($guard))?),
                other
            )),
        }
    };
    ($reply:expr, $pattern:pat $(if $guard:expr)?) => {
        match $reply {
            Ok($pattern) $(if $guard)? => Ok(()),
            other => Err(format!(
                "expected {}, got {:?}",
                concat!(stringify!($pattern) $(, " if ", stringify!($guard))?),
                other
            )),
        }
    };
}
pub(super) use expect_reply;

/// What refusal a reply must be: `expect_error!(reply, ErrorCode::LockHeld)`
/// is `Ok(())` when `reply` is an error with that code (and the optional
/// `if` guard holds), else `Err("expected ErrorCode::LockHeld, got <the
/// whole reply>")`, the guard's text after the code when there is one.
/// With `=> value` it yields the value, as [`expect_reply!`] does.
macro_rules! expect_error {
    ($reply:expr, $code:pat $(if $guard:expr)? => $value:expr) => {
        match $reply {
            Err(::leasehold_protocol::Error { code: $code, .. }) $(if $guard)? => Ok($value),
            other => Err(format!(
                "expected {}, got {:?}",
                concat!(stringify!($code) $(, " if ", stringify!($guard))?),
                other
            )),
        }
    };
    ($reply:expr, $code:pat $(if $guard:expr)?) => {
        match $reply {
            Err(::leasehold_protocol::Error { code: $code, .. }) $(if $guard)? => Ok(()),
            other => Err(format!(
                "expected {}, got {:?}",
                concat!(stringify!($code) $(, " if ", stringify!($guard))?),
                other
            )),
        }
    };
}
pub(super) use expect_error;

/// How a closed connection must have been closed: `expect_close!(close,
/// ErrorCode::Malformed)`, on what [`RawConnection::closed_with`] returned,
/// is `Ok(())` when the server sent `Close` with that code (and the
/// optional `if` guard holds), else `Err("expected Close(ErrorCode::Malformed),
/// got <what came>")`.
macro_rules! expect_close {
    ($close:expr, $code:pat $(if $guard:expr)?) => {
        match $close {
            Some(::leasehold_protocol::Error { code: $code, .. }) $(if $guard)? => Ok(()),
            other => Err(format!(
                "expected Close({}), got {:?}",
                concat!(stringify!($code) $(, " if ", stringify!($guard))?),
                other
            )),
        }
    };
}
pub(super) use expect_close;

/// Connects and completes the handshake (a failed one fails the case).
pub(super) async fn open(ctx: &Ctx) -> (RawConnection, Welcome) {
    ctx.open_at(ctx.addr).await
}

/// A lease the server accepts and that keeps timing cases short.
pub(super) fn short_lease(w: &Welcome) -> u64 {
    w.limits.min_lease_ms.max(1_000).min(w.limits.max_lease_ms)
}

/// Creates a session as asked and returns its token.
pub(super) async fn create(
    conn: &mut RawConnection,
    lease_ms: u64,
    lock_delay_ms: Option<u64>,
    behavior: Behavior,
    checks: Vec<String>,
) -> Result<SessionToken, String> {
    let request = Request::CreateSession(CreateSession {
        name: "conformance".into(),
        lease_ms: Some(lease_ms),
        lock_delay_ms,
        behavior,
        checks,
    });
    let token = expect_reply!(
        conn.call(request).await,
        Response::SessionCreated { session, secret, .. } => SessionToken { id: session, secret }
    )
    .map_err(|e| format!("CreateSession: {e}"))?;
    remember(conn, token);
    Ok(token)
}

/// The sessions the cases created, by the address of the server they
/// created them on: what [`clean_up`] ends.
static CREATED: std::sync::Mutex<Vec<(std::net::SocketAddr, SessionToken)>> =
    std::sync::Mutex::new(Vec::new());

/// Notes that the cases made `session` on `conn`'s server.
pub(super) fn remember(conn: &RawConnection, session: SessionToken) {
    if let Some(server) = conn.peer() {
        let mut created = CREATED.lock().unwrap_or_else(|e| e.into_inner());
        created.push((server, session));
    }
}

/// Leaves the server at `ctx` as the run found it: ends every session the
/// cases made on it (which releases their locks and deletes their
/// ephemeral nodes), then deletes every key they wrote, all under
/// `conformance/` ([`key`]). Best effort: what is refused stays.
pub(super) async fn clean_up(ctx: &Ctx) {
    let sessions: Vec<SessionToken> = {
        let mut created = CREATED.lock().unwrap_or_else(|e| e.into_inner());
        let (ours, others) = created
            .drain(..)
            .partition(|(server, _)| *server == ctx.addr);
        *created = others;
        ours.into_iter().map(|(_, token)| token).collect::<Vec<_>>()
    };
    let (mut conn, _) = open(ctx).await;
    for session in sessions {
        let destroy = Request::DestroySession {
            session: session.id,
            authority: Authority::Session(session),
        };
        let _ = conn.call(destroy).await;
    }
    let delete = Request::Delete {
        key: "conformance".into(),
        cas: None,
        recursive: true,
        authority: Authority::Anonymous,
    };
    let _ = conn.call(delete).await;
}

/// A session with a 30 s lease (or the longest accepted) and no lock-delay,
/// for cases that do not time it.
pub(super) async fn session(conn: &mut RawConnection, w: &Welcome) -> Result<SessionToken, String> {
    create(
        conn,
        30_000.min(w.limits.max_lease_ms),
        Some(0),
        Behavior::Release,
        vec![],
    )
    .await
}

/// A KeepAlive for `session` in the epoch `w` announced.
pub(super) fn keepalive(session: SessionToken, w: &Welcome, acked_seq: u64, hold: bool) -> Request {
    Request::KeepAlive(KeepAlive {
        session,
        epoch: w.epoch,
        acked_seq,
        hold,
    })
}

/// A release of `key`'s lock by `session`, whichever acquire answered it
/// last: it names an index no acquire can be past (`LOCK-4`).
pub(super) fn release(key: &str, session: SessionToken) -> Request {
    Request::Release {
        key: key.to_string(),
        session,
        acquired: u64::MAX,
    }
}

/// An acquire of `key`'s lock, with no contents, on a node that is kept.
pub(super) fn acquire(
    key: &str,
    session: SessionToken,
    mode: LockMode,
    wait_ms: Option<u64>,
) -> Request {
    Request::Acquire(Acquire {
        key: key.into(),
        session,
        mode,
        contents: None,
        wait_ms,
        transient: false,
    })
}

/// A `Put` of `contents` at `key`, with no flags.
pub(super) fn put(
    key: &str,
    contents: &[u8],
    cas: Option<u64>,
    ephemeral: Option<SessionToken>,
) -> Request {
    Request::Put(Put {
        key: key.into(),
        contents: contents.to_vec(),
        flags: 0,
        cas,
        ephemeral,
    })
}

/// The index a write was acknowledged at; `what` names it in the failure.
pub(super) async fn written(
    conn: &mut RawConnection,
    request: Request,
    what: &str,
) -> Result<u64, String> {
    expect_reply!(conn.call(request).await, Response::Written { index } => index)
        .map_err(|e| format!("{what}: {e}"))
}

/// A key no other case (or earlier run) uses.
pub(super) fn key(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("conformance/{name}-{nanos}")
}

/// The lock generation an `Acquired` reply's sequencer names.
pub(super) fn generation(
    reply: &Result<Response, leasehold_protocol::Error>,
) -> Result<u64, String> {
    let sequencer = expect_reply!(reply, Response::Acquired { sequencer, .. } => sequencer)?;
    Sequencer::from_bytes(sequencer)
        .map(|s| s.lock_generation)
        .ok_or_else(|| "Acquired carries bytes that are not a sequencer".into())
}

/// The metadata of the node at `key`, if there is one.
pub(super) async fn stat_of(
    conn: &mut RawConnection,
    key: &str,
) -> Result<Option<NodeStat>, String> {
    let reply = conn
        .call(Request::Get {
            key: key.into(),
            stat_only: true,
        })
        .await;
    expect_reply!(reply, Response::Node { node, .. } => node.map(|n| n.stat))
        .map_err(|e| format!("Get {key}: {e}"))
}

/// Subscribes `session` and returns the subscription id.
pub(super) async fn subscribe(
    conn: &mut RawConnection,
    session: SessionToken,
    key: &str,
    prefix: bool,
    mask: u32,
) -> Result<u64, String> {
    let reply = conn
        .call(Request::Subscribe {
            session,
            key: key.into(),
            prefix,
            mask,
        })
        .await;
    expect_reply!(reply, Response::Subscribed { subscription } => subscription)
        .map_err(|e| format!("subscribe: {e}"))
}

/// Sets the health check `name` to `status`; returns the sessions it ended.
pub(super) async fn set_check(
    conn: &mut RawConnection,
    name: &str,
    status: CheckStatus,
) -> Result<Vec<SessionId>, String> {
    let reply = conn
        .call(Request::SetCheck {
            name: name.into(),
            status,
            note: String::new(),
        })
        .await;
    expect_reply!(reply, Response::CheckSet { invalidated, .. } => invalidated)
        .map_err(|e| format!("SetCheck: {e}"))
}

/// Why a case that needs a restart does not run, when the harness cannot
/// restart the server.
pub(super) fn needs_restart(ctx: &Ctx) -> Result<(), String> {
    match ctx.restart {
        Some(_) => Ok(()),
        None => Err(format!("{SKIPPED}needs --restart-cmd")),
    }
}

/// Restarts the server and returns a connection to the new one.
pub(super) async fn restart(ctx: &Ctx) -> Result<(RawConnection, Welcome), String> {
    let Some(restart) = &ctx.restart else {
        return Err(format!("{SKIPPED}needs --restart-cmd"));
    };
    restart().await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(stream) = tokio::net::TcpStream::connect(ctx.addr).await {
            drop(stream);
            return Ok(open(ctx).await);
        }
        ensure!(
            Instant::now() < deadline,
            "the server did not come back within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
