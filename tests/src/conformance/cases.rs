//! The cases, one or more SPEC rules each. Timing cases use short leases
//! the harness asks for itself, with tolerances stated where they are used.

use std::time::{Duration, Instant};

use leasehold_protocol::{
    event_mask, Acquire, Authority, Behavior, Change, CheckStatus, ClientFrame, CreateSession,
    ErrorCode, EventKind, Hello, KeepAlive, LockMode, NodeStat, Put, Request, Response, Sequencer,
    SessionId, SessionSecret, SessionToken, Welcome, MAGIC,
};

use super::{Case, Check, Ctx, SKIPPED};
use crate::raw::RawConnection;

/// How late a timed answer may be on a busy machine.
const SLACK: Duration = Duration::from_secs(2);

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

macro_rules! case {
    ($rules:expr, $name:ident) => {
        Case {
            rules: $rules,
            name: stringify!($name),
            run: |ctx| Box::pin($name(ctx)),
        }
    };
}

pub(super) fn all() -> Vec<Case> {
    vec![
        case!(
            &["HS-1", "HS-3", "WIRE-1", "EP-1"],
            hello_is_answered_with_welcome
        ),
        case!(
            &["HS-1", "ERR-4"],
            a_request_before_hello_closes_the_connection
        ),
        case!(
            &["HS-2", "ERR-8"],
            another_version_is_refused_with_the_supported_one
        ),
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
        case!(&["CONN-1"], a_reply_echoes_the_request_id),
        case!(
            &["CONN-2", "CONN-4"],
            a_held_keepalive_delays_nothing_and_any_connection_serves_a_session
        ),
        case!(&["SES-1", "KA-4", "LEASE-2"], a_session_gets_a_full_lease),
        case!(
            &["SES-2", "SES-3", "ERR-9"],
            leases_and_lock_delays_out_of_range_are_refused
        ),
        case!(&["SES-4", "NS-4"], an_ephemeral_node_goes_with_its_session),
        case!(
            &["SES-6", "LEASE-1", "LEASE-3", "ERR-2"],
            a_session_without_keepalives_expires
        ),
        case!(
            &["SES-7", "AUTH-3"],
            the_owner_may_destroy_its_session_from_any_connection
        ),
        case!(
            &["AUTH-1", "AUTH-2", "ERR-15"],
            acting_for_a_session_needs_its_secret
        ),
        case!(&["AUTH-3"], a_false_claim_to_own_a_session_is_refused),
        case!(&["AUTH-4"], the_only_holder_may_delete_its_locked_node),
        case!(
            &["CONN-9", "ERR-16"],
            a_peer_that_leaves_its_replies_unread_is_refused_not_flooded
        ),
        case!(&["SES-10"], a_created_session_is_listed),
        case!(
            &["KA-2"],
            a_held_keepalive_is_answered_a_margin_before_expiry
        ),
        case!(&["KA-3"], a_keepalive_without_hold_is_answered_at_once),
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
            &["NS-1", "NS-3"],
            bad_keys_and_oversized_contents_are_refused
        ),
        case!(
            &["NS-2", "NS-6", "NS-9", "ERR-10"],
            puts_count_and_compare_and_set_guards
        ),
        case!(&["NS-5", "NS-7"], listing_and_recursive_delete),
        case!(&["NS-8"], a_watch_returns_when_its_key_changes),
        case!(
            &["LOCK-1", "LOCK-2", "LOCK-4", "ERR-11", "ERR-13"],
            lock_modes_generations_and_release
        ),
        case!(&["LOCK-3", "LOCK-5"], waiters_are_served_in_order),
        case!(
            &["LOCK-12", "NS-2"],
            a_transient_lock_node_goes_when_its_lock_is_free
        ),
        case!(
            &["LOCK-6", "ERR-12"],
            lock_delay_follows_invalidation_not_release
        ),
        case!(
            &["LOCK-7", "LOCK-8"],
            a_sequencer_is_valid_only_while_its_holding_lasts
        ),
        case!(
            &["EV-1", "EV-3", "KA-8"],
            a_queued_event_answers_the_held_keepalive
        ),
        case!(&["EV-2"], unacknowledged_events_are_sent_again),
        case!(&["EV-5", "EV-6"], subscriptions_and_lock_conflicts),
        case!(&["EV-5"], a_repeated_subscription_is_the_same_one),
        case!(
            &["EV-10"],
            a_node_event_carries_its_index_and_small_contents
        ),
        case!(
            &["CHK-1", "CHK-2", "CHK-3", "CHK-5"],
            a_critical_check_ends_its_sessions
        ),
        case!(&["CHK-4"], deleting_a_check_ends_its_sessions),
        case!(
            &["CONN-3", "ERR-6"],
            a_request_beyond_the_in_flight_limit_is_refused
        ),
        case!(
            &["NS-5", "NS-7"],
            a_listing_larger_than_a_frame_comes_in_pages
        ),
        case!(
            &["EV-4"],
            an_overflowing_event_queue_becomes_one_events_lost
        ),
        case!(&["LOCK-9"], a_grant_nobody_can_hear_is_released),
        case!(&["HS-4"], a_connection_without_hello_is_closed),
        case!(
            &["CONN-5"],
            a_peer_that_stops_reading_is_closed_and_blocks_nobody
        ),
        case!(
            &["FO-1", "STORE-1", "STORE-4"],
            a_restart_keeps_writes_under_a_greater_epoch
        ),
        case!(
            &["FO-2", "FO-5", "ERR-14"],
            a_recovered_session_acknowledges_the_failover_first
        ),
        case!(
            &["FO-3", "FO-4"],
            lock_delay_survives_a_restart_and_dead_waiters_do_not
        ),
    ]
}

// Budgets ---------------------------------------------------------------

async fn a_peer_that_leaves_its_replies_unread_is_refused_not_flooded(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let k = key("budget");
    let size = (64 * 1024).min(w.limits.max_frame as usize / 2);
    written(&mut conn, put(&k, &vec![b'x'; size], None, None), "Put").await?;
    let gets = 2_000;
    for _ in 0..gets {
        conn.request(Request::Get {
            key: k.clone(),
            stat_only: false,
        })
        .await;
    }
    let (mut served, mut refused) = (0, 0);
    for _ in 0..gets {
        match conn.reply().await.1 {
            Ok(Response::Node { node: Some(_), .. }) => served += 1,
            Err(e) if matches!(e.code, ErrorCode::Congested { .. }) => refused += 1,
            other => return Err(format!("unexpected reply {other:?}")),
        }
    }
    ensure!(
        served > 0 && refused > 0,
        "{served} served and {refused} refused of {gets} unread Gets of {size} bytes"
    );
    let after = conn
        .call(Request::Get {
            key: k,
            stat_only: true,
        })
        .await;
    ensure!(
        matches!(after, Ok(Response::Node { .. })),
        "after reading: {after:?}"
    );
    Ok(())
}

// Ownership -------------------------------------------------------------

/// The session's id with a secret that is not its own.
fn forged(token: SessionToken) -> SessionToken {
    let mut bytes = *token.secret.as_bytes();
    bytes[15] ^= 0x80;
    SessionToken {
        id: token.id,
        secret: SessionSecret::from_bytes(bytes),
    }
}

async fn acting_for_a_session_needs_its_secret(ctx: Ctx) -> Check {
    let (mut owner, w) = open(&ctx).await;
    let s = session(&mut owner, &w).await?;
    let k = key("auth");
    let acquired = owner.call(acquire(&k, s, LockMode::Exclusive, None)).await;
    ensure!(
        matches!(acquired, Ok(Response::Acquired { .. })),
        "acquire with the token: {acquired:?}"
    );
    let (mut other, _) = open(&ctx).await;
    let release = Request::Release {
        key: k.clone(),
        session: forged(s),
    };
    let refused = other.call(release).await;
    ensure!(
        code(&refused) == Some(ErrorCode::PermissionDenied),
        "Release with a wrong secret: {refused:?}"
    );
    let refused = other.call(keepalive(forged(s), &w, 0, false)).await;
    ensure!(
        code(&refused) == Some(ErrorCode::PermissionDenied),
        "KeepAlive with a wrong secret: {refused:?}"
    );
    // The secret works from any connection (CONN-4).
    let kept = other.call(keepalive(s, &w, 0, false)).await;
    ensure!(
        matches!(kept, Ok(Response::KeepAlive { .. })),
        "KeepAlive with the token: {kept:?}"
    );
    let release = Request::Release { key: k, session: s };
    let released = other.call(release).await;
    ensure!(
        matches!(released, Ok(Response::Released { .. })),
        "the lock was not still held: {released:?}"
    );
    Ok(())
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
    ensure!(
        code(&claimed) == Some(ErrorCode::PermissionDenied),
        "destroy with a wrong secret: {claimed:?}"
    );
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
    ensure!(
        matches!(&deleted, Ok(Response::Deleted { keys, .. }) if keys.len() == 1 && keys[0] == k),
        "delete by the holder: {deleted:?}"
    );
    Ok(())
}

// Helpers ---------------------------------------------------------------

async fn open(ctx: &Ctx) -> (RawConnection, Welcome) {
    RawConnection::open(ctx.addr).await
}

/// A lease the server accepts and that keeps timing cases short.
fn short_lease(w: &Welcome) -> u64 {
    w.limits.min_lease_ms.max(1_000).min(w.limits.max_lease_ms)
}

async fn create(
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
    match conn.call(request).await {
        Ok(Response::SessionCreated {
            session, secret, ..
        }) => Ok(SessionToken {
            id: session,
            secret,
        }),
        other => Err(format!(
            "CreateSession: expected SessionCreated, got {other:?}"
        )),
    }
}

async fn session(conn: &mut RawConnection, w: &Welcome) -> Result<SessionToken, String> {
    create(
        conn,
        30_000.min(w.limits.max_lease_ms),
        Some(0),
        Behavior::Release,
        vec![],
    )
    .await
}

fn keepalive(session: SessionToken, w: &Welcome, acked_seq: u64, hold: bool) -> Request {
    Request::KeepAlive(KeepAlive {
        session,
        epoch: w.epoch,
        acked_seq,
        hold,
    })
}

fn acquire(key: &str, session: SessionToken, mode: LockMode, wait_ms: Option<u64>) -> Request {
    Request::Acquire(Acquire {
        key: key.into(),
        session,
        mode,
        contents: None,
        wait_ms,
        transient: false,
    })
}

fn put(key: &str, contents: &[u8], cas: Option<u64>, ephemeral: Option<SessionToken>) -> Request {
    Request::Put(Put {
        key: key.into(),
        contents: contents.to_vec(),
        flags: 0,
        cas,
        ephemeral,
    })
}

/// The index a write was acknowledged at; `what` names it in the failure.
async fn written(conn: &mut RawConnection, request: Request, what: &str) -> Result<u64, String> {
    match conn.call(request).await {
        Ok(Response::Written { index }) => Ok(index),
        other => Err(format!("{what}: {other:?}")),
    }
}

fn code(reply: &Result<Response, leasehold_protocol::Error>) -> Option<ErrorCode> {
    reply.as_ref().err().map(|e| e.code)
}

/// A key no other case (or earlier run) uses.
fn key(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("conformance/{name}-{nanos}")
}

fn generation(reply: &Result<Response, leasehold_protocol::Error>) -> Result<u64, String> {
    match reply {
        Ok(Response::Acquired { sequencer, .. }) => Sequencer::from_bytes(sequencer)
            .map(|s| s.lock_generation)
            .ok_or_else(|| "Acquired carries bytes that are not a sequencer".into()),
        other => Err(format!("expected Acquired, got {other:?}")),
    }
}

// Handshake and frames --------------------------------------------------

async fn hello_is_answered_with_welcome(ctx: Ctx) -> Check {
    let (_, w) = open(&ctx).await;
    ensure!(
        w.version == leasehold_protocol::PROTOCOL_VERSION,
        "Welcome names version {}",
        w.version
    );
    ensure!(w.epoch >= 1, "epoch {} is below 1", w.epoch);
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

async fn a_request_before_hello_closes_the_connection(ctx: Ctx) -> Check {
    let mut conn = RawConnection::connect(ctx.addr).await;
    conn.send(ClientFrame::Request {
        id: 1,
        body: Request::ListSessions {
            after: None,
            limit: 1,
        },
    })
    .await;
    let close = conn.closed_with().await;
    ensure!(
        close
            .as_ref()
            .is_some_and(|e| e.code == ErrorCode::Malformed),
        "expected Close(Malformed), got {close:?}"
    );
    Ok(())
}

async fn another_version_is_refused_with_the_supported_one(ctx: Ctx) -> Check {
    let mut conn = RawConnection::connect(ctx.addr).await;
    conn.send(ClientFrame::Hello(Hello {
        magic: MAGIC,
        version: 9_999,
    }))
    .await;
    let close = conn.closed_with().await;
    ensure!(
        matches!(close.as_ref().map(|e| e.code), Some(ErrorCode::VersionMismatch { supported }) if supported == leasehold_protocol::PROTOCOL_VERSION),
        "expected Close(VersionMismatch), got {close:?}"
    );
    Ok(())
}

async fn an_oversized_length_closes_the_connection(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let claimed = w.limits.max_frame + 1;
    conn.send_bytes(&claimed.to_be_bytes()).await;
    let close = conn.closed_with().await;
    ensure!(
        close
            .as_ref()
            .is_some_and(|e| e.code == ErrorCode::FrameTooLarge),
        "expected Close(FrameTooLarge), got {close:?}"
    );
    Ok(())
}

async fn a_garbage_body_closes_only_its_connection(ctx: Ctx) -> Check {
    let (mut bystander, w) = open(&ctx).await;
    let id = session(&mut bystander, &w).await?;
    let (mut conn, _) = open(&ctx).await;
    conn.send_bytes(&[0, 0, 0, 4, 0xff, 0xfe, 0xfd, 0xfc]).await;
    let close = conn.closed_with().await;
    ensure!(
        close
            .as_ref()
            .is_some_and(|e| e.code == ErrorCode::Malformed),
        "expected Close(Malformed), got {close:?}"
    );
    let info = bystander
        .call(Request::SessionInfo { session: id.id })
        .await;
    ensure!(
        matches!(info, Ok(Response::SessionInfo(_))),
        "another connection was affected: {info:?}"
    );
    Ok(())
}

async fn a_reply_echoes_the_request_id(ctx: Ctx) -> Check {
    let (mut conn, _) = open(&ctx).await;
    let id = 0xdead_beef_u64;
    conn.send(ClientFrame::Request {
        id,
        body: Request::ListSessions {
            after: None,
            limit: 1,
        },
    })
    .await;
    let (got, _) = conn.reply().await;
    ensure!(got == id, "reply carries id {got}, not {id}");
    Ok(())
}

async fn a_held_keepalive_delays_nothing_and_any_connection_serves_a_session(ctx: Ctx) -> Check {
    let (mut a, w) = open(&ctx).await;
    let id = session(&mut a, &w).await?;
    let (mut b, _) = open(&ctx).await;
    let held = b.request(keepalive(id, &w, 0, true)).await;
    let started = Instant::now();
    let info = b.request(Request::SessionInfo { session: id.id }).await;
    let (got, reply) = b.reply().await;
    ensure!(
        got == info,
        "the held KeepAlive ({held}) was answered before a later request"
    );
    ensure!(
        started.elapsed() < Duration::from_secs(2),
        "a request waited behind the held KeepAlive"
    );
    ensure!(
        matches!(reply, Ok(Response::SessionInfo(ref s)) if s.keepalive_held),
        "expected SessionInfo with a held KeepAlive, got {reply:?}"
    );
    Ok(())
}

// Sessions and leases ---------------------------------------------------

async fn a_session_gets_a_full_lease(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let lease = short_lease(&w) * 2;
    let request = Request::CreateSession(CreateSession {
        name: "lease".into(),
        lease_ms: Some(lease),
        lock_delay_ms: None,
        behavior: Behavior::Release,
        checks: vec![],
    });
    let (id, grant) = match conn.call(request).await {
        Ok(Response::SessionCreated {
            session,
            secret,
            lease,
            epoch,
        }) => {
            ensure!(
                epoch == w.epoch,
                "SessionCreated names epoch {epoch}, Welcome {}",
                w.epoch
            );
            (
                SessionToken {
                    id: session,
                    secret,
                },
                lease,
            )
        }
        other => return Err(format!("expected SessionCreated, got {other:?}")),
    };
    ensure!(
        grant.remaining_ms <= lease && grant.remaining_ms + 10 >= lease,
        "granted {grant:?} of {lease} ms"
    );
    match conn.call(keepalive(id, &w, 0, false)).await {
        Ok(Response::KeepAlive { lease: g, .. }) => {
            ensure!(
                g.remaining_ms <= lease && g.remaining_ms + 10 >= lease,
                "KeepAlive granted {g:?} of {lease} ms"
            );
        }
        other => return Err(format!("expected a KeepAlive reply, got {other:?}")),
    }
    Ok(())
}

async fn leases_and_lock_delays_out_of_range_are_refused(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let too_long = w.limits.max_lease_ms + 1;
    let refused = create(&mut conn, too_long, None, Behavior::Release, vec![]).await;
    ensure!(refused.is_err(), "a lease of {too_long} ms was accepted");
    let delay = w.limits.max_lock_delay_ms + 1;
    let request = Request::CreateSession(CreateSession {
        name: "x".into(),
        lease_ms: None,
        lock_delay_ms: Some(delay),
        behavior: Behavior::Release,
        checks: vec![],
    });
    let reply = conn.call(request).await;
    ensure!(
        code(&reply) == Some(ErrorCode::InvalidArgument),
        "lock-delay {delay} ms: {reply:?}"
    );
    Ok(())
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
    ensure!(
        matches!(got, Ok(Response::Node { node: None, .. })),
        "the node outlived its session: {got:?}"
    );
    Ok(())
}

async fn a_session_without_keepalives_expires(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let lease = short_lease(&w);
    let id = create(&mut conn, lease, None, Behavior::Release, vec![]).await?;
    tokio::time::sleep(Duration::from_millis(lease) + SLACK).await;
    let info = conn.call(Request::SessionInfo { session: id.id }).await;
    ensure!(
        code(&info) == Some(ErrorCode::SessionExpired),
        "after its lease: {info:?}"
    );
    Ok(())
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
    ensure!(
        matches!(destroyed, Ok(Response::Destroyed)),
        "destroy: {destroyed:?}"
    );
    let ka = a.call(keepalive(id, &w, 0, false)).await;
    ensure!(
        code(&ka) == Some(ErrorCode::SessionExpired),
        "KeepAlive after destroy: {ka:?}"
    );
    Ok(())
}

async fn a_created_session_is_listed(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let id = session(&mut conn, &w).await?;
    let mut after = None;
    loop {
        match conn.call(Request::ListSessions { after, limit: 0 }).await {
            Ok(Response::Sessions { sessions, more }) => {
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
            other => return Err(format!("expected Sessions, got {other:?}")),
        }
    }
}

// KeepAlive -------------------------------------------------------------

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
    ensure!(
        matches!(reply, Ok(Response::KeepAlive { .. })),
        "expected a KeepAlive reply, got {reply:?}"
    );
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
    ensure!(matches!(reply, Ok(Response::KeepAlive { .. })), "{reply:?}");
    ensure!(started.elapsed() < SLACK, "took {:?}", started.elapsed());
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
    ensure!(matches!(reply, Ok(Response::KeepAlive { .. })), "{reply:?}");
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
    ensure!(
        code(&reply) == Some(ErrorCode::WrongEpoch { current: w.epoch }),
        "{reply:?}"
    );
    Ok(())
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
    ensure!(code(&reply) == Some(ErrorCode::UnknownSession), "{reply:?}");
    Ok(())
}

// Namespace -------------------------------------------------------------

async fn bad_keys_and_oversized_contents_are_refused(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    for bad in ["", "/lead", "trail/", "a//b", "a/../b", "sp ace"] {
        let reply = conn.call(put(bad, b"x", None, None)).await;
        ensure!(
            code(&reply) == Some(ErrorCode::InvalidArgument),
            "key {bad:?}: {reply:?}"
        );
    }
    if w.limits.max_frame as usize > (256 << 10) + 1024 {
        let reply = conn
            .call(put(&key("big"), &vec![0; (256 << 10) + 1], None, None))
            .await;
        ensure!(
            code(&reply) == Some(ErrorCode::InvalidArgument),
            "256 KiB + 1: {reply:?}"
        );
    }
    Ok(())
}

async fn puts_count_and_compare_and_set_guards(ctx: Ctx) -> Check {
    let (mut conn, _) = open(&ctx).await;
    let k = key("cas");
    let first = written(&mut conn, put(&k, b"a", Some(0), None), "create-only put").await?;
    let again = conn.call(put(&k, b"b", Some(0), None)).await;
    ensure!(
        code(&again) == Some(ErrorCode::CasMismatch { current: first }),
        "second create-only put: {again:?}"
    );
    let second = written(
        &mut conn,
        put(&k, b"b", Some(first), None),
        "put with the right cas",
    )
    .await?;
    ensure!(second > first, "indexes must rise: {first} then {second}");
    match conn
        .call(Request::Get {
            key: k.clone(),
            stat_only: false,
        })
        .await
    {
        Ok(Response::Node { node: Some(n), .. }) => {
            ensure!(
                n.contents.as_deref() == Some(&b"b"[..]),
                "contents {:?}",
                n.contents
            );
            ensure!(
                n.stat.instance == first,
                "instance {} != {first}",
                n.stat.instance
            );
            ensure!(
                n.stat.content_generation == 2,
                "content generation {}",
                n.stat.content_generation
            );
            ensure!(
                n.stat.modify_index == second,
                "modify index {}",
                n.stat.modify_index
            );
        }
        other => return Err(format!("get: {other:?}")),
    }
    Ok(())
}

async fn listing_and_recursive_delete(ctx: Ctx) -> Check {
    let (mut conn, _) = open(&ctx).await;
    let root = key("tree");
    for child in ["b", "a", "a/deep"] {
        conn.call(put(&format!("{root}/{child}"), b"", None, None))
            .await
            .map_err(|e| format!("put: {e}"))?;
    }
    match conn
        .call(Request::List {
            prefix: root.clone(),
            recursive: false,
            after: None,
            limit: 0,
        })
        .await
    {
        Ok(Response::Keys { keys, .. }) => {
            ensure!(
                keys == [format!("{root}/a"), format!("{root}/b")],
                "children: {keys:?}"
            );
        }
        other => return Err(format!("list: {other:?}")),
    }
    match conn
        .call(Request::Delete {
            key: format!("{root}/a"),
            cas: None,
            recursive: true,
            authority: Authority::Anonymous,
        })
        .await
    {
        Ok(Response::Deleted { keys, .. }) => ensure!(keys.len() == 2, "deleted {keys:?}"),
        other => return Err(format!("delete: {other:?}")),
    }
    Ok(())
}

async fn a_watch_returns_when_its_key_changes(ctx: Ctx) -> Check {
    let (mut watcher, _) = open(&ctx).await;
    let (mut writer, _) = open(&ctx).await;
    let k = key("watch");
    let index = written(&mut writer, put(&k, b"1", None, None), "put").await?;
    watcher
        .request(Request::Watch {
            key: k.clone(),
            after_index: index,
            timeout_ms: 10_000,
        })
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    writer
        .call(put(&k, b"2", None, None))
        .await
        .map_err(|e| format!("put: {e}"))?;
    let (_, reply) = watcher.reply().await;
    ensure!(
        started.elapsed() < SLACK,
        "the watch answered after {:?}",
        started.elapsed()
    );
    ensure!(
        matches!(reply, Ok(Response::Node { index: i, .. }) if i > index),
        "{reply:?}"
    );
    Ok(())
}

// Locks -----------------------------------------------------------------

async fn lock_modes_generations_and_release(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let a = session(&mut conn, &w).await?;
    let b = session(&mut conn, &w).await?;
    let k = key("lock");
    let g1 = generation(&conn.call(acquire(&k, a, LockMode::Exclusive, None)).await)?;
    let again = generation(&conn.call(acquire(&k, a, LockMode::Exclusive, None)).await)?;
    ensure!(
        again == g1,
        "re-acquire changed the generation: {g1} to {again}"
    );
    let held = conn.call(acquire(&k, b, LockMode::Exclusive, None)).await;
    ensure!(
        code(&held) == Some(ErrorCode::LockHeld),
        "second exclusive: {held:?}"
    );
    let not_held = conn
        .call(Request::Release {
            key: k.clone(),
            session: b,
        })
        .await;
    ensure!(
        code(&not_held) == Some(ErrorCode::LockNotHeld),
        "release by a non-holder: {not_held:?}"
    );
    conn.call(Request::Release {
        key: k.clone(),
        session: a,
    })
    .await
    .map_err(|e| format!("release: {e}"))?;
    let s1 = generation(&conn.call(acquire(&k, a, LockMode::Shared, None)).await)?;
    let s2 = generation(&conn.call(acquire(&k, b, LockMode::Shared, None)).await)?;
    ensure!(
        s1 == g1 + 1 && s2 == s1,
        "shared generations {s1}, {s2} after {g1}"
    );
    Ok(())
}

async fn stat_of(conn: &mut RawConnection, key: &str) -> Result<Option<NodeStat>, String> {
    match conn
        .call(Request::Get {
            key: key.into(),
            stat_only: true,
        })
        .await
    {
        Ok(Response::Node { node, .. }) => Ok(node.map(|n| n.stat)),
        other => Err(format!("Get {key}: {other:?}")),
    }
}

async fn a_transient_lock_node_goes_when_its_lock_is_free(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let a = session(&mut conn, &w).await?;
    let release = |key: &str| Request::Release {
        key: key.into(),
        session: a,
    };
    let transient = |key: &str| {
        let Request::Acquire(acquire) = acquire(key, a, LockMode::Exclusive, None) else {
            unreachable!()
        };
        Request::Acquire(Acquire {
            transient: true,
            ..acquire
        })
    };
    let k = key("transient");
    let first = generation(&conn.call(transient(&k)).await)?;
    let stat = stat_of(&mut conn, &k).await?;
    ensure!(
        stat.as_ref().is_some_and(|s| s.transient),
        "a node created by a transient acquire: {stat:?}"
    );
    conn.call(release(&k))
        .await
        .map_err(|e| format!("release: {e}"))?;
    let after = stat_of(&mut conn, &k).await?;
    ensure!(
        after.is_none(),
        "the node outlived its free lock: {after:?}"
    );
    // NS-2: the node made anew takes a higher generation than the one that
    // went, so resources fenced by generation never go backwards.
    let again = generation(&conn.call(transient(&k)).await)?;
    ensure!(
        again > first,
        "generation {again} after {first} on a node made anew"
    );
    conn.call(release(&k))
        .await
        .map_err(|e| format!("release: {e}"))?;
    // A node that existed before is never made transient.
    let kept = key("kept");
    written(&mut conn, put(&kept, b"v", None, None), "Put").await?;
    generation(&conn.call(transient(&kept)).await)?;
    conn.call(release(&kept))
        .await
        .map_err(|e| format!("release: {e}"))?;
    let after = stat_of(&mut conn, &kept).await?;
    ensure!(
        after.as_ref().is_some_and(|s| !s.transient),
        "a node written by Put went with the lock: {after:?}"
    );
    Ok(())
}

async fn waiters_are_served_in_order(ctx: Ctx) -> Check {
    let (mut holder, w) = open(&ctx).await;
    let h = session(&mut holder, &w).await?;
    let k = key("fifo");
    generation(&holder.call(acquire(&k, h, LockMode::Exclusive, None)).await)?;
    let mut waiters = Vec::new();
    for _ in 0..3 {
        let (mut conn, _) = open(&ctx).await;
        let s = session(&mut conn, &w).await?;
        conn.request(acquire(&k, s, LockMode::Exclusive, Some(10_000)))
            .await;
        waiters.push((conn, s));
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    holder
        .call(Request::Release {
            key: k.clone(),
            session: h,
        })
        .await
        .map_err(|e| format!("release: {e}"))?;
    for (n, (conn, s)) in waiters.iter_mut().enumerate() {
        let (_, reply) = conn.reply().await;
        generation(&reply).map_err(|e| format!("waiter {n}: {e}"))?;
        conn.call(Request::Release {
            key: k.clone(),
            session: *s,
        })
        .await
        .map_err(|e| format!("release {n}: {e}"))?;
    }
    Ok(())
}

async fn lock_delay_follows_invalidation_not_release(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let delay = 2_000.min(w.limits.max_lock_delay_ms);
    let lease = 30_000.min(w.limits.max_lease_ms);
    let holder = create(&mut conn, lease, Some(delay), Behavior::Release, vec![]).await?;
    let next = session(&mut conn, &w).await?;
    let k = key("delay");
    generation(
        &conn
            .call(acquire(&k, holder, LockMode::Exclusive, None))
            .await,
    )?;
    conn.call(Request::Release {
        key: k.clone(),
        session: holder,
    })
    .await
    .map_err(|e| format!("release: {e}"))?;
    generation(
        &conn
            .call(acquire(&k, next, LockMode::Exclusive, None))
            .await,
    )
    .map_err(|e| format!("after a release there is no lock-delay: {e}"))?;
    conn.call(Request::Release {
        key: k.clone(),
        session: next,
    })
    .await
    .map_err(|e| format!("release: {e}"))?;
    generation(
        &conn
            .call(acquire(&k, holder, LockMode::Exclusive, None))
            .await,
    )?;
    conn.call(Request::DestroySession {
        session: holder.id,
        authority: Authority::Session(holder),
    })
    .await
    .map_err(|e| format!("destroy: {e}"))?;
    // Before asking: the master measures the remainder after this.
    let asked = Instant::now();
    let refused = conn
        .call(acquire(&k, next, LockMode::Exclusive, None))
        .await;
    let remaining = match code(&refused) {
        Some(ErrorCode::LockDelayed { remaining_ms }) => {
            ensure!(
                remaining_ms > 0 && remaining_ms <= delay,
                "remaining {remaining_ms} of {delay} ms"
            );
            Duration::from_millis(remaining_ms)
        }
        _ => {
            return Err(format!(
                "after destroy: expected LockDelayed, got {refused:?}"
            ))
        }
    };
    generation(
        &conn
            .call(acquire(&k, next, LockMode::Exclusive, Some(10_000)))
            .await,
    )
    .map_err(|e| format!("a waiting acquire waits lock-delay out: {e}"))?;
    // Less 2 ms for the master's millisecond clock.
    ensure!(
        asked.elapsed() + Duration::from_millis(2) >= remaining,
        "granted {:?} after asking, with {remaining:?} of lock-delay left",
        asked.elapsed()
    );
    Ok(())
}

async fn a_sequencer_is_valid_only_while_its_holding_lasts(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let a = session(&mut conn, &w).await?;
    let k = key("seq");
    let bytes = match conn.call(acquire(&k, a, LockMode::Exclusive, None)).await {
        Ok(Response::Acquired { sequencer, .. }) => sequencer,
        other => return Err(format!("acquire: {other:?}")),
    };
    let check = |s: Vec<u8>| Request::CheckSequencer { sequencer: s };
    let valid = conn.call(check(bytes.clone())).await;
    ensure!(
        matches!(valid, Ok(Response::SequencerChecked { valid: true })),
        "while held: {valid:?}"
    );
    conn.call(Request::Delete {
        key: k.clone(),
        cas: None,
        recursive: false,
        authority: Authority::Anonymous,
    })
    .await
    .map_err(|e| format!("delete: {e}"))?;
    let after = conn.call(check(bytes)).await;
    ensure!(
        matches!(after, Ok(Response::SequencerChecked { valid: false })),
        "after the node was deleted: {after:?}"
    );
    let garbage = conn.call(check(vec![1, 2, 3])).await;
    ensure!(
        code(&garbage) == Some(ErrorCode::InvalidArgument),
        "garbage: {garbage:?}"
    );
    Ok(())
}

// Events ----------------------------------------------------------------

async fn subscribe(
    conn: &mut RawConnection,
    session: SessionToken,
    key: &str,
    prefix: bool,
    mask: u32,
) -> Result<u64, String> {
    match conn
        .call(Request::Subscribe {
            session,
            key: key.into(),
            prefix,
            mask,
        })
        .await
    {
        Ok(Response::Subscribed { subscription }) => Ok(subscription),
        other => Err(format!("subscribe: {other:?}")),
    }
}

async fn a_queued_event_answers_the_held_keepalive(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let k = key("ev");
    subscribe(&mut conn, s, &k, false, event_mask::CONTENTS).await?;
    conn.request(keepalive(s, &w, 0, true)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (mut writer, _) = open(&ctx).await;
    let started = Instant::now();
    writer
        .call(put(&k, b"1", None, None))
        .await
        .map_err(|e| format!("put: {e}"))?;
    let (_, reply) = conn.reply().await;
    ensure!(
        started.elapsed() < SLACK,
        "the held KeepAlive answered after {:?}",
        started.elapsed()
    );
    match reply {
        Ok(Response::KeepAlive { events, .. }) => {
            ensure!(events.len() == 1 && events[0].seq == 1, "events {events:?}");
        }
        other => return Err(format!("{other:?}")),
    }
    Ok(())
}

async fn unacknowledged_events_are_sent_again(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let k = key("redeliver");
    subscribe(&mut conn, s, &k, false, event_mask::CONTENTS).await?;
    conn.call(put(&k, b"1", None, None))
        .await
        .map_err(|e| format!("put: {e}"))?;
    conn.call(put(&k, b"2", None, None))
        .await
        .map_err(|e| format!("put: {e}"))?;
    let seqs = |r: Result<Response, leasehold_protocol::Error>| match r {
        Ok(Response::KeepAlive { events, .. }) => {
            Ok(events.iter().map(|e| e.seq).collect::<Vec<_>>())
        }
        other => Err(format!("{other:?}")),
    };
    let first = seqs(conn.call(keepalive(s, &w, 0, false)).await)?;
    ensure!(first == [1, 2], "first delivery {first:?}");
    let again = seqs(conn.call(keepalive(s, &w, 0, false)).await)?;
    ensure!(again == [1, 2], "unacknowledged, sent again: {again:?}");
    let rest = seqs(conn.call(keepalive(s, &w, 1, false)).await)?;
    ensure!(rest == [2], "after acknowledging 1: {rest:?}");
    let none = seqs(conn.call(keepalive(s, &w, 2, false)).await)?;
    ensure!(none.is_empty(), "after acknowledging 2: {none:?}");
    Ok(())
}

async fn subscriptions_and_lock_conflicts(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let bad = conn
        .call(Request::Subscribe {
            session: s,
            key: "x".into(),
            prefix: false,
            mask: 0,
        })
        .await;
    ensure!(
        code(&bad) == Some(ErrorCode::InvalidArgument),
        "mask 0: {bad:?}"
    );
    let k = key("conflict");
    generation(&conn.call(acquire(&k, s, LockMode::Exclusive, None)).await)?;
    let (mut other, _) = open(&ctx).await;
    let waiter = session(&mut other, &w).await?;
    other
        .request(acquire(&k, waiter, LockMode::Exclusive, Some(5_000)))
        .await;
    // The waiter's acquire came on another connection: ask until the
    // master has applied it.
    let conflict = EventKind::LockConflict {
        key: k.clone(),
        waiter: waiter.id,
    };
    let deadline = Instant::now() + SLACK * 2;
    loop {
        match conn.call(keepalive(s, &w, 0, false)).await {
            Ok(Response::KeepAlive { events, .. }) => {
                if events.iter().any(|e| e.kind == conflict) {
                    return Ok(());
                }
                ensure!(
                    Instant::now() < deadline,
                    "no LockConflict for the holder: {events:?}"
                );
            }
            other => return Err(format!("{other:?}")),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn a_node_event_carries_its_index_and_small_contents(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let k = key("payload");
    let subscribe = Request::Subscribe {
        session: s,
        key: k.clone(),
        prefix: false,
        mask: event_mask::CONTENTS,
    };
    conn.call(subscribe)
        .await
        .map_err(|e| format!("Subscribe: {e:?}"))?;
    let small = b"10.0.0.5:5432".to_vec();
    let large = vec![b'x'; leasehold_protocol::EVENT_CONTENTS_MAX + 1];
    let first = written(&mut conn, put(&k, &small, None, None), "Put").await?;
    let second = written(&mut conn, put(&k, &large, None, None), "Put").await?;
    let expected = [
        (Change::Created, first, Some(small)),
        (Change::Modified, second, None),
    ];
    let mut heard = Vec::new();
    let deadline = Instant::now() + SLACK;
    let mut acked = 0;
    while heard.len() < expected.len() {
        ensure!(
            Instant::now() < deadline,
            "heard only {heard:?} of two writes"
        );
        match conn.call(keepalive(s, &w, acked, false)).await {
            Ok(Response::KeepAlive { events, .. }) => {
                for e in events {
                    acked = acked.max(e.seq);
                    if let EventKind::Node {
                        change,
                        index,
                        contents,
                        ..
                    } = e.kind
                    {
                        heard.push((change, index, contents));
                    }
                }
            }
            other => return Err(format!("{other:?}")),
        }
    }
    ensure!(
        heard == expected,
        "events {:?}, expected {:?}",
        brief(&heard),
        brief(&expected)
    );
    Ok(())
}

/// Events with their contents as lengths, for messages.
fn brief(events: &[(Change, u64, Option<Vec<u8>>)]) -> Vec<(Change, u64, Option<usize>)> {
    events
        .iter()
        .map(|(c, i, v)| (c.clone(), *i, v.as_ref().map(Vec::len)))
        .collect()
}

async fn a_repeated_subscription_is_the_same_one(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let k = key("repeated");
    let mut ids = Vec::new();
    for mask in [
        event_mask::CONTENTS,
        event_mask::CONTENTS,
        event_mask::CHILD_ADDED,
    ] {
        let subscribe = Request::Subscribe {
            session: s,
            key: k.clone(),
            prefix: false,
            mask,
        };
        match conn.call(subscribe).await {
            Ok(Response::Subscribed { subscription }) => ids.push(subscription),
            other => return Err(format!("Subscribe: {other:?}")),
        }
    }
    ensure!(
        ids.windows(2).all(|w| w[0] == w[1]),
        "the same key and kind got several subscriptions: {ids:?}"
    );
    let child = format!("{k}/c");
    let put = Request::Put(Put {
        key: child.clone(),
        contents: Vec::new(),
        flags: 0,
        cas: None,
        ephemeral: None,
    });
    conn.call(put).await.map_err(|e| format!("Put: {e:?}"))?;
    match conn.call(keepalive(s, &w, 0, false)).await {
        Ok(Response::KeepAlive { events, .. }) => ensure!(
            events.iter().any(|e| matches!(
                &e.kind,
                EventKind::Node { subscription, key, change: Change::ChildAdded { child: c }, .. }
                    if *subscription == ids[0] && *key == k && *c == child
            )),
            "the widened mask heard no ChildAdded: {events:?}"
        ),
        other => return Err(format!("{other:?}")),
    }
    Ok(())
}

// Health checks -----------------------------------------------------------

async fn set_check(
    conn: &mut RawConnection,
    name: &str,
    status: CheckStatus,
) -> Result<Vec<SessionId>, String> {
    match conn
        .call(Request::SetCheck {
            name: name.into(),
            status,
            note: String::new(),
        })
        .await
    {
        Ok(Response::CheckSet { invalidated, .. }) => Ok(invalidated),
        other => Err(format!("SetCheck: {other:?}")),
    }
}

async fn a_critical_check_ends_its_sessions(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let name = key("check").replace('/', ":");
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
    ensure!(
        code(&info) == Some(ErrorCode::SessionExpired),
        "bound session: {info:?}"
    );
    let info = conn.call(Request::SessionInfo { session: free.id }).await;
    ensure!(info.is_ok(), "unbound session: {info:?}");
    match conn
        .call(Request::ListChecks {
            after: None,
            limit: 0,
        })
        .await
    {
        Ok(Response::Checks { checks, .. }) => ensure!(
            checks
                .iter()
                .any(|c| c.name == name && c.status == CheckStatus::Critical),
            "the check is not listed as critical"
        ),
        other => return Err(format!("ListChecks: {other:?}")),
    }
    Ok(())
}

async fn deleting_a_check_ends_its_sessions(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let name = key("delcheck").replace('/', ":");
    set_check(&mut conn, &name, CheckStatus::Passing).await?;
    let bound = create(
        &mut conn,
        30_000.min(w.limits.max_lease_ms),
        None,
        Behavior::Release,
        vec![name.clone()],
    )
    .await?;
    match conn.call(Request::DeleteCheck { name: name.clone() }).await {
        Ok(Response::CheckDeleted { invalidated, .. }) => {
            ensure!(invalidated == [bound.id], "ended {invalidated:?}")
        }
        other => return Err(format!("DeleteCheck: {other:?}")),
    }
    Ok(())
}

// Limits ------------------------------------------------------------------

async fn a_request_beyond_the_in_flight_limit_is_refused(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let limit = w.limits.max_in_flight as usize;
    ensure!(
        limit <= 100_000,
        "an in-flight limit of {limit} is too large to test"
    );
    let k = key("inflight");
    let index = written(&mut conn, put(&k, b"x", None, None), "put").await?;
    // Watches that wait: each holds a slot until the key changes.
    for _ in 0..limit {
        conn.request(Request::Watch {
            key: k.clone(),
            after_index: index,
            timeout_ms: 60_000,
        })
        .await;
    }
    let over = conn
        .request(Request::List {
            prefix: k.clone(),
            recursive: false,
            after: None,
            limit: 0,
        })
        .await;
    let (id, reply) = conn.reply().await;
    ensure!(
        id == over,
        "reply to request {id} while {limit} watches wait"
    );
    ensure!(
        code(&reply) == Some(ErrorCode::LimitReached),
        "request {} of {limit}: {reply:?}",
        limit + 1
    );
    // The connection stays open.
    let (mut writer, _) = open(&ctx).await;
    writer
        .call(put(&k, b"y", None, None))
        .await
        .map_err(|e| format!("put: {e}"))?;
    for _ in 0..limit {
        let (_, reply) = conn.reply().await;
        ensure!(
            matches!(reply, Ok(Response::Node { .. })),
            "a watch: {reply:?}"
        );
    }
    Ok(())
}

async fn a_listing_larger_than_a_frame_comes_in_pages(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let root = key("wide");
    let segment = "k".repeat(400);
    let needed = w.limits.max_frame as usize / 400 + 10;
    ensure!(
        needed <= 20_000,
        "a maximum frame of {} is too large to test",
        w.limits.max_frame
    );
    for n in 0..needed {
        conn.call(put(&format!("{root}/{segment}{n}"), b"", None, None))
            .await
            .map_err(|e| format!("put {n}: {e}"))?;
    }
    let mut listed: Vec<String> = Vec::new();
    let mut pages = 0;
    loop {
        let reply = conn
            .call(Request::List {
                prefix: root.clone(),
                recursive: false,
                after: listed.last().cloned(),
                limit: 0,
            })
            .await;
        pages += 1;
        match reply {
            Ok(Response::Keys { keys, more, .. }) => {
                ensure!(!keys.is_empty(), "an empty page before the end");
                listed.extend(keys);
                if !more {
                    break;
                }
            }
            other => return Err(format!("page {pages}: {other:?}")),
        }
    }
    ensure!(pages > 1, "{needed} keys over a frame came in one page");
    ensure!(
        listed.len() == needed && listed.windows(2).all(|w| w[0] < w[1]),
        "listed {} of {needed}, in order once each?",
        listed.len()
    );
    // A recursive delete of them all still answers within a frame (NS-7).
    match conn
        .call(Request::Delete {
            key: root,
            cas: None,
            recursive: true,
            authority: Authority::Anonymous,
        })
        .await
    {
        Ok(Response::Deleted { deleted_total, .. }) => {
            ensure!(
                deleted_total as usize == needed,
                "deleted {deleted_total} of {needed}"
            )
        }
        other => return Err(format!("recursive delete of {needed} keys: {other:?}")),
    }
    Ok(())
}

async fn an_overflowing_event_queue_becomes_one_events_lost(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let k = key("flood");
    subscribe(&mut conn, s, &k, true, event_mask::CONTENTS).await?;
    for n in 0..1_100 {
        conn.call(put(&format!("{k}/{n}"), b"", None, None))
            .await
            .map_err(|e| format!("put {n}: {e}"))?;
    }
    match conn.call(keepalive(s, &w, 0, false)).await {
        Ok(Response::KeepAlive { events, .. }) => {
            let lost = events.iter().position(|e| e.kind == EventKind::EventsLost);
            ensure!(
                lost.is_some(),
                "no EventsLost among {} events",
                events.len()
            );
            ensure!(
                events.len() < 1_100,
                "{} events delivered: the queue is unbounded",
                events.len()
            );
            ensure!(
                events.windows(2).all(|p| p[1].seq == p[0].seq + 1),
                "sequence numbers not consecutive"
            );
        }
        other => return Err(format!("{other:?}")),
    }
    Ok(())
}

async fn a_grant_nobody_can_hear_is_released(ctx: Ctx) -> Check {
    let (mut holder, w) = open(&ctx).await;
    let h = session(&mut holder, &w).await?;
    let k = key("unheard");
    generation(&holder.call(acquire(&k, h, LockMode::Exclusive, None)).await)?;
    let (mut gone, _) = open(&ctx).await;
    let g = session(&mut gone, &w).await?;
    gone.request(acquire(&k, g, LockMode::Exclusive, Some(30_000)))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(gone);
    tokio::time::sleep(Duration::from_millis(200)).await;
    holder
        .call(Request::Release {
            key: k.clone(),
            session: h,
        })
        .await
        .map_err(|e| format!("release: {e}"))?;
    let third = session(&mut holder, &w).await?;
    let mut last = None;
    // The departed waiter may be granted first and released at once.
    for _ in 0..20 {
        let reply = holder
            .call(acquire(&k, third, LockMode::Exclusive, None))
            .await;
        if generation(&reply).is_ok() {
            return Ok(());
        }
        last = Some(reply);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!(
        "the lock stayed with a waiter that had left: {last:?}"
    ))
}

async fn a_connection_without_hello_is_closed(ctx: Ctx) -> Check {
    // The server's handshake timeout (10 s by default) closes it: wait up
    // to 20 s.
    let conn = RawConnection::connect(ctx.addr)
        .await
        .with_patience(Duration::from_secs(20));
    let started = Instant::now();
    let close = conn.closed_with().await;
    ensure!(
        close
            .as_ref()
            .is_some_and(|e| e.code == ErrorCode::Malformed),
        "expected Close(Malformed) after {:?}, got {close:?}",
        started.elapsed()
    );
    Ok(())
}

// Failover (a restart of the server, driven by the harness) -----------------

/// Restarts the server and returns a connection to the new one.
async fn restart(ctx: &Ctx) -> Result<(RawConnection, Welcome), String> {
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

async fn a_restart_keeps_writes_under_a_greater_epoch(ctx: Ctx) -> Check {
    if ctx.restart.is_none() {
        return Err(format!("{SKIPPED}needs --restart-cmd"));
    }
    let (mut conn, before) = open(&ctx).await;
    let k = key("durable");
    let index = written(&mut conn, put(&k, b"kept", None, None), "put").await?;
    let s = session(&mut conn, &before).await?;
    drop(conn);
    let (mut conn, after) = restart(&ctx).await?;
    ensure!(
        after.epoch > before.epoch,
        "epoch {} after {}",
        after.epoch,
        before.epoch
    );
    match conn
        .call(Request::Get {
            key: k.clone(),
            stat_only: false,
        })
        .await
    {
        Ok(Response::Node { node: Some(n), .. }) => {
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
        }
        other => return Err(format!("an acknowledged write is gone: {other:?}")),
    }
    let stale = conn.call(keepalive(s, &before, 0, false)).await;
    ensure!(
        code(&stale)
            == Some(ErrorCode::WrongEpoch {
                current: after.epoch
            }),
        "old epoch: {stale:?}"
    );
    // Indexes go on rising after the restart.
    match conn.call(put(&k, b"later", None, None)).await {
        Ok(Response::Written { index: later }) => {
            ensure!(later > index, "index {later} after {index}")
        }
        other => return Err(format!("put: {other:?}")),
    }
    Ok(())
}

async fn a_recovered_session_acknowledges_the_failover_first(ctx: Ctx) -> Check {
    if ctx.restart.is_none() {
        return Err(format!("{SKIPPED}needs --restart-cmd"));
    }
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let k = key("kept-lock");
    let sequencer = match conn.call(acquire(&k, s, LockMode::Exclusive, None)).await {
        Ok(Response::Acquired { sequencer, .. }) => sequencer,
        other => return Err(format!("acquire: {other:?}")),
    };
    drop(conn);
    let (mut conn, w) = restart(&ctx).await?;
    let gated = conn.call(acquire(&k, s, LockMode::Exclusive, None)).await;
    ensure!(
        matches!(code(&gated), Some(ErrorCode::FailoverInProgress { retry_after_ms }) if retry_after_ms > 0),
        "before the acknowledgement: {gated:?}"
    );
    let valid = conn
        .call(Request::CheckSequencer {
            sequencer: sequencer.clone(),
        })
        .await;
    ensure!(
        matches!(valid, Ok(Response::SequencerChecked { valid: true })),
        "the holding survives: {valid:?}"
    );
    let seq = match conn.call(keepalive(s, &w, 0, false)).await {
        Ok(Response::KeepAlive { events, lease, .. }) => {
            ensure!(
                matches!(events.first().map(|e| &e.kind), Some(EventKind::Failover { epoch }) if *epoch == w.epoch),
                "first event {events:?}"
            );
            ensure!(
                lease.remaining_ms + 10 >= 30_000.min(w.limits.max_lease_ms),
                "lease {lease:?} after the restart"
            );
            events[0].seq
        }
        other => return Err(format!("KeepAlive: {other:?}")),
    };
    conn.call(keepalive(s, &w, seq, false))
        .await
        .map_err(|e| format!("acknowledging: {e}"))?;
    match conn.call(acquire(&k, s, LockMode::Exclusive, None)).await {
        Ok(Response::Acquired {
            sequencer: again, ..
        }) => {
            ensure!(again == sequencer, "the holding changed across the restart");
        }
        other => return Err(format!("after the acknowledgement: {other:?}")),
    }
    Ok(())
}

async fn lock_delay_survives_a_restart_and_dead_waiters_do_not(ctx: Ctx) -> Check {
    if ctx.restart.is_none() {
        return Err(format!("{SKIPPED}needs --restart-cmd"));
    }
    let (mut conn, w) = open(&ctx).await;
    let delay = 5_000.min(w.limits.max_lock_delay_ms);
    let lease = 30_000.min(w.limits.max_lease_ms);
    let doomed = create(&mut conn, lease, Some(delay), Behavior::Release, vec![]).await?;
    let holder = session(&mut conn, &w).await?;
    let delayed = key("delayed");
    let queued = key("queued");
    generation(
        &conn
            .call(acquire(&delayed, doomed, LockMode::Exclusive, None))
            .await,
    )?;
    conn.call(Request::DestroySession {
        session: doomed.id,
        authority: Authority::Session(doomed),
    })
    .await
    .map_err(|e| format!("destroy: {e}"))?;
    generation(
        &conn
            .call(acquire(&queued, holder, LockMode::Exclusive, None))
            .await,
    )?;
    let (mut waiting, _) = open(&ctx).await;
    let waiter = session(&mut waiting, &w).await?;
    waiting
        .request(acquire(&queued, waiter, LockMode::Exclusive, Some(30_000)))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(waiting);
    drop(conn);
    let (mut conn, w) = restart(&ctx).await?;
    let fresh = session(&mut conn, &w).await?;
    let refused = conn
        .call(acquire(&delayed, fresh, LockMode::Exclusive, None))
        .await;
    ensure!(
        matches!(code(&refused), Some(ErrorCode::LockDelayed { remaining_ms }) if remaining_ms > 0 && remaining_ms <= delay),
        "lock-delay after the restart: {refused:?}"
    );
    // The holder of `queued` acknowledges the fail-over and releases; the
    // waiter from before the restart is gone, so the lock is free.
    let seq = match conn.call(keepalive(holder, &w, 0, false)).await {
        Ok(Response::KeepAlive { events, .. }) => events.last().map_or(0, |e| e.seq),
        other => return Err(format!("KeepAlive: {other:?}")),
    };
    conn.call(keepalive(holder, &w, seq, false))
        .await
        .map_err(|e| format!("ack: {e}"))?;
    conn.call(Request::Release {
        key: queued.clone(),
        session: holder,
    })
    .await
    .map_err(|e| format!("release: {e}"))?;
    generation(
        &conn
            .call(acquire(&queued, fresh, LockMode::Exclusive, None))
            .await,
    )
    .map_err(|e| format!("the lock went to a waiter from before the restart: {e}"))?;
    Ok(())
}

async fn a_peer_that_stops_reading_is_closed_and_blocks_nobody(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let k = key("flood");
    let size = (200 << 10).min(w.limits.max_frame as usize / 2);
    conn.call(put(&k, &vec![7; size], None, None))
        .await
        .map_err(|e| format!("put: {e}"))?;
    // Far more reply bytes than any socket buffers hold; none is read.
    let requests = (32 << 20) / size;
    for _ in 0..requests {
        conn.request(Request::Get {
            key: k.clone(),
            stat_only: false,
        })
        .await;
    }
    // The server went on reading (our writes got through) and serves
    // others: well before the write timeout, though after the replies
    // queued ahead of this one.
    let (mut bystander, _) = open(&ctx).await;
    let started = Instant::now();
    let other = bystander
        .call(Request::Get {
            key: k.clone(),
            stat_only: true,
        })
        .await;
    let waited = started.elapsed();
    ensure!(
        other.is_ok() && waited < Duration::from_secs(5),
        "another connection waited {waited:?}: {other:?}"
    );
    // The write timeout (10 s by default) closes the stuck connection.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let mut conn = conn.with_patience(Duration::from_secs(10));
    let mut replies = 0;
    while let Some(frame) = conn.recv().await {
        if matches!(frame, leasehold_protocol::ServerFrame::Reply { .. }) {
            replies += 1;
        }
    }
    ensure!(
        replies < requests,
        "all {requests} replies were written: the connection was never closed"
    );
    Ok(())
}

async fn unknown_kinds_and_truncated_frames_are_malformed(ctx: Ctx) -> Check {
    // A frame whose message kind (the enum's variant index) is unknown.
    let (mut conn, _) = open(&ctx).await;
    conn.send_bytes(&[0, 0, 0, 1, 100]).await;
    let close = conn.closed_with().await;
    ensure!(
        close
            .as_ref()
            .is_some_and(|e| e.code == ErrorCode::Malformed),
        "unknown kind: expected Close(Malformed), got {close:?}"
    );
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
