//! Sessions: create, inspect, list, destroy, keep.

use std::process::ExitCode;
use std::time::Duration;

use clap::ValueEnum;
use leasehold::{
    Behavior, Client, ClientError, ErrorCode, LockMode, SessionId, SessionInfo, SessionLocks,
    SessionOptions, SessionToken,
};
use serde_json::json;

use crate::{duration, SessionCommand, NOT_FOUND};

#[derive(clap::Args)]
pub(crate) struct SessionArgs {
    /// A label for people [default: the command, the host and the pid,
    /// e.g. `lock jobs/a by web-1:4242`].
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Lease to ask for (default: the master's).
    #[arg(long, value_parser = duration::parse)]
    lease: Option<Duration>,
    /// Lock-delay to ask for; 0s means none (default: 15s).
    #[arg(long, value_parser = duration::parse)]
    lock_delay: Option<Duration>,
    /// What happens to the session's locks when it is invalidated.
    #[arg(long, value_enum, default_value_t = BehaviorArg::Release)]
    behavior: BehaviorArg,
    /// A health check the session lives by (repeatable); it must exist.
    #[arg(long = "check", value_name = "NAME")]
    checks: Vec<String>,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum BehaviorArg {
    Release,
    Delete,
}

impl SessionArgs {
    /// The session's options; `what` names the command it is for, which
    /// names the session unless `--name` does.
    pub(crate) fn options(&self, what: &str) -> SessionOptions {
        let name = self.name.clone().unwrap_or_else(|| default_name(what));
        let mut options = SessionOptions::new(name).behavior(match self.behavior {
            BehaviorArg::Release => Behavior::Release,
            BehaviorArg::Delete => Behavior::Delete,
        });
        options.lease = self.lease;
        options.lock_delay = self.lock_delay;
        options.checks = self.checks.clone();
        options
    }
}

/// `WHAT by HOST:PID`, cut to fit a session name: who to ask about a
/// session that holds a lock.
pub(crate) fn default_name(what: &str) -> String {
    let who = format!(" by {}:{}", host(), std::process::id());
    let room = leasehold_server::MAX_NAME_LEN.saturating_sub(who.len());
    let mut what = what.to_string();
    if what.len() > room {
        let mut end = room.saturating_sub(3);
        while !what.is_char_boundary(end) {
            end -= 1;
        }
        what.truncate(end);
        what.push_str("...");
    }
    what + &who
}

/// This machine's name, as the kernel has it.
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

pub(crate) async fn session(
    addr: &str,
    json: bool,
    command: SessionCommand,
) -> anyhow::Result<ExitCode> {
    let client = crate::connect(addr).await?;
    match command {
        SessionCommand::Create(args) => {
            let options = args.options("session create");
            let token = client.create_session(options).await?.detach().await;
            if json {
                println!(
                    "{}",
                    json!({ "session": token.id, "token": token.to_string() })
                );
            } else {
                println!("{token}");
            }
        }
        SessionCommand::Info { target } => {
            let id = match session_id(&target) {
                Ok(id) => id,
                Err(e) => {
                    eprintln!("leasehold: {e}");
                    return Ok(ExitCode::from(crate::MALFORMED));
                }
            };
            let (info, locks) = match client.session_info(id).await {
                // Ended in between: shown as it was, with no locks.
                Ok(info) => (info, client.session_locks(id).await.ok()),
                Err(e) => return missing(e),
            };
            print_info(&info, locks.as_ref(), json);
        }
        SessionCommand::List => {
            for info in client.list_sessions().await? {
                print_info(&info, None, json);
            }
        }
        SessionCommand::Destroy { target } => {
            let (id, destroyed) = match target.parse::<SessionToken>() {
                Ok(token) => (token.id, client.destroy_session_by_token(token).await),
                Err(_) => {
                    let id = match session_id(&target) {
                        Ok(id) => id,
                        Err(e) => {
                            eprintln!("leasehold: {e}");
                            return Ok(ExitCode::from(crate::MALFORMED));
                        }
                    };
                    (id, client.destroy_session(id).await)
                }
            };
            match destroyed {
                Ok(()) => {
                    if json {
                        println!("{}", json!({ "session": id, "destroyed": true }));
                    }
                }
                Err(e) => return missing(e),
            }
        }
        SessionCommand::Keep {
            session,
            attach,
            grace,
        } => return keep(client, session, attach, grace, json).await,
    }
    Ok(ExitCode::SUCCESS)
}

/// The session `text` names: its id, or the id in its token.
fn session_id(text: &str) -> anyhow::Result<SessionId> {
    if let Ok(token) = text.parse::<SessionToken>() {
        return Ok(token.id);
    }
    text.parse().map_err(|_| {
        anyhow::anyhow!(
            "'{}' is neither a session id nor a session token",
            text.escape_debug()
        )
    })
}

/// A session that does not exist is a message and exit status 1.
pub(crate) fn missing(e: ClientError) -> anyhow::Result<ExitCode> {
    match e.code() {
        Some(ErrorCode::UnknownSession | ErrorCode::SessionExpired) => {
            eprintln!("leasehold: {}", crate::printable(&e.to_string()));
            Ok(ExitCode::from(NOT_FOUND))
        }
        _ => Err(e.into()),
    }
}

/// A session's record, and with `locks` one line per lock it holds or
/// waits for.
fn print_info(info: &SessionInfo, locks: Option<&SessionLocks>, json: bool) {
    let mode = |mode: &LockMode| match mode {
        LockMode::Exclusive => "exclusive",
        LockMode::Shared => "shared",
    };
    let behavior = match info.behavior {
        Behavior::Release => "release",
        Behavior::Delete => "delete",
    };
    if json {
        let mut line = json!({
            "session": info.session,
            "name": info.name,
            "lease_ms": info.lease_ms,
            "lock_delay_ms": info.lock_delay_ms,
            "behavior": behavior,
            "lease_remaining_ms": info.lease_remaining_ms,
            "keepalive_held": info.keepalive_held,
            "checks": info.checks,
        });
        if let Some(locks) = locks {
            let list = |locks: &[(String, LockMode)]| -> Vec<serde_json::Value> {
                locks
                    .iter()
                    .map(|(key, m)| json!({ "key": key, "mode": mode(m) }))
                    .collect()
            };
            line["held"] = list(&locks.held).into();
            line["waiting"] = list(&locks.waiting).into();
            line["more_locks"] = locks.more.into();
        }
        println!("{line}");
    } else {
        println!(
            "{}  name={} lease={} lock-delay={} behavior={} remaining={} held={} checks={}",
            info.session,
            info.name,
            duration::format(Duration::from_millis(info.lease_ms)),
            duration::format(Duration::from_millis(info.lock_delay_ms)),
            behavior,
            duration::format(Duration::from_millis(info.lease_remaining_ms)),
            info.keepalive_held,
            if info.checks.is_empty() {
                "-".to_string()
            } else {
                info.checks.join(",")
            },
        );
        if let Some(locks) = locks {
            for (what, list) in [("holds", &locks.held), ("waits", &locks.waiting)] {
                for (key, m) in list {
                    println!("{what} {} {}", crate::printable(key), mode(m));
                }
            }
            if locks.more {
                println!("(more locks than fit one answer)");
            }
        }
    }
}

async fn keep(
    client: Client,
    args: SessionArgs,
    attach: Option<SessionToken>,
    grace: Duration,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let options = args.options("session keep").grace(grace);
    let session = match attach {
        Some(token) => match client.attach_session(token, options).await {
            Ok(session) => session,
            Err(e) => return missing(e),
        },
        None => client.create_session(options).await?,
    };
    let (tx, mut states) = tokio::sync::mpsc::unbounded_channel();
    session.on_state_change(move |state| {
        let _ = tx.send(state);
    });
    let print = |state: leasehold::SessionState| {
        if json {
            println!(
                "{}",
                json!({ "session": session.id(), "state": state.as_str() })
            );
        } else {
            println!("{}", state.as_str());
        }
    };
    // Caught before the first line says the session is kept: a signal sent
    // as soon as it shows must destroy the session, not kill this process.
    let interrupted = crate::signals::stop_requested(true)?;
    tokio::pin!(interrupted);
    if !json {
        eprintln!("session {}", session.id());
    }
    print(session.state());
    loop {
        tokio::select! {
            state = states.recv() => match state {
                Some(state) => {
                    print(state);
                    if state == leasehold::SessionState::Expired {
                        return Ok(ExitCode::from(NOT_FOUND));
                    }
                }
                None => return Ok(ExitCode::SUCCESS),
            },
            _ = &mut interrupted => {
                session.close().await?;
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
}
