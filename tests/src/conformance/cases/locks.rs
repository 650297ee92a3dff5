//! SPEC.md, "Locks": modes, generations, releases and the acquires they
//! name, the line of waiters, lock-delay, sequencers, grants nobody hears,
//! and transient nodes.

use std::time::{Duration, Instant};

use leasehold_protocol::{Acquire, Authority, Behavior, ErrorCode, LockMode, Request, Response};

use crate::conformance::common::{
    acquire, case, create, ensure, expect_error, expect_reply, generation, key, open, put, release,
    session, stat_of, written,
};
use crate::conformance::{Case, Check, Ctx};
use crate::proxy::{Link, Proxy};

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            &["LOCK-1", "ERR-11"],
            an_exclusive_lock_has_one_holder_and_a_shared_lock_many
        ),
        case!(
            &["LOCK-2"],
            a_lock_generation_rises_only_when_the_lock_goes_from_free_to_held
        ),
        case!(&["LOCK-3", "LOCK-5"], waiters_are_served_in_order),
        case!(
            &["LOCK-5"],
            a_wait_that_gives_up_lets_the_shared_waiters_behind_it_in
        ),
        case!(
            &["LOCK-3"],
            a_waiter_asking_again_keeps_its_place_from_any_connection
        ),
        case!(
            &["LOCK-3"],
            an_acquire_asking_otherwise_takes_the_session_out_of_line
        ),
        case!(&["LOCK-4", "ERR-13"], only_a_holder_may_release_a_lock),
        case!(
            &["LOCK-4", "LOCK-2", "ERR-19"],
            a_release_naming_an_acquire_older_than_the_holdings_latest_changes_nothing
        ),
        case!(
            &["LOCK-4", "CONN-2"],
            a_release_delivered_late_on_a_stalled_connection_leaves_a_later_acquire_held
        ),
        case!(
            &["LOCK-6", "ERR-12"],
            lock_delay_follows_invalidation_not_release
        ),
        case!(
            &["LOCK-7", "LOCK-8"],
            a_sequencer_is_valid_only_while_its_holding_lasts
        ),
        case!(&["LOCK-9"], a_grant_nobody_can_hear_is_released),
        case!(
            &["LOCK-14"],
            lock_info_says_who_holds_who_waits_and_how_long_lock_delay_lasts
        ),
        case!(
            &["SES-11", "ERR-1"],
            session_locks_lists_what_a_session_holds_and_waits_for
        ),
        case!(
            &["LOCK-16"],
            list_locks_pages_through_holders_their_time_and_waiters
        ),
        case!(
            &["LOCK-12", "NS-2"],
            a_transient_lock_node_goes_when_its_lock_is_free
        ),
    ]
}

async fn an_exclusive_lock_has_one_holder_and_a_shared_lock_many(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let a = session(&mut conn, &w).await?;
    let b = session(&mut conn, &w).await?;
    let k = key("lock");
    generation(&conn.call(acquire(&k, a, LockMode::Exclusive, None)).await)?;
    let held = conn.call(acquire(&k, b, LockMode::Exclusive, None)).await;
    expect_error!(held, ErrorCode::LockHeld).map_err(|e| format!("second exclusive: {e}"))?;
    conn.call(release(&k, a))
        .await
        .map_err(|e| format!("release: {e}"))?;
    generation(&conn.call(acquire(&k, a, LockMode::Shared, None)).await)?;
    generation(&conn.call(acquire(&k, b, LockMode::Shared, None)).await)?;
    Ok(())
}

async fn a_lock_generation_rises_only_when_the_lock_goes_from_free_to_held(ctx: Ctx) -> Check {
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
    // Refused requests in between change nothing either.
    let held = conn.call(acquire(&k, b, LockMode::Exclusive, None)).await;
    expect_error!(held, ErrorCode::LockHeld).map_err(|e| format!("second exclusive: {e}"))?;
    let not_held = conn.call(release(&k, b)).await;
    expect_error!(not_held, ErrorCode::LockNotHeld)
        .map_err(|e| format!("release by a non-holder: {e}"))?;
    conn.call(release(&k, a))
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
        .call(release(&k, h))
        .await
        .map_err(|e| format!("release: {e}"))?;
    for (n, (conn, s)) in waiters.iter_mut().enumerate() {
        let (_, reply) = conn.reply().await;
        generation(&reply).map_err(|e| format!("waiter {n}: {e}"))?;
        conn.call(release(&k, *s))
            .await
            .map_err(|e| format!("release {n}: {e}"))?;
    }
    Ok(())
}

async fn a_wait_that_gives_up_lets_the_shared_waiters_behind_it_in(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let holder = session(&mut conn, &w).await?;
    let writer = session(&mut conn, &w).await?;
    let reader = session(&mut conn, &w).await?;
    let k = key("line-left");
    generation(&conn.call(acquire(&k, holder, LockMode::Shared, None)).await)?;
    // One connection, so the exclusive wait is surely ahead of the shared
    // one, which may not overtake it while it waits.
    let gives_up = conn
        .request(acquire(&k, writer, LockMode::Exclusive, Some(300)))
        .await;
    let behind = conn
        .request(acquire(&k, reader, LockMode::Shared, Some(30_000)))
        .await;
    let (id, told) = conn.reply().await;
    ensure!(
        id == gives_up,
        "a reply to request {id} before the exclusive wait's timeout"
    );
    expect_error!(told, ErrorCode::LockHeld).map_err(|e| format!("the exclusive wait: {e}"))?;
    // The holder never lets go: only the exclusive wait's leaving lets
    // the shared one in, well before its own 30 s.
    let (id, granted) = conn.reply().await;
    ensure!(id == behind, "a reply to request {id}");
    generation(&granted).map_err(|e| format!("the shared wait behind it: {e}"))?;
    Ok(())
}

/// The `index` of an `Acquired` answer.
fn acquired_at(reply: &Result<Response, leasehold_protocol::Error>) -> Result<u64, String> {
    match reply {
        Ok(Response::Acquired { index, .. }) => Ok(*index),
        other => Err(format!("expected the lock, got {other:?}")),
    }
}

/// A release of `key` by `session` naming the acquire answered at
/// `acquired`.
fn release_naming(key: &str, session: leasehold_protocol::SessionToken, acquired: u64) -> Request {
    Request::Release {
        key: key.into(),
        session,
        acquired,
    }
}

async fn a_release_naming_an_acquire_older_than_the_holdings_latest_changes_nothing(
    ctx: Ctx,
) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let a = session(&mut conn, &w).await?;
    let b = session(&mut conn, &w).await?;
    let k = key("fenced");
    let first = acquired_at(&conn.call(acquire(&k, a, LockMode::Exclusive, None)).await)?;
    let again = acquired_at(&conn.call(acquire(&k, a, LockMode::Exclusive, None)).await)?;
    ensure!(
        again > first,
        "asking again was answered at index {again}, not after the grant's {first}"
    );
    let stale = conn.call(release_naming(&k, a, first)).await;
    expect_error!(stale, ErrorCode::StaleRelease { acquired } if acquired == again)
        .map_err(|e| format!("a release naming the first acquire: {e}"))?;
    let held = conn.call(acquire(&k, b, LockMode::Exclusive, None)).await;
    expect_error!(held, ErrorCode::LockHeld)
        .map_err(|e| format!("after the refused release, another session: {e}"))?;
    let released = conn.call(release_naming(&k, a, again)).await;
    expect_reply!(released, Response::Released { .. })
        .map_err(|e| format!("a release naming the latest acquire: {e}"))?;
    generation(&conn.call(acquire(&k, b, LockMode::Exclusive, None)).await)
        .map_err(|e| format!("after the release, another session: {e}"))?;
    Ok(())
}

async fn a_release_delivered_late_on_a_stalled_connection_leaves_a_later_acquire_held(
    ctx: Ctx,
) -> Check {
    let proxy = Proxy::start(ctx.addr).await;
    let (mut stalled, w) = ctx.open_at(proxy.addr).await;
    let (mut other, _) = open(&ctx).await;
    let a = session(&mut other, &w).await?;
    let b = session(&mut other, &w).await?;
    let k = key("late");
    let first = acquired_at(
        &stalled
            .call(acquire(&k, a, LockMode::Exclusive, None))
            .await,
    )?;
    // The release is sent, and stalls on its way.
    proxy.set(Link::Hold);
    let late = stalled.request(release_naming(&k, a, first)).await;
    // Its client, hearing nothing, asks again on another connection and
    // is told it holds the lock.
    let again = acquired_at(&other.call(acquire(&k, a, LockMode::Exclusive, None)).await)?;
    proxy.set(Link::Pass);
    let (id, reply) = stalled.reply().await;
    ensure!(id == late, "a reply to request {id}, not to the release");
    expect_error!(reply, ErrorCode::StaleRelease { acquired } if acquired == again)
        .map_err(|e| format!("the late release: {e}"))?;
    let held = other.call(acquire(&k, b, LockMode::Exclusive, None)).await;
    expect_error!(held, ErrorCode::LockHeld)
        .map_err(|e| format!("the lock the second answer told of: {e}"))?;
    Ok(())
}

async fn lock_info_says_who_holds_who_waits_and_how_long_lock_delay_lasts(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let delay = 5_000.min(w.limits.max_lock_delay_ms);
    let lease = 30_000.min(w.limits.max_lease_ms);
    let holder = create(&mut conn, lease, Some(delay), Behavior::Release, vec![]).await?;
    let waiter = session(&mut conn, &w).await?;
    let k = key("info");
    let info = || Request::LockInfo { key: k.clone() };
    let free = expect_reply!(conn.call(info()).await, Response::LockInfo(i) => i)?;
    ensure!(
        free.holders.is_empty() && free.waiters.is_empty() && free.delay_remaining_ms.is_none(),
        "a key nobody locks: {free:?}"
    );
    generation(
        &conn
            .call(acquire(&k, holder, LockMode::Exclusive, None))
            .await,
    )?;
    let (mut line, _) = open(&ctx).await;
    line.request(acquire(&k, waiter, LockMode::Shared, Some(30_000)))
        .await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let held = loop {
        let held = expect_reply!(conn.call(info()).await, Response::LockInfo(i) => i)?;
        if held.waiters_total > 0 || Instant::now() > deadline {
            break held;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    ensure!(
        held.holders == [(holder.id, LockMode::Exclusive)],
        "holders: {held:?}"
    );
    ensure!(
        held.waiters == [(waiter.id, LockMode::Shared)] && held.waiters_total == 1,
        "waiters: {held:?}"
    );
    // The waiter leaves the line with its session; the holder's end puts
    // the lock in lock-delay, which nobody holds.
    conn.call(Request::DestroySession {
        session: waiter.id,
        authority: Authority::Session(waiter),
    })
    .await
    .map_err(|e| format!("destroy the waiter: {e}"))?;
    conn.call(Request::DestroySession {
        session: holder.id,
        authority: Authority::Session(holder),
    })
    .await
    .map_err(|e| format!("destroy the holder: {e}"))?;
    let delayed = expect_reply!(conn.call(info()).await, Response::LockInfo(i) => i)?;
    ensure!(
        delayed.holders.is_empty() && delayed.waiters.is_empty(),
        "after both ended: {delayed:?}"
    );
    ensure!(
        delayed
            .delay_remaining_ms
            .is_some_and(|ms| ms > 0 && ms <= delay),
        "lock-delay of {delay} ms: {delayed:?}"
    );
    Ok(())
}

async fn session_locks_lists_what_a_session_holds_and_waits_for(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let a = session(&mut conn, &w).await?;
    let b = session(&mut conn, &w).await?;
    let (one, two, three) = (key("held-x"), key("held-s"), key("waited"));
    generation(&conn.call(acquire(&one, a, LockMode::Exclusive, None)).await)?;
    generation(&conn.call(acquire(&two, a, LockMode::Shared, None)).await)?;
    generation(
        &conn
            .call(acquire(&three, b, LockMode::Exclusive, None))
            .await,
    )?;
    let (mut line, _) = open(&ctx).await;
    line.request(acquire(&three, a, LockMode::Exclusive, Some(30_000)))
        .await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let locks = loop {
        let request = Request::SessionLocks { session: a.id };
        let locks = expect_reply!(conn.call(request).await, Response::SessionLocks(l) => l)?;
        if !locks.waiting.is_empty() || Instant::now() > deadline {
            break locks;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let mut held = locks.held.clone();
    held.sort();
    let mut expected = vec![(one, LockMode::Exclusive), (two, LockMode::Shared)];
    expected.sort();
    ensure!(held == expected, "held: {locks:?}");
    ensure!(
        locks.waiting == [(three, LockMode::Exclusive)] && !locks.more,
        "waiting: {locks:?}"
    );
    let unknown = Request::SessionLocks {
        session: uuid::Uuid::from_u128(7),
    };
    expect_error!(conn.call(unknown).await, ErrorCode::UnknownSession)
        .map_err(|e| format!("an unknown session: {e}"))
}

async fn a_waiter_asking_again_keeps_its_place_from_any_connection(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let holder = session(&mut conn, &w).await?;
    let waiter = session(&mut conn, &w).await?;
    let behind = session(&mut conn, &w).await?;
    let k = key("place");
    generation(
        &conn
            .call(acquire(&k, holder, LockMode::Exclusive, None))
            .await,
    )?;
    let (mut first, _) = open(&ctx).await;
    let replaced = first
        .request(acquire(&k, waiter, LockMode::Exclusive, Some(30_000)))
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (mut last, _) = open(&ctx).await;
    last.request(acquire(&k, behind, LockMode::Exclusive, Some(30_000)))
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Asked again on the same connection (a library that stopped waiting
    // for an answer that did not come in time): it takes the first's
    // place, and the first is answered that it was replaced.
    let twice = first
        .request(acquire(&k, waiter, LockMode::Exclusive, Some(30_000)))
        .await;
    let (id, told) = first.reply().await;
    ensure!(
        id == replaced,
        "a reply to request {id}, not the first wait"
    );
    expect_error!(told, ErrorCode::LockHeld).map_err(|e| format!("the replaced wait: {e}"))?;
    // Asked again on another connection: the same.
    let (mut again, _) = open(&ctx).await;
    let asked = again
        .request(acquire(&k, waiter, LockMode::Exclusive, Some(30_000)))
        .await;
    let (id, told) = first.reply().await;
    ensure!(id == twice, "a reply to request {id}, not the second wait");
    expect_error!(told, ErrorCode::LockHeld).map_err(|e| format!("the second wait: {e}"))?;
    // Still ahead of the session that came after it.
    conn.call(release(&k, holder))
        .await
        .map_err(|e| format!("release: {e}"))?;
    let (id, granted) = again.reply().await;
    ensure!(id == asked, "a reply to request {id}");
    generation(&granted).map_err(|e| format!("the wait asked again: {e}"))?;
    Ok(())
}

async fn an_acquire_asking_otherwise_takes_the_session_out_of_line(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let holder = session(&mut conn, &w).await?;
    let waiter = session(&mut conn, &w).await?;
    let k = key("otherwise");
    generation(
        &conn
            .call(acquire(&k, holder, LockMode::Exclusive, None))
            .await,
    )?;
    let (mut line, _) = open(&ctx).await;
    let waited = line
        .request(acquire(&k, waiter, LockMode::Exclusive, Some(30_000)))
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The same session asks for a shared hold without waiting: its wait
    // leaves the line (answered as replaced), and this acquire is refused
    // as any other would be.
    let now = conn.call(acquire(&k, waiter, LockMode::Shared, None)).await;
    expect_error!(now, ErrorCode::LockHeld).map_err(|e| format!("the shared try: {e}"))?;
    let (id, told) = line.reply().await;
    ensure!(id == waited, "a reply to request {id}, not the wait");
    expect_error!(told, ErrorCode::LockHeld).map_err(|e| format!("the replaced wait: {e}"))?;
    let request = Request::SessionLocks { session: waiter.id };
    let locks = expect_reply!(conn.call(request).await, Response::SessionLocks(l) => l)?;
    ensure!(
        locks.waiting.is_empty() && locks.held.is_empty(),
        "the session still waits or holds: {locks:?}"
    );
    conn.call(release(&k, holder))
        .await
        .map_err(|e| format!("release: {e}"))?;
    Ok(())
}

async fn only_a_holder_may_release_a_lock(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let a = session(&mut conn, &w).await?;
    let b = session(&mut conn, &w).await?;
    let k = key("lock");
    generation(&conn.call(acquire(&k, a, LockMode::Exclusive, None)).await)?;
    let not_held = conn.call(release(&k, b)).await;
    expect_error!(not_held, ErrorCode::LockNotHeld)
        .map_err(|e| format!("release by a non-holder: {e}"))?;
    conn.call(release(&k, a))
        .await
        .map_err(|e| format!("release: {e}"))?;
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
    conn.call(release(&k, holder))
        .await
        .map_err(|e| format!("release: {e}"))?;
    generation(
        &conn
            .call(acquire(&k, next, LockMode::Exclusive, None))
            .await,
    )
    .map_err(|e| format!("after a release there is no lock-delay: {e}"))?;
    conn.call(release(&k, next))
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
    let remaining_ms =
        expect_error!(refused, ErrorCode::LockDelayed { remaining_ms } => remaining_ms)
            .map_err(|e| format!("after destroy: {e}"))?;
    ensure!(
        remaining_ms > 0 && remaining_ms <= delay,
        "remaining {remaining_ms} of {delay} ms"
    );
    let remaining = Duration::from_millis(remaining_ms);
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
    let acquired = conn.call(acquire(&k, a, LockMode::Exclusive, None)).await;
    let bytes = expect_reply!(acquired, Response::Acquired { sequencer, .. } => sequencer)
        .map_err(|e| format!("acquire: {e}"))?;
    let check = |s: Vec<u8>| Request::CheckSequencer { sequencer: s };
    let valid = conn.call(check(bytes.clone())).await;
    expect_reply!(valid, Response::SequencerChecked { valid: true })
        .map_err(|e| format!("while held: {e}"))?;
    conn.call(Request::Delete {
        key: k.clone(),
        cas: None,
        recursive: false,
        authority: Authority::Anonymous,
    })
    .await
    .map_err(|e| format!("delete: {e}"))?;
    let after = conn.call(check(bytes)).await;
    expect_reply!(after, Response::SequencerChecked { valid: false })
        .map_err(|e| format!("after the node was deleted: {e}"))?;
    let garbage = conn.call(check(vec![1, 2, 3])).await;
    expect_error!(garbage, ErrorCode::InvalidArgument).map_err(|e| format!("garbage: {e}"))
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
        .call(release(&k, h))
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

async fn a_transient_lock_node_goes_when_its_lock_is_free(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let a = session(&mut conn, &w).await?;
    let release = |key: &str| release(key, a);
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

async fn list_locks_pages_through_holders_their_time_and_waiters(ctx: Ctx) -> Check {
    let (mut conn, w) = open(&ctx).await;
    let a = session(&mut conn, &w).await?;
    let b = session(&mut conn, &w).await?;
    let base = key("listed");
    let (first, second) = (format!("{base}/a"), format!("{base}/b"));
    let list = |after: Option<&String>, limit| Request::ListLocks {
        prefix: format!("{base}/"),
        after: after.cloned(),
        limit,
    };
    let empty = expect_reply!(conn.call(list(None, 0)).await, Response::Locks { locks, more } => (locks, more))?;
    ensure!(empty == (vec![], false), "nothing locked yet: {empty:?}");
    for k in [&first, &second] {
        generation(&conn.call(acquire(k, a, LockMode::Exclusive, None)).await)?;
    }
    let (mut line, _) = open(&ctx).await;
    line.request(acquire(&first, b, LockMode::Shared, Some(30_000)))
        .await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let (page, more) = loop {
        let (page, more) = expect_reply!(
            conn.call(list(None, 1)).await,
            Response::Locks { locks, more } => (locks, more)
        )?;
        if page.first().is_some_and(|l| l.waiters_total > 0) || Instant::now() > deadline {
            break (page, more);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    ensure!(
        page.len() == 1 && more,
        "a page of one, more to come: {page:?}"
    );
    let lock = &page[0];
    ensure!(lock.key == first, "key order: {page:?}");
    ensure!(
        lock.holders.len() == 1
            && lock.holders[0].session == a.id
            && lock.holders[0].mode == LockMode::Exclusive
            && lock.holders[0].name == "conformance"
            && lock.holders[0].held_ms.is_some(),
        "its holder, named, with a time held: {lock:?}"
    );
    ensure!(
        lock.waiters.len() == 1
            && lock.waiters[0].session == b.id
            && lock.waiters[0].mode == LockMode::Shared
            && lock.waiters_total == 1,
        "its waiter: {lock:?}"
    );
    ensure!(lock.delay_remaining_ms.is_none(), "no lock-delay: {lock:?}");
    let (rest, more) = expect_reply!(
        conn.call(list(Some(&first), 0)).await,
        Response::Locks { locks, more } => (locks, more)
    )?;
    ensure!(
        rest.len() == 1 && rest[0].key == second && !more,
        "the page after {first}: {rest:?}"
    );
    Ok(())
}
