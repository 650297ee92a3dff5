//! Killing and restarting a peer's server process that the benchmark did
//! not start (bench/peers/start.sh did): it is found by the port it
//! listens on and started again from the command line, directory and
//! environment it was started with.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// How a running process was started.
pub struct Launch {
    argv: Vec<OsString>,
    cwd: PathBuf,
    env: Vec<(OsString, OsString)>,
}

fn nul_separated(bytes: Vec<u8>) -> Vec<OsString> {
    bytes
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| OsString::from_vec(s.to_vec()))
        .collect()
}

impl Launch {
    pub fn of(pid: u32) -> anyhow::Result<Launch> {
        let argv = nul_separated(std::fs::read(format!("/proc/{pid}/cmdline"))?);
        if argv.is_empty() {
            bail!("process {pid} has no command line");
        }
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))?;
        let env = nul_separated(std::fs::read(format!("/proc/{pid}/environ"))?)
            .into_iter()
            .filter_map(|kv| {
                let kv = kv.into_vec();
                let eq = kv.iter().position(|b| *b == b'=')?;
                Some((
                    OsString::from_vec(kv[..eq].to_vec()),
                    OsString::from_vec(kv[eq + 1..].to_vec()),
                ))
            })
            .collect();
        Ok(Launch { argv, cwd, env })
    }

    /// Starts the process again, detached from this one (its own process
    /// group, output discarded), so it outlives the benchmark as the
    /// original would have; start.sh stops it by the port it serves.
    pub fn spawn(&self) -> anyhow::Result<u32> {
        let child = std::process::Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .current_dir(&self.cwd)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start {:?}", self.argv[0]))?;
        Ok(child.id())
    }
}

/// Kills `pid` with SIGKILL, as a crash would, and waits until it is gone
/// (at most 10 s).
pub async fn kill(pid: u32) -> anyhow::Result<()> {
    // SAFETY: kill(2) has no memory preconditions; the pid was read from
    // the socket table a moment ago.
    if unsafe { libc::kill(pid as i32, libc::SIGKILL) } != 0 {
        bail!(
            "cannot kill process {pid}: {}",
            std::io::Error::last_os_error()
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        // Gone, or a zombie its parent has yet to reap: no longer serving.
        let dead = state.is_none_or(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        });
        if dead {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("process {pid} outlived SIGKILL by 10 s");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
