//! Running a command while a lock, a term or a slot is held, and stopping
//! it when the holding may be lost.
//!
//! The trade-off of `--stop-on`: in jeopardy the client cannot reach the
//! master and the master may already have released the lock (its lease may
//! have run out there), so stopping at jeopardy is the safe default: the
//! command never runs while someone else may hold the lock. Waiting until
//! expiry keeps the command running through short outages (a master
//! failover, a network blip) at the price of a window, up to the grace
//! period, in which another holder may already be running.

use std::future::Future;
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use clap::ValueEnum;
use leasehold::{Session, SessionState};
use tokio::process::{Child, Command};

/// When a supervised command is stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum StopOn {
    /// As soon as the session is in jeopardy (the safe default).
    Jeopardy,
    /// Only once the session has expired (or the master took the holding).
    Expiry,
}

#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// When to stop CMD: on jeopardy (the master may already have released
    /// the lock) or only on expiry (keeps CMD through short outages, at the
    /// risk of overlapping the next holder).
    #[arg(long, value_enum, default_value_t = StopOn::Jeopardy)]
    pub(crate) stop_on: StopOn,
    /// How long CMD has between SIGTERM and SIGKILL.
    #[arg(long, value_parser = crate::duration::parse, default_value = "5s")]
    pub(crate) kill_grace: Duration,
    /// Grace period after jeopardy before the session is taken as expired.
    #[arg(long, value_parser = crate::duration::parse, default_value = "45s")]
    pub(crate) grace: Duration,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<String>,
}

/// Resolves when the holding must be given up, by the policy: `lost` is the
/// holding's own signal, which also fires on jeopardy.
pub(crate) async fn until_lost<F, Fut>(session: &Session, stop_on: StopOn, lost: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut states = session.watch_state();
    loop {
        lost().await;
        if stop_on == StopOn::Jeopardy {
            return;
        }
        match session.state() {
            // Lost only because of jeopardy: wait for the outcome.
            SessionState::Jeopardy => {
                let _ = states.wait_for(|s| *s != SessionState::Jeopardy).await;
                if session.state() == SessionState::Expired {
                    return;
                }
            }
            // Taken by the master, or expired.
            _ => return,
        }
    }
}

/// Runs `args.command` with `LEASEHOLD_SEQUENCER` set (when there is one)
/// until it exits, or until `lost` resolves, when it gets SIGTERM and, after
/// the grace, SIGKILL. Exits with the command's status (128 + the signal if
/// a signal ended it).
pub(crate) async fn supervise(
    args: &RunArgs,
    what: &str,
    sequencer: Option<String>,
    lost: impl Future<Output = ()>,
) -> anyhow::Result<ExitCode> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("no command given after --"))?;
    let mut command = Command::new(program);
    command.args(rest).kill_on_drop(true);
    if let Some(sequencer) = &sequencer {
        command.env("LEASEHOLD_SEQUENCER", sequencer);
    }
    let mut child = command
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot run {program}: {e}"))?;
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(lost, interrupted);
    let status = tokio::select! {
        status = child.wait() => status?,
        () = &mut lost => {
            eprintln!("leasehold: {what} may be lost: stopping {program}");
            stop(&mut child, args.kill_grace).await?
        }
        _ = &mut interrupted => {
            eprintln!("leasehold: interrupted: stopping {program}");
            stop(&mut child, args.kill_grace).await?
        }
    };
    Ok(ExitCode::from(exit_code(status)))
}

/// SIGTERM, then SIGKILL if the child has not exited within `grace`.
async fn stop(child: &mut Child, grace: Duration) -> std::io::Result<ExitStatus> {
    terminate(child);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            child.start_kill()?;
            child.wait().await
        }
    }
}

#[cfg(unix)]
fn terminate(child: &mut Child) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) with a pid we spawned and have not reaped yet.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGTERM);
        }
    }
}

#[cfg(not(unix))]
fn terminate(child: &mut Child) {
    let _ = child.start_kill();
}

fn exit_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return code as u8;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return 128u8.saturating_add(signal as u8);
        }
    }
    1
}
