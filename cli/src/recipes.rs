//! Commands that hold something while a command runs: `lock`, `elect`,
//! `semaphore`; and `leader`, `watch`, which follow what others hold.

use std::process::ExitCode;
use std::time::Duration;

use leasehold::{
    event_mask, Change, Client, ClientError, Election, ErrorCode, Leader, LockOptions, Semaphore,
    Session, SessionState, SubscribeOptions, SubscriptionEvent,
};
use serde_json::json;

use crate::run::{held_at_start, supervise, until_lost, RunArgs};
use crate::session::SessionArgs;
use crate::NOT_FOUND;

/// A session for the command's holding; its states go to stderr, so an
/// operator sees jeopardy coming before CMD is stopped.
async fn open(
    client: &Client,
    what: &str,
    session: &SessionArgs,
    run: &RunArgs,
) -> anyhow::Result<Session> {
    let session = client
        .create_session(session.options(what).grace(run.grace))
        .await?;
    // A close at the end is how every clean exit ends: not news.
    session.on_state_change(|state| {
        if state != SessionState::Closed {
            eprintln!("leasehold: session {}", state.as_str());
        }
    });
    Ok(session)
}

/// `leasehold lock KEY -- CMD`.
/// How long `lock` waits for a held lock.
pub(crate) enum Wait {
    /// Not at all (`--try`).
    TryOnce,
    /// Up to this long (`--timeout`), or the longest wait when `None`.
    Up(Option<Duration>),
}

pub(crate) async fn lock(
    addr: &str,
    key: String,
    shared: bool,
    wait: Wait,
    value: Option<String>,
    session_args: SessionArgs,
    run: RunArgs,
) -> anyhow::Result<ExitCode> {
    let client = crate::connect(addr).await?;
    let session = open(&client, &format!("lock {key}"), &session_args, &run).await?;
    let mut options = if shared {
        LockOptions::shared()
    } else {
        LockOptions::exclusive()
    };
    // A lock taken for the command alone leaves no node behind
    // (`LOCK-12`); one that writes a value keeps it for readers.
    options.transient = value.is_none();
    options.contents = value.map(String::into_bytes);
    let taken = match wait {
        Wait::TryOnce => session.try_lock(&key, options).await,
        Wait::Up(timeout) => {
            options.timeout = timeout;
            let waiting = session.lock(&key, options);
            // On a terminal, what it waits for and behind whom, kept up to
            // date; a script reads the outcome alone.
            if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                tell_while_waiting(&client, &session, &key, waiting).await
            } else {
                waiting.await
            }
        }
    };
    let busy = |e: &ClientError| {
        matches!(
            e.code(),
            Some(ErrorCode::LockHeld | ErrorCode::LockDelayed { .. })
        )
    };
    let guard = match taken {
        Err(e) if busy(&e) => {
            eprintln!(
                "leasehold: {}: the command was not run",
                crate::printable(&e.to_string())
            );
            let _ = session.close().await;
            return Ok(ExitCode::from(crate::BUSY));
        }
        taken => taken?,
    };
    eprintln!("leasehold: holding {key}");
    let lost = until_lost(&session, run.stop_on, || guard.lost(), || guard.is_held());
    let sequencer = Some(guard.sequencer().to_hex());
    let what = format!("the lock on {key}");
    // Given back however the command ended, or failed to start.
    let held = held_at_start(&session, || guard.is_held()).await;
    let code = supervise(&run, &what, held, sequencer, lost).await;
    let _ = guard.release().await;
    let _ = session.close().await;
    code
}

/// Runs `waiting` (a blocking acquire of `key` by `session`) and, while it
/// waits in line, keeps one line on the terminal saying behind whom and
/// how many are ahead; the line is cleared when the wait ends.
async fn tell_while_waiting<T>(
    client: &Client,
    session: &Session,
    key: &str,
    waiting: impl std::future::Future<Output = T>,
) -> T {
    use std::io::Write;

    tokio::pin!(waiting);
    let mut told = String::new();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            done = &mut waiting => {
                if !told.is_empty() {
                    eprint!("\r\x1b[K");
                    let _ = std::io::stderr().flush();
                }
                return done;
            }
            _ = tick.tick() => {
                let Some(line) = waiting_line(client, session.id(), key).await else {
                    continue;
                };
                if line != told {
                    eprint!("\r\x1b[K{line}");
                    let _ = std::io::stderr().flush();
                    told = line;
                }
            }
        }
    }
}

/// `waiting for KEY: held by NAME, 2 ahead`, once `session` waits in
/// `key`'s line; `None` before it does, or if the master cannot be asked.
async fn waiting_line(client: &Client, session: leasehold::SessionId, key: &str) -> Option<String> {
    let info = client.lock_info(key).await.ok()?;
    let ahead = info.waiters.iter().position(|(s, _)| *s == session)?;
    let mut holders = Vec::new();
    for (holder, _) in &info.holders {
        let name = match client.session_info(*holder).await {
            Ok(info) => info.name,
            Err(_) => holder.to_string(),
        };
        holders.push(crate::printable(&name));
    }
    let by = match (holders.is_empty(), info.delay_remaining_ms) {
        (false, _) => format!("held by {}", holders.join(", ")),
        (true, Some(ms)) => format!("in lock-delay for {ms} ms more"),
        (true, None) => "free, the line moving".into(),
    };
    Some(format!(
        "leasehold: waiting for {}: {by}, {ahead} ahead",
        crate::printable(key)
    ))
}

/// `leasehold elect KEY --value V -- CMD`.
pub(crate) async fn elect(
    addr: &str,
    key: String,
    value: String,
    session_args: SessionArgs,
    run: RunArgs,
) -> anyhow::Result<ExitCode> {
    let client = crate::connect(addr).await?;
    let session = open(&client, &format!("elect {key}"), &session_args, &run).await?;
    let term = Election::new(&session, &key).campaign(value).await?;
    eprintln!("leasehold: leading {key}");
    let lost = until_lost(&session, run.stop_on, || term.lost(), || term.is_leader());
    let sequencer = Some(term.sequencer().to_hex());
    let what = format!("leadership of {key}");
    let held = held_at_start(&session, || term.is_leader()).await;
    let code = supervise(&run, &what, held, sequencer, lost).await;
    let _ = term.resign().await;
    let _ = session.close().await;
    code
}

/// `leasehold semaphore PREFIX --limit N -- CMD`.
pub(crate) async fn semaphore(
    addr: &str,
    prefix: String,
    limit: u32,
    value: String,
    session_args: SessionArgs,
    run: RunArgs,
) -> anyhow::Result<ExitCode> {
    let client = crate::connect(addr).await?;
    let what = format!("semaphore {prefix}");
    let session = open(&client, &what, &session_args, &run).await?;
    let permit = Semaphore::new(&session, &prefix, limit)
        .acquire(value, None)
        .await?;
    eprintln!("leasehold: holding a slot in {prefix}");
    let lost = until_lost(&session, run.stop_on, || permit.lost(), || permit.is_held());
    let what = format!("the slot in {prefix}");
    let held = held_at_start(&session, || permit.is_held()).await;
    let code = supervise(&run, &what, held, None, lost).await;
    let _ = permit.release().await;
    let _ = session.close().await;
    code
}

/// `leasehold leader KEY`: the leader's value; none is exit status 1.
/// With `follow`, the leader now and then each change, until interrupted.
pub(crate) async fn leader(
    addr: &str,
    json: bool,
    key: String,
    follow: bool,
) -> anyhow::Result<ExitCode> {
    let client = crate::connect(addr).await?;
    if follow {
        return follow_leader(&client, json, &key).await;
    }
    let Some(leader) = client.leader(&key).await? else {
        eprintln!("leasehold: {key} has no leader");
        return Ok(ExitCode::from(NOT_FOUND));
    };
    print_leader(&key, Some(&leader), json);
    Ok(ExitCode::SUCCESS)
}

/// One line: the leader's value (`-` for none), or a JSON object.
fn print_leader(key: &str, leader: Option<&Leader>, json: bool) {
    match (leader, json) {
        (Some(leader), true) => println!(
            "{}",
            json!({
                "key": key,
                "value": String::from_utf8_lossy(&leader.value),
                "session": leader.session,
                "lock_generation": leader.lock_generation,
            })
        ),
        (None, true) => println!("{}", json!({ "key": key, "value": null })),
        (Some(leader), false) => println!("{}", String::from_utf8_lossy(&leader.value)),
        (None, false) => println!("-"),
    }
}

/// `leader --follow`: as `etcdctl elect --listen` does, a line for the
/// leader now and one for each change, until interrupted (exit 0).
async fn follow_leader(client: &Client, json: bool, key: &str) -> anyhow::Result<ExitCode> {
    use std::io::Write;

    let interrupted = crate::signals::stop_requested(true)?;
    tokio::pin!(interrupted);
    let mut changes = client.observe_leader(key);
    loop {
        let leader = tokio::select! {
            leader = changes.next() => leader,
            _ = &mut interrupted => return Ok(ExitCode::SUCCESS),
        };
        match leader {
            Ok(leader) => {
                print_leader(key, leader.as_ref(), json);
                let _ = std::io::stdout().flush();
            }
            // The observer goes on from where it was.
            Err(e) => {
                eprintln!("leasehold: {}", crate::printable(&e.to_string()));
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// How `watch` watches.
pub(crate) struct Watching {
    /// Print what changed after this index first.
    pub(crate) from_index: Option<u64>,
    /// The session's name, and its lease.
    pub(crate) name: Option<String>,
    pub(crate) lease: Option<Duration>,
}

/// `leasehold watch KEY|PREFIX`: one line per event at or below it, until
/// interrupted; the session ending is exit status 1.
pub(crate) async fn watch(
    addr: &str,
    json: bool,
    prefix: String,
    watching: Watching,
) -> anyhow::Result<ExitCode> {
    let client = crate::connect(addr).await?;
    let name = watching
        .name
        .unwrap_or_else(|| crate::session::default_name(&format!("watch {prefix}")));
    let mut options = leasehold::SessionOptions::new(name);
    options.lease = watching.lease;
    let session = client.create_session(options).await?;
    let options = SubscribeOptions::prefix().mask(event_mask::ALL);
    let mut events = session.subscribe(&prefix, options).await?;
    // Subscribed first, so nothing is missed between what changed already
    // and what changes from now on.
    if let Some(after) = watching.from_index {
        changed_since(&client, &prefix, after, json).await?;
    }
    // Caught before anything says this process is ready to be stopped.
    let interrupted = crate::signals::stop_requested(true)?;
    tokio::pin!(interrupted);
    // On stderr, so scripts (and tests) know that changes from now on show.
    eprintln!("leasehold: watching {prefix}");
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            _ = &mut interrupted => {
                let _ = session.close().await;
                return Ok(ExitCode::SUCCESS);
            }
        };
        let Some(event) = event else {
            return Ok(ExitCode::from(NOT_FOUND));
        };
        let (what, key, detail) = describe(&event);
        if json {
            let mut line = json!({ "event": what, "key": key, "detail": detail });
            if let SubscriptionEvent::Changed {
                index, contents, ..
            } = &event
            {
                line["index"] = json!(index);
                if let Some(contents) = contents {
                    line["value"] = json!(String::from_utf8_lossy(contents));
                }
            }
            println!("{line}");
        } else {
            let line = [
                what,
                key.as_deref().unwrap_or(""),
                detail.as_deref().unwrap_or(""),
            ]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
            println!("{line}");
        }
        if let SubscriptionEvent::Session(state) = event {
            if state.is_final() {
                return Ok(ExitCode::from(NOT_FOUND));
            }
        }
    }
}

/// `watch --from-index N`: each node at or below `prefix` whose last
/// change came after index `after`, as it is now (`created` if it was
/// made after it, else `modified`); `prefix` itself also when it was
/// deleted after it (its index says so, `NS-8`).
async fn changed_since(
    client: &Client,
    prefix: &str,
    after: u64,
    json: bool,
) -> anyhow::Result<()> {
    let mut keys = Vec::new();
    if !prefix.is_empty() {
        keys.push(prefix.to_string());
    }
    let mut page = None;
    loop {
        let (listed, more) = client.list_page(prefix, true, page, 0).await?;
        page = listed.last().cloned();
        keys.extend(listed);
        if !more || page.is_none() {
            break;
        }
    }
    for key in keys {
        let (index, stat) = client.stat_at(&key).await?;
        if index <= after {
            continue;
        }
        let what = match &stat {
            Some(stat) if stat.instance > after => "created",
            Some(_) => "modified",
            None => "deleted",
        };
        if json {
            println!("{}", json!({ "event": what, "key": key, "index": index }));
        } else {
            println!("{what} {key}");
        }
    }
    Ok(())
}

/// An event as a word, its key and one more detail.
fn describe(event: &SubscriptionEvent) -> (&'static str, Option<String>, Option<String>) {
    match event {
        SubscriptionEvent::Changed { key, change, .. } => {
            let key = Some(key.clone());
            match change {
                Change::Created => ("created", key, None),
                Change::Modified => ("modified", key, None),
                Change::Deleted => ("deleted", key, None),
                Change::ChildAdded { child } => ("child-added", key, Some(child.clone())),
                Change::ChildRemoved { child } => ("child-removed", key, Some(child.clone())),
                Change::ChildModified { child } => ("child-modified", key, Some(child.clone())),
                Change::LockAcquired { holder } => ("lock-acquired", key, Some(holder.to_string())),
                Change::LockReleased { holder } => ("lock-released", key, Some(holder.to_string())),
                // Newer than this CLI: named as it is written.
                other => ("changed", key, Some(format!("{other:?}"))),
            }
        }
        SubscriptionEvent::EventsLost => ("events-lost", None, None),
        SubscriptionEvent::Session(state) => ("session", None, Some(state.as_str().to_string())),
        other => ("event", None, Some(format!("{other:?}"))),
    }
}
