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
/// CMD runs in a process group of its own, and the signals go to the whole
/// group, so that what CMD started stops with it.
pub(crate) async fn supervise(
    args: &RunArgs,
    what: &str,
    held: bool,
    sequencer: Option<String>,
    lost: impl Future<Output = ()>,
) -> anyhow::Result<ExitCode> {
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| anyhow::anyhow!("no command given after --"))?;
    if !held {
        anyhow::bail!("{what} was lost before {program} could start");
    }
    let mut command = Command::new(program);
    command.args(rest).kill_on_drop(true);
    #[cfg(unix)]
    command.process_group(0);
    if let Some(sequencer) = &sequencer {
        command.env("LEASEHOLD_SEQUENCER", sequencer);
    }
    let mut child = command
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot run {program}: {e}"))?;
    let interrupted = stop_requested();
    tokio::pin!(lost, interrupted);
    let status = tokio::select! {
        status = child.wait() => status?,
        () = &mut lost => {
            eprintln!("leasehold: {what} may be lost: stopping {program}");
            stop(&mut child, args.kill_grace).await?
        }
                signal = &mut interrupted => {
            eprintln!("leasehold: {signal}: stopping {program}");
            stop(&mut child, args.kill_grace).await?
        }
    };
    Ok(ExitCode::from(exit_code(status)))
}

/// Resolves when this process is asked to stop (Ctrl-C, SIGTERM, SIGHUP),
/// naming the signal: CMD must be stopped first, or it would run on
/// unsupervised.
async fn stop_requested() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) else {
            let _ = tokio::signal::ctrl_c().await;
            return "interrupted";
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => "interrupted",
            _ = term.recv() => "terminated",
            _ = hup.recv() => "hung up",
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "interrupted"
    }
}

/// SIGTERM, then SIGKILL if the child has not exited within `grace`; both
/// to its whole process group.
async fn stop(child: &mut Child, grace: Duration) -> std::io::Result<ExitStatus> {
    // Taken now: once reaped, the child no longer has an id.
    let group = child.id();
    signal_group(group, Signal::Term);
    let status = match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status?,
        Err(_) => {
            signal_group(group, Signal::Kill);
            child.start_kill()?;
            child.wait().await?
        }
    };
    // Whatever CMD started that outlived it goes too.
    signal_group(group, Signal::Kill);
    Ok(status)
}

#[derive(Clone, Copy)]
enum Signal {
    Term,
    Kill,
}

#[cfg(unix)]
fn signal_group(pid: Option<u32>, signal: Signal) {
    if let Some(pid) = pid {
        let signal = match signal {
            Signal::Term => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
        };
        // SAFETY: kill(2) on the process group CMD leads (process_group(0)
        // made its pid the group id); no memory is involved.
        unsafe {
            libc::kill(-(pid as libc::pid_t), signal);
        }
    }
}

#[cfg(not(unix))]
fn signal_group(_pid: Option<u32>, _signal: Signal) {}

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
