//! SPEC.md, "Epochs and failover": the epoch a master runs in, and what a
//! restart (which the harness drives) keeps and changes for sessions and
//! locks.

use std::time::Duration;

use leasehold_protocol::{Authority, Behavior, ErrorCode, EventKind, LockMode, Request, Response};

use crate::conformance::common::{
    acquire, case, create, ensure, expect_error, expect_reply, generation, keepalive, key,
    needs_restart, open, release, restart, session,
};
use crate::conformance::{Case, Check, Ctx};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(&["EP-1"], welcome_announces_an_epoch),
        case!(
            &["FO-1"],
            a_restart_takes_a_greater_epoch_and_refuses_the_old_one
        ),
        case!(&["FO-2"], a_recovered_session_gets_a_full_lease),
        case!(
            &["FO-3", "FO-4", "LOCK-9"],
            lock_delay_survives_a_restart_and_a_waiter_that_never_asks_again_passes_its_turn
        ),
        case!(
            &["FO-4", "LOCK-3"],
            a_waiter_from_before_a_restart_that_asks_again_keeps_its_place
        ),
        case!(
            &["FO-5", "ERR-14"],
            a_recovered_session_acknowledges_the_failover_first
        ),
        case!(
            &["FO-5", "EV-1", "FO-6"],
            a_recovered_sessions_events_are_numbered_after_its_failover_event
        ),
    ]
}

async fn welcome_announces_an_epoch(ctx: Ctx) -> Check {
    let (_, w) = open(&ctx).await;
    ensure!(w.epoch >= 1, "epoch {} is below 1", w.epoch);
    Ok(())
}

async fn a_restart_takes_a_greater_epoch_and_refuses_the_old_one(ctx: Ctx) -> Check {
    needs_restart(&ctx)?;
    let (mut conn, before) = open(&ctx).await;
    let s = session(&mut conn, &before).await?;
    drop(conn);
    let (mut conn, after) = restart(&ctx).await?;
    ensure!(
        after.epoch > before.epoch,
        "epoch {} after {}",
        after.epoch,
        before.epoch
    );
    let stale = conn.call(keepalive(s, &before, 0, false)).await;
    expect_error!(stale, ErrorCode::WrongEpoch { current } if current == after.epoch)
        .map_err(|e| format!("old epoch: {e}"))
}

async fn a_recovered_session_gets_a_full_lease(ctx: Ctx) -> Check {
    needs_restart(&ctx)?;
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    drop(conn);
    let (mut conn, w) = restart(&ctx).await?;
    let kept = conn.call(keepalive(s, &w, 0, false)).await;
    let lease = expect_reply!(kept, Response::KeepAlive { lease, .. } => lease)
        .map_err(|e| format!("KeepAlive: {e}"))?;
    ensure!(
        lease.remaining_ms + 10 >= 30_000.min(w.limits.max_lease_ms),
        "lease {lease:?} after the restart"
    );
    Ok(())
}

async fn lock_delay_survives_a_restart_and_a_waiter_that_never_asks_again_passes_its_turn(
    ctx: Ctx,
) -> Check {
    needs_restart(&ctx)?;
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
    expect_error!(
        refused,
        ErrorCode::LockDelayed { remaining_ms } if remaining_ms > 0 && remaining_ms <= delay
    )
    .map_err(|e| format!("lock-delay after the restart: {e}"))?;
    // The holder of `queued` acknowledges the fail-over and releases; the
    // waiter from before the restart never asked again, so its grant has
    // nobody to hear it and is given back at once: the lock is free.
    let kept = conn.call(keepalive(holder, &w, 0, false)).await;
    let events = expect_reply!(kept, Response::KeepAlive { events, .. } => events)
        .map_err(|e| format!("KeepAlive: {e}"))?;
    let seq = events.last().map_or(0, |e| e.seq);
    conn.call(keepalive(holder, &w, seq, false))
        .await
        .map_err(|e| format!("ack: {e}"))?;
    conn.call(release(&queued, holder))
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

/// Acknowledges `session`'s fail-over event on `conn` (`FO-5`).
async fn acknowledge(
    conn: &mut crate::raw::RawConnection,
    w: &leasehold_protocol::Welcome,
    session: leasehold_protocol::SessionToken,
) -> Result<(), String> {
    let kept = conn.call(keepalive(session, w, 0, false)).await;
    let events = expect_reply!(kept, Response::KeepAlive { events, .. } => events)
        .map_err(|e| format!("KeepAlive: {e}"))?;
    let seq = events.last().map_or(0, |e| e.seq);
    conn.call(keepalive(session, w, seq, false))
        .await
        .map_err(|e| format!("ack: {e}"))?;
    Ok(())
}

async fn a_waiter_from_before_a_restart_that_asks_again_keeps_its_place(ctx: Ctx) -> Check {
    needs_restart(&ctx)?;
    let (mut conn, w) = open(&ctx).await;
    let holder = session(&mut conn, &w).await?;
    let waiter = session(&mut conn, &w).await?;
    let k = key("kept-place");
    generation(
        &conn
            .call(acquire(&k, holder, LockMode::Exclusive, None))
            .await,
    )?;
    let (mut before, _) = open(&ctx).await;
    before
        .request(acquire(&k, waiter, LockMode::Exclusive, Some(30_000)))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(before);
    drop(conn);
    let (mut conn, w) = restart(&ctx).await?;
    // A newcomer waits behind the recovered waiter...
    let (mut newcomer_conn, _) = open(&ctx).await;
    let newcomer = session(&mut newcomer_conn, &w).await?;
    newcomer_conn
        .request(acquire(&k, newcomer, LockMode::Exclusive, Some(30_000)))
        .await;
    // ...which asks again, once its fail-over is acknowledged, and takes
    // its place back.
    let (mut again, _) = open(&ctx).await;
    acknowledge(&mut again, &w, waiter).await?;
    let asked = again
        .request(acquire(&k, waiter, LockMode::Exclusive, Some(30_000)))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    acknowledge(&mut conn, &w, holder).await?;
    conn.call(release(&k, holder))
        .await
        .map_err(|e| format!("release: {e}"))?;
    let (id, granted) = again.reply().await;
    ensure!(id == asked, "a reply to request {id}");
    generation(&granted).map_err(|e| format!("the waiter from before the restart: {e}"))?;
    Ok(())
}

async fn a_recovered_session_acknowledges_the_failover_first(ctx: Ctx) -> Check {
    needs_restart(&ctx)?;
    let (mut conn, w) = open(&ctx).await;
    let s = session(&mut conn, &w).await?;
    let k = key("kept-lock");
    let acquired = conn.call(acquire(&k, s, LockMode::Exclusive, None)).await;
    let sequencer = expect_reply!(acquired, Response::Acquired { sequencer, .. } => sequencer)
        .map_err(|e| format!("acquire: {e}"))?;
    drop(conn);
    let (mut conn, w) = restart(&ctx).await?;
    let gated = conn.call(acquire(&k, s, LockMode::Exclusive, None)).await;
    expect_error!(
        gated,
        ErrorCode::FailoverInProgress { retry_after_ms } if retry_after_ms > 0
    )
    .map_err(|e| format!("before the acknowledgement: {e}"))?;
    let valid = conn
        .call(Request::CheckSequencer {
            sequencer: sequencer.clone(),
        })
        .await;
    expect_reply!(valid, Response::SequencerChecked { valid: true })
        .map_err(|e| format!("the holding survives: {e}"))?;
    let kept = conn.call(keepalive(s, &w, 0, false)).await;
    let events = expect_reply!(kept, Response::KeepAlive { events, .. } => events)
        .map_err(|e| format!("KeepAlive: {e}"))?;
    ensure!(
        matches!(events.first().map(|e| &e.kind), Some(EventKind::Failover { epoch }) if *epoch == w.epoch),
        "first event {events:?}"
    );
    let seq = events[0].seq;
    conn.call(keepalive(s, &w, seq, false))
        .await
        .map_err(|e| format!("acknowledging: {e}"))?;
    let again = conn.call(acquire(&k, s, LockMode::Exclusive, None)).await;
    let again = expect_reply!(again, Response::Acquired { sequencer, .. } => sequencer)
        .map_err(|e| format!("after the acknowledgement: {e}"))?;
    ensure!(again == sequencer, "the holding changed across the restart");
    Ok(())
}

/// Two sessions hold locks across a restart; a new session then waits for
/// each lock, so each holder hears of the conflict: the one that had not
/// acknowledged the fail-over event gets it first, as number 1, and the
/// conflict as 2; the one that had gets the conflict as 2.
async fn a_recovered_sessions_events_are_numbered_after_its_failover_event(ctx: Ctx) -> Check {
    needs_restart(&ctx)?;
    let (mut conn, w) = open(&ctx).await;
    let (early, late) = (session(&mut conn, &w).await?, session(&mut conn, &w).await?);
    let (k_early, k_late) = (key("numbered-acked"), key("numbered-unacked"));
    for (k, s) in [(&k_early, early), (&k_late, late)] {
        generation(&conn.call(acquire(k, s, LockMode::Exclusive, None)).await)?;
    }
    drop(conn);
    let (mut conn, w) = restart(&ctx).await?;
    acknowledge(&mut conn, &w, early).await?;
    let waiter = session(&mut conn, &w).await?;
    let (mut waiting, _) = open(&ctx).await;
    for k in [&k_early, &k_late] {
        waiting
            .request(acquire(k, waiter, LockMode::Exclusive, Some(30_000)))
            .await;
    }
    let numbered = |events: &[leasehold_protocol::Event]| {
        events
            .iter()
            .map(|e| (e.seq, matches!(e.kind, EventKind::Failover { .. })))
            .collect::<Vec<_>>()
    };
    // The waits reach the master in their own time: ask until the
    // conflict is heard, within the harness's patience.
    for (s, acked, want) in [
        (late, 0, vec![(1, true), (2, false)]),
        (early, 1, vec![(2, false)]),
    ] {
        let mut heard = Vec::new();
        for _ in 0..50 {
            let kept = conn.call(keepalive(s, &w, acked, false)).await;
            heard = expect_reply!(kept, Response::KeepAlive { events, .. } => events)
                .map_err(|e| format!("KeepAlive: {e}"))?;
            if heard
                .iter()
                .any(|e| matches!(e.kind, EventKind::LockConflict { .. }))
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        ensure!(
            numbered(&heard) == want,
            "events {heard:?}, expected (seq, is fail-over) {want:?}"
        );
    }
    Ok(())
}
