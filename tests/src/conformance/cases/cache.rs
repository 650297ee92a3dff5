//! SPEC.md, "Cache": reads for a session's cache, the invalidation a
//! change to a cached key waits for, keys uncachable meanwhile, the bound on
//! a silent cacher, a session whose end waits, the cap, and a restart.
//!
//! Every session that caches is destroyed (or left with a short lease)
//! before its case ends: a live cacher would hold the writes of cases run
//! after a restart (`CACHE-7`).

use std::time::{Duration, Instant};

use leasehold_protocol::{
    Authority, Behavior, ErrorCode, Event, EventKind, GetCached, LockMode, Request, Response,
    SessionSecret, SessionToken,
};

use crate::conformance::common::{
    acquire, case, create, ensure, expect_error, expect_reply, keepalive, key, needs_restart, open,
    put, restart, session, short_lease, written, SLACK,
};
use crate::conformance::{Case, Check, Ctx};
use crate::raw::RawConnection;

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            &["CACHE-2", "CACHE-3", "CACHE-4"],
            a_write_to_a_cached_key_waits_for_the_cachers_acknowledgement
        ),
        case!(&["CACHE-2"], a_cached_read_needs_its_sessions_secret),
        case!(
            &["CACHE-3"],
            a_silent_cacher_holds_a_write_for_its_lease_and_no_longer
        ),
        case!(
            &["CACHE-5"],
            a_session_whose_lease_ran_out_is_ended_while_its_end_waits
        ),
        case!(&["CACHE-8"], a_session_caches_at_most_its_cap_of_keys),
        case!(
            &["CACHE-7"],
            after_a_restart_writes_wait_for_the_cachers_to_flush
        ),
    ]
}

fn get_cached(key: &str, session: SessionToken, dropped: Vec<String>) -> Request {
    Request::GetCached(GetCached {
        key: key.into(),
        session,
        dropped,
    })
}

/// Whether the master called `session`'s read of `key` cacheable, and
/// the contents it read.
async fn cached_read(
    conn: &mut RawConnection,
    key: &str,
    session: SessionToken,
) -> Result<(bool, Option<Vec<u8>>), String> {
    let reply = conn.call(get_cached(key, session, Vec::new())).await;
    expect_reply!(
        reply,
        Response::Cached { cacheable, node, .. } => (cacheable, node.and_then(|n| n.contents))
    )
    .map_err(|e| format!("GetCached {key}: {e}"))
}

/// The contents a plain `Get` reads at `key`.
async fn contents(conn: &mut RawConnection, key: &str) -> Result<Option<Vec<u8>>, String> {
    let reply = conn
        .call(Request::Get {
            key: key.into(),
            stat_only: false,
        })
        .await;
    expect_reply!(reply, Response::Node { node, .. } => node.and_then(|n| n.contents))
        .map_err(|e| format!("Get {key}: {e}"))
}

/// The sequence number of the invalidation of `key` among `events`.
fn invalidation_of(events: &[Event], key: &str) -> Option<u64> {
    events.iter().find_map(|e| match &e.kind {
        EventKind::Invalidate { keys } if keys.iter().any(|k| k == key) => Some(e.seq),
        _ => None,
    })
}

/// The reply to the request in flight on `conn`, if one comes within
/// `wait`.
async fn reply_within(
    conn: &mut RawConnection,
    wait: Duration,
) -> Option<Result<Response, leasehold_protocol::Error>> {
    tokio::time::timeout(wait, conn.reply())
        .await
        .ok()
        .map(|(_, r)| r)
}

/// Sends the acknowledging KeepAlive `ack` on `conn`; the write in flight
/// on `writer` must then be answered within the slack.
async fn acknowledged_then_written(
    conn: &mut RawConnection,
    ack: Request,
    writer: &mut RawConnection,
) -> Check {
    conn.call(ack)
        .await
        .map_err(|e| format!("acknowledging KeepAlive: {e}"))?;
    let answered = reply_within(writer, SLACK).await;
    expect_reply!(
        answered.ok_or("the write was not answered after the acknowledgement")?,
        Response::Written { .. }
    )
}

async fn destroy(conn: &mut RawConnection, session: SessionToken) {
    let _ = conn
        .call(Request::DestroySession {
            session: session.id,
            authority: Authority::Session(session),
        })
        .await;
}

async fn a_write_to_a_cached_key_waits_for_the_cachers_acknowledgement(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let cacher = session(&mut conn, &w).await?;
    let other = session(&mut conn, &w).await?;
    let k = key("cached");
    written(&mut conn, put(&k, b"one", None, None), "first put").await?;
    let (cacheable, read) = cached_read(&mut conn, &k, cacher).await?;
    ensure!(
        cacheable && read.as_deref() == Some(b"one"),
        "first read {read:?}, cacheable {cacheable}"
    );

    // The cacher's held KeepAlive, then a write from elsewhere.
    let (mut kept, _) = open(&ctx).await;
    kept.request(keepalive(cacher, &w, 0, true)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (mut writer, _) = open(&ctx).await;
    let started = Instant::now();
    writer.request(put(&k, b"two", None, None)).await;
    let (_, told) = kept.reply().await;
    ensure!(
        started.elapsed() < SLACK,
        "the held KeepAlive answered {:?} after the write",
        started.elapsed()
    );
    let events = expect_reply!(told, Response::KeepAlive { events, .. } => events)?;
    let seq =
        invalidation_of(&events, &k).ok_or(format!("no invalidation of {k} in {events:?}"))?;

    // CACHE-4: the write is not applied, and the key is uncachable.
    ensure!(
        reply_within(&mut writer, Duration::from_millis(300))
            .await
            .is_none(),
        "the write was answered before the cacher acknowledged"
    );
    let now = contents(&mut conn, &k).await?;
    ensure!(
        now.as_deref() == Some(b"one"),
        "read {now:?} while the write is held"
    );
    let (cacheable, _) = cached_read(&mut conn, &k, other).await?;
    ensure!(
        !cacheable,
        "a key with an invalidation outstanding was granted"
    );

    // The acknowledgement lets the write go.
    acknowledged_then_written(&mut kept, keepalive(cacher, &w, seq, false), &mut writer).await?;
    let now = contents(&mut conn, &k).await?;
    ensure!(
        now.as_deref() == Some(b"two"),
        "read {now:?} after the write"
    );
    let (cacheable, _) = cached_read(&mut conn, &k, other).await?;
    ensure!(cacheable, "not cachable again once the write was done");
    destroy(&mut conn, cacher).await;
    destroy(&mut conn, other).await;
    Ok(())
}

async fn a_cached_read_needs_its_sessions_secret(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let forged = SessionToken {
        id: s.id,
        secret: SessionSecret::from_bytes([7; 16]),
    };
    let refused = conn
        .call(get_cached(&key("forged"), forged, Vec::new()))
        .await;
    expect_error!(refused, ErrorCode::PermissionDenied)?;
    let too_many = (0..4097).map(|i| format!("k{i}")).collect();
    let refused = conn.call(get_cached(&key("many"), s, too_many)).await;
    expect_error!(refused, ErrorCode::InvalidArgument)?;
    destroy(&mut conn, s).await;
    let (cacheable, _) = cached_read(&mut conn, &key("ended"), s).await?;
    ensure!(!cacheable, "an ended session was granted a cacheable read");
    Ok(())
}

async fn a_silent_cacher_holds_a_write_for_its_lease_and_no_longer(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let lease = Duration::from_millis(short_lease(&w));
    let before = Instant::now();
    let silent = create(
        &mut conn,
        lease.as_millis() as u64,
        Some(0),
        Behavior::Release,
        vec![],
    )
    .await?;
    let k = key("silent");
    let (cacheable, _) = cached_read(&mut conn, &k, silent).await?;
    ensure!(cacheable, "the first read was not cacheable");
    let (mut writer, _) = open(&ctx).await;
    writer.request(put(&k, b"x", None, None)).await;
    let answered = reply_within(&mut writer, lease + SLACK).await;
    let took = before.elapsed();
    expect_reply!(
        answered.ok_or(format!("no answer within the cacher's lease and {SLACK:?}"))?,
        Response::Written { .. }
    )?;
    // The master's lease ran from no earlier than the create was sent, less
    // its rounding (KA-4).
    ensure!(
        took + Duration::from_millis(5) >= lease,
        "the write went after {took:?}, inside the silent cacher's lease of {lease:?}"
    );
    Ok(())
}

async fn a_session_whose_lease_ran_out_is_ended_while_its_end_waits(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let lease = short_lease(&w);
    let owner = create(&mut conn, lease, Some(0), Behavior::Release, vec![]).await?;
    let cacher = session(&mut conn, &w).await?;
    let e = key("ending");
    written(
        &mut conn,
        put(&e, b"alive", None, Some(owner)),
        "ephemeral put",
    )
    .await?;
    let sequencer = expect_reply!(
        conn.call(acquire(&e, owner, LockMode::Exclusive, None)).await,
        Response::Acquired { sequencer, .. } => sequencer
    )?;
    let (cacheable, _) = cached_read(&mut conn, &e, cacher).await?;
    ensure!(cacheable, "the cacher's read was not cacheable");

    tokio::time::sleep(Duration::from_millis(lease) + Duration::from_millis(200)).await;
    let refused = conn.call(keepalive(owner, &w, 0, false)).await;
    expect_error!(refused, ErrorCode::SessionExpired)
        .map_err(|e| format!("the expired owner's KeepAlive: {e}"))?;
    let checked = conn
        .call(Request::CheckSequencer {
            sequencer: sequencer.clone(),
        })
        .await;
    expect_reply!(checked, Response::SequencerChecked { valid: false })
        .map_err(|e| format!("the expired holder's sequencer: {e}"))?;
    let now = contents(&mut conn, &e).await?;
    ensure!(
        now.is_some(),
        "the ephemeral node went before the cacher was told"
    );

    let told = conn.call(keepalive(cacher, &w, 0, false)).await;
    let events = expect_reply!(told, Response::KeepAlive { events, .. } => events)?;
    let seq =
        invalidation_of(&events, &e).ok_or(format!("no invalidation of {e} in {events:?}"))?;
    conn.call(keepalive(cacher, &w, seq, false))
        .await
        .map_err(|e| format!("acknowledging KeepAlive: {e}"))?;
    let deadline = Instant::now() + SLACK;
    while contents(&mut conn, &e).await?.is_some() {
        ensure!(
            Instant::now() < deadline,
            "the ephemeral node outlived the acknowledgement"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    destroy(&mut conn, cacher).await;
    Ok(())
}

async fn a_session_caches_at_most_its_cap_of_keys(ctx: Ctx) -> Check {
    const CAP: usize = 4096;
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let prefix = key("cap");
    // Pipelined, a window at a time: the cap, not the round trips, is
    // what this case is about.
    let mut sent = 0;
    let mut granted = 0;
    while sent < CAP {
        let window = (CAP - sent).min(256);
        for i in sent..sent + window {
            conn.request(get_cached(&format!("{prefix}/{i}"), s, Vec::new()))
                .await;
        }
        for _ in 0..window {
            let (_, reply) = conn.reply().await;
            if expect_reply!(reply, Response::Cached { cacheable, .. } => cacheable)? {
                granted += 1;
            }
        }
        sent += window;
    }
    ensure!(
        granted == CAP,
        "{granted} of {CAP} reads granted below the cap"
    );
    let (cacheable, _) = cached_read(&mut conn, &format!("{prefix}/over"), s).await?;
    ensure!(!cacheable, "a read past the cap was granted");
    let freed = conn
        .call(get_cached(
            &format!("{prefix}/over"),
            s,
            vec![format!("{prefix}/0")],
        ))
        .await;
    expect_reply!(
        freed,
        Response::Cached {
            cacheable: true,
            ..
        }
    )
    .map_err(|e| format!("a read that drops a key: {e}"))?;
    destroy(&mut conn, s).await;
    Ok(())
}

async fn after_a_restart_writes_wait_for_the_cachers_to_flush(ctx: Ctx) -> Check {
    needs_restart(&ctx)?;
    let (mut conn, w) = open(&ctx).await;
    let cacher = create(
        &mut conn,
        10_000.min(w.limits.max_lease_ms),
        Some(0),
        Behavior::Release,
        vec![],
    )
    .await?;
    let k = key("restart");
    let (cacheable, _) = cached_read(&mut conn, &k, cacher).await?;
    ensure!(cacheable, "the read before the restart was not cacheable");
    drop(conn);
    let (mut conn, w) = restart(&ctx).await?;
    let (mut writer, _) = open(&ctx).await;
    writer.request(put(&k, b"after", None, None)).await;
    ensure!(
        reply_within(&mut writer, Duration::from_millis(300))
            .await
            .is_none(),
        "a write went before the recovered cacher acknowledged the fail-over"
    );
    let (cacheable, _) = cached_read(&mut conn, &k, cacher).await?;
    ensure!(!cacheable, "granted before acknowledging the fail-over");
    let renewed = conn.call(keepalive(cacher, &w, 0, false)).await;
    let events = expect_reply!(renewed, Response::KeepAlive { events, .. } => events)?;
    let failover = events
        .iter()
        .find(|e| matches!(e.kind, EventKind::Failover { .. }))
        .map(|e| e.seq)
        .ok_or(format!("no fail-over event in {events:?}"))?;
    acknowledged_then_written(
        &mut conn,
        keepalive(cacher, &w, failover, false),
        &mut writer,
    )
    .await?;
    destroy(&mut conn, cacher).await;
    Ok(())
}
