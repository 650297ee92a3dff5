//! Running a command while a lock, a term or a slot is held, and stopping
//! it when the holding may be lost.
//!
//! CMD never outlives its supervisor, however the supervisor dies (a
//! SIGKILL, the OOM killer): a guard process, started first, leads the
//! process group CMD runs in and holds the read end of a pipe only the
//! supervisor can write to. When the supervisor dies the kernel closes the
//! pipe, and the guard kills the whole group. A parent-death signal would
//! not do: it fires when the spawning *thread* ends, and reaches CMD but
//! not what CMD started.
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

/// The exit status of a command that was not found, as shells give it.
pub(crate) const COMMAND_NOT_FOUND: u8 = 127;
/// The exit status of a command found but not runnable (not executable,
/// not a program), as shells give it.
pub(crate) const COMMAND_NOT_RUNNABLE: u8 = 126;

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
/// holding's own signal, which also fires on jeopardy, and `held` says
/// whether the holding still stands once the session is normal again.
pub(crate) async fn until_lost<F, Fut>(
    session: &Session,
    stop_on: StopOn,
    lost: F,
    held: impl Fn() -> bool,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut states = session.watch_state();
    loop {
        lost().await;
        if stop_on == StopOn::Jeopardy {
            return;
        }
        if session.state() == SessionState::Jeopardy {
            // Lost only because of jeopardy: wait for the outcome.
            let _ = states.wait_for(|s| *s != SessionState::Jeopardy).await;
        }
        // The jeopardy may be over already by the time this looks (a
        // loaded machine runs this task late): what counts is whether the
        // session ended, or the master took the holding.
        if session.state().is_final() || !held() {
            return;
        }
    }
}

/// Whether a holding just answered can be relied on, to start CMD. The
/// answer may come while the session is still in jeopardy: after a
/// fail-over the new master can answer the holding's last request before
/// the KeepAlive that renews the session's lease comes back. CMD is not
/// running yet, so whatever `--stop-on` says, this waits for the
/// jeopardy's outcome first (`cli/tests/waiters.rs` saw a semaphore's slot
/// given up as lost so, its session normal moments later).
pub(crate) async fn held_at_start(session: &Session, held: impl Fn() -> bool) -> bool {
    if session.state() == SessionState::Jeopardy {
        let mut states = session.watch_state();
        let _ = states.wait_for(|s| *s != SessionState::Jeopardy).await;
    }
    held()
}

/// The hidden subcommand that runs the guard.
pub(crate) const GUARD_SUBCOMMAND: &str = "supervisor-guard";

/// The guard's whole life: it ignores the signals a terminal or a service
/// manager sends (it must outlive the supervisor to do its job), waits
/// until its standard input, the supervisor's pipe, reaches its end, and
/// then kills its process group: CMD, whatever CMD started, and itself.
#[cfg(unix)]
pub(crate) fn guard() -> ExitCode {
    use std::io::Read;
    // SAFETY: signal(2) with SIG_IGN, before this process starts any thread.
    unsafe {
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 64];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    // SAFETY: kill(2) with pid 0 signals this process's own group.
    unsafe {
        libc::kill(0, libc::SIGKILL);
    }
    ExitCode::SUCCESS
}

#[cfg(not(unix))]
pub(crate) fn guard() -> ExitCode {
    ExitCode::FAILURE
}

/// CMD's guard, and the write end of its pipe: the guard kills CMD's
/// process group once this is dropped, or once the process holding it dies.
#[cfg(unix)]
struct Guard {
    process: Child,
    _pipe: std::io::PipeWriter,
}

#[cfg(unix)]
impl Guard {
    fn spawn() -> anyhow::Result<Guard> {
        // Both ends are close-on-exec: CMD inherits neither, so only this
        // process keeps the pipe open.
        let (reader, writer) = std::io::pipe()?;
        let exe = std::env::current_exe()
            .map_err(|e| anyhow::anyhow!("cannot find this program to start CMD's guard: {e}"))?;
        let process = Command::new(exe)
            .arg(GUARD_SUBCOMMAND)
            .stdin(reader)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start CMD's guard: {e}"))?;
        Ok(Guard {
            process,
            _pipe: writer,
        })
    }

    /// The process group CMD joins: the guard's own.
    fn group(&self) -> Option<u32> {
        self.process.id()
    }

    /// Resolves if the guard ends while CMD runs: without it CMD would be
    /// unsupervised should this process die, so CMD is stopped.
    async fn ended(&mut self) {
        let _ = self.process.wait().await;
    }
}

/// Runs `args.command` with `LEASEHOLD_SEQUENCER` set (when there is one)
/// until it exits, or until `lost` resolves, when it gets SIGTERM and, after
/// the grace, SIGKILL. Exits with the command's status (128 + the signal if
/// a signal ended it); a command that cannot start is 127 when it is not
/// found and 126 when it cannot be run, as shells have it. The caller gives
/// the holding back however this ends.
/// CMD runs in a process group led by its guard, and the signals go to the
/// whole group, so that what CMD started stops with it; when this process
/// ends, however it ends, the guard kills what is left of the group.
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
    let mut guard = Guard::spawn()?;
    #[cfg(unix)]
    let group = guard.group();
    #[cfg(unix)]
    command.process_group(group.unwrap_or(0) as i32);
    #[cfg(not(unix))]
    let group = None;
    if let Some(sequencer) = &sequencer {
        command.env("LEASEHOLD_SEQUENCER", sequencer);
    }
    // Caught from before CMD starts: a signal sent as soon as CMD shows
    // signs of life must not find the default action, which would end this
    // process without stopping CMD or releasing the lock.
    let interrupted = crate::signals::stop_requested(true)?;
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let program = crate::printable(program);
            eprintln!("leasehold: cannot run {program}: {e}");
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => COMMAND_NOT_FOUND,
                _ => COMMAND_NOT_RUNNABLE,
            };
            return Ok(ExitCode::from(code));
        }
    };
    #[cfg(unix)]
    let guard_ended = guard.ended();
    #[cfg(not(unix))]
    let guard_ended = std::future::pending::<()>();
    tokio::pin!(lost, interrupted, guard_ended);
    let status = tokio::select! {
        status = child.wait() => status?,
        () = &mut lost => {
            eprintln!("leasehold: {what} may be lost: stopping {program}");
            stop(&mut child, group, args.kill_grace).await?
        }
        signal = &mut interrupted => {
            eprintln!("leasehold: {signal}: stopping {program}");
            stop(&mut child, group, args.kill_grace).await?;
            // The status of a process a signal ended, as shells give it:
            // this process was asked to stop, whatever CMD made of it.
            return Ok(ExitCode::from(128 + signal_number(signal)));
        }
        () = &mut guard_ended => {
            eprintln!("leasehold: the guard of {program} ended: stopping {program}");
            stop(&mut child, group, args.kill_grace).await?
        }
    };
    Ok(ExitCode::from(exit_code(status)))
}

/// SIGTERM, then SIGKILL if the child has not exited within `grace`; both
/// to its whole process group.
async fn stop(
    child: &mut Child,
    group: Option<u32>,
    grace: Duration,
) -> std::io::Result<ExitStatus> {
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
        // SAFETY: kill(2) on the process group of CMD and its guard (the
        // guard's pid is the group id); no memory is involved.
        unsafe {
            libc::kill(-(pid as libc::pid_t), signal);
        }
    }
}

#[cfg(not(unix))]
fn signal_group(_pid: Option<u32>, _signal: Signal) {}

/// The number of the signal `crate::signals` names.
fn signal_number(name: &str) -> u8 {
    match name {
        "SIGHUP" => 1,
        "SIGTERM" => 15,
        // SIGINT, and Ctrl-C where signals have no names.
        _ => 2,
    }
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
